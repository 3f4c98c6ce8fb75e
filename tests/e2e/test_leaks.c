/* test_leaks: the exit leak report (core/leak.h), end to end on the
 * simulator, one test per kind of leak: a consumer that never closes, one
 * that opens twice and closes once, an exporter killed while a consumer
 * maps its block, an export nobody opens. Each checks that the report names
 * the right process, the bytes and the call-site function
 * (tests/e2e/progs/leaky.c), and that the summary, off and depth-0 settings
 * and IPCSHIM_STATS say what they should. */
#include "run.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char log_path[256];

static void setup(void)
{
    run_setup("leaks");
    snprintf(log_path, sizeof log_path, "/tmp/ipcshim-e2e-leaks-%d.log", (int)getpid());
    unlink(log_path);
}
static void teardown(void)
{
    unlink(log_path);
    run_cleanup();
}
TestSuite(leaks, .init = setup, .fini = teardown, .timeout = 60);

#define SIZE "4194304" /* 4.0 MiB */

static struct run_result r;
static char logbuf[65536];

/* Runs leaky MODE under the shim with the log in log_path, then reads it. */
static void run_leaky_args(const char *mode, const char *report, const char *extra,
                           const char *extra2, const char *hold_ms)
{
    char logenv[300], rep[64];
    snprintf(logenv, sizeof logenv, "IPCSHIM_LOG_FILE=%s", log_path);
    snprintf(rep, sizeof rep, "IPCSHIM_LEAK_REPORT=%s", report);
    const char *env[] = {logenv, rep, "IPCSHIM_EXIT_WAIT=300ms", extra, extra2, NULL};
    if (extra && !extra2) env[4] = NULL;
    if (hold_ms)
        run_prog(&r, "leaky-runtime", true, env, ARGS(mode, SIZE, hold_ms));
    else
        run_prog(&r, "leaky-runtime", true, env, ARGS(mode, SIZE));
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    FILE *f = fopen(log_path, "r");
    size_t n = f ? fread(logbuf, 1, sizeof logbuf - 1, f) : 0;
    logbuf[n] = 0;
    if (f) fclose(f);
}

static void run_leaky(const char *mode, const char *report, const char *extra)
{
    run_leaky_args(mode, report, extra, NULL, NULL);
}

static int pid_of(const char *role)
{
    char buf[64];
    const char *v = run_field(&r, role, buf, sizeof buf);
    cr_assert(v, "no \"%s\" line in:\n%s", role, r.out);
    return atoi(v);
}

/* The log line of process pid that contains every one of the NULL-ended
 * needles, copied to out; false if none. */
static bool log_line(int pid, char *out, size_t len, ...)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ipcshim[%d]: ", pid);
    for (char *line = logbuf; line && *line;) {
        char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char one[4096];
        snprintf(one, sizeof one, "%.*s", (int)n, line);
        bool ok = !strncmp(one, prefix, strlen(prefix));
        va_list ap;
        va_start(ap, len);
        for (const char *needle; ok && (needle = va_arg(ap, const char *));)
            ok = strstr(one, needle) != NULL;
        va_end(ap);
        if (ok) {
            snprintf(out, len, "%s", one);
            return true;
        }
        line = end ? end + 1 : NULL;
    }
    return false;
}

static int count_lines(const char *needle)
{
    int n = 0;
    for (const char *p = logbuf; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static char line[4096], want[128];

Test(leaks, consumer_that_never_closes)
{
    run_leaky("never-close", "full", NULL);
    int exporter = pid_of("exporter"), importer = pid_of("importer");
    cr_assert(log_line(importer, line, sizeof line, "leak: pid", "(leaky-runtime) exits with",
                       "1 mapping never closed (4.0 MiB)", NULL),
              "no summary line for the importer %d in:\n%s", importer, logbuf);
    snprintf(want, sizeof want, "exported by pid %d (leaky-runtime), alive", exporter);
    cr_assert(log_line(importer, line, sizeof line, "leak:   holds 4.0 MiB", want,
                       "opened once, never closed", "; opened at ", "leaky_open_block+", NULL),
              "no item line for the importer in:\n%s", logbuf);
    /* The exporter freed its block after the consumer's exit released it. */
    cr_expect(!log_line(exporter, line, sizeof line, "leak:", NULL), "exporter reported: %s", line);
}

Test(leaks, consumer_that_opens_twice_and_closes_once)
{
    run_leaky("open-twice", "full", NULL);
    int exporter = pid_of("exporter"), importer = pid_of("importer");
    snprintf(want, sizeof want, "exported by pid %d (leaky-runtime)", exporter);
    cr_assert(log_line(importer, line, sizeof line, "leak:   holds 4.0 MiB", want,
                       "opened twice, closed once", "; opened at ", "leaky_open_block+", NULL),
              "no item line for the importer %d in:\n%s", importer, logbuf);
}

Test(leaks, exporter_killed_while_a_consumer_maps_its_block)
{
    run_leaky("exporter-killed", "full", NULL);
    int exporter = pid_of("exporter"), importer = pid_of("importer");
    cr_assert(log_line(importer, line, sizeof line,
                       "1 mapping never closed (4.0 MiB, 4.0 MiB of it "
                       "exported by dead processes)",
                       NULL),
              "no summary line for the importer %d in:\n%s", importer, logbuf);
    snprintf(want, sizeof want, "exported by pid %d (leaky-runtime), dead", exporter);
    cr_assert(log_line(importer, line, sizeof line, "leak:   holds 4.0 MiB", want, "; opened at ",
                       "leaky_open_block+", NULL),
              "no item line naming the dead exporter in:\n%s", logbuf);
}

Test(leaks, export_nobody_opens)
{
    /* Exit waits a moment for a consumer that might still open it, then
     * drops the hand-off and frees the block: the report names it. */
    run_leaky("unopened", "full", "IPCSHIM_STATS=1");
    int exporter = pid_of("exporter");
    cr_assert(log_line(exporter, line, sizeof line, "leak: pid",
                       "1 export no process under the shim opened, hand-off expired", NULL),
              "no summary line for the exporter %d in:\n%s", exporter, logbuf);
    cr_assert(log_line(exporter, line, sizeof line, "leak:   exported 4.0 MiB", "once",
                       "opened by no process under the shim (or by a consumer started without it: "
                       "sudo, env -i or a setuid helper drop LD_PRELOAD): its hand-off expired",
                       "; exported at ", "leaky_export_block+", NULL),
              "no item line for the export in:\n%s", logbuf);
    /* IPCSHIM_STATS, printed after the report, agrees with it. */
    cr_assert(log_line(exporter, line, sizeof line, "report:", "still in limbo 0,", NULL),
              "the stats disagree with the report:\n%s", logbuf);
}

Test(leaks, summary_is_one_line_and_the_default)
{
    run_leaky("never-close", "summary", NULL);
    int importer = pid_of("importer");
    cr_assert(log_line(importer, line, sizeof line, "1 mapping never closed (4.0 MiB)",
                       "IPCSHIM_LEAK_REPORT=full lists each with its call site", NULL),
              "no summary line in:\n%s", logbuf);
    cr_expect_eq(count_lines("leak:"), 1, "more than one leak line:\n%s", logbuf);
}

Test(leaks, off_says_nothing)
{
    run_leaky("never-close", "off", NULL);
    cr_expect_eq(count_lines("leak:"), 0, "leak lines with the report off:\n%s", logbuf);
}

Test(leaks, call_sites_off_at_depth_0)
{
    run_leaky("never-close", "full", "IPCSHIM_CALLSITE_DEPTH=0");
    int importer = pid_of("importer");
    cr_assert(
        log_line(importer, line, sizeof line, "leak:   holds 4.0 MiB", "opened at unknown", NULL),
        "no item line without a call site in:\n%s", logbuf);
}

Test(leaks, warns_while_a_dead_exporters_block_is_held, .timeout = 90)
{
    run_leaky_args("exporter-killed", "summary", "IPCSHIM_DEAD_HOLD_WARN=1s", NULL, "3500");
    int exporter = pid_of("exporter"), importer = pid_of("importer");
    snprintf(want, sizeof want, "exported by pid %d (leaky-runtime), dead for ", exporter);
    cr_assert(log_line(importer, line, sizeof line, "leak: this process has held 4.0 MiB", want,
                       "(IPCSHIM_DEAD_HOLD_WARN)", NULL),
              "no warning while the block was held, in:\n%s", logbuf);
    cr_expect_eq(count_lines("IPCSHIM_DEAD_HOLD_WARN"), 1, "one warning line:\n%s", logbuf);
}

Test(leaks, warns_when_limbo_keeps_growing, .timeout = 90)
{
    run_leaky_args("limbo-grows", "summary", "IPCSHIM_GROWTH_CHECKS=2", NULL, NULL);
    int exporter = pid_of("exporter");
    cr_assert(log_line(exporter, line, sizeof line,
                       "leak in progress? this process's limbo grew at 2 "
                       "checks in a row",
                       "held by nobody (unclaimed hand-offs)", NULL),
              "no growth warning in:\n%s", logbuf);
    cr_assert(log_line(exporter, line, sizeof line, "leak: pid",
                       "10 exports no process under the shim opened, hand-offs expired", NULL),
              "no exit summary in:\n%s", logbuf);
}

Test(leaks, warns_when_opens_keep_growing, .timeout = 90)
{
    run_leaky_args("opens-grow", "summary", "IPCSHIM_GROWTH_CHECKS=2", NULL, NULL);
    int exporter = pid_of("exporter"), importer = pid_of("importer");
    snprintf(want, sizeof want, "of blocks exported by pid %d (leaky-runtime))", exporter);
    cr_assert(log_line(importer, line, sizeof line,
                       "leak in progress? this process's open mappings grew at 2 checks in a row",
                       want, NULL),
              "no growth warning for the importer %d in:\n%s", importer, logbuf);
    cr_assert(log_line(importer, line, sizeof line, "10 mappings never closed (40.0 MiB)", NULL),
              "no exit summary in:\n%s", logbuf);
}

Test(leaks, export_that_expired_unopened_is_counted)
{
    /* The hand-off expires during the exit wait: the block is freed, and the
     * summary still says that nobody ever opened it. */
    run_leaky_args("unopened", "full", "IPCSHIM_HANDOFF_TIMEOUT=100ms", "IPCSHIM_STATS=1", NULL);
    int exporter = pid_of("exporter");
    cr_assert(log_line(exporter, line, sizeof line, "leak: pid",
                       "exits with 1 export no process under the shim opened, hand-off expired "
                       "(IPCSHIM_HANDOFF_TIMEOUT, or at exit):",
                       NULL),
              "no summary line in:\n%s", logbuf);
    cr_expect(log_line(exporter, line, sizeof line, "leak:   exported 4.0 MiB",
                       "its hand-off expired", NULL),
              "the expired export, named: %s", logbuf);
    cr_assert(log_line(exporter, line, sizeof line, "report:", "still in limbo 0,",
                       "hand-offs expired 1", NULL),
              "the stats disagree with the report:\n%s", logbuf);
}
