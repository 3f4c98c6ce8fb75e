/*
 * runtime_pool.c: the simulated CUDA runtime, libcudart.so.13, stream-ordered
 * allocation, memory pools and pool IPC. Every call goes to the driver
 * entry point of the same name through the resolved table
 * (runtime_internal.h), so it behaves as driver_pool.c and
 * driver_pool_ipc.c say; driver errors map through runtime.c's one table.
 * cudaMemPool_t is CUmemoryPool; cudaMemPoolAttr, cudaMemPoolProps,
 * cudaMemAccessDesc, cudaMemLocation, cudaMemAllocationHandleType and
 * cudaMemPoolPtrExportData have the driver's values and layouts (checked
 * below). The driver frees a stream-ordered free at once (all simulated
 * work is synchronous).
 */
#include "runtime_internal.h"

#include <stddef.h>
#include <stdint.h>

_Static_assert(sizeof(struct cudaMemPoolProps) == sizeof(CUmemPoolProps), "pool props");
_Static_assert(offsetof(struct cudaMemPoolProps, location) == offsetof(CUmemPoolProps, location),
               "pool props location");
_Static_assert(offsetof(struct cudaMemPoolProps, maxSize) == offsetof(CUmemPoolProps, maxSize),
               "pool props maxSize");
_Static_assert(sizeof(struct cudaMemAccessDesc) == sizeof(CUmemAccessDesc), "access descriptor");
_Static_assert(sizeof(struct cudaMemLocation) == sizeof(CUmemLocation), "memory location");
_Static_assert(sizeof(struct cudaMemPoolPtrExportData) == sizeof(CUmemPoolPtrExportData),
               "pool export data");
_Static_assert((int)cudaMemHandleTypePosixFileDescriptor ==
                   (int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
               "handle type values");
_Static_assert((int)cudaMemAccessFlagsProtReadWrite == (int)CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
               "access flag values");

/* ------------------------------------------------------------------------ */
/* Stream-ordered allocation and the default pool.                          */
/* ------------------------------------------------------------------------ */
static cudaError_t malloc_async(void **devPtr, size_t size, cudaMemPool_t pool, int use_pool,
                                cudaStream_t stream, int pt)
{
    CHECK_ARG(devPtr);
    NEED_CONTEXT();
    if (size == 0) { /* like cudaMalloc (a guess: NVIDIA does not document it) */
        *devPtr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    CUresult r = use_pool ? DRV_CALL(cuMemAllocFromPoolAsync, pt, &p, size, pool, stream)
                          : DRV_CALL(cuMemAllocAsync, pt, &p, size, stream);
    if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)p;
    return simrt_finish(r);
}

SIMRT_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, NULL, 0, hStream, 0);
}

SIMRT_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return malloc_async(devPtr, size, NULL, 0, hStream, 1);
}

SIMRT_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                              cudaStream_t stream)
{
    return malloc_async(ptr, size, memPool, 1, stream, 0);
}

SIMRT_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                   cudaStream_t stream)
{
    return malloc_async(ptr, size, memPool, 1, stream, 1);
}

static cudaError_t free_async(void *devPtr, cudaStream_t stream, int pt)
{
    NEED_CONTEXT();
    if (!devPtr) /* like cudaFree(NULL) (a guess) */
        return cudaSuccess;
    return simrt_finish(DRV_CALL(cuMemFreeAsync, pt, (CUdeviceptr)(uintptr_t)devPtr, stream));
}

SIMRT_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, 0);
}

SIMRT_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return free_async(devPtr, hStream, 1);
}

SIMRT_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    CHECK_ARG(memPool);
    CUdevice d;
    cudaError_t e = simrt_cu_device(device, &d);
    if (e != cudaSuccess) return simrt_record(e);
    return simrt_finish(DRV_CALL(cuDeviceGetDefaultMemPool, 0, memPool, d));
}

SIMRT_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPoolTrimTo, 0, memPool, minBytesToKeep));
}

SIMRT_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value)
{
    NEED_CONTEXT();
    return simrt_finish(
        DRV_CALL(cuMemPoolSetAttribute, 0, memPool, (CUmemPool_attribute)attr, value));
}

SIMRT_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                              void *value)
{
    NEED_CONTEXT();
    return simrt_finish(
        DRV_CALL(cuMemPoolGetAttribute, 0, memPool, (CUmemPool_attribute)attr, value));
}

SIMRT_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    CHECK_ARG(memPool);
    CUdevice d;
    cudaError_t e = simrt_cu_device(device, &d);
    if (e != cudaSuccess) return simrt_record(e);
    return simrt_finish(DRV_CALL(cuDeviceGetMemPool, 0, memPool, d));
}

SIMRT_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    CUdevice d;
    cudaError_t e = simrt_cu_device(device, &d);
    if (e != cudaSuccess) return simrt_record(e);
    return simrt_finish(DRV_CALL(cuDeviceSetMemPool, 0, d, memPool));
}

/* ------------------------------------------------------------------------ */
/* Created pools, access, and pool IPC.                                     */
/* ------------------------------------------------------------------------ */
SIMRT_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool,
                                        const struct cudaMemPoolProps *poolProps)
{
    CHECK_ARG(memPool && poolProps);
    NEED_CONTEXT();
    return simrt_finish(
        DRV_CALL(cuMemPoolCreate, 0, memPool, (const CUmemPoolProps *)(const void *)poolProps));
}

SIMRT_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPoolDestroy, 0, memPool));
}

SIMRT_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool,
                                           const struct cudaMemAccessDesc *descList, size_t count)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPoolSetAccess, 0, memPool,
                                 (const CUmemAccessDesc *)(const void *)descList, count));
}

SIMRT_API cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
                                           struct cudaMemLocation *location)
{
    CHECK_ARG(flags && location);
    NEED_CONTEXT();
    CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    CUresult r = DRV_CALL(cuMemPoolGetAccess, 0, &f, memPool, (CUmemLocation *)(void *)location);
    if (r == CUDA_SUCCESS) *flags = (enum cudaMemAccessFlags)f;
    return simrt_finish(r);
}

SIMRT_API cudaError_t
cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
                                   enum cudaMemAllocationHandleType handleType, unsigned int flags)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPoolExportToShareableHandle, 0, shareableHandle, memPool,
                                 (CUmemAllocationHandleType)handleType, flags));
}

SIMRT_API cudaError_t cudaMemPoolImportFromShareableHandle(
    cudaMemPool_t *memPool, void *shareableHandle, enum cudaMemAllocationHandleType handleType,
    unsigned int flags)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPoolImportFromShareableHandle, 0, memPool, shareableHandle,
                                 (CUmemAllocationHandleType)handleType, flags));
}

SIMRT_API cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData,
                                               void *ptr)
{
    NEED_CONTEXT();
    return simrt_finish(DRV_CALL(cuMemPoolExportPointer, 0,
                                 (CUmemPoolPtrExportData *)(void *)exportData,
                                 (CUdeviceptr)(uintptr_t)ptr));
}

/* The imported pointer is freed with cudaFree or cudaFreeAsync (the driver
 * unmaps it in this process only). */
SIMRT_API cudaError_t cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
                                               struct cudaMemPoolPtrExportData *exportData)
{
    CHECK_ARG(ptr);
    NEED_CONTEXT();
    CUdeviceptr p = 0;
    CUresult r = DRV_CALL(cuMemPoolImportPointer, 0, &p, memPool,
                          (CUmemPoolPtrExportData *)(void *)exportData);
    if (r == CUDA_SUCCESS) *ptr = (void *)(uintptr_t)p;
    return simrt_finish(r);
}
