/* test_launcher: scripts/ipcshim-run as a user runs it: the demo, running a
 * command under the shim on the simulator, appending to LD_PRELOAD, and
 * passing on the command's exit status and signal. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[16384];

/* Runs a shell command line, captures stdout+stderr, returns the wait status. */
static int shell(const char *cmd)
{
    char full[4096];
    snprintf(full, sizeof full, "cd '%s' && IPCSHIM_BUILD_DIR='%s' %s 2>&1", getenv("SOURCE_ROOT"),
             getenv("BUILD_ROOT"), cmd);
    FILE *p = popen(full, "r");
    cr_assert(p);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    return pclose(p);
}

TestSuite(launcher, .timeout = 120);

Test(launcher, demo_shows_the_use_after_free_and_the_protection)
{
    int ws = shell("scripts/ipcshim-run --demo");
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "demo failed:\n%s", out);
    cr_expect(strstr(out, "Without the shim") &&
                  strstr(out, "used FREED memory (undefined behaviour"),
              "%s", out);
    cr_expect(strstr(out, "read exactly what was written"), "%s", out);
    cr_expect(strstr(out, "the memory was really freed"), "%s", out);
}

Test(launcher, appends_to_ld_preload_and_passes_exit_status)
{
    int ws = shell(
        "LD_PRELOAD=libfirst.so scripts/ipcshim-run --sim -- sh -c 'echo \"preload=$LD_PRELOAD\"; "
        "echo \"path=$LD_LIBRARY_PATH\"; exit 7'");
    cr_assert(WIFEXITED(ws), "%s", out);
    cr_expect_eq(WEXITSTATUS(ws), 7, "%s", out);
    cr_expect(strstr(out, "preload=libfirst.so:") && strstr(out, "libipcshim.so"), "%s", out);
    cr_expect(strstr(out, "path=") && strstr(out, "tests/simcuda"), "%s", out);
}

Test(launcher, passes_on_a_signal)
{
    int ws = shell("bash -c 'scripts/ipcshim-run -- sh -c \"kill -TERM \\$\\$\"; echo status=$?'");
    cr_assert(WIFEXITED(ws), "%s", out);
    cr_expect(strstr(out, "status=143"), "%s", out);
}

Test(launcher, runs_a_cuda_program_on_the_simulator)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "SIMCUDA_MACHINE=launch-%d IPCSHIM_DOMAIN=launch-%d scripts/ipcshim-run --sim -- "
             "'%s/pair-runtime' --free while-reading; s=$?; rm -f /dev/shm/*launch-%d*; exit $s",
             getpid(), getpid(), getenv("E2E_BIN_DIR"), getpid());
    int ws = shell(cmd);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "%s", out);
    cr_expect(strstr(out, "consumer 0: ok"), "%s", out);
}

Test(launcher, help_and_bad_option)
{
    int ws = shell("scripts/ipcshim-run --help");
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0 && strstr(out, "--demo"), "%s", out);
    ws = shell("scripts/ipcshim-run --bogus");
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 2 && strstr(out, "unknown option"), "%s", out);
}
