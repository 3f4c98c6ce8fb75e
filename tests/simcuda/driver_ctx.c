/*
 * driver_ctx.c: contexts. Each thread has a stack of current contexts
 * (thread-local; a fork child's stacks are stale, sim_drv_gen tells). A
 * context tags the allocations made in it with its id; tearing one down
 * (cuCtxDestroy, the last primary release, cuDevicePrimaryCtxReset)
 * unregisters its streams, events, host memory and IPC mappings, then
 * releases its device allocations. Primary contexts are one per device,
 * the same handle every time, with a fresh id at each activation. Also the
 * profiler calls, which only need a current context.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <string.h>

#define CTX_STACK_MAX 64

static __thread CUcontext t_stack[CTX_STACK_MAX];
static __thread int t_depth;
static __thread unsigned t_gen;

struct sim_ctx *sim_drv_ctx_lookup_locked(CUcontext c)
{
    return (struct sim_ctx *)sim_drv_obj_find(c, OBJ_CTX);
}

/* The calling thread's current context, validated; NULL if none. */
struct sim_ctx *sim_drv_current_ctx(void)
{
    if (t_gen != sim_drv_gen) {
        t_gen = sim_drv_gen;
        t_depth = 0;
    }
    if (t_depth == 0) return NULL;
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = sim_drv_ctx_lookup_locked(t_stack[t_depth - 1]);
    pthread_mutex_unlock(&sim_drv_lock);
    return c;
}

struct sim_ctx *sim_drv_ctx_by_id_locked(uint64_t id)
{
    for (struct sim_ctx *c = sim_drv_ctxs; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* ---- contexts ---- */

/* Registers a new context (caller holds sim_drv_lock). */
static struct sim_ctx *ctx_new_locked(unsigned dev, unsigned flags)
{
    struct sim_ctx *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->dev = dev;
    c->flags = flags;
    c->id = sim_drv_next_id++;
    if (sim_drv_obj_add(&c->o, OBJ_CTX) < 0) {
        free(c);
        return NULL;
    }
    c->next = sim_drv_ctxs;
    sim_drv_ctxs = c;
    return c;
}

/* Unregisters context c and everything created in it: streams, events,
 * host allocations, IPC mappings; then releases its device allocations.
 * Caller holds nothing. */
static void ctx_teardown(struct sim_ctx *c)
{
    pthread_mutex_lock(&sim_drv_lock);
    HASH_DEL(sim_drv_objs, &c->o);
    for (struct sim_ctx **pp = &sim_drv_ctxs; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    struct obj *o, *tmp;
    HASH_ITER(hh, sim_drv_objs, o, tmp)
    {
        struct sim_ctx *owner = o->kind == OBJ_STREAM  ? ((struct sim_stream *)o)->ctx
                                : o->kind == OBJ_EVENT ? ((struct sim_event *)o)->ctx
                                                       : NULL;
        if (owner == c) {
            HASH_DEL(sim_drv_objs, o);
            free(o);
        }
    }
    struct import *im, *itmp;
    HASH_ITER(hh, sim_drv_imports, im, itmp)
    {
        if (im->ctx == c) {
            HASH_DEL(sim_drv_imports, im);
            free(im);
        }
    }
    sim_drv_queue_drop_locked(); /* its queued work dies with it (driver_queue.c) */
    struct host_alloc *h, *htmp;
    HASH_ITER(hh, sim_drv_host, h, htmp)
    {
        if (h->ctx == c) {
            HASH_DEL(sim_drv_host, h);
            if (!h->registered) free(h->ptr);
            free(h);
        }
    }
    uint64_t id = c->id;
    pthread_mutex_unlock(&sim_drv_lock);
    for (int i = 0; i < t_depth; i++) /* drop it from this thread's stack */
        if (t_stack[i] == (CUcontext)c) {
            memmove(&t_stack[i], &t_stack[i + 1], (size_t)(t_depth - i - 1) * sizeof(CUcontext));
            t_depth--;
            i--;
        }
    sim_free_ctx(id);
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    ENTER();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    (void)sim_drv_current_ctx(); /* resets a stale stack */
    if (t_depth >= CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = ctx_new_locked((unsigned)dev, flags);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = (CUcontext)c; /* a new context is pushed current */
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray)) return CUDA_ERROR_INVALID_VALUE;
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams; /* affinity and CIG parameters are accepted and ignored */
    return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    ENTER();
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = sim_drv_ctx_lookup_locked(ctx);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!c || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    ctx_teardown(c);
    free(c);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    ENTER();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)sim_drv_current_ctx();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    ENTER();
    (void)sim_drv_current_ctx();
    if (ctx) {
        pthread_mutex_lock(&sim_drv_lock);
        struct sim_ctx *c = sim_drv_ctx_lookup_locked(ctx);
        pthread_mutex_unlock(&sim_drv_lock);
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
        if (t_depth == 0)
            t_stack[t_depth++] = ctx;
        else
            t_stack[t_depth - 1] = ctx;
    } else if (t_depth > 0) {
        t_depth--;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER();
    (void)sim_drv_current_ctx();
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = sim_drv_ctx_lookup_locked(ctx);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    if (t_depth >= CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
    t_stack[t_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    ENTER();
    (void)sim_drv_current_ctx();
    if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext c = t_stack[--t_depth];
    if (pctx) *pctx = c;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

/* Context `ctx`, or the current one when ctx is NULL. */
static struct sim_ctx *ctx_or_current(CUcontext ctx)
{
    if (!ctx) return sim_drv_current_ctx();
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_ctx *c = sim_drv_ctx_lookup_locked(ctx);
    pthread_mutex_unlock(&sim_drv_lock);
    return c;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
    ENTER();
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = ctx_or_current(ctx);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *device = (CUdevice)c->dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    return cuCtxGetDevice_v2(device, NULL);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx)
{
    ENTER();
    if (!ctx_or_current(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    sim_drv_queue_sync_all(); /* driver_queue.c */
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    return cuCtxSynchronize_v2(NULL);
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
    ENTER();
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    ENTER();
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx_or_current(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    ENTER();
    if (!ctxId) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = ctx_or_current(ctx);
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *ctxId = c->id;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    ENTER();
    if (leastPriority) *leastPriority = 0;
    if (greatestPriority) *greatestPriority = -5;
    return CUDA_SUCCESS;
}

/* ---- primary contexts ---- */

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER();
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    struct sim_ctx *c = &sim_drv_primary[dev];
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&sim_drv_lock);
    if (sim_drv_primary_refs[dev] == 0) {
        /* (Re)activate: same handle, fresh id. */
        memset(c, 0, sizeof(*c));
        c->dev = (unsigned)dev;
        c->flags = sim_drv_primary_flags[dev];
        c->primary = 1;
        c->id = sim_drv_next_id++;
        if (sim_drv_obj_add(&c->o, OBJ_CTX) < 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            c->next = sim_drv_ctxs;
            sim_drv_ctxs = c;
        }
    }
    if (r == CUDA_SUCCESS) {
        sim_drv_primary_refs[dev]++;
        *pctx = (CUcontext)c;
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return r;
}

/* Deactivates primary context dev, releasing everything made in it. */
static void primary_reset(CUdevice dev)
{
    pthread_mutex_lock(&sim_drv_lock);
    int active = sim_drv_primary_refs[dev] > 0;
    sim_drv_primary_refs[dev] = 0;
    pthread_mutex_unlock(&sim_drv_lock);
    if (active) ctx_teardown(&sim_drv_primary[dev]);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    ENTER();
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_drv_lock);
    unsigned refs = sim_drv_primary_refs[dev];
    if (refs > 1) sim_drv_primary_refs[dev]--;
    pthread_mutex_unlock(&sim_drv_lock);
    if (refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (refs == 1) primary_reset(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    ENTER();
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_drv_lock);
    *flags = sim_drv_primary_flags[dev];
    *active = sim_drv_primary_refs[dev] > 0;
    pthread_mutex_unlock(&sim_drv_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    ENTER();
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&sim_drv_lock);
    sim_drv_primary_flags[dev] = flags;
    sim_drv_primary[dev].flags = flags;
    pthread_mutex_unlock(&sim_drv_lock);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    ENTER();
    if (sim_drv_valid_device(dev) && sim_drv_primary_refs[dev] > 0)
        return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE; /* the pre-11.0 rule */
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    ENTER();
    if (!sim_drv_valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    primary_reset(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

/* Profiling: nothing to collect here; both succeed, as with no profiler
 * attached. */
CUresult CUDAAPI cuProfilerStart(void)
{
    ENTER();
    return sim_drv_current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuProfilerStop(void)
{
    ENTER();
    return sim_drv_current_ctx() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}
