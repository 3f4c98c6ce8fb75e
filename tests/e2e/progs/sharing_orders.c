/* sharing_orders: one exporter and one importer sharing one 4 MiB block in
 * the orders issue 46 found weak, written as a user writes them and knowing
 * nothing of the shim (it only looks up ipcshim_stats with dlsym, to print
 * its limbo count when it is loaded).
 *
 *   sharing_orders [--kind pool|legacy] [--free early|last]
 *                  [--free-with sync|async] [--reuse]
 *                  [--reimport] [--reset none|device|primary|release|ctx]
 *
 * --kind: a pool allocation (an IPC pool with POSIX fd handles, its fd and
 * the pointer's 64 export bytes sent over a Unix socket) or a cudaMalloc
 * block shared with cudaIpcGetMemHandle. --free early: the exporter frees
 * the block (cudaFree, or with --free-with async cudaFreeAsync on its
 * stream and a synchronise) before the importer imports it; with --reuse it
 * then at once allocates a new block of the same size from the same pool
 * (or cudaMalloc), fills it with another pattern and keeps it to the end.
 * --free last: the exporter frees after the importer let go (NVIDIA's
 * order). --reimport (pool): after its import the importer imports the same
 * export bytes again through a NULL pool, through another imported pool
 * (the exporter's second IPC pool) and through the right pool.
 * --reset: after its first import and read, the importer resets its
 * context (cudaDeviceReset, cuDevicePrimaryCtxReset, the last
 * cuDevicePrimaryCtxRelease of a primary context it retained through the
 * driver alone, or cuCtxDestroy of a context it made with cuCtxCreate), makes a context again,
 * imports the pool (pool kind) and the block again, reads and frees (closes) it.
 *
 * Output, one fact per line: "range: OFFSET SIZE" (the exporter's block in
 * the allocation the driver says it belongs to; "reuse-range:" likewise for
 * the new block), "export: CODE"; the importer's "import: CODE",
 * "read: ok|wrong|poison|error CODE" (wrong: the reused block's pattern or
 * other bytes), with --reimport "reimport-null: CODE", "reimport-other:
 * CODE", "reimport-same: CODE same|other", with --reset "reset: CODE",
 * "reimport: CODE", "reread: ...", "refree: CODE", and "free: CODE" (its
 * free or close of the first import, skipped after a reset, which ends it);
 * the exporter's "producer-free: CODE", "reuse: CODE", "limbo: N" (only
 * under the shim: its blocks still in limbo 3 s at most after the importer
 * let go) and "reclaimed: yes MS" or "reclaimed: no BYTES" (device memory
 * back to its level before the block, its pool trimmed, within 3 s).
 * Exit status: 0 when every line above is what a correct program expects
 * (import, reads and frees 0), 1 otherwise, 2 an error before sharing. */
#include "ipcshim.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BYTES (4u << 20)
#define POISON 0xDEADBEEFu

static const char *kind = "pool", *free_when = "early", *free_with = "sync", *reset = "none";
static bool reuse, reimport;

static bool is(const char *a, const char *b)
{
    return strcmp(a, b) == 0;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return f;
}

static uint32_t word(uint32_t pattern, size_t i)
{
    return pattern + (uint32_t)i;
}

/* What the exporter sends: the block's 64 bytes (pool export data or IPC
 * handle), and for a pool its fd and the second pool's fd. */
struct message {
    unsigned char data[64];
};

static int send_fds(int sock, const struct message *m, const int *fds, int nfds)
{
    char ctl[CMSG_SPACE(2 * sizeof(int))];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {(void *)m, sizeof *m};
    struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        h.msg_control = ctl;
        h.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    return sendmsg(sock, &h, MSG_NOSIGNAL) == (ssize_t)sizeof *m ? 0 : -1;
}

static int recv_fds(int sock, struct message *m, int *fds, int nfds)
{
    char ctl[CMSG_SPACE(2 * sizeof(int))];
    struct iovec iov = {m, sizeof *m};
    struct msghdr h = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    if (recvmsg(sock, &h, MSG_WAITALL) != (ssize_t)sizeof *m) return -1;
    if (!nfds) return 0;
    struct cmsghdr *c = CMSG_FIRSTHDR(&h);
    if (!c || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(nfds * sizeof(int))) return -1;
    memcpy(fds, CMSG_DATA(c), nfds * sizeof(int));
    return 0;
}

static int send_byte(int sock, char c)
{
    return send(sock, &c, 1, MSG_NOSIGNAL) == 1 ? 0 : -1;
}
static int recv_byte(int sock, char want)
{
    char c;
    return recv(sock, &c, 1, MSG_WAITALL) == 1 && c == want ? 0 : -1;
}

static cudaMemPool_t make_pool(int *fd)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool = NULL;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) return NULL;
    /* The pool's export before its pointers' (NVIDIA's driver refuses a
     * pointer of a pool not exported yet). */
    if (cudaMemPoolExportToShareableHandle(fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) !=
        cudaSuccess)
        return NULL;
    return pool;
}

static int fill(void *p, uint32_t pattern, cudaStream_t s)
{
    uint32_t *host = malloc(BYTES);
    if (!host) return 2;
    for (size_t i = 0; i < BYTES / 4; i++)
        host[i] = word(pattern, i);
    int r = cudaMemcpyAsync(p, host, BYTES, cudaMemcpyHostToDevice, s);
    if (r == cudaSuccess) r = cudaStreamSynchronize(s);
    free(host);
    return r;
}

static int producer_free(void *p, cudaStream_t s)
{
    if (is(free_with, "async")) {
        int r = cudaFreeAsync(p, s);
        return r ? r : (int)cudaStreamSynchronize(s);
    }
    return cudaFree(p);
}

/* The shim's limbo count when it is loaded, -1 otherwise. */
static long long limbo_blocks(void)
{
    int (*stats)(struct ipcshim_stats *, size_t) =
        (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
    struct ipcshim_stats st;
    if (!stats || stats(&st, sizeof st) != 0) return -1;
    return (long long)st.limbo_blocks;
}

/* "range: OFFSET SIZE": where the driver says p's allocation starts (p's
 * offset in it) and its size, which the shim records an export by. */
static void print_range(const char *label, void *p)
{
    CUdeviceptr base = 0;
    size_t size = 0;
    if (cuMemGetAddressRange(&base, &size, (CUdeviceptr)p) == CUDA_SUCCESS)
        printf("%s: %llu %zu\n", label, (unsigned long long)((CUdeviceptr)p - base), size);
}

static int producer(int sock)
{
    bool pool_kind = is(kind, "pool");
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 2;
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) return 2;
    int fds[2] = {-1, -1};
    cudaMemPool_t pool = NULL, other = NULL;
    if (pool_kind && (!(pool = make_pool(&fds[0])) || !(other = make_pool(&fds[1])))) {
        printf("export: pool-create failed\n");
        return 2;
    }
    size_t baseline = free_bytes();
    void *p = NULL;
    int r = pool_kind ? cudaMallocFromPoolAsync(&p, BYTES, pool, s) : cudaMalloc(&p, BYTES);
    if (r == cudaSuccess) r = fill(p, 0x10000000u, s);
    print_range("range", p);
    struct message m;
    memset(&m, 0, sizeof m);
    if (r == cudaSuccess)
        r = pool_kind ? cudaMemPoolExportPointer((struct cudaMemPoolPtrExportData *)m.data, p)
                      : cudaIpcGetMemHandle((cudaIpcMemHandle_t *)m.data, p);
    printf("export: %d\n", r);
    if (r != cudaSuccess || send_fds(sock, &m, fds, pool_kind ? 2 : 0) != 0) return 2;
    if (pool_kind) close(fds[0]), close(fds[1]);

    int bad = 0;
    void *again = NULL;
    if (is(free_when, "early")) {
        r = producer_free(p, s);
        printf("producer-free: %d\n", r);
        bad |= r != 0;
        if (reuse) {
            r = pool_kind ? cudaMallocFromPoolAsync(&again, BYTES, pool, s)
                          : cudaMalloc(&again, BYTES);
            if (r == cudaSuccess) r = fill(again, 0x70000000u, s);
            printf("reuse: %d %s\n", r, again == p ? "same" : "other");
            if (r == cudaSuccess) print_range("reuse-range", again);
            bad |= r != 0;
        }
    }
    send_byte(sock, 'F');
    bool gone = recv_byte(sock, 'D') != 0; /* the importer let go (or died) */
    double released = now_ms();
    if (is(free_when, "last")) {
        r = producer_free(p, s);
        printf("producer-free: %d\n", r);
        bad |= r != 0;
    }
    if (again) producer_free(again, s);
    cudaStreamSynchronize(s);
    long long limbo = limbo_blocks();
    while (limbo > 0 && now_ms() - released < 3000) {
        usleep(2000);
        limbo = limbo_blocks();
    }
    if (limbo >= 0) printf("limbo: %lld\n", limbo);
    bad |= limbo > 0;
    for (;;) {
        if (pool_kind) cudaMemPoolTrimTo(pool, 0);
        size_t now = free_bytes();
        double waited = now_ms() - released;
        if (now >= baseline) {
            printf("reclaimed: yes %.0f\n", waited);
            break;
        }
        if (waited > 3000) {
            printf("reclaimed: no %zu\n", baseline - now);
            break;
        }
        usleep(2000);
    }
    if (!gone) send_byte(sock, 'E');
    return bad;
}

/* ---- the importer ---- */

static CUcontext own_ctx; /* --reset ctx: the context it made */

/* The importer's context: the runtime's primary one; for --reset ctx one
 * it creates; for --reset release, and after a --reset primary, the
 * primary context retained and made current through the driver, as a
 * driver-API program does (the runtime then uses it as it is). */
static int make_context(bool again)
{
    if ((again && is(reset, "primary")) || is(reset, "release")) {
        CUdevice d;
        CUcontext c;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
            cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS)
            return 2;
        return cuCtxSetCurrent(c) == CUDA_SUCCESS ? 0 : 2;
    }
    if (is(reset, "ctx")) {
        CUdevice d;
        if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS) return 2;
#if CUDA_VERSION >= 13000
        CUresult r = cuCtxCreate(&own_ctx, NULL, 0, d);
#else
        CUresult r = cuCtxCreate(&own_ctx, 0, d);
#endif
        return r == CUDA_SUCCESS ? 0 : 2;
    }
    return cudaSetDevice(0) == cudaSuccess && cudaFree(NULL) == cudaSuccess ? 0 : 2;
}

static int import_pool(int fd, cudaMemPool_t *pool)
{
    int r = cudaMemPoolImportFromShareableHandle(pool, (void *)(uintptr_t)fd,
                                                 cudaMemHandleTypePosixFileDescriptor, 0);
    if (r) return r;
    struct cudaMemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = 0;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    return cudaMemPoolSetAccess(*pool, &access, 1);
}

static int import_block(const struct message *m, cudaMemPool_t pool, void **p)
{
    if (is(kind, "pool"))
        return cudaMemPoolImportPointer(p, pool, (struct cudaMemPoolPtrExportData *)m->data);
    cudaIpcMemHandle_t h;
    memcpy(&h, m->data, sizeof h);
    return cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
}

static int release_block(void *p)
{
    return is(kind, "pool") ? cudaFree(p) : cudaIpcCloseMemHandle(p);
}

/* "ok", "poison", "wrong" or "error CODE" into verdict; 0 when ok. */
static int read_block(void *p, char *verdict, size_t len)
{
    uint32_t *host = malloc(BYTES);
    int c = host ? (int)cudaMemcpy(host, p, BYTES, cudaMemcpyDeviceToHost) : 2;
    if (c) {
        snprintf(verdict, len, "error %d", c);
        free(host);
        return 1;
    }
    snprintf(verdict, len, "ok 0");
    for (size_t i = 0; i < BYTES / 4; i++)
        if (host[i] != word(0x10000000u, i)) {
            snprintf(verdict, len, "%s 0", host[i] == POISON ? "poison" : "wrong");
            break;
        }
    free(host);
    return strcmp(verdict, "ok 0") != 0;
}

static int do_reset(void)
{
    if (is(reset, "device")) return cudaDeviceReset();
    if (is(reset, "primary")) {
        CUdevice d;
        CUresult r = cuDeviceGet(&d, 0);
        return r ? (int)r : (int)cuDevicePrimaryCtxReset(d);
    }
    if (is(reset, "release")) {
        CUdevice d;
        CUresult r = cuDeviceGet(&d, 0);
        return r ? (int)r : (int)cuDevicePrimaryCtxRelease(d);
    }
    return (int)cuCtxDestroy(own_ctx);
}

static int consumer(int sock)
{
    bool pool_kind = is(kind, "pool");
    struct message m;
    int fds[2] = {-1, -1};
    if (recv_fds(sock, &m, fds, pool_kind ? 2 : 0) != 0 || recv_byte(sock, 'F') != 0) return 2;
    if (make_context(false) != 0) return 2;
    cudaMemPool_t pool = NULL, other = NULL;
    int r = pool_kind ? import_pool(fds[0], &pool) : 0;
    void *p = NULL;
    if (r == 0) r = import_block(&m, pool, &p);
    printf("import: %d\n", r);
    int bad = r != 0;
    char verdict[64] = "error -";
    if (r == 0) bad |= read_block(p, verdict, sizeof verdict);
    printf("read: %s\n", verdict);
    if (r == 0 && reimport && pool_kind) {
        void *q = NULL;
        printf("reimport-null: %d\n",
               cudaMemPoolImportPointer(&q, NULL, (struct cudaMemPoolPtrExportData *)m.data));
        cudaGetLastError();
        int o = import_pool(fds[1], &other);
        if (o == 0)
            o = cudaMemPoolImportPointer(&q, other, (struct cudaMemPoolPtrExportData *)m.data);
        printf("reimport-other: %d\n", o);
        cudaGetLastError();
        q = NULL;
        int s = cudaMemPoolImportPointer(&q, pool, (struct cudaMemPoolPtrExportData *)m.data);
        printf("reimport-same: %d %s\n", s, q == p ? "same" : "other");
        bad |= s != 0 || q != p;
    }
    if (r == 0 && !is(reset, "none")) {
        int x = do_reset();
        printf("reset: %d\n", x);
        bad |= x != 0;
        cudaGetLastError();
        if (make_context(true) != 0) return 2;
        x = pool_kind ? import_pool(fds[0], &pool) : 0;
        void *q = NULL;
        if (x == 0) x = import_block(&m, pool, &q);
        printf("reimport: %d\n", x);
        bad |= x != 0;
        snprintf(verdict, sizeof verdict, "error -");
        if (x == 0) bad |= read_block(q, verdict, sizeof verdict);
        printf("reread: %s\n", verdict);
        x = x == 0 ? release_block(q) : -1;
        printf("refree: %d\n", x);
        bad |= x != 0;
    } else if (r == 0) {
        int f = release_block(p);
        printf("free: %d\n", f);
        bad |= f != 0;
    }
    cudaDeviceSynchronize();
    fflush(stdout);
    send_byte(sock, 'D');
    recv_byte(sock, 'E'); /* alive until the exporter has looked */
    return bad;
}

static int usage(void)
{
    fprintf(stderr, "usage: sharing_orders [--kind pool|legacy] [--free early|last]\n"
                    "  [--free-with sync|async] [--reuse] [--reimport]\n"
                    "  [--reset none|device|primary|release|ctx]\n");
    return 2;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (is(a, "--kind") && v)
            kind = v, i++;
        else if (is(a, "--free") && v)
            free_when = v, i++;
        else if (is(a, "--free-with") && v)
            free_with = v, i++;
        else if (is(a, "--reset") && v)
            reset = v, i++;
        else if (is(a, "--reuse"))
            reuse = true;
        else if (is(a, "--reimport"))
            reimport = true;
        else
            return usage();
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
    /* Two children: CUDA starts in each, and either may leave first. */
    pid_t c = fork();
    if (c == 0) {
        close(sv[0]);
        _exit(consumer(sv[1]));
    }
    pid_t p = fork();
    if (p == 0) {
        close(sv[1]);
        _exit(producer(sv[0]));
    }
    close(sv[0]);
    close(sv[1]);
    int cs = 0, ps = 0;
    waitpid(p, &ps, 0);
    waitpid(c, &cs, 0);
    int pst = WIFEXITED(ps) ? WEXITSTATUS(ps) : 2, cst = WIFEXITED(cs) ? WEXITSTATUS(cs) : 2;
    return pst == 2 || cst == 2 ? 2 : pst || cst;
}
