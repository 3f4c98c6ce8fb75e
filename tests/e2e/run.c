/* run.c: see run.h. */
#include "run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static char machine[128];

void run_setup(const char *test_name)
{
    snprintf(machine, sizeof machine, "e2e-%s-%d", test_name, (int)getpid());
}

void run_cleanup(void)
{
    char prefix[256], path[512];
    DIR *d = opendir("/dev/shm");
    struct dirent *e;
    int n = snprintf(prefix, sizeof prefix, "-%u-%s", (unsigned)getuid(), machine);
    while (d && (e = readdir(d))) {
        /* simcuda-UID-MACHINE*, ipcshim-UID-MACHINE */
        const char *dash = strchr(e->d_name, '-');
        if (dash && !strncmp(dash, prefix, (size_t)n)) {
            snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
            unlink(path);
        }
    }
    if (d) closedir(d);
}

void run_prog(struct run_result *r, const char *prog, bool shim, const char *const *env,
              const char *const *args)
{
    char path[1024], libpath[2048], preload[1024], sim[256], domain[256];
    const char *bindir = getenv("E2E_BIN_DIR"), *simdir = getenv("SIMCUDA_DIR"),
               *lib = getenv("IPCSHIM_LIB");
    if (prog[0] == '/')
        snprintf(path, sizeof path, "%s", prog); /* a system program (python3, timeout) */
    else
        snprintf(path, sizeof path, "%s/%s", bindir ? bindir : ".", prog);
    snprintf(libpath, sizeof libpath, "LD_LIBRARY_PATH=%s", simdir ? simdir : ".");
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s", lib ? lib : "libipcshim.so");
    snprintf(sim, sizeof sim, "SIMCUDA_MACHINE=%s", machine);
    snprintf(domain, sizeof domain, "IPCSHIM_DOMAIN=%s", machine);

    /* The environment: ours minus what we set, then ours, then the test's.
     * Of the simulator's variables only the machine switch the suite runs
     * under (SIMCUDA_FREE_WHILE_MAPPED, set by meson for e2e-ipc-keep) is
     * passed on; a test's own entries come later and win. */
    const char *envp[256];
    int n = 0;
    for (char **e = environ; *e && n < 200; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "LD_LIBRARY_PATH=", 16) &&
            (strncmp(*e, "SIMCUDA_", 8) || !strncmp(*e, "SIMCUDA_FREE_WHILE_MAPPED=", 26)) &&
            strncmp(*e, "IPCSHIM_", 8))
            envp[n++] = *e;
    envp[n++] = libpath, envp[n++] = sim, envp[n++] = domain;
    if (shim) envp[n++] = preload;
    for (int i = 0; env && env[i] && n < 254; i++)
        envp[n++] = env[i];
    envp[n] = NULL;

    const char *argv[64] = {prog};
    int a = 1;
    for (int i = 0; args && args[i] && a < 63; i++)
        argv[a++] = args[i];
    argv[a] = NULL;

    int out[2];
    if (pipe(out)) {
        r->status = -errno;
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    pid_t pid;
    if (posix_spawn(&pid, path, &fa, NULL, (char *const *)argv, (char *const *)envp)) {
        r->status = -1;
        return;
    }
    close(out[1]);
    size_t len = 0;
    ssize_t got;
    while ((got = read(out[0], r->out + len, sizeof r->out - 1 - len)) > 0)
        len += (size_t)got;
    r->out[len] = 0;
    close(out[0]);
    int ws;
    waitpid(pid, &ws, 0);
    r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    fprintf(stderr, "---- %s%s exited %d:\n%s", prog, shim ? " (shim)" : "", r->status, r->out);
}

const char *run_field(const struct run_result *r, const char *key, char *buf, size_t len)
{
    size_t k = strlen(key);
    for (const char *line = r->out; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, k)) continue;
        const char *v = line + k;
        while (*v == ' ' || *v == ':')
            v++;
        size_t n = strcspn(v, "\n");
        if (n >= len) n = len - 1;
        memcpy(buf, v, n);
        buf[n] = 0;
        return buf;
    }
    return NULL;
}

int run_count(const struct run_result *r, const char *prefix)
{
    int count = 0;
    size_t k = strlen(prefix);
    for (const char *line = r->out; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL)
        count += !strncmp(line, prefix, k);
    return count;
}
