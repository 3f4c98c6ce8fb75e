/* swap_vmm: host swap's VMM engine end to end (test_swap.c), through the
 * driver door only. N blocks of SIZE bytes (2 MiB and more: VMM-backed
 * under the shim) are filled with known bytes; each iteration launches a
 * kernel per block (it and the next one as parameters: a hand-written PTX
 * kernel that does nothing, so the bytes are the copies' on a GPU and on
 * the simulator alike) and overwrites one word of the block; at the end
 * every block is read back and hashed. The program knows nothing of the
 * shim: the same checksum with and without it is the test.
 *
 *   swap_vmm [--blocks N] [--size BYTES] [--iters N] [--hold] [--fork]
 *            [--threads T] [--unknown]
 *            [--end free|reset|free-reset|exit]
 *
 * --threads T: T threads run the iterations at once, each on a stream of
 * its own, writing words of their own (word index = thread mod T), so the
 * bytes do not depend on how they interleave.
 * --hold (simulator only): the launch stream is held (simcuda_stream_hold),
 * so every kernel stays queued until something waits for it: a remap
 * under one faults the context (every later call returns 700).
 * --unknown (simulator only): before anything else, kernel `peek` is
 * launched on block 0 on a second, held stream (run it with
 * SIMCUDA_FAIL_PARAM_INFO=1: the shim cannot read peek's layout, so the
 * launch may touch any block), and stays queued until the end.
 * --fork: after the first iteration a child is forked that exits at once;
 * the parent goes on. --end: free every block (default), reset the primary
 * context with the blocks allocated (cuDevicePrimaryCtxReset), free them
 * then reset, or exit with them allocated; after a reset the new context
 * runs a shorter workload of its own ("checksum_after_reset HEX").
 *
 * Output: "checksum HEX", "loop_ms MS" (the iterations, fills and
 * read-backs excluded: on a GPU, where the kernels take no time, the cost
 * of the moves), and when the simulator's counters are found
 * (dlsym): "device_used BYTES" (device bytes in use before the end: the
 * shim's chunk pool), "peak_device_used BYTES" (the most seen after any
 * launch), "launch_stream_waits N" (the cuStreamWaitEvent calls that made
 * the launch stream wait: the shim's, for its fetch copies). Exit status 0,
 * or the failing step's number. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simcuda.h"

static const char ptx[] = ".version 8.0\n.target sm_75\n.address_size 64\n\n"
                          ".visible .entry touch2(\n"
                          "\t.param .u64 touch2_param_0,\n"
                          "\t.param .u64 touch2_param_1\n"
                          ")\n{\n\tret;\n}\n"
                          ".visible .entry peek(\n"
                          "\t.param .u64 peek_param_0\n"
                          ")\n{\n\tret;\n}\n";

#define CHECK(step, call)                                                                          \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "step %d: %s failed with %d\n", step, #call, (int)r_);                 \
            return step;                                                                           \
        }                                                                                          \
    } while (0)

typedef void (*stats_fn)(struct simcuda_stats *);
typedef int (*hold_fn)(void *, int);
typedef unsigned long (*waits_fn)(void *);

static void *sim_symbol(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

static uint64_t device_used(stats_fn stats)
{
    struct simcuda_stats s;
    memset(&s, 0, sizeof s);
    stats(&s);
    return s.used[0];
}

/* After a context reset: the module again, nblocks new blocks filled,
 * launched over twice and read back; their hash into *out. 0 or a step. */
static int again(int nblocks, size_t size, uint64_t *out)
{
    CUmodule mod;
    CUfunction touch;
    CUdeviceptr block[64];
    size_t words = size / sizeof(uint32_t);
    uint32_t *host = malloc(size);
    if (!host) return 30;
    CHECK(31, cuModuleLoadData(&mod, ptx));
    CHECK(32, cuModuleGetFunction(&touch, mod, "touch2"));
    for (int b = 0; b < nblocks; b++) {
        CHECK(33, cuMemAlloc(&block[b], size));
        for (size_t w = 0; w < words; w++)
            host[w] = (uint32_t)(b * 0x9e3779b9u) ^ (uint32_t)w;
        CHECK(34, cuMemcpyHtoD(block[b], host, size));
    }
    for (int it = 0; it < 2; it++)
        for (int b = 0; b < nblocks; b++) {
            void *params[] = {&block[b], &block[(b + 1) % nblocks]};
            CHECK(35, cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        }
    uint64_t h = 0xcbf29ce484222325ull;
    for (int b = 0; b < nblocks; b++) {
        CHECK(36, cuMemcpyDtoH(host, block[b], size));
        for (size_t w = 0; w < words; w++)
            h = (h ^ host[w]) * 0x100000001b3ull;
        CHECK(37, cuMemFree(block[b]));
    }
    free(host);
    *out = h;
    return 0;
}

struct work {
    CUcontext ctx;
    CUfunction touch;
    CUdeviceptr *block;
    int nblocks, iters, thread, threads;
    size_t words;
    CUresult result;
};

/* One thread's iterations, on a stream of its own. */
static void *run_thread(void *arg)
{
    struct work *w = arg;
    CUstream stream;
    w->result = cuCtxSetCurrent(w->ctx);
    if (w->result == CUDA_SUCCESS) w->result = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
    size_t slots = w->words / (size_t)w->threads;
    for (int it = 0; it < w->iters && w->result == CUDA_SUCCESS; it++)
        for (int b = 0; b < w->nblocks && w->result == CUDA_SUCCESS; b++) {
            void *params[] = {&w->block[b], &w->block[(b + 1) % w->nblocks]};
            w->result = cuLaunchKernel(w->touch, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL);
            uint32_t word = (uint32_t)(it * 1000 + b + w->thread * 1000000);
            size_t at = ((size_t)it * 4099 + (size_t)b * 131) % slots * (size_t)w->threads +
                        (size_t)w->thread;
            if (w->result == CUDA_SUCCESS)
                w->result = cuMemcpyHtoD(w->block[b] + at * sizeof word, &word, sizeof word);
        }
    if (w->result == CUDA_SUCCESS) w->result = cuStreamSynchronize(stream);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 0;
    int nblocks = 6, iters = 4;
    size_t size = 4u << 20;
    int hold = 0, do_fork = 0, unknown = 0;
    const char *end = "free", *argv_end;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--blocks") && i + 1 < argc)
            nblocks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = strtoull(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hold"))
            hold = 1;
        else if (!strcmp(argv[i], "--unknown"))
            unknown = 1;
        else if (!strcmp(argv[i], "--fork"))
            do_fork = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--end") && i + 1 < argc)
            end = argv[++i];
        else {
            fprintf(stderr, "usage: swap_vmm [--blocks N] [--size BYTES] [--iters N] [--hold] "
                            "[--fork] [--end free|reset|exit]\n");
            return 64;
        }
    }
    argv_end = end;
    if (nblocks < 2 || nblocks > 64 || size < 64 || iters < 0 || threads < 0 || threads > 16)
        return 64;

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction touch;
    CUstream stream;
    CHECK(1, cuInit(0));
    CHECK(2, cuDeviceGet(&dev, 0));
    CHECK(3, cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(4, cuCtxSetCurrent(ctx));
    CHECK(5, cuModuleLoadData(&mod, ptx));
    CHECK(6, cuModuleGetFunction(&touch, mod, "touch2"));
    CHECK(7, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    stats_fn stats = (stats_fn)sim_symbol("simcuda_stats");
    hold_fn hold_stream = (hold_fn)sim_symbol("simcuda_stream_hold");
    if (hold && (!hold_stream || hold_stream(stream, 1))) {
        fprintf(stderr, "--hold needs the simulator\n");
        return 8;
    }

    CUdeviceptr block[64];
    size_t words = size / sizeof(uint32_t);
    uint32_t *host = malloc(size);
    if (!host) return 9;
    for (int b = 0; b < nblocks; b++) {
        CHECK(10, cuMemAlloc(&block[b], size));
        for (size_t w = 0; w < words; w++)
            host[w] = (uint32_t)(b * 0x01000193u) ^ (uint32_t)(w * 2654435761u);
        CHECK(11, cuMemcpyHtoD(block[b], host, size));
    }
    uint64_t peak = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CUstream second = NULL;
    if (unknown) {
        CUfunction peek;
        CHECK(40, cuModuleGetFunction(&peek, mod, "peek"));
        CHECK(41, cuStreamCreate(&second, CU_STREAM_NON_BLOCKING));
        if (!hold_stream || hold_stream(second, 1)) return 42;
        void *params[] = {&block[0]};
        CHECK(43, cuLaunchKernel(peek, 1, 1, 1, 32, 1, 1, 0, second, params, NULL));
    }
    if (threads) {
        pthread_t tid[16];
        struct work w[16];
        for (int t = 0; t < threads; t++) {
            w[t] = (struct work){.ctx = ctx,
                                 .touch = touch,
                                 .block = block,
                                 .nblocks = nblocks,
                                 .iters = iters,
                                 .thread = t,
                                 .threads = threads,
                                 .words = words};
            if (pthread_create(&tid[t], NULL, run_thread, &w[t])) return 25;
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            CHECK(26, w[t].result);
        }
        iters = 0; /* done */
    }
    for (int it = 0; it < iters; it++) {
        for (int b = 0; b < nblocks; b++) {
            void *params[] = {&block[b], &block[(b + 1) % nblocks]};
            CHECK(12, cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL));
            uint32_t word = (uint32_t)(it * 1000 + b);
            size_t at = ((size_t)it * 4099 + (size_t)b * 131) % words;
            CHECK(13, cuMemcpyHtoD(block[b] + at * sizeof word, &word, sizeof word));
            if (stats) {
                uint64_t u = device_used(stats);
                if (u > peak) peak = u;
            }
        }
        if (it == 0 && do_fork) {
            pid_t pid = fork();
            if (pid == 0) _exit(0);
            int st = 0;
            if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 14;
        }
    }
    CHECK(15, cuStreamSynchronize(stream));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (hold) hold_stream(stream, 0);
    if (second) hold_stream(second, 0);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int b = 0; b < nblocks; b++) {
        CHECK(16, cuMemcpyDtoH(host, block[b], size));
        for (size_t w = 0; w < words; w++)
            h = (h ^ host[w]) * 0x100000001b3ull;
    }
    printf("checksum %016llx\n", (unsigned long long)h);
    printf("loop_ms %.3f\n",
           (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    if (stats) {
        printf("device_used %llu\n", (unsigned long long)device_used(stats));
        printf("peak_device_used %llu\n", (unsigned long long)peak);
    }
    waits_fn waits = (waits_fn)sim_symbol("simcuda_stream_waits");
    if (waits) printf("launch_stream_waits %lu\n", waits(stream));
    fflush(stdout);
    free(host);
    if (!strcmp(end, "free-reset")) { /* every block freed, then the context reset */
        for (int b = 0; b < nblocks; b++)
            CHECK(27, cuMemFree(block[b]));
        end = "reset";
    }
    if (!strcmp(end, "free")) {
        for (int b = 0; b < nblocks; b++)
            CHECK(17, cuMemFree(block[b]));
        CHECK(18, cuMemAlloc(&block[0], size)); /* the context still works */
        CHECK(19, cuMemFree(block[0]));
    } else if (!strcmp(end, "reset")) {
        CHECK(20, cuDevicePrimaryCtxReset(dev));
        CHECK(21, cuDevicePrimaryCtxRetain(&ctx, dev)); /* a new context works */
        CHECK(22, cuCtxSetCurrent(ctx));
        uint64_t h2 = 0;
        int step = again(nblocks, size, &h2);
        if (step) return step;
        printf("checksum_after_reset %016llx\n", (unsigned long long)h2);
    }
    printf("end %s ok\n", argv_end);
    return 0;
}
