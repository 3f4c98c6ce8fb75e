/* probe: a lock-wait probe preloaded in front of the shim for figure 5.
 *
 * It interposes pthread_mutex_lock, pthread_mutex_trylock and
 * pthread_mutex_timedlock. The shim's registry lock and the simulator's
 * machine lock are robust process-shared mutexes that live in shared
 * mappings ("/ipcshim-..." and "/simcuda-..."); every other mutex goes
 * straight to glibc after one test of its kind. For those two, a wait
 * starts when a try fails (the lock is held by someone else) and ends when
 * the thread gets it: through pthread_mutex_lock (the simulator), or through
 * the shim's loop of timed locks after its own failed trylock (registry_lock
 * in core/registry_lock.c; a wait that ends with the shim giving up after
 * IPCSHIM_LOCK_WAIT is not counted here: the shim logs those itself). So
 * "wait" below is the time a caller spent blocked on that lock, measured
 * without touching core/ or shim/. Counters are per process; the benchmark reads them with
 * dlsym(RTLD_DEFAULT, "ipcbench_probe_get"). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#include <dlfcn.h>

extern int __pthread_mutex_lock(pthread_mutex_t *m);
extern int __pthread_mutex_trylock(pthread_mutex_t *m);

/* glibc's kind bit for robust mutexes (PTHREAD_MUTEX_ROBUST_NORMAL_NP,
 * internal to glibc; stable since robust mutexes exist). */
#define ROBUST_KIND_BIT 16

enum { KIND_OTHER, KIND_REGISTRY, KIND_SIM };

/* Classified robust mutexes: address | kind (mutexes are 8-byte aligned). */
#define CACHE 16
static _Atomic uintptr_t cache[CACHE];

struct counters {
    _Atomic uint64_t acquisitions, contended, wait_ns, max_wait_ns, over_1ms;
};
static struct counters counts[3];

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uintptr_t parse_hex(const char **p)
{
    uintptr_t v = 0;
    for (;; (*p)++) {
        char ch = **p;
        if (ch >= '0' && ch <= '9')
            v = v * 16 + (uintptr_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            v = v * 16 + (uintptr_t)(ch - 'a' + 10);
        else
            return v;
    }
}

/* Which mapping holds addr: read /proc/self/maps with raw syscalls (no
 * stdio, no malloc: we are inside pthread_mutex_lock). */
static int classify(uintptr_t addr)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return KIND_OTHER;
    char buf[8192], line[512];
    size_t len = 0;
    int kind = KIND_OTHER;
    bool done = false;
    ssize_t n;
    while (!done && (n = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n && !done; i++) {
            if (buf[i] != '\n') {
                if (len < sizeof line - 1) line[len++] = buf[i];
                continue;
            }
            line[len] = 0;
            len = 0;
            const char *p = line;
            uintptr_t lo = parse_hex(&p);
            if (*p != '-') continue;
            p++;
            uintptr_t hi = parse_hex(&p);
            if (addr < lo || addr >= hi) continue;
            if (strstr(line, "/ipcshim-"))
                kind = KIND_REGISTRY;
            else if (strstr(line, "/simcuda-"))
                kind = KIND_SIM;
            done = true;
        }
    }
    close(fd);
    return kind;
}

static int kind_of(pthread_mutex_t *m)
{
    /* Only robust mutexes can be the registry's or the simulator's. */
    if (!(m->__data.__kind & ROBUST_KIND_BIT)) return KIND_OTHER;
    uintptr_t a = (uintptr_t)m;
    for (int i = 0; i < CACHE; i++) {
        uintptr_t c = atomic_load_explicit(&cache[i], memory_order_relaxed);
        if ((c & ~(uintptr_t)3) == a) return (int)(c & 3);
        if (c == 0) break;
    }
    int kind = classify(a);
    for (int i = 0; i < CACHE; i++) {
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong(&cache[i], &expected, a | (uintptr_t)kind)) break;
        if ((expected & ~(uintptr_t)3) == a) break;
    }
    return kind;
}

static void note_wait(struct counters *c, uint64_t w)
{
    atomic_fetch_add_explicit(&c->contended, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->wait_ns, w, memory_order_relaxed);
    if (w > 1000000) atomic_fetch_add_explicit(&c->over_1ms, 1, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&c->max_wait_ns, memory_order_relaxed);
    while (w > max && !atomic_compare_exchange_weak(&c->max_wait_ns, &max, w)) {
    }
}

__attribute__((visibility("default"))) int pthread_mutex_lock(pthread_mutex_t *m)
{
    int kind = kind_of(m);
    if (kind == KIND_OTHER) return __pthread_mutex_lock(m);
    struct counters *c = &counts[kind];
    atomic_fetch_add_explicit(&c->acquisitions, 1, memory_order_relaxed);
    int r = __pthread_mutex_trylock(m);
    if (r != EBUSY) return r; /* 0, EOWNERDEAD, ...: the same meaning as from lock */
    uint64_t t0 = mono_ns();
    r = __pthread_mutex_lock(m);
    note_wait(c, mono_ns() - t0);
    return r;
}

/* A wait in progress on this thread: the mutex whose try failed, and when. */
static __thread pthread_mutex_t *waiting_on;
static __thread uint64_t waiting_since;

__attribute__((visibility("default"))) int pthread_mutex_trylock(pthread_mutex_t *m)
{
    int r = __pthread_mutex_trylock(m);
    int kind = kind_of(m);
    if (kind == KIND_OTHER) return r;
    if (r != EBUSY) {
        atomic_fetch_add_explicit(&counts[kind].acquisitions, 1, memory_order_relaxed);
        waiting_on = NULL;
    } else {
        waiting_on = m, waiting_since = mono_ns();
    }
    return r;
}

__attribute__((visibility("default"))) int pthread_mutex_timedlock(pthread_mutex_t *m,
                                                                   const struct timespec *at)
{
    static int (*next)(pthread_mutex_t *, const struct timespec *);
    if (!next)
        next = (int (*)(pthread_mutex_t *, const struct timespec *))dlsym(
            RTLD_NEXT, "pthread_mutex_timedlock");
    if (!next) return EINVAL;
    int r = next(m, at);
    int kind = kind_of(m);
    if (kind == KIND_OTHER) return r;
    if (waiting_on != m) waiting_on = m, waiting_since = mono_ns(); /* no try first: from now */
    if (r == ETIMEDOUT) return r; /* still waiting (or the caller gives up: see below) */
    atomic_fetch_add_explicit(&counts[kind].acquisitions, 1, memory_order_relaxed);
    note_wait(&counts[kind], mono_ns() - waiting_since);
    waiting_on = NULL;
    return r;
}

static void get(struct counters *c, struct probe_lock_stats *out)
{
    out->acquisitions = atomic_load(&c->acquisitions);
    out->contended = atomic_load(&c->contended);
    out->wait_ns = atomic_load(&c->wait_ns);
    out->max_wait_ns = atomic_load(&c->max_wait_ns);
    out->over_1ms = atomic_load(&c->over_1ms);
}

__attribute__((visibility("default"))) void ipcbench_probe_reset(void)
{
    for (int k = 0; k < 3; k++) {
        atomic_store(&counts[k].acquisitions, 0);
        atomic_store(&counts[k].contended, 0);
        atomic_store(&counts[k].wait_ns, 0);
        atomic_store(&counts[k].max_wait_ns, 0);
        atomic_store(&counts[k].over_1ms, 0);
    }
}

__attribute__((visibility("default"))) void ipcbench_probe_get(struct probe_lock_stats *reg,
                                                               struct probe_lock_stats *sim)
{
    get(&counts[KIND_REGISTRY], reg);
    get(&counts[KIND_SIM], sim);
}
