/* soak: the CUDA side of the kill soak (tests/crash/test_soak.c drives it).
 * An ordinary CUDA program through the runtime door; it knows nothing of
 * the shim except what it looks up with dlsym (ipcshim_collect,
 * ipcshim_active, ipcshim_stats), so it runs with and without it.
 *
 *   soak producer SALT BLOCKS SIZE
 *       allocates BLOCKS blocks of SIZE bytes, writes a pattern derived from
 *       SALT, exports them ("handle K HEX" lines, then "ready"), then obeys
 *       stdin: "free K" frees block K; "final" frees the rest, calls
 *       ipcshim_collect() once and reports the memory ("final collect=N
 *       free=F baseline=B"), then again after up to 500 ms without
 *       collecting ("settled free=F": a collector thread may be mid-free),
 *       and if that is short tries an allocation the size of the device,
 *       which makes the shim collect under pressure ("pressure free=F").
 *       End of stdin: exit.
 *       More commands (the long soak, scripts/soak): "reset" frees every
 *       block still allocated (those open elsewhere wait in limbo), calls
 *       cudaDeviceReset, then allocates BLOCKS blocks of its own (never
 *       exported) and fills them; "verify" checks them ("LOST own block K
 *       word I" when damaged: a deferred free hit the new allocation);
 *       "burst N" exports N blocks of 4 KiB that nobody opens and frees
 *       them ("burst N done expired=E"); "final" verifies the own blocks
 *       too, and reports "stats handoffs_expired=E".
 *   soak consumer [--clobber] SALT SIZE SEED FLAG HEX...
 *       until end of stdin: opens, re-opens, reads, verifies and closes the
 *       blocks at random. Prints "ready" once every block was opened. Data
 *       that is not the pattern is a lost block -- "POISON ..." and exit 3 --
 *       unless the file FLAG exists (the orchestrator creates it before it
 *       kills the producer: then the exporter is dead and its memory gone).
 *       At end of stdin closes everything: "done opens=.. refused=.. ...".
 *       An open that the shim passed through untracked (its registry lock
 *       was held past IPCSHIM_LOCK_WAIT by a stopped process: the shim's
 *       opens counter did not move) is unprotected by design: bad data read
 *       through it is counted ("unprotected=N"), not reported as lost.
 *       --clobber: now and then close every descriptor >= 3 (the shim's
 *       registry descriptor among them; closefrom-style) and open files that
 *       take their numbers ("clobbers=N").
 *   soak check SALT
 *       the registry still works: allocates, exports, has a child process
 *       (this program again, "soak open SALT SIZE HEX") open, verify and
 *       close, frees, collects; "check active=A exports=E child=ok free=F
 *       total=T".
 * Exit status: 0 fine, 2 a CUDA error, 3 poison, 4 other wrong data. */
#include "api.h"
#include "ipcshim.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../e2e/progs/hex.h"

#define MAX_BLOCKS 32
#define POISON 0xDEADBEEFu

extern char **environ;

static uint32_t word(uint32_t salt, int block, size_t i)
{
    uint32_t x = salt * 2654435761u ^ (uint32_t)(block + 1) * 40503u ^ (uint32_t)i * 2246822519u;
    x ^= x >> 15;
    return x == POISON ? x + 1 : x;
}

static void die(const char *what, int code)
{
    printf("error: %s failed with %d\n", what, code);
    fflush(stdout);
    exit(2);
}

static size_t free_bytes(size_t *total)
{
    size_t f = 0, t = 0;
    api.mem_info(&f, &t);
    if (total) *total = t;
    return f;
}

static void fill(uint64_t dev, uint32_t salt, int block, size_t size)
{
    uint32_t *host = malloc(size);
    if (!host) die("malloc", -1);
    for (size_t i = 0; i < size / 4; i++)
        host[i] = word(salt, block, i);
    int r = api.to_device(dev, host, size);
    free(host);
    if (r) die("copy to device", r);
}

/* 0 the pattern, 1 poison, 2 other bytes, -code a failed read. */
static int verify(uint64_t dev, uint32_t salt, int block, size_t size, uint32_t *host, size_t *at)
{
    int r = api.to_host(host, dev, size);
    if (r) return -r;
    for (size_t i = 0; i < size / 4; i++) {
        if (host[i] == word(salt, block, i)) continue;
        *at = i;
        return host[i] == POISON ? 1 : 2;
    }
    return 0;
}

/* One line from stdin if one is ready now (or end of file): 1 a line, 0
 * nothing yet, -1 end of file. */
static int poll_line(char *line, size_t n, int wait_ms)
{
    struct pollfd p = {0, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return 0;
    if (!fgets(line, (int)n, stdin)) return -1;
    line[strcspn(line, "\n")] = 0;
    return 1;
}

/* ---- producer ---------------------------------------------------------- */

static int producer(uint32_t salt, int blocks, size_t size)
{
    uint64_t ptr[MAX_BLOCKS], own[MAX_BLOCKS] = {0};
    bool freed[MAX_BLOCKS] = {0};
    char hex[129], line[128];
    uint32_t *host = malloc(size);
    if (!host) die("malloc", -1);
    int r = api.init(0);
    if (r) die("init", r);
    size_t total, baseline = free_bytes(&total);
    for (int b = 0; b < blocks; b++) {
        unsigned char h[64];
        if ((r = api.alloc(&ptr[b], size))) die("alloc", r);
        fill(ptr[b], salt, b, size);
        if ((r = api.get_handle(h, ptr[b]))) die("get handle", r);
        to_hex(h, 64, hex);
        printf("handle %d %s\n", b, hex);
    }
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        int k;
        if (sscanf(line, "free %d", &k) == 1 && k >= 0 && k < blocks && !freed[k]) {
            freed[k] = true;
            printf("freed %d %d\n", k, api.free(ptr[k]));
        } else if (!strncmp(line, "reset", 5)) {
            for (int b = 0; b < blocks; b++)
                if (!freed[b]) freed[b] = true, api.free(ptr[b]);
            for (int b = 0; b < blocks; b++)
                if (own[b]) api.free(own[b]), own[b] = 0;
            int (*reset)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "cudaDeviceReset");
            r = reset ? reset() : -1;
            api.init(0);
            for (int b = 0; b < blocks; b++) {
                if (api.alloc(&own[b], size)) die("alloc after reset", -1);
                fill(own[b], salt ^ 0x5a5a5a5au, b, size);
            }
            printf("reset %d\n", r);
        } else if (!strncmp(line, "verify", 6) || !strncmp(line, "final", 5)) {
            for (int b = 0; b < blocks; b++) {
                size_t at = 0;
                int v = own[b] ? verify(own[b], salt ^ 0x5a5a5a5au, b, size, host, &at) : 0;
                if (v) printf("LOST own block %d word %zu (%d)\n", b, at, v);
            }
            if (strncmp(line, "final", 5)) {
                printf("verified\n");
                fflush(stdout);
                continue;
            }
            for (int b = 0; b < blocks; b++)
                if (own[b]) api.free(own[b]), own[b] = 0;
            for (int b = 0; b < blocks; b++)
                if (!freed[b])
                    freed[b] = true, r = api.free(ptr[b]),
                    r ? printf("free %d failed %d\n", b, r) : 0;
            int (*collect)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect");
            int n = collect ? collect() : -1;
            size_t now = free_bytes(NULL);
            printf("final collect=%d free=%zu baseline=%zu\n", n, now, baseline);
            /* The collector thread may be freeing them right now, between
             * taking them out of limbo and the driver's free: let it finish
             * (no collect of ours). */
            for (int i = 0; i < 500 && now < baseline; i++)
                usleep(1000), now = free_bytes(NULL);
            printf("settled free=%zu\n", now);
            if (now < baseline) {
                uint64_t big = 0;
                if (!api.alloc(&big, total)) api.free(big);
                printf("pressure free=%zu\n", free_bytes(NULL));
            }
            int (*stats)(struct ipcshim_stats *, size_t) =
                (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
            struct ipcshim_stats s = {0};
            if (stats) stats(&s, sizeof s);
            printf("stats handoffs_expired=%llu\n", (unsigned long long)s.handoffs_expired);
            printf("bye\n");
            fflush(stdout);
            return 0;
        } else if (sscanf(line, "burst %d", &k) == 1 && k > 0) {
            for (int i = 0; i < k; i++) {
                uint64_t p = 0;
                unsigned char h[64];
                if (api.alloc(&p, 4096)) break;
                api.get_handle(h, p);
                api.free(p);
            }
            printf("burst %d done\n", k);
        }
        fflush(stdout);
    }
    return 0;
}

/* ---- consumer ---------------------------------------------------------- */

/* The shim's count of tracked opens (0 without the shim). */
static unsigned long long tracked_opens(void)
{
    static int (*stats)(struct ipcshim_stats *, size_t);
    if (!stats)
        stats = (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
    struct ipcshim_stats s = {0};
    if (stats) stats(&s, sizeof s);
    return s.opens;
}

static int consumer(uint32_t salt, size_t size, unsigned seed, const char *flag, int blocks,
                    unsigned char handles[][64], bool clobber)
{
    uint64_t held[MAX_BLOCKS] = {0};
    bool opened[MAX_BLOCKS] = {0}, untracked[MAX_BLOCKS] = {0};
    int opens = 0, refused = 0, dead_reads = 0, close_errors = 0, ready = 0;
    int untracked_opens = 0, unprotected = 0, clobbers = 0;
    bool shim = dlsym(RTLD_DEFAULT, "ipcshim_active") != NULL;
    uint32_t *host = malloc(size);
    char line[64];
    int r = api.init(0);
    if (r) die("init", r);
    if (!host) die("malloc", -1);
    for (;;) {
        if (poll_line(line, sizeof line, 0) < 0) break;
        int k = (int)(rand_r(&seed) % (unsigned)blocks), what = (int)(rand_r(&seed) % 8);
        if (clobber && rand_r(&seed) % 300 == 0) { /* closefrom(3), then files take the numbers */
            syscall(SYS_close_range, 3u, ~0u, 0u);
            for (int i = 0; i < 4; i++)
                open("/dev/null", O_RDONLY);
            clobbers++;
        }
        if (!held[k]) {
            uint64_t p = 0;
            unsigned long long before = tracked_opens();
            if ((r = api.open(&p, handles[k]))) {
                refused++; /* freed and gone, or its exporter died: an error, never poison */
                usleep(200);
                continue;
            }
            held[k] = p;
            untracked[k] = shim && tracked_opens() == before;
            untracked_opens += untracked[k];
            opens++;
            if (!opened[k]) opened[k] = true, ready++;
            if (ready == blocks) printf("ready\n"), fflush(stdout), ready++;
        } else if (what == 0 && !untracked[k]) {
            uint64_t again = 0;
            if (!api.open(&again, handles[k])) { /* counted twice, then once */
                opens++;
                if (again != held[k]) printf("WRONG block %d opened at two addresses\n", k);
                if (api.close(again)) close_errors++;
            }
        } else if (what <= 2) {
            if (api.close(held[k])) close_errors++;
            held[k] = 0;
            continue;
        }
        size_t at = 0;
        int v = verify(held[k], salt, k, size, host, &at);
        if (v == 0) continue;
        if (untracked[k]) { /* passed through untracked: unprotected, as without the shim */
            unprotected++;
            api.close(held[k]);
            held[k] = 0;
            continue;
        }
        if (access(flag, F_OK) == 0) { /* the exporter was killed: its memory is gone */
            dead_reads++;
            continue;
        }
        if (v < 0) {
            printf("ERROR read of block %d failed with %d while its exporter lives\n", k, -v);
            fflush(stdout);
            exit(2);
        }
        printf("%s block %d word %zu = %#x while its exporter lives\n", v == 1 ? "POISON" : "WRONG",
               k, at, host[at]);
        fflush(stdout);
        exit(v == 1 ? 3 : 4);
    }
    for (int k = 0; k < blocks; k++)
        if (held[k] && api.close(held[k])) close_errors++;
    printf("done opens=%d refused=%d dead_reads=%d close_errors=%d untracked=%d unprotected=%d "
           "clobbers=%d\n",
           opens, refused, dead_reads, close_errors, untracked_opens, unprotected, clobbers);
    fflush(stdout);
    return 0;
}

/* ---- check ------------------------------------------------------------- */

static int open_verify(uint32_t salt, size_t size, const char *hex)
{
    unsigned char h[64];
    uint64_t p = 0;
    uint32_t *host = malloc(size);
    int r = api.init(0);
    if (r || !host || from_hex(hex, h, 64)) die("init", r);
    if ((r = api.open(&p, h))) die("open", r);
    size_t at = 0;
    int v = verify(p, salt, 0, size, host, &at);
    if ((r = api.close(p))) die("close", r);
    int (*stats)(struct ipcshim_stats *, size_t) =
        (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
    struct ipcshim_stats s = {0};
    if (stats) stats(&s, sizeof s);
    printf("child %s opens=%llu\n",
           v == 0   ? "ok"
           : v == 1 ? "poison"
                    : "wrong",
           (unsigned long long)s.opens);
    return v ? 3 : 0;
}

static int check(uint32_t salt)
{
    size_t size = 65536, total;
    uint64_t p;
    unsigned char h[64];
    char hex[129], line[256] = "", child[64] = "none";
    int r = api.init(0);
    if (r) die("init", r);
    if ((r = api.alloc(&p, size))) die("alloc", r);
    fill(p, salt, 0, size);
    if ((r = api.get_handle(h, p))) die("get handle", r);
    to_hex(h, 64, hex);
    int out[2];
    if (pipe(out)) die("pipe", errno);
    char salt_s[16], size_s[32];
    snprintf(salt_s, sizeof salt_s, "%u", salt);
    snprintf(size_s, sizeof size_s, "%zu", size);
    char *argv[] = {"soak", "open", salt_s, size_s, hex, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    pid_t pid;
    if ((r = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ))) die("spawn", r);
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    if (f && fgets(line, sizeof line, f)) sscanf(line, "child %63s", child);
    if (f) fclose(f);
    int ws;
    waitpid(pid, &ws, 0);
    if ((r = api.free(p))) die("free", r);
    int (*collect)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect");
    int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_active");
    int (*stats)(struct ipcshim_stats *, size_t) =
        (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
    struct ipcshim_stats s = {0};
    if (collect) collect();
    if (stats) stats(&s, sizeof s);
    size_t now = free_bytes(&total);
    printf("check active=%d exports=%llu child=%s free=%zu total=%zu\n", active ? active() : -1,
           (unsigned long long)s.exports, child, now, total);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 5 && !strcmp(argv[1], "producer")) {
        int blocks = atoi(argv[3]);
        if (blocks < 1 || blocks > MAX_BLOCKS) return 2;
        return producer((uint32_t)strtoul(argv[2], NULL, 10), blocks,
                        strtoull(argv[4], NULL, 10) & ~(size_t)3);
    }
    bool clobber = argc > 2 && !strcmp(argv[1], "consumer") && !strcmp(argv[2], "--clobber");
    if (clobber) argv[2] = argv[1], argv++, argc--;
    if (argc >= 7 && !strcmp(argv[1], "consumer")) {
        static unsigned char handles[MAX_BLOCKS][64];
        int blocks = argc - 6;
        if (blocks > MAX_BLOCKS) return 2;
        for (int b = 0; b < blocks; b++)
            if (from_hex(argv[6 + b], handles[b], 64)) return 2;
        return consumer((uint32_t)strtoul(argv[2], NULL, 10),
                        strtoull(argv[3], NULL, 10) & ~(size_t)3,
                        (unsigned)strtoul(argv[4], NULL, 10), argv[5], blocks, handles, clobber);
    }
    if (argc == 3 && !strcmp(argv[1], "check")) return check((uint32_t)strtoul(argv[2], NULL, 10));
    if (argc == 5 && !strcmp(argv[1], "open"))
        return open_verify((uint32_t)strtoul(argv[2], NULL, 10), strtoull(argv[3], NULL, 10),
                           argv[4]);
    fprintf(stderr, "usage: soak producer|consumer|check|open ...\n");
    return 2;
}
