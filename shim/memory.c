/* memory: the entry points that carry logic — allocation, free and IPC —
 * for both doors. Each operation is written once (op_*) against core's
 * decisions (core/ipc.h) and a door's real call; the do_<name> functions only
 * adapt arguments and error codes. When tracking is off, or core says PASS,
 * the real function is called exactly as without the shim. */
#include "shim.h"
#include "ipc.h"
#include "log.h"
#include "options.h"
#include "swap.h"

#include <errno.h>
#include <string.h>

static bool tracking;

/* The error codes of one door. */
struct door_codes {
    int ok, invalid, out_of_memory, missing;
};
static const struct door_codes runtime_codes = {cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                                                cudaErrorInitializationError};
static const struct door_codes driver_codes = {CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
                                               CUDA_ERROR_NOT_INITIALIZED};

/* device_ops.free_block: a deferred free, in the block's own context. */
static int free_block(uint64_t base, int device, uint64_t ctx)
{
    (void)device;
    if (!real_cuMemFree_v2) return -ENOSYS;
    bool pushed = ctx && real_cuCtxPushCurrent_v2 && real_cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS;
    CUresult r = real_cuMemFree_v2((CUdeviceptr)base);
    CUcontext previous;
    if (pushed) real_cuCtxPopCurrent_v2(&previous);
    if (r != CUDA_SUCCESS) LOG_RATE(LOG_WARN, "deferred free of %#llx failed: CUresult %d", (unsigned long long)base, r);
    return r == CUDA_SUCCESS ? 0 : -EINVAL;
}

static const struct device_ops device_ops = {.free_block = free_block};

void memory_init(void)
{
    const struct options *o = options_get();
    tracking = !o->disable && real_cuMemFree_v2 && real_cuPointerGetAttributes && real_cuCtxGetCurrent;
    if (!o->disable && !tracking) LOG_ONCE(LOG_WARN, "driver functions missing; passing every call through");
    if (tracking) ipc_init(&device_ops);
    swap_init();
}

bool shim_tracking(void) { return tracking; }

/* The context an import is cached under: the current one, after making
 * sure the runtime has made its primary context current (runtime door). */
uint64_t shim_current_context(bool runtime_door)
{
    CUcontext ctx = NULL;
    if (!real_cuCtxGetCurrent) return 0;
    real_cuCtxGetCurrent(&ctx);
    if (!ctx && runtime_door && real_cudaFree) {
        real_cudaFree(NULL); /* the runtime's documented way to initialise its context */
        real_cuCtxGetCurrent(&ctx);
    }
    return (uint64_t)ctx;
}

static void synchronize_context(uint64_t ctx)
{
    if (!options_get()->close_sync || !ctx || !real_cuCtxSynchronize) return;
    CUcontext previous = NULL;
    real_cuCtxGetCurrent(&previous);
    if ((uint64_t)previous == ctx) {
        real_cuCtxSynchronize();
    } else if (real_cuCtxPushCurrent_v2 && real_cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS) {
        real_cuCtxSynchronize();
        real_cuCtxPopCurrent_v2(&previous);
    }
}

/* After an allocation failed for lack of memory: collect limbo (expiring
 * old hand-offs early) and say whether a retry may now succeed. */
static bool collect_for_retry_slow(const struct door_codes *codes)
{
    if (!tracking || ipc_collect_pressure() <= 0) return false;
    if (codes == &runtime_codes && real_cudaGetLastError) real_cudaGetLastError(); /* forget the failure */
    return true;
}
static inline bool collect_for_retry(int result, const struct door_codes *codes)
{
    return result == codes->out_of_memory && collect_for_retry_slow(codes);
}

/* Free: limbo, untracked, or a tracked block nothing holds. */
static int op_free(uint64_t ptr, int (*real_free)(uint64_t), const struct door_codes *codes)
{
    if (!tracking || !ptr) return real_free(ptr);
    int decision = ipc_free_begin(ptr);
    if (decision == IPC_DONE) return codes->ok;
    if (decision < 0) return codes->invalid;
    int result = real_free(ptr);
    if (decision == IPC_REAL) ipc_free_finish(ptr);
    return result;
}

/* Export: the real get-handle, then the block is recorded by its base. */
static void note_export(const void *handle, uint64_t ptr)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CUcontext ctx = NULL;
    int device = -1;
    CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                  CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *into[] = {&base, &size, &ctx, &device};
    if (real_cuPointerGetAttributes(4, what, into, (CUdeviceptr)ptr) != CUDA_SUCCESS || !base || !size) {
        LOG_RATE(LOG_WARN, "cannot find the allocation of exported pointer %#llx; left untracked",
                 (unsigned long long)ptr);
        return;
    }
    struct ipc_handle h;
    memcpy(h.bytes, handle, sizeof h.bytes);
    if (ipc_export(&h, base, size, device, (uint64_t)ctx) == 0) api_at_first_use();
}

/* Open: cached, own export, a new lease around the real open, or untracked. */
static int op_open(const void *handle, unsigned int flags, uint64_t *out, bool runtime_door,
                   int (*real_open)(uint64_t *, const void *, unsigned int), const struct door_codes *codes)
{
    if (!tracking || !out) return real_open(out, handle, flags);
    struct ipc_handle h;
    struct ipc_open ticket;
    uint64_t ptr = 0;
    memcpy(h.bytes, handle, sizeof h.bytes);
    int decision = ipc_open_begin(&h, shim_current_context(runtime_door), &ticket, &ptr);
    if (decision == IPC_DONE) {
        *out = ptr;
        return codes->ok;
    }
    if (decision == -ENOENT || decision == -EOWNERDEAD) {
        if (decision == -ENOENT) LOG_RATE(LOG_WARN, "open refused: the exporter freed this block");
        else LOG_RATE(LOG_WARN, "open refused: the exporter of this block died");
        return codes->invalid;
    }
    int result = real_open(out, handle, flags);
    if (decision == IPC_REAL) {
        if (result == codes->ok) ipc_open_commit(&ticket, *out), api_at_first_open();
        else ipc_open_abort(&ticket);
    }
    return result;
}

/* Close: only the last local close reaches the driver, after a sync. */
static int op_close(uint64_t ptr, int (*real_close)(uint64_t), const struct door_codes *codes)
{
    if (!tracking) return real_close(ptr);
    struct ipc_close ticket;
    int decision = ipc_close_begin(ptr, &ticket);
    if (decision == IPC_DONE) return codes->ok;
    if (decision != IPC_REAL) return real_close(ptr);
    synchronize_context(ticket.ctx);
    int result = real_close(ptr);
    ipc_close_finish(&ticket);
    return result;
}

/* Adapters from each door's real function to the op_* shapes. */
static int runtime_free(uint64_t p) { return real_cudaFree ? (int)real_cudaFree((void *)p) : runtime_codes.missing; }
static int driver_free(uint64_t p) { return real_cuMemFree_v2 ? (int)real_cuMemFree_v2(p) : driver_codes.missing; }
static int runtime_close(uint64_t p)
{
    return real_cudaIpcCloseMemHandle ? (int)real_cudaIpcCloseMemHandle((void *)p) : runtime_codes.missing;
}
static int driver_close(uint64_t p)
{
    return real_cuIpcCloseMemHandle ? (int)real_cuIpcCloseMemHandle(p) : driver_codes.missing;
}
static int runtime_open(uint64_t *out, const void *handle, unsigned int flags)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    if (!real_cudaIpcOpenMemHandle) return runtime_codes.missing;
    memcpy(&h, handle, sizeof h);
    int r = real_cudaIpcOpenMemHandle(&p, h, flags);
    if (out) *out = (uint64_t)p;
    return r;
}
static int driver_open_v1(uint64_t *out, const void *handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!real_cuIpcOpenMemHandle) return driver_codes.missing;
    memcpy(&h, handle, sizeof h);
    int r = real_cuIpcOpenMemHandle(&p, h, flags);
    if (out) *out = p;
    return r;
}
static int driver_open_v2(uint64_t *out, const void *handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!real_cuIpcOpenMemHandle_v2) return driver_codes.missing;
    memcpy(&h, handle, sizeof h);
    int r = real_cuIpcOpenMemHandle_v2(&p, h, flags);
    if (out) *out = p;
    return r;
}

/* Runtime door */

cudaError_t do_cudaMalloc(void **devPtr, size_t size)
{
    if (!real_cudaMalloc) return cudaErrorInitializationError;
    if (swap_wants(size) && swap_alloc_runtime(devPtr, size)) return cudaSuccess;
    cudaError_t r = real_cudaMalloc(devPtr, size);
    if (collect_for_retry(r, &runtime_codes)) r = real_cudaMalloc(devPtr, size);
    return r;
}

cudaError_t do_cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    if (!real_cudaMallocPitch) return cudaErrorInitializationError;
    cudaError_t r = real_cudaMallocPitch(devPtr, pitch, width, height);
    if (collect_for_retry(r, &runtime_codes)) r = real_cudaMallocPitch(devPtr, pitch, width, height);
    return r;
}

cudaError_t do_cudaFree(void *devPtr)
{
    swap_on_free((uint64_t)devPtr);
    return op_free((uint64_t)devPtr, runtime_free, &runtime_codes);
}

cudaError_t do_cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    if (!real_cudaIpcGetMemHandle) return cudaErrorInitializationError;
    if (swap_refuses_export((uint64_t)devPtr, "cudaIpcGetMemHandle")) return cudaErrorInvalidValue;
    cudaError_t r = real_cudaIpcGetMemHandle(handle, devPtr);
    if (r == cudaSuccess && tracking) note_export(handle, (uint64_t)devPtr);
    return r;
}

cudaError_t do_cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    uint64_t p = 0;
    cudaError_t r = op_open(&handle, flags, devPtr ? &p : NULL, true, runtime_open, &runtime_codes);
    if (devPtr && r == cudaSuccess) *devPtr = (void *)p;
    return r;
}

cudaError_t do_cudaIpcCloseMemHandle(void *devPtr)
{
    return op_close((uint64_t)devPtr, runtime_close, &runtime_codes);
}

/* Driver door */

CUresult do_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!real_cuMemAlloc_v2) return CUDA_ERROR_NOT_INITIALIZED;
    if (swap_wants(bytesize) && swap_alloc_driver(dptr, bytesize)) return CUDA_SUCCESS;
    CUresult r = real_cuMemAlloc_v2(dptr, bytesize);
    if (collect_for_retry(r, &driver_codes)) r = real_cuMemAlloc_v2(dptr, bytesize);
    return r;
}

CUresult do_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                               unsigned int ElementSizeBytes)
{
    if (!real_cuMemAllocPitch_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (collect_for_retry(r, &driver_codes))
        r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    return r;
}

CUresult do_cuMemFree_v2(CUdeviceptr dptr)
{
    swap_on_free(dptr);
    return op_free(dptr, driver_free, &driver_codes);
}

CUresult do_cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (!real_cuIpcGetMemHandle) return CUDA_ERROR_NOT_INITIALIZED;
    if (swap_refuses_export(dptr, "cuIpcGetMemHandle")) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = real_cuIpcGetMemHandle(pHandle, dptr);
    if (r == CUDA_SUCCESS && tracking) note_export(pHandle, dptr);
    return r;
}

static CUresult driver_open(CUdeviceptr *pdptr, CUipcMemHandle *handle, unsigned int flags,
                            int (*real_open)(uint64_t *, const void *, unsigned int))
{
    uint64_t p = 0;
    CUresult r = op_open(handle, flags, pdptr ? &p : NULL, false, real_open, &driver_codes);
    if (pdptr && r == CUDA_SUCCESS) *pdptr = p;
    return r;
}

CUresult do_cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return driver_open(pdptr, &handle, Flags, driver_open_v1);
}

CUresult do_cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return driver_open(pdptr, &handle, Flags, driver_open_v2);
}

CUresult do_cuIpcCloseMemHandle(CUdeviceptr dptr) { return op_close(dptr, driver_close, &driver_codes); }
