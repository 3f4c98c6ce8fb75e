/* callsite-bench: the cost of capturing a call site (core/callsite.h), the
 * only work IPCSHIM_CALLSITE_DEPTH adds to an export or an open. It calls
 * callsite_capture() from a stack STACK frames deep (a program, its CUDA
 * runtime and the shim are about that deep at an export) at depths 0
 * (off), 4 (the default) and 8, the same stack every time (an interned call
 * site, as in a loop), with the unwinder the shim uses (libunwind's, loaded
 * the way shim/unwind.c does) and with glibc's backtrace(), and prints
 * "callsite_ns_depthD: NS" and "callsite_glibc_ns_depthD: NS" per capture
 * (the first is "unavailable" without libunwind.so.8).
 * scripts/bench shows it as figure 7 and goal 5. Allocations and frees never
 * capture: nothing here is on their path. */
#include "callsite.h"
#include "host.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define STACK 12

static volatile uint32_t sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Captures n times at the bottom of `frames` more frames; returns ns each. */
__attribute__((noinline)) static double deep(int frames, long n)
{
    if (frames > 0) {
        double r = deep(frames - 1, n);
        sink += 1; /* no tail call: the frame stays */
        return r;
    }
    uint64_t t0 = now_ns();
    for (long i = 0; i < n; i++)
        sink += callsite_capture();
    return (double)(now_ns() - t0) / (double)n;
}

static void measure(const char *label, long n)
{
    static const unsigned depths[] = {0, 4, 8};
    for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
        callsite_init(depths[i]);
        deep(STACK, n / 10 + 1); /* warm: the unwinder's caches, the slot */
        double best = 1e18;
        for (int rep = 0; rep < 5; rep++) {
            double ns = deep(STACK, n);
            if (ns < best) best = ns;
        }
        printf("%s_depth%u: %.1f\n", label, depths[i], best);
    }
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    if (n < 1) n = 1;
    measure("callsite_glibc_ns", n / 10 + 1); /* about 20x slower */
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    int (*bt)(void **, int) = h ? (int (*)(void **, int))dlsym(h, "unw_backtrace") : NULL;
    int (*policy)(void *, int) =
        h ? (int (*)(void *, int))dlsym(h, "_ULx86_64_set_caching_policy") : NULL;
    void **space = h ? (void **)dlsym(h, "_ULx86_64_local_addr_space") : NULL;
    if (bt) {
        if (policy && space) policy(*space, 2 /* UNW_CACHE_PER_THREAD */);
        host_set(&(struct host){.unwind = bt});
        measure("callsite_ns", n);
    } else {
        printf("callsite_ns: unavailable (no libunwind.so.8)\n");
    }
    char buf[512];
    callsite_init(4);
    uint32_t id = callsite_capture();
    printf("callsite_example: %s\n", callsite_format(id, buf, sizeof buf));
    return 0;
}
