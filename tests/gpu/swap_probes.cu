/* swap_probes: what host swap's one device operation costs on the driver
 * (docs/swap.md, "On a GPU"), measured without the shim. The shim moves a
 * block with cuMemAdvise(SET_PREFERRED_LOCATION) and cuMemPrefetchAsync on
 * the launch's stream (shim/swap/host_swap.c, cuda_move); these probes say how fast
 * that is for blocks of several sizes, what the advise adds, whether a
 * prefetch on another stream overlaps a kernel, and what the shim's pattern
 * (evict one block, fetch one, launch over it, all on one stream) costs per
 * block. Run by scripts/gpu-check --swap; on the simulator its figures
 * describe the simulator, not a GPU (kernels do not run there).
 *
 *   swap_probes          print "probe NAME: RESULT" lines
 *
 * Probes: swap-move-SIZE (GB/s each way, with and without the advise;
 * the advise's and an already-placed prefetch's cost per call),
 * swap-overlap (a kernel and a prefetch on two streams), swap-pattern (the
 * shim's evict + fetch + launch on one stream, per block),
 * swap-pattern-side (the same with the evictions on a second stream),
 * swap-duplex (an eviction and a fetch on two streams). Every probe
 * uses 256 MiB of managed memory at most. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TOTAL (256u << 20)

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__global__ void touch(float *p, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] += 1.0f;
}

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static CUmemLocation where(int device)
{
    CUmemLocation l;
    l.type = device < 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
    l.id = device < 0 ? 0 : device;
    return l;
}

/* n managed blocks of size bytes (NULL entries where an allocation failed). */
static float **alloc_blocks(int n, size_t size)
{
    float **b = (float **)calloc(n, sizeof *b);
    for (int i = 0; b && i < n; i++)
        if (cudaMallocManaged((void **)&b[i], size, cudaMemAttachGlobal) != cudaSuccess)
            b[i] = NULL;
    return b;
}

static void free_blocks(float **b, int n)
{
    for (int i = 0; b && i < n; i++)
        if (b[i]) cudaFree(b[i]);
    free(b);
}

/* Evicts (device < 0) or fetches block p the shim's way: the advise, then
 * the prefetch on stream s. */
static void move_one(float *p, size_t size, int device, cudaStream_t s)
{
    cuMemAdvise((CUdeviceptr)p, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, where(device));
    cuMemPrefetchAsync((CUdeviceptr)p, size, where(device), 0, (CUstream)s);
}

/* Moves every block to device (-1: the host) on stream s, with the shim's
 * advise first when advise is set; returns the milliseconds until the
 * stream is done, or -1 after printing the first failure. */
static double move_all(float **b, int n, size_t size, int device, int advise, cudaStream_t s)
{
    cudaStreamSynchronize(s);
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        if (advise && cuMemAdvise((CUdeviceptr)b[i], size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                                  where(device)) != CUDA_SUCCESS) {
            printf("probe swap-move: cuMemAdvise failed\n");
            return -1;
        }
        CUresult r = cuMemPrefetchAsync((CUdeviceptr)b[i], size, where(device), 0, (CUstream)s);
        if (r != CUDA_SUCCESS) {
            printf("probe swap-move: cuMemPrefetchAsync failed: %d\n", (int)r);
            return -1;
        }
    }
    cudaStreamSynchronize(s);
    return now_ms() - t0;
}

static void launch_touch(float *p, size_t size, cudaStream_t s)
{
    size_t n = size / sizeof(float);
    unsigned grid = (unsigned)((n + 255) / 256 > 1024 ? 1024 : (n + 255) / 256);
    touch<<<grid, 256, 0, s>>>(p, n);
}

static double gbps(size_t bytes, double ms)
{
    return ms > 0 ? bytes / ms / 1e6 : 0;
}

/* swap-move-SIZE: TOTAL bytes in blocks of size, written on the device
 * (dirty), then moved to the host and back, without and with the advise. */
static void probe_move(size_t size, int device)
{
    int n = (int)(TOTAL / size);
    float **b = alloc_blocks(n, size);
    for (int i = 0; i < n; i++)
        if (!b || !b[i]) {
            printf("probe swap-move-%zuK: cudaMallocManaged failed at block %d\n", size >> 10, i);
            free_blocks(b, n);
            return;
        }
    move_all(b, n, size, device, 0, 0);
    for (int i = 0; i < n; i++)
        launch_touch(b[i], size, 0);
    double d2h = move_all(b, n, size, -1, 0, 0);
    double h2d = move_all(b, n, size, device, 0, 0);
    for (int i = 0; i < n; i++)
        launch_touch(b[i], size, 0);
    double d2h_a = move_all(b, n, size, -1, 1, 0);
    double h2d_a = move_all(b, n, size, device, 1, 0);
    /* Already on the device with the location set: what a call costs that moves nothing. */
    double again = move_all(b, n, size, device, 1, 0);
    double t0 = now_ms();
    for (int i = 0; i < n; i++)
        cuMemAdvise((CUdeviceptr)b[i], size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, where(device));
    double advise = now_ms() - t0;
    printf("probe swap-move-%zuK: %d blocks; to the host %.1f GB/s, to the device %.1f GB/s; "
           "with the advise %.1f and %.1f GB/s; advise alone %.1f us a call; advise + prefetch of "
           "a placed block %.1f us a call\n",
           size >> 10, n, gbps(TOTAL, d2h), gbps(TOTAL, h2d), gbps(TOTAL, d2h_a),
           gbps(TOTAL, h2d_a), 1e3 * advise / n, 1e3 * again / n);
    free_blocks(b, n);
}

/* swap-overlap: a kernel of about 50 ms on one stream, TOTAL bytes
 * fetched to the device on another; milliseconds alone and together. */
static void probe_overlap(int device)
{
    size_t size = 4u << 20;
    int n = (int)(TOTAL / size);
    float **b = alloc_blocks(n, size);
    cudaStream_t k, c;
    cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
    long long cycles = (long long)khz * 50;
    move_all(b, n, size, -1, 1, c);
    double t0 = now_ms();
    spin<<<1, 1, 0, k>>>(cycles);
    cudaStreamSynchronize(k);
    double kernel = now_ms() - t0;
    double fetch = move_all(b, n, size, device, 1, c);
    move_all(b, n, size, -1, 1, c);
    t0 = now_ms();
    spin<<<1, 1, 0, k>>>(cycles);
    move_all(b, n, size, device, 1, c);
    cudaStreamSynchronize(k);
    double both = now_ms() - t0;
    printf("probe swap-overlap: kernel alone %.1f ms, %u MiB fetched alone %.1f ms, both on two "
           "streams %.1f ms\n",
           kernel, TOTAL >> 20, fetch, both);
    free_blocks(b, n);
    cudaStreamDestroy(k);
    cudaStreamDestroy(c);
}

/* The second half of n blocks of size bytes, on the device, moved to the
 * host on s (the pattern probes start from there). */
static void evict_half(float **b, int n, size_t size, cudaStream_t s)
{
    for (int i = n / 2; i < n; i++)
        move_one(b[i], size, -1, s);
    cudaStreamSynchronize(s);
}

/* ms per block of four passes over n blocks of size bytes, half on the
 * device: for each block, evict the one half a cycle ahead, fetch this
 * one and launch over it on s; the eviction on `side` instead (after ev
 * recorded on s) unless side is NULL. */
static double pattern_ms(float **b, int n, size_t size, int device, cudaStream_t s,
                         cudaStream_t side, cudaEvent_t ev)
{
    double t0 = now_ms();
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < n; i++) {
            int out = (i + n / 2) % n;
            if (side) {
                cudaEventRecord(ev, s);
                cudaStreamWaitEvent(side, ev, 0);
            }
            move_one(b[out], size, -1, side ? side : s);
            move_one(b[i], size, device, s);
            launch_touch(b[i], size, s);
        }
    cudaDeviceSynchronize();
    return (now_ms() - t0) / (4 * n);
}

/* swap-pattern: 48 blocks of 4 MiB, half of them on the device; for each
 * block, on one stream: evict the block half a cycle ahead, fetch this one,
 * launch over it (what the shim does when a loop's working set is twice
 * the budget), against the same launches with everything resident. */
static void probe_pattern(int device)
{
    size_t size = 4u << 20;
    int n = 48;
    float **b = alloc_blocks(n, size);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    move_all(b, n, size, device, 1, s);
    double t0 = now_ms();
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < n; i++)
            launch_touch(b[i], size, s);
    cudaStreamSynchronize(s);
    double resident = (now_ms() - t0) / (4 * n);
    evict_half(b, n, size, s);
    double swapped = pattern_ms(b, n, size, device, s, NULL, NULL);
    printf(
        "probe swap-pattern: per 4 MiB block, launch alone %.3f ms; evict one + fetch one + launch "
        "on one stream %.3f ms (%.1f GB/s each way)\n",
        resident, swapped, gbps(size, swapped));
    free_blocks(b, n);
    cudaStreamDestroy(s);
}

/* swap-duplex: 128 MiB evicted to the host on one stream while another
 * 128 MiB is fetched on a second, against each alone. */
static void probe_duplex(int device)
{
    size_t size = 4u << 20;
    int n = (int)(TOTAL / size) / 2;
    float **out = alloc_blocks(n, size), **in = alloc_blocks(n, size);
    cudaStream_t a, c;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
    move_all(out, n, size, device, 1, a);
    for (int i = 0; i < n; i++)
        launch_touch(out[i], size, a);
    move_all(in, n, size, -1, 1, c);
    double evict = move_all(out, n, size, -1, 1, a);
    double fetch = move_all(in, n, size, device, 1, c);
    for (int i = 0; i < n; i++)
        launch_touch(in[i], size, a);
    move_all(in, n, size, -1, 1, a);
    move_all(out, n, size, device, 1, a);
    for (int i = 0; i < n; i++)
        launch_touch(out[i], size, a);
    cudaDeviceSynchronize();
    double t0 = now_ms();
    for (int i = 0; i < n; i++) {
        move_one(out[i], size, -1, a);
        move_one(in[i], size, device, c);
    }
    cudaDeviceSynchronize();
    double both = now_ms() - t0;
    printf(
        "probe swap-duplex: %u MiB to the host alone %.1f ms, %u MiB to the device alone %.1f ms, "
        "both on two streams %.1f ms\n",
        (unsigned)(n * (size >> 20)), evict, (unsigned)(n * (size >> 20)), fetch, both);
    free_blocks(out, n);
    free_blocks(in, n);
    cudaStreamDestroy(a);
    cudaStreamDestroy(c);
}

/* swap-pattern-side: swap-pattern with each eviction on a second stream
 * (after an event on the launch's stream), the fetch and the launch on the
 * launch's stream not waiting for it. */
static void probe_pattern_side(int device)
{
    size_t size = 4u << 20;
    int n = 48;
    float **b = alloc_blocks(n, size);
    cudaStream_t s, side;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    move_all(b, n, size, device, 1, s);
    evict_half(b, n, size, s);
    double swapped = pattern_ms(b, n, size, device, s, side, ev);
    printf(
        "probe swap-pattern-side: per 4 MiB block, evictions on a second stream %.3f ms (%.1f GB/s "
        "each way)\n",
        swapped, gbps(size, swapped));
    free_blocks(b, n);
    cudaEventDestroy(ev);
    cudaStreamDestroy(s);
    cudaStreamDestroy(side);
}

int main(void)
{
    int device = 0;
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(0) != cudaSuccess) {
        printf("probe swap-move: no device\n");
        return 0;
    }
    /* 512 KiB and 1 MiB: the sizes of train's blocks, where the timing model
     * (tests/swap/offline/swap_model.c) otherwise interpolates */
    size_t sizes[] = {256u << 10, 512u << 10, 1u << 20, 2u << 20, 16u << 20};
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++)
        probe_move(sizes[i], device);
    probe_overlap(device);
    probe_pattern(device);
    probe_pattern_side(device);
    probe_duplex(device);
    return 0;
}
