/* context: the CUDA context the shim works in. Which context is current on
 * the calling thread (an import is cached under it; host swap's first
 * runtime launch needs one), synchronising a given context before a real
 * close, and the context's end: cudaDeviceReset, cuDevicePrimaryCtxReset,
 * the last cuDevicePrimaryCtxRelease and cuCtxDestroy unmap every IPC
 * mapping and pool import made in the context, so core forgets them and
 * their leases (ipc_context_gone) once the real call succeeded. The
 * context's handle may come back (a primary context keeps its handle across
 * a reset; a new context may take a destroyed one's): a cached mapping
 * would then answer for memory that is no longer mapped. Only the real
 * driver and runtime are asked; no state here. */
#include "context.h"
#include "hooks.h"
#include "resolve.h"
#include "vmm.h"
#include "ipc.h"
#include "options.h"

uint64_t shim_current_context(bool runtime_door)
{
    CUcontext ctx = NULL;
    if (!REAL(cuCtxGetCurrent)) return 0;
    real_cuCtxGetCurrent(&ctx);
    if (!ctx && runtime_door && REAL(cudaFree)) {
        real_cudaFree(NULL); /* the runtime's documented way to initialise its context */
        real_cuCtxGetCurrent(&ctx);
    }
    return (uint64_t)ctx;
}

bool shim_enter_context(CUcontext ctx)
{
    CUcontext cur = NULL;
    if (!ctx || !real_cuCtxGetCurrent || real_cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur == ctx ||
        !real_cuCtxPushCurrent_v2)
        return false;
    return real_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
}

void shim_leave_context(bool pushed)
{
    CUcontext c;
    if (pushed && real_cuCtxPopCurrent_v2) real_cuCtxPopCurrent_v2(&c);
}

void shim_synchronize_context(uint64_t ctx)
{
    if (!options_get()->close_sync || !ctx) return;
    /* A driver with cuCtxSynchronize_v2 synchronises a given context in one
     * call, current or not. */
    if (real_cuCtxSynchronize_v2) {
        real_cuCtxSynchronize_v2((CUcontext)ctx);
        return;
    }
    if (!REAL(cuCtxSynchronize)) return;
    CUcontext previous = NULL;
    real_cuCtxGetCurrent(&previous);
    if ((uint64_t)previous == ctx) {
        real_cuCtxSynchronize();
    } else if (real_cuCtxPushCurrent_v2 &&
               real_cuCtxPushCurrent_v2((CUcontext)ctx) == CUDA_SUCCESS) {
        real_cuCtxSynchronize();
        real_cuCtxPopCurrent_v2(&previous);
    }
}

/* ---- teardown: the driver unmaps the context's IPC mappings ---- */

/* Mappings the shim made itself on VMM memory (a synthetic handle's, or a
 * direct-sharing ledger key's, vmm.c): not the context's, they stay. */
static bool kept_on_teardown(const struct ipc_handle *h)
{
    return vmm_handle_synthetic(h->bytes) || vmm_handle_direct(h->bytes);
}

/* Before a call that may end ctx; after it, context_ended. */
static void context_ending(CUcontext ctx)
{
    if (ctx) hooks_context_ending((uint64_t)ctx);
}
static void context_gone(CUcontext ctx);
/* After that call: ctx is gone (context_gone), or it failed and ctx lives on. */
static void context_ended(CUcontext ctx, bool gone)
{
    if (gone)
        context_gone(ctx);
    else if (ctx)
        hooks_context_ending(0);
}

static void context_gone(CUcontext ctx)
{
    if (shim_tracking() && ctx) ipc_context_gone((uint64_t)ctx, kept_on_teardown);
    hooks_context_gone((uint64_t)ctx); /* host swap's VMM blocks of ctx (init.c) */
}

/* Device dev's primary context while it is active, or NULL: retained and
 * released again (the real release), which leaves its count as it was. */
static CUcontext active_primary(CUdevice dev)
{
    unsigned flags = 0;
    int active = 0;
    CUcontext ctx = NULL;
    if (!shim_tracking() || !REAL(cuDevicePrimaryCtxGetState) || !REAL(cuDevicePrimaryCtxRetain) ||
        !REAL(cuDevicePrimaryCtxRelease_v2) ||
        real_cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || !active ||
        real_cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
        return NULL;
    real_cuDevicePrimaryCtxRelease_v2(dev);
    return ctx;
}

static bool primary_active(CUdevice dev)
{
    unsigned flags = 0;
    int active = 1; /* unknown: active, so nothing is forgotten */
    if (REAL(cuDevicePrimaryCtxGetState)) real_cuDevicePrimaryCtxGetState(dev, &flags, &active);
    return active;
}

cudaError_t do_cudaDeviceReset(void)
{
    /* cudaDeviceReset resets the current device's primary context. */
    int ordinal = -1;
    CUdevice dev;
    CUcontext ctx = NULL;
    if (shim_tracking() && REAL(cudaGetDevice) && real_cudaGetDevice(&ordinal) == cudaSuccess &&
        REAL(cuDeviceGet) && real_cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS)
        ctx = active_primary(dev);
    context_ending(ctx);
    cudaError_t r = CALL_REAL_RUNTIME(cudaDeviceReset, ());
    context_ended(ctx, r == cudaSuccess);
    return r;
}

/* real is the reset or release variant the program called (NULL: not
 * found, the driver door's "not initialised"). */
static CUresult primary_reset(CUdevice dev, CUresult (*real)(CUdevice))
{
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext ctx = active_primary(dev);
    context_ending(ctx);
    CUresult r = real(dev);
    context_ended(ctx, r == CUDA_SUCCESS);
    return r;
}

CUresult do_cuDevicePrimaryCtxReset(CUdevice dev)
{
    return primary_reset(dev, REAL(cuDevicePrimaryCtxReset));
}

CUresult do_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return primary_reset(dev, REAL(cuDevicePrimaryCtxReset_v2));
}

/* A release tears the primary context down when it was the last retain. */
static CUresult primary_release(CUdevice dev, CUresult (*real)(CUdevice))
{
    if (!real) return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext ctx = active_primary(dev);
    context_ending(ctx); /* it may be the last retain */
    CUresult r = real(dev);
    context_ended(ctx, r == CUDA_SUCCESS && ctx && !primary_active(dev));
    return r;
}

CUresult do_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return primary_release(dev, REAL(cuDevicePrimaryCtxRelease));
}

CUresult do_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return primary_release(dev, REAL(cuDevicePrimaryCtxRelease_v2));
}

CUresult do_cuCtxDestroy(CUcontext ctx)
{
    context_ending(ctx);
    CUresult r = CALL_REAL_DRIVER(cuCtxDestroy, (ctx));
    context_ended(ctx, r == CUDA_SUCCESS);
    return r;
}

CUresult do_cuCtxDestroy_v2(CUcontext ctx)
{
    context_ending(ctx);
    CUresult r = CALL_REAL_DRIVER(cuCtxDestroy_v2, (ctx));
    context_ended(ctx, r == CUDA_SUCCESS);
    return r;
}
