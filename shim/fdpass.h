/* fdpass: the fd hand-off without ptrace rights (issue 29, item 2).
 *
 * A process under the shim that exports a CUDA shareable handle as a POSIX
 * fd serves that fd, and only that fd, over an abstract unix socket to a
 * peer of the same user and domain (SCM_RIGHTS); a process whose
 * pidfd_open / pidfd_getfd the kernel refuses asks the exporter's shim
 * instead. The rules (who may get which fd) are at the top of fdpass.c. */
#ifndef FDPASS_H
#define FDPASS_H

#include <stdbool.h>
#include <sys/types.h>

/* A new fd (O_CLOEXEC) for the same open file description as `fd` in
 * process `pid`, obtained from that process's shim over the local socket.
 * Returns the fd, or a negative errno: -ENOENT when no shim listens for
 * `pid` (in this user and domain), -EBADF when `fd` was not exported there
 * (or was closed or reused since), -EPERM when the server refuses this
 * caller, -ESRCH when the process went away mid-request, -ETIMEDOUT when it
 * did not answer within the timeout, other negative errnos from the socket
 * calls. Never blocks longer than about a second per step; thread-safe. */
int fdpass_fetch(pid_t pid, int fd);

/* Record `fd` as exported as a CUDA shareable handle (call after a
 * successful cuMemExportToShareableHandle / cuMemPoolExportToShareableHandle
 * with a POSIX fd type), and start the server thread if it is not running
 * in this process. Never fails visibly: a failure is logged once and the
 * fd simply is not served. Thread-safe; async-signal-unsafe. */
void fdpass_note_exported(int fd);

/* True when process pid runs an fd server in this user and domain (its
 * socket's credentials say so). For pidfd.c's substitute pidfd. */
bool fdpass_listening(pid_t pid);

/* The fork chain's steps (init.c): prefork holds the exported set's lock
 * across fork (a leaf lock, held only to look up or add an fd); the parent
 * step drops it; the child step makes it anew, closes the inherited
 * listening socket and forgets the parent's exports (they are not the
 * child's). */
void fdpass_prefork(void);
void fdpass_postfork_parent(void);
void fdpass_postfork_child(void);

#endif
