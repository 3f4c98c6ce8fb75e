/* test_pool: memory a program gets besides cudaMalloc (stream-ordered pool
 * memory, cudaMalloc3D) behaves the same with and without the shim: legacy
 * IPC refuses pool memory (cudaErrorInvalidValue, as NVIDIA's driver does;
 * tests/simcuda/README.md "Provenance") and accepts cudaMalloc3D memory,
 * stream-ordered frees work, and nothing stays charged afterwards. The one
 * difference is by design: an exported cudaMalloc3D block freed before any
 * importer opened it is held by the shim for its importer (the hand-off),
 * which also shows that memory the runtime allocates through the resolver
 * (cudaMalloc3D -> cuMemAllocPitch_v2) is tracked. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static void setup(void)
{
    run_setup("pool");
}
TestSuite(pool, .init = setup, .fini = run_cleanup, .timeout = 60);

static const char *const keys[] = {
    "async-alloc", "ipc-get-async", "pool-used",  "async-free", "free-async-of-malloc",
    "reclaimed",   "malloc3d",      "ipc-get-3d", "free-3d",    "charged-after-3d"};
static const char *const expected[] = {"0", "1", "1048576", "0", "0", "yes", "0", "0", "0", NULL};

static void expect_all(bool shim)
{
    struct run_result r;
    char buf[128];
    /* No point waiting at exit for the importer of the held block. */
    run_prog(&r, "pool", shim, (const char *const[]){"IPCSHIM_EXIT_WAIT=0", NULL}, NULL);
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *got = run_field(&r, keys[i], buf, sizeof buf);
        cr_assert(got, "no \"%s\" line in:\n%s", keys[i], r.out);
        /* NULL: the held cudaMalloc3D block, pitch 1024 x 8 rows x 4 deep. */
        const char *want = expected[i] ? expected[i] : shim ? "32768" : "0";
        cr_expect_str_eq(got, want, "%s%s: %s (expected %s)", shim ? "shim, " : "", keys[i], got,
                         want);
    }
}

Test(pool, without_shim)
{
    expect_all(false);
}
Test(pool, with_shim_the_same_answers)
{
    expect_all(true);
}
