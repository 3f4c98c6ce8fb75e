/* liveness: is the process behind a holder record still the one that wrote it?
 *
 * The rule (a leak is acceptable, a use-after-free is not):
 *   dead  iff  nobody holds the holder's OFD lock byte
 *          or  its pid no longer exists
 *          or  the pid's start time differs from the record (pid reused);
 *   anything we cannot find out (/proc unreadable, fcntl error) counts as alive.
 * The kernel drops an OFD lock when the last descriptor of its open file
 * description closes, i.e. when the process dies -- unless a forked child
 * still holds a copy of the descriptor, which the pid/start-time check covers. */
#ifndef LIVENESS_H
#define LIVENESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Start time (clock ticks since boot, field 22 of /proc/PID/stat).
 * 0, -ESRCH if there is no such process, -EIO if it cannot be read. */
int liveness_start_time(pid_t pid, uint64_t *out);

/* Take a write lock on one byte at off through fd's open file description,
 * without waiting. 0, or -EAGAIN when another description holds it. */
int liveness_lock_byte(int fd, off_t off);

/* Release our lock on the byte at off. */
void liveness_unlock_byte(int fd, off_t off);

/* True unless we know the byte at off is unlocked (F_OFD_GETLK). fd must not
 * be the description that took the lock: a description never conflicts with
 * itself, so its own locks read as unlocked. */
bool liveness_byte_locked(int fd, off_t off);

/* The byte at off: 1 locked by another description, 0 unlocked, or a
 * negative errno when it cannot be found out (e.g. -EBADF). */
int liveness_byte_state(int fd, off_t off);

/* The same for the len bytes from off, in one call: 1 when any of them is
 * locked by another description. */
int liveness_range_state(int fd, off_t off, off_t len);

/* The process half of the rule: the pid exists with this start time
 * (unknown counts as alive). */
bool liveness_pid_alive(pid_t pid, uint64_t start_time);

/* The thread group (process) of a thread id, from /proc; tid itself when it
 * cannot be read. */
pid_t liveness_tgid(pid_t tid);

/* The whole rule above. */
bool liveness_alive(int fd, off_t off, pid_t pid, uint64_t start_time);

#endif
