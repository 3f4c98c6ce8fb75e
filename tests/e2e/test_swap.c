/* test_swap: host swap end to end, on the simulated machine. A training-like
 * nvcc program whose working set is 1.5x IPCSHIM_DEVICE_BUDGET gives the
 * same checksum under the shim as without it, never has more managed bytes
 * resident than the budget, and moves blocks to the device fewer times with
 * the history policy than with LRU. Swappable blocks refuse export with the
 * documented error; ordinary blocks export, and IPC pairs keep working with
 * swap on in both processes. */
#include "run.h"
#include "swap_offline.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("swap");
}
TestSuite(swap, .init = setup, .fini = run_cleanup, .timeout = 120);

static char buf[256];

static void need_train(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/train", getenv("E2E_BIN_DIR"));
    if (access(path, X_OK))
        cr_skip_test("nvcc was not found when the build was configured; no train program");
}

static unsigned long long field(const struct run_result *r, const char *key)
{
    const char *v = run_field(r, key, buf, sizeof buf);
    cr_assert(v, "no \"%s\" line in:\n%s", key, r->out);
    return strtoull(v, NULL, 0);
}

static const char *text(const struct run_result *r, const char *key, char *out, size_t len)
{
    const char *v = run_field(r, key, out, len);
    cr_assert(v, "no \"%s\" line in:\n%s", key, r->out);
    return v;
}

struct swap_run {
    struct run_result r;
    char checksum[64];
    unsigned long long faults, fetches, h2d, peak;
};

static void run_train(struct swap_run *s, const char *policy, unsigned long long budget)
{
    char b[64], p[64];
    snprintf(b, sizeof b, "IPCSHIM_DEVICE_BUDGET=%llu", budget);
    snprintf(p, sizeof p, "IPCSHIM_SWAP_POLICY=%s", policy);
    run_prog(&s->r, "train", true, ENV(b, p, "IPCSHIM_SWAP_MIN_BYTES=64K", "IPCSHIM_STATS=1"),
             NULL);
    cr_assert_eq(s->r.status, 0, "%s: status %d\n%s", policy, s->r.status, s->r.out);
    text(&s->r, "checksum", s->checksum, sizeof s->checksum);
    s->faults = field(&s->r, "faults");
    s->fetches = field(&s->r, "fetches");
    s->h2d = field(&s->r, "bytes_h2d");
    s->peak = field(&s->r, "peak_device_resident");
    fprintf(
        stderr,
        "%s: budget %llu, peak resident %llu, faults %llu, fetches %llu, bytes to device %llu\n",
        policy, budget, s->peak, s->faults, s->fetches, s->h2d);
}

Test(swap, training_at_1_5x_budget_is_correct_bounded_and_history_beats_lru)
{
    need_train();
    struct run_result plain;
    char want[64];
    run_prog(&plain, "train", false, NULL, NULL);
    cr_assert_eq(plain.status, 0, "without the shim: %s", plain.out);
    text(&plain, "checksum", want, sizeof want);
    unsigned long long ws = field(&plain, "working_set"), max_launch = field(&plain, "max_launch");
    unsigned long long budget = ws * 2 / 3 / 4096 * 4096;
    cr_assert_gt(budget, max_launch, "the budget must hold one launch");

    static struct swap_run hist, lru;
    run_train(&hist, "history", budget);
    run_train(&lru, "lru", budget);
    cr_expect_str_eq(hist.checksum, want, "history: data differs from the run without the shim");
    cr_expect_str_eq(lru.checksum, want, "lru: data differs from the run without the shim");
    cr_expect_leq(hist.peak, budget, "history: %llu bytes resident, budget %llu", hist.peak,
                  budget);
    cr_expect_leq(lru.peak, budget, "lru: %llu bytes resident, budget %llu", lru.peak, budget);
    cr_expect_gt(hist.peak, budget / 2, "swap did not use the device (peak %llu)", hist.peak);
    /* Every launch's blocks were predicted: nothing was left to demand paging. */
    cr_expect_eq(hist.faults, 0, "history: %llu hardware faults", hist.faults);
    cr_expect_eq(lru.faults, 0, "lru: %llu hardware faults", lru.faults);
    cr_expect_lt(hist.fetches, lru.fetches, "history %llu fetches, lru %llu", hist.fetches,
                 lru.fetches);
    cr_expect_lt(hist.h2d, lru.h2d, "history %llu bytes to device, lru %llu", hist.h2d, lru.h2d);
}

/* IPCSHIM_SWAP_ENGINE names the backing; train's blocks (64 KiB to 1.5 MiB)
 * are under the VMM granularity, so both engines keep them managed, and
 * both keep train's checksum. */
Test(swap, training_keeps_its_checksum_with_either_engine)
{
    need_train();
    struct run_result plain, vmm, managed;
    char want[64], got[64];
    run_prog(&plain, "train", false, NULL, ARGS("--iters", "3"));
    cr_assert_eq(plain.status, 0, "%s", plain.out);
    text(&plain, "checksum", want, sizeof want);
    run_prog(
        &vmm, "train", true,
        ENV("IPCSHIM_DEVICE_BUDGET=20M", "IPCSHIM_SWAP_MIN_BYTES=64K", "IPCSHIM_SWAP_ENGINE=vmm"),
        ARGS("--iters", "3"));
    run_prog(&managed, "train", true,
             ENV("IPCSHIM_DEVICE_BUDGET=20M", "IPCSHIM_SWAP_MIN_BYTES=64K",
                 "IPCSHIM_SWAP_ENGINE=managed"),
             ARGS("--iters", "3"));
    cr_assert_eq(vmm.status, 0, "%s", vmm.out);
    cr_assert_eq(managed.status, 0, "%s", managed.out);
    cr_expect_str_eq(text(&vmm, "checksum", got, sizeof got), want, "vmm");
    cr_expect_str_eq(text(&managed, "checksum", got, sizeof got), want, "managed");
    cr_expect_gt(field(&vmm, "fetches"), 0, "vmm: train's small blocks are managed and move");
}

/* The number after `key` in the first line of the file at path that has it. */
static unsigned long long number_after(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "no log at %s", path);
    char line[1024];
    const char *at = NULL;
    while (!at && fgets(line, sizeof line, f))
        at = strstr(line, key);
    fclose(f);
    cr_assert(at, "no \"%s\" in %s", key, path);
    return strtoull(at + strlen(key), NULL, 10);
}

/* The engine's (core/swap/swap_engine.c) policy calls replayed from the
 * shim's trace: each access, and after each launch (an L line: a launch,
 * copy or set with swappable blocks) the launch's end and the fetches
 * ahead within the adaptive horizon (swap_ahead), whose feedback is the
 * engine's on the simulator, where no managed prefetch is ever still
 * running at a launch: a block fetched ahead and used by a launch is
 * early, a predicted block fetched on demand late. *ahead_blocks: the
 * blocks fetched ahead. */
static void replay_engine(const struct swap_trace *t, uint64_t budget, struct swap_counters *out,
                          uint64_t *ahead_blocks)
{
    struct swap_policy *p;
    cr_assert_eq(swap_policy_create(SWAP_POLICY_HISTORY, budget, &p), 0);
    struct swap_ahead a;
    swap_ahead_init(&a);
    static uint64_t ahead[4096]; /* the blocks whose ahead note is set */
    size_t n_ahead = 0;
    *ahead_blocks = 0;
#define DROP(id)                                                                                   \
    for (size_t k_ = 0; k_ < n_ahead; k_++)                                                        \
        if (ahead[k_] == (id)) ahead[k_--] = ahead[--n_ahead];
    for (size_t i = 0; i < t->n; i++) {
        const struct swap_event *e = &t->ev[i];
        struct swap_decision d;
        int rc;
        switch (e->kind) {
        case SWAP_EV_ACCESS:
            rc = e->is_copy ? swap_policy_copy(p, e->block, e->bytes, e->is_write, &d)
                            : swap_policy_access(p, e->block, e->bytes, e->is_write, &d);
            if (rc == -ENOSPC) break;
            cr_assert_eq(rc, 0);
            if (d.predicted) swap_ahead_used(&a, true);
            for (size_t k = 0; k < d.n_evict; k++)
                DROP(d.evict[k].block);
            if (e->is_copy) break;
            for (size_t k = 0; k < n_ahead; k++)
                if (ahead[k] == e->block) swap_ahead_used(&a, false);
            DROP(e->block);
            break;
        case SWAP_EV_LAUNCH:
            swap_policy_next_launch(p);
            swap_ahead_end_launch(&a);
            for (unsigned k = 0; k < SWAP_AHEAD_PER_LAUNCH; k++) {
                uint64_t id;
                if (swap_policy_prefetch(p, a.horizon, &id, &d)) break;
                for (size_t v = 0; v < d.n_evict; v++)
                    DROP(d.evict[v].block);
                cr_assert_lt(n_ahead, sizeof ahead / sizeof ahead[0]);
                ahead[n_ahead++] = id;
                ++*ahead_blocks;
            }
            break;
        case SWAP_EV_FREE:
            swap_policy_free(p, e->block);
            DROP(e->block);
            break;
        }
    }
#undef DROP
    swap_policy_counters(p, out);
    swap_policy_destroy(p);
}

/* The trace the shim writes is what its policy saw, copies marked: replayed
 * at the same budget through the engine's calls, fetches ahead included,
 * the policy's fetches and write-backs are the bytes the shim moved,
 * exactly (docs/swap.md, "The shim's bytes and the replay's"). Every block
 * train's kernels touch is written (the shim records kernels as writing all
 * their blocks), so every eviction is a write-back and the shim's bytes to
 * the host are the replay's too. The history policy learns train's period
 * and fetches ahead (IPCSHIM_SWAP_AHEAD=1): the stats line counts
 * the bytes and the launches' feedback. */
Test(swap, the_shims_moves_are_the_replay_of_its_trace)
{
    need_train();
    char trace[256], log[256], env_trace[300], env_log[300];
    snprintf(trace, sizeof trace, "/tmp/ipcshim-swap-exact-%d.trace", (int)getpid());
    snprintf(log, sizeof log, "/tmp/ipcshim-swap-exact-%d.log", (int)getpid());
    unlink(trace), unlink(log);
    snprintf(env_trace, sizeof env_trace, "IPCSHIM_TRACE=%s", trace);
    snprintf(env_log, sizeof env_log, "IPCSHIM_LOG_FILE=%s", log);
    const uint64_t budget = 26431488; /* tests/swap/traces/e2e-train.trace.xz's */
    struct run_result r;
    run_prog(&r, "train", true,
             ENV("IPCSHIM_DEVICE_BUDGET=26431488", "IPCSHIM_SWAP_MIN_BYTES=64K",
                 "IPCSHIM_SWAP_POLICY=history", "IPCSHIM_SWAP_AHEAD=1", "IPCSHIM_STATS=1",
                 env_trace, env_log),
             ARGS("--iters", "6"));
    cr_assert_eq(r.status, 0, "%s", r.out);
    unsigned long long fetched = number_after(log, "prefetched to device ");
    unsigned long long to_host = number_after(log, "to host ");
    unsigned long long faults = number_after(log, "faults (fetches a launch needed) ");
    struct swap_trace t = {0};
    size_t bad = 0;
    cr_assert_eq(swap_trace_load(trace, &t, &bad), 0, "trace line %zu", bad);
    size_t copies = 0;
    for (size_t i = 0; i < t.n; i++)
        copies += t.ev[i].kind == SWAP_EV_ACCESS && t.ev[i].is_copy;
    cr_expect_gt(copies, 0, "the fills, the batches and the read-backs are copies");
    struct swap_replay_result h = {0};
    uint64_t ahead_blocks = 0;
    replay_engine(&t, budget, &h.total, &ahead_blocks);
    cr_expect_gt(h.total.h2d_bytes, 0, "the budget made the shim swap");
    cr_expect_gt(ahead_blocks, 0, "the replay fetches ahead");
    unsigned long long ahead_bytes = number_after(log, "fetched ahead ");
    unsigned long long early = number_after(log, "early ");
    cr_expect_gt(ahead_bytes, 0, "the policy fetched ahead in the shim");
    cr_expect_eq(number_after(log, "(late "), 0,
                 "on the simulator a managed prefetch has always landed by its launch");
    cr_expect_gt(early, 0, "blocks fetched ahead were used after their copy");
    cr_expect_eq(h.total.prefetches, ahead_blocks);
    cr_expect_eq(h.total.faults, faults);
    cr_expect_eq(h.total.h2d_bytes, fetched, "replay %llu bytes fetched, shim %llu",
                 (unsigned long long)h.total.h2d_bytes, fetched);
    cr_expect_eq(h.total.d2h_bytes, to_host, "replay %llu bytes written back, shim %llu",
                 (unsigned long long)h.total.d2h_bytes, to_host);
    swap_trace_fini(&t);
    unlink(trace), unlink(log);
}

Test(swap, without_a_budget_swap_stays_off)
{
    need_train();
    struct run_result r;
    run_prog(&r, "train", true, ENV("IPCSHIM_SWAP=1", "IPCSHIM_SWAP_MIN_BYTES=64K"),
             ARGS("--iters", "2"));
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(field(&r, "fetches"), 0, "managed memory was used without a budget");
}

static void trace_case(const char *mode)
{
    need_train();
    char path[256], env[300];
    snprintf(path, sizeof path, "/tmp/ipcshim-swap-trace-%d", (int)getpid());
    unlink(path);
    snprintf(env, sizeof env, "IPCSHIM_TRACE=%s", path);
    struct run_result r, plain;
    run_prog(&r, "train", true, ENV("IPCSHIM_DEVICE_BUDGET=6M", "IPCSHIM_SWAP_MIN_BYTES=64K", env),
             ARGS("--layers", "2", "--iters", "2", mode));
    cr_assert_eq(r.status, 0, "%s", r.out);
    run_prog(&plain, "train", false, NULL, ARGS("--layers", "2", "--iters", "2", mode));
    char want[64];
    cr_expect_str_eq(text(&r, "checksum", buf, sizeof buf),
                     text(&plain, "checksum", want, sizeof want));
    cr_expect_leq(field(&r, "peak_device_resident"), 6 << 20);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no trace written");
    char line[256];
    int access = 0, launch = 0, freed = 0;
    while (fgets(line, sizeof line, f))
        access += line[0] == 'A', launch += line[0] == 'L', freed += line[0] == 'F';
    fclose(f);
    unlink(path);
    /* 2 layers: 14 buffers (A[0..2], W dW M V of 2 layers, 2 G, loss). Per iteration: the batch
     * copy, the memset, 2 forward, the loss kernel, 4 backward, 2 adam, the loss copy: 12
     * "launches"; plus one fill and one read-back copy per buffer. */
    cr_expect_eq(freed, 14, "%d frees", freed);
    cr_expect_eq(launch, 2 * 12 + 14 + 14, "%d launches", launch);
    cr_expect_gt(access, launch, "%d accesses", access);
}

/* The copies, sets and launches through the runtime; the same with the
 * copies and sets through the driver (its resolver door: dlsym). */
Test(swap, trace_records_launches_copies_and_frees)
{
    trace_case(NULL);
}
Test(swap, driver_copies_are_recorded_too)
{
    trace_case("--driver-copies");
}

Test(swap, failed_managed_allocation_falls_back_to_ordinary_memory)
{
    need_train();
    struct run_result r, plain;
    run_prog(&r, "train", true,
             ENV("IPCSHIM_DEVICE_BUDGET=20M", "IPCSHIM_SWAP_MIN_BYTES=64K", "SIMCUDA_FAIL_ALLOC=1"),
             ARGS("--iters", "2"));
    cr_assert_eq(r.status, 0, "%s", r.out);
    run_prog(&plain, "train", false, NULL, ARGS("--iters", "2"));
    char want[64];
    cr_expect_str_eq(text(&r, "checksum", buf, sizeof buf),
                     text(&plain, "checksum", want, sizeof want));
    cr_expect_leq(field(&r, "peak_device_resident"), 20 << 20);
}

Test(swap, export_of_a_swappable_block_fails_with_the_documented_error)
{
    need_train();
    char log[256], env[300];
    snprintf(log, sizeof log, "/tmp/ipcshim-swap-log-%d", (int)getpid());
    unlink(log);
    snprintf(env, sizeof env, "IPCSHIM_LOG_FILE=%s", log);
    struct run_result r;
    run_prog(
        &r, "train", true,
        ENV("IPCSHIM_DEVICE_BUDGET=3M", "IPCSHIM_SWAP_MIN_BYTES=256K", "IPCSHIM_EXIT_WAIT=0", env),
        ARGS("--export", "1048576", "65536"));
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect_eq(field(&r, "export_large"), 1, "swappable export: expected cudaErrorInvalidValue");
    cr_expect_eq(field(&r, "export_small"), 0, "an ordinary block must export with swap on");
    /* The exported block is ordinary device memory: nothing can migrate it. */
    cr_expect_eq((long long)strtoll(text(&r, "small_managed", buf, sizeof buf), NULL, 0), -2);
    struct run_result plain;
    run_prog(&plain, "train", false, NULL, ARGS("--export", "1048576", "65536"));
    char want[64];
    cr_expect_str_eq(text(&r, "small_checksum", buf, sizeof buf),
                     text(&plain, "small_checksum", want, sizeof want));
    FILE *f = fopen(log, "r");
    cr_assert(f, "no log written");
    char line[1024];
    bool named = false, at_exit = false;
    while (fgets(line, sizeof line, f)) {
        named |= strstr(line, "cudaIpcGetMemHandle") && strstr(line, "IPCSHIM_SWAP_MIN_BYTES");
        /* Said again at exit, for a program that ignored the error. */
        at_exit |= strstr(line, "warn: swap: 1 export of swappable blocks was refused") != NULL;
    }
    fclose(f);
    unlink(log);
    cr_expect(named, "no log line naming IPCSHIM_SWAP_MIN_BYTES");
    cr_expect(at_exit, "no warning at exit about the refused export");
}

Test(swap, ipc_pair_works_with_swap_on_in_exporter_and_importers)
{
    struct run_result r;
    run_prog(&r, "pair-runtime", true, ENV("IPCSHIM_DEVICE_BUDGET=1M"),
             ARGS("--free", "while-reading", "--blocks", "3", "--consumers", "2"));
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    cr_expect_str_eq(run_field(&r, "consumer 0", buf, sizeof buf), "ok");
}

/* A swappable block under the VMM granularity is managed memory, which
 * legacy IPC cannot export (IPCSHIM_SWAP_MIN_BYTES lowered below its 2M
 * default, which keeps every swappable block VMM-backed and exportable). */
Test(swap, ipc_pair_export_of_managed_swappable_blocks_fails_clearly)
{
    struct run_result r;
    run_prog(&r, "pair-runtime", true,
             ENV("IPCSHIM_DEVICE_BUDGET=64M", "IPCSHIM_SWAP_MIN_BYTES=1M"),
             ARGS("--blocks", "1", "--size", "1048576"));
    cr_expect_eq(r.status, 2, "status %d: %s", r.status, r.out);
    cr_expect(strstr(r.out, "get handle failed with 1"), "%s", r.out);
}

/* ---- the VMM engine (IPCSHIM_SWAP_ENGINE=vmm, the default) ---------------
 * swap-vmm (progs/swap_vmm.c): 6 blocks of 4 MiB (VMM-backed: at least the
 * 2 MiB granularity), each launch touching two of them, a word of each
 * block rewritten per iteration, then every block read back and hashed. */

#define VMM_BLOCKS_BYTES (6ull * 4 * 1024 * 1024)

struct vmm_stats {
    struct run_result r;
    char checksum[64];
    unsigned long long blocks, fell_back, to_device, to_host, fetch_copies, writebacks;
    unsigned long long stream_waits, chunks, pinned, forgotten, remap_failures, no_layout;
    unsigned long long remaps_async, remaps_forced, host_waits;
    /* the engine's fetches ahead: bytes, feedback, and moves that failed */
    unsigned long long ahead_bytes, ahead_late, ahead_early, ahead_missed, move_failures;
    char log[256];
};

/* The largest number after `key` on any line of the file at path (several
 * processes' reports: the exporter's and its importers'). */
static unsigned long long number_max(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "no log at %s", path);
    char line[1024];
    unsigned long long most = 0;
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, key);
        unsigned long long v = at ? strtoull(at + strlen(key), NULL, 10) : 0;
        if (v > most) most = v;
    }
    fclose(f);
    return most;
}

/* The engine's fetch-ahead figures from the exit report in s->log. */
static void ahead_stats(struct vmm_stats *s)
{
    s->ahead_bytes = number_after(s->log, "fetched ahead ");
    s->ahead_late = number_after(s->log, "(late ");
    s->ahead_early = number_after(s->log, "early ");
    s->ahead_missed = number_after(s->log, "missed ");
    s->move_failures = number_after(s->log, "prefetch failures ");
}

/* swap-vmm under the shim with extra environment (NULL-ended: any engine),
 * only its checksum and the fetch-ahead figures read. */
static void ahead_run(struct vmm_stats *s, const char *budget, const char *const *extra,
                      const char *const *args)
{
    char env_log[300], env_budget[64];
    snprintf(s->log, sizeof s->log, "/tmp/ipcshim-swap-ahead-%d.log", (int)getpid());
    unlink(s->log);
    snprintf(env_log, sizeof env_log, "IPCSHIM_LOG_FILE=%s", s->log);
    snprintf(env_budget, sizeof env_budget, "IPCSHIM_DEVICE_BUDGET=%s", budget);
    const char *env[9] = {env_log, env_budget, "IPCSHIM_STATS=1", "IPCSHIM_EXIT_WAIT=0",
                          "IPCSHIM_SWAP_AHEAD=1"};
    size_t n = 5;
    for (size_t i = 0; extra && extra[i] && n < 8; i++)
        env[n++] = extra[i];
    run_prog(&s->r, "swap-vmm", true, env, args);
    cr_assert_eq(s->r.status, 0, "swap-vmm: status %d\n%s", s->r.status, s->r.out);
    cr_assert(run_field(&s->r, "checksum", s->checksum, sizeof s->checksum), "%s", s->r.out);
    ahead_stats(s);
    unlink(s->log);
}

/* Run prog under the shim with the VMM engine's figures read from its exit
 * report (IPCSHIM_STATS into a log file). extra: more environment, NULL-ended. */
static void vmm_run(struct vmm_stats *s, const char *prog, const char *budget,
                    const char *const *extra, const char *const *args)
{
    char env_log[300], env_budget[64];
    snprintf(s->log, sizeof s->log, "/tmp/ipcshim-swap-vmm-%d.log", (int)getpid());
    unlink(s->log);
    snprintf(env_log, sizeof env_log, "IPCSHIM_LOG_FILE=%s", s->log);
    snprintf(env_budget, sizeof env_budget, "IPCSHIM_DEVICE_BUDGET=%s", budget);
    const char *env[16] = {env_log, env_budget, "IPCSHIM_STATS=1", "IPCSHIM_EXIT_WAIT=0"};
    size_t n = 4;
    for (size_t i = 0; extra && extra[i] && n < 15; i++)
        env[n++] = extra[i];
    run_prog(&s->r, prog, true, env, args);
    cr_assert_eq(s->r.status, 0, "%s: status %d\n%s", prog, s->r.status, s->r.out);
    if (run_field(&s->r, "checksum", buf, sizeof buf))
        snprintf(s->checksum, sizeof s->checksum, "%s", buf);
    s->blocks = number_after(s->log, "VMM blocks ");
    s->fell_back = number_after(s->log, "fell back to managed ");
    s->to_device = number_after(s->log, "remaps to device ");
    s->to_host = number_after(s->log, "to the host ");
    s->fetch_copies = number_after(s->log, "fetch copies ");
    s->writebacks = number_after(s->log, "write-backs ");
    s->stream_waits = number_after(s->log, "waited for by the launch's stream ");
    s->chunks = number_after(s->log, "chunks created ");
    s->remaps_async = number_after(s->log, "remapped without a host wait ");
    s->remaps_forced = number_after(s->log, "(with one ");
    s->host_waits = number_after(s->log, "host waits ");
    s->pinned = number_max(s->log, "exports pinned on the device ");
    s->forgotten = number_after(s->log, "forgotten at a context's end ");
    s->remap_failures = number_after(s->log, "remap failures ");
    s->no_layout = number_max(s->log, "launches without a known layout ");
    ahead_stats(s);
    unlink(s->log);
}

/* The checksum swap-vmm prints without the shim, with args. */
static void vmm_plain(char *want, size_t len, const char *const *args)
{
    struct run_result plain;
    run_prog(&plain, "swap-vmm", false, NULL, args);
    cr_assert_eq(plain.status, 0, "without the shim: %s", plain.out);
    text(&plain, "checksum", want, len);
}

/* swap-vmm's launches repeat every iteration: the history policy learns
 * the period and fetches ahead on its own (no IPCSHIM_TEST_SWAP_AHEAD), on
 * the VMM engine with and without the mover thread and on the managed
 * engine, and the bytes are the run's without the shim. Inline and
 * managed, nothing is ever in flight on the simulator when a launch comes:
 * every block fetched ahead is early. With the mover thread a fetch ahead
 * of a block whose remap the mover has not done yet fails (-EBUSY: the
 * launch fetches it), so only the policy's decision is certain there. */
Test(swap, the_policy_fetches_ahead_on_both_engines_and_keeps_the_bytes)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "12"));
    static struct vmm_stats s;
    const char *const *modes[] = {ENV("IPCSHIM_SWAP_MOVER=inline"),
                                  ENV("IPCSHIM_SWAP_ENGINE=managed"),
                                  ENV("IPCSHIM_SWAP_MOVER=thread")};
    for (size_t i = 0; i < 3; i++) {
        ahead_run(&s, "16M", modes[i], ARGS("--iters", "12"));
        cr_expect_str_eq(s.checksum, want, "%s: data differs from the run without the shim",
                         modes[i][0]);
        if (i == 2) {
            cr_expect_gt(s.ahead_bytes + s.move_failures, 0, "the policy fetched nothing ahead");
            continue;
        }
        cr_expect_gt(s.ahead_bytes, 0, "%s: the policy fetched nothing ahead", modes[i][0]);
        cr_expect_gt(s.ahead_early, 0, "%s: no block fetched ahead was used", modes[i][0]);
        cr_expect_eq(s.ahead_late, 0, "%s: %llu late", modes[i][0], s.ahead_late);
    }
}

/* The lateness rule: a block fetched ahead is late only when its launch
 * could start now (its stream idle, or everything before the prefetch on
 * its own stream done) but its copy is not complete. With --hold every
 * launch stays queued: the copies that follow them (a VMM fetch waits for
 * its chunks' write-backs, which wait for the held launches; a managed
 * prefetch queues on the held stream) are not complete at the next
 * launch, which could not start either: early, every one. Judged by "the
 * copy is not complete" alone, some would be late. */
Test(swap, a_fetch_ahead_is_late_only_when_its_launch_could_start)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "12", "--hold"));
    static struct vmm_stats s;
    const char *const *modes[] = {ENV("IPCSHIM_SWAP_MOVER=inline"),
                                  ENV("IPCSHIM_SWAP_ENGINE=managed")};
    for (size_t i = 0; i < 2; i++) {
        ahead_run(&s, "16M", modes[i], ARGS("--iters", "12", "--hold"));
        cr_expect_str_eq(s.checksum, want, "%s: data differs", modes[i][0]);
        cr_expect_gt(s.ahead_bytes, 0, "%s: the policy fetched nothing ahead", modes[i][0]);
        cr_expect_eq(s.ahead_late, 0, "%s: %llu late, %llu early", modes[i][0], s.ahead_late,
                     s.ahead_early);
        cr_expect_eq(s.ahead_early, s.ahead_bytes / (4 << 20), "%s: every block used early",
                     modes[i][0]);
    }
}

/* At 1.5x the budget, blocks of 4 MiB are VMM-backed, move both ways (fetch
 * copies, write-backs), keep their bytes, and the device never holds more
 * than the budget (the chunk pool is all the device memory the blocks use);
 * every fetch copy is waited for by a launch's stream, not by the host; and
 * no eviction makes the host wait (each victim is remapped once its
 * write-back ended, found without waiting). */
Test(swap, vmm_engine_backs_large_blocks_and_keeps_their_bytes_under_the_budget)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "4"));
    static struct vmm_stats s;
    const unsigned long long budget = VMM_BLOCKS_BYTES * 2 / 3; /* 16 MiB */
    char b[32];
    snprintf(b, sizeof b, "%llu", budget);
    vmm_run(&s, "swap-vmm", b, NULL, ARGS("--iters", "4"));
    cr_expect_str_eq(s.checksum, want, "data differs from the run without the shim");
    cr_expect_eq(s.blocks, 7, "6 blocks and the one the program makes after its frees");
    cr_expect_eq(s.fell_back, 0);
    cr_expect_gt(s.fetch_copies, 0, "the budget made the engine fetch");
    cr_expect_gt(s.writebacks, 0, "and write back");
    cr_expect_eq(s.to_host, s.writebacks, "every block a kernel touched is written: all dirty");
    cr_expect_eq(s.remaps_async + s.remaps_forced, s.to_host, "each victim remapped once");
    cr_expect_eq(s.remaps_forced, 0, "no eviction waited on the host");
    cr_expect_lt(s.host_waits, s.to_host, "fewer host waits (%llu) than evictions (%llu)",
                 s.host_waits, s.to_host);
    /* The driver's count: the program's launch stream was made to wait. */
    unsigned long long waits = field(&s.r, "launch_stream_waits");
    cr_expect_geq(waits, s.fetch_copies,
                  "each fetch copy is waited for by the launching stream (%llu waits, %llu copies)",
                  waits, s.fetch_copies);
    cr_expect_leq(waits, s.stream_waits, "the shim counts the copies' streams' waits too");
    unsigned long long used = field(&s.r, "device_used"), peak = field(&s.r, "peak_device_used");
    cr_expect_gt(used, 0, "the blocks used the device");
    cr_expect_leq(peak, budget, "%llu device bytes, budget %llu", peak, budget);
    cr_expect_eq(used, s.chunks * 2 * 1024 * 1024, "the device holds the chunk pool, no more");
}

/* The same program with IPCSHIM_SWAP_ENGINE=managed: managed memory, the
 * same bytes, no VMM block. */
Test(swap, managed_engine_is_chosen_by_name)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "3"));
    char log[256], env_log[300];
    snprintf(log, sizeof log, "/tmp/ipcshim-swap-managed-%d.log", (int)getpid());
    unlink(log);
    snprintf(env_log, sizeof env_log, "IPCSHIM_LOG_FILE=%s", log);
    struct run_result r;
    run_prog(
        &r, "swap-vmm", true,
        ENV("IPCSHIM_DEVICE_BUDGET=16M", "IPCSHIM_SWAP_ENGINE=managed", "IPCSHIM_STATS=1", env_log),
        ARGS("--iters", "3"));
    cr_assert_eq(r.status, 0, "%s", r.out);
    cr_expect_str_eq(text(&r, "checksum", buf, sizeof buf), want);
    cr_expect_eq(field(&r, "device_used"), 0, "managed blocks are not device allocations");
    cr_expect_eq(number_after(log, "managed blocks "), 7);
    FILE *f = fopen(log, "r");
    cr_assert(f);
    char line[1024];
    bool named = false;
    while (fgets(line, sizeof line, f))
        named |= strstr(line, "swap: engine managed") != NULL;
    fclose(f);
    unlink(log);
    cr_expect(named, "the report names the managed engine");
}

/* A budget smaller than one block: nothing fits, every block stays
 * host-backed and every access goes over the link: slow, and correct. */
Test(swap, vmm_blocks_larger_than_the_budget_stay_on_the_host_and_stay_correct)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "3"));
    static struct vmm_stats s;
    vmm_run(&s, "swap-vmm", "2M", NULL, ARGS("--iters", "3"));
    cr_expect_str_eq(s.checksum, want);
    cr_expect_eq(s.to_device, 0);
    cr_expect_eq(field(&s.r, "device_used"), 0, "nothing was placed on the device");
}

/* Every kernel stays queued on a held stream (the simulator completes it
 * only when something waits for it; a remap under a queued kernel faults
 * the context, as on the H200): evictions must wait for the launches'
 * events before they unmap. */
Test(swap, vmm_remaps_wait_for_queued_kernels)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "4"));
    static struct vmm_stats s;
    vmm_run(&s, "swap-vmm", "12M", NULL, ARGS("--iters", "4", "--hold"));
    cr_expect_str_eq(s.checksum, want);
    cr_expect_gt(s.to_host, 0, "blocks with queued kernels were evicted");
}

/* The end of a program with blocks evicted: freed, the context reset
 * (its blocks forgotten, a new context works), or exit with them allocated;
 * and a fork child that exits at once while the parent goes on. */
Test(swap, vmm_blocks_evicted_at_free_reset_exit_and_fork)
{
    char want[64], want_after[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "2"));
    struct run_result plain;
    run_prog(&plain, "swap-vmm", false, NULL, ARGS("--iters", "2", "--end", "reset"));
    text(&plain, "checksum_after_reset", want_after, sizeof want_after);
    static const char *ends[] = {"free", "reset", "free-reset", "exit"};
    for (size_t i = 0; i < 4; i++) {
        static struct vmm_stats s;
        vmm_run(&s, "swap-vmm", "12M", NULL, ARGS("--iters", "2", "--end", ends[i]));
        cr_expect_str_eq(s.checksum, want, "%s", ends[i]);
        cr_expect_gt(s.to_host, 0, "%s: some blocks were evicted", ends[i]);
        char key[32];
        snprintf(key, sizeof key, "end %s", ends[i]);
        RUN_EXPECT_FIELD(&s.r, key, "ok");
        if (!strcmp(ends[i], "reset"))
            cr_expect_eq(s.forgotten, 6, "the reset context's blocks are forgotten");
        /* The new context's block is VMM-backed too: the old context's
         * streams were forgotten with it. */
        if (strstr(ends[i], "reset")) {
            cr_expect_eq(s.fell_back, 0, "%s", ends[i]);
            cr_expect_eq(s.remap_failures, 0, "%s", ends[i]);
            char after[64];
            text(&s.r, "checksum_after_reset", after, sizeof after);
            cr_expect_str_eq(after, want_after, "%s: the new context's blocks", ends[i]);
        }
    }
    static struct vmm_stats f;
    vmm_run(&f, "swap-vmm", "12M", NULL, ARGS("--iters", "2", "--fork"));
    cr_expect_str_eq(f.checksum, want, "fork");
}

/* A driver without host-located VMM memory for a block (the simulator
 * refuses two host creates: HOST_NUMA, then HOST): that block falls back to
 * managed memory, the others stay VMM-backed, the bytes are right. */
Test(swap, vmm_allocation_falls_back_to_managed_when_host_vmm_is_refused)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "2"));
    static struct vmm_stats s;
    vmm_run(&s, "swap-vmm", "12M", ENV("SIMCUDA_FAIL_VMM_HOST=2"), ARGS("--iters", "2"));
    cr_expect_str_eq(s.checksum, want);
    cr_expect_eq(s.fell_back, 1);
    cr_expect_eq(s.blocks, 6, "the 5 others, and the one made after the frees");
}

/* Export of a VMM-backed swappable block (4 MiB): it moves into one
 * exportable device allocation, pinned outside the budget, and the
 * importers read the exporter's bytes -- whether it was on the device
 * (budget 64M) or on the host (budget 2M: it never fit), and when the
 * exporter frees it while they read (limbo keeps it for them). */
Test(swap, export_of_a_vmm_backed_block_succeeds_and_importers_read_it)
{
    static const char *budgets[] = {"64M", "2M"}, *frees[] = {"after-close", "while-reading"};
    for (size_t i = 0; i < 2; i++) {
        static struct vmm_stats s;
        vmm_run(&s, "pair-runtime", budgets[i], NULL,
                ARGS("--blocks", "2", "--size", "4194304", "--consumers", "2", "--free", frees[i]));
        RUN_EXPECT_FIELD(&s.r, "consumer 0", "ok");
        RUN_EXPECT_FIELD(&s.r, "consumer 1", "ok");
        cr_expect_eq(s.pinned, 2, "budget %s: both blocks pinned for export", budgets[i]);
    }
}

/* Three threads, a stream each, launching over the same blocks at once:
 * the remaps one thread makes never unmap under another's queued work, and
 * the bytes are those of the run without the shim. */
Test(swap, vmm_engine_serves_threads_on_their_own_streams)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "5", "--threads", "3"));
    static struct vmm_stats s;
    vmm_run(&s, "swap-vmm", "12M", NULL, ARGS("--iters", "5", "--threads", "3"));
    cr_expect_str_eq(s.checksum, want);
    cr_expect_gt(s.to_host, 0);
}

/* A kernel whose layout the shim cannot read (SIMCUDA_FAIL_PARAM_INFO: the
 * first layout query fails) stays queued on a second stream, reading block
 * 0: it may touch every block, so no block is unmapped before it completes
 * -- block 0 is evicted while it is queued. */
Test(swap, vmm_remaps_wait_for_queued_kernels_of_unknown_layout)
{
    char want[64];
    vmm_plain(want, sizeof want, ARGS("--iters", "3"));
    static struct vmm_stats s;
    vmm_run(&s, "swap-vmm", "12M", ENV("SIMCUDA_FAIL_PARAM_INFO=1"),
            ARGS("--iters", "3", "--unknown"));
    cr_expect_str_eq(s.checksum, want);
    cr_expect_gt(s.to_host, 0, "blocks were evicted while the unknown kernel was queued");
    cr_expect_eq(s.no_layout, 1, "peek's launch");
}

/* ---- pointer queries of VMM-backed blocks --------------------------------
 * swap-queries (progs/swap_queries.c) asks the driver (exported symbols and
 * the resolver door) and the runtime about pointers 0, 3 MiB and 8 MiB - 1
 * into an 8 MiB cudaMalloc block while it is on the device and after it was
 * evicted, about an ordinary block and a host address, then exports a
 * second block the way numba does (base from cuMemGetAddressRange, offset
 * beside the handle). */

/* The "q " lines of out, in order, into lines (len bytes). */
static void query_lines(const char *out, char *lines, size_t len)
{
    size_t n = 0;
    for (const char *at = out; at && *at;) {
        const char *end = strchr(at, '\n');
        size_t l = end ? (size_t)(end - at) + 1 : strlen(at);
        if (!strncmp(at, "q ", 2) && n + l < len) memcpy(lines + n, at, l), n += l;
        at = end ? end + 1 : NULL;
    }
    lines[n] = 0;
}

/* The first line where a and b differ, as "plain: ... / shim: ...". */
static const char *first_difference(const char *a, const char *b, char *out, size_t len)
{
    while (*a || *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || strncmp(a, b, la)) {
            snprintf(out, len, "without the shim: %.*s\nunder the shim:   %.*s", (int)la, a,
                     (int)lb, b);
            return out;
        }
        a += la + (a[la] != 0), b += lb + (b[lb] != 0);
    }
    return NULL;
}

/* Resident and evicted, a VMM-backed block answers every query as the
 * cudaMalloc it replaced (its base and the size asked for, device memory of
 * its device and context, not managed, legacy-IPC capable, one buffer id),
 * through the exported symbols, cuGetProcAddress and cudaPointerGetAttributes;
 * an ordinary block and a host address answer as without the shim; a
 * numba-style export of a pointer 3 MiB into a resident block reads the
 * right bytes in the importer. */
Test(swap, vmm_blocks_answer_pointer_queries_as_cudamalloc_blocks, .timeout = 180)
{
    static struct run_result plain, shim;
    static char want[16384], got[16384], diff[1024];
    run_prog(&plain, "swap-queries", false, NULL, NULL);
    cr_assert_eq(plain.status, 0, "without the shim: status %d\n%s", plain.status, plain.out);
    /* The mapping queried "evicted" (MAPPING_SIZE, the driver's answer) is
     * the host copy only once A's remap is done: inline, the next move does
     * it; a mover thread may still be at it. */
    run_prog(&shim, "swap-queries", true,
             ENV("IPCSHIM_DEVICE_BUDGET=12M", "IPCSHIM_EXIT_WAIT=0", "IPCSHIM_SWAP_ENGINE=vmm",
                 "IPCSHIM_SWAP_MOVER=inline"),
             NULL);
    cr_assert_eq(shim.status, 0, "under the shim: status %d\n%s", shim.status, shim.out);
    /* The states the queries were asked in (the mapping itself is passed through). */
    cr_assert(strstr(shim.out, "state resident 3145728 mapping_size 2097152\n"),
              "A was not on the device's 2 MiB chunks at the first queries:\n%s", shim.out);
    cr_assert(strstr(shim.out, "state evicted 3145728 mapping_size 8388608\n"),
              "A was not evicted to its host copy at the second queries:\n%s", shim.out);
    query_lines(plain.out, want, sizeof want);
    query_lines(shim.out, got, sizeof got);
    cr_assert(strstr(want, "q evicted 3145728 range 0 3145728 8388608\n"), "%s", want);
    const char *d = first_difference(want, got, diff, sizeof diff);
    cr_expect(!d, "an answer differs:\n%s", d);
    RUN_EXPECT_FIELD(&plain, "export:", "0");
    RUN_EXPECT_FIELD(&plain, "import:", "ok");
    RUN_EXPECT_FIELD(&shim, "export:", "0");
    RUN_EXPECT_FIELD(&shim, "import:", "ok");
}

/* Queries from another thread while launches move the block to the host
 * and back 100 times each: every answer is the block's (never the chunk's,
 * never an error while its range is being remapped), and nothing hangs
 * (the queries take no lock a launch holds). */
Test(swap, vmm_block_queries_stay_right_while_another_thread_moves_it, .timeout = 180)
{
    static struct run_result plain;
    run_prog(&plain, "swap-queries", false, NULL, ARGS("--race", "200"));
    cr_assert_eq(plain.status, 0, "without the shim: status %d\n%s", plain.status, plain.out);
    cr_assert(strstr(plain.out, " wrong 0\n"), "without the shim:\n%s", plain.out);
    static struct vmm_stats s;
    vmm_run(&s, "swap-queries", "12M", NULL, ARGS("--race", "200"));
    const char *v = run_field(&s.r, "race:", buf, sizeof buf);
    cr_assert(v, "%s", s.r.out);
    cr_expect(strstr(v, " wrong 0"), "race: %s", v);
    cr_expect(strncmp(v, "queries 0 ", 10), "the thread asked nothing: %s", v);
    cr_expect_geq(s.to_host, 100, "A and B evicted each other (%llu evictions)", s.to_host);
}
