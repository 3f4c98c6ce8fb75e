/* test_sharing_orders: one exporter and one importer of a 4 MiB block, in
 * the orders of issue 46 (progs/sharing_orders.c, which knows nothing of
 * the shim), on the simulated machine:
 *  - the exporter frees before the importer imports (cudaFree, or
 *    cudaFreeAsync and a synchronise; then at once a new block of the same
 *    size from the same pool): under the shim the import succeeds, reads
 *    what was written, and the exporter's memory comes back after the
 *    importer's free;
 *  - a re-import of the same export bytes through a NULL pool or another
 *    imported pool gets the driver's answer, not the shim's cached pointer;
 *  - the importer resets its context (cudaDeviceReset,
 *    cuDevicePrimaryCtxReset, the last cuDevicePrimaryCtxRelease,
 *    cuCtxDestroy) and imports again: the driver
 *    is asked, the data read, the free succeeds, and the exporter's block,
 *    freed last, comes back while the importer still lives. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
    run_setup("sharing_orders");
}
TestSuite(sharing_orders, .init = setup, .fini = run_cleanup, .timeout = 120);

static struct run_result r;
static char buf[256];

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

/* The exporter's memory came back, and under the shim its limbo is empty. */
static void expect_reclaimed(const char *what, bool shim)
{
    const char *got = run_field(&r, "reclaimed", buf, sizeof buf);
    cr_expect(got && !strncmp(got, "yes", 3), "%s: memory back:\n%s", what, r.out);
    if (shim) expect_field("limbo", "0");
}

/* The exporter frees first; under the shim the importer is protected. */
static void early_free(const char *what, const char *const *args)
{
    run_prog(&r, "sharing-orders", true, NULL, args);
    cr_assert_eq(r.status, 0, "%s: status %d:\n%s", what, r.status, r.out);
    expect_field("producer-free", "0");
    expect_field("import", "0");
    expect_field("read", "ok 0");
    expect_field("free", "0");
    expect_reclaimed(what, true);
}

Test(sharing_orders, shim_import_after_the_exporters_free_in_every_order)
{
    early_free("pool, cudaFree", ARGS("--free", "early"));
    early_free("pool, cudaFreeAsync", ARGS("--free", "early", "--free-with", "async"));
    early_free("pool, cudaFreeAsync, reuse",
               ARGS("--free", "early", "--free-with", "async", "--reuse"));
    early_free("pool, cudaFree, reuse", ARGS("--free", "early", "--reuse"));
    early_free("legacy, cudaFree, reuse", ARGS("--kind", "legacy", "--free", "early", "--reuse"));
    expect_field("reuse", "0 other"); /* the freed block's address is not the exporter's yet */
}

Test(sharing_orders, without_shim_an_import_after_the_free_is_refused_here)
{
    /* The simulator refuses freed memory; NVIDIA's driver may still map it
     * (docs/gpu-validation.md, probe pool-import-after-free). */
    run_prog(&r, "sharing-orders", false, NULL, ARGS("--free", "early", "--reuse"));
    cr_expect_neq(r.status, 0, "%s", r.out);
    cr_expect(run_field(&r, "import", buf, sizeof buf) && strcmp(buf, "0"), "%s", r.out);
}

Test(sharing_orders, reimport_through_another_pool_gets_the_drivers_answer)
{
    char null_code[2][64], other_code[2][64];
    for (int shim = 0; shim < 2; shim++) {
        run_prog(&r, "sharing-orders", shim, NULL, ARGS("--free", "last", "--reimport"));
        cr_assert_eq(r.status, 0, "status %d:\n%s", r.status, r.out);
        expect_field("read", "ok 0");
        expect_field("reimport-same", "0 same");
        cr_assert(run_field(&r, "reimport-null", null_code[shim], sizeof null_code[shim]), "%s",
                  r.out);
        cr_assert(run_field(&r, "reimport-other", other_code[shim], sizeof other_code[shim]), "%s",
                  r.out);
        cr_expect_str_neq(null_code[shim], "0", "a NULL pool is refused:\n%s", r.out);
        cr_expect_str_neq(other_code[shim], "0", "another pool is refused:\n%s", r.out);
        expect_reclaimed(shim ? "shim" : "no shim", shim);
    }
    cr_expect_str_eq(null_code[1], null_code[0], "the driver's answer under the shim");
    cr_expect_str_eq(other_code[1], other_code[0], "the driver's answer under the shim");
}

/* A reset or destroyed context in the importer, each kind, each way. */
static void reset_case(const char *kind, const char *how)
{
    for (int shim = 0; shim < 2; shim++) {
        char what[128];
        snprintf(what, sizeof what, "%s, %s, %s", kind, how, shim ? "shim" : "no shim");
        run_prog(&r, "sharing-orders", shim, NULL,
                 ARGS("--kind", kind, "--free", "last", "--reset", how));
        cr_expect_eq(r.status, 0, "%s: status %d:\n%s", what, r.status, r.out);
        expect_field("reset", "0");
        expect_field("reimport", "0");
        expect_field("reread", "ok 0");
        expect_field("refree", "0");
        expect_field("producer-free", "0");
        expect_reclaimed(what, shim);
    }
}

Test(sharing_orders, reset_device_forgets_pool_imports)
{
    reset_case("pool", "device");
}
Test(sharing_orders, reset_primary_forgets_pool_imports)
{
    reset_case("pool", "primary");
}
Test(sharing_orders, last_primary_release_forgets_pool_imports)
{
    reset_case("pool", "release");
}
Test(sharing_orders, last_primary_release_forgets_legacy_opens)
{
    reset_case("legacy", "release");
}
Test(sharing_orders, ctx_destroy_forgets_pool_imports)
{
    reset_case("pool", "ctx");
}
Test(sharing_orders, reset_device_forgets_legacy_opens)
{
    reset_case("legacy", "device");
}
Test(sharing_orders, reset_primary_forgets_legacy_opens)
{
    reset_case("legacy", "primary");
}
Test(sharing_orders, ctx_destroy_forgets_legacy_opens)
{
    reset_case("legacy", "ctx");
}
