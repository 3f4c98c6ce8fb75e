/* test_orders: programs written the way other stacks reach CUDA, under the
 * shim. Each must work exactly as it does without the shim (the first
 * rule), and exported blocks must stay protected whatever was loaded first:
 *  - the runtime dlopened late with RTLD_LOCAL, after a first driver call
 *    (numba, cuda-python), after a first ipcshim_* call, or first of all;
 *  - a host that dlopens a worker library linked to the runtime;
 *  - Python through ctypes, with a multiprocessing "spawn" consumer;
 *  - a plugin that defines its own cudaMalloc (must not be hijacked);
 *  - another preloaded tool that wraps time() with dlsym(RTLD_NEXT, ...),
 *    in both preload orders (it used to spin or crash);
 *  - a program built with AddressSanitizer. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void setup(void)
{
    run_setup("orders");
}
TestSuite(orders, .init = setup, .fini = run_cleanup, .timeout = 90);

static struct run_result r;
static char buf[256];

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

/* The late-runtime pair with one first call: protected under the shim. */
static void late_runtime(const char *first, const char *when)
{
    char env[64];
    snprintf(env, sizeof env, "E2E_FIRST=%s", first);
    run_prog(&r, "pair-late", true, ENV(env), ARGS("--free", when, "--blocks", "2"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
    cr_expect(run_field(&r, "reclaimed", buf, sizeof buf) && !strncmp(buf, "yes", 3),
              "memory not back: %s", r.out);
}

Test(orders, late_runtime_breaks_without_shim)
{
    run_prog(&r, "pair-late", false, ENV("E2E_FIRST=driver"), ARGS("--free", "while-reading"));
    cr_assert_eq(r.status, 1, "status %d", r.status);
    expect_field("consumer 0", "poison");
}
Test(orders, driver_first_then_runtime_rtld_local)
{
    late_runtime("driver", "while-reading");
}
Test(orders, driver_first_then_runtime_free_before_open)
{
    late_runtime("driver", "before-open");
}
Test(orders, ipcshim_first_then_runtime)
{
    late_runtime("ipcshim", "while-reading");
    expect_field("first", "ipcshim_active 1");
}
Test(orders, runtime_first_rtld_local)
{
    late_runtime("runtime", "while-reading");
}

Test(orders, disabled_shim_passes_late_runtime_through)
{
    run_prog(&r, "pair-late", true, ENV("E2E_FIRST=ipcshim", "IPCSHIM_DISABLE=1"),
             ARGS("--free", "after-close", "--blocks", "2"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
    expect_field("first", "ipcshim_active 0");
}

Test(orders, host_dlopens_worker_linked_to_runtime)
{
    run_prog(&r, "pair-plugin", true, NULL, ARGS("--free", "while-reading", "--blocks", "2"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
}

static const char *python3(void)
{
    const char *p = getenv("PYTHON3");
    return p && *p ? p : "/usr/bin/python3";
}

static void ctypes_pair(bool shim)
{
    char script[1024];
    snprintf(script, sizeof script, "%s/ctypes_pair.py", getenv("E2E_BIN_DIR"));
    run_prog(&r, python3(), shim, NULL, ARGS(script, "--ask-first"));
}

Test(orders, python_ctypes_spawn_without_shim_reads_poison)
{
    ctypes_pair(false);
    cr_assert_eq(r.status, 1, "status %d", r.status);
    expect_field("consumer", "poison");
}

Test(orders, python_ctypes_spawn_protected)
{
    ctypes_pair(true);
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("first", "ipcshim_active 1");
    expect_field("consumer", "ok");
}

Test(orders, plugin_with_its_own_cudaMalloc_is_not_hijacked)
{
    char plugin[1024];
    snprintf(plugin, sizeof plugin, "%s/libfake-cudart.so", getenv("E2E_BIN_DIR"));
    run_prog(&r, "plugin-host", true, NULL, ARGS(plugin));
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    expect_field("plugin cudaMalloc", "777 0x1005");
}

/* Another RTLD_NEXT interposer, in both preload orders, with a timeout
 * (it used to spin forever in one order and crash in the other). */
static void wrapped_time(bool shim_first)
{
    char preload[2048], prog[1024];
    const char *bin = getenv("E2E_BIN_DIR"), *shim = getenv("IPCSHIM_LIB");
    if (shim_first)
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s %s/libwrap-time.so", shim, bin);
    else
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s/libwrap-time.so %s", bin, shim);
    snprintf(prog, sizeof prog, "%s/print-time", bin);
    run_prog(&r, "/usr/bin/timeout", false, ENV(preload), ARGS("-s", "KILL", "20", prog));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("time shift", "86400");
}
Test(orders, rtld_next_interposer_after_shim)
{
    wrapped_time(true);
}
Test(orders, rtld_next_interposer_before_shim)
{
    wrapped_time(false);
}

/* AddressSanitizer's runtime looks up every function it wraps with
 * dlsym(RTLD_NEXT, ...) before main; both ways of running it with a preload. */
static void asan_pair(const char *preload_env)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/pair-asan", getenv("E2E_BIN_DIR"));
    if (access(path, X_OK))
        cr_skip_test("the compiler cannot build AddressSanitizer programs here");
    run_prog(&r, "pair-asan", preload_env == NULL,
             ENV("ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0",
                 preload_env ? preload_env : "E2E=1"),
             ARGS("--free", "while-reading", "--blocks", "2"));
    cr_assert_eq(r.status, 0, "status %d", r.status);
    expect_field("consumer 0", "ok");
}
Test(orders, asan_program_shim_preloaded)
{
    asan_pair(NULL);
}
Test(orders, asan_program_runtime_preloaded_first)
{
    char preload[2048];
    FILE *p = popen("gcc -print-file-name=libasan.so", "r");
    char lib[1024] = "";
    if (!p || !fgets(lib, sizeof lib, p)) cr_skip_test("cannot locate libasan.so");
    pclose(p);
    lib[strcspn(lib, "\n")] = 0;
    if (lib[0] != '/') cr_skip_test("gcc does not know where libasan.so is");
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s %s", lib, getenv("IPCSHIM_LIB"));
    asan_pair(preload);
}

/* A library's constructor calls CUDA before the shim's constructor runs
 * (progs/early_lib.c): those calls succeed, untracked, and tracking starts
 * with the first call after it (the export made from main is recorded). */
Test(orders, early_constructor_calls_pass_and_tracking_starts_after)
{
    run_prog(&r, "early", true, NULL, NULL);
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    expect_field("early", "0");
    expect_field("later", "0");
    expect_field("exports", "1");
    expect_field("free", "0");
}
