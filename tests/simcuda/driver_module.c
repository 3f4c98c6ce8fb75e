/*
 * driver_module.c: modules, functions and kernel launches. A module keeps
 * the kernel names and parameter layouts parsed from its image by
 * sim_image.c (fat binary, cubin or PTX); code is never run. A launch is
 * validated and recorded in a log (simcuda_launch_count,
 * simcuda_last_launch).
 *
 * Managed memory: a launch whose parameters point into a managed allocation
 * that is not resident on the launch's device counts a fault and migrates
 * it there (sim_managed_move_locked), as a GPU's first touch would. The
 * parameters are read with the function's layout (cuFuncGetParamInfo's
 * answer); without a layout only an `extra` parameter buffer can be read,
 * because kernelParams gives pointers but no sizes.
 */
#include "driver_internal.h"

#include "sim_image.h"

#include <stdlib.h>
#include <string.h>

#define LAUNCH_LOG 1024

static struct simcuda_launch g_launches[LAUNCH_LOG];

/* Modules belong to the process, not to a context, and are never freed:
 * cuModuleUnload marks a module and its functions dead (later use is
 * CUDA_ERROR_INVALID_HANDLE), so a stale handle is always safe to look at. */
struct sim_module {
    struct obj o;
    struct sim_image img;
    struct sim_function **funcs; /* by kernel index, made on first get */
    int dead;
};

struct sim_function {
    struct obj o;
    struct sim_module *mod;
    const struct sim_kernel *k; /* in mod->img */
    int builtin;                /* driver_kernels.c: a kernel the simulator runs */
    int dead;
};

/* ---- modules and functions: names and parameter layouts only ---- */

static CUresult module_load(CUmodule *module, const void *image)
{
    ENTER();
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_current_ctx()) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_module *m = calloc(1, sizeof(*m));
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    switch (sim_image_parse(image, &m->img)) {
    case SIM_IMAGE_OK:
        break;
    case SIM_IMAGE_NOT_AN_IMAGE:
        free(m);
        return CUDA_ERROR_INVALID_IMAGE;
    case SIM_IMAGE_NO_CODE:
        free(m);
        return CUDA_ERROR_NO_BINARY_FOR_GPU;
    default:
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->funcs = calloc(m->img.nkernels + 1, sizeof(*m->funcs));
    pthread_mutex_lock(&sim_drv_lock);
    int rc = m->funcs ? sim_drv_obj_add(&m->o, OBJ_MODULE) : -1;
    pthread_mutex_unlock(&sim_drv_lock);
    if (rc < 0) {
        sim_image_free(&m->img);
        free(m->funcs);
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

/* Accepts a fat binary, nvcc's fat-binary wrapper, an ELF cubin or PTX. */
CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    return module_load(module, image);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return module_load(module, fatCubin);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    ENTER();
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_module *m = (struct sim_module *)sim_drv_obj_find(hmod, OBJ_MODULE);
    if (m && !m->dead) {
        m->dead = 1;
        for (unsigned i = 0; i < m->img.nkernels; i++)
            if (m->funcs[i]) m->funcs[i]->dead = 1;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* One handle per (module, kernel): repeated gets return the same one. */
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    ENTER();
    if (!hfunc || !name) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_module *m = (struct sim_module *)sim_drv_obj_find(hmod, OBJ_MODULE);
    const struct sim_kernel *k = m && !m->dead ? sim_image_find(&m->img, name) : NULL;
    if (!m || m->dead) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else if (!k) {
        r = CUDA_ERROR_NOT_FOUND;
    } else {
        size_t i = (size_t)(k - m->img.kernels);
        if (!m->funcs[i]) {
            struct sim_function *f = calloc(1, sizeof(*f));
            if (f) {
                f->mod = m;
                f->k = k;
                f->builtin = sim_drv_builtin_of(k->name);
                if (sim_drv_obj_add(&f->o, OBJ_FUNCTION) < 0) {
                    free(f);
                    f = NULL;
                }
            }
            m->funcs[i] = f;
        }
        if (m->funcs[i])
            *hfunc = (CUfunction)m->funcs[i];
        else
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* The layout of a live function of a loaded module (layouts are immutable
 * and never freed, so the pointer stays valid without the lock); NULL for
 * any other handle. *dead is set for a function of an unloaded module. */
static const struct sim_kernel *function_layout(CUfunction f, int *dead, int *builtin)
{
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_function *fn = (struct sim_function *)sim_drv_obj_find(f, OBJ_FUNCTION);
    const struct sim_kernel *k = fn && !fn->dead ? fn->k : NULL;
    *dead = fn && fn->dead;
    *builtin = k ? fn->builtin : 0;
    pthread_mutex_unlock(&sim_drv_lock);
    return k;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                    size_t *paramSize)
{
    ENTER();
    int dead, builtin;
    const struct sim_kernel *k = function_layout(func, &dead, &builtin);
    if (!k) return CUDA_ERROR_INVALID_HANDLE;
    if (sim_drv_fault(SIMCUDA_FAULT_PARAM_INFO)) return CUDA_ERROR_NOT_SUPPORTED;
    if (sim_drv_builtin_opaque(builtin)) return CUDA_ERROR_NOT_SUPPORTED; /* driver_kernels.c */
    if ((!paramOffset && !paramSize) || paramIndex >= k->nparams) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset) *paramOffset = k->params[paramIndex].offset;
    if (paramSize) *paramSize = k->params[paramIndex].size;
    return CUDA_SUCCESS;
}

/* ---- kernels: recorded, never executed (but builtins: driver_kernels.c) ---- */

#define TOUCH_MAX 256 /* distinct managed allocations looked at per launch */

struct touch_set {
    uint64_t off[TOUCH_MAX]; /* managed-pool offsets found in parameter words */
    unsigned n;
};

/* Notes the 8-byte words of [p, p + n) that sit at 8-aligned parameter
 * offsets (`base` is p's offset in the parameter block) and point into this
 * process's managed-pool window. */
static void scan_words(struct touch_set *t, const uint8_t *p, size_t n, size_t base)
{
    for (size_t j = (8 - base % 8) % 8; j + 8 <= n && t->n < TOUCH_MAX; j += 8) {
        uint64_t v, off;
        memcpy(&v, p + j, 8);
        if (v && sim_window_of((uintptr_t)v, &off) == SIM_POOL_MANAGED) t->off[t->n++] = off;
    }
}

/* The managed allocations a launch on device `dev` touches fault and
 * migrate there when not resident; resident ones count as used (LRU). */
static void launch_touch(unsigned dev, const struct sim_kernel *k, void **params, void **extra)
{
    struct touch_set t;
    t.n = 0;
    if (extra) {
        const uint8_t *buf = NULL;
        size_t size = 0;
        for (unsigned i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                size = *(const size_t *)extra[i + 1];
        }
        if (buf && size) scan_words(&t, buf, size, 0);
    } else if (params && k) {
        for (unsigned i = 0; i < k->nparams; i++)
            if (params[i]) scan_words(&t, params[i], k->params[i].size, k->params[i].offset);
    }
    if (t.n == 0) return;
    uint32_t seen[TOUCH_MAX];
    unsigned nseen = 0;
    sim_lock();
    for (unsigned w = 0; w < t.n; w++) {
        uint32_t i = sim_find_locked(SIM_POOL_MANAGED, t.off[w]);
        if (i == SIM_NO_INDEX || !sim_is_mine(sim_entry(i))) continue;
        unsigned s;
        for (s = 0; s < nseen && seen[s] != i; s++)
            ;
        if (s < nseen) continue; /* one touch per allocation per launch */
        seen[nseen++] = i;
        if (sim_entry(i)->resident != (int32_t)dev) {
            sim_counters.faults++;
            (void)sim_managed_move_locked(i, (int)dev);
        } else {
            sim_managed_touch_locked(i);
        }
    }
    sim_unlock();
}

const struct sim_kernel *sim_drv_function_layout(CUfunction f)
{
    int dead, builtin;
    return function_layout(f, &dead, &builtin);
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                       void **extra)
{
    ENTER();
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    /* A function of a loaded module brings its layout; any other non-NULL
     * handle is accepted and recorded without one (the simulated runtime's
     * kernels whose image could not be loaded). */
    int dead, builtin;
    const struct sim_kernel *k = function_layout(f, &dead, &builtin);
    if (dead) return CUDA_ERROR_INVALID_HANDLE;
    if (!gx || !gy || !gz || !bx || !by || !bz || (params && extra))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = sim_drv_check_stream(s);
    if (r != CUDA_SUCCESS) return r;
    if (sim_drv_fault(SIMCUDA_FAULT_LAUNCH)) return CUDA_ERROR_LAUNCH_FAILED;
    launch_touch(c->dev, k, params, extra);
    struct sim_builtin_args args;
    if (builtin && sim_drv_builtin_args(builtin, k, params, extra, &args)) builtin = 0;
    if (!sim_drv_queue_launch(s, k, builtin, builtin ? &args : NULL, params, extra) && builtin &&
        sim_drv_builtin_run(builtin, &args) != CUDA_SUCCESS) {
        pthread_mutex_lock(&sim_drv_lock);
        sim_drv_sticky = CUDA_ERROR_ILLEGAL_ADDRESS; /* the kernel faulted (driver_kernels.c) */
        pthread_mutex_unlock(&sim_drv_lock);
    }
    pthread_mutex_lock(&sim_drv_lock);
    struct simcuda_launch *l = &g_launches[sim_drv_launch_count % LAUNCH_LOG];
    l->func = (void *)f;
    l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz;
    l->block[0] = bx, l->block[1] = by, l->block[2] = bz;
    l->shared_mem = shmem;
    l->stream = (void *)s;
    l->params = params;
    l->extra = extra;
    sim_drv_launch_count++;
    pthread_mutex_unlock(&sim_drv_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void **kernelParams, void **extra)
{
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                  hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                  void **extra)
{
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                  kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **kernelParams, void **extra)
{
    return cuLaunchKernelEx(config, f, kernelParams, extra);
}

/* ---- the launch log, test-only (simcuda.h) ---- */

SIMCUDA_API unsigned long simcuda_launch_count(void)
{
    pthread_mutex_lock(&sim_drv_lock);
    unsigned long n = sim_drv_launch_count;
    pthread_mutex_unlock(&sim_drv_lock);
    return n;
}

SIMCUDA_API int simcuda_last_launch(unsigned back, struct simcuda_launch *out)
{
    int rc = -1;
    pthread_mutex_lock(&sim_drv_lock);
    if (out && back < LAUNCH_LOG && back < sim_drv_launch_count) {
        *out = g_launches[(sim_drv_launch_count - 1 - back) % LAUNCH_LOG];
        rc = 0;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return rc;
}
