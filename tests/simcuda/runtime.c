/*
 * runtime.c: the simulated CUDA runtime, libcudart.so.13, host API half.
 *
 * Stands in for NVIDIA's shared runtime (via LD_LIBRARY_PATH) so that
 * unmodified programs linked with `nvcc -cudart shared` or `-lcudart` run on
 * the simulated driver (libcuda.so.1 from this folder). It reaches the driver
 * exactly like the real runtime does: dlopen("libcuda.so.1"), dlsym of
 * cuGetProcAddress_v2 only, and every driver entry point through that
 * resolver (so the ipcshim resolver door sees all of them). There is no link
 * dependency on libcuda: test_runtime.c checks that this library imports no
 * cu* symbol. Semantics follow the real runtime where it matters to ipcshim:
 * per-thread current device (default 0), lazy primary-context retain and
 * cuCtxSetCurrent on first use per device and thread, driver errors mapped
 * through one table, and a sticky per-thread last error. Memory calls
 * (allocation, copies, sets, pointer attributes) live in runtime_mem.c,
 * kernel registration and launch in runtime_kernels.c, stream-ordered
 * allocation, pools and pool IPC in runtime_pool.c; what they share with this file (the resolved
 * driver table among it) is runtime_internal.h. No call here exits or
 * aborts.
 */
#include "runtime_internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Shared with runtime_kernels.c (declared there too). */
SIMRT_INTERNAL cudaError_t simrt_launch(CUfunction f, dim3 grid, dim3 block, void **args,
                                        size_t shared_mem, cudaStream_t stream, int per_thread);
SIMRT_INTERNAL CUresult simrt_module_load(const void *image, CUmodule *mod);
SIMRT_INTERNAL CUresult simrt_module_function(CUmodule mod, const char *name, CUfunction *f);
SIMRT_INTERNAL cudaError_t simrt_param_info(CUfunction f, size_t index, size_t *offset,
                                            size_t *size);
SIMRT_API int simcudart_resolved_count(int *wanted);

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "IPC memory handle size");
_Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CUipcEventHandle), "IPC event handle size");

struct simrt_drv simrt_drv;

#define SIMRT_ENTRY(name, ver, pt) {#name, pt, offsetof(struct simrt_drv, fn_##name)},
static const struct {
    const char *name; /* base name given to cuGetProcAddress_v2 */
    int per_thread;   /* also resolve the per-thread-stream variant */
    size_t offset;    /* of the two-slot array in simrt_drv */
} drv_table[] = {SIMRT_DRIVER_FUNCS(SIMRT_ENTRY)};
#undef SIMRT_ENTRY

/* ------------------------------------------------------------------------ */
/* The error-mapping table: CUresult -> cudaError_t. Unlisted codes map to  */
/* cudaErrorUnknown.                                                        */
/* ------------------------------------------------------------------------ */
static const struct {
    CUresult cu;
    cudaError_t rt;
} error_map[] = {
    {CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue},
    {CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation},
    {CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError},
    {CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading},
    {CUDA_ERROR_PROFILER_DISABLED, cudaErrorProfilerDisabled},
    {CUDA_ERROR_PROFILER_NOT_INITIALIZED, cudaErrorProfilerNotInitialized},
    {CUDA_ERROR_PROFILER_ALREADY_STARTED, cudaErrorProfilerAlreadyStarted},
    {CUDA_ERROR_PROFILER_ALREADY_STOPPED, cudaErrorProfilerAlreadyStopped},
    {CUDA_ERROR_STUB_LIBRARY, cudaErrorStubLibrary},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, cudaErrorCallRequiresNewerDriver},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, cudaErrorDevicesUnavailable},
    {CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice},
    {CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice},
    {CUDA_ERROR_DEVICE_NOT_LICENSED, cudaErrorDeviceNotLicensed},
    {CUDA_ERROR_INVALID_IMAGE, cudaErrorInvalidKernelImage},
    {CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized},
    {CUDA_ERROR_MAP_FAILED, cudaErrorMapBufferObjectFailed},
    {CUDA_ERROR_UNMAP_FAILED, cudaErrorUnmapBufferObjectFailed},
    {CUDA_ERROR_ARRAY_IS_MAPPED, cudaErrorArrayIsMapped},
    {CUDA_ERROR_ALREADY_MAPPED, cudaErrorAlreadyMapped},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, cudaErrorNoKernelImageForDevice},
    {CUDA_ERROR_ALREADY_ACQUIRED, cudaErrorAlreadyAcquired},
    {CUDA_ERROR_NOT_MAPPED, cudaErrorNotMapped},
    {CUDA_ERROR_NOT_MAPPED_AS_ARRAY, cudaErrorNotMappedAsArray},
    {CUDA_ERROR_NOT_MAPPED_AS_POINTER, cudaErrorNotMappedAsPointer},
    {CUDA_ERROR_ECC_UNCORRECTABLE, cudaErrorECCUncorrectable},
    {CUDA_ERROR_UNSUPPORTED_LIMIT, cudaErrorUnsupportedLimit},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, cudaErrorDeviceAlreadyInUse},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cudaErrorPeerAccessUnsupported},
    {CUDA_ERROR_INVALID_PTX, cudaErrorInvalidPtx},
    {CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, cudaErrorInvalidGraphicsContext},
    {CUDA_ERROR_NVLINK_UNCORRECTABLE, cudaErrorNvlinkUncorrectable},
    {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, cudaErrorJitCompilerNotFound},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, cudaErrorUnsupportedPtxVersion},
    {CUDA_ERROR_JIT_COMPILATION_DISABLED, cudaErrorJitCompilationDisabled},
    {CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, cudaErrorUnsupportedExecAffinity},
    {CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, cudaErrorUnsupportedDevSideSync},
    {CUDA_ERROR_CONTAINED, cudaErrorContained},
    {CUDA_ERROR_INVALID_SOURCE, cudaErrorInvalidSource},
    {CUDA_ERROR_FILE_NOT_FOUND, cudaErrorFileNotFound},
    {CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, cudaErrorSharedObjectSymbolNotFound},
    {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, cudaErrorSharedObjectInitFailed},
    {CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem},
    {CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle},
    {CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState},
    {CUDA_ERROR_LOSSY_QUERY, cudaErrorLossyQuery},
    {CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound},
    {CUDA_ERROR_NOT_READY, cudaErrorNotReady},
    {CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cudaErrorLaunchOutOfResources},
    {CUDA_ERROR_LAUNCH_TIMEOUT, cudaErrorLaunchTimeout},
    {CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, cudaErrorLaunchIncompatibleTexturing},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cudaErrorPeerAccessAlreadyEnabled},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cudaErrorPeerAccessNotEnabled},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, cudaErrorSetOnActiveProcess},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed},
    {CUDA_ERROR_ASSERT, cudaErrorAssert},
    {CUDA_ERROR_TOO_MANY_PEERS, cudaErrorTooManyPeers},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, cudaErrorHostMemoryAlreadyRegistered},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, cudaErrorHostMemoryNotRegistered},
    {CUDA_ERROR_HARDWARE_STACK_ERROR, cudaErrorHardwareStackError},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, cudaErrorIllegalInstruction},
    {CUDA_ERROR_MISALIGNED_ADDRESS, cudaErrorMisalignedAddress},
    {CUDA_ERROR_INVALID_ADDRESS_SPACE, cudaErrorInvalidAddressSpace},
    {CUDA_ERROR_INVALID_PC, cudaErrorInvalidPc},
    {CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, cudaErrorCooperativeLaunchTooLarge},
    {CUDA_ERROR_TENSOR_MEMORY_LEAK, cudaErrorTensorMemoryLeak},
    {CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted},
    {CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported},
    {CUDA_ERROR_SYSTEM_NOT_READY, cudaErrorSystemNotReady},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, cudaErrorCompatNotSupportedOnDevice},
    {CUDA_ERROR_MPS_CONNECTION_FAILED, cudaErrorMpsConnectionFailed},
    {CUDA_ERROR_MPS_RPC_FAILURE, cudaErrorMpsRpcFailure},
    {CUDA_ERROR_MPS_SERVER_NOT_READY, cudaErrorMpsServerNotReady},
    {CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, cudaErrorMpsMaxClientsReached},
    {CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, cudaErrorMpsMaxConnectionsReached},
    {CUDA_ERROR_MPS_CLIENT_TERMINATED, cudaErrorMpsClientTerminated},
    {CUDA_ERROR_CDP_NOT_SUPPORTED, cudaErrorCdpNotSupported},
    {CUDA_ERROR_CDP_VERSION_MISMATCH, cudaErrorCdpVersionMismatch},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaErrorStreamCaptureInvalidated},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, cudaErrorStreamCaptureMerge},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, cudaErrorStreamCaptureUnmatched},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, cudaErrorStreamCaptureUnjoined},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, cudaErrorStreamCaptureIsolation},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cudaErrorStreamCaptureImplicit},
    {CUDA_ERROR_CAPTURED_EVENT, cudaErrorCapturedEvent},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, cudaErrorStreamCaptureWrongThread},
    {CUDA_ERROR_TIMEOUT, cudaErrorTimeout},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, cudaErrorGraphExecUpdateFailure},
    {CUDA_ERROR_EXTERNAL_DEVICE, cudaErrorExternalDevice},
    {CUDA_ERROR_INVALID_CLUSTER_SIZE, cudaErrorInvalidClusterSize},
    {CUDA_ERROR_FUNCTION_NOT_LOADED, cudaErrorFunctionNotLoaded},
    {CUDA_ERROR_INVALID_RESOURCE_TYPE, cudaErrorInvalidResourceType},
    {CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, cudaErrorInvalidResourceConfiguration},
    {CUDA_ERROR_UNKNOWN, cudaErrorUnknown},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, cudaErrorInvalidValue},
};

static cudaError_t map_error(CUresult r)
{
    if (r == CUDA_SUCCESS) return cudaSuccess;
    for (size_t i = 0; i < sizeof error_map / sizeof error_map[0]; i++)
        if (error_map[i].cu == r) return error_map[i].rt;
    return cudaErrorUnknown;
}

/* Names and strings for cudaGetErrorName / cudaGetErrorString, the same
 * texts NVIDIA's runtime 13.0 returns. */
#define E(code, value, text)                                                                       \
    {                                                                                              \
        code, #code, text                                                                          \
    }
static const struct {
    cudaError_t code;
    const char *name;
    const char *text;
} error_text[] = {
    E(cudaSuccess, 0, "no error"),
    E(cudaErrorInvalidValue, 1, "invalid argument"),
    E(cudaErrorMemoryAllocation, 2, "out of memory"),
    E(cudaErrorInitializationError, 3, "initialization error"),
    E(cudaErrorCudartUnloading, 4, "driver shutting down"),
    E(cudaErrorProfilerDisabled, 5, "profiler disabled while using external profiling tool"),
    E(cudaErrorProfilerNotInitialized, 6,
      "profiler not initialized: call cudaProfilerInitialize()"),
    E(cudaErrorProfilerAlreadyStarted, 7, "profiler already started"),
    E(cudaErrorProfilerAlreadyStopped, 8, "profiler already stopped"),
    E(cudaErrorInvalidConfiguration, 9, "invalid configuration argument"),
    E(cudaErrorInvalidPitchValue, 12, "invalid pitch argument"),
    E(cudaErrorInvalidSymbol, 13, "invalid device symbol"),
    E(cudaErrorInvalidHostPointer, 16, "invalid host pointer"),
    E(cudaErrorInvalidDevicePointer, 17, "invalid device pointer"),
    E(cudaErrorInvalidTexture, 18, "invalid texture reference"),
    E(cudaErrorInvalidTextureBinding, 19, "texture is not bound to a pointer"),
    E(cudaErrorInvalidChannelDescriptor, 20, "invalid channel descriptor"),
    E(cudaErrorInvalidMemcpyDirection, 21, "invalid copy direction for memcpy"),
    E(cudaErrorAddressOfConstant, 22, "invalid address of constant"),
    E(cudaErrorTextureFetchFailed, 23, "fetch from texture failed"),
    E(cudaErrorTextureNotBound, 24, "cannot fetch from a texture that is not bound"),
    E(cudaErrorSynchronizationError, 25, "incorrect use of __syncthreads()"),
    E(cudaErrorInvalidFilterSetting, 26, "linear filtering not supported for non-float type"),
    E(cudaErrorInvalidNormSetting, 27, "read as normalized float not supported for data type"),
    E(cudaErrorMixedDeviceExecution, 28,
      "device emulation mode and device execution mode cannot be mixed"),
    E(cudaErrorNotYetImplemented, 31, "feature not yet implemented"),
    E(cudaErrorMemoryValueTooLarge, 32, "memory size or pointer value too large to fit in 32 bit"),
    E(cudaErrorStubLibrary, 34, "CUDA driver is a stub library"),
    E(cudaErrorInsufficientDriver, 35,
      "CUDA driver version is insufficient for CUDA runtime version"),
    E(cudaErrorCallRequiresNewerDriver, 36,
      "API call is not supported in the installed CUDA driver"),
    E(cudaErrorInvalidSurface, 37, "invalid surface reference"),
    E(cudaErrorDuplicateVariableName, 43, "duplicate global variable looked up by string name"),
    E(cudaErrorDuplicateTextureName, 44, "duplicate texture looked up by string name"),
    E(cudaErrorDuplicateSurfaceName, 45, "duplicate surface looked up by string name"),
    E(cudaErrorDevicesUnavailable, 46, "CUDA-capable device(s) is/are busy or unavailable"),
    E(cudaErrorIncompatibleDriverContext, 49, "incompatible driver context"),
    E(cudaErrorMissingConfiguration, 52, "__global__ function call is not configured"),
    E(cudaErrorPriorLaunchFailure, 53, "unspecified launch failure in prior launch"),
    E(cudaErrorLaunchMaxDepthExceeded, 65, "launch would exceed maximum depth of nested launches"),
    E(cudaErrorLaunchFileScopedTex, 66,
      "launch failed because kernel uses unsupported, file-scoped textures (texture objects are "
      "supported)"),
    E(cudaErrorLaunchFileScopedSurf, 67,
      "launch failed because kernel uses unsupported, file-scoped surfaces (surface objects are "
      "supported)"),
    E(cudaErrorSyncDepthExceeded, 68,
      "cudaDeviceSynchronize failed because caller's grid depth exceeds "
      "cudaLimitDevRuntimeSyncDepth"),
    E(cudaErrorLaunchPendingCountExceeded, 69,
      "launch failed because launch would exceed cudaLimitDevRuntimePendingLaunchCount"),
    E(cudaErrorInvalidDeviceFunction, 98, "invalid device function"),
    E(cudaErrorNoDevice, 100, "no CUDA-capable device is detected"),
    E(cudaErrorInvalidDevice, 101, "invalid device ordinal"),
    E(cudaErrorDeviceNotLicensed, 102, "device doesn't have valid Grid license"),
    E(cudaErrorSoftwareValidityNotEstablished, 103, "integrity checks failed"),
    E(cudaErrorStartupFailure, 127, "startup failure in cuda runtime"),
    E(cudaErrorInvalidKernelImage, 200, "device kernel image is invalid"),
    E(cudaErrorDeviceUninitialized, 201, "invalid device context"),
    E(cudaErrorMapBufferObjectFailed, 205, "mapping of buffer object failed"),
    E(cudaErrorUnmapBufferObjectFailed, 206, "unmapping of buffer object failed"),
    E(cudaErrorArrayIsMapped, 207, "array is mapped"),
    E(cudaErrorAlreadyMapped, 208, "resource already mapped"),
    E(cudaErrorNoKernelImageForDevice, 209,
      "no kernel image is available for execution on the device"),
    E(cudaErrorAlreadyAcquired, 210, "resource already acquired"),
    E(cudaErrorNotMapped, 211, "resource not mapped"),
    E(cudaErrorNotMappedAsArray, 212, "resource not mapped as array"),
    E(cudaErrorNotMappedAsPointer, 213, "resource not mapped as pointer"),
    E(cudaErrorECCUncorrectable, 214, "uncorrectable ECC error encountered"),
    E(cudaErrorUnsupportedLimit, 215, "limit is not supported on this architecture"),
    E(cudaErrorDeviceAlreadyInUse, 216,
      "exclusive-thread device already in use by a different thread"),
    E(cudaErrorPeerAccessUnsupported, 217,
      "peer access is not supported between these two devices"),
    E(cudaErrorInvalidPtx, 218, "a PTX JIT compilation failed"),
    E(cudaErrorInvalidGraphicsContext, 219, "invalid OpenGL or DirectX context"),
    E(cudaErrorNvlinkUncorrectable, 220,
      "uncorrectable NVLink error detected during the execution"),
    E(cudaErrorJitCompilerNotFound, 221, "PTX JIT compiler library not found"),
    E(cudaErrorUnsupportedPtxVersion, 222,
      "the provided PTX was compiled with an unsupported toolchain."),
    E(cudaErrorJitCompilationDisabled, 223, "PTX JIT compilation was disabled"),
    E(cudaErrorUnsupportedExecAffinity, 224, "the provided execution affinity is not supported"),
    E(cudaErrorUnsupportedDevSideSync, 225,
      "the provided PTX contains unsupported call to cudaDeviceSynchronize"),
    E(cudaErrorContained, 226, "Invalid access of peer GPU memory over nvlink or a hardware error"),
    E(cudaErrorInvalidSource, 300, "device kernel image is invalid"),
    E(cudaErrorFileNotFound, 301, "file not found"),
    E(cudaErrorSharedObjectSymbolNotFound, 302, "shared object symbol not found"),
    E(cudaErrorSharedObjectInitFailed, 303, "shared object initialization failed"),
    E(cudaErrorOperatingSystem, 304, "OS call failed or operation not supported on this OS"),
    E(cudaErrorInvalidResourceHandle, 400, "invalid resource handle"),
    E(cudaErrorIllegalState, 401, "the operation cannot be performed in the present state"),
    E(cudaErrorLossyQuery, 402, "attempted introspection would be semantically lossy"),
    E(cudaErrorSymbolNotFound, 500, "named symbol not found"),
    E(cudaErrorNotReady, 600, "device not ready"),
    E(cudaErrorIllegalAddress, 700, "an illegal memory access was encountered"),
    E(cudaErrorLaunchOutOfResources, 701, "too many resources requested for launch"),
    E(cudaErrorLaunchTimeout, 702, "the launch timed out and was terminated"),
    E(cudaErrorLaunchIncompatibleTexturing, 703, "launch uses incompatible texturing mode"),
    E(cudaErrorPeerAccessAlreadyEnabled, 704, "peer access is already enabled"),
    E(cudaErrorPeerAccessNotEnabled, 705, "peer access has not been enabled"),
    E(cudaErrorSetOnActiveProcess, 708, "cannot set while device is active in this process"),
    E(cudaErrorContextIsDestroyed, 709, "context is destroyed"),
    E(cudaErrorAssert, 710, "device-side assert triggered"),
    E(cudaErrorTooManyPeers, 711, "peer mapping resources exhausted"),
    E(cudaErrorHostMemoryAlreadyRegistered, 712,
      "part or all of the requested memory range is already mapped"),
    E(cudaErrorHostMemoryNotRegistered, 713,
      "pointer does not correspond to a registered memory region"),
    E(cudaErrorHardwareStackError, 714, "hardware stack error"),
    E(cudaErrorIllegalInstruction, 715, "an illegal instruction was encountered"),
    E(cudaErrorMisalignedAddress, 716, "misaligned address"),
    E(cudaErrorInvalidAddressSpace, 717, "operation not supported on global/shared address space"),
    E(cudaErrorInvalidPc, 718, "invalid program counter"),
    E(cudaErrorLaunchFailure, 719, "unspecified launch failure"),
    E(cudaErrorCooperativeLaunchTooLarge, 720, "too many blocks in cooperative launch"),
    E(cudaErrorTensorMemoryLeak, 721, "tensor memory not completely freed"),
    E(cudaErrorNotPermitted, 800, "operation not permitted"),
    E(cudaErrorNotSupported, 801, "operation not supported"),
    E(cudaErrorSystemNotReady, 802, "system not yet initialized"),
    E(cudaErrorSystemDriverMismatch, 803,
      "system has unsupported display driver / cuda driver combination"),
    E(cudaErrorCompatNotSupportedOnDevice, 804,
      "forward compatibility was attempted on non supported HW"),
    E(cudaErrorMpsConnectionFailed, 805,
      "MPS client failed to connect to the MPS control daemon or the MPS server"),
    E(cudaErrorMpsRpcFailure, 806,
      "the remote procedural call between the MPS server and the MPS client failed"),
    E(cudaErrorMpsServerNotReady, 807, "MPS server is not ready to accept new MPS client requests"),
    E(cudaErrorMpsMaxClientsReached, 808,
      "the hardware resources required to create MPS client have been exhausted"),
    E(cudaErrorMpsMaxConnectionsReached, 809,
      "the hardware resources required to support device connections have been exhausted"),
    E(cudaErrorMpsClientTerminated, 810, "the MPS client has been terminated by the server"),
    E(cudaErrorCdpNotSupported, 811,
      "is using CUDA Dynamic Parallelism, but the current configuration, like MPS, does not "
      "support it"),
    E(cudaErrorCdpVersionMismatch, 812,
      "unsupported interaction between different versions of CUDA Dynamic Parallelism"),
    E(cudaErrorStreamCaptureUnsupported, 900, "operation not permitted when stream is capturing"),
    E(cudaErrorStreamCaptureInvalidated, 901,
      "operation failed due to a previous error during capture"),
    E(cudaErrorStreamCaptureMerge, 902,
      "operation would result in a merge of separate capture sequences"),
    E(cudaErrorStreamCaptureUnmatched, 903, "capture was not ended in the same stream as it began"),
    E(cudaErrorStreamCaptureUnjoined, 904, "capturing stream has unjoined work"),
    E(cudaErrorStreamCaptureIsolation, 905,
      "dependency created on uncaptured work in another stream"),
    E(cudaErrorStreamCaptureImplicit, 906,
      "operation would make the legacy stream depend on a capturing blocking stream"),
    E(cudaErrorCapturedEvent, 907,
      "operation not permitted on an event last recorded in a capturing stream"),
    E(cudaErrorStreamCaptureWrongThread, 908,
      "attempt to terminate a thread-local capture sequence from another thread"),
    E(cudaErrorTimeout, 909, "wait operation timed out"),
    E(cudaErrorGraphExecUpdateFailure, 910,
      "the graph update was not performed because it included changes which violated constraints "
      "specific to instantiated graph update"),
    E(cudaErrorExternalDevice, 911,
      "an async error has occured in external entity outside of CUDA"),
    E(cudaErrorInvalidClusterSize, 912,
      "a kernel launch error has occurred due to cluster misconfiguration"),
    E(cudaErrorFunctionNotLoaded, 913,
      "the function handle is not loaded when calling an API that requires a loaded function"),
    E(cudaErrorInvalidResourceType, 914,
      "one or more resources passed in are not valid resource types for the operation"),
    E(cudaErrorInvalidResourceConfiguration, 915,
      "one or more resources are insufficient or non-applicable for the operation"),
    E(cudaErrorUnknown, 999, "unknown error"),
};
#undef E

static const char *unrecognized = "unrecognized error code";

/* ------------------------------------------------------------------------ */
/* Process and thread state.                                                */
/* ------------------------------------------------------------------------ */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static cudaError_t init_error = cudaErrorInitializationError; /* set by do_init */
static int resolved_count;
static int device_count;

/* Primary contexts this runtime retained, one per device. gen changes each
 * time a context is (re)retained, so threads notice a cudaDeviceReset. */
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    unsigned gen;
} primary[SIMRT_MAX_DEVICES];

static __thread int tl_device;             /* current device, default 0 */
static __thread cudaError_t tl_last_error; /* sticky until cudaGetLastError */
static __thread int tl_bound_device = -1;  /* device whose context is current */
static __thread unsigned tl_bound_gen;

SIMRT_INTERNAL cudaError_t simrt_record(cudaError_t err)
{
    if (err != cudaSuccess) tl_last_error = err;
    return err;
}

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

/* Runs once per process: loads the driver, resolves the whole table through
 * cuGetProcAddress_v2, runs cuInit(0) and counts devices. Leaves init_error
 * at cudaSuccess only if all of that worked. */
static void do_init(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    get_proc_fn get_proc = h ? (get_proc_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!get_proc) {
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    for (size_t i = 0; i < sizeof drv_table / sizeof drv_table[0]; i++) {
        void **slot = (void **)((char *)&simrt_drv + drv_table[i].offset);
        for (int v = 0; v <= drv_table[i].per_thread; v++) {
            void *p = NULL;
            CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
            cuuint64_t flags =
                v ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
            if (get_proc(drv_table[i].name, &p, CUDART_VERSION, flags, &status) == CUDA_SUCCESS &&
                status == CU_GET_PROC_ADDRESS_SUCCESS && p) {
                slot[v] = p;
                resolved_count++;
            }
        }
        if (!drv_table[i].per_thread) slot[1] = slot[0];
    }
    if (!DRV(cuInit, 0) || !DRV(cuDeviceGet, 0) || !DRV(cuDeviceGetCount, 0) ||
        !DRV(cuDevicePrimaryCtxRetain, 0) || !DRV(cuCtxSetCurrent, 0)) {
        init_error = cudaErrorInsufficientDriver;
        return;
    }
    CUresult r = DRV(cuInit, 0)(0);
    if (r == CUDA_SUCCESS) r = DRV(cuDeviceGetCount, 0)(&device_count);
    if (r != CUDA_SUCCESS) {
        device_count = 0;
        init_error = map_error(r);
        return;
    }
    if (device_count > SIMRT_MAX_DEVICES) device_count = SIMRT_MAX_DEVICES;
    init_error = device_count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

/* Driver loaded, resolved and initialised, with at least one device. */
static cudaError_t lazy_init(void)
{
    pthread_once(&init_once, do_init);
    return init_error;
}

/* Makes the calling thread's current device usable: retains that device's
 * primary context on first use in the process and makes it current on first
 * use in the thread (again after a cudaDeviceReset). A context the program
 * made current through the driver (cuCtxCreate, cuCtxSetCurrent) before the
 * thread's first runtime call is used as it is, as NVIDIA's runtime does
 * ("If a context is created and made current via the driver API,
 * subsequent runtime calls will pick up this context instead of creating a
 * new one": CUDA Programming Guide, interoperability between the runtime
 * and driver APIs). */
static cudaError_t ensure_context(void)
{
    cudaError_t e = lazy_init();
    if (e != cudaSuccess) return e;
    int dev = tl_device;
    if (dev < 0 || dev >= device_count) return cudaErrorInvalidDevice;
    if (tl_bound_device == dev &&
        tl_bound_gen == __atomic_load_n(&primary[dev].gen, __ATOMIC_ACQUIRE))
        return cudaSuccess;
    CUcontext current = NULL;
    if (tl_bound_device < 0 && DRV(cuCtxGetCurrent, 0) &&
        DRV(cuCtxGetCurrent, 0)(&current) == CUDA_SUCCESS && current)
        return cudaSuccess;

    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&ctx_lock);
    if (!primary[dev].ctx) {
        CUdevice d;
        CUcontext ctx = NULL;
        r = DRV(cuDeviceGet, 0)(&d, dev);
        if (r == CUDA_SUCCESS) r = DRV(cuDevicePrimaryCtxRetain, 0)(&ctx, d);
        if (r == CUDA_SUCCESS && !ctx) r = CUDA_ERROR_UNKNOWN;
        if (r == CUDA_SUCCESS) {
            primary[dev].ctx = ctx;
            __atomic_add_fetch(&primary[dev].gen, 1, __ATOMIC_RELEASE);
        }
    }
    CUcontext ctx = primary[dev].ctx;
    unsigned gen = primary[dev].gen;
    pthread_mutex_unlock(&ctx_lock);
    if (r != CUDA_SUCCESS) return map_error(r);

    r = DRV(cuCtxSetCurrent, 0)(ctx);
    if (r != CUDA_SUCCESS) return map_error(r);
    tl_bound_device = dev;
    tl_bound_gen = gen;
    return cudaSuccess;
}

cudaError_t simrt_ensure_context(void)
{
    return ensure_context();
}

/* Maps a driver result and records it as the last error. */
static cudaError_t finish(CUresult r)
{
    return simrt_record(map_error(r));
}

cudaError_t simrt_finish(CUresult r)
{
    return finish(r);
}

/* Test hook, not in NVIDIA's runtime: returns how many (function, variant)
 * slots cuGetProcAddress_v2 filled, and stores in *wanted (if not NULL) how
 * many the table asked for. Loads and resolves the driver if not done yet.
 * This library imports no cu* symbol (test_runtime.c checks its dynamic
 * symbol table), so these slots are the only way it reaches the driver. */
SIMRT_API int simcudart_resolved_count(int *wanted)
{
    pthread_once(&init_once, do_init);
    if (wanted) {
        int n = 0;
        for (size_t i = 0; i < sizeof drv_table / sizeof drv_table[0]; i++)
            n += 1 + drv_table[i].per_thread;
        *wanted = n;
    }
    return resolved_count;
}

/* ------------------------------------------------------------------------ */
/* Devices.                                                                 */
/* ------------------------------------------------------------------------ */
SIMRT_API cudaError_t cudaGetDeviceCount(int *count)
{
    CHECK_ARG(count);
    cudaError_t e = lazy_init();
    *count = e == cudaSuccess ? device_count : 0;
    return simrt_record(e);
}

SIMRT_API cudaError_t cudaGetDevice(int *device)
{
    CHECK_ARG(device);
    cudaError_t e = lazy_init();
    if (e != cudaSuccess) return simrt_record(e);
    *device = tl_device;
    return cudaSuccess;
}

/* Since CUDA 12 cudaSetDevice also initialises the device's primary context
 * and makes it current. */
SIMRT_API cudaError_t cudaSetDevice(int device)
{
    cudaError_t e = lazy_init();
    if (e != cudaSuccess) return simrt_record(e);
    if (device < 0 || device >= device_count) return simrt_record(cudaErrorInvalidDevice);
    tl_device = device;
    return simrt_record(ensure_context());
}

/* Resolves runtime ordinal -> CUdevice after validating it. */
static cudaError_t get_cu_device(int device, CUdevice *out)
{
    cudaError_t e = lazy_init();
    if (e != cudaSuccess) return e;
    if (device < 0 || device >= device_count) return cudaErrorInvalidDevice;
    return map_error(DRV(cuDeviceGet, 0)(out, device));
}

cudaError_t simrt_cu_device(int device, CUdevice *out)
{
    return get_cu_device(device, out);
}

SIMRT_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    CHECK_ARG(value);
    CUdevice d;
    cudaError_t e = get_cu_device(device, &d);
    if (e != cudaSuccess) return simrt_record(e);
    /* cudaDeviceAttr values are the CUdevice_attribute values. */
    return finish(DRV_CALL(cuDeviceGetAttribute, 0, value, (CUdevice_attribute)attr, d));
}

/* The fields cudaGetDeviceProperties fills from device attributes; a
 * required one that the driver cannot answer fails the call, the others
 * stay 0. */
#define PROP_INT(field, attr, req)                                                                 \
    {                                                                                              \
        offsetof(struct cudaDeviceProp, field), sizeof(int), attr, req                             \
    }
#define PROP_SIZE(field, attr)                                                                     \
    {                                                                                              \
        offsetof(struct cudaDeviceProp, field), sizeof(size_t), attr, 0                            \
    }
static const struct {
    size_t offset;
    size_t width;
    CUdevice_attribute attr;
    int required;
} prop_attrs[] = {
    PROP_INT(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 1),
    PROP_INT(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1),
    PROP_INT(multiProcessorCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1),
    PROP_INT(unifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1),
    PROP_INT(managedMemory, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1),
    PROP_INT(warpSize, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
    PROP_INT(maxThreadsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0),
    PROP_INT(maxThreadsDim[0], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 0),
    PROP_INT(maxThreadsDim[1], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 0),
    PROP_INT(maxThreadsDim[2], CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 0),
    PROP_INT(maxGridSize[0], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 0),
    PROP_INT(maxGridSize[1], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 0),
    PROP_INT(maxGridSize[2], CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 0),
    PROP_INT(regsPerBlock, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 0),
    PROP_INT(canMapHostMemory, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0),
    PROP_INT(integrated, CU_DEVICE_ATTRIBUTE_INTEGRATED, 0),
    PROP_INT(pciBusID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0),
    PROP_INT(pciDeviceID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0),
    PROP_INT(pciDomainID, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0),
    PROP_INT(asyncEngineCount, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 0),
    PROP_INT(concurrentManagedAccess, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0),
    PROP_INT(l2CacheSize, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 0),
    PROP_INT(memoryBusWidth, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 0),
    PROP_SIZE(sharedMemPerBlock, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    PROP_SIZE(totalConstMem, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
};
#undef PROP_INT
#undef PROP_SIZE

SIMRT_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    CHECK_ARG(prop);
    CUdevice d;
    cudaError_t e = get_cu_device(device, &d);
    if (e != cudaSuccess) return simrt_record(e);
    memset(prop, 0, sizeof *prop);
    CUresult r = DRV_CALL(cuDeviceGetName, 0, prop->name, (int)sizeof prop->name - 1, d);
    if (r == CUDA_SUCCESS) r = DRV_CALL(cuDeviceTotalMem, 0, &prop->totalGlobalMem, d);
    for (size_t i = 0; r == CUDA_SUCCESS && i < sizeof prop_attrs / sizeof prop_attrs[0]; i++) {
        int v = 0;
        CUresult ar = DRV_CALL(cuDeviceGetAttribute, 0, &v, prop_attrs[i].attr, d);
        if (ar != CUDA_SUCCESS) {
            if (prop_attrs[i].required) r = ar;
            continue;
        }
        char *field = (char *)prop + prop_attrs[i].offset;
        if (prop_attrs[i].width == sizeof(size_t)) {
            size_t s = v < 0 ? 0 : (size_t)v;
            memcpy(field, &s, sizeof s);
        } else {
            memcpy(field, &v, sizeof v);
        }
    }
    return finish(r);
}

SIMRT_API cudaError_t cudaDeviceSynchronize(void)
{
    NEED_CONTEXT();
    return finish(DRV_CALL(cuCtxSynchronize, 0, NULL)); /* _v2: NULL = current */
}

/* Resets the current device's primary context (all its allocations go) and
 * drops this runtime's retain; the next call that needs the device retains
 * a fresh one, in every thread (the generation changes). */
SIMRT_API cudaError_t cudaDeviceReset(void)
{
    cudaError_t e = lazy_init();
    if (e != cudaSuccess) return simrt_record(e);
    int dev = tl_device;
    if (dev < 0 || dev >= device_count) return simrt_record(cudaErrorInvalidDevice);
    CUdevice d;
    CUresult r = DRV(cuDeviceGet, 0)(&d, dev);
    if (r != CUDA_SUCCESS) return finish(r);
    pthread_mutex_lock(&ctx_lock);
    if (primary[dev].ctx) {
        r = DRV_CALL(cuDevicePrimaryCtxReset, 0, d);
        (void)DRV_CALL(cuDevicePrimaryCtxRelease, 0, d);
        primary[dev].ctx = NULL;
        __atomic_add_fetch(&primary[dev].gen, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&ctx_lock);
    if (tl_bound_device == dev) {
        (void)DRV(cuCtxSetCurrent, 0)(NULL);
        tl_bound_device = -1;
    }
    return finish(r);
}

/* ------------------------------------------------------------------------ */
/* IPC. The runtime and driver handles are the same 64 opaque bytes.        */
/* ------------------------------------------------------------------------ */
SIMRT_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    CHECK_ARG(handle && devPtr);
    NEED_CONTEXT();
    CUipcMemHandle h;
    memset(&h, 0, sizeof h);
    CUresult r = DRV_CALL(cuIpcGetMemHandle, 0, &h, (CUdeviceptr)(uintptr_t)devPtr);
    if (r == CUDA_SUCCESS) memcpy(handle, &h, sizeof h);
    return finish(r);
}

/* cudaIpcMemLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS. */
SIMRT_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle,
                                           unsigned int flags)
{
    CHECK_ARG(devPtr);
    CHECK_ARG((flags & ~(unsigned)cudaIpcMemLazyEnablePeerAccess) == 0);
    NEED_CONTEXT();
    CUipcMemHandle h;
    memcpy(&h, &handle, sizeof h);
    CUdeviceptr p = 0;
    CUresult r = DRV_CALL(cuIpcOpenMemHandle, 0, &p, h, flags);
    if (r == CUDA_SUCCESS) *devPtr = (void *)(uintptr_t)p;
    return finish(r);
}

SIMRT_API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    CHECK_ARG(devPtr);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuIpcCloseMemHandle, 0, (CUdeviceptr)(uintptr_t)devPtr));
}

SIMRT_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    CHECK_ARG(handle);
    if (!event) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    CUipcEventHandle h;
    memset(&h, 0, sizeof h);
    CUresult r = DRV_CALL(cuIpcGetEventHandle, 0, &h, event);
    if (r == CUDA_SUCCESS) memcpy(handle, &h, sizeof h);
    return finish(r);
}

SIMRT_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    CHECK_ARG(event);
    NEED_CONTEXT();
    CUipcEventHandle h;
    memcpy(&h, &handle, sizeof h);
    return finish(DRV_CALL(cuIpcOpenEventHandle, 0, event, h));
}

/* ------------------------------------------------------------------------ */
/* Streams and events. cudaStream_t/cudaEvent_t are CUstream/CUevent, the   */
/* stream and event flag values are the driver's.                           */
/* ------------------------------------------------------------------------ */
SIMRT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    CHECK_ARG(pStream);
    CHECK_ARG((flags & ~(unsigned)cudaStreamNonBlocking) == 0);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuStreamCreate, 0, pStream, flags));
}

SIMRT_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

/* The NULL stream and the special handles cannot be destroyed. */
static int is_special_stream(cudaStream_t s)
{
    return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

SIMRT_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    if (is_special_stream(stream)) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuStreamDestroy, 0, stream));
}

static cudaError_t stream_sync(cudaStream_t stream, int pt)
{
    NEED_CONTEXT();
    return finish(DRV_CALL(cuStreamSynchronize, pt, stream));
}

SIMRT_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    return stream_sync(stream, 0);
}

SIMRT_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    return stream_sync(stream, 1);
}

/* cudaErrorNotReady is an answer, not an error: never recorded. */
static cudaError_t stream_query(cudaStream_t stream, int pt)
{
    NEED_CONTEXT();
    cudaError_t e = map_error(DRV_CALL(cuStreamQuery, pt, stream));
    return e == cudaErrorNotReady ? e : simrt_record(e);
}

SIMRT_API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    return stream_query(stream, 0);
}

SIMRT_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    return stream_query(stream, 1);
}

SIMRT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    CHECK_ARG(event);
    CHECK_ARG((flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming |
                                   cudaEventInterprocess)) == 0);
    /* Like the real runtime: interprocess events must disable timing. */
    CHECK_ARG(!(flags & cudaEventInterprocess) || (flags & cudaEventDisableTiming));
    NEED_CONTEXT();
    return finish(DRV_CALL(cuEventCreate, 0, event, flags));
}

SIMRT_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

static cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, int pt)
{
    if (!event) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuEventRecord, pt, event, stream));
}

SIMRT_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    return event_record(event, stream, 0);
}

SIMRT_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
    return event_record(event, stream, 1);
}

SIMRT_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    if (!event) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuEventSynchronize, 0, event));
}

SIMRT_API cudaError_t cudaEventQuery(cudaEvent_t event)
{
    if (!event) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    cudaError_t e = map_error(DRV_CALL(cuEventQuery, 0, event));
    return e == cudaErrorNotReady ? e : simrt_record(e);
}

SIMRT_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    CHECK_ARG(ms);
    if (!start || !end) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuEventElapsedTime, 0, ms, start, end));
}

SIMRT_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    if (!event) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuEventDestroy, 0, event));
}

/* ------------------------------------------------------------------------ */
/* Kernel launch (the driver half; registration is in runtime_kernels.c).   */
/* ------------------------------------------------------------------------ */

/* Launches the kernel identified by f on the thread's current device:
 * validates the configuration, makes the context current, calls the
 * resolved cuLaunchKernel (per-thread variant if per_thread) and records
 * any error as the last error. */
SIMRT_INTERNAL cudaError_t simrt_launch(CUfunction f, dim3 grid, dim3 block, void **args,
                                        size_t shared_mem, cudaStream_t stream, int per_thread)
{
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 ||
        (uint64_t)block.x * block.y * block.z > 1024 || block.z > 64 || shared_mem > UINT_MAX)
        return simrt_record(cudaErrorInvalidConfiguration);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuLaunchKernel, per_thread, f, grid.x, grid.y, grid.z, block.x, block.y,
                           block.z, (unsigned int)shared_mem, stream, args, NULL));
}

/* Module and function handles for runtime_kernels.c, which loads each fat
 * binary as a module through the driver (cuModuleLoadData) on first need
 * and launches its kernels by their CUfunction: that is how the driver
 * learns parameter layouts. Both make the thread's context current first
 * and record nothing as the last error (the caller decides). */
SIMRT_INTERNAL CUresult simrt_module_load(const void *image, CUmodule *mod)
{
    if (ensure_context() != cudaSuccess) return CUDA_ERROR_INVALID_CONTEXT;
    return DRV_CALL(cuModuleLoadData, 0, mod, image);
}

SIMRT_INTERNAL CUresult simrt_module_function(CUmodule mod, const char *name, CUfunction *f)
{
    return DRV_CALL(cuModuleGetFunction, 0, f, mod, name);
}

/* cudaFuncGetParamInfo's driver half: cuFuncGetParamInfo, mapped and
 * recorded. */
SIMRT_INTERNAL cudaError_t simrt_param_info(CUfunction f, size_t index, size_t *offset,
                                            size_t *size)
{
    NEED_CONTEXT();
    return finish(DRV_CALL(cuFuncGetParamInfo, 0, f, index, offset, size));
}

/* ------------------------------------------------------------------------ */
/* Errors and versions.                                                     */
/* ------------------------------------------------------------------------ */
SIMRT_API cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tl_last_error;
    tl_last_error = cudaSuccess;
    return e;
}

SIMRT_API cudaError_t cudaPeekAtLastError(void)
{
    return tl_last_error;
}

SIMRT_API const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof error_text / sizeof error_text[0]; i++)
        if (error_text[i].code == error) return error_text[i].name;
    return unrecognized;
}

SIMRT_API const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof error_text / sizeof error_text[0]; i++)
        if (error_text[i].code == error) return error_text[i].text;
    return unrecognized;
}

/* Without a driver the real runtime reports version 0 and succeeds. */
SIMRT_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    CHECK_ARG(driverVersion);
    pthread_once(&init_once, do_init);
    *driverVersion = 0;
    if (!DRV(cuDriverGetVersion, 0)) return cudaSuccess;
    return finish(DRV(cuDriverGetVersion, 0)(driverVersion));
}

SIMRT_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    CHECK_ARG(runtimeVersion);
    *runtimeVersion = CUDART_VERSION;
    return cudaSuccess;
}

/* ------------------------------------------------------------------------ */
/* 3D allocation, peers, stream waits (stream-ordered allocation and pools: */
/* runtime_pool.c).                                                         */
/* ------------------------------------------------------------------------ */
/* At least width * height * depth bytes, rows padded to the driver's pitch
 * (cuMemAllocPitch, as cudaMallocPitch): ptr, pitch, xsize = width, ysize =
 * height. An empty extent gives a NULL pointer and succeeds, like
 * cudaMallocPitch here (a guess). */
SIMRT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    CHECK_ARG(pitchedDevPtr);
    NEED_CONTEXT();
    memset(pitchedDevPtr, 0, sizeof *pitchedDevPtr);
    pitchedDevPtr->xsize = extent.width;
    pitchedDevPtr->ysize = extent.height;
    if (extent.width == 0 || extent.height == 0 || extent.depth == 0) return cudaSuccess;
    if (extent.height > SIZE_MAX / extent.depth) return simrt_record(cudaErrorMemoryAllocation);
    CUdeviceptr p = 0;
    size_t pitch = 0;
    CUresult r =
        DRV_CALL(cuMemAllocPitch, 0, &p, &pitch, extent.width, extent.height * extent.depth, 4);
    if (r == CUDA_SUCCESS) {
        pitchedDevPtr->ptr = (void *)(uintptr_t)p;
        pitchedDevPtr->pitch = pitch;
    }
    return finish(r);
}

SIMRT_API cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    CHECK_ARG(canAccessPeer);
    CUdevice d, peer;
    cudaError_t e = get_cu_device(device, &d);
    if (e == cudaSuccess) e = get_cu_device(peerDevice, &peer);
    if (e != cudaSuccess) return simrt_record(e);
    return finish(DRV_CALL(cuDeviceCanAccessPeer, 0, canAccessPeer, d, peer));
}

/* Peer access of the current device to peerDevice, per process (the
 * simulated driver has no cuCtxEnablePeerAccess; every device of the
 * machine can reach every other). */
static unsigned char peer_enabled[SIMRT_MAX_DEVICES][SIMRT_MAX_DEVICES];

SIMRT_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    CHECK_ARG(flags == 0);
    NEED_CONTEXT();
    int dev = tl_device;
    if (peerDevice < 0 || peerDevice >= device_count || peerDevice == dev)
        return simrt_record(cudaErrorInvalidDevice);
    pthread_mutex_lock(&ctx_lock);
    int already = peer_enabled[dev][peerDevice];
    peer_enabled[dev][peerDevice] = 1;
    pthread_mutex_unlock(&ctx_lock);
    return already ? simrt_record(cudaErrorPeerAccessAlreadyEnabled) : cudaSuccess;
}

static cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
                                     int pt)
{
    if (!event) return simrt_record(cudaErrorInvalidResourceHandle);
    NEED_CONTEXT();
    return finish(DRV_CALL(cuStreamWaitEvent, pt, stream, event, flags));
}

SIMRT_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                          unsigned int flags)
{
    return stream_wait_event(stream, event, flags, 0);
}

SIMRT_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event,
                                               unsigned int flags)
{
    return stream_wait_event(stream, event, flags, 1);
}
