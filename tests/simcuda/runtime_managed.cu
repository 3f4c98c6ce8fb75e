// runtime_managed.cu: a plain CUDA program, built by meson with
// `nvcc -cudart shared` (nvcc's default targets: an sm_75 cubin plus
// compressed PTX), that test_runtime.c runs under the simulated runtime and
// driver. From inside its own process it checks that cudaFuncGetParamInfo
// reports the layout nvcc chose for kernels with mixed parameter types
// (the offsets and sizes `readelf -x .nv.info.<kernel>` of the cubin shows
// in its EIATTR_KPARAM_INFO records), and that a <<<>>> launch of such a
// kernel with managed pointers (one of them inside a struct passed by
// value) faults and migrates exactly the non-resident allocations it
// names. meson also builds the device code of this file into the cubins,
// fat binaries and PTX that test_managed.c loads with cuModuleLoadData.
// Exit status 0 on success, else the number of the failed check.
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include "simcuda.h"

struct Pair {
    double scale;
    float *extra;
    int n;
};

__global__ void mixed(float *a, int n, float f, Pair s, double *b)
{
    if (n > 0) a[0] = f + s.scale + b[0] + s.extra[0];
}

__global__ void small_types(char c, short h, long long x, const int *y) {}

__global__ void noargs() {}

#define CHECK(n, cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check %d failed: %s\n", n, #cond);                                    \
            return n;                                                                              \
        }                                                                                          \
    } while (0)

static int layout_is(const void *func, const size_t (*want)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t off = 99, size = 99;
        if (cudaFuncGetParamInfo(func, i, &off, &size) != cudaSuccess || off != want[i][0] ||
            size != want[i][1]) {
            fprintf(stderr, "parameter %zu: offset %zu size %zu, want %zu %zu\n", i, off, size,
                    want[i][0], want[i][1]);
            return 0;
        }
    }
    size_t off, size;
    return cudaFuncGetParamInfo(func, n, &off, &size) == cudaErrorInvalidValue;
}

int main(int argc, char **argv)
{
    Dl_info info;
    CHECK(1,
          dladdr((void *)(cudaError_t(*)(void **, size_t)) & cudaMalloc, &info) && info.dli_fname);
    CHECK(2, argc < 2 || strstr(info.dli_fname, argv[1]) != NULL);

    // The layouts nvcc 13 gives these kernels (readelf of the sm_75 and
    // sm_90 cubins agree).
    static const size_t mixed_layout[][2] = {{0, 8}, {8, 4}, {12, 4}, {16, 24}, {40, 8}};
    static const size_t small_layout[][2] = {{0, 1}, {2, 2}, {8, 8}, {16, 8}};
    CHECK(3, layout_is((const void *)mixed, mixed_layout, 5));
    cudaGetLastError();
    CHECK(4, layout_is((const void *)small_types, small_layout, 4));
    cudaGetLastError();
    CHECK(5, layout_is((const void *)noargs, NULL, 0));
    cudaGetLastError();

    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(6, drv != nullptr);
    auto stats = (void (*)(struct simcuda_managed_stats *))dlsym(drv, "simcuda_managed_stats");
    auto reset = (void (*)(void))dlsym(drv, "simcuda_reset_counters");
    auto where =
        (int (*)(const void *, struct simcuda_residency *))dlsym(drv, "simcuda_managed_residency");
    CHECK(7, stats && reset && where);

    const size_t MiB = 1 << 20;
    float *a = nullptr, *extra = nullptr, *unused = nullptr;
    double *b = nullptr;
    CHECK(8, cudaMallocManaged((void **)&a, MiB) == cudaSuccess);
    CHECK(9, cudaMallocManaged((void **)&extra, MiB) == cudaSuccess);
    CHECK(10, cudaMallocManaged((void **)&b, MiB) == cudaSuccess);
    CHECK(11, cudaMallocManaged((void **)&unused, MiB) == cudaSuccess);
    a[0] = 1.5f; // host access: the same bytes the "device" sees
    CHECK(12, where(a, nullptr) == SIMCUDA_HOST && where(b, nullptr) == SIMCUDA_HOST);

    cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
    reset();
    CHECK(13, cudaMemPrefetchAsync(b, MiB, dev0, 0, 0) == cudaSuccess);
    struct simcuda_managed_stats st;
    stats(&st);
    CHECK(14, where(b, nullptr) == 0 && st.proc_bytes_htod == MiB && st.resident[0] == MiB);

    // a and s.extra are on the host, b already on device 0: two faults.
    reset();
    Pair p = {2.0, extra, 3};
    mixed<<<4, 128>>>(a, 7, 0.5f, p, b);
    CHECK(15, cudaGetLastError() == cudaSuccess);
    stats(&st);
    CHECK(16, st.proc_faults == 2 && st.proc_bytes_htod == 2 * MiB && st.proc_bytes_dtoh == 0);
    CHECK(17, where(a, nullptr) == 0 && where(extra, nullptr) == 0);
    CHECK(18, where(unused, nullptr) == SIMCUDA_HOST);
    CHECK(19, st.resident[0] == 3 * MiB);

    // Everything it names is resident now: no new fault.
    mixed<<<1, 1>>>(a, 7, 0.5f, p, b);
    stats(&st);
    CHECK(20, st.proc_faults == 2);
    CHECK(21, a[0] == 1.5f);

    CHECK(22, cudaMemPrefetchAsync(a, MiB, host, 0, 0) == cudaSuccess);
    CHECK(23, cudaMemAdvise(a, MiB, cudaMemAdviseSetPreferredLocation, host) == cudaSuccess);
    struct simcuda_residency r;
    CHECK(24, where(a, &r) == SIMCUDA_HOST && r.preferred == SIMCUDA_HOST && r.size == MiB);
    stats(&st);
    CHECK(25, st.proc_bytes_dtoh == MiB && st.resident[0] == 2 * MiB);

    // Not managed: prefetch refuses it.
    float *plain = nullptr;
    CHECK(26, cudaMalloc((void **)&plain, 4096) == cudaSuccess);
    CHECK(27, cudaMemPrefetchAsync(plain, 4096, dev0, 0, 0) == cudaErrorInvalidValue);
    cudaGetLastError();

    CHECK(28, cudaFree(a) == cudaSuccess && cudaFree(extra) == cudaSuccess);
    CHECK(29, cudaFree(b) == cudaSuccess && cudaFree(unused) == cudaSuccess);
    CHECK(30, cudaFree(plain) == cudaSuccess);
    stats(&st);
    CHECK(31, st.resident[0] == 0 && st.managed_used == 0);
    printf("faults %llu\n", (unsigned long long)st.proc_faults);
    return 0;
}
