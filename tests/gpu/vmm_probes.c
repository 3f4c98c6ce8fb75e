/* vmm_probes: what the CUDA driver and the kernel do with VMM memory
 * (cuMemCreate + cuMemMap) shared through POSIX fds, in the cases the
 * shim's VMM support (shim/vmm.c, shim/fdpass.c) rests on. Measured without
 * the shim unless scripts/gpu-check runs it under it. Each answer is a
 * finding to record in docs/gpu-validation.md, not a pass or a fail (the
 * first ones: the 2026-11-26 H200, whose VMM fds are all /dev/nvidiactl).
 * Prints "probe vmm-NAME: RESULT" lines:
 *
 *   vmm-fd-inode        two cuMemExportToShareableHandle of one allocation,
 *                       one of them after a trip through SCM_RIGHTS, and
 *                       another allocation's: the same inode (st_dev,
 *                       st_ino)? the file's mode and what it links to
 *   vmm-exporter-killed the exporter SIGKILLed while an importer maps the
 *                       allocation: does the importer still read the data,
 *                       and which pids does nvidia-smi charge before and
 *                       after?
 *   vmm-pidfd-nondumpable  pidfd_getfd of an exported fd in a non-dumpable
 *                       exporter, from a sibling of the same user: the
 *                       kernel's answer (errno), and the uid it ran as
 *
 * The coordinator (main) never calls CUDA: each probe's exporter and
 * importer are forked children (CUDA starts in each), talking over
 * socketpairs; every child is SIGALRMed after CHILD_S seconds. */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (2u << 20)
#define CHILD_S 60

static unsigned word(size_t i)
{
    return (unsigned)(0x5a000000u + i);
}

static int send_fd(int sock, int fd, const char *text)
{
    char ctl[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec io = {.iov_base = (void *)text, .iov_len = strlen(text) + 1};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1};
    if (fd >= 0) {
        m.msg_control = ctl, m.msg_controllen = sizeof ctl;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &m, 0) < 0 ? -1 : 0;
}

static int recv_fd(int sock, char *text, size_t len, int *fd)
{
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec io = {.iov_base = text, .iov_len = len - 1};
    struct msghdr m = {
        .msg_iov = &io, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    ssize_t n = recvmsg(sock, &m, 0);
    if (n <= 0) return -1;
    text[n] = 0;
    *fd = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
    return 0;
}

/* A context, an allocation with a POSIX fd handle type, mapped and written. */
static CUresult make(CUmemGenericAllocationHandle *mem, CUdeviceptr *va)
{
    CUdevice dev;
    CUcontext ctx;
    CUresult r = cuInit(0);
    if (!r) r = cuDeviceGet(&dev, 0);
    if (!r) r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (!r) r = cuCtxSetCurrent(ctx);
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    if (!r) r = cuMemCreate(mem, BYTES, &prop, 0);
    if (!r) r = cuMemAddressReserve(va, BYTES, 0, 0, 0);
    if (!r) r = cuMemMap(*va, BYTES, 0, *mem, 0);
    CUmemAccessDesc a = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!r) r = cuMemSetAccess(*va, BYTES, &a, 1);
    static unsigned host[BYTES / 4];
    for (size_t i = 0; i < BYTES / 4; i++)
        host[i] = word(i);
    if (!r) r = cuMemcpyHtoD(*va, host, BYTES);
    return r;
}

static void probe_fd_inode(void)
{
    int sv[2];
    pid_t pid;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) || (pid = fork()) < 0) {
        printf("probe vmm-fd-inode: not run (socketpair/fork)\n");
        return;
    }
    if (pid == 0) {
        alarm(CHILD_S);
        CUmemGenericAllocationHandle mem;
        CUdeviceptr va;
        int a = -1, b = -1, c = -1;
        char text[64];
        CUresult r = make(&mem, &va);
        if (!r)
            r = cuMemExportToShareableHandle(&a, mem, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (!r)
            r = cuMemExportToShareableHandle(&b, mem, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r) {
            printf("probe vmm-fd-inode: not run (CUresult %d)\n", r);
            _exit(0);
        }
        send_fd(sv[0], a, "fd");
        recv_fd(sv[1], text, sizeof text, &c);
        /* A second allocation's export: a file identity names one
         * allocation only if this one differs (an anonymous inode is
         * shared by every file of its kind). */
        CUmemGenericAllocationHandle mem2;
        CUdeviceptr va2;
        int d = -1;
        if (make(&mem2, &va2) ||
            cuMemExportToShareableHandle(&d, mem2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))
            d = -1;
        struct stat sa, sb, sc, sd;
        memset(&sd, 0, sizeof sd);
        fstat(a, &sa), fstat(b, &sb), fstat(c, &sc);
        if (d >= 0) fstat(d, &sd);
        char link[128] = "?", path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", a);
        ssize_t n = readlink(path, link, sizeof link - 1);
        link[n > 0 ? n : 1] = 0;
        printf("probe vmm-fd-inode: two exports: %s (%lu:%lu, %lu:%lu); after SCM_RIGHTS: %s; "
               "another allocation: %s (%lu:%lu); mode %#o, %s; fds %d %d\n",
               sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino ? "same inode" : "different inodes",
               (unsigned long)sa.st_dev, (unsigned long)sa.st_ino, (unsigned long)sb.st_dev,
               (unsigned long)sb.st_ino,
               sa.st_dev == sc.st_dev && sa.st_ino == sc.st_ino ? "same inode" : "different inode",
               d < 0                                              ? "not exported"
               : sa.st_dev == sd.st_dev && sa.st_ino == sd.st_ino ? "same inode"
                                                                  : "different inode",
               (unsigned long)sd.st_dev, (unsigned long)sd.st_ino, (unsigned)sa.st_mode, link, a,
               b);
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    close(sv[0]), close(sv[1]);
}

static void charged(const char *when)
{
    char line[256];
    FILE *p =
        popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader 2>&1", "r");
    printf("probe vmm-exporter-killed: nvidia-smi %s:", when);
    while (p && fgets(line, sizeof line, p))
        line[strcspn(line, "\n")] = 0, printf(" [%s]", line);
    printf("\n");
    if (p) pclose(p);
}

/* The importer: takes the fd, imports, maps, reads; "read" again on each
 * line the coordinator sends. */
static void importer(int sock)
{
    alarm(CHILD_S);
    char text[64];
    int fd = -1;
    CUdevice dev;
    CUcontext ctx;
    CUmemGenericAllocationHandle mem;
    CUdeviceptr va = 0;
    if (recv_fd(sock, text, sizeof text, &fd) || fd < 0) _exit(1);
    CUresult r = cuInit(0);
    if (!r) r = cuDeviceGet(&dev, 0);
    if (!r) r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (!r) r = cuCtxSetCurrent(ctx);
    if (!r)
        r = cuMemImportFromShareableHandle(&mem, (void *)(uintptr_t)fd,
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (!r) r = cuMemAddressReserve(&va, BYTES, 0, 0, 0);
    if (!r) r = cuMemMap(va, BYTES, 0, mem, 0);
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!r) r = cuMemSetAccess(va, BYTES, &a, 1);
    for (;;) {
        unsigned got = 0;
        CUresult rr = r ? r : cuMemcpyDtoH(&got, va + 4096, sizeof got);
        snprintf(text, sizeof text, "%s %d", !rr && got == word(1024) ? "data" : "no-data", rr);
        send_fd(sock, -1, text);
        if (recv(sock, text, sizeof text, 0) <= 0) _exit(0);
    }
}

static void probe_exporter_killed(void)
{
    int e[2], i[2], fd = -1;
    char text[64];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, e) || socketpair(AF_UNIX, SOCK_SEQPACKET, 0, i))
        return;
    pid_t ex = fork();
    if (ex == 0) {
        alarm(CHILD_S);
        CUmemGenericAllocationHandle mem;
        CUdeviceptr va;
        int out = -1;
        CUresult r = make(&mem, &va);
        if (!r)
            r = cuMemExportToShareableHandle(&out, mem, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                             0);
        snprintf(text, sizeof text, "%d", r);
        send_fd(e[1], r ? -1 : out, text);
        pause();
        _exit(0);
    }
    if (recv_fd(e[0], text, sizeof text, &fd) || fd < 0) {
        printf("probe vmm-exporter-killed: not run (exporter: %s)\n", text);
        kill(ex, SIGKILL), waitpid(ex, NULL, 0);
        return;
    }
    pid_t im = fork();
    if (im == 0) close(i[0]), close(e[0]), importer(i[1]);
    close(i[1]); /* the importer sees the end when i[0] closes */
    send_fd(i[0], fd, "fd");
    close(fd);
    recv(i[0], text, sizeof text, 0);
    printf("probe vmm-exporter-killed: importer before the kill: %s\n", text);
    charged("before the kill (exporter pid and importer pid follow)");
    printf("probe vmm-exporter-killed: exporter %d, importer %d\n", (int)ex, (int)im);
    kill(ex, SIGKILL), waitpid(ex, NULL, 0);
    usleep(500000);
    send(i[0], "read", 5, 0);
    if (recv(i[0], text, sizeof text, 0) <= 0) snprintf(text, sizeof text, "no answer");
    printf("probe vmm-exporter-killed: importer after the kill: %s\n", text);
    charged("after the kill");
    close(i[0]);
    waitpid(im, NULL, 0);
    close(e[0]), close(e[1]);
    charged("after the importer exited");
}

static void probe_pidfd_nondumpable(void)
{
    int e[2], fd = -1;
    char text[64];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, e)) return;
    pid_t ex = fork();
    if (ex == 0) {
        alarm(CHILD_S);
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        CUmemGenericAllocationHandle mem;
        CUdeviceptr va;
        int out = -1;
        CUresult r = make(&mem, &va);
        if (!r)
            r = cuMemExportToShareableHandle(&out, mem, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                             0);
        snprintf(text, sizeof text, "%d %d", r, out);
        send_fd(e[1], -1, text);
        pause();
        _exit(0);
    }
    int r = -1, number = -1;
    if (recv_fd(e[0], text, sizeof text, &fd) || sscanf(text, "%d %d", &r, &number) != 2 || r) {
        printf("probe vmm-pidfd-nondumpable: not run (exporter: %s)\n", text);
    } else {
        pid_t sib = fork();
        if (sib == 0) {
            int pidfd = (int)syscall(SYS_pidfd_open, ex, 0);
            int err_open = pidfd < 0 ? errno : 0;
            int got = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, number, 0);
            int err_get = got < 0 ? errno : 0;
            printf("probe vmm-pidfd-nondumpable: as uid %u: pidfd_open %s, pidfd_getfd %s\n",
                   (unsigned)getuid(), err_open ? strerror(err_open) : "ok",
                   pidfd < 0 ? "not tried"
                   : err_get ? strerror(err_get)
                             : "ok (fd received)");
            fflush(stdout);
            _exit(0);
        }
        waitpid(sib, NULL, 0);
    }
    kill(ex, SIGKILL), waitpid(ex, NULL, 0);
    close(e[0]), close(e[1]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    probe_fd_inode();
    probe_exporter_killed();
    probe_pidfd_nondumpable();
    return 0;
}
