/* errors: CUDA's answers to misuse and bad luck, which the shim must give
 * exactly as CUDA does, and protection it must not drop. A coordinator (no
 * CUDA of its own) drives an exporter and an importer process over pipes
 * and prints one "key: value" line per step; test_errors.c compares them
 * with and without the shim.
 *
 *   errors SCENARIO      open-null | bad-flags | freed-handle | reset |
 *                        reopen-dead | close-fails | refused-exports
 *   errors exporter      (internal) allocate, fill, export; obey commands
 *   errors importer HEX  (internal) obey commands on the handle HEX */
#include "hex.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (1 << 20)
#define POISON 0xDEADBEEFu
extern char **environ;

static unsigned pattern(int which, size_t i)
{
    return (unsigned)(which * 0x01000193u + i * 2654435761u);
}

static void fill(void *dev, int which)
{
    static unsigned host[BYTES / 4];
    for (size_t i = 0; i < BYTES / 4; i++)
        host[i] = pattern(which, i);
    cudaMemcpy(dev, host, BYTES, cudaMemcpyHostToDevice);
}

/* "ok" (pattern which), "poison", "other", or "error N". */
static const char *check(void *dev, int which, char *buf)
{
    static unsigned host[BYTES / 4];
    int r = cudaMemcpy(host, dev, BYTES, cudaMemcpyDeviceToHost);
    if (r) return sprintf(buf, "error %d", r), buf;
    bool ok = true, poison = true;
    for (size_t i = 0; i < BYTES / 4; i++)
        ok &= host[i] == pattern(which, i), poison &= host[i] == POISON;
    return ok ? "ok" : poison ? "poison" : "other";
}

static int collect(void)
{
    int (*fn)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect");
    return fn ? fn() : -1;
}

static int exporter(void)
{
    void *a = NULL, *b = NULL;
    cudaIpcMemHandle_t h;
    char hex[129], line[256], buf[64];
    if (cudaSetDevice(0) || cudaMalloc(&a, BYTES)) return printf("error: setup\n"), 2;
    fill(a, 1);
    if (cudaIpcGetMemHandle(&h, a)) return printf("error: export\n"), 2;
    to_hex((unsigned char *)&h, 64, hex);
    printf("handle %s\n", hex);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        unsigned flags = 0;
        if (!strncmp(line, "free", 4))
            printf("free: %d\n", cudaFree(a));
        else if (!strncmp(line, "gethandle", 9))
            printf("gethandle: %d\n", cudaIpcGetMemHandle(&h, a));
        else if (!strncmp(line, "reset", 5)) {
            /* Reset, then allocate until a block lands where the exported
             * one was (a driver reuses addresses; this makes it certain). */
            int r = cudaDeviceReset(), tries = 0;
            void *extra[4096];
            cudaSetDevice(0);
            while (tries < 4096 && !cudaMalloc(&b, BYTES) && b != a)
                extra[tries++] = b;
            for (int k = 0; k < tries; k++)
                cudaFree(extra[k]);
            if (b == a) fill(b, 2);
            printf("reset: %d %s\n", r, b == a ? "same address" : "no reuse");
        } else if (!strncmp(line, "checkB", 6))
            printf("checkB: %s\n", check(b, 2, buf));
        else if (!strncmp(line, "collect", 7))
            printf("collect: %d\n", collect());
        else if (sscanf(line, "openown %x", &flags) == 1) {
            void *p = NULL;
            printf("openown: %d\n", cudaIpcOpenMemHandle(&p, h, flags));
        } else
            break;
        fflush(stdout);
    }
    return 0;
}

static int importer(const char *hex)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    char line[256], buf[64];
    if (from_hex(hex, (unsigned char *)&h, 64) || cudaSetDevice(0))
        return printf("error: setup\n"), 2;
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        unsigned flags;
        if (sscanf(line, "open %x", &flags) == 1) {
            void *q = NULL;
            int r = cudaIpcOpenMemHandle(&q, h, flags);
            if (!r) p = q;
            printf("open: %d\n", r);
        } else if (!strncmp(line, "opennull", 8))
            printf("opennull: %d\n", cudaIpcOpenMemHandle(NULL, h, 1));
        else if (!strncmp(line, "read", 4))
            printf("read: %s\n", check(p, 1, buf));
        else if (!strncmp(line, "close", 5))
            printf("close: %d\n", cudaIpcCloseMemHandle(p));
        else
            break;
        fflush(stdout);
    }
    return 0;
}

/* ---- coordinator ---- */

struct child {
    pid_t pid;
    FILE *in, *out;
};

static void start(struct child *c, const char *role, const char *arg, char *const *env)
{
    int to[2], from[2];
    if (pipe(to) || pipe(from)) exit(2);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_addclose(&fa, to[1]);
    posix_spawn_file_actions_addclose(&fa, from[0]);
    char *argv[] = {"errors", (char *)role, (char *)arg, NULL};
    if (posix_spawn(&c->pid, "/proc/self/exe", &fa, NULL, argv, env ? env : environ)) exit(2);
    close(to[0]);
    close(from[1]);
    c->in = fdopen(to[1], "w");
    c->out = fdopen(from[0], "r");
}

/* Send a command, relay the child's answer line ("key: value"). */
static void ask(struct child *c, const char *command)
{
    char line[512];
    fprintf(c->in, "%s\n", command);
    fflush(c->in);
    if (fgets(line, sizeof line, c->out))
        fputs(line, stdout);
    else
        printf("%s: no answer\n", command);
    fflush(stdout);
}

static void stop(struct child *c)
{
    fprintf(c->in, "exit\n");
    fclose(c->in);
    fclose(c->out);
    waitpid(c->pid, NULL, 0);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "exporter")) return exporter();
    if (argc >= 3 && !strcmp(argv[1], "importer")) return importer(argv[2]);
    if (argc < 2) return 2;
    const char *scenario = argv[1];
    if (!strcmp(scenario, "refused-exports")) { /* memory legacy IPC cannot export */
        void *m = NULL, *pool = NULL;
        cudaIpcMemHandle_t h;
        if (cudaSetDevice(0) || cudaMallocManaged(&m, 4096, cudaMemAttachGlobal) ||
            cudaMallocAsync(&pool, 4096, 0))
            return printf("error: setup\n"), 2;
        printf("managed: %d\n", cudaIpcGetMemHandle(&h, m));
        printf("pool: %d\n", cudaIpcGetMemHandle(&h, pool));
        cudaFree(m);
        cudaFreeAsync(pool, 0);
        return 0;
    }
    struct child e, i;
    char line[512], hex[130];
    start(&e, "exporter", NULL, NULL);
    if (!fgets(line, sizeof line, e.out) || sscanf(line, "handle %129s", hex) != 1)
        return printf("error: %s", line), 2;
    /* close-fails: the importer's first real close fails (fault injection). */
    char *env[256];
    int n = 0;
    for (char **v = environ; *v && n < 250; v++)
        env[n++] = *v;
    if (!strcmp(scenario, "close-fails")) env[n++] = "SIMCUDA_FAIL_IPC_CLOSE=1";
    env[n] = NULL;
    start(&i, "importer", hex, env);
    if (!fgets(line, sizeof line, i.out)) return 2;

    if (!strcmp(scenario, "open-null")) {
        ask(&i, "opennull");
    } else if (!strcmp(scenario, "bad-flags")) {
        ask(&i, "open 1");
        ask(&i, "open 10"); /* a cached re-open with flags CUDA refuses */
        ask(&e, "openown 10");
    } else if (!strcmp(scenario, "freed-handle")) {
        ask(&i, "open 1");
        ask(&e, "free");
        ask(&e, "gethandle"); /* of freed memory */
        ask(&e, "free");      /* a second free */
        ask(&i, "read");
    } else if (!strcmp(scenario, "reset")) {
        ask(&i, "open 1");
        ask(&e, "free");
        ask(&e, "reset");
        ask(&i, "close");
        ask(&e, "collect");
        ask(&e, "checkB");
    } else if (!strcmp(scenario, "reopen-dead")) {
        ask(&i, "open 1");
        kill(e.pid, SIGKILL);
        waitpid(e.pid, NULL, 0);
        e.pid = -1;
        usleep(100000);
        ask(&i, "open 1");
    } else if (!strcmp(scenario, "close-fails")) {
        ask(&i, "open 1");
        ask(&i, "close"); /* fails: still mapped */
        ask(&e, "free");
        ask(&i, "read");
        ask(&i, "close");
    } else {
        printf("error: unknown scenario %s\n", scenario);
    }
    stop(&i);
    if (e.pid > 0)
        stop(&e);
    else
        fclose(e.in), fclose(e.out);
    return 0;
}
