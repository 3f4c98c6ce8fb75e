/* registry_layout: the segment's geometry. The capacities a process asks
 * for (from its options) and the capacities a new segment is laid out for;
 * the byte offset of every area (registry_layout); one process's views into
 * a mapping and how much of each table is in use now (registry_refresh);
 * and the reservations (fallocate) that every byte gets before it is first
 * touched, at creation, at attach and when a table grows. No lock: the
 * callers hold what their own comments say. */
#include "registry_internal.h"
#include "log.h"
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

static int reserve_space(int fd, off_t offset, off_t len)
{
    return posix_fallocate(fd, offset, len);
}
int (*registry_reserve)(int fd, off_t offset, off_t len) = reserve_space;

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

int registry_layout(const struct reg_caps *caps, struct reg_layout *out)
{
    return registry_layout_chunked(caps, 0, out);
}

int registry_layout_chunked(const struct reg_caps *caps, uint32_t given, struct reg_layout *out)
{
    if (!caps->max_holders || caps->max_holders > REG_MAX_HOLDERS_LIMIT || !caps->max_blocks ||
        caps->max_blocks > REG_MAX_BLOCKS_LIMIT || !caps->max_leases ||
        caps->max_leases > REG_MAX_LEASES_LIMIT)
        return -EINVAL;
    uint32_t nb = 64;
    while (nb < caps->max_blocks)
        nb <<= 1;
    out->held_words = (caps->max_holders + 63) / 64;
    /* Chunks of REG_LEASE_CHUNK slots, smaller when the table is small for
     * its holders (every holder that opens anything owns a chunk): a
     * power of two, at least 1, at most max_leases / max_holders -- or the
     * one given (a registry's own, from its header). */
    uint32_t chunk = REG_LEASE_CHUNK;
    if (given) {
        if (given > REG_LEASE_CHUNK || (given & (given - 1))) return -EINVAL;
        chunk = given;
    } else {
        while (chunk > 1 && (uint64_t)chunk * caps->max_holders > caps->max_leases)
            chunk >>= 1;
    }
    out->lease_chunk = chunk;
    out->nchunks = (caps->max_leases + chunk - 1) / chunk;
    size_t off = sizeof(struct reg_header);
    out->locks = off;
    off += round_up(caps->max_holders, 64);
    out->holders = off;
    off += round_up((size_t)caps->max_holders * sizeof(struct reg_holder), 64);
    out->heads = off;
    off += round_up((size_t)caps->max_holders * sizeof(uint32_t), 64);
    out->blocks = off;
    off += round_up((size_t)caps->max_blocks * sizeof(struct reg_block), 64);
    out->held = off;
    off += round_up((size_t)caps->max_blocks * out->held_words * sizeof(uint64_t), 64);
    out->leases = off;
    off += (size_t)out->nchunks * chunk * sizeof(struct reg_lease);
    out->chunks = off;
    off += round_up((size_t)out->nchunks * sizeof(uint32_t), 64);
    out->buckets = off;
    off += round_up((size_t)nb * sizeof(uint32_t), 64);
    out->size = off;
    out->nbuckets = nb;
    return 0;
}

/* The options' defaults, from the one table (options.def). */
#define OPT(field, type, def, choices, help)                                                       \
    static const char __attribute__((unused)) default_##field[] = def;
#include "options.def"
#undef OPT

/* One bound: `v` asked by `var`, within [1, limit]. */
static uint32_t bound(const char *var, uint64_t v, uint32_t limit, const char *def, int *warned)
{
    if (v == 0) {
        uint64_t d = strtoull(def, NULL, 10);
        log_once(warned, LOG_WARN, "%s=0 is not a valid bound; using the default %s", var, def);
        v = d;
    }
    if (v > limit) {
        log_once(warned, LOG_WARN, "%s=%llu is more than a registry can hold; using %u", var,
                 (unsigned long long)v, (unsigned)limit);
        v = limit;
    }
    return (uint32_t)v;
}

/* The layout of a registry asked to hold `asked`: its capacities at least
 * the default bounds (the file is sparse: room costs nothing until it is
 * used), so that a later process can raise a bound that a creator set low;
 * holders as asked (they size each block's bitmap), and the lease chunk
 * that the asked bounds give, so that a small lease bound stays exact. */
int registry_capacity(const struct reg_caps *asked, struct reg_caps *caps, struct reg_layout *l)
{
    uint32_t floor_blocks = (uint32_t)strtoul(default_max_blocks, NULL, 10);
    uint32_t floor_leases = (uint32_t)strtoul(default_max_leases, NULL, 10);
    if (registry_layout(asked, l) != 0) return -EINVAL;
    *caps = *asked;
    if (caps->max_blocks < floor_blocks) caps->max_blocks = floor_blocks;
    if (caps->max_leases < floor_leases) caps->max_leases = floor_leases;
    return registry_layout_chunked(caps, l->lease_chunk, l);
}

void registry_caps_from_options(const struct options *opt, struct reg_caps *out)
{
    static int warned_holders, warned_blocks, warned_leases;
    out->max_holders = bound("IPCSHIM_MAX_HOLDERS", opt->max_holders, REG_MAX_HOLDERS_LIMIT,
                             default_max_holders, &warned_holders);
    out->max_blocks = bound("IPCSHIM_MAX_BLOCKS", opt->max_blocks, REG_MAX_BLOCKS_LIMIT,
                            default_max_blocks, &warned_blocks);
    out->max_leases = bound("IPCSHIM_MAX_LEASES", opt->max_leases, REG_MAX_LEASES_LIMIT,
                            default_max_leases, &warned_leases);
}

void registry_set_views(struct registry *r, const struct reg_caps *caps, const struct reg_layout *l)
{
    r->hdr = (struct reg_header *)r->base;
    r->holders = (struct reg_holder *)(r->base + l->holders);
    r->export_heads = (uint32_t *)(r->base + l->heads);
    r->blocks = (struct reg_block *)(r->base + l->blocks);
    r->held = (uint64_t *)(r->base + l->held);
    r->leases = (struct reg_lease *)(r->base + l->leases);
    r->chunk_owner = (uint32_t *)(r->base + l->chunks);
    r->buckets = (uint32_t *)(r->base + l->buckets);
    r->max_holders = caps->max_holders;
    r->cap_blocks = caps->max_blocks;
    r->cap_chunks = l->nchunks;
    r->cap_buckets = l->nbuckets;
    r->held_words = l->held_words;
    r->lease_chunk = l->lease_chunk;
    r->lock_base = (off_t)l->locks;
    r->size = l->size;
    registry_refresh(r);
}

void registry_refresh(struct registry *r)
{
    struct reg_header *h = r->hdr;
    /* pairs with the release stores and CASes of grow_blocks, grow_chunks, raise_limit */
    uint32_t b = __atomic_load_n(&h->blocks_now, __ATOMIC_ACQUIRE);
    uint32_t c = __atomic_load_n(&h->chunks_now, __ATOMIC_ACQUIRE);
    uint32_t nb = __atomic_load_n(&h->nbuckets_now, __ATOMIC_ACQUIRE);
    uint32_t lb = __atomic_load_n(&h->limit_blocks, __ATOMIC_ACQUIRE);
    uint32_t ll = __atomic_load_n(&h->limit_leases, __ATOMIC_ACQUIRE);
    r->max_blocks = b < r->cap_blocks ? b : r->cap_blocks;
    r->nchunks = c < r->cap_chunks ? c : r->cap_chunks;
    r->max_leases = r->nchunks * r->lease_chunk;
    /* The bounds, within the capacities whatever the header says. */
    uint32_t lc = (uint32_t)(((uint64_t)ll + r->lease_chunk - 1) / r->lease_chunk);
    r->limit_blocks = lb && lb < r->cap_blocks ? lb : r->cap_blocks;
    r->limit_chunks = lc && lc < r->cap_chunks ? lc : r->cap_chunks;
    /* A bucket count that is not a power of two within the reserved area
     * (corrupt) reads as the smallest, always reserved. */
    r->nbuckets = nb >= 64 && !(nb & (nb - 1)) && nb <= r->cap_buckets ? nb : 64;
}

/* Reserves the bytes of records [from, to) of an array at offset `at`
 * whose records are `each` bytes, with `reserve`. 0 or an errno. */
static int reserve_with(int (*reserve)(int, off_t, off_t), int fd, size_t at, size_t each,
                        uint32_t from, uint32_t to)
{
    if (to <= from) return 0;
    return reserve(fd, (off_t)(at + (size_t)from * each), (off_t)((size_t)(to - from) * each));
}

/* The same with registry_reserve. */
int reg_reserve_records(int fd, size_t at, size_t each, uint32_t from, uint32_t to)
{
    return reserve_with(registry_reserve, fd, at, each, from, to);
}

/* registry_reserve for bytes others may be using: fallocate(2) only.
 * posix_fallocate()'s fallback, where the file system has no fallocate,
 * writes a zero byte into every block that reads zero -- over whatever
 * another process stores there meanwhile. Such a file system is no tmpfs:
 * nothing is reserved there, as before. */
int reg_reserve_live(int fd, off_t offset, off_t len)
{
    if (registry_reserve != reserve_space) return registry_reserve(fd, offset, len); /* tests */
    if (fallocate(fd, 0, offset, len) == 0) return 0;
    return errno == EOPNOTSUPP || errno == ENOSYS ? 0 : errno;
}

/* Buckets for n blocks in a table of at most cap buckets: a power of two
 * >= n, at least 64. */
uint32_t reg_buckets_within(uint32_t cap, uint32_t n)
{
    uint32_t nb = 64;
    while (nb < n && nb < cap)
        nb <<= 1;
    return nb;
}

/* Reserves, with `reserve`, what a creator or an attacher touches of a
 * segment laid out by l: the header, lock bytes, holders and export heads
 * whole, and the first `blocks` block records and bitmaps, `chunks` lease
 * chunks and owner words, `buckets` hash buckets. 0 or an errno (ENOSPC).
 * Reserving bytes already reserved allocates nothing, so it succeeds on a
 * full file system too. */
int reg_reserve_in_use(int (*reserve)(int, off_t, off_t), int fd, const struct reg_layout *l,
                       uint32_t blocks, uint32_t chunks, uint32_t buckets)
{
    const size_t chunk = l->lease_chunk * sizeof(struct reg_lease);
    int err = reserve(fd, 0, (off_t)l->blocks);
    if (!err) err = reserve_with(reserve, fd, l->blocks, sizeof(struct reg_block), 0, blocks);
    if (!err) err = reserve_with(reserve, fd, l->held, l->held_words * sizeof(uint64_t), 0, blocks);
    if (!err) err = reserve_with(reserve, fd, l->leases, chunk, 0, chunks);
    if (!err) err = reserve_with(reserve, fd, l->chunks, sizeof(uint32_t), 0, chunks);
    if (!err) err = reserve_with(reserve, fd, l->buckets, sizeof(uint32_t), 0, buckets);
    return err;
}
