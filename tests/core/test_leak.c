/* leak: core/leak.h -- the exit report and the watch's lines, through the
 * core API with the log in a file of the test. One test per kind of item
 * (an export nobody opened, a mapping never closed, a block left in limbo),
 * plus the count of opens and closes, the byte formatting, a report given
 * once, the off setting, and the watch's lines held until
 * leak_check_flush(). Peers are fork() children driven through a pipe, as
 * in test_ipc.c; what is checked is the text tests/e2e/test_leaks.c checks
 * end to end. */
#include "helpers.h"
#include "leak.h"
#include "local.h"

#include <stdarg.h>

#define CTX 0x100ull
#define BASE 0x100000ull
#define MAPPED 0x7000ull /* where an importer's driver "mapped" a block */
#define MIB4 4194304ull

static char log_path[128];
static char logbuf[65536];

static void setup(void)
{
    snprintf(log_path, sizeof log_path, "/tmp/ipcshim-core-leak-%d.log", (int)getpid());
    unlink(log_path);
    setenv("IPCSHIM_LOG_FILE", log_path, 1);
    setenv("IPCSHIM_LOG", "warn", 1);
    setenv("IPCSHIM_EXIT_WAIT", "100ms", 1);
    setenv("IPCSHIM_COLLECTOR", "0", 1); /* nothing frees behind the test's back */
    setenv("IPCSHIM_DEAD_HOLD_WARN", "0", 1);
    setenv("IPCSHIM_GROWTH_CHECKS", "0", 1);
    setenv("IPCSHIM_LEAK_REPORT", "full", 1);
    test_domain_setup("leak");
}

static void teardown(void)
{
    unlink(log_path);
    test_domain_teardown();
}

TestSuite(leak, .init = setup, .fini = teardown, .timeout = 30);

/* The log so far. */
static const char *read_log(void)
{
    FILE *f = fopen(log_path, "r");
    size_t n = f ? fread(logbuf, 1, sizeof logbuf - 1, f) : 0;
    logbuf[n] = 0;
    if (f) fclose(f);
    return logbuf;
}

/* How many lines of the log hold every one of the NULL-ended needles; the
 * last such line into out (when not NULL). */
static int log_lines(char *out, size_t len, ...)
{
    int found = 0;
    for (const char *line = read_log(); *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        char one[4096];
        snprintf(one, sizeof one, "%.*s", (int)n, line);
        va_list ap;
        va_start(ap, len);
        bool all = true;
        for (const char *needle; (needle = va_arg(ap, const char *));)
            all = all && strstr(one, needle);
        va_end(ap);
        if (all && ++found && out) snprintf(out, len, "%s", one);
        line = end ? end + 1 : line + n;
    }
    return found;
}

#define LINE(out, ...) log_lines(out, sizeof out, __VA_ARGS__, (const char *)NULL)
#define COUNT(...) log_lines(NULL, 0, __VA_ARGS__, (const char *)NULL)

static char pid_tag[32]; /* "pid N (" of a peer */
static const char *peer(pid_t pid)
{
    snprintf(pid_tag, sizeof pid_tag, "pid %d (", (int)pid);
    return pid_tag;
}

/* A peer: exports h (size bytes) and waits, or opens h and waits. It says
 * 1 when done, then exits when told. */
enum peer_role { PEER_EXPORTS, PEER_OPENS };

static pid_t peer_start(struct chan *c, enum peer_role role, unsigned seed, uint64_t size)
{
    chan_open(c);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        chan_child(c);
        struct ipc_handle h = make_handle(seed);
        int rc = 1;
        if (role == PEER_EXPORTS) {
            rc = ipc_export(&h, 0x900000, size, 0, CTX) == 0;
        } else {
            struct ipc_open t;
            uint64_t p = 0;
            rc = ipc_open_begin(&h, CTX, &t, &p) == IPC_REAL;
            if (rc) ipc_open_commit(&t, MAPPED);
        }
        CHILD_SEND(c, rc ? 1 : 0);
        (void)CHILD_RECV(c);
        _exit(0);
    }
    chan_parent(c);
    cr_assert_eq(PARENT_RECV(c), 1, "the peer failed");
    return pid;
}

static void peer_stop(struct chan *c, pid_t pid)
{
    PARENT_SEND(c, 0);
    cr_assert_eq(child_wait(pid), 0);
}

/* Opens h in CTX, committing it at MAPPED. */
static void open_mapped(unsigned seed)
{
    struct ipc_handle h = make_handle(seed);
    struct ipc_open t;
    uint64_t p = 0;
    int rc = ipc_open_begin(&h, CTX, &t, &p);
    if (rc == IPC_DONE) return; /* open already in this context: counted once more */
    cr_assert_eq(rc, IPC_REAL);
    ipc_open_commit(&t, MAPPED);
}

Test(leak, export_nobody_opened)
{
    test_option("LEAK_REPORT", "summary");
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(1);
    cr_assert_eq(ipc_export(&h, BASE, 1000, 0, CTX), 0);
    ipc_shutdown();
    char line[4096], me[32];
    snprintf(me, sizeof me, "leak: pid %d (", (int)getpid());
    cr_assert_eq(LINE(line, "warn: ", me, "exits with"), 1, "%s", read_log());
    cr_expect(strstr(line, "exits with 1 export no process under the shim opened (1000 bytes); "
                           "IPCSHIM_LEAK_REPORT=full lists each with its call site"),
              "%s", line);
    cr_expect_eq(COUNT("leak:   "), 0, "summary only: %s", read_log());
}

Test(leak, export_nobody_opened_full)
{
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(2);
    cr_assert_eq(ipc_export(&h, BASE, 1000, 0, CTX), 0);
    cr_assert_eq(ipc_export(&h, BASE, 1000, 0, CTX), 0); /* the same allocation again */
    ipc_shutdown();
    char line[4096];
    cr_assert_eq(LINE(line, "exits with 1 export no process under the shim opened (1000 bytes):"),
                 1, "%s", read_log());
    cr_assert_eq(LINE(line, "leak:   exported 1000 bytes at 0x100000 twice, first "), 1, "%s",
                 read_log());
    cr_expect(strstr(line, "ago, opened by no process under the shim (0 hand-offs expired, 2 "
                           "unclaimed; or by a consumer started without it"),
              "%s", line);
    cr_expect(strstr(line, "; exported at "), "%s", line);
}

Test(leak, bytes_are_formatted_in_binary_units)
{
    test_ipc_init(&fake_host);
    const uint64_t sizes[] = {1000, 1536, MIB4, 3ull << 30};
    for (unsigned i = 0; i < 4; i++) {
        struct ipc_handle h = make_handle(10 + i);
        cr_assert_eq(ipc_export(&h, BASE + (i << 28), sizes[i], 0, CTX), 0);
    }
    ipc_shutdown();
    cr_expect_eq(COUNT("leak:   exported 1000 bytes at 0x100000 once"), 1, "%s", read_log());
    cr_expect_eq(COUNT("leak:   exported 1.5 KiB at 0x10100000 once"), 1, "%s", read_log());
    cr_expect_eq(COUNT("leak:   exported 4.0 MiB at 0x20100000 once"), 1, "%s", read_log());
    cr_expect_eq(COUNT("leak:   exported 3.0 GiB at 0x30100000 once"), 1, "%s", read_log());
    /* The summary adds them up: 3 GiB + 4 MiB + 2536 bytes. */
    cr_expect_eq(COUNT("exits with 4 exports no process under the shim opened (3.0 GiB):"), 1, "%s",
                 read_log());
}

Test(leak, mapping_never_closed)
{
    test_ipc_init(&fake_host);
    struct chan c;
    pid_t exporter = peer_start(&c, PEER_EXPORTS, 3, MIB4);
    open_mapped(3);
    ipc_report_leaks(); /* an import-only process's exit hook */
    char line[4096];
    cr_assert_eq(LINE(line, "exits with 1 mapping never closed (4.0 MiB):"), 1, "%s", read_log());
    cr_assert_eq(LINE(line, "leak:   holds 4.0 MiB at 0x7000 exported by ", peer(exporter)), 1,
                 "%s", read_log());
    cr_expect(strstr(line, "), alive; held for "), "%s", line);
    cr_expect(strstr(line, ", opened once, never closed; opened at "), "%s", line);
    peer_stop(&c, exporter);
}

Test(leak, opens_and_closes_are_counted)
{
    test_ipc_init(&fake_host);
    struct chan c;
    pid_t exporter = peer_start(&c, PEER_EXPORTS, 4, MIB4);
    open_mapped(4);
    open_mapped(4); /* the same handle in the same context: cached */
    struct ipc_close cl;
    cr_assert_eq(ipc_close_begin(MAPPED, &cl), IPC_DONE); /* not the last close */
    ipc_report_leaks();
    char line[4096];
    cr_assert_eq(LINE(line, "leak:   holds 4.0 MiB at 0x7000 exported by ", peer(exporter)), 1,
                 "%s", read_log());
    cr_expect(strstr(line, ", opened twice, closed once; opened at "), "%s", line);
    peer_stop(&c, exporter);
}

Test(leak, block_left_in_limbo)
{
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(5);
    cr_assert_eq(ipc_export(&h, BASE, MIB4, 0, CTX), 0);
    struct chan c;
    pid_t importer = peer_start(&c, PEER_OPENS, 5, 0);
    cr_assert_eq(ipc_free(BASE), IPC_DONE, "held: into limbo");
    ipc_shutdown(); /* waits IPCSHIM_EXIT_WAIT for the importer, then reports */
    char line[4096];
    cr_assert_eq(LINE(line,
                      "exits with 1 block left in limbo or never freed, still held by others (4.0 "
                      "MiB):"),
                 1, "%s", read_log());
    cr_assert_eq(LINE(line, "leak:   left 4.0 MiB at 0x100000 in limbo for "), 1, "%s", read_log());
    cr_expect(strstr(line, ", still held by "), "%s", line);
    cr_expect(strstr(line, peer(importer)), "%s", line);
    cr_expect(strstr(line, "; exported at "), "%s", line);
    cr_expect_eq(fake_free_count(), 0, "still held: never freed");
    peer_stop(&c, importer);
}

Test(leak, never_freed_and_still_mapped)
{
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(6);
    cr_assert_eq(ipc_export(&h, BASE, MIB4, 0, CTX), 0);
    struct chan c;
    pid_t importer = peer_start(&c, PEER_OPENS, 6, 0);
    ipc_shutdown();
    char line[4096];
    cr_assert_eq(LINE(line, "leak:   exits without freeing 4.0 MiB at 0x100000, exported "), 1,
                 "%s", read_log());
    cr_expect(strstr(line, "ago and still mapped by "), "%s", line);
    cr_expect(strstr(line, peer(importer)), "%s", line);
    cr_expect(strstr(line, "(the driver frees it under them)"), "%s", line);
    peer_stop(&c, importer);
}

Test(leak, reported_once)
{
    test_ipc_init(&fake_host);
    struct chan c;
    pid_t exporter = peer_start(&c, PEER_EXPORTS, 7, MIB4);
    open_mapped(7);
    ipc_report_leaks();
    ipc_report_leaks();
    ipc_shutdown(); /* releases the lease; the report was given already */
    cr_expect_eq(COUNT("exits with"), 1, "%s", read_log());
    cr_expect_eq(COUNT("leak:   holds 4.0 MiB"), 1, "%s", read_log());
    peer_stop(&c, exporter);
}

Test(leak, off_reports_nothing)
{
    test_option("LEAK_REPORT", "off");
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(8);
    cr_assert_eq(ipc_export(&h, BASE, MIB4, 0, CTX), 0);
    ipc_shutdown();
    cr_expect_eq(COUNT("leak"), 0, "%s", read_log());
}

Test(leak, nothing_held_nothing_reported)
{
    test_ipc_init(&fake_host);
    struct chan c;
    pid_t exporter = peer_start(&c, PEER_EXPORTS, 9, MIB4);
    open_mapped(9);
    struct ipc_close cl;
    cr_assert_eq(ipc_close_begin(MAPPED, &cl), IPC_REAL);
    ipc_close_finish(&cl);
    ipc_report_leaks();
    cr_expect_eq(COUNT("leak"), 0, "%s", read_log());
    peer_stop(&c, exporter);
}

/* Our holder slot, found in a view by pid. */
static uint32_t self_in(struct registry *view)
{
    for (uint32_t i = 0; i < view->max_holders; i++)
        if (view->holders[i].state == HOLDER_ACTIVE && view->holders[i].pid == getpid()) return i;
    cr_assert_fail("this process holds no slot");
    return REG_NONE;
}

Test(leak, watch_lines_wait_for_flush)
{
    test_option("GROWTH_CHECKS", "1"); /* warn at the first growth */
    test_ipc_init(&fake_host);
    struct chan c;
    pid_t exporter = peer_start(&c, PEER_EXPORTS, 11, MIB4);
    open_mapped(11);
    struct registry view;
    open_view(&view);
    local_lock();
    leak_check_locked(&view, self_in(&view));
    local_unlock();
    cr_expect_eq(COUNT("leak in progress?"), 0, "logged before the flush: %s", read_log());
    leak_check_flush();
    char line[4096];
    cr_assert_eq(LINE(line,
                      "warn: leak in progress? this process's open mappings grew at 1 "
                      "checks in a row (now 1 opens without a close, of blocks exported by ",
                      peer(exporter)),
                 1, "%s", read_log());
    cr_expect(strstr(line, "IPCSHIM_LEAK_REPORT=full at exit says where they were opened"), "%s",
              line);
    leak_check_flush(); /* nothing twice */
    cr_expect_eq(COUNT("leak in progress?"), 1, "%s", read_log());
    registry_close(&view);
    peer_stop(&c, exporter);
}
