/* liveness: /proc start times and OFD byte locks, and the rule built on them. */
#include "helpers.h"
#include "liveness.h"

#include <errno.h>
#include <fcntl.h>

TestSuite(liveness, .timeout = 20);

static int scratch_fd(void)
{
    char path[] = "/tmp/ipcshim-liveness-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    return fd;
}

Test(liveness, start_time_of_self_and_of_nobody)
{
    uint64_t a = 0, b = 0;
    cr_assert_eq(liveness_start_time(getpid(), &a), 0);
    cr_assert_gt(a, 0);
    cr_assert_eq(liveness_start_time(getpid(), &b), 0);
    cr_assert_eq(a, b);
    uint64_t parent;
    cr_assert_eq(liveness_start_time(getppid(), &parent), 0);
    cr_assert_leq(parent, a, "a parent started no later than its child");
    cr_assert_eq(liveness_start_time(0, &b), -ESRCH);
    cr_assert_eq(liveness_start_time(0x3ffffff0, &b), -ESRCH);
}

Test(liveness, ofd_lock_seen_from_other_descriptions_only)
{
    int fd = scratch_fd();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int other = open(path, O_RDWR);
    cr_assert_geq(other, 0);
    cr_assert_not(liveness_byte_locked(other, 5));
    cr_assert_eq(liveness_lock_byte(fd, 5), 0);
    cr_assert(liveness_byte_locked(other, 5));
    cr_assert_not(liveness_byte_locked(fd, 5), "a description does not conflict with itself");
    cr_assert_not(liveness_byte_locked(other, 6), "one byte only");
    cr_assert_eq(liveness_lock_byte(other, 5), -EAGAIN);
    int dup_fd = dup(fd);
    close(fd);
    cr_assert(liveness_byte_locked(other, 5), "a dup keeps the description and its lock");
    close(dup_fd);
    cr_assert_not(liveness_byte_locked(other, 5), "the last close drops it");
    close(other);
}

Test(liveness, lock_dropped_when_holder_dies)
{
    int fd = scratch_fd();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    if (pid == 0) {
        int mine = open(path, O_RDWR);
        if (mine < 0 || liveness_lock_byte(mine, 3) != 0) _exit(1);
        chan_send(go[1], 1);
        pause();
        _exit(0);
    }
    cr_assert_eq(chan_recv(go[0]), 1);
    uint64_t start;
    cr_assert_eq(liveness_start_time(pid, &start), 0);
    cr_assert(liveness_alive(fd, 3, pid, start));
    cr_assert_not(liveness_alive(fd, 3, pid, start + 1), "wrong start time: a reused pid");
    cr_assert_not(liveness_alive(fd, 4, pid, start), "nobody holds the byte");
    kill(pid, SIGKILL);
    child_wait(pid);
    cr_assert_not(liveness_byte_locked(fd, 3));
    cr_assert_not(liveness_alive(fd, 3, pid, start));
}

Test(liveness, lock_held_but_pid_gone)
{
    /* A description that outlives its process (a fork child kept a copy):
     * the byte stays locked, the pid check says dead. */
    int fd = scratch_fd();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int other = open(path, O_RDWR);
    cr_assert_eq(liveness_lock_byte(other, 1), 0);
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    uint64_t start = 0;
    child_wait(pid);
    int probe = open(path, O_RDWR);
    cr_assert(liveness_byte_locked(probe, 1));
    cr_assert_not(liveness_alive(probe, 1, pid, start));
    cr_assert(liveness_alive(probe, 1, getpid(), ({
                                 uint64_t s;
                                 liveness_start_time(getpid(), &s);
                                 s;
                             })));
}
