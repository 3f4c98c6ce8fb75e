/*
 * test_pool_ipc.c: Criterion tests of the simulated driver's memory pools
 * and their IPC (driver_pool.c, driver_pool_ipc.c): created pools, their
 * destruction with allocations outstanding, access descriptors, exporting a
 * pool as a file descriptor and allocations as 64 bytes of data, importing
 * both in another process, the importer's frees, and what happens when the
 * exporter frees first (SIMCUDA_FREE_WHILE_MAPPED poison and keep), when
 * the importer dies, and on bad input.
 *
 * As in test_driver.c: each test runs on its own machine (SIMCUDA_MACHINE
 * = test name + pid, unlinked in .fini), and second processes are fork()
 * children that call cuInit again, report failures on stderr and through
 * their exit status, and leave with _exit(). The pool's fd reaches the
 * importer by SCM_RIGHTS over a socketpair made before the fork (the child
 * never inherits it), with the export data and the exporter's pointer.
 */
#include <cuda.h>
#include <criterion/criterion.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simcuda.h"
#include "test_check.h"

static char g_machine[160];

static void setup(void)
{
    snprintf(g_machine, sizeof(g_machine), "p-%s-%d", criterion_current_test->name, (int)getpid());
    setenv(SIMCUDA_ENV_MACHINE, g_machine, 1);
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "64M", 1);
    unsetenv(SIMCUDA_ENV_DEVICES);
    unsetenv(SIMCUDA_ENV_FAIL_ALLOC);
    unsetenv(SIMCUDA_ENV_FREE_WHILE_MAPPED);
    unsetenv(SIMCUDA_ENV_PROC_ADDRESS);
    unsetenv(SIMCUDA_ENV_MAX_ALLOCS);
}

static void teardown(void)
{
    simcuda_unlink_machine(g_machine);
}

TestSuite(simpool, .init = setup, .fini = teardown, .timeout = 30);

#define POSIX_FD CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
#define BLOCK 65536u
#define PATTERN 0x5a5a5a5au

/* cuInit plus a current primary context on device 0. */
static CUresult init0(void)
{
    CUresult r = cuInit(0);
    CUcontext c;
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&c, 0);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(c);
    return r;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    OK(cuMemGetInfo(&f, &t));
    return f;
}

static struct simcuda_stats stats(void)
{
    struct simcuda_stats s;
    simcuda_stats(&s);
    return s;
}

/* The fewest calls that make an IPC-capable pool on device 0. */
static CUresult ipc_pool(CUmemoryPool *pool, CUmemAllocationHandleType types)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = types;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    return cuMemPoolCreate(pool, &props);
}

/* What the exporter sends the importer, with the pool's fd as SCM_RIGHTS. */
struct msg {
    CUmemPoolPtrExportData data;
    CUdeviceptr exporter_ptr;
    unsigned long long exporter_id; /* the allocation's BUFFER_ID in the exporter */
};

static int send_msg(int sock, int fd, const struct msg *m)
{
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct iovec iov = {.iov_base = (void *)m, .iov_len = sizeof(*m)};
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        h.msg_control = ctl;
        h.msg_controllen = sizeof(ctl);
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &h, 0) == (ssize_t)sizeof(*m) ? 0 : -1;
}

/* Receives a message and its fd (-1 when none came). */
static int recv_msg(int sock, int *fd, struct msg *m)
{
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = m, .iov_len = sizeof(*m)};
    struct msghdr h = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    *fd = -1;
    if (recvmsg(sock, &h, 0) != (ssize_t)sizeof(*m)) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&h);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

/* One byte each way: a step of the test's script. */
static int step_send(int sock, char c)
{
    return write(sock, &c, 1) == 1 ? 0 : -1;
}

static char step_recv(int sock)
{
    char c = 0;
    return read(sock, &c, 1) == 1 ? c : 0;
}

/* An importer: a forked child that receives the pool and the pointer, then
 * runs fn(sock, pool, ptr, msg); importer_start returns its pid, the parent
 * keeps sock[0]. */
typedef int (*importer_fn)(int sock, CUmemoryPool pool, CUdeviceptr p, const struct msg *m);

static int importer_main(int sock, importer_fn fn)
{
    CHILD_OK(init0());
    struct msg m;
    int fd;
    CHILD_EXPECT(recv_msg(sock, &fd, &m) == 0 && fd >= 0);
    CUmemoryPool pool;
    CHILD_OK(cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd, POSIX_FD, 0));
    close(fd); /* the imported pool does not need the fd any more */
    CUdeviceptr p = 0;
    CUresult r = cuMemPoolImportPointer(&p, pool, &m.data);
    return fn(sock, pool, r == CUDA_SUCCESS ? p : 0, &m);
}

static pid_t importer_start(int *sock, importer_fn fn)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(sv[0]);
        _exit(importer_main(sv[1], fn));
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}

/* Allocates BLOCK bytes of `pool`, fills them with PATTERN, exports the pool
 * and the allocation to the importer on sock. */
static CUdeviceptr export_to(int sock, CUmemoryPool pool)
{
    CUdeviceptr p;
    OK(cuMemAllocFromPoolAsync(&p, BLOCK, pool, NULL));
    OK(cuMemsetD32(p, PATTERN, BLOCK / 4));
    struct msg m;
    memset(&m, 0, sizeof(m));
    int fd = -1;
    OK(cuMemPoolExportToShareableHandle(&fd, pool, POSIX_FD, 0));
    cr_assert_geq(fd, 0);
    OK(cuMemPoolExportPointer(&m.data, p));
    m.exporter_ptr = p;
    OK(cuPointerGetAttribute(&m.exporter_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    cr_assert_eq(send_msg(sock, fd, &m), 0);
    close(fd);
    return p;
}

static int wait_child(pid_t pid)
{
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- pools of one process ---- */

Test(simpool, create_validates_the_properties)
{
    OK(init0());
    CUmemoryPool pool;
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    FAILS(cuMemPoolCreate(NULL, &props), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolCreate(&pool, NULL), CUDA_ERROR_INVALID_VALUE);
    props.location.id = 1; /* one device */
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
    props.location.id = 0;
    props.handleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
    props.handleTypes = CU_MEM_HANDLE_TYPE_WIN32;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
    props.handleTypes = POSIX_FD;
    props.location.type = CU_MEM_LOCATION_TYPE_HOST;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
    props.location.type = CU_MEM_LOCATION_TYPE_INVALID;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.allocType = CU_MEM_ALLOCATION_TYPE_INVALID;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
    props.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_NOT_SUPPORTED);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.reserved[3] = 1;
    FAILS(cuMemPoolCreate(&pool, &props), CUDA_ERROR_INVALID_VALUE);
    props.reserved[3] = 0;
    OK(cuMemPoolCreate(&pool, &props));
    OK(cuMemPoolDestroy(pool));
}

Test(simpool, created_pool_allocates_and_answers_its_attributes)
{
    OK(init0());
    int types = 0;
    OK(cuDeviceGetAttribute(&types, CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, 0));
    cr_assert_eq(types, POSIX_FD);
    CUmemoryPool pool, dflt, cur;
    OK(ipc_pool(&pool, POSIX_FD));
    OK(cuDeviceGetDefaultMemPool(&dflt, 0));
    cr_assert_neq(pool, dflt);
    CUdeviceptr p, q;
    OK(cuMemAllocFromPoolAsync(&p, 1000, pool, NULL));
    CUmemoryPool of = NULL;
    OK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    cr_assert_eq(of, pool);
    unsigned long long allowed = 0;
    OK(cuPointerGetAttribute(&allowed, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p));
    cr_assert_eq(allowed, POSIX_FD);
    cuuint64_t used = 0;
    OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    cr_assert_eq(used, 1024); /* 512-byte granules */
    OK(cuMemPoolGetAttribute(dflt, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    cr_assert_eq(used, 0, "the default pool's usage is its own");

    /* Access: read-write from its device by default, stored as set. */
    CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
    CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    OK(cuMemPoolGetAccess(&f, pool, &loc));
    cr_assert_eq(f, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CUmemAccessDesc d = {.location = loc, .flags = CU_MEM_ACCESS_FLAGS_PROT_READ};
    OK(cuMemPoolSetAccess(pool, &d, 1));
    OK(cuMemPoolGetAccess(&f, pool, &loc));
    cr_assert_eq(f, CU_MEM_ACCESS_FLAGS_PROT_READ);
    d.location.id = 7;
    FAILS(cuMemPoolSetAccess(pool, &d, 1), CUDA_ERROR_INVALID_VALUE);
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
    FAILS(cuMemPoolGetAccess(&f, pool, &loc), CUDA_ERROR_INVALID_VALUE);

    /* Stream-ordered allocators ask this first (cuda.core does). */
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    OK(cuStreamIsCapturing(NULL, &cs));
    cr_assert_eq(cs, CU_STREAM_CAPTURE_STATUS_NONE);
    FAILS(cuStreamIsCapturing((CUstream)&cs, &cs), CUDA_ERROR_INVALID_HANDLE);

    /* The device's current pool. */
    OK(cuDeviceSetMemPool(0, pool));
    OK(cuDeviceGetMemPool(&cur, 0));
    cr_assert_eq(cur, pool);
    OK(cuMemAllocAsync(&q, 512, NULL));
    OK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, q));
    cr_assert_eq(of, pool, "cuMemAllocAsync draws from the current pool");
    OK(cuMemFreeAsync(q, NULL));
    FAILS(cuDeviceSetMemPool(3, pool), CUDA_ERROR_INVALID_DEVICE);
    FAILS(cuDeviceSetMemPool(0, (CUmemoryPool)&q), CUDA_ERROR_INVALID_VALUE);

    /* Default pools cannot be destroyed; a destroyed pool is gone. */
    FAILS(cuMemPoolDestroy(dflt), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemFree(p));
    OK(cuMemPoolDestroy(pool));
    FAILS(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);
    OK(cuDeviceGetMemPool(&cur, 0));
    cr_assert_eq(cur, dflt, "destroying the current pool restores the default");
    FAILS(cuMemAllocFromPoolAsync(&p, 512, pool, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
          CUDA_ERROR_INVALID_VALUE);
}

Test(simpool, destroy_with_an_outstanding_allocation_returns_at_once)
{
    OK(init0());
    size_t start = free_bytes();
    CUmemoryPool pool;
    OK(ipc_pool(&pool, CU_MEM_HANDLE_TYPE_NONE));
    CUdeviceptr p;
    OK(cuMemAllocFromPoolAsync(&p, 1 << 20, pool, NULL));
    OK(cuMemPoolDestroy(pool)); /* returns at once */
    cr_assert_eq(free_bytes(), start - (1 << 20), "the allocation still holds its memory");
    OK(cuMemsetD32(p, 0x12345678u, 256)); /* and is still usable */
    unsigned v = 0;
    OK(cuMemcpyDtoH(&v, p + 1020, 4));
    cr_assert_eq(v, 0x12345678u);
    CUmemoryPool of = NULL;
    OK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    cr_assert_eq(of, pool);
    OK(cuMemFreeAsync(p, NULL));
    cr_assert_eq(free_bytes(), start, "memory comes back when the last allocation is freed");
    FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
}

Test(simpool, max_size_limits_the_pool)
{
    OK(init0());
    CUmemoryPool pool;
    CUmemPoolProps props;
    memset(&props, 0, sizeof(props));
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.maxSize = 4096;
    OK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr a, b;
    OK(cuMemAllocFromPoolAsync(&a, 3000, pool, NULL));
    FAILS(cuMemAllocFromPoolAsync(&b, 1536, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
    OK(cuMemAllocFromPoolAsync(&b, 1000, pool, NULL));
    OK(cuMemFree(a));
    OK(cuMemFree(b));
    OK(cuMemPoolDestroy(pool));
}

Test(simpool, only_memory_of_an_ipc_pool_exports)
{
    OK(init0());
    CUmemoryPool plain, ipc, dflt;
    OK(ipc_pool(&plain, CU_MEM_HANDLE_TYPE_NONE));
    OK(ipc_pool(&ipc, POSIX_FD));
    OK(cuDeviceGetDefaultMemPool(&dflt, 0));
    int fd = -1;
    FAILS(cuMemPoolExportToShareableHandle(&fd, plain, POSIX_FD, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportToShareableHandle(&fd, dflt, POSIX_FD, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportToShareableHandle(&fd, ipc, CU_MEM_HANDLE_TYPE_FABRIC, 0),
          CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportToShareableHandle(&fd, ipc, POSIX_FD, 1), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportToShareableHandle(NULL, ipc, POSIX_FD, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolExportToShareableHandle(&fd, ipc, POSIX_FD, 0));
    cr_assert_geq(fd, 0);
    cr_assert_eq(fcntl(fd, F_GETFD), 0, "a plain fd, inherited by fork and exec");
    close(fd);

    CUdeviceptr a, b, c, d, e;
    OK(cuMemAllocFromPoolAsync(&a, 4096, plain, NULL));
    OK(cuMemAllocAsync(&b, 4096, NULL)); /* the default pool */
    OK(cuMemAlloc(&c, 4096));
    OK(cuMemAllocManaged(&d, 4096, CU_MEM_ATTACH_GLOBAL));
    OK(cuMemAllocFromPoolAsync(&e, 4096, ipc, NULL));
    CUmemPoolPtrExportData x;
    FAILS(cuMemPoolExportPointer(&x, a), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportPointer(&x, b), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportPointer(&x, c), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportPointer(&x, d), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportPointer(&x, (CUdeviceptr)(uintptr_t)&x), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportPointer(NULL, e), CUDA_ERROR_INVALID_VALUE);
    CUmemPoolPtrExportData y;
    OK(cuMemPoolExportPointer(&x, e));
    OK(cuMemPoolExportPointer(&y, e + 100)); /* interior: the whole allocation */
    cr_assert_eq(memcmp(&x, &y, sizeof(x)), 0);
    cr_assert_eq(stats().proc_pool_exports, 2);
    CUipcMemHandle h;
    FAILS(cuIpcGetMemHandle(&h, e), CUDA_ERROR_INVALID_VALUE); /* pool memory is not legacy IPC */
    OK(cuMemFree(e));
    FAILS(cuMemPoolExportPointer(&x, e), CUDA_ERROR_INVALID_VALUE); /* freed */
    OK(cuMemFree(a));
    OK(cuMemFree(b));
    OK(cuMemFree(c));
    OK(cuMemFree(d));
}

/* The pool fd and the export data are checked before anything is trusted. */
Test(simpool, bad_handles_and_forged_data_are_refused)
{
    OK(init0());
    CUmemoryPool ipc, other, imp, imp_other, created;
    OK(ipc_pool(&ipc, POSIX_FD));
    OK(ipc_pool(&other, POSIX_FD));
    OK(ipc_pool(&created, POSIX_FD));
    int fd, fd_other;
    OK(cuMemPoolExportToShareableHandle(&fd, ipc, POSIX_FD, 0));
    OK(cuMemPoolExportToShareableHandle(&fd_other, other, POSIX_FD, 0));

    /* Not a pool: /dev/null, a pipe, a file of the wrong bytes, a closed fd. */
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    int junk = memfd_create("junk", MFD_CLOEXEC);
    char bytes[48];
    memset(bytes, 0x41, sizeof(bytes));
    cr_assert_eq(write(junk, bytes, sizeof(bytes)), (ssize_t)sizeof(bytes));
    const int bad[] = {devnull, pfd[0], junk, 1000, -1};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        FAILS(cuMemPoolImportFromShareableHandle(&imp, (void *)(intptr_t)bad[i], POSIX_FD, 0),
              CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportFromShareableHandle(&imp, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_FABRIC,
                                             0),
          CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportFromShareableHandle(&imp, (void *)(uintptr_t)fd, POSIX_FD, 1),
          CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportFromShareableHandle(NULL, (void *)(uintptr_t)fd, POSIX_FD, 0),
          CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(write(fd, "x", 1), -1, "the record behind the fd is sealed");

    /* A pool may be imported in its own process; its pointers may not. */
    OK(cuMemPoolImportFromShareableHandle(&imp, (void *)(uintptr_t)fd, POSIX_FD, 0));
    OK(cuMemPoolImportFromShareableHandle(&imp_other, (void *)(uintptr_t)fd_other, POSIX_FD, 0));
    CUdeviceptr p, q;
    FAILS(cuMemAllocFromPoolAsync(&p, 512, imp, NULL), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuDeviceSetMemPool(0, imp), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolExportToShareableHandle(&junk, imp, POSIX_FD, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAllocFromPoolAsync(&p, 4096, ipc, NULL));
    CUmemPoolPtrExportData x, forged;
    OK(cuMemPoolExportPointer(&x, p));
    FAILS(cuMemPoolImportPointer(&q, imp, &x), CUDA_ERROR_INVALID_VALUE); /* our own */

    /* Forged, truncated or zeroed data; the wrong pool; a pool not imported. */
    for (size_t i = 0; i < sizeof(x); i++) {
        forged = x;
        forged.reserved[i] ^= 0x10;
        FAILS(cuMemPoolImportPointer(&q, imp, &forged), CUDA_ERROR_INVALID_VALUE);
    }
    forged = x;
    memset(forged.reserved + 32, 0, 32);
    FAILS(cuMemPoolImportPointer(&q, imp, &forged), CUDA_ERROR_INVALID_VALUE);
    memset(&forged, 0, sizeof(forged));
    FAILS(cuMemPoolImportPointer(&q, imp, &forged), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportPointer(&q, imp_other, &x), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportPointer(&q, ipc, &x), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportPointer(&q, NULL, &x), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportPointer(NULL, imp, &x), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemPoolImportPointer(&q, imp, NULL), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(stats().machine_pool_imports, 0);
    OK(cuMemFree(p));
    OK(cuMemPoolDestroy(imp));
    FAILS(cuMemPoolImportPointer(&q, imp, &x), CUDA_ERROR_INVALID_VALUE); /* destroyed */
    close(fd);
    close(fd_other);
    close(devnull);
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- IPC between processes ---- */

/* Reads the pattern, checks what a pointer query says, writes its mark at
 * the end, imports a second time, frees both, then a third free fails. */
static int importer_happy(int sock, CUmemoryPool pool, CUdeviceptr p, const struct msg *m)
{
    CHILD_EXPECT(p != 0);
    CHILD_EXPECT(stats().machine_pool_imports == 1);
    static unsigned v[BLOCK / 4];
    CHILD_OK(cuMemcpyDtoH(v, p, BLOCK));
    for (unsigned i = 0; i < BLOCK / 4; i++)
        CHILD_EXPECT(v[i] == PATTERN);
    CUcontext ctx, cur;
    CUdeviceptr start = 0;
    size_t size = 0;
    int ordinal = -1;
    CUmemoryPool of = NULL;
    unsigned long long id = 0;
    CHILD_OK(cuCtxGetCurrent(&cur));
    CHILD_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 10));
    CHILD_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 10));
    CHILD_OK(cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p));
    CHILD_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    CHILD_OK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    CHILD_OK(cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
    CHILD_EXPECT(start == p && size == BLOCK && ctx == cur && ordinal == 0 && of == pool);
    CHILD_EXPECT(id != 0 && id != m->exporter_id);
    /* (A fork child inherits its parent's mapping of the device, so p may
     * equal m->exporter_ptr here; test_runtime.c's exec'd importer sees a
     * different address.) */
    CUdeviceptr base = 0;
    size_t range = 0;
    CHILD_OK(cuMemGetAddressRange(&base, &range, p + 4097));
    CHILD_EXPECT(base == p && range == BLOCK);
    CHILD_OK(cuMemsetD32(p + BLOCK - 4, 0x0badcafeu, 1));
    CHILD_OK(cuMemcpyDtoD(p, p + 4, 4));
    /* A second import of the same allocation: the same mapping, not
     * counted (NVIDIA's driver, H200): one free ends both. */
    CUdeviceptr p2 = 0;
    CHILD_OK(cuMemPoolImportPointer(&p2, pool, (CUmemPoolPtrExportData *)&m->data));
    CHILD_EXPECT(p2 == p && stats().machine_pool_imports == 1 && stats().proc_pool_imports == 1);
    CHILD_FAILS(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE); /* not a legacy open */
    CHILD_FAILS(cuMemFree(p + 512), CUDA_ERROR_INVALID_VALUE);     /* not the base */
    CHILD_OK(cuMemFree(p));
    CHILD_FAILS(cuMemFreeAsync(p2, NULL), CUDA_ERROR_INVALID_VALUE); /* the same import, ended */
    CHILD_FAILS(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_VALUE);
    CHILD_FAILS(cuMemcpyDtoH(v, p, 4), CUDA_ERROR_INVALID_VALUE); /* unmapped here */
    CHILD_EXPECT(stats().machine_pool_imports == 0);
    CHILD_OK(cuMemPoolDestroy(pool));
    CHILD_EXPECT(step_send(sock, 'd') == 0);
    return 0;
}

Test(simpool, pool_and_pointer_cross_to_another_process)
{
    OK(init0());
    CUmemoryPool pool;
    OK(ipc_pool(&pool, POSIX_FD));
    int sock;
    pid_t pid = importer_start(&sock, importer_happy);
    CUdeviceptr p = export_to(sock, pool);
    cr_assert_eq(step_recv(sock), 'd');
    cr_assert_eq(wait_child(pid), 0);
    unsigned v[2];
    OK(cuMemcpyDtoH(&v[0], p, 4));
    OK(cuMemcpyDtoH(&v[1], p + BLOCK - 4, 4));
    cr_assert_eq(v[0], PATTERN);
    cr_assert_eq(v[1], 0x0badcafeu, "the importer's write reached the exporter's bytes");
    struct simcuda_stats s = stats();
    cr_assert_eq(s.machine_pool_imports, 0);
    cr_assert_eq(s.machine_ipc_opens, 0);
    OK(cuMemFree(p));
    s = stats();
    cr_assert_eq(s.proc_poisoned_frees, 1, "exported memory is poisoned at its release");
    OK(cuMemPoolDestroy(pool));
    close(sock);
}

/* The import must fail: the exporter freed the allocation (and may have
 * reused its address) before the data arrived. */
static int importer_refused(int sock, CUmemoryPool pool, CUdeviceptr p, const struct msg *m)
{
    CHILD_EXPECT(p == 0);
    CUdeviceptr q;
    CHILD_FAILS(cuMemPoolImportPointer(&q, pool, (CUmemPoolPtrExportData *)&m->data),
                CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(stats().machine_pool_imports == 0);
    CHILD_EXPECT(step_send(sock, 'd') == 0);
    return 0;
}

Test(simpool, import_after_the_exporter_freed_fails)
{
    setenv(SIMCUDA_ENV_DEVICE_MEMORY, "64K", 1); /* one BLOCK: a new allocation reuses the range */
    OK(init0());
    CUmemoryPool pool;
    OK(ipc_pool(&pool, POSIX_FD));
    CUdeviceptr p, again;
    OK(cuMemAllocFromPoolAsync(&p, BLOCK, pool, NULL));
    struct msg m;
    memset(&m, 0, sizeof(m));
    /* Not before the pool is exported (NVIDIA's driver, H200). */
    cr_assert_eq(cuMemPoolExportPointer(&m.data, p), CUDA_ERROR_INVALID_VALUE);
    int fd = -1, sock;
    OK(cuMemPoolExportToShareableHandle(&fd, pool, POSIX_FD, 0));
    OK(cuMemPoolExportPointer(&m.data, p));
    OK(cuMemFreeAsync(p, NULL));
    OK(cuMemAllocFromPoolAsync(&again, BLOCK, pool, NULL));
    cr_assert_eq(again, p, "the address is reused");
    CUmemPoolPtrExportData fresh;
    OK(cuMemPoolExportPointer(&fresh, again));
    cr_assert_neq(memcmp(&fresh, &m.data, sizeof(fresh)), 0, "by a new allocation, new data");
    pid_t pid = importer_start(&sock, importer_refused);
    cr_assert_eq(send_msg(sock, fd, &m), 0); /* the old data */
    cr_assert_eq(step_recv(sock), 'd');
    cr_assert_eq(wait_child(pid), 0);
    OK(cuMemFree(again));
    close(fd);
    close(sock);
}

/* Holds the import while the exporter frees ('f'), then reads what is
 * there: 'p' poison expected, 'k' the pattern (keep mode); frees the import
 * on 'r' and reports 'd'. */
static int importer_violated(int sock, CUmemoryPool pool, CUdeviceptr p, const struct msg *m)
{
    (void)pool;
    (void)m;
    CHILD_EXPECT(p != 0);
    CHILD_EXPECT(step_send(sock, 'i') == 0);
    char mode = step_recv(sock);
    CHILD_EXPECT(mode == 'p' || mode == 'k');
    static unsigned v[BLOCK / 4];
    CHILD_OK(cuMemcpyDtoH(v, p, BLOCK)); /* the mapping is still ours */
    unsigned want = mode == 'p' ? SIMCUDA_POISON_WORD : PATTERN;
    for (unsigned i = 0; i < BLOCK / 4; i++)
        CHILD_EXPECT(v[i] == want);
    CHILD_EXPECT(step_send(sock, 'c') == 0);
    CHILD_EXPECT(step_recv(sock) == 'r');
    CHILD_OK(cuMemFree(p)); /* unmaps here; in keep mode the block goes now */
    CHILD_FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(step_send(sock, 'd') == 0);
    CHILD_EXPECT(step_recv(sock) == 'x'); /* stay alive until the parent looked */
    return 0;
}

Test(simpool, exporter_free_first_poisons_the_importer_by_default)
{
    OK(init0());
    size_t start = free_bytes();
    CUmemoryPool pool;
    OK(ipc_pool(&pool, POSIX_FD));
    int sock;
    pid_t pid = importer_start(&sock, importer_violated);
    CUdeviceptr p = export_to(sock, pool);
    cr_assert_eq(step_recv(sock), 'i');
    cr_assert_eq(stats().machine_pool_imports, 1);
    OK(cuMemFree(p)); /* the rule broken: freed while imported */
    cr_assert_eq(free_bytes(), start, "poison: released at once");
    struct simcuda_stats s = stats();
    cr_assert_eq(s.proc_poisoned_frees, 1);
    cr_assert_eq(s.machine_kept, 0);
    cr_assert_eq(s.machine_pool_imports, 1, "the importer has not freed yet");
    cr_assert_eq(step_send(sock, 'p'), 0);
    cr_assert_eq(step_recv(sock), 'c');
    cr_assert_eq(step_send(sock, 'r'), 0);
    cr_assert_eq(step_recv(sock), 'd');
    cr_assert_eq(stats().machine_pool_imports, 0);
    cr_assert_eq(step_send(sock, 'x'), 0);
    cr_assert_eq(wait_child(pid), 0);
    close(sock);
}

Test(simpool, exporter_free_first_keeps_the_bytes_in_keep_mode)
{
    setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init0());
    size_t start = free_bytes();
    CUmemoryPool pool;
    OK(ipc_pool(&pool, POSIX_FD));
    int sock;
    pid_t pid = importer_start(&sock, importer_violated);
    CUdeviceptr p = export_to(sock, pool);
    cr_assert_eq(step_recv(sock), 'i');
    OK(cuMemFreeAsync(p, NULL));                   /* the rule broken: freed while imported */
    FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE); /* freed for its owner */
    cr_assert_eq(free_bytes(), start - BLOCK, "keep: still charged");
    struct simcuda_stats s = stats();
    cr_assert_eq(s.machine_kept, 1);
    cr_assert_eq(s.proc_poisoned_frees, 0);
    CUmemPoolPtrExportData x;
    FAILS(cuMemPoolExportPointer(&x, p), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr q;
    OK(cuMemAllocFromPoolAsync(&q, BLOCK, pool, NULL));
    cr_assert_neq(q, p, "a kept range is not reused");
    OK(cuMemFree(q));
    cr_assert_eq(step_send(sock, 'k'), 0);
    cr_assert_eq(step_recv(sock), 'c'); /* the importer read intact bytes */
    cr_assert_eq(step_send(sock, 'r'), 0);
    cr_assert_eq(step_recv(sock), 'd');
    s = stats();
    cr_assert_eq(s.machine_kept, 0, "the importer's free released the kept block");
    cr_assert_eq(s.machine_pool_imports, 0);
    cr_assert_eq(free_bytes(), start, "memory accounting comes back");
    cr_assert_eq(step_send(sock, 'x'), 0);
    cr_assert_eq(wait_child(pid), 0);
    close(sock);
}

/* Imports, reports, and waits to be killed. */
static int importer_hangs(int sock, CUmemoryPool pool, CUdeviceptr p, const struct msg *m)
{
    (void)pool;
    (void)m;
    CHILD_EXPECT(p != 0);
    CHILD_EXPECT(step_send(sock, 'i') == 0);
    for (;;)
        pause();
}

static void importer_killed(int keep)
{
    if (keep) setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init0());
    size_t start = free_bytes();
    CUmemoryPool pool;
    OK(ipc_pool(&pool, POSIX_FD));
    int sock;
    pid_t pid = importer_start(&sock, importer_hangs);
    CUdeviceptr p = export_to(sock, pool);
    cr_assert_eq(step_recv(sock), 'i');
    cr_assert_eq(stats().machine_pool_imports, 1);
    if (keep) {
        OK(cuMemFree(p)); /* kept for the importer */
        cr_assert_eq(stats().machine_kept, 1);
    }
    kill(pid, SIGKILL);
    cr_assert_eq(wait_child(pid), 128 + SIGKILL);
    (void)free_bytes(); /* cuMemGetInfo sweeps the dead importer */
    struct simcuda_stats s = stats();
    cr_assert_eq(s.machine_pool_imports, 0, "the dead importer's import is released");
    cr_assert_eq(s.machine_kept, 0);
    if (!keep) OK(cuMemFree(p));
    cr_assert_eq(free_bytes(), start);
    cr_assert_eq(stats().machine_poisoned_frees, 1);
    close(sock);
}

Test(simpool, killed_importer_releases_its_import)
{
    importer_killed(0);
}

Test(simpool, killed_importer_releases_a_kept_block)
{
    importer_killed(1);
}

/* Imports, then leaves normally with the import still held (exit releases
 * it like an IPC open). */
static int importer_exits(int sock, CUmemoryPool pool, CUdeviceptr p, const struct msg *m)
{
    (void)pool;
    (void)m;
    CHILD_EXPECT(p != 0);
    CUcontext c;
    CHILD_OK(cuCtxGetCurrent(&c));
    CHILD_OK(cuDevicePrimaryCtxReset(0)); /* the context's end drops its imports */
    CHILD_EXPECT(stats().machine_pool_imports == 0);
    CHILD_FAILS(cuMemFree(p), CUDA_ERROR_INVALID_VALUE);
    CHILD_EXPECT(step_send(sock, 'd') == 0);
    return 0;
}

Test(simpool, importer_context_end_drops_its_imports)
{
    OK(init0());
    CUmemoryPool pool;
    OK(ipc_pool(&pool, POSIX_FD));
    int sock;
    pid_t pid = importer_start(&sock, importer_exits);
    CUdeviceptr p = export_to(sock, pool);
    cr_assert_eq(step_recv(sock), 'd');
    cr_assert_eq(wait_child(pid), 0);
    cr_assert_eq(stats().machine_pool_imports, 0);
    OK(cuMemFree(p));
    close(sock);
}

/* The exporter: makes an IPC pool and a block, sends both on sock, waits
 * for the importer's 'i', then leaves normally (the library destructor
 * releases its allocations, as at any exit). */
static int exporter_then_exit(int sock)
{
    CHILD_OK(init0());
    CUmemoryPool pool;
    CHILD_OK(ipc_pool(&pool, POSIX_FD));
    CUdeviceptr p;
    CHILD_OK(cuMemAllocFromPoolAsync(&p, BLOCK, pool, NULL));
    CHILD_OK(cuMemsetD32(p, PATTERN, BLOCK / 4));
    struct msg m;
    memset(&m, 0, sizeof(m));
    int fd;
    CHILD_OK(cuMemPoolExportToShareableHandle(&fd, pool, POSIX_FD, 0));
    CHILD_OK(cuMemPoolExportPointer(&m.data, p));
    CHILD_EXPECT(send_msg(sock, fd, &m) == 0);
    CHILD_EXPECT(step_recv(sock) == 'i');
    exit(0);
}

static void exporter_exits(int keep)
{
    if (keep) setenv(SIMCUDA_ENV_FREE_WHILE_MAPPED, "keep", 1);
    OK(init0());
    size_t start = free_bytes();
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        _exit(exporter_then_exit(sv[1]));
    }
    close(sv[1]);
    struct msg m;
    int fd;
    cr_assert_eq(recv_msg(sv[0], &fd, &m), 0);
    CUmemoryPool pool;
    OK(cuMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd, POSIX_FD, 0));
    CUdeviceptr p;
    OK(cuMemPoolImportPointer(&p, pool, &m.data));
    cr_assert_eq(step_send(sv[0], 'i'), 0);
    cr_assert_eq(wait_child(pid), 0);
    unsigned v = 0;
    OK(cuMemcpyDtoH(&v, p + 8, 4)); /* our mapping outlives the exporter */
    cr_assert_eq(v, keep ? PATTERN : SIMCUDA_POISON_WORD);
    cr_assert_eq(stats().machine_kept, (uint64_t)keep);
    cr_assert_eq(free_bytes(), keep ? start - BLOCK : start);
    OK(cuMemFree(p));
    cr_assert_eq(stats().machine_kept, 0);
    cr_assert_eq(free_bytes(), start);
    FAILS(cuMemPoolImportPointer(&p, pool, &m.data), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemPoolDestroy(pool));
    close(fd);
    close(sv[0]);
}

Test(simpool, exporter_exit_poisons_a_held_import_by_default)
{
    exporter_exits(0);
}

Test(simpool, exporter_exit_keeps_a_held_import_in_keep_mode)
{
    exporter_exits(1);
}

/* ---- the resolver ---- */

Test(simpool, resolver_hands_out_the_pool_functions)
{
    static const char *names[] = {
        "cuMemPoolCreate",
        "cuMemPoolDestroy",
        "cuDeviceSetMemPool",
        "cuMemPoolSetAccess",
        "cuMemPoolGetAccess",
        "cuMemPoolExportToShareableHandle",
        "cuMemPoolImportFromShareableHandle",
        "cuMemPoolExportPointer",
        "cuMemPoolImportPointer",
        "cuMemAllocFromPoolAsync",
        "cuStreamIsCapturing",
    };
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(lib);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        OK(cuGetProcAddress_v2(names[i], &fn, 13000, 0, &st));
        cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS, "%s", names[i]);
        cr_assert_eq(fn, dlsym(lib, names[i]), "%s: the driver's own function", names[i]);
        OK(cuGetProcAddress_v2(names[i], &fn, 11020, 0, &st));
        cr_assert_not_null(fn);
        if (strcmp(names[i], "cuStreamIsCapturing") == 0) continue; /* since 10000 */
        FAILS(cuGetProcAddress_v2(names[i], &fn, 11010, 0, &st), CUDA_ERROR_NOT_FOUND);
        cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "%s", names[i]);
    }
    dlclose(lib);
}
