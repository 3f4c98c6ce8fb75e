/* test_binding: the simulated driver binds like NVIDIA's, and the shim's
 * resolver door is what protects a program that reaches the driver only
 * through dlopen("libcuda.so.1") + cuGetProcAddress_v2 (pair-resolver,
 * standing in for nvcc's static runtime).
 *
 * NVIDIA's cuGetProcAddress hands out the driver's own addresses whatever is
 * preloaded. The simulator does the same because libcuda.so.1 is linked with
 * -Bsymbolic-functions (tests/simcuda/meson.build): the addresses in its
 * resolver table bind inside the library. Without that, `&cuMemAlloc_v2` in
 * the simulator's table would be resolved by the dynamic linker through the
 * global scope, where LD_PRELOAD=libipcshim.so comes first: the simulator
 * would hand out the shim's exported (driver-door) functions, the shim's
 * resolver redirect would see its own function and leave it alone, and every
 * call would count at the driver door: the resolver door would never be
 * exercised, and the tests would pass for a reason a real driver never
 * gives. SIMCUDA_PROC_ADDRESS=global restores that old binding so the
 * difference is asserted here, not only described. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
    run_setup("binding");
}
TestSuite(binding, .init = setup, .fini = run_cleanup, .timeout = 60);

static struct run_result r;
static char buf[256];

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

/* The producer's and the consumer's counts of the IPC calls at one door. */
static void expect_ipc_calls(const char *door, const char *n)
{
    char key[128];
    static const char *const producer[] = {"cuMemAlloc_v2", "cuIpcGetMemHandle", "cuMemFree_v2"};
    static const char *const consumer[] = {"cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle"};
    for (size_t i = 0; i < sizeof producer / sizeof *producer; i++) {
        snprintf(key, sizeof key, "calls %s %s", producer[i], door);
        expect_field(key, n);
    }
    for (size_t i = 0; i < sizeof consumer / sizeof *consumer; i++) {
        snprintf(key, sizeof key, "consumer 0: calls %s %s", consumer[i], door);
        expect_field(key, n);
    }
}

Test(binding, resolver_client_is_protected_and_counted_at_the_resolver_door)
{
    run_prog(&r, "pair-resolver", true, NULL, ARGS("--free", "while-reading", "--calls"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3),
              "memory not back: %s", r.out);
    expect_ipc_calls("resolver", "1");
    expect_ipc_calls("driver", "0");
}

Test(binding, resolver_client_without_shim_reads_freed_memory)
{
    /* The same program, same driver, no shim: the free while the consumer
     * maps the block is not deferred (poison, or in keep mode the block
     * stays charged until the consumer closes: both fail the data check or
     * show the charge; what both modes share is that nothing is counted). */
    run_prog(&r, "pair-resolver", false, NULL, ARGS("--free", "while-reading", "--calls"));
    cr_assert_eq(run_count(&r, "calls "), 0, "no shim, no counts: %s", r.out);
    const char *mode = getenv("SIMCUDA_FREE_WHILE_MAPPED");
    if (mode && !strcmp(mode, "keep")) {
        cr_assert_eq(r.status, 0, "status %d", r.status);
        expect_field("consumer 0", "ok");
    } else {
        cr_assert_eq(r.status, 1, "status %d", r.status);
        expect_field("consumer 0", "poison");
    }
}

Test(binding, global_binding_would_hand_out_the_shims_exports)
{
    /* The pre-Bsymbolic binding: the driver hands out what the dynamic
     * linker finds first, the shim's exported functions. The program is
     * still protected (those functions are the shim's too), but every call
     * counts at the driver door and none at the resolver door: a test of
     * the resolver door would prove nothing on such a driver. */
    run_prog(&r, "pair-resolver", true, ENV("SIMCUDA_PROC_ADDRESS=global"),
             ARGS("--free", "while-reading", "--calls"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
    expect_ipc_calls("resolver", "0");
    expect_ipc_calls("driver", "1");
}

Test(binding, driver_library_binds_its_own_functions)
{
    /* -Bsymbolic-functions leaves no dynamic relocation (PLT slot or GLOB_DAT)
     * against the driver's own entry points: nothing a preloaded library
     * exports can replace them inside the driver. */
    char cmd[2048], line[512];
    snprintf(cmd, sizeof cmd,
             "readelf -rW '%s/libcuda.so.1' | grep -E ' "
             "(cuMemAlloc_v2|cuMemFree_v2|cuIpc[A-Za-z_]*)\\b'",
             getenv("SIMCUDA_DIR"));
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        cr_expect_fail("relocation against a driver function: %s", line);
        n++;
    }
    pclose(p);
    cr_expect_eq(n, 0);
    /* ...and they are all still exported for dlsym. */
    snprintf(cmd, sizeof cmd,
             "nm -D --defined-only '%s/libcuda.so.1' | grep -cE ' T "
             "(cuMemAlloc_v2|cuIpcOpenMemHandle_v2|cuGetProcAddress_v2)$'",
             getenv("SIMCUDA_DIR"));
    p = popen(cmd, "r");
    cr_assert(p);
    cr_assert(fgets(line, sizeof line, p));
    pclose(p);
    cr_expect_eq(atoi(line), 3, "exports missing: %s", line);
}
