/* pool_probes: what the CUDA driver itself does with stream-ordered pool IPC
 * (cudaMemPoolExportToShareableHandle / cudaMemPoolImportFromShareableHandle,
 * cudaMemPoolExportPointer / cudaMemPoolImportPointer) in the cases NVIDIA
 * leaves undefined: its one rule is "the imported memory must be freed from
 * all importing processes before being freed in the exporting process".
 * Measured without the shim. Run by scripts/gpu-check on a real GPU, and on
 * the simulator in CI so that it cannot rot (its answers there describe the
 * simulator, not a GPU). Prints "probe pool-NAME: RESULT" lines:
 *
 *   pool-free-while-imported       the exporter's cudaFree while imported:
 *                                  its code, what the importer reads, free
 *                                  device memory as each side sees it before
 *                                  and after the importer's free
 *   pool-freeasync-while-imported  the same with cudaFreeAsync
 *   pool-import-after-free         the import of a pointer freed first
 *   pool-exporter-killed           the exporter SIGKILLed while imported
 *   pool-destroy-while-imported    cudaFree, then cudaMemPoolDestroy, while
 *                                  imported (as pool_ipc --destroy-pool)
 *   pool-destroy-unfreed-while-imported  cudaMemPoolDestroy alone, the
 *                                  exporter's allocation still live
 *   pool-import-pool-twice         one pool imported again from the same fd
 *                                  and from a second fd: the same handle?
 *   pool-import-pointer-twice      one pointer imported twice: the same
 *                                  pointer? how many frees?
 *   pool-reclaim-in-order          NVIDIA's rule kept (importer frees first):
 *                                  device memory back after each step, to
 *                                  the exporter's pool's destruction
 *   pool-export-order              cudaMemPoolExportPointer's code before
 *                                  and after the pool's own export, for a
 *                                  pool made by the runtime and one made by
 *                                  the driver (the first H200 run refused
 *                                  every pointer exported before its pool)
 *
 * The coordinator (main) never calls CUDA: it forks an exporter and an
 * importer for each probe (CUDA starts in each child), talks to each over
 * a SOCK_SEQPACKET socketpair (one command, one answer), and relays the
 * pool's fd from one to the other by SCM_RIGHTS, as a real program would.
 * Every wait is bounded: an answer that takes longer than ASK_MS is a
 * result ("no answer (timed out ...)") and its child is SIGKILLed; a child
 * exits when its coordinator is silent for IDLE_MS or dies (PDEATHSIG), and
 * is SIGALRMed after CHILD_S seconds whatever it does. One allocation of
 * BYTES at a time. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../e2e/progs/hex.h"

#define BYTES (2u << 20)
#define POISON 0xDEADBEEFu
#define ASK_MS 30000  /* the longest the coordinator waits for one answer */
#define IDLE_MS 60000 /* the longest a child waits for its next command */
#define CHILD_S 120   /* a child's whole life, at most */
#define MAX_IMPORTS 8

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static unsigned word(size_t i)
{
    return (unsigned)(i * 2654435761u) ^ 0xa5a5a5a5u;
}

static const char *name(int r)
{
    return cudaGetErrorName((cudaError_t)r);
}

/* ---- messages: one text per packet, an fd riding along when given ---- */

static int msg_send(int sock, const char *text, int fd)
{
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov;
    struct msghdr m;
    memset(&m, 0, sizeof m);
    iov.iov_base = (void *)text;
    iov.iov_len = strlen(text) + 1; /* never empty: a 0-byte packet reads as EOF */
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (fd >= 0) {
        memset(ctl, 0, sizeof ctl);
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)iov.iov_len ? 0 : -1;
}

/* 0, -1 on end of file or error, -2 after timeout_ms without a packet. An fd
 * that rides along goes to *fd (closed when fd is NULL); *fd is -1 if none. */
static int msg_recv(int sock, char *buf, size_t len, int *fd, int timeout_ms)
{
    if (fd) *fd = -1;
    struct pollfd p = {sock, POLLIN, 0};
    int n;
    do
        n = poll(&p, 1, timeout_ms);
    while (n < 0 && errno == EINTR);
    if (n == 0) return -2;
    if (n < 0) return -1;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov;
    struct msghdr m;
    memset(&m, 0, sizeof m);
    iov.iov_base = buf;
    iov.iov_len = len - 1;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    ssize_t got = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (got <= 0) return -1;
    buf[got] = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int f;
            memcpy(&f, CMSG_DATA(c), sizeof f);
            if (fd)
                *fd = f;
            else
                close(f);
        }
    return 0;
}

/* ---- what both children share ---- */

static int ctx_ready;
static cudaStream_t stream;

static int ctx_init(void)
{
    if (ctx_ready) return 0;
    int r = cudaSetDevice(0);
    if (!r) r = cudaFree(0);
    if (!r) r = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (!r) ctx_ready = 1;
    return r;
}

static size_t free_bytes(cudaMemPool_t pool)
{
    size_t f = 0, t = 0;
    if (pool) cudaMemPoolTrimTo(pool, 0);
    cudaMemGetInfo(&f, &t);
    return f;
}

/* Free device memory once it stops moving: unchanged over 150 ms, or 2 s. */
static size_t settled(cudaMemPool_t pool)
{
    size_t last = free_bytes(pool);
    double t0 = now_ms(), since = t0;
    while (now_ms() - t0 < 2000 && now_ms() - since < 150) {
        usleep(25000);
        size_t f = free_bytes(pool);
        if (f != last) last = f, since = now_ms();
    }
    return last;
}

/* A free of p: "sync" is cudaFree, "async" cudaFreeAsync on the child's
 * stream followed by a synchronisation of the stream (whose code is added
 * when the free's is 0 and the synchronisation's is not). */
static void free_one(void *p, const char *how, char *reply, size_t len)
{
    int r, s = 0;
    if (!strcmp(how, "async")) {
        r = cudaFreeAsync(p, stream);
        s = cudaStreamSynchronize(stream);
    } else {
        r = cudaFree(p);
        cudaDeviceSynchronize();
    }
    if (!r && s)
        snprintf(reply, len, "%d %s, then the stream's sync %d %s", r, name(r), s, name(s));
    else
        snprintf(reply, len, "%d %s", r, name(r));
}

/* A pinned pool on device 0 that exports as a POSIX fd (the runtime's). */
static int ipc_pool_create(cudaMemPool_t *pool)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    return cudaMemPoolCreate(pool, &props);
}

/* ---- pool-export-order: one child, no importer ---- */

/* One pool's story: made by the runtime (driver_create 0) or the driver,
 * exported before its allocation (pool_first) or after; the pointer's
 * export code before and after the pool's export, into out. */
static void export_order_one(bool driver_create, bool pool_first, char *out, size_t len)
{
    typedef CUresult (*create_fn)(CUmemoryPool *, const CUmemPoolProps *);
    typedef CUresult (*export_fn)(CUmemPoolPtrExportData *, CUdeviceptr);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    create_fn create = lib ? (create_fn)dlsym(lib, "cuMemPoolCreate") : NULL;
    export_fn export_ptr = lib ? (export_fn)dlsym(lib, "cuMemPoolExportPointer") : NULL;
    cudaMemPool_t pool = NULL;
    int r;
    if (driver_create) {
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = 0;
        r = create && export_ptr ? (int)create((CUmemoryPool *)&pool, &props) : -1;
    } else {
        r = ipc_pool_create(&pool);
    }
    if (r) {
        snprintf(out, len, "pool-create %d", r);
        return;
    }
    int fd = -1, before = -1, after = -1, pool_export = -1;
    void *p = NULL;
    if (pool_first)
        pool_export =
            cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
    r = cudaMallocFromPoolAsync(&p, BYTES, pool, stream);
    if (!r) r = cudaStreamSynchronize(stream);
    if (r) {
        snprintf(out, len, "malloc %d", r);
        return;
    }
    struct cudaMemPoolPtrExportData data;
    if (!pool_first)
        before = driver_create ? (int)export_ptr((CUmemPoolPtrExportData *)&data, (CUdeviceptr)p)
                               : cudaMemPoolExportPointer(&data, p);
    if (!pool_first)
        pool_export =
            cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
    after = driver_create ? (int)export_ptr((CUmemPoolPtrExportData *)&data, (CUdeviceptr)p)
                          : cudaMemPoolExportPointer(&data, p);
    if (pool_first)
        snprintf(out, len, "pool exported first %d, then the pointer %d %s", pool_export, after,
                 name(after));
    else
        snprintf(out, len,
                 "the pointer before the pool's export %d %s, the pool %d, the pointer after %d %s",
                 before, name(before), pool_export, after, name(after));
    if (fd >= 0) close(fd);
    cudaFree(p);
    cudaMemPoolDestroy(pool);
}

static int export_order_child(int sock)
{
    char cmd[64], reply[1024], a[256], b[256], c[256];
    if (msg_recv(sock, cmd, sizeof cmd, NULL, IDLE_MS)) return 0;
    int r = ctx_init(), types = -1;
    if (r) {
        snprintf(reply, sizeof reply, "not run: context %d %s", r, name(r));
    } else {
        cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, 0);
        export_order_one(false, false, a, sizeof a);
        export_order_one(false, true, b, sizeof b);
        export_order_one(true, false, c, sizeof c);
        snprintf(reply, sizeof reply,
                 "supported handle types %#x; runtime pool: %s; runtime pool: %s; driver pool: %s",
                 types, a, b, c);
    }
    msg_send(sock, reply, -1);
    msg_recv(sock, cmd, sizeof cmd, NULL, IDLE_MS);
    return 0;
}

static void export_order(void);

/* ---- the exporter: a pool, one allocation of it, its fd ---- */

static int exporter(int sock)
{
    cudaMemPool_t pool = NULL;
    void *p = NULL;
    static unsigned host[BYTES / 4];
    char cmd[256], reply[512];
    for (;;) {
        if (msg_recv(sock, cmd, sizeof cmd, NULL, IDLE_MS)) return 0;
        int fd = -1, r = 0;
        if (!strcmp(cmd, "alloc")) {
            /* The pool, one allocation written and exported, the pool's fd. */
            const char *step = "context";
            struct cudaMemPoolPtrExportData data;
            r = ctx_init();
            if (!r) step = "pool-create", r = ipc_pool_create(&pool);
            /* The pool's export first, as cuda.core does: on the first H200
             * run every pointer exported before its pool was refused. */
            if (!r)
                step = "export-pool", r = cudaMemPoolExportToShareableHandle(
                                          &fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
            if (!r) step = "malloc", r = cudaMallocFromPoolAsync(&p, BYTES, pool, stream);
            if (!r) {
                for (size_t i = 0; i < BYTES / 4; i++)
                    host[i] = word(i);
                step = "copy", r = cudaMemcpyAsync(p, host, BYTES, cudaMemcpyHostToDevice, stream);
            }
            if (!r) step = "sync", r = cudaStreamSynchronize(stream);
            if (!r) step = "export-pointer", r = cudaMemPoolExportPointer(&data, p);
            if (r) {
                snprintf(reply, sizeof reply, "error %s %d %s", step, r, name(r));
                if (fd >= 0) close(fd);
                fd = -1;
            } else {
                strcpy(reply, "ok ");
                to_hex((const unsigned char *)&data, sizeof data, reply + 3);
            }
        } else if (!strcmp(cmd, "fd")) { /* the pool exported once more: a second fd */
            r = pool ? cudaMemPoolExportToShareableHandle(&fd, pool,
                                                          cudaMemHandleTypePosixFileDescriptor, 0)
                     : (int)cudaErrorInvalidValue;
            if (r) fd = -1;
            snprintf(reply, sizeof reply, "%d %s", r, name(r));
        } else if (!strncmp(cmd, "free ", 5)) { /* free sync|async: code, MiB back */
            size_t before = free_bytes(pool);
            char how[200];
            free_one(p, cmd + 5, how, sizeof how);
            snprintf(reply, sizeof reply, "%s, %+.1f MiB", how,
                     ((double)settled(pool) - (double)before) / 1048576.0);
        } else if (!strcmp(cmd, "destroy")) {
            r = cudaMemPoolDestroy(pool);
            pool = NULL; /* no more trims */
            snprintf(reply, sizeof reply, "%d %s", r, name(r));
        } else if (!strcmp(cmd, "settle")) { /* free device memory, its pool trimmed */
            snprintf(reply, sizeof reply, "%zu", settled(pool));
        } else {
            return 0; /* "exit", without freeing: as most programs end */
        }
        msg_send(sock, reply, fd);
        if (fd >= 0) close(fd);
    }
}

/* ---- the importer: pools imported from fds, pointers imported from them ---- */

static const char *verdict(void *dev, char *buf, size_t len)
{
    static unsigned host[BYTES / 4];
    if (!dev) return "nothing imported";
    int r = cudaMemcpy(host, dev, BYTES, cudaMemcpyDeviceToHost);
    if (r) return snprintf(buf, len, "error %d %s", r, name(r)), buf;
    size_t good = 0, poison = 0;
    for (size_t i = 0; i < BYTES / 4; i++)
        good += host[i] == word(i), poison += host[i] == POISON;
    if (good == BYTES / 4) return "data intact";
    if (poison == BYTES / 4) return "poison (simulator)";
    return snprintf(buf, len, "other bytes (%zu of %u words intact)", good, BYTES / 4), buf;
}

static int importer(int sock)
{
    cudaMemPool_t pools[MAX_IMPORTS];
    void *ptrs[MAX_IMPORTS];
    int npools = 0, nptrs = 0, nfreed = 0, last_fd = -1;
    char cmd[256], reply[512], buf[128];
    for (;;) {
        int fd = -1;
        if (msg_recv(sock, cmd, sizeof cmd, &fd, IDLE_MS)) return 0;
        if (!strcmp(cmd, "pool") || !strcmp(cmd, "pool-again")) {
            /* "pool" with an fd: import it (the fd kept for "pool-again"). */
            if (fd >= 0) {
                if (last_fd >= 0) close(last_fd);
                last_fd = fd, fd = -1;
            }
            cudaMemPool_t q = NULL;
            int r = ctx_init();
            if (!r && npools == MAX_IMPORTS) r = cudaErrorMemoryAllocation;
            if (!r)
                r = cudaMemPoolImportFromShareableHandle(&q, (void *)(uintptr_t)last_fd,
                                                         cudaMemHandleTypePosixFileDescriptor, 0);
            snprintf(reply, sizeof reply, "%d %s%s", r, name(r),
                     r               ? ""
                     : !npools       ? " (first)"
                     : q == pools[0] ? " (same pool handle)"
                                     : " (another pool handle)");
            if (!r) pools[npools++] = q;
        } else if (!strncmp(cmd, "import ", 7)) {
            /* import HEX [K]: the pointer, through the K-th pool imported (0). */
            struct cudaMemPoolPtrExportData data;
            int k = 0;
            if (strlen(cmd) > 7 + 2 * sizeof data) k = atoi(cmd + 7 + 2 * sizeof data);
            void *q = NULL;
            char hex[2 * sizeof data + 1];
            snprintf(hex, sizeof hex, "%s", cmd + 7);
            int r = from_hex(hex, (unsigned char *)&data, sizeof data) || k < 0 || k >= npools
                        ? (int)cudaErrorInvalidValue
                        : 0;
            if (!r && nptrs == MAX_IMPORTS) r = cudaErrorMemoryAllocation;
            if (!r) r = cudaMemPoolImportPointer(&q, pools[k], &data);
            snprintf(reply, sizeof reply, "%d %s%s", r, name(r),
                     r              ? ""
                     : !nptrs       ? " (first)"
                     : q == ptrs[0] ? " (same pointer)"
                                    : " (another pointer)");
            if (!r) ptrs[nptrs++] = q;
        } else if (!strcmp(cmd, "read")) { /* the oldest import not yet freed (else the last) */
            snprintf(
                reply, sizeof reply, "%s",
                verdict(nptrs ? ptrs[nfreed < nptrs ? nfreed : nptrs - 1] : NULL, buf, sizeof buf));
        } else if (!strncmp(cmd, "free ",
                            5)) { /* free sync|async: the oldest import not yet freed */
            if (nfreed < nptrs)
                free_one(ptrs[nfreed++], cmd + 5, reply, sizeof reply);
            else
                snprintf(reply, sizeof reply, "nothing to free");
        } else if (!strcmp(cmd, "settle")) {
            snprintf(reply, sizeof reply, "%zu", ctx_init() ? (size_t)0 : settled(NULL));
        } else if (!strcmp(cmd, "drop")) { /* cudaMemPoolDestroy of every pool imported */
            int r = 0;
            for (int k = 0; k < npools; k++) {
                int d = cudaMemPoolDestroy(pools[k]);
                if (!r) r = d;
            }
            npools = 0;
            snprintf(reply, sizeof reply, "%d %s", r, name(r));
        } else {
            if (fd >= 0) close(fd);
            return 0; /* "exit", holding what it imported */
        }
        if (fd >= 0) close(fd);
        msg_send(sock, reply, -1);
    }
}

/* ---- coordinator (no CUDA here) ---- */

struct child {
    pid_t pid;
    int sock;
};

static struct child *children[2]; /* the coordinator's open children, closed in each new one */

static int start(struct child *c, int (*body)(int))
{
    int sv[2];
    c->pid = -1, c->sock = -1;
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(CHILD_S);
        close(sv[0]);
        for (int i = 0; i < 2; i++)
            if (children[i] && children[i]->sock >= 0)
                close(children[i]->sock); /* EOF reaches that child */
        _exit(body(sv[1]));
    }
    close(sv[1]);
    c->pid = pid, c->sock = sv[0];
    children[children[0] ? 1 : 0] = c;
    return 0;
}

/* Reaps pid within ms; SIGKILLs it (and waits as long again) if not. */
static void reap(pid_t pid, int ms)
{
    for (int round = 0; round < 2; round++) {
        double t0 = now_ms();
        while (now_ms() - t0 < ms) {
            pid_t w = waitpid(pid, NULL, WNOHANG);
            if (w == pid || (w < 0 && errno == ECHILD)) return;
            usleep(5000);
        }
        kill(pid, SIGKILL);
    }
}

static void finish(struct child *c, bool kill_it)
{
    if (c->pid <= 0) return;
    if (kill_it)
        kill(c->pid, SIGKILL);
    else
        msg_send(c->sock, "exit", -1);
    close(c->sock);
    reap(c->pid, 5000);
    for (int i = 0; i < 2; i++)
        if (children[i] == c) children[i] = NULL;
    c->pid = -1, c->sock = -1;
}

/* Sends a command (and fd_in, unless -1) and returns the answer (one of
 * four rotating buffers), its fd in *fd_out when given. A child that does
 * not answer within ASK_MS is SIGKILLed. */
static const char *ask_fd(struct child *c, const char *command, int fd_in, int *fd_out)
{
    static char line[4][1024];
    static int k;
    k = (k + 1) % 4;
    if (fd_out) *fd_out = -1;
    if (c->pid <= 0) return "no answer (process gone)";
    if (msg_send(c->sock, command, fd_in)) return "no answer (process gone)";
    int r = msg_recv(c->sock, line[k], sizeof line[k], fd_out, ASK_MS);
    if (r == -2) {
        kill(c->pid, SIGKILL);
        snprintf(line[k], sizeof line[k], "no answer (timed out after %d s)", ASK_MS / 1000);
    } else if (r) {
        snprintf(line[k], sizeof line[k], "no answer (exited or crashed)");
    }
    return line[k];
}
static const char *ask(struct child *c, const char *command)
{
    return ask_fd(c, command, -1, NULL);
}

static void probe(const char *probe_name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void probe(const char *probe_name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("probe %s: ", probe_name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

/* An answer to "settle" as MiB, or NaN when it was no number. */
static double mib(const char *answer)
{
    char *end;
    unsigned long long v = strtoull(answer, &end, 10);
    return end == answer ? nan("") : (double)v / 1048576.0;
}

/* An exporter with its allocation and an importer that imported the pool
 * (from the fd the exporter sent) and, when import_ptr, the pointer. hex
 * gets the export data; import_out the import's answer. 0, or -1 with the
 * reason printed as the probe's result. */
static int pair(const char *probe_name, struct child *e, struct child *i, char *hex,
                bool import_ptr, char *import_out, size_t len)
{
    char a[1024], b[1024];
    int fd = -1;
    i->pid = -1;
    if (start(e, exporter)) return probe(probe_name, "not run (fork failed)"), -1;
    snprintf(a, sizeof a, "%s", ask_fd(e, "alloc", -1, &fd));
    if (strncmp(a, "ok ", 3) || fd < 0) {
        probe(probe_name, "not run: the exporter's setup %s", a);
        if (fd >= 0) close(fd);
        finish(e, false);
        return -1;
    }
    snprintf(hex, 160, "%s", a + 3);
    if (start(i, importer)) {
        close(fd);
        finish(e, false);
        return probe(probe_name, "not run (fork failed)"), -1;
    }
    snprintf(b, sizeof b, "%s", ask_fd(i, "pool", fd, NULL));
    close(fd);
    if (strncmp(b, "0 ", 2)) {
        probe(probe_name, "not run: the importer's cudaMemPoolImportFromShareableHandle %s", b);
        finish(i, false);
        finish(e, false);
        return -1;
    }
    if (import_ptr) {
        snprintf(a, sizeof a, "import %s", hex);
        snprintf(import_out, len, "%s", ask(i, a));
        if (strncmp(import_out, "0 ", 2)) {
            probe(probe_name, "not run: the importer's cudaMemPoolImportPointer %s", import_out);
            finish(i, false);
            finish(e, false);
            return -1;
        }
    }
    return 0;
}

/* (a) The exporter frees (how: sync or async) while the importer holds. */
static void free_while_imported(const char *probe_name, const char *how, const char *call)
{
    struct child e, i;
    char hex[160], imp[256], cmd[64], fr[256], rd[256], ifr[256];
    if (pair(probe_name, &e, &i, hex, true, imp, sizeof imp)) return;
    snprintf(cmd, sizeof cmd, "free %s", how);
    snprintf(fr, sizeof fr, "%s", ask(&e, cmd));
    snprintf(rd, sizeof rd, "%s", ask(&i, "read"));
    double e0 = mib(ask(&e, "settle")), i0 = mib(ask(&i, "settle"));
    snprintf(ifr, sizeof ifr, "%s", ask(&i, cmd));
    double e1 = mib(ask(&e, "settle")), i1 = mib(ask(&i, "settle"));
    probe(probe_name,
          "exporter's %s -> %s (code, MiB back as the exporter sees it, its pool trimmed); "
          "importer reads: %s; before the importer's free the exporter sees %.1f MiB free, the "
          "importer %.1f; the importer's %s -> %s; then the exporter sees %+.1f MiB, the importer "
          "%+.1f MiB",
          call, fr, rd, e0, i0, call, ifr, e1 - e0, i1 - i0);
    finish(&i, false);
    finish(&e, false);
}

/* (b) The exporter frees before the importer imports the pointer. */
/* NVIDIA's rule kept: the importer frees first, then the exporter; then
 * the importer destroys its imported pool, then exits, then the exporter
 * destroys its pool. Device memory as the exporter sees it (its pool
 * trimmed) after each step, against the allocation live and imported. */
static void reclaim_in_order(void)
{
    struct child e, i;
    char hex[160], imp[256], ifr[256], efr[256], drop[256], destroy[256];
    if (pair("pool-reclaim-in-order", &e, &i, hex, true, imp, sizeof imp)) return;
    double s0 = mib(ask(&e, "settle"));
    snprintf(ifr, sizeof ifr, "%s", ask(&i, "free sync"));
    double s1 = mib(ask(&e, "settle"));
    snprintf(efr, sizeof efr, "%s", ask(&e, "free sync"));
    double s2 = mib(ask(&e, "settle"));
    snprintf(drop, sizeof drop, "%s", ask(&i, "drop"));
    double s3 = mib(ask(&e, "settle"));
    finish(&i, false);
    double s4 = mib(ask(&e, "settle"));
    snprintf(destroy, sizeof destroy, "%s", ask(&e, "destroy"));
    double s5 = mib(ask(&e, "settle"));
    probe("pool-reclaim-in-order",
          "MiB back as the exporter sees it, its pool trimmed: after the importer's cudaFree (%s) "
          "%+.1f; after the exporter's (%s) %+.1f; after the importer's cudaMemPoolDestroy (%s) "
          "%+.1f; after the importer's exit %+.1f; after the exporter's cudaMemPoolDestroy (%s) "
          "%+.1f",
          ifr, s1 - s0, efr, s2 - s0, drop, s3 - s0, s4 - s0, destroy, s5 - s0);
    finish(&e, false);
}

static void import_after_free(void)
{
    struct child e, i;
    char hex[160], fr[256], cmd[256];
    if (pair("pool-import-after-free", &e, &i, hex, false, NULL, 0)) return;
    snprintf(fr, sizeof fr, "%s", ask(&e, "free sync"));
    snprintf(cmd, sizeof cmd, "import %s", hex);
    double t0 = now_ms();
    const char *imp = ask(&i, cmd);
    double took = now_ms() - t0;
    if (!strncmp(imp, "0 ", 2))
        probe("pool-import-after-free",
              "exporter's cudaFree -> %s; then the import -> %s after %.0f ms; it reads: %s", fr,
              imp, took, ask(&i, "read"));
    else
        probe("pool-import-after-free",
              "exporter's cudaFree -> %s; then the import -> %s after %.0f ms", fr, imp, took);
    finish(&i, false);
    finish(&e, false);
}

/* (c) The exporter is SIGKILLed while the importer holds. */
static void exporter_killed(void)
{
    struct child e, i;
    char hex[160], imp[256], rd0[256], rd[256], ifr[256], again[512], cmd[256];
    if (pair("pool-exporter-killed", &e, &i, hex, true, imp, sizeof imp)) return;
    snprintf(rd0, sizeof rd0, "%s", ask(&i, "read"));
    double i0 = mib(ask(&i, "settle"));
    finish(&e, true);
    double i1 = mib(ask(&i, "settle"));
    snprintf(rd, sizeof rd, "%s", ask(&i, "read"));
    snprintf(ifr, sizeof ifr, "%s", ask(&i, "free sync"));
    double i2 = mib(ask(&i, "settle"));
    snprintf(cmd, sizeof cmd, "import %s", hex);
    snprintf(again, sizeof again, "%s", ask(&i, cmd));
    if (!strncmp(again, "0 ", 2)) {
        size_t n = strlen(again);
        snprintf(again + n, sizeof again - n, ", reads: %s, its free %s", ask(&i, "read"),
                 ask(&i, "free sync"));
    }
    probe(
        "pool-exporter-killed",
        "importer reads before the kill: %s; after it: %s; the importer sees %+.1f MiB free at the "
        "kill (the exporter's context too); its cudaFree -> %s, then %+.1f MiB more; a new import "
        "of the dead exporter's pointer: %s",
        rd0, rd, i1 - i0, ifr, i2 - i1, again);
    finish(&i, false);
}

/* (d) The pool is destroyed while imported; free_first: the exporter frees
 * its allocation first (as pool_ipc --destroy-pool does). */
static void destroy_while_imported(const char *probe_name, bool free_first)
{
    struct child e, i;
    char hex[160], imp[256], fr[256] = "", ds[256], rd[256], ifr[256], efr[256] = "";
    if (pair(probe_name, &e, &i, hex, true, imp, sizeof imp)) return;
    if (free_first) snprintf(fr, sizeof fr, "%s", ask(&e, "free sync"));
    snprintf(ds, sizeof ds, "%s", ask(&e, "destroy"));
    snprintf(rd, sizeof rd, "%s", ask(&i, "read"));
    double i0 = mib(ask(&i, "settle"));
    snprintf(ifr, sizeof ifr, "%s", ask(&i, "free sync"));
    double i1 = mib(ask(&i, "settle"));
    if (!free_first) snprintf(efr, sizeof efr, "%s", ask(&e, "free sync"));
    if (free_first)
        probe(probe_name,
              "exporter's cudaFree -> %s; cudaMemPoolDestroy -> %s; importer reads: %s; the "
              "importer's cudaFree -> %s, then it sees %+.1f MiB",
              fr, ds, rd, ifr, i1 - i0);
    else
        probe(probe_name,
              "cudaMemPoolDestroy with the allocation live -> %s; importer reads: %s; the "
              "importer's cudaFree -> %s, then it sees %+.1f MiB; the exporter's cudaFree "
              "afterwards -> %s",
              ds, rd, ifr, i1 - i0, efr);
    finish(&i, false);
    finish(&e, false);
}

/* (e) One pool imported twice, one pointer imported twice. */
static void import_twice(void)
{
    struct child e, i;
    char hex[160], again[256], second[256], cmd[256], p1[256], p2[256], p3[256], f1[256], rd[256],
        f2[256], f3[256];
    if (pair("pool-import-pool-twice", &e, &i, hex, false, NULL, 0)) return;
    snprintf(again, sizeof again, "%s", ask(&i, "pool-again"));
    int fd = -1;
    const char *x = ask_fd(&e, "fd", -1, &fd);
    if (fd >= 0) {
        snprintf(second, sizeof second, "%s", ask_fd(&i, "pool", fd, NULL));
        close(fd);
    } else {
        snprintf(second, sizeof second, "not run: the second export %s", x);
    }
    probe("pool-import-pool-twice",
          "the same fd again: %s; a second fd (the pool exported again): %s", again, second);
    snprintf(cmd, sizeof cmd, "import %s", hex);
    snprintf(p1, sizeof p1, "%s", ask(&i, cmd));
    snprintf(p2, sizeof p2, "%s", ask(&i, cmd));
    int last = (!strncmp(again, "0 ", 2)) + (!strncmp(second, "0 ", 2)); /* the newest pool */
    snprintf(cmd, sizeof cmd, "import %s %d", hex, last);
    snprintf(p3, sizeof p3, "%s", ask(&i, cmd));
    snprintf(f1, sizeof f1, "%s", ask(&i, "free sync"));
    snprintf(rd, sizeof rd, "%s", ask(&i, "read"));
    snprintf(f2, sizeof f2, "%s", ask(&i, "free sync"));
    snprintf(f3, sizeof f3, "%s", ask(&i, "free sync"));
    probe("pool-import-pointer-twice",
          "first import %s; the same data again through the same pool %s; through the newest "
          "pool handle %s; first cudaFree %s, then it reads: %s; second free %s; third free %s",
          p1, p2, p3, f1, rd, f2, f3);
    finish(&i, false);
    finish(&e, false);
}

static void export_order(void)
{
    struct child c;
    if (start(&c, export_order_child)) return probe("pool-export-order", "not run (fork failed)");
    probe("pool-export-order", "%s", ask(&c, "order"));
    finish(&c, false);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    export_order();
    reclaim_in_order();
    free_while_imported("pool-free-while-imported", "sync", "cudaFree");
    free_while_imported("pool-freeasync-while-imported", "async", "cudaFreeAsync");
    import_after_free();
    exporter_killed();
    destroy_while_imported("pool-destroy-while-imported", true);
    destroy_while_imported("pool-destroy-unfreed-while-imported", false);
    import_twice();
    return 0;
}
