/* collector: the background thread that frees this process's limbo blocks
 * as soon as their last importer lets go.
 *
 * The thread only runs ipc_collector_step() (ipc.c) in a loop: wait on this
 * holder's futex word until an importer's last close wakes it or the next
 * hand-off expires, then collect. It is detached, runs with every signal
 * blocked, never keeps the process alive, and is gone in a fork child. */
#ifndef COLLECTOR_H
#define COLLECTOR_H

#include <stdbool.h>

/* Start the thread once per process (later calls do nothing). */
void collector_start(void);

/* Ask the thread to finish and wait (bounded, about a second) until it has.
 * The caller then wakes it: the thread checks collector_stopping() after
 * every wait. */
void collector_stop(void);

/* True once collector_stop() was called. */
bool collector_stopping(void);

/* In a fork child: the thread does not exist here; forget it. */
void collector_after_fork(void);

/* Wait until *running reads 0 (a detached thread's last store), at most
 * max_ms: yields first (a woken thread is usually gone within
 * microseconds), then sleeps in 100 us steps. For the stop functions of
 * the shim's threads (this one, leak.c's watch). */
void thread_wait_stopped(const int *running, unsigned max_ms);

/* Provided by ipc.c: one wait-then-collect round. */
void ipc_collector_step(void);
/* Provided by ipc.c: wake this process's collector now. */
void ipc_collector_kick(void);

#endif
