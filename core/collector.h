/* collector: the background thread that frees this process's limbo blocks
 * as soon as their last importer lets go.
 *
 * The thread only runs the step it was started with (limbo_collector_step,
 * limbo.c) in a loop: wait on this holder's futex word until an importer's
 * last close wakes it or the next hand-off expires, then collect. It is
 * detached, runs with every signal blocked, never keeps the process alive,
 * and is gone in a fork child. This file knows nothing of limbo: the work
 * comes in as callbacks, so it never calls back into its caller. */
#ifndef COLLECTOR_H
#define COLLECTOR_H

#include <stdbool.h>

/* One round of the thread's work (wait, then collect); it returns soon
 * after a kick. */
typedef void collector_step_fn(void);
/* Wakes the thread from its step's wait, from any thread. */
typedef void collector_kick_fn(void);

/* Start the thread once per process (later calls do nothing): it runs
 * step() until collector_stop(); collector_stop() wakes it with kick(). */
void collector_start(collector_step_fn *step, collector_kick_fn *kick);

/* Ask the thread to finish and wait (bounded, about a second) until it has,
 * waking it with the kick it was started with (the step checks
 * collector_stopping() after every wait). A no-op before any start. */
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

#endif
