/* pool_ipc: stream-ordered pool IPC between two processes, the way NVIDIA's
 * documentation shows it (an IPC-capable pool, its POSIX fd passed by
 * SCM_RIGHTS, each allocation passed as cudaMemPoolPtrExportData), with the
 * exporter breaking or keeping the documented rule "the imported memory
 * must be freed from all importing processes before being freed in the
 * exporting process". The program knows nothing of the shim.
 *
 *   pool_ipc [--door runtime|driver|resolver] [--blocks N] [--size BYTES]
 *            [--free before-import|while-reading|after-release|never]
 *            [--free-with sync|same-stream|other-stream]
 *            [--destroy-pool] [--kill-consumer] [--exporter-exits] [--bad-input]
 *
 * --door: which door exports, imports and frees the shared pointers
 * (runtime; the driver linked directly; the driver through dlopen +
 * cuGetProcAddress_v2, as cuda-bindings does); the pool itself is made,
 * allocated from and shared through the runtime. --free: when the producer
 * frees its allocations (after-release keeps the rule); --free-with: how
 * both sides free (cudaFree / cuMemFree, or the stream-ordered free on the
 * stream that wrote the data, or on another stream). --destroy-pool: the
 * producer destroys its pool right after its free. --kill-consumer: the
 * consumer SIGKILLs itself after reading, still holding its imports.
 * --exporter-exits: the producer exits right after its free while the
 * consumer still holds the imports (it reads 300 ms later). --bad-input:
 * the consumer also imports a forged copy of the first export data
 * ("forged-import: CODE") and frees its first imported pointer twice
 * ("double-free: CODE", the second free's answer).
 *
 * Output, one fact per line: "import: CODE" (the consumer's first failing
 * import, or 0), "consumer: ok|poison|wrong|error CODE", and from the
 * producer (unless it exited early) "producer-free: CODE" and "reclaimed:
 * yes MS" or "reclaimed: no BYTES" (device memory back to where it was
 * before the pool, within 3 s of the consumer's release or death).
 * Exit status: 0 the consumer read what was written, 1 it read other bytes,
 * 2 an error (a killed consumer counts by the producer's status). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_BLOCKS 64
#define POISON 0xDEADBEEFu

struct config {
    const char *door, *free_when, *free_with;
    int blocks;
    size_t size;
    bool destroy_pool, kill_consumer, exporter_exits, bad_input;
};
static struct config cfg = {"runtime", "while-reading", "sync", 4,    1 << 20,
                            false,     false,           false,  false};

/* The shared-pointer calls of the chosen door, as the driver's types. */
static CUresult (*export_pointer)(CUmemPoolPtrExportData *, CUdeviceptr);
static CUresult (*import_pointer)(CUdeviceptr *, CUmemoryPool, CUmemPoolPtrExportData *);
static CUresult (*free_sync)(CUdeviceptr);
static CUresult (*free_async)(CUdeviceptr, CUstream);

static CUresult rt_export(CUmemPoolPtrExportData *d, CUdeviceptr p)
{
    return (CUresult)cudaMemPoolExportPointer((struct cudaMemPoolPtrExportData *)d, (void *)p);
}
static CUresult rt_import(CUdeviceptr *p, CUmemoryPool pool, CUmemPoolPtrExportData *d)
{
    void *q = NULL;
    cudaError_t r = cudaMemPoolImportPointer(&q, pool, (struct cudaMemPoolPtrExportData *)d);
    *p = (CUdeviceptr)q;
    return (CUresult)r;
}
static CUresult rt_free(CUdeviceptr p)
{
    return (CUresult)cudaFree((void *)p);
}
static CUresult rt_free_async(CUdeviceptr p, CUstream s)
{
    return (CUresult)cudaFreeAsync((void *)p, s);
}

static int choose_door(void)
{
    if (strcmp(cfg.door, "runtime") == 0) {
        export_pointer = rt_export, import_pointer = rt_import;
        free_sync = rt_free, free_async = rt_free_async;
    } else if (strcmp(cfg.door, "driver") == 0) {
        export_pointer = cuMemPoolExportPointer, import_pointer = cuMemPoolImportPointer;
        free_sync = cuMemFree, free_async = cuMemFreeAsync;
    } else if (strcmp(cfg.door, "resolver") == 0) {
        void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        CUresult (*proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
            lib ? (CUresult(*)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *))dlsym(lib, "cuGetProcAddress_v2")
                : NULL;
        if (!proc) return -1;
        CUdriverProcAddressQueryResult q;
        if (proc("cuMemPoolExportPointer", (void **)&export_pointer, 12000, 0, &q) ||
            proc("cuMemPoolImportPointer", (void **)&import_pointer, 12000, 0, &q) ||
            proc("cuMemFree", (void **)&free_sync, 12000, 0, &q) ||
            proc("cuMemFreeAsync", (void **)&free_async, 12000, 0, &q))
            return -1;
    } else {
        return -1;
    }
    return 0;
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return f;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint32_t word(int block, size_t i)
{
    return 0x10000000u + (uint32_t)block * 0x10000u + (uint32_t)i;
}

/* One byte message on the socket; the fd and export data ride the first. */
static int send_byte(int sock, char c)
{
    return send(sock, &c, 1, MSG_NOSIGNAL) == 1 ? 0 : -1;
}
static int recv_byte(int sock, char want)
{
    char c;
    return recv(sock, &c, 1, MSG_WAITALL) == 1 && c == want ? 0 : -1;
}

static int send_exports(int sock, int fd, const CUmemPoolPtrExportData *data)
{
    char ctl[CMSG_SPACE(sizeof fd)];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {(void *)data, sizeof *data * (size_t)cfg.blocks};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof fd);
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)iov.iov_len ? 0 : -1;
}

static int recv_exports(int sock, int *fd, CUmemPoolPtrExportData *data)
{
    char ctl[CMSG_SPACE(sizeof *fd)];
    struct iovec iov = {data, sizeof *data * (size_t)cfg.blocks};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof ctl};
    if (recvmsg(sock, &m, MSG_WAITALL) != (ssize_t)iov.iov_len) return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
    memcpy(fd, CMSG_DATA(c), sizeof *fd);
    return 0;
}

static CUresult free_block(CUdeviceptr p, CUstream own, CUstream other)
{
    if (strcmp(cfg.free_with, "same-stream") == 0) return free_async(p, own);
    if (strcmp(cfg.free_with, "other-stream") == 0) return free_async(p, other);
    return free_sync(p);
}

/* The producer: pool, data, exports; frees when --free says. */
static int producer(int sock)
{
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 2;
    size_t baseline = free_bytes();
    cudaStream_t s1, s2;
    if (cudaStreamCreate(&s1) != cudaSuccess || cudaStreamCreate(&s2) != cudaSuccess) return 2;
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    int r = cudaMemPoolCreate(&pool, &props);
    if (r != cudaSuccess) {
        printf("producer: error pool-create %d\n", r);
        return 2;
    }
    /* The pool's export before its pointers', as cuda.core does: on the
     * first H200 run every pointer exported before its pool was refused. */
    int fd = -1;
    r = cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
    CUdeviceptr ptr[MAX_BLOCKS];
    CUmemPoolPtrExportData data[MAX_BLOCKS];
    size_t words = cfg.size / 4;
    uint32_t *host = malloc(cfg.size);
    for (int b = 0; b < cfg.blocks && r == cudaSuccess; b++) {
        void *p = NULL;
        r = cudaMallocFromPoolAsync(&p, cfg.size, pool, s1);
        if (r != cudaSuccess) break;
        ptr[b] = (CUdeviceptr)p;
        for (size_t i = 0; i < words; i++)
            host[i] = word(b, i);
        r = cudaMemcpyAsync(p, host, cfg.size, cudaMemcpyHostToDevice, s1);
        if (r == cudaSuccess) r = (int)export_pointer(&data[b], ptr[b]);
        if (r != cudaSuccess) break;
    }
    free(host);
    cudaStreamSynchronize(s1);
    printf("export: %d\n", r);
    if (r != cudaSuccess || send_exports(sock, fd, data) != 0) return 2;
    close(fd);

    int freed = 0;
    double released = 0;
    bool consumer_gone = false;
    for (const char *step = "GIRD"; *step; step++) {
        bool free_now = (*step == 'G' && strcmp(cfg.free_when, "before-import") == 0) ||
                        (*step == 'R' && strcmp(cfg.free_when, "while-reading") == 0) ||
                        (*step == 'D' && strcmp(cfg.free_when, "after-release") == 0);
        if (*step == 'I' || *step == 'D') { /* the consumer's: imported, released (or died) */
            if (recv_byte(sock, *step) != 0) consumer_gone = true;
            if (*step == 'D') released = now_ms();
        }
        if (free_now) {
            for (int b = 0; b < cfg.blocks; b++) {
                int f = (int)free_block(ptr[b], s1, s2);
                if (f && !freed) freed = f;
            }
            printf("producer-free: %d\n", freed);
            if (cfg.destroy_pool) printf("pool-destroy: %d\n", (int)cudaMemPoolDestroy(pool));
        }
        if ((*step == 'G' || *step == 'R') && !consumer_gone) send_byte(sock, *step);
        if (*step == 'R' && cfg.exporter_exits) return 0; /* exit with the imports outstanding */
    }
    cudaStreamSynchronize(s1);
    cudaStreamSynchronize(s2);
    if (!cfg.destroy_pool) cudaMemPoolTrimTo(pool, 0);
    if (strcmp(cfg.free_when, "never") == 0) return 0;
    for (;;) {
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
    (void)consumer_gone;
    return 0;
}

/* The consumer: imports the pool and every pointer, reads, frees. */
static int consumer(int sock)
{
    CUmemPoolPtrExportData data[MAX_BLOCKS];
    int fd = -1;
    if (recv_exports(sock, &fd, data) != 0 || recv_byte(sock, 'G') != 0) return 2;
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 2;
    cudaStream_t s1, s2;
    if (cudaStreamCreate(&s1) != cudaSuccess || cudaStreamCreate(&s2) != cudaSuccess) return 2;
    cudaMemPool_t pool;
    int r = cudaMemPoolImportFromShareableHandle(&pool, (void *)(uintptr_t)fd,
                                                 cudaMemHandleTypePosixFileDescriptor, 0);
    close(fd);
    CUdeviceptr ptr[MAX_BLOCKS] = {0};
    if (cfg.bad_input && r == cudaSuccess) {
        CUmemPoolPtrExportData forged = data[0];
        for (size_t i = 0; i < sizeof forged.reserved; i++)
            forged.reserved[i] ^= 0x5a;
        CUdeviceptr p = 0;
        printf("forged-import: %d\n", (int)import_pointer(&p, pool, &forged));
    }
    int first = r;
    for (int b = 0; b < cfg.blocks && r == cudaSuccess; b++) {
        int i = (int)import_pointer(&ptr[b], pool, &data[b]);
        if (i && !first) first = i;
    }
    printf("import: %d\n", first);
    send_byte(sock, 'I');
    if (recv_byte(sock, 'R') != 0 && !cfg.exporter_exits) return 2;
    if (cfg.exporter_exits) usleep(300 * 1000);
    const char *verdict = "ok";
    int code = 0;
    size_t words = cfg.size / 4;
    uint32_t *host = malloc(cfg.size);
    for (int b = 0; b < cfg.blocks && !code; b++) {
        if (!ptr[b]) {
            verdict = "error", code = first;
            break;
        }
        int c = cudaMemcpy(host, (void *)ptr[b], cfg.size, cudaMemcpyDeviceToHost);
        if (c) {
            verdict = "error", code = c;
            break;
        }
        for (size_t i = 0; i < words; i++)
            if (host[i] != word(b, i)) {
                verdict = host[i] == POISON ? "poison" : "wrong";
                break;
            }
        if (strcmp(verdict, "ok") != 0) break;
    }
    free(host);
    printf("consumer: %s %d\n", verdict, code);
    fflush(stdout);
    if (cfg.kill_consumer) raise(SIGKILL);
    for (int b = 0; b < cfg.blocks; b++)
        if (ptr[b]) free_block(ptr[b], s1, s2);
    cudaStreamSynchronize(s1);
    cudaStreamSynchronize(s2);
    if (cfg.bad_input && ptr[0]) printf("double-free: %d\n", (int)free_sync(ptr[0]));
    send_byte(sock, 'D');
    return strcmp(verdict, "ok") == 0 ? 0 : strcmp(verdict, "error") == 0 ? 2 : 1;
}

static int usage(void)
{
    fprintf(stderr, "usage: pool_ipc [--door runtime|driver|resolver] [--blocks N] [--size BYTES]\n"
                    "  [--free before-import|while-reading|after-release|never]\n"
                    "  [--free-with sync|same-stream|other-stream] [--destroy-pool]\n"
                    "  [--kill-consumer] [--exporter-exits] [--bad-input]\n");
    return 2;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--door") == 0 && v)
            cfg.door = v, i++;
        else if (strcmp(a, "--free") == 0 && v)
            cfg.free_when = v, i++;
        else if (strcmp(a, "--free-with") == 0 && v)
            cfg.free_with = v, i++;
        else if (strcmp(a, "--blocks") == 0 && v)
            cfg.blocks = atoi(v), i++;
        else if (strcmp(a, "--size") == 0 && v)
            cfg.size = strtoull(v, NULL, 0), i++;
        else if (strcmp(a, "--destroy-pool") == 0)
            cfg.destroy_pool = true;
        else if (strcmp(a, "--kill-consumer") == 0)
            cfg.kill_consumer = true;
        else if (strcmp(a, "--exporter-exits") == 0)
            cfg.exporter_exits = true;
        else if (strcmp(a, "--bad-input") == 0)
            cfg.bad_input = true;
        else
            return usage();
    }
    if (cfg.blocks < 1 || cfg.blocks > MAX_BLOCKS || cfg.size < 4 || choose_door() != 0)
        return usage();
    setvbuf(stdout, NULL, _IOLBF, 0);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
    /* Two children, so that either may leave first; CUDA starts in each. */
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
    int producer_status = WIFEXITED(ps) ? WEXITSTATUS(ps) : 2;
    if (producer_status) return 2;
    if (cfg.kill_consumer) return WIFSIGNALED(cs) && WTERMSIG(cs) == SIGKILL ? 0 : 2;
    return WIFEXITED(cs) ? WEXITSTATUS(cs) : 2;
}
