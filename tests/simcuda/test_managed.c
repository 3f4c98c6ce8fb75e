/*
 * test_managed.c: Criterion tests of the simulated driver's managed memory
 * (residency, prefetch, advice, launch faults, LRU eviction against device
 * capacity) and of its modules (parameter layouts parsed from PTX, cubins
 * and fat binaries), linked directly against libcuda.so.1 from this folder.
 *
 * Like test_driver.c, every test runs in its own process on its own machine
 * (SIMCUDA_MACHINE = test name + pid, 64 MiB devices) and unlinks it in
 * .fini. The nvcc-built images (the device code of runtime_managed.cu as a
 * cubin, fat binaries in each compression nvcc 13 offers, PTX) are passed
 * in by meson as SIMCUDA_IMAGE_* paths; without nvcc those tests skip, and
 * the PTX-text tests still cover the layout-to-fault path.
 */
#include <cuda.h>
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simcuda.h"
#include "test_check.h"

#define MiB (1ull << 20)

static char g_machine[160];

static void setup(void)
{
    snprintf(g_machine, sizeof(g_machine), "m-%s-%d", criterion_current_test->name, (int)getpid());
    setenv(SIMCUDA_ENV_MACHINE, g_machine, 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "64M", 1);
    unsetenv(SIMCUDA_ENV_DEVICES);
    unsetenv(SIMCUDA_ENV_MANAGED_MEMORY);
    unsetenv(SIMCUDA_ENV_FAIL_ALLOC);
    unsetenv(SIMCUDA_ENV_FAIL_LAUNCH);
}

static void teardown(void)
{
    simcuda_unlink_machine(g_machine);
}

TestSuite(managed, .init = setup, .fini = teardown, .timeout = 30);

static CUresult init_on(int dev)
{
    CUresult r = cuInit(0);
    CUcontext c;
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&c, dev);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(c);
    return r;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    OK(cuMemGetInfo(&f, &t));
    return f;
}

static struct simcuda_managed_stats stats(void)
{
    struct simcuda_managed_stats s;
    simcuda_managed_stats(&s);
    return s;
}

static int where(CUdeviceptr p)
{
    return simcuda_managed_residency((const void *)(uintptr_t)p, NULL);
}

static CUmemLocation on_device(int d)
{
    CUmemLocation l = {CU_MEM_LOCATION_TYPE_DEVICE, d};
    return l;
}

static CUmemLocation on_host(void)
{
    CUmemLocation l = {CU_MEM_LOCATION_TYPE_HOST, 0};
    return l;
}

static void expect_layout(CUfunction f, const unsigned (*want)[2], unsigned n, const char *what)
{
    for (unsigned i = 0; i < n; i++) {
        size_t off = 99, size = 99;
        OK(cuFuncGetParamInfo(f, i, &off, &size));
        cr_assert(off == want[i][0] && size == want[i][1],
                  "%s parameter %u: offset %zu size %zu, want %u %u", what, i, off, size,
                  want[i][0], want[i][1]);
    }
    size_t off;
    FAILS(cuFuncGetParamInfo(f, n, &off, NULL), CUDA_ERROR_INVALID_VALUE);
}

/* A kernel as PTX text: u64, u32, a 16-byte aligned-8 struct, a pointer
 * with a pointee alignment (which must not move it). */
static const char touch_ptx[] =
    "//\n// hand-written\n//\n.version 8.0\n.target sm_90\n.address_size 64\n\n"
    ".visible .entry touch(\n"
    "\t.param .u64 touch_param_0,\n"
    "\t.param .u32 touch_param_1,\n"
    "\t.param .align 8 .b8 touch_param_2[16],\n"
    "\t.param .u64 .ptr .global .align 4 touch_param_3\n"
    ")\n{\n\tret;\n}\n"
    "/* .entry commented_out(.param .u8 x) */\n"
    ".visible .entry empty()\n{\n\tret;\n}\n";
static const unsigned touch_layout[][2] = {{0, 8}, {8, 4}, {16, 16}, {32, 8}};

/* ---- residency and prefetch ---- */

Test(managed, managed_memory_starts_on_the_host_and_is_usable)
{
    OK(init_on(0));
    size_t f0 = free_bytes();
    CUdeviceptr p, d;
    FAILS(cuMemAllocManaged(&p, MiB, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocManaged(&p, MiB, CU_MEM_ATTACH_GLOBAL));
    cr_assert_eq(free_bytes(), f0, "host-resident managed memory costs the device nothing");
    struct simcuda_residency r;
    cr_assert_eq(simcuda_managed_residency((void *)(uintptr_t)(p + 100), &r), SIMCUDA_HOST);
    cr_assert(r.base == p && r.size == MiB && r.preferred == SIMCUDA_NOWHERE && r.accessed_by == 0);
    OK(cuMemAlloc(&d, 4096));
    cr_assert_eq(where(d), -2);
    cr_assert_eq(simcuda_managed_residency(&r, NULL), -2);

    /* The same bytes from the host and through copies and sets. */
    memset((void *)(uintptr_t)p, 0x5a, 64);
    unsigned char back[8];
    OK(cuMemcpyDtoH(back, p + 10, sizeof(back)));
    cr_assert_eq(back[0], 0x5a);
    OK(cuMemsetD8(p, 0x11, 16));
    cr_assert_eq(((unsigned char *)(uintptr_t)p)[15], 0x11);
    OK(cuMemcpyDtoD(d, p, 64));

    unsigned char managed = 0;
    void *host = NULL;
    int ordinal = -1;
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    OK(cuPointerGetAttribute(&host, CU_POINTER_ATTRIBUTE_HOST_POINTER, p));
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    cr_assert(managed == 1 && host == (void *)(uintptr_t)p && ordinal == 0);
    CUipcMemHandle h;
    FAILS(cuIpcGetMemHandle(&h, p), CUDA_ERROR_INVALID_VALUE);

    struct simcuda_managed_stats s = stats();
    cr_assert(s.managed_used == MiB && s.resident[0] == 0 && s.devices == 1);
    cr_assert_eq(s.managed_capacity, 256 * MiB, "default pool: 4 x device memory");
    OK(cuMemFree(p));
    cr_assert_eq(stats().managed_used, 0);
    cr_assert_eq(where(p), -2);
}

Test(managed, prefetch_moves_residency_and_counts_bytes)
{
    OK(init_on(0));
    size_t f0 = free_bytes();
    const uint64_t size = MiB + 100, rsize = MiB + 512;
    CUdeviceptr a;
    OK(cuMemAllocManaged(&a, size, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemPrefetchAsync(a, size, on_device(0), 0, NULL)); /* cuMemPrefetchAsync_v2 */
    struct simcuda_managed_stats s = stats();
    cr_assert_eq(where(a), 0);
    cr_assert(s.proc_bytes_htod == rsize && s.proc_migrations == 1 && s.resident[0] == rsize);
    cr_assert_eq(free_bytes(), f0 - rsize, "device-resident managed bytes are used bytes");
    OK(cuMemPrefetchAsync(a + 4096, 1, on_device(0), 0, NULL)); /* already there */
    cr_assert_eq(stats().proc_bytes_htod, rsize);

    /* The legacy ABI (CUdevice, CU_DEVICE_CPU = host) and the per-thread one. */
    CUresult (*legacy)(CUdeviceptr, size_t, CUdevice, CUstream) =
        (CUresult(*)(CUdeviceptr, size_t, CUdevice, CUstream))dlsym(RTLD_DEFAULT,
                                                                    "cuMemPrefetchAsync");
    CUresult (*v2_ptsz)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream) =
        (CUresult(*)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream))dlsym(
            RTLD_DEFAULT, "cuMemPrefetchAsync_v2_ptsz");
    cr_assert(legacy && v2_ptsz);
    OK(legacy(a, size, CU_DEVICE_CPU, NULL));
    s = stats();
    cr_assert(where(a) == SIMCUDA_HOST && s.proc_bytes_dtoh == rsize && s.resident[0] == 0);
    cr_assert_eq(free_bytes(), f0);
    OK(v2_ptsz(a, size, on_device(0), 0, CU_STREAM_PER_THREAD));
    cr_assert_eq(where(a), 0);
    OK(legacy(a, size, CU_DEVICE_CPU, NULL));

    /* The resolver hands out the ABI the caller's version asks for. */
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    OK(cuGetProcAddress("cuMemPrefetchAsync", &fn, 13000, 0, &q));
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuMemPrefetchAsync_v2"));
    OK(cuGetProcAddress("cuMemPrefetchAsync", &fn, 12000, 0, &q));
    cr_assert_eq(fn, (void *)legacy);
    OK(cuGetProcAddress("cuMemPrefetchAsync", &fn, 13000,
                        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &q));
    cr_assert_eq(fn, (void *)v2_ptsz);
    OK(cuGetProcAddress("cuMemAdvise", &fn, 13000, 0, &q));
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuMemAdvise_v2"));
    OK(cuGetProcAddress("cuFuncGetParamInfo", &fn, 13000, 0, &q));
    cr_assert_eq(fn, (void *)&cuFuncGetParamInfo);

    /* Bad input. */
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    FAILS(cuMemPrefetchAsync(d, 4096, on_device(0), 0, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPrefetchAsync(a, 0, on_device(0), 0, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPrefetchAsync(a, rsize + 1, on_device(0), 0, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPrefetchAsync(a, size, on_device(5), 0, NULL), CUDA_ERROR_INVALID_DEVICE);
    FAILS(legacy(a, size, 7, NULL), CUDA_ERROR_INVALID_DEVICE);
    FAILS(cuMemPrefetchAsync(a, size, on_device(0), 1, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPrefetchAsync(a, size, on_device(0), 0, (CUstream)0x77), CUDA_ERROR_INVALID_HANDLE);
    CUmemLocation junk = {(CUmemLocationType)9, 0};
    FAILS(cuMemPrefetchAsync(a, size, junk, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(where(a), SIMCUDA_HOST, "a refused prefetch moves nothing");

    /* A range over two neighbouring allocations moves both. */
    CUdeviceptr b, c;
    OK(cuMemAllocManaged(&b, MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocManaged(&c, MiB, CU_MEM_ATTACH_GLOBAL));
    cr_assert_eq(c, b + MiB, "next-fit places them side by side");
    OK(cuMemPrefetchAsync(b + 10, MiB + 10, on_device(0), 0, NULL));
    cr_assert(where(b) == 0 && where(c) == 0 && where(a) == SIMCUDA_HOST);

    simcuda_reset_counters();
    s = stats();
    cr_assert(s.proc_bytes_htod == 0 && s.proc_migrations == 0 && s.resident[0] == 2 * MiB);
}

Test(managed, prefetch_between_devices_counts_device_to_device)
{
    setenv(SIMCUDA_ENV_DEVICES, "2", 1);
    OK(init_on(1));
    CUdeviceptr a;
    OK(cuMemAllocManaged(&a, 2 * MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemPrefetchAsync(a, 2 * MiB, on_device(1), 0, NULL));
    size_t f1 = free_bytes();
    OK(cuMemPrefetchAsync(a, 2 * MiB, on_device(0), 0, NULL));
    struct simcuda_managed_stats s = stats();
    cr_assert(where(a) == 0 && s.resident[0] == 2 * MiB && s.resident[1] == 0);
    cr_assert(s.proc_bytes_htod == 2 * MiB && s.proc_bytes_dtod == 2 * MiB &&
              s.proc_bytes_dtoh == 0);
    cr_assert_eq(free_bytes(), f1 + 2 * MiB, "device 1 got its bytes back");
    int ordinal = -1;
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a));
    cr_assert_eq(ordinal, 1, "a managed pointer reports the device it was allocated on");
}

Test(managed, advice_is_recorded_and_moves_nothing)
{
    OK(init_on(0));
    CUdeviceptr a;
    OK(cuMemAllocManaged(&a, MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAdvise(a, MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, on_device(0))); /* _v2 */
    OK(cuMemAdvise(a, 16, CU_MEM_ADVISE_SET_ACCESSED_BY, on_host()));
    OK(cuMemAdvise(a, MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, on_device(0)));
    OK(cuMemAdvise(a, MiB, CU_MEM_ADVISE_SET_READ_MOSTLY, on_device(99))); /* location ignored */
    struct simcuda_residency r;
    cr_assert_eq(simcuda_managed_residency((void *)(uintptr_t)a, &r), SIMCUDA_HOST);
    cr_assert(r.preferred == 0 && r.accessed_by == (1u | 1u << 31) && r.read_mostly == 1);
    cr_assert_eq(stats().proc_migrations, 0);

    CUresult (*legacy)(CUdeviceptr, size_t, CUmem_advise, CUdevice) =
        (CUresult(*)(CUdeviceptr, size_t, CUmem_advise, CUdevice))dlsym(RTLD_DEFAULT,
                                                                        "cuMemAdvise");
    cr_assert_not_null(legacy);
    OK(legacy(a, MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU));
    OK(legacy(a, MiB, CU_MEM_ADVISE_UNSET_ACCESSED_BY, 0));
    OK(cuMemAdvise(a, MiB, CU_MEM_ADVISE_UNSET_READ_MOSTLY, on_host()));
    simcuda_managed_residency((void *)(uintptr_t)a, &r);
    cr_assert(r.preferred == SIMCUDA_HOST && r.accessed_by == 1u << 31 && r.read_mostly == 0);
    OK(cuMemAdvise(a, MiB, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, on_host()));
    simcuda_managed_residency((void *)(uintptr_t)a, &r);
    cr_assert_eq(r.preferred, SIMCUDA_NOWHERE);

    FAILS(cuMemAdvise(a, MiB, (CUmem_advise)42, on_host()), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemAdvise(a, MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, on_device(3)),
          CUDA_ERROR_INVALID_DEVICE);
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    FAILS(cuMemAdvise(d, 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, on_host()), CUDA_ERROR_INVALID_VALUE);
}

/* ---- launches ---- */

Test(managed, launch_touching_host_resident_managed_memory_faults_and_migrates)
{
    OK(init_on(0));
    CUmodule mod;
    CUfunction f, again, empty;
    OK(cuModuleLoadData(&mod, touch_ptx));
    OK(cuModuleGetFunction(&f, mod, "touch"));
    OK(cuModuleGetFunction(&again, mod, "touch"));
    cr_assert_eq(f, again, "one handle per kernel");
    expect_layout(f, touch_layout, 4, "touch");
    OK(cuModuleGetFunction(&empty, mod, "empty"));
    expect_layout(empty, NULL, 0, "empty");
    FAILS(cuModuleGetFunction(&again, mod, "commented_out"), CUDA_ERROR_NOT_FOUND);
    size_t off;
    FAILS(cuFuncGetParamInfo(f, 0, NULL, NULL), CUDA_ERROR_INVALID_VALUE);

    CUdeviceptr a, b, c, d;
    OK(cuMemAllocManaged(&a, MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocManaged(&b, MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocManaged(&c, MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAlloc(&d, MiB));
    int n = 5;
    struct {
        uint64_t x;
        CUdeviceptr ptr;
    } s = {42, b};
    void *params[] = {&a, &n, &s, &d};

    /* a directly, b inside the struct: two faults; d is not managed; c is
     * not named. */
    OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    struct simcuda_managed_stats st = stats();
    cr_assert_eq(st.proc_faults, 2);
    cr_assert(st.proc_bytes_htod == 2 * MiB && st.resident[0] == 2 * MiB);
    cr_assert(where(a) == 0 && where(b) == 0 && where(c) == SIMCUDA_HOST);

    /* Resident now: no fault, even through an interior pointer. */
    CUdeviceptr inner = a + 4096;
    void *params2[] = {&inner, &n, &s, &d};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params2, NULL));
    cr_assert_eq(stats().proc_faults, 2);

    /* The 4-byte int slot is never read as a pointer; NULL slots are skipped. */
    void *params3[] = {NULL, &n, NULL, &c};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params3, NULL));
    cr_assert_eq(stats().proc_faults, 3);
    cr_assert_eq(where(c), 0);

    /* Moved back to the host, touched again through cuLaunchKernelEx. */
    OK(cuMemPrefetchAsync(a, MiB, on_host(), 0, NULL));
    CUlaunchConfig cfg = {.gridDimX = 1,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 1,
                          .blockDimY = 1,
                          .blockDimZ = 1};
    OK(cuLaunchKernelEx(&cfg, f, params, NULL));
    cr_assert_eq(stats().proc_faults, 4);

    /* Without a layout kernelParams cannot be read: no fault. An `extra`
     * buffer carries its size, so it is scanned (8-byte aligned words). */
    OK(cuMemPrefetchAsync(c, MiB, on_host(), 0, NULL));
    int dummy;
    CUfunction unknown = (CUfunction)&dummy;
    void *pc[] = {&c};
    OK(cuLaunchKernel(unknown, 1, 1, 1, 1, 1, 1, 0, NULL, pc, NULL));
    cr_assert(stats().proc_faults == 4 && where(c) == SIMCUDA_HOST);
    FAILS(cuFuncGetParamInfo(unknown, 0, &off, NULL), CUDA_ERROR_INVALID_HANDLE);
    uint64_t buf[3] = {7, c + 100, 0};
    size_t buf_size = sizeof(buf);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size,
                     CU_LAUNCH_PARAM_END};
    OK(cuLaunchKernel(unknown, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra));
    cr_assert(stats().proc_faults == 5 && where(c) == 0);

    /* A failed launch touches nothing. */
    OK(cuMemPrefetchAsync(a, MiB, on_host(), 0, NULL));
    simcuda_inject(SIMCUDA_FAULT_LAUNCH, 1);
    FAILS(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_LAUNCH_FAILED);
    cr_assert(stats().proc_faults == 5 && where(a) == SIMCUDA_HOST);

    /* Unloaded: its functions are refused, not followed. */
    OK(cuModuleUnload(mod));
    FAILS(cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuFuncGetParamInfo(f, 0, &off, NULL), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuModuleGetFunction(&again, mod, "touch"), CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(simcuda_launch_count(), 6);
}

Test(managed, device_capacity_is_kept_by_evicting_least_recently_used)
{
    OK(init_on(0)); /* 64 MiB */
    CUmodule mod;
    CUfunction f;
    OK(cuModuleLoadData(&mod, touch_ptx));
    OK(cuModuleGetFunction(&f, mod, "touch"));
    CUdeviceptr a, b, c, big, d1, d2;
    OK(cuMemAllocManaged(&a, 24 * MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocManaged(&b, 24 * MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocManaged(&c, 24 * MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemPrefetchAsync(a, 24 * MiB, on_device(0), 0, NULL));
    OK(cuMemPrefetchAsync(b, 24 * MiB, on_device(0), 0, NULL));
    int n = 0;
    struct {
        uint64_t x, y;
    } s = {0, 0};
    CUdeviceptr none = 0;
    void *params[] = {&a, &n, &s, &none};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)); /* a is now the most recent */
    simcuda_reset_counters();

    /* c needs 24 MiB, 16 are free: b (least recently used) goes. */
    OK(cuMemPrefetchAsync(c, 24 * MiB, on_device(0), 0, NULL));
    struct simcuda_managed_stats st = stats();
    cr_assert(where(a) == 0 && where(b) == SIMCUDA_HOST && where(c) == 0);
    cr_assert(st.proc_evictions == 1 && st.proc_bytes_dtoh == 24 * MiB &&
              st.proc_bytes_htod == 24 * MiB && st.resident[0] == 48 * MiB);
    cr_assert_eq(free_bytes(), 16 * MiB);

    /* An ordinary allocation makes room the same way: a is now the LRU. */
    OK(cuMemAlloc(&d1, 30 * MiB));
    st = stats();
    cr_assert(where(a) == SIMCUDA_HOST && where(c) == 0 && st.proc_evictions == 2);
    cr_assert(st.resident[0] == 24 * MiB && st.device_used[0] == 30 * MiB);
    cr_assert_eq(free_bytes(), 10 * MiB);
    /* One that could not fit even after evicting everything evicts nothing. */
    FAILS(cuMemAlloc(&d2, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert(where(c) == 0 && stats().proc_evictions == 2);

    /* A fault makes room too: b back, c out. */
    void *pb[] = {&b, &n, &s, &none};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, pb, NULL));
    st = stats();
    cr_assert(st.proc_faults == 1 && where(b) == 0 && where(c) == SIMCUDA_HOST);
    cr_assert_eq(st.proc_evictions, 3);

    /* Larger than what ordinary allocations leave: refused, nothing evicted. */
    OK(cuMemAllocManaged(&big, 40 * MiB, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemPrefetchAsync(big, 40 * MiB, on_device(0), 0, NULL));
    void *pbig[] = {&big, &n, &s, &none};
    OK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, pbig, NULL));
    st = stats();
    cr_assert(where(big) == SIMCUDA_HOST && where(b) == 0);
    cr_assert(st.proc_refused == 2 && st.proc_faults == 2 && st.proc_evictions == 3);

    /* Freeing resident managed memory gives the device its bytes back. */
    OK(cuMemFree(b));
    cr_assert_eq(stats().resident[0], 0);
    cr_assert_eq(free_bytes(), 34 * MiB);
}

Test(managed, context_teardown_releases_resident_managed_memory)
{
    OK(cuInit(0));
    CUcontext ctx;
    OK(cuCtxCreate(&ctx, NULL, 0, 0));
    CUdeviceptr a;
    OK(cuMemAllocManaged(&a, 8 * MiB, CU_MEM_ATTACH_HOST));
    OK(cuMemPrefetchAsync(a, 8 * MiB, on_device(0), 0, NULL));
    cr_assert_eq(stats().resident[0], 8 * MiB);
    OK(cuCtxDestroy(ctx));
    struct simcuda_managed_stats st = stats();
    cr_assert(st.resident[0] == 0 && st.managed_used == 0);
}

Test(managed, managed_pool_size_comes_from_the_environment)
{
    setenv(SIMCUDA_ENV_MANAGED_MEMORY, "8M", 1);
    OK(init_on(0));
    cr_assert_eq(stats().managed_capacity, 8 * MiB);
    CUdeviceptr a, b;
    OK(cuMemAllocManaged(&a, 6 * MiB, CU_MEM_ATTACH_GLOBAL));
    FAILS(cuMemAllocManaged(&b, 4 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
}

/* ---- modules ---- */

Test(managed, bad_images_and_handles)
{
    OK(init_on(0));
    CUmodule mod;
    CUfunction f;
    FAILS(cuModuleLoadData(&mod, "not an image at all"), CUDA_ERROR_INVALID_IMAGE);
    FAILS(cuModuleLoadData(&mod, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuModuleLoadData(NULL, touch_ptx), CUDA_ERROR_INVALID_VALUE);
    /* A fat binary whose only entry is of an unknown kind: no code. */
    uint8_t fatbin[16 + 64 + 8];
    memset(fatbin, 0, sizeof(fatbin));
    uint32_t magic = 0xBA55ED50u, ehs = 64;
    uint16_t ver = 1, hs = 16, kind = 7;
    uint64_t total = 64 + 8, psize = 8;
    memcpy(fatbin, &magic, 4);
    memcpy(fatbin + 4, &ver, 2);
    memcpy(fatbin + 6, &hs, 2);
    memcpy(fatbin + 8, &total, 8);
    memcpy(fatbin + 16, &kind, 2);
    memcpy(fatbin + 20, &ehs, 4);
    memcpy(fatbin + 24, &psize, 8);
    FAILS(cuModuleLoadFatBinary(&mod, fatbin), CUDA_ERROR_NO_BINARY_FOR_GPU);
    FAILS(cuModuleGetFunction(&f, (CUmodule)fatbin, "touch"), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuModuleUnload((CUmodule)fatbin), CUDA_ERROR_INVALID_HANDLE);
    OK(cuCtxSetCurrent(NULL));
    FAILS(cuModuleLoadData(&mod, touch_ptx), CUDA_ERROR_INVALID_CONTEXT);
}

/* Loads an nvcc-built image file and checks the layouts nvcc chose for the
 * kernels of runtime_managed.cu (as readelf shows them in the cubin's
 * EIATTR_KPARAM_INFO records). */
static void check_nvcc_image(const char *path)
{
    FILE *fp = fopen(path, "rb");
    cr_assert_not_null(fp, "%s", path);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *img = calloc(1, (size_t)n + 1);
    cr_assert(img && fread(img, 1, (size_t)n, fp) == (size_t)n);
    fclose(fp);
    OK(init_on(0));
    CUmodule mod;
    OK(cuModuleLoadData(&mod, img));
    static const unsigned mixed[][2] = {{0, 8}, {8, 4}, {12, 4}, {16, 24}, {40, 8}};
    static const unsigned small[][2] = {{0, 1}, {2, 2}, {8, 8}, {16, 8}};
    CUfunction f;
    OK(cuModuleGetFunction(&f, mod, "_Z5mixedPfif4PairPd"));
    expect_layout(f, mixed, 5, path);
    OK(cuModuleGetFunction(&f, mod, "_Z11small_typescsxPKi"));
    expect_layout(f, small, 4, path);
    OK(cuModuleGetFunction(&f, mod, "_Z6noargsv"));
    expect_layout(f, NULL, 0, path);
    free(img);
}

#define NVCC_IMAGE_TEST(name, path)                                                                \
    Test(managed, name)                                                                            \
    {                                                                                              \
        check_nvcc_image(path);                                                                    \
    }

#ifdef SIMCUDA_IMAGE_CUBIN
NVCC_IMAGE_TEST(nvcc_cubin_layouts, SIMCUDA_IMAGE_CUBIN)
NVCC_IMAGE_TEST(nvcc_default_fatbin_layouts, SIMCUDA_IMAGE_FATBIN)
NVCC_IMAGE_TEST(nvcc_lz4_fatbin_layouts, SIMCUDA_IMAGE_FATBIN_LZ4)
NVCC_IMAGE_TEST(nvcc_zstd_fatbin_layouts, SIMCUDA_IMAGE_FATBIN_ZSTD)
NVCC_IMAGE_TEST(nvcc_ptx_only_fatbin_layouts, SIMCUDA_IMAGE_FATBIN_PTX)
NVCC_IMAGE_TEST(nvcc_ptx_layouts, SIMCUDA_IMAGE_PTX)
#else
Test(managed, nvcc_images)
{
    cr_skip_test("nvcc was not found at configure time");
}
#endif
