/*
 * driver_mem.c: device memory and pointers. sim_drv_classify says what an
 * address is to this process (its own allocation, an IPC mapping, pinned
 * host memory, someone else's device memory, or pageable host memory);
 * every entry point that takes a device pointer checks it with
 * sim_drv_check_range. Ordinary and managed allocation, free (own
 * allocations and pool imports), memory info, address ranges, pointer
 * attributes, and the legacy 32-bit-pointer entry points. Allocations
 * themselves are sim_state.c's.
 */
#include "driver_internal.h"

#include <limits.h>
#include <string.h>

/* ---- pointers ---- */

/* Classifies p: an allocation of this process (PTR_DEVICE), an IPC mapping
 * open in this process (PTR_IMPORT, even if the exporter has since freed
 * it), pinned host memory (PTR_HOST), somewhere in a device window that is
 * not ours (PTR_FOREIGN), or unknown (PTR_NONE: pageable host memory).
 * Takes no machine mutex: what it reads is this process's own (README,
 * "Which calls take the machine lock"). */
enum ptr_kind sim_drv_classify(CUdeviceptr p, struct ptr_info *out)
{
    memset(out, 0, sizeof(*out));
    uint64_t off;
    int dev = sim_window_of((uintptr_t)p, &off);
    if (dev >= 0) {
        uint8_t *win = sim_window((unsigned)dev);
        uint64_t ctx_id = 0;
        struct sim_own own;
        if (win && sim_own_find((unsigned)dev, off, &own) == 0) {
            out->kind = PTR_DEVICE;
            out->dev = (own.flags & SIM_F_MANAGED) ? own.home : (unsigned)dev;
            out->base = (CUdeviceptr)(uintptr_t)(win + own.offset);
            out->size = own.size;
            out->serial = own.serial;
            out->flags = own.flags;
            out->pool_id = own.pool_id;
            ctx_id = own.ctx_id;
        }
        pthread_mutex_lock(&sim_drv_lock);
        if (out->kind == PTR_DEVICE) {
            out->ctx = sim_drv_ctx_by_id_locked(ctx_id);
        } else {
            struct import *im, *tmp;
            HASH_ITER(hh, sim_drv_imports, im, tmp)
            {
                if (p >= im->ptr && p - im->ptr < im->size) {
                    out->kind = PTR_IMPORT;
                    out->dev = im->key.dev;
                    out->base = im->ptr;
                    out->size = im->size;
                    out->serial = im->pool ? im->buffer_id : im->key.serial;
                    out->ctx = im->ctx;
                    out->pool = im->pool;
                    break;
                }
            }
            if (out->kind == PTR_NONE) out->kind = PTR_FOREIGN;
        }
        pthread_mutex_unlock(&sim_drv_lock);
        return out->kind;
    }
    pthread_mutex_lock(&sim_drv_lock);
    if (sim_drv_vmm_classify_locked(p, out)) { /* a VMM mapping (driver_vmm.c) */
        pthread_mutex_unlock(&sim_drv_lock);
        return out->kind;
    }
    struct host_alloc *h, *tmp;
    HASH_ITER(hh, sim_drv_host, h, tmp)
    {
        if ((uintptr_t)p >= (uintptr_t)h->ptr && (uintptr_t)p - (uintptr_t)h->ptr < h->size) {
            out->kind = PTR_HOST;
            out->base = (CUdeviceptr)(uintptr_t)h->ptr;
            out->size = h->size;
            out->serial = h->id;
            out->ctx = h->ctx;
            out->dev = h->ctx ? h->ctx->dev : 0;
            break;
        }
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return out->kind;
}

/* Checks that [p, p + n) may be accessed. ANY_MEMORY also accepts unknown
 * (pageable host) memory, DEVICE_OR_PINNED accepts cuMemHostAlloc memory,
 * DEVICE_ONLY only device memory (own or imported). A range inside a device
 * window that is not wholly inside one of our allocations or mappings is
 * always refused. */
CUresult sim_drv_check_range(CUdeviceptr p, size_t n, enum access mode)
{
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    switch (sim_drv_classify(p, &pi)) {
    case PTR_DEVICE:
    case PTR_IMPORT:
        break;
    case PTR_HOST:
        if (mode == DEVICE_ONLY) return CUDA_ERROR_INVALID_VALUE;
        break;
    case PTR_NONE:
        return mode == ANY_MEMORY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (pi.flags & SIM_F_VMM) return sim_drv_vmm_check_range(p, n); /* may span mappings */
    if (n > pi.size || p - pi.base > pi.size - n) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* ---- device memory ---- */

/* Ordinary allocations come from the current device's pool, managed ones
 * (flags SIM_F_MANAGED) from the managed pool, resident on the host. */
static CUresult mem_alloc(CUdeviceptr *dptr, size_t bytesize, uint32_t flags)
{
    ENTER();
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (sim_drv_fault(SIMCUDA_FAULT_ALLOC)) return CUDA_ERROR_OUT_OF_MEMORY;
    unsigned pool = (flags & SIM_F_MANAGED) ? SIM_POOL_MANAGED : c->dev;
    uint8_t *win = sim_window(pool);
    if (!win) return CUDA_ERROR_OPERATING_SYSTEM;
    uint32_t index;
    uint64_t offset;
    int rc = sim_alloc(pool, bytesize, c->id, flags, c->dev, &index, &offset);
    if (rc != SIM_OK) return rc == SIM_ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *dptr = (CUdeviceptr)(uintptr_t)(win + offset);
    sim_drv_count(&sim_drv_counts.allocs);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return mem_alloc(dptr, bytesize, 0);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return mem_alloc(dptr, bytesize, SIM_F_MANAGED);
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    ENTER();
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + SIM_GRANULE - 1) / SIM_GRANULE * SIM_GRANULE;
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = mem_alloc(dptr, pitch * Height, 0);
    if (r == CUDA_SUCCESS) *pPitch = pitch;
    return r;
}

/* Needs no current context: like NVIDIA's driver (unified addressing), the
 * pointer names its allocation and so its owning context. numba frees its
 * pending deallocations after popping every context. */
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    ENTER();
    uint64_t off;
    int dev = sim_window_of((uintptr_t)dptr, &off);
    if (!dptr || dev < 0) return CUDA_ERROR_INVALID_VALUE;
    sim_drv_queue_sync_all(); /* a free waits for the device (driver_queue.c) */
    if (sim_free((unsigned)dev, off) == SIM_OK) return CUDA_SUCCESS;
    return sim_drv_import_free(dptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
    ENTER();
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    sim_lock();
    sim_sweep_locked();
    /* Managed memory resident on the device occupies it too. */
    uint64_t used = sim_m->dev[c->dev].used + sim_m->dev[c->dev].managed;
    sim_unlock();
    if (free) *free = sim_m->capacity - used;
    if (total) *total = sim_m->capacity;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    ENTER();
    struct ptr_info pi;
    enum ptr_kind k = sim_drv_classify(dptr, &pi);
    if (k != PTR_DEVICE && k != PTR_IMPORT) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = pi.base;
    if (psize) *psize = pi.size;
    return CUDA_SUCCESS;
}

/* Writes attribute `attr` of the pointer described by pi (kind PTR_NONE:
 * the neutral value cuPointerGetAttributes reports for unknown memory).
 * Boolean attributes are written as one byte. */
static CUresult pointer_attribute(void *data, CUpointer_attribute attr, CUdeviceptr p,
                                  const struct ptr_info *pi)
{
    int known = pi->kind == PTR_DEVICE || pi->kind == PTR_IMPORT || pi->kind == PTR_HOST;
    int device = pi->kind == PTR_DEVICE || pi->kind == PTR_IMPORT;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = known ? (CUcontext)pi->ctx : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned int *)data = device ? CU_MEMORYTYPE_DEVICE : known ? CU_MEMORYTYPE_HOST : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = known ? p : 0;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: /* pinned and managed memory */
        *(void **)data = pi->kind == PTR_HOST || (known && (pi->flags & SIM_F_MANAGED))
                             ? (void *)(uintptr_t)p
                             : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned char *)data = known;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(unsigned char *)data =
            pi->kind == PTR_DEVICE && !(pi->flags & (SIM_F_MANAGED | SIM_F_POOL | SIM_F_VMM));
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned char *)data = known && (pi->flags & SIM_F_MANAGED) != 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned char *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = known ? pi->serial : 0;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = known ? (int)pi->dev : -2;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = known ? pi->base : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = known ? pi->size : 0;
        break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: /* those of its pool (driver_pool.c) */
        *(unsigned long long *)data = pi->kind != PTR_DEVICE    ? 0
                                      : (pi->flags & SIM_F_VMM) ? pi->handle_types
                                      : (pi->flags & SIM_F_POOL)
                                          ? sim_pool_handle_types(pi->pool_id)
                                          : 0;
        break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned int *)data = !known ? 0
                                : (pi->flags & SIM_F_VMM)
                                    ? pi->access
                                    : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: /* driver_pool.c; an import's: its imported pool */
        *(void **)data = pi->kind == PTR_DEVICE && (pi->flags & SIM_F_POOL)
                             ? (void *)sim_pool_handle(pi->dev, pi->pool_id)
                         : pi->kind == PTR_IMPORT ? (void *)pi->pool
                                                  : NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    ENTER();
    if (!data) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    enum ptr_kind k = sim_drv_classify(ptr, &pi);
    if (k == PTR_NONE || k == PTR_FOREIGN) return CUDA_ERROR_INVALID_VALUE;
    if (attribute == CU_POINTER_ATTRIBUTE_HOST_POINTER && k != PTR_HOST &&
        !(pi.flags & SIM_F_MANAGED))
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attribute(data, attribute, ptr, &pi);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                        void **data, CUdeviceptr ptr)
{
    ENTER();
    if (numAttributes == 0 || !attributes || !data) return CUDA_ERROR_INVALID_VALUE;
    struct ptr_info pi;
    if (sim_drv_classify(ptr, &pi) == PTR_FOREIGN) pi.kind = PTR_NONE;
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
        CUresult r = pointer_attribute(data[i], attributes[i], ptr, &pi);
        if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
}

/* ---- legacy 32-bit-pointer allocation entry points ---- */

/* Simulated device pointers are mapping addresses above 4 GiB: they never
 * fit a CUdeviceptr_v1, so the legacy allocators report NOT_SUPPORTED. The
 * legacy copy/set/free forms above accept 32-bit values (which then match no
 * allocation). */
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    ENTER();
    (void)bytesize;
    return dptr ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                 unsigned int WidthInBytes, unsigned int Height,
                                 unsigned int ElementSizeBytes)
{
    ENTER();
    (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
    return dptr ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr)
{
    return cuMemFree_v2(dptr);
}

CUresult CUDAAPI cuMemGetInfo(unsigned int *free, unsigned int *total)
{
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        if (free) *free = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
        if (total) *total = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
    }
    return r;
}

CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                      CUdeviceptr_v1 dptr)
{
    CUdeviceptr b;
    size_t s;
    CUresult r = cuMemGetAddressRange_v2(&b, &s, dptr);
    if (r == CUDA_SUCCESS) {
        if (b > UINT_MAX || s > UINT_MAX) return CUDA_ERROR_NOT_SUPPORTED;
        if (pbase) *pbase = (CUdeviceptr_v1)b;
        if (psize) *psize = (unsigned int)s;
    }
    return r;
}
