/* test_pool_ipc: stream-ordered pool IPC end to end on the simulated machine
 * (progs/pool_ipc.c, which knows nothing of the shim). NVIDIA's rule for
 * it: "the imported memory must be freed from all importing processes
 * before being freed in the exporting process". A program that keeps the
 * rule behaves the same with and without the shim; one that breaks it in
 * any way (a free while the consumer reads, before it imports, a
 * stream-ordered free on another stream, a pool destroyed meanwhile, an
 * exporter that exits) reads what was written under the shim, through each
 * door, and the memory comes back after the consumer's free or its death.
 * Bad input (forged export data, a double free of an imported pointer)
 * gets the simulated driver's own answers with and without the shim. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
    run_setup("pool_ipc");
}
TestSuite(pool_ipc, .init = setup, .fini = run_cleanup, .timeout = 60);

static struct run_result r;
static char buf[256];

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

/* A run whose consumer read the data, and whose memory came back. */
static void expect_protected(const char *what)
{
    cr_assert_eq(r.status, 0, "%s: status %d:\n%s", what, r.status, r.out);
    expect_field("import", "0");
    expect_field("consumer", "ok 0");
    const char *got = run_field(&r, "reclaimed", buf, sizeof buf);
    cr_expect(got && !strncmp(got, "yes", 3), "%s: memory back after the release:\n%s", what,
              r.out);
}

Test(pool_ipc, keeping_the_rule_is_unchanged_by_the_shim)
{
    for (int shim = 0; shim < 2; shim++) {
        run_prog(&r, "pool-ipc", shim, NULL, ARGS("--free", "after-release"));
        expect_protected(shim ? "shim" : "no shim");
        expect_field("producer-free", "0");
    }
}

Test(pool_ipc, without_shim_a_free_while_reading_reads_poison)
{
    run_prog(&r, "pool-ipc", false, NULL, ARGS("--free", "while-reading"));
    cr_assert_eq(r.status, 1, "status %d:\n%s", r.status, r.out);
    expect_field("consumer", "poison 0");
}

Test(pool_ipc, shim_free_while_reading_each_door)
{
    const char *doors[] = {"runtime", "driver", "resolver"};
    for (int i = 0; i < 3; i++) {
        run_prog(&r, "pool-ipc", true, NULL, ARGS("--door", doors[i], "--free", "while-reading"));
        expect_protected(doors[i]);
        expect_field("producer-free", "0");
    }
}

Test(pool_ipc, shim_stream_ordered_frees_on_either_stream)
{
    const char *with[] = {"same-stream", "other-stream"};
    for (int i = 0; i < 2; i++) {
        run_prog(&r, "pool-ipc", true, NULL,
                 ARGS("--free", "while-reading", "--free-with", with[i]));
        expect_protected(with[i]);
    }
}

Test(pool_ipc, free_before_import)
{
    run_prog(&r, "pool-ipc", false, NULL, ARGS("--free", "before-import"));
    cr_expect_neq(r.status, 0, "without the shim the consumer cannot import freed memory:\n%s",
                  r.out);
    run_prog(&r, "pool-ipc", true, NULL, ARGS("--free", "before-import"));
    expect_protected("shim, before import (the hand-off)");
}

Test(pool_ipc, shim_pool_destroyed_while_imported)
{
    run_prog(&r, "pool-ipc", true, NULL, ARGS("--free", "while-reading", "--destroy-pool"));
    expect_protected("pool destroyed");
    expect_field("pool-destroy", "0");
}

Test(pool_ipc, shim_consumer_killed_holding_imports)
{
    run_prog(&r, "pool-ipc", true, NULL, ARGS("--free", "while-reading", "--kill-consumer"));
    expect_protected("consumer SIGKILLed");
}

Test(pool_ipc, shim_exporter_exits_while_imported)
{
    run_prog(&r, "pool-ipc", true, NULL, ARGS("--free", "while-reading", "--exporter-exits"));
    cr_assert_eq(r.status, 0, "status %d:\n%s", r.status, r.out);
    expect_field("consumer", "ok 0");
}

Test(pool_ipc, bad_input_gets_the_drivers_answers)
{
    char forged[2][64], twice[2][64];
    for (int shim = 0; shim < 2; shim++) {
        run_prog(&r, "pool-ipc", shim, NULL, ARGS("--free", "after-release", "--bad-input"));
        cr_assert_eq(r.status, 0, "status %d:\n%s", r.status, r.out);
        cr_assert(run_field(&r, "forged-import", forged[shim], sizeof forged[shim]), "%s", r.out);
        cr_assert(run_field(&r, "double-free", twice[shim], sizeof twice[shim]), "%s", r.out);
        cr_expect_str_neq(forged[shim], "0", "a forged export is refused:\n%s", r.out);
        cr_expect_str_neq(twice[shim], "0", "a second free of an import fails:\n%s", r.out);
    }
    cr_expect_str_eq(forged[1], forged[0], "the same error with the shim");
    cr_expect_str_eq(twice[1], twice[0], "the same error with the shim");
}

/* A driver that keeps freed pages for the importers that still map them
 * (SIMCUDA_FREE_WHILE_MAPPED=keep, what NVIDIA's driver did for legacy IPC
 * on the 2026-11-26 H100 run): the data survive without the shim too, and
 * with it nothing changes but who frees. */
Test(pool_ipc, keep_mode_both_ways)
{
    for (int shim = 0; shim < 2; shim++) {
        run_prog(&r, "pool-ipc", shim, ENV("SIMCUDA_FREE_WHILE_MAPPED=keep"),
                 ARGS("--free", "while-reading"));
        expect_protected(shim ? "keep, shim" : "keep, no shim");
    }
}
