/* api_runtime.c: the e2e operations through the CUDA runtime (libcudart). */
#include "api.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

static int device_in_use;
static int init(int device)
{
    return cudaSetDevice(device_in_use = device);
}
static int attach_thread(void)
{
    return cudaSetDevice(device_in_use);
}
static int alloc(uint64_t *p, size_t n)
{
    void *d = NULL;
    int r = cudaMalloc(&d, n);
    *p = (uint64_t)(uintptr_t)d;
    return r;
}
/* E2E_FREE_ASYNC=1: free with cudaFreeAsync on the default stream. */
static int release(uint64_t p)
{
    const char *async = getenv("E2E_FREE_ASYNC");
    return async && *async == '1' ? cudaFreeAsync((void *)(uintptr_t)p, 0)
                                  : cudaFree((void *)(uintptr_t)p);
}
static int get_handle(unsigned char h[64], uint64_t p)
{
    cudaIpcMemHandle_t handle;
    int r = cudaIpcGetMemHandle(&handle, (void *)(uintptr_t)p);
    memcpy(h, &handle, 64);
    return r;
}
static int open_handle(uint64_t *p, const unsigned char h[64])
{
    cudaIpcMemHandle_t handle;
    void *d = NULL;
    memcpy(&handle, h, 64);
    int r = cudaIpcOpenMemHandle(&d, handle, cudaIpcMemLazyEnablePeerAccess);
    *p = (uint64_t)(uintptr_t)d;
    return r;
}
static int close_handle(uint64_t p)
{
    return cudaIpcCloseMemHandle((void *)(uintptr_t)p);
}
static int to_device(uint64_t d, const void *s, size_t n)
{
    return cudaMemcpy((void *)(uintptr_t)d, s, n, cudaMemcpyHostToDevice);
}
static int to_host(void *d, uint64_t s, size_t n)
{
    return cudaMemcpy(d, (void *)(uintptr_t)s, n, cudaMemcpyDeviceToHost);
}
static int mem_info(size_t *f, size_t *t)
{
    return cudaMemGetInfo(f, t);
}

const struct api api = {"runtime",   init,         attach_thread, alloc,   release, get_handle,
                        open_handle, close_handle, to_device,     to_host, mem_info};
