/* swap_load: load a trace file for the replay tools, plain text or
 * compressed (NAME.xz through `xz -dc`, NAME.gz through `gzip -dc`). */
#ifndef SWAP_LOAD_H
#define SWAP_LOAD_H

#include <stddef.h>

#include "swap_trace.h"

/* Append the events of the trace at path to t. -EINVAL on a malformed line
 * (its number in *bad_line), -ENOMEM, -EIO (also: the decompressor failed),
 * or -errno from opening the file. */
int swap_load(const char *path, struct swap_trace *t, size_t *bad_line);

#endif
