/* swap_trace: access traces for host swap, as text and in memory.
 *
 * Text format, version 1. One event per line; '#' starts a comment line;
 * blank lines are ignored; fields are separated by single spaces.
 *
 *   # ipcshim swap trace v1         header (written; optional on read)
 *   A <block> <bytes> <r|w>         the current launch accesses block
 *   A <block> <bytes> <r|w> c       the same by a copy or set (the shim's
 *                                   cudaMemcpy*, cudaMemset*: they work
 *                                   wherever the block is, swap.h)
 *   L                               the current launch is complete
 *   F <block>                       block freed
 *   I                               iteration boundary (generators only)
 *
 * <block> is any 64-bit id (the shim writes device pointers, "0x..."; any
 * strtoull base-0 form is read), <bytes> a decimal count > 0. Accesses
 * before the first L belong to launch 0; launch k is the logical time k, as
 * in swap.h. A trace with no I line is one iteration. The shim appends
 * events one line at a time (swap_trace_write_event) under IPCSHIM_TRACE.
 * Measuring and replaying traces is the offline tools' (swap_offline.h,
 * tests/swap/offline), not the library's. */
#ifndef SWAP_TRACE_H
#define SWAP_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "swap.h"

enum swap_event_kind {
    SWAP_EV_ACCESS = 'A',
    SWAP_EV_LAUNCH = 'L',
    SWAP_EV_FREE = 'F',
    SWAP_EV_ITER = 'I',
};

struct swap_event {
    uint64_t block; /* ACCESS, FREE */
    uint64_t bytes; /* ACCESS */
    uint8_t kind;   /* enum swap_event_kind */
    bool is_write;  /* ACCESS */
    bool is_copy;   /* ACCESS: by a copy or set, not a kernel */
};

/* A growable array of events. Zero-initialised is empty and valid. */
struct swap_trace {
    struct swap_event *ev;
    size_t n, cap;
};

void swap_trace_fini(struct swap_trace *t);
int swap_trace_push(struct swap_trace *t, struct swap_event e); /* -ENOMEM */

/* Write one event as one line (no header). -EIO on a write error. */
int swap_trace_write_event(FILE *f, const struct swap_event *e);
/* Header plus every event. -EIO. */
int swap_trace_write(FILE *f, const struct swap_trace *t);
/* Append the events of a text trace to t. -EINVAL on a malformed line (its
 * number in *bad_line when not NULL), -ENOMEM, -EIO. */
int swap_trace_read(FILE *f, struct swap_trace *t, size_t *bad_line);
int swap_trace_save(const char *path, const struct swap_trace *t);
int swap_trace_load(const char *path, struct swap_trace *t, size_t *bad_line);

#endif
