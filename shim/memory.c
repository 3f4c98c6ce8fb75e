/* memory: the entry points that carry logic — allocation, free and IPC —
 * for both doors. Each operation is written once (op_*) against core's
 * decisions (core/ipc.h) and a door's real call; the do_<name> functions only
 * adapt arguments and error codes. When tracking is off, or core says PASS,
 * the real function is called exactly as without the shim. */
#include "memory.h"
#include "context.h"
#include "hooks.h"
#include "resolve.h"
#include "vmm.h"
#include "host.h"
#include "ipc.h"
#include "log.h"
#include "options.h"
#include "host_swap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The error codes of one door. */
struct door_codes {
    int ok, invalid, out_of_memory, missing;
};
static const struct door_codes runtime_codes = {
    cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorInitializationError};
static const struct door_codes driver_codes = {
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NOT_INITIALIZED};

static uint64_t pointer_attribute(uint64_t ptr, CUpointer_attribute what);

/* The host's free_block (core/host.h): a deferred free, in the block's own
 * context, of
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
    if (identity & IPC_IDENTITY_VMM) return vmm_free_block(identity); /* nothing to free */
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

void memory_init(void)
{
    if (!options_get()->disable && !shim_tracking())
        LOG_ONCE(LOG_WARN, "driver functions missing; passing every call through");
    if (!shim_tracking()) return;
    host_set(&(struct host){.free_block = free_block}); /* core's deferred frees */
    ipc_init();
}

/* After an allocation failed for lack of memory: collect limbo (expiring
 * old hand-offs early) and say whether a retry may now succeed. */
static bool collect_for_retry_slow(const struct door_codes *codes)
{
    if (!shim_tracking() || ipc_collect_pressure() <= 0) return false;
    if (codes == &runtime_codes && REAL(cudaGetLastError))
        real_cudaGetLastError(); /* forget the failure */
    return true;
}
static inline bool collect_for_retry(int result, const struct door_codes *codes)
{
    return result == codes->out_of_memory && collect_for_retry_slow(codes);
}

/* The last local close of a mapping (a legacy close, or the free that ends
 * a pool import): the importing context synchronised, the real call, then
 * the lease dropped, or kept when CUDA says the mapping is still open. */
static int close_for_real(struct ipc_close *t, uint64_t ptr, void *stream,
                          int (*real_close)(uint64_t, void *), const struct door_codes *codes)
{
    shim_synchronize_context(t->ctx);
    int result = real_close(ptr, stream);
    if (result == codes->ok)
        ipc_close_finish(t);
    else
        ipc_close_abort(t); /* still mapped, says CUDA: keep protecting it */
    return result;
}

/* Free: limbo, untracked, or a tracked block nothing holds. A stream-ordered
 * free (stream given) of a block that goes to limbo is deferred like any
 * other: the real free comes later, after the importers let go, and so
 * after whatever the stream had queued. */
static __attribute__((noinline)) int op_free_tracked(uint64_t ptr, void *stream,
                                                     int (*real_free)(uint64_t, void *),
                                                     const struct door_codes *codes)
{
    if (swap_on_free(ptr)) return codes->ok; /* a VMM-backed block: freed there */
    if (!shim_tracking() || !ptr) return real_free(ptr, stream);
    /* A pool import's pointer: the free ends the import (op_close's rules). */
    struct ipc_close ticket;
    int decision = ipc_unimport_begin(ptr, &ticket);
    if (decision == IPC_DONE) return codes->ok;
    if (decision == IPC_REAL) return close_for_real(&ticket, ptr, stream, real_free, codes);
    decision = ipc_free(ptr);
    if (decision == IPC_DONE) return codes->ok;
    if (decision < 0) return codes->invalid;
    return real_free(ptr, stream);
}

/* The hot path of every free: a pointer that cannot be an export or a pool
 * import of this process (and no host swap) is freed straight through,
 * with no call of the shim's own. */
static inline int op_free(uint64_t ptr, void *stream, int (*real_free)(uint64_t, void *),
                          const struct door_codes *codes)
{
    if (__builtin_expect(swap_enabled, 0) || (shim_tracking() && ptr && !ipc_free_passes(ptr)))
        return op_free_tracked(ptr, stream, real_free, codes);
    return real_free(ptr, stream);
}

/* The driver's pointer attributes, or with host swap on, shim/query.c's
 * (a swappable block's own range and context, not its chunk's). */
static inline CUresult attributes_of(unsigned n, CUpointer_attribute *what, void **into,
                                     uint64_t ptr)
{
    if (__builtin_expect(swap_enabled, 0))
        return do_cuPointerGetAttributes(n, what, into, (CUdeviceptr)ptr);
    return real_cuPointerGetAttributes(n, what, into, (CUdeviceptr)ptr);
}

/* After a real get-handle failed: say once, per kind, what memory legacy
 * IPC refuses (it exports only ordinary cudaMalloc/cuMemAlloc memory). */
static uint64_t pointer_attribute(uint64_t ptr, CUpointer_attribute what)
{
    uint64_t value = 0; /* wide enough for every attribute asked here */
    void *into[] = {&value};
    return REAL(cuPointerGetAttributes) && attributes_of(1, &what, into, ptr) == CUDA_SUCCESS
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
    if (!shim_tracking() || !ipc_limbo_pending()) return false;
    uint64_t base = pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
    return ipc_in_limbo(base ? base : ptr);
}

/* Export: the real get-handle (or pool pointer export, kind IPC_KIND_POOL),
 * then the block is recorded by its base. */
static void note_export(const void *handle, uint64_t ptr, int kind)
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
    if (attributes_of(5, what, into, ptr) != CUDA_SUCCESS || !base || !size) {
        LOG_RATE(LOG_WARN, "cannot find the allocation of exported pointer %#llx; left untracked",
                 (unsigned long long)ptr);
        return;
    }
    struct ipc_handle h;
    memcpy(h.bytes, handle, sizeof h.bytes);
    if (ipc_export_identity(&h, base, size, device, (uint64_t)ctx, buffer_id, kind) == 0)
        hooks_first_export();
}

/* The arguments of a legacy open (handle, flags) or a pool import
 * (handle: the 64 export bytes, pool), for a door's real call. */
struct open_call {
    const void *handle;
    unsigned int flags;
    void *pool;
};

/* Open (legacy IPC) or import (pool IPC, kind IPC_KIND_POOL): cached, own
 * export, a new lease around the real call, or untracked. */
static int op_open(const struct open_call *call, int kind, uint64_t *out, bool runtime_door,
                   int (*real_open)(uint64_t *, const struct open_call *),
                   const struct door_codes *codes)
{
    /* What CUDA refuses (no pointer or handle, unknown flags) it refuses itself. */
    if (!shim_tracking() || !out || !call->handle ||
        (call->flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
        return real_open(out, call);
    /* A direct-sharing ledger key (vmm.c) is no handle: the driver answers. */
    if (vmm_handle_direct(call->handle)) return real_open(out, call);
    struct ipc_handle h;
    struct ipc_open ticket;
    uint64_t ptr = 0;
    memcpy(h.bytes, call->handle, sizeof h.bytes);
    uint64_t ctx = shim_current_context(runtime_door);
    int decision = kind == IPC_KIND_POOL
                       ? ipc_import_pool_begin(&h, ctx, (uint64_t)call->pool, &ticket, &ptr)
                       : ipc_open_begin(&h, ctx, &ticket, &ptr);
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
    /* A synthetic handle the registry knows (legacy IPC on VMM memory) is
     * mapped by the shim; one it does not know goes to the driver, which
     * refuses it as it refuses any bad handle. */
    int result;
    if (decision == IPC_REAL && kind == IPC_KIND_LEGACY && vmm_handle_synthetic(h.bytes))
        result = vmm_open(h.bytes, out) == 0 ? codes->ok : codes->invalid;
    else
        result = real_open(out, call);
    if (decision == IPC_REAL) {
        if (result == codes->ok)
            ipc_open_commit(&ticket, *out), hooks_first_open();
        else
            ipc_open_abort(&ticket);
    }
    return result;
}

/* The last close of a synthetic handle's mapping (vmm.c), in each door's
 * codes. */
static int vmm_close_runtime(uint64_t p, void *stream)
{
    (void)stream;
    return vmm_close(p) == 0 ? runtime_codes.ok : runtime_codes.invalid;
}
static int vmm_close_driver(uint64_t p, void *stream)
{
    (void)stream;
    return vmm_close(p) == 0 ? driver_codes.ok : driver_codes.invalid;
}

/* Close: only the last local close reaches the driver, after a sync. */
static int op_close(uint64_t ptr, int (*real_close)(uint64_t, void *),
                    const struct door_codes *codes)
{
    if (!shim_tracking()) return real_close(ptr, NULL);
    struct ipc_close ticket;
    int decision = ipc_close_begin(ptr, &ticket);
    if (decision == IPC_DONE) return codes->ok;
    if (decision != IPC_REAL) return real_close(ptr, NULL);
    if (vmm_is_open(ptr))
        real_close = codes == &runtime_codes ? vmm_close_runtime : vmm_close_driver;
    return close_for_real(&ticket, ptr, NULL, real_close, codes);
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
static int runtime_close(uint64_t p, void *stream)
{
    (void)stream;
    return REAL(cudaIpcCloseMemHandle) ? (int)real_cudaIpcCloseMemHandle((void *)p)
                                       : runtime_codes.missing;
}
static int driver_close(uint64_t p, void *stream)
{
    (void)stream;
    return REAL(cuIpcCloseMemHandle) ? (int)real_cuIpcCloseMemHandle(p) : driver_codes.missing;
}
static int runtime_open(uint64_t *out, const struct open_call *c)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    if (!REAL(cudaIpcOpenMemHandle)) return runtime_codes.missing;
    memcpy(&h, c->handle, sizeof h);
    int r = real_cudaIpcOpenMemHandle(out ? &p : NULL, h, c->flags);
    if (out) *out = (uint64_t)p;
    return r;
}
static int driver_open_v1(uint64_t *out, const struct open_call *c)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!REAL(cuIpcOpenMemHandle)) return driver_codes.missing;
    memcpy(&h, c->handle, sizeof h);
    int r = real_cuIpcOpenMemHandle(out ? &p : NULL, h, c->flags);
    if (out) *out = p;
    return r;
}
static int driver_open_v2(uint64_t *out, const struct open_call *c)
{
    CUipcMemHandle h;
    CUdeviceptr p = 0;
    if (!REAL(cuIpcOpenMemHandle_v2)) return driver_codes.missing;
    memcpy(&h, c->handle, sizeof h);
    int r = real_cuIpcOpenMemHandle_v2(out ? &p : NULL, h, c->flags);
    if (out) *out = p;
    return r;
}
/* The pool import's real calls; the export bytes are the caller's own. */
static int runtime_import(uint64_t *out, const struct open_call *c)
{
    void *p = NULL;
    if (!REAL(cudaMemPoolImportPointer)) return runtime_codes.missing;
    int r = real_cudaMemPoolImportPointer(out ? &p : NULL, (cudaMemPool_t)c->pool,
                                          (struct cudaMemPoolPtrExportData *)c->handle);
    if (out) *out = (uint64_t)p;
    return r;
}
static int driver_import(uint64_t *out, const struct open_call *c)
{
    CUdeviceptr p = 0;
    if (!REAL(cuMemPoolImportPointer)) return driver_codes.missing;
    int r = real_cuMemPoolImportPointer(out ? &p : NULL, (CUmemoryPool)c->pool,
                                        (CUmemPoolPtrExportData *)c->handle);
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
    if (r == cudaSuccess && shim_tracking())
        note_export(handle, (uint64_t)devPtr, IPC_KIND_LEGACY);
    else if (r == cudaErrorInvalidValue && vmm_export_legacy(handle, (uint64_t)devPtr) == 0) {
        r = cudaSuccess;
        if (REAL(cudaGetLastError)) real_cudaGetLastError(); /* forget the refusal */
    } else if (r != cudaSuccess)
        explain_refused_export((uint64_t)devPtr, r);
    return r;
}

cudaError_t do_cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    uint64_t p = 0;
    struct open_call call = {.handle = &handle, .flags = flags};
    cudaError_t r =
        op_open(&call, IPC_KIND_LEGACY, devPtr ? &p : NULL, true, runtime_open, &runtime_codes);
    if (devPtr && r == cudaSuccess) *devPtr = (void *)p;
    return r;
}

cudaError_t do_cudaIpcCloseMemHandle(void *devPtr)
{
    return op_close((uint64_t)devPtr, runtime_close, &runtime_codes);
}

cudaError_t do_cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                       cudaStream_t stream)
{
    cudaError_t r = CALL_REAL_RUNTIME(cudaMallocFromPoolAsync, (ptr, size, memPool, stream));
    if (collect_for_retry(r, &runtime_codes))
        r = real_cudaMallocFromPoolAsync(ptr, size, memPool, stream);
    return r;
}

_Static_assert(sizeof(struct cudaMemPoolPtrExportData) == IPC_HANDLE_BYTES &&
                   sizeof(CUmemPoolPtrExportData) == IPC_HANDLE_BYTES,
               "pool export data are keyed like IPC handles");

cudaError_t do_cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)
{
    if (!REAL(cudaMemPoolExportPointer)) return cudaErrorInitializationError;
    if (freed_by_program((uint64_t)ptr)) return cudaErrorInvalidValue;
    cudaError_t r = real_cudaMemPoolExportPointer(exportData, ptr);
    if (r == cudaSuccess && shim_tracking() && exportData)
        note_export(exportData, (uint64_t)ptr, IPC_KIND_POOL);
    return r;
}

cudaError_t do_cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
                                        struct cudaMemPoolPtrExportData *exportData)
{
    uint64_t p = 0;
    struct open_call call = {.handle = exportData, .pool = memPool};
    cudaError_t r =
        op_open(&call, IPC_KIND_POOL, ptr ? &p : NULL, true, runtime_import, &runtime_codes);
    if (ptr && r == cudaSuccess) *ptr = (void *)p;
    return r;
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
    if (r == CUDA_SUCCESS && shim_tracking())
        note_export(pHandle, dptr, IPC_KIND_LEGACY);
    else if (r == CUDA_ERROR_INVALID_VALUE && vmm_export_legacy(pHandle, dptr) == 0)
        r = CUDA_SUCCESS;
    else if (r != CUDA_SUCCESS)
        explain_refused_export(dptr, r);
    return r;
}

static CUresult driver_open(CUdeviceptr *pdptr, CUipcMemHandle *handle, unsigned int flags,
                            int (*real_open)(uint64_t *, const struct open_call *))
{
    uint64_t p = 0;
    struct open_call call = {.handle = handle, .flags = flags};
    CUresult r =
        op_open(&call, IPC_KIND_LEGACY, pdptr ? &p : NULL, false, real_open, &driver_codes);
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

CUresult do_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                    CUstream hStream)
{
    CUresult r = CALL_REAL_DRIVER(cuMemAllocFromPoolAsync, (dptr, bytesize, pool, hStream));
    if (collect_for_retry(r, &driver_codes))
        r = real_cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
    return r;
}

CUresult do_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream hStream)
{
    CUresult r = CALL_REAL_DRIVER(cuMemAllocFromPoolAsync_ptsz, (dptr, bytesize, pool, hStream));
    if (collect_for_retry(r, &driver_codes))
        r = real_cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
    return r;
}

CUresult do_cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    if (!REAL(cuMemPoolExportPointer)) return CUDA_ERROR_NOT_INITIALIZED;
    if (freed_by_program(ptr)) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = real_cuMemPoolExportPointer(shareData_out, ptr);
    if (r == CUDA_SUCCESS && shim_tracking() && shareData_out)
        note_export(shareData_out, ptr, IPC_KIND_POOL);
    return r;
}

CUresult do_cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                   CUmemPoolPtrExportData *shareData)
{
    uint64_t p = 0;
    struct open_call call = {.handle = shareData, .pool = pool};
    CUresult r =
        op_open(&call, IPC_KIND_POOL, ptr_out ? &p : NULL, false, driver_import, &driver_codes);
    if (ptr_out && r == CUDA_SUCCESS) *ptr_out = p;
    return r;
}
