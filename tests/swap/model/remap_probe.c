/* remap_probe: what one remap costs, and whether remaps run side by side,
 * on the real driver (no shim): the two inputs of the timing model's
 * schedule that are not measured (docs/swap.md, "The timing model").
 * Each of T threads owns a reserved range of S bytes, one device-located
 * and one host-located physical allocation (HOST_NUMA on the device's
 * node, else HOST), and re-points its range from one to the other N times
 * (cuMemUnmap, cuMemMap, cuMemSetAccess), as the engine does for every
 * move; no copy, no kernel. For S of 2, 8, 20 and 64 MiB and T of 1, 2
 * and 4 it prints the mean cost of each call per direction and the
 * remaps per second of all threads together against one thread's.
 *
 * Build and run on a GPU (about 10 s):
 *   cc -O2 -I/usr/local/cuda/include tests/swap/model/remap_probe.c \
 *      -L/usr/local/cuda/lib64/stubs -lcuda -lpthread -o /tmp/remap_probe
 *   /tmp/remap_probe
 * On the simulator (LD_LIBRARY_PATH=build/tests/simcuda) it runs too, as a
 * check of the calls; its times mean nothing there. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB (1024ULL * 1024ULL)
#define THREADS_MAX 4

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int check(CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return 0;
    const char *s = NULL;
    cuGetErrorName(r, &s);
    fprintf(stderr, "remap_probe: %s -> %d %s\n", what, (int)r, s ? s : "?");
    return 1;
}

static CUmemAllocationProp prop_of(CUmemLocationType t, int id)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = t;
    p.location.id = id;
    return p;
}

static CUresult set_access(CUdeviceptr va, size_t sz)
{
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = 0;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return cuMemSetAccess(va, sz, &a, 1);
}

struct worker {
    CUcontext ctx;
    size_t size;
    int n;
    CUdeviceptr va;
    CUmemGenericAllocationHandle dev, host;
    pthread_barrier_t *start;
    /* seconds in each call, [0] to the host, [1] to the device */
    double unmap[2], map[2], access[2];
    double began, ended;
    int failed;
};

/* One thread's remaps: its range starts on the device. */
static void *work(void *arg)
{
    struct worker *w = arg;
    if (check(cuCtxSetCurrent(w->ctx), "cuCtxSetCurrent")) w->failed = 1;
    pthread_barrier_wait(w->start);
    w->began = now();
    for (int i = 0; i < w->n && !w->failed; i++) {
        int to_dev = i % 2; /* 0: device -> host first */
        double t0 = now();
        w->failed |= check(cuMemUnmap(w->va, w->size), "cuMemUnmap");
        double t1 = now();
        w->failed |= check(cuMemMap(w->va, w->size, 0, to_dev ? w->dev : w->host, 0), "cuMemMap");
        double t2 = now();
        w->failed |= check(set_access(w->va, w->size), "cuMemSetAccess");
        double t3 = now();
        w->unmap[to_dev] += t1 - t0;
        w->map[to_dev] += t2 - t1;
        w->access[to_dev] += t3 - t2;
    }
    w->ended = now();
    return NULL;
}

/* T threads of n remaps of size bytes; *rate: remaps per second of all.
 * 0, or 1 after printing why. */
static int run(CUcontext ctx, size_t size, int threads, int n, double *rate)
{
    struct worker w[THREADS_MAX];
    pthread_t tid[THREADS_MAX];
    pthread_barrier_t start;
    int node = -1, rc = 0;
    cuDeviceGetAttribute(&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0);
    CUmemAllocationProp pd = prop_of(CU_MEM_LOCATION_TYPE_DEVICE, 0);
    CUmemAllocationProp ph = prop_of(CU_MEM_LOCATION_TYPE_HOST_NUMA, node < 0 ? 0 : node);
    memset(w, 0, sizeof w);
    for (int t = 0; t < threads && !rc; t++) {
        w[t] = (struct worker){.ctx = ctx, .size = size, .n = n, .start = &start};
        rc |= check(cuMemCreate(&w[t].dev, size, &pd, 0), "cuMemCreate device");
        if (cuMemCreate(&w[t].host, size, &ph, 0) != CUDA_SUCCESS) {
            ph = prop_of(CU_MEM_LOCATION_TYPE_HOST, 0);
            rc |= check(cuMemCreate(&w[t].host, size, &ph, 0), "cuMemCreate host");
        }
        rc |= check(cuMemAddressReserve(&w[t].va, size, 0, 0, 0), "cuMemAddressReserve");
        rc |= check(cuMemMap(w[t].va, size, 0, w[t].dev, 0), "cuMemMap");
        rc |= check(set_access(w[t].va, size), "cuMemSetAccess");
    }
    if (rc) return 1;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, work, &w[t]);
    pthread_barrier_wait(&start);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    double began = w[0].began, ended = w[0].ended;
    for (int t = 1; t < threads; t++) {
        if (w[t].began < began) began = w[t].began;
        if (w[t].ended > ended) ended = w[t].ended;
    }
    double wall = ended - began;
    double sum[3][2] = {{0}};
    for (int t = 0; t < threads; t++) {
        rc |= w[t].failed;
        for (int d = 0; d < 2; d++) {
            sum[0][d] += w[t].unmap[d];
            sum[1][d] += w[t].map[d];
            sum[2][d] += w[t].access[d];
        }
        cuMemUnmap(w[t].va, size);
        cuMemAddressFree(w[t].va, size);
        cuMemRelease(w[t].dev);
        cuMemRelease(w[t].host);
    }
    if (rc) return 1;
    double per = (double)threads * n / 2.0 * 1e-6; /* remaps per direction, so sums / per in us */
    *rate = (double)threads * n / wall;
    printf("PROBE remap %3zu MiB x %d threads: to host unmap %.1f map %.1f access %.1f us, "
           "to device unmap %.1f map %.1f access %.1f us; %d remaps in %.1f ms: %.0f remaps/s\n",
           (size_t)(size / MIB), threads, sum[0][0] / per, sum[1][0] / per, sum[2][0] / per,
           sum[0][1] / per, sum[1][1] / per, sum[2][1] / per, threads * n, wall * 1e3, *rate);
    return 0;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (check(cuInit(0), "cuInit") || check(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
        check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain") ||
        check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent"))
        return 1;
    static const size_t sizes[] = {2 * MIB, 8 * MIB, 20 * MIB, 64 * MIB};
    static const int threads[] = {1, 2, 4};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s] <= 8 * MIB ? 200 : 60; /* even: each range ends on the device */
        double one = 0;
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            double rate = 0;
            if (run(ctx, sizes[s], threads[t], n, &rate)) return 1;
            if (t == 0)
                one = rate;
            else
                printf("PROBE remap %3zu MiB x %d threads: %.2fx one thread's remaps/s\n",
                       (size_t)(sizes[s] / MIB), threads[t], rate / one);
        }
    }
    return 0;
}
