/* context: the CUDA context the shim works in. Which context is current on
 * the calling thread (an import is cached under it; host swap's first
 * runtime launch needs one), and synchronising a given context before a
 * real close. Both only ask the real driver and runtime; no state here. */
#include "shim.h"
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
