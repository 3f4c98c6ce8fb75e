/*
 * runtime_internal.h: what the parts of the simulated runtime
 * (libcudart.so.13) share: the table of driver functions resolved through
 * cuGetProcAddress_v2 (filled once by runtime.c), how to call them, and
 * runtime.c's helpers for the error state and the current context. Internal
 * to the library (hidden visibility). runtime.c owns the process state;
 * runtime_mem.c (memory calls) and runtime_pool.c (stream-ordered
 * allocation, pools and pool IPC) use it only through what is declared
 * here.
 */
#ifndef SIMRT_RUNTIME_INTERNAL_H
#define SIMRT_RUNTIME_INTERNAL_H

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#define SIMRT_API __attribute__((visibility("default")))
#define SIMRT_INTERNAL __attribute__((visibility("hidden")))
#define SIMRT_MAX_DEVICES 64

/* ------------------------------------------------------------------------ */
/* The resolved-function table.                                             */
/*                                                                          */
/* One line per driver function: its base name as cuGetProcAddress_v2 wants */
/* it (no _v2/_ptsz suffix), the version of its ABI that the resolver hands */
/* out for cudaVersion 13000 (the PFN_<name>_v<version> typedef of          */
/* cudaTypedefs.h: e.g. cuMemAlloc 3020 is cuMemAlloc_v2, cuCtxSynchronize  */
/* 13000 is cuCtxSynchronize_v2(CUcontext)), and whether it has a           */
/* per-thread-default-stream variant. #name and fn_##name are not           */
/* macro-expanded, so cuda.h's renaming macros do not touch them.           */
/* Slot [0] is resolved with CU_GET_PROC_ADDRESS_DEFAULT, slot [1] with     */
/* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM when the function has such */
/* a variant, else it is a copy of slot [0].                                */
/* ------------------------------------------------------------------------ */
#define SIMRT_DRIVER_FUNCS(X)                                                                      \
    X(cuInit, 2000, 0)                                                                             \
    X(cuDriverGetVersion, 2020, 0)                                                                 \
    X(cuDeviceGet, 2000, 0)                                                                        \
    X(cuDeviceGetCount, 2000, 0)                                                                   \
    X(cuDeviceGetName, 2000, 0)                                                                    \
    X(cuDeviceTotalMem, 3020, 0)                                                                   \
    X(cuDeviceGetAttribute, 2000, 0)                                                               \
    X(cuDevicePrimaryCtxRetain, 7000, 0)                                                           \
    X(cuDevicePrimaryCtxRelease, 11000, 0)                                                         \
    X(cuDevicePrimaryCtxReset, 11000, 0)                                                           \
    X(cuCtxSetCurrent, 4000, 0)                                                                    \
    X(cuCtxGetCurrent, 4000, 0)                                                                    \
    X(cuCtxSynchronize, 13000, 0)                                                                  \
    X(cuMemAlloc, 3020, 0)                                                                         \
    X(cuMemAllocManaged, 6000, 0)                                                                  \
    X(cuMemPrefetchAsync, 12020, 1)                                                                \
    X(cuMemAdvise, 12020, 0)                                                                       \
    X(cuMemAllocPitch, 3020, 0)                                                                    \
    X(cuMemFree, 3020, 0)                                                                          \
    X(cuMemAllocHost, 3020, 0)                                                                     \
    X(cuMemHostAlloc, 2020, 0)                                                                     \
    X(cuMemFreeHost, 2000, 0)                                                                      \
    X(cuMemGetInfo, 3020, 0)                                                                       \
    X(cuMemcpy, 4000, 1)                                                                           \
    X(cuMemcpyAsync, 4000, 1)                                                                      \
    X(cuMemsetD8, 3020, 1)                                                                         \
    X(cuMemsetD8Async, 3020, 1)                                                                    \
    X(cuPointerGetAttributes, 7000, 0)                                                             \
    X(cuIpcGetMemHandle, 4010, 0)                                                                  \
    X(cuIpcOpenMemHandle, 11000, 0)                                                                \
    X(cuIpcCloseMemHandle, 4010, 0)                                                                \
    X(cuIpcGetEventHandle, 4010, 0)                                                                \
    X(cuIpcOpenEventHandle, 4010, 0)                                                               \
    X(cuStreamCreate, 2000, 0)                                                                     \
    X(cuStreamDestroy, 4000, 0)                                                                    \
    X(cuStreamSynchronize, 2000, 1)                                                                \
    X(cuStreamQuery, 2000, 1)                                                                      \
    X(cuEventCreate, 2000, 0)                                                                      \
    X(cuEventRecord, 2000, 1)                                                                      \
    X(cuEventSynchronize, 2000, 0)                                                                 \
    X(cuEventElapsedTime, 12080, 0)                                                                \
    X(cuEventDestroy, 4000, 0)                                                                     \
    X(cuEventQuery, 2000, 0)                                                                       \
    X(cuModuleLoadData, 2000, 0)                                                                   \
    X(cuModuleGetFunction, 2000, 0)                                                                \
    X(cuFuncGetParamInfo, 12040, 0)                                                                \
    X(cuLaunchKernel, 4000, 1)                                                                     \
    X(cuDeviceCanAccessPeer, 4000, 0)                                                              \
    X(cuStreamWaitEvent, 3020, 1)                                                                  \
    X(cuMemAllocAsync, 11020, 1)                                                                   \
    X(cuMemFreeAsync, 11020, 1)                                                                    \
    X(cuMemAllocFromPoolAsync, 11020, 1)                                                           \
    X(cuDeviceGetDefaultMemPool, 11020, 0)                                                         \
    X(cuMemPoolTrimTo, 11020, 0)                                                                   \
    X(cuMemPoolSetAttribute, 11020, 0)                                                             \
    X(cuMemPoolGetAttribute, 11020, 0)                                                             \
    X(cuDeviceGetMemPool, 11020, 0)                                                                \
    X(cuDeviceSetMemPool, 11020, 0)                                                                \
    X(cuMemPoolCreate, 11020, 0)                                                                   \
    X(cuMemPoolDestroy, 11020, 0)                                                                  \
    X(cuMemPoolSetAccess, 11020, 0)                                                                \
    X(cuMemPoolGetAccess, 11020, 0)                                                                \
    X(cuMemPoolExportToShareableHandle, 11020, 0)                                                  \
    X(cuMemPoolImportFromShareableHandle, 11020, 0)                                                \
    X(cuMemPoolExportPointer, 11020, 0)                                                            \
    X(cuMemPoolImportPointer, 11020, 0)

#define SIMRT_SLOT(name, ver, pt) PFN_##name##_v##ver fn_##name[2];
struct simrt_drv {
    SIMRT_DRIVER_FUNCS(SIMRT_SLOT)
};
#undef SIMRT_SLOT
/* The table, filled once by runtime.c's do_init. */
SIMRT_INTERNAL extern struct simrt_drv simrt_drv;

/* DRV: the slot of driver function `name`, variant pt (0 default, 1
 * per-thread). DRV_CALL: calls it, or yields CUDA_ERROR_NOT_SUPPORTED when
 * the driver lacks it. Both paste `name` directly (##) so that cuda.h's
 * renaming macros do not apply; do not wrap them in further macros that
 * pass `name` on unpasted. */
#define DRV(name, pt) (simrt_drv.fn_##name[(pt) ? 1 : 0])
#define DRV_CALL(name, pt, ...)                                                                    \
    (simrt_drv.fn_##name[(pt) ? 1 : 0] ? simrt_drv.fn_##name[(pt) ? 1 : 0](__VA_ARGS__)            \
                                       : CUDA_ERROR_NOT_SUPPORTED)

/* Records err as the calling thread's last error (unless it is success). */
SIMRT_INTERNAL cudaError_t simrt_record(cudaError_t err);
/* Maps a driver result through the error table and records it. */
SIMRT_INTERNAL cudaError_t simrt_finish(CUresult r);
/* Makes the calling thread's current device usable (lazy init, primary
 * context retained and current); returns the error, unrecorded. */
SIMRT_INTERNAL cudaError_t simrt_ensure_context(void);
/* The CUdevice of runtime ordinal `device` (initialising the runtime). */
SIMRT_INTERNAL cudaError_t simrt_cu_device(int device, CUdevice *out);

/* Returns (and records) the error if the thread's context cannot be made
 * current. */
#define NEED_CONTEXT()                                                                             \
    do {                                                                                           \
        cudaError_t ctx_err_ = simrt_ensure_context();                                             \
        if (ctx_err_ != cudaSuccess) return simrt_record(ctx_err_);                                \
    } while (0)

#define CHECK_ARG(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) return simrt_record(cudaErrorInvalidValue);                                   \
    } while (0)

#endif /* SIMRT_RUNTIME_INTERNAL_H */
