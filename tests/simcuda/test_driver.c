/*
 * test_driver.c: Criterion tests of the simulated CUDA driver (libcuda.so.1
 * from tests/simcuda), linked directly against it.
 *
 * Every test runs in its own process and uses its own simulated machine,
 * named after the test and the pid (SIMCUDA_MACHINE, set in .init before any
 * cuInit); .fini unlinks the machine's shared-memory objects. Tests that need
 * a second process fork(): the child calls cuInit again (the driver supports
 * that: the child keeps the parent's mappings but becomes a holder of its
 * own), reports failures on stderr and through its exit status, and leaves
 * with _exit() so Criterion's own exit handlers do not run twice.
 */
#include <cuda.h>
#include <cudaProfiler.h>
#include <criterion/criterion.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim_state.h"
#include "simcuda.h"
#include "test_check.h"

static char g_machine[160];

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

/* Runs fn(arg) in a forked child; returns its exit status (or 128+signal). */
static int run_child(int (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(fn(arg));
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void write_all(int fd, const void *p, size_t n)
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

/* ---- IPC within one process ---- */

static int handles_equal(const CUipcMemHandle *x, const CUipcMemHandle *y)
{
    return memcmp(x, y, sizeof(*x)) == 0;
}

Test(simcuda, ipc_handles_of_one_allocation_are_equal)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "4K", 1); /* room for one: the offset must be reused */
    OK(init_on(0));
    CUdeviceptr p, q;
    CUipcMemHandle h1, h2, h3;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&h1, p));
    OK(cuIpcGetMemHandle(&h2, p + 1000)); /* interior pointer */
    cr_assert(handles_equal(&h1, &h2));
    OK(cuMemFree(p));
    FAILS(cuIpcGetMemHandle(&h3, p), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAlloc(&q, 4096));
    cr_assert_eq(q, p);
    OK(cuIpcGetMemHandle(&h3, q));
    cr_assert_not(handles_equal(&h1, &h3), "a reused offset must give a new handle");
    FAILS(cuIpcGetMemHandle(NULL, q), CUDA_ERROR_INVALID_VALUE);
    int x;
    FAILS(cuIpcGetMemHandle(&h3, (CUdeviceptr)(uintptr_t)&x), CUDA_ERROR_INVALID_VALUE);
}

Test(simcuda, ipc_open_in_exporter_and_garbage_handles_fail)
{
    OK(init_on(0));
    CUdeviceptr p, o;
    CUipcMemHandle h, bad;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&h, p));
    FAILS(cuIpcOpenMemHandle(&o, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
          CUDA_ERROR_INVALID_CONTEXT);
    memset(&bad, 0, sizeof(bad));
    FAILS(cuIpcOpenMemHandle(&o, bad, 0), CUDA_ERROR_INVALID_VALUE);
    srand(7);
    for (int i = 0; i < 1000; i++) {
        for (size_t k = 0; k < sizeof(bad); k++)
            bad.reserved[k] = (char)rand();
        FAILS(cuIpcOpenMemHandle(&o, bad, 0), CUDA_ERROR_INVALID_VALUE);
    }
    bad = h;
    bad.reserved[20] ^= 1; /* one flipped bit */
    FAILS(cuIpcOpenMemHandle(&o, bad, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcOpenMemHandle(NULL, h, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcOpenMemHandle(&o, h, 0x100), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE); /* never opened */
}

/* ---- IPC across processes ---- */

struct ipc_args {
    CUipcMemHandle h;
    int to_parent[2];
    int to_child[2];
};

static int child_open_twice(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p1, p2;
    CHILD_OK(cuIpcOpenMemHandle(&p1, a->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHILD_OK(cuIpcOpenMemHandle(&p2, a->h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHILD_EXPECT(p1 == p2);
    unsigned v[4];
    CHILD_OK(cuMemcpyDtoH(v, p1 + 16, sizeof(v)));
    CHILD_EXPECT(v[0] == 0x11111111u && v[3] == 0x11111111u);
    CUdeviceptr base;
    size_t size;
    CHILD_OK(cuMemGetAddressRange(&base, &size, p1 + 100));
    CHILD_EXPECT(base == p1 && size == 4096);
    unsigned type;
    CHILD_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p1 + 1));
    CHILD_EXPECT(type == CU_MEMORYTYPE_DEVICE);
    CHILD_EXPECT(cuMemFree(p1) == CUDA_ERROR_INVALID_VALUE); /* not ours to free */
    CHILD_OK(cuMemsetD32(p1, 0x22222222u, 1024));
    CHILD_OK(cuIpcCloseMemHandle(p1));
    CHILD_OK(cuMemcpyDtoH(v, p1, 4)); /* still open once */
    CHILD_OK(cuIpcCloseMemHandle(p1));
    CHILD_EXPECT(cuIpcCloseMemHandle(p1) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(cuMemcpyDtoH(v, p1, 4) == CUDA_ERROR_INVALID_VALUE); /* closed */
    CHILD_OK(cuIpcOpenMemHandle(&p2, a->h, 0));                       /* reopen after full close */
    struct simcuda_stats st;
    simcuda_stats(&st);
    CHILD_EXPECT(st.proc_ipc_opens == 3 && st.proc_ipc_closes == 2);
    return 0;
}

Test(simcuda, ipc_open_in_another_process)
{
    OK(init_on(0));
    struct ipc_args a;
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemsetD32(p, 0x11111111u, 1024));
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_open_twice, &a), 0);
    unsigned v;
    OK(cuMemcpyDtoH(&v, p + 4092, 4)); /* the child's write; exporter unaffected */
    cr_assert_eq(v, 0x22222222u);
    OK(cuMemFree(p));
}

/* ---- the allocation table's capacity (SIMCUDA_MAX_ALLOCS) ---- */

Test(simcuda, allocation_table_capacity_is_the_limit)
{
    setenv(SIMCUDA_ENV_MAX_ALLOCS, "64", 1);
    OK(init_on(0));
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.max_allocs, 64);
    CUdeviceptr p[64], q, r;
    for (int i = 0; i < 64; i++)
        OK(cuMemAlloc(&p[i], 512));
    cr_assert_eq(free_bytes(), (64u << 20) - 64 * 512, "the device has room left");
    FAILS(cuMemAlloc(&q, 512), CUDA_ERROR_OUT_OF_MEMORY); /* the table is full */
    FAILS(cuMemAllocManaged(&q, 512, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 64);
    OK(cuMemFree(p[10]));
    OK(cuMemAlloc(&q, 512)); /* a freed entry is reused */
    FAILS(cuMemAlloc(&r, 512), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemFree(q));
    OK(cuMemAllocManaged(&q, 512, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemFree(q));
    for (int i = 0; i < 64; i++)
        if (i != 10) OK(cuMemFree(p[i]));
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 0);
}

struct table_case {
    const char *value; /* SIMCUDA_MAX_ALLOCS, or NULL for unset */
    const char *suffix;
    uint64_t want;
};

/* In a fresh child: cuInit on machine <test machine>-<suffix> with
 * SIMCUDA_MAX_ALLOCS = c->value, and check the table's capacity. */
static int child_table_capacity(void *arg)
{
    const struct table_case *c = arg;
    char name[200];
    snprintf(name, sizeof(name), "%s-%s", g_machine, c->suffix);
    setenv(SIMCUDA_ENV_MACHINE, name, 1);
    if (c->value)
        setenv(SIMCUDA_ENV_MAX_ALLOCS, c->value, 1);
    else
        unsetenv(SIMCUDA_ENV_MAX_ALLOCS);
    CHILD_OK(cuInit(0));
    struct simcuda_stats s;
    simcuda_stats(&s);
    if (s.max_allocs != c->want) {
        fprintf(stderr, "SIMCUDA_MAX_ALLOCS=%s: capacity %llu, want %llu\n",
                c->value ? c->value : "(unset)", (unsigned long long)s.max_allocs,
                (unsigned long long)c->want);
        return 1;
    }
    return 0;
}

Test(simcuda, allocation_table_capacity_from_the_creator)
{
    const struct table_case cases[] = {
        {NULL, "unset", SIM_DEFAULT_ALLOCS},
        {"1", "one", 1},
        {"4K", "k", 4096},
        {"16M", "max", SIM_MAX_ALLOCS},
        {"0", "zero", SIM_DEFAULT_ALLOCS}, /* out of range: ignored with a warning */
        {"16777217", "over", SIM_DEFAULT_ALLOCS},
        {"lots", "junk", SIM_DEFAULT_ALLOCS},
        {"100", "join", 100},
        {"1M", "join", 100}, /* a machine that exists keeps the creator's capacity */
    };
    cr_assert_geq(SIM_DEFAULT_ALLOCS, 2u << 20, "1 M live blocks fit by default, with room");
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        cr_assert_eq(run_child(child_table_capacity, (void *)&cases[i]), 0, "case %zu", i);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[200];
        snprintf(name, sizeof(name), "%s-%s", g_machine, cases[i].suffix);
        simcuda_unlink_machine(name);
    }
}

static int child_open_read(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    unsigned v = 0;
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    CHILD_OK(cuMemcpyDtoH(&v, p, sizeof(v)));
    CHILD_EXPECT(v == 0x33333333u);
    CHILD_OK(cuIpcCloseMemHandle(p));
    return 0;
}

Test(simcuda, allocation_table_holds_more_than_the_old_fixed_size, .timeout = 60)
{
    enum { N = 262145 }; /* one past the table of earlier builds (262,144 entries) */
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "256M", 1);
    OK(init_on(0));
    CUdeviceptr p = 0;
    for (int i = 0; i < N; i++)
        OK(cuMemAlloc(&p, 512));
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, N);
    /* The last one is table entry 262,144: its handle opens in another process. */
    OK(cuMemsetD32(p, 0x33333333u, 128));
    struct ipc_args a;
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_open_read, &a), 0);
}

static int child_open_fails(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CUresult r = cuIpcOpenMemHandle(&p, a->h, 0);
    if (r != CUDA_ERROR_INVALID_VALUE) {
        fprintf(stderr, "open of a dead handle returned %d\n", (int)r);
        return 1;
    }
    return 0;
}

Test(simcuda, ipc_open_after_free_fails)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "4K", 1); /* room for one: the offset must be reused */
    OK(init_on(0));
    struct ipc_args a;
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&a.h, p));
    OK(cuMemFree(p));
    cr_assert_eq(run_child(child_open_fails, &a), 0);
    OK(cuMemAlloc(&q, 4096)); /* same offset, new serial: the old handle stays dead */
    cr_assert_eq(q, p);
    OK(cuIpcGetMemHandle(&a.h, q)); /* (exported again, under a new handle) */
    CUipcMemHandle fresh = a.h;
    OK(cuMemFree(q));
    a.h = fresh;
    cr_assert_eq(run_child(child_open_fails, &a), 0);
}

Test(simcuda, fork_child_must_reinit)
{
    OK(init_on(0));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int n;
        CUdeviceptr p;
        int bad = cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED ||
                  cuMemAlloc(&p, 1) != CUDA_ERROR_NOT_INITIALIZED;
        bad |= cuInit(0) != CUDA_SUCCESS;
        bad |= cuMemAlloc(&p, 1) != CUDA_ERROR_INVALID_CONTEXT; /* parent's context is gone */
        _exit(bad);
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static int child_poison_reader(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    unsigned v[1024];
    CHILD_OK(cuMemcpyDtoH(v, p, sizeof(v)));
    CHILD_EXPECT(v[0] == 0x5a5a5a5au);
    char c = 'o';
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1); /* parent has freed */
    CHILD_OK(cuMemcpyDtoH(v, p, sizeof(v)));        /* still mapped here */
    for (int i = 0; i < 1024; i++)
        CHILD_EXPECT(v[i] == SIMCUDA_POISON_WORD);
    CHILD_EXPECT(((volatile unsigned *)(uintptr_t)p)[17] == SIMCUDA_POISON_WORD);
    CHILD_OK(cuIpcCloseMemHandle(p));
    return 0;
}

Test(simcuda, poison_on_free_is_visible_to_importer)
{
    OK(init_on(0));
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    cr_assert_eq(pipe(a.to_child), 0);
    CUdeviceptr p, q;
    OK(cuMemAlloc(&p, 4096));
    OK(cuMemAlloc(&q, 4096));
    OK(cuMemsetD32(p, 0x5a5a5a5au, 1024));
    OK(cuIpcGetMemHandle(&a.h, p));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_poison_reader(&a));
    char c;
    cr_assert_eq(read(a.to_parent[0], &c, 1), 1);
    OK(cuMemFree(p));
    OK(cuMemFree(q)); /* never exported: not poisoned */
    write_all(a.to_child[1], "f", 1);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.proc_frees, 2);
    cr_assert_eq(s.proc_poisoned_frees, 1);
}

static int child_alloc_and_hang(void *arg)
{
    struct ipc_args *a = arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p[10];
    for (int i = 0; i < 10; i++)
        CHILD_OK(cuMemAlloc(&p[i], 1 << 20));
    CHILD_OK(cuMemsetD32(p[3], 0x77777777u, 1024));
    CUipcMemHandle h;
    CHILD_OK(cuIpcGetMemHandle(&h, p[3]));
    CHILD_EXPECT(write(a->to_parent[1], &h, sizeof(h)) == sizeof(h));
    for (;;)
        pause();
}

Test(simcuda, allocations_of_a_killed_process_are_released)
{
    OK(init_on(0));
    size_t baseline = free_bytes();
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_alloc_and_hang(&a));
    CUipcMemHandle h;
    cr_assert_eq(read(a.to_parent[0], &h, sizeof(h)), (ssize_t)sizeof(h));
    cr_assert_eq(free_bytes(), baseline - (10u << 20));
    CUdeviceptr imp;
    OK(cuIpcOpenMemHandle(&imp, h, 0));
    unsigned v;
    OK(cuMemcpyDtoH(&v, imp, 4));
    cr_assert_eq(v, 0x77777777u);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert_eq(free_bytes(), baseline);
    OK(cuMemcpyDtoH(&v, imp, 4)); /* our mapping survives, over poisoned memory */
    cr_assert_eq(v, SIMCUDA_POISON_WORD);
    /* Open here already: it opens again, the same pointer, as NVIDIA's driver
     * did after the exporter was SIGKILLed (docs/gpu-validation.md). */
    CUdeviceptr again;
    OK(cuIpcOpenMemHandle(&again, h, 0));
    cr_assert_eq(again, imp);
    OK(cuIpcCloseMemHandle(imp));
    OK(cuIpcCloseMemHandle(imp));
    FAILS(cuIpcOpenMemHandle(&again, h, 0), CUDA_ERROR_INVALID_VALUE); /* closed: owner dead */
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.proc_swept, 10);
    cr_assert_eq(s.live_allocs, 0);
}

/* Forks child_alloc_and_hang; returns its pid and sets *h to its handle. */
static pid_t start_hanging_owner(CUipcMemHandle *h)
{
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(child_alloc_and_hang(&a));
    cr_assert_eq(read(a.to_parent[0], h, sizeof(*h)), (ssize_t)sizeof(*h));
    close(a.to_parent[0]);
    close(a.to_parent[1]);
    return pid;
}

Test(simcuda, ipc_open_checks_only_the_owner_it_opens)
{
    OK(init_on(0));
    CUipcMemHandle ha, hb;
    pid_t a = start_hanging_owner(&ha), b = start_hanging_owner(&hb);
    struct simcuda_stats s;
    simcuda_stats(&s); /* reads, never sweeps */
    cr_assert_eq(s.live_allocs, 20);
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
    CUdeviceptr imp;
    OK(cuIpcOpenMemHandle(&imp, ha, 0)); /* A lives: B is not looked at */
    OK(cuIpcCloseMemHandle(imp));
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 20, "an open of a live owner's block sweeps nobody");
    FAILS(cuIpcOpenMemHandle(&imp, hb, 0), CUDA_ERROR_INVALID_VALUE); /* B's owner is dead */
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 10, "opening a dead owner's block sweeps the dead");
    cr_assert_eq(s.proc_swept, 10);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    FAILS(cuIpcOpenMemHandle(&imp, ha, 0), CUDA_ERROR_INVALID_VALUE);
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 0);
    cr_assert_eq(s.proc_swept, 20);
}

Test(simcuda, zombie_owner_counts_as_dead)
{
    OK(init_on(0));
    size_t baseline = free_bytes();
    struct ipc_args a;
    cr_assert_eq(pipe(a.to_parent), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_alloc_and_hang(&a));
    CUipcMemHandle h;
    cr_assert_eq(read(a.to_parent[0], &h, sizeof(h)), (ssize_t)sizeof(h));
    kill(pid, SIGKILL);
    siginfo_t si;
    waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT); /* dead but not reaped */
    cr_assert_eq(free_bytes(), baseline);
    waitpid(pid, NULL, 0);
}

static int child_exit_normally(void *arg)
{
    (void)arg;
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    CHILD_OK(cuMemAlloc(&p, 4 << 20));
    exit(0); /* runs the library destructor */
}

Test(simcuda, normal_exit_releases_allocations)
{
    OK(init_on(0));
    size_t baseline = free_bytes();
    cr_assert_eq(run_child(child_exit_normally, NULL), 0);
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.live_allocs, 0); /* released by the child itself, not by a sweep */
    cr_assert_eq(free_bytes(), baseline);
}

/* ---- the last process out removes the machine ---- */

/* How many of this test's machine files (segment, device 0, managed pool)
 * exist. */
static int machine_files(void)
{
    static const char *const suffix[] = {"", "-dev0", "-managed"};
    int n = 0;
    for (size_t i = 0; i < sizeof(suffix) / sizeof(suffix[0]); i++) {
        char path[256];
        struct stat st;
        snprintf(path, sizeof(path), "/dev/shm/simcuda-%u-%s%s", (unsigned)geteuid(), g_machine,
                 suffix[i]);
        n += stat(path, &st) == 0;
    }
    return n;
}

/* Allocates, writes and reads back a block on device 0 (cuInit first). */
static int use_machine(void)
{
    CHILD_OK(init_on(0));
    CUdeviceptr p;
    unsigned v = 0;
    CHILD_OK(cuMemAlloc(&p, 1 << 20));
    CHILD_OK(cuMemsetD32(p, 0x5a5a5a5au, 1 << 18));
    CHILD_OK(cuMemcpyDtoH(&v, p + 4096, sizeof(v)));
    CHILD_EXPECT(v == 0x5a5a5a5au);
    return 0;
}

static int child_use_and_exit(void *arg)
{
    (void)arg;
    if (use_machine()) return 1;
    exit(0); /* runs the library destructor */
}

/* Attaches, says so on fds[1], waits for a byte (or EOF) on fds[2], leaves. */
static int child_hold(void *arg)
{
    const int *fds = arg;
    if (use_machine()) return 1;
    write_all(fds[1], "a", 1);
    char c;
    (void)!read(fds[2], &c, 1);
    exit(0);
}

Test(simcuda, last_process_out_removes_the_machine)
{
    /* This process never attaches: its children are the machine's only
     * processes. */
    cr_assert_eq(run_child(child_use_and_exit, NULL), 0);
    cr_assert_eq(machine_files(), 0, "the last process out removed the machine");

    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    int fds[3] = {-1, up[1], down[0]};
    fflush(NULL);
    pid_t holder = fork();
    cr_assert_neq(holder, -1);
    if (holder == 0) _exit(child_hold(fds));
    close(up[1]);
    close(down[0]);
    char c;
    cr_assert_eq(read(up[0], &c, 1), 1, "the holder attached");
    cr_assert_eq(machine_files(), 3);
    cr_assert_eq(run_child(child_use_and_exit, NULL), 0);
    cr_assert_eq(machine_files(), 3, "kept while another process is attached");
    write_all(down[1], "x", 1);
    int st;
    cr_assert_eq(waitpid(holder, &st, 0), holder);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert_eq(machine_files(), 0, "removed by the holder, the last one out");
    close(up[0]);
    close(down[1]);
}

/* The grandchild of child_map_then_orphan: it inherited its parent's mapping
 * of the machine without registering, and its parent (the machine's only
 * holder) has left and removed the machine. */
static int orphan_attach(int go)
{
    char c;
    CHILD_EXPECT(read(go, &c, 1) == 0); /* EOF: the parent is gone */
    CHILD_EXPECT(machine_files() == 0);
    if (use_machine()) return 1; /* drops the removed machine, makes a new one */
    CHILD_EXPECT(machine_files() == 3);
    struct simcuda_stats s;
    simcuda_stats(&s);
    CHILD_EXPECT(s.live_allocs == 1); /* the new machine holds only its own block */
    return 0;
}

static int child_map_then_orphan(void *arg)
{
    const int *result = arg;
    if (use_machine()) return 1;
    int go[2];
    CHILD_EXPECT(pipe(go) == 0);
    fflush(NULL);
    pid_t q = fork();
    CHILD_EXPECT(q != -1);
    if (q == 0) {
        close(go[1]);
        char rc = (char)orphan_attach(go[0]);
        write_all(result[1], &rc, 1);
        exit(0);
    }
    close(go[0]);
    exit(0); /* the last holder out: removes the machine the grandchild maps */
}

Test(simcuda, attach_to_a_removed_machine_opens_the_name_again)
{
    int result[2];
    cr_assert_eq(pipe(result), 0);
    cr_assert_eq(run_child(child_map_then_orphan, result), 0);
    close(result[1]);
    char rc = 1, c;
    cr_assert_eq(read(result[0], &rc, 1), 1, "the grandchild reported");
    cr_assert_eq(rc, 0, "the grandchild attached to a new machine");
    cr_assert_eq(read(result[0], &c, 1), 0); /* EOF: the grandchild is gone */
    close(result[0]);
    cr_assert_eq(machine_files(), 0, "and removed it on its way out");
}

static int child_churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < 25; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) _exit(child_use_and_exit(NULL));
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "churn: round %d failed\n", i);
            return 1;
        }
    }
    return 0;
}

Test(simcuda, processes_coming_and_going_race_the_removal, .timeout = 60)
{
    /* Four lines of short-lived processes: attaches race the last one out's
     * removal; every attach must find a usable machine. */
    enum { N = 4 };
    pid_t pids[N];
    fflush(NULL);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1);
        if (pids[i] == 0) _exit(child_churn(NULL));
    }
    for (int i = 0; i < N; i++) {
        int st;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "line %d", i);
    }
    cr_assert_eq(machine_files(), 0, "the last one out removed the machine");
}

static int child_init(void *arg)
{
    (void)arg;
    setenv(SIMCUDA_ENV_DEVICES, "3", 1);
    CHILD_OK(cuInit(0));
    int n;
    CHILD_OK(cuDeviceGetCount(&n));
    CUuuid u;
    CHILD_OK(cuDeviceGetUuid(&u, 0));
    return n == 3 ? 0 : 1;
}

Test(simcuda, concurrent_first_init_creates_one_machine, .timeout = 60)
{
    /* Eight processes race to create the machine; all must attach to one. */
    enum { N = 8 };
    pid_t pids[N];
    fflush(NULL);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0) _exit(child_init(NULL));
    }
    for (int i = 0; i < N; i++) {
        int st;
        waitpid(pids[i], &st, 0);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    setenv(SIMCUDA_ENV_DEVICES, "1", 1); /* the existing machine's geometry wins */
    OK(cuInit(0));
    int n;
    OK(cuDeviceGetCount(&n));
    cr_assert_eq(n, 3);
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

/* ---- resolver ---- */

static void *sym(const char *name)
{
    void *p = dlsym(RTLD_DEFAULT, name);
    cr_assert_not_null(p, "%s is not exported", name);
    return p;
}

static void *resolve(const char *name, int version, cuuint64_t flags)
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
    cr_assert_eq(SIM_ABI, 4);
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
    cr_assert_eq(sizeof(struct sim_machine), 184 + 64 * SIM_POOLS + 40);
    cr_assert_eq(sizeof(CUipcMemHandle), 64);
}

/* ---- SIMCUDA_FREE_WHILE_MAPPED=keep ---- */

/* Opens the handle, checks the data, reports 'o'; after the parent's free
 * ('f') checks the data again and that the freed block cannot be opened a
 * second time, then closes unless a->hold (then waits to be killed). */
struct keep_args {
    struct ipc_args ipc;
    int hold;
};

static int child_keep_reader(void *arg)
{
    struct keep_args *k = arg;
    struct ipc_args *a = &k->ipc;
    CHILD_OK(init_on(0));
    CUdeviceptr p, again;
    CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    unsigned v[1024];
    char c = 'o';
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1); /* parent has freed */
    CHILD_OK(cuMemcpyDtoH(v, p, sizeof(v)));
    for (int i = 0; i < 1024; i++)
        CHILD_EXPECT(v[i] == 0x5a5a5a5au);
    CHILD_EXPECT(cuIpcOpenMemHandle(&again, a->h, 0) == CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    if (k->hold)
        for (;;)
            pause();
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1);
    CHILD_OK(cuIpcCloseMemHandle(p));
    CHILD_EXPECT(write(a->to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a->to_child[0], &c, 1) == 1); /* stay alive until the parent looked */
    return 0;
}

static pid_t start_keep_reader(struct keep_args *k, CUdeviceptr *p)
{
    cr_assert_eq(pipe(k->ipc.to_parent), 0);
    cr_assert_eq(pipe(k->ipc.to_child), 0);
    OK(cuMemAlloc(p, 4096));
    OK(cuMemsetD32(*p, 0x5a5a5a5au, 1024));
    OK(cuIpcGetMemHandle(&k->ipc.h, *p));
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(child_keep_reader(k));
    char c;
    cr_assert_eq(read(k->ipc.to_parent[0], &c, 1), 1);
    return pid;
}

Test(simcuda, keep_mode_free_while_mapped_keeps_the_pages_until_the_last_close)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "8K", 1); /* room for two 4 KiB blocks */
    OK(init_on(0));
    struct keep_args k = {.hold = 0};
    CUdeviceptr p, q, r;
    pid_t pid = start_keep_reader(&k, &p);
    size_t before = free_bytes();
    OK(cuMemFree(p));
    FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* freed for its owner */
    cr_assert_eq(free_bytes(), before, "a kept block stays charged");
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 1);
    cr_assert_eq(s.machine_kept_frees, 1);
    cr_assert_eq(s.proc_poisoned_frees, 0);
    OK(cuMemAlloc(&q, 4096));
    cr_assert_neq(q, p, "the kept range must not be reused");
    FAILS(cuMemAlloc(&r, 4096), CUDA_ERROR_OUT_OF_MEMORY);
    char c = 'f';
    write_all(k.ipc.to_child[1], &c, 1); /* the child reads intact data */
    cr_assert_eq(read(k.ipc.to_parent[0], &c, 1), 1);
    write_all(k.ipc.to_child[1], &c, 1); /* now close */
    cr_assert_eq(read(k.ipc.to_parent[0], &c, 1), 1);
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0, "the last close releases the kept block");
    OK(cuMemAlloc(&r, 4096));
    cr_assert_eq(r, p, "the range is free again");
    write_all(k.ipc.to_child[1], &c, 1);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

Test(simcuda, keep_mode_importer_death_releases_the_kept_block)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init_on(0));
    struct keep_args k = {.hold = 1};
    CUdeviceptr p;
    size_t start = free_bytes();
    pid_t pid = start_keep_reader(&k, &p);
    OK(cuMemFree(p));
    char c = 'f';
    write_all(k.ipc.to_child[1], &c, 1);
    cr_assert_eq(read(k.ipc.to_parent[0], &c, 1), 1);
    cr_assert_lt(free_bytes(), start);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert_eq(free_bytes(), start, "the sweep of the dead importer releases the block");
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.machine_poisoned_frees, 1, "really released at last, poisoned as exported");
}

Test(simcuda, poison_mode_is_the_default_and_releases_at_once)
{
    OK(init_on(0));
    struct keep_args k = {.hold = 1};
    CUdeviceptr p;
    size_t start = free_bytes();
    pid_t pid = start_keep_reader(&k, &p);
    OK(cuMemFree(p));
    cr_assert_eq(free_bytes(), start, "released at once although mapped");
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.proc_poisoned_frees, 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- IPC open and close without the machine lock ---- */

/* This test's machine segment, mapped a second time (coherent with the
 * library's own mapping), to look at the table of opens or to play a
 * process that dies in the middle of an open or a close. */
static struct sim_machine *map_segment(void)
{
    char path[200];
    snprintf(path, sizeof(path), "/simcuda-%u-%s", (unsigned)geteuid(), g_machine);
    int fd = shm_open(path, O_RDWR, 0);
    if (fd < 0) return NULL;
    struct stat st;
    void *p = fstat(fd, &st) == 0
                  ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static struct sim_map *segment_rows(struct sim_machine *m)
{
    return (struct sim_map *)((uint8_t *)m + m->off_maps);
}

/* Rows of the table of opens that are claimed (holder != 0). */
static unsigned claimed_rows(struct sim_machine *m)
{
    unsigned n = 0;
    for (uint32_t r = 0; r < m->maps_hw; r++)
        n += __atomic_load_n(&segment_rows(m)[r].holder, __ATOMIC_SEQ_CST) != 0;
    return n;
}

enum { RACE_BLOCKS = 64, RACE_RACERS = 6 };
#define RACE_WORD 0x5a5a5a5au

/* Shared between the parent and the children of the races below. */
struct race {
    CUipcMemHandle h[RACE_BLOCKS];
    int ready;     /* children that opened at least once */
    int freed;     /* the parent freed every block */
    int verified;  /* the holder child checked its opens after the frees */
    long opens_ok; /* opens that succeeded in the racers */
    long opens_refused;
};

/* Whether the 4 KiB at p still hold the pattern (not poisoned, not
 * reused): its first and last words (a release poisons every word). */
static int block_intact(CUdeviceptr p)
{
    unsigned first = 0, last = 0;
    return cuMemcpyDtoH(&first, p, 4) == CUDA_SUCCESS &&
           cuMemcpyDtoH(&last, p + 4092, 4) == CUDA_SUCCESS && first == RACE_WORD &&
           last == RACE_WORD;
}

/* Opens and closes the first block whose open was not refused yet, over
 * and over, until every block's open is refused (the parent frees them in
 * order, so all racers hammer the block being freed); an open that
 * succeeds must see the bytes until its close. */
static int child_racer(void *arg)
{
    struct race *r = arg;
    alarm(20); /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    long ok = 0, refused = 0;
    for (int j = 0, first = 1; j < RACE_BLOCKS;) {
        CUdeviceptr p;
        CUresult rc = cuIpcOpenMemHandle(&p, r->h[j], 0);
        if (rc == CUDA_ERROR_INVALID_VALUE) {
            j++;
            refused++;
            continue;
        }
        CHILD_OK(rc);
        ok++;
        CHILD_EXPECT(block_intact(p));
        if (ok % 7 == 0) sched_yield(); /* hold it across a reschedule now and then */
        CHILD_EXPECT(block_intact(p));
        CHILD_OK(cuIpcCloseMemHandle(p));
        if (first) {
            first = 0;
            __atomic_fetch_add(&r->ready, 1, __ATOMIC_SEQ_CST);
        }
    }
    __atomic_fetch_add(&r->opens_ok, ok, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&r->opens_refused, refused, __ATOMIC_SEQ_CST);
    return 0;
}

/* Opens every block, waits for the parent's frees, checks the bytes are
 * still there, then closes: the last close of each block is one of these
 * or a racer's. */
static int child_holder(void *arg)
{
    struct race *r = arg;
    alarm(20); /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    CUdeviceptr p[RACE_BLOCKS];
    for (int j = 0; j < RACE_BLOCKS; j++)
        CHILD_OK(cuIpcOpenMemHandle(&p[j], r->h[j], 0));
    __atomic_fetch_add(&r->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&r->freed, __ATOMIC_SEQ_CST))
        usleep(1000);
    for (int j = 0; j < RACE_BLOCKS; j++)
        CHILD_EXPECT(block_intact(p[j]));
    __atomic_store_n(&r->verified, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&r->verified, __ATOMIC_SEQ_CST) != 2) /* the parent looked */
        usleep(1000);
    for (int j = 0; j < RACE_BLOCKS; j++)
        CHILD_OK(cuIpcCloseMemHandle(p[j]));
    return 0;
}

/* In keep mode, frees RACE_BLOCKS exported blocks one by one while
 * RACE_RACERS children open and close the block being freed (opens in
 * flight: publishing, re-reading, backing out; closes racing the free's
 * scan), with (hold) or without a child that keeps every block open
 * across the frees. Every block must be released exactly once, never
 * while an open that succeeded still maps it, and every row given back. */
static void race_frees(int hold, int racers)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init_on(0));
    size_t start = free_bytes();
    struct race *r =
        mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(r, MAP_FAILED);
    CUdeviceptr p[RACE_BLOCKS];
    for (int j = 0; j < RACE_BLOCKS; j++) {
        OK(cuMemAlloc(&p[j], 4096));
        OK(cuMemsetD32(p[j], RACE_WORD, 1024));
        OK(cuIpcGetMemHandle(&r->h[j], p[j]));
    }
    pid_t pids[RACE_RACERS + 1];
    int n = racers + (hold != 0);
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        cr_assert_neq(pids[i], -1);
        if (pids[i] == 0) _exit(i == racers ? child_holder(r) : child_racer(r));
    }
    while (__atomic_load_n(&r->ready, __ATOMIC_SEQ_CST) < n)
        usleep(1000);
    for (int j = 0; j < RACE_BLOCKS; j++) {
        usleep(1000);
        OK(cuMemFree(p[j]));
    }
    struct simcuda_stats s;
    if (hold) {
        simcuda_stats(&s);
        cr_assert_eq(s.machine_kept, RACE_BLOCKS, "the holder child still maps every block");
        cr_assert_eq(s.machine_kept_frees, RACE_BLOCKS);
        cr_assert_eq(s.machine_poisoned_frees, 0, "nothing released while mapped");
        cr_assert_eq(start - free_bytes(), (size_t)RACE_BLOCKS * 4096, "kept blocks stay charged");
        __atomic_store_n(&r->freed, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&r->verified, __ATOMIC_SEQ_CST) != 1)
            usleep(1000);
        __atomic_store_n(&r->verified, 2, __ATOMIC_SEQ_CST);
    }
    for (int i = 0; i < n; i++) {
        int st;
        cr_assert_eq(waitpid(pids[i], &st, 0), pids[i]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d failed", i);
    }
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0, "the last closes released every kept block");
    cr_assert_eq(s.machine_poisoned_frees, RACE_BLOCKS, "each block released exactly once");
    cr_assert_eq(s.live_allocs, 0);
    cr_assert_eq(free_bytes(), start);
    cr_assert_eq(r->opens_refused, racers * RACE_BLOCKS);
    struct sim_machine *m = map_segment();
    cr_assert_not_null(m);
    cr_assert_eq(claimed_rows(m), 0, "every row was given back");
    cr_log_info("racers: %ld opens, %ld refused; frees kept: %lu", r->opens_ok, r->opens_refused,
                (unsigned long)s.machine_kept_frees);
}

Test(simcuda, keep_mode_lock_free_opens_and_closes_race_the_owners_free)
{
    race_frees(0, 2);
}

Test(simcuda, keep_mode_lock_free_race_with_a_holder_keeps_until_the_last_close)
{
    race_frees(1, RACE_RACERS);
}

/* Plays an importer killed at every point of the lock-free protocol: it
 * holds block 0 open (an open in force), leaves a row claimed but never
 * published (killed inside an open), and "closes" block 1 only half: the
 * row's serial cleared, the row not given back and the kept block not
 * released (killed inside a close). Then it dies without its destructor. */
static int child_dies_mid_protocol(void *arg)
{
    struct ipc_args *a = arg; /* a[0], a[1]: the two blocks */
    alarm(20);                /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    CUdeviceptr p0, p1;
    CHILD_OK(cuIpcOpenMemHandle(&p0, a[0].h, 0));
    CHILD_OK(cuIpcOpenMemHandle(&p1, a[1].h, 0));
    char c = 'o';
    CHILD_EXPECT(write(a[0].to_parent[1], &c, 1) == 1);
    CHILD_EXPECT(read(a[0].to_child[0], &c, 1) == 1); /* both freed (kept) */
    struct sim_machine *m = map_segment();
    CHILD_EXPECT(m != NULL);
    struct sim_holder *h = (struct sim_holder *)((uint8_t *)m + m->off_holders);
    uint32_t k = 0;
    while (k < m->holder_hw && h[k].pid != getpid())
        k++;
    CHILD_EXPECT(k < m->holder_hw);
    struct sim_map *rows = segment_rows(m);
    struct { /* the handle's first fields (README, "IPC") */
        uint32_t magic;
        uint16_t abi, device;
        uint32_t index;
    } h1;
    memcpy(&h1, &a[1].h, sizeof(h1));
    uint32_t half = UINT32_MAX, spare = UINT32_MAX;
    for (uint32_t r = 0; r < m->max_maps && spare == UINT32_MAX; r++) {
        if (half == UINT32_MAX && rows[r].holder == k + 1 && rows[r].index == h1.index &&
            rows[r].serial != 0) {
            __atomic_store_n(&rows[r].serial, 0, __ATOMIC_SEQ_CST); /* the close's CAS */
            half = r;
        } else if (half != UINT32_MAX && rows[r].holder == 0 && r >= m->maps_hw) {
            m->maps_hw = r + 1; /* a claim: raise maps_hw, then the holder word */
            __atomic_store_n(&rows[r].holder, k + 1, __ATOMIC_SEQ_CST);
            spare = r;
        }
    }
    CHILD_EXPECT(half != UINT32_MAX && spare != UINT32_MAX);
    CHILD_EXPECT(write(a[0].to_parent[1], &c, 1) == 1);
    for (;;)
        pause(); /* killed */
}

Test(simcuda, keep_mode_sweep_of_an_importer_killed_mid_open_or_mid_close)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init_on(0));
    size_t start = free_bytes();
    struct ipc_args a[2];
    CUdeviceptr p[2];
    cr_assert_eq(pipe(a[0].to_parent), 0);
    cr_assert_eq(pipe(a[0].to_child), 0);
    for (int j = 0; j < 2; j++) {
        OK(cuMemAlloc(&p[j], 4096));
        OK(cuIpcGetMemHandle(&a[j].h, p[j]));
    }
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) _exit(child_dies_mid_protocol(a));
    char c;
    cr_assert_eq(read(a[0].to_parent[0], &c, 1), 1);
    OK(cuMemFree(p[0]));
    OK(cuMemFree(p[1]));
    struct simcuda_stats s;
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 2);
    write_all(a[0].to_child[1], &c, 1);
    cr_assert_eq(read(a[0].to_parent[0], &c, 1), 1, "the child left its rows half done");
    struct sim_machine *m = map_segment();
    cr_assert_not_null(m);
    cr_assert_eq(claimed_rows(m), 3, "an open in force, a half close, a claim never published");
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 2, "a half-done close released nothing");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert_eq(free_bytes(), start, "the sweep of the dead importer released both blocks");
    simcuda_stats(&s);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.machine_poisoned_frees, 2, "each released once");
    cr_assert_eq(claimed_rows(m), 0, "the sweep gave every row of the dead importer back");
}

/* Opens one handle until the machine-wide table of opens is full. */
static int child_fill_table(void *arg)
{
    struct ipc_args *a = arg;
    alarm(20); /* never outlive a parent that failed */
    CHILD_OK(init_on(0));
    CUdeviceptr p = 0, q;
    for (unsigned i = 0; i < SIM_MAX_MAPS; i++)
        CHILD_OK(cuIpcOpenMemHandle(&p, a->h, 0));
    CHILD_EXPECT(cuIpcOpenMemHandle(&q, a->h, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    CHILD_OK(cuIpcCloseMemHandle(p));
    CHILD_OK(cuIpcOpenMemHandle(&q, a->h, 0)); /* one row free again */
    CHILD_EXPECT(q == p);
    CHILD_EXPECT(cuIpcOpenMemHandle(&q, a->h, 0) == CUDA_ERROR_OUT_OF_MEMORY);
    for (unsigned i = 0; i < SIM_MAX_MAPS; i++)
        CHILD_OK(cuIpcCloseMemHandle(p));
    CHILD_EXPECT(cuIpcCloseMemHandle(p) == CUDA_ERROR_INVALID_VALUE);
    return 0;
}

Test(simcuda, full_table_of_opens_gives_out_of_memory)
{
    OK(init_on(0));
    struct ipc_args a;
    CUdeviceptr p;
    OK(cuMemAlloc(&p, 4096));
    OK(cuIpcGetMemHandle(&a.h, p));
    cr_assert_eq(run_child(child_fill_table, &a), 0);
    struct sim_machine *m = map_segment();
    cr_assert_not_null(m);
    cr_assert_eq(m->maps_hw, SIM_MAX_MAPS);
    cr_assert_eq(claimed_rows(m), 0);
    OK(cuMemFree(p));
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
