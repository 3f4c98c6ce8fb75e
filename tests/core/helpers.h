/* helpers: shared by the core suites. Each test gets its own registry domain
 * ("<suite>-<pid>"), set through the environment and options_reload() before
 * test_ipc_init, and removed in .fini. Children are plain fork()s that report
 * through pipes and leave with _exit() (never Criterion's exit path). */
#ifndef TESTS_CORE_HELPERS_H
#define TESTS_CORE_HELPERS_H

#include "host.h"
#include "ipc.h"
#include "options.h"
#include "registry.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char test_domain[64];

/* Domain for this test process; call from .init before any ipc_*. */
static inline void test_domain_setup(const char *suite)
{
    snprintf(test_domain, sizeof test_domain, "%s-%d", suite, (int)getpid());
    setenv("IPCSHIM_DOMAIN", test_domain, 1);
    /* Some tests make segments with shm_open: the same place on every machine. */
    setenv("IPCSHIM_REGISTRY_DIR", "/dev/shm", 1);
    setenv("IPCSHIM_LOG", "error", 0);
    options_reload();
    /* A segment some earlier run left under a pid this process now has
     * (of another ABI, say) would be refused, and the test run untracked. */
    registry_unlink(test_domain);
}

static inline void test_domain_teardown(void)
{
    registry_unlink(test_domain); /* wherever it lives (registry_candidate) */
}

/* Set IPCSHIM_<NAME>=value and re-read the options (before the first ipc call). */
static inline void test_option(const char *name, const char *value)
{
    char env[64];
    snprintf(env, sizeof env, "IPCSHIM_%s", name);
    setenv(env, value, 1);
    options_reload();
}

/* Fake device: records deferred frees, visible across threads. */
#define FAKE_MAX_FREES 64
static uint64_t fake_freed[FAKE_MAX_FREES];
static uint64_t fake_freed_identity[FAKE_MAX_FREES];
static int fake_frees;
static uint64_t fake_last_free_ns;

static inline uint64_t test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fake_free_block(uint64_t base, int device, uint64_t ctx, uint64_t identity)
{
    (void)device, (void)ctx;
    int i = __atomic_fetch_add(&fake_frees, 1, __ATOMIC_SEQ_CST);
    if (i < FAKE_MAX_FREES) fake_freed[i] = base, fake_freed_identity[i] = identity;
    __atomic_store_n(&fake_last_free_ns, test_now_ns(), __ATOMIC_SEQ_CST);
    return 0;
}

static const struct host fake_host = {.free_block = fake_free_block};

/* What the shim does at start-up (shim/memory.c, shim/init.c): install the
 * host's operations, start IPC, and register core's fork handlers (core
 * registers no process hook: ipc.h). Once per test process. */
static pthread_once_t test_hooks_once = PTHREAD_ONCE_INIT;
static void test_register_fork_hooks(void)
{
    pthread_atfork(ipc_fork_prepare, ipc_fork_parent, ipc_fork_child);
}

static inline void test_ipc_init(const struct host *host)
{
    host_set(host);
    ipc_init();
    pthread_once(&test_hooks_once, test_register_fork_hooks);
}

/* And at unload, as the shim does (ipc.h: priority 101): a test child that
 * leaves with exit() takes the shim's exit path. */
__attribute__((destructor(101))) static void test_ipc_unload(void)
{
    ipc_unload();
}

static inline int fake_free_count(void)
{
    return __atomic_load_n(&fake_frees, __ATOMIC_SEQ_CST);
}

static inline struct ipc_handle make_handle(unsigned seed)
{
    struct ipc_handle h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < IPC_HANDLE_BYTES; i++)
        h.bytes[i] = (uint8_t)(seed * 31 + i * 7 + 1);
    memcpy(h.bytes, &seed, sizeof seed);
    return h;
}

/* A pipe pair for a parent and one child: each side sends and receives one
 * 64-bit value at a time. */
struct chan {
    int to_child[2], to_parent[2];
};

static inline void chan_open(struct chan *c)
{
    cr_assert_eq(pipe(c->to_child), 0);
    cr_assert_eq(pipe(c->to_parent), 0);
}

static inline void chan_send(int fd, uint64_t v)
{
    if (write(fd, &v, sizeof v) != sizeof v) _exit(90);
}

static inline uint64_t chan_recv(int fd)
{
    uint64_t v = 0;
    if (read(fd, &v, sizeof v) != sizeof v) _exit(91);
    return v;
}

/* After fork: each side closes the ends it does not use, so that a side
 * that dies gives the other EOF instead of a hang; the child also dies with
 * its parent. */
static inline void chan_child(struct chan *c)
{
    close(c->to_child[1]);
    close(c->to_parent[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
}

static inline void chan_parent(struct chan *c)
{
    close(c->to_child[0]);
    close(c->to_parent[1]);
}

/* In the child: send to / receive from the parent. */
#define CHILD_SEND(c, v) chan_send((c)->to_parent[1], (v))
#define CHILD_RECV(c) chan_recv((c)->to_child[0])
/* In the parent. */
#define PARENT_SEND(c, v) chan_send((c)->to_child[1], (v))
#define PARENT_RECV(c) chan_recv((c)->to_parent[0])

/* An importer for a test: a forked child that runs the test's own command
 * loop, loop(c, h), which reads a command and an argument at a time
 * (CHILD_RECV) and answers each with a result and a value (CHILD_SEND). */
struct importer {
    pid_t pid;
    struct chan c;
};

typedef void importer_loop_fn(struct chan *c, struct ipc_handle h);

/* Fork an importer that runs loop(c, h). */
static inline void importer_spawn(struct importer *im, importer_loop_fn *loop, struct ipc_handle h)
{
    chan_open(&im->c);
    im->pid = fork();
    cr_assert_geq(im->pid, 0);
    if (im->pid == 0) {
        chan_child(&im->c);
        loop(&im->c, h);
    }
    chan_parent(&im->c);
}

/* Send the importer one command and its argument; returns its result, and
 * its value in *out when out is set. */
static inline int importer_call(struct importer *im, uint64_t cmd, uint64_t arg, uint64_t *out)
{
    PARENT_SEND(&im->c, cmd);
    PARENT_SEND(&im->c, arg);
    int r = (int)(int64_t)PARENT_RECV(&im->c);
    uint64_t v = PARENT_RECV(&im->c);
    if (out) *out = v;
    return r;
}

/* Wait for a child and return its exit status (or 128+signal). */
static inline int child_wait(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static inline void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A second view of this test's registry (its own descriptor): for looking
 * at records and forging them. */
static inline void open_view(struct registry *view)
{
    struct reg_caps caps = {(uint32_t)options_get()->max_holders,
                            (uint32_t)options_get()->max_blocks,
                            (uint32_t)options_get()->max_leases};
    cr_assert_eq(registry_open(view, options_get()->domain, &caps), 0);
}

/* The first lease (any holder) on block bi of the current generation. */
static inline struct reg_lease *first_lease(struct registry *v, uint32_t bi)
{
    for (uint32_t li = 0; li < v->max_leases; li++) {
        struct reg_lease *l = &v->leases[li];
        if (l->intent != LEASE_FREE && l->block == bi && l->block_gen == v->blocks[bi].generation)
            return l;
    }
    cr_assert_fail("no lease on block %u", bi);
    return NULL;
}

#endif
