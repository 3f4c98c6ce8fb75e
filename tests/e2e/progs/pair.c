/* pair: a producer exports device blocks to consumer processes and frees
 * them at a chosen moment; each consumer opens every block (several times,
 * from several threads), reads it, checks it and closes it. The program
 * knows nothing of the shim (--collect only looks up ipcshim_collect with
 * dlsym). It is the demo and the end-to-end tests' workhorse.
 *
 *   pair [--blocks N] [--size BYTES] [--consumers N] [--opens K] [--threads T]
 *        [--free before-open|while-reading|after-close|never] [--interior]
 *        [--device D] [--reclaim-wait MS] [--collect] [--hold MS]
 *        [--self-open] [--then-alloc BYTES] [--calls]
 *
 * Output, one fact per line: "consumer K: ok|poison|wrong|error ...",
 * "reclaimed: yes MS" or "reclaimed: no BYTES", "timing: last-close-to-free MS";
 * after a while-reading free, "after-free: charged BYTES" (device memory
 * still used beyond the baseline) and, under the shim, "after-free:
 * deferred N" (the shim's count of frees sent to limbo);
 * with --calls, when the shim is loaded (ipcshim_calls found with dlsym),
 * "calls SYMBOL DOOR: N" for the IPC and allocation functions, from the
 * producer and (as "consumer K: calls ...") from each consumer.
 * Exit status: 0 every consumer read the data written, 1 some consumer read
 * other bytes (the poison of a freed block), 2 an error. */
#include "api.h"
#include "ipcshim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "hex.h"

#define MAX_BLOCKS 256
#define MAX_CONSUMERS 64
#define MAX_THREADS 16
#define POISON 0xDEADBEEFu

extern char **environ;

struct config {
    int blocks, consumers, opens, threads, device, reclaim_wait_ms, hold_ms;
    size_t size, then_alloc;
    const char *free_when;
    bool interior, collect, self_open, calls;
};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static uint32_t expected_word(int block, size_t i)
{
    return (uint32_t)(0x10000000u * (block + 1) + i) ^ 0x01010101u;
}

static void fail(const char *what, int code)
{
    printf("error: %s failed with %d\n", what, code);
    fflush(stdout);
    exit(2);
}

/* ---- consumer ---------------------------------------------------------- */

struct consumer {
    int blocks, opens;
    unsigned char handles[MAX_BLOCKS][64];
    uint64_t first[MAX_BLOCKS];
    int error;
    pthread_barrier_t opened, read_done;
};

static struct consumer C;

/* --calls: the shim's per-door call counts of this process, if it is there. */
static void print_calls(void)
{
    static const char *const syms[] = {"cudaMalloc",
                                       "cudaFree",
                                       "cudaIpcGetMemHandle",
                                       "cudaIpcOpenMemHandle",
                                       "cudaIpcCloseMemHandle",
                                       "cuMemAlloc_v2",
                                       "cuMemFree_v2",
                                       "cuIpcGetMemHandle",
                                       "cuIpcOpenMemHandle",
                                       "cuIpcOpenMemHandle_v2",
                                       "cuIpcCloseMemHandle"};
    static const char *const doors[] = {"runtime", "driver", "resolver"};
    long long (*calls)(const char *, const char *) =
        (long long (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "ipcshim_calls");
    if (!calls) return;
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
        for (size_t d = 0; d < 3; d++)
            printf("calls %s %s: %lld\n", syms[i], doors[d], calls(syms[i], doors[d]));
    fflush(stdout);
}

/* One consumer thread: open every block `opens` times, wait for the read,
 * then close every open in a shuffled order. */
static void *consumer_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + (unsigned)getpid();
    int n = C.blocks * C.opens;
    if (api.attach_thread())
        fprintf(stderr, "pair: cannot attach the context to a thread\n"), C.error = 1;
    uint64_t *ptrs = calloc((size_t)n, sizeof *ptrs);
    for (int k = 0; k < n; k++) {
        int b = k % C.blocks, r = api.open(&ptrs[k], C.handles[b]);
        if (r) {
            fprintf(stderr, "pair: open of block %d failed with %d\n", b, r), C.error = 1;
            ptrs[k] = 0;
            continue;
        }
        uint64_t expected = __atomic_load_n(&C.first[b], __ATOMIC_ACQUIRE);
        if (!expected)
            __atomic_compare_exchange_n(&C.first[b], &expected, ptrs[k], false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE);
        if (expected && expected != ptrs[k])
            fprintf(stderr, "pair: block %d opened at two addresses\n", b), C.error = 1;
    }
    pthread_barrier_wait(&C.opened);
    pthread_barrier_wait(&C.read_done);
    for (int k = n - 1; k > 0; k--) {
        int j = (int)(rand_r(&seed) % (unsigned)(k + 1));
        uint64_t t = ptrs[k];
        ptrs[k] = ptrs[j], ptrs[j] = t;
    }
    for (int k = 0; k < n; k++) {
        int r = ptrs[k] ? api.close(ptrs[k]) : 0;
        if (r) fprintf(stderr, "pair: close failed with %d\n", r), C.error = 1;
    }
    free(ptrs);
    return NULL;
}

/* The first words of block 0 as read, and as written: the demo shows them. */
static char first_words[160];

static const char *check_blocks(size_t size)
{
    uint32_t *host = malloc(size);
    const char *verdict = "ok";
    for (int b = 0; b < C.blocks && host; b++) {
        if (!C.first[b]) return "error (not open)";
        int r = api.to_host(host, C.first[b], size);
        if (r) return "error (read failed)";
        if (b == 0 && size >= 16)
            snprintf(first_words, sizeof first_words,
                     "0x%08x 0x%08x 0x%08x 0x%08x (written: 0x%08x 0x%08x 0x%08x 0x%08x)", host[0],
                     host[1], host[2], host[3], expected_word(0, 0), expected_word(0, 1),
                     expected_word(0, 2), expected_word(0, 3));
        for (size_t i = 0; i < size / 4; i++) {
            if (host[i] == expected_word(b, i)) continue;
            verdict = host[i] == POISON ? "poison" : "wrong";
            break;
        }
    }
    free(host);
    return verdict;
}

/* argv: --consumer DEVICE SIZE OPENS THREADS [--calls] HANDLE... ; commands
 * on stdin. */
static int consumer_main(int argc, char **argv)
{
    int device = atoi(argv[2]), threads = atoi(argv[5]);
    size_t size = strtoull(argv[3], NULL, 10);
    char line[64];
    C.opens = atoi(argv[4]);
    bool calls = argc > 6 && !strcmp(argv[6], "--calls");
    int first = 6 + calls;
    C.blocks = argc - first;
    for (int b = 0; b < C.blocks; b++)
        if (from_hex(argv[first + b], C.handles[b], 64)) fail("handle parse", -1);
    int r = api.init(device);
    if (r) fail("init", r);
    pthread_barrier_init(&C.opened, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&C.read_done, NULL, (unsigned)threads + 1);
    pthread_t tid[MAX_THREADS];
    for (int t = 0; t < threads; t++)
        pthread_create(&tid[t], NULL, consumer_thread, (void *)(uintptr_t)t);
    pthread_barrier_wait(&C.opened);
    printf("opened\n"), fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 2;
    printf("result %s\n", C.error ? "error" : check_blocks(size));
    if (first_words[0]) printf("read %s\n", first_words);
    fflush(stdout);
    pthread_barrier_wait(&C.read_done);
    for (int t = 0; t < threads; t++)
        pthread_join(tid[t], NULL);
    if (calls) print_calls();
    printf("closed\n"), fflush(stdout);
    return C.error ? 2 : 0;
}

/* ---- producer ---------------------------------------------------------- */

struct child {
    pid_t pid;
    FILE *commands, *replies;
};

static void spawn_consumer(struct child *c, const struct config *cfg, char hex[][129])
{
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) fail("pipe", errno);
    char dev[16], size[32], opens[16], threads[16];
    snprintf(dev, sizeof dev, "%d", cfg->device);
    snprintf(size, sizeof size, "%zu", cfg->size);
    snprintf(opens, sizeof opens, "%d", cfg->opens);
    snprintf(threads, sizeof threads, "%d", cfg->threads);
    char *argv[7 + MAX_BLOCKS + 1] = {"pair", "--consumer", dev, size, opens, threads};
    int first = 6;
    if (cfg->calls) argv[first++] = "--calls";
    for (int b = 0; b < cfg->blocks; b++)
        argv[first + b] = hex[b];
    argv[first + cfg->blocks] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
    posix_spawn_file_actions_addclose(&fa, to_child[1]);
    posix_spawn_file_actions_addclose(&fa, from_child[0]);
    int r = posix_spawn(&c->pid, "/proc/self/exe", &fa, NULL, argv, environ);
    if (r) fail("spawn", r);
    close(to_child[0]), close(from_child[1]);
    c->commands = fdopen(to_child[1], "w");
    c->replies = fdopen(from_child[0], "r");
}

/* Reads the consumer's next line into buf; false at end of file. */
static bool reply(struct child *c, char *buf, size_t n)
{
    if (!fgets(buf, (int)n, c->replies)) return false;
    buf[strcspn(buf, "\n")] = 0;
    return true;
}

static void free_all(const struct config *cfg, uint64_t *blocks)
{
    for (int b = 0; b < cfg->blocks; b++) {
        int r = api.free(blocks[b]);
        if (r) fail("free", r);
    }
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    api.mem_info(&f, &t);
    return f;
}

static int producer_main(const struct config *cfg)
{
    static char hex[MAX_BLOCKS][129];
    uint64_t blocks[MAX_BLOCKS];
    struct child children[MAX_CONSUMERS];
    char line[128];
    int r = api.init(cfg->device), status = 0;
    if (r) fail("init", r);
    size_t baseline = free_bytes();
    uint32_t *host = malloc(cfg->size);
    for (int b = 0; b < cfg->blocks; b++) {
        unsigned char handle[64];
        if ((r = api.alloc(&blocks[b], cfg->size))) fail("alloc", r);
        for (size_t i = 0; i < cfg->size / 4; i++)
            host[i] = expected_word(b, i);
        if ((r = api.to_device(blocks[b], host, cfg->size))) fail("copy to device", r);
        if ((r = api.get_handle(handle, blocks[b] + (cfg->interior ? cfg->size / 2 : 0))))
            fail("get handle", r);
        to_hex(handle, 64, hex[b]);
        if (cfg->self_open) {
            uint64_t own = 0;
            r = api.open(&own, handle);
            printf("self-open: %s\n", r                  ? "error"
                                      : own == blocks[b] ? "original pointer"
                                                         : "other pointer");
            if (!r) api.close(own);
        }
    }
    free(host);
    if (!strcmp(cfg->free_when, "before-open")) free_all(cfg, blocks);
    for (int k = 0; k < cfg->consumers; k++)
        spawn_consumer(&children[k], cfg, hex);
    for (int k = 0; k < cfg->consumers; k++)
        if (!reply(&children[k], line, sizeof line) || strcmp(line, "opened"))
            printf("consumer %d: error (%s)\n", k, line), status = 2;
    if (!strcmp(cfg->free_when, "while-reading")) {
        free_all(cfg, blocks);
        size_t after = free_bytes();
        printf("after-free: charged %zu\n", after < baseline ? baseline - after : 0);
        int (*stats)(struct ipcshim_stats *, size_t) =
            (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
        struct ipcshim_stats s;
        if (stats && !stats(&s, sizeof s))
            printf("after-free: deferred %llu\n", (unsigned long long)s.frees_deferred);
    }
    if (cfg->hold_ms) usleep((useconds_t)cfg->hold_ms * 1000);
    for (int k = 0; k < cfg->consumers; k++)
        fputs("read\n", children[k].commands), fflush(children[k].commands);
    for (int k = 0; k < cfg->consumers; k++) {
        if (!reply(&children[k], line, sizeof line)) continue;
        const char *verdict = strncmp(line, "result ", 7) ? line : line + 7;
        printf("consumer %d: %s\n", k, verdict);
        if (!strcmp(verdict, "poison") || !strcmp(verdict, "wrong"))
            status = status ? status : 1;
        else if (strcmp(verdict, "ok"))
            status = 2;
    }
    double last_close = 0;
    for (int k = 0; k < cfg->consumers; k++) {
        while (reply(&children[k], line, sizeof line) && strcmp(line, "closed")) {
            if (!strncmp(line, "read ", 5)) /* the words it read: "read by K: ..." */
                printf("read by %d: %s\n", k, line + 5);
            else
                printf("consumer %d: %s\n", k, line);
        }
        last_close = now_ms();
        int ws;
        waitpid(children[k].pid, &ws, 0);
        if (!WIFEXITED(ws) || (WEXITSTATUS(ws) && WEXITSTATUS(ws) != 1))
            status = status ? status : 2;
    }
    if (!strcmp(cfg->free_when, "after-close")) free_all(cfg, blocks);
    int (*collect)(void) =
        cfg->collect ? (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect") : NULL;
    double start = now_ms();
    size_t now = 0;
    for (;;) {
        if (collect) collect();
        if ((now = free_bytes()) >= baseline) break;
        if (now_ms() - start > cfg->reclaim_wait_ms) break;
        usleep(100);
    }
    if (now >= baseline)
        printf("reclaimed: yes %.3f\ntiming: last-close-to-free %.3f\n", now_ms() - start,
               now_ms() - last_close);
    else
        printf("reclaimed: no %zu\n", baseline - now);
    if (cfg->then_alloc) {
        uint64_t extra = 0;
        r = api.alloc(&extra, cfg->then_alloc);
        printf("then-alloc: %s\n", r ? "failed" : "ok");
        if (!r) api.free(extra);
    }
    if (cfg->calls) print_calls();
    return status;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 6 && !strcmp(argv[1], "--consumer")) return consumer_main(argc, argv);
    struct config cfg = {.blocks = 1,
                         .consumers = 1,
                         .opens = 1,
                         .threads = 1,
                         .reclaim_wait_ms = 2000,
                         .size = 1 << 20,
                         .free_when = "while-reading"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--blocks"))
            cfg.blocks = atoi(v), i++;
        else if (!strcmp(a, "--size"))
            cfg.size = strtoull(v, NULL, 0), i++;
        else if (!strcmp(a, "--consumers"))
            cfg.consumers = atoi(v), i++;
        else if (!strcmp(a, "--opens"))
            cfg.opens = atoi(v), i++;
        else if (!strcmp(a, "--threads"))
            cfg.threads = atoi(v), i++;
        else if (!strcmp(a, "--device"))
            cfg.device = atoi(v), i++;
        else if (!strcmp(a, "--free"))
            cfg.free_when = v, i++;
        else if (!strcmp(a, "--reclaim-wait"))
            cfg.reclaim_wait_ms = atoi(v), i++;
        else if (!strcmp(a, "--hold"))
            cfg.hold_ms = atoi(v), i++;
        else if (!strcmp(a, "--interior"))
            cfg.interior = true;
        else if (!strcmp(a, "--collect"))
            cfg.collect = true;
        else if (!strcmp(a, "--self-open"))
            cfg.self_open = true;
        else if (!strcmp(a, "--calls"))
            cfg.calls = true;
        else if (!strcmp(a, "--then-alloc"))
            cfg.then_alloc = strtoull(v, NULL, 0), i++;
        else {
            fprintf(stderr, "pair: unknown option %s\n", a);
            return 2;
        }
    }
    if (cfg.blocks < 1 || cfg.blocks > MAX_BLOCKS || cfg.consumers < 0 ||
        cfg.consumers > MAX_CONSUMERS || cfg.threads < 1 || cfg.threads > MAX_THREADS ||
        cfg.opens < 1 || cfg.size < 4) {
        fprintf(stderr, "pair: option out of range\n");
        return 2;
    }
    cfg.size &= ~(size_t)3;
    printf("door: %s\n", api.door);
    return producer_main(&cfg);
}
