/* ipc_bench_procs: ipc-bench's figures about whole processes: figure 9 (a
 * process's exit with N live exported blocks) and the wake floor (one
 * cross-process futex wake onto an idle CPU, which figure 8's reclaim goals
 * are measured against). main and the per-call figures are in
 * ipc_bench.c. */
#include "ipc_bench.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- figure 9: process exit with N live exported blocks ----------------- */

/* child's stamps as it returns from main: CLOCK_MONOTONIC, and the CPU
 * time (user + system, all its threads) it has used so far, in ns */
enum { EX_EXIT_AT, EX_CPU_AT };

static uint64_t rusage_ns(const struct rusage *r)
{
    return ((uint64_t)r->ru_utime.tv_sec + (uint64_t)r->ru_stime.tv_sec) * 1000000000ull +
           ((uint64_t)r->ru_utime.tv_usec + (uint64_t)r->ru_stime.tv_usec) * 1000ull;
}

int exit_child(struct chan *c, long n, size_t size)
{
    cuda_ready();
    for (long i = 0; i < n; i++) {
        void *p;
        cudaIpcMemHandle_t h;
        CK(cudaMalloc(&p, size));
        CK(cudaIpcGetMemHandle(&h, p));
    }
    uint32_t seen = door_seq(c, D_TO_CHILD);
    door_open(c, D_READY);
    door_wait(c, D_TO_CHILD, seen, 0);
    fflush(NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    __atomic_store_n(&c->stamp[EX_CPU_AT], rusage_ns(&ru), __ATOMIC_RELEASE);
    __atomic_store_n(&c->stamp[EX_EXIT_AT], now_ns(), __ATOMIC_RELEASE);
    return 0; /* exit: atexit handlers, destructors (the shim's), the kernel */
}

/* A child exports N blocks and exits with them live and unfreed; the time
 * from its return from main to the parent's waitpid returning. With the
 * shim, the registry segment's size while they are live (the parent does
 * not call CUDA: a child creates the registry). --domain-blocks M: another
 * child, on a simulated machine of its own, exports M blocks first and
 * keeps them live until the measured one has exited (what an exit costs in
 * a busy domain, beside its own). --exits E: E such exits one after the
 * other while the other child holds its blocks (one exit_us value each).
 * --sides: 3E exits, interleaved in rotation: E as this process runs
 * (exit_us), and twice E started without LD_PRELOAD (exit_off_us and
 * exit_ctl_us: the same exit without the shim, and its A/A control), so
 * that all three sides share the machine's moment and one holder.
 * exit_cpu_us (and _off, _ctl): the CPU time the exit took (the child's
 * total from wait4 less what it had used at its stamp), which a loaded
 * machine's scheduling delays do not move. */
int fig_exit(const struct args *a, const char *self)
{
    int hpid = 0, hfd;
    struct chan *hc = NULL;
    if (a->domain_blocks > 0) {
        char fds[32], n[32], sz[32];
        hc = chan_create(0, &hfd);
        char *hargv[] = {(char *)self,          "exit-child",
                         fmt_long(fds, hfd),    fmt_long(n, a->domain_blocks),
                         fmt_long(sz, a->size), NULL};
        uint32_t ready = door_seq(hc, D_READY);
        /* Its blocks live in the same registry (the same IPCSHIM_DOMAIN) but
         * on a simulated machine of their own: the measured exit then pays
         * for the registry's million blocks, not for the simulator's own
         * teardown scanning a million allocations. */
        const char *machine = getenv("SIMCUDA_MACHINE");
        char *saved = machine ? strdup(machine) : NULL, other[256];
        snprintf(other, sizeof other, "%s-holder", machine ? machine : "default");
        setenv("SIMCUDA_MACHINE", other, 1);
        hpid = spawn_self(hargv);
        if (saved)
            setenv("SIMCUDA_MACHINE", saved, 1);
        else
            unsetenv("SIMCUDA_MACHINE");
        free(saved);
        door_wait(hc, D_READY, ready, 0);
    }
    long exits = a->exits > 0 ? a->exits : 1, nsides = a->sides ? 3 : 1;
    /* side s, exit e: [s * exits + e] */
    double *took = calloc((size_t)(exits * nsides), sizeof *took);
    double *cpu = calloc((size_t)(exits * nsides), sizeof *cpu);
    int status = 0;
    for (long j = 0; j < exits * nsides; j++) {
        long e = j / nsides, side = (j + e) % nsides; /* 0: as run; 1: off; 2: ctl */
        int fd;
        struct chan *c = chan_create(0, &fd);
        char fds[32], n[32], sz[32];
        char *argv[] = {(char *)self,           "exit-child",          fmt_long(fds, fd),
                        fmt_long(n, a->blocks), fmt_long(sz, a->size), NULL};
        uint32_t ready = door_seq(c, D_READY);
        const char *preload = getenv("LD_PRELOAD");
        char *saved = side && preload ? strdup(preload) : NULL;
        if (saved) unsetenv("LD_PRELOAD");
        int pid = spawn_self(argv);
        if (saved) {
            setenv("LD_PRELOAD", saved, 1);
            free(saved);
        }
        door_wait(c, D_READY, ready, 0);
        close(fd);
        const char *domain = getenv("IPCSHIM_DOMAIN");
        char path[256];
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm/ipcshim-%u-%s", (unsigned)geteuid(),
                 domain ? domain : "default");
        if (j == 0 && getenv("LD_PRELOAD") && strstr(getenv("LD_PRELOAD"), "ipcshim") &&
            !stat(path, &st)) {
            print_values("exit_registry_bytes", (double[]){(double)st.st_size}, 1);
            print_values("exit_registry_resident_bytes", (double[]){(double)st.st_blocks * 512.0},
                         1);
        }
        door_open(c, D_TO_CHILD);
        int ws;
        struct rusage ru;
        while (wait4(pid, &ws, 0, &ru) < 0)
            if (errno != EINTR) bench_die("wait4", errno, __FILE__, __LINE__);
        uint64_t t1 = now_ns();
        status |= WIFEXITED(ws) ? WEXITSTATUS(ws) : 1;
        uint64_t t0 = __atomic_load_n(&c->stamp[EX_EXIT_AT], __ATOMIC_ACQUIRE);
        uint64_t c0 = __atomic_load_n(&c->stamp[EX_CPU_AT], __ATOMIC_ACQUIRE);
        took[side * exits + e] = (double)(t1 - t0) / 1e3;
        cpu[side * exits + e] = (double)(rusage_ns(&ru) - c0) / 1e3;
        munmap(c, sizeof *c);
    }
    print_values("exit_blocks", (double[]){(double)a->blocks}, 1);
    print_values("exit_domain_blocks", (double[]){(double)a->domain_blocks}, 1);
    print_values("exit_us", took, (size_t)exits);
    print_values("exit_cpu_us", cpu, (size_t)exits);
    if (a->sides) {
        print_values("exit_off_us", took + exits, (size_t)exits);
        print_values("exit_ctl_us", took + 2 * exits, (size_t)exits);
        print_values("exit_cpu_off_us", cpu + exits, (size_t)exits);
        print_values("exit_cpu_ctl_us", cpu + 2 * exits, (size_t)exits);
    }
    free(took);
    free(cpu);
    if (hc) {
        door_open(hc, D_TO_CHILD);
        status |= wait_child(hpid);
    }
    return status ? 2 : 0;
}

/* ---- the wake floor: one cross-process futex wake onto an idle CPU ----- */

/* The sleeper: waits on D_TO_CHILD as a futex (no spin), and on each wake
 * records how long after the waker's stamp it runs, in c->data. */
int wake_child(struct chan *c, long n)
{
    double *lat = (double *)c->data;
    uint32_t seen = door_seq(c, D_TO_CHILD);
    door_open(c, D_READY);
    for (long i = 0; i < n; i++) {
        seen = door_wait(c, D_TO_CHILD, seen, 0);
        uint64_t t1 = now_ns();
        lat[i] = (double)(t1 - __atomic_load_n(&c->stamp[0], __ATOMIC_ACQUIRE)) / 1000.0;
        door_open(c, D_TO_PARENT);
    }
    return 0;
}

/* What a wake-up costs on this machine whatever the shim does: a futex
 * ping-pong between two processes pinned to two CPUs. Every pace_us this
 * process stamps the clock and wakes the sleeper, which runs on a CPU idle
 * since its last sample (the last close's wake of an exporter's collector
 * is such a wake, figure 8). Prints every sample ("wake_us"), then its
 * median and p90. No CUDA. */
int fig_wake(const struct args *a, const char *self)
{
    long warm = 20, n = a->samples + warm;
    int fd;
    struct chan *c = chan_create((size_t)n * sizeof(double), &fd);
    char fds[32], ns[32];
    char *argv[] = {(char *)self, "wake-child", fmt_long(fds, fd), fmt_long(ns, n), NULL};
    uint32_t ready = door_seq(c, D_READY);
    int pid = spawn_self(argv);
    pin_pair(pid);
    door_wait(c, D_READY, ready, 0);
    uint32_t seen = door_seq(c, D_TO_PARENT);
    for (long i = 0; i < n; i++) {
        struct timespec pace = {a->pace_us / 1000000, (a->pace_us % 1000000) * 1000};
        nanosleep(&pace, NULL);
        __atomic_store_n(&c->stamp[0], now_ns(), __ATOMIC_RELEASE);
        door_open(c, D_TO_CHILD);
        seen = door_wait(c, D_TO_PARENT, seen, 0);
    }
    int status = wait_child(pid);
    double *lat = (double *)c->data + warm;
    print_values("wake_us", lat, (size_t)a->samples);
    double q[2] = {quantile(lat, (size_t)a->samples, 0.5), quantile(lat, (size_t)a->samples, 0.9)};
    print_values("wake_median_us", &q[0], 1);
    print_values("wake_p90_us", &q[1], 1);
    return status ? 2 : 0;
}
