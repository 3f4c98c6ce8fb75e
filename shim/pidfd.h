/* pidfd: the interposed pidfd_open, pidfd_getfd and syscall, which fall
 * back to the fd server (fdpass.h) where the kernel refuses. */
#ifndef PIDFD_H
#define PIDFD_H

/* Find the next pidfd_open, pidfd_getfd and syscall (libc's, or a later
 * preload's); from the constructor (init.c), before which the interposers
 * call the kernel directly. */
void pidfd_resolve_at_load(void);

#endif
