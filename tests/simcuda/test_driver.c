/*
 * test_driver.c: Criterion tests of the simulated CUDA driver (libcuda.so.1
 * from tests/simcuda), linked directly against it: the suite's setup, and
 * the tests of initialisation, devices, contexts, memory, fault injection,
 * kernels, streams and events, stream-ordered allocation. The same program
 * holds test_driver_ipc.c, test_driver_machine.c and test_driver_resolver.c
 * (test_driver.h).
 *
 * Every test runs in its own process and uses its own simulated machine,
 * named after the test and the pid (SIMCUDA_MACHINE, set in .init before any
 * cuInit); .fini unlinks the machine's shared-memory objects. Tests that need
 * a second process fork(): the child calls cuInit again (the driver supports
 * that: the child keeps the parent's mappings but becomes a holder of its
 * own), reports failures on stderr and through its exit status, and leaves
 * with _exit() so Criterion's own exit handlers do not run twice.
 */
#include "test_driver.h"

char g_machine[160];

static void setup(void)
{
    snprintf(g_machine, sizeof(g_machine), "t-%s-%d", criterion_current_test->name, (int)getpid());
    setenv(SIMCUDA_ENV_MACHINE, g_machine, 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "64M", 1);
    unsetenv(SIMCUDA_ENV_DEVICES);
    unsetenv(SIMCUDA_ENV_FAIL_ALLOC);
    unsetenv(SIMCUDA_ENV_FAIL_IPC_GET);
    unsetenv(SIMCUDA_ENV_FAIL_IPC_OPEN);
    unsetenv(SIMCUDA_ENV_FAIL_IPC_CLOSE);
    unsetenv(SIMCUDA_ENV_FAIL_LAUNCH);
    unsetenv(SIMCUDA_ENV_FREE_WHILE_MAPPED);
    unsetenv(SIMCUDA_ENV_PROC_ADDRESS);
    unsetenv(SIMCUDA_ENV_MAX_ALLOCS);
    unsetenv(SIMCUDA_ENV_DRIVER_THREAD);
}

static void teardown(void)
{
    simcuda_unlink_machine(g_machine);
}

TestSuite(simcuda, .init = setup, .fini = teardown, .timeout = 30);

/* cuInit plus a current primary context on device `dev`. */
CUresult init_on(int dev)
{
    CUresult r = cuInit(0);
    CUcontext c;
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&c, dev);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(c);
    return r;
}

size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    OK(cuMemGetInfo(&f, &t));
    return f;
}

/* Runs fn(arg) in a forked child; returns its exit status (or 128+signal). */
int run_child(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(fn(arg));
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void write_all(int fd, const void *p, size_t n)
{
    cr_assert_eq(write(fd, p, n), (ssize_t)n);
}

/* ---- initialisation, devices ---- */

Test(simcuda, init_and_devices)
{
    int v = 0, n = 0;
    OK(cuDriverGetVersion(&v));
    cr_assert_eq(v, 13000);
    FAILS(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    FAILS(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    setenv(SIMCUDA_ENV_DEVICES, "2", 1);
    OK(cuInit(0));
    OK(cuInit(0)); /* idempotent */
    OK(cuDeviceGetCount(&n));
    cr_assert_eq(n, 2);
    CUdevice d;
    OK(cuDeviceGet(&d, 1));
    cr_assert_eq(d, 1);
    FAILS(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    FAILS(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE);
    char name[64];
    OK(cuDeviceGetName(name, sizeof(name), 0));
    cr_assert(strstr(name, "SimCUDA") != NULL);
    static const struct {
        CUdevice_attribute a;
        int v;
    } attrs[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
        {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
        {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
        {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
        {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
    };
    for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++) {
        int x = -1;
        OK(cuDeviceGetAttribute(&x, attrs[i].a, 1));
        cr_assert_eq(x, attrs[i].v, "attribute %d = %d", (int)attrs[i].a, x);
    }
    int x;
    FAILS(cuDeviceGetAttribute(&x, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    size_t total = 0;
    OK(cuDeviceTotalMem(&total, 0));
    cr_assert_eq(total, 64u << 20);
    CUuuid u0, u1;
    OK(cuDeviceGetUuid(&u0, 0));
    OK(cuDeviceGetUuid(&u1, 1));
    cr_assert(memcmp(&u0, &u1, sizeof(u0)) != 0);
}

Test(simcuda, bad_env_values_fall_back)
{
    setenv(SIMCUDA_ENV_DEVICES, "99", 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "lots", 1);
    OK(cuInit(0));
    int n;
    size_t total;
    OK(cuDeviceGetCount(&n));
    OK(cuDeviceTotalMem(&total, 0));
    cr_assert_eq(n, 1);
    cr_assert_eq(total, 1u << 30);
}

/* This process's threads named `name` (/proc/self/task/<tid>/comm). */
static int threads_named(const char *name)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    cr_assert(d != NULL);
    for (struct dirent *t; (t = readdir(d));) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *f = t->d_name[0] != '.' ? fopen(path, "r") : NULL;
        if (!f) continue;
        if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
        fclose(f);
        n += strcmp(comm, name) == 0;
    }
    closedir(d);
    return n;
}

static int child_init_starts_one(void *arg)
{
    (void)arg;
    if (threads_named("cuda-EvtHandlr") != 0) return 1; /* threads do not survive fork */
    if (cuInit(0) != CUDA_SUCCESS) return 2;
    return threads_named("cuda-EvtHandlr") == 1 ? 0 : 3;
}

/* Like NVIDIA's driver, the simulator makes an initialised process
 * multi-threaded (README.md, "Threads"): one sleeping helper per process. */
Test(simcuda, init_starts_one_driver_thread)
{
    cr_assert_eq(threads_named("cuda-EvtHandlr"), 0);
    OK(cuInit(0));
    OK(cuInit(0));
    cr_assert_eq(threads_named("cuda-EvtHandlr"), 1);
    cr_assert_eq(run_child(child_init_starts_one, NULL), 0);
    cr_assert_eq(threads_named("cuda-EvtHandlr"), 1);
}

Test(simcuda, driver_thread_off_leaves_one_thread)
{
    setenv(SIMCUDA_ENV_DRIVER_THREAD, "0", 1);
    OK(cuInit(0));
    cr_assert_eq(threads_named("cuda-EvtHandlr"), 0);
}

/* ---- contexts ---- */

Test(simcuda, contexts)
{
    setenv(SIMCUDA_ENV_DEVICES, "2", 1);
    OK(cuInit(0));
    CUdeviceptr p;
    CUcontext cur = (CUcontext)0x1;
    FAILS(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    OK(cuCtxGetCurrent(&cur));
    cr_assert_null(cur);
    FAILS(cuCtxPopCurrent(&cur), CUDA_ERROR_INVALID_CONTEXT);
    FAILS(cuCtxSetCurrent((CUcontext)0x1234), CUDA_ERROR_INVALID_CONTEXT);
    FAILS(cuCtxPushCurrent((CUcontext)0x1234), CUDA_ERROR_INVALID_CONTEXT);

    CUcontext a, b;
    OK(cuCtxCreate(&a, NULL, 0, 1)); /* cuCtxCreate_v4; pushed current */
    OK(cuCtxGetCurrent(&cur));
    cr_assert_eq(cur, a);
    CUdevice d;
    OK(cuCtxGetDevice(&d));
    cr_assert_eq(d, 1);
    OK(cuDevicePrimaryCtxRetain(&b, 0));
    OK(cuCtxPushCurrent(b));
    OK(cuCtxGetDevice(&d));
    cr_assert_eq(d, 0);
    OK(cuCtxPopCurrent(&cur));
    cr_assert_eq(cur, b);
    OK(cuCtxGetCurrent(&cur));
    cr_assert_eq(cur, a);

    /* Allocations belong to the current context's device and die with it. */
    OK(cuMemAlloc(&p, 1 << 20));
    struct simcuda_stats st;
    simcuda_stats(&st);
    cr_assert_eq(st.used[1], 1u << 20);
    cr_assert_eq(st.used[0], 0);
    int ord = -1;
    OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    cr_assert_eq(ord, 1);
    CUcontext owner = NULL;
    OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    cr_assert_eq(owner, a);
    OK(cuCtxDestroy(a));
    simcuda_stats(&st);
    cr_assert_eq(st.used[1], 0);
    FAILS(cuCtxDestroy(a), CUDA_ERROR_INVALID_CONTEXT);
    FAILS(cuCtxDestroy(b), CUDA_ERROR_INVALID_CONTEXT); /* primary */
    OK(cuCtxGetCurrent(&cur));
    cr_assert_null(cur); /* destroyed context was popped */

    unsigned flags;
    int active;
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    cr_assert_eq(active, 1);
    OK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
    OK(cuDevicePrimaryCtxRelease(0));
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    cr_assert_eq(active, 0);
    cr_assert_eq(flags, CU_CTX_SCHED_BLOCKING_SYNC);
    FAILS(cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
    FAILS(cuCtxSetCurrent(b), CUDA_ERROR_INVALID_CONTEXT); /* inactive primary */
}

static void *thread_current(void *arg)
{
    CUcontext c = (CUcontext)0x1;
    cuCtxGetCurrent(&c);
    *(CUcontext *)arg = c;
    return NULL;
}

Test(simcuda, current_context_is_per_thread)
{
    OK(init_on(0));
    CUcontext seen = (CUcontext)0x1;
    pthread_t t;
    pthread_create(&t, NULL, thread_current, &seen);
    pthread_join(t, NULL);
    cr_assert_null(seen);
}

/* ---- memory ---- */

Test(simcuda, capacity_and_out_of_memory)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "1M", 1);
    OK(init_on(0));
    size_t f, t;
    OK(cuMemGetInfo(&f, &t));
    cr_assert_eq(t, 1u << 20);
    cr_assert_eq(f, 1u << 20);
    CUdeviceptr a, b, c;
    OK(cuMemAlloc(&a, 512 << 10));
    OK(cuMemAlloc(&b, 512 << 10));
    FAILS(cuMemAlloc(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
    FAILS(cuMemAlloc(&c, 2 << 20), CUDA_ERROR_OUT_OF_MEMORY);
    FAILS(cuMemAlloc(&c, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemAlloc(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(free_bytes(), 0);
    OK(cuMemFree(a));
    cr_assert_eq(free_bytes(), 512u << 10);
    FAILS(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);       /* double free */
    FAILS(cuMemFree(b + 512), CUDA_ERROR_INVALID_VALUE); /* interior pointer */
    FAILS(cuMemFree(0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemFree((CUdeviceptr)(uintptr_t)&f), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc(&c, 1)); /* rounded to one 512-byte granule */
    cr_assert_eq(free_bytes(), (512u << 10) - 512);
    OK(cuMemAlloc(&a, 513));
    cr_assert_eq(free_bytes(), (512u << 10) - 512 - 1024);
    cr_assert_eq(c % 512, 0);
    cr_assert_eq(a % 512, 0);
    size_t pitch;
    OK(cuMemAllocPitch(&a, &pitch, 100, 4, 4));
    cr_assert_eq(pitch, 512);
    FAILS(cuMemAllocPitch(&a, &pitch, 100, 4, 3), CUDA_ERROR_INVALID_VALUE);
}

Test(simcuda, many_allocations_are_fast, .timeout = 60)
{
    enum { N = 100000 };
    OK(init_on(0));
    CUdeviceptr *p = malloc(N * sizeof(*p));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N; i++)
        OK(cuMemAlloc(&p[i], 256 + (size_t)(i % 3) * 100));
    for (int i = 0; i < N; i += 2)
        OK(cuMemFree(p[i]));
    for (int i = 0; i < N; i += 2)
        OK(cuMemAlloc(&p[i], 200));
    for (int i = 0; i < N; i++)
        OK(cuMemFree(p[i]));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_log_info("300k alloc/free calls: %.3f s", s);
    cr_assert_lt(s, 10.0);
    cr_assert_eq(free_bytes(), 64u << 20);
    free(p);
}

Test(simcuda, copies_sets_and_pointer_attributes)
{
    OK(init_on(0));
    CUdeviceptr a, b;
    OK(cuMemAlloc(&a, 1000));
    OK(cuMemAlloc(&b, 1000));
    unsigned char host[1000], back[1000];
    for (int i = 0; i < 1000; i++)
        host[i] = (unsigned char)i;
    OK(cuMemcpyHtoD(a, host, sizeof(host)));
    OK(cuMemcpyDtoD(b, a, sizeof(host)));
    memset(back, 0, sizeof(back));
    OK(cuMemcpyDtoH(back, b, sizeof(back)));
    cr_assert_arr_eq(back, host, sizeof(host));
    OK(cuMemcpy((CUdeviceptr)(uintptr_t)back, a + 10, 10));
    cr_assert_eq(back[0], 10);
    FAILS(cuMemcpyHtoD(a, host, 1001), CUDA_ERROR_INVALID_VALUE); /* past the end */
    FAILS(cuMemcpyHtoD(a + 999, host, 2), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemcpyHtoD(a, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)host, host, 1), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemcpyHtoDAsync(a, host, 1, (CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
    OK(cuMemcpyHtoDAsync(a, host, 1, CU_STREAM_PER_THREAD));
    OK(cuMemsetD8(a, 0xab, 1000));
    OK(cuMemsetD32(b, 0x01020304, 250));
    OK(cuMemcpyDtoH(back, a, 4));
    cr_assert_eq(back[3], 0xab);
    unsigned w;
    OK(cuMemcpyDtoH(&w, b + 996, 4));
    cr_assert_eq(w, 0x01020304);
    FAILS(cuMemsetD32(b + 2, 0, 1), CUDA_ERROR_INVALID_VALUE); /* misaligned */
    FAILS(cuMemsetD32(b, 0, 251), CUDA_ERROR_INVALID_VALUE);   /* past the end */

    CUdeviceptr base;
    size_t size;
    OK(cuMemGetAddressRange(&base, &size, a + 123));
    cr_assert_eq(base, a);
    cr_assert_eq(size, 1000);
    FAILS(cuMemGetAddressRange(&base, &size, a + 1000), CUDA_ERROR_NOT_FOUND);
    FAILS(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)host), CUDA_ERROR_NOT_FOUND);

    unsigned type = 0;
    unsigned char managed = 7;
    unsigned long long id_a = 0, id_b = 0;
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 5));
    cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
    OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, a));
    cr_assert_eq(managed, 0);
    OK(cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
    OK(cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, b + 999));
    cr_assert_neq(id_a, id_b);
    CUdeviceptr start = 0, dp = 0;
    size_t rsize = 0;
    OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 7));
    OK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 7));
    OK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a + 7));
    cr_assert_eq(start, a);
    cr_assert_eq(rsize, 1000);
    cr_assert_eq(dp, a + 7);
    FAILS(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                (CUdeviceptr)(uintptr_t)host),
          CUDA_ERROR_INVALID_VALUE);
    FAILS(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a),
          CUDA_ERROR_INVALID_VALUE);

    CUpointer_attribute which[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                                    CU_POINTER_ATTRIBUTE_BUFFER_ID};
    CUcontext ctx = (CUcontext)0x1;
    unsigned long long id = 1;
    type = 99;
    void *data[3] = {&type, &ctx, &id};
    OK(cuPointerGetAttributes(3, which, data, (CUdeviceptr)(uintptr_t)host));
    cr_assert_eq(type, 0);
    cr_assert_null(ctx);
    cr_assert_eq(id, 0);
    OK(cuPointerGetAttributes(3, which, data, b));
    cr_assert_eq(type, CU_MEMORYTYPE_DEVICE);
    cr_assert_eq(id, id_b);

    void *pinned;
    OK(cuMemAllocHost(&pinned, 4096));
    OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                             (CUdeviceptr)(uintptr_t)pinned));
    cr_assert_eq(type, CU_MEMORYTYPE_HOST);
    OK(cuMemcpyDtoH(pinned, a, 1000));
    OK(cuMemFreeHost(pinned));
    FAILS(cuMemFreeHost(pinned), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(a));
    FAILS(cuMemcpyDtoH(back, a, 1), CUDA_ERROR_INVALID_VALUE); /* freed */
}

/* ---- fault injection ---- */

static int child_open_fault(void *arg)
{
    struct ipc_args *a = arg;
    setenv(SIMCUDA_ENV_FAIL_IPC_OPEN, "1", 1);
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CHILD_EXPECT(cuIpcOpenMemHandle(&p, a->h, 0) == CUDA_ERROR_MAP_FAILED);
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    simcuda_inject(SIMCUDA_FAULT_IPC_CLOSE, 1);
    CHILD_EXPECT(cuIpcCloseMemHandle(p) == CUDA_ERROR_INVALID_CONTEXT);
    CHILD_OK(cuIpcCloseMemHandle(p));
    return 0;
}

Test(simcuda, fault_injection)
{
    setenv(SIMCUDA_ENV_FAIL_ALLOC, "2", 1);
    setenv(SIMCUDA_ENV_FAIL_IPC_GET, "1", 1);
    OK(init_on(0));
    CUdeviceptr p;
    FAILS(cuMemAlloc(&p, 64), CUDA_ERROR_OUT_OF_MEMORY);
    FAILS(cuMemAlloc(&p, 64), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc(&p, 64));
    struct ipc_args a;
    FAILS(cuIpcGetMemHandle(&a.h, p), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_open_fault, &a), 0);
    simcuda_inject(SIMCUDA_FAULT_ALLOC, 1);
    FAILS(cuMemAlloc(&p, 64), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAlloc(&p, 64));

    int dummy;
    CUfunction f = (CUfunction)&dummy;
    void *params[1] = {&p};
    simcuda_inject(SIMCUDA_FAULT_LAUNCH, 1);
    FAILS(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_LAUNCH_FAILED);
    cr_assert_eq(simcuda_launch_count(), 0);
}

/* ---- kernels, streams, events ---- */

Test(simcuda, launches_are_recorded)
{
    OK(init_on(0));
    int dummy;
    CUfunction f = (CUfunction)&dummy;
    CUdeviceptr p = 0;
    void *params[1] = {&p};
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    OK(cuLaunchKernel(f, 2, 3, 4, 32, 2, 1, 128, s, params, NULL));
    void *ptsz = dlsym(RTLD_DEFAULT, "cuLaunchKernel_ptsz");
    cr_assert_not_null(ptsz);
    OK(((CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **))ptsz)(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL,
                                                                 NULL));
    CUlaunchConfig cfg = {.gridDimX = 5,
                          .gridDimY = 1,
                          .gridDimZ = 1,
                          .blockDimX = 64,
                          .blockDimY = 1,
                          .blockDimZ = 1,
                          .hStream = s};
    OK(cuLaunchKernelEx(&cfg, f, params, NULL));
    cr_assert_eq(simcuda_launch_count(), 3);
    struct simcuda_launch l;
    cr_assert_eq(simcuda_last_launch(2, &l), 0);
    cr_assert_eq(l.func, (void *)f);
    cr_assert_eq(l.grid[1], 3);
    cr_assert_eq(l.block[0], 32);
    cr_assert_eq(l.shared_mem, 128);
    cr_assert_eq(l.stream, (void *)s);
    cr_assert_eq(l.params, params);
    cr_assert_eq(simcuda_last_launch(0, &l), 0);
    cr_assert_eq(l.grid[0], 5);
    cr_assert_eq(simcuda_last_launch(3, &l), -1);
    FAILS(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, (CUstream)0x99, NULL, NULL),
          CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamDestroy(s));
    FAILS(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
    struct simcuda_stats st;
    simcuda_stats(&st);
    cr_assert_eq(st.proc_launches, 3);
}

Test(simcuda, streams_and_events)
{
    OK(init_on(0));
    CUstream s;
    CUevent a, b, ip, opened;
    OK(cuStreamCreate(&s, 0));
    OK(cuStreamQuery(s));
    OK(cuStreamSynchronize(s));
    OK(cuStreamSynchronize(NULL));
    OK(cuStreamQuery(CU_STREAM_PER_THREAD));
    FAILS(cuStreamCreate(&s, 0x80), CUDA_ERROR_INVALID_VALUE);
    OK(cuEventCreate(&a, CU_EVENT_DEFAULT));
    OK(cuEventCreate(&b, CU_EVENT_DEFAULT));
    float ms = -1;
    FAILS(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
    OK(cuEventRecord(a, s));
    OK(cuEventRecord(b, s));
    OK(cuEventQuery(b));
    OK(cuEventSynchronize(b));
    OK(cuStreamWaitEvent(s, b, 0));
    OK(cuEventElapsedTime(&ms, a, b));
    cr_assert_geq(ms, 0.0f);
    FAILS(cuEventCreate(&ip, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    OK(cuEventCreate(&ip, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CUipcEventHandle eh, bad;
    FAILS(cuIpcGetEventHandle(&eh, a), CUDA_ERROR_INVALID_VALUE); /* not interprocess */
    OK(cuIpcGetEventHandle(&eh, ip));
    OK(cuIpcOpenEventHandle(&opened, eh));
    cr_assert_neq(opened, ip);
    OK(cuEventQuery(opened));
    FAILS(cuEventElapsedTime(&ms, opened, b), CUDA_ERROR_INVALID_HANDLE); /* no timing */
    memset(&bad, 0x5c, sizeof(bad));
    FAILS(cuIpcOpenEventHandle(&opened, bad), CUDA_ERROR_INVALID_VALUE);
    OK(cuEventDestroy(a));
    FAILS(cuEventDestroy(a), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuEventRecord(a, NULL), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuEventQuery((CUevent)0x1234), CUDA_ERROR_INVALID_HANDLE);
    OK(cuStreamDestroy(s));
    FAILS(cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
    FAILS(cuStreamSynchronize((CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
}

/* ---- stream-ordered allocation and the default pool (driver_pool.c) ---- */

static void *pool_attr_ptr(CUdeviceptr p)
{
    void *pool = (void *)0x1;
    OK(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    return pool;
}

static cuuint64_t pool_get(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = ~0ull;
    OK(cuMemPoolGetAttribute(pool, a, &v));
    return v;
}

Test(simcuda, stream_ordered_allocation_and_default_pool)
{
    CUmemoryPool pool = NULL, cur = NULL;
    FAILS(cuDeviceGetDefaultMemPool(&pool, 0), CUDA_ERROR_NOT_INITIALIZED);
    OK(init_on(0));
    int v = 0;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
    cr_assert_eq(v, 1);
    OK(cuDeviceGetDefaultMemPool(&pool, 0));
    cr_assert_not_null(pool);
    OK(cuDeviceGetMemPool(&cur, 0));
    cr_assert_eq(cur, pool);
    FAILS(cuDeviceGetDefaultMemPool(&pool, 7), CUDA_ERROR_INVALID_DEVICE);
    FAILS(cuDeviceGetDefaultMemPool(NULL, 0), CUDA_ERROR_INVALID_VALUE);

    CUstream s;
    OK(cuStreamCreate(&s, 0));
    size_t before = free_bytes();
    CUdeviceptr p, q, r;
    OK(cuMemAllocAsync(&p, 1000, s));
    cr_assert_eq(before - free_bytes(), 1024, "pool memory is device memory, charged like any");
    OK(cuMemsetD8(p, 7, 1000));
    unsigned char b = 0;
    OK(cuMemcpyDtoH(&b, p + 999, 1));
    cr_assert_eq(b, 7);
    cr_assert_eq(pool_attr_ptr(p), (void *)pool);
    cr_assert_eq(pool_attr_ptr(p + 10), (void *)pool);
    unsigned char capable = 1;
    OK(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
    cr_assert_eq(capable, 0);
    CUipcMemHandle h;
    FAILS(cuIpcGetMemHandle(&h, p), CUDA_ERROR_INVALID_VALUE); /* openucx/ucx#10065 */
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 1024);
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1024);

    OK(cuMemAlloc(&q, 512)); /* ordinary memory: no pool, exportable */
    cr_assert_null(pool_attr_ptr(q));
    OK(cuIpcGetMemHandle(&h, q));

    OK(cuMemAllocFromPoolAsync(&r, 512, pool, NULL));
    FAILS(cuMemAllocFromPoolAsync(&r, 512, (CUmemoryPool)&v, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemAllocFromPoolAsync(&r, 512, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemAllocAsync(&r, 0, s), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemAllocAsync(&r, 16, (CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 1536);
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 1536);

    /* The simulator frees at once: all work queued on s is already done. */
    OK(cuMemFreeAsync(p, s));
    FAILS(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemFreeAsync(r + 8, s), CUDA_ERROR_INVALID_VALUE); /* not a base */
    OK(cuMemFree(r));                                          /* pool memory, synchronous free */
    OK(cuMemFreeAsync(q, NULL)); /* cuMemAlloc memory, stream-ordered free */
    cr_assert_eq(free_bytes(), before);
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0);
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 1536);

    /* Attributes: reuse flags and threshold are kept; high marks reset to 0 only. */
    cuuint64_t t = 1 << 20, zero = 0;
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t));
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 1 << 20);
    int off = 0, flag = -1;
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &flag));
    cr_assert_eq(flag, 0);
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, &flag));
    cr_assert_eq(flag, 1);
    FAILS(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &t), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    cr_assert_eq(pool_get(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0);
    FAILS(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero),
          CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolTrimTo(pool, 0));
    FAILS(cuMemPoolTrimTo((CUmemoryPool)&v, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuStreamDestroy(s));
}

Test(simcuda, legacy_ipc_refuses_managed_and_pool_memory)
{
    OK(init_on(0));
    CUdeviceptr m, a, d;
    CUipcMemHandle h;
    OK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
    FAILS(cuIpcGetMemHandle(&h, m), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocAsync(&a, 4096, NULL));
    FAILS(cuIpcGetMemHandle(&h, a), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc(&d, 4096));
    OK(cuIpcGetMemHandle(&h, d));
    /* The resolver hands the new functions out, _ptsz on request. */
    cr_assert_eq(resolve("cuMemAllocAsync", 13000, 0), sym("cuMemAllocAsync"));
    cr_assert_eq(resolve("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
                 sym("cuMemAllocAsync_ptsz"));
    cr_assert_eq(resolve("cuMemFreeAsync", 11020, 0), sym("cuMemFreeAsync"));
    cr_assert_eq(resolve("cuDeviceGetDefaultMemPool", 12000, 0), sym("cuDeviceGetDefaultMemPool"));
    OK(cuMemFree(m));
    OK(cuMemFreeAsync(a, NULL));
    OK(cuMemFree(d));
}

/* ---- contexts as numba drives them ---- */

/* numba's reset pops every context, then frees its pending deallocations:
 * cuMemFree needs no current context (the pointer names its owner, as on
 * NVIDIA's driver), also with another device's context current, and still
 * refuses what is not an allocation of this process. */
Test(simcuda, free_without_current_context)
{
    setenv(SIMCUDA_ENV_DEVICES, "2", 1);
    OK(cuInit(0));
    CUcontext p0, p1, cur;
    CUdeviceptr a, b, c;
    OK(cuDevicePrimaryCtxRetain(&p0, 0));
    OK(cuCtxPushCurrent(p0));
    CUdevice d = -1;
    OK(cuCtxGetDevice(&d));
    cr_assert_eq(d, 0);
    OK(cuMemAlloc(&a, 4096));
    OK(cuMemAlloc(&b, 4096));
    OK(cuCtxPopCurrent(&cur));
    cr_assert_eq(cur, p0);
    OK(cuCtxGetCurrent(&cur));
    cr_assert_null(cur);

    struct simcuda_stats st;
    OK(cuMemFree(a)); /* no context current */
    simcuda_stats(&st);
    cr_assert_eq(st.used[0], 4096);
    FAILS(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);

    OK(cuDevicePrimaryCtxRetain(&p1, 1));
    OK(cuCtxPushCurrent(p1));
    OK(cuMemAlloc(&c, 512));
    OK(cuMemFree(b)); /* device 1's context current, block on device 0 */
    simcuda_stats(&st);
    cr_assert_eq(st.used[0], 0);
    cr_assert_eq(st.used[1], 512);
    OK(cuCtxPopCurrent(NULL));
    OK(cuMemFree(c));

    /* numba's Device.reset: release, then reset, the primary context. */
    OK(cuDevicePrimaryCtxRelease(0));
    OK(cuDevicePrimaryCtxReset(0));
    int active = 1;
    unsigned flags;
    OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    cr_assert_eq(active, 0);
    OK(cuDevicePrimaryCtxRelease(1));
}

/* Page-locked registration of the program's own memory (numba-cuda's
 * pinned/mapped tests use it): copies accept the range as pinned host
 * memory, its device address is the host address (unified addressing), an
 * overlapping registration and a second unregister are refused as the
 * driver refuses them, and cuMemFreeHost never frees the program's memory. */
Test(simcuda, host_register_unregister_and_device_pointer)
{
    OK(cuInit(0));
    CUcontext ctx;
    OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    OK(cuCtxPushCurrent(ctx));
    static char buf[3 * 4096] __attribute__((aligned(4096)));
    memset(buf, 7, sizeof buf);
    OK(cuMemHostRegister(buf, 2 * 4096, CU_MEMHOSTREGISTER_DEVICEMAP));
    FAILS(cuMemHostRegister(buf + 4096, 4096, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    FAILS(cuMemHostRegister(buf, 4096, 0x100), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr dp = 0;
    OK(cuMemHostGetDevicePointer(&dp, buf + 100, 0));
    cr_assert_eq(dp, (CUdeviceptr)(uintptr_t)(buf + 100));
    FAILS(cuMemHostGetDevicePointer(&dp, buf + 2 * 4096, 0), CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute what = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    unsigned type = 0;
    void *into = &type;
    OK(cuPointerGetAttributes(1, &what, &into, (CUdeviceptr)(uintptr_t)buf));
    cr_assert_eq(type, CU_MEMORYTYPE_HOST, "registered memory is pinned host memory");
    CUdeviceptr d;
    OK(cuMemAlloc(&d, 4096));
    OK(cuMemcpyHtoD(d, buf, 4096));
    FAILS(cuMemFreeHost(buf), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemHostUnregister(buf));
    FAILS(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
    cr_assert_eq(buf[0], 7, "the program's memory is its own again, untouched");
    OK(cuProfilerStart());
    OK(cuProfilerStop());
    OK(cuMemFree(d));
    OK(cuCtxPopCurrent(NULL));
    OK(cuDevicePrimaryCtxRelease(0));
}
