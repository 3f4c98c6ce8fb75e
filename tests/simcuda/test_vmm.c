/*
 * test_vmm.c: Criterion tests of the simulated driver's virtual memory
 * management API (driver_vmm.c): create, reserve, map, set access, copy,
 * unmap, release, address free; retained handles; granularity and bad
 * input; POSIX fd export and import in another process (the fd crosses by
 * SCM_RIGHTS); the documented lifetime (memory lives while any handle,
 * mapping or exported fd does, in any process); importer death; legacy IPC
 * refused on VMM memory; forged fds; every exported fd a new description of
 * one file (as NVIDIA's driver opens /dev/nvidiactl anew for each).
 *
 * As in test_pool_ipc.c: each test runs on its own machine (SIMCUDA_MACHINE
 * = test name + pid, unlinked in .fini); second processes are fork()
 * children that call cuInit again and report through their exit status.
 */
#include <cuda.h>
#include <criterion/criterion.h>

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "simcuda.h"
#include "test_check.h"

static char g_machine[160];

static void setup(void)
{
    snprintf(g_machine, sizeof(g_machine), "v-%s-%d", criterion_current_test->name, (int)getpid());
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

TestSuite(simvmm, .init = setup, .fini = teardown, .timeout = 30);

#define POSIX_FD CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
#define GRAN (2u << 20)
#define PATTERN 0x5a5a5a5au
#define REPLY 0x0badf00du

static CUresult init0(void)
{
    CUresult r = cuInit(0);
    CUcontext c;
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&c, 0);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(c);
    return r;
}

static size_t used_bytes(void)
{
    size_t f = 0, t = 0;
    OK(cuMemGetInfo(&f, &t));
    return t - f;
}

static CUmemAllocationProp prop_of(unsigned long long types)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    p.requestedHandleTypes = (CUmemAllocationHandleType)types;
    return p;
}

/* Reserves `size` bytes, maps all of handle h there and gives device 0
 * read-write access: the sequence every VMM allocator runs. */
static CUresult reserve_map(CUmemGenericAllocationHandle h, size_t size, CUdeviceptr *va)
{
    CUresult r = cuMemAddressReserve(va, size, 0, 0, 0);
    if (r == CUDA_SUCCESS) r = cuMemMap(*va, size, 0, h, 0);
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS) r = cuMemSetAccess(*va, size, &d, 1);
    return r;
}

static uint32_t word_at(CUdeviceptr p)
{
    uint32_t w = 0;
    cuMemcpyDtoH(&w, p, sizeof(w));
    return w;
}

Test(simvmm, create_map_copy_unmap_release)
{
    OK(init0());
    int v = 0;
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    cr_assert_eq(v, 1);
    OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                            0));
    cr_assert_eq(v, 1);
    CUmemAllocationProp prop = prop_of(0);
    size_t g = 0;
    OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    cr_assert_eq(g, GRAN);
    OK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    cr_assert_eq(g, GRAN);

    size_t before = used_bytes();
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, 2 * GRAN, &prop, 0));
    cr_assert_eq(used_bytes(), before + 2 * GRAN, "cuMemCreate is charged to the device");
    CUdeviceptr va;
    OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
    cr_assert_eq(va % GRAN, 0);
    OK(cuMemMap(va, 2 * GRAN, 0, h, 0));
    /* Mapped but no access yet: copies fail (NVIDIA: set access first). */
    FAILS(cuMemsetD32(va, PATTERN, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va, 2 * GRAN, &d, 1));
    unsigned long long fl = 0;
    OK(cuMemGetAccess(&fl, &d.location, va + GRAN));
    cr_assert_eq(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

    OK(cuMemsetD32(va, PATTERN, 2 * GRAN / 4));
    cr_assert_eq(word_at(va + 2 * GRAN - 4), PATTERN);
    uint32_t in[4] = {1, 2, 3, 4}, out[4] = {0};
    OK(cuMemcpyHtoD(va + GRAN - 8, in, sizeof(in))); /* across the middle */
    OK(cuMemcpyDtoH(out, va + GRAN - 8, sizeof(out)));
    cr_assert_eq(memcmp(in, out, sizeof(in)), 0);
    CUdeviceptr plain;
    OK(cuMemAlloc(&plain, 4096));
    OK(cuMemcpyDtoD(plain, va, 4096)); /* to and from ordinary memory */
    cr_assert_eq(word_at(plain), PATTERN);
    FAILS(cuMemcpyDtoH(out, va + 2 * GRAN - 8, 16), CUDA_ERROR_INVALID_VALUE); /* past the end */

    CUdeviceptr base;
    size_t size;
    OK(cuMemGetAddressRange(&base, &size, va + 100));
    cr_assert_eq(base, va);
    cr_assert_eq(size, 2 * GRAN);
    unsigned char capable = 1;
    OK(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va));
    cr_assert_eq(capable, 0);
    int ordinal = -1;
    OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va));
    cr_assert_eq(ordinal, 0);
    CUmemAllocationProp got;
    OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
    cr_assert_eq(got.location.id, 0);
    cr_assert_eq(got.type, CU_MEM_ALLOCATION_TYPE_PINNED);

    OK(cuMemUnmap(va, 2 * GRAN));
    FAILS(cuMemsetD32(va, 0, 1), CUDA_ERROR_INVALID_VALUE); /* not mapped any more */
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, 2 * GRAN));
    OK(cuMemFree(plain));
    cr_assert_eq(used_bytes(), before, "unmap + release frees the memory");
}

/* One allocation mapped at two ranges at once (host swap's async
 * evictions hand a victim's chunk to the next block while the victim's
 * range still maps it): both show the same bytes, and unmapping one range
 * leaves the other and the memory. */
Test(simvmm, one_handle_mapped_at_two_ranges)
{
    OK(init0());
    CUmemAllocationProp prop = prop_of(0);
    size_t before = used_bytes();
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, GRAN, &prop, 0));
    CUdeviceptr a, b;
    OK(reserve_map(h, GRAN, &a));
    OK(reserve_map(h, GRAN, &b));
    cr_assert_neq(a, b);
    cr_assert_eq(used_bytes(), before + GRAN, "one allocation, charged once");
    OK(cuMemsetD32(a, PATTERN, GRAN / 4));
    cr_assert_eq(word_at(b + GRAN - 4), PATTERN, "a write through one range shows in the other");
    OK(cuMemsetD32(b + 64, REPLY, 1));
    cr_assert_eq(word_at(a + 64), REPLY);
    OK(cuMemUnmap(a, GRAN));
    cr_assert_eq(word_at(b + 64), REPLY, "the other mapping stays");
    OK(cuMemRelease(h));
    cr_assert_eq(word_at(b), PATTERN, "a mapping keeps the memory after its release");
    OK(cuMemUnmap(b, GRAN));
    OK(cuMemAddressFree(a, GRAN));
    OK(cuMemAddressFree(b, GRAN));
    cr_assert_eq(used_bytes(), before, "the last unmap frees it");
}

Test(simvmm, bad_input)
{
    OK(init0());
    CUmemAllocationProp prop = prop_of(0);
    CUmemGenericAllocationHandle h;
    FAILS(cuMemCreate(&h, GRAN + 4096, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemCreate(&h, GRAN, &prop, 1), CUDA_ERROR_INVALID_VALUE);
    CUmemAllocationProp fabric = prop_of(CU_MEM_HANDLE_TYPE_FABRIC);
    FAILS(cuMemCreate(&h, GRAN, &fabric, 0), CUDA_ERROR_NOT_SUPPORTED);
    CUmemAllocationProp bad_dev = prop_of(0);
    bad_dev.location.id = 7;
    FAILS(cuMemCreate(&h, GRAN, &bad_dev, 0), CUDA_ERROR_INVALID_DEVICE);
    CUdeviceptr va;
    FAILS(cuMemAddressReserve(&va, GRAN - 1, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemAddressReserve(&va, GRAN, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);

    OK(cuMemCreate(&h, GRAN, &prop, 0));
    OK(cuMemAddressReserve(&va, 4 * GRAN, 4 * GRAN, 0, 0));
    cr_assert_eq(va % (4 * GRAN), 0, "alignment honoured");
    FAILS(cuMemMap(va, 2 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* larger than it */
    FAILS(cuMemMap(va, GRAN, GRAN, h, 0), CUDA_ERROR_INVALID_VALUE);  /* offset past it */
    FAILS(cuMemMap(va, GRAN, 0, h + 12345, 0), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuMemUnmap(va, GRAN), CUDA_ERROR_INVALID_VALUE); /* nothing mapped */
    OK(cuMemMap(va + GRAN, GRAN, 0, h, 0));
    FAILS(cuMemMap(va + GRAN, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* already mapped */
    FAILS(cuMemAddressFree(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE);     /* still mapped */
    FAILS(cuMemAddressFree(va, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);     /* not the range */
    FAILS(cuMemUnmap(va, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);           /* not whole mappings */
    CUipcMemHandle ipc;
    FAILS(cuIpcGetMemHandle(&ipc, va + GRAN), CUDA_ERROR_INVALID_VALUE); /* as NVIDIA's */
    int fd;
    FAILS(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0), CUDA_ERROR_INVALID_VALUE); /* NONE */
    OK(cuMemUnmap(va + GRAN, GRAN));
    OK(cuMemRelease(h));
    FAILS(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE); /* double release */
    FAILS(cuMemMap(va, GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemAddressFree(va, 4 * GRAN));
    FAILS(cuMemAddressFree(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE);
}

/* The legacy-IPC refusal through the runtime's spelling of the call: the
 * pointer is mapped, accessible and copyable, and still not exportable. */
Test(simvmm, legacy_ipc_refused)
{
    OK(init0());
    CUmemAllocationProp prop = prop_of(POSIX_FD);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    OK(cuMemCreate(&h, GRAN, &prop, 0));
    OK(reserve_map(h, GRAN, &va));
    OK(cuMemsetD8(va, 1, 16));
    CUipcMemHandle ipc;
    FAILS(cuIpcGetMemHandle(&ipc, va), CUDA_ERROR_INVALID_VALUE);
    FAILS(cuIpcGetMemHandle(&ipc, va + 4096), CUDA_ERROR_INVALID_VALUE);
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, GRAN));
}

/* A retained handle is the created one with one more reference: the memory
 * stays while either the reference or the mapping is left. */
Test(simvmm, retain_and_release_order)
{
    OK(init0());
    size_t before = used_bytes();
    CUmemAllocationProp prop = prop_of(0);
    CUmemGenericAllocationHandle h, h2;
    CUdeviceptr va;
    OK(cuMemCreate(&h, GRAN, &prop, 0));
    OK(reserve_map(h, GRAN, &va));
    OK(cuMemsetD32(va, PATTERN, GRAN / 4));
    OK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + 64)));
    cr_assert_eq(h2, h);
    FAILS(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + GRAN)),
          CUDA_ERROR_INVALID_VALUE);
    OK(cuMemRelease(h));
    OK(cuMemRelease(h)); /* the retained reference */
    FAILS(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
    /* Released but mapped: still there, still charged (docs: cuMemRelease). */
    cr_assert_eq(word_at(va + 128), PATTERN);
    cr_assert_eq(used_bytes(), before + GRAN);
    OK(cuMemUnmap(va, GRAN));
    cr_assert_eq(used_bytes(), before);
    OK(cuMemAddressFree(va, GRAN));
}

Test(simvmm, injected_shareable_refusal)
{
    OK(init0());
    simcuda_inject(SIMCUDA_FAULT_VMM_SHAREABLE, 1);
    CUmemAllocationProp plain = prop_of(0), shareable = prop_of(POSIX_FD);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, GRAN, &plain, 0)); /* not counted: asks for no handle type */
    OK(cuMemRelease(h));
    FAILS(cuMemCreate(&h, GRAN, &shareable, 0), CUDA_ERROR_NOT_SUPPORTED);
    OK(cuMemCreate(&h, GRAN, &shareable, 0));
    OK(cuMemRelease(h));
}

Test(simvmm, resolver_knows_the_vmm_calls)
{
    OK(cuInit(0));
    const char *names[] = {"cuMemCreate",
                           "cuMemRelease",
                           "cuMemAddressReserve",
                           "cuMemAddressFree",
                           "cuMemMap",
                           "cuMemUnmap",
                           "cuMemSetAccess",
                           "cuMemGetAccess",
                           "cuMemRetainAllocationHandle",
                           "cuMemGetAllocationGranularity",
                           "cuMemGetAllocationPropertiesFromHandle",
                           "cuMemExportToShareableHandle",
                           "cuMemImportFromShareableHandle"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult q;
        OK(cuGetProcAddress(names[i], &fn, 12000, 0, &q));
        cr_assert_not_null(fn, "%s", names[i]);
    }
    void *fn = NULL;
    CUdriverProcAddressQueryResult q;
    OK(cuGetProcAddress("cuMemCreate", &fn, 12000, 0, &q));
    cr_assert_eq(fn, (void *)&cuMemCreate);
}

/* ---- two processes ---- */

static int send_fd(int sock, int fd, CUdeviceptr info)
{
    char ctl[CMSG_SPACE(sizeof(int))];
    memset(ctl, 0, sizeof(ctl));
    struct iovec iov = {.iov_base = &info, .iov_len = sizeof(info)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &m, 0) == (ssize_t)sizeof(info) ? 0 : -1;
}

static int recv_fd(int sock)
{
    CUdeviceptr info;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &info, .iov_len = sizeof(info)};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    if (recvmsg(sock, &m, 0) != (ssize_t)sizeof(info)) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    int fd = -1;
    if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

static int step_send(int sock, char c)
{
    return write(sock, &c, 1) == 1 ? 0 : -1;
}

static char step_recv(int sock)
{
    char c = 0;
    return read(sock, &c, 1) == 1 ? c : 0;
}

/* The importer: receives the fd, imports, closes the fd, maps, checks the
 * exporter's pattern and writes REPLY at word 1, then follows the script:
 * 'r' read word 0 back and report it (a byte: 1 = still PATTERN), 'u'
 * unmap and release and answer, 'd' die without cleaning up. */
static int importer(int sock)
{
    CHILD_OK(init0());
    int fd = recv_fd(sock);
    CHILD_EXPECT(fd >= 0);
    CUmemGenericAllocationHandle h;
    CHILD_OK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, POSIX_FD));
    close(fd);
    CUdeviceptr va;
    CHILD_OK(reserve_map(h, GRAN, &va));
    CHILD_EXPECT(word_at(va) == PATTERN);
    uint32_t reply = REPLY;
    CHILD_OK(cuMemcpyHtoD(va + 4, &reply, 4));
    CHILD_EXPECT(step_send(sock, 'm') == 0);
    for (;;) {
        char c = step_recv(sock);
        if (c == 'r') {
            CHILD_EXPECT(step_send(sock, word_at(va) == PATTERN ? 1 : 2) == 0);
        } else if (c == 'u') {
            CHILD_OK(cuMemUnmap(va, GRAN));
            CHILD_OK(cuMemRelease(h));
            CHILD_OK(cuMemAddressFree(va, GRAN));
            CHILD_EXPECT(step_send(sock, 'u') == 0);
        } else if (c == 'd') {
            _exit(0); /* no destructor: its hold is left to the sweep */
        } else {
            return 0;
        }
    }
}

static pid_t importer_start(int *sock)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(sv[0]);
        _exit(importer(sv[1]));
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}

static void importer_wait(pid_t pid, int sock)
{
    close(sock);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "importer failed (status %d)", st);
}

/* Creates a shareable allocation, maps it, fills it with PATTERN, exports
 * it and sends the fd to the importer on sock (closing our copy). */
static CUmemGenericAllocationHandle export_to(int sock, CUdeviceptr *va)
{
    CUmemAllocationProp prop = prop_of(POSIX_FD);
    CUmemGenericAllocationHandle h;
    OK(cuMemCreate(&h, GRAN, &prop, 0));
    OK(reserve_map(h, GRAN, va));
    OK(cuMemsetD32(*va, PATTERN, GRAN / 4));
    int fd = -1;
    OK(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0));
    cr_assert_geq(fd, 0);
    cr_assert_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    cr_assert_eq(send_fd(sock, fd, *va), 0);
    close(fd);
    return h;
}

Test(simvmm, two_processes_share_bytes_and_lifetime)
{
    OK(init0());
    size_t before = used_bytes();
    int sock;
    pid_t pid = importer_start(&sock);
    CUdeviceptr va;
    CUmemGenericAllocationHandle h = export_to(sock, &va);
    cr_assert_eq(step_recv(sock), 'm');
    cr_assert_eq(word_at(va + 4), REPLY, "the importer's write shows in the exporter");
    /* The exporter lets go of everything: the importer's mapping keeps it. */
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, GRAN));
    cr_assert_eq(used_bytes(), before + GRAN, "charged while the importer maps it");
    cr_assert_eq(step_send(sock, 'r'), 0);
    cr_assert_eq(step_recv(sock), 1, "the importer still reads the exporter's bytes");
    cr_assert_eq(step_send(sock, 'u'), 0);
    cr_assert_eq(step_recv(sock), 'u');
    cr_assert_eq(used_bytes(), before, "the last hold's release frees it");
    importer_wait(pid, sock);
}

Test(simvmm, importer_death_frees_its_share)
{
    OK(init0());
    size_t before = used_bytes();
    int sock;
    pid_t pid = importer_start(&sock);
    CUdeviceptr va;
    CUmemGenericAllocationHandle h = export_to(sock, &va);
    cr_assert_eq(step_recv(sock), 'm');
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemRelease(h));
    OK(cuMemAddressFree(va, GRAN));
    cr_assert_eq(step_send(sock, 'd'), 0);
    importer_wait(pid, sock);
    cr_assert_eq(used_bytes(), before, "the dead importer's hold was swept");
}

/* NVIDIA: the memory lives while a shareable handle (an exported fd) is
 * open, with no handle and no mapping left; importing it then still works. */
Test(simvmm, open_fd_keeps_memory)
{
    OK(init0());
    size_t before = used_bytes();
    CUmemAllocationProp prop = prop_of(POSIX_FD);
    CUmemGenericAllocationHandle h, h2;
    CUdeviceptr va;
    OK(cuMemCreate(&h, GRAN, &prop, 0));
    OK(reserve_map(h, GRAN, &va));
    OK(cuMemsetD32(va, PATTERN, GRAN / 4));
    int fd = -1;
    OK(cuMemExportToShareableHandle(&fd, h, POSIX_FD, 0));
    int fd2 = dup(fd); /* the same description: the same export */
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemRelease(h));
    close(fd);
    cr_assert_eq(used_bytes(), before + GRAN, "an open exported fd keeps it");
    OK(cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)fd2, POSIX_FD));
    OK(cuMemMap(va, GRAN, 0, h2, 0));
    CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    OK(cuMemSetAccess(va, GRAN, &d, 1));
    cr_assert_eq(word_at(va + 256), PATTERN, "the bytes survived");
    OK(cuMemUnmap(va, GRAN));
    OK(cuMemRelease(h2));
    cr_assert_eq(used_bytes(), before + GRAN, "fd2 is still open");
    /* Keep the record to forge an import of the released allocation. */
    char rec[64];
    off_t at = lseek(fd2, 0, SEEK_CUR);
    ssize_t n = pread(fd2, rec, sizeof(rec), at);
    cr_assert_gt(n, 0);
    char name[256];
    snprintf(name, sizeof name, "/proc/self/fd/%d", fd2);
    int again = open(name, O_RDONLY); /* a new description of the same file */
    close(fd2);
    cr_assert_eq(used_bytes(), before, "the last fd's close lets it go");
    cr_assert_geq(again, 0);
    cr_assert_eq(lseek(again, at, SEEK_SET), at);
    FAILS(cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)again, POSIX_FD),
          CUDA_ERROR_INVALID_VALUE);
    close(again);
    int copy = memfd_create("forged", 0);
    cr_assert_eq(pwrite(copy, rec, (size_t)n, at), n);
    cr_assert_eq(lseek(copy, at, SEEK_SET), at);
    FAILS(cuMemImportFromShareableHandle(&h2, (void *)(uintptr_t)copy, POSIX_FD),
          CUDA_ERROR_INVALID_VALUE);
    close(copy);
    OK(cuMemAddressFree(va, GRAN));
}

/* NVIDIA's driver hands out every exported fd as a new open of
 * /dev/nvidiactl (the H200, issue 46): one inode for every allocation, the
 * allocation found from the open file description. So here: two
 * allocations' fds are one file, each export is a description of its own,
 * and each imports its own allocation. */
Test(simvmm, fds_are_descriptions_of_one_file)
{
    OK(init0());
    CUmemAllocationProp prop = prop_of(POSIX_FD);
    CUmemGenericAllocationHandle h[2], back[2];
    CUdeviceptr va[2];
    int fd[3];
    for (int i = 0; i < 2; i++) {
        OK(cuMemCreate(&h[i], GRAN, &prop, 0));
        OK(reserve_map(h[i], GRAN, &va[i]));
        OK(cuMemsetD32(va[i], PATTERN + (unsigned)i, GRAN / 4));
        OK(cuMemExportToShareableHandle(&fd[i], h[i], POSIX_FD, 0));
    }
    OK(cuMemExportToShareableHandle(&fd[2], h[0], POSIX_FD, 0));
    struct stat st[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(fstat(fd[i], &st[i]), 0);
    cr_expect(st[0].st_dev == st[1].st_dev && st[0].st_ino == st[1].st_ino,
              "two allocations' fds: one file");
    cr_expect(st[0].st_ino == st[2].st_ino, "a second export: the same file");
    /* A description of its own per export: an OFD lock taken through one
     * conflicts with the other's (a lock never conflicts with its own
     * description's). */
    struct flock l = {.l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 1ll << 40, .l_len = 1};
    cr_assert_eq(fcntl(fd[0], F_OFD_SETLK, &l), 0);
    l.l_type = F_WRLCK;
    cr_assert_eq(fcntl(fd[2], F_OFD_GETLK, &l), 0);
    cr_expect_neq(l.l_type, F_UNLCK, "the second export is a new description");
    l = (struct flock){.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 1ll << 40, .l_len = 1};
    cr_assert_eq(fcntl(fd[0], F_OFD_SETLK, &l), 0);
    for (int i = 0; i < 2; i++) {
        OK(cuMemUnmap(va[i], GRAN));
        OK(cuMemRelease(h[i]));
    }
    for (int i = 0; i < 2; i++) {
        OK(cuMemImportFromShareableHandle(&back[i], (void *)(uintptr_t)fd[i], POSIX_FD));
        OK(cuMemMap(va[i], GRAN, 0, back[i], 0));
        CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        OK(cuMemSetAccess(va[i], GRAN, &d, 1));
        cr_expect_eq(word_at(va[i]), PATTERN + (unsigned)i, "fd %d names its own allocation", i);
    }
    cr_expect_neq(back[0], back[1]);
    for (int i = 0; i < 2; i++) {
        OK(cuMemUnmap(va[i], GRAN));
        OK(cuMemRelease(back[i]));
        OK(cuMemAddressFree(va[i], GRAN));
    }
    for (int i = 0; i < 3; i++)
        close(fd[i]);
}

Test(simvmm, forged_fds_refused)
{
    OK(init0());
    CUmemGenericAllocationHandle h;
    int devnull = open("/dev/null", O_RDONLY);
    FAILS(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)devnull, POSIX_FD),
          CUDA_ERROR_INVALID_VALUE);
    close(devnull);
    int p[2];
    cr_assert_eq(pipe(p), 0);
    FAILS(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)p[0], POSIX_FD),
          CUDA_ERROR_INVALID_VALUE); /* refused without blocking */
    close(p[0]);
    close(p[1]);
    int junk = memfd_create("junk", 0);
    char zeros[48] = {0};
    cr_assert_eq(write(junk, zeros, sizeof(zeros)), (ssize_t)sizeof(zeros));
    FAILS(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)junk, POSIX_FD),
          CUDA_ERROR_INVALID_VALUE);
    close(junk);
    FAILS(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)999, POSIX_FD),
          CUDA_ERROR_INVALID_VALUE); /* not open */
    FAILS(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)0, CU_MEM_HANDLE_TYPE_FABRIC),
          CUDA_ERROR_NOT_SUPPORTED);
}
