/* pool: a program that allocates the ways real programs do besides
 * cudaMalloc (stream-ordered from the default pool, cudaMalloc3D), tries to
 * export each with legacy IPC, and frees them. It knows nothing of the shim;
 * test_pool.c runs it with and without it and expects the same answers:
 * the shim must neither make a refused export succeed nor make an accepted
 * one fail, and must not keep pool memory back.
 *
 * Output, one fact per line, "NAME: VALUE" (cudaError_t numbers):
 * "async-alloc", "ipc-get-async", "pool-used", "async-free",
 * "free-async-of-malloc", "reclaimed: yes|no BYTES" (all of that given
 * back), then "malloc3d", "ipc-get-3d", "free-3d" and "charged-after-3d:
 * BYTES" (an exported cudaMalloc3D block freed before any open).
 * Exit status 0 when every call ran (whatever it returned), 2 otherwise. */
#include <cuda_runtime_api.h>
#include <stdio.h>

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return f;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 2;
    size_t baseline = free_bytes();
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) return 2;

    void *a = NULL;
    cudaIpcMemHandle_t h;
    printf("async-alloc: %d\n", (int)cudaMallocAsync(&a, 1 << 20, s));
    printf("ipc-get-async: %d\n", (int)cudaIpcGetMemHandle(&h, a));
    cudaGetLastError();
    cudaMemPool_t pool = NULL;
    unsigned long long used = 0;
    if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess)
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
    printf("pool-used: %llu\n", used);
    printf("async-free: %d\n", (int)cudaFreeAsync(a, s));
    cudaStreamSynchronize(s);

    void *m = NULL;
    cudaMalloc(&m, 4096);
    printf("free-async-of-malloc: %d\n", (int)cudaFreeAsync(m, s));
    cudaStreamSynchronize(s);
    size_t now = free_bytes();
    if (now >= baseline)
        printf("reclaimed: yes\n");
    else
        printf("reclaimed: no %zu\n", baseline - now);

    /* Exported, then freed before anybody opened it: under the shim the
     * block waits for its importer (the hand-off), so it stays charged. */
    struct cudaPitchedPtr pp;
    printf("malloc3d: %d\n", (int)cudaMalloc3D(&pp, (struct cudaExtent){1000, 8, 4}));
    printf("ipc-get-3d: %d\n", (int)cudaIpcGetMemHandle(&h, pp.ptr));
    printf("free-3d: %d\n", (int)cudaFree(pp.ptr));
    now = free_bytes();
    printf("charged-after-3d: %zu\n", now < baseline ? baseline - now : 0);
    cudaStreamDestroy(s);
    return 0;
}
