/* swap_parts: host swap's VMM blocks moved in parts (IPCSHIM_SWAP_PART_BYTES,
 * 8 MiB by default; docs/swap.md "Parts"), recreated on the simulator. X is
 * a cudaMalloc of 20 MiB (parts [0, 8M), [8M, 16M), [16M, 20M)), Y one of
 * 16 MiB; kernels add to their words (the simulator's builtin
 * simcuda_add_u32, which really runs, when its launch completes); a mirror
 * on the host follows every change, and at the end every byte is read back
 * and compared. Work is kept queued by holding stream S2
 * (simcuda_stream_hold). The budget is the test's (test_swap_parts.c).
 *
 *   swap_parts MODE
 *   second-part   X filled part by part (three copies: starts at 0, 8M,
 *                 16M), then a kernel over its second part only
 *   short-extent  p1 of X read first (a copy: resident, clean), p0 and p2
 *                 filled; a kernel from X over all 20 MiB (its learned
 *                 extent, cut by the copy's start at 8M, is p0 only) on S1;
 *                 a kernel over Y evicts p0 and p1; a kernel over p1
 *                 fetches it back
 *   short-extent-queued  the same with the kernel over X queued on held S2
 *                 while Y's kernel evicts; S2 released at the end
 *   copy-span     p1 fetched by a kernel; a copy of 4 MiB from X + 6M (p0
 *                 and p1) to the host queued on held S2; a kernel over W
 *                 (8 MiB) evicts p1; S2 released, the copy's bytes checked
 *   whole         p1 fetched (p0, p2 on the host); cuMemGetAddressRange
 *                 inside p1; cudaIpcGetMemHandle(X) and an importer (this
 *                 program, --import) reads all of X; a kernel over X (now
 *                 pinned on the device, outside the budget); a
 *                 free of X + 8M (refused, as without the shim), of X, and
 *                 a new X
 *   fork          p1 fetched, fork (the child does no CUDA), a kernel over
 *                 p0 in the parent
 *
 * Output, one fact a line: "pN: device|host" (where part N of X is mapped,
 * after the order), mode lines ("range_base: ok|wrong", "range_size: N",
 * "export: CODE", "import_open: CODE", "import_read: ok|wrong",
 * "free_interior: CODE", "free: CODE", "copy_read: ok|wrong", "child:
 * STATUS"), "error: WHAT CODE" for every call that failed, "bad_words: N",
 * "final_malloc: CODE", "errors: N", "saw_700: yes|no". Exit status 0, or 2
 * when the program could not set up. */
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
#include <sys/wait.h>
#include <unistd.h>

#define MIB (1u << 20)
enum { X, Y, W, NBLK };
static const size_t SIZE[NBLK] = {20 * MIB, 16 * MIB, 8 * MIB};

static char *blk[NBLK];
static uint32_t *want[NBLK];
static CUfunction add_fn;
static CUstream s1, s2;
static int errors, saw_700;
static int (*hold)(void *, int);

static bool is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

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

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* Where the bytes at p live: the VMM allocation mapped there. */
static const char *where(const void *p)
{
    CUmemGenericAllocationHandle h;
    if (cuMemRetainAllocationHandle(&h, (void *)p) != CUDA_SUCCESS) return "unknown";
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    CUresult g = cuMemGetAllocationPropertiesFromHandle(&prop, h);
    cuMemRelease(h);
    if (g != CUDA_SUCCESS) return "unknown";
    return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? "device" : "host";
}

static void parts(void)
{
    for (int k = 0; k < 3; k++)
        printf("p%d: %s\n", k, where(blk[X] + (size_t)k * 8 * MIB));
}

/* words [off, off + bytes) of b += value, on stream s; the mirror follows. */
static void add(int b, size_t off, size_t bytes, uint32_t value, CUstream s)
{
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)(blk[b] + off);
    uint64_t count = bytes / 4;
    void *params[] = {&p, &count, &value};
    if (check(cuLaunchKernel(add_fn, (unsigned)(count / 256), 1, 1, 256, 1, 1, 0, s, params, NULL),
              "launch"))
        return;
    for (size_t i = 0; i < count; i++)
        want[b][off / 4 + i] += value;
}

/* [off, off + bytes) of b from the mirror (a copy: its start is learned). */
static void fill(int b, size_t off, size_t bytes)
{
    check(cudaMemcpy(blk[b] + off, (char *)want[b] + off, bytes, cudaMemcpyHostToDevice), "fill");
}

static void start(void)
{
    hold = (int (*)(void *, int))dlsym(RTLD_DEFAULT, "simcuda_stream_hold");
    int r;
    if ((r = cudaFree(0))) setup_fail("cudaFree(0)", r);
    CUmodule mod;
    if ((r = cuModuleLoadData(&mod, SIMCUDA_BUILTIN_PTX))) setup_fail("cuModuleLoadData", r);
    if ((r = cuModuleGetFunction(&add_fn, mod, "simcuda_add_u32")))
        setup_fail("cuModuleGetFunction", r);
    if ((r = cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING)) ||
        (r = cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING)))
        setup_fail("cuStreamCreate", r);
    for (int b = 0; b < NBLK; b++) {
        if (!(want[b] = malloc(SIZE[b]))) setup_fail("malloc", 0);
        for (size_t i = 0; i < SIZE[b] / 4; i++)
            want[b][i] = 0x9e3779b9u * (uint32_t)(i + 1) ^ ((uint32_t)b << 28);
        if ((r = cudaMalloc((void **)&blk[b], SIZE[b]))) setup_fail("cudaMalloc", r);
    }
}

static void hold_s2(int on)
{
    if (!hold || hold(s2, on)) setup_fail("simcuda_stream_hold (a simulator is needed)", 0);
}

/* Reads the blocks in `mask` back and prints the verdict; then whether the
 * context still allocates. */
static void finish(unsigned mask)
{
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    parts();
    long bad = 0;
    for (int b = 0; b < NBLK; b++) {
        if (!(mask & 1u << b)) continue;
        uint32_t *got = malloc(SIZE[b]);
        if (!got || check(cudaMemcpy(got, blk[b], SIZE[b], cudaMemcpyDeviceToHost), "read back")) {
            free(got);
            bad = -1;
            break;
        }
        for (size_t i = 0; i < SIZE[b] / 4; i++)
            bad += got[i] != want[b][i];
        free(got);
    }
    printf("bad_words: %ld\n", bad);
    void *p = NULL;
    int r = cudaMalloc(&p, MIB);
    saw_700 |= r == 700;
    printf("final_malloc: %d\n", r);
    if (!r) cudaFree(p);
    printf("errors: %d\nsaw_700: %s\n", errors, saw_700 ? "yes" : "no");
}

/* X's three parts filled by three copies: starts at 0, 8M and 16M. */
static void fill_parts(void)
{
    fill(X, 0, 8 * MIB);
    fill(X, 8 * MIB, 8 * MIB);
    fill(X, 16 * MIB, 4 * MIB);
}

static void short_extent(bool queued)
{
    /* p1 first touched by a read: resident and clean; its bytes are what it read */
    check(cudaMemcpy((char *)want[X] + 8 * MIB, blk[X] + 8 * MIB, 8 * MIB, cudaMemcpyDeviceToHost),
          "read p1");
    fill(X, 0, 8 * MIB);
    fill(X, 16 * MIB, 4 * MIB);
    if (queued) hold_s2(1);
    add(X, 0, 20 * MIB, 1, queued ? s2 : s1); /* learned extent: [0, 8M) */
    fill(Y, 0, 16 * MIB);
    add(Y, 0, 16 * MIB, 2, s1); /* needs the room of p0 and p1 */
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    if (queued) hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    add(X, 8 * MIB, 8 * MIB, 4, s1); /* p1 back from its write-back */
    finish(1u << X | 1u << Y);
}

static void copy_span(void)
{
    fill_parts();
    add(X, 8 * MIB, 8 * MIB, 1, s1); /* p1 on the device */
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    void *host = NULL; /* pinned: the copy is queued, not done at once */
    if (check(cuMemAllocHost(&host, 4 * MIB), "cuMemAllocHost")) setup_fail("cuMemAllocHost", 0);
    char *out = host;
    hold_s2(1);
    check(cuMemcpyDtoHAsync(out, (CUdeviceptr)(uintptr_t)(blk[X] + 6 * MIB), 4 * MIB, s2),
          "copy from X + 6M");
    fill(W, 0, 8 * MIB);
    add(W, 0, 8 * MIB, 2, s1); /* needs p1's room */
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    hold_s2(0);
    check(cuStreamSynchronize(s2), "cuStreamSynchronize(S2)");
    printf("copy_read: %s\n", memcmp(out, (char *)want[X] + 6 * MIB, 4 * MIB) ? "wrong" : "ok");
    cuMemFreeHost(host);
    finish(1u << X | 1u << W);
}

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
    uint64_t expect = 0;
    if (r || read(sock, &expect, sizeof expect) != (ssize_t)sizeof expect) return r ? 0 : 2;
    char *got = malloc(SIZE[X]);
    r = got ? (int)cudaMemcpy(got, p, SIZE[X], cudaMemcpyDeviceToHost) : -1;
    printf("import_read: %s\n", r ? "error" : fnv(got, SIZE[X]) == expect ? "ok" : "wrong");
    printf("import_close: %d\n", cudaIpcCloseMemHandle(p));
    fflush(stdout);
    char c = 'c';
    return write(sock, &c, 1) == 1 ? 0 : 2;
}

static void whole(void)
{
    fill_parts();
    add(X, 8 * MIB, 8 * MIB, 1, s1);
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    parts();
    CUdeviceptr base = 0;
    size_t size = 0;
    check(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)(blk[X] + 9 * MIB)),
          "cuMemGetAddressRange");
    printf("range_base: %s\nrange_size: %zu\n",
           base == (CUdeviceptr)(uintptr_t)blk[X] ? "ok" : "wrong", size);
    cudaIpcMemHandle_t h;
    int r = cudaIpcGetMemHandle(&h, blk[X]);
    printf("export: %d\n", r);
    if (!r) {
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
            execl("/proc/self/exe", "swap_parts", "--import", hex, fd, (char *)NULL);
            _exit(127);
        }
        close(sv[1]);
        uint64_t expect = fnv(want[X], SIZE[X]);
        char c = 0;
        if (pid < 0 || write(sv[0], &expect, sizeof expect) != (ssize_t)sizeof expect ||
            read(sv[0], &c, 1) != 1)
            check(-1, "the importer");
        int st = -1;
        if (pid > 0) waitpid(pid, &st, 0);
        printf("importer: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    add(X, 0, 20 * MIB, 3, s1);
    finish(1u << X);
    int fi = cudaFree(blk[X] + 8 * MIB);
    cudaGetLastError();
    printf("free_interior: %d\n", fi);
    printf("free: %d\n", check(cudaFree(blk[X]), "cudaFree(X)"));
    check(cudaMalloc((void **)&blk[X], SIZE[X]), "cudaMalloc(X) again");
    fill_parts();
    add(X, 4 * MIB, 8 * MIB, 7, s1);
    finish(1u << X);
}

static void fork_order(void)
{
    fill_parts();
    add(X, 8 * MIB, 8 * MIB, 1, s1);
    check(cuStreamSynchronize(s1), "cuStreamSynchronize(S1)");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(0); /* CUDA does not survive fork: the child touches none */
    int st = -1;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) check(-1, "fork");
    printf("child: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    add(X, 0, 8 * MIB, 2, s1);
    finish(1u << X);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && is(argv[1], "--import")) return import_main(argv[2], atoi(argv[3]));
    if (argc != 2) {
        fprintf(stderr, "usage: swap_parts MODE (see the top of swap_parts.c)\n");
        return 2;
    }
    const char *mode = argv[1];
    start();
    if (is(mode, "second-part")) {
        fill_parts();
        add(X, 8 * MIB, 8 * MIB, 1, s1);
        finish(1u << X);
    } else if (is(mode, "short-extent") || is(mode, "short-extent-queued")) {
        short_extent(is(mode, "short-extent-queued"));
    } else if (is(mode, "copy-span")) {
        copy_span();
    } else if (is(mode, "whole")) {
        whole();
    } else if (is(mode, "fork")) {
        fork_order();
    } else {
        setup_fail("unknown mode", 0);
    }
    return 0;
}
