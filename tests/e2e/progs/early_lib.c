/* early_lib: a library whose constructor calls CUDA, as a C++ library's
 * static initialiser may. The loader runs it before the constructor of a
 * preloaded shim, so the shim is entered before its own start-up hooks are
 * given (test_orders.c, early_constructor_*). */
#include <cuda_runtime_api.h>

int early_status = -1;

__attribute__((constructor)) static void call_cuda_early(void)
{
    void *p = NULL;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaMalloc(&p, 4096);
    if (e == cudaSuccess) e = cudaIpcGetMemHandle(&h, p);
    if (e == cudaSuccess) e = cudaFree(p);
    early_status = (int)e;
}
