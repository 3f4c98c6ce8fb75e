/* test_fdpass: the fd hand-off without ptrace rights (shim/fdpass.c,
 * shim/pidfd.c), between two unrelated processes of an unprivileged user
 * (nobody), the exporter non-dumpable as in a default container: the
 * kernel's EPERM is real (each test asserts it without the shim first),
 * and with the shim the importer gets the fd and reads the exporter's
 * bytes. Old kernels are recreated with a seccomp filter (ENOSYS); hostile
 * peers with a second unprivileged uid and a client that speaks the wire
 * format itself. The same hand-off of VMM memory (cuMemCreate + cuMemMap,
 * as PyTorch's expandable segments share it) is recorded in the VMM
 * ledger: ipcshim-stat names the importer while it holds the allocation.
 * Needs root (to switch users); skips otherwise. */
#include "run.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOBODY 65534
#define OTHER 65533

static char machine[64], logpath[128];

static void setup(void)
{
    snprintf(machine, sizeof machine, "e2e-fdpass-%d", (int)getpid());
    snprintf(logpath, sizeof logpath, "/tmp/%s.log", machine);
}

static void teardown(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, machine)) {
            snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
    unlink(logpath);
}

TestSuite(fdpass, .init = setup, .fini = teardown, .timeout = 60);

struct proc {
    pid_t pid;
    int in, out; /* its stdin (ours to close), its stdout */
    char text[4096];
};

/* Start E2E_BIN_DIR/fdpass args as uid (root: 0), under the shim when shim,
 * with stderr appended to logpath. */
static void start(struct proc *p, uid_t uid, bool shim, const char *const *args)
{
    int in[2], out[2];
    cr_assert_eq(pipe(in), 0);
    cr_assert_eq(pipe(out), 0);
    char prog[1024], lib[1100], preload[1100], sim[128], dom[128];
    snprintf(prog, sizeof prog, "%s/fdpass", getenv("E2E_BIN_DIR"));
    snprintf(lib, sizeof lib, "LD_LIBRARY_PATH=%s", getenv("SIMCUDA_DIR"));
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", getenv("IPCSHIM_LIB"));
    snprintf(sim, sizeof sim, "SIMCUDA_MACHINE=%s", machine);
    snprintf(dom, sizeof dom, "IPCSHIM_DOMAIN=%s", machine);
    /* The sanitizers' settings pass on (an ASan build of the shim needs
     * verify_asan_link_order=0 to be preloaded into a plain program). */
    char asan[512], ubsan[512];
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s",
             getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "");
    snprintf(ubsan, sizeof ubsan, "UBSAN_OPTIONS=%s",
             getenv("UBSAN_OPTIONS") ? getenv("UBSAN_OPTIONS") : "");
    const char *env[] = {asan, ubsan, lib, sim, dom, "IPCSHIM_LOG=info", shim ? preload : NULL,
                         NULL};
    const char *argv[16] = {prog};
    for (int i = 0; args[i] && i < 14; i++)
        argv[i + 1] = args[i];
    p->pid = fork();
    cr_assert_geq(p->pid, 0);
    if (p->pid == 0) {
        int err = open(logpath, O_WRONLY | O_APPEND | O_CREAT, 0644);
        dup2(in[0], 0), dup2(out[1], 1), dup2(err, 2);
        close(in[1]), close(out[0]);
        if (uid && (setgroups(0, NULL) || setresgid(uid, uid, uid) || setresuid(uid, uid, uid)))
            _exit(99);
        execve(prog, (char *const *)argv, (char *const *)env);
        _exit(98);
    }
    close(in[0]), close(out[1]);
    p->in = in[1], p->out = out[0];
    p->text[0] = 0;
}

/* Read p's stdout until it has a line starting with key (or it ends, or
 * ms pass). */
static void read_until(struct proc *p, const char *key, int ms)
{
    size_t len = strlen(p->text);
    while (!strstr(p->text, key) && len < sizeof p->text - 1) {
        struct pollfd pf = {p->out, POLLIN, 0};
        if (poll(&pf, 1, ms) <= 0) break;
        ssize_t n = read(p->out, p->text + len, sizeof p->text - 1 - len);
        if (n <= 0) break;
        len += (size_t)n;
        p->text[len] = 0;
    }
}

/* The value after "key: " in p's output, into buf (empty when absent). */
static const char *field(const struct proc *p, const char *key, char *buf, size_t n)
{
    char tmp[256] = "";
    const char *at = strstr(p->text, key);
    if (at) sscanf(at + strlen(key), " %255[^\n]", tmp);
    snprintf(buf, n, "%s", tmp);
    return buf;
}

/* Wait for p (closing its stdin first); its exit status. */
static int finish(struct proc *p)
{
    close(p->in);
    read_until(p, "\x01", 20000); /* everything it prints */
    close(p->out);
    int ws;
    waitpid(p->pid, &ws, 0);
    fprintf(stderr, "---- pid %d:\n%s", (int)p->pid, p->text);
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* The exporter, as nobody under the shim; its pid, pool fd, plain file fd
 * and export data into the strings. */
struct exporter {
    struct proc p;
    char pid[16], fd[16], file[16], data[256];
};
static void start_exporter(struct exporter *x, const char *mode)
{
    start(&x->p, NOBODY, true, mode ? ARGS("export", mode) : ARGS("export"));
    read_until(&x->p, "data:", 10000);
    for (int i = 0;
         i < 50 && strstr(x->p.text, "data:") && !strchr(strstr(x->p.text, "data:"), '\n'); i++)
        read_until(&x->p, "\x01", 100);
    field(&x->p, "pid:", x->pid, sizeof x->pid);
    field(&x->p, "fd:", x->fd, sizeof x->fd);
    field(&x->p, "file:", x->file, sizeof x->file);
    field(&x->p, "data:", x->data, sizeof x->data);
    cr_assert(x->data[0], "the exporter did not start:\n%s", x->p.text);
}

/* Run an importer to its end; its status (its output in imp->text). */
static int import(struct proc *imp, uid_t uid, bool shim, const char *const *args)
{
    start(imp, uid, shim, args);
    close(imp->in);
    imp->in = open("/dev/null", O_RDONLY);
    return finish(imp);
}

/* Lines of the exporter's log that record a request to its fd server. */
static int server_requests(void)
{
    FILE *f = fopen(logpath, "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, "fdpass: request") != NULL;
    if (f) fclose(f);
    return n;
}

#define NEED_ROOT()                                                                                \
    do {                                                                                           \
        if (geteuid() != 0) cr_skip_test("needs root to run the two processes as other users");    \
    } while (0)

#define EXPECT(p, key, value)                                                                      \
    do {                                                                                           \
        char got_[256];                                                                            \
        cr_expect_str_eq(field((p), key, got_, sizeof got_), value, "%s %s (expected %s) in:\n%s", \
                         key, got_, value, (p)->text);                                             \
    } while (0)

/* The reported case: a non-dumpable exporter, an unrelated importer of the
 * same user, syscall(SYS_pidfd_getfd) as PyTorch calls it. */
Test(fdpass, non_dumpable_exporter_through_syscall)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, NULL);
    import(&imp, NOBODY, false, ARGS("import", x.pid, x.fd, "-"));
    EXPECT(&imp, "pidfd_open:", "ok");
    EXPECT(&imp, "getfd:", "EPERM"); /* the kernel's refusal is real */
    cr_expect_eq(import(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, x.data)), 0);
    EXPECT(&imp, "getfd:", "ok");
    EXPECT(&imp, "cloexec:", "yes");
    EXPECT(&imp, "read:", "ok");
    cr_expect_eq(finish(&x.p), 0);
    cr_expect_eq(server_requests(), 1);
}

/* The same through glibc's pidfd_open / pidfd_getfd wrappers. */
Test(fdpass, non_dumpable_exporter_through_libc)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, NULL);
    import(&imp, NOBODY, false, ARGS("import", x.pid, x.fd, "-", "--libc"));
    EXPECT(&imp, "getfd:", "EPERM");
    cr_expect_eq(import(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, x.data, "--libc")), 0);
    EXPECT(&imp, "getfd:", "ok");
    EXPECT(&imp, "read:", "ok");
    cr_expect_eq(finish(&x.p), 0);
}

/* An old kernel (pidfd_open and pidfd_getfd are ENOSYS, here by seccomp):
 * the shim's substitute pidfd and its socket still get the fd. */
Test(fdpass, kernel_without_pidfd)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, NULL);
    import(&imp, NOBODY, false, ARGS("import", x.pid, x.fd, "-", "--seccomp"));
    EXPECT(&imp, "pidfd_open:", "ENOSYS");
    import(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, x.data, "--seccomp"));
    EXPECT(&imp, "pidfd_open:", "ok");
    EXPECT(&imp, "getfd:", "ok");
    EXPECT(&imp, "read:", "ok");
    import(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, x.data, "--seccomp", "--libc"));
    EXPECT(&imp, "getfd:", "ok");
    /* No substitute for a process without a server (this test's own). */
    char self[16];
    snprintf(self, sizeof self, "%d", (int)getpid());
    import(&imp, NOBODY, true, ARGS("import", self, "0", "-", "--seccomp"));
    EXPECT(&imp, "pidfd_open:", "ENOSYS");
    cr_expect_eq(finish(&x.p), 0);
}

/* Fds the exporter never exported: a regular file it has open, a number
 * it never opened. The kernel's errno, no fd, and the server was asked. */
Test(fdpass, fds_never_exported)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, NULL);
    import(&imp, NOBODY, false, ARGS("import", x.pid, x.file, "-"));
    EXPECT(&imp, "getfd:", "EPERM");
    import(&imp, NOBODY, true, ARGS("import", x.pid, x.file, "-"));
    EXPECT(&imp, "getfd:", "EPERM");
    import(&imp, NOBODY, true, ARGS("import", x.pid, "977", "-"));
    EXPECT(&imp, "getfd:", "EPERM");
    cr_expect_eq(finish(&x.p), 0);
    cr_expect_eq(server_requests(), 2);
}

/* A peer of another user: the importer gets the kernel's EPERM; a client
 * that connects to the server's socket itself is refused by SO_PEERCRED,
 * while the same client as the exporter's user is served (the control). */
Test(fdpass, peer_of_another_user)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    char uid[16];
    snprintf(uid, sizeof uid, "%d", NOBODY);
    start_exporter(&x, NULL);
    import(&imp, OTHER, true, ARGS("import", x.pid, x.fd, "-"));
    EXPECT(&imp, "getfd:", "EPERM");
    import(&imp, OTHER, false, ARGS("raw", uid, x.pid, x.fd));
    EXPECT(&imp, "raw:", "reply EPERM fds 0");
    import(&imp, NOBODY, false, ARGS("raw", uid, x.pid, x.fd));
    EXPECT(&imp, "raw:", "reply 0 fds 1");
    cr_expect_eq(finish(&x.p), 0);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* An exporter that stops answering (SIGSTOP), and one that dies while the
 * request is in flight: the kernel's errno, within the socket timeouts. */
Test(fdpass, exporter_stops_or_dies_mid_request)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, NULL);
    kill(x.p.pid, SIGSTOP);
    /* kill() returns before every thread has stopped: the server thread
     * could still answer. The parent hears of the stop once the whole
     * group has stopped. */
    int stopped;
    cr_assert_eq(waitpid(x.p.pid, &stopped, WUNTRACED), x.p.pid);
    cr_assert(WIFSTOPPED(stopped));
    double t0 = now_ms();
    import(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, "-"));
    EXPECT(&imp, "getfd:", "EPERM");
    cr_expect_lt(now_ms() - t0, 5000, "a stopped server held the importer %.0f ms", now_ms() - t0);

    start(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, "-"));
    usleep(300 * 1000);
    kill(x.p.pid, SIGKILL);
    t0 = now_ms();
    finish(&imp);
    EXPECT(&imp, "getfd:", "EPERM");
    cr_expect_lt(now_ms() - t0, 5000);
    cr_expect_eq(finish(&x.p), 128 + SIGKILL);
}

/* Where the kernel call works (an importer with CAP_SYS_PTRACE), nothing
 * changes: the fd comes from the kernel and the server is never asked. */
Test(fdpass, kernel_call_that_works_is_untouched)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, NULL);
    import(&imp, 0, true, ARGS("import", x.pid, x.fd, "-"));
    EXPECT(&imp, "getfd:", "ok");
    import(&imp, 0, true, ARGS("import", x.pid, x.fd, "-", "--libc"));
    EXPECT(&imp, "getfd:", "ok");
    cr_expect_eq(finish(&x.p), 0);
    cr_expect_eq(server_requests(), 0);
}

/* ipcshim-stat --json of this test's domain, run as nobody (the registry is
 * per user); its output into text. */
static void stat_json(char *text, size_t n)
{
    char path[160], prog[1024];
    snprintf(path, sizeof path, "/tmp/%s.json", machine);
    snprintf(prog, sizeof prog, "%s/scripts/ipcshim-stat", getenv("BUILD_ROOT"));
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || dup2(out, 1) < 0 || setgroups(0, NULL) ||
            setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY))
            _exit(99);
        execl(prog, "ipcshim-stat", "--domain", machine, "--json", (char *)NULL);
        _exit(98);
    }
    int ws;
    waitpid(pid, &ws, 0);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "ipcshim-stat failed (%#x)", ws);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(text, 1, n - 1, f) : 0;
    text[got] = 0;
    if (f) fclose(f);
    unlink(path);
}

/* True when some block's importers list (before its closing bracket)
 * holds who. */
static bool importer_named(const char *json, const char *who)
{
    for (const char *at = strstr(json, "\"importers\":["); at;
         at = strstr(at + 1, "\"importers\":[")) {
        const char *end = strchr(at, ']'), *hit = strstr(at, who);
        if (hit && end && hit < end) return true;
    }
    return false;
}

/* The done-when of issue 29: an unprivileged, non-dumpable exporter of VMM
 * memory (cuMemCreate + cuMemMap + cuMemExportToShareableHandle) and an
 * unrelated importer of the same user that takes the fd as PyTorch does
 * (syscall(SYS_pidfd_getfd): EPERM without the shim), imports, maps, sets
 * access and reads the exporter's bytes; while it holds the allocation
 * ipcshim-stat --json names it on a record of kind vmm, and after its
 * release the lease is gone. */
Test(fdpass, vmm_memory_reaches_the_importer_and_the_ledger_names_it)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    static char json[65536];
    char who[64];
    start_exporter(&x, "--vmm");
    import(&imp, NOBODY, false, ARGS("import", x.pid, x.fd, "-"));
    EXPECT(&imp, "getfd:", "EPERM"); /* the kernel's refusal is real */
    start(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, "vmm"));
    read_until(&imp, "held:", 10000);
    EXPECT(&imp, "getfd:", "ok");
    EXPECT(&imp, "read:", "ok");
    snprintf(who, sizeof who, "\"pid\":%d,", (int)imp.pid);
    stat_json(json, sizeof json);
    cr_expect(strstr(json, "\"kind\":\"vmm\""), "no vmm record in:\n%s", json);
    cr_expect(importer_named(json, who), "importer %d not named in:\n%s", (int)imp.pid, json);
    cr_assert_eq(write(imp.in, "r", 1), 1);
    read_until(&imp, "released:", 10000);
    EXPECT(&imp, "released:", "yes");
    stat_json(json, sizeof json);
    cr_expect(!importer_named(json, who), "importer %d still named after its release:\n%s",
              (int)imp.pid, json);
    cr_expect_eq(finish(&imp), 0);
    cr_expect_eq(finish(&x.p), 0);
}

/* An importer of such memory that exits without releasing it: the exit
 * report says so once, with the call site of the import. */
Test(fdpass, vmm_import_never_released_is_reported_once)
{
    NEED_ROOT();
    struct exporter x;
    struct proc imp;
    start_exporter(&x, "--vmm");
    cr_expect_eq(import(&imp, NOBODY, true, ARGS("import", x.pid, x.fd, "vmm", "--leak")), 0);
    EXPECT(&imp, "read:", "ok");
    cr_expect_eq(finish(&x.p), 0);
    FILE *f = fopen(logpath, "r");
    char line[1024];
    int reports = 0, others = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "VMM allocation(s) imported and never released") &&
            strstr(line, "the first from fdpass"))
            reports++;
        others += strstr(line, "never closed") != NULL;
    }
    if (f) fclose(f);
    cr_expect_eq(reports, 1, "the import's report, with its call site");
    cr_expect_eq(others, 0, "reported twice (as a mapping never closed)");
}
