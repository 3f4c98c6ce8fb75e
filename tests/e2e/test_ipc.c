/* test_ipc: end to end, on the simulated machine, programs that know nothing
 * of the shim: a producer frees exported blocks while consumers read them.
 * The suite runs twice (meson: e2e-ipc, e2e-ipc-keep), once for each thing a
 * driver may do to a block freed while another process maps it
 * (SIMCUDA_FREE_WHILE_MAPPED, tests/simcuda/README.md):
 * - poison (default): the block is released at once and overwritten, so
 *   without the shim the consumers read poison;
 * - keep (what users of NVIDIA's driver report): the pages stay valid and
 *   charged until the last importer unmaps, so without the shim the data
 *   survives but the memory is still used after the free.
 * With the shim, in both, through every door, the consumers read what was
 * written, the free is deferred (the shim's own count) and the memory comes
 * back after the last close. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("ipc");
}
TestSuite(ipc, .init = setup, .fini = run_cleanup, .timeout = 60);

static struct run_result r;
static char buf[256];

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

static bool keep_mode(void)
{
    const char *m = getenv("SIMCUDA_FREE_WHILE_MAPPED");
    return m && !strcmp(m, "keep");
}

static double field_ms(const char *key)
{
    const char *got = run_field(&r, key, buf, sizeof buf);
    cr_assert(got, "no \"%s\" line in:\n%s", key, r.out);
    return strtod(got + (strncmp(got, "yes ", 4) ? 0 : 4), NULL);
}

Test(ipc, without_shim_free_while_reading_is_not_deferred)
{
    run_prog(&r, "pair-runtime", false, NULL, ARGS("--free", "while-reading"));
    cr_expect_null(run_field(&r, "after-free: deferred", buf, sizeof buf),
                   "no shim, nothing deferred");
    if (keep_mode()) {
        /* The driver keeps the pages for the consumer: data intact, but the
         * freed block is still charged to the device after the free. */
        cr_assert_eq(r.status, 0, "status %d", r.status);
        expect_field("consumer 0", "ok");
        expect_field("after-free: charged", "1048576");
        cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3),
                  "the consumer's exit must release the kept block: %s", r.out);
    } else {
        cr_assert_eq(r.status, 1, "status %d", r.status);
        expect_field("consumer 0", "poison");
        expect_field("after-free: charged", "0");
    }
}

Test(ipc, without_shim_free_before_open_breaks_the_consumer)
{
    run_prog(&r, "pair-runtime", false, NULL, ARGS("--free", "before-open"));
    cr_assert_neq(r.status, 0, "the consumer must not succeed: %s", r.out);
}

static void protected_pair_env(const char *prog, const char *when, const char *const *env)
{
    run_prog(&r, prog, true, env, ARGS("--free", when, "--blocks", "3"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
    if (!strcmp(when, "while-reading")) {
        /* In both modes the shim held the blocks back itself. */
        expect_field("after-free: deferred", "3");
        expect_field("after-free: charged", "3145728");
    }
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3),
              "memory not back: %s", r.out);
}

static void protected_pair(const char *prog, const char *when)
{
    protected_pair_env(prog, when, NULL);
}

Test(ipc, runtime_free_while_reading)
{
    protected_pair("pair-runtime", "while-reading");
}
/* A stream-ordered free is a free: deferred like cudaFree / cuMemFree. */
Test(ipc, without_shim_free_async_is_not_deferred)
{
    run_prog(&r, "pair-runtime", false, ENV("E2E_FREE_ASYNC=1"), ARGS("--free", "while-reading"));
    cr_expect_null(run_field(&r, "after-free: deferred", buf, sizeof buf),
                   "no shim, nothing deferred");
    expect_field("consumer 0", keep_mode() ? "ok" : "poison");
}
Test(ipc, runtime_free_async_while_reading)
{
    protected_pair_env("pair-runtime", "while-reading", ENV("E2E_FREE_ASYNC=1"));
}
Test(ipc, driver_free_async_while_reading)
{
    protected_pair_env("pair-driver", "while-reading", ENV("E2E_FREE_ASYNC=1"));
}
Test(ipc, runtime_free_before_open)
{
    protected_pair("pair-runtime", "before-open");
}
Test(ipc, driver_free_while_reading)
{
    protected_pair("pair-driver", "while-reading");
}
Test(ipc, driver_free_before_open)
{
    protected_pair("pair-driver", "before-open");
}
Test(ipc, resolver_free_while_reading)
{
    protected_pair("pair-resolver", "while-reading");
}
Test(ipc, resolver_free_before_open)
{
    protected_pair("pair-resolver", "before-open");
}
Test(ipc, free_after_close_is_immediate)
{
    protected_pair("pair-runtime", "after-close");
}

Test(ipc, eight_consumers_many_opens_threads_random_close_order)
{
    run_prog(&r, "pair-runtime", true, NULL,
             ARGS("--consumers", "8", "--blocks", "4", "--opens", "2", "--threads", "3", "--free",
                  "while-reading"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    cr_expect_eq(run_count(&r, "consumer "), 8);
    for (int k = 0; k < 8; k++) {
        char key[32];
        snprintf(key, sizeof key, "consumer %d", k);
        expect_field(key, "ok");
    }
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3));
}

Test(ipc, interior_pointer_export)
{
    run_prog(&r, "pair-driver", true, NULL, ARGS("--interior", "--free", "while-reading"));
    cr_assert_eq(r.status, 0);
    expect_field("consumer 0", "ok");
}

Test(ipc, own_export_opens_to_original_pointer)
{
    run_prog(&r, "pair-runtime", true, NULL,
             ARGS("--self-open", "--consumers", "0", "--free", "after-close"));
    cr_assert_eq(r.status, 0);
    expect_field("self-open", "original pointer");
}

Test(ipc, two_devices)
{
    run_prog(&r, "pair-runtime", true, ENV("SIMCUDA_DEVICES=2"),
             ARGS("--device", "1", "--free", "while-reading"));
    cr_assert_eq(r.status, 0);
    expect_field("consumer 0", "ok");
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3));
}

Test(ipc, collector_frees_promptly_after_last_close)
{
    run_prog(&r, "pair-runtime", true, NULL, ARGS("--free", "while-reading"));
    cr_assert_eq(r.status, 0);
    double ms = field_ms("timing: last-close-to-free");
    cr_expect_lt(ms, 500.0, "memory came back %.3f ms after the last close", ms);
}

Test(ipc, without_collector_memory_waits_for_next_collect)
{
    run_prog(&r, "pair-runtime", true, ENV("IPCSHIM_COLLECTOR=0"),
             ARGS("--free", "while-reading", "--reclaim-wait", "300"));
    cr_assert_eq(r.status, 0);
    expect_field("consumer 0", "ok");
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "no", 2),
              "without a collector nothing should free the block by itself: %s", r.out);
    run_prog(&r, "pair-runtime", true, ENV("IPCSHIM_COLLECTOR=0"),
             ARGS("--free", "while-reading", "--collect"));
    cr_assert_eq(r.status, 0);
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3), "%s", r.out);
}

Test(ipc, unclaimed_handoff_expires)
{
    run_prog(&r, "pair-runtime", true, ENV("IPCSHIM_HANDOFF_TIMEOUT=300ms"),
             ARGS("--consumers", "0", "--free", "before-open", "--reclaim-wait", "3000"));
    cr_assert_eq(r.status, 0);
    double ms = field_ms("reclaimed");
    cr_expect_geq(ms, 200.0, "a hand-off must hold the block until its timeout (%.1f ms)", ms);
    cr_expect_lt(ms, 2500.0, "the expired hand-off must release the block (%.1f ms)", ms);
}

Test(ipc, allocation_failing_because_of_limbo_succeeds_after_collect)
{
    /* 64 MiB device; a 40 MiB block sits in limbo behind an unclaimed
     * hand-off; a 40 MiB allocation only fits once the shim collects. */
    run_prog(&r, "pair-runtime", true,
             ENV("SIMCUDA_DEVICE_MEMORY=64M", "IPCSHIM_HANDOFF_TIMEOUT=60s"),
             ARGS("--consumers", "0", "--size", "41943040", "--free", "before-open",
                  "--reclaim-wait", "0", "--then-alloc", "41943040"));
    cr_assert_eq(r.status, 0);
    expect_field("then-alloc", "ok");
}

Test(ipc, kernels_program_counts_each_call_once)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/kernels", getenv("E2E_BIN_DIR"));
    if (access(path, X_OK))
        cr_skip_test("nvcc was not found when the build was configured; no nvcc-built program");
    run_prog(&r, "kernels", true, NULL, NULL);
    cr_assert_eq(r.status, 0, "%s", r.out);
    if (run_field(&r, "shim", buf, sizeof buf))
        cr_assert_fail("the shim was not loaded: %s", r.out);
    expect_field("calls cudaMalloc runtime", "3");
    expect_field("calls cudaFree runtime", "3");
    expect_field("calls __cudaLaunchKernel runtime", "3");
    /* The runtime's own driver calls come through the resolver door nested
     * inside the runtime-door operation: they must not count again. */
    expect_field("calls cuMemAlloc_v2 resolver", "0");
    expect_field("calls cuMemAlloc_v2 driver", "0");
    expect_field("calls cuMemFree_v2 resolver", "0");
}
