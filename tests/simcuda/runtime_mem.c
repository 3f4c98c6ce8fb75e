/*
 * runtime_mem.c: the simulated runtime's memory calls: device, managed,
 * pitched and pinned host allocation and their frees, prefetch and advice,
 * memory info, copies and sets (with their per-thread-stream twins), and
 * pointer attributes. Each one makes the thread's context usable
 * (NEED_CONTEXT) and calls the driver through the resolved table
 * (runtime_internal.h); driver results map through runtime.c's error table.
 * 3D allocation is runtime.c's, stream-ordered allocation runtime_pool.c's.
 */
#include "runtime_internal.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Memory.                                                                  */
/* ------------------------------------------------------------------------ */
SIMRT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    CHECK_ARG(devPtr);
    NEED_CONTEXT();
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    CUresult r = DRV_CALL(cuMemAlloc, 0, &p, size);
    if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)p;
    return simrt_finish(r);
}

SIMRT_API cudaError_t cudaFree(void *devPtr)
{
    NEED_CONTEXT(); /* cudaFree(NULL) is the classic "initialise now" call */
    if (!devPtr) return cudaSuccess;
    return simrt_finish(DRV_CALL(cuMemFree, 0, (CUdeviceptr)(uintptr_t)devPtr));
}

/* Managed memory: cudaMemAttachGlobal/Host equal CU_MEM_ATTACH_GLOBAL/HOST;
 * freed with cudaFree. Unlike cudaMalloc, size 0 is an error. */
SIMRT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    CHECK_ARG(devPtr);
    CHECK_ARG(size > 0 && (flags == cudaMemAttachGlobal || flags == cudaMemAttachHost));
    NEED_CONTEXT();
    CUdeviceptr p = 0;
    CUresult r = DRV_CALL(cuMemAllocManaged, 0, &p, size, flags);
    if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)p;
    return simrt_finish(r);
}

/* cudaMemLocation and CUmemLocation are the same {type, id} pair with the
 * same type values. */
static CUmemLocation cu_location(struct cudaMemLocation l)
{
    CUmemLocation c;
    memset(&c, 0, sizeof c);
    c.type = (CUmemLocationType)l.type;
    c.id = l.id;
    return c;
}

static cudaError_t prefetch(const void *devPtr, size_t count, struct cudaMemLocation location,
                            unsigned int flags, cudaStream_t stream, int pt)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPrefetchAsync, pt, (CUdeviceptr)(uintptr_t)devPtr, count,
                                 cu_location(location), flags, stream));
}

SIMRT_API cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count,
                                           struct cudaMemLocation location, unsigned int flags,
                                           cudaStream_t stream)
{
    return prefetch(devPtr, count, location, flags, stream, 0);
}

SIMRT_API cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count,
                                                struct cudaMemLocation location, unsigned int flags,
                                                cudaStream_t stream)
{
    return prefetch(devPtr, count, location, flags, stream, 1);
}

/* cudaMemoryAdvise values equal CUmem_advise's. */
SIMRT_API cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
                                    struct cudaMemLocation location)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemAdvise, 0, (CUdeviceptr)(uintptr_t)devPtr, count,
                                 (CUmem_advise)advice, cu_location(location)));
}

/* Uses cuMemAllocPitch when the driver has it, else a 512-byte aligned
 * pitch over a plain allocation. */
SIMRT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    CHECK_ARG(devPtr && pitch);
    NEED_CONTEXT();
    if (width == 0 || height == 0) {
        *devPtr = NULL;
        *pitch = 0;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    size_t pt = 0;
    CUresult r;
    if (DRV(cuMemAllocPitch, 0)) {
        r = DRV(cuMemAllocPitch, 0)(&p, &pt, width, height, 4);
    } else {
        if (width > SIZE_MAX - 511) return simrt_record(cudaErrorMemoryAllocation);
        pt = (width + 511) & ~(size_t)511;
        if (height > SIZE_MAX / pt) return simrt_record(cudaErrorMemoryAllocation);
        r = DRV_CALL(cuMemAlloc, 0, &p, pt * height);
    }
    if (r == CUDA_SUCCESS) {
        *devPtr = (void *)(uintptr_t)p;
        *pitch = pt;
    }
    return simrt_finish(r);
}

SIMRT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    CHECK_ARG(ptr);
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemAllocHost, 0, ptr, size));
}

/* cudaHostAlloc* flag values equal CU_MEMHOSTALLOC_* (1, 2, 4). */
SIMRT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    CHECK_ARG(pHost);
    CHECK_ARG((flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped |
                                   cudaHostAllocWriteCombined)) == 0);
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemHostAlloc, 0, pHost, size, flags));
}

SIMRT_API cudaError_t cudaFreeHost(void *ptr)
{
    NEED_CONTEXT();
    if (!ptr) return cudaSuccess;
    return simrt_finish(DRV_CALL(cuMemFreeHost, 0, ptr));
}

SIMRT_API cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    CHECK_ARG(free && total);
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemGetInfo, 0, free, total));
}

/* All directions go through cuMemcpy/cuMemcpyAsync: with unified addressing
 * the driver tells host from device pointers, as for cudaMemcpyDefault. */
static cudaError_t memcpy_common(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                 int async, cudaStream_t stream, int pt)
{
    if ((unsigned)kind > (unsigned)cudaMemcpyDefault)
        return simrt_record(cudaErrorInvalidMemcpyDirection);
    NEED_CONTEXT();
    if (count == 0) return cudaSuccess;
    CHECK_ARG(dst && src);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst, s = (CUdeviceptr)(uintptr_t)src;
    if (async) return simrt_finish(DRV_CALL(cuMemcpyAsync, pt, d, s, count, stream));
    return simrt_finish(DRV_CALL(cuMemcpy, pt, d, s, count));
}

SIMRT_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    return memcpy_common(dst, src, count, kind, 0, NULL, 0);
}

SIMRT_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind)
{
    return memcpy_common(dst, src, count, kind, 0, NULL, 1);
}

SIMRT_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_common(dst, src, count, kind, 1, stream, 0);
}

SIMRT_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                           enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return memcpy_common(dst, src, count, kind, 1, stream, 1);
}

static cudaError_t memset_common(void *devPtr, int value, size_t count, int async,
                                 cudaStream_t stream, int pt)
{
    NEED_CONTEXT();
    if (count == 0) return cudaSuccess;
    CHECK_ARG(devPtr);
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)devPtr;
    if (async)
        return simrt_finish(DRV_CALL(cuMemsetD8Async, pt, d, (unsigned char)value, count, stream));
    return simrt_finish(DRV_CALL(cuMemsetD8, pt, d, (unsigned char)value, count));
}

SIMRT_API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    return memset_common(devPtr, value, count, 0, NULL, 0);
}

SIMRT_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
    return memset_common(devPtr, value, count, 0, NULL, 1);
}

SIMRT_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    return memset_common(devPtr, value, count, 1, stream, 0);
}

SIMRT_API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                           cudaStream_t stream)
{
    return memset_common(devPtr, value, count, 1, stream, 1);
}

/* Fills type/device/devicePointer/hostPointer from cuPointerGetAttributes.
 * Memory the driver does not know is cudaMemoryTypeUnregistered with device
 * cudaInvalidDeviceId, and the call succeeds, as in CUDA >= 11. */
SIMRT_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                               const void *ptr)
{
    CHECK_ARG(attributes);
    NEED_CONTEXT();
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
        CU_POINTER_ATTRIBUTE_IS_MANAGED};
    /* 8 zeroed bytes per attribute whatever the driver writes (int, bool or
     * pointer): read back as the widest type that is meaningful. */
    uint64_t val[5] = {0};
    void *data[5] = {&val[0], &val[1], &val[2], &val[3], &val[4]};
    CUresult r = DRV_CALL(cuPointerGetAttributes, 0, 5, which, data, (CUdeviceptr)(uintptr_t)ptr);
    memset(attributes, 0, sizeof *attributes);
    attributes->device = cudaInvalidDeviceId;
    if (r == CUDA_ERROR_INVALID_VALUE && ptr) /* unknown to the driver */
        return cudaSuccess;
    if (r != CUDA_SUCCESS) return simrt_finish(r);
    unsigned int type;
    int ordinal;
    memcpy(&type, &val[0], sizeof type);
    memcpy(&ordinal, &val[1], sizeof ordinal);
    int managed = val[4] != 0;
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        attributes->type = cudaMemoryTypeHost;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_ARRAY:
    case CU_MEMORYTYPE_UNIFIED:
        attributes->type = managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
        break;
    default:
        attributes->type = cudaMemoryTypeUnregistered;
        return cudaSuccess;
    }
    attributes->device = ordinal;
    attributes->devicePointer = (void *)(uintptr_t)val[2];
    attributes->hostPointer = (void *)(uintptr_t)val[3];
    return cudaSuccess;
}
