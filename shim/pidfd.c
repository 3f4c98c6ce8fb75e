/* pidfd: the interposed libc functions of the fd hand-off (issue 29, item
 * 2): pidfd_open, pidfd_getfd (glibc >= 2.36 wrappers) and syscall (for
 * SYS_pidfd_open and SYS_pidfd_getfd; PyTorch, UCX and others call it
 * directly). The real function always runs first; only when the kernel
 * refuses does the shim ask the target's shim (fdpass.c, whose top states
 * who may get which fd). On any failure of that, the caller sees exactly
 * the kernel's answer: -1 and the kernel's errno.
 *
 * Refusals that are worth asking about: pidfd_getfd failing with EPERM or
 * EACCES (ptrace rights: a non-dumpable exporter, a container's Yama or LSM
 * policy), EBADF (seen on some systems; harmless to ask: a server answers
 * EBADF for anything not exported), ENOSYS (an old kernel or a seccomp
 * filter). pidfd_open: ENOSYS only, and then only when the target runs an
 * fd server of this user and domain: the shim returns a substitute, an
 * O_PATH descriptor of /proc/<pid> that its pidfd_getfd recognises (a
 * table of substitutes with their inode; the process behind it is alive as
 * long as openat(substitute, "stat") works, which also catches pid reuse).
 * Trap: a substitute is not a pidfd. poll() reports POLLNVAL on it, and
 * waitid(P_PIDFD) and pidfd_send_signal fail with EBADF where the kernel
 * has them; a kernel or filter that refuses pidfd_open usually refuses
 * those too (docs/limitations.md).
 *
 * None of it runs in secure execution (AT_SECURE) or with IPCSHIM_DISABLE:
 * there every call is the kernel's alone. The shim never calls pidfd_* or
 * syscall for these numbers itself, so nothing recurses. */
#include "pidfd.h"
#include "fdpass.h"
#include "resolve.h"
#include "log.h"
#include "options.h"
#include "sys.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

typedef long (*syscall_fn)(long, ...);
typedef int (*pidfd_open_fn)(pid_t, unsigned int);
typedef int (*pidfd_getfd_fn)(int, int, unsigned int);

/* The next definitions after the shim (libc's, or a later preloaded
 * library's), found at load by pidfd_resolve_at_load. Until then, and where
 * there is none (glibc < 2.36 has no pidfd_* wrappers), the kernel is called
 * directly. Trap: allocators call syscall() inside their own initialisation,
 * under their own lock (jemalloc's open, tcmalloc's mmap), possibly before
 * any constructor: nothing on these paths may allocate, lock or look a
 * symbol up (a failed lookup builds its error message with malloc). */
static syscall_fn next_syscall;
static pidfd_open_fn next_pidfd_open;
static pidfd_getfd_fn next_pidfd_getfd;

void pidfd_resolve_at_load(void)
{
    __atomic_store_n(&next_pidfd_open, (pidfd_open_fn)resolve_next_libc("pidfd_open"),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&next_pidfd_getfd, (pidfd_getfd_fn)resolve_next_libc("pidfd_getfd"),
                     __ATOMIC_RELEASE);
    __atomic_store_n(&next_syscall, (syscall_fn)resolve_next_libc("syscall"), __ATOMIC_RELEASE);
}

/* syscall(n, a..f) as libc's answers it: through the next definition, else
 * straight to the kernel with libc's convention (-1 and errno). */
EARLY_SAFE static long call_syscall(long n, long a, long b, long c, long d, long e, long f)
{
    syscall_fn next = __atomic_load_n(&next_syscall, __ATOMIC_ACQUIRE);
    if (next) return next(n, a, b, c, d, e, f);
    long rc = sys_call6(n, a, b, c, d, e, f);
    if (rc < 0 && rc > -4096) {
        errno = (int)-rc;
        return -1;
    }
    return rc;
}

/* ---- substitutes for pidfd_open's ENOSYS ---- */

#define PIDFD_SUBSTITUTES 64
static struct substitute {
    int fd;
    pid_t pid;
    dev_t dev;
    ino_t ino;
} substitutes[PIDFD_SUBSTITUTES];
static unsigned next_substitute;
static pthread_mutex_t substitutes_lock = PTHREAD_MUTEX_INITIALIZER;

/* True while the process that dirfd (an O_PATH /proc/<pid>) names lives. */
static bool pidfd_alive(int dirfd)
{
    int f = openat(dirfd, "stat", O_RDONLY | O_CLOEXEC);
    if (f < 0) return false;
    close(f);
    return true;
}

/* The pid behind substitute fd, alive, or 0 when fd is none of ours. */
static pid_t pidfd_substitute_pid(int fd)
{
    struct stat st;
    pid_t pid = 0;
    if (fstat(fd, &st) != 0) return 0;
    pthread_mutex_lock(&substitutes_lock);
    for (unsigned i = 0; i < PIDFD_SUBSTITUTES; i++)
        if (substitutes[i].pid && substitutes[i].fd == fd && substitutes[i].dev == st.st_dev &&
            substitutes[i].ino == st.st_ino)
            pid = substitutes[i].pid;
    pthread_mutex_unlock(&substitutes_lock);
    return pid && pidfd_alive(fd) ? pid : 0;
}

/* A substitute pidfd for pid, or -1 (the caller restores errno). */
static int pidfd_make_substitute(pid_t pid)
{
    char path[32];
    struct stat st;
    if (pid <= 0 || !fdpass_listening(pid)) return -1;
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || !pidfd_alive(fd)) {
        close(fd);
        return -1;
    }
    pthread_mutex_lock(&substitutes_lock);
    substitutes[next_substitute++ % PIDFD_SUBSTITUTES] =
        (struct substitute){fd, pid, st.st_dev, st.st_ino};
    pthread_mutex_unlock(&substitutes_lock);
    return fd;
}

/* ---- the fallbacks ---- */

static bool pidfd_fallback_allowed(void)
{
    return !getauxval(AT_SECURE) && !options_get()->disable;
}

/* The pid a real pidfd refers to (its fdinfo "Pid:" line), or 0 when fd is
 * not a pidfd or the process is gone (-1 there). */
static pid_t pidfd_real_pid(int pidfd)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", pidfd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return 0;
    ssize_t n = read(f, buf, sizeof buf - 1);
    close(f);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *p = strstr(buf, "\nPid:");
    int pid = 0;
    if (!p || sscanf(p + 5, "%d", &pid) != 1 || pid <= 0) return 0;
    return pid;
}

/* After the kernel refused pidfd_getfd(pidfd, targetfd, flags) with err:
 * the fd from the target's shim, or -1 with errno = err. */
static int pidfd_getfd_fallback(int pidfd, int targetfd, unsigned int flags, int err)
{
    bool refused = err == EPERM || err == EACCES || err == EBADF || err == ENOSYS;
    if (!refused || flags != 0 || targetfd < 0 || !pidfd_fallback_allowed()) goto kernel;
    bool substitute = false;
    pid_t pid = pidfd_substitute_pid(pidfd);
    if (pid)
        substitute = true;
    else
        pid = pidfd_real_pid(pidfd);
    if (!pid) goto kernel;
    int fd = fdpass_fetch(pid, targetfd);
    /* The process must still be the one the pidfd names (not a new one
     * under a reused pid, whose server we might have reached). */
    if (fd >= 0 && (substitute ? !pidfd_alive(pidfd) : pidfd_real_pid(pidfd) != pid)) {
        close(fd);
        fd = -ESRCH;
    }
    if (fd >= 0) {
        LOG_ONCE(
            LOG_INFO,
            "fdpass: pidfd_getfd refused by the kernel (%s); fd %d of pid %d came from its shim",
            strerror(err), targetfd, (int)pid);
        return fd;
    }
    if (fd != -ENOENT)
        LOG_RATE(LOG_INFO, "fdpass: pidfd_getfd(pid %d, fd %d): kernel %s, shim %s", (int)pid,
                 targetfd, strerror(err), strerror(-fd));
kernel:
    errno = err;
    return -1;
}

/* After the kernel refused pidfd_open(pid, flags) with err: a substitute,
 * or -1 with errno = err. */
static int pidfd_open_fallback(pid_t pid, unsigned int flags, int err)
{
    int fd = -1;
    if (err == ENOSYS && (flags & ~(unsigned)O_NONBLOCK) == 0 && pidfd_fallback_allowed())
        fd = pidfd_make_substitute(pid);
    if (fd >= 0) {
        LOG_ONCE(LOG_INFO, "fdpass: pidfd_open has no kernel support; pid %d gets a substitute",
                 (int)pid);
        return fd;
    }
    errno = err;
    return -1;
}

/* ---- the interposed functions ---- */

SHIM_EXPORT int pidfd_open(pid_t pid, unsigned int flags)
{
    pidfd_open_fn next = __atomic_load_n(&next_pidfd_open, __ATOMIC_ACQUIRE);
    int rc = next ? next(pid, flags) : (int)call_syscall(SYS_pidfd_open, pid, flags, 0, 0, 0, 0);
    return rc >= 0 ? rc : pidfd_open_fallback(pid, flags, errno);
}

SHIM_EXPORT int pidfd_getfd(int pidfd, int targetfd, unsigned int flags)
{
    pidfd_getfd_fn next = __atomic_load_n(&next_pidfd_getfd, __ATOMIC_ACQUIRE);
    int rc = next ? next(pidfd, targetfd, flags)
                  : (int)call_syscall(SYS_pidfd_getfd, pidfd, targetfd, flags, 0, 0, 0);
    return rc >= 0 ? rc : pidfd_getfd_fallback(pidfd, targetfd, flags, errno);
}

/* Trap: every library of the process reaches this, often for futex and
 * gettid, some before any constructor ran and some inside their own
 * initialisation (see next_syscall): it must stay a pass-through that
 * touches nothing but the real syscall for every other number, and keep
 * errno as the real one left it. Six arguments are read whatever the
 * caller passed, as glibc's own syscall does (no_sanitize: reading an
 * argument slot the caller did not fill is not a bug here). */
SHIM_EXPORT EARLY_SAFE long syscall(long number, ...)
{
    va_list ap;
    va_start(ap, number);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    long rc = call_syscall(number, a, b, c, d, e, f);
    if (rc >= 0 || (number != SYS_pidfd_open && number != SYS_pidfd_getfd)) return rc;
    if (number == SYS_pidfd_open) return pidfd_open_fallback((pid_t)a, (unsigned)b, errno);
    return pidfd_getfd_fallback((int)a, (int)b, (unsigned)c, errno);
}
