/* bench_util: clock-free helpers of bench.h (statistics, channel, spawn). */
#include "bench.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/futex.h>
#include <limits.h>
#include <sched.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipcshim.h"
#include "simcuda.h"

extern char **environ;

_Noreturn void bench_die(const char *what, int code, const char *file, int line)
{
    fprintf(stderr, "ipc-bench[%d]: %s failed with %d (%s:%d)\n", (int)getpid(), what, code, file,
            line);
    fflush(stdout);
    _exit(2);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double quantile(double *v, size_t n, double q)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k < 1) k = 1;
    if (k > n) k = n;
    return v[k - 1];
}

double median(double *v, size_t n)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void print_values(const char *key, const double *v, size_t n)
{
    printf("%s:", key);
    for (size_t i = 0; i < n; i++)
        printf(" %.1f", v[i]);
    printf("\n");
    fflush(stdout);
}

struct chan *chan_create(size_t data_bytes, int *fd)
{
    size_t size = sizeof(struct chan) + data_bytes;
    int f = memfd_create("ipc-bench", 0); /* inherited by the children */
    if (f < 0 || ftruncate(f, (off_t)size) != 0) bench_die("memfd", errno, __FILE__, __LINE__);
    struct chan *c = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (c == MAP_FAILED) bench_die("mmap", errno, __FILE__, __LINE__);
    c->data_bytes = data_bytes;
    *fd = f;
    return c;
}

struct chan *chan_attach(int fd)
{
    struct chan *c = mmap(NULL, sizeof(struct chan), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED) bench_die("mmap", errno, __FILE__, __LINE__);
    size_t size = sizeof(struct chan) + c->data_bytes;
    munmap(c, sizeof(struct chan));
    c = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED) bench_die("mmap", errno, __FILE__, __LINE__);
    return c;
}

void door_open(struct chan *c, int d)
{
    atomic_fetch_add_explicit(&c->doors[d].seq, 1, memory_order_acq_rel);
    /* Shared futex (not PRIVATE): the waiter is another process. */
    syscall(SYS_futex, &c->doors[d].seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

uint32_t door_wait(struct chan *c, int d, uint32_t seen, uint64_t spin_ns)
{
    uint32_t v;
    uint64_t until = spin_ns ? now_ns() + spin_ns : 0;
    for (unsigned i = 0;; i++) {
        if ((v = door_seq(c, d)) != seen) return v;
        if (!spin_ns || ((i & 63) == 0 && now_ns() > until)) break;
        if (i & 1)
            sched_yield();
        else
            __builtin_ia32_pause();
    }
    while ((v = door_seq(c, d)) == seen)
        syscall(SYS_futex, &c->doors[d].seq, FUTEX_WAIT, seen, NULL, NULL, 0);
    return v;
}

int spawn_self(char *const argv[])
{
    pid_t pid;
    const char *self = getenv("IPCBENCH_SELF"); /* set for runs under valgrind */
    int r = posix_spawn(&pid, self && *self ? self : "/proc/self/exe", NULL, NULL, argv, environ);
    if (r) bench_die("spawn", r, __FILE__, __LINE__);
    return (int)pid;
}

int wait_child(int pid)
{
    int ws;
    while (waitpid(pid, &ws, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
}

void cuda_ready(void)
{
    CK(cudaSetDevice(0));
    CK(cudaFree(NULL));
}

bool shim_loaded(void)
{
    int (*active)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "ipcshim_active");
    return active != NULL;
}

/* The shim's counters, or false without the shim. */
static bool shim_stats(struct ipcshim_stats *s)
{
    static int (*stats)(struct ipcshim_stats *, size_t);
    static bool looked;
    if (!looked) {
        stats = (int (*)(struct ipcshim_stats *, size_t))dlsym(RTLD_DEFAULT, "ipcshim_stats");
        looked = true;
    }
    return stats && stats(s, sizeof *s) == 0;
}

uint64_t sim_last_free_ns(void)
{
    static void (*stats)(struct simcuda_stats *);
    static bool looked;
    if (!looked) {
        void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (cuda) stats = (void (*)(struct simcuda_stats *))dlsym(cuda, "simcuda_stats");
        looked = true;
    }
    if (!stats) return 0;
    struct simcuda_stats s;
    stats(&s);
    return s.proc_last_free_ns;
}

uint64_t shim_frees_reclaimed(void)
{
    struct ipcshim_stats s;
    return shim_stats(&s) ? s.frees_reclaimed : 0;
}

uint64_t shim_blocks_in_limbo(void)
{
    struct ipcshim_stats s;
    return shim_stats(&s) ? s.limbo_blocks : 0;
}

bool probe_stats(struct probe_lock_stats *reg, struct probe_lock_stats *sim)
{
    void (*get)(struct probe_lock_stats *, struct probe_lock_stats *) =
        (void (*)(struct probe_lock_stats *, struct probe_lock_stats *))dlsym(RTLD_DEFAULT,
                                                                              "ipcbench_probe_get");
    memset(reg, 0, sizeof *reg);
    memset(sim, 0, sizeof *sim);
    if (!get) return false;
    get(reg, sim);
    return true;
}

void probe_reset(void)
{
    void (*reset)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "ipcbench_probe_reset");
    if (reset) reset();
}
