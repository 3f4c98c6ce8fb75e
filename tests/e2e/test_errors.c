/* test_errors: the shim answers misuse exactly as CUDA does, and keeps
 * protecting what CUDA says is still in use (progs/errors.c drives an
 * exporter and an importer through each scenario). Each scenario runs
 * without the shim (CUDA's own answers, on the simulator) and with it. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("errors");
}
TestSuite(errors, .init = setup, .fini = run_cleanup, .timeout = 60);

static struct run_result bare, shim;
static char buf[256];

static void both(const char *scenario)
{
    run_prog(&bare, "errors", false, NULL, ARGS(scenario));
    run_cleanup(); /* a fresh machine and registry for the second run */
    run_prog(&shim, "errors", true, NULL, ARGS(scenario));
    cr_assert_eq(bare.status, 0, "without the shim: status %d", bare.status);
    cr_assert_eq(shim.status, 0, "with the shim: status %d", shim.status);
}

/* The n-th (0-based) line starting with key, its value. */
static const char *nth(const struct run_result *r, const char *key, int n)
{
    size_t k = strlen(key);
    for (const char *line = r->out; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, k) || line[k] != ':' || n--) continue;
        size_t len = strcspn(line + k + 2, "\n");
        snprintf(buf, sizeof buf, "%.*s", (int)len, line + k + 2);
        return buf;
    }
    return "(missing)";
}

static void expect(const struct run_result *r, const char *key, int n, const char *value)
{
    const char *got = nth(r, key, n);
    cr_expect_str_eq(got, value, "%s %s #%d: %s (expected %s)\n%s",
                     r == &shim ? "with shim" : "without shim", key, n, got, value, r->out);
}

static void same(const char *key, int n)
{
    char want[256];
    snprintf(want, sizeof want, "%s", nth(&bare, key, n));
    expect(&shim, key, n, want);
}

Test(errors, open_with_null_pointer_is_invalid_value)
{
    both("open-null");
    expect(&bare, "opennull", 0, "1");
    same("opennull", 0);
}

Test(errors, flags_cuda_refuses_are_refused_on_cached_and_own_opens)
{
    both("bad-flags");
    expect(&bare, "open", 1, "1");
    same("open", 0);
    same("open", 1);
    same("openown", 0);
}

Test(errors, handle_of_freed_memory_and_second_free_fail_like_cuda)
{
    both("freed-handle");
    expect(&bare, "gethandle", 0, "1");
    same("gethandle", 0);
    same("free", 0);
    same("free", 1);
    expect(&bare, "read", 0, "poison");
    expect(&shim, "read", 0, "ok");
}

Test(errors, deferred_free_after_device_reset_spares_the_new_block)
{
    both("reset");
    expect(&bare, "reset", 0, "0 same address");
    expect(&shim, "reset", 0, "0 same address");
    expect(&bare, "checkB", 0, "ok");
    expect(&shim, "checkB", 0, "ok");
    same("close", 0);
}

/* A handle still open in this context opens again after its exporter was
 * SIGKILLed: NVIDIA's driver answers success with the same pointer (H100,
 * docs/gpu-validation.md 2026-11-26) and so does the simulator; the shim,
 * which answers a cached re-open itself, must not refuse it. */
Test(errors, reopen_after_exporter_was_killed_succeeds_like_cuda)
{
    both("reopen-dead");
    cr_expect_str_eq(nth(&bare, "open", 1), "0", "CUDA (the simulator) opens it again: %s",
                     bare.out);
    cr_expect_str_eq(nth(&shim, "open", 1), "0", "the shim must not refuse it: %s", shim.out);
}

Test(errors, failed_close_keeps_the_block_protected)
{
    both("close-fails");
    cr_expect_str_neq(nth(&bare, "close", 0), "0", "the injected failure: %s", bare.out);
    same("close", 0);
    expect(&bare, "read", 0, "poison");
    expect(&shim, "read", 0, "ok");
    expect(&shim, "close", 1, "0");
}

/* Legacy IPC refuses managed and pool memory: the shim passes CUDA's error
 * through unchanged and says once, at warn, what memory it was and why. */
Test(errors, refused_exports_pass_cudas_error_and_say_why)
{
    char log[1024], env[1100];
    snprintf(log, sizeof log, "/tmp/ipcshim-errors-%d.log", (int)getpid());
    snprintf(env, sizeof env, "IPCSHIM_LOG_FILE=%s", log);
    run_prog(&bare, "errors", false, NULL, ARGS("refused-exports"));
    run_cleanup();
    run_prog(&shim, "errors", true, ((const char *const[]){env, NULL}), ARGS("refused-exports"));
    expect(&bare, "managed", 0, "1");
    expect(&bare, "pool", 0, "1");
    same("managed", 0);
    same("pool", 0);
    FILE *f = fopen(log, "r");
    cr_assert(f, "no log at %s", log);
    char text[8192] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    unlink(log);
    cr_expect(strstr(text, "warn: export of") && strstr(text, "managed memory (cudaMallocManaged)"),
              "%s", text);
    cr_expect(strstr(text, "stream-ordered pool memory (cudaMallocAsync)"), "%s", text);
}
