/* fdpass: the fd hand-off without ptrace rights (issue 29, item 2): the
 * server that hands out this process's exported CUDA shareable fds, and the
 * client that asks another process's server for one (shim/pidfd.c calls it
 * where the kernel refuses pidfd_getfd).
 *
 * The rule, which every path here keeps: NO FD IS EVER GIVEN TO A PROCESS
 * THAT COULD NOT HAVE TAKEN IT WITH PTRACE RIGHTS IN THE SAME USER AND
 * DOMAIN. The server replies with an fd only if
 *  - the peer's SO_PEERCRED uid (its effective uid at connect) equals this
 *    process's real AND effective uid, and the request names this domain;
 *  - this process is not privileged by exec (getauxval(AT_SECURE) == 0: a
 *    setuid/setgid/file-capability program never serves, and never starts
 *    the server);
 *  - the fd was exported by this process as a CUDA shareable handle
 *    (fdpass_note_exported, after a successful POSIX-fd export) and fstat
 *    still gives the identity recorded then (a program may close the fd and
 *    reuse the number for anything else).
 * What it does give beyond ptrace: it serves a non-dumpable exporter too
 * (containers make every process non-dumpable in effect): an fd that the
 * program exported for sharing, to its own user, is what it meant to share.
 * Otherwise the reply is an errno and no fd.
 *
 * The client trusts the server only when SO_PEERCRED says it is process
 * `pid` of this effective uid: an abstract name can be bound by anyone in
 * the network namespace, so a squatter of another user is refused.
 *
 * Socket: abstract, "\0ipcshim-<euid>-<domain>.fdpass.<pid>" (the registry
 * name, core/registry.h, plus the pid), one per serving process. Wire: a
 * request is struct fdpass_request; the reply one int32 (0 or an errno),
 * with the fd as SCM_RIGHTS when 0. Every socket has 1 s send and receive
 * timeouts; the server handles one connection at a time, so a client that
 * stalls holds it at most about 2 s and can never crash it.
 *
 * Lifetime: one detached thread, all signals blocked, started at the first
 * export; in a fork child, the fork chain's child step (init.c) closes the
 * listening socket and forgets the parent's exports (the child exported
 * nothing); the child's first export starts its own. */
#include "fdpass.h"
#include "resolve.h"
#include "log.h"
#include "options.h"
#include "registry.h" /* REG_DOMAIN_MAX */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define FDPASS_MAGIC 0x46445031u /* "FDP1" */
#define FDPASS_TIMEOUT_MS 1000

/* One request on the wire (the client's domain, so that a peer of another
 * domain is refused even though it knows the name). */
struct fdpass_request {
    uint32_t magic;
    int32_t fd;
    char domain[REG_DOMAIN_MAX + 1];
};

/* One exported fd and the identity it had when exported. */
struct exported {
    int fd;
    dev_t dev;
    ino_t ino;
};

/* The exported set and the server's state. exports_lock guards all of it;
 * the server thread takes it only to look an fd up. */
static pthread_mutex_t exports_lock = PTHREAD_MUTEX_INITIALIZER;
static struct exported *exports;
static size_t nexports, cap_exports;
static int listen_fd = -1; /* this process's server's socket (-1: none runs) */

/* The abstract address for pid's server, in this user and domain:
 * registry_name's "ipcshim-<euid>-<domain>" (core/registry.h; written out
 * here, not called: core's futex calls go through the shim's syscall, and
 * calling back into core would close a circle of calls) plus ".fdpass.<pid>".
 * Returns the address length, or 0 when the domain is not a registry's. */
static socklen_t fdpass_address(pid_t pid, const char *domain, struct sockaddr_un *a)
{
    size_t len = domain ? strlen(domain) : 0;
    if (len < 1 || len > REG_DOMAIN_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = domain[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "ipcshim-%u-%s.fdpass.%d",
                     (unsigned)geteuid(), domain, (int)pid);
    if (n < 0 || (size_t)n >= sizeof a->sun_path - 1) return 0;
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void fdpass_timeouts(int s)
{
    struct timeval tv = {FDPASS_TIMEOUT_MS / 1000, (FDPASS_TIMEOUT_MS % 1000) * 1000};
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* ---- server ---- */

/* A duplicate (O_CLOEXEC) of fd when fd is exported and the duplicate has
 * the recorded identity (checked on the duplicate itself, so that a close
 * and reuse of the number in between cannot slip another file through);
 * else -EBADF, and a stale entry is dropped. Takes exports_lock. */
static int fdpass_lookup(int fd)
{
    int dup = -EBADF;
    struct stat st;
    pthread_mutex_lock(&exports_lock);
    for (size_t i = 0; i < nexports; i++) {
        if (exports[i].fd != fd) continue;
        dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (dup >= 0 && fstat(dup, &st) == 0 && st.st_dev == exports[i].dev &&
            st.st_ino == exports[i].ino)
            break;
        if (dup >= 0) close(dup);
        dup = -EBADF;
        exports[i] = exports[--nexports];
        break;
    }
    pthread_mutex_unlock(&exports_lock);
    return dup;
}

/* The answer to one request from a peer with credentials cred: a
 * duplicate of the fd to serve (the caller closes it), or a negative errno. */
static int fdpass_decide(const struct ucred *cred, const struct fdpass_request *req)
{
    if (req->magic != FDPASS_MAGIC || req->domain[REG_DOMAIN_MAX] != 0) return -EINVAL;
    if (cred->uid != getuid() || cred->uid != geteuid()) return -EPERM;
    if (getauxval(AT_SECURE)) return -EPERM;
    if (strcmp(req->domain, options_get()->domain) != 0) return -EPERM;
    return fdpass_lookup(req->fd);
}

/* Reply err (0: with fd attached). Failures are the client's problem. */
static void fdpass_reply(int s, int32_t err, int fd)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec iov = {&err, sizeof err};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (err == 0) {
        memset(&ctl, 0, sizeof ctl);
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    (void)sendmsg(s, &m, MSG_NOSIGNAL);
}

/* One connection: read the request (bounded by the timeouts), decide,
 * reply, and log the request (rated: a flood of bad requests cannot flood
 * the host's stderr). */
static void fdpass_serve_one(int s)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    struct fdpass_request req;
    fdpass_timeouts(s);
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return;
    size_t got = 0;
    while (got < sizeof req) {
        ssize_t n = recv(s, (char *)&req + got, sizeof req - got, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR)) break;
        if (n > 0) got += (size_t)n;
    }
    int fd = got == sizeof req ? fdpass_decide(&cred, &req) : -EINVAL;
    int err = fd < 0 ? -fd : 0;
    fdpass_reply(s, err, fd);
    if (fd >= 0) close(fd);
    LOG_RATE(LOG_INFO, "fdpass: request from pid %d (uid %u) for fd %d: %s", (int)cred.pid,
             (unsigned)cred.uid, got == sizeof req ? (int)req.fd : -1,
             err ? strerror(err) : "served");
}

/* The server thread: accepts until the listening socket is closed (a fork
 * child closes its copy; the parent's stays until exit). */
static void *fdpass_server(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (s < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE ||
                errno == ENOBUFS || errno == ENOMEM) {
                if (errno != EINTR && errno != ECONNABORTED)
                    nanosleep(&(struct timespec){0, 10000000}, NULL);
                continue;
            }
            LOG_ONCE(LOG_WARN, "fdpass: the fd server stops: accept: %s", strerror(errno));
            return NULL;
        }
        fdpass_serve_one(s);
        close(s);
    }
}

/* Bind and listen on this process's name, and start the server thread.
 * Caller holds exports_lock. Returns 0 or a negative errno. */
static int fdpass_start_server(void)
{
    struct sockaddr_un a;
    socklen_t alen = fdpass_address(getpid(), options_get()->domain, &a);
    if (!alen) return -EINVAL;
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) return -errno;
    if (bind(lfd, (struct sockaddr *)&a, alen) != 0 || listen(lfd, 16) != 0) {
        int err = -errno;
        close(lfd);
        return err;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread starts with every signal blocked */
    int rc = pthread_create(&t, &attr, fdpass_server, (void *)(intptr_t)lfd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        close(lfd);
        return -rc;
    }
    listen_fd = lfd;
    return 0;
}

void fdpass_note_exported(int fd)
{
    struct stat st;
    if (fd < 0 || options_get()->disable || getauxval(AT_SECURE) || fstat(fd, &st) != 0) return;
    pthread_mutex_lock(&exports_lock);
    size_t i = 0;
    while (i < nexports && exports[i].fd != fd)
        i++;
    if (i == nexports && nexports == cap_exports) {
        size_t cap = cap_exports ? 2 * cap_exports : 16;
        struct exported *e = realloc(exports, cap * sizeof *e);
        if (!e) {
            pthread_mutex_unlock(&exports_lock);
            LOG_ONCE(LOG_WARN, "fdpass: out of memory; an exported fd will not be served");
            return;
        }
        exports = e, cap_exports = cap;
    }
    exports[i] = (struct exported){fd, st.st_dev, st.st_ino};
    if (i == nexports) nexports++;
    int rc = listen_fd >= 0 ? 0 : fdpass_start_server();
    pthread_mutex_unlock(&exports_lock);
    if (rc != 0)
        LOG_ONCE(LOG_WARN,
                 "fdpass: cannot serve exported fds to importers without ptrace rights: %s",
                 strerror(-rc));
}

void fdpass_prefork(void)
{
    pthread_mutex_lock(&exports_lock);
}

void fdpass_postfork_parent(void)
{
    pthread_mutex_unlock(&exports_lock);
}

void fdpass_postfork_child(void)
{
    pthread_mutex_init(&exports_lock, NULL);
    if (listen_fd >= 0) close(listen_fd);
    listen_fd = -1;
    nexports = 0; /* the child exported nothing */
}

/* ---- client ---- */

/* A socket connected to pid's server, whose credentials say it is pid of
 * this effective uid; or a negative errno (-ENOENT: nobody listens). */
static int fdpass_connect(pid_t pid)
{
    struct sockaddr_un a;
    socklen_t alen = fdpass_address(pid, options_get()->domain, &a);
    if (!alen || pid <= 0) return -ENOENT;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -errno;
    fdpass_timeouts(s);
    if (connect(s, (struct sockaddr *)&a, alen) != 0) {
        int err = errno;
        close(s);
        return err == ECONNREFUSED || err == ENOENT ? -ENOENT : err == EAGAIN ? -ETIMEDOUT : -err;
    }
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid != pid ||
        cred.uid != geteuid()) {
        close(s);
        LOG_RATE(LOG_WARN, "fdpass: the socket for pid %d belongs to another process; ignored",
                 (int)pid);
        return -EPERM;
    }
    return s;
}

bool fdpass_listening(pid_t pid)
{
    int s = fdpass_connect(pid);
    if (s < 0) return false;
    close(s);
    return true;
}

/* Receive the reply on s: the served fd, or a negative errno. Closes every
 * fd that came with a refusal or beyond the first. */
static int fdpass_receive(int s)
{
    int32_t err = 0;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct iovec iov = {&err, sizeof err};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n;
    do
        n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    int fd = -1;
    for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
            if (fd < 0)
                fd = got;
            else
                close(got);
        }
    }
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
    if (n == 0) return -ESRCH; /* the server's process went away */
    if (n != (ssize_t)sizeof err || err != 0 || fd < 0 || (m.msg_flags & MSG_CTRUNC)) {
        if (fd >= 0) close(fd);
        return n != (ssize_t)sizeof err ? -EPROTO : err > 0 ? -err : -EPROTO;
    }
    return fd;
}

int fdpass_fetch(pid_t pid, int fd)
{
    if (fd < 0) return -EBADF;
    int s = fdpass_connect(pid);
    if (s < 0) return s;
    struct fdpass_request req = {.magic = FDPASS_MAGIC, .fd = fd};
    snprintf(req.domain, sizeof req.domain, "%s", options_get()->domain);
    ssize_t n;
    do
        n = send(s, &req, sizeof req, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    int rc = n == (ssize_t)sizeof req   ? fdpass_receive(s)
             : n < 0 && errno == EPIPE  ? -ESRCH
             : n < 0 && errno == EAGAIN ? -ETIMEDOUT
                                        : -EPROTO;
    close(s);
    return rc;
}

/* ---- the export hook of pools (symbols.def; the VMM one is vmm.c's) ---- */

CUresult do_cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                             CUmemAllocationHandleType handleType,
                                             unsigned long long flags)
{
    CUresult rc =
        CALL_REAL_DRIVER(cuMemPoolExportToShareableHandle, (handle_out, pool, handleType, flags));
    if (rc == CUDA_SUCCESS && handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && handle_out)
        fdpass_note_exported(*(int *)handle_out);
    return rc;
}
