/* swap_managed_ahead: whether a managed block fetched ahead came late
 * (swap_managed_ahead.c). Under host_swap.c's swap_lock. */
#ifndef SWAP_MANAGED_AHEAD_H
#define SWAP_MANAGED_AHEAD_H

#include <stdbool.h>
#include <stdint.h>

#include "symbols.h"

/* Around one call of the engine's fetch ahead: begin opens a batch in the
 * current context, add puts a managed block prefetched on stream into it
 * (recording the batch's first event before its first prefetch), end
 * records the batch's last event after the prefetches. */
void managed_ahead_begin(void);
void managed_ahead_add(uint64_t base, CUstream stream);
void managed_ahead_end(void);

/* Whether managed block base, fetched ahead, comes late for work about to
 * be queued on stream: its prefetch not complete while the work could
 * start now. The block leaves its batch. No host wait. *idle caches
 * swap_stream_idle across one launch's blocks (-1: not asked yet). */
bool managed_ahead_late(uint64_t base, CUstream stream, int *idle);

/* Whether stream has no work left (cached in *idle: -1 not asked yet). */
bool swap_stream_idle(CUstream stream, int *idle);

#endif
