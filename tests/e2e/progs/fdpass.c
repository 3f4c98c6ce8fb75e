/* fdpass: the fd hand-off of PyTorch's VMM IPC, UCX and torchcomms
 * (pidfd_open + pidfd_getfd on the exporter's pid), between two unrelated
 * processes; the test (test_fdpass.c) runs them as unprivileged users. The
 * program knows nothing of the shim.
 *
 *   fdpass export [--plain]
 *     makes an IPC pool (POSIX fd handles), writes a pattern into a block
 *     from it, exports the pool fd and the block, makes itself
 *     non-dumpable, prints "pid: P", "fd: F", "file: G" (a regular file it
 *     has open, never exported) and "data: HEX" (the block's export data),
 *     then waits until its stdin closes. --plain: stays dumpable. --vmm:
 *     the memory comes from cuMemCreate + cuMemMap instead, the fd from
 *     cuMemExportToShareableHandle, and the data is "vmm".
 *   fdpass import PID FD HEX [--libc] [--seccomp] [--no-read]
 *     pidfd_open + pidfd_getfd (through syscall(2), or glibc's wrappers
 *     with --libc; --seccomp first installs a filter that answers ENOSYS
 *     for both, as an old kernel would); prints "pidfd_open: ok|ERRNO",
 *     "getfd: ok|ERRNO", and when it got an fd and HEX is not "-", imports
 *     the pool and the block and prints "read: ok|wrong|error CODE". HEX
 *     "vmm": cuMemImportFromShareableHandle, reserve, map, set access, read
 *     (as PyTorch's expandable segments do), then "held: yes"; it waits for
 *     a byte on stdin (or its end), unmaps and releases, prints "released:
 *     yes" and waits for stdin's end. --leak: exits holding the import.
 *   fdpass raw UID PID FD
 *     the hostile client: connects straight to the fd server's socket of
 *     user UID (IPCSHIM_DOMAIN's domain) for process PID, asks for FD, and
 *     prints "raw: connect ERRNO" or "raw: reply ERR fds N". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#if __has_include(<sys/pidfd.h>)
#include <sys/pidfd.h> /* glibc 2.36: pidfd_open, pidfd_getfd (--libc) */
#else
int pidfd_open(pid_t pid, unsigned int flags);
int pidfd_getfd(int pidfd, int targetfd, unsigned int flags);
#endif

#define SIZE (1 << 16)

static uint32_t word(size_t i)
{
    return 0xC0DE0000u ^ (uint32_t)(i * 2654435761u);
}

static const char *err_name(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "?";
}

#define VMM_SIZE (2u << 20)

/* One VMM allocation of VMM_SIZE on device 0, mapped readable and writable
 * at *va (the current context's device). 0 or the first CUresult. */
static int vmm_map(CUmemGenericAllocationHandle h, CUdeviceptr *va)
{
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    int r = cuMemAddressReserve(va, VMM_SIZE, 0, 0, 0);
    if (!r) r = cuMemMap(*va, VMM_SIZE, 0, h, 0);
    if (!r) r = cuMemSetAccess(*va, VMM_SIZE, &access, 1);
    return r;
}

/* The exporter's memory from the VMM API, the pattern in it; its fd. */
static int vmm_export(void)
{
    static uint32_t host[SIZE / 4];
    for (size_t i = 0; i < SIZE / 4; i++)
        host[i] = word(i);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    int fd = -1;
    int r = cuMemCreate(&h, VMM_SIZE, &prop, 0);
    if (!r) r = vmm_map(h, &va);
    if (!r) r = cuMemcpyHtoD(va, host, SIZE);
    if (!r) r = cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r) printf("export: error %d\n", r);
    return r ? -1 : fd;
}

static int exporter(int argc, char **argv)
{
    int plain = argc > 2 && !strcmp(argv[2], "--plain");
    int vmm = argc > 2 && !strcmp(argv[2], "--vmm");
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 2;
    if (vmm) {
        int fd = vmm_export(), file = open(argv[0], O_RDONLY);
        if (fd < 0 || prctl(PR_SET_DUMPABLE, 0) != 0) return 2;
        printf("pid: %d\nfd: %d\nfile: %d\ndata: vmm\n", (int)getpid(), fd, file);
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0)
            ;
        return 0;
    }
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    void *p = NULL;
    static uint32_t host[SIZE / 4];
    for (size_t i = 0; i < SIZE / 4; i++)
        host[i] = word(i);
    struct cudaMemPoolPtrExportData data;
    int fd = -1;
    int r = cudaMemPoolCreate(&pool, &props);
    /* The pool before its pointer: NVIDIA's driver refuses the other order. */
    if (!r)
        r = cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
    if (!r) r = cudaMallocFromPoolAsync(&p, SIZE, pool, 0);
    if (!r) r = cudaMemcpy(p, host, SIZE, cudaMemcpyHostToDevice);
    if (!r) r = cudaMemPoolExportPointer(&data, p);
    if (r) {
        printf("export: error %d\n", r);
        return 2;
    }
    int file = open(argv[0], O_RDONLY);
    if (!plain && prctl(PR_SET_DUMPABLE, 0) != 0) return 2;
    printf("pid: %d\nfd: %d\nfile: %d\ndata: ", (int)getpid(), fd, file);
    for (size_t i = 0; i < sizeof data; i++)
        printf("%02x", ((unsigned char *)&data)[i]);
    printf("\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return 0;
}

/* Old kernels, as a seccomp filter: pidfd_open and pidfd_getfd fail with
 * ENOSYS, everything else runs. */
static int deny_pidfd(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_getfd, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
    };
    struct sock_fprog prog = {sizeof f / sizeof *f, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* The importer's side of --vmm (see the top). */
static int read_vmm(int fd, bool leak)
{
    static uint32_t host[SIZE / 4];
    CUmemGenericAllocationHandle h;
    CUdeviceptr va = 0;
    int r = cudaSetDevice(0) || cudaFree(NULL);
    if (!r)
        r = cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (!r) r = vmm_map(h, &va);
    if (!r) r = cuMemcpyDtoH(host, va, SIZE);
    if (r) {
        printf("read: error %d\n", r);
        return 2;
    }
    int ok = 1;
    for (size_t i = 0; i < SIZE / 4; i++)
        ok &= host[i] == word(i);
    printf("read: %s\nheld: yes\n", ok ? "ok" : "wrong");
    fflush(stdout);
    if (leak) return ok ? 0 : 1;
    char c;
    (void)!read(0, &c, 1);
    r = cuMemUnmap(va, VMM_SIZE);
    if (!r) r = cuMemRelease(h);
    if (!r) r = cuMemAddressFree(va, VMM_SIZE);
    printf("released: %s\n", r ? "error" : "yes");
    fflush(stdout);
    while (read(0, &c, 1) > 0)
        ;
    return ok && !r ? 0 : 1;
}

static int read_block(int fd, const char *hex)
{
    struct cudaMemPoolPtrExportData data;
    for (size_t i = 0; i < sizeof data; i++)
        if (sscanf(hex + 2 * i, "%2hhx", &((unsigned char *)&data)[i]) != 1) return 2;
    cudaMemPool_t pool;
    void *p = NULL;
    static uint32_t host[SIZE / 4];
    int r = cudaSetDevice(0);
    if (!r)
        r = cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                                 cudaMemHandleTypePosixFileDescriptor, 0);
    if (!r) r = cudaMemPoolImportPointer(&p, pool, &data);
    if (!r) r = cudaMemcpy(host, p, SIZE, cudaMemcpyDeviceToHost);
    if (r) {
        printf("read: error %d\n", r);
        return 2;
    }
    int ok = 1;
    for (size_t i = 0; i < SIZE / 4; i++)
        ok &= host[i] == word(i);
    printf("read: %s\n", ok ? "ok" : "wrong");
    cudaFree(p);
    return ok ? 0 : 1;
}

static int importer(int argc, char **argv)
{
    if (argc < 5) return 2;
    pid_t pid = atoi(argv[2]);
    int target = atoi(argv[3]), libc = 0, seccomp = 0, leak = 0;
    for (int i = 5; i < argc; i++) {
        leak |= !strcmp(argv[i], "--leak");
        libc |= !strcmp(argv[i], "--libc");
        seccomp |= !strcmp(argv[i], "--seccomp");
    }
    if (seccomp && deny_pidfd() != 0) {
        printf("seccomp: %s\n", err_name(errno));
        return 2;
    }
    int pidfd = libc ? pidfd_open(pid, 0) : (int)syscall(SYS_pidfd_open, pid, 0);
    printf("pidfd_open: %s\n", pidfd >= 0 ? "ok" : err_name(errno));
    if (pidfd < 0) return 0;
    int fd = libc ? pidfd_getfd(pidfd, target, 0) : (int)syscall(SYS_pidfd_getfd, pidfd, target, 0);
    printf("getfd: %s\n", fd >= 0 ? "ok" : err_name(errno));
    if (fd >= 0) printf("cloexec: %s\n", fcntl(fd, F_GETFD) & FD_CLOEXEC ? "yes" : "no");
    fflush(stdout);
    if (fd < 0 || !strcmp(argv[4], "-")) return 0;
    if (!strcmp(argv[4], "vmm")) return read_vmm(fd, leak);
    return read_block(fd, argv[4]);
}

/* The fd server's wire format (shim/fdpass.c), written out on purpose: this
 * client is the attacker, not the shim. */
struct request {
    uint32_t magic;
    int32_t fd;
    char domain[65];
};

static int raw(int argc, char **argv)
{
    if (argc < 5) return 2;
    const char *domain = getenv("IPCSHIM_DOMAIN");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ipcshim-%s-%s.fdpass.%s", argv[2],
                     domain ? domain : "default", argv[3]);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(s, (struct sockaddr *)&a,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n))) {
        printf("raw: connect %s\n", err_name(errno));
        return 0;
    }
    struct request req = {0x46445031u, atoi(argv[4]), ""};
    snprintf(req.domain, sizeof req.domain, "%s", domain ? domain : "default");
    int32_t err = -1;
    char ctl[CMSG_SPACE(4 * sizeof(int))];
    struct iovec iov = {&err, sizeof err};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    if (send(s, &req, sizeof req, 0) != (ssize_t)sizeof req || recvmsg(s, &m, 0) < 0) {
        printf("raw: io %s\n", err_name(errno));
        return 0;
    }
    int fds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS) fds += (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    printf("raw: reply %s fds %d\n", err ? err_name(err) : "0", fds);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "export")) return exporter(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "import")) return importer(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "raw")) return raw(argc, argv);
    fprintf(stderr, "usage: fdpass export|import|raw ...\n");
    return 2;
}
