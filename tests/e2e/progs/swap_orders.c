/* swap_orders: the orders in which host swap could lose bytes or kill the
 * context (issue 45, item 6), each recreated exactly on the simulator.
 * Three blocks A, B, C of 4 MiB (cudaMalloc: swappable under a budget of
 * 8 MiB with IPCSHIM_SWAP_MIN_BYTES=2M), each filled with its own pattern;
 * kernels add to their words (the simulator's builtin simcuda_add_u32,
 * which really runs, when its launch completes); a mirror on the host
 * follows every change, and at the end every byte is read back and
 * compared. Work is kept queued by holding a stream
 * (simcuda_stream_hold): what a kernel still running on the device is.
 *
 *   swap_orders MODE
 *   queued-victim    a kernel over A queued on held stream S2; kernels over
 *                    B and C on S1 need A's room; S2 released
 *   unknown-layout   the same with a kernel whose layout the shim cannot
 *                    read (cuFuncGetParamInfo refuses it)
 *   unrecorded-copy  the same with a cuMemcpyAsync (an entry point host
 *                    swap does not record) of 64 KiB into A on S2
 *   queued-fetch     A evicted, C freed; a kernel of unknown layout over A
 *                    (it reads the host copy over the link) queued on held
 *                    S2; then a kernel over A on S1, which fetches A into
 *                    C's room
 *   unrecorded-set   the same with a cuMemsetD32Async of 16 KiB into A
 *   unrecorded-copy2d  the same with a cuMemcpy2DAsync of 16 rows of 1 KiB
 *                    into A (a pitch of 4 KiB)
 *   unrecorded-set2d  the same with a cuMemsetD2D32Async of 16 rows of 1 KiB
 *                    into A (a pitch of 4 KiB)
 *   graph-victim     the same with a graph (one kernel node over A)
 *                    launched on S2: the shim sees the graph launch, not
 *                    its kernel
 *   fork             A evicted, then fork; the child does no CUDA and
 *                    exits; the parent fetches A back
 *   export           A evicted, then cudaIpcGetMemHandle(A); when it
 *                    succeeds an importer (this program, --import) opens
 *                    it while the exporter runs kernels over A, B and C,
 *                    and reads A's bytes
 *   free-queued      a kernel over A queued on held S2, then cudaFree(A)
 *   reset            A evicted, then cudaDeviceReset; new blocks after it
 *   writeback-queued the queued-victim order, then S2 released and A read
 *                    back as its write-back left it (no launch over A):
 *                    with async evictions C's fetch copy into A's chunks
 *                    must wait for A's write-back, still queued behind S2
 *   writeback-first-touch  a kernel over A queued on held S2, a kernel over
 *                    B on S1, then a new block D (never written) and a
 *                    kernel over D on S1, which needs A's room: D's first
 *                    touch takes A's chunks while A's write-back is still
 *                    queued behind S2; D is freed and A, B, C read back
 *   free-pending     the queued-victim order, then cudaFree(A) while S2
 *                    still holds A's write-back (A's remap is pending); S2
 *                    released, a new block takes A's place (it may get A's
 *                    address) and kernels over it, B and C make the engine
 *                    move
 *   export-pending   the export order from the queued-victim order: A's
 *                    write-back held behind S2 at the export (its remap
 *                    pending), S2 released after it, and a fourth block
 *                    whose kernels make the engine move while the
 *                    importer maps A
 *   pending-launch   the queued-victim order, then a kernel over A on S1
 *                    while S2 still holds A's write-back (A's remap is
 *                    pending: its range still maps the chunks C took)
 *   pending-unknown  the queued-victim order, S1 and S2 synchronised (A's
 *                    write-back done, its remap still pending), then a
 *                    kernel of unknown layout over A on S1
 *   mover-launch     the queued-victim order; once the mover thread owns
 *                    A's remap (it waits behind S2), a kernel over A on S1
 *                    from another thread, then S2 released
 *   mover-unknown    the same with a kernel of unknown layout over A, from
 *                    this thread
 *   mover-free       the same with cudaFree(A), then free-pending's moves
 *   mover-export     the export-pending order with the mover owning A
 *   mover-reset      the same with cudaDeviceReset (the mover's job is of
 *                    the context that ends), then reset's new blocks
 *   mover-fork       the same with fork: the child exits through exit()
 *                    (its atexit hooks run) while the parent's mover waits
 *   mover-exit       the same, then the program exits with S2 still held
 *                    (the mover's job pending): "exiting" and the exit
 *   ahead-launch     with IPCSHIM_TEST_SWAP_AHEAD=1 (fetches are fetches
 *                    ahead): A evicted, C freed; a kernel over A on held S2
 *                    (its fetch ahead is queued; the kernel reads the host
 *                    copy); once the mover owns the fetch (waiting for S2),
 *                    a kernel over A on held S3; S2 released, then S3
 *   ahead-fail       the same, but the mover's cuMemMap of A's chunks fails
 *                    (simcuda_inject) once S2 is released: A stays on its
 *                    host copy; then a kernel over A on S1
 *   ahead-behind-remap  with IPCSHIM_TEST_SWAP_AHEAD=1: a kernel over A on
 *                    held S2, then kernels over B and C on S1: A is the
 *                    victim (its remap waits behind S2 for its write-back)
 *                    and C's fetch is a fetch ahead queued after that
 *                    remap, its own wait over once S1's work ends; after a
 *                    while (S2 still held) "c_ahead" says where C is
 *   learned-launch   no test knob: kernels over A, B and C in turn on S1
 *                    (two fit) until the history policy learns the period
 *                    and fetches ahead on its own; one more round on held
 *                    S1, after which A's fetch ahead (A is next) waits in
 *                    the mover behind S1; then a kernel over A on held
 *                    S3; S1 released, then S3; two more rounds
 *   learned-free     the same, then cudaFree(A) instead of the kernel
 *   learned-export   the same, then cudaIpcGetMemHandle(A) instead
 *   unsafe-unmap     no shim needed: what an engine that ignores the rule
 *                    does, by hand: a VMM block with a queued kernel over
 *                    it is copied out and unmapped (the 700 the other
 *                    modes must never show)
 *
 * Output, one fact a line: "backing: managed|vmm|device" (what A is),
 * "queued_before: N" and "a_before: device|host" (before the order's
 * trigger), "queued_after: N" and "a_after: ..." (right after it),
 * (queued: kernels and copies still queued, simcuda_queued_work); with
 * queued-fetch also "a_at_queue", "fetch_queued_before", "a_before_fetch",
 * "fetch_queued_after", "a_after_fetch" (the same around the fetch); with
 * pending-launch, pending-unknown and the mover modes also "a_pending" (where
 * A is mapped just before the kernel over it or the mode's call); with the
 * orders that evict A first "a_evicted" (once its remap is done); with
 * ahead-launch "a_ahead" (A while its fetch ahead waits) and
 * "a_after_launch"; with the learned modes "a_ahead" too; mode
 * lines ("export: CODE",
 * "child: STATUS", "free: CODE", "reset: CODE", "import_open: CODE", "import_read: ok|wrong"),
 * "error: WHAT CODE" for every call that failed, "errors: N", "bad_words: N" (words that differ
 * from the mirror; -1 when they could not be read), "checksum: HEX" and "want: HEX" (FNV-1a of the
 * blocks read back and of the mirror), "final_malloc: CODE" (a new cudaMalloc: 0 while the context
 * lives). Exit status 0, or 2 when the program could not set up. */
#include "simcuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NBLK 3
#define BLK (4u << 20)
#define WORDS (BLK / 4)
#define A 0
#define B 1
#define C 2

static void *blk[NBLK];
static uint32_t *want[NBLK];
static CUfunction add_fn, add_opaque_fn;
static CUstream s1, s2, s3;
static int errors, saw_700;

static int (*hold)(void *, int);
static void (*inject)(enum simcuda_fault, unsigned);
static unsigned (*queued)(void);
static int (*residency)(const void *, struct simcuda_residency *);

static bool is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

/* Counts and prints a failed call; returns the code. */
static int check(int code, const char *what)
{
    if (code) {
        printf("error: %s %d\n", what, code);
        errors++;
        saw_700 |= code == 700;
    }
    return code;
}

static void setup_fail(const char *what, int code)
{
    printf("setup failed: %s %d\n", what, code);
    exit(2);
}

static uint32_t pattern(int b, size_t i)
{
    return 0x9e3779b9u * (uint32_t)(i + 1) ^ ((uint32_t)b << 28);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* Where the bytes at p live: "host" or "device", as the simulator's
 * managed residency or the VMM allocation mapped there says. */
static const char *where(const void *p)
{
    int r = residency ? residency(p, NULL) : -2;
    if (r >= -1) return r == SIMCUDA_HOST ? "host" : "device";
    CUmemGenericAllocationHandle h;
    if (cuMemRetainAllocationHandle(&h, (void *)p) == CUDA_SUCCESS) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        CUresult g = cuMemGetAllocationPropertiesFromHandle(&prop, h);
        cuMemRelease(h);
        if (g == CUDA_SUCCESS && prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE) return "device";
        return g == CUDA_SUCCESS ? "host" : "unknown";
    }
    return "device";
}

static const char *backing(const void *p)
{
    if (residency && residency(p, NULL) >= -1) return "managed";
    CUmemGenericAllocationHandle h;
    if (cuMemRetainAllocationHandle(&h, (void *)p) == CUDA_SUCCESS) {
        cuMemRelease(h);
        return "vmm";
    }
    return "device";
}

static unsigned nqueued(void)
{
    return queued ? queued() : 0;
}

/* p[i] += value for i < count, on stream s; the mirror follows. */
static void add(int b, CUstream s, uint32_t value, bool opaque)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)blk[b];
    uint64_t count = WORDS;
    void *params[] = {&p, &count, &value};
    check(cuLaunchKernel(opaque ? add_opaque_fn : add_fn, WORDS / 256, 1, 1, 256, 1, 1, 0, s,
                         params, NULL),
          opaque ? "launch (unknown layout)" : "launch");
    for (size_t i = 0; i < WORDS; i++)
        want[b][i] += value;
}

static void fill(int b)
{
    for (size_t i = 0; i < WORDS; i++)
        want[b][i] = pattern(b, i);
    check(cudaMemcpy(blk[b], want[b], BLK, cudaMemcpyHostToDevice), "fill");
}

static void start(void)
{
    hold = (int (*)(void *, int))dlsym(RTLD_DEFAULT, "simcuda_stream_hold");
    queued = (unsigned (*)(void))dlsym(RTLD_DEFAULT, "simcuda_queued_work");
    inject = (void (*)(enum simcuda_fault, unsigned))dlsym(RTLD_DEFAULT, "simcuda_inject");
    residency = (int (*)(const void *, struct simcuda_residency *))dlsym(
        RTLD_DEFAULT, "simcuda_managed_residency");
    int r;
    if ((r = cudaFree(0))) setup_fail("cudaFree(0)", r);
    CUmodule mod;
    if ((r = cuModuleLoadData(&mod, SIMCUDA_BUILTIN_PTX))) setup_fail("cuModuleLoadData", r);
    if ((r = cuModuleGetFunction(&add_fn, mod, "simcuda_add_u32")) ||
        (r = cuModuleGetFunction(&add_opaque_fn, mod, "simcuda_add_u32_opaque")))
        setup_fail("cuModuleGetFunction", r);
    if ((r = cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)) ||
        (r = cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING)) ||
        (r = cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING)))
        setup_fail("cuStreamCreate", r);
    for (int b = 0; b < NBLK; b++) {
        if (!(want[b] = malloc(BLK))) setup_fail("malloc", 0);
        if ((r = cudaMalloc(&blk[b], BLK))) setup_fail("cudaMalloc", r);
        fill(b);
    }
}

static void hold_s2(int on)
{
    if (!hold) setup_fail("no simulator (simcuda_stream_hold): this program needs one", 0);
    if (hold(s2, on)) setup_fail("simcuda_stream_hold", -1);
}

static void hold_stream(CUstream s, int on)
{
    if (!hold) setup_fail("no simulator (simcuda_stream_hold): this program needs one", 0);
    if (hold(s, on)) setup_fail("simcuda_stream_hold", -1);
}

/* Time for the mover thread (IPCSHIM_SWAP_MOVER=thread) to take the job
 * just queued: it then waits behind the held stream. */
static void let_the_mover_take_it(void)
{
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
}

static void before(void)
{
    printf("queued_before: %u\na_before: %s\n", nqueued(), where(blk[A]));
}

/* The trigger: kernels over B and C, which together with A exceed the
 * budget: A, used least recently, is the victim. */
static void pressure(void)
{
    add(B, s1, 2, false);
    add(C, s1, 3, false);
    printf("queued_after: %u\na_after: %s\n", nqueued(), where(blk[A]));
}

/* Reads every block back (the blocks in `gone` are skipped) and prints the
 * verdict, then whether the context still allocates; then frees them. */
static void finish(unsigned gone)
{
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    long bad = 0;
    uint64_t h = 0xcbf29ce484222325ull, w = h;
    uint32_t *got = malloc(BLK);
    for (int b = 0; b < NBLK && got; b++) {
        if (gone & (1u << b)) continue;
        if (check(cudaMemcpy(got, blk[b], BLK, cudaMemcpyDeviceToHost), "read back")) {
            bad = -1;
            break;
        }
        for (size_t i = 0; i < WORDS; i++)
            bad += got[i] != want[b][i];
        h = fnv(h, got, BLK);
        w = fnv(w, want[b], BLK);
    }
    free(got);
    printf("bad_words: %ld\nchecksum: %016llx\nwant: %016llx\n", bad, (unsigned long long)h,
           (unsigned long long)w);
    void *p = NULL;
    int r = cudaMalloc(&p, 1 << 20);
    saw_700 |= r == 700;
    printf("final_malloc: %d\n", r);
    if (!r) {
        check(cudaFree(p), "cudaFree");
        for (int b = 0; b < NBLK; b++)
            if (!(gone & (1u << b))) check(cudaFree(blk[b]), "cudaFree at the end");
    }
    printf("errors: %d\nsaw_700: %s\n", errors, saw_700 ? "yes" : "no");
}

/* Orders 1-3: work queued on S2 over A, then the pressure, then S2 runs. */
static void queued_order(const char *mode)
{
    hold_s2(1);
    if (is(mode, "queued-victim")) {
        add(A, s2, 1, false);
    } else if (is(mode, "unknown-layout")) {
        add(A, s2, 1, true);
    } else if (is(mode, "graph-victim")) {
        CUgraph g;
        CUgraphNode node;
        CUgraphExec exec;
        CUdeviceptr p = (CUdeviceptr)(uintptr_t)blk[A];
        uint64_t count = WORDS;
        uint32_t value = 1;
        void *params[] = {&p, &count, &value};
        CUDA_KERNEL_NODE_PARAMS k;
        memset(&k, 0, sizeof k);
        k.func = add_fn;
        k.gridDimX = WORDS / 256, k.gridDimY = k.gridDimZ = 1;
        k.blockDimX = 256, k.blockDimY = k.blockDimZ = 1;
        k.kernelParams = params;
        if (check(cuGraphCreate(&g, 0), "cuGraphCreate") ||
            check(cuGraphAddKernelNode(&node, g, NULL, 0, &k), "cuGraphAddKernelNode") ||
            check(cuGraphInstantiate(&exec, g, 0), "cuGraphInstantiate"))
            setup_fail("graph", 0);
        if (!check(cuGraphLaunch(exec, s2), "cuGraphLaunch"))
            for (size_t i = 0; i < WORDS; i++)
                want[A][i] += value;
    } else if (is(mode, "unrecorded-copy2d")) {
        static uint32_t rows[16][256];          /* pageable */
        const size_t at = 262144, pitch = 1024; /* words into A; words a row */
        for (size_t r = 0; r < 16; r++)
            for (size_t i = 0; i < 256; i++)
                rows[r][i] = want[A][at + r * pitch + i] = 0xd0000000u + (uint32_t)(r << 8 | i);
        CUDA_MEMCPY2D c;
        memset(&c, 0, sizeof c);
        c.srcMemoryType = CU_MEMORYTYPE_HOST;
        c.srcHost = rows;
        c.srcPitch = sizeof rows[0];
        c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        c.dstDevice = (CUdeviceptr)(uintptr_t)blk[A] + at * 4;
        c.dstPitch = pitch * 4;
        c.WidthInBytes = sizeof rows[0];
        c.Height = 16;
        check(cuMemcpy2DAsync(&c, s2), "cuMemcpy2DAsync");
    } else if (is(mode, "unrecorded-set2d")) {
        const size_t at = 524545, pitch = 1024, width = 256, height = 16; /* in words */
        for (size_t r = 0; r < height; r++)
            for (size_t i = 0; i < width; i++)
                want[A][at + r * pitch + i] = 0x3c3c3c3cu;
        check(cuMemsetD2D32Async((CUdeviceptr)(uintptr_t)blk[A] + at * 4, pitch * 4, 0x3c3c3c3cu,
                                 width, height, s2),
              "cuMemsetD2D32Async");
    } else if (is(mode, "unrecorded-set")) {
        const size_t at = 4097, n = 4096; /* words into A */
        for (size_t i = 0; i < n; i++)
            want[A][at + i] = 0x5a5a5a5au;
        check(cuMemsetD32Async((CUdeviceptr)(uintptr_t)blk[A] + at * 4, 0x5a5a5a5au, n, s2),
              "cuMemsetD32Async");
    } else {
        static uint32_t part[16384]; /* 64 KiB, pageable */
        const size_t at = 12345;     /* words into A */
        for (size_t i = 0; i < 16384; i++)
            part[i] = want[A][at + i] = 0xc0000000u + (uint32_t)i;
        check(cuMemcpyAsync((CUdeviceptr)(uintptr_t)blk[A] + at * 4, (CUdeviceptr)(uintptr_t)part,
                            sizeof part, s2),
              "cuMemcpyAsync");
    }
    before();
    pressure();
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    add(A, s1, 4, false); /* A is needed again */
    finish(0);
}

/* Async evictions' orders: a kernel over A queued on held S2 when the
 * kernels over B and C evict it; then what the mode does while A's remap
 * may still be pending (its range an alias of the chunks C took). */
static void pending_order(const char *mode)
{
    hold_s2(1);
    add(A, s2, 1, false);
    before();
    pressure();
    if (is(mode, "writeback-queued")) {
        hold_s2(0);
        check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    } else if (is(mode, "pending-launch")) {
        printf("a_pending: %s\n", where(blk[A]));
        add(A, s1, 4, false);
        hold_s2(0);
        check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    } else {
        hold_s2(0);
        check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
        check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
        printf("a_pending: %s\n", where(blk[A]));
        add(A, s1, 7, true);
    }
    finish(0);
}

/* A first touch (no fetch copy) into the chunks of a victim whose
 * write-back is queued: the kernel over D must wait for that write-back. */
static void first_touch_order(void)
{
    hold_s2(1);
    add(A, s2, 1, false);
    add(B, s1, 2, false);
    before();
    void *d = NULL;
    if (check(cudaMalloc(&d, BLK), "cudaMalloc(D)")) setup_fail("cudaMalloc(D)", 0);
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)d;
    uint64_t count = WORDS;
    uint32_t value = 5;
    void *params[] = {&p, &count, &value};
    check(cuLaunchKernel(add_fn, WORDS / 256, 1, 1, 256, 1, 1, 0, s1, params, NULL),
          "launch over D");
    printf("queued_after: %u\na_after: %s\n", nqueued(), where(blk[A]));
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    check(cudaFree(d), "cudaFree(D)");
    finish(0);
}

/* A evicted: the kernels over B and C need its room. */
static void evict_a(void)
{
    before();
    pressure();
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    /* A mover thread remaps A a little later: wait for it (2 s at most). */
    for (int i = 0; i < 2000 && strcmp(where(blk[A]), "host"); i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("a_evicted: %s\n", where(blk[A]));
}

/* The fetch's side of the rule: A is evicted, queued work of unknown
 * layout reads it where it is, and a launch the shim sees needs A on the
 * device. */
static void queued_fetch_order(void)
{
    evict_a();
    /* Room for A, so that its fetch needs no eviction (whose own wait
     * would cover the fetch's). */
    printf("free_c: %d\n", check(cudaFree(blk[C]), "cudaFree(C)"));
    printf("a_at_queue: %s\n", where(blk[A]));
    hold_s2(1);
    add(A, s2, 1, true);
    printf("fetch_queued_before: %u\na_before_fetch: %s\n", nqueued(), where(blk[A]));
    add(A, s1, 4, false);
    printf("fetch_queued_after: %u\na_after_fetch: %s\n", nqueued(), where(blk[A]));
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    add(B, s1, 5, false);
    finish(1u << C);
}

static void fork_order(void)
{
    evict_a();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* CUDA does not survive fork: the child touches no CUDA */
        char *p = malloc(1 << 20);
        if (p) memset(p, 1, 1 << 20);
        _exit(p ? 0 : 1);
    }
    int st = -1;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) check(-1, "fork");
    printf("child: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    printf("a_after_fork: %s\n", where(blk[A]));
    add(A, s1, 4, false);
    add(B, s1, 5, false);
    finish(0);
}

/* The importer: opens the handle, says so, waits for the exporter's go and
 * the hash A must have, reads A, says whether it matches, closes. */
static int import_main(const char *hex, int sock)
{
    cudaIpcMemHandle_t h;
    for (size_t i = 0; i < sizeof h.reserved; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    void *p = NULL;
    int r = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    printf("import_open: %d\n", r);
    fflush(stdout);
    char c = r ? 'e' : 'o';
    if (write(sock, &c, 1) != 1 || r) return r ? 0 : 2;
    uint64_t expect = 0;
    if (read(sock, &expect, sizeof expect) != (ssize_t)sizeof expect) return 2;
    uint32_t *got = malloc(BLK);
    r = got ? (int)cudaMemcpy(got, p, BLK, cudaMemcpyDeviceToHost) : -1;
    uint64_t hash = got ? fnv(0xcbf29ce484222325ull, got, BLK) : 0;
    printf("import_read: %s\n", r ? "error" : hash == expect ? "ok" : "wrong");
    printf("import_close: %d\n", cudaIpcCloseMemHandle(p));
    fflush(stdout);
    c = 'c';
    return write(sock, &c, 1) == 1 ? 0 : 2;
}

static void export_order(bool extra, bool mover)
{
    if (extra) {
        hold_s2(1);
        add(A, s2, 1, false);
        before();
        pressure();
        if (mover) {
            let_the_mover_take_it();
            printf("a_pending: %s\n", where(blk[A]));
        }
    } else {
        evict_a();
    }
    cudaIpcMemHandle_t h;
    int r = cudaIpcGetMemHandle(&h, blk[A]);
    printf("export: %d\n", r);
    if (extra) {
        hold_s2(0);
        check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    }
    if (r) { /* the managed engine refuses; the program goes on without sharing */
        cudaGetLastError();
        add(A, s1, 4, false);
        finish(0);
        return;
    }
    char hex[2 * sizeof h.reserved + 1];
    for (size_t i = 0; i < sizeof h.reserved; i++)
        sprintf(hex + 2 * i, "%02x", (unsigned char)h.reserved[i]);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) setup_fail("socketpair", 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        char fd[16];
        snprintf(fd, sizeof fd, "%d", sv[1]);
        execl("/proc/self/exe", "swap_orders", "--import", hex, fd, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    char c = 0;
    if (pid < 0 || read(sv[0], &c, 1) != 1 || c != 'o') {
        check(-1, "the importer's open");
    } else {
        /* While the importer maps A: kernels over every block, under the
         * budget; A's bytes must stay the ones the importer sees. */
        void *d = NULL;
        if (extra && check(cudaMalloc(&d, BLK), "cudaMalloc(D)")) setup_fail("cudaMalloc(D)", 0);
        for (int round = 0; round < 3; round++) {
            add(B, s1, 10, false);
            add(C, s1, 20, false);
            add(A, s1, 30, false);
            if (extra) { /* D's bytes are not checked: it needs B's or C's room */
                CUdeviceptr p = (CUdeviceptr)(uintptr_t)d;
                uint64_t count = WORDS;
                uint32_t value = 40;
                void *params[] = {&p, &count, &value};
                check(cuLaunchKernel(add_fn, WORDS / 256, 1, 1, 256, 1, 1, 0, s1, params, NULL),
                      "launch over D");
            }
        }
        if (d) check(cudaFree(d), "cudaFree(D)");
        check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
        uint64_t expect = fnv(0xcbf29ce484222325ull, want[A], BLK);
        if (write(sv[0], &expect, sizeof expect) != (ssize_t)sizeof expect ||
            read(sv[0], &c, 1) != 1)
            check(-1, "the importer's read");
    }
    int st = -1;
    if (pid > 0) waitpid(pid, &st, 0);
    printf("importer: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    finish(0);
}

static void free_queued_order(void)
{
    hold_s2(1);
    add(A, s2, 1, false);
    before();
    printf("free: %d\n", check(cudaFree(blk[A]), "cudaFree(A)"));
    printf("queued_after_free: %u\n", nqueued());
    add(B, s1, 2, false);
    add(C, s1, 3, false);
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    finish(1u << A);
}

static void free_pending_order(void)
{
    hold_s2(1);
    add(A, s2, 1, false);
    before();
    pressure();
    printf("free: %d\n", check(cudaFree(blk[A]), "cudaFree(A)"));
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    if (check(cudaMalloc(&blk[A], BLK), "cudaMalloc(new A)")) setup_fail("cudaMalloc", 0);
    fill(A);
    for (int round = 0; round < 3; round++) {
        add(A, s1, 4, false);
        add(B, s1, 5, false);
        add(C, s1, 6, false);
    }
    finish(0);
}

static void reset_order(bool mover)
{
    if (mover) {
        hold_s2(1);
        add(A, s2, 1, false);
        before();
        pressure();
        let_the_mover_take_it();
        printf("a_pending: %s\n", where(blk[A]));
    } else {
        evict_a();
    }
    printf("reset: %d\n", check(cudaDeviceReset(), "cudaDeviceReset"));
    /* Everything of the old context is gone; a new one serves new blocks. */
    CUmodule mod;
    int r;
    if ((r = cudaFree(0)) || (r = cuModuleLoadData(&mod, SIMCUDA_BUILTIN_PTX)) ||
        (r = cuModuleGetFunction(&add_fn, mod, "simcuda_add_u32")) ||
        (r = cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)))
        check(r, "a context after the reset");
    for (int b = 0; b < NBLK && !r; b++) {
        if (check(cudaMalloc(&blk[b], BLK), "cudaMalloc after the reset")) break;
        fill(b);
    }
    if (!r) {
        add(A, s1, 1, false);
        add(B, s1, 2, false);
        add(C, s1, 3, false);
    }
    finish(0);
}

static CUcontext main_ctx;

static void *launch_over_a(void *arg)
{
    (void)arg;
    check(cuCtxSetCurrent(main_ctx), "cuCtxSetCurrent (launching thread)");
    add(A, s1, 4, false);
    return NULL;
}

/* The mover thread owns A's remap (A's write-back held behind S2) when the
 * mode's call comes. */
static void mover_order(const char *mode)
{
    hold_s2(1);
    add(A, s2, 1, false);
    before();
    pressure();
    let_the_mover_take_it();
    printf("a_pending: %s\n", where(blk[A]));
    unsigned gone = 0;
    if (is(mode, "mover-launch")) {
        pthread_t t;
        check(cuCtxGetCurrent(&main_ctx), "cuCtxGetCurrent");
        if (pthread_create(&t, NULL, launch_over_a, NULL)) setup_fail("pthread_create", 0);
        pthread_join(t, NULL);
    } else if (is(mode, "mover-unknown")) {
        add(A, s1, 7, true);
    } else if (is(mode, "mover-free")) {
        printf("free: %d\n", check(cudaFree(blk[A]), "cudaFree(A)"));
        gone = 1u << A;
    } else if (is(mode, "mover-exit")) {
        printf("exiting\n");
        fflush(stdout);
        exit(0);
    } else if (is(mode, "mover-fork")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) exit(0); /* no CUDA; its atexit hooks run */
        int st = -1;
        if (pid < 0 || waitpid(pid, &st, 0) != pid) check(-1, "fork");
        printf("child: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    if (is(mode, "mover-free")) { /* free-pending's moves: a new A and kernels */
        if (check(cudaMalloc(&blk[A], BLK), "cudaMalloc(new A)")) setup_fail("cudaMalloc", 0);
        fill(A);
        gone = 0;
        for (int round = 0; round < 3; round++) {
            add(A, s1, 4, false);
            add(B, s1, 5, false);
            add(C, s1, 6, false);
        }
    }
    finish(gone);
}

/* A fetch ahead the mover owns (behind held S2) when a kernel over its
 * block comes (on held S3). */
static void ahead_order(bool fail)
{
    evict_a();
    printf("free_c: %d\n", check(cudaFree(blk[C]), "cudaFree(C)"));
    hold_s2(1);
    hold_stream(s3, 1);
    add(A, s2, 1, false);
    let_the_mover_take_it();
    printf("a_ahead: %s\n", where(blk[A]));
    if (fail) {
        if (!inject) setup_fail("no simcuda_inject", 0);
        inject(SIMCUDA_FAULT_VMM_MAP, 1);
        hold_s2(0);
        check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
        let_the_mover_take_it(); /* its map fails; A goes back to its host copy */
        printf("a_after_failure: %s\n", where(blk[A]));
        hold_stream(s3, 0);
        add(A, s1, 4, false);
        add(B, s1, 5, false);
        finish(1u << C);
        return;
    }
    add(A, s3, 4, false);
    printf("a_after_launch: %s\n", where(blk[A]));
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    hold_stream(s3, 0);
    check(cuStreamSynchronize(s3), "cuStreamSynchronize(S3)");
    add(B, s1, 5, false);
    finish(1u << C);
}

/* A fetch ahead queued behind a remap whose write-back is held (S2): the
 * mover serves the fetch ahead, whose wait is over, first. */
static void ahead_behind_remap_order(void)
{
    hold_s2(1);
    add(A, s2, 1, false);
    before();
    pressure();
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    /* C's fetch ahead is done once the mover takes it: up to 2 s */
    for (int i = 0; i < 2000 && strcmp(where(blk[C]), "device"); i++) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("c_ahead: %s\na_pending: %s\nqueued_held: %u\n", where(blk[C]), where(blk[A]),
           nqueued());
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    add(A, s1, 4, false);
    finish(0);
}

/* The learned modes (top of the file): fetches ahead the policy decides,
 * met while the mover runs them. */
#define LEARN_ROUNDS 12
static void learned_order(const char *mode)
{
    for (int round = 0; round < LEARN_ROUNDS; round++)
        for (int b = 0; b < NBLK; b++)
            add(b, s1, 1 + (uint32_t)b, false);
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    hold_stream(s1, 1);
    for (int b = 0; b < NBLK; b++)
        add(b, s1, 1 + (uint32_t)b, false);
    let_the_mover_take_it();
    printf("a_ahead: %s\n", where(blk[A]));
    unsigned gone = 0;
    if (is(mode, "learned-launch")) {
        hold_stream(s3, 1); /* the kernel stays queued while the mover may unmap A */
        add(A, s3, 7, false);
    } else if (is(mode, "learned-free")) {
        printf("free: %d\n", check(cudaFree(blk[A]), "cudaFree(A)"));
        gone = 1u << A;
    } else {
        cudaIpcMemHandle_t h;
        int r = cudaIpcGetMemHandle(&h, blk[A]);
        printf("export: %d\n", r);
        if (r) cudaGetLastError(); /* the managed engine refuses: nothing shared */
    }
    hold_stream(s1, 0);
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    let_the_mover_take_it();
    hold_stream(s3, 0);
    check(cuStreamSynchronize(s3), "cuStreamSynchronize(S3)");
    for (int round = 0; round < 2; round++)
        for (int b = 0; b < NBLK; b++)
            if (!(gone & (1u << b))) add(b, s1, 8 + (uint32_t)b, false);
    finish(gone);
}

/* A swap engine's eviction without the rule, by hand: the block is a VMM
 * range mapping device memory; a kernel over it is queued; the "engine"
 * copies the range to a host-located allocation and re-points the range
 * at it (unmap, map, set access) without waiting for the kernel. */
static void unsafe_unmap(void)
{
    CUmemAllocationProp dev, host;
    memset(&dev, 0, sizeof dev);
    dev.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    dev.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    host = dev;
    host.location.type = CU_MEM_LOCATION_TYPE_HOST;
    CUmemGenericAllocationHandle hd, hh;
    CUdeviceptr va;
    CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                           .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (check(cuMemCreate(&hd, BLK, &dev, 0), "cuMemCreate") ||
        check(cuMemCreate(&hh, BLK, &host, 0), "cuMemCreate(host)") ||
        check(cuMemAddressReserve(&va, BLK, 0, 0, 0), "cuMemAddressReserve") ||
        check(cuMemMap(va, BLK, 0, hd, 0), "cuMemMap") ||
        check(cuMemSetAccess(va, BLK, &acc, 1), "cuMemSetAccess"))
        setup_fail("VMM", 0);
    /* A is this range from now on (the ordinary block stays unused). */
    blk[A] = (void *)(uintptr_t)va;
    printf("backing: %s\n", backing(blk[A]));
    fill(A);
    hold_s2(1);
    add(A, s2, 1, false);
    before();
    void *copy = malloc(BLK);
    check(cuMemcpyDtoH(copy, va, BLK), "evict: copy");
    check(cuMemUnmap(va, BLK), "evict: cuMemUnmap");
    check(cuMemMap(va, BLK, 0, hh, 0), "evict: cuMemMap");
    check(cuMemSetAccess(va, BLK, &acc, 1), "evict: cuMemSetAccess");
    check(cuMemcpyHtoD(va, copy, BLK), "evict: copy back");
    printf("queued_after: %u\na_after: %s\n", nqueued(), where(blk[A]));
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    finish(0); /* the context is dead: nothing is freed */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && is(argv[1], "--import")) return import_main(argv[2], atoi(argv[3]));
    if (argc != 2) {
        fprintf(stderr, "usage: swap_orders MODE (see the top of swap_orders.c)\n");
        return 2;
    }
    const char *mode = argv[1];
    start();
    if (!is(mode, "unsafe-unmap")) printf("backing: %s\n", backing(blk[A]));
    if (is(mode, "queued-victim") || is(mode, "unknown-layout") || is(mode, "unrecorded-copy") ||
        is(mode, "unrecorded-set") || is(mode, "unrecorded-copy2d") ||
        is(mode, "unrecorded-set2d") || is(mode, "graph-victim"))
        queued_order(mode);
    else if (is(mode, "queued-fetch"))
        queued_fetch_order();
    else if (is(mode, "writeback-first-touch"))
        first_touch_order();
    else if (is(mode, "writeback-queued") || is(mode, "pending-launch") ||
             is(mode, "pending-unknown"))
        pending_order(mode);
    else if (is(mode, "fork"))
        fork_order();
    else if (is(mode, "export") || is(mode, "export-pending") || is(mode, "mover-export"))
        export_order(!is(mode, "export"), is(mode, "mover-export"));
    else if (is(mode, "free-pending"))
        free_pending_order();
    else if (is(mode, "free-queued"))
        free_queued_order();
    else if (is(mode, "reset") || is(mode, "mover-reset"))
        reset_order(is(mode, "mover-reset"));
    else if (is(mode, "mover-launch") || is(mode, "mover-unknown") || is(mode, "mover-free") ||
             is(mode, "mover-exit") || is(mode, "mover-fork"))
        mover_order(mode);
    else if (is(mode, "ahead-launch") || is(mode, "ahead-fail"))
        ahead_order(is(mode, "ahead-fail"));
    else if (is(mode, "ahead-behind-remap"))
        ahead_behind_remap_order();
    else if (is(mode, "learned-launch") || is(mode, "learned-free") || is(mode, "learned-export"))
        learned_order(mode);
    else if (is(mode, "unsafe-unmap"))
        unsafe_unmap();
    else
        setup_fail("unknown mode", 0);
    return 0;
}
