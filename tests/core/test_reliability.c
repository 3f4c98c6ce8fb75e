/* reliability: the core under hostile and unlucky conditions (issue 11).
 * Each test names the finding it pins down and fails without its fix:
 *   - the program closes or replaces the shim's descriptor (closefrom, dup2):
 *     a live importer must not be judged dead, and our own lock byte must
 *     survive;
 *   - another user squats the registry's name; the registry directory;
 *   - the registry's file system is full, to its last byte, at creation,
 *     growth and attach (no SIGBUS, a clean refusal: issue 27);
 *   - a process stopped inside the registry lock, and a lock word naming a
 *     live thread that is no holder (bounded waits, repair);
 *   - a program exporting handles nobody opens (fair share of the table);
 *   - exit: waits for what importers map, not for unclaimed hand-offs, and
 *     releases importers' slots too;
 *   - ipcshim-stat's snapshot uses the library's one validator.
 * The test process is the exporter; importers are fork() children driven
 * through a pipe (helpers.h). Measured waits are printed for
 * docs/crash-safety.md, never asserted tightly. */
#include "helpers.h"
#include "inspect.h"
#include "ipcshim.h"
#include "liveness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pwd.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#define BASE 0x20000000ull
#define CTX 0xc0ull

static char log_path[128];

/* The library's last destructor, registered by its host (shim/init.c):
 * an import-only child releases its slot through it at exit
 * (import_only_process_releases_its_slot_at_exit). */
__attribute__((destructor(101))) static void unload_at_exit(void)
{
    ipc_unload();
}

static void setup(void)
{
    test_domain_setup("rel");
    test_option("COLLECTOR", "0");
    test_option("MAX_BLOCKS", "256");
    test_option("MAX_HOLDERS", "16");
    test_option("MAX_LEASES", "512");
    snprintf(log_path, sizeof log_path, "/tmp/rel-%d.log", (int)getpid());
    unlink(log_path);
    test_option("LOG_FILE", log_path);
    test_option("LOG", "warn");
    ipc_init(&fake_ops);
}

static void teardown(void)
{
    registry_unlink(test_domain);
    unlink(log_path);
}

TestSuite(reliability, .init = setup, .fini = teardown, .timeout = 30);

static char *log_text(void)
{
    FILE *f = fopen(log_path, "r");
    char *buf = calloc(1, 1 << 20);
    if (f) {
        size_t n = fread(buf, 1, (1 << 20) - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    return buf;
}

static int count_in(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* ---- an importer child ---- */

enum { IMP_OPEN = 1, IMP_CLOSE, IMP_EXIT, IMP_CLOSE_FDS, IMP_NORMAL_EXIT };

struct imp {
    pid_t pid;
    struct chan c;
};

static void imp_loop(struct chan *c, struct ipc_handle h)
{
    for (;;) {
        uint64_t cmd = CHILD_RECV(c), arg = CHILD_RECV(c);
        uint64_t r = 0, v = 0;
        if (cmd == IMP_OPEN) {
            struct ipc_open t;
            uint64_t ptr = 0;
            int rc = ipc_open_begin(&h, arg, &t, &ptr);
            if (rc == IPC_REAL) {
                ptr = 0x7000000000ull + (arg << 20);
                ipc_open_commit(&t, ptr);
            }
            r = (uint64_t)(int64_t)rc, v = ptr;
        } else if (cmd == IMP_CLOSE) {
            struct ipc_close t;
            int rc = ipc_close_begin(arg, &t);
            if (rc == IPC_REAL) ipc_close_finish(&t);
            r = (uint64_t)(int64_t)rc;
        } else if (cmd == IMP_CLOSE_FDS) {
            /* closefrom(3), sparing the pipe to the parent. */
            for (int fd = 3; fd < 1024; fd++)
                if (fd != c->to_child[0] && fd != c->to_parent[1]) close(fd);
        } else if (cmd == IMP_NORMAL_EXIT) {
            exit(0); /* destructors run: the shim's exit path */
        } else {
            _exit(0);
        }
        CHILD_SEND(c, r);
        CHILD_SEND(c, v);
    }
}

static void imp_start(struct imp *im, struct ipc_handle h)
{
    chan_open(&im->c);
    im->pid = fork();
    cr_assert_geq(im->pid, 0);
    if (im->pid == 0) {
        chan_child(&im->c);
        imp_loop(&im->c, h);
    }
    chan_parent(&im->c);
}

static int imp_cmd(struct imp *im, uint64_t cmd, uint64_t arg, uint64_t *out)
{
    PARENT_SEND(&im->c, cmd);
    PARENT_SEND(&im->c, arg);
    int r = (int)(int64_t)PARENT_RECV(&im->c);
    uint64_t v = PARENT_RECV(&im->c);
    if (out) *out = v;
    return r;
}

static void imp_stop(struct imp *im)
{
    PARENT_SEND(&im->c, IMP_EXIT);
    PARENT_SEND(&im->c, 0);
    child_wait(im->pid);
}

static uint32_t slot_of(struct registry *v, pid_t pid)
{
    for (uint32_t i = 0; i < v->max_holders; i++)
        if (v->holders[i].state == HOLDER_ACTIVE && v->holders[i].pid == pid) return i;
    return REG_NONE;
}

/* This process's descriptor on the registry, found as a closefrom() would. */
static int registry_fd_number(void)
{
    char path[256], name[128], link[300], target[300];
    cr_assert_eq(registry_locate(test_domain, path, sizeof path, name, sizeof name), 0);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int found = -1;
    while (d && (e = readdir(d))) {
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        if (!strcmp(target, path)) found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

static double ms_since(uint64_t t0)
{
    return (test_now_ns() - t0) / 1e6;
}

/* ---- finding 2: the program reuses the shim's descriptor ---- */

/* An exporter whose descriptor was closed and reused by the program (or
 * dup2'd over): its collect must still see the live importer. */
static void descriptor_reused(bool use_dup2)
{
    struct ipc_handle h = make_handle(1);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct imp im;
    imp_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(imp_cmd(&im, IMP_OPEN, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    int fd = registry_fd_number();
    cr_assert_geq(fd, 0, "no descriptor on the registry");
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/rel-other-%d", (int)getpid());
    int other = open(tmp, O_CREAT | O_RDWR, 0600);
    cr_assert_geq(other, 0);
    if (use_dup2) {
        cr_assert_eq(dup2(other, fd), fd);
        close(other);
    } else {
        close(other);
        close(fd); /* closefrom-style: a descriptor the program does not own */
        int again = open(tmp, O_RDWR);
        cr_assert_eq(again, fd, "the program's file did not get the shim's number");
    }
    ipc_collect();
    cr_expect_eq(fake_free_count(), 0, "a live importer was judged dead: block freed under it");
    /* The program's file is untouched and still open at that number. */
    struct stat a, b;
    cr_assert_eq(fstat(fd, &a), 0);
    cr_assert_eq(stat(tmp, &b), 0);
    cr_expect(a.st_ino == b.st_ino, "the shim closed or replaced the program's descriptor");
    cr_expect_eq(b.st_size, 0, "the program's file was written");
    /* We still look alive to others: our lock byte was kept. */
    struct registry v;
    open_view(&v);
    uint32_t me = slot_of(&v, getpid());
    cr_assert_neq(me, REG_NONE);
    cr_expect(reg_holder_alive(&v, me), "this process looks dead to the others");
    cr_assert_eq(imp_cmd(&im, IMP_CLOSE, ptr, NULL), IPC_REAL);
    ipc_collect();
    cr_expect_eq(fake_free_count(), 1, "not freed after the last close");
    char *log = log_text();
    cr_expect_eq(count_in(log, "closed or replaced the shim's descriptor"), 1, "log:\n%s", log);
    free(log);
    imp_stop(&im);
    registry_close(&v);
    close(fd);
    unlink(tmp);
}

Test(reliability, closed_and_reused_descriptor_keeps_a_live_importer_alive)
{
    descriptor_reused(false);
}

Test(reliability, dup2_over_the_descriptor_keeps_a_live_importer_alive)
{
    descriptor_reused(true);
}

/* A fork child's descriptor is its own description (its own lock byte):
 * closing every descriptor it has must not make it look dead. */
Test(reliability, importer_closing_all_descriptors_stays_alive)
{
    struct ipc_handle h = make_handle(2);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct imp im;
    imp_start(&im, h); /* after the attach: the child re-opens the registry */
    uint64_t ptr;
    cr_assert_eq(imp_cmd(&im, IMP_OPEN, 1, &ptr), IPC_REAL);
    cr_assert_eq(imp_cmd(&im, IMP_CLOSE_FDS, 0, NULL), 0);
    struct registry v;
    open_view(&v);
    uint32_t slot = slot_of(&v, im.pid);
    cr_assert_neq(slot, REG_NONE);
    cr_expect(liveness_byte_locked(v.fd, v.lock_base + slot),
              "the importer's lock byte went with its descriptor");
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    ipc_collect();
    cr_expect_eq(fake_free_count(), 0, "freed under a live importer");
    cr_assert_eq(imp_cmd(&im, IMP_CLOSE, ptr, NULL), IPC_REAL);
    ipc_collect();
    cr_expect_eq(fake_free_count(), 1);
    imp_stop(&im);
    registry_close(&v);
}

/* ---- finding 3: where the registry lives ---- */

Test(reliability, registry_dir_holds_the_registry_and_stat_finds_it)
{
    char dir[64], path[256], name[256];
    snprintf(dir, sizeof dir, "/tmp/rel-dir-%d", (int)getpid());
    cr_assert_eq(mkdir(dir, 0700), 0);
    setenv("IPCSHIM_REGISTRY_DIR", dir, 1);
    options_reload();
    struct ipc_handle h = make_handle(3);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    cr_assert_eq(registry_locate(test_domain, path, sizeof path, name, sizeof name), 0);
    cr_expect_eq(strncmp(path, dir, strlen(dir)), 0, "registry at %s", path);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600);
    struct inspect_snapshot s;
    char why[256];
    cr_assert_eq(inspect_snapshot(test_domain, &s, why, sizeof why), 0, "%s", why);
    cr_expect_eq(s.nblocks, 1);
    inspect_free(&s);
    ipc_shutdown();
    registry_unlink(test_domain);
    rmdir(dir);
}

Test(reliability, squatted_name_is_replaced_and_stat_follows)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to make a file another user's (uid %u)", (unsigned)geteuid());
    struct passwd *pw = getpwnam("nobody");
    uid_t nobody = pw ? pw->pw_uid : 65534;
    char path[256], name[256];
    cr_assert_eq(registry_candidate(test_domain, 0, path, sizeof path, name, sizeof name), 0);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0644);
    cr_assert_geq(fd, 0);
    cr_assert_eq(fchown(fd, nobody, nobody), 0);
    close(fd);
    struct ipc_handle h = make_handle(4);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0, "not protected under another name");
    char found[256], fname[256];
    cr_assert_eq(registry_locate(test_domain, found, sizeof found, fname, sizeof fname), 0);
    cr_expect_str_eq(strrchr(found, '~') ? strrchr(found, '~') : "", "~1");
    struct inspect_snapshot s;
    char why[256];
    cr_assert_eq(inspect_snapshot(test_domain, &s, why, sizeof why), 0, "%s", why);
    cr_expect_eq(s.nblocks, 1);
    inspect_free(&s);
    char *log = log_text();
    cr_expect_eq(count_in(log, "is taken by uid"), 1, "log:\n%s", log);
    free(log);
    ipc_shutdown();
    unlink(path);
}

/* ---- finding 4: a full file system ---- */

static int reserve_enospc(int fd, off_t offset, off_t len)
{
    (void)fd, (void)offset, (void)len;
    return ENOSPC;
}

Test(reliability, no_space_for_the_registry_refuses_cleanly_through_the_seam)
{
    registry_reserve = reserve_enospc;
    struct ipc_handle h = make_handle(5);
    cr_expect_eq(ipc_export(&h, BASE, 4096, 0, CTX), -ENODEV);
    cr_expect_eq(ipc_free(BASE), IPC_PASS, "an untracked export frees for real");
    char path[256], name[256];
    cr_expect_eq(registry_locate(test_domain, path, sizeof path, name, sizeof name), -ENOENT,
                 "a registry without space was left behind");
    char *log = log_text();
    cr_expect_eq(count_in(log, "no space for it"), 1, "log:\n%s", log);
    free(log);
}

/* A real tiny tmpfs in a private mount namespace (root only): without the
 * reservation the creator dies of SIGBUS writing the free lists. */
Test(reliability, full_tmpfs_refuses_cleanly_without_sigbus)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/rel-tiny-%d", (int)getpid());
    cr_assert_eq(mkdir(dir, 0700), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0) _exit(70);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(71);
        if (mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700") != 0) _exit(72);
        setenv("IPCSHIM_REGISTRY_DIR", dir, 1);
        test_option("MAX_BLOCKS", "16384"); /* 2.6 MB: far more than 64 KiB */
        struct ipc_handle h = make_handle(6);
        int rc = ipc_export(&h, BASE, 4096, 0, CTX);
        _exit(rc == -ENODEV ? 0 : 1);
    }
    int status = child_wait(pid);
    rmdir(dir);
    if (status >= 70 && status <= 72)
        cr_skip_test("cannot mount a small tmpfs here (step %d: needs root and mount namespaces)",
                     status - 70);
    cr_expect_neq(status, 128 + SIGBUS, "killed by SIGBUS: the registry was mapped sparse");
    cr_expect_eq(status, 0, "status %d", status);
    char *log = log_text();
    cr_expect_eq(count_in(log, "no space for it"), 1, "log:\n%s", log);
    free(log);
}

/* ---- issue 27: a tmpfs full to its last byte ---- */

/* Fills dir's file system to its last byte: a filler file written in large
 * pieces until ENOSPC, then a byte at a time until ENOSPC (the rest of its
 * last page), then a byte in a new file (a page of its own). 0 when
 * nothing is left, else -1. */
static int fill_to_last_byte(const char *dir)
{
    static char buf[1 << 16];
    static int files;
    char path[160];
    snprintf(path, sizeof path, "%s/filler-%d", dir, files++);
    int fd = open(path, O_CREAT | O_WRONLY | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    ssize_t n;
    while ((n = write(fd, buf, sizeof buf)) > 0) {
    }
    int e1 = errno;
    while ((n = write(fd, buf, 1)) > 0) {
    }
    int e2 = errno;
    close(fd);
    snprintf(path, sizeof path, "%s/filler-%d", dir, files++);
    fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    n = write(fd, buf, 1);
    int e3 = errno;
    close(fd);
    struct statvfs vs;
    if (e1 != ENOSPC || e2 != ENOSPC || n != -1 || e3 != ENOSPC || statvfs(dir, &vs) != 0 ||
        vs.f_bavail != 0)
        return -1;
    return 0;
}

enum { TMPFS_UNSHARE = 70, TMPFS_PRIVATE, TMPFS_MOUNT, TMPFS_NOT_FULL };

/* Runs body(dir) in a child, in a private mount namespace where dir is a
 * fresh tmpfs of `size` that holds the registry (root only: skips the test
 * otherwise). The child's exit status (128 + signal when killed). */
static int in_private_tmpfs(const char *size, int (*body)(const char *dir))
{
    char dir[64], opts[64];
    snprintf(dir, sizeof dir, "/tmp/rel-full-%d", (int)getpid());
    snprintf(opts, sizeof opts, "size=%s,mode=0700", size);
    cr_assert_eq(mkdir(dir, 0700), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0) _exit(TMPFS_UNSHARE);
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) _exit(TMPFS_PRIVATE);
        if (mount("tmpfs", dir, "tmpfs", 0, opts) != 0) _exit(TMPFS_MOUNT);
        test_option("REGISTRY_DIR", dir);
        _exit(body(dir));
    }
    int status = child_wait(pid);
    rmdir(dir);
    if (status >= TMPFS_UNSHARE && status <= TMPFS_MOUNT)
        cr_skip_test("cannot mount a private tmpfs here (step %d: needs root and mount namespaces)",
                     status - TMPFS_UNSHARE);
    cr_expect_neq(status, TMPFS_NOT_FULL, "could not fill the tmpfs to its last byte");
    return status;
}

/* A process forked before the registry exists, to attach to it later: it
 * waits for a byte on a pipe, opens handle `seed` through the ipc core and
 * exits 0 when the open's result is `expect`. */
struct attacher {
    pid_t pid;
    int go;
};

static void attacher_start(struct attacher *a, unsigned seed, int expect)
{
    int p[2];
    if (pipe(p) != 0) _exit(90);
    a->pid = fork();
    if (a->pid == 0) {
        close(p[1]);
        char c;
        if (read(p[0], &c, 1) != 1) _exit(91);
        struct ipc_handle h = make_handle(seed);
        struct ipc_open t;
        uint64_t ptr = 0;
        int rc = ipc_open_begin(&h, CTX, &t, &ptr);
        if (rc == IPC_REAL) ipc_open_commit(&t, 0x7000000000ull);
        _exit(rc == expect ? 0 : 92);
    }
    close(p[0]);
    a->go = p[1];
}

/* Lets it attach; its exit status (128 + signal when killed). */
static int attacher_run(struct attacher *a)
{
    if (write(a->go, "g", 1) != 1) return 93;
    close(a->go);
    return child_wait(a->pid);
}

/* (1) Not one free byte before the first export: create() must reserve
 * every page before its first touch, the header's included (it used to
 * read the header through a mapping first, and died of SIGBUS). */
static int first_export_on_a_full_tmpfs(const char *dir)
{
    test_option("MAX_BLOCKS", "16384");
    if (fill_to_last_byte(dir) != 0) return TMPFS_NOT_FULL;
    struct ipc_handle h = make_handle(20);
    if (ipc_export(&h, BASE, 4096, 0, CTX) != -ENODEV) return 1;
    if (ipc_free(BASE) != IPC_PASS) return 2; /* untracked: freed for real */
    char path[256], name[256];
    if (registry_locate(test_domain, path, sizeof path, name, sizeof name) != -ENOENT) return 3;
    return 0;
}

Test(reliability, tmpfs_full_to_the_last_byte_refuses_the_first_export_cleanly)
{
    int status = in_private_tmpfs("1m", first_export_on_a_full_tmpfs);
    cr_expect_neq(status, 128 + SIGBUS, "killed by SIGBUS: a page was touched before reserving");
    cr_expect_eq(status, 0, "status %d", status);
    char *log = log_text();
    cr_expect_eq(count_in(log, "no space for it"), 1, "log:\n%s", log);
    free(log);
}

/* (2) Created with room, then not one byte left: the block table and the
 * lease chunks cannot grow, and say so; exports beyond the table are not
 * tracked, opens beyond the leases pass through; nothing dies. */
static int growth_on_a_full_tmpfs(const char *dir)
{
    test_option("MAX_BLOCKS", "4096");  /* starts at 1024 in use */
    test_option("MAX_LEASES", "65536"); /* 32 chunks of 32 in use */
    struct ipc_handle h = make_handle(100);
    if (ipc_export(&h, BASE, 4096, 0, CTX) != 0) return 1;
    if (fill_to_last_byte(dir) != 0) return TMPFS_NOT_FULL;
    unsigned tracked = 1, untracked = 0;
    for (unsigned i = 1; i < 1100; i++) {
        h = make_handle(100 + i);
        int rc = ipc_export(&h, BASE + i * 0x10000ull, 4096, 0, CTX);
        if (rc == 0)
            tracked++;
        else if (rc == -ENOSPC)
            untracked++;
        else
            return 2;
    }
    if (tracked != 1024 || untracked != 1100 - 1024) return 3;
    if (fill_to_last_byte(dir) != 0) return TMPFS_NOT_FULL;
    /* An importer opens every tracked block: all 32 chunks in use, the
     * growth tried on the way (one of the last quarter) is refused. */
    int done[2], hold[2];
    if (pipe(done) != 0 || pipe(hold) != 0) return 4;
    pid_t a = fork();
    if (a == 0) {
        close(done[0]), close(hold[1]);
        unsigned real = 0;
        for (unsigned i = 0; i < 1024; i++) {
            struct ipc_handle hi = make_handle(100 + i);
            struct ipc_open t;
            uint64_t ptr;
            if (ipc_open_begin(&hi, CTX, &t, &ptr) == IPC_REAL) {
                ipc_open_commit(&t, 0x7000000000ull + ((uint64_t)i << 20));
                real++;
            }
        }
        char verdict = real == 1024 ? 0 : 1;
        if (write(done[1], &verdict, 1) != 1) _exit(1);
        char c;
        (void)!read(hold[0], &c, 1); /* alive, holding, until told */
        _exit(0);
    }
    close(done[1]), close(hold[0]);
    char verdict = 9;
    if (read(done[0], &verdict, 1) != 1) verdict = 8;
    /* A second importer finds no lease slot and no room to grow. */
    pid_t b = fork();
    if (b == 0) {
        struct ipc_open t;
        uint64_t ptr;
        h = make_handle(100);
        _exit(ipc_open_begin(&h, CTX, &t, &ptr) == IPC_PASS ? 0 : 1);
    }
    int sb = child_wait(b);
    close(hold[1]);
    int sa = child_wait(a);
    if (sa >= 128) return sa; /* the signal that killed it */
    if (sb >= 128) return sb;
    if (sa || verdict) return 5;
    if (sb) return 6;
    return 0;
}

Test(reliability, tmpfs_full_to_the_last_byte_refuses_growth_cleanly, .timeout = 60)
{
    int status = in_private_tmpfs("1m", growth_on_a_full_tmpfs);
    cr_expect_neq(status, 128 + SIGBUS, "killed by SIGBUS: a page was touched before reserving");
    cr_expect_eq(status, 0, "status %d", status);
    char *log = log_text();
    cr_expect_eq(count_in(log, "cannot grow past 1024 blocks"), 1, "log:\n%s", log);
    /* Once in each importer: the first at its claim of a chunk of the
     * last quarter, the second when none is left. */
    cr_expect_eq(count_in(log, "cannot grow past 1024 leases"), 2, "log:\n%s", log);
    cr_expect_eq(count_in(log, "has no free lease"), 1, "log:\n%s", log);
    free(log);
}

/* (3) Another process attaches while not one byte is left: what is in use
 * was reserved by its creator, so the attach works. A file with holes
 * where it claims records (not made by us) is refused by the attacher
 * (it cannot reserve them), not mapped and touched. */
static int attach_on_a_full_tmpfs(const char *dir)
{
    struct attacher works, refused;
    attacher_start(&works, 30, IPC_REAL);
    attacher_start(&refused, 30, IPC_PASS);
    struct ipc_handle h = make_handle(30);
    if (ipc_export(&h, BASE, 4096, 0, CTX) != 0) return 1;
    if (fill_to_last_byte(dir) != 0) return TMPFS_NOT_FULL;
    int s = attacher_run(&works);
    if (s) return s >= 128 ? s : 10 + s % 10;
    /* Holes from the block records on (the pages go back to the tmpfs,
     * which is filled again): no process of ours may touch them now. */
    char path[256], name[256];
    if (registry_locate(test_domain, path, sizeof path, name, sizeof name) != 0) return 2;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct reg_caps caps;
    struct reg_layout l;
    char why[160];
    if (fd < 0 || registry_validate(fd, &caps, &l, why, sizeof why) != 0) return 3;
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)l.blocks,
                  (off_t)(l.size - l.blocks)) != 0)
        return 4;
    close(fd);
    if (fill_to_last_byte(dir) != 0) return TMPFS_NOT_FULL;
    s = attacher_run(&refused);
    if (s) return s >= 128 ? s : 20 + s % 10;
    return 0; /* _exit: this process must not touch the holes either */
}

Test(reliability, tmpfs_full_to_the_last_byte_lets_others_attach)
{
    int status = in_private_tmpfs("1m", attach_on_a_full_tmpfs);
    cr_expect_neq(status, 128 + SIGBUS, "killed by SIGBUS: a page was touched before reserving");
    cr_expect_eq(status, 0, "status %d", status);
    char *log = log_text();
    cr_expect_eq(count_in(log, "cannot reserve the pages it has in use"), 1, "log:\n%s", log);
    free(log);
}

/* A registry file still all holes (its creator between creating and
 * reserving it, or dead there) on a full tmpfs: the attacher and
 * ipcshim-stat read its header without mapping it, wait for it, and give
 * up on it; a mapping's first read would have been a SIGBUS. */
static int blank_registry_on_a_full_tmpfs(const char *dir)
{
    char path[256], name[256];
    if (registry_candidate(test_domain, 0, path, sizeof path, name, sizeof name) != 0) return 1;
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, 1 << 20) != 0) return 2;
    close(fd);
    if (fill_to_last_byte(dir) != 0) return TMPFS_NOT_FULL;
    registry_attach_wait_ms = 100;
    struct ipc_handle h = make_handle(40);
    if (ipc_export(&h, BASE, 4096, 0, CTX) != -ENODEV) return 3;
    struct inspect_snapshot s;
    char why[256];
    if (inspect_snapshot(test_domain, &s, why, sizeof why) != -ETIMEDOUT) return 4;
    return 0;
}

Test(reliability, tmpfs_full_to_the_last_byte_blank_registry_is_read_not_mapped)
{
    int status = in_private_tmpfs("1m", blank_registry_on_a_full_tmpfs);
    cr_expect_neq(status, 128 + SIGBUS, "killed by SIGBUS: the header was mapped and read");
    cr_expect_eq(status, 0, "status %d", status);
    char *log = log_text();
    cr_expect_eq(count_in(log, "was never initialised"), 1, "log:\n%s", log);
    free(log);
}

/* ---- finding 8: unbounded hangs ---- */

Test(reliability, stopped_lock_holder_bounds_opens_and_defers_frees)
{
    test_option("LOCK_WAIT", getenv("REL_LOCK_WAIT") ? getenv("REL_LOCK_WAIT") : "300ms");
    struct ipc_handle h = make_handle(7), other = make_handle(8);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct imp im;
    imp_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(imp_cmd(&im, IMP_OPEN, 1, &ptr), IPC_REAL);
    struct chan c;
    chan_open(&c);
    pid_t locker = fork();
    if (locker == 0) {
        chan_child(&c);
        struct registry v;
        open_view(&v);
        registry_lock(&v);
        CHILD_SEND(&c, 1);
        raise(SIGSTOP); /* stopped inside the lock */
        registry_unlock(&v);
        CHILD_SEND(&c, 2);
        CHILD_RECV(&c);
        _exit(0);
    }
    chan_parent(&c);
    cr_assert_eq(PARENT_RECV(&c), 1);
    sleep_ms(50);
    uint64_t t0 = test_now_ns();
    struct ipc_open t;
    uint64_t p2;
    int r = ipc_open_begin(&other, CTX, &t, &p2);
    double first_open = ms_since(t0);
    cr_expect_eq(r, IPC_PASS, "the open did not go on untracked");
    t0 = test_now_ns();
    cr_expect_eq(ipc_free(BASE), IPC_DONE, "the free was not deferred");
    double first_free = ms_since(t0);
    cr_expect_eq(fake_free_count(), 0, "freed while an importer holds it");
    t0 = test_now_ns();
    r = ipc_open_begin(&other, CTX, &t, &p2);
    double second_open = ms_since(t0);
    cr_expect_eq(r, IPC_PASS);
    fprintf(stderr, "stopped lock holder: open waited %.0f ms, free %.0f ms, next open %.0f ms\n",
            first_open, first_free, second_open);
    double bound = (double)options_get()->lock_wait;
    cr_expect(first_open >= bound * 0.8 && first_open < bound + 2000, "open waited %.0f ms",
              first_open);
    cr_expect(second_open < 200, "a second open waited the whole bound again (%.0f ms)",
              second_open);
    cr_expect(ipc_active(), "tracking was turned off");
    /* ipcshim-stat shows who holds the lock, and for how long. */
    struct inspect_snapshot s;
    char why[256];
    cr_assert_eq(inspect_snapshot(test_domain, &s, why, sizeof why), 0, "%s", why);
    cr_expect_eq(s.lock_pid, locker);
    cr_expect_geq(s.lock_held_ns, options_get()->lock_wait * 1000000ull);
    inspect_free(&s);
    kill(locker, SIGCONT);
    cr_assert_eq(PARENT_RECV(&c), 2);
    PARENT_SEND(&c, 0);
    child_wait(locker);
    ipc_collect();
    cr_expect_eq(fake_free_count(), 0, "the deferred free ran while an importer holds it");
    cr_assert_eq(imp_cmd(&im, IMP_CLOSE, ptr, NULL), IPC_REAL);
    ipc_collect();
    cr_expect_eq(fake_free_count(), 1, "the deferred free never ran");
    imp_stop(&im);
}

/* The lock word names a live thread that is no holder (a process that does
 * not map the registry): repaired like a dead owner's, not waited on. */
Test(reliability, lock_word_naming_a_live_non_holder_is_repaired)
{
    test_option("LOCK_WAIT", "30s");
    struct ipc_handle h = make_handle(9);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    pid_t sleeper = fork();
    if (sleeper == 0) {
        execlp("sleep", "sleep", "60", (char *)NULL);
        _exit(127);
    }
    sleep_ms(100); /* exec'd: the registry is no longer mapped there */
    struct registry v;
    open_view(&v);
    v.hdr->lock.mutex.__data.__lock = sleeper;
    v.hdr->lock.mutex.__data.__owner = sleeper;
    uint64_t t0 = test_now_ns();
    cr_expect_eq(ipc_free(BASE), IPC_DONE, "not tracked after the repair (the hand-off keeps it)");
    double took = ms_since(t0);
    fprintf(stderr, "lock word naming a live non-holder: repaired after %.0f ms\n", took);
    cr_expect(took < 5000, "took %.0f ms", took);
    cr_expect_geq(v.hdr->repairs, 1);
    cr_expect(ipc_active());
    kill(sleeper, SIGKILL);
    child_wait(sleeper);
    registry_close(&v);
}

/* ---- finding 9: fair share ---- */

Test(reliability, unclaimed_handoffs_leave_room_for_other_programs)
{
    test_option("EXIT_WAIT", "5s");
    uint64_t t0 = test_now_ns();
    for (unsigned i = 0; i < 2000; i++) {
        struct ipc_handle h = make_handle(1000 + i);
        cr_assert_eq(ipc_export(&h, BASE + i * 0x10000ull, 4096, 0, CTX), 0, "export %u", i);
        cr_assert_eq(ipc_free(BASE + i * 0x10000ull), IPC_DONE);
    }
    fprintf(stderr, "2000 unclaimed export+free cycles: %.0f ms\n", ms_since(t0));
    struct ipcshim_stats st;
    memset(&st, 0, sizeof st);
    ipc_stats(&st);
    cr_expect_leq(st.limbo_blocks, 256 / 8, "limbo holds %llu blocks",
                  (unsigned long long)st.limbo_blocks);
    /* Another program still gets its exports tracked. */
    pid_t pid = fork();
    if (pid == 0) {
        struct ipc_handle h = make_handle(9999);
        _exit(ipc_export(&h, 0x90000000ull, 4096, 0, CTX) == 0 ? 0 : 1);
    }
    cr_expect_eq(child_wait(pid), 0, "another program's export was not tracked");
    t0 = test_now_ns();
    ipc_shutdown();
    double exit_ms = ms_since(t0);
    fprintf(stderr, "exit with only unclaimed hand-offs: %.0f ms\n", exit_ms);
    cr_expect(exit_ms < 2000, "exit waited %.0f ms for hand-offs nobody claimed", exit_ms);
    char *log = log_text();
    int lines = count_in(log, "\n");
    cr_expect_leq(lines, 20, "%d warning lines", lines);
    free(log);
}

/* ---- findings 10/12: exit ---- */

Test(reliability, exit_waits_for_an_unfreed_block_an_importer_maps)
{
    test_option("EXIT_WAIT", "400ms");
    struct ipc_handle h = make_handle(10);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct imp im;
    imp_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(imp_cmd(&im, IMP_OPEN, 1, &ptr), IPC_REAL);
    uint64_t t0 = test_now_ns();
    ipc_shutdown(); /* never freed by the program */
    double waited = ms_since(t0);
    cr_expect(waited >= 350, "exit did not wait for the mapped block (%.0f ms)", waited);
    char *log = log_text();
    cr_expect_eq(count_in(log, "1 block left in limbo or never freed, still held by others"), 1,
                 "the leak report says what is still held:\n%s", log);
    free(log);
    imp_stop(&im);
}

Test(reliability, exit_does_not_wait_out_unclaimed_handoffs)
{
    test_option("EXIT_WAIT", "5s");
    struct ipc_handle h = make_handle(11);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    uint64_t t0 = test_now_ns();
    ipc_shutdown();
    double waited = ms_since(t0);
    fprintf(stderr, "exit with one unclaimed hand-off: %.0f ms\n", waited);
    cr_expect(waited < 2000, "waited %.0f ms", waited);
    cr_expect_eq(fake_free_count(), 1, "the block was not freed at exit");
}

Test(reliability, import_only_process_releases_its_slot_at_exit)
{
    struct ipc_handle h = make_handle(12);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct imp im;
    imp_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(imp_cmd(&im, IMP_OPEN, 1, &ptr), IPC_REAL);
    struct registry v;
    open_view(&v);
    uint32_t slot = slot_of(&v, im.pid);
    cr_assert_neq(slot, REG_NONE);
    PARENT_SEND(&im.c, IMP_NORMAL_EXIT);
    PARENT_SEND(&im.c, 0);
    cr_assert_eq(child_wait(im.pid), 0);
    cr_expect_eq(v.holders[slot].state, HOLDER_FREE, "the importer's slot was not released");
    uint32_t bi = reg_block_find(&v, &h);
    cr_expect_eq(reg_block_leases(&v, bi), 0, "the importer's lease is left");
    registry_close(&v);
}

/* ---- finding 11: one validator ---- */

Test(reliability, stat_refuses_what_the_library_refuses)
{
    char path[256], name[256];
    cr_assert_eq(registry_candidate(test_domain, 0, path, sizeof path, name, sizeof name), 0);
    cr_assert_eq(mkfifo(path, 0600), 0);
    struct inspect_snapshot s;
    char why[256];
    uint64_t t0 = test_now_ns();
    cr_expect_eq(inspect_snapshot(test_domain, &s, why, sizeof why), -EPERM);
    cr_expect(strstr(why, "not a regular file"), "why: %s", why);
    cr_expect(ms_since(t0) < 1000, "blocked on the FIFO");
    unlink(path);
    /* A lock of a foreign type. */
    struct registry r;
    struct reg_caps caps = {8, 16, 32};
    cr_assert_eq(registry_open(&r, test_domain, &caps), 0);
    r.hdr->lock.mutex.__data.__kind = 0; /* a plain mutex: never reports a dead owner */
    registry_close(&r);
    cr_expect_eq(inspect_snapshot(test_domain, &s, why, sizeof why), -EPROTO);
    cr_expect(strstr(why, "not a robust process-shared mutex"), "why: %s", why);
}
