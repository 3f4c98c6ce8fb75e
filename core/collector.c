/* collector: lifecycle of the collector thread (see collector.h). The work
 * itself is the step it is started with; this file only starts, stops and
 * forgets the thread. */
#include "collector.h"
#include "sys.h"
#include "log.h"
#include "options.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SHORT_SLICE_NS = 100000 }; /* the shortest slice EEVDF grants */

/* The kernel's struct sched_attr, first version (SCHED_ATTR_SIZE_VER0, 48
 * bytes): <linux/sched/types.h> cannot be included beside glibc's <sched.h>. */
struct slice_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};

static int started, stopping, running;
static collector_step_fn *step_fn; /* written before the thread starts */
static collector_kick_fn *kick_fn; /* read by collector_stop */

/* Asks the scheduler for a short slice (EEVDF, Linux 6.12 and later): a
 * thread that sleeps almost always and, woken by a last close, runs for
 * microseconds. A shorter slice gives it an earlier deadline, so it gets a
 * CPU soon after its wake-up even on a crowded machine; its share of CPU
 * time does not change. Unprivileged; an older kernel refuses or ignores
 * it, and nothing else depends on it. */
static void ask_short_slice(void)
{
#ifdef SYS_sched_setattr
    struct slice_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.sched_policy = SCHED_OTHER;
    attr.sched_nice = getpriority(PRIO_PROCESS, 0); /* the thread's own, kept */
    attr.sched_runtime = SHORT_SLICE_NS;
    (void)sys_call6(SYS_sched_setattr, 0, (long)&attr, 0, 0, 0, 0);
#endif
}

static void *loop(void *arg)
{
    ask_short_slice();
    collector_step_fn *step = arg;
    while (!__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
        step();
    __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
    return NULL;
}

void collector_start(collector_step_fn *step, collector_kick_fn *kick)
{
    if (__atomic_exchange_n(&started, 1, __ATOMIC_ACQ_REL)) return;
    step_fn = step;
    __atomic_store_n(&kick_fn, kick, __ATOMIC_RELEASE);
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    /* The thread inherits this mask: the host's signal handlers never run on it. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
    int rc = pthread_create(&t, &attr, loop, (void *)step_fn);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
        LOG_ONCE(LOG_WARN, "cannot start the collector thread; limbo is collected on frees only");
    }
}

void thread_wait_stopped(const int *flag, unsigned max_ms)
{
    for (int i = 0; i < 200 && __atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
        sched_yield();
    struct timespec step = {0, 100000};
    for (unsigned i = 0; i < max_ms * 10 && __atomic_load_n(flag, __ATOMIC_ACQUIRE); i++)
        nanosleep(&step, NULL);
}

void collector_stop(void)
{
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    collector_kick_fn *kick = __atomic_load_n(&kick_fn, __ATOMIC_ACQUIRE);
    if (!kick) return; /* never started: nothing to stop */
    kick();
    /* Kicked again every 10 ms: a kick can land before the thread waits. */
    for (int i = 0; i < 100 && __atomic_load_n(&running, __ATOMIC_ACQUIRE); i++) {
        thread_wait_stopped(&running, 10);
        kick();
    }
}

bool collector_stopping(void)
{
    return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

void collector_after_fork(void)
{
    started = stopping = running = 0;
}
