/* vmm_ipc: legacy IPC on virtual-memory-management memory. The producer
 * allocates with cuMemCreate + cuMemMap (asking for no shareable handle
 * type, as PyTorch's expandable_segments does), writes pair.c's pattern of
 * block 0, calls cudaIpcGetMemHandle (or cuIpcGetMemHandle) on it and hands
 * the handle to an unmodified legacy-IPC consumer: pair's own consumer
 * (`pair-runtime --consumer`), which opens, reads, checks and closes. The
 * program knows nothing of the shim.
 *
 *   vmm_ipc [--door runtime|driver] [--size BYTES] [--during CMD]
 *           [--leak-import] [--forged] [--double-release] [--leave-mapped]
 *           [--malloc] [--non-dumpable] [--direct] [--stale] [--reuse]
 *           [--scm]
 *
 * --during: run CMD (sh -c) while the consumer holds the handle open.
 * --leak-import: a second consumer (this program, forked) opens the handle,
 * reads it and exits normally without closing it. --forged: open the
 * handle with one byte of it changed, and 64 random bytes
 * ("forged-open: CODE", "garbage-open: CODE"). --double-release: release the
 * allocation twice ("double-release: CODE", the second call's answer).
 * --leave-mapped: exit without unmapping or releasing. --malloc: only
 * export a cudaMalloc block and print its handle ("malloc-handle: HEX").
 * --direct: also share the allocation the program's own way (a POSIX fd
 * from cuMemExportToShareableHandle, taken by pidfd_getfd) with a second
 * importer (this program again) that maps it and exits normally without
 * unmapping or releasing it ("fd-export: CODE", "direct-import: ok 0").
 * --stale: after the producer unmapped and released the allocation, a
 * consumer of ours opens the old handle ("leaker: error CODE").
 * --non-dumpable: the producer makes itself non-dumpable first (nobody has
 * ptrace rights on it: pidfd_getfd on it fails with EPERM).
 * --reuse: the address reused after an export, as an expandable segment
 * shrinks and grows (issue 46 item 4): allocation B (the inverted pattern)
 * is exported and a holder of ours (this program again) opens it; the
 * producer unmaps and releases B while the holder keeps it, maps a new
 * allocation C (pair's pattern) at the same address and exports that
 * ("reuse-export: CODE") to pair's consumer; then the holder reads B
 * ("holder: ok|wrong|error CODE").
 * --scm: only direct sharing over SCM_RIGHTS, as the H200 run of issue 46
 * item 5 did it: allocations A and B (asked for with the POSIX fd type);
 * A exported twice, to importers 1 and 2, B once, to importer 3 (each
 * export a new fd, sent and closed at once); each importer imports, maps,
 * reads ("scm-import-N: ok|wrong|error CODE") and holds the allocation
 * while --during runs ("scm-importer-N: PID"), then releases it.
 *
 * Output, one fact per line: "export: CODE" (the get-handle's answer; the
 * rest only when it is 0), "handle: HEX", "importer-pid: PID",
 * "consumer: RESULT" (pair's
 * "result" line: ok, poison, wrong, error), "leaker: ok|...".
 * Exit status: 0 done (whatever the export answered), 2 an error. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hex.h"

static struct {
    const char *door, *during;
    size_t size;
    bool leak_import, forged, double_release, leave_mapped, malloc_only, non_dumpable, direct,
        stale, reuse, scm;
} cfg = {"runtime", NULL,  2u << 20, false, false, false, false,
         false,     false, false,    false, false, false};

static void fail(const char *what, int code)
{
    printf("error: %s failed with %d\n", what, code);
    fflush(stdout);
    exit(2);
}

/* pair.c's pattern of block 0 (its consumer checks it). */
static uint32_t expected_word(size_t i)
{
    return (uint32_t)(0x10000000u + i) ^ 0x01010101u;
}

static int get_handle(unsigned char out[64], void *ptr)
{
    if (!strcmp(cfg.door, "driver"))
        return (int)cuIpcGetMemHandle((CUipcMemHandle *)out, (CUdeviceptr)ptr);
    return (int)cudaIpcGetMemHandle((cudaIpcMemHandle_t *)out, ptr);
}

static int open_handle(const unsigned char h[64], void **out)
{
    cudaIpcMemHandle_t handle;
    memcpy(&handle, h, sizeof handle);
    return (int)cudaIpcOpenMemHandle(out, handle, cudaIpcMemLazyEnablePeerAccess);
}

/* pair's consumer, on pipes: "opened", then our line, "result ...", "closed". */
static void run_consumer(const char *hex)
{
    char size[32], prog[4096], line[256];
    const char *bin = getenv("E2E_BIN_DIR");
    snprintf(size, sizeof size, "%zu", cfg.size);
    snprintf(prog, sizeof prog, "%s/pair-runtime", bin ? bin : ".");
    int to[2], from[2];
    if (pipe(to) || pipe(from)) fail("pipe", -1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0), dup2(from[1], 1);
        close(to[1]), close(from[0]);
        execl(prog, "pair", "--consumer", "0", size, "1", "1", hex, (char *)NULL);
        _exit(127);
    }
    close(to[0]), close(from[1]);
    printf("importer-pid: %d\n", (int)pid);
    FILE *in = fdopen(from[0], "r"), *out = fdopen(to[1], "w");
    while (fgets(line, sizeof line, in)) {
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, "opened")) {
            if (cfg.during) {
                fflush(stdout);
                int rc = system(cfg.during);
                printf("during: %d\n", rc);
            }
            fputs("read\n", out), fflush(out);
        } else if (!strncmp(line, "result ", 7)) {
            printf("consumer: %s\n", line + 7);
        } else if (strcmp(line, "closed")) {
            printf("consumer says: %s\n", line);
        }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("exit-of-consumer: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
}

/* A consumer of ours (this program again, a new process: CUDA does not
 * survive fork) that opens, reads and exits without closing. */
static void run_leaker(const char *hex)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "vmm_ipc", "--leaker", hex, (char *)NULL);
        _exit(127);
    }
    waitpid(pid, NULL, 0);
}
static int leaker_main(const char *hex)
{
    unsigned char h[64];
    void *p = NULL;
    uint32_t word = 0;
    if (from_hex(hex, h, 64)) fail("handle parse", -1);
    int r = (int)cudaSetDevice(0);
    if (!r) r = open_handle(h, &p);
    if (!r) r = (int)cudaMemcpy(&word, p, sizeof word, cudaMemcpyDeviceToHost);
    printf("leaker: %s %d\n", !r && word == expected_word(0) ? "ok" : "error", r);
    return 0; /* normal exit, the handle still open */
}

/* --reuse's holder: opens the handle, says "opened", waits for a line on
 * stdin, reads every word (the inverted pattern), says "holder: ...",
 * closes. */
static int holder_main(const char *hex)
{
    unsigned char h[64];
    void *p = NULL;
    char line[16];
    if (from_hex(hex, h, 64)) fail("handle parse", -1);
    int r = (int)cudaSetDevice(0);
    if (!r) r = open_handle(h, &p);
    printf("%s\n", r ? "open failed" : "opened");
    if (!fgets(line, sizeof line, stdin)) r = -1;
    uint32_t *host = malloc(cfg.size);
    if (!r) r = host ? (int)cudaMemcpy(host, p, cfg.size, cudaMemcpyDeviceToHost) : -1;
    bool right = !r;
    for (size_t i = 0; right && i < cfg.size / 4; i++)
        right = host[i] == ~expected_word(i);
    printf("holder: %s %d\n", r ? "error" : right ? "ok" : "wrong", r);
    if (p) cudaIpcCloseMemHandle(p);
    free(host);
    return 0;
}

/* Maps a new allocation (pair's pattern) at va, which nothing maps. */
static CUmemGenericAllocationHandle map_new(CUdeviceptr va, const CUmemAllocationProp *prop,
                                            const uint32_t *host)
{
    CUmemGenericAllocationHandle mem;
    int r = (int)cuMemCreate(&mem, cfg.size, prop, 0);
    if (!r) r = (int)cuMemMap(va, cfg.size, 0, mem, 0);
    CUmemAccessDesc access = {.location = prop->location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!r) r = (int)cuMemSetAccess(va, cfg.size, &access, 1);
    if (!r) r = (int)cudaMemcpy((void *)va, host, cfg.size, cudaMemcpyHostToDevice);
    if (r) fail("the second allocation", r);
    return mem;
}

/* --reuse, after B (mem at va, the inverted pattern) was exported as hex:
 * returns C's handle (mapped at va). */
static CUmemGenericAllocationHandle reuse(CUmemGenericAllocationHandle mem, CUdeviceptr va,
                                          const char *hex, const CUmemAllocationProp *prop,
                                          uint32_t *host)
{
    int to[2], from[2];
    char line[256], size[32];
    snprintf(size, sizeof size, "%zu", cfg.size);
    if (pipe(to) || pipe(from)) fail("pipe", -1);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(to[0], 0), dup2(from[1], 1);
        close(to[1]), close(from[0]);
        execl("/proc/self/exe", "vmm_ipc", "--holder", hex, size, (char *)NULL);
        _exit(127);
    }
    close(to[0]), close(from[1]);
    FILE *in = fdopen(from[0], "r"), *out = fdopen(to[1], "w");
    if (!fgets(line, sizeof line, in) || strcmp(line, "opened\n")) fail("the holder's open", -1);
    int r = (int)cuMemUnmap(va, cfg.size);
    if (!r) r = (int)cuMemRelease(mem);
    if (r) fail("unmap/release of the first allocation", r);
    for (size_t i = 0; i < cfg.size / 4; i++)
        host[i] = expected_word(i);
    CUmemGenericAllocationHandle c = map_new(va, prop, host);
    unsigned char h[64];
    char chex[129];
    r = get_handle(h, (void *)va);
    printf("reuse-export: %d\n", r);
    if (!r) {
        to_hex(h, 64, chex);
        run_consumer(chex);
    }
    cudaGetLastError();
    fputs("read\n", out), fflush(out);
    while (fgets(line, sizeof line, in))
        fputs(line, stdout);
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(in), fclose(out);
    return c;
}

/* --scm's importer: the fd and the word to expect from sock (SCM_RIGHTS),
 * import, map, read; "h" to sock; on "r" from sock, unmap and release. */
static int scm_importer_main(int n, int sock)
{
    int r = (int)cudaSetDevice(0);
    if (!r) r = (int)cudaFree(NULL);
    uint32_t want = 0;
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &want, .iov_len = sizeof want};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    int fd = -1;
    if (recvmsg(sock, &msg, 0) == (ssize_t)sizeof want && CMSG_FIRSTHDR(&msg))
        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
    CUmemGenericAllocationHandle mem = 0;
    CUdeviceptr va = 0;
    if (!r && fd < 0) r = -1;
    if (!r)
        r = (int)cuMemImportFromShareableHandle(&mem, (void *)(uintptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (fd >= 0) close(fd);
    if (!r) r = (int)cuMemAddressReserve(&va, cfg.size, 0, 0, 0);
    if (!r) r = (int)cuMemMap(va, cfg.size, 0, mem, 0);
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!r) r = (int)cuMemSetAccess(va, cfg.size, &access, 1);
    uint32_t word = 0;
    if (!r) r = (int)cudaMemcpy(&word, (void *)va, sizeof word, cudaMemcpyDeviceToHost);
    printf("scm-import-%d: %s %d\n", n, r ? "error" : word == want ? "ok" : "wrong", r);
    char c = 'h';
    if (write(sock, &c, 1) != 1 || read(sock, &c, 1) != 1) return 2;
    if (va) cuMemUnmap(va, cfg.size), cuMemAddressFree(va, cfg.size);
    if (mem) cuMemRelease(mem);
    return 0;
}

/* --scm: see the top. */
static void scm_share(void)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CUmemGenericAllocationHandle mem[2];
    CUdeviceptr va[2];
    const uint32_t words[2] = {0xa0a0a0a0u, 0xb0b0b0b0u};
    for (int i = 0; i < 2; i++) {
        int r = (int)cuMemCreate(&mem[i], cfg.size, &prop, 0);
        if (!r) r = (int)cuMemAddressReserve(&va[i], cfg.size, 0, 0, 0);
        if (!r) r = (int)cuMemMap(va[i], cfg.size, 0, mem[i], 0);
        if (!r) r = (int)cuMemSetAccess(va[i], cfg.size, &access, 1);
        if (!r) r = (int)cuMemsetD32(va[i], words[i], cfg.size / 4);
        if (r) fail("an allocation", r);
    }
    const int of[3] = {0, 0, 1}; /* importer n's allocation */
    int socks[3];
    pid_t pids[3];
    for (int n = 0; n < 3; n++) {
        int sv[2], fd = -1;
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) fail("socketpair", -1);
        char num[16], sock[16], size[32];
        snprintf(num, sizeof num, "%d", n + 1);
        snprintf(sock, sizeof sock, "%d", sv[1]);
        snprintf(size, sizeof size, "%zu", cfg.size);
        fflush(stdout);
        pids[n] = fork();
        if (pids[n] == 0) {
            close(sv[0]);
            execl("/proc/self/exe", "vmm_ipc", "--scm-importer", num, sock, size, (char *)NULL);
            _exit(127);
        }
        close(sv[1]);
        socks[n] = sv[0];
        int r = (int)cuMemExportToShareableHandle(&fd, mem[of[n]],
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (r) fail("cuMemExportToShareableHandle", r);
        char cbuf[CMSG_SPACE(sizeof(int))];
        memset(cbuf, 0, sizeof cbuf);
        struct iovec iov = {.iov_base = (void *)&words[of[n]], .iov_len = sizeof words[0]};
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS, c->cmsg_len = CMSG_LEN(sizeof fd);
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
        if (sendmsg(sv[0], &msg, 0) != (ssize_t)sizeof words[0]) fail("sendmsg", -1);
        close(fd);
        printf("scm-importer-%d: %d\n", n + 1, (int)pids[n]);
    }
    char c;
    for (int n = 0; n < 3; n++)
        if (read(socks[n], &c, 1) != 1) fail("an importer's hold", -1);
    if (cfg.during) {
        fflush(stdout);
        printf("during: %d\n", system(cfg.during));
    }
    for (int n = 0; n < 3; n++) {
        c = 'r';
        if (write(socks[n], &c, 1) != 1) fail("an importer's release", -1);
        int status = 0;
        waitpid(pids[n], &status, 0);
        close(socks[n]);
    }
    for (int i = 0; i < 2; i++) {
        cuMemUnmap(va[i], cfg.size);
        cuMemRelease(mem[i]);
        cuMemAddressFree(va[i], cfg.size);
    }
}

/* Shared the program's own way (a POSIX fd, taken with pidfd_getfd), the
 * importer exits without unmapping or releasing. */
static int direct_importer_main(const char *pid_s, const char *fd_s)
{
    int r = (int)cudaSetDevice(0);
    if (!r) r = (int)cudaFree(NULL);
    int pidfd = (int)syscall(SYS_pidfd_open, atoi(pid_s), 0);
    int fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, atoi(fd_s), 0);
    CUmemGenericAllocationHandle mem = 0;
    CUdeviceptr va = 0;
    if (!r && fd < 0) r = -1;
    if (!r)
        r = (int)cuMemImportFromShareableHandle(&mem, (void *)(uintptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (!r) r = (int)cuMemAddressReserve(&va, cfg.size, 0, 0, 0);
    if (!r) r = (int)cuMemMap(va, cfg.size, 0, mem, 0);
    CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!r) r = (int)cuMemSetAccess(va, cfg.size, &access, 1);
    uint32_t word = 0;
    if (!r) r = (int)cudaMemcpy(&word, (void *)va, sizeof word, cudaMemcpyDeviceToHost);
    printf("direct-import: %s %d\n", !r && word == expected_word(0) ? "ok" : "error", r);
    return 0; /* normal exit, imported and mapped */
}

static void run_direct_importer(CUmemGenericAllocationHandle mem)
{
    int fd = -1;
    int r =
        (int)cuMemExportToShareableHandle(&fd, mem, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    printf("fd-export: %d\n", r);
    if (r) return;
    char pid[16], num[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(num, sizeof num, "%d", fd);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        execl("/proc/self/exe", "vmm_ipc", "--direct-importer", pid, num, (char *)NULL);
        _exit(127);
    }
    waitpid(child, NULL, 0);
    close(fd);
}

static void forged(const unsigned char h[64])
{
    unsigned char bad[64];
    void *p = NULL;
    memcpy(bad, h, 64);
    bad[40] ^= 0x5a; /* the shim's nonce (the driver's handles: a byte of theirs) */
    printf("forged-open: %d\n", open_handle(bad, &p));
    /* The same with the shim's check word made right again (FNV-1a of the
     * first seven words, folded, docs/usage.md): only the registry, which
     * never saw this nonce, tells it from a real one. */
    uint64_t w[8], c = 0xcbf29ce484222325ull;
    memcpy(w, bad, 64);
    for (int i = 0; i < 7; i++)
        c = (c ^ w[i]) * 0x100000001b3ull;
    w[7] = c ^ (c >> 29);
    memcpy(bad, w, 64);
    printf("forged-checked-open: %d\n", open_handle(bad, &p));
    for (int i = 0; i < 64; i++)
        bad[i] = (unsigned char)(i * 37 + 11);
    printf("garbage-open: %d\n", open_handle(bad, &p));
    cudaGetLastError();
}

static void parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--door") && next)
            cfg.door = next, i++;
        else if (!strcmp(a, "--size") && next)
            cfg.size = strtoull(next, NULL, 10), i++;
        else if (!strcmp(a, "--during") && next)
            cfg.during = next, i++;
        else if (!strcmp(a, "--leak-import"))
            cfg.leak_import = true;
        else if (!strcmp(a, "--forged"))
            cfg.forged = true;
        else if (!strcmp(a, "--double-release"))
            cfg.double_release = true;
        else if (!strcmp(a, "--leave-mapped"))
            cfg.leave_mapped = true;
        else if (!strcmp(a, "--malloc"))
            cfg.malloc_only = true;
        else if (!strcmp(a, "--non-dumpable"))
            cfg.non_dumpable = true;
        else if (!strcmp(a, "--direct"))
            cfg.direct = true;
        else if (!strcmp(a, "--stale"))
            cfg.stale = true;
        else if (!strcmp(a, "--reuse"))
            cfg.reuse = true;
        else if (!strcmp(a, "--scm"))
            cfg.scm = true;
        else
            fail("usage", -1);
    }
}

static void malloc_only(void)
{
    void *p = NULL;
    unsigned char h[64];
    char hex[129];
    int r = (int)cudaMalloc(&p, cfg.size);
    if (r) fail("cudaMalloc", r);
    r = get_handle(h, p);
    printf("export: %d\n", r);
    to_hex(h, 64, hex);
    if (!r) printf("malloc-handle: %s\n", hex);
    cudaFree(p);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "--leaker")) return leaker_main(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "--scm-importer"))
        return cfg.size = strtoull(argv[4], NULL, 10),
               scm_importer_main(atoi(argv[2]), atoi(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "--holder"))
        return cfg.size = strtoull(argv[3], NULL, 10), holder_main(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "--direct-importer"))
        return direct_importer_main(argv[2], argv[3]);
    parse(argc, argv);
    /* No ptrace rights on us for anyone, as in a hardened exporter. */
    if (cfg.non_dumpable && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) fail("prctl", -1);
    int r = (int)cudaSetDevice(0);
    if (!r) r = (int)cudaFree(NULL); /* the primary context, current */
    if (r) fail("init", r);
    if (cfg.malloc_only) return malloc_only(), 0;
    if (cfg.scm) return scm_share(), 0;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemGenericAllocationHandle mem;
    CUdeviceptr va = 0;
    r = (int)cuMemCreate(&mem, cfg.size, &prop, 0);
    if (r) fail("cuMemCreate", r);
    if (prop.requestedHandleTypes) fail("the caller's prop changed", -1);
    r = (int)cuMemAddressReserve(&va, cfg.size, 0, 0, 0);
    if (!r) r = (int)cuMemMap(va, cfg.size, 0, mem, 0);
    CUmemAccessDesc access = {.location = prop.location,
                              .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (!r) r = (int)cuMemSetAccess(va, cfg.size, &access, 1);
    if (r) fail("reserve/map/access", r);
    uint32_t *host = malloc(cfg.size);
    for (size_t i = 0; host && i < cfg.size / 4; i++)
        host[i] = cfg.reuse ? ~expected_word(i) : expected_word(i);
    r = host ? (int)cudaMemcpy((void *)va, host, cfg.size, cudaMemcpyHostToDevice) : -1;
    if (r) fail("write", r);
    unsigned char h[64];
    char hex[129];
    r = get_handle(h, (void *)va);
    printf("export: %d\n", r);
    bool exported = !r;
    if (exported) {
        to_hex(h, 64, hex);
        printf("handle: %s\n", hex);
        if (cfg.reuse)
            mem = reuse(mem, va, hex, &prop, host);
        else
            run_consumer(hex);
        if (cfg.leak_import) run_leaker(hex);
        if (cfg.forged) forged(h);
    }
    cudaGetLastError();
    if (cfg.direct) run_direct_importer(mem);
    if (cfg.leave_mapped) return 0;
    r = (int)cuMemUnmap(va, cfg.size);
    if (!r) r = (int)cuMemRelease(mem);
    if (!r) r = (int)cuMemAddressFree(va, cfg.size);
    if (r) fail("unmap/release/free", r);
    if (cfg.double_release) printf("double-release: %d\n", (int)cuMemRelease(mem));
    if (cfg.stale && exported) run_leaker(hex); /* released: "leaker: error CODE" */
    free(host);
    return 0;
}
