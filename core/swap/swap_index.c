/* swap_index: see swap_index.h. A sorted array of blocks plus the bounds of
 * the whole set, so that the common parameter word (a scalar, a pointer to
 * ordinary memory) is rejected by two compares without a search. */
#include "swap_index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct swap_index {
    struct swap_block *b; /* sorted by base, non-overlapping */
    size_t n, cap;
    uint64_t lo, hi; /* lowest base, highest end; lo >= hi when empty */
};

int swap_index_create(struct swap_index **out)
{
    struct swap_index *x = calloc(1, sizeof *x);
    if (!x) return -ENOMEM;
    x->lo = UINT64_MAX;
    *out = x;
    return 0;
}

void swap_index_destroy(struct swap_index *x)
{
    if (!x) return;
    free(x->b);
    free(x);
}

size_t swap_index_count(const struct swap_index *x)
{
    return x->n;
}

const struct swap_block *swap_index_at(const struct swap_index *x, size_t i)
{
    return i < x->n ? &x->b[i] : NULL;
}

/* First position whose base is > addr. */
static size_t upper(const struct swap_index *x, uint64_t addr)
{
    size_t lo = 0, hi = x->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->b[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void update_bounds(struct swap_index *x)
{
    x->lo = x->n ? x->b[0].base : UINT64_MAX;
    x->hi = 0;
    for (size_t i = 0; i < x->n; i++) /* ends are not sorted when sizes vary */
        if (x->b[i].base + x->b[i].size > x->hi) x->hi = x->b[i].base + x->b[i].size;
}

int swap_index_insert(struct swap_index *x, const struct swap_block *b)
{
    if (!b->size || b->base + b->size < b->base) return -EINVAL;
    size_t at = upper(x, b->base);
    if (at > 0 && x->b[at - 1].base + x->b[at - 1].size > b->base) return -EEXIST;
    if (at < x->n && x->b[at].base < b->base + b->size) return -EEXIST;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        struct swap_block *nb = realloc(x->b, cap * sizeof *nb);
        if (!nb) return -ENOMEM;
        x->b = nb, x->cap = cap;
    }
    memmove(&x->b[at + 1], &x->b[at], (x->n - at) * sizeof *x->b);
    x->b[at] = *b;
    x->n++;
    if (b->base < x->lo) x->lo = b->base;
    if (b->base + b->size > x->hi) x->hi = b->base + b->size;
    return 0;
}

int swap_index_remove(struct swap_index *x, uint64_t base, struct swap_block *out)
{
    size_t at = upper(x, base);
    if (at == 0 || x->b[at - 1].base != base) return -ENOENT;
    at--;
    if (out) *out = x->b[at];
    memmove(&x->b[at], &x->b[at + 1], (x->n - at - 1) * sizeof *x->b);
    x->n--;
    update_bounds(x);
    return 0;
}

struct swap_block *swap_index_find(const struct swap_index *x, uint64_t addr)
{
    if (addr < x->lo || addr >= x->hi) return NULL;
    size_t at = upper(x, addr);
    if (at == 0) return NULL;
    struct swap_block *b = &x->b[at - 1];
    return addr - b->base < b->size ? b : NULL;
}

size_t swap_param_filter(const uint64_t *offsets, const uint64_t *sizes, size_t n,
                         struct swap_param *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (offsets[i] % 8 == 0 && sizes[i] >= 8 && sizes[i] <= UINT32_MAX &&
            offsets[i] <= UINT32_MAX)
            out[k++] = (struct swap_param){
                .index = (uint32_t)i, .offset = (uint32_t)offsets[i], .size = (uint32_t)sizes[i]};
    return k;
}

static void add(struct swap_touch *t, struct swap_block *b)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->block[i] == b) return;
    if (t->n < sizeof t->block / sizeof *t->block)
        t->block[t->n++] = b;
    else
        t->overflow = true;
}

struct swap_block *swap_index_touch(const struct swap_index *x, uint64_t addr, struct swap_touch *t)
{
    struct swap_block *b = swap_index_find(x, addr);
    if (b) add(t, b);
    return b;
}

static void scan_words(const struct swap_index *x, const unsigned char *p, size_t size,
                       struct swap_touch *t)
{
    for (size_t off = 0; off + 8 <= size; off += 8) {
        uint64_t word;
        memcpy(&word, p + off, 8); /* the host copy need not be aligned */
        if (word < x->lo || word >= x->hi) continue;
        struct swap_block *b = swap_index_find(x, word);
        if (b) add(t, b);
    }
}

void swap_index_scan_args(const struct swap_index *x, void *const *args,
                          const struct swap_param *params, size_t n, struct swap_touch *t)
{
    if (!args || !x->n) return;
    for (size_t i = 0; i < n; i++) {
        const void *value = args[params[i].index];
        if (value) scan_words(x, value, params[i].size, t);
    }
}

void swap_index_scan_buffer(const struct swap_index *x, const void *buf, size_t size,
                            struct swap_touch *t)
{
    if (buf && x->n) scan_words(x, buf, size, t);
}
