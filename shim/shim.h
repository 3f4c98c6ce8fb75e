/* shim.h: what the shim's files share.
 *
 * The shim is thin: entry points generated from symbols.def (entry.c) count
 * the call, apply the "inside the shim" guard and call a do_<name> function;
 * the do_ functions that carry logic (memory.c) ask core (core/ipc.h) what to
 * do and call the real CUDA function it says to. resolve.c finds the real
 * functions and redirects the resolver paths (cuGetProcAddress, dlsym). */
#ifndef SHIM_H
#define SHIM_H

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
extern cudaError_t CUDARTAPI __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                                void **args, size_t sharedMem, cudaStream_t stream);
extern cudaError_t CUDARTAPI __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
                                                     dim3 blockDim, void **args, size_t sharedMem,
                                                     cudaStream_t stream);

#define SHIM_EXPORT __attribute__((visibility("default")))

/* Code on the dlsym door's path: it can run before a sanitizer runtime has
 * initialised (the runtime looks up its interceptors through it), when
 * instrumented code would touch shadow memory that does not exist yet. */
#define EARLY_SAFE __attribute__((no_sanitize_address, no_sanitize_undefined))

/* Doors through which a program reaches an entry point (ARCHITECTURE). */
enum door { DOOR_RUNTIME, DOOR_DRIVER, DOOR_RESOLVER, DOOR_COUNT };

/* One id per interposed entry point, in symbols.def order. */
enum symbol_id {
#define RUNTIME(ret, name, params, args) SYM_##name,
#define RUNTIME_PASS(ret, name, params, args) SYM_##name,
#define DRIVER(ret, name, base, ver, params, args) SYM_##name,
#define DRIVER_PASS(ret, name, base, ver, params, args) SYM_##name,
#include "symbols.def"
    SYM_COUNT
};

/* Real-function slots, filled by resolve.c; NULL when not found. */
#define RUNTIME(ret, name, params, args) extern ret(CUDARTAPI *real_##name) params;
#define RUNTIME_PASS(ret, name, params, args) extern ret(CUDARTAPI *real_##name) params;
#define RUNTIME_REAL(ret, name, params) extern ret(CUDARTAPI *real_##name) params;
#define DRIVER(ret, name, base, ver, params, args) extern ret(CUDAAPI *real_##name) params;
#define DRIVER_PASS(ret, name, base, ver, params, args) extern ret(CUDAAPI *real_##name) params;
#define DRIVER_REAL(ret, name, params) extern ret(CUDAAPI *real_##name) params;
#include "symbols.def"

/* The real function of an entry, looked for again while its slot is empty
 * (the program may load libcudart or libcuda after the shim's first call).
 * Every wrapper reaches its real function through these. */
#define REAL(name) (real_##name ? real_##name : (resolve_missing(), real_##name))
/* The real call, or each door's "not initialised" error when the real
 * function cannot be found even now. */
#define CALL_REAL_RUNTIME(name, args) (REAL(name) ? real_##name args : cudaErrorInitializationError)
#define CALL_REAL_DRIVER(name, args) (REAL(name) ? real_##name args : CUDA_ERROR_NOT_INITIALIZED)

/* Hand-written logic for the entry points marked RUNTIME / DRIVER. */
#define RUNTIME(ret, name, params, args) ret do_##name params;
#define DRIVER(ret, name, base, ver, params, args) ret do_##name params;
#include "symbols.def"

/* resolve.c */

/* The real dlsym (the shim interposes dlsym), found before anything else at
 * start-up, which goes no further without it. */
extern void *(*real_dlsym)(void *, const char *);

/* The first definition of a libc-level name in an object loaded after the
 * shim (what dlsym(RTLD_NEXT, name) answers from here), read from the
 * loaded objects' own symbol tables: it neither allocates, nor locks, nor
 * asks the loader, so it may run before any constructor and inside another
 * library's initialisation (an allocator's, under its own lock). NULL when
 * no such object defines name, or the shim is not in the main namespace. */
void *resolve_next_libc(const char *name);

/* Resolve every real function once (thread-safe, idempotent, never fails:
 * missing functions stay NULL and one warning is logged). The check is
 * inline: it runs on every intercepted call. */
extern int resolve_done;
void resolve_once_slow(void);
static inline void resolve_all(void)
{
    if (__builtin_expect(!__atomic_load_n(&resolve_done, __ATOMIC_ACQUIRE), 0)) resolve_once_slow();
}

/* Fill the real-function slots that are still empty, if the process has
 * loaded objects since they were last looked for (cheap otherwise). Runs
 * the start-up path first when it has not run yet. */
void resolve_missing(void);

/* The resolver door: the shim's own entry point to hand out for a real
 * function pointer that the real cuGetProcAddress returned for base name
 * `symbol` at (cudaVersion, flags), or real itself when not interposed. */
void *resolve_redirect(const char *symbol, void *real, int cudaVersion, cuuint64_t flags);

/* entry.c */

/* Thread-local depth of shim entries on this thread: an entry point reached
 * while already inside the shim is passed straight through. */
extern __thread int shim_depth __attribute__((tls_model("initial-exec")));

/* The resolver-door wrapper of an interposed entry point, by id. */
void *entry_via_resolver(enum symbol_id id);
/* The exported (driver/runtime door) function of an interposed entry point. */
void *entry_exported(enum symbol_id id);
const char *entry_name(enum symbol_id id);
long long entry_calls(enum symbol_id id, enum door door);
/* Every entry point's calls, summed per door, under one lock (ipcshim_stats,
 * which programs may poll). */
void entry_calls_by_door(long long out[DOOR_COUNT]);

/* init.c: the lifecycle (start-up order and every process hook). */

/* Set by the library's constructor, and so after libc's own initialiser:
 * from then on the dlsym door may ask the loader by handle (resolve.c). */
extern int init_libraries_initialised;

/* The start-up after the real functions are found (memory, core, fork
 * handlers, host swap, unwinder); called once, from resolve_once. */
void init_start(void);
/* At each tracked export: registers the exit shutdown, the first time. */
void init_at_first_export(void);
/* At each tracked open: registers the importer's exit leak report, the
 * first time. */
void init_at_first_open(void);

/* memory.c */

/* Decide whether this process tracks and, if it does, install core's
 * device operations (ipc_init); called once, from init_start. */
void memory_init(void);

/* True when tracking is on for this process (not IPCSHIM_DISABLE, and the
 * driver has what tracking needs). Written once by memory_init, before
 * start-up is published (resolve_done); read without a lock. */
extern bool memory_tracking;
static inline bool shim_tracking(void)
{
    return memory_tracking;
}

/* context.c */

/* The calling thread's current context; for the runtime door, after making
 * the runtime create and set its primary context if none is current. */
uint64_t shim_current_context(bool runtime_door);
/* With IPCSHIM_CLOSE_SYNC (the default), wait for ctx's work to finish,
 * before a real close unmaps what it may still use. */
void shim_synchronize_context(uint64_t ctx);
/* The context teardown entry points (cudaDeviceReset, cuCtxDestroy,
 * cuDevicePrimaryCtxReset, the last cuDevicePrimaryCtxRelease) are
 * context.c's do_ functions: after the real call succeeds, core forgets the
 * context's mappings (ipc_context_gone). */

/* vmm.c: the VMM API, legacy IPC on VMM memory, the VMM ledger. */

/* True when handle (64 bytes) has the synthetic handle's magic and check
 * word; it may still be forged or stale (the registry says: ipc_open_begin). */
bool vmm_handle_synthetic(const void *handle);
/* After a real get-handle refused ptr: if it lies in a VMM mapping of a
 * shareable allocation of this process, export it (once per mapping) and
 * write the synthetic handle to handle_out (64 bytes). 0, or a negative
 * errno: the driver's refusal stands. */
int vmm_export_legacy(void *handle_out, uint64_t ptr);
/* Open a synthetic handle (ipc_open_begin said IPC_REAL): fetch the
 * exporter's fd, import, reserve, map, set access. 0 and *out, or a
 * negative errno with nothing left behind. */
int vmm_open(const void *handle, uint64_t *out);
/* True when ptr is a vmm_open's pointer; vmm_close unmaps, releases and
 * frees its reservation (0, or -ENOENT when it is not one). */
bool vmm_is_open(uint64_t ptr);
int vmm_close(uint64_t ptr);
/* The host's free_block for an identity with IPC_IDENTITY_VMM: closes the
 * export's fd (the driver keeps the memory while anything holds it). 0. */
int vmm_free_block(uint64_t identity);
/* True when handle (64 bytes) is a direct-sharing ledger key (vmm.c): a
 * registry key, never a handle a program may open. */
bool vmm_handle_direct(const void *handle);
/* At normal exit: the VMM allocations imported and never released, and the
 * mappings left, each once with its call site (log_report). */
void vmm_report_exit(void);
/* The fork chain's child step (init.c): forget the parent's tables. */
void vmm_postfork_child(void);

/* unwind.c: load libunwind for call sites when IPCSHIM_CALLSITE_DEPTH > 0. */
void unwind_init(void);

/* api.c: the IPCSHIM_STATS exit report (nothing unless IPCSHIM_STATS=1 and
 * the process used CUDA); run by init.c's exit report hook. */
void api_report_stats(void);

#endif
