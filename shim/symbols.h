/* symbols: the C face of symbols.def, the one table of what the shim
 * interposes: the CUDA declarations its entry points need, the id of each
 * entry point, and the hand-written do_<name> functions that carry an entry
 * point's logic (memory.c, context.c, vmm.c, fdpass.c, host_swap.c), which
 * entry.c's generated entry points call. Declarations only: the bottom of
 * the shim, included by every file of it. */
#ifndef SYMBOLS_H
#define SYMBOLS_H
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

/* cuda.h renames these to their newest variant; the shim defines each
 * variant under its own name. */
#undef cuIpcOpenMemHandle
#undef cuGetProcAddress
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev);
CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags);
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra);
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra);
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream hStream);
extern cudaError_t CUDARTAPI cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
extern cudaError_t CUDARTAPI cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
extern cudaError_t CUDARTAPI cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                                   void **args, size_t sharedMem,
                                                   cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config,
                                                      const void *func, void **args);
extern cudaError_t CUDARTAPI cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                             enum cudaMemcpyKind kind);
extern cudaError_t CUDARTAPI cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                                  enum cudaMemcpyKind kind, cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaMemset_ptds(void *devPtr, int value, size_t count);
extern cudaError_t CUDARTAPI cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count,
                                                  cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src,
                                                    size_t spitch, size_t width, size_t height,
                                                    enum cudaMemcpyKind kind, cudaStream_t stream);
extern cudaError_t CUDARTAPI cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                    CUstream hStream);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
extern cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem, cudaStream_t stream);
extern cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
                                                     dim3 blockDim, void **args, size_t sharedMem,
                                                     cudaStream_t stream);

#define SHIM_EXPORT __attribute__((visibility("default")))

/* Code on the dlsym door's path: it can run before a sanitizer runtime has
 * initialised (the runtime looks up its interceptors through it), when
 * instrumented code would touch shadow memory that does not exist yet (or,
 * under ThreadSanitizer, a thread state). */
#define EARLY_SAFE __attribute__((no_sanitize_address, no_sanitize_undefined, no_sanitize_thread))

/* One id per interposed entry point, in symbols.def order. */
enum symbol_id {
#define RUNTIME(ret, name, params, args) SYM_##name,
#define RUNTIME_PASS(ret, name, params, args) SYM_##name,
#define DRIVER(ret, name, base, ver, params, args) SYM_##name,
#define DRIVER_PASS(ret, name, base, ver, params, args) SYM_##name,
#include "symbols.def"
    SYM_COUNT
};

/* Hand-written logic for the entry points marked RUNTIME / DRIVER. */
#define RUNTIME(ret, name, params, args) ret do_##name params;
#define DRIVER(ret, name, base, ver, params, args) ret do_##name params;
#include "symbols.def"

#endif
