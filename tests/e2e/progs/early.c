/* early: a program linked to a library whose constructor calls CUDA before
 * the shim's constructor runs (early_lib.c). Prints the CUDA status of those
 * early calls, then exports once from main and prints how many exports the
 * shim recorded (-1 without the shim):
 *   early: 0 / later: 0 / exports: 1 / free: 0 */
#include "ipcshim.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

extern int early_status;

int main(void)
{
    printf("early: %d\n", early_status);
    void *p = NULL;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaMalloc(&p, 4096);
    if (e == cudaSuccess) e = cudaIpcGetMemHandle(&h, p);
    printf("later: %d\n", (int)e);
    int (*stats)(struct ipcshim_stats *, size_t) =
        (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
    struct ipcshim_stats s;
    memset(&s, 0, sizeof s);
    printf("exports: %lld\n", stats && stats(&s, sizeof s) == 0 ? (long long)s.exports : -1ll);
    printf("free: %d\n", (int)cudaFree(p));
    return 0;
}
