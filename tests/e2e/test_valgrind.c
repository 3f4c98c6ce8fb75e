/* test_valgrind: a correct program stays clean under memcheck with the shim
 * (docs/troubleshooting.md, "Under valgrind"). The program is leaky's
 * open-twice (tests/e2e/progs/leaky.c): it exports a block, a child of its
 * own opens it twice and closes it once, and the parent frees it: an export
 * and two opens whose call sites the shim captures at the default depth
 * (one through the memo). CI runs programs as
 * `valgrind --error-exitcode=N`; an error memcheck reports anywhere, the
 * shim's stack reads included, turns a passing program into a failing one.
 * (pair.c spawns its consumers through /proc/self/exe, which valgrind
 * cannot follow; leaky spawns its own path.) */
#include "run.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], log_path[300];

static void setup(void)
{
    run_setup("valgrind");
    snprintf(dir, sizeof dir, "/tmp/ipcshim-e2e-valgrind-%d", (int)getpid());
    snprintf(log_path, sizeof log_path, "%s/ipcshim.log", dir);
}
/* Natively a run takes 1-4 s; memcheck on a slow 2-core machine, 5-10 times that. */
TestSuite(valgrind, .init = setup, .fini = run_cleanup, .timeout = 120);

#define SIZE "1048576"

static struct run_result r;
static char vglog[65536], shimlog[65536];

/* The valgrind on PATH, or NULL. */
static const char *valgrind_path(void)
{
    static char found[1024];
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(found, sizeof found, "%.*s/valgrind", (int)n, p);
        if (n && access(found, X_OK) == 0) return found;
        p += n + (p[n] == ':');
    }
    return NULL;
}

/* Appends every file of dir whose name starts with prefix to buf, and
 * removes it. */
static void read_logs(const char *prefix, char *buf, size_t len)
{
    size_t used = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    buf[0] = 0;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, prefix, strlen(prefix))) continue;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        used += fread(buf + used, 1, len - 1 - used, f);
        buf[used] = 0;
        fclose(f);
        unlink(path);
    }
    if (d) closedir(d);
}

/* Errors memcheck counted, over the "ERROR SUMMARY: N errors" lines of
 * every process; -1 when there is none (valgrind did not run). */
static int vg_errors(void)
{
    int sum = -1;
    for (const char *p = vglog; (p = strstr(p, "ERROR SUMMARY: ")); p++)
        sum = (sum < 0 ? 0 : sum) + atoi(p + strlen("ERROR SUMMARY: "));
    return sum;
}

/* Skips the test without a working valgrind (some need libc6-dbg). */
static const char *need_valgrind(void)
{
#if defined(__SANITIZE_ADDRESS__)
    /* This build's programs and shim carry ASan's runtime, which maps its
     * shadow memory where valgrind cannot follow. */
    cr_skip_test("valgrind cannot run AddressSanitizer-built programs; checked in the plain build");
#endif
    const char *vg = valgrind_path();
    if (!vg) cr_skip_test("valgrind is not installed (Debian: valgrind)");
    struct run_result probe;
    run_prog(&probe, vg, false, NULL, ARGS("-q", "--error-exitcode=99", "/bin/true"));
    if (probe.status != 0)
        cr_skip_test("valgrind does not run here (%s /bin/true exited %d)", vg, probe.status);
    return vg;
}

/* Runs leaky open-twice under memcheck, with the shim when shim is true,
 * with IPCSHIM_LEAK_REPORT=report; memcheck's log lands in vglog, the
 * shim's in shimlog (their files are gone before any assertion). */
static void run_memcheck(bool shim, const char *report)
{
    const char *vg = need_valgrind();
    char prog[1024], logfile[400], logenv[400], rep[64];
    snprintf(prog, sizeof prog, "%s/leaky-runtime", getenv("E2E_BIN_DIR"));
    snprintf(logfile, sizeof logfile, "--log-file=%s/vg.%%p", dir);
    snprintf(logenv, sizeof logenv, "IPCSHIM_LOG_FILE=%s", log_path);
    snprintf(rep, sizeof rep, "IPCSHIM_LEAK_REPORT=%s", report);
    cr_assert(mkdir(dir, 0700) == 0, "mkdir %s", dir);
    /* VALGRIND_OPTS of the caller's would change what is checked. */
    run_prog(&r, vg, shim, ENV("VALGRIND_OPTS=", "IPCSHIM_LOG=debug", logenv, rep),
             ARGS("--trace-children=yes", "--error-exitcode=99", "--leak-check=no", logfile, prog,
                  "open-twice", SIZE));
    read_logs("vg.", vglog, sizeof vglog);
    read_logs("ipcshim.log", shimlog, sizeof shimlog);
    rmdir(dir);
    fprintf(stderr, "---- memcheck:\n%s---- ipcshim log (debug):\n%.4000s\n", vglog, shimlog);
}

Test(valgrind, without_the_shim_the_program_is_clean)
{
    run_memcheck(false, "summary");
    cr_assert_eq(vg_errors(), 0, "memcheck found %d errors without the shim:\n%s", vg_errors(),
                 vglog);
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    cr_expect(run_count(&r, "done") == 1, "the exporter finished: %s", r.out);
}

Test(valgrind, with_the_shim_the_program_is_clean)
{
    run_memcheck(true, "summary");
    cr_assert_eq(vg_errors(), 0, "memcheck found %d errors under the shim:\n%s", vg_errors(),
                 vglog);
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    cr_expect(run_count(&r, "done") == 1, "the exporter finished: %s", r.out);
    /* The shim tracked the open left unclosed, and knew it was under
     * valgrind (either way of knowing: callsite.h). */
    cr_expect(strstr(shimlog, "leak: pid"), "the shim tracked nothing:\n%.4000s", shimlog);
    cr_expect(strstr(shimlog, "under valgrind"), "the shim did not see valgrind:\n%.4000s",
              shimlog);
}

Test(valgrind, call_sites_still_name_the_program)
{
    run_memcheck(true, "full");
    cr_assert_eq(vg_errors(), 0, "memcheck found %d errors under the shim:\n%s", vg_errors(),
                 vglog);
    cr_assert_eq(r.status, 0, "status %d: %s", r.status, r.out);
    /* The child left one of its two opens unclosed: the report names where. */
    cr_expect(strstr(shimlog, "opened twice, closed once; opened at ") &&
                  strstr(shimlog, "leaky_open_block+"),
              "no call site in the leak report:\n%.4000s", shimlog);
}
