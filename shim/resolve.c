/* resolve: finding the real CUDA functions, and the resolver door.
 *
 * Real driver functions come from libcuda.so.1 by name; real runtime
 * functions from the next definition after the shim (RTLD_NEXT), or from an
 * already loaded libcudart when a program loaded it with RTLD_LOCAL. The
 * resolver door hands out the shim's own entry points wherever a program
 * asks for a driver or runtime function by name: cuGetProcAddress(_v2), and
 * dlsym on a library handle. Redirection happens only after the real lookup
 * succeeded, keeps the variant the real resolver chose (_v2, _ptsz), and
 * never hands out a real slot that points back into the shim. */
#include "shim.h"
#include "log.h"
#include "options.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RUNTIME(ret, name, params, args) ret(CUDARTAPI *real_##name) params;
#define RUNTIME_PASS(ret, name, params, args) ret(CUDARTAPI *real_##name) params;
#define RUNTIME_REAL(ret, name, params) ret(CUDARTAPI *real_##name) params;
#define DRIVER(ret, name, base, ver, params, args) ret(CUDAAPI *real_##name) params;
#define DRIVER_PASS(ret, name, base, ver, params, args) ret(CUDAAPI *real_##name) params;
#define DRIVER_REAL(ret, name, params) ret(CUDAAPI *real_##name) params;
#include "symbols.def"

/* Per interposed entry: its resolver base name and variant version (0 for
 * runtime entries, which cuGetProcAddress never returns). */
static const struct {
    const char *base;
    int version;
    void **real;
} variants[SYM_COUNT] = {
#define RUNTIME(ret, name, params, args) {NULL, 0, (void **)&real_##name},
#define RUNTIME_PASS(ret, name, params, args) {NULL, 0, (void **)&real_##name},
#define DRIVER(ret, name, base, ver, params, args) {#base, ver, (void **)&real_##name},
#define DRIVER_PASS(ret, name, base, ver, params, args) {#base, ver, (void **)&real_##name},
#include "symbols.def"
};

static void *(*real_dlsym)(void *, const char *);
static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT;
static pthread_once_t all_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER;
int resolve_done;

static void find_real_dlsym(void)
{
    /* dlsym is interposed below, so the real one is found by version. */
    static const char *versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (unsigned i = 0; i < sizeof versions / sizeof *versions && !real_dlsym; i++)
        real_dlsym = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", versions[i]);
}

/* True if p is one of the shim's own functions (exported or resolver twin). */
static bool is_shim_function(void *p)
{
    for (int id = 0; id < SYM_COUNT; id++)
        if (p == entry_exported(id) || p == entry_via_resolver(id)) return true;
    return p == (void *)dlsym;
}

/* dl_iterate_phdr callback: the path of a loaded libcudart, if any. */
static int find_cudart(struct dl_phdr_info *info, size_t size, void *path)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libcudart.so")) {
        *(const char **)path = info->dlpi_name;
        return 1;
    }
    return 0;
}

static void *lookup_runtime(void *cudart, const char *name)
{
    void *p = real_dlsym(RTLD_NEXT, name);
    if ((!p || is_shim_function(p)) && cudart) p = real_dlsym(cudart, name);
    return p && !is_shim_function(p) ? p : NULL;
}

void resolve_runtime(void)
{
    pthread_once(&dlsym_once, find_real_dlsym);
    if (!real_dlsym) return;
    pthread_mutex_lock(&runtime_lock);
    const char *path = NULL;
    void *cudart = NULL;
    dl_iterate_phdr(find_cudart, &path);
    if (path) cudart = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
#define RUNTIME(ret, name, params, args)                                                          \
    if (!real_##name) *(void **)&real_##name = lookup_runtime(cudart, #name);
#define RUNTIME_PASS(ret, name, params, args) RUNTIME(ret, name, params, args)
#define RUNTIME_REAL(ret, name, params) RUNTIME(ret, name, (), ())
#include "symbols.def"
    if (cudart) dlclose(cudart);
    pthread_mutex_unlock(&runtime_lock);
}

static void resolve_driver(void)
{
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!cuda) cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) {
        LOG_ONCE(LOG_WARN, "libcuda.so.1 not found (%s); driver calls fail with CUDA_ERROR_NOT_INITIALIZED",
                 dlerror());
        return;
    }
    void *p;
#define DRIVER(ret, name, base, ver, params, args)                                                \
    p = real_dlsym(cuda, #name);                                                                  \
    *(void **)&real_##name = p && !is_shim_function(p) ? p : NULL;
#define DRIVER_PASS(ret, name, base, ver, params, args) DRIVER(ret, name, base, ver, params, args)
#define DRIVER_REAL(ret, name, params) DRIVER(ret, name, base, ver, params, args)
#include "symbols.def"
    if (!real_cuMemFree_v2 || !real_cuGetProcAddress_v2)
        LOG_ONCE(LOG_WARN, "libcuda.so.1 lacks core driver functions; tracking is off");
}

static void resolve_once(void)
{
    pthread_once(&dlsym_once, find_real_dlsym);
    options_get();
    if (!real_dlsym) {
        LOG_ONCE(LOG_ERROR, "cannot find the real dlsym; every call fails with an initialization error");
        return;
    }
    resolve_driver();
    resolve_runtime();
    memory_init();
    unwind_init();
    __atomic_store_n(&resolve_done, 1, __ATOMIC_RELEASE);
}

void resolve_once_slow(void) { pthread_once(&all_once, resolve_once); }

void *resolve_redirect(const char *symbol, void *real, int cudaVersion, cuuint64_t flags)
{
    if (!symbol || !real || is_shim_function(real)) return real;
    /* The variant the real resolver chose, recognised by address. */
    for (int id = 0; id < SYM_COUNT; id++)
        if (variants[id].base && *variants[id].real == real) return entry_via_resolver(id);
    /* Not a known address (the driver handed out an internal alias): choose
     * by name, version and flags the way the driver does, and remember it. */
    bool per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    int best = -1;
    for (int id = 0; id < SYM_COUNT; id++) {
        int v = variants[id].version;
        if (!variants[id].base || strcmp(variants[id].base, symbol)) continue;
        if ((v < 0) != per_thread || (v < 0 ? -v : v) > cudaVersion) continue;
        if (best < 0 || abs(v) > abs(variants[best].version)) best = id;
    }
    if (best < 0) return real;
    if (!*variants[best].real) *variants[best].real = real;
    return *variants[best].real == real ? entry_via_resolver(best) : real;
}

CUresult do_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (!real_cuGetProcAddress) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn) *pfn = resolve_redirect(symbol, *pfn, cudaVersion, flags);
    return r;
}

CUresult do_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status)
{
    if (!real_cuGetProcAddress_v2) return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn) *pfn = resolve_redirect(symbol, *pfn, cudaVersion, flags);
    return r;
}

/* The dlsym door. Trap: a program's dlsym(RTLD_NEXT, ...) is answered
 * relative to the shim, not to the caller (docs/limitations.md). */
SHIM_EXPORT void *dlsym(void *handle, const char *name)
{
    pthread_once(&dlsym_once, find_real_dlsym);
    if (!real_dlsym) return NULL;
    void *p = real_dlsym(handle, name);
    if (!p || (name[0] != 'c' && name[0] != '_') || is_shim_function(p)) return p;
    for (int id = 0; id < SYM_COUNT; id++)
        if (!strcmp(name, entry_name(id))) return entry_via_resolver(id);
    return p;
}
