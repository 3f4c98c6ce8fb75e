/* misc: small CUDA programs for the crash and hostile-input tests
 * (tests/crash/test_hostile.c). Ordinary programs through the runtime door;
 * they know nothing of the shim except ipcshim_collect, looked up with dlsym.
 * One fact per output line ("name value").
 *
 *   misc export SALT           export one block: "handle HEX", "ready"; then
 *                              stdin "free" frees it ("freed RC"); exits at EOF
 *   misc open SALT HEX [hold]  "open RC"; with hold: "opened", wait for a
 *                              stdin line; then "data ok|poison|wrong|readerr",
 *                              "close RC", and a double close "close2 RC"
 *   misc unknown               closes/frees of pointers that are not what the
 *                              call expects, and opens of garbage handles:
 *                              one "name RC" line each
 *   misc fork-exec SALT        export, fork + exec "misc open ... hold" as the
 *                              importer, free while it holds, then let it read:
 *                              "child-data ..", "reclaimed yes|no"
 *   misc fork-importer SALT exit|close|raw-close
 *                              export; an importer process opens, then forks a
 *                              child that exits (atexit handlers and all),
 *                              closes the parent's mapping, or does so from a
 *                              raw clone() without atfork handlers; then the
 *                              exporter frees and the importer reads:
 *                              "importer-data ..", "reclaimed yes|no"
 *   misc exec-open SALT HEX    open the handle ("open RC"), then exec
 *                              "misc open SALT HEX hold" in the same process
 * Exit status 0 unless a CUDA call that must work failed (2). */
#include "api.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "../../e2e/progs/hex.h"

#define SIZE 65536
#define POISON 0xDEADBEEFu

extern char **environ;

static uint32_t word(uint32_t salt, size_t i)
{
    uint32_t x = salt * 2654435761u ^ (uint32_t)i * 2246822519u ^ 0x5bd1e995u;
    x ^= x >> 13;
    return x == POISON ? x + 1 : x;
}

static void die(const char *what, int code)
{
    printf("error: %s failed with %d\n", what, code);
    fflush(stdout);
    exit(2);
}

static size_t free_bytes(void)
{
    size_t f = 0, t = 0;
    api.mem_info(&f, &t);
    return f;
}

/* Allocates, fills and exports one block. */
static uint64_t make_block(uint32_t salt, char hex[129])
{
    uint64_t p;
    unsigned char h[64];
    static uint32_t host[SIZE / 4];
    int r = api.alloc(&p, SIZE);
    if (r) die("alloc", r);
    for (size_t i = 0; i < SIZE / 4; i++)
        host[i] = word(salt, i);
    if ((r = api.to_device(p, host, SIZE))) die("copy to device", r);
    if ((r = api.get_handle(h, p))) die("get handle", r);
    to_hex(h, 64, hex);
    return p;
}

static const char *verdict(uint64_t p, uint32_t salt)
{
    static uint32_t host[SIZE / 4];
    if (api.to_host(host, p, SIZE)) return "readerr";
    for (size_t i = 0; i < SIZE / 4; i++)
        if (host[i] != word(salt, i)) return host[i] == POISON ? "poison" : "wrong";
    return "ok";
}

/* Waits for memory to come back to baseline, collecting (as pair does). */
static const char *reclaimed(size_t baseline)
{
    int (*collect)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect");
    for (int i = 0; i < 2000; i++) {
        if (collect) collect();
        if (free_bytes() >= baseline) return "yes";
        usleep(1000);
    }
    return "no";
}

static bool line_in(char *line, size_t n)
{
    if (!fgets(line, (int)n, stdin)) return false;
    line[strcspn(line, "\n")] = 0;
    return true;
}

static int export_main(uint32_t salt)
{
    char hex[129], line[64];
    int r = api.init(0);
    if (r) die("init", r);
    uint64_t p = make_block(salt, hex);
    printf("handle %s\nready\n", hex);
    fflush(stdout);
    while (line_in(line, sizeof line))
        if (!strcmp(line, "free")) printf("freed %d\n", api.free(p)), fflush(stdout);
    return 0;
}

static int open_main(uint32_t salt, const char *hex, bool hold)
{
    unsigned char h[64];
    char line[64];
    uint64_t p = 0;
    int r = api.init(0);
    if (r) die("init", r);
    if (from_hex(hex, h, 64)) die("handle parse", -1);
    r = api.open(&p, h);
    printf("open %d\n", r);
    fflush(stdout);
    if (r) return 0;
    if (hold) {
        printf("opened\n");
        fflush(stdout);
        line_in(line, sizeof line);
    }
    printf("data %s\n", verdict(p, salt));
    printf("close %d\n", api.close(p));
    printf("close2 %d\n", api.close(p));
    return 0;
}

static int unknown_main(void)
{
    char hex[129];
    unsigned char h[64], g[64];
    uint64_t p = 0, q, o = 0;
    int r = api.init(0);
    if (r) die("init", r);
    if ((r = api.alloc(&p, SIZE))) die("alloc", r);
    char *host = malloc(4096);
    printf("close-garbage %d\n", api.close(0x1234));
    printf("close-null %d\n", api.close(0));
    printf("close-own-alloc %d\n", api.close(p));
    printf("close-interior %d\n", api.close(p + 512));
    printf("free-garbage %d\n", api.free(0x1234));
    printf("free-host %d\n", api.free((uint64_t)(uintptr_t)host));
    printf("free-interior %d\n", api.free(p + 512));
    printf("free %d\n", api.free(p));
    printf("free-double %d\n", api.free(p));
    free(host);

    /* Garbage handles, from nothing to nearly right. */
    q = make_block(7, hex);
    from_hex(hex, h, 64);
    memset(g, 0, 64);
    printf("open-zero %d\n", api.open(&o, g));
    srand(12345);
    for (int i = 0; i < 64; i++)
        g[i] = (unsigned char)rand();
    printf("open-random %d\n", api.open(&o, g));
    memcpy(g, h, 8); /* the simulator's magic and ABI, garbage after */
    printf("open-magic %d\n", api.open(&o, g));
    memcpy(g, h, 64);
    g[20] ^= 0x5a;
    printf("open-flipped %d\n", api.open(&o, g));
    memcpy(g, h, 64);
    g[63] ^= 1;
    printf("open-flipped-tail %d\n", api.open(&o, g));
    printf("close-after-failed-open %d\n", api.close(o));
    printf("free-exported %d\n", api.free(q));
    /* A double free of an exported block: without the shim the driver says
     * no; with it the block may be in limbo (its hand-off is unclaimed). */
    printf("free-exported-again %d\n", api.free(q));
    return 0;
}

/* Spawns or execs "misc open SALT HEX hold" with pipes to and from it. */
static pid_t start_importer(const char *salt, const char *hex, FILE **to, FILE **from,
                            const char *mode)
{
    int in[2], out[2];
    if (pipe(in) || pipe(out)) die("pipe", errno);
    char *argv[] = {"misc", (char *)mode, (char *)salt, (char *)hex, "hold", NULL};
    pid_t pid = fork(); /* fork + exec from a CUDA process (the supported way) */
    if (pid < 0) die("fork", errno);
    if (pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execve("/proc/self/exe", argv, environ);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    *to = fdopen(in[1], "w");
    *from = fdopen(out[0], "r");
    return pid;
}

/* Reads the importer's lines until one starts with key; copies its value. */
static bool expect_line(FILE *from, const char *key, char *value, size_t n)
{
    char line[256];
    size_t k = strlen(key);
    while (fgets(line, sizeof line, from)) {
        line[strcspn(line, "\n")] = 0;
        printf("importer: %s\n", line);
        if (!strncmp(line, key, k)) {
            snprintf(value, n, "%s", line[k] == ' ' ? line + k + 1 : line + k);
            return true;
        }
    }
    return false;
}

static int fork_exec_main(const char *salt_s, const char *mode)
{
    char hex[129], value[64] = "none";
    FILE *to, *from;
    int r = api.init(0);
    if (r) die("init", r);
    size_t baseline = free_bytes();
    uint64_t p = make_block((uint32_t)strtoul(salt_s, NULL, 10), hex);
    pid_t pid = start_importer(salt_s, hex, &to, &from, mode);
    if (!expect_line(from, "opened", value, sizeof value)) die("importer open", -1);
    printf("free %d\n", api.free(p)); /* while the importer holds it */
    fputs("read\n", to), fflush(to);
    if (!expect_line(from, "data", value, sizeof value)) snprintf(value, sizeof value, "none");
    printf("child-data %s\n", value);
    fclose(to);
    while (expect_line(from, "\x01", value, sizeof value)) {
    }
    int ws;
    waitpid(pid, &ws, 0);
    printf("child-status %d\n", WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws));
    printf("reclaimed %s\n", reclaimed(baseline));
    return 0;
}

/* The importer for fork-importer: opens, has a child that exits / closes
 * the parent's mapping, then waits, reads and closes. */
static int forking_importer_main(uint32_t salt, const char *hex, const char *how)
{
    unsigned char h[64];
    char line[64];
    uint64_t p = 0;
    int r = api.init(0);
    if (r) die("init", r);
    if (from_hex(hex, h, 64)) die("handle parse", -1);
    if ((r = api.open(&p, h))) die("open", r);
    printf("open 0\n");
    fflush(stdout);
    pid_t pid;
    if (!strcmp(how, "raw-close")) /* fork without the atfork handlers */
        pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    else
        pid = fork();
    if (pid < 0) die("fork", errno);
    if (pid == 0) {
        if (!strcmp(how, "exit")) exit(0); /* atexit handlers, the shim's included */
        printf("child-close %d\n", api.close(p));
        fflush(stdout);
        _exit(0);
    }
    int ws;
    waitpid(pid, &ws, 0);
    printf("opened\n");
    fflush(stdout);
    line_in(line, sizeof line);
    printf("data %s\n", verdict(p, salt));
    printf("close %d\n", api.close(p));
    fflush(stdout);
    return 0;
}

/* Opens, then replaces itself (same pid, same start time) with an importer
 * of the same handle: the old image's holder and lease must not linger. */
static int exec_open_main(char **argv)
{
    unsigned char h[64];
    uint64_t p = 0;
    int r = api.init(0);
    if (r) die("init", r);
    if (from_hex(argv[3], h, 64)) die("handle parse", -1);
    printf("open %d\n", api.open(&p, h));
    fflush(stdout);
    char *args[] = {"misc", "open", argv[2], argv[3], "hold", NULL};
    execve("/proc/self/exe", args, environ);
    die("exec", errno);
    return 2;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "export") && argc == 3)
        return export_main((uint32_t)strtoul(argv[2], NULL, 10));
    if (!strcmp(mode, "open") && argc >= 4)
        return open_main((uint32_t)strtoul(argv[2], NULL, 10), argv[3],
                         argc > 4 && !strcmp(argv[4], "hold"));
    if (!strcmp(mode, "unknown")) return unknown_main();
    if (!strcmp(mode, "exec-open") && argc == 4) return exec_open_main(argv);
    if (!strcmp(mode, "fork-exec") && argc == 3) return fork_exec_main(argv[2], "open");
    if (!strcmp(mode, "fork-importer") && argc == 4) {
        static char how_mode[64];
        snprintf(how_mode, sizeof how_mode, "importer-%s", argv[3]);
        return fork_exec_main(argv[2], how_mode);
    }
    if (!strncmp(mode, "importer-", 9) && argc >= 4)
        return forking_importer_main((uint32_t)strtoul(argv[2], NULL, 10), argv[3], mode + 9);
    fprintf(stderr, "usage: misc export|open|unknown|fork-exec|fork-importer ...\n");
    return 2;
}
