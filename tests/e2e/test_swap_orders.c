/* test_swap_orders: host swap in the orders where a swap engine could lose
 * bytes or kill the context (issue 45, item 6), each recreated exactly by
 * progs/swap_orders.c on the simulator and run under both engines
 * (IPCSHIM_SWAP_ENGINE=managed and vmm): three blocks of 4 MiB under a
 * budget of 8 MiB, so that the kernels of the order's trigger must evict A.
 * Every run ends with every byte checked against the program's mirror, no
 * call answering 700, and a new cudaMalloc succeeding. Each test also
 * asserts that its order really happened (the work was still queued when
 * the trigger came, A was evicted), so that it keeps meaning something when
 * the engine is rewritten; the unsafe-unmap case shows these checks catch
 * an engine that unmaps under queued work.
 *
 * A shim that does not know IPCSHIM_SWAP_ENGINE runs the vmm cases on the
 * managed engine; they then assert what managed must do. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("swap_orders");
}
TestSuite(swap_orders, .init = setup, .fini = run_cleanup, .timeout = 120);

struct orders {
    struct run_result r;
    const char *mode, *engine;
    char log[4096]; /* the shim's log: warnings and the stats lines */
    bool vmm;       /* A is VMM-backed (else managed) */
};

/* Whether this shim has the engine option at all (its options table names
 * every variable it reads). */
static bool shim_knows_engine(void)
{
    const char *lib = getenv("IPCSHIM_LIB");
    FILE *f = lib ? fopen(lib, "rb") : NULL;
    if (!f) return false;
    static char buf[1 << 16];
    const char key[] = "IPCSHIM_swap_engine";
    size_t keep = 0, n;
    bool found = false;
    while (!found && (n = fread(buf + keep, 1, sizeof buf - keep, f)) > 0) {
        n += keep;
        found = memmem(buf, n, key, sizeof key - 1) != NULL;
        keep = sizeof key - 1;
        memmove(buf, buf + n - keep, keep);
    }
    fclose(f);
    return found;
}

static const char *field(const struct orders *o, const char *key, char *buf, size_t len)
{
    const char *v = run_field(&o->r, key, buf, len);
    cr_assert(v, "%s/%s: no \"%s\" line in:\n%s", o->mode, o->engine, key, o->r.out);
    return v;
}

static long long num(const struct orders *o, const char *key)
{
    char buf[64];
    return strtoll(field(o, key, buf, sizeof buf), NULL, 0);
}

static void expect_text(const struct orders *o, const char *key, const char *want)
{
    char buf[128];
    const char *got = field(o, key, buf, sizeof buf);
    cr_expect_str_eq(got, want, "%s/%s: %s is %s, expected %s\n%s", o->mode, o->engine, key, got,
                     want, o->r.out);
}

/* The number after `key` in the shim's log (its stats lines). */
static long long stat_of(const struct orders *o, const char *key)
{
    const char *at = strstr(o->log, key);
    cr_assert(at, "%s/%s: no \"%s\" in the shim's log:\n%s", o->mode, o->engine, key, o->log);
    return strtoll(at + strlen(key), NULL, 10);
}

/* One run of swap_orders MODE under engine, with one more variable (extra,
 * "NAME=VALUE", or NULL). */
/* The largest number after `key` in the shim's log (an importer, this
 * program again, logs to the same file). */
static long long stat_max(const struct orders *o, const char *key)
{
    long long best = stat_of(o, key);
    for (const char *at = strstr(o->log, key); at; at = strstr(at + 1, key)) {
        long long v = strtoll(at + strlen(key), NULL, 10);
        if (v > best) best = v;
    }
    return best;
}

static void run_order(struct orders *o, const char *mode, const char *engine, const char *extra)
{
    char log[256], env_log[300], env_engine[64];
    snprintf(log, sizeof log, "/tmp/ipcshim-swap-orders-%d.log", (int)getpid());
    unlink(log);
    snprintf(env_log, sizeof env_log, "IPCSHIM_LOG_FILE=%s", log);
    snprintf(env_engine, sizeof env_engine, "IPCSHIM_SWAP_ENGINE=%s", engine);
    o->mode = mode, o->engine = engine;
    run_prog(&o->r, "swap-orders", true,
             ENV("IPCSHIM_DEVICE_BUDGET=8M", "IPCSHIM_SWAP_MIN_BYTES=2M", "IPCSHIM_STATS=1",
                 "IPCSHIM_EXIT_WAIT=0", env_engine, env_log, extra),
             ARGS(mode));
    o->log[0] = 0;
    FILE *f = fopen(log, "r");
    if (f) {
        size_t n = fread(o->log, 1, sizeof o->log - 1, f);
        o->log[n] = 0;
        fclose(f);
    }
    unlink(log);
    fprintf(stderr, "---- %s, IPCSHIM_SWAP_ENGINE=%s %s\n%s%s", mode, engine, extra ? extra : "",
            o->r.out, o->log);
    cr_assert_eq(o->r.status, 0, "%s/%s: status %d\n%s", mode, engine, o->r.status, o->r.out);
    char buf[64];
    const char *backing = field(o, "backing", buf, sizeof buf);
    o->vmm = !strcmp(backing, "vmm");
    if (!strcmp(engine, "vmm") && shim_knows_engine())
        cr_expect(o->vmm, "%s: A is %s, not VMM-backed, with IPCSHIM_SWAP_ENGINE=vmm", mode,
                  backing);
    else
        cr_expect_str_eq(backing, "managed", "%s/%s: A is %s", mode, engine, backing);
    if (!strcmp(engine, "vmm") && !o->vmm)
        fprintf(stderr,
                "note: %s: this shim has no VMM engine; the vmm case ran on managed memory\n",
                mode);
}

/* What every order must end with: every byte right, no 700, the context
 * alive, the budget kept. */
static void expect_intact(const struct orders *o)
{
    char a[64], b[64];
    cr_expect_eq(num(o, "bad_words"), 0, "%s/%s: words differ from the mirror\n%s", o->mode,
                 o->engine, o->r.out);
    cr_expect_str_eq(field(o, "checksum", a, sizeof a), field(o, "want", b, sizeof b),
                     "%s/%s: checksum", o->mode, o->engine);
    cr_expect_eq(num(o, "final_malloc"), 0, "%s/%s: the context is dead\n%s", o->mode, o->engine,
                 o->r.out);
    expect_text(o, "saw_700", "no");
    cr_expect_eq(num(o, "errors"), 0, "%s/%s: calls failed\n%s", o->mode, o->engine, o->r.out);
    cr_expect_eq(stat_of(o, "over budget "), 0, "%s/%s: over budget", o->mode, o->engine);
    if (o->vmm && strstr(o->log, "remap failures "))
        cr_expect_eq(stat_of(o, "remap failures "), 0, "%s: remaps failed:\n%s", o->mode, o->log);
}

/* Orders 1-3: the work on S2 was queued when the kernels over B and C came,
 * A was resident, and room had to be made. With managed memory A is moved
 * to the host at once (harmless: pages migrate under a kernel). A VMM
 * engine may evict A only by a remap, so only once that work is done: A is
 * host-backed only with nothing queued (the simulator would also have
 * faulted the context). */
static void expect_queued_order(const struct orders *o)
{
    long long queued_before = num(o, "queued_before"); /* a 2D copy queues a piece a row */
    cr_expect_geq(queued_before, 1, "%s/%s: the work over A was not queued", o->mode, o->engine);
    expect_text(o, "a_before", "device");
    cr_expect_geq(stat_of(o, "evictions "), 1, "%s/%s: nothing was evicted", o->mode, o->engine);
    char buf[64];
    const char *after = field(o, "a_after", buf, sizeof buf);
    long long queued = num(o, "queued_after");
    if (!o->vmm) {
        cr_expect_str_eq(after, "host", "%s/%s: A was not the victim", o->mode, o->engine);
        cr_expect_eq(queued, queued_before, "%s/%s: the work over A did not stay queued", o->mode,
                     o->engine);
    } else if (!strcmp(after, "host")) {
        cr_expect_eq(queued, 0, "%s: A was remapped with work over it still queued", o->mode);
    }
    expect_intact(o);
}

/* The vmm case runs with vmm_extra set (NULL: the defaults, a mover thread). */
#define BOTH_ENGINES_WITH(name, mode, check, vmm_extra)                                            \
    Test(swap_orders, name##_managed)                                                              \
    {                                                                                              \
        static struct orders o;                                                                    \
        run_order(&o, mode, "managed", NULL);                                                      \
        check(&o);                                                                                 \
    }                                                                                              \
    Test(swap_orders, name##_vmm)                                                                  \
    {                                                                                              \
        static struct orders o;                                                                    \
        run_order(&o, mode, "vmm", vmm_extra);                                                     \
        check(&o);                                                                                 \
    }
#define BOTH_ENGINES(name, mode, check) BOTH_ENGINES_WITH(name, mode, check, NULL)

/* 1. A kernel still queued on another stream when its block is the victim;
 * its effect (+1 on every word of A) must be in A's bytes. */
BOTH_ENGINES(a_kernel_queued_on_another_stream_when_its_block_is_the_victim, "queued-victim",
             expect_queued_order)

/* 2. A launch the shim cannot read (cuFuncGetParamInfo refuses its
 * function) queued over A when the eviction's copy and remap come. */
static void expect_unknown_layout(const struct orders *o)
{
    cr_expect_geq(stat_of(o, "launches without a known layout "), 1,
                  "%s/%s: the shim knew the launch's layout", o->mode, o->engine);
    expect_queued_order(o);
}
BOTH_ENGINES(an_unknown_layout_launch_queued_over_the_victim, "unknown-layout",
             expect_unknown_layout)

/* 3. A cuMemcpyAsync of 64 KiB into A (today's host swap records no such
 * copy) queued on S2; the copy's bytes must be in A. */
BOTH_ENGINES(an_unrecorded_copy_queued_into_the_victim, "unrecorded-copy", expect_queued_order)

/* 3b. The same with an asynchronous set (cuMemsetD32Async): its 16 KiB
 * must be in A. */
BOTH_ENGINES(an_unrecorded_set_queued_into_the_victim, "unrecorded-set", expect_queued_order)

/* 3c. The same with a 2D copy (cuMemcpy2DAsync, 16 rows of 1 KiB). */
BOTH_ENGINES(an_unrecorded_2d_copy_queued_into_the_victim, "unrecorded-copy2d", expect_queued_order)

/* 3d. The same with a 2D set (cuMemsetD2D32Async, 16 rows of 1 KiB a
 * pitch of 4 KiB apart), an entry point that touches every block. */
BOTH_ENGINES(an_unrecorded_2d_set_queued_into_the_victim, "unrecorded-set2d", expect_queued_order)

/* 6c. The fetch's side: A evicted and C freed (room for A: no eviction,
 * whose wait would cover the fetch's), a kernel of unknown layout queued
 * over A (reading the host copy over the link, or, with managed memory,
 * faulting it in), then a launch over A that needs it fetched. A VMM
 * engine may re-point A at device memory only once that kernel is done. */
static void expect_queued_fetch(const struct orders *o)
{
    expect_text(o, "a_evicted", "host");
    cr_expect_eq(num(o, "free_c"), 0);
    expect_text(o, "a_at_queue", "host");
    cr_expect_eq(num(o, "fetch_queued_before"), 1, "%s/%s: the kernel over A was not queued",
                 o->mode, o->engine);
    cr_expect_geq(stat_of(o, "launches without a known layout "), 1);
    char buf[64], before[64];
    const char *after = field(o, "a_after_fetch", buf, sizeof buf);
    long long queued = num(o, "fetch_queued_after");
    if (!o->vmm)
        cr_expect_eq(queued, 1, "%s/%s: the kernel over A did not stay queued", o->mode, o->engine);
    else if (!strcmp(after, "device") &&
             strcmp(field(o, "a_before_fetch", before, sizeof before), "device"))
        cr_expect_eq(queued, 0, "%s: A was remapped with work over it still queued", o->mode);
    expect_intact(o);
}
BOTH_ENGINES(a_fetch_of_a_block_with_queued_work_of_unknown_layout, "queued-fetch",
             expect_queued_fetch)

/* 6d. A graph launch (one kernel node over A) queued on S2: the shim sees
 * the graph, not its kernel, so it counts as touching every block. */
BOTH_ENGINES(a_graph_launch_queued_over_the_victim, "graph-victim", expect_queued_order)

/* Async evictions (vmm): A, the victim, is written back on the device
 * behind S2's kernel, its chunks go to C's fetch at once, and A's range is
 * remapped later; until then it still maps C's chunks. */

/* 7a. C's fetch copy into A's chunks is decided while A's write-back is
 * still queued behind held S2: the copy must wait for it. A's bytes are
 * then read back as its write-back left them. 7a and 7a' run with the
 * remaps done lazily by the launching thread (IPCSHIM_SWAP_MOVER=inline),
 * so that how many evictions were remapped without a host wait does not
 * depend on when the machine schedules the mover thread (under load it
 * may not run before the launching thread needs every remap); the rule
 * they test, the host-to-device stream's wait for the write-back, is the
 * same with the mover thread. */
static void expect_writeback_queued(const struct orders *o)
{
    expect_queued_order(o);
    if (o->vmm) {
        /* S2's kernel, A's write-back, C's copy and its kernels */
        cr_expect_geq(num(o, "queued_after"), 3, "%s: the write-back was not queued", o->mode);
        cr_expect_geq(stat_of(o, "evictions remapped without a host wait "), 1,
                      "%s: no eviction was asynchronous", o->mode);
    }
}
BOTH_ENGINES_WITH(a_fetch_into_the_chunks_of_a_victim_whose_write_back_is_queued,
                  "writeback-queued", expect_writeback_queued, "IPCSHIM_SWAP_MOVER=inline")

/* 7a'. The same with a first touch: a new block D takes A's chunks with
 * nothing to copy in, and the kernel over D must still wait for A's
 * write-back (queued behind S2), or it adds to A's bytes before they are
 * written back. */
static void expect_first_touch(const struct orders *o)
{
    expect_queued_order(o);
    cr_expect_geq(stat_of(o, "first touches "), 1, "%s/%s: D was not a first touch", o->mode,
                  o->engine);
    if (o->vmm)
        cr_expect_geq(stat_of(o, "evictions remapped without a host wait "), 1,
                      "%s: no eviction was asynchronous", o->mode);
}
BOTH_ENGINES_WITH(a_first_touch_into_the_chunks_of_a_victim_whose_write_back_is_queued,
                  "writeback-first-touch", expect_first_touch, "IPCSHIM_SWAP_MOVER=inline")

/* 7b. A launch the shim sees over A while A's remap is pending (its
 * write-back held behind S2): A's remap must be completed first (the host
 * waits), or the kernel would add to C's bytes through the alias. */
static void expect_pending_launch(const struct orders *o)
{
    expect_queued_order(o);
    if (o->vmm) {
        expect_text(o, "a_pending", "device");
        cr_expect_geq(stat_of(o, "(with one "), 1, "%s: A's remap was not forced", o->mode);
    }
}
BOTH_ENGINES(a_launch_over_a_victim_whose_remap_is_pending, "pending-launch", expect_pending_launch)

/* 7c. A kernel of unknown layout over A right after A's write-back ended
 * but before its remap: every pending remap must be done first, or the
 * kernel writes C's chunks through A's range. This order needs the remap
 * done lazily by the launching thread (IPCSHIM_SWAP_MOVER=inline): a mover
 * thread would have done it once S2's work ended (8b is its order). */
static void expect_pending_unknown(const struct orders *o)
{
    expect_queued_order(o);
    cr_expect_geq(stat_of(o, "launches without a known layout "), 1);
    if (o->vmm) {
        expect_text(o, "a_pending", "device");
        cr_expect_geq(stat_of(o, "evictions remapped without a host wait "), 1,
                      "%s: A's remap was not done lazily", o->mode);
    }
}
BOTH_ENGINES_WITH(an_unknown_layout_launch_after_an_eviction_whose_remap_is_pending,
                  "pending-unknown", expect_pending_unknown, "IPCSHIM_SWAP_MOVER=inline")

/* 8. The mover thread (IPCSHIM_SWAP_MOVER=thread, the default) owns A's
 * remap, waiting behind held S2 for A's write-back, when the order's call
 * comes (progs/swap_orders.c, mover_order); the call must wait for the
 * mover (which then stops polling and waits for S2's work on the host) or
 * it touches A's range while the range still maps C's chunks, or the mover
 * unmaps under it. */
static void expect_mover(const struct orders *o)
{
    cr_expect_eq(num(o, "queued_before"), 1, "%s/%s: the kernel was not queued", o->mode,
                 o->engine);
    if (o->vmm) {
        expect_text(o, "a_pending", "device");
        cr_expect_geq(stat_max(o, "waits for the mover "), 1, "%s: nothing waited for the mover",
                      o->mode);
    }
    expect_intact(o);
}

/* 8a. A launch over A on another thread (its fetch, then the launch). */
BOTH_ENGINES(a_launch_on_another_thread_while_the_mover_remaps_its_block, "mover-launch",
             expect_mover)

/* 8b. A kernel of unknown layout (it may touch every block). */
BOTH_ENGINES(unknown_work_while_the_mover_remaps_a_block, "mover-unknown", expect_mover)

/* 8c. cudaFree(A), then a new block in its place and moves. */
static void expect_mover_free(const struct orders *o)
{
    cr_expect_eq(num(o, "free"), 0, "%s/%s: cudaFree(A) failed", o->mode, o->engine);
    expect_mover(o);
}
BOTH_ENGINES(a_free_of_a_block_the_mover_remaps, "mover-free", expect_mover_free)

/* 8d. cudaIpcGetMemHandle(A), an importer reading A while the exporter
 * moves the other blocks. */
static void expect_mover_export(const struct orders *o)
{
    if (!o->vmm) {
        cr_expect_eq(num(o, "export"), 1);
        expect_intact(o);
        return;
    }
    cr_expect_eq(num(o, "export"), 0, "%s: the export of a VMM block failed", o->mode);
    expect_text(o, "import_read", "ok");
    cr_expect_eq(num(o, "importer"), 0);
    expect_mover(o);
}
BOTH_ENGINES(an_export_of_a_block_the_mover_remaps, "mover-export", expect_mover_export)

/* 8e. cudaDeviceReset while the mover's job is of the context that ends:
 * the reset waits for it, and the mover calls nothing of that context
 * after it (a stale call would fail: "remap failures"). */
static void expect_mover_reset(const struct orders *o)
{
    cr_expect_eq(num(o, "reset"), 0);
    if (o->vmm)
        cr_expect_eq(stat_of(o, "prefetch failures "), 0, "%s: moves of destroyed blocks", o->mode);
    expect_mover(o);
}
BOTH_ENGINES(a_context_reset_while_the_mover_remaps_one_of_its_blocks, "mover-reset",
             expect_mover_reset)

/* 8f. fork while the mover waits: the child (swap off, no mover) exits
 * through exit(), running the parent's atexit hooks, at once and with 0. */
static void expect_mover_fork(const struct orders *o)
{
    cr_expect_eq(num(o, "child"), 0, "%s/%s: the child failed", o->mode, o->engine);
    cr_expect(!strstr(o->log, "did not stop"), "%s/%s: a mover was joined in the child:\n%s",
              o->mode, o->engine, o->log);
    if (o->vmm) {
        expect_text(o, "a_pending", "device");
        cr_expect_geq(stat_of(o, "moves by the mover thread "), 1, "%s: no mover", o->mode);
    }
    expect_intact(o);
}
BOTH_ENGINES(fork_while_the_mover_remaps_a_block, "mover-fork", expect_mover_fork)

/* 8g. exit() while the mover waits behind held S2: the mover stops before
 * the driver's teardown (a mover left running remaps during it, and the
 * remap fails: about one run in three on the simulator, hence five runs);
 * the process ends at once with 0 (run_order checks the status). */
static void expect_mover_exit(const struct orders *o)
{
    char buf[16];
    field(o, "exiting", buf, sizeof buf);
    cr_expect(!strstr(o->log, "did not stop"), "%s/%s: the mover did not stop:\n%s", o->mode,
              o->engine, o->log);
    cr_expect(!strstr(o->log, "could not be remapped"),
              "%s/%s: the mover called the driver during its teardown:\n%s", o->mode, o->engine,
              o->log);
    if (o->vmm) expect_text(o, "a_pending", "device");
}
Test(swap_orders, exit_while_the_mover_waits_behind_queued_work_managed)
{
    static struct orders o;
    run_order(&o, "mover-exit", "managed", NULL);
    expect_mover_exit(&o);
}
Test(swap_orders, exit_while_the_mover_waits_behind_queued_work_vmm, .timeout = 30)
{
    static struct orders o;
    for (int run = 0; run < 5; run++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        run_order(&o, "mover-exit", "vmm", NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        cr_expect_lt(s, 2.0, "exit took %.2f s (the mover's join is bounded by 2 s)", s);
        expect_mover_exit(&o);
    }
}

/* 9. A fetch ahead (IPCSHIM_TEST_SWAP_AHEAD=1 makes every VMM fetch one):
 * the kernel that asked for it runs on the host copy (held S2) while the
 * fetch is queued; once the mover owns it (waiting for that kernel), a
 * kernel over A on held S3 must wait for the mover, or S2's release lets
 * the mover unmap A's range under it (700). */
static void expect_ahead(const struct orders *o)
{
    expect_text(o, "a_evicted", "host");
    cr_expect_eq(num(o, "free_c"), 0);
    if (o->vmm) {
        expect_text(o, "a_ahead", "host");
        cr_expect_geq(stat_of(o, "fetches ahead "), 1, "%s: no fetch ahead", o->mode);
        cr_expect_geq(stat_max(o, "waits for the mover "), 1, "%s: nothing waited for the mover",
                      o->mode);
    }
    expect_intact(o);
}
BOTH_ENGINES_WITH(a_launch_over_a_block_whose_fetch_ahead_the_mover_runs, "ahead-launch",
                  expect_ahead, "IPCSHIM_TEST_SWAP_AHEAD=1")

/* 9b. The same fetch ahead, its map refused by the driver (the simulator's
 * injected cuMemMap failure) once S2 is released: A stays on its host
 * copy, its chunks go back, and a kernel over A then reads and writes the
 * host copy (the engine counts A resident: slow, never wrong). */
static void expect_ahead_fail(const struct orders *o)
{
    expect_text(o, "a_evicted", "host");
    if (o->vmm) {
        expect_text(o, "a_ahead", "host");
        expect_text(o, "a_after_failure", "host");
        cr_expect_geq(stat_of(o, "(failed "), 1, "%s: the fetch ahead did not fail", o->mode);
    }
    expect_intact(o);
}
BOTH_ENGINES_WITH(a_fetch_ahead_the_driver_refuses_leaves_the_block_on_its_host_copy, "ahead-fail",
                  expect_ahead_fail, "IPCSHIM_TEST_SWAP_AHEAD=1")

/* 9c. A fetch ahead queued behind a victim's remap that cannot be done
 * yet (A's write-back held behind S2): the mover serves ready work first,
 * so C's fetch ahead, whose own wait is over, is done while S2 is still
 * held (C maps its device chunks); a mover taking its jobs oldest first
 * would wait behind A's remap until S2's release. */
static void expect_ahead_behind_remap(const struct orders *o)
{
    expect_queued_order(o);
    if (o->vmm) {
        expect_text(o, "a_pending", "device");
        cr_expect_geq(num(o, "queued_held"), 2, "%s: S2's kernel and A's write-back not queued",
                      o->mode);
        expect_text(o, "c_ahead", "device");
        cr_expect_geq(stat_of(o, "fetches ahead "), 1, "%s: no fetch ahead", o->mode);
        cr_expect_geq(stat_of(o, "moves by the mover thread "), 2, "%s: the mover's moves",
                      o->mode);
    }
    expect_intact(o);
}
BOTH_ENGINES_WITH(a_fetch_ahead_queued_behind_a_remap_that_waits_is_done_first,
                  "ahead-behind-remap", expect_ahead_behind_remap, "IPCSHIM_TEST_SWAP_AHEAD=1")

/* 10. The orders a fetch ahead meets when the history policy decides it
 * (IPCSHIM_SWAP_AHEAD=1, not IPCSHIM_TEST_SWAP_AHEAD): kernels over A, B and C in turn until the
 * period is learned, a last round on held S1 (A's fetch ahead waits in the
 * mover behind it), then a kernel over A on held S3, cudaFree(A) or an
 * export of A. Whether A's own fetch is in the mover at that moment
 * depends on the mover thread's timing ("a_ahead"); the learning rounds
 * meet fetches ahead the mover runs too. The launch case runs three times:
 * with swap_vmm_before not waiting for a moving fetch ahead, the mover
 * unmaps A under the kernel queued on S3 in about three runs of five
 * (words lost). */
static void expect_learned(const struct orders *o)
{
    cr_expect_geq(stat_of(o, "fetched ahead "), 1, "%s/%s: the policy fetched nothing ahead",
                  o->mode, o->engine);
    if (o->vmm) cr_expect_geq(stat_of(o, "fetches ahead "), 1, "%s: no fetch ahead", o->mode);
    expect_intact(o);
}
static void expect_learned_free(const struct orders *o)
{
    cr_expect_eq(num(o, "free"), 0, "%s/%s: cudaFree(A) failed", o->mode, o->engine);
    expect_learned(o);
}
static void expect_learned_export(const struct orders *o)
{
    cr_expect_eq(num(o, "export"), o->vmm ? 0 : 1, "%s/%s: export", o->mode, o->engine);
    expect_learned(o);
}
Test(swap_orders, a_launch_over_a_block_the_policy_fetches_ahead_vmm)
{
    for (int i = 0; i < 3; i++) {
        static struct orders o;
        run_order(&o, "learned-launch", "vmm", "IPCSHIM_SWAP_AHEAD=1");
        expect_learned(&o);
    }
}
Test(swap_orders, a_launch_over_a_block_the_policy_fetches_ahead_managed)
{
    static struct orders o;
    run_order(&o, "learned-launch", "managed", "IPCSHIM_SWAP_AHEAD=1");
    expect_learned(&o);
}
/* The same order under both engines with IPCSHIM_SWAP_AHEAD=1. */
#define BOTH_ENGINES_AHEAD(name, mode, check)                                                      \
    Test(swap_orders, name##_managed)                                                              \
    {                                                                                              \
        static struct orders o;                                                                    \
        run_order(&o, mode, "managed", "IPCSHIM_SWAP_AHEAD=1");                                    \
        check(&o);                                                                                 \
    }                                                                                              \
    Test(swap_orders, name##_vmm)                                                                  \
    {                                                                                              \
        static struct orders o;                                                                    \
        run_order(&o, mode, "vmm", "IPCSHIM_SWAP_AHEAD=1");                                        \
        check(&o);                                                                                 \
    }
BOTH_ENGINES_AHEAD(a_free_of_a_block_the_policy_fetches_ahead, "learned-free", expect_learned_free)
BOTH_ENGINES_AHEAD(an_export_of_a_block_the_policy_fetches_ahead, "learned-export",
                   expect_learned_export)

/* 4. fork with A evicted: the child does no CUDA and exits; the parent
 * fetches A back. */
static void expect_fork(const struct orders *o)
{
    expect_text(o, "a_evicted", "host");
    expect_text(o, "a_after_fork", "host");
    cr_expect_eq(num(o, "child"), 0, "%s/%s: the child failed", o->mode, o->engine);
    expect_intact(o);
}
BOTH_ENGINES(fork_with_blocks_evicted, "fork", expect_fork)

/* 5. cudaIpcGetMemHandle on A while A is evicted. The managed engine
 * refuses it (docs/swap.md, "Exported and imported blocks"); a VMM block
 * exports, and the importer reads what the exporter wrote to A while it
 * kept running kernels over all three blocks under the budget. */
static void expect_export(const struct orders *o)
{
    expect_text(o, "a_evicted", "host");
    if (!o->vmm) {
        cr_expect_eq(num(o, "export"), 1, "%s/%s: expected cudaErrorInvalidValue", o->mode,
                     o->engine);
        cr_expect(strstr(o->log, "cudaIpcGetMemHandle") && strstr(o->log, "refused"),
                  "%s/%s: no log line for the refusal:\n%s", o->mode, o->engine, o->log);
    } else {
        cr_expect_eq(num(o, "export"), 0, "%s: the export of a VMM block failed", o->mode);
        cr_expect_eq(num(o, "import_open"), 0);
        expect_text(o, "import_read", "ok");
        cr_expect_eq(num(o, "import_close"), 0);
        cr_expect_eq(num(o, "importer"), 0);
    }
    expect_intact(o);
}
BOTH_ENGINES(a_block_exported_while_evicted, "export", expect_export)

/* 5b. The same with A's write-back held behind S2 at the export (with
 * async evictions A's remap is pending), and moves while the importer maps
 * A: the export must complete A's remap first. */
static void expect_export_pending(const struct orders *o)
{
    cr_expect_eq(num(o, "queued_before"), 1, "%s/%s: the kernel was not queued", o->mode,
                 o->engine);
    if (!o->vmm) {
        cr_expect_eq(num(o, "export"), 1);
        expect_intact(o);
        return;
    }
    cr_expect_eq(num(o, "export"), 0, "%s: the export of a VMM block failed", o->mode);
    cr_expect_eq(num(o, "import_open"), 0);
    expect_text(o, "import_read", "ok");
    cr_expect_eq(num(o, "importer"), 0);
    expect_intact(o);
}
BOTH_ENGINES(a_block_exported_while_its_remap_is_pending, "export-pending", expect_export_pending)

/* 6a'. cudaFree of A while its write-back is held behind S2 (with async
 * evictions its remap is pending), then a new block in its place and
 * moves: the free must complete the remap and forget it. */
static void expect_free_pending(const struct orders *o)
{
    cr_expect_eq(num(o, "queued_before"), 1, "%s/%s: the kernel was not queued", o->mode,
                 o->engine);
    cr_expect_eq(num(o, "free"), 0, "%s/%s: cudaFree(A) failed", o->mode, o->engine);
    expect_intact(o);
}
BOTH_ENGINES(a_free_of_a_victim_whose_remap_is_pending, "free-pending", expect_free_pending)

/* 6a. cudaFree of A while a kernel over it is still queued (a free
 * synchronises: the kernel completes first). */
static void expect_free_queued(const struct orders *o)
{
    cr_expect_eq(num(o, "queued_before"), 1, "%s/%s: the kernel was not queued", o->mode,
                 o->engine);
    cr_expect_eq(num(o, "free"), 0, "%s/%s: cudaFree(A) failed", o->mode, o->engine);
    cr_expect_eq(num(o, "queued_after_free"), 0);
    expect_intact(o);
}
BOTH_ENGINES(a_free_of_a_block_with_queued_work, "free-queued", expect_free_queued)

/* 6b. cudaDeviceReset with A evicted, then new blocks in a new context. The
 * engine must forget the old context's blocks without calling the driver on
 * them: a VMM engine that moved them would fault or fail; today's managed
 * engine still prefetches them (the driver refuses: "prefetch failures")
 * and counts them against the budget, which costs no byte. */
static void expect_reset(const struct orders *o)
{
    expect_text(o, "a_evicted", "host");
    cr_expect_eq(num(o, "reset"), 0);
    long long stale = stat_of(o, "prefetch failures ");
    if (o->vmm)
        cr_expect_eq(stale, 0, "%s: moves of blocks the reset destroyed", o->mode);
    else if (stale)
        fprintf(stderr, "note: %s/%s: the managed engine moved %lld blocks the reset destroyed\n",
                o->mode, o->engine, stale);
    expect_intact(o);
}
BOTH_ENGINES(device_reset_with_blocks_evicted, "reset", expect_reset)

/* What the checks above catch: an eviction by hand that unmaps a VMM range
 * under a queued kernel (no shim). The context dies with 700, as on the
 * H200, and the final allocation says so. */
Test(swap_orders, unmapping_under_a_queued_kernel_is_what_the_checks_catch)
{
    struct orders o = {.mode = "unsafe-unmap", .engine = "none"};
    run_prog(&o.r, "swap-orders", false, NULL, ARGS("unsafe-unmap"));
    fprintf(stderr, "---- unsafe-unmap, no shim\n%s", o.r.out);
    cr_assert_eq(o.r.status, 0, "status %d\n%s", o.r.status, o.r.out);
    expect_text(&o, "backing", "vmm");
    cr_expect_eq(num(&o, "queued_before"), 1);
    expect_text(&o, "saw_700", "yes");
    cr_expect_eq(num(&o, "final_malloc"), 700);
    cr_expect_neq(num(&o, "bad_words"), 0, "the bytes cannot be right after the fault");
}
