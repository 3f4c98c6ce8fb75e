/*
 * test_driver_resolver.c: tests of the simulated driver's symbol surface:
 * cuGetProcAddress versions and flags, every v1/v2 name exported, the
 * legacy entry points, error strings, bad input, the pinned shared layout,
 * and SIMCUDA_PROC_ADDRESS's binding modes. Part of the simcuda-driver
 * program (test_driver.h; suite setup in test_driver.c).
 */
#include "test_driver.h"

/* ---- resolver ---- */

void *sym(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    cr_assert_not_null(p, "%s is not exported", name);
    return p;
}

void *resolve(const char *name, int version, cuuint64_t flags)
{
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = cuGetProcAddress(name, &fn, version, flags, &st);
    cr_assert_eq(r, CUDA_SUCCESS, "%s@%d/%llu returned %d", name, version,
                 (unsigned long long)flags, (int)r);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
    return fn;
}

Test(simcuda, resolver_versions_and_flags)
{
    const cuuint64_t PT = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const cuuint64_t LEG = CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    /* Works before cuInit, like the real one. */
    cr_assert_eq(resolve("cuMemAlloc", 13000, 0), sym("cuMemAlloc_v2"));
    cr_assert_eq(resolve("cuMemAlloc", 3020, 0), sym("cuMemAlloc_v2"));
    cr_assert_eq(resolve("cuMemAlloc", 3010, 0), sym("cuMemAlloc"));
    cr_assert_eq(resolve("cuMemFree", 12000, PT), sym("cuMemFree_v2"));
    cr_assert_eq(resolve("cuMemGetInfo", 12000, 0), sym("cuMemGetInfo_v2"));
    cr_assert_eq(resolve("cuIpcOpenMemHandle", 11000, 0), sym("cuIpcOpenMemHandle_v2"));
    cr_assert_eq(resolve("cuIpcOpenMemHandle", 10020, 0), sym("cuIpcOpenMemHandle"));
    cr_assert_eq(resolve("cuIpcGetMemHandle", 12000, PT), sym("cuIpcGetMemHandle"));
    cr_assert_eq(resolve("cuCtxCreate", 13000, 0), sym("cuCtxCreate_v4"));
    cr_assert_eq(resolve("cuCtxCreate", 12000, 0), sym("cuCtxCreate_v3"));
    cr_assert_eq(resolve("cuCtxCreate", 11000, 0), sym("cuCtxCreate_v2"));
    cr_assert_eq(resolve("cuCtxDestroy", 12000, 0), sym("cuCtxDestroy_v2"));
    cr_assert_eq(resolve("cuCtxGetDevice", 12080, 0), sym("cuCtxGetDevice"));
    cr_assert_eq(resolve("cuCtxGetDevice", 13000, 0), sym("cuCtxGetDevice_v2"));
    cr_assert_eq(resolve("cuDevicePrimaryCtxRelease", 11000, 0),
                 sym("cuDevicePrimaryCtxRelease_v2"));
    cr_assert_eq(resolve("cuDevicePrimaryCtxRelease", 10000, 0), sym("cuDevicePrimaryCtxRelease"));
    cr_assert_eq(resolve("cuDeviceGetUuid", 11040, 0), sym("cuDeviceGetUuid_v2"));
    cr_assert_eq(resolve("cuEventElapsedTime", 12080, PT), sym("cuEventElapsedTime_v2"));
    cr_assert_eq(resolve("cuEventElapsedTime", 12000, 0), sym("cuEventElapsedTime"));
    cr_assert_eq(resolve("cuGetProcAddress", 12000, 0), sym("cuGetProcAddress_v2"));
    cr_assert_eq(resolve("cuGetProcAddress", 11030, 0), sym("cuGetProcAddress"));

    /* Per-thread variants only when asked for and when they qualify. */
    cr_assert_eq(resolve("cuMemcpyHtoD", 12000, PT), sym("cuMemcpyHtoD_v2_ptds"));
    cr_assert_eq(resolve("cuMemcpyHtoD", 12000, LEG), sym("cuMemcpyHtoD_v2"));
    cr_assert_eq(resolve("cuMemcpyHtoD", 12000, 0), sym("cuMemcpyHtoD_v2"));
    cr_assert_eq(resolve("cuMemcpyHtoD", 3020, PT), sym("cuMemcpyHtoD_v2"));
    cr_assert_eq(resolve("cuMemcpyHtoDAsync", 12000, PT), sym("cuMemcpyHtoDAsync_v2_ptsz"));
    cr_assert_eq(resolve("cuMemcpy", 12000, PT), sym("cuMemcpy_ptds"));
    cr_assert_eq(resolve("cuMemcpyAsync", 12000, PT), sym("cuMemcpyAsync_ptsz"));
    cr_assert_eq(resolve("cuMemsetD32Async", 12000, PT), sym("cuMemsetD32Async_ptsz"));
    cr_assert_eq(resolve("cuMemsetD8", 12000, PT), sym("cuMemsetD8_v2_ptds"));
    cr_assert_eq(resolve("cuMemsetD2D32", 12000, PT), sym("cuMemsetD2D32_v2_ptds"));
    cr_assert_eq(resolve("cuMemsetD2D16", 12000, 0), sym("cuMemsetD2D16_v2"));
    cr_assert_eq(resolve("cuMemsetD2D8Async", 12000, 0), sym("cuMemsetD2D8Async"));
    cr_assert_eq(resolve("cuMemsetD2D32Async", 12000, PT), sym("cuMemsetD2D32Async_ptsz"));
    cr_assert_eq(resolve("cuLaunchKernel", 12000, PT), sym("cuLaunchKernel_ptsz"));
    cr_assert_eq(resolve("cuLaunchKernel", 12000, 0), sym("cuLaunchKernel"));
    cr_assert_eq(resolve("cuLaunchKernelEx", 12000, PT), sym("cuLaunchKernelEx_ptsz"));
    cr_assert_eq(resolve("cuStreamSynchronize", 12000, PT), sym("cuStreamSynchronize_ptsz"));
    cr_assert_eq(resolve("cuEventRecord", 12000, PT), sym("cuEventRecord_ptsz"));

    /* Failures. */
    void *fn = (void *)0x1;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    FAILS(cuGetProcAddress("cuNoSuchFunction", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_null(fn);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    FAILS(cuGetProcAddress("cuMemAlloc_v2", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND); /* base names only */
    fn = (void *)0x1;
    FAILS(cuGetProcAddress("cuLaunchKernelEx", &fn, 11050, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_null(fn);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    FAILS(cuGetProcAddress("cuMemAlloc", &fn, 1000, 0, &st), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    FAILS(cuGetProcAddress(NULL, &fn, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuGetProcAddress("cuMemAlloc", NULL, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuGetProcAddress("cuMemAlloc", &fn, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuGetProcAddress("cuMemAlloc", &fn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE);
    OK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, NULL)); /* status is optional */

    /* The legacy 4-argument entry point, as old runtimes call it. */
    typedef CUresult (*v1_t)(const char *, void **, int, cuuint64_t);
    v1_t v1 = (v1_t)sym("cuGetProcAddress");
    fn = NULL;
    OK(v1("cuMemFree", &fn, 12000, 0));
    cr_assert_eq(fn, sym("cuMemFree_v2"));
    FAILS(v1("cuNoSuchFunction", &fn, 12000, 0), CUDA_ERROR_NOT_FOUND);

    /* What the simulated runtime does: dlopen + dlsym + resolve, then call. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h);
    CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        (CUresult(*)(const char *, void **, int, cuuint64_t,
                     CUdriverProcAddressQueryResult *))dlsym(h, "cuGetProcAddress_v2");
    cr_assert_not_null(gpa);
    CUresult (*init)(unsigned) = NULL;
    OK(gpa("cuInit", (void **)&init, 13000, 0, &st));
    OK(init(0));
    dlclose(h);
}

Test(simcuda, every_v1_and_v2_name_is_exported)
{
    static const char *const names[] = {
        "cuMemAlloc",
        "cuMemAlloc_v2",
        "cuMemFree",
        "cuMemFree_v2",
        "cuMemGetInfo",
        "cuMemGetInfo_v2",
        "cuMemAllocPitch",
        "cuMemAllocPitch_v2",
        "cuMemGetAddressRange",
        "cuMemGetAddressRange_v2",
        "cuMemAllocHost",
        "cuMemAllocHost_v2",
        "cuCtxCreate",
        "cuCtxCreate_v2",
        "cuCtxCreate_v3",
        "cuCtxCreate_v4",
        "cuCtxDestroy",
        "cuCtxDestroy_v2",
        "cuCtxPushCurrent",
        "cuCtxPushCurrent_v2",
        "cuCtxPopCurrent",
        "cuCtxPopCurrent_v2",
        "cuDeviceTotalMem",
        "cuDeviceTotalMem_v2",
        "cuIpcOpenMemHandle",
        "cuIpcOpenMemHandle_v2",
        "cuDevicePrimaryCtxRelease",
        "cuDevicePrimaryCtxRelease_v2",
        "cuDevicePrimaryCtxReset",
        "cuDevicePrimaryCtxReset_v2",
        "cuDevicePrimaryCtxSetFlags",
        "cuDevicePrimaryCtxSetFlags_v2",
        "cuStreamDestroy",
        "cuStreamDestroy_v2",
        "cuEventDestroy",
        "cuEventDestroy_v2",
        "cuMemcpyHtoD",
        "cuMemcpyHtoD_v2",
        "cuMemcpyHtoD_v2_ptds",
        "cuMemcpyDtoH_v2_ptds",
        "cuMemcpyDtoD_v2_ptds",
        "cuMemcpyHtoDAsync_v2_ptsz",
        "cuMemcpyDtoHAsync_v2_ptsz",
        "cuMemcpyDtoDAsync_v2_ptsz",
        "cuMemsetD8_v2_ptds",
        "cuMemsetD32_v2_ptds",
        "cuMemsetD8Async_ptsz",
        "cuMemsetD32Async_ptsz",
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuMemPrefetchAsync",
        "cuMemPrefetchAsync_ptsz",
        "cuMemPrefetchAsync_v2",
        "cuMemPrefetchAsync_v2_ptsz",
        "cuMemAdvise",
        "cuMemAdvise_v2",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        sym(names[i]);
    cr_assert_null(dlsym(RTLD_DEFAULT, "sim_alloc"), "internal symbols must stay hidden");
}

Test(simcuda, legacy_entry_points)
{
    OK(init_on(0));
    CUresult (*getinfo)(unsigned int *, unsigned int *) =
        (CUresult(*)(unsigned int *, unsigned int *))sym("cuMemGetInfo");
    CUresult (*alloc32)(unsigned int *, unsigned int) =
        (CUresult(*)(unsigned int *, unsigned int))sym("cuMemAlloc");
    CUresult (*ctx_create1)(CUcontext *, unsigned int, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned int, CUdevice))sym("cuCtxCreate");
    CUresult (*ctx_destroy1)(CUcontext) = (CUresult(*)(CUcontext))sym("cuCtxDestroy");
    unsigned int f = 0, t = 0, p32 = 0;
    OK(getinfo(&f, &t));
    cr_assert_eq(t, 64u << 20);
    FAILS(alloc32(&p32, 64), CUDA_ERROR_NOT_SUPPORTED); /* pointers never fit 32 bits */
    CUcontext c;
    OK(ctx_create1(&c, 0, 0));
    OK(ctx_destroy1(c));
}

Test(simcuda, error_strings)
{
    static const CUresult codes[] = {
        CUDA_SUCCESS,
        CUDA_ERROR_INVALID_VALUE,
        CUDA_ERROR_OUT_OF_MEMORY,
        CUDA_ERROR_NOT_INITIALIZED,
        CUDA_ERROR_DEINITIALIZED,
        CUDA_ERROR_INVALID_DEVICE,
        CUDA_ERROR_INVALID_CONTEXT,
        CUDA_ERROR_MAP_FAILED,
        CUDA_ERROR_OPERATING_SYSTEM,
        CUDA_ERROR_INVALID_HANDLE,
        CUDA_ERROR_NOT_FOUND,
        CUDA_ERROR_LAUNCH_FAILED,
        CUDA_ERROR_NOT_SUPPORTED,
        CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
        CUDA_ERROR_UNKNOWN,
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = NULL, *n = NULL;
        OK(cuGetErrorString(codes[i], &s));
        OK(cuGetErrorName(codes[i], &n));
        cr_assert(s && *s && n && strncmp(n, "CUDA_", 5) == 0);
    }
    const char *s = NULL;
    OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    cr_assert_str_eq(s, "CUDA_ERROR_OUT_OF_MEMORY");
    OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
    cr_assert_str_eq(s, "invalid argument");
    FAILS(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    cr_assert_null(s);
    FAILS(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
}

Test(simcuda, bad_input_never_crashes)
{
    OK(init_on(0));
    void *junk = (void *)0x12345678;
    FAILS(cuCtxGetCurrent(NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuCtxGetDevice(NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuCtxDestroy((CUcontext)junk), CUDA_ERROR_INVALID_CONTEXT);
    FAILS(cuCtxGetDevice_v2(&(CUdevice){0}, (CUcontext)junk), CUDA_ERROR_INVALID_CONTEXT);
    FAILS(cuStreamDestroy((CUstream)junk), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuEventCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuEventElapsedTime(NULL, (CUevent)junk, (CUevent)junk), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuEventDestroy((CUevent)junk), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuIpcGetEventHandle(&(CUipcEventHandle){0}, (CUevent)junk), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)junk), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemcpyDtoH(junk, (CUdeviceptr)(uintptr_t)junk, 8), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemsetD8((CUdeviceptr)(uintptr_t)junk, 0, 8), CUDA_ERROR_INVALID_VALUE);
}

Test(simcuda, shared_layout_is_pinned)
{
    /* The segment is shared between builds of this library: any change here
     * must bump SIM_ABI. */
    cr_assert_eq(SIM_ABI, 5);
    cr_assert_eq(sizeof(struct sim_alloc), 96);
    cr_assert_eq(offsetof(struct sim_alloc, offset), 16);
    cr_assert_eq(offsetof(struct sim_alloc, serial), 40);
    cr_assert_eq(offsetof(struct sim_alloc, owner_pid), 56);
    cr_assert_eq(offsetof(struct sim_alloc, owner_start), 64);
    cr_assert_eq(offsetof(struct sim_alloc, resident), 72);
    cr_assert_eq(offsetof(struct sim_alloc, last_use), 88);
    cr_assert_eq(sizeof(struct sim_holder), 32);
    cr_assert_eq(sizeof(struct sim_dev_state), 64);
    cr_assert_eq(offsetof(struct sim_machine, managed_capacity), 56);
    cr_assert_eq(offsetof(struct sim_machine, lock), 88);
    cr_assert_eq(offsetof(struct sim_machine, next_serial), 152);
    cr_assert_eq(offsetof(struct sim_machine, poisoned_frees), 176);
    cr_assert_eq(offsetof(struct sim_machine, dev), 184);
    cr_assert_eq(offsetof(struct sim_machine, off_maps), 184 + 64 * SIM_POOLS);
    cr_assert_eq(sizeof(struct sim_map), 32);
    cr_assert_eq(sizeof(struct sim_machine), 184 + 64 * SIM_POOLS + 48);
    cr_assert_eq(sizeof(CUipcMemHandle), 64);
}

/* ---- SIMCUDA_PROC_ADDRESS ---- */

Test(simcuda, resolver_binding_modes)
{
    /* Default: the driver's own function, the one dlsym of its name gives
     * (libcuda is linked -Bsymbolic-functions: nothing preloaded changes it;
     * tests/e2e/test_binding.c checks that under the shim). */
    void *own = dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "cuMemAlloc_v2");
    cr_assert_not_null(own);
    cr_assert_eq(resolve("cuMemAlloc", 13000, 0), own);
    setenv(SIMCUDA_ENV_PROC_ADDRESS, "internal", 1);
    cr_assert_eq(resolve("cuMemAlloc", 13000, 0), own);

    /* alias: internal twins of the IPC/allocation functions only. */
    setenv(SIMCUDA_ENV_PROC_ADDRESS, "alias", 1);
    CUresult (*alloc)(CUdeviceptr *, size_t) =
        (CUresult(*)(CUdeviceptr *, size_t))resolve("cuMemAlloc", 13000, 0);
    CUresult (*release)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))resolve("cuMemFree", 13000, 0);
    cr_assert_neq((void *)alloc, own);
    cr_assert_neq((void *)release, sym("cuMemFree_v2"));
    cr_assert_neq(resolve("cuIpcOpenMemHandle", 13000, 0), sym("cuIpcOpenMemHandle_v2"));
    cr_assert_eq(resolve("cuIpcOpenMemHandle", 10000, 0), sym("cuIpcOpenMemHandle"),
                 "only the newest ABI");
    cr_assert_eq(resolve("cuCtxCreate", 13000, 0), sym("cuCtxCreate_v4"));
    OK(init_on(0));
    CUdeviceptr p;
    OK(alloc(&p, 4096)); /* the twin behaves like the original */
    OK(cuMemsetD8(p, 1, 4096));
    OK(release(p));
    FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);

    /* global: what the dynamic linker finds first (nothing preloaded here). */
    setenv(SIMCUDA_ENV_PROC_ADDRESS, "global", 1);
    cr_assert_eq(resolve("cuMemAlloc", 13000, 0), dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
    unsetenv(SIMCUDA_ENV_PROC_ADDRESS);
}
