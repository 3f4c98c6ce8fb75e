/* api_late.c: the e2e operations through a runtime that the program loads
 * late, the way Python extensions and plugin hosts load it: dlopen of
 * libcudart with RTLD_LOCAL, every function through dlsym on that handle.
 * Before loading it the program makes one first call chosen by E2E_FIRST:
 *   driver   a driver allocation and free (numba and cuda-python start so)
 *   ipcshim  ipcshim_active() and ipcshim_collect(), looked up with dlsym
 *   runtime  nothing: the runtime is the first thing touched
 * The program links the driver (for E2E_FIRST=driver) but not the runtime. */
#include "api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    cudaError_t (*set_device)(int);
    cudaError_t (*malloc)(void **, size_t);
    cudaError_t (*free)(void *);
    cudaError_t (*get_handle)(cudaIpcMemHandle_t *, void *);
    cudaError_t (*open)(void **, cudaIpcMemHandle_t, unsigned int);
    cudaError_t (*close)(void *);
    cudaError_t (*memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);
    cudaError_t (*mem_info)(size_t *, size_t *);
} rt;

/* Prints "first: ..." once per process tree (consumers inherit the mark). */
static int first_call(int device)
{
    const char *first = getenv("E2E_FIRST");
    bool report = !getenv("E2E_FIRST_REPORTED");
    setenv("E2E_FIRST_REPORTED", "1", 1);
    if (!first || !strcmp(first, "runtime")) return 0;
    if (!strcmp(first, "ipcshim")) {
        int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_active");
        int (*collect)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect");
        int answer = active ? active() : -1;
        if (report) printf("first: ipcshim_active %d\n", answer);
        if (collect) collect();
        return 0;
    }
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p = 0;
    int r = cuInit(0);
    if (!r) r = cuDeviceGet(&dev, device);
    if (!r) r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (!r) r = cuCtxSetCurrent(ctx);
    if (!r) r = cuMemAlloc(&p, 4096);
    if (!r) r = cuMemFree(p);
    if (report) printf("first: driver %d\n", r);
    return r;
}

static int init(int device)
{
    int r = first_call(device);
    if (r) return r;
    void *lib = dlopen("libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcudart.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return cudaErrorInitializationError;
    *(void **)&rt.set_device = dlsym(lib, "cudaSetDevice");
    *(void **)&rt.malloc = dlsym(lib, "cudaMalloc");
    *(void **)&rt.free = dlsym(lib, "cudaFree");
    *(void **)&rt.get_handle = dlsym(lib, "cudaIpcGetMemHandle");
    *(void **)&rt.open = dlsym(lib, "cudaIpcOpenMemHandle");
    *(void **)&rt.close = dlsym(lib, "cudaIpcCloseMemHandle");
    *(void **)&rt.memcpy = dlsym(lib, "cudaMemcpy");
    *(void **)&rt.mem_info = dlsym(lib, "cudaMemGetInfo");
    if (!rt.set_device || !rt.malloc || !rt.free || !rt.get_handle || !rt.open || !rt.close ||
        !rt.memcpy || !rt.mem_info)
        return cudaErrorSymbolNotFound;
    return rt.set_device(device);
}
static int device_in_use;
static int attach_thread(void)
{
    return rt.set_device(device_in_use);
}
static int alloc(uint64_t *p, size_t n)
{
    void *d = NULL;
    int r = rt.malloc(&d, n);
    *p = (uint64_t)(uintptr_t)d;
    return r;
}
static int release(uint64_t p)
{
    return rt.free((void *)(uintptr_t)p);
}
static int get_handle(unsigned char h[64], uint64_t p)
{
    cudaIpcMemHandle_t handle;
    int r = rt.get_handle(&handle, (void *)(uintptr_t)p);
    memcpy(h, &handle, 64);
    return r;
}
static int open_handle(uint64_t *p, const unsigned char h[64])
{
    cudaIpcMemHandle_t handle;
    void *d = NULL;
    memcpy(&handle, h, 64);
    int r = rt.open(&d, handle, cudaIpcMemLazyEnablePeerAccess);
    *p = (uint64_t)(uintptr_t)d;
    return r;
}
static int close_handle(uint64_t p)
{
    return rt.close((void *)(uintptr_t)p);
}
static int to_device(uint64_t d, const void *s, size_t n)
{
    return rt.memcpy((void *)(uintptr_t)d, s, n, cudaMemcpyHostToDevice);
}
static int to_host(void *d, uint64_t s, size_t n)
{
    return rt.memcpy(d, (void *)(uintptr_t)s, n, cudaMemcpyDeviceToHost);
}
static int mem_info(size_t *f, size_t *t)
{
    return rt.mem_info(f, t);
}

const struct api api = {"late-runtime", init,         attach_thread, alloc,   release, get_handle,
                        open_handle,    close_handle, to_device,     to_host, mem_info};
