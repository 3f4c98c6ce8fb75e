/* swap_layout: kernels' parameter layouts for host swap's launch scan,
 * cached per function (swap_layout.c). */
#ifndef SWAP_LAYOUT_H
#define SWAP_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "swap_index.h"
#include "uthash_wrap.h"

/* The door a kernel handle came through: a runtime function pointer or a
 * driver CUfunction. */
enum fn_kind { FN_RUNTIME, FN_DRIVER };

struct layout {
    struct {
        const void *fn;
        int kind;
    } key;
    bool known; /* false: the driver gave no layout; its accesses are unknown */
    size_t n;
    UT_hash_handle hh;
    struct swap_param params[]; /* those that may hold a pointer */
};

/* The cached layout of fn; NULL when it cannot be had now (a program's
 * error not read yet, or no memory). Thread-safe, takes its own lock; the
 * entry is never freed, so the pointer stays valid. */
const struct layout *layout_of(enum fn_kind kind, const void *fn);

#endif
