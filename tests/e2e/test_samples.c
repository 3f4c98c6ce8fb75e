/* test_samples: NVIDIA's simpleIPC sample's call sequence (progs/simple_ipc.cu,
 * built with nvcc against the shared runtime) runs on the simulated runtime,
 * with and without the shim: every runtime function it calls exists
 * (cudaDeviceCanAccessPeer and cudaStreamWaitEvent were missing before), the
 * children open the parent's memory and event handles and read what the
 * parent wrote. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("samples");
}
TestSuite(samples, .init = setup, .fini = run_cleanup, .timeout = 60);

static void simple_ipc(bool shim, const char *devices)
{
    char path[1024], buf[128], env[64];
    snprintf(path, sizeof path, "%s/simple-ipc", getenv("E2E_BIN_DIR"));
    if (access(path, X_OK))
        cr_skip_test("nvcc was not found when the build was configured; no nvcc-built program");
    snprintf(env, sizeof env, "SIMCUDA_DEVICES=%s", devices);
    struct run_result r;
    run_prog(&r, "simple-ipc", shim, (const char *const[]){env, NULL}, NULL);
    cr_assert_eq(r.status, 0, "status %d:\n%s", r.status, r.out);
    cr_expect_str_eq(run_field(&r, "devices", buf, sizeof buf), devices);
    cr_expect_str_eq(run_field(&r, "can-access-peer", buf, sizeof buf),
                     strcmp(devices, "1") ? "1" : "0");
    for (int k = 0; k < 2; k++) {
        char key[16];
        snprintf(key, sizeof key, "child %d", k);
        const char *got = run_field(&r, key, buf, sizeof buf);
        cr_assert(got, "no \"%s\" line in:\n%s", key, r.out);
        cr_expect_str_eq(got, "ok", "%s: %s", key, got);
    }
}

Test(samples, simple_ipc_without_shim)
{
    simple_ipc(false, "1");
}
Test(samples, simple_ipc_with_shim)
{
    simple_ipc(true, "1");
}
Test(samples, simple_ipc_two_devices_with_shim)
{
    simple_ipc(true, "2");
}
