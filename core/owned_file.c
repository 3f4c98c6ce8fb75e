/* owned_file: the shim's own output files, checked by identity before every
 * write; see owned_file.h. */
#include "owned_file.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Serialises re-opening (rare: only after the program took our number). */
static pthread_mutex_t reopen_mu = PTHREAD_MUTEX_INITIALIZER;

static int open_safely(const char *path, struct stat *st)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST)
        fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -errno;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return -EINVAL; /* a FIFO, a device, a directory: not a file to append lines to */
    }
    /* O_NONBLOCK was only for the open (a FIFO must not block it). */
    fcntl(fd, F_SETFL, O_APPEND);
    return fd;
}

int owned_file_open(struct owned_file *f, const char *path)
{
    struct stat st;
    int fd = open_safely(path, &st);
    if (fd < 0) return fd;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->path = path;
    __atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
    return 0;
}

static bool is_ours(const struct owned_file *f, int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino;
}

/* The descriptor, checked; opened again by path when the number was lost.
 * -1 when neither works (the file stays lost until the next loss check). */
static int checked_fd(struct owned_file *f)
{
    int fd = __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE);
    if (fd < 0 || is_ours(f, fd)) return fd;
    pthread_mutex_lock(&reopen_mu);
    fd = __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && !is_ours(f, fd)) {
        /* The number is the program's now: never close it. */
        struct stat st;
        int again = f->path ? open_safely(f->path, &st) : -1;
        if (again >= 0) f->dev = st.st_dev, f->ino = st.st_ino;
        fd = again >= 0 ? again : -1;
        __atomic_store_n(&f->fd, fd, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&reopen_mu);
    return fd;
}

ssize_t owned_file_write(struct owned_file *f, const void *buf, size_t len)
{
    int fd = checked_fd(f);
    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    return write(fd, buf, len);
}

static ssize_t stream_write(void *cookie, const char *buf, size_t len)
{
    ssize_t n = owned_file_write(cookie, buf, len);
    return n < 0 ? 0 : n; /* 0: stdio's "error" for a cookie writer */
}

FILE *owned_file_stream(struct owned_file *f)
{
    cookie_io_functions_t io = {.write = stream_write};
    return fopencookie(f, "a", io);
}
