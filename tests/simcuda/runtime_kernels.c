/*
 * runtime_kernels.c: the simulated CUDA runtime, libcudart.so.13, kernel half.
 *
 * The entry points nvcc's generated host code calls (see
 * crt/host_runtime.h and a `nvcc -keep` stub): fat-binary and kernel
 * registration from static constructors, the per-thread <<<>>> call
 * configuration stack, CUDA 13's __cudaGetKernel/__cudaLaunchKernel launch
 * path, and the public cudaLaunchKernel/cudaLaunchKernelExC. A registered
 * kernel is a `struct CUkern_st` record (cudaKernel_t is an opaque pointer
 * to that tag).
 *
 * One mechanism carries parameter layouts to the driver: on a kernel's
 * first launch or cudaFuncGetParamInfo, its fat binary is loaded as a
 * module (cuModuleLoadData of the fat binary nvcc passed, once per binary)
 * and the kernel's CUfunction is cuModuleGetFunction(module, mangled
 * name); launches use that CUfunction, so the driver scans their
 * parameters with the layout it parsed (see sim_image.c), and
 * cudaFuncGetParamInfo is cuFuncGetParamInfo. When the binary cannot be
 * loaded (no image, nothing decodable) or lacks the kernel, the kernel's
 * own record address is the CUfunction instead: the driver records such
 * launches but knows no layout (cudaFuncGetParamInfo: cudaErrorNotSupported).
 * Modules stay loaded until exit. Records are never freed: an unregistered
 * fat binary's kernels are only marked dead, so a cached cudaKernel_t used
 * by a late atexit handler stays a valid pointer.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* uthash must never exit() the host program: on out-of-memory HASH_ADD
 * leaves the table unchanged and sets hash_oom instead. */
static __thread int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (hash_oom = 1)
#include <uthash.h>

#define SIMRT_API __attribute__((visibility("default")))
#define SIMRT_INTERNAL __attribute__((visibility("hidden")))

/* Shared with runtime.c, defined there. */
SIMRT_INTERNAL cudaError_t simrt_record(cudaError_t err);
SIMRT_INTERNAL cudaError_t simrt_launch(CUfunction f, dim3 grid, dim3 block, void **args,
                                        size_t shared_mem, cudaStream_t stream, int per_thread);
SIMRT_INTERNAL CUresult simrt_module_load(const void *image, CUmodule *mod);
SIMRT_INTERNAL CUresult simrt_module_function(CUmodule mod, const char *name, CUfunction *f);
SIMRT_INTERNAL cudaError_t simrt_param_info(CUfunction f, size_t index, size_t *offset,
                                            size_t *size);

/* nvcc's entry points are declared only for C++ in the toolkit headers. */
SIMRT_API void **__cudaRegisterFatBinary(void *fatCubin);
SIMRT_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
SIMRT_API void __cudaUnregisterFatBinary(void **fatCubinHandle);
SIMRT_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
SIMRT_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                 const char *deviceName, int ext, size_t size, int constant,
                                 int global);
SIMRT_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                        char *deviceAddress, const char *deviceName, int ext,
                                        size_t size, int constant, int global);
SIMRT_API char __cudaInitModule(void **fatCubinHandle);
SIMRT_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream);
SIMRT_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream);
SIMRT_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
SIMRT_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream);
SIMRT_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream);
SIMRT_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                            void **args, size_t sharedMem, cudaStream_t stream);
SIMRT_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                               void **args);

#define FATBIN_MAGIC 0x73696d46u /* "simF" */
#define KERNEL_MAGIC 0x73696d4bu /* "simK" */
#define NVCC_FATBIN_WRAPPER_MAGIC 0x466243b1

/* What nvcc passes to __cudaRegisterFatBinary (__fatBinC_Wrapper_t). */
struct nvcc_fatbin_wrapper {
    int magic;
    int version;
    const unsigned long long *data; /* the fat binary itself */
    void *filename_or_fatbins;
};

struct simrt_fatbin {
    void *self; /* first: the void ** handle points here */
    uint32_t magic;
    int ended;                 /* __cudaRegisterFatBinaryEnd seen */
    int dead;                  /* __cudaUnregisterFatBinary seen */
    const void *wrapper;       /* as passed by nvcc */
    const void *image;         /* wrapper->data when the wrapper magic matched */
    struct CUkern_st *kernels; /* registered from this binary, newest first */
    int module_state;          /* enum resolve_state */
    CUmodule module;           /* when RESOLVED */
    struct simrt_fatbin *next;
};

/* A registered kernel; cudaKernel_t points to one. */
struct CUkern_st {
    uint32_t magic;
    int dead;
    const void *host_fun; /* the host stub address, the hash key */
    char *device_name;    /* mangled device function name */
    struct simrt_fatbin *fatbin;
    struct CUkern_st *next_in_fatbin;
    int func_state;  /* enum resolve_state */
    CUfunction func; /* the module's function when RESOLVED */
    UT_hash_handle hh;
};

/* Module and function lookups, tried once per binary / kernel; a failure
 * that may pass (no context yet, out of memory) is tried again later. */
enum resolve_state { UNTRIED = 0, RESOLVED, UNAVAILABLE };

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct simrt_fatbin *fatbins;      /* every registration ever */
static struct CUkern_st *kernels_by_stub; /* live kernels, by host_fun */

/* Per-thread <<<>>> configuration stack: a launch expression's arguments
 * can themselves contain launches, so it nests. */
#define CONFIG_DEPTH 32
struct call_config {
    dim3 grid, block;
    size_t shared_mem;
    cudaStream_t stream;
};
static __thread struct call_config tl_config[CONFIG_DEPTH];
static __thread int tl_config_depth;

/* Returns the registration record behind a handle, or NULL if it is not one
 * of ours. */
static struct simrt_fatbin *fatbin_from_handle(void **handle)
{
    if (!handle) return NULL;
    struct simrt_fatbin *fb = (struct simrt_fatbin *)handle;
    return fb->self == fb && fb->magic == FATBIN_MAGIC ? fb : NULL;
}

static int kernel_valid(const struct CUkern_st *k)
{
    return k && k->magic == KERNEL_MAGIC && !k->dead;
}

/* Registers one fat binary; returns the handle nvcc stores and passes back
 * (NULL only if memory runs out; the stub copes, launches then fail). */
SIMRT_API void **__cudaRegisterFatBinary(void *fatCubin)
{
    struct simrt_fatbin *fb = calloc(1, sizeof *fb);
    if (!fb) return NULL;
    fb->self = fb;
    fb->magic = FATBIN_MAGIC;
    fb->wrapper = fatCubin;
    const struct nvcc_fatbin_wrapper *w = fatCubin;
    if (w && w->magic == NVCC_FATBIN_WRAPPER_MAGIC) fb->image = w->data;
    pthread_mutex_lock(&reg_lock);
    fb->next = fatbins;
    fatbins = fb;
    pthread_mutex_unlock(&reg_lock);
    return &fb->self;
}

SIMRT_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
    struct simrt_fatbin *fb = fatbin_from_handle(fatCubinHandle);
    if (fb) fb->ended = 1;
}

/* Called from atexit: the binary's kernels become unknown (launches then
 * fail with cudaErrorInvalidDeviceFunction); memory is kept. */
SIMRT_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    struct simrt_fatbin *fb = fatbin_from_handle(fatCubinHandle);
    if (!fb) return;
    pthread_mutex_lock(&reg_lock);
    if (!fb->dead) {
        fb->dead = 1;
        for (struct CUkern_st *k = fb->kernels; k; k = k->next_in_fatbin) {
            if (!k->dead) {
                k->dead = 1;
                HASH_DEL(kernels_by_stub, k);
            }
        }
    }
    pthread_mutex_unlock(&reg_lock);
}

/* Remembers host stub -> device function name. A second registration of
 * the same stub is ignored (the first one wins). */
SIMRT_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                      const char *deviceName, int thread_limit, uint3 *tid,
                                      uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    struct simrt_fatbin *fb = fatbin_from_handle(fatCubinHandle);
    const char *name = deviceName ? deviceName : deviceFun;
    if (!fb || !hostFun) return;
    struct CUkern_st *k = calloc(1, sizeof *k);
    if (!k) return;
    k->device_name = strdup(name ? name : "");
    if (!k->device_name) {
        free(k);
        return;
    }
    k->magic = KERNEL_MAGIC;
    k->host_fun = hostFun;
    k->fatbin = fb;

    pthread_mutex_lock(&reg_lock);
    struct CUkern_st *old = NULL;
    HASH_FIND_PTR(kernels_by_stub, &k->host_fun, old);
    if (old || fb->dead) {
        pthread_mutex_unlock(&reg_lock);
        free(k->device_name);
        free(k);
        return;
    }
    hash_oom = 0;
    HASH_ADD_PTR(kernels_by_stub, host_fun, k);
    if (hash_oom) {
        pthread_mutex_unlock(&reg_lock);
        free(k->device_name);
        free(k);
        return;
    }
    k->next_in_fatbin = fb->kernels;
    fb->kernels = k;
    pthread_mutex_unlock(&reg_lock);
}

SIMRT_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                 const char *deviceName, int ext, size_t size, int constant,
                                 int global)
{
    (void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext;
    (void)size, (void)constant, (void)global;
}

SIMRT_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
                                        char *deviceAddress, const char *deviceName, int ext,
                                        size_t size, int constant, int global)
{
    (void)fatCubinHandle, (void)hostVarPtrAddress, (void)deviceAddress, (void)deviceName;
    (void)ext, (void)size, (void)constant, (void)global;
}

/* Managed-variable module initialisation: nothing to do; 1 means done. */
SIMRT_API char __cudaInitModule(void **fatCubinHandle)
{
    (void)fatCubinHandle;
    return 1;
}

/* Returns 0 when pushed; nonzero makes the <<<>>> expression skip the call. */
SIMRT_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                               struct CUstream_st *stream)
{
    if (tl_config_depth >= CONFIG_DEPTH) {
        simrt_record(cudaErrorInvalidConfiguration);
        return 1;
    }
    tl_config[tl_config_depth++] = (struct call_config){gridDim, blockDim, sharedMem, stream};
    return 0;
}

/* `stream` is a cudaStream_t * (void * in nvcc's prototype). */
SIMRT_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                                 void *stream)
{
    if (tl_config_depth <= 0) return cudaErrorMissingConfiguration;
    struct call_config c = tl_config[--tl_config_depth];
    if (gridDim) *gridDim = c.grid;
    if (blockDim) *blockDim = c.block;
    if (sharedMem) *sharedMem = c.shared_mem;
    if (stream) *(cudaStream_t *)stream = c.stream;
    return cudaSuccess;
}

/* The kernel of a host stub or, as the real runtime accepts wherever it
 * takes `const void *func`, of a cudaKernel_t cast to one. */
static struct CUkern_st *find_kernel(const void *hostFun)
{
    struct CUkern_st *k = NULL, *each, *tmp;
    if (!hostFun) return NULL;
    pthread_mutex_lock(&reg_lock);
    HASH_FIND_PTR(kernels_by_stub, &hostFun, k);
    if (!k) HASH_ITER(hh, kernels_by_stub, each, tmp)
    if ((const void *)each == hostFun) {
        k = each;
        break;
    }
    pthread_mutex_unlock(&reg_lock);
    return k;
}

SIMRT_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
    if (!kernel) return simrt_record(cudaErrorInvalidValue);
    struct CUkern_st *k = find_kernel(hostFun);
    if (!k) return simrt_record(cudaErrorInvalidDeviceFunction);
    *kernel = k;
    return cudaSuccess;
}

SIMRT_API cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
    return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

static int transient(CUresult r)
{
    return r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_INITIALIZED ||
           r == CUDA_ERROR_OUT_OF_MEMORY;
}

/* The CUfunction the driver knows valid kernel k by (see the top of this
 * file); *with_layout says whether it is a module function. */
static CUfunction kernel_function(struct CUkern_st *k, int *with_layout)
{
    pthread_mutex_lock(&reg_lock);
    struct simrt_fatbin *fb = k->fatbin;
    if (k->func_state == UNTRIED && fb->module_state == UNTRIED) {
        CUresult r =
            fb->image ? simrt_module_load(fb->image, &fb->module) : CUDA_ERROR_INVALID_VALUE;
        if (r == CUDA_SUCCESS)
            fb->module_state = RESOLVED;
        else if (!transient(r))
            fb->module_state = UNAVAILABLE;
    }
    if (k->func_state == UNTRIED && fb->module_state == RESOLVED) {
        CUfunction f = NULL;
        CUresult r = simrt_module_function(fb->module, k->device_name, &f);
        if (r == CUDA_SUCCESS) {
            k->func = f;
            k->func_state = RESOLVED;
        } else if (!transient(r)) {
            k->func_state = UNAVAILABLE;
        }
    } else if (k->func_state == UNTRIED && fb->module_state == UNAVAILABLE) {
        k->func_state = UNAVAILABLE;
    }
    *with_layout = k->func_state == RESOLVED;
    CUfunction f = *with_layout ? k->func : (CUfunction)(void *)k;
    pthread_mutex_unlock(&reg_lock);
    return f;
}

static cudaError_t launch(struct CUkern_st *k, dim3 grid, dim3 block, void **args, size_t shmem,
                          cudaStream_t stream, int pt)
{
    if (!kernel_valid(k)) return simrt_record(cudaErrorInvalidDeviceFunction);
    int with_layout;
    CUfunction f = kernel_function(k, &with_layout);
    return simrt_launch(f, grid, block, args, shmem, stream, pt);
}

SIMRT_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                         void **args, size_t sharedMem, cudaStream_t stream)
{
    return launch(kernel, gridDim, blockDim, args, sharedMem, stream, 0);
}

SIMRT_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                              void **args, size_t sharedMem, cudaStream_t stream)
{
    return launch(kernel, gridDim, blockDim, args, sharedMem, stream, 1);
}

SIMRT_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                       size_t sharedMem, cudaStream_t stream)
{
    return launch(find_kernel(func), gridDim, blockDim, args, sharedMem, stream, 0);
}

SIMRT_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                            void **args, size_t sharedMem, cudaStream_t stream)
{
    return launch(find_kernel(func), gridDim, blockDim, args, sharedMem, stream, 1);
}

/* Launch attributes (clusters, priorities, ...) are accepted and ignored. */
static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args,
                             int pt)
{
    if (!config) return simrt_record(cudaErrorInvalidValue);
    return launch(find_kernel(func), config->gridDim, config->blockDim, args,
                  config->dynamicSmemBytes, config->stream, pt);
}

SIMRT_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                          void **args)
{
    return launch_ex(config, func, args, 0);
}

SIMRT_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                               void **args)
{
    return launch_ex(config, func, args, 1);
}

/* The driver's cuFuncGetParamInfo for the kernel's module function (past
 * the last parameter: cudaErrorInvalidValue); a kernel without one has no
 * known layout: cudaErrorNotSupported. */
SIMRT_API cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset,
                                           size_t *paramSize)
{
    if (!paramOffset && !paramSize) return simrt_record(cudaErrorInvalidValue);
    struct CUkern_st *k = find_kernel(func);
    if (!kernel_valid(k)) return simrt_record(cudaErrorInvalidDeviceFunction);
    int with_layout;
    CUfunction f = kernel_function(k, &with_layout);
    if (!with_layout) return simrt_record(cudaErrorNotSupported);
    return simrt_param_info(f, paramIndex, paramOffset, paramSize);
}
