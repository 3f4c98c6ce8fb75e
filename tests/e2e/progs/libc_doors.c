/* libc_doors: calls each libc-level function libipcshim.so exports, the way
 * libraries call them, and prints one line per function with what it
 * answered: "door NAME: RESULT". The lines are the same with and without the
 * shim (and whatever else is preloaded), which is what test_preloads.py
 * compares; a function whose call hangs or crashes the process fails there.
 * The list of doors must cover every libc-level name in shim/exports.map
 * (test_preloads.py checks that too). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

static const char *outcome(long rc, int err)
{
    static char buf[64];
    if (rc >= 0) return "ok";
    snprintf(buf, sizeof buf, "-1 %s", strerrorname_np(err) ? strerrorname_np(err) : "?");
    return buf;
}

int main(void)
{
    /* dlsym: by default scope, by RTLD_NEXT (as an interposer would), and a
     * name nobody defines (the loader's error path allocates). */
    printf("door dlsym: default %s, next %s, missing %s\n",
           dlsym(RTLD_DEFAULT, "malloc") ? "found" : "none",
           dlsym(RTLD_NEXT, "free") ? "found" : "none",
           dlsym(RTLD_DEFAULT, "no_such_function_anywhere") ? "found" : "none");

    /* syscall: a plain number, a number the kernel refuses, and errno kept. */
    long tid = syscall(SYS_gettid);
    errno = 0;
    long bad = syscall(-1L);
    int bad_errno = errno;
    printf("door syscall: gettid %s, bad number %s\n", tid == gettid() ? "matches" : "differs",
           outcome(bad, bad_errno));

    /* pidfd_open and pidfd_getfd through the default scope (glibc >= 2.36
     * has them; the shim always exports them). */
    int (*open_fn)(pid_t, unsigned) = (int (*)(pid_t, unsigned))dlsym(RTLD_DEFAULT, "pidfd_open");
    int (*getfd_fn)(int, int, unsigned) =
        (int (*)(int, int, unsigned))dlsym(RTLD_DEFAULT, "pidfd_getfd");
    int pidfd = open_fn ? open_fn(getpid(), 0) : -1;
    int open_errno = errno;
    printf("door pidfd_open: %s\n", open_fn ? outcome(pidfd, open_errno) : "absent");
    int fd = getfd_fn && pidfd >= 0 ? getfd_fn(pidfd, 1, 0) : -1;
    int getfd_errno = errno;
    printf("door pidfd_getfd: %s\n", getfd_fn ? outcome(fd, getfd_errno) : "absent");
    long viasys = syscall(SYS_pidfd_open, (long)getpid(), 0L);
    printf("door syscall-pidfd_open: %s\n", outcome(viasys, errno));
    if (fd >= 0) close(fd);
    if (pidfd >= 0) close(pidfd);
    if (viasys >= 0) close((int)viasys);

    /* _exit and _Exit, as a fork child leaves: the status must arrive. */
    fflush(stdout);
    for (int which = 0; which < 2; which++) {
        pid_t child = fork();
        if (child == 0) {
            if (which == 0) _exit(3);
            _Exit(4);
        }
        int status = -1;
        if (child > 0) waitpid(child, &status, 0);
        printf("door %s: status %d\n", which == 0 ? "_exit" : "_Exit",
               child > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return 0;
}
