/* test_vmm: legacy IPC on VMM memory (cuMemCreate + cuMemMap) end to end on
 * the simulated machine (progs/vmm_ipc.c, which knows nothing of the shim,
 * and pair's unmodified consumer). Without the shim the driver refuses the
 * export (cudaErrorInvalidValue, as NVIDIA's does); under it the consumer
 * reads what was written, ipcshim-stat names the importer and the kind,
 * and the ledger reports a double release, an import never closed and a
 * mapping left at exit. Bad input gets the driver's own answer; a cudaMalloc
 * block's handle stays the driver's, byte for byte; an address reused
 * while an importer holds the old allocation exports again. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char log_path[256], json_path[256];

static void setup(void)
{
    run_setup("vmm");
    snprintf(log_path, sizeof log_path, "/tmp/ipcshim-e2e-vmm-%d.log", (int)getpid());
    snprintf(json_path, sizeof json_path, "/tmp/ipcshim-e2e-vmm-%d.json", (int)getpid());
    unlink(log_path), unlink(json_path);
}
static void teardown(void)
{
    unlink(log_path), unlink(json_path);
    run_cleanup();
}
TestSuite(vmm, .init = setup, .fini = teardown, .timeout = 60);

static struct run_result r;
static char buf[65536];

#define expect_field(key, value) RUN_EXPECT_FIELD(&r, key, value)

static const char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
    return buf;
}

static void run_vmm(bool shim, const char *const *args)
{
    char logenv[300];
    snprintf(logenv, sizeof logenv, "IPCSHIM_LOG_FILE=%s", log_path);
    run_prog(&r, "vmm-ipc", shim, ENV(logenv, "IPCSHIM_EXIT_WAIT=300ms"), args);
    cr_assert_eq(r.status, 0, "status %d:\n%s", r.status, r.out);
}

Test(vmm, without_shim_the_driver_refuses_the_export)
{
    run_vmm(false, ARGS("--door", "runtime"));
    expect_field("export", "1"); /* cudaErrorInvalidValue */
    run_vmm(false, ARGS("--door", "driver"));
    expect_field("export", "1"); /* CUDA_ERROR_INVALID_VALUE */
}

Test(vmm, shim_an_unmodified_consumer_reads_it_each_door)
{
    const char *doors[] = {"runtime", "driver"};
    for (int i = 0; i < 2; i++) {
        run_vmm(true, ARGS("--door", doors[i]));
        expect_field("export", "0");
        expect_field("consumer", "ok");
        expect_field("exit-of-consumer", "0");
    }
}

Test(vmm, shim_stat_names_the_importer_and_the_kind)
{
    char during[1024];
    const char *root = getenv("BUILD_ROOT");
    cr_assert(root);
    snprintf(during, sizeof during, "env -u LD_PRELOAD %s/scripts/ipcshim-stat --json > %s", root,
             json_path);
    run_vmm(true, ARGS("--during", during));
    expect_field("consumer", "ok");
    expect_field("during", "0");
    char pid[32], importer[96];
    cr_assert(run_field(&r, "importer-pid", pid, sizeof pid), "%s", r.out);
    snprintf(importer, sizeof importer, "\"importers\":[{\"slot\":1,\"pid\":%s,", pid);
    const char *json = slurp(json_path);
    cr_expect(strstr(json, "\"kind\":\"vmm\""), "no vmm block in:\n%s", json);
    cr_expect(strstr(json, importer), "the consumer %s is not named an importer in:\n%s", pid,
              json);
}

Test(vmm, shim_an_import_never_closed_is_reported_at_exit)
{
    run_vmm(true, ARGS("--leak-import"));
    char pid[32];
    cr_assert(run_field(&r, "leaker", pid, sizeof pid), "%s", r.out);
    expect_field("leaker", "ok 0");
    const char *log = slurp(log_path);
    cr_assert(strstr(log, "exits with 1 mapping never closed"), "no leak report in:\n%s", log);
}

Test(vmm, shim_double_release_reported_once_with_the_drivers_answer)
{
    char code[2][64];
    for (int shim = 0; shim < 2; shim++) {
        run_vmm(shim, ARGS("--double-release"));
        cr_assert(run_field(&r, "double-release", code[shim], sizeof code[shim]), "%s", r.out);
        cr_expect_str_neq(code[shim], "0", "a second release fails:\n%s", r.out);
    }
    cr_expect_str_eq(code[1], code[0], "the driver's answer with the shim");
    const char *log = slurp(log_path);
    const char *first = strstr(log, "released twice");
    cr_assert(first, "no double-release report in:\n%s", log);
    cr_expect(!strstr(first + 1, "released twice"), "reported once:\n%s", log);
}

Test(vmm, shim_a_mapping_left_at_exit_is_reported)
{
    run_vmm(true, ARGS("--leave-mapped"));
    expect_field("consumer", "ok");
    cr_assert(
        strstr(
            slurp(log_path),
            "exits with 1 VMM mapping(s) never unmapped (2097152 bytes), the first from vmm-ipc"),
        "no report in:\n%s", buf);
}

Test(vmm, forged_handles_get_the_drivers_answer)
{
    run_vmm(true, ARGS("--forged"));
    expect_field("consumer", "ok");
    char forged[64], checked[64], garbage[64];
    cr_assert(run_field(&r, "forged-open", forged, sizeof forged), "%s", r.out);
    cr_assert(run_field(&r, "garbage-open", garbage, sizeof garbage), "%s", r.out);
    cr_assert(run_field(&r, "forged-checked-open", checked, sizeof checked), "%s", r.out);
    cr_expect_str_eq(checked, garbage, "a well-formed forgery too:\n%s", r.out);
    cr_expect_str_neq(garbage, "0", "garbage is refused:\n%s", r.out);
    cr_expect_str_eq(forged, garbage, "a forged handle gets what garbage gets:\n%s", r.out);
}

/* Each run is a new simulated machine, whose random id is in every handle
 * (and in its check word): a hex digit that differs among five runs without
 * the shim is the machine's (one that is the machine's but equal in all
 * five by chance: 1 in 65,536); every other digit is the same with the
 * shim. */
#define RUNS 6
Test(vmm, a_cudamalloc_handle_is_the_drivers_byte_for_byte)
{
    char h[RUNS][256];
    for (int run = 0; run < RUNS; run++) {
        run_vmm(run == RUNS - 1, ARGS("--malloc"));
        expect_field("export", "0");
        cr_assert(run_field(&r, "malloc-handle", h[run], sizeof h[run]), "%s", r.out);
        cr_assert_eq(strlen(h[run]), 128);
    }
    int same = 0;
    for (int i = 0; i < 128; i++) {
        bool machine = false;
        for (int run = 1; run < RUNS - 1; run++)
            machine |= h[run][i] != h[0][i];
        if (machine) continue;
        same++;
        cr_expect_eq(h[RUNS - 1][i], h[0][i], "hex digit %d differs with the shim:\n%s\n%s", i,
                     h[0], h[RUNS - 1]);
    }
    cr_expect_gt(same, 64, "most bytes do not depend on the machine");
}

/* The importer needs no ptrace rights on the exporter: the fd comes over the
 * exporter's fd server (fdpass.c), whatever pidfd_getfd would say. */
Test(vmm, shim_a_non_dumpable_exporters_memory_reaches_the_consumer)
{
    run_vmm(true, ARGS("--non-dumpable"));
    expect_field("export", "0");
    expect_field("consumer", "ok");
}

/* The ledger of memory a program shares itself (cuMemExportToShareableHandle,
 * cuMemImportFromShareableHandle): an importer that exits normally without
 * releasing or unmapping is reported once for each, with its call site. */
Test(vmm, shim_a_direct_import_never_released_is_reported_at_exit)
{
    run_vmm(true, ARGS("--direct"));
    expect_field("fd-export", "0");
    expect_field("direct-import", "ok 0");
    const char *log = slurp(log_path);
    const char *line = "exits with 1 VMM allocation(s) imported and never released (2097152 bytes)";
    const char *first = strstr(log, line);
    cr_assert(first, "no report in:\n%s", log);
    cr_expect(!strstr(first + strlen(line), "imported and never released"), "once:\n%s", log);
    cr_expect(strstr(log, "exits with 1 VMM mapping(s) never unmapped"), "no report in:\n%s", log);
}

/* A handle of an allocation its exporter unmapped and released (nothing
 * held it): refused as the driver refuses a bad handle. */
Test(vmm, shim_a_released_allocations_handle_is_refused)
{
    run_vmm(true, ARGS("--stale", "--forged"));
    expect_field("consumer", "ok");
    char garbage[64];
    cr_assert(run_field(&r, "garbage-open", garbage, sizeof garbage), "%s", r.out);
    char want[80];
    snprintf(want, sizeof want, "error %s", garbage);
    expect_field("leaker", want);
}

/* A driver that refuses the POSIX fd handle type the shim adds to
 * cuMemCreate (SIMCUDA_FAIL_VMM_SHAREABLE: the next such create fails):
 * the create is retried exactly as the program asked, so the program gets
 * its allocation; legacy IPC on it then fails as without the shim
 * (cudaErrorInvalidValue), and the log says why, once. */
Test(vmm, shim_a_refused_handle_type_is_retried_as_the_program_asked)
{
    char logenv[300];
    snprintf(logenv, sizeof logenv, "IPCSHIM_LOG_FILE=%s", log_path);
    for (int shim = 0; shim < 2; shim++) {
        run_prog(&r, "vmm-ipc", shim,
                 ENV(logenv, "IPCSHIM_LOG=info", "IPCSHIM_EXIT_WAIT=300ms",
                     "SIMCUDA_FAIL_VMM_SHAREABLE=1"),
                 ARGS("--door", "runtime"));
        cr_assert_eq(r.status, 0, "the allocation failed (shim %d):\n%s", shim, r.out);
        expect_field("export", "1"); /* cudaErrorInvalidValue, as without the shim */
    }
    const char *log = slurp(log_path);
    const char *line = "cuMemCreate refused the POSIX fd handle type";
    const char *first = strstr(log, line);
    cr_assert(first, "no log line in:\n%s", log);
    cr_expect(!strstr(first + 1, line), "logged twice:\n%s", log);
    cr_expect(strstr(log, "created without a shareable handle type"), "no reason in:\n%s", log);
}

/* An address reused after an export (issue 46 item 4), as an expandable
 * segment does when it shrinks and grows: B exported and held open by an
 * importer, unmapped and released by its exporter, a new allocation C
 * mapped at the same address and exported. The driver keeps B for its
 * importer, so the address is not taken: C's export succeeds and reaches
 * its consumer, and B's importer still reads B. */
Test(vmm, shim_an_address_reused_after_an_export_exports_again)
{
    const char *doors[] = {"runtime", "driver"};
    for (int i = 0; i < 2; i++) {
        run_vmm(true, ARGS("--reuse", "--door", doors[i]));
        expect_field("export", "0");
        expect_field("reuse-export", "0");
        expect_field("consumer", "ok");
        expect_field("holder", "ok 0");
    }
}

/* Which "importers" array of ipcshim-stat's JSON names pid (0, 1, ...; -1
 * none). */
static int importers_naming(const char *json, const char *pid)
{
    char who[64];
    snprintf(who, sizeof who, "\"pid\":%s,", pid);
    int k = 0;
    for (const char *at = strstr(json, "\"importers\":["); at;
         at = strstr(at + 1, "\"importers\":["), k++) {
        const char *end = strchr(at, ']'), *hit = strstr(at, who);
        if (hit && end && hit < end) return k;
    }
    return -1;
}

/* Direct sharing as NVIDIA's driver makes it (issue 46 item 5): every
 * exported fd is a new description of one file (tests/simcuda/README.md,
 * VMM), so a file's identity names no allocation. Allocation A exported
 * twice, to importers 1 and 2, B once, to importer 3, over SCM_RIGHTS, each
 * fd closed by the exporter once sent: the ledger has A's record naming 1
 * and 2, and B's naming 3. */
Test(vmm, shim_stat_names_each_direct_importer_on_its_own_allocation)
{
    char during[1024], pid[3][32], key[32];
    const char *root = getenv("BUILD_ROOT");
    cr_assert(root);
    snprintf(during, sizeof during, "env -u LD_PRELOAD %s/scripts/ipcshim-stat --json > %s", root,
             json_path);
    run_vmm(true, ARGS("--scm", "--during", during));
    expect_field("during", "0");
    for (int n = 0; n < 3; n++) {
        snprintf(key, sizeof key, "scm-import-%d", n + 1);
        expect_field(key, "ok 0");
        snprintf(key, sizeof key, "scm-importer-%d", n + 1);
        cr_assert(run_field(&r, key, pid[n], sizeof pid[n]), "%s", r.out);
    }
    const char *json = slurp(json_path);
    cr_expect(strstr(json, "\"kind\":\"vmm\""), "no vmm record in:\n%s", json);
    int a1 = importers_naming(json, pid[0]), a2 = importers_naming(json, pid[1]),
        b3 = importers_naming(json, pid[2]);
    cr_expect(a1 >= 0 && b3 >= 0, "an importer is not named in:\n%s", json);
    cr_expect_eq(a1, a2, "A's two importers are named on one record:\n%s", json);
    cr_expect_neq(a1, b3, "B's importer is named on a record of its own:\n%s", json);
}
