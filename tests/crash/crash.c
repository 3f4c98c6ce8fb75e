/* crash.c: see crash.h. */
#include "crash.h"
#include "options.h"
#include "registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char machine[96], segment[160];

void crash_setup(const char *test_name)
{
    snprintf(machine, sizeof machine, "crash-%s-%d", test_name, (int)getpid());
    snprintf(segment, sizeof segment, "/dev/shm/ipcshim-%u-%s", (unsigned)geteuid(), machine);
    signal(SIGPIPE, SIG_IGN);
    /* The tests write their hostile segments in /dev/shm: make the test and
     * the programs it runs look there, whatever the machine's default. */
    setenv("IPCSHIM_REGISTRY_DIR", "/dev/shm", 1);
    options_reload();
}

const char *crash_domain(void)
{
    return machine;
}
const char *crash_segment_path(void)
{
    return segment;
}

void crash_cleanup(void)
{
    char prefix[160], path[512];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = snprintf(prefix, sizeof prefix, "-%u-%s", (unsigned)geteuid(), machine);
    while (d && (e = readdir(d))) {
        const char *dash = strchr(e->d_name, '-'); /* simcuda-UID-MACHINE*, ipcshim-UID-MACHINE */
        if (dash && !strncmp(dash, prefix, (size_t)n)) {
            snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
            unlink(path);
        }
    }
    if (d) closedir(d);
}

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

int child_spawn(struct child *c, const char *prog, bool shim, const char *const *env,
                const char *const *args)
{
    char path[1024], libpath[2048], preload[1024], sim[160], domain[160];
    const char *bindir = getenv("CRASH_BIN_DIR"), *simdir = getenv("SIMCUDA_DIR"),
               *lib = getenv("IPCSHIM_LIB");
    memset(c, 0, offsetof(struct child, buf));
    c->buf[0] = 0;
    c->in = c->out = -1;
    c->pid = -1;
    if (strchr(prog, '/'))
        snprintf(path, sizeof path, "%s", prog);
    else
        snprintf(path, sizeof path, "%s/%s", bindir ? bindir : ".", prog);
    snprintf(libpath, sizeof libpath, "LD_LIBRARY_PATH=%s", simdir ? simdir : ".");
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib ? lib : "libipcshim.so");
    snprintf(sim, sizeof sim, "SIMCUDA_MACHINE=%s", machine);
    snprintf(domain, sizeof domain, "IPCSHIM_DOMAIN=%s", machine);

    /* The test's entries first: getenv() takes the first match. */
    const char *envp[300];
    int n = 0;
    for (int i = 0; env && env[i] && n < 60; i++)
        envp[n++] = env[i];
    for (char **e = environ; *e && n < 280; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "LD_LIBRARY_PATH=", 16) &&
            strncmp(*e, "SIMCUDA_", 8) && strncmp(*e, "IPCSHIM_", 8))
            envp[n++] = *e;
    envp[n++] = libpath, envp[n++] = sim, envp[n++] = domain;
    if (shim) envp[n++] = preload;
    envp[n] = NULL;

    const char *argv[80] = {prog};
    int a = 1;
    for (int i = 0; args && args[i] && a < 79; i++)
        argv[a++] = args[i];
    argv[a] = NULL;

    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC)) return -errno;
    if (pipe2(out, O_CLOEXEC)) {
        close(in[0]), close(in[1]);
        return -errno;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    int rc = posix_spawn(&c->pid, path, &fa, NULL, (char *const *)argv, (char *const *)envp);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]), close(out[1]);
    if (rc) {
        close(in[1]), close(out[0]);
        c->pid = -1;
        return -rc;
    }
    c->in = in[1];
    c->out = out[0];
    return 0;
}

/* Reads what is there (waiting at most wait_ms for something). 1 got
 * bytes, 0 nothing, -1 end of output. */
static int fill(struct child *c, int wait_ms)
{
    if (c->out < 0) return -1;
    struct pollfd p = {c->out, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return 0;
    if (c->len >= sizeof c->buf - 1) return 0; /* full: the caller consumes lines */
    ssize_t got = read(c->out, c->buf + c->len, sizeof c->buf - 1 - c->len);
    if (got <= 0) {
        close(c->out);
        c->out = -1;
        return -1;
    }
    c->len += (size_t)got;
    c->buf[c->len] = 0;
    return 1;
}

int child_line(struct child *c, char *line, size_t n, int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    for (;;) {
        char *nl = memchr(c->buf, '\n', c->len);
        if (nl) {
            size_t k = (size_t)(nl - c->buf);
            size_t copy = k < n - 1 ? k : n - 1;
            memcpy(line, c->buf, copy);
            line[copy] = 0;
            memmove(c->buf, nl + 1, c->len - k - 1);
            c->len -= k + 1;
            c->buf[c->len] = 0;
            return 1;
        }
        long left = deadline - now_ms();
        if (left <= 0) return 0;
        if (fill(c, (int)left) < 0 && !memchr(c->buf, '\n', c->len)) return -1;
    }
}

bool child_send(struct child *c, const char *line)
{
    if (c->in < 0) return false;
    size_t n = strlen(line);
    return write(c->in, line, n) == (ssize_t)n && write(c->in, "\n", 1) == 1;
}

void child_close_stdin(struct child *c)
{
    if (c->in >= 0) close(c->in);
    c->in = -1;
}

int child_wait(struct child *c, int timeout_ms)
{
    long deadline = now_ms() + timeout_ms;
    int ws = 0;
    child_close_stdin(c);
    if (c->pid <= 0) return c->status = -1;
    for (;;) {
        pid_t w = waitpid(c->pid, &ws, WNOHANG);
        if (w == c->pid) break;
        if (w < 0 && errno != EINTR) {
            ws = 0;
            break;
        }
        if (now_ms() > deadline) {
            fprintf(stderr, "crash: pid %d did not finish in %d ms; killing it\n", (int)c->pid,
                    timeout_ms);
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &ws, 0);
            break;
        }
        if (fill(c, 5) < 0) usleep(1000);
    }
    while (fill(c, 0) > 0) {
    }
    if (c->out >= 0) close(c->out);
    c->out = -1;
    c->pid = -1;
    return c->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

int child_run(struct child *c, const char *prog, bool shim, const char *const *env,
              const char *const *args, int timeout_ms)
{
    int rc = child_spawn(c, prog, shim, env, args);
    if (rc) return c->status = -1;
    child_close_stdin(c);
    int st = child_wait(c, timeout_ms);
    fprintf(stderr, "---- %s%s exited %d:\n%s", prog, shim ? " (shim)" : "", st, c->buf);
    return st;
}

int count_lines(const char *buf, const char *needle)
{
    int n = 0;
    for (const char *line = buf; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        const char *hit = strstr(line, needle);
        if (hit && (size_t)(hit - line) < len) n++;
        line = end ? end + 1 : NULL;
    }
    return n;
}

char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t got;
    while (s && (got = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) s = realloc(s, cap *= 2);
    }
    fclose(f);
    if (s) s[len] = 0;
    return s;
}

int crash_registry_counts(struct reg_counts *out, int pid)
{
    struct registry v;
    struct reg_caps caps = {512, 16384, 65536};
    memset(out, 0, sizeof *out);
    if (access(segment, F_OK) != 0) return 0; /* never created: empty */
    if (registry_open(&v, machine, &caps) != 0) return -1;
    if (registry_lock(&v) != 0) {
        registry_close(&v);
        return -1;
    }
    for (uint32_t i = 0; i < v.max_holders; i++)
        if (v.holders[i].state != HOLDER_FREE && (pid <= 0 || v.holders[i].pid == pid)) {
            out->holders++;
            if (pid <= 0)
                fprintf(stderr, "registry: holder %u (pid %d) left\n", i, v.holders[i].pid);
        }
    for (uint32_t i = 0; i < v.max_blocks; i++)
        if (v.blocks[i].state != BLOCK_FREE) {
            out->blocks++;
            if (pid <= 0)
                fprintf(stderr, "registry: block %u (state %u) left\n", i, v.blocks[i].state);
        }
    for (uint32_t i = 0; i < v.max_leases; i++) {
        struct reg_lease *l = &v.leases[i];
        struct reg_holder *h = reg_holder_at(&v, l->holder);
        if (l->intent != LEASE_FREE && (pid <= 0 || (h && h->pid == pid))) out->leases++;
    }
    out->repairs = v.hdr->repairs;
    registry_unlock(&v);
    registry_close(&v);
    return 0;
}
