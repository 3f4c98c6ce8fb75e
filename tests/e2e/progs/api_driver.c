/* api_driver.c: the e2e operations through the driver API, linked directly. */
#include "api.h"

#include <cuda.h>
#include <stdlib.h>
#include <string.h>

static CUcontext ctx;
static int attach_thread(void)
{
    return cuCtxSetCurrent(ctx);
}
static int init(int device)
{
    CUdevice dev;
    int r = cuInit(0);
    if (!r) r = cuDeviceGet(&dev, device);
    if (!r) r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (!r) r = cuCtxSetCurrent(ctx);
    return r;
}
static int alloc(uint64_t *p, size_t n)
{
    CUdeviceptr d = 0;
    int r = cuMemAlloc(&d, n);
    *p = d;
    return r;
}
/* E2E_FREE_ASYNC=1: free with cuMemFreeAsync on the default stream. */
static int release(uint64_t p)
{
    const char *async = getenv("E2E_FREE_ASYNC");
    return async && *async == '1' ? cuMemFreeAsync(p, NULL) : cuMemFree(p);
}
static int get_handle(unsigned char h[64], uint64_t p)
{
    CUipcMemHandle handle;
    int r = cuIpcGetMemHandle(&handle, p);
    memcpy(h, &handle, 64);
    return r;
}
static int open_handle(uint64_t *p, const unsigned char h[64])
{
    CUipcMemHandle handle;
    CUdeviceptr d = 0;
    memcpy(&handle, h, 64);
    int r = cuIpcOpenMemHandle(&d, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    *p = d;
    return r;
}
static int close_handle(uint64_t p)
{
    return cuIpcCloseMemHandle(p);
}
static int to_device(uint64_t d, const void *s, size_t n)
{
    return cuMemcpyHtoD(d, s, n);
}
static int to_host(void *d, uint64_t s, size_t n)
{
    return cuMemcpyDtoH(d, s, n);
}
static int mem_info(size_t *f, size_t *t)
{
    return cuMemGetInfo(f, t);
}

const struct api api = {"driver",    init,         attach_thread, alloc,   release, get_handle,
                        open_handle, close_handle, to_device,     to_host, mem_info};
