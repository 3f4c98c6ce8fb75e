/*
 * resolver.c: cuGetProcAddress / cuGetProcAddress_v2 of the simulated
 * driver, driven by one table.
 *
 * Each row names a base symbol (what callers ask for, e.g. "cuMemAlloc"),
 * the function that implements one ABI of it, the CUDA version that
 * introduced that ABI and whether it is the per-thread-default-stream
 * variant (_ptds/_ptsz). The versions are the ones NVIDIA encodes in the
 * PFN_<name>_v<version> typedefs of the toolkit's cudaTypedefs.h (CUDA 13.0):
 * cuMemAlloc 2000 -> cuMemAlloc, 3020 -> cuMemAlloc_v2; cuIpcOpenMemHandle
 * 4010 -> v1, 11000 -> _v2; cuCtxCreate 2000/3020/11040/12050 -> v1.._v4;
 * cuMemPrefetchAsync 8000 -> v1 (CUdevice), 12020 -> _v2 (CUmemLocation),
 * each with a _ptsz twin; cuMemAdvise 8000/12020 -> v1/_v2; per-thread
 * variants 7000 (cuLaunchKernelEx 11060), and so on.
 *
 * Resolution, as documented for the real driver:
 * - the newest row with version <= cudaVersion wins;
 * - with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in flags, a
 *   per-thread row wins over a legacy one when one qualifies; otherwise
 *   (CU_GET_PROC_ADDRESS_DEFAULT = 0 or LEGACY_STREAM) per-thread rows are
 *   never returned;
 * - an unknown name: *pfn = NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND and
 *   CUDA_ERROR_NOT_FOUND; a known name whose every row is newer than
 *   cudaVersion: *pfn = NULL, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT and
 *   CUDA_ERROR_NOT_FOUND;
 * - NULL symbol or pfn, unknown flag bits, or cudaVersion above the driver
 *   version (13000): CUDA_ERROR_INVALID_VALUE.
 * Resolution needs no cuInit. Every implementation is also exported under
 * its own name for plain dlsym.
 *
 * Binding. NVIDIA's driver hands out its own internal addresses, whatever
 * else the process has loaded: a library preloaded in front of libcuda
 * that exports cuMemAlloc_v2 is never what cuGetProcAddress returns. The
 * simulator does the same: libcuda is linked with -Bsymbolic-functions, so
 * `&cuMemAlloc_v2` below (and every call between the driver's own
 * functions) binds inside the library at link time instead of through the
 * dynamic linker's global scope. SIMCUDA_PROC_ADDRESS (read at every call,
 * so a test can switch it) changes what is handed out:
 * - unset or "internal": the implementation's own address, the one that
 *   dlsym(libcuda handle, name) also returns;
 * - "alias": for the IPC and allocation functions (cuMemAlloc, cuMemFree,
 *   cuMemGetInfo, cuIpcGetMemHandle, cuIpcOpenMemHandle,
 *   cuIpcCloseMemHandle: the rows whose implementation has a twin below) an
 *   internal twin whose address differs from dlsym's answer, as a driver
 *   that hands out unexported internal entry points would; the others as
 *   "internal";
 * - "global": the address the dynamic linker resolves the implementation's
 *   name to in the global scope (dlsym(RTLD_DEFAULT)), which under
 *   LD_PRELOAD is the preloaded library's function: how the simulator
 *   bound before -Bsymbolic, kept so a test can show the difference.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SIM_DRIVER_VERSION 13000

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags,
                                     CUdriverProcAddressQueryResult *symbolStatus);

/* X(base name, implementation, introduced in, per-thread variant) */
#define SIM_SYMBOLS(X)                                                                             \
    X(cuInit, cuInit, 2000, 0)                                                                     \
    X(cuDriverGetVersion, cuDriverGetVersion, 2020, 0)                                             \
    X(cuGetErrorString, cuGetErrorString, 6000, 0)                                                 \
    X(cuGetErrorName, cuGetErrorName, 6000, 0)                                                     \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                                                \
    X(cuGetProcAddress, cuGetProcAddress_v2, 12000, 0)                                             \
    X(cuDeviceGet, cuDeviceGet, 2000, 0)                                                           \
    X(cuDeviceGetCount, cuDeviceGetCount, 2000, 0)                                                 \
    X(cuDeviceGetName, cuDeviceGetName, 2000, 0)                                                   \
    X(cuDeviceGetUuid, cuDeviceGetUuid, 9020, 0)                                                   \
    X(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040, 0)                                               \
    X(cuDeviceTotalMem, cuDeviceTotalMem, 2000, 0)                                                 \
    X(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020, 0)                                              \
    X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0)                                         \
    X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, 0)                                           \
    X(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, 0)                                       \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)                                 \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0)                               \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000, 0)                           \
    X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 7000, 0)                             \
    X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2, 11000, 0)                         \
    X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, 0)                             \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)                                   \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000, 0)                               \
    X(cuCtxCreate, cuCtxCreate, 2000, 0)                                                           \
    X(cuCtxCreate, cuCtxCreate_v2, 3020, 0)                                                        \
    X(cuCtxCreate, cuCtxCreate_v3, 11040, 0)                                                       \
    X(cuCtxCreate, cuCtxCreate_v4, 12050, 0)                                                       \
    X(cuCtxDestroy, cuCtxDestroy, 2000, 0)                                                         \
    X(cuCtxDestroy, cuCtxDestroy_v2, 4000, 0)                                                      \
    X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0)                                                   \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                                                   \
    X(cuCtxPushCurrent, cuCtxPushCurrent, 2000, 0)                                                 \
    X(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000, 0)                                              \
    X(cuCtxPopCurrent, cuCtxPopCurrent, 2000, 0)                                                   \
    X(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000, 0)                                                \
    X(cuCtxGetDevice, cuCtxGetDevice, 2000, 0)                                                     \
    X(cuCtxGetDevice, cuCtxGetDevice_v2, 13000, 0)                                                 \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0)                                                 \
    X(cuCtxSynchronize, cuCtxSynchronize_v2, 13000, 0)                                             \
    X(cuCtxGetFlags, cuCtxGetFlags, 7000, 0)                                                       \
    X(cuCtxGetApiVersion, cuCtxGetApiVersion, 3020, 0)                                             \
    X(cuCtxGetId, cuCtxGetId, 12000, 0)                                                            \
    X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050, 0)                           \
    X(cuMemGetInfo, cuMemGetInfo, 2000, 0)                                                         \
    X(cuMemGetInfo, cuMemGetInfo_v2, 3020, 0)                                                      \
    X(cuMemAlloc, cuMemAlloc, 2000, 0)                                                             \
    X(cuMemAlloc, cuMemAlloc_v2, 3020, 0)                                                          \
    X(cuMemAllocPitch, cuMemAllocPitch, 2000, 0)                                                   \
    X(cuMemAllocPitch, cuMemAllocPitch_v2, 3020, 0)                                                \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                                               \
    X(cuMemFree, cuMemFree, 2000, 0)                                                               \
    X(cuMemPrefetchAsync, cuMemPrefetchAsync, 8000, 0)                                             \
    X(cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz, 8000, 1)                                        \
    X(cuMemPrefetchAsync, cuMemPrefetchAsync_v2, 12020, 0)                                         \
    X(cuMemPrefetchAsync, cuMemPrefetchAsync_v2_ptsz, 12020, 1)                                    \
    X(cuMemAdvise, cuMemAdvise, 8000, 0)                                                           \
    X(cuMemAdvise, cuMemAdvise_v2, 12020, 0)                                                       \
    X(cuMemFree, cuMemFree_v2, 3020, 0)                                                            \
    X(cuMemGetAddressRange, cuMemGetAddressRange, 2000, 0)                                         \
    X(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020, 0)                                      \
    X(cuMemAllocHost, cuMemAllocHost, 2000, 0)                                                     \
    X(cuMemAllocHost, cuMemAllocHost_v2, 3020, 0)                                                  \
    X(cuMemFreeHost, cuMemFreeHost, 2000, 0)                                                       \
    X(cuMemHostAlloc, cuMemHostAlloc, 2020, 0)                                                     \
    X(cuMemHostRegister, cuMemHostRegister, 4000, 0)                                               \
    X(cuMemHostRegister, cuMemHostRegister_v2, 6050, 0)                                            \
    X(cuMemHostUnregister, cuMemHostUnregister, 4000, 0)                                           \
    X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, 3020, 0)                            \
    X(cuProfilerStart, cuProfilerStart, 4000, 0)                                                   \
    X(cuProfilerStop, cuProfilerStop, 4000, 0)                                                     \
    X(cuPointerGetAttribute, cuPointerGetAttribute, 4000, 0)                                       \
    X(cuPointerGetAttributes, cuPointerGetAttributes, 7000, 0)                                     \
    X(cuMemcpy, cuMemcpy, 4000, 0)                                                                 \
    X(cuMemcpy, cuMemcpy_ptds, 7000, 1)                                                            \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0)                                                       \
    X(cuMemcpyAsync, cuMemcpyAsync_ptsz, 7000, 1)                                                  \
    X(cuMemcpyHtoD, cuMemcpyHtoD, 2000, 0)                                                         \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020, 0)                                                      \
    X(cuMemcpyHtoD, cuMemcpyHtoD_v2_ptds, 7000, 1)                                                 \
    X(cuMemcpyDtoH, cuMemcpyDtoH, 2000, 0)                                                         \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020, 0)                                                      \
    X(cuMemcpyDtoH, cuMemcpyDtoH_v2_ptds, 7000, 1)                                                 \
    X(cuMemcpyDtoD, cuMemcpyDtoD, 2000, 0)                                                         \
    X(cuMemcpyDtoD, cuMemcpyDtoD_v2, 3020, 0)                                                      \
    X(cuMemcpyDtoD, cuMemcpyDtoD_v2_ptds, 7000, 1)                                                 \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync, 2000, 0)                                               \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020, 0)                                            \
    X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2_ptsz, 7000, 1)                                       \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync, 2000, 0)                                               \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020, 0)                                            \
    X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2_ptsz, 7000, 1)                                       \
    X(cuGraphCreate, cuGraphCreate, 10000, 0)                                                      \
    X(cuGraphDestroy, cuGraphDestroy, 10000, 0)                                                    \
    X(cuGraphAddKernelNode, cuGraphAddKernelNode_v2, 12000, 0)                                     \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0)                          \
    X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0)                                            \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0)                                                      \
    X(cuGraphLaunch, cuGraphLaunch_ptsz, 10000, 1)                                                 \
    X(cuMemcpy2D, cuMemcpy2D_v2, 3020, 0)                                                          \
    X(cuMemcpy2DUnaligned, cuMemcpy2DUnaligned_v2, 3020, 0)                                        \
    X(cuMemcpy2DAsync, cuMemcpy2DAsync_v2, 3020, 0)                                                \
    X(cuMemcpy2DAsync, cuMemcpy2DAsync_v2_ptsz, 7000, 1)                                           \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync, 3000, 0)                                               \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020, 0)                                            \
    X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2_ptsz, 7000, 1)                                       \
    X(cuMemsetD8, cuMemsetD8, 2000, 0)                                                             \
    X(cuMemsetD8, cuMemsetD8_v2, 3020, 0)                                                          \
    X(cuMemsetD8, cuMemsetD8_v2_ptds, 7000, 1)                                                     \
    X(cuMemsetD16, cuMemsetD16, 2000, 0)                                                           \
    X(cuMemsetD16, cuMemsetD16_v2, 3020, 0)                                                        \
    X(cuMemsetD16, cuMemsetD16_v2_ptds, 7000, 1)                                                   \
    X(cuMemsetD32, cuMemsetD32, 2000, 0)                                                           \
    X(cuMemsetD32, cuMemsetD32_v2, 3020, 0)                                                        \
    X(cuMemsetD32, cuMemsetD32_v2_ptds, 7000, 1)                                                   \
    X(cuMemsetD8Async, cuMemsetD8Async, 3020, 0)                                                   \
    X(cuMemsetD8Async, cuMemsetD8Async_ptsz, 7000, 1)                                              \
    X(cuMemsetD16Async, cuMemsetD16Async, 3020, 0)                                                 \
    X(cuMemsetD16Async, cuMemsetD16Async_ptsz, 7000, 1)                                            \
    X(cuMemsetD32Async, cuMemsetD32Async, 3020, 0)                                                 \
    X(cuMemsetD32Async, cuMemsetD32Async_ptsz, 7000, 1)                                            \
    X(cuMemsetD2D8, cuMemsetD2D8_v2, 3020, 0)                                                      \
    X(cuMemsetD2D8, cuMemsetD2D8_v2_ptds, 7000, 1)                                                 \
    X(cuMemsetD2D16, cuMemsetD2D16_v2, 3020, 0)                                                    \
    X(cuMemsetD2D16, cuMemsetD2D16_v2_ptds, 7000, 1)                                               \
    X(cuMemsetD2D32, cuMemsetD2D32_v2, 3020, 0)                                                    \
    X(cuMemsetD2D32, cuMemsetD2D32_v2_ptds, 7000, 1)                                               \
    X(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020, 0)                                               \
    X(cuMemsetD2D8Async, cuMemsetD2D8Async_ptsz, 7000, 1)                                          \
    X(cuMemsetD2D16Async, cuMemsetD2D16Async, 3020, 0)                                             \
    X(cuMemsetD2D16Async, cuMemsetD2D16Async_ptsz, 7000, 1)                                        \
    X(cuMemsetD2D32Async, cuMemsetD2D32Async, 3020, 0)                                             \
    X(cuMemsetD2D32Async, cuMemsetD2D32Async_ptsz, 7000, 1)                                        \
    X(cuStreamCreate, cuStreamCreate, 2000, 0)                                                     \
    X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, 0)                             \
    X(cuStreamDestroy, cuStreamDestroy, 2000, 0)                                                   \
    X(cuStreamDestroy, cuStreamDestroy_v2, 4000, 0)                                                \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0)                                           \
    X(cuStreamSynchronize, cuStreamSynchronize_ptsz, 7000, 1)                                      \
    X(cuStreamQuery, cuStreamQuery, 2000, 0)                                                       \
    X(cuStreamQuery, cuStreamQuery_ptsz, 7000, 1)                                                  \
    X(cuStreamIsCapturing, cuStreamIsCapturing, 10000, 0)                                          \
    X(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, 10000, 1)                                     \
    X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, 0)                                               \
    X(cuStreamWaitEvent, cuStreamWaitEvent_ptsz, 7000, 1)                                          \
    X(cuEventCreate, cuEventCreate, 2000, 0)                                                       \
    X(cuEventRecord, cuEventRecord, 2000, 0)                                                       \
    X(cuEventRecord, cuEventRecord_ptsz, 7000, 1)                                                  \
    X(cuEventQuery, cuEventQuery, 2000, 0)                                                         \
    X(cuEventSynchronize, cuEventSynchronize, 2000, 0)                                             \
    X(cuEventElapsedTime, cuEventElapsedTime, 2000, 0)                                             \
    X(cuEventElapsedTime, cuEventElapsedTime_v2, 12080, 0)                                         \
    X(cuEventDestroy, cuEventDestroy, 2000, 0)                                                     \
    X(cuEventDestroy, cuEventDestroy_v2, 4000, 0)                                                  \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0)                                               \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, 0)                                             \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000, 0)                                         \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0)                                           \
    X(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010, 0)                                           \
    X(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010, 0)                                         \
    X(cuModuleLoadData, cuModuleLoadData, 2000, 0)                                                 \
    X(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, 0)                                       \
    X(cuModuleUnload, cuModuleUnload, 2000, 0)                                                     \
    X(cuModuleGetFunction, cuModuleGetFunction, 2000, 0)                                           \
    X(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040, 0)                                            \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0)                                                     \
    X(cuLaunchKernel, cuLaunchKernel_ptsz, 7000, 1)                                                \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0)                                                \
    X(cuLaunchKernelEx, cuLaunchKernelEx_ptsz, 11060, 1)                                           \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                                                  \
    X(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020, 1)                                             \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                                                    \
    X(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020, 1)                                               \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)                                  \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020, 1)                             \
    X(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020, 0)                              \
    X(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020, 0)                                            \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0)                                                  \
    X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020, 0)                                      \
    X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020, 0)                                      \
    X(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020, 0)                                            \
    X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)                                                  \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)                                                \
    X(cuMemPoolSetAccess, cuMemPoolSetAccess, 11020, 0)                                            \
    X(cuMemPoolGetAccess, cuMemPoolGetAccess, 11020, 0)                                            \
    X(cuMemPoolExportToShareableHandle, cuMemPoolExportToShareableHandle, 11020, 0)                \
    X(cuMemPoolImportFromShareableHandle, cuMemPoolImportFromShareableHandle, 11020, 0)            \
    X(cuMemPoolExportPointer, cuMemPoolExportPointer, 11020, 0)                                    \
    X(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020, 0)                                    \
    X(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020, 0)                      \
    X(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020, 0)    \
    X(cuMemCreate, cuMemCreate, 10020, 0)                                                          \
    X(cuMemRelease, cuMemRelease, 10020, 0)                                                        \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0)                          \
    X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                                          \
    X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                                                \
    X(cuMemMap, cuMemMap, 10020, 0)                                                                \
    X(cuMemUnmap, cuMemUnmap, 10020, 0)                                                            \
    X(cuMemSetAccess, cuMemSetAccess, 10020, 0)                                                    \
    X(cuMemGetAccess, cuMemGetAccess, 10020, 0)                                                    \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, 0)                        \
    X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0)

struct sym {
    const char *base;
    const char *name; /* the implementation's exported name */
    void *fn;
    int version;
    int per_thread;
};

#define ROW(base, impl, version, pt) {#base, #impl, (void *)&impl, version, pt},
static const struct sym g_syms[] = {SIM_SYMBOLS(ROW)};
#undef ROW

/* Internal twins of the functions a program needs for IPC (mode "alias"):
 * same behaviour, their own addresses, never exported. */
static CUresult CUDAAPI twin_cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    return cuMemAlloc_v2(p, n);
}
static CUresult CUDAAPI twin_cuMemFree_v2(CUdeviceptr p)
{
    return cuMemFree_v2(p);
}
static CUresult CUDAAPI twin_cuMemGetInfo_v2(size_t *f, size_t *t)
{
    return cuMemGetInfo_v2(f, t);
}
static CUresult CUDAAPI twin_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    return cuIpcGetMemHandle(h, p);
}
static CUresult CUDAAPI twin_cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned f)
{
    return cuIpcOpenMemHandle_v2(p, h, f);
}
static CUresult CUDAAPI twin_cuIpcCloseMemHandle(CUdeviceptr p)
{
    return cuIpcCloseMemHandle(p);
}

static const struct {
    void *fn, *twin;
} g_twins[] = {
    {(void *)&cuMemAlloc_v2, (void *)&twin_cuMemAlloc_v2},
    {(void *)&cuMemFree_v2, (void *)&twin_cuMemFree_v2},
    {(void *)&cuMemGetInfo_v2, (void *)&twin_cuMemGetInfo_v2},
    {(void *)&cuIpcGetMemHandle, (void *)&twin_cuIpcGetMemHandle},
    {(void *)&cuIpcOpenMemHandle_v2, (void *)&twin_cuIpcOpenMemHandle_v2},
    {(void *)&cuIpcCloseMemHandle, (void *)&twin_cuIpcCloseMemHandle},
};

/* What to hand out for row s under SIMCUDA_PROC_ADDRESS (see the top). */
static void *handed_out(const struct sym *s)
{
    const char *mode = getenv("SIMCUDA_PROC_ADDRESS");
    if (!mode || !*mode || !strcmp(mode, "internal")) return s->fn;
    if (!strcmp(mode, "alias")) {
        for (size_t i = 0; i < sizeof(g_twins) / sizeof(g_twins[0]); i++)
            if (g_twins[i].fn == s->fn) return g_twins[i].twin;
        return s->fn;
    }
    if (!strcmp(mode, "global")) {
        void *p = dlsym(RTLD_DEFAULT, s->name);
        return p ? p : s->fn;
    }
    return s->fn;
}

/* Implements both resolver entry points; status may be NULL. */
static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status)
{
    const cuuint64_t known =
        CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (pfn) *pfn = NULL;
    if (!symbol || !pfn || (flags & ~known) || cudaVersion > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct sym *legacy = NULL, *pt = NULL;
    int found = 0;
    for (size_t i = 0; i < sizeof(g_syms) / sizeof(g_syms[0]); i++) {
        const struct sym *s = &g_syms[i];
        if (strcmp(s->base, symbol) != 0) continue;
        found = 1;
        if (s->version > cudaVersion) continue;
        const struct sym **best = s->per_thread ? &pt : &legacy;
        if (!*best || s->version > (*best)->version) *best = s;
    }
    const struct sym *pick = per_thread && pt ? pt : legacy;
    if (!pick) {
        if (status && found) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = handed_out(pick);
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return resolve(symbol, pfn, cudaVersion, flags, NULL);
}
