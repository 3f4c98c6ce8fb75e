/* api_resolver.c: the e2e operations through the driver, reached the way the
 * statically linked runtime reaches it: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2, and every other function through that. The program
 * links neither libcuda nor libcudart. */
#include "api.h"

#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

typedef CUresult (*get_proc_t)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

static struct {
    CUresult (*init)(unsigned int);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
    CUresult (*get_handle)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*open)(CUdeviceptr *, CUipcMemHandle, unsigned int);
    CUresult (*close)(CUdeviceptr);
    CUresult (*htod)(CUdeviceptr, const void *, size_t);
    CUresult (*dtoh)(void *, CUdeviceptr, size_t);
    CUresult (*mem_info)(size_t *, size_t *);
} drv;

static int resolve(get_proc_t get, const char *name, void *slot)
{
    CUdriverProcAddressQueryResult status;
    return get(name, (void **)slot, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status);
}

static CUcontext ctx;
static int attach_thread(void)
{
    return drv.set_current(ctx);
}
static int init(int device)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return CUDA_ERROR_NO_DEVICE;
    get_proc_t get = (get_proc_t)dlsym(lib, "cuGetProcAddress_v2");
    if (!get) return CUDA_ERROR_NOT_FOUND;
    int r =
        resolve(get, "cuInit", &drv.init) | resolve(get, "cuDeviceGet", &drv.device_get) |
        resolve(get, "cuDevicePrimaryCtxRetain", &drv.retain) |
        resolve(get, "cuCtxSetCurrent", &drv.set_current) | resolve(get, "cuMemAlloc", &drv.alloc) |
        resolve(get, "cuMemFree", &drv.free) | resolve(get, "cuIpcGetMemHandle", &drv.get_handle) |
        resolve(get, "cuIpcOpenMemHandle", &drv.open) |
        resolve(get, "cuIpcCloseMemHandle", &drv.close) | resolve(get, "cuMemcpyHtoD", &drv.htod) |
        resolve(get, "cuMemcpyDtoH", &drv.dtoh) | resolve(get, "cuMemGetInfo", &drv.mem_info);
    if (r) return CUDA_ERROR_NOT_FOUND;
    CUdevice dev;
    r = drv.init(0);
    if (!r) r = drv.device_get(&dev, device);
    if (!r) r = drv.retain(&ctx, dev);
    if (!r) r = drv.set_current(ctx);
    return r;
}
static int alloc(uint64_t *p, size_t n)
{
    CUdeviceptr d = 0;
    int r = drv.alloc(&d, n);
    *p = d;
    return r;
}
static int release(uint64_t p)
{
    return drv.free(p);
}
static int get_handle(unsigned char h[64], uint64_t p)
{
    CUipcMemHandle handle;
    int r = drv.get_handle(&handle, p);
    memcpy(h, &handle, 64);
    return r;
}
static int open_handle(uint64_t *p, const unsigned char h[64])
{
    CUipcMemHandle handle;
    CUdeviceptr d = 0;
    memcpy(&handle, h, 64);
    int r = drv.open(&d, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    *p = d;
    return r;
}
static int close_handle(uint64_t p)
{
    return drv.close(p);
}
static int to_device(uint64_t d, const void *s, size_t n)
{
    return drv.htod(d, s, n);
}
static int to_host(void *d, uint64_t s, size_t n)
{
    return drv.dtoh(d, s, n);
}
static int mem_info(size_t *f, size_t *t)
{
    return drv.mem_info(f, t);
}

const struct api api = {"resolver",  init,         attach_thread, alloc,   release, get_handle,
                        open_handle, close_handle, to_device,     to_host, mem_info};
