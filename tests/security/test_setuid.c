/* test_setuid: the shim in a real setuid-root program run by an ordinary
 * user (nobody) whose environment tries every IPCSHIM_* attack: a log file
 * that only root may write, a newline that would forge a log line, a trace
 * and a registry in the user's own folder, a registry of one slot for root's
 * default domain. In secure execution none of it may be obeyed: no file is
 * created or written where the user chose, root's registry is the default
 * one with default bounds, and nothing the user wrote reaches stderr. The
 * same program run without the setuid bit obeys every variable (the control:
 * the attack is real). Needs root (to install a setuid binary and switch to
 * nobody) and a mount namespace (each run gets a private /dev/shm). */
#include "registry.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOBODY 65534

static char top[64], user_dir[128], root_log[128], probe[128];

/* What one run left: collected inside its mount namespace. */
struct outcome {
    int status;       /* the probe's wait status */
    int setup;        /* 0, or the step of the namespace set-up that failed */
    int registries;   /* ipcshim-* names in the private /dev/shm, while the probe holds */
    int user_entries; /* names in the user's folder, while the probe holds */
    char reg_name[64];
    uid_t reg_uid;
    mode_t reg_mode;
    uint32_t max_blocks, max_holders, max_leases;
    char err[4096]; /* the probe's stderr */
};

static void setup(void)
{
    if (geteuid() != 0) return;
    snprintf(top, sizeof top, "/tmp/ipcshim-suid-XXXXXX");
    cr_assert(mkdtemp(top), "mkdtemp: %s", strerror(errno));
    chmod(top, 0755); /* nobody may reach the probe, nothing more */
    snprintf(user_dir, sizeof user_dir, "%s/user", top);
    cr_assert_eq(mkdir(user_dir, 0700), 0);
    cr_assert_eq(chown(user_dir, NOBODY, NOBODY), 0);
    snprintf(root_log, sizeof root_log, "%s/root-only.log", top);
    int fd = open(root_log, O_CREAT | O_WRONLY | O_EXCL, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    /* The probe, installed setuid root where nobody can run it. */
    snprintf(probe, sizeof probe, "%s/probe", top);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", SUID_PROBE, probe);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(chown(probe, 0, 0), 0);
    cr_assert_eq(chmod(probe, 04755), 0);
}

static void teardown(void)
{
    if (!top[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", top);
}

TestSuite(setuid, .init = setup, .fini = teardown, .timeout = 60);

static int entries(const char *dir);

/* Reads the registry's header fields into o (o->registries counts them). */
static void note_registries(struct outcome *o)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "ipcshim-", 8)) continue;
        char path[300];
        struct stat st;
        struct reg_header h;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        o->registries++;
        snprintf(o->reg_name, sizeof o->reg_name, "%s", e->d_name);
        int fd = open(path, O_RDONLY | O_NOFOLLOW);
        if (fd < 0 || fstat(fd, &st) || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
            if (fd >= 0) close(fd);
            continue;
        }
        o->reg_uid = st.st_uid, o->reg_mode = st.st_mode & 07777;
        o->max_blocks = h.max_blocks, o->max_holders = h.max_holders, o->max_leases = h.max_leases;
        close(fd);
    }
    if (d) closedir(d);
}

/* Runs the probe with env, as nobody through the setuid bit when as_user,
 * else as root without it, on a private /dev/shm. */
static void run_probe(bool as_user, char *const *env, struct outcome *o)
{
    int result[2];
    cr_assert_eq(pipe(result), 0);
    pid_t ns = fork();
    cr_assert_geq(ns, 0);
    if (ns == 0) {
        struct outcome res = {0};
        int err[2], in[2], out[2];
        if (unshare(CLONE_NEWNS) != 0)
            res.setup = 1;
        else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            res.setup = 2;
        else if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=256m,mode=1777") != 0)
            res.setup = 3;
        else if (pipe(err) != 0 || pipe(in) != 0 || pipe(out) != 0)
            res.setup = 4;
        if (!res.setup) {
            if (!as_user) chmod(probe, 0755); /* the control: no setuid bit */
            pid_t p = fork();
            if (p == 0) {
                dup2(err[1], 2);
                dup2(in[0], 0);
                dup2(out[1], 1);
                close(err[0]), close(in[1]), close(out[0]);
                if (as_user && (setgroups(0, NULL) || setresgid(NOBODY, NOBODY, NOBODY) ||
                                setresuid(NOBODY, NOBODY, NOBODY)))
                    _exit(120);
                char *argv[] = {probe, NULL};
                execve(probe, argv, env);
                _exit(127);
            }
            close(err[1]), close(in[0]), close(out[1]);
            /* While it holds its export: what did the shim create? */
            char ready[16] = "";
            if (read(out[0], ready, sizeof ready - 1) > 0 && !strncmp(ready, "ready", 5)) {
                note_registries(&res);
                res.user_entries = entries(user_dir);
            }
            close(in[1]); /* go on: free and exit */
            size_t n = 0;
            ssize_t got;
            while ((got = read(err[0], res.err + n, sizeof res.err - 1 - n)) > 0)
                n += (size_t)got;
            waitpid(p, &res.status, 0);
        }
        ssize_t w = write(result[1], &res, sizeof res);
        _exit(w == (ssize_t)sizeof res ? 0 : 1);
    }
    close(result[1]);
    memset(o, 0, sizeof *o);
    ssize_t n = read(result[0], o, sizeof *o);
    close(result[0]);
    int st;
    waitpid(ns, &st, 0);
    cr_assert_eq(n, (ssize_t)sizeof *o, "no outcome from the namespace (status %d)", st);
    if (o->setup)
        cr_skip_test("cannot make a private /dev/shm here (step %d: needs a mount namespace)",
                     o->setup);
}

/* The attacker's environment (the simulator's machine name is the only
 * other variable). */
static char **attack_env(char store[][512])
{
    static char *env[32];
    int n = 0;
#define PUT(...) (snprintf(store[n], 512, __VA_ARGS__), env[n] = store[n], n++)
    PUT("PATH=/usr/bin:/bin");
    PUT("SIMCUDA_MACHINE=suid-%d", (int)getpid());
    PUT("IPCSHIM_LOG=debug");
    PUT("IPCSHIM_LOG_FILE=%s", root_log);
    PUT("IPCSHIM_TRACE=%s/trace", user_dir);
    PUT("IPCSHIM_REGISTRY_DIR=%s", user_dir);
    PUT("IPCSHIM_DOMAIN=evil");
    PUT("IPCSHIM_DOMAINS=evil"); /* an unknown name: reported only where obeyed */
    PUT("IPCSHIM_MAX_BLOCKS=1");
    PUT("IPCSHIM_MAX_HOLDERS=1");
    PUT("IPCSHIM_MAX_LEASES=1");
    PUT("IPCSHIM_DEVICE_BUDGET=1M");  /* swap on: the trace opens... */
    PUT("IPCSHIM_SWAP_MIN_BYTES=1G"); /* ...but the probe's block stays exportable */
    PUT("IPCSHIM_STATS=1");
    PUT("IPCSHIM_LEAK_REPORT=full");
    PUT("IPCSHIM_HANDOFF_TIMEOUT=1s\nipcshim[1]: error: forged by the user");
#undef PUT
    env[n] = NULL;
    return env;
}

static size_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

static int entries(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

Test(setuid, obeys_no_option_of_the_invoking_user)
{
    if (geteuid() != 0) cr_skip_test("needs root to install a setuid program and become nobody");
    char store[32][512];
    struct outcome o;
    run_probe(true, attack_env(store), &o);
    cr_assert(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0,
              "the setuid probe failed (status %#x): %s", o.status, o.err);
    cr_expect_eq(file_size(root_log), 0, "the root-only log was written to");
    cr_expect_eq(o.user_entries, 0, "a file was created in the user's folder");
    cr_expect_eq(entries(user_dir), 0, "a file was left in the user's folder");
    /* Root's own registry, in the default place, with default bounds. */
    cr_assert_eq(o.registries, 1, "registries in /dev/shm: %d", o.registries);
    cr_expect_str_eq(o.reg_name, "ipcshim-0-default");
    cr_expect_eq(o.reg_uid, 0);
    cr_expect_eq(o.reg_mode, 0600, "mode %o", o.reg_mode);
    cr_expect_eq(o.max_blocks, 4194304u);
    cr_expect_eq(o.max_holders, 512u);
    cr_expect_eq(o.max_leases, 8388608u);
    cr_expect_null(strstr(o.err, "forged"), "stderr carries the user's text:\n%s", o.err);
    cr_expect_null(strstr(o.err, "evil"), "stderr carries the user's text:\n%s", o.err);
    cr_expect_null(strstr(o.err, "DOMAINS"), "the user's environment was read:\n%s", o.err);
}

Test(setuid, the_same_program_without_setuid_obeys_them)
{
    if (geteuid() != 0) cr_skip_test("needs root to install a setuid program and become nobody");
    char store[32][512];
    struct outcome o;
    run_probe(false, attack_env(store), &o);
    cr_assert(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0,
              "the probe failed (status %#x): %s", o.status, o.err);
    /* The attack is real where the options are obeyed: the log goes to the
     * chosen file, the registry to the chosen folder... */
    cr_expect_gt(file_size(root_log), 0, "the log file was not written");
    char reg[256];
    cr_expect_eq(o.user_entries, 2, "no registry and trace in the user's folder while it ran");
    cr_expect_eq(o.registries, 0, "a registry in /dev/shm although IPCSHIM_REGISTRY_DIR was set");
    snprintf(reg, sizeof reg, "%s/ipcshim-0-evil", user_dir);
    cr_expect_neq(access(reg, F_OK), 0, "the last process out left its registry at %s", reg);
    snprintf(reg, sizeof reg, "%s/trace", user_dir);
    cr_expect_eq(access(reg, F_OK), 0, "no trace at %s", reg);
    /* ...but the newline in a value never forges a line of its own. */
    FILE *f = fopen(root_log, "r");
    cr_assert(f);
    char line[2048];
    bool escaped = false, unknown = false;
    while (fgets(line, sizeof line, f)) {
        unknown |= strstr(line, "IPCSHIM_DOMAINS is not an ipcshim setting (did you mean "
                                "IPCSHIM_DOMAIN?)") != NULL;
        cr_expect_neq(strncmp(line, "ipcshim[1]: error: forged", 25), 0, "a forged line: %s", line);
        escaped |= strstr(line, "IPCSHIM_HANDOFF_TIMEOUT=1s\\x0aipcshim[1]: error: forged") != NULL;
    }
    fclose(f);
    cr_expect(escaped, "the bad value is not in the log with its newline escaped");
    cr_expect(unknown, "the unknown name IPCSHIM_DOMAINS is not in the log");
}
