/* liveness: OFD byte locks and /proc start times; see liveness.h for the rule.
 * No state; every function may be called with the registry lock held (none
 * blocks: locks are taken with F_OFD_SETLK, never F_OFD_SETLKW). */
#include "liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int liveness_start_time(pid_t pid, uint64_t *out)
{
    char path[64], buf[1024];
    if (pid <= 0) return -ESRCH;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -ESRCH : -EIO;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int err = errno;
    close(fd);
    if (n <= 0) return (n < 0 && err == ESRCH) ? -ESRCH : -EIO;
    buf[n] = 0;
    /* comm (field 2) may hold spaces and parentheses: start after the last ')'.
     * What follows is field 3 (state); field 22 is 19 fields further on. */
    char *p = strrchr(buf, ')');
    if (!p) return -EIO;
    p++;
    for (int field = 3; field < 22; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
        if (!*p) return -EIO;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || end == p) return -EIO;
    *out = v;
    return 0;
}

static struct flock byte_at(short type, off_t off)
{
    struct flock fl;
    memset(&fl, 0, sizeof fl); /* OFD locks require l_pid == 0 */
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = off;
    fl.l_len = 1;
    return fl;
}

int liveness_lock_byte(int fd, off_t off)
{
    struct flock fl = byte_at(F_WRLCK, off);
    if (fcntl(fd, F_OFD_SETLK, &fl) == 0) return 0;
    return (errno == EAGAIN || errno == EACCES) ? -EAGAIN : -errno;
}

void liveness_unlock_byte(int fd, off_t off)
{
    struct flock fl = byte_at(F_UNLCK, off);
    (void)fcntl(fd, F_OFD_SETLK, &fl);
}

int liveness_byte_state(int fd, off_t off)
{
    struct flock fl = byte_at(F_WRLCK, off);
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -errno;
    return fl.l_type != F_UNLCK;
}

int liveness_range_state(int fd, off_t off, off_t len)
{
    struct flock fl = byte_at(F_WRLCK, off);
    fl.l_len = len;
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return -errno;
    return fl.l_type != F_UNLCK;
}

bool liveness_byte_locked(int fd, off_t off)
{
    return liveness_byte_state(fd, off) != 0; /* unknown: alive */
}

pid_t liveness_tgid(pid_t tid)
{
    char path[48], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    FILE *f = fopen(path, "re");
    pid_t tgid = tid;
    if (!f) return tid;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Tgid: %d", &tgid) == 1) break;
    fclose(f);
    return tgid;
}

bool liveness_alive(int fd, off_t off, pid_t pid, uint64_t start_time)
{
    return liveness_byte_locked(fd, off) && liveness_pid_alive(pid, start_time);
}

bool liveness_pid_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0) return false;
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    uint64_t now_start;
    int r = liveness_start_time(pid, &now_start);
    if (r == -ESRCH) return false;
    if (r == 0 && now_start != start_time) return false;
    return true;
}
