/* test_hostile: programs that know nothing of the shim, under the shim, on
 * the simulated machine, meeting what a crash or a hostile neighbour leaves:
 *   - a dead exporter (its blocks are orphaned: a new open fails, the log
 *     says why), a fork or fork+exec or exec'd child, a raw clone();
 *   - calls with the wrong arguments: double close, close/free of pointers
 *     the call does not own, garbage IPC handles -- each gets what the
 *     driver gives without the shim;
 *   - a registry segment that is truncated, grown, of another magic, ABI or
 *     lock type, random bytes, random records, a lock held by a thread that
 *     no longer exists, group-readable, a FIFO, a symlink, owned by another
 *     user; invalid domain names; a full registry.
 * Each such program still runs correctly (the shim passes through where it
 * cannot track), the shim says why once per process, and nothing crashes or
 * hangs. docs/crash-safety.md describes the rules these check. */
#include "crash.h"
#include "registry.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char log_path[256], log_env[300];

static void setup(void)
{
    crash_setup("hostile");
    snprintf(log_path, sizeof log_path, "/tmp/%s.log", crash_domain());
    snprintf(log_env, sizeof log_env, "IPCSHIM_LOG_FILE=%s", log_path);
    unlink(log_path);
}

static void teardown(void)
{
    crash_cleanup();
    unlink(log_path);
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 60);

static struct child c;

static char *log_text(void)
{
    char *s = read_file(log_path);
    return s ? s : strdup("");
}

/* tests/e2e's pair, producer and one consumer, freeing after the consumer
 * closed: correct with or without tracking. */
static int pair(const char *const *extra, const char *free_when, const char *blocks,
                const char *consumers)
{
    char path[1024];
    const char *env[16] = {log_env};
    int n = 1;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        env[n++] = extra[i];
    env[n] = NULL;
    snprintf(path, sizeof path, "%s/pair-runtime", getenv("E2E_BIN_DIR"));
    return child_run(&c, path, true, env,
                     ARGS("--free", free_when, "--blocks", blocks, "--consumers", consumers,
                          "--reclaim-wait", "3000"),
                     30000);
}

static void expect_pair_ok(int status, int consumers)
{
    cr_expect_eq(status, 0, "status %d:\n%s", status, c.buf);
    for (int k = 0; k < consumers; k++) {
        char key[32];
        snprintf(key, sizeof key, "consumer %d: ok", k);
        cr_expect_eq(count_lines(c.buf, key), 1, "%s missing:\n%s", key, c.buf);
    }
    cr_expect_eq(count_lines(c.buf, "reclaimed: yes"), 1, "memory not back:\n%s", c.buf);
}

/* Each process logged `why` exactly once (lines carry "ipcshim[PID]"). */
static void expect_said_once(const char *why, int processes)
{
    char *log = log_text();
    int lines = count_lines(log, why);
    cr_expect_eq(lines, processes, "expected %d lines with \"%s\" (one per process), log:\n%s",
                 processes, why, log);
    free(log);
}

/* ---- segments --------------------------------------------------------- */

/* Creates this test's registry with small capacities and returns its size. */
static size_t make_segment(void)
{
    struct registry r;
    struct reg_caps caps = {8, 16, 32};
    cr_assert_eq(registry_open(&r, crash_domain(), &caps), 0);
    size_t size = r.size;
    registry_close(&r);
    return size;
}

static int seg_fd(void)
{
    int fd = open(crash_segment_path(), O_RDWR | O_NOFOLLOW);
    cr_assert(fd >= 0, "cannot open %s", crash_segment_path());
    return fd;
}

static void seg_write(off_t off, const void *p, size_t n)
{
    int fd = seg_fd();
    cr_assert_eq(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

static void seg_truncate(off_t size)
{
    int fd = seg_fd();
    cr_assert_eq(ftruncate(fd, size), 0);
    close(fd);
}

static void seg_random(off_t from, size_t n, unsigned seed)
{
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)rand_r(&seed);
    seg_write(from, b, n);
    free(b);
}

/* The segment's bytes, to check that a refused segment was not written. */
static char *seg_bytes(size_t *n)
{
    int fd = open(crash_segment_path(), O_RDONLY | O_NOFOLLOW);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return NULL;
    char *b = malloc((size_t)st.st_size + 1);
    *n = (size_t)pread(fd, b, (size_t)st.st_size, 0);
    close(fd);
    return b;
}

/* A refused segment: pair runs correctly untracked, each of its two
 * processes says why once, and the bytes are untouched. */
static void refused(const char *why)
{
    size_t before_n = 0, after_n = 0;
    char *before = seg_bytes(&before_n);
    expect_pair_ok(pair(NULL, "after-close", "2", "1"), 1);
    expect_said_once(why, 2);
    char *after = seg_bytes(&after_n);
    cr_expect(before && after && before_n == after_n && !memcmp(before, after, before_n),
              "a refused segment must not be written");
    free(before);
    free(after);
}

Test(hostile, segment_truncated_below_its_header)
{
    make_segment();
    seg_truncate(100);
    refused("was never initialised");
}

Test(hostile, segment_truncated_to_half)
{
    seg_truncate((off_t)make_segment() / 2);
    refused("the wrong size");
}

Test(hostile, segment_grown)
{
    seg_truncate((off_t)make_segment() * 2);
    refused("the wrong size");
}

Test(hostile, segment_of_another_magic)
{
    make_segment();
    uint64_t magic = 0x1122334455667788ull;
    seg_write(offsetof(struct reg_header, magic), &magic, sizeof magic);
    refused("bad magic");
}

Test(hostile, segment_of_another_abi_version)
{
    make_segment();
    uint32_t abi = REG_ABI + 1;
    seg_write(offsetof(struct reg_header, abi), &abi, sizeof abi);
    refused("a different ABI version");
}

Test(hostile, segment_with_absurd_capacities)
{
    make_segment();
    uint32_t huge = 0xffffffffu;
    seg_write(offsetof(struct reg_header, max_blocks), &huge, sizeof huge);
    refused("impossible capacities");
}

Test(hostile, segment_header_that_does_not_add_up)
{
    make_segment();
    uint64_t size = 4096;
    seg_write(offsetof(struct reg_header, size), &size, sizeof size);
    refused("does not add up");
}

Test(hostile, segment_with_a_foreign_lock_type)
{
    make_segment();
    uint8_t garbage[sizeof(pthread_mutex_t)];
    memset(garbage, 0x7b, sizeof garbage);
    seg_write(offsetof(struct reg_header, lock), garbage, sizeof garbage);
    refused("not a robust process-shared mutex");
}

Test(hostile, segment_of_random_bytes)
{
    size_t size = make_segment();
    seg_random(0, size, 42);
    refused("bad magic");
}

Test(hostile, segment_group_readable)
{
    make_segment();
    cr_assert_eq(chmod(crash_segment_path(), 0640), 0);
    refused("group/other access");
}

Test(hostile, segment_path_is_a_fifo)
{
    cr_assert_eq(mkfifo(crash_segment_path(), 0600), 0);
    expect_pair_ok(pair(NULL, "after-close", "2", "1"), 1);
    expect_said_once("not a regular file", 2);
}

/* Valid header and lock, random holders, blocks, leases and buckets: the
 * shim attaches, repairs what it trips on, and still protects. */
Test(hostile, segment_with_random_records_still_protects)
{
    size_t size = make_segment();
    seg_random(sizeof(struct reg_header), size - sizeof(struct reg_header), 7);
    expect_pair_ok(pair(NULL, "while-reading", "3", "2"), 2);
    expect_pair_ok(pair(NULL, "while-reading", "3", "2"), 2); /* and again on what that left */
}

/* A lock word naming a thread that does not exist (no robust-list cleanup
 * will ever release it): the shim gives up after about two seconds instead
 * of hanging, says why, and passes through. */
Test(hostile, lock_held_by_a_vanished_thread_never_hangs)
{
    make_segment();
    /* A holder of our own keeps the registry after the pair (the last one
     * out removes it), for the repair count below. */
    struct registry r;
    struct reg_caps caps = {8, 16, 32};
    cr_assert_eq(registry_open(&r, crash_domain(), &caps), 0);
    cr_assert_neq(reg_holder_claim(&r, 42), REG_NONE);
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, NULL, 0);
    int fd = seg_fd();
    struct reg_header *h = mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert(h != MAP_FAILED);
    h->lock.mutex.__data.__lock = gone; /* "locked by thread <gone>" */
    h->lock.mutex.__data.__owner = gone;
    munmap(h, sizeof *h);
    close(fd);
    expect_pair_ok(pair(NULL, "after-close", "2", "1"), 1);
    /* Repaired (like a dead owner's lock) by whichever process met it first. */
    char *log = log_text();
    cr_expect_geq(count_lines(log, "which is not a holder"), 1, "no repair logged:\n%s", log);
    cr_expect_eq(count_lines(log, "not tracking"), 0, "tracking was given up:\n%s", log);
    free(log);
    cr_expect_geq(r.hdr->repairs, 1, "the lock was not repaired");
    registry_close(&r);
}

/* ---- the path and the owner -------------------------------------------- */

Test(hostile, symlink_at_the_segment_path_is_not_followed)
{
    char victim[256];
    snprintf(victim, sizeof victim, "/tmp/%s-victim", crash_domain());
    FILE *f = fopen(victim, "w");
    cr_assert(f);
    fputs("precious", f);
    fclose(f);
    cr_assert_eq(symlink(victim, crash_segment_path()), 0);
    expect_pair_ok(pair(NULL, "after-close", "2", "1"), 1);
    expect_said_once("symbolic links", 2);
    char *text = read_file(victim);
    cr_expect_str_eq(text ? text : "", "precious", "the link's target was written");
    struct stat st;
    cr_expect_eq(lstat(crash_segment_path(), &st), 0);
    cr_expect(S_ISLNK(st.st_mode), "the link was replaced");
    free(text);
    unlink(victim);
}

/* Another user's file at our registry's name: the pair is protected anyway
 * under the next name ("~1"), each process says so once, and the squatter's
 * file is left as it was. */
static void squatted(uid_t uid)
{
    size_t before_n = 0, after_n = 0;
    char *before = seg_bytes(&before_n);
    expect_pair_ok(pair(NULL, "after-close", "2", "1"), 1);
    char why[64];
    snprintf(why, sizeof why, "is taken by uid %u", (unsigned)uid);
    expect_said_once(why, 2);
    char *log = log_text();
    cr_expect_eq(count_lines(log, "~1 instead"), 2, "not protected under ~1:\n%s", log);
    free(log);
    /* The pair's own registry under ~1 was removed by the last process out. */
    char alt[300];
    snprintf(alt, sizeof alt, "%s~1", crash_segment_path());
    struct stat st;
    cr_expect_neq(stat(alt, &st), 0, "%s was left behind", alt);
    after_n = 0;
    char *after = seg_bytes(&after_n);
    cr_expect(before && after && before_n == after_n && !memcmp(before, after, before_n),
              "the squatter's file must not be written");
    free(before);
    free(after);
}

static void nobody_ids(uid_t *uid, gid_t *gid)
{
    struct passwd *pw = getpwnam("nobody");
    *uid = pw ? pw->pw_uid : 65534;
    *gid = pw ? pw->pw_gid : 65534;
}

/* Another user squats our segment's name before we ever run (possible:
 * /dev/shm is world-writable). Created as that user, by a child that drops
 * to it. */
Test(hostile, segment_created_by_another_user_is_squatted)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to act as another user (the tests run as uid %u)",
                     (unsigned)geteuid());
    uid_t uid;
    gid_t gid;
    nobody_ids(&uid, &gid);
    char name[200];
    snprintf(name, sizeof name, "/ipcshim-%u-%s", (unsigned)geteuid(), crash_domain());
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) || setgid(gid) || setuid(uid)) _exit(1);
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0 || ftruncate(fd, 4096)) _exit(2);
        _exit(0);
    }
    int ws;
    waitpid(pid, &ws, 0);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
              "the child could not create the segment as uid %u", (unsigned)uid);
    squatted(uid);
}

/* A good segment of ours, handed to another user afterwards. */
Test(hostile, segment_chowned_to_another_user_is_squatted)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to chown to another user (the tests run as uid %u)",
                     (unsigned)geteuid());
    uid_t uid;
    gid_t gid;
    nobody_ids(&uid, &gid);
    make_segment();
    cr_assert_eq(chown(crash_segment_path(), uid, gid), 0);
    squatted(uid);
}

/* A bad IPCSHIM_DOMAIN is never a file name, and never turns protection
 * off: the default domain is used, said once (by the first process). */
Test(hostile, invalid_domain_names_are_refused)
{
    const char *bad[] = {
        "../escape", "a/b",
        "x y",       "semi;colon",
        "dollar$",   "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* 65 */};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char env[128];
        snprintf(env, sizeof env, "IPCSHIM_DOMAIN=%s", bad[i]);
        unlink(log_path);
        expect_pair_ok(pair(ENV(env), "while-reading", "1", "1"), 1);
        expect_said_once("using the default default", 1);
    }
    struct stat st;
    cr_expect_neq(stat("/dev/shm/escape", &st), 0);
}

/* ---- a full registry ------------------------------------------------- */

Test(hostile, full_registry_passes_new_exports_through_with_one_warning)
{
    expect_pair_ok(pair(ENV("IPCSHIM_MAX_BLOCKS=4"), "after-close", "8", "2"), 2);
    expect_said_once("is full", 1); /* the producer, once for its four untracked exports */
    /* and the tracked half was protected: the full registry is still sound */
    expect_pair_ok(pair(ENV("IPCSHIM_MAX_BLOCKS=4"), "while-reading", "4", "2"), 2);
}

/* ---- dead exporters ---------------------------------------------------- */

static struct child exporter, holder, opener;

static void start_exporter(char hex[129])
{
    char line[256];
    cr_assert_eq(
        child_spawn(&exporter, "misc", true, ENV(log_env, "IPCSHIM_LOG=info"), ARGS("export", "5")),
        0);
    cr_assert_eq(child_line(&exporter, line, sizeof line, 10000), 1, "%s", exporter.buf);
    cr_assert_eq(sscanf(line, "handle %128s", hex), 1, "%s", line);
    cr_assert_eq(child_line(&exporter, line, sizeof line, 10000), 1);
}

/* An exporter SIGKILLed with an importer still holding its block: the block
 * is orphaned, a new open fails with the driver's invalid-value error and a
 * log line saying why, the holder finishes, and the registry ends empty. */
Test(hostile, open_of_a_dead_exporters_block_fails_clearly)
{
    char hex[129], line[256];
    start_exporter(hex);
    cr_assert_eq(child_spawn(&holder, "misc", true, ENV(log_env), ARGS("open", "5", hex, "hold")),
                 0);
    while (child_line(&holder, line, sizeof line, 10000) == 1 && strcmp(line, "opened")) {
    }
    kill(exporter.pid, SIGKILL);
    cr_assert_eq(child_wait(&exporter, 10000), 128 + SIGKILL);

    child_run(&opener, "misc", true, ENV(log_env), ARGS("open", "5", hex), 20000);
    cr_expect_eq(count_lines(opener.buf, "open 1"), 1,
                 "the open must fail with cudaErrorInvalidValue:\n%s", opener.buf);
    char *log = log_text();
    cr_expect_geq(count_lines(log, "open refused"), 1, "no log line says why:\n%s", log);
    cr_expect_geq(count_lines(log, "died"), 1, "%s", log);
    free(log);

    child_send(&holder, "read");
    cr_expect_eq(child_wait(&holder, 20000), 0, "%s", holder.buf);
    cr_expect_eq(count_lines(holder.buf, "close 0"), 1, "the holder's close: %s", holder.buf);
    /* a fresh process sweeps; then nothing is left */
    child_run(&opener, "soak", true, NULL, ARGS("check", "1"), 20000);
    cr_expect_eq(count_lines(opener.buf, "child=ok"), 1, "%s", opener.buf);
    struct reg_counts n;
    cr_assert_eq(crash_registry_counts(&n, 0), 0);
    cr_expect_eq(n.holders + n.blocks + n.leases, 0,
                 "records left: %d holders, %d blocks, %d leases", n.holders, n.blocks, n.leases);
}

Test(hostile, open_after_the_exporter_died_with_nobody_holding)
{
    char hex[129];
    start_exporter(hex);
    kill(exporter.pid, SIGKILL);
    child_wait(&exporter, 10000);
    child_run(&opener, "misc", true, ENV(log_env), ARGS("open", "5", hex), 20000);
    cr_expect_eq(count_lines(opener.buf, "open 1"), 1, "%s", opener.buf);
    struct reg_counts n;
    cr_assert_eq(crash_registry_counts(&n, 0), 0);
    cr_expect_eq(n.blocks + n.leases, 0, "the dead exporter's block was recycled");
}

/* ---- wrong arguments --------------------------------------------------- */

/* Every line of a run without the shim and with it, except those named. */
static void same_answers(const char *without, const char *with, const char *except)
{
    const char *a = without, *b = with;
    while (a && *a && b && *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (!(except && !strncmp(a, except, strlen(except))))
            cr_expect(la == lb && !strncmp(a, b, la), "without the shim \"%.*s\", with it \"%.*s\"",
                      (int)la, a, (int)lb, b);
        a += la + (a[la] == '\n'), b += lb + (b[lb] == '\n');
    }
    cr_expect(!*a && !*b, "different numbers of lines:\n%s\n---\n%s", without, with);
}

Test(hostile, unknown_pointers_and_garbage_handles_get_the_drivers_answer)
{
    static struct child plain;
    cr_assert_eq(child_run(&plain, "misc", false, NULL, ARGS("unknown"), 20000), 0);
    cr_assert_eq(
        child_run(&c, "misc", true, ENV(log_env, "IPCSHIM_EXIT_WAIT=0"), ARGS("unknown"), 20000),
        0);
    /* free-exported-again: the block is in limbo behind its unclaimed
     * hand-off; the second free fails as the driver's would. */
    same_answers(plain.buf, c.buf, NULL);
    cr_expect_eq(count_lines(plain.buf, "open-random 0"), 0, "a garbage handle must not open:\n%s",
                 plain.buf);
}

Test(hostile, double_close_gets_the_drivers_answer)
{
    char hex[129];
    static struct child plain;
    start_exporter(hex);
    child_run(&plain, "misc", false, NULL, ARGS("open", "5", hex), 20000);
    child_run(&c, "misc", true, ENV(log_env), ARGS("open", "5", hex), 20000);
    same_answers(plain.buf, c.buf, NULL);
    cr_expect_eq(count_lines(c.buf, "data ok"), 1, "%s", c.buf);
    cr_expect_eq(count_lines(c.buf, "close 0"), 1, "%s", c.buf);
    cr_expect_eq(count_lines(c.buf, "close2 0"), 0, "a double close must fail:\n%s", c.buf);
    child_wait(&exporter, 20000);
}

/* ---- fork, exec, clone ------------------------------------------------- */

Test(hostile, fork_exec_child_imports_while_the_parent_frees)
{
    static struct child plain;
    child_run(&plain, "misc", false, NULL, ARGS("fork-exec", "11"), 20000);
    cr_expect_eq(count_lines(plain.buf, "child-data poison"), 1, "the control reads poison:\n%s",
                 plain.buf);
    cr_expect_eq(child_run(&c, "misc", true, ENV(log_env), ARGS("fork-exec", "11"), 20000), 0);
    cr_expect_eq(count_lines(c.buf, "child-data ok"), 1, "%s", c.buf);
    cr_expect_eq(count_lines(c.buf, "reclaimed yes"), 1, "%s", c.buf);
}

static void forking_importer(const char *how)
{
    static struct child plain;
    child_run(&plain, "misc", false, NULL, ARGS("fork-importer", "12", how), 20000);
    cr_expect_eq(count_lines(plain.buf, "child-data poison"), 1, "the control reads poison:\n%s",
                 plain.buf);
    cr_expect_eq(child_run(&c, "misc", true, ENV(log_env), ARGS("fork-importer", "12", how), 20000),
                 0);
    cr_expect_eq(count_lines(c.buf, "child-data ok"), 1,
                 "the child took the importer's lease away:\n%s", c.buf);
    cr_expect_eq(count_lines(c.buf, "reclaimed yes"), 1, "%s", c.buf);
}

Test(hostile, importers_fork_child_exiting_keeps_the_parents_lease)
{
    forking_importer("exit");
}
Test(hostile, importers_fork_child_closing_keeps_the_parents_lease)
{
    forking_importer("close");
}
Test(hostile, importers_raw_clone_child_closing_keeps_the_parents_lease)
{
    forking_importer("raw-close");
}

/* exec keeps the pid and the start time; the old image's holder must go
 * (its lock byte went with its descriptor) and not double the lease. */
Test(hostile, exec_reattaches_cleanly)
{
    char hex[129], line[256];
    start_exporter(hex);
    cr_assert_eq(child_spawn(&holder, "misc", true, ENV(log_env), ARGS("exec-open", "5", hex)), 0);
    int opens = 0;
    while (child_line(&holder, line, sizeof line, 10000) == 1 && strcmp(line, "opened"))
        opens += !strcmp(line, "open 0");
    cr_assert_eq(opens, 2, "both images opened: %s", holder.buf);
    struct reg_counts n;
    cr_assert_eq(crash_registry_counts(&n, holder.pid), 0);
    cr_expect_eq(n.holders, 1, "holders with the exec'd pid: %d", n.holders);
    cr_expect_eq(n.leases, 1, "leases with the exec'd pid: %d", n.leases);
    child_send(&exporter, "free");
    cr_assert_eq(child_line(&exporter, line, sizeof line, 10000), 1);
    cr_expect_str_eq(line, "freed 0");
    child_send(&holder, "read");
    cr_expect_eq(child_wait(&holder, 20000), 0);
    cr_expect_eq(count_lines(holder.buf, "data ok"), 1, "%s", holder.buf);
    cr_expect_eq(child_wait(&exporter, 20000), 0);
    cr_assert_eq(crash_registry_counts(&n, 0), 0);
    cr_expect_eq(n.holders + n.blocks + n.leases, 0, "records left after everyone exited");
}

/* An exporter that exits without freeing a block an importer still maps
 * (issue 11): its exit waits (IPCSHIM_EXIT_WAIT) until the importer closed,
 * so the importer reads its data, not what the driver puts in freed memory;
 * and it leaves as soon as the importer closed, not at the end of the wait. */
Test(hostile, exporter_exiting_without_free_waits_for_its_importer)
{
    char hex[129], line[256];
    cr_assert_eq(child_spawn(&exporter, "misc", true, ENV(log_env, "IPCSHIM_EXIT_WAIT=20s"),
                             ARGS("export", "6")),
                 0);
    cr_assert_eq(child_line(&exporter, line, sizeof line, 10000), 1, "%s", exporter.buf);
    cr_assert_eq(sscanf(line, "handle %128s", hex), 1, "%s", line);
    cr_assert_eq(child_line(&exporter, line, sizeof line, 10000), 1);
    cr_assert_eq(child_spawn(&holder, "misc", true, ENV(log_env), ARGS("open", "6", hex, "hold")),
                 0);
    while (child_line(&holder, line, sizeof line, 10000) == 1 && strcmp(line, "opened")) {
    }
    child_close_stdin(&exporter); /* the exporter leaves without freeing */
    usleep(700000);
    int ws;
    cr_expect_eq(waitpid(exporter.pid, &ws, WNOHANG), 0,
                 "the exporter did not wait for its importer");
    child_send(&holder, "read");
    cr_expect_eq(child_wait(&holder, 20000), 0, "%s", holder.buf);
    cr_expect_eq(count_lines(holder.buf, "data ok"), 1, "the importer read freed memory:\n%s",
                 holder.buf);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    child_wait(&exporter, 15000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    cr_expect_lt(waited, 10.0,
                 "the exporter waited out IPCSHIM_EXIT_WAIT after the last close (%.1f s)", waited);
}
