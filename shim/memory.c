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
#include <stdlib.h>
#include <string.h>

static bool tracking;

/* The error codes of one door. */
struct door_codes {
    int ok, invalid, out_of_memory, missing;
};
static const struct door_codes runtime_codes = {
    cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorInitializationError};
static const struct door_codes driver_codes = {
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_INITIALIZED};

static uint64_t pointer_attribute(uint64_t ptr, CUpointer_attribute what);

/* device_ops.free_block: a deferred free, in the block's own context, of
 * the allocation exported from base if it still exists. Trap:
 * cudaDeviceReset, cuDevicePrimaryCtxReset and cuCtxDestroy free every
 * allocation of a context, limbo included, without a free call; the next
 * allocation may get the same address (and the context the same handle
 * value). So the driver's identity of the allocation (BUFFER_ID, never
 * reused in a process), noted at export (note_export), is checked first,
 * so that a deferred free never frees that new allocation. */
static int free_block(uint64_t base, int device, uint64_t ctx, uint64_t identity)
{
    (void)device;
    if (!REAL(cuMemFree_v2)) return -ENOSYS;
    bool pushed =
        ctx && real_cuCtxPushCurrent_v2 && real_cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    if (identity && pointer_attribute(base, CU_POINTER_ATTRIBUTE_BUFFER_ID) != identity)
        LOG_ONCE(
            LOG_INFO,
            "deferred free of %#llx skipped: its context was reset or destroyed, which freed it "
            "already (the address may now belong to another allocation)",
            (unsigned long long)base);
    else
        r = real_cuMemFree_v2((CUdeviceptr)base);
    CUcontext previous;
    if (pushed) real_cuCtxPopCurrent_v2(&previous);
    if (r != CUDA_SUCCESS)
        LOG_RATE(LOG_WARN, "deferred free of %#llx failed: CUresult %d", (unsigned long long)base,
                 r);
    return r == CUDA_SUCCESS ? 0 : -EINVAL;
}

static const struct device_ops device_ops = {.free_block = free_block};

void memory_init(void)
{
    const struct options *o = options_get();
    tracking =
        !o->disable && real_cuMemFree_v2 && real_cuPointerGetAttributes && real_cuCtxGetCurrent;
    if (!o->disable && !tracking)
        LOG_ONCE(LOG_WARN, "driver functions missing; passing every call through");
    if (tracking) ipc_init(&device_ops);
    swap_init();
}

bool shim_tracking(void)
{
    return tracking;
}

/* The context an import is cached under: the current one, after making
 * sure the runtime has made its primary context current (runtime door). */
uint64_t shim_current_context(bool runtime_door)
{
    CUcontext ctx = NULL;
    if (!REAL(cuCtxGetCurrent)) return 0;
    real_cuCtxGetCurrent(&ctx);
    if (!ctx && runtime_door && REAL(cudaFree)) {
        real_cudaFree(NULL); /* the runtime's documented way to initialise its context */
        real_cuCtxGetCurrent(&ctx);
    }
    return (uint64_t)ctx;
}

static void synchronize_context(uint64_t ctx)
{
    if (!options_get()->close_sync || !ctx) return;
    /* A driver with cuCtxSynchronize_v2 synchronises a given context in one
     * call, current or not. */
    if (real_cuCtxSynchronize_v2) {
        real_cuCtxSynchronize_v2((CUcontext)ctx);
        return;
    }
    if (!REAL(cuCtxSynchronize)) return;
    CUcontext previous = NULL;
    real_cuCtxGetCurrent(&previous);
    if ((uint64_t)previous == ctx) {
        real_cuCtxSynchronize();
    } else if (real_cuCtxPushCurrent_v2 &&
               real_cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS) {
        real_cuCtxSynchronize();
        real_cuCtxPopCurrent_v2(&previous);
    }
}

/* After an allocation failed for lack of memory: collect limbo (expiring
 * old hand-offs early) and say whether a retry may now succeed. */
static bool collect_for_retry_slow(const struct door_codes *codes)
{
    if (!tracking || ipc_collect_pressure() <= 0) return false;
    if (codes == &runtime_codes && REAL(cudaGetLastError))
        real_cudaGetLastError(); /* forget the failure */
    return true;
}
static inline bool collect_for_retry(int result, const struct door_codes *codes)
{
    return result == codes->out_of_memory && collect_for_retry_slow(codes);
}

/* Free: limbo, untracked, or a tracked block nothing holds. A stream-ordered
 * free (stream given) of a block that goes to limbo is deferred like any
 * other: the real free comes later, after the importers let go, and so
 * after whatever the stream had queued. */
static __attribute__((noinline)) int op_free_tracked(uint64_t ptr, void *stream,
                                                     int (*real_free)(uint64_t, void *),
                                                     const struct door_codes *codes)
{
    swap_on_free(ptr);
    if (!tracking || !ptr) return real_free(ptr, stream);
    int decision = ipc_free(ptr);
    if (decision == IPC_DONE) return codes->ok;
    if (decision < 0) return codes->invalid;
    return real_free(ptr, stream);
}

/* The hot path of every free: a pointer that cannot be an export of this
 * process (and no host swap) is freed straight through, with no call of
 * the shim's own. */
static inline int op_free(uint64_t ptr, void *stream, int (*real_free)(uint64_t, void *),
                          const struct door_codes *codes)
{
    if (__builtin_expect(swap_enabled, 0) || (tracking && ptr && !ipc_free_passes(ptr)))
        return op_free_tracked(ptr, stream, real_free, codes);
    return real_free(ptr, stream);
}

/* After a real get-handle failed: say once, per kind, what memory legacy
 * IPC refuses (it exports only ordinary cudaMalloc/cuMemAlloc memory). */
static uint64_t pointer_attribute(uint64_t ptr, CUpointer_attribute what)
{
    uint64_t value = 0; /* wide enough for every attribute asked here */
    void *into[] = {&value};
    return REAL(cuPointerGetAttributes) &&
                   real_cuPointerGetAttributes(1, &what, into, (CUdeviceptr)ptr) == CUDA_SUCCESS
               ? value
               : 0;
}
static void explain_refused_export(uint64_t ptr, int result)
{
    if (pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_IS_MANAGED))
        LOG_ONCE(
            LOG_WARN,
            "export of %#llx refused by CUDA (%d): managed memory (cudaMallocManaged) cannot be "
            "shared through legacy IPC; ipcshim passes the error through",
            (unsigned long long)ptr, result);
    else if (pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE))
        LOG_ONCE(
            LOG_WARN,
            "export of %#llx refused by CUDA (%d): stream-ordered pool memory (cudaMallocAsync) "
            "is shared through cudaMemPoolExportPointer, not legacy IPC; ipcshim passes the error "
            "through",
            (unsigned long long)ptr, result);
    else if (pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_RANGE_SIZE) &&
             !pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE))
        LOG_ONCE(LOG_WARN,
                 "export of %#llx refused by CUDA (%d): virtual memory management allocations "
                 "(cuMemCreate, PyTorch's expandable_segments) are shared through "
                 "cuMemExportToShareableHandle, "
                 "not legacy IPC; ipcshim passes the error through",
                 (unsigned long long)ptr, result);
}

/* True when ptr lies in a block the program freed that waits in limbo: to
 * the program that memory is gone, and CUDA refuses to export freed memory. */
static bool freed_by_program(uint64_t ptr)
{
    if (!tracking || !ipc_limbo_pending()) return false;
    uint64_t base = pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
    return ipc_in_limbo(base ? base : ptr);
}

/* Export: the real get-handle, then the block is recorded by its base. */
static void note_export(const void *handle, uint64_t ptr)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    CUcontext ctx = NULL;
    int device = -1;
    unsigned long long buffer_id = 0;
    CUpointer_attribute what[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void *into[] = {&base, &size, &ctx, &device, &buffer_id};
    if (real_cuPointerGetAttributes(5, what, into, (CUdeviceptr)ptr) != CUDA_SUCCESS || !base ||
        !size) {
        LOG_RATE(LOG_WARN, "cannot find the allocation of exported pointer %#llx; left untracked",
                 (unsigned long long)ptr);
        return;
    }
    struct ipc_handle h;
    memcpy(h.bytes, handle, sizeof h.bytes);
    if (ipc_export_identity(&h, base, size, device, (uint64_t)ctx, buffer_id) == 0)
        api_at_first_use();
}

/* Open: cached, own export, a new lease around the real open, or untracked. */
static int op_open(const void *handle, unsigned int flags, uint64_t *out, bool runtime_door,
                   int (*real_open)(uint64_t *, const void *, unsigned int),
                   const struct door_codes *codes)
{
    /* What CUDA refuses (no pointer, unknown flags) it refuses itself. */
    if (!tracking || !out || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return real_open(out, handle, flags);
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
        if (decision == -ENOENT)
            LOG_RATE(LOG_WARN, "open refused: the exporter freed this block");
        else
            LOG_RATE(LOG_WARN, "open refused: the exporter of this block died");
        return codes->invalid;
    }
    int result = real_open(out, handle, flags);
    if (decision == IPC_REAL) {
        if (result == codes->ok)
            ipc_open_commit(&ticket, *out), api_at_first_open();
        else
            ipc_open_abort(&ticket);
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
    if (result == codes->ok)
        ipc_close_finish(&ticket);
    else
        ipc_close_abort(&ticket); /* still mapped, says CUDA: keep protecting it */
    return result;
}

/* Adapters from each door's real function to the op_* shapes. */
static int runtime_free(uint64_t p, void *stream)
{
    (void)stream;
    return REAL(cudaFree) ? (int)real_cudaFree((void *)p) : runtime_codes.missing;
}
static int runtime_free_async(uint64_t p, void *stream)
{
    return REAL(cudaFreeAsync) ? (int)real_cudaFreeAsync((void *)p, stream) : runtime_codes.missing;
}
static int runtime_free_async_ptsz(uint64_t p, void *stream)
{
    return REAL(cudaFreeAsync_ptsz) ? (int)real_cudaFreeAsync_ptsz((void *)p, stream)
                                    : runtime_codes.missing;
}
static int driver_free(uint64_t p, void *stream)
{
    (void)stream;
    return REAL(cuMemFree_v2) ? (int)real_cuMemFree_v2(p) : driver_codes.missing;
}
static int driver_free_async(uint64_t p, void *stream)
{
    return REAL(cuMemFreeAsync) ? (int)real_cuMemFreeAsync(p, stream) : driver_codes.missing;
}
static int driver_free_async_ptsz(uint64_t p, void *stream)
{
    return REAL(cuMemFreeAsync_ptsz) ? (int)real_cuMemFreeAsync_ptsz(p, stream)
                                     : driver_codes.missing;
}
static int runtime_close(uint64_t p)
{
    return REAL(cudaIpcCloseMemHandle) ? (int)real_cudaIpcCloseMemHandle((void *)p)
                                       : runtime_codes.missing;
}
static int driver_close(uint64_t p)
{
    return REAL(cuIpcCloseMemHandle) ? (int)real_cuIpcCloseMemHandle(p) : driver_codes.missing;
}
static int runtime_open(uint64_t *out, const void *handle, unsigned int flags)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    if (!REAL(cudaIpcOpenMemHandle)) return runtime_codes.missing;
    memcpy(&h, handle, sizeof h);
    int r = real_cudaIpcOpenMemHandle(out ? &p : NULL, h, flags);
    if (out) *out = (uint64_t)p;
    return r;
}
static int driver_open_v1(uint64_t *out, const void *handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!REAL(cuIpcOpenMemHandle)) return driver_codes.missing;
    memcpy(&h, handle, sizeof h);
    int r = real_cuIpcOpenMemHandle(out ? &p : NULL, h, flags);
    if (out) *out = p;
    return r;
}
static int driver_open_v2(uint64_t *out, const void *handle, unsigned int flags)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!REAL(cuIpcOpenMemHandle_v2)) return driver_codes.missing;
    memcpy(&h, handle, sizeof h);
    int r = real_cuIpcOpenMemHandle_v2(out ? &p : NULL, h, flags);
    if (out) *out = p;
    return r;
}

/* Runtime door */

cudaError_t do_cudaMalloc(void **devPtr, size_t size)
{
    if (!REAL(cudaMalloc)) return cudaErrorInitializationError;
    if (swap_wants(size) && swap_alloc_runtime(devPtr, size)) return cudaSuccess;
    cudaError_t r = real_cudaMalloc(devPtr, size);
    if (collect_for_retry(r, &runtime_codes)) r = real_cudaMalloc(devPtr, size);
    return r;
}

cudaError_t do_cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    if (!REAL(cudaMallocPitch)) return cudaErrorInitializationError;
    cudaError_t r = real_cudaMallocPitch(devPtr, pitch, width, height);
    if (collect_for_retry(r, &runtime_codes))
        r = real_cudaMallocPitch(devPtr, pitch, width, height);
    return r;
}

cudaError_t do_cudaFree(void *devPtr)
{
    return op_free((uint64_t)devPtr, NULL, runtime_free, &runtime_codes);
}

cudaError_t do_cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return op_free((uint64_t)devPtr, hStream, runtime_free_async, &runtime_codes);
}

cudaError_t do_cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return op_free((uint64_t)devPtr, hStream, runtime_free_async_ptsz, &runtime_codes);
}

cudaError_t do_cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    cudaError_t r = CALL_REAL_RUNTIME(cudaMallocAsync, (devPtr, size, hStream));
    if (collect_for_retry(r, &runtime_codes)) r = real_cudaMallocAsync(devPtr, size, hStream);
    return r;
}

cudaError_t do_cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    cudaError_t r = CALL_REAL_RUNTIME(cudaMallocAsync_ptsz, (devPtr, size, hStream));
    if (collect_for_retry(r, &runtime_codes)) r = real_cudaMallocAsync_ptsz(devPtr, size, hStream);
    return r;
}

cudaError_t do_cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    if (!REAL(cudaIpcGetMemHandle)) return cudaErrorInitializationError;
    if (swap_refuses_export((uint64_t)devPtr, "cudaIpcGetMemHandle")) return cudaErrorInvalidValue;
    if (freed_by_program((uint64_t)devPtr)) return cudaErrorInvalidValue;
    cudaError_t r = real_cudaIpcGetMemHandle(handle, devPtr);
    if (r == cudaSuccess && tracking)
        note_export(handle, (uint64_t)devPtr);
    else if (r != cudaSuccess)
        explain_refused_export((uint64_t)devPtr, r);
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
    if (!REAL(cuMemAlloc_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    if (swap_wants(bytesize) && swap_alloc_driver(dptr, bytesize)) return CUDA_SUCCESS;
    CUresult r = real_cuMemAlloc_v2(dptr, bytesize);
    if (collect_for_retry(r, &driver_codes)) r = real_cuMemAlloc_v2(dptr, bytesize);
    return r;
}

CUresult do_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                               size_t Height, unsigned int ElementSizeBytes)
{
    if (!REAL(cuMemAllocPitch_v2)) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (collect_for_retry(r, &driver_codes))
        r = real_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    return r;
}

CUresult do_cuMemFree_v2(CUdeviceptr dptr)
{
    return op_free(dptr, NULL, driver_free, &driver_codes);
}

CUresult do_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return op_free(dptr, hStream, driver_free_async, &driver_codes);
}

CUresult do_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return op_free(dptr, hStream, driver_free_async_ptsz, &driver_codes);
}

CUresult do_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult r = CALL_REAL_DRIVER(cuMemAllocAsync, (dptr, bytesize, hStream));
    if (collect_for_retry(r, &driver_codes)) r = real_cuMemAllocAsync(dptr, bytesize, hStream);
    return r;
}

CUresult do_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    CUresult r = CALL_REAL_DRIVER(cuMemAllocAsync_ptsz, (dptr, bytesize, hStream));
    if (collect_for_retry(r, &driver_codes)) r = real_cuMemAllocAsync_ptsz(dptr, bytesize, hStream);
    return r;
}

CUresult do_cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (!REAL(cuIpcGetMemHandle)) return CUDA_ERROR_NOT_INITIALIZED;
    if (swap_refuses_export(dptr, "cuIpcGetMemHandle")) return CUDA_ERROR_INVALID_VALUE;
    if (freed_by_program(dptr)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = real_cuIpcGetMemHandle(pHandle, dptr);
    if (r == CUDA_SUCCESS && tracking)
        note_export(pHandle, dptr);
    else if (r != CUDA_SUCCESS)
        explain_refused_export(dptr, r);
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

CUresult do_cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    return op_close(dptr, driver_close, &driver_codes);
}
