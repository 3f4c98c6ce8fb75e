/* bench.h: what the ipc benchmark's files share: a clock, sample statistics,
 * a shared-memory channel between the benchmark's processes, spawning a
 * child of the same executable, and CUDA error checks.
 *
 * The benchmark is an ordinary CUDA program (runtime API, linked to the
 * toolkit's libcudart): it never calls the shim. Whether the shim is loaded
 * is found with dlsym(RTLD_DEFAULT, ...), so one binary runs both ways. */
#ifndef IPCBENCH_BENCH_H
#define IPCBENCH_BENCH_H

#include <cuda_runtime_api.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t ck_ = (call);                                                                  \
        if (ck_ != cudaSuccess) bench_die(#call, (int)ck_, __FILE__, __LINE__);                    \
    } while (0)

_Noreturn void bench_die(const char *what, int code, const char *file, int line);

/* Sorts v in place; the q-quantile (0..1, nearest rank) of n values. */
double quantile(double *v, size_t n, double q);
double median(double *v, size_t n);

/* Prints "key: v1 v2 ..." (values with 1 decimal) to stdout. */
void print_values(const char *key, const double *v, size_t n);

/* ---- the channel: one shared page (plus a data area) between a parent
 * and its children, created before spawning and inherited by descriptor.
 * A "door" is a sequence word one side bumps and the other waits on:
 * spin briefly, then sleep on the word as a futex. */

struct door {
    _Atomic uint32_t seq;
    uint32_t pad[15]; /* one cache line each */
};

#define CHAN_DOORS 8
#define CHAN_SLOTS 128

struct chan {
    struct door doors[CHAN_DOORS];
    _Atomic uint32_t ready;      /* children that are ready */
    _Atomic uint32_t go;         /* 1: start (storm) */
    _Atomic uint32_t warm;       /* storm children past their first round */
    _Atomic uint64_t t_start_ns; /* storm window */
    _Atomic uint64_t t_stop_ns;
    uint64_t stamp[16];          /* timestamps passed between processes */
    double slot[CHAN_SLOTS][16]; /* per-child results */
    uint8_t handle[64];          /* one handle in flight (cycle, reclaim) */
    size_t data_bytes;           /* size of data[] */
    uint8_t data[];              /* handles (scale, storm) */
};

/* A fresh channel with data_bytes of data area, or exits. *fd is inherited
 * by children (not close-on-exec). */
struct chan *chan_create(size_t data_bytes, int *fd);
/* Map the channel a parent passed as descriptor fd. */
struct chan *chan_attach(int fd);

/* Bump door d and wake its waiters. */
void door_open(struct chan *c, int d);
/* Wait until door d's sequence differs from seen; returns the new value.
 * spin_ns: busy-wait this long (with sched_yield) before sleeping. */
uint32_t door_wait(struct chan *c, int d, uint32_t seen, uint64_t spin_ns);
static inline uint32_t door_seq(struct chan *c, int d)
{
    return atomic_load_explicit(&c->doors[d].seq, memory_order_acquire);
}

/* Spawn this executable with argv (argv[0] is replaced); returns the pid. */
int spawn_self(char *const argv[]);
/* Wait for pid; its exit status, or -1 if it died by a signal. */
int wait_child(int pid);

/* CUDA context on device 0 made current (runtime door). */
void cuda_ready(void);

/* 1 when the shim is loaded in this process (ipcshim_active resolves). */
bool shim_loaded(void);
/* On the simulator: CLOCK_MONOTONIC when this process's last cuMemFree that
 * released memory returned (simcuda_stats); 0 on a real driver. */
uint64_t sim_last_free_ns(void);
/* frees_reclaimed from ipcshim_stats, or 0 without the shim. */
uint64_t shim_frees_reclaimed(void);
/* limbo_blocks from ipcshim_stats (blocks in limbo now), or 0 without the shim. */
uint64_t shim_blocks_in_limbo(void);

/* Lock-wait probe (libipcbench-probe.so, preloaded for figure 5). */
struct probe_lock_stats {
    uint64_t acquisitions, contended, wait_ns, max_wait_ns, over_1ms;
};
/* Fills reg (the ipcshim registry lock) and sim (the simulator's machine
 * lock); false when the probe is not loaded. */
bool probe_stats(struct probe_lock_stats *reg, struct probe_lock_stats *sim);
/* Zero the probe's counters (no-op without the probe). */
void probe_reset(void);

#endif
