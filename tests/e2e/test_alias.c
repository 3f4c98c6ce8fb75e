/* test_alias: a driver whose cuGetProcAddress hands out internal addresses
 * that differ from dlsym(libcuda, name) (SIMCUDA_PROC_ADDRESS=alias: for
 * cuMemAlloc, cuMemFree, cuMemGetInfo and the three cuIpc*MemHandle calls).
 * The shim cannot recognise such an address, so only its name/version
 * fallback in resolve_redirect (shim/resolve.c) can protect the program:
 * it wraps the alias in the resolver-door entry of the variant it stands
 * for, whose real call is the driver's exported function of that name. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void setup(void)
{
    run_setup("alias");
}
TestSuite(alias, .init = setup, .fini = run_cleanup, .timeout = 60);

static struct run_result r;

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

Test(alias, aliased_driver_functions_are_protected_through_the_resolver_door)
{
    run_prog(&r, "pair-resolver", true, ENV("SIMCUDA_PROC_ADDRESS=alias"),
             ARGS("--free", "while-reading", "--calls"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
    expect_field("calls cuMemAlloc_v2 resolver", "1");
    expect_field("calls cuMemFree_v2 resolver", "1");
    expect_field("calls cuIpcGetMemHandle resolver", "1");
    expect_field("consumer 0: calls cuIpcOpenMemHandle_v2 resolver", "1");
    expect_field("consumer 0: calls cuIpcCloseMemHandle resolver", "1");
}
