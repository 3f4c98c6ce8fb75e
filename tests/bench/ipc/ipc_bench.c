/* ipc-bench: the figures of scripts/bench that concern CUDA IPC, as an
 * ordinary CUDA runtime program. scripts/bench runs each figure twice in one
 * session, with and without LD_PRELOAD=libipcshim.so, and compares.
 *
 *   ipc-bench alloc   [--pairs N] [--reps R] [--size B] [--export] [--once]
 *                     [--limbo K] [--async]
 *   ipc-bench cycle   [--cycles N] [--reps R] [--size B] [--pin]
 *   ipc-bench pool-cycle [--cycles N] [--reps R] [--size B] [--pin]
 *   ipc-bench scale   [--blocks N] [--sample K] [--rounds R] [--size B]
 *   ipc-bench reclaim [--samples N] [--size B] [--scratch-us U] [--timeout-ms T]
 *                     [--procs P] [--budget-s S] [--pace-us U]
 *   ipc-bench storm   [--procs P] [--blocks B] [--seconds S] [--size B]
 *   ipc-bench exit    [--blocks N] [--size B] [--domain-blocks M] [--exits E] [--sides]
 *   ipc-bench wake    [--samples N] [--pace-us U]
 *
 * Output: one "key: value value ..." line per figure quantity (times in ns
 * unless the key says otherwise); scripts/bench parses them. Each figure's
 * method is described in docs/performance.md. Children are this executable
 * again (posix_spawn of /proc/self/exe, or of $IPCBENCH_SELF when set: under
 * valgrind /proc/self/exe is valgrind's own tool), so they inherit
 * LD_PRELOAD and the simulator's environment; parent and children share a
 * memfd channel. */
#include "ipc_bench.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void parse(int argc, char **argv, struct args *a)
{
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "0";
#define OPT(name, field)                                                                           \
    if (!strcmp(k, "--" name)) {                                                                   \
        a->field = strtol(v, NULL, 0);                                                             \
        i++;                                                                                       \
        continue;                                                                                  \
    }
        OPT("pairs", pairs) OPT("reps", reps) OPT("size", size) OPT("cycles", cycles);
        OPT("blocks", blocks) OPT("sample", sample) OPT("rounds", rounds) OPT("samples", samples);
        OPT("scratch-us", scratch_us) OPT("timeout-ms", timeout_ms) OPT("procs", procs);
        OPT("limbo", limbo);
        OPT("budget-s", budget_s);
        OPT("pace-us", pace_us);
        OPT("domain-blocks", domain_blocks);
        OPT("exits", exits);
#undef OPT
        if (!strcmp(k, "--seconds")) {
            a->seconds = strtod(v, NULL);
            i++;
        } else if (!strcmp(k, "--export")) {
            a->export_one = true;
        } else if (!strcmp(k, "--once")) {
            a->once = true;
        } else if (!strcmp(k, "--pin")) {
            a->pin = true;
        } else if (!strcmp(k, "--async")) {
            a->async = true;
        } else if (!strcmp(k, "--sides")) {
            a->sides = true;
        } else {
            fprintf(stderr, "ipc-bench: unknown option %s\n", k);
            exit(2);
        }
    }
}

char *fmt_long(char *buf, long v)
{
    sprintf(buf, "%ld", v);
    return buf;
}

/* ---- figure 1: cudaMalloc + cudaFree pairs ------------------------------ */

/* The measured loop; callgrind counts instructions inside it only
 * (--toggle-collect=bench_alloc_loop), so the warm-up is a twin. */
#define ALLOC_LOOP(name)                                                                           \
    __attribute__((noinline)) void name(long n, size_t size)                                       \
    {                                                                                              \
        for (long i = 0; i < n; i++) {                                                             \
            void *p;                                                                               \
            CK(cudaMalloc(&p, size));                                                              \
            CK(cudaFree(p));                                                                       \
        }                                                                                          \
    }
ALLOC_LOOP(bench_alloc_loop)
ALLOC_LOOP(bench_alloc_warmup)

/* --async (figure 11): cudaMallocAsync + cudaFreeAsync on one stream, the
 * stream synchronised once at the end of the n pairs (in the timed loop, so
 * nothing is left queued); callgrind counts bench_alloc_async_loop. */
static cudaStream_t async_stream;
#define ALLOC_ASYNC_LOOP(name)                                                                     \
    __attribute__((noinline)) void name(long n, size_t size)                                       \
    {                                                                                              \
        for (long i = 0; i < n; i++) {                                                             \
            void *p;                                                                               \
            CK(cudaMallocAsync(&p, size, async_stream));                                           \
            CK(cudaFreeAsync(p, async_stream));                                                    \
        }                                                                                          \
        CK(cudaStreamSynchronize(async_stream));                                                   \
    }
ALLOC_ASYNC_LOOP(bench_alloc_async_loop)
ALLOC_ASYNC_LOOP(bench_alloc_async_warmup)

/* An IPC-capable pool on device 0 (POSIX file descriptor handles): what
 * pool IPC needs (figures 10 and 11). */
static cudaMemPool_t ipc_pool_create(void)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CK(cudaMemPoolCreate(&pool, &props));
    /* Exported once at once: NVIDIA's driver exports no pointer of a pool
     * not yet exported (docs/gpu-validation.md, pool-export-order). */
    int fd = -1;
    CK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    close(fd);
    return pool;
}

/* --limbo K: a child opens K exported blocks and holds them while this
 * process frees them, so that (with the shim) K blocks sit in limbo during
 * the measured loop. The child closes them and exits at the end. */
static int limbo_child(struct chan *c, long k)
{
    cuda_ready();
    void **p = calloc((size_t)k, sizeof *p);
    for (long i = 0; i < k; i++) {
        cudaIpcMemHandle_t h;
        memcpy(&h, c->data + (size_t)i * 64, sizeof h);
        CK(cudaIpcOpenMemHandle(&p[i], h, cudaIpcMemLazyEnablePeerAccess));
    }
    uint32_t seen = door_seq(c, D_TO_CHILD);
    door_open(c, D_READY);
    door_wait(c, D_TO_CHILD, seen, 0);
    for (long i = 0; i < k; i++)
        CK(cudaIpcCloseMemHandle(p[i]));
    free(p);
    return 0;
}

static int fig_alloc(const struct args *a, const char *self)
{
    cuda_ready();
    struct chan *lc = NULL;
    int limbo_pid = 0;
    if (a->limbo > 0) {
        int fd;
        lc = chan_create((size_t)a->limbo * 64, &fd);
        void **blk = calloc((size_t)a->limbo, sizeof *blk);
        for (long i = 0; i < a->limbo; i++) {
            cudaIpcMemHandle_t h;
            CK(cudaMalloc(&blk[i], 4096));
            CK(cudaIpcGetMemHandle(&h, blk[i]));
            memcpy(lc->data + (size_t)i * 64, &h, 64);
        }
        char fds[32], kk[32];
        char *argv[] = {(char *)self, "limbo-child", fmt_long(fds, fd), fmt_long(kk, a->limbo),
                        NULL};
        uint32_t ready = door_seq(lc, D_READY);
        limbo_pid = spawn_self(argv);
        door_wait(lc, D_READY, ready, 0);
        /* Free while the child holds them: limbo with the shim. Without it
         * the simulator may refuse (SIMCUDA_FREE_WHILE_MAPPED) or free: either
         * way the program goes on, so the result is not checked. */
        for (long i = 0; i < a->limbo; i++)
            (void)cudaFree(blk[i]);
        (void)cudaGetLastError();
        free(blk);
    }
    if (a->async) CK(cudaStreamCreate(&async_stream));
    if (a->export_one && a->async) {
        /* The stream-ordered counterpart: one pointer of an IPC-capable
         * pool exported (pool IPC), left allocated. */
        cudaMemPool_t pool = ipc_pool_create();
        void *p;
        struct cudaMemPoolPtrExportData d;
        CK(cudaMallocFromPoolAsync(&p, 4096, pool, async_stream));
        CK(cudaStreamSynchronize(async_stream));
        CK(cudaMemPoolExportPointer(&d, p));
    } else if (a->export_one) {
        /* Make this an exporting process: the shim's free path then looks
         * every pointer up instead of answering from one flag. */
        void *p;
        cudaIpcMemHandle_t h;
        CK(cudaMalloc(&p, 4096));
        CK(cudaIpcGetMemHandle(&h, p));
    }
    void (*loop)(long, size_t) = a->async ? bench_alloc_async_loop : bench_alloc_loop;
    /* warm-up: resolution, caches */
    (a->async ? bench_alloc_async_warmup : bench_alloc_warmup)(1000, (size_t)a->size);
    if (a->once) {
        loop(a->pairs, (size_t)a->size);
        printf("alloc_once: %ld\n", a->pairs);
    } else {
        double *v = calloc((size_t)a->reps, sizeof *v);
        for (long r = 0; r < a->reps; r++) {
            uint64_t t0 = now_ns();
            loop(a->pairs, (size_t)a->size);
            v[r] = (double)(now_ns() - t0) / (double)a->pairs;
        }
        print_values("alloc_ns", v, (size_t)a->reps);
        free(v);
    }
    if (lc) {
        if (shim_loaded()) {
            double limbo = (double)shim_blocks_in_limbo();
            print_values("alloc_limbo_blocks", &limbo, 1);
        }
        door_open(lc, D_TO_CHILD);
        return wait_child(limbo_pid) ? 2 : 0;
    }
    return 0;
}

/* ---- figure 2: export -> open -> read -> close -> free ------------------ */

enum { CY_OPEN, CY_READ, CY_CLOSE }; /* child's stamps */

/* Prints a two-process cycle's figures: "PREFIX_ns", the median of each
 * repetition (consecutive slices of the last series, the whole cycle), and
 * "PREFIX_NAME_ns", each call's median over every cycle. */
static void print_cycle(const char *prefix, double *const *t, const char *const *names, int nops,
                        const struct args *a)
{
    long per = a->cycles / a->reps;
    double *reps = calloc((size_t)a->reps, sizeof *reps);
    for (long r = 0; r < a->reps; r++) {
        double *slice = malloc((size_t)per * sizeof *slice);
        memcpy(slice, t[nops - 1] + r * per, (size_t)per * sizeof *slice);
        reps[r] = median(slice, (size_t)per);
        free(slice);
    }
    char key[64];
    snprintf(key, sizeof key, "%s_ns", prefix);
    print_values(key, reps, (size_t)a->reps);
    free(reps);
    for (int k = 0; k < nops - 1; k++) {
        double m = median(t[k], (size_t)a->cycles);
        snprintf(key, sizeof key, "%s_%s_ns", prefix, names[k]);
        print_values(key, &m, 1);
    }
}

/* The five calls of a cycle that the shim intercepts, one function each so
 * that callgrind counts their instructions only
 * (--toggle-collect='bench_call_*', scripts/bench); the warm-up cycles call
 * the twins, which it does not count. */
struct cycle_calls {
    void (*alloc)(void **p, size_t size);
    void (*export_)(cudaIpcMemHandle_t *h, void *p);
    void (*open)(void **p, cudaIpcMemHandle_t h);
    void (*close)(void *p);
    void (*free_)(void *p);
};
#define CYCLE_CALLS(prefix)                                                                        \
    __attribute__((noinline)) void prefix##_alloc(void **p, size_t size)                           \
    {                                                                                              \
        CK(cudaMalloc(p, size));                                                                   \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_export(cudaIpcMemHandle_t *h, void *p)                 \
    {                                                                                              \
        CK(cudaIpcGetMemHandle(h, p));                                                             \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_open(void **p, cudaIpcMemHandle_t h)                   \
    {                                                                                              \
        CK(cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess));                            \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_close(void *p)                                         \
    {                                                                                              \
        CK(cudaIpcCloseMemHandle(p));                                                              \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_free(void *p)                                          \
    {                                                                                              \
        CK(cudaFree(p));                                                                           \
    }                                                                                              \
    static const struct cycle_calls prefix = {prefix##_alloc, prefix##_export, prefix##_open,      \
                                              prefix##_close, prefix##_free};
CYCLE_CALLS(bench_call)
CYCLE_CALLS(bench_warm)

static int cycle_child(struct chan *c, size_t size, long warm)
{
    cuda_ready();
    void *host = malloc(size);
    uint32_t seen = door_seq(c, D_TO_CHILD);
    door_open(c, D_READY);
    for (long i = 0;; i++) {
        seen = door_wait(c, D_TO_CHILD, seen, SPIN_NS);
        if (atomic_load(&c->go)) break; /* stop */
        const struct cycle_calls *k = i < warm ? &bench_warm : &bench_call;
        cudaIpcMemHandle_t h;
        void *p;
        memcpy(&h, c->handle, sizeof h);
        uint64_t t0 = now_ns();
        k->open(&p, h);
        uint64_t t1 = now_ns();
        CK(cudaMemcpy(host, p, size, cudaMemcpyDeviceToHost));
        uint64_t t2 = now_ns();
        k->close(p);
        uint64_t t3 = now_ns();
        c->stamp[CY_OPEN] = t1 - t0;
        c->stamp[CY_READ] = t2 - t1;
        c->stamp[CY_CLOSE] = t3 - t2;
        door_open(c, D_TO_PARENT);
    }
    free(host);
    return 0;
}

/* --pin: this process on the first CPU it may use, the child on the second
 * (when there are two), so that every run places the pair alike. Unpinned,
 * a run lands the two on one CPU or on two, and the cycle's time differs by
 * microseconds between the two placements, which swamps what the shim adds. */
void pin_pair(int child)
{
    cpu_set_t may, one;
    if (sched_getaffinity(0, sizeof may, &may) != 0 || CPU_COUNT(&may) < 2) return;
    int cpus[2], n = 0;
    for (int k = 0; k < CPU_SETSIZE && n < 2; k++)
        if (CPU_ISSET(k, &may)) cpus[n++] = k;
    CPU_ZERO(&one);
    CPU_SET(cpus[0], &one);
    (void)sched_setaffinity(0, sizeof one, &one);
    CPU_ZERO(&one);
    CPU_SET(cpus[1], &one);
    (void)sched_setaffinity(child, sizeof one, &one);
}

static int fig_cycle(const struct args *a, const char *self)
{
    cuda_ready();
    int fd;
    struct chan *c = chan_create(0, &fd);
    long warm = a->cycles / 10 + 10, total = warm + a->cycles;
    char fds[32], sz[32], wm[32];
    char *argv[] = {(char *)self,          "cycle-child",      fmt_long(fds, fd),
                    fmt_long(sz, a->size), fmt_long(wm, warm), NULL};
    uint32_t ready = door_seq(c, D_READY);
    int pid = spawn_self(argv);
    if (a->pin) pin_pair(pid);
    door_wait(c, D_READY, ready, 0);

    enum { ALLOC, EXPORT, OPEN, READ, CLOSE, FREE, CYCLE, NOPS };
    static const char *names[NOPS] = {"alloc", "export", "open", "read", "close", "free", "cycle"};
    double *t[NOPS];
    for (int k = 0; k < NOPS; k++)
        t[k] = calloc((size_t)a->cycles, sizeof(double));
    uint32_t seen = door_seq(c, D_TO_PARENT);
    for (long i = 0; i < total; i++) {
        const struct cycle_calls *k = i < warm ? &bench_warm : &bench_call;
        void *p;
        cudaIpcMemHandle_t h;
        uint64_t t0 = now_ns();
        k->alloc(&p, (size_t)a->size);
        uint64_t t1 = now_ns();
        k->export_(&h, p);
        uint64_t t2 = now_ns();
        memcpy(c->handle, &h, sizeof h);
        door_open(c, D_TO_CHILD);
        seen = door_wait(c, D_TO_PARENT, seen, SPIN_NS);
        uint64_t t3 = now_ns();
        k->free_(p);
        uint64_t t4 = now_ns();
        if (i < warm) continue;
        long j = i - warm;
        t[ALLOC][j] = (double)(t1 - t0);
        t[EXPORT][j] = (double)(t2 - t1);
        t[OPEN][j] = (double)c->stamp[CY_OPEN];
        t[READ][j] = (double)c->stamp[CY_READ];
        t[CLOSE][j] = (double)c->stamp[CY_CLOSE];
        t[FREE][j] = (double)(t4 - t3);
        t[CYCLE][j] = (double)(t4 - t0);
    }
    atomic_store(&c->go, 1);
    door_open(c, D_TO_CHILD);
    int status = wait_child(pid);

    print_cycle("cycle", t, names, NOPS, a);
    return status ? 2 : 0;
}

/* ---- figure 10: pool IPC: allocate -> export -> import -> read -> free -- */

/* The five calls of a pool cycle that the shim intercepts, one function
 * each, as for figure 2 (callgrind: --toggle-collect='bench_pool_*'; the
 * warm-up cycles call the bench_pwarm_* twins). The allocation is the
 * stream-ordered one made usable (allocate, synchronise the stream), the
 * exporter's free its stream-ordered free made complete the same way; the
 * importer's release is its free of the imported pointer. */
struct pool_calls {
    void (*alloc)(void **p, size_t size, cudaMemPool_t pool, cudaStream_t s);
    void (*export_)(struct cudaMemPoolPtrExportData *d, void *p);
    void (*import)(void **p, cudaMemPool_t pool, struct cudaMemPoolPtrExportData *d);
    void (*release)(void *p);
    void (*free_)(void *p, cudaStream_t s);
};
#define POOL_CALLS(prefix)                                                                         \
    __attribute__((noinline)) void prefix##_alloc(void **p, size_t size, cudaMemPool_t pool,       \
                                                  cudaStream_t s)                                  \
    {                                                                                              \
        CK(cudaMallocFromPoolAsync(p, size, pool, s));                                             \
        CK(cudaStreamSynchronize(s));                                                              \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_export(struct cudaMemPoolPtrExportData *d, void *p)    \
    {                                                                                              \
        CK(cudaMemPoolExportPointer(d, p));                                                        \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_import(void **p, cudaMemPool_t pool,                   \
                                                   struct cudaMemPoolPtrExportData *d)             \
    {                                                                                              \
        CK(cudaMemPoolImportPointer(p, pool, d));                                                  \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_release(void *p)                                       \
    {                                                                                              \
        CK(cudaFree(p));                                                                           \
    }                                                                                              \
    __attribute__((noinline)) void prefix##_free(void *p, cudaStream_t s)                          \
    {                                                                                              \
        CK(cudaFreeAsync(p, s));                                                                   \
        CK(cudaStreamSynchronize(s));                                                              \
    }                                                                                              \
    static const struct pool_calls prefix = {prefix##_alloc, prefix##_export, prefix##_import,     \
                                             prefix##_release, prefix##_free};
POOL_CALLS(bench_pool)
POOL_CALLS(bench_pwarm)

_Static_assert(sizeof(struct cudaMemPoolPtrExportData) <= sizeof(((struct chan *)0)->handle),
               "a pointer's export data travels in the channel's handle");

/* The importer: imports the exporter's pool once, from the descriptor it
 * inherited, then per cycle imports the pointer, reads it, frees it. */
static int pool_cycle_child(struct chan *c, size_t size, long warm, int pool_fd)
{
    cuda_ready();
    cudaMemPool_t pool;
    CK(cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)pool_fd,
                                            cudaMemHandleTypePosixFileDescriptor, 0));
    close(pool_fd);
    void *host = malloc(size);
    uint32_t seen = door_seq(c, D_TO_CHILD);
    door_open(c, D_READY);
    for (long i = 0;; i++) {
        seen = door_wait(c, D_TO_CHILD, seen, SPIN_NS);
        if (atomic_load(&c->go)) break; /* stop */
        const struct pool_calls *k = i < warm ? &bench_pwarm : &bench_pool;
        struct cudaMemPoolPtrExportData d;
        void *p;
        memcpy(&d, c->handle, sizeof d);
        uint64_t t0 = now_ns();
        k->import(&p, pool, &d);
        uint64_t t1 = now_ns();
        CK(cudaMemcpy(host, p, size, cudaMemcpyDeviceToHost));
        uint64_t t2 = now_ns();
        k->release(p);
        uint64_t t3 = now_ns();
        c->stamp[CY_OPEN] = t1 - t0;
        c->stamp[CY_READ] = t2 - t1;
        c->stamp[CY_CLOSE] = t3 - t2;
        door_open(c, D_TO_PARENT);
    }
    free(host);
    return 0;
}

/* Figure 2's cycle for pool IPC: the exporter allocates from an IPC-capable
 * pool, exports the pointer and hands the export data to a long-lived
 * importer, which imported the pool once at its start; the importer
 * imports, reads and frees the pointer and answers; the exporter frees. */
static int fig_pool_cycle(const struct args *a, const char *self)
{
    cuda_ready();
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    cudaMemPool_t pool = ipc_pool_create();
    int pool_fd = -1;
    CK(cudaMemPoolExportToShareableHandle(&pool_fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    int fl = fcntl(pool_fd, F_GETFD); /* the child inherits it (a driver may set FD_CLOEXEC) */
    if (fl < 0 || fcntl(pool_fd, F_SETFD, fl & ~FD_CLOEXEC) != 0)
        bench_die("fcntl", errno, __FILE__, __LINE__);
    int fd;
    struct chan *c = chan_create(0, &fd);
    long warm = a->cycles / 10 + 10, total = warm + a->cycles;
    char fds[32], sz[32], wm[32], pfd[32];
    char *argv[] = {(char *)self,
                    "pool-cycle-child",
                    fmt_long(fds, fd),
                    fmt_long(sz, a->size),
                    fmt_long(wm, warm),
                    fmt_long(pfd, pool_fd),
                    NULL};
    uint32_t ready = door_seq(c, D_READY);
    int pid = spawn_self(argv);
    close(pool_fd);
    if (a->pin) pin_pair(pid);
    door_wait(c, D_READY, ready, 0);

    enum { ALLOC, EXPORT, IMPORT, READ, RELEASE, FREE, CYCLE, NOPS };
    static const char *names[NOPS] = {"alloc",   "export", "import", "read",
                                      "release", "free",   "cycle"};
    double *t[NOPS];
    for (int k = 0; k < NOPS; k++)
        t[k] = calloc((size_t)a->cycles, sizeof(double));
    uint32_t seen = door_seq(c, D_TO_PARENT);
    for (long i = 0; i < total; i++) {
        const struct pool_calls *k = i < warm ? &bench_pwarm : &bench_pool;
        void *p;
        struct cudaMemPoolPtrExportData d;
        uint64_t t0 = now_ns();
        k->alloc(&p, (size_t)a->size, pool, s);
        uint64_t t1 = now_ns();
        k->export_(&d, p);
        uint64_t t2 = now_ns();
        memcpy(c->handle, &d, sizeof d);
        door_open(c, D_TO_CHILD);
        seen = door_wait(c, D_TO_PARENT, seen, SPIN_NS);
        uint64_t t3 = now_ns();
        k->free_(p, s);
        uint64_t t4 = now_ns();
        if (i < warm) continue;
        long j = i - warm;
        t[ALLOC][j] = (double)(t1 - t0);
        t[EXPORT][j] = (double)(t2 - t1);
        t[IMPORT][j] = (double)c->stamp[CY_OPEN];
        t[READ][j] = (double)c->stamp[CY_READ];
        t[RELEASE][j] = (double)c->stamp[CY_CLOSE];
        t[FREE][j] = (double)(t4 - t3);
        t[CYCLE][j] = (double)(t4 - t0);
    }
    atomic_store(&c->go, 1);
    door_open(c, D_TO_CHILD);
    int status = wait_child(pid);

    print_cycle("pool_cycle", t, names, NOPS, a);
    return status ? 2 : 0;
}

/* ---- figure 3: open + close with N live exported blocks ---------------- */

static int scale_child(struct chan *c, long n, long k, long rounds)
{
    cuda_ready();
    long *pick = calloc((size_t)k, sizeof *pick);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (long i = 0; i < k; i++) { /* k distinct blocks spread over all n */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pick[i] =
            k >= n ? i : (long)(((double)i + (double)(x % 1000) / 1000.0) * (double)n / (double)k);
        if (pick[i] >= n) pick[i] = n - 1;
    }
    for (long i = k - 1; i > 0; i--) { /* visit them in a scrambled order */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long j = (long)(x % (uint64_t)(i + 1)), tmp = pick[i];
        pick[i] = pick[j], pick[j] = tmp;
    }
    double *pair = calloc((size_t)k, sizeof *pair), *op = calloc((size_t)k, sizeof *op),
           *cl = calloc((size_t)k, sizeof *cl);
    double *rp = calloc((size_t)rounds, sizeof *rp), *ro = calloc((size_t)rounds, sizeof *ro),
           *rc = calloc((size_t)rounds, sizeof *rc);
    for (long r = -1; r < rounds; r++) { /* round -1: warm-up, not counted */
        for (long i = 0; i < k; i++) {
            cudaIpcMemHandle_t h;
            void *p;
            memcpy(&h, c->data + (size_t)pick[i] * 64, sizeof h);
            uint64_t t0 = now_ns();
            CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
            uint64_t t1 = now_ns();
            CK(cudaIpcCloseMemHandle(p));
            uint64_t t2 = now_ns();
            pair[i] = (double)(t2 - t0);
            op[i] = (double)(t1 - t0);
            cl[i] = (double)(t2 - t1);
        }
        if (r < 0) continue;
        rp[r] = median(pair, (size_t)k);
        ro[r] = median(op, (size_t)k);
        rc[r] = median(cl, (size_t)k);
    }
    print_values("scale_ns", rp, (size_t)rounds);
    print_values("scale_open_ns", ro, (size_t)rounds);
    print_values("scale_close_ns", rc, (size_t)rounds);
    return 0;
}

static int fig_scale(const struct args *a, const char *self)
{
    cuda_ready();
    int fd;
    struct chan *c = chan_create((size_t)a->blocks * 64, &fd);
    /* Block 0 first, untimed: the shim creates the registry (sized for
     * IPCSHIM_MAX_BLOCKS) and starts its collector on the first export. */
    for (long i = 0; i < 1; i++) {
        void *p;
        cudaIpcMemHandle_t h;
        CK(cudaMalloc(&p, (size_t)a->size));
        CK(cudaIpcGetMemHandle(&h, p));
        memcpy(c->data, &h, 64);
    }
    uint64_t t0 = now_ns();
    for (long i = 1; i < a->blocks; i++) {
        void *p;
        cudaIpcMemHandle_t h;
        CK(cudaMalloc(&p, (size_t)a->size));
        CK(cudaIpcGetMemHandle(&h, p));
        memcpy(c->data + (size_t)i * 64, &h, 64);
    }
    double setup = (double)(now_ns() - t0);
    double per_export = a->blocks > 1 ? setup / (double)(a->blocks - 1) : 0;
    print_values("scale_setup_ms", (double[]){setup / 1e6}, 1);
    print_values("scale_setup_per_block_ns", &per_export, 1);
    fflush(stdout);
    char fds[32], n[32], k[32], r[32];
    long sample = a->sample < a->blocks ? a->sample : a->blocks;
    char *argv[] = {(char *)self,
                    "scale-child",
                    fmt_long(fds, fd),
                    fmt_long(n, a->blocks),
                    fmt_long(k, sample),
                    fmt_long(r, a->rounds),
                    NULL};
    int status = wait_child(spawn_self(argv));
    /* The blocks stay exported and unfreed: exiting releases them. */
    return status ? 2 : 0;
}

/* Per-child results of a storm (figure 5, and figure 8: reclaim --procs). */
enum {
    ST_OPS,
    ST_MAX_NS,
    ST_OVER_1MS,
    ST_REG_CONT,
    ST_REG_MAX,
    ST_REG_OVER,
    ST_REG_ACQ,
    ST_SIM_CONT,
    ST_SIM_MAX,
    ST_SIM_OVER,
    ST_REG_WAIT,
    ST_SIM_WAIT,
    ST_PROBE
};

/* ---- figure 4: last close -> real free ---------------------------------- */

enum { RC_CLOSE_AT, RC_CLOSED_AT }; /* child's stamps: CLOCK_MONOTONIC before and after its close */

static int reclaim_child(struct chan *c)
{
    cuda_ready();
    uint32_t seen = door_seq(c, D_TO_CHILD);
    probe_reset();
    door_open(c, D_READY);
    for (;;) {
        /* 1: open the handle in c->handle */
        seen = door_wait(c, D_TO_CHILD, seen, 0);
        if (atomic_load(&c->go)) {
            struct probe_lock_stats reg, sim;
            if (probe_stats(&reg, &sim)) { /* its own registry-lock waits */
                c->slot[0][0] = (double)reg.max_wait_ns;
                c->slot[0][1] = (double)reg.over_1ms;
                c->slot[0][2] = 1;
            }
            break;
        }
        cudaIpcMemHandle_t h;
        void *p;
        memcpy(&h, c->handle, sizeof h);
        CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
        door_open(c, D_TO_PARENT);
        /* 2: close it (sleeping meanwhile: the exporter's threads get the CPUs) */
        seen = door_wait(c, D_TO_CHILD, seen, 0);
        __atomic_store_n(&c->stamp[RC_CLOSE_AT], now_ns(), __ATOMIC_RELEASE);
        CK(cudaIpcCloseMemHandle(p));
        __atomic_store_n(&c->stamp[RC_CLOSED_AT], now_ns(), __ATOMIC_RELEASE);
        door_open(c, D_TO_PARENT);
    }
    return 0;
}

static int storm_start(const char *self, struct chan *c, int fd, long procs, long blocks,
                       long pace_us, int *pids);

static int fig_reclaim(const struct args *a, const char *self)
{
    cuda_ready();
    bool shim = shim_loaded();
    /* --procs P: P importers in all. Besides the one that opens and closes
     * the measured blocks, P - 1 storm importers open and close 8 other
     * exported blocks of this process all along (figure 5's loop), so the
     * last close and the real free compete for the registry lock. */
    long others = a->procs > 1 ? a->procs - 1 : 0;
    if (others > CHAN_SLOTS) bench_die("--procs above 129", (int)a->procs, __FILE__, __LINE__);
    struct chan *sc = NULL;
    int *spids = NULL, sfd = -1;
    if (others) {
        long sb = 8;
        sc = chan_create((size_t)sb * 64, &sfd);
        for (long i = 0; i < sb; i++) {
            void *p;
            cudaIpcMemHandle_t h;
            CK(cudaMalloc(&p, (size_t)a->size));
            CK(cudaIpcGetMemHandle(&h, p));
            memcpy(sc->data + (size_t)i * 64, &h, 64);
        }
        spids = calloc((size_t)others, sizeof *spids);
        /* Until told, or twice the budget: a sample still waiting then is
         * dropped (counted in reclaim_cut), not measured without the storm. */
        atomic_store(&sc->t_stop_ns, a->budget_s > 0
                                         ? now_ns() + 2ull * (uint64_t)a->budget_s * 1000000000ull
                                         : UINT64_MAX);
        storm_start(self, sc, sfd, others, sb, a->pace_us, spids);
        /* Samples start once the storm is steady: every importer has opened
         * each block once. Their first opens (attaching the registry,
         * claiming holder and lease records), all released at once, are
         * start-up, not the load this figure is about. */
        uint64_t warm_end =
            now_ns() + (uint64_t)(a->budget_s > 0 ? a->budget_s : 10) * 1000000000ull;
        while (atomic_load(&sc->warm) < (uint32_t)others && now_ns() < warm_end)
            usleep(1000);
    }
    int fd;
    struct chan *c = chan_create(0, &fd);
    char fds[32];
    char *argv[] = {(char *)self, "reclaim-child", fmt_long(fds, fd), NULL};
    uint32_t ready = door_seq(c, D_READY);
    int pid = spawn_self(argv);
    door_wait(c, D_READY, ready, 0);
    double *lat = calloc((size_t)a->samples, sizeof *lat);
    double *close_lat = calloc((size_t)a->samples, sizeof *close_lat); /* the close call itself */
    long missed = 0;
    probe_reset(); /* the exporter's own waits: the sampling window only */
    uint32_t seen = door_seq(c, D_TO_PARENT);
    uint64_t next_scratch = now_ns();
    /* --budget-s: stop taking samples after this long (a storm of importers
     * on 2 CPUs can make one sample take seconds); n is printed. */
    uint64_t budget_end =
        a->budget_s > 0 ? now_ns() + (uint64_t)a->budget_s * 1000000000ull : UINT64_MAX;
    long taken = 0, cut = 0;
    for (long i = 0; i < a->samples && (i == 0 || now_ns() < budget_end); i++, taken++) {
        void *p;
        cudaIpcMemHandle_t h;
        CK(cudaMalloc(&p, (size_t)a->size));
        CK(cudaIpcGetMemHandle(&h, p));
        memcpy(c->handle, &h, sizeof h);
        door_open(c, D_TO_CHILD);
        seen = door_wait(c, D_TO_PARENT, seen, SPIN_NS); /* opened */
        uint64_t t_free;
        if (shim) {
            /* Free while the child holds it: limbo. Then the child closes;
             * we watch for the shim's real free (frees_reclaimed) while
             * the program goes on with its own untracked allocations. */
            uint64_t before = shim_frees_reclaimed();
            CK(cudaFree(p));
            uint64_t t_asked = now_ns();
            door_open(c, D_TO_CHILD);
            uint64_t deadline = now_ns() + (uint64_t)a->timeout_ms * 1000000ull;
            for (unsigned spin = 0;; spin++) {
                if (shim_frees_reclaimed() != before) {
                    /* When the shim's real free returned (the simulator
                     * stamps it), not when this loop noticed: the loop's
                     * own turn on a crowded CPU is not the shim's. On a
                     * real driver, when the loop noticed (an upper bound). */
                    uint64_t freed = sim_last_free_ns();
                    t_free = freed > t_asked ? freed : now_ns();
                    break;
                }
                uint64_t t = now_ns();
                if (t > deadline) {
                    t_free = t;
                    missed++;
                    break;
                }
                if (a->scratch_us > 0 && t >= next_scratch) {
                    void *s;
                    CK(cudaMalloc(&s, 512));
                    CK(cudaFree(s));
                    next_scratch = t + (uint64_t)a->scratch_us * 1000ull;
                }
                /* As door_wait waits for the importer's word without the
                 * shim: a yield every other turn, a pause between. */
                if (spin & 1)
                    sched_yield();
                else
                    __builtin_ia32_pause();
            }
            seen = door_wait(c, D_TO_PARENT, seen, SPIN_NS); /* closed */
        } else {
            /* Without the shim a correct program must wait for the
             * importer's word before freeing: close, message, free. */
            door_open(c, D_TO_CHILD);
            seen = door_wait(c, D_TO_PARENT, seen, SPIN_NS);
            CK(cudaFree(p));
            t_free = now_ns();
        }
        uint64_t t_close = __atomic_load_n(&c->stamp[RC_CLOSE_AT], __ATOMIC_ACQUIRE);
        if (sc && t_free >= atomic_load(&sc->t_stop_ns)) {
            cut++; /* the storm had ended: not a sample under load */
            break;
        }
        lat[i] = (double)(t_free - t_close) / 1e3;
        close_lat[i] =
            (double)(__atomic_load_n(&c->stamp[RC_CLOSED_AT], __ATOMIC_ACQUIRE) - t_close) / 1e3;
    }
    struct probe_lock_stats ereg, esim;
    bool eprobe = probe_stats(&ereg, &esim);
    atomic_store(&c->go, 1);
    door_open(c, D_TO_CHILD);
    int status = wait_child(pid);
    double reg_max = c->slot[0][2] > 0 ? c->slot[0][0] : -1, reg_over = c->slot[0][1];
    double storm_ops = 0;
    if (others) {
        atomic_store(&sc->t_stop_ns, 0);
        for (long i = 0; i < others; i++) {
            status |= wait_child(spids[i]) != 0;
            double *s = sc->slot[i];
            storm_ops += s[ST_OPS];
            if (s[ST_PROBE] > 0) {
                if (s[ST_REG_MAX] > reg_max) reg_max = s[ST_REG_MAX];
                reg_over += s[ST_REG_OVER];
            }
        }
    }
    print_values("reclaim_importers", (double[]){(double)(others + 1)}, 1);
    print_values("reclaim_storm_calls", &storm_ops, 1);
    if (reg_max >= 0) { /* the probe was preloaded */
        print_values("reclaim_reg_lock_max_wait_us", (double[]){reg_max / 1e3}, 1);
        print_values("reclaim_reg_lock_waits_over_1ms", &reg_over, 1);
    }
    if (eprobe) { /* the exporter's program thread and collector */
        print_values("reclaim_exporter_reg_lock_max_wait_us",
                     (double[]){(double)ereg.max_wait_ns / 1e3}, 1);
        print_values("reclaim_exporter_reg_lock_waits_over_1ms", (double[]){(double)ereg.over_1ms},
                     1);
        /* The simulator's machine lock, which the real free takes too (a
         * real driver has no lock a preempted process can hold). */
        print_values("reclaim_exporter_sim_lock_wait_us", (double[]){(double)esim.wait_ns / 1e3},
                     1);
    }
    print_values("reclaim_cut", (double[]){(double)cut}, 1);
    if (taken > 0) {
        print_values("reclaim_us", lat, (size_t)taken);
        print_values("reclaim_close_us", close_lat, (size_t)taken);
        double m = median(lat, (size_t)taken), p99 = quantile(lat, (size_t)taken, 0.99);
        print_values("reclaim_median_us", &m, 1);
        print_values("reclaim_p99_us", &p99, 1);
    }
    print_values("reclaim_missed", (double[]){(double)missed}, 1);
    return status ? 2 : 0;
}

/* ---- figure 5: P importers opening and closing the same blocks ---------- */

/* pace_us > 0: sleep that long after each open+close (figure 8's importers). */
static int storm_child(struct chan *c, long idx, long blocks, long pace_us)
{
    cuda_ready();
    atomic_fetch_add(&c->ready, 1);
    door_open(c, D_READY);
    uint32_t go = 0;
    while (!atomic_load(&c->go))
        go = door_wait(c, D_GO, go, 0);
    uint64_t max = 0, ops = 0, over = 0;
    struct probe_lock_stats reg0, sim0, reg, sim;
    probe_reset(); /* count the storm window only, not start-up */
    probe_stats(&reg0, &sim0);
    for (long k = 0;; k++) {
        uint64_t t0 = now_ns();
        if (t0 >= atomic_load_explicit(&c->t_stop_ns, memory_order_relaxed)) break;
        cudaIpcMemHandle_t h;
        void *p;
        memcpy(&h, c->data + (size_t)((idx + k) % blocks) * 64, sizeof h);
        CK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
        uint64_t t1 = now_ns();
        CK(cudaIpcCloseMemHandle(p));
        uint64_t t2 = now_ns();
        uint64_t d1 = t1 - t0, d2 = t2 - t1;
        if (d1 > max) max = d1;
        if (d2 > max) max = d2;
        over += (d1 > 1000000) + (d2 > 1000000);
        ops += 2;
        if (k == blocks - 1) atomic_fetch_add(&c->warm, 1); /* each block opened once */
        if (pace_us > 0) usleep((useconds_t)pace_us);
    }
    bool probe = probe_stats(&reg, &sim);
    double *s = c->slot[idx];
    s[ST_OPS] = (double)ops;
    s[ST_MAX_NS] = (double)max;
    s[ST_OVER_1MS] = (double)over;
    s[ST_REG_ACQ] = (double)(reg.acquisitions - reg0.acquisitions);
    s[ST_REG_CONT] = (double)(reg.contended - reg0.contended);
    s[ST_REG_MAX] = (double)reg.max_wait_ns;
    s[ST_REG_OVER] = (double)(reg.over_1ms - reg0.over_1ms);
    s[ST_REG_WAIT] = (double)(reg.wait_ns - reg0.wait_ns);
    s[ST_SIM_CONT] = (double)(sim.contended - sim0.contended);
    s[ST_SIM_MAX] = (double)sim.max_wait_ns;
    s[ST_SIM_OVER] = (double)(sim.over_1ms - sim0.over_1ms);
    s[ST_SIM_WAIT] = (double)(sim.wait_ns - sim0.wait_ns);
    s[ST_PROBE] = probe;
    return 0;
}

/* Spawns procs storm children over the blocks in c->data, waits until all
 * are ready and lets them go; they run until c->t_stop_ns (re-read every
 * call). Their pids in pids[]. Returns 0. */
static int storm_start(const char *self, struct chan *c, int fd, long procs, long blocks,
                       long pace_us, int *pids)
{
    char fds[32], bl[32], pace[32];
    for (long i = 0; i < procs; i++) {
        char idx[32];
        char *argv[] = {(char *)self,
                        "storm-child",
                        fmt_long(fds, fd),
                        fmt_long(idx, i),
                        fmt_long(bl, blocks),
                        fmt_long(pace, pace_us),
                        NULL};
        pids[i] = spawn_self(argv);
    }
    uint32_t seen = door_seq(c, D_READY);
    while (atomic_load(&c->ready) < (uint32_t)procs)
        seen = door_wait(c, D_READY, seen, 0);
    atomic_store(&c->t_start_ns, now_ns());
    atomic_store(&c->go, 1);
    door_open(c, D_GO);
    return 0;
}

static int fig_storm(const struct args *a, const char *self)
{
    cuda_ready();
    if (a->procs > CHAN_SLOTS) bench_die("--procs above 128", (int)a->procs, __FILE__, __LINE__);
    int fd;
    struct chan *c = chan_create((size_t)a->blocks * 64, &fd);
    for (long i = 0; i < a->blocks; i++) {
        void *p;
        cudaIpcMemHandle_t h;
        CK(cudaMalloc(&p, (size_t)a->size));
        CK(cudaIpcGetMemHandle(&h, p));
        memcpy(c->data + (size_t)i * 64, &h, 64);
    }
    int *pids = calloc((size_t)a->procs, sizeof *pids);
    uint64_t t_spawn = now_ns();
    /* A stop time before any child can read it is set, so none stops early. */
    atomic_store(&c->t_stop_ns, UINT64_MAX);
    storm_start(self, c, fd, a->procs, a->blocks, 0, pids);
    uint64_t t0 = now_ns();
    double startup_ms = (double)(t0 - t_spawn) / 1e6;
    atomic_store(&c->t_stop_ns, t0 + (uint64_t)(a->seconds * 1e9));
    int status = 0;
    for (long i = 0; i < a->procs; i++)
        status |= wait_child(pids[i]) != 0;
    double elapsed = (double)(now_ns() - t0) / 1e9;
    double ops = 0, max = 0, over = 0, v[ST_PROBE + 1] = {0};
    for (long i = 0; i < a->procs; i++) {
        double *s = c->slot[i];
        ops += s[ST_OPS];
        over += s[ST_OVER_1MS];
        if (s[ST_MAX_NS] > max) max = s[ST_MAX_NS];
        for (int k = ST_REG_CONT; k <= ST_PROBE; k++) {
            if (k == ST_REG_MAX || k == ST_SIM_MAX)
                v[k] = s[k] > v[k] ? s[k] : v[k];
            else
                v[k] += s[k];
        }
    }
    (void)elapsed;
    print_values("storm_startup_ms", &startup_ms, 1);
    print_values("storm_ops_per_s", (double[]){ops / a->seconds}, 1);
    print_values("storm_max_call_us", (double[]){max / 1e3}, 1);
    print_values("storm_calls_over_1ms", &over, 1);
    print_values("storm_calls", &ops, 1);
    if (v[ST_PROBE] > 0) {
        print_values("storm_reg_lock_acquisitions", &v[ST_REG_ACQ], 1);
        print_values("storm_reg_lock_contended", &v[ST_REG_CONT], 1);
        print_values("storm_reg_lock_max_wait_us", (double[]){v[ST_REG_MAX] / 1e3}, 1);
        print_values("storm_reg_lock_waits_over_1ms", &v[ST_REG_OVER], 1);
        print_values("storm_reg_lock_wait_total_ms", (double[]){v[ST_REG_WAIT] / 1e6}, 1);
        print_values("storm_sim_lock_contended", &v[ST_SIM_CONT], 1);
        print_values("storm_sim_lock_max_wait_us", (double[]){v[ST_SIM_MAX] / 1e3}, 1);
        print_values("storm_sim_lock_waits_over_1ms", &v[ST_SIM_OVER], 1);
        print_values("storm_sim_lock_wait_total_ms", (double[]){v[ST_SIM_WAIT] / 1e6}, 1);
    }
    return status ? 2 : 0;
}

/* ---- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(
            stderr,
            "usage: ipc-bench alloc|cycle|pool-cycle|scale|reclaim|storm|exit|wake [options]\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "cycle-child"))
        return cycle_child(chan_attach(atoi(argv[2])), (size_t)atol(argv[3]),
                           argc > 4 ? atol(argv[4]) : 0);
    if (!strcmp(cmd, "pool-cycle-child"))
        return pool_cycle_child(chan_attach(atoi(argv[2])), (size_t)atol(argv[3]), atol(argv[4]),
                                atoi(argv[5]));
    if (!strcmp(cmd, "scale-child"))
        return scale_child(chan_attach(atoi(argv[2])), atol(argv[3]), atol(argv[4]), atol(argv[5]));
    if (!strcmp(cmd, "reclaim-child")) return reclaim_child(chan_attach(atoi(argv[2])));
    if (!strcmp(cmd, "limbo-child")) return limbo_child(chan_attach(atoi(argv[2])), atol(argv[3]));
    if (!strcmp(cmd, "exit-child"))
        return exit_child(chan_attach(atoi(argv[2])), atol(argv[3]), (size_t)atol(argv[4]));
    if (!strcmp(cmd, "wake-child")) return wake_child(chan_attach(atoi(argv[2])), atol(argv[3]));
    if (!strcmp(cmd, "storm-child"))
        return storm_child(chan_attach(atoi(argv[2])), atol(argv[3]), atol(argv[4]),
                           argc > 5 ? atol(argv[5]) : 0);

    struct args a = {.pairs = 100000,
                     .reps = 7,
                     .size = 4096,
                     .cycles = 2000,
                     .blocks = 1000,
                     .sample = 1000,
                     .rounds = 5,
                     .samples = 200,
                     .scratch_us = 1000,
                     .timeout_ms = 2000,
                     .procs = 64,
                     .limbo = 0,
                     .seconds = 1.0};
    if (!strcmp(cmd, "scale")) a.size = 512;
    if (!strcmp(cmd, "storm")) a.blocks = 8;
    if (!strcmp(cmd, "reclaim")) a.procs = 1;
    if (!strcmp(cmd, "exit")) a.size = 512;
    if (!strcmp(cmd, "wake")) a.pace_us = 2000;
    parse(argc, argv, &a);
    if (a.reps < 1) a.reps = 1;
    if (a.cycles < a.reps) a.cycles = a.reps;
    if (!strcmp(cmd, "alloc")) return fig_alloc(&a, argv[0]);
    if (!strcmp(cmd, "cycle")) return fig_cycle(&a, argv[0]);
    if (!strcmp(cmd, "pool-cycle")) return fig_pool_cycle(&a, argv[0]);
    if (!strcmp(cmd, "scale")) return fig_scale(&a, argv[0]);
    if (!strcmp(cmd, "reclaim")) return fig_reclaim(&a, argv[0]);
    if (!strcmp(cmd, "storm")) return fig_storm(&a, argv[0]);
    if (!strcmp(cmd, "exit")) return fig_exit(&a, argv[0]);
    if (!strcmp(cmd, "wake")) return fig_wake(&a, argv[0]);
    fprintf(stderr, "ipc-bench: unknown figure %s\n", cmd);
    return 2;
}
