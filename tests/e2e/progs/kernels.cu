// kernels.cu: an ordinary nvcc-built program (shared runtime) that allocates,
// launches kernels with <<<>>>, copies and frees. Under the shim it prints
// how many calls the shim saw per entry point and door (looked up with dlsym,
// so it runs unchanged without the shim), for the "counts once" tests.
#include <cstdio>
#include <dlfcn.h>
#include <cuda_runtime.h>

__global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

int main()
{
    const int n = 1024, rounds = 3;
    float *d[rounds];
    for (int r = 0; r < rounds; r++) {
        if (cudaMalloc(&d[r], n * sizeof(float)) != cudaSuccess) {
            printf("error: cudaMalloc\n");
            return 2;
        }
        scale<<<n / 256, 256>>>(d[r], 2.0f, n);
        if (cudaGetLastError() != cudaSuccess) {
            printf("error: launch\n");
            return 2;
        }
    }
    cudaDeviceSynchronize();
    for (int r = 0; r < rounds; r++)
        cudaFree(d[r]);
    typedef long long (*calls_t)(const char *, const char *);
    calls_t calls = (calls_t)dlsym(RTLD_DEFAULT, "ipcshim_calls");
    if (!calls) {
        printf("shim: absent\n");
        return 0;
    }
    const char *names[] = {"cudaMalloc",    "cudaFree",     "__cudaLaunchKernel",
                           "cuMemAlloc_v2", "cuMemFree_v2", "cuLaunchKernel"};
    const char *doors[] = {"runtime", "driver", "resolver"};
    for (const char *name : names)
        for (const char *door : doors)
            printf("calls %s %s %lld\n", name, door, calls(name, door));
    return 0;
}
