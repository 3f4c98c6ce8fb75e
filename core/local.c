/* local: the per-process uthash indexes of local.h and their mutex. Plain
 * data structure code: every function but local_lock/unlock and the two
 * has_* flags requires the local mutex. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* uthash makes a table (a header and its first buckets) when a hash gets
 * its first item and frees it with the last one; an export, open, close and
 * free cycle empties every table here each time. Those two allocations are
 * kept for reuse instead (only uthash's calls in this file come here, all
 * under the local mutex). */
static void *uth_alloc(size_t size);
static void uth_free(void *p, size_t size);
#define uthash_malloc(size) uth_alloc(size)
#define uthash_free(p, size) uth_free((p), (size))

#include "local.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static unsigned waiters; /* threads in local_wait (the mutex guards it) */
static int has_exports, has_pool_imports;
static struct local_export *exports, *limbo;
static size_t limbo_count;
static uint64_t limbo_bytes;
static struct local_map *maps, *maps_by_ptr;
static struct local_lease *leases;
enum { MAP_CACHE = 64, RECORD_CACHE = 16 };
static struct local_map *map_cache[MAP_CACHE]; /* freed records, reused without calloc */
static unsigned map_cached;
/* The same for the records an export, an open and a free make and drop
 * once each per IPC cycle. */
static struct local_export *export_cache[RECORD_CACHE];
static unsigned exports_cached;
static struct local_lease *lease_cache[RECORD_CACHE];
static unsigned leases_cached;

enum { UTH_CACHE = 8 };
static struct {
    size_t size; /* 0: this class is not used yet */
    void *p[UTH_CACHE];
    unsigned n;
} uth_cache[2]; /* the two sizes of a new table: header, first buckets */

static void *uth_alloc(size_t size)
{
    for (int c = 0; c < 2; c++)
        if (uth_cache[c].size == size) {
            if (uth_cache[c].n) return uth_cache[c].p[--uth_cache[c].n];
            return malloc(size);
        }
    for (int c = 0; c < 2; c++)
        if (!uth_cache[c].size) {
            uth_cache[c].size = size; /* uthash's first two allocations */
            break;
        }
    return malloc(size);
}

static void uth_free(void *p, size_t size)
{
    for (int c = 0; p && c < 2; c++)
        if (uth_cache[c].size == size && uth_cache[c].n < UTH_CACHE) {
            uth_cache[c].p[uth_cache[c].n++] = p;
            return;
        }
    free(p);
}

/* A zeroed record from cache (n of them kept), or a new one; one given back
 * is kept while the cache has room. */
#define CACHE_TAKE(cache, n)                                                                       \
    ((n) ? memset((cache)[--(n)], 0, sizeof *(cache)[0]) : calloc(1, sizeof *(cache)[0]))
#define CACHE_GIVE(cache, n, p)                                                                    \
    do {                                                                                           \
        if ((n) < sizeof(cache) / sizeof(cache)[0])                                                \
            (cache)[(n)++] = (p);                                                                  \
        else                                                                                       \
            free(p);                                                                               \
    } while (0)
#define CACHE_EMPTY(cache, n)                                                                      \
    do {                                                                                           \
        while (n)                                                                                  \
            free((cache)[--(n)]);                                                                  \
    } while (0)

void local_lock(void)
{
    pthread_mutex_lock(&mu);
}
void local_unlock(void)
{
    pthread_mutex_unlock(&mu);
}
void local_wait(void)
{
    waiters++;
    pthread_cond_wait(&cv, &mu);
    waiters--;
}
void local_broadcast(void)
{
    if (waiters) pthread_cond_broadcast(&cv);
}

bool local_has_exports(void)
{
    return __atomic_load_n(&has_exports, __ATOMIC_RELAXED);
}

bool local_has_pool_imports(void)
{
    return __atomic_load_n(&has_pool_imports, __ATOMIC_RELAXED);
}

/* The free path's negative filter: a counter per hash of the base, raised
 * and lowered with the exports table (under the lock), read without it. A
 * counter that reaches its ceiling stays there (a permanent false positive,
 * never a false negative). */
enum { FILTER_BITS = 16 };
static uint16_t filter[1u << FILTER_BITS];

static uint16_t *filter_slot(uint64_t base)
{
    return &filter[(base * 0x9E3779B97F4A7C15ull) >> (64 - FILTER_BITS)];
}

static void filter_change(uint64_t base, int delta)
{
    uint16_t *c = filter_slot(base), v = __atomic_load_n(c, __ATOMIC_RELAXED);
    if (v == UINT16_MAX || (delta < 0 && v == 0)) return;
    __atomic_store_n(c, (uint16_t)(v + delta), __ATOMIC_RELAXED);
}

void local_export_prefetch(uint64_t base)
{
    __builtin_prefetch(filter_slot(base), 1);
}

bool local_maybe_export(uint64_t base)
{
    return __atomic_load_n(filter_slot(base), __ATOMIC_RELAXED) != 0;
}

bool local_limbo_pending(void)
{
    return __atomic_load_n(&limbo_count, __ATOMIC_RELAXED) != 0;
}

/* Trap (the IPC cycle's cost): uthash frees a table when its last record
 * leaves and makes a new one (two allocations, zeroed buckets) at the next
 * add, so an export-free or open-close cycle paid for a whole table, per
 * table, every time. Each table therefore begins with an anchor: a static
 * record added before the first real one and never deleted, so the table
 * lives on while it holds no real record. No find returns an anchor (its
 * key is one no caller looks for, and it is checked); the accessors start
 * after it. An anchor that could not be added (out of memory) is simply
 * absent: the table then behaves as uthash's own. */
static struct local_export export_anchor;
static struct local_map map_anchor; /* in maps and in maps_by_ptr */
static struct local_lease lease_anchor = {.block = UINT32_MAX};

/* Each adds its table's anchor when the table does not exist yet. */
#define ANCHOR(hh, head, field, anchor)                                                            \
    do {                                                                                           \
        if (__builtin_expect(!(head), 0))                                                          \
            HASH_ADD(hh, head, field, sizeof(anchor).field, &(anchor));                            \
    } while (0)

struct local_export *local_exports(void)
{
    return exports == &export_anchor ? export_anchor.hh.next : exports;
}

struct local_map *local_maps(void)
{
    return maps == &map_anchor ? map_anchor.hh.next : maps;
}

struct local_export *local_export_find(uint64_t base)
{
    struct local_export *e;
    HASH_FIND(hh, exports, &base, sizeof base, e);
    return e == &export_anchor ? NULL : e;
}

struct local_export *local_export_new(void)
{
    return CACHE_TAKE(export_cache, exports_cached);
}

void local_export_free(struct local_export *e)
{
    CACHE_GIVE(export_cache, exports_cached, e);
}

int local_export_add(struct local_export *e)
{
    ANCHOR(hh, exports, base, export_anchor);
    HASH_ADD(hh, exports, base, sizeof e->base, e);
    if (!UTH_ADDED(e, hh)) return -ENOMEM;
    filter_change(e->base, +1);
    __atomic_store_n(&has_exports, 1, __ATOMIC_RELAXED);
    return 0;
}

void local_export_del(struct local_export *e)
{
    if (e->in_limbo) {
        DL_DELETE(limbo, e);
        __atomic_store_n(&limbo_count, limbo_count - 1, __ATOMIC_RELAXED);
        __atomic_store_n(&limbo_bytes, limbo_bytes - e->size, __ATOMIC_RELAXED);
    }
    filter_change(e->base, -1);
    HASH_DELETE(hh, exports, e);
    local_export_free(e);
}

int local_export_move(struct local_export *e, uint64_t base)
{
    /* Trap: an add may grow the bucket array, and a failed growth leaves the
     * item out of the table (it stays on the limbo list: a dangling record).
     * With growth held off for this one add, adding to a table that lives on
     * (its anchor) allocates nothing and cannot fail; a table without its
     * anchor would be freed by the delete, so that one is not touched. */
    if (HASH_COUNT(exports) < 2) return -EBUSY;
    HASH_DELETE(hh, exports, e);
    filter_change(e->base, -1);
    e->base = base;
    unsigned noexpand = exports->hh.tbl->noexpand;
    exports->hh.tbl->noexpand = 1;
    HASH_ADD(hh, exports, base, sizeof e->base, e);
    exports->hh.tbl->noexpand = noexpand;
    filter_change(base, +1);
    return 0;
}

void local_limbo_add(struct local_export *e)
{
    if (e->in_limbo) return;
    e->in_limbo = true;
    DL_APPEND(limbo, e);
    __atomic_store_n(&limbo_count, limbo_count + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&limbo_bytes, limbo_bytes + e->size, __ATOMIC_RELAXED);
}

struct local_export *local_limbo_head(void)
{
    return limbo;
}
size_t local_limbo_count(void)
{
    return __atomic_load_n(&limbo_count, __ATOMIC_RELAXED);
}
uint64_t local_limbo_bytes(void)
{
    return __atomic_load_n(&limbo_bytes, __ATOMIC_RELAXED);
}

_Static_assert(sizeof(struct local_map_key) == sizeof(struct ipc_handle) + sizeof(uint64_t),
               "a map key has no padding: keys hash and compare byte by byte");

static void map_key(struct local_map_key *key, const struct ipc_handle *h, uint64_t ctx)
{
    key->handle = *h;
    key->ctx = ctx;
}

unsigned local_map_hash(const struct ipc_handle *h, uint64_t ctx)
{
    struct local_map_key key;
    unsigned hash;
    map_key(&key, h, ctx);
    HASH_VALUE(&key, sizeof key, hash);
    return hash;
}

struct local_map *local_map_find(const struct ipc_handle *h, uint64_t ctx, unsigned hash)
{
    struct local_map_key key;
    struct local_map *m;
    map_key(&key, h, ctx);
    HASH_FIND_BYHASHVALUE(hh, maps, &key, sizeof key, hash, m);
    return m == &map_anchor ? NULL : m;
}

struct local_map *local_map_find_ptr(uint64_t ptr)
{
    struct local_map *m;
    HASH_FIND(hh_ptr, maps_by_ptr, &ptr, sizeof ptr, m);
    return m == &map_anchor ? NULL : m;
}

struct local_map *local_map_new(void)
{
    return CACHE_TAKE(map_cache, map_cached);
}

int local_map_add(struct local_map *m, unsigned hash)
{
    ANCHOR(hh, maps, key, map_anchor);
    HASH_ADD_BYHASHVALUE(hh, maps, key, sizeof m->key, hash, m);
    return UTH_ADDED(m, hh) ? 0 : -ENOMEM;
}

int local_map_set_ptr(struct local_map *m, uint64_t ptr)
{
    m->ptr = ptr;
    ANCHOR(hh_ptr, maps_by_ptr, ptr, map_anchor);
    HASH_ADD(hh_ptr, maps_by_ptr, ptr, sizeof m->ptr, m);
    if (!UTH_ADDED(m, hh_ptr)) return -ENOMEM;
    if (m->kind == IPC_KIND_POOL) {
        /* The program lets go of a pool import with a free: the free
         * path's filter must not pass it by. */
        filter_change(ptr, +1);
        __atomic_store_n(&has_exports, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&has_pool_imports, 1, __ATOMIC_RELAXED);
    }
    return 0;
}

void local_map_del(struct local_map *m)
{
    if (m->hh_ptr.tbl && m->kind == IPC_KIND_POOL) filter_change(m->ptr, -1);
    if (m->hh_ptr.tbl) HASH_DELETE(hh_ptr, maps_by_ptr, m); /* set once opened, closing or not */
    HASH_DELETE(hh, maps, m);
    CACHE_GIVE(map_cache, map_cached, m);
}

struct local_lease *local_lease_find(uint32_t block)
{
    struct local_lease *l;
    HASH_FIND(hh, leases, &block, sizeof block, l);
    return l == &lease_anchor ? NULL : l;
}

int local_lease_add(uint32_t block, uint64_t generation, uint32_t lease)
{
    if (block == lease_anchor.block) return -EINVAL; /* never a block's index */
    struct local_lease *l = CACHE_TAKE(lease_cache, leases_cached), *old = NULL;
    if (!l) return -ENOMEM;
    ANCHOR(hh, leases, block, lease_anchor);
    l->block = block;
    l->lease = lease;
    l->generation = generation;
    HASH_REPLACE(hh, leases, block, sizeof l->block, l, old);
    if (!UTH_ADDED(l, hh)) {
        CACHE_GIVE(lease_cache, leases_cached, l);
        return -ENOMEM;
    }
    if (old) CACHE_GIVE(lease_cache, leases_cached, old);
    return 0;
}

void local_lease_del(struct local_lease *l)
{
    HASH_DELETE(hh, leases, l);
    CACHE_GIVE(lease_cache, leases_cached, l);
}

void local_reset(bool free_memory)
{
    if (free_memory) {
        struct local_export *e, *et;
        struct local_map *m, *mt;
        struct local_lease *l, *lt;
        HASH_ITER(hh, exports, e, et)
        {
            HASH_DELETE(hh, exports, e);
            if (e != &export_anchor) free(e);
        }
        HASH_CLEAR(hh_ptr, maps_by_ptr);
        HASH_ITER(hh, maps, m, mt)
        {
            HASH_DELETE(hh, maps, m);
            if (m != &map_anchor) free(m);
        }
        HASH_ITER(hh, leases, l, lt)
        {
            HASH_DELETE(hh, leases, l);
            if (l != &lease_anchor) free(l);
        }
        CACHE_EMPTY(map_cache, map_cached);
        CACHE_EMPTY(export_cache, exports_cached);
        CACHE_EMPTY(lease_cache, leases_cached);
        for (int c = 0; c < 2; c++)
            CACHE_EMPTY(uth_cache[c].p, uth_cache[c].n);
    }
    for (int c = 0; c < 2; c++)
        uth_cache[c].n = 0;
    map_cached = 0;
    exports_cached = leases_cached = 0;
    exports = limbo = NULL;
    maps = maps_by_ptr = NULL;
    leases = NULL;
    __atomic_store_n(&limbo_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&limbo_bytes, 0, __ATOMIC_RELAXED);
    memset(filter, 0, sizeof filter);
    __atomic_store_n(&has_exports, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&has_pool_imports, 0, __ATOMIC_RELAXED);
}

void local_reinit_locks(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
    mu = fresh;
    cv = fresh_cv;
    waiters = 0; /* the other threads are not in the child */
}
