/* probes: what the CUDA driver itself does in the cases NVIDIA leaves
 * undefined or undocumented, measured without the shim (and one case with
 * it). Run by scripts/gpu-check on a real GPU; on the simulator in CI so that
 * it cannot rot (its answers there describe the simulator, not a GPU).
 *
 *   probes               run every probe, print "probe NAME: RESULT" lines
 *   probes exporter ...  (internal) the exporting process
 *   probes importer HEX  (internal) the importing process
 *
 * Probes: free-while-mapped, exporter-exit-while-mapped,
 * exporter-kill-while-mapped, open-freed-handle, reopen-same-context,
 * close-waits-for-kernel, small-allocs-share-handle, importer-killed (the
 * exporter's view of a SIGKILLed importer, with the shim when preloaded),
 * driver-threads (the threads the driver starts in a process: the
 * simulator starts one, see tests/simcuda/README.md). */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BYTES (8u << 20)
#define POISON 0xDEADBEEFu
extern char **environ;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static unsigned word(size_t i)
{
    return (unsigned)(i * 2654435761u) ^ 0x5a5a5a5au;
}

/* Reads a kernel spins on, so that a close can be timed against it. */
__global__ void spin_read(const unsigned *p, size_t n, long long cycles, unsigned *sink)
{
    long long start = clock64();
    unsigned acc = 0;
    size_t i = threadIdx.x;
    while (clock64() - start < cycles) {
        acc += p[i];
        i = (i + 4099) % n;
    }
    if (acc == 0x12345678u) *sink = acc;
}

static void hex_out(const void *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", ((const unsigned char *)b)[i]);
}
static int hex_in(const char *s, void *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return -1;
        ((unsigned char *)b)[i] = (unsigned char)v;
    }
    return 0;
}

static const char *verdict(void *dev, char *buf)
{
    static unsigned host[BYTES / 4];
    int r = cudaMemcpy(host, dev, BYTES, cudaMemcpyDeviceToHost);
    if (r) return sprintf(buf, "error %d (%s)", r, cudaGetErrorName((cudaError_t)r)), buf;
    size_t good = 0, poison = 0;
    for (size_t i = 0; i < BYTES / 4; i++)
        good += host[i] == word(i), poison += host[i] == POISON;
    if (good == BYTES / 4) return "data intact";
    if (poison == BYTES / 4) return "poison (simulator)";
    return sprintf(buf, "other bytes (%zu of %u words intact)", good, BYTES / 4), buf;
}

static long long free_mib(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return (long long)(f >> 20);
}

/* ---- the two processes ---- */

static int exporter(void)
{
    void *a = NULL;
    cudaIpcMemHandle_t h;
    char hex[129], line[128];
    static unsigned host[BYTES / 4];
    if (cudaSetDevice(0) || cudaMalloc(&a, BYTES)) return printf("error setup\n"), 2;
    for (size_t i = 0; i < BYTES / 4; i++)
        host[i] = word(i);
    cudaMemcpy(a, host, BYTES, cudaMemcpyHostToDevice);
    if (cudaIpcGetMemHandle(&h, a)) return printf("error export\n"), 2;
    hex_out(&h, 64, hex);
    printf("%s\n", hex);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "free", 4)) {
            long long before = free_mib();
            int r = cudaFree(a);
            printf("%d %lld\n", r, free_mib() - before);
        } else if (!strncmp(line, "meminfo", 7)) {
            printf("%lld\n", free_mib());
        } else if (!strncmp(line, "collect", 7)) {
            /* Wait (up to 3 s, collecting) until free memory reaches TARGET MiB. */
            int (*collect)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_collect");
            long long target = atoll(line + 8);
            double t0 = now_ms();
            while (free_mib() < target && now_ms() - t0 < 3000) {
                if (collect) collect();
                usleep(5000);
            }
            printf("%s after %.0f ms\n", free_mib() >= target ? "yes" : "no", now_ms() - t0);
        } else if (!strncmp(line, "exit", 4)) {
            exit(0); /* without freeing: as most programs end */
        }
        fflush(stdout);
    }
    return 0;
}

static int importer(const char *hex)
{
    cudaIpcMemHandle_t h;
    void *p = NULL;
    char line[128], buf[128];
    if (hex_in(hex, &h, 64) || cudaSetDevice(0)) return printf("error setup\n"), 2;
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "open", 4)) {
            void *q = NULL;
            alarm(20); /* an open that hangs is a result too: the coordinator sees no answer */
            int r = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
            alarm(0);
            printf("%d %s%s\n", r, cudaGetErrorName((cudaError_t)r),
                   r        ? ""
                   : !p     ? " (first)"
                   : q == p ? " (same pointer)"
                            : " (another pointer)");
            if (!r && !p) p = q;
        } else if (!strncmp(line, "read", 4)) {
            printf("%s\n", verdict(p, buf));
        } else if (!strncmp(line, "close", 5)) {
            int r = cudaIpcCloseMemHandle(p);
            printf("%d %s\n", r, cudaGetErrorName((cudaError_t)r));
        } else if (!strncmp(line, "kernelclose", 11)) {
            unsigned *sink;
            int rate = 0;
            cudaMalloc(&sink, 4);
            cudaDeviceGetAttribute(&rate, cudaDevAttrClockRate, 0);      /* kHz */
            long long cycles = (long long)(rate ? rate : 1000000) * 300; /* about 300 ms */
            double t0 = now_ms();
            spin_read<<<1, 32>>>((const unsigned *)p, BYTES / 4, cycles, sink);
            int r = cudaIpcCloseMemHandle(p);
            double closed = now_ms() - t0;
            cudaDeviceSynchronize();
            printf("%d %.1f %.1f\n", r, closed, now_ms() - t0);
        } else if (!strncmp(line, "meminfo", 7)) {
            printf("%lld\n", free_mib());
        } else {
            break;
        }
        fflush(stdout);
    }
    return 0;
}

/* ---- coordinator ---- */

struct child {
    pid_t pid;
    FILE *in, *out;
};

static int start(struct child *c, const char *role, const char *arg)
{
    int to[2], from[2];
    if (pipe(to) || pipe(from)) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from[1], 1);
    posix_spawn_file_actions_addclose(&fa, to[1]);
    posix_spawn_file_actions_addclose(&fa, from[0]);
    char *argv[] = {(char *)"probes", (char *)role, (char *)arg, NULL};
    if (posix_spawn(&c->pid, "/proc/self/exe", &fa, NULL, argv, environ)) return -1;
    close(to[0]);
    close(from[1]);
    c->in = fdopen(to[1], "w");
    c->out = fdopen(from[0], "r");
    return 0;
}

/* Send a command and return the answer line (static buffer), or "no answer". */
static const char *ask(struct child *c, const char *command)
{
    static char line[2][512];
    static int k;
    k ^= 1;
    fprintf(c->in, "%s\n", command);
    fflush(c->in);
    if (!fgets(line[k], sizeof line[k], c->out)) return "no answer (hang or crash)";
    line[k][strcspn(line[k], "\n")] = 0;
    return line[k];
}

static void finish(struct child *c, bool kill_it)
{
    if (c->pid <= 0) return;
    if (kill_it) kill(c->pid, SIGKILL);
    fclose(c->in);
    fclose(c->out);
    waitpid(c->pid, NULL, 0);
    c->pid = -1;
}

/* An exporter with its handle, and an importer ready on it. */
static int pair(struct child *e, struct child *i)
{
    char hex[160];
    if (start(e, "exporter", NULL) || !fgets(hex, sizeof hex, e->out)) return -1;
    hex[strcspn(hex, "\n")] = 0;
    char ready[64];
    if (start(i, "importer", hex) || !fgets(ready, sizeof ready, i->out)) return -1;
    return 0;
}

static void probe(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void probe(const char *name, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("probe %s: ", name);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

/* This process's threads: their count, and their names into names. */
static int threads(char *names, size_t len)
{
    int n = 0;
    size_t used = 0;
    names[0] = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    for (struct dirent *t; (t = readdir(d));) {
        if (t->d_name[0] == '.') continue;
        char path[64], comm[32] = "?";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", t->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
            fclose(f);
        }
        if (used < len)
            used += (size_t)snprintf(names + used, len - used, "%s%s", n ? ", " : "", comm);
        n++;
    }
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "exporter")) return exporter();
    if (argc >= 3 && !strcmp(argv[1], "importer")) return importer(argv[2]);
    struct child e, i;
    char a[512], b[512];
    signal(SIGPIPE, SIG_IGN); /* a child that died answers "no answer" */

    {
        char before[256], after[256];
        int n0 = threads(before, sizeof before);
        cudaError_t r = cudaFree(0); /* initialises the driver and the primary context */
        int n1 = threads(after, sizeof after);
        probe("driver-threads", "%d before any CUDA call (%s); %d after cudaFree(0) -> %d (%s)", n0,
              before, n1, (int)r, after);
    }

    if (pair(&e, &i) == 0) {
        snprintf(a, sizeof a, "%s", ask(&i, "open"));
        long long before = atoll(ask(&i, "meminfo"));
        snprintf(b, sizeof b, "%s", ask(&e, "free"));
        long long after = atoll(ask(&i, "meminfo"));
        probe("free-while-mapped",
              "open %s; exporter's cudaFree -> %s (rc, MiB freed as the exporter sees it); "
              "importer reads: %s; importer sees %+lld MiB free",
              a, b, ask(&i, "read"), after - before);
        ask(&i, "close");
        probe("free-while-mapped-after-close", "importer sees %+lld MiB free once it closed",
              atoll(ask(&i, "meminfo")) - before);
        finish(&i, false);
        finish(&e, false);
    }
    if (pair(&e, &i) == 0) {
        ask(&i, "open");
        fprintf(e.in, "exit\n");
        fflush(e.in);
        finish(&e, false);
        probe("exporter-exit-while-mapped", "importer reads: %s", ask(&i, "read"));
        finish(&i, false);
    }
    if (pair(&e, &i) == 0) {
        ask(&i, "open");
        finish(&e, true);
        usleep(200000);
        probe("exporter-kill-while-mapped", "importer reads: %s; a new open: %s", ask(&i, "read"),
              ask(&i, "open"));
        finish(&i, false);
    }
    if (pair(&e, &i) == 0) {
        ask(&e, "free");
        double t0 = now_ms();
        snprintf(a, sizeof a, "%s", ask(&i, "open"));
        probe("open-freed-handle", "%s after %.0f ms", a, now_ms() - t0);
        finish(&i, true);
        finish(&e, false);
    }
    if (pair(&e, &i) == 0) {
        snprintf(a, sizeof a, "%s", ask(&i, "open"));
        snprintf(b, sizeof b, "%s", ask(&i, "open"));
        char c1[128], r1[128];
        snprintf(c1, sizeof c1, "%s", ask(&i, "close"));
        snprintf(r1, sizeof r1, "%s", ask(&i, "read"));
        probe("reopen-same-context",
              "first open %s; second open %s; first close %s; then read: %s; second close %s", a, b,
              c1, r1, ask(&i, "close"));
        finish(&i, false);
        finish(&e, false);
    }
    if (pair(&e, &i) == 0) {
        ask(&i, "open");
        probe("close-waits-for-kernel",
              "%s (rc, ms until close returned, ms until the kernel ended; "
              "kernels do not run on the simulator)",
              ask(&i, "kernelclose"));
        finish(&i, false);
        finish(&e, false);
    }
    {
        void *p = NULL, *q = NULL;
        cudaIpcMemHandle_t hp, hq;
        cudaSetDevice(0);
        cudaMalloc(&p, 256);
        cudaMalloc(&q, 256);
        cudaIpcGetMemHandle(&hp, p);
        cudaIpcGetMemHandle(&hq, q);
        probe("small-allocs-share-handle", "handles %s; second block at %+lld bytes from the first",
              memcmp(&hp, &hq, sizeof hp) ? "differ" : "IDENTICAL",
              (long long)((char *)q - (char *)p));
        cudaFree(p);
        cudaFree(q);
    }
    if (pair(&e, &i) == 0) {
        ask(&i, "open");
        long long target = atoll(ask(&e, "meminfo")) + (BYTES >> 20);
        finish(&i, true);
        snprintf(a, sizeof a, "%s", ask(&e, "free"));
        snprintf(b, sizeof b, "collect %lld", target);
        probe("importer-killed",
              "exporter's free %s (rc, MiB); the block's memory back: %s (with the shim "
              "preloaded: ipcshim's reclaim of a SIGKILLed importer's lease)",
              a, ask(&e, b));
        finish(&e, false);
    }
    return 0;
}
