/* swap_load: a trace file, plain or compressed, into memory (swap_load.h).
 * Compressed files are piped through the decompressor, run with fork and
 * execvp (no shell, so any path is safe). */
#include "swap_load.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int swap_load(const char *path, struct swap_trace *t, size_t *bad_line)
{
    const char *tool = ends_with(path, ".xz") ? "xz" : ends_with(path, ".gz") ? "gzip" : NULL;
    if (!tool) return swap_trace_load(path, t, bad_line);
    if (access(path, R_OK)) return -errno;
    int fd[2];
    if (pipe(fd)) return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fd[0]);
        close(fd[1]);
        return -e;
    }
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execlp(tool, tool, "-dc", "--", path, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    FILE *f = fdopen(fd[0], "r");
    int rc = f ? swap_trace_read(f, t, bad_line) : -ENOMEM;
    if (f)
        fclose(f);
    else
        close(fd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!rc && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) rc = -EIO;
    return rc;
}
