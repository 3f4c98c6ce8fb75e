/* test_swap_parts: host swap's VMM engine moving a large block in parts
 * with learned extents (docs/swap.md "Parts"), recreated by
 * progs/swap_parts.c on the simulator: every run ends with every byte
 * checked against the program's mirror, no call answering 700, and a new
 * cudaMalloc succeeding; each test also asserts that its order happened
 * (where the parts were) and, for the first, the bytes the engine moved. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("swap_parts");
}
TestSuite(swap_parts, .init = setup, .fini = run_cleanup, .timeout = 120);

struct parts {
    struct run_result r;
    const char *mode;
    char log[4096]; /* the shim's log: warnings and the stats lines */
};

static const char *field(const struct parts *o, const char *key, char *buf, size_t len)
{
    const char *v = run_field(&o->r, key, buf, len);
    cr_assert(v, "%s: no \"%s\" line in:\n%s", o->mode, key, o->r.out);
    return v;
}

static long long num(const struct parts *o, const char *key)
{
    char buf[64];
    return strtoll(field(o, key, buf, sizeof buf), NULL, 0);
}

static void expect_text(const struct parts *o, const char *key, const char *want)
{
    char buf[128];
    const char *got = field(o, key, buf, sizeof buf);
    cr_expect_str_eq(got, want, "%s: %s is %s, expected %s\n%s%s", o->mode, key, got, want,
                     o->r.out, o->log);
}

/* The number after `key` in the shim's log (its stats lines). */
static long long stat_of(const struct parts *o, const char *key)
{
    const char *at = strstr(o->log, key);
    cr_assert(at, "%s: no \"%s\" in the shim's log:\n%s", o->mode, key, o->log);
    return strtoll(at + strlen(key), NULL, 10);
}

static void run_parts(struct parts *o, const char *mode, const char *budget)
{
    char log[256], env_log[300], env_budget[64];
    snprintf(log, sizeof log, "/tmp/ipcshim-swap-parts-%d.log", (int)getpid());
    unlink(log);
    snprintf(env_log, sizeof env_log, "IPCSHIM_LOG_FILE=%s", log);
    snprintf(env_budget, sizeof env_budget, "IPCSHIM_DEVICE_BUDGET=%s", budget);
    o->mode = mode;
    run_prog(&o->r, "swap-parts", true,
             ENV(env_budget, "IPCSHIM_SWAP_MIN_BYTES=2M", "IPCSHIM_SWAP_ENGINE=vmm",
                 "IPCSHIM_SWAP_PART_BYTES=8M", "IPCSHIM_STATS=1", "IPCSHIM_EXIT_WAIT=0", env_log),
             ARGS(mode));
    o->log[0] = 0;
    FILE *f = fopen(log, "r");
    if (f) {
        size_t n = fread(o->log, 1, sizeof o->log - 1, f);
        o->log[n] = 0;
        fclose(f);
    }
    unlink(log);
    fprintf(stderr, "---- %s\n%s%s", mode, o->r.out, o->log);
    cr_assert_eq(o->r.status, 0, "%s: status %d\n%s", mode, o->r.status, o->r.out);
}

/* Every byte as the program wrote it, no 700, the context alive. */
static void expect_intact(const struct parts *o)
{
    cr_expect_eq(num(o, "bad_words"), 0, "%s: bytes lost\n%s%s", o->mode, o->r.out, o->log);
    expect_text(o, "saw_700", "no");
    cr_expect_eq(num(o, "errors"), 0, "%s: calls failed\n%s", o->mode, o->r.out);
    cr_expect_eq(num(o, "final_malloc"), 0, "%s: the context is dead\n%s", o->mode, o->r.out);
}

/* The learned extent (starts at 8M and 16M from the fills' copies) is the
 * second part alone: only it is fetched, under a budget of one part. */
Test(swap_parts, a_kernel_over_the_second_part_moves_that_part_only)
{
    struct parts o;
    run_parts(&o, "second-part", "8M");
    expect_intact(&o);
    expect_text(&o, "p0", "host");
    expect_text(&o, "p1", "device");
    expect_text(&o, "p2", "host");
    cr_expect_eq(stat_of(&o, "prefetched to device "), 8 << 20,
                 "only the second part is fetched\n%s", o.log);
    cr_expect_eq(stat_of(&o, "to host "), 8 << 20, "only the first part is evicted\n%s", o.log);
    cr_expect_eq(stat_of(&o, "over budget "), 0, "the launch fits the budget\n%s", o.log);
}

/* A kernel from X over all of it, whose learned extent is p0 (a copy's
 * start at 8M cuts it): p1, resident and clean, is written where it lies
 * and must be written back at its eviction; p2, on the host, is written in
 * its host copy. */
Test(swap_parts, a_write_past_a_short_extent_reaches_every_part)
{
    struct parts o;
    run_parts(&o, "short-extent", "16M");
    expect_intact(&o);
    expect_text(&o, "p1", "device");
}

/* The same with the kernel still queued while its unseen parts are
 * evicted: their eviction waits for it (no unmap under it, no write-back
 * before it). */
Test(swap_parts, an_unseen_part_is_not_evicted_under_queued_work)
{
    struct parts o;
    run_parts(&o, "short-extent-queued", "16M");
    expect_intact(&o);
    expect_text(&o, "p1", "device");
}

/* A copy over two parts, queued while the second is evicted. */
Test(swap_parts, a_copy_spanning_two_parts_orders_both)
{
    struct parts o;
    run_parts(&o, "copy-span", "12M");
    expect_intact(&o);
    expect_text(&o, "copy_read", "ok");
}

/* The program's view of a parted block is the whole allocation: its range,
 * its export (one allocation with every part's bytes), its free. */
Test(swap_parts, range_export_and_free_answer_the_whole_allocation)
{
    struct parts o;
    run_parts(&o, "whole", "8M");
    expect_intact(&o);
    expect_text(&o, "range_base", "ok");
    cr_expect_eq(num(&o, "range_size"), 20 << 20);
    cr_expect_eq(num(&o, "export"), 0);
    expect_text(&o, "import_read", "ok");
    cr_expect_neq(num(&o, "free_interior"), 0, "a free inside the block is refused");
    cr_expect_eq(num(&o, "free"), 0);
}

Test(swap_parts, fork_with_parts_evicted)
{
    struct parts o;
    run_parts(&o, "fork", "8M");
    expect_intact(&o);
    cr_expect_eq(num(&o, "child"), 0);
}
