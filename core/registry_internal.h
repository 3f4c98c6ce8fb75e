/* registry_internal: what the registry's pieces (registry*.c) share and
 * nobody else may use: the commit-point macros of the protocol table
 * (registry.h), the crash tests' pause, and the few functions one piece
 * calls in another. Calls between the pieces go one way only, so that no
 * files call each other in a circle (tests/tools/test_structure.py):
 * registry_layout.c and registry_fd.c at the bottom; registry_chunks.c on
 * them; registry_blocks.c (with registry_repair) on chunks; registry_leases.c
 * and registry_lock.c on blocks; registry_holders.c on leases and the lock;
 * registry_segment.c (open, close) on what it needs. */
#ifndef REGISTRY_INTERNAL_H
#define REGISTRY_INTERNAL_H

#include "options.h"
#include "registry.h"

#include <assert.h>
#include <unistd.h>

enum {
    REG_MAX_HOLDERS_LIMIT = 1 << 16,
    REG_MAX_BLOCKS_LIMIT = 1 << 24,
    REG_MAX_LEASES_LIMIT = 1 << 24,
};

/* The state/intent fields are the commit points of a record (registry.h):
 * a release store keeps the compiler and CPU from moving the field writes
 * that precede it after it, so a writer that dies mid-update never leaves a
 * record marked in use with half its fields written. */
#define STORE_STATE(field, value) __atomic_store_n(&(field), (value), __ATOMIC_RELEASE)
#define LOAD_STATE(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)

/* True unless the calling thread provably does not hold r's lock: the lock
 * word names its owner's thread id (glibc's robust mutex). Only for
 * REG_ASSERT_LOCKED: a thread of another PID namespace with our number
 * passes, and where the word cannot be read everything passes. */
static inline bool reg_lock_held(const struct registry *r)
{
#ifdef __GLIBC__
    int word = __atomic_load_n(&r->hdr->lock.mutex.__data.__lock, __ATOMIC_RELAXED);
    return (word & 0x3fffffff) == (int)gettid(); /* FUTEX_TID_MASK */
#else
    (void)r;
    return true;
#endif
}

/* Builds with -Dlock_checks=true (scripts/test's sanitizer run) check
 * "lock" where registry.h's protocol table says a field is written under
 * the registry lock. Off by default: each check is a gettid system call on
 * the export path. */
#ifdef IPCSHIM_LOCK_CHECKS
#define REG_ASSERT_LOCKED(r) assert(reg_lock_held(r))
#else
#define REG_ASSERT_LOCKED(r) ((void)(r))
#endif

/* IPCSHIM_TEST_DELAY_US: a pause at points inside critical sections, so that
 * crash tests can kill a process there (tests/crash). One load when unset. */
static inline void reg_test_delay(void)
{
    uint64_t us = options_get()->test_delay_us;
    if (us) usleep((useconds_t)(us > 1000000 ? 1000000 : us));
}

/* Offsets of the arrays in r's segment (from its views). */
static inline size_t reg_off_of(const struct registry *r, const void *p)
{
    return (size_t)((const uint8_t *)p - r->base);
}

/* Does the exporter of a block in this state wait for its holders to go?
 * RETIRING counts: an exporter whose retire saw our bit goes back to LIMBO
 * and sleeps, so the holder that clears the last bit meanwhile must wake it
 * (pairs with the CAS back to LIMBO in reg_block_retire; without it the free
 * waited for the collector's next poll: tests/model/lease.pml,
 * WAKE_RETIRING). A wake of an exporter that retired it anyway is spurious
 * and harmless. */
static inline bool reg_waits_on_holders(uint32_t state)
{
    return state == BLOCK_LIMBO || state == BLOCK_RETIRING;
}

/* ---- registry_layout.c ---- */

/* The capacities and layout of a new segment asked to hold `asked`
 * (at least the default bounds; the lease chunk the asked bounds give).
 * 0 or -EINVAL. */
int registry_capacity(const struct reg_caps *asked, struct reg_caps *caps, struct reg_layout *l);
/* Reserves records [from, to) of the array at offset `at`, `each` bytes a
 * record, with registry_reserve. 0 or an errno. */
int reg_reserve_records(int fd, size_t at, size_t each, uint32_t from, uint32_t to);
/* registry_reserve for bytes others may be using: fallocate(2) only. */
int reg_reserve_live(int fd, off_t offset, off_t len);
/* Reserves, with `reserve`, what is in use of a segment laid out by l. */
int reg_reserve_in_use(int (*reserve)(int, off_t, off_t), int fd, const struct reg_layout *l,
                       uint32_t blocks, uint32_t chunks, uint32_t buckets);
/* Buckets for n blocks in a table of at most cap: a power of two >= n, >= 64. */
uint32_t reg_buckets_within(uint32_t cap, uint32_t n);

/* ---- registry_lock.c ---- */

/* Initialises the segment's mutex: process-shared, robust. 0 or -errno. */
int reg_lock_init(pthread_mutex_t *m);
/* Is the segment's mutex of the type reg_lock_init makes? */
bool reg_lock_kind_ok(const pthread_mutex_t *m);
/* This process's PID namespace (an inode number), 0 when unknown. */
uint32_t reg_own_pidns(void);

/* ---- registry_chunks.c ---- */

/* The owner of chunk c (c < r->nchunks), or REG_NONE. No lock (acquire). */
uint32_t reg_chunk_owner_of(const struct registry *r, uint32_t c);
/* Gives chunk c back, after its leases are freed (release store). */
void reg_chunk_disown(struct registry *r, uint32_t c);
/* A chunk for holder, its slots reset and naming it; locked: may also take
 * a chunk whose owner is not an active holder. REG_NONE when full. */
uint32_t reg_chunk_claim(struct registry *r, uint32_t holder, bool locked);
/* The repair's part in the lease table: chunks of holders that are not
 * active emptied and given back, leases that name nothing freed. Lock
 * held, after the blocks' repair. */
void reg_chunks_repair(struct registry *r);

/* ---- registry_blocks.c ---- */

/* A LIMBO (or RETIRING) block that lost its last holder: one hand-off
 * re-armed under the window rule. Returns the exporter, to wake. No lock. */
uint32_t reg_block_limbo_unheld(struct reg_block *b);

/* ---- registry_leases.c ---- */

/* Frees lease li (a dead holder's, or one the lock-held API drops): bit
 * cleared, then the record. Returns whether nobody holds the block now. */
bool reg_lease_free(struct registry *r, uint32_t li);

#endif
