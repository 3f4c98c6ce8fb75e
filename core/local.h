/* local: this process's own indexes (uthash; never in shared memory).
 *
 *   exports   allocation base -> the block record this process exported
 *             (index + generation), with its limbo state and own-opens;
 *   limbo     the exports freed by the program but not yet really freed;
 *   maps      (handle, ctx) -> an opened mapping, and pointer -> mapping;
 *   leases    block -> this process's lease slot on it (one per block, all
 *             contexts).
 *
 * One process mutex (local_lock) guards all of it. Lock order: the local
 * mutex before the registry lock, never the reverse; neither is held across
 * the host's operations (host.h). */
#ifndef LOCAL_H
#define LOCAL_H

#include "ipc_handle.h"
#include "uthash_wrap.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct local_export {
    uint64_t base; /* key */
    uint64_t size, ctx, generation;
    uint64_t identity; /* the driver's identity of the allocation (ipc_export_identity) */
    uint32_t block;
    int device;
    uint32_t own_opens; /* opens of our own export, answered with base */
    bool in_limbo;
    bool lock_deferred; /* freed while the registry lock was out of reach: the
                         * block is still LIVE there; collect() moves it on */
    struct ipc_handle handle;
    UT_hash_handle hh;
    struct local_export *prev, *next; /* limbo list */
    /* For the leak report (leak.h): */
    uint64_t export_ns; /* CLOCK_MONOTONIC of the first export */
    uint32_t handoffs;  /* exports of this block (hand-offs sent) */
    uint32_t callsite;  /* callsite.h id of the first export */
};

struct local_map_key {
    struct ipc_handle handle;
    uint64_t ctx;
};

struct local_map {
    struct local_map_key key;
    uint64_t ptr, generation;
    uint32_t count, block, lease;
    bool pending;  /* the real open is in flight (no ptr yet) */
    uint8_t kind;  /* IPC_KIND_*: what the program calls to let go of it */
    uint64_t pool; /* a pool import's pool handle (0: not checked) */
    UT_hash_handle hh, hh_ptr;
    /* For the leak report (leak.h): */
    uint64_t open_ns, size; /* first open (CLOCK_MONOTONIC); the block's bytes */
    uint32_t opens;         /* opens since the first; closes = opens - count */
    uint32_t callsite;      /* callsite.h id of the first open */
    int32_t exporter_pid;
    char exporter_comm[16];
    uint64_t dead_ns; /* when the watch first saw its exporter dead, 0 if not */
};

struct local_lease {
    uint32_t block; /* key */
    uint32_t lease;
    uint64_t generation;
    UT_hash_handle hh;
};

void local_lock(void);
void local_unlock(void);
/* Wait for a pending mapping to settle (local lock held). */
void local_wait(void);
/* Wakes the threads in local_wait, if any (local lock held). */
void local_broadcast(void);

/* True once this process exported a block or imported a pool allocation
 * (the free path must then look, local_maybe_export): one relaxed load. */
bool local_has_exports(void);
/* True once this process imported a pool allocation: one relaxed load. */
bool local_has_pool_imports(void);

/* False when base is certainly neither an export of this process nor a
 * pool import's pointer: a counting filter read without the lock (false
 * positives only). */
bool local_maybe_export(uint64_t base);

/* Starts loading what local_export_add(base) will write (the filter's
 * counter: a cold line of a large table), without the lock. */
void local_export_prefetch(uint64_t base);

/* True when limbo is not empty; a relaxed load, no lock. */
bool local_limbo_pending(void);

struct local_export *local_export_find(uint64_t base);
/* A zeroed record (from a small cache of freed ones), or NULL; one never
 * added goes back with local_export_free. */
struct local_export *local_export_new(void);
void local_export_free(struct local_export *e);
int local_export_add(struct local_export *e);  /* 0 or -ENOMEM; sets has_exports */
void local_export_del(struct local_export *e); /* also leaves limbo; frees e */
/* Re-keys e (in the table) by base, which no record of the table has: 0,
 * or -EBUSY (nothing changed) when the table has no anchor. */
int local_export_move(struct local_export *e, uint64_t base);
void local_limbo_add(struct local_export *e);
struct local_export *local_limbo_head(void);
/* Written under the local lock, readable without it (each on its own: a
 * count and a byte total read apart may be one free apart). */
size_t local_limbo_count(void);
uint64_t local_limbo_bytes(void);

/* The tables' heads, to walk with HASH_ITER(hh, ...) (the leak report). */
struct local_export *local_exports(void);
struct local_map *local_maps(void);

/* The hash of the key (h, ctx), computed once per open: local_map_find
 * and local_map_add take it instead of hashing the 72 bytes again. */
unsigned local_map_hash(const struct ipc_handle *h, uint64_t ctx);
struct local_map *local_map_find(const struct ipc_handle *h, uint64_t ctx, unsigned hash);
struct local_map *local_map_find_ptr(uint64_t ptr);
/* A zeroed record (from a small cache of freed ones), or NULL. */
struct local_map *local_map_new(void);
int local_map_add(struct local_map *m, unsigned hash);    /* by key; 0 or -ENOMEM */
int local_map_set_ptr(struct local_map *m, uint64_t ptr); /* 0 or -ENOMEM */
void local_map_del(struct local_map *m);                  /* frees m (into the cache) */

struct local_lease *local_lease_find(uint32_t block);
int local_lease_add(uint32_t block, uint64_t generation, uint32_t lease); /* 0 or -ENOMEM */
void local_lease_del(struct local_lease *l);

/* Forget everything (in a fork child, or at shutdown). With free_memory
 * false the tables are abandoned, for when they may be mid-update (a fork
 * child that no atfork handler saw). Local lock held (or single-threaded). */
void local_reset(bool free_memory);

/* In a fork child from the atfork handler: fresh mutex and condition. */
void local_reinit_locks(void);

#endif
