// runtime_launch.cu: a plain CUDA program, built by meson with
// `nvcc -cudart shared`, that test_runtime.c runs under the simulated
// runtime and driver (LD_LIBRARY_PATH). It checks from inside its own
// process that the runtime it got is the simulator's, that `<<<>>>` (CUDA
// 13's __cudaGetKernel/__cudaLaunchKernel path) and cudaLaunchKernel reach
// the driver's cuLaunchKernel with the right configuration and a stable
// per-kernel function handle, and that an unregistered function is refused.
// Exit status 0 on success, else the number of the failed check (stderr says
// which).
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include "simcuda.h"

__global__ void scale(float *x, int n, float f)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= f;
}

__global__ void noargs() {}

#define CHECK(n, cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check %d failed: %s\n", n, #cond);                                    \
            return n;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    Dl_info info;
    CHECK(1,
          dladdr((void *)(cudaError_t(*)(void **, size_t)) & cudaMalloc, &info) && info.dli_fname);
    CHECK(2, argc < 2 || strstr(info.dli_fname, argv[1]) != NULL);

    float *d = nullptr;
    CHECK(3, cudaMalloc(&d, 256 * sizeof(float)) == cudaSuccess);

    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(4, drv != nullptr);
    auto count = (unsigned long (*)(void))dlsym(drv, "simcuda_launch_count");
    auto last = (int (*)(unsigned, struct simcuda_launch *))dlsym(drv, "simcuda_last_launch");
    CHECK(5, count && last);

    unsigned long before = count();
    scale<<<dim3(4, 2, 1), dim3(64, 1, 1)>>>(d, 256, 2.0f);
    CHECK(6, cudaGetLastError() == cudaSuccess);
    CHECK(7, cudaDeviceSynchronize() == cudaSuccess);
    CHECK(8, count() == before + 1);
    struct simcuda_launch l1;
    CHECK(9, last(0, &l1) == 0);
    CHECK(10, l1.func != nullptr);
    CHECK(11, l1.grid[0] == 4 && l1.grid[1] == 2 && l1.grid[2] == 1);
    CHECK(12, l1.block[0] == 64 && l1.block[1] == 1 && l1.block[2] == 1);

    int n = 256;
    float f = 0.5f;
    void *args[] = {&d, &n, &f};
    CHECK(13, cudaLaunchKernel((const void *)scale, dim3(1), dim3(32), args, 0, 0) == cudaSuccess);
    CHECK(14, count() == before + 2);
    struct simcuda_launch l2;
    CHECK(15, last(0, &l2) == 0 && l2.func == l1.func && l2.block[0] == 32);

    noargs<<<1, 1>>>();
    CHECK(16, cudaGetLastError() == cudaSuccess && count() == before + 3);
    struct simcuda_launch l3;
    CHECK(17, last(0, &l3) == 0 && l3.func != l1.func);

    // A host function that is no kernel, and an invalid configuration.
    CHECK(18, cudaLaunchKernel((const void *)main, dim3(1), dim3(1), args, 0, 0) ==
                  cudaErrorInvalidDeviceFunction);
    scale<<<1, 4096>>>(d, n, f);
    CHECK(19, cudaGetLastError() == cudaErrorInvalidConfiguration && count() == before + 3);

    CHECK(20, cudaFree(d) == cudaSuccess);
    printf("launches %lu\n", count() - before);
    return 0;
}
