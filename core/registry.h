/* registry: the shared segment that every process of one user and domain maps.
 *
 * Layout (all offsets fixed by the header's capacities, pinned by
 * tests/core/test_registry.c):
 *   header | holder lock bytes | holders[] | export heads[] | blocks[] |
 *   held[] | leases[] | chunk owners[] | buckets[]
 * Fixed-width fields, indices (REG_NONE = none) instead of pointers. The
 * file is as large as the capacities allow but sparse: each table is in use
 * up to the header's *_now count, and every byte is reserved (fallocate)
 * before it is first touched.
 *
 * Primary records are holders, blocks and leases; their `state`/`intent`
 * field is written last when a record is filled and first when it is
 * released (release stores), so a record is either wholly in use or free
 * whatever instruction its writer died at. The free list, the hash chains
 * and the exporters' lists are derived and rebuilt by registry_repair()
 * when the lock is recovered from a dead owner. Every index read from the
 * segment is bounds-checked: the bytes may be corrupt or hostile.
 *
 * Who holds a block is its `held` bitmap, one bit per holder slot, set and
 * cleared with atomic or/and by the importer itself, without the registry
 * lock. Setting or clearing a bit twice changes nothing, so a death between
 * any two instructions is repaired by clearing the dead holder's bits. Each
 * bit is backed by a lease record (count of opens, intent, since when) that
 * the importer writes before setting the bit and frees after clearing it,
 * in chunks of (at most) REG_LEASE_CHUNK slots it owns: a dead holder's
 * sweep and a process's own exit walk its chunks, not the table.
 *
 * Record functions require the registry lock unless their comment says
 * "no lock".
 *
 * THE PROTOCOL: every field of the segment, who writes it, how, and who
 * reads it. This table is the one description of the lock-free protocol
 * (docs/architecture.md and docs/crash-safety.md give the overview and
 * point here). "lock": the registry lock held; "own": only the holder the
 * record (or chunk) belongs to, or a sweeper under the lock once it is
 * dead; "setup": the creator, before `ready`. Each seq_cst or handshake
 * site in the code has a one-line "pairs with" comment naming its other
 * half.
 *
 * == struct reg_header ==
 *   field           written by              how                  read by / pairs with
 *   magic, abi      setup                   abi, then magic      registry_validate (pread, after
 *                                           (release)            ready)
 *   ready           setup, last             release store        validate: acquire fence, then
 *                                                                re-reads the header
 *   size, max_holders, max_blocks, max_leases, nbuckets, held_words, lease_chunk
 *                   setup; never after      plain                validate checks them; views
 *   creator_pid, created_ns
 *                   setup                   plain                reports (ipcshim-stat)
 *   lock            pthread (robust,        the mutex; the word  registry_lock; lock_slow reads the
 *                   process-shared)         CAS'd seq_cst by     word (relaxed) to judge its owner
 *                                           mark_owner_dead
 *   lock_since_ns   the locker, after       relaxed store        lock_slow (a hold's identity),
 *                   taking the lock                              reports
 *   repairs         lock (after             plain                reports
 *                   EOWNERDEAD)
 *   block_free      lock (derived: pop,     plain                reg_block_next_free: a relaxed
 *                   recycle, rebuild)                            hint, no lock
 *   blocks_now, nbuckets_now
 *                   lock (grow_blocks,      release store after  registry_refresh (acquire): reads
 *                   after reserving)        the reservation      only reserved records
 *   chunks_now      anyone, no lock         acq_rel CAS after    registry_refresh (acquire)
 *                   (grow_chunks)           the reservation
 *   limit_blocks, limit_leases
 *                   setup; raised by any    acq_rel CAS, never   registry_refresh (acquire);
 *                   attacher, no lock       lowered              the growers
 *   removing        lock: the last one out  seq_cst store 1;     registry_removing (seq_cst fence
 *                   (remove_if_unused);     0 if it keeps the    + load) after take_slot's ACTIVE:
 *                   registry_repair: 0      file or repairs      Dekker, one sees the other
 *   swept           lock (sweep_found)      plain                reports (ipcshim-stat)
 *   reserved        nobody (zero)           -                    -
 *
 * == struct reg_holder ==
 *   field           written by              how                  read by / pairs with
 *   start_time, pid, pidns, attach_ns, comm
 *                   own: take_slot, before  plain, published by  liveness (reg_holder_alive),
 *                   `state`                 the state store      sweeps, reports
 *   nonce           own: take_slot, before  plain (read relaxed) reg_holder_current after its
 *                   `state`                                      acquire of state; sweep_found
 *   state           take_slot (own lock     release store        LOAD_STATE (acquire) everywhere;
 *                   byte, no lock): ACTIVE;                      remove_if_unused's seq_cst loads
 *                   release/sweep (lock):                        (Dekker with `removing`)
 *                   FREE
 *   wake            anyone (registry_wake)  seq_cst fetch_add,   the holder's seq_cst load before
 *                                           then FUTEX_WAKE      it collects, then FUTEX_WAIT on
 *                                                                that value (ipc.c)
 *   reserved        nobody (zero)           -                    -
 *
 * == struct reg_block ==
 *   field           written by              how                  read by / pairs with
 *   handle          lock: reg_block_create  plain, before state  reg_block_lookup: relaxed words,
 *                                                                checked by the generation
 *   generation      lock: create, first     relaxed store (+1)   lookup: before and after the
 *                                                                compare (acquire fence); opens
 *                                                                re-check it (acquire)
 *   base, size, device, exporter, exporter_nonce, exporter_pid, exporter_comm, rules
 *                   lock: create            plain, before state  opens (relaxed, after lookup's
 *                                                                acquire of state), reports
 *   state           see the block's state   release store,       lookup (acquire); the importer's
 *                   machine below           or seq_cst store/CAS settle_state (seq_cst): Dekker
 *                                           on the retire path   with reg_block_retire
 *   pending         exporter (lock):        seq_cst RMWs (a      reg_block_retire (seq_cst), after
 *                   export +1, expiry;      relaxed store at     RETIRING: an aborted open's give-
 *                   importer (no lock):     create/recycle,      back (+1) precedes its bit clear
 *                   claim CAS, give-back;   under the lock)
 *                   limbo_unheld CAS 0->1
 *   claimed         importer, no lock       relaxed fetch_add    reports
 *   hash_next       lock (create, recycle,  plain                lookup's chain walk (relaxed);
 *                   rebuild)                                     bounded by the table's size
 *   first_export_ns, last_export_ns
 *                   lock (export); no lock  relaxed (advisory)   the exporter under the lock
 *                   limbo_unheld re-arms                         (expiry)
 *   limbo_since_ns  exporter (its free)     plain                reports, the exporter
 *   orphaned_ns, expired
 *                   lock                    plain                reports
 *   exp_next, exp_prev, exp_on
 *                   lock (derived: list     plain                sweeps and exits (lock); rebuilt
 *                   push/unlink)                                 by a repair
 *
 * == struct reg_lease ==
 *   field           written by              how                  read by / pairs with
 *   block, block_gen, holder, open_ns
 *                   own: reg_lease_begin,   plain, before intent sweeps and repair (lock), reports
 *                   before intent
 *   count           own (opens, closes)     relaxed store        sweeps, reports
 *   intent          own: see the lease's    release store/CAS    LOAD_STATE (acquire): sweeps,
 *                   state machine below;                         reg_lease_find, ticket checks
 *                   sweep/repair (lock)
 *
 * == the arrays ==
 *   field           written by              how                  read by / pairs with
 *   lock bytes      never as memory: one OFD lock byte (fcntl) per holder slot, taken by its
 *                   holder (take_slot); the kernel drops it when the process dies (liveness.h)
 *   held[]          importer, no lock:      seq_cst fetch_or /   reg_block_retire's reg_block_held
 *                   reg_hold / reg_unhold;  fetch_and; seq_cst   (seq_cst): Dekker with reg_hold
 *                   sweeps, repair (lock);  stores (clear_held)  then settle_state's state load
 *                   create/recycle (lock)
 *   chunk owners[]  claimer, no lock        acq_rel CAS (holder  reg_chunk_owner_of (acquire)
 *                   (own_chunk); owner/     + 1); release store
 *                   sweeper: disown         of 0 after the
 *                                           chunk's leases
 *   export heads[]  lock (derived)          plain                sweeps, exits (lock)
 *   buckets[]       lock: create, recycle,  release store        lookup (acquire), then the
 *                   rebuild                                      record's own state (acquire)
 *
 * A block's states (BLOCK_*), and who moves it:
 *   FREE -> LIVE          reg_block_create (exporter, lock; generation bumped first)
 *   LIVE -> LIMBO         the exporter's free (ipc.c: seq_cst store without the lock, or under it)
 *   LIMBO -> RETIRING     reg_block_retire (exporter, no lock; seq_cst CAS)
 *   RETIRING -> RETIRED   reg_block_retire: no bit set, nothing pending (seq_cst CAS)
 *   RETIRING -> LIMBO     reg_block_retire otherwise; or a repair (rebuild_index, lock; a CAS)
 *   RETIRED -> FREE       reg_block_recycle (the exporter after its real free, lock)
 *   LIVE, LIMBO, RETIRING -> ORPHANED
 *                         its exporter is gone and someone holds it (sweep, let go, repair; lock)
 *   any but ORPHANED -> FREE
 *                         its exporter is gone and nobody holds it (reg_block_let_go; lock)
 *   ORPHANED -> FREE      its last lease goes (reg_block_unheld, lock; or a repair)
 * An importer sets its bit first and then reads the state: LIVE or LIMBO, it
 * holds the block; RETIRING, it waits for the exporter's answer; anything
 * else, it clears its bit again. A last holder leaving a LIMBO (or
 * RETIRING) block wakes its exporter (registry_wake).
 *
 * A lease's intents (LEASE_*), all moved by its owner without the lock
 * unless said:
 *   FREE -> OPENING       reg_lease_begin: record written, intent stored, then the bit set
 *   OPENING -> OPEN       ipc_open_commit (CAS, release)
 *   OPEN -> CLOSING       the last local close begins (CAS, release)
 *   CLOSING -> OPEN       the close aborted, or an open came meanwhile (CAS, release)
 *   * -> CLOSING -> FREE  reg_lease_end: CLOSING stored, bit cleared, FREE stored
 *   * -> FREE             reg_lease_free: a sweep of its dead owner or a lock-held drop (bit
 *                         cleared first); a repair frees leases that name nothing (lock)
 * A holder: FREE -> ACTIVE by take_slot (its lock byte, no lock), ACTIVE ->
 * FREE by reg_holder_release or reg_holder_sweep (lock), once all it held
 * is released. */
#ifndef REGISTRY_H
#define REGISTRY_H

#include "ipc_handle.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define REG_MAGIC 0x31534d4843504931ull /* "1IPCHMS1" */
#define REG_ABI                                                                                    \
    6u /* 3: lock-free leases: holder bitmaps, lease chunks, word hashes; 4: exporters' lists;     \
          5: block records by cache line; 6: bounds as limits any attacher may raise */
#define REG_NONE UINT32_MAX
#define REG_DOMAIN_MAX 64
#define REG_NAME_TRIES 8 /* the name, then "~1".."~7" when another user squats it */

enum { HOLDER_FREE = 0, HOLDER_ACTIVE = 1 };
#define REG_LEASE_CHUNK 32u /* lease slots a holder claims at a time (at most) */

/* RETIRING: the exporter (without the registry lock) is deciding whether a
 * LIMBO block is free of holders (then RETIRED, else back to LIMBO); an
 * importer that sets its bit meanwhile waits for the outcome. */
enum { BLOCK_FREE = 0, BLOCK_LIVE, BLOCK_LIMBO, BLOCK_ORPHANED, BLOCK_RETIRED, BLOCK_RETIRING };
enum { LEASE_FREE = 0, LEASE_OPENING, LEASE_OPEN, LEASE_CLOSING };

struct reg_header {
    uint64_t magic; /* REG_MAGIC */
    uint32_t abi;   /* REG_ABI */
    uint32_t ready; /* 1 once the creator finished (release store) */
    uint64_t size;  /* total bytes, recomputed and checked by attachers */
    uint32_t max_holders;
    uint32_t max_blocks;
    uint32_t max_leases;
    uint32_t nbuckets;   /* power of two */
    uint32_t block_free; /* derived: free block list head */
    uint32_t held_words; /* 64-bit words of each block's held bitmap */
    uint32_t repairs;    /* times the lock was recovered from a dead owner */
    int32_t creator_pid;
    uint64_t created_ns; /* CLOCK_REALTIME */
    union {
        pthread_mutex_t mutex; /* process-shared, robust */
        uint8_t bytes[64];
    } lock;
    /* When the lock's current hold began (CLOCK_MONOTONIC), written by the
     * locker after it got the lock (who holds it is in the lock word);
     * advisory, for ipcshim-stat and for telling one long hold from the
     * next. Carved from `reserved` (zero in segments of earlier builds of
     * ABI 1, whose lockers never write it): the layout is unchanged. */
    uint64_t lock_since_ns;
    /* Growth: the records in use now, each at most its capacity above (the
     * file is that large, but sparse: only what is in use is reserved and
     * touched). Raised under the lock, read by anyone (acquire). */
    uint32_t blocks_now;   /* block records (and their held bitmaps) */
    uint32_t chunks_now;   /* lease chunks */
    uint32_t nbuckets_now; /* hash buckets (a power of two, <= nbuckets) */
    uint32_t lease_chunk;  /* lease slots per chunk (registry_layout) */
    /* Bounds: how far the tables may grow, at most the capacities above
     * (max_blocks, max_leases: the layout, at least the default bounds, so
     * that a creator that asked for less does not cap the domain). Set by
     * the creator to what it asked; raised (atomic max, never lowered) by
     * an attacher that asks for more; read by growers (acquire). */
    uint32_t limit_blocks;
    uint32_t limit_leases;
    /* 1 while the last process out decides to remove the file (under the
     * lock; registry_remove_if_unused), else 0. An attacher that sees it
     * after publishing its slot backs off and opens the path again. */
    uint32_t removing;
    /* Holders swept dead (killed, or ended without the shim's exit: _exit
     * before the library saw it), counted under the lock; a process that
     * exited through the shim is not counted. Carved from a reserved
     * word (zero in segments of earlier builds): the layout is unchanged. */
    uint32_t swept;
    uint64_t reserved[11];
};

struct reg_holder {
    uint64_t start_time; /* field 22 of /proc/PID/stat */
    uint64_t nonce;      /* random, new for every attach */
    uint64_t attach_ns;  /* CLOCK_MONOTONIC */
    int32_t pid;
    uint32_t state; /* HOLDER_* */
    uint32_t wake;  /* futex word: bumped to wake this holder's collector */
    /* Its PID namespace (inode of /proc/self/ns/pid; 0 unknown). Across
     * namespaces a pid means nothing: liveness rests on the lock alone. */
    uint32_t pidns;
    uint32_t reserved[6];
    /* Observability (ABI 2; written by the holder itself before `state`): */
    char comm[16]; /* its command name (PR_GET_NAME), NUL-terminated */
};

/* reg_block.rules: what the exporter chose, recorded at creation so that
 * whichever process drops the last lease applies it (not its own options),
 * and what kind of export the block is (for the reports). */
enum {
    BLOCK_RULE_HANDOFF_WINDOW = 1u << 0, /* IPCSHIM_HANDOFF=window */
    BLOCK_KIND_POOL = 1u << 8, /* cudaMemPoolExportPointer (IPC_KIND_POOL), not legacy IPC */
    BLOCK_KIND_VMM = 1u << 9,  /* legacy IPC on VMM memory (IPC_KIND_VMM, shim/vmm.c) */
};

/* Three cache lines, laid out by who touches them on the IPC cycle (every
 * line the exporter writes and an importer reads moves between their CPUs,
 * at up to ~200 ns a move on a shared VM): the handle, then what an open
 * reads and the exporter decides on, then what only the exporter and the
 * reports touch. */
struct reg_block {
    uint8_t handle[IPC_HANDLE_BYTES];
    /* -- what an open reads (and claims: pending, claimed) -- */
    uint64_t generation; /* bumped every time the record is reused */
    uint64_t exporter_nonce;
    uint64_t base;
    uint64_t size;
    uint32_t exporter;  /* holder index */
    uint32_t state;     /* BLOCK_* */
    uint32_t pending;   /* unclaimed hand-offs */
    uint32_t claimed;   /* hand-offs claimed by an importer's first open (observability) */
    uint32_t hash_next; /* derived: hash chain, or free list when FREE */
    uint32_t rules;     /* BLOCK_RULE_*: the exporter's options, obeyed by every process */
    int32_t device;
    int32_t exporter_pid; /* copied from the exporter's holder at creation */
    /* -- the exporter's and the reports' -- */
    uint64_t first_export_ns; /* oldest pending hand-off */
    uint64_t last_export_ns;  /* newest pending hand-off; they expire after it */
    uint64_t limbo_since_ns;
    uint64_t orphaned_ns; /* CLOCK_MONOTONIC when it became ORPHANED, else 0 */
    /* Derived, under the lock: the exporter's list of its blocks, so that
     * a sweep or an exit walks its own (indices + 1; 0 = none; the heads
     * are registry.export_heads). exp_on is
     * the holder whose list it is on (+ 1; 0 = on none): every block LIVE,
     * LIMBO, RETIRING or RETIRED is on its exporter's; FREE and ORPHANED
     * ones are on none. */
    uint32_t exp_next, exp_prev, exp_on;
    uint32_t expired;       /* hand-offs that expired unclaimed (observability) */
    char exporter_comm[16]; /* the exporter's command name (observability) */
};

/* Written only by its holder (the owner of its chunk), or by a sweeper
 * once that holder is dead; read by anyone. */
struct reg_lease {
    uint64_t block_gen;
    uint32_t block;
    uint32_t holder;
    uint32_t count;   /* opens in that holder, all contexts, incl. in flight */
    uint32_t intent;  /* LEASE_* */
    uint64_t open_ns; /* CLOCK_MONOTONIC of the lease's first open */
};

/* Capacities (max_leases is rounded up to whole chunks). */
struct reg_caps {
    uint32_t max_holders, max_blocks, max_leases;
};

/* Byte offsets of each area; size is the whole segment. */
struct reg_layout {
    size_t locks, holders, heads, blocks, held, leases, chunks, buckets, size;
    uint32_t nbuckets, held_words, nchunks, lease_chunk;
};

/* One process's view of the segment. */
struct registry {
    int fd; /* verified against dev/ino before use: registry_fd() */
    uint8_t *base;
    size_t size;
    struct reg_header *hdr;
    struct reg_holder *holders;
    /* max_holders: the first block of each holder's list of exports (index
     * + 1; 0 when none). Derived, under the lock, rebuilt by a repair. Not
     * in the holder record, which every open reads: the exporter writes
     * its head on every export and recycle. */
    uint32_t *export_heads;
    struct reg_block *blocks;
    uint64_t *held; /* max_blocks bitmaps of held_words words */
    struct reg_lease *leases;
    uint32_t *chunk_owner; /* nchunks: each chunk's owner + 1, 0 when unowned (reg_chunk_owner) */
    uint32_t *buckets;
    /* In use now (registry_refresh; they only grow), and the capacities. */
    uint32_t max_holders, max_blocks, max_leases, nbuckets, held_words, nchunks;
    uint32_t cap_blocks, cap_chunks, cap_buckets, lease_chunk;
    /* The bounds now (reg_header.limit_*, within the capacities). */
    uint32_t limit_blocks, limit_chunks;
    off_t lock_base; /* file offset of holder 0's lock byte */
    dev_t dev;
    ino_t ino;
    uint32_t self_slot; /* our holder slot (REG_NONE): its lock byte is re-taken if lost */
    uint64_t self_nonce;
    void *pin;            /* a page mapped from the descriptor that holds our lock byte */
    int32_t stuck_tid;    /* a lock owner we already waited IPCSHIM_LOCK_WAIT for ... */
    uint64_t stuck_since; /* ... in the hold that began then (lock_since_ns) */
    uint32_t *spare;      /* free lease slots of our own chunks (process-local) */
    uint32_t nspare, spare_cap;
    char name[96];  /* for messages: "/ipcshim-<uid>-<domain>" in /dev/shm, else the path */
    char path[256]; /* the file */
};

static inline uint64_t reg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* reg_now_ns's clock as of its last tick (CLOCK_MONOTONIC_COARSE): never
 * ahead of it, at most a tick (1-4 ms) behind, and read in 4 ns where the
 * precise clock takes 20-40 in a VM. For stamps that only reports, stats
 * and identities read (a limbo or a lease that seems to start a tick
 * early), never for a deadline. */
static inline uint64_t reg_coarse_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return reg_now_ns();
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- segment ---- */

/* "/ipcshim-<uid>-<domain>" into buf. -EINVAL unless domain is
 * [A-Za-z0-9._-]{1,64}. */
int registry_name(const char *domain, char *buf, size_t len);

/* Where registries live (docs/crash-safety.md, "Where the registry lives"):
 * /dev/shm by default, where every process of the user meets, containers
 * sharing an IPC namespace included (squatted names are stepped over, see
 * registry_candidate); IPCSHIM_REGISTRY_DIR=DIR puts them in DIR, and
 * "private" in /run/user/<euid> when it is a directory of ours nobody else
 * can write (logind's: nobody else can create a name there, but it comes
 * and goes with the user's sessions, so it is opt-in). */
const char *registry_dir(char *buf, size_t len);

/* Candidate `i` (0 .. REG_NAME_TRIES-1) of the domain's registry: its path
 * and its display name. Candidate 0 is "<dir>/ipcshim-<uid>-<domain>", the
 * others add "~i": another user can pre-create a name in a shared directory
 * like /dev/shm, and then the next one is used. -EINVAL for a bad domain. */
int registry_candidate(const char *domain, int i, char *path, size_t plen, char *name, size_t nlen);

/* The one validator of an existing registry file, used by registry_open and
 * by ipcshim-stat (inspect.c): a regular file, ours, no group/other access,
 * initialised (waiting up to registry_attach_wait_ms for its creator), magic,
 * ABI, capacities, header, size, lock type. On success fills *caps and *l.
 * On refusal returns a negative errno (-EPERM, -EPROTO, -ETIMEDOUT, ...) and
 * a reason in why[] ("is owned by uid 7, not us", "has bad magic", ...),
 * to be prefixed with the registry's name. -EUSERS: owned by another user
 * (the name is squatted). */
int registry_validate(int fd, struct reg_caps *caps, struct reg_layout *l, char *why, size_t len);

/* Locate the domain's existing registry, as registry_open would find it:
 * the first candidate that exists and is not another user's. Fills path and
 * name. 0, -ENOENT (none), -EINVAL (bad domain). */
int registry_locate(const char *domain, char *path, size_t plen, char *name, size_t nlen);

/* Remove every candidate of the domain that is ours (tests, tools). */
void registry_unlink(const char *domain);

/* The registry's descriptor, verified to still be the registry (fstat
 * dev/inode as recorded at attach): a program that closes descriptors it
 * does not own, or dup2()s over ours, gets a fresh one opened by path (and
 * our lock byte re-taken if it was lost), never a test of the wrong file.
 * -1 when the registry cannot be re-opened: callers count unknown as alive. */
int registry_fd(struct registry *r);

/* The capacities a process asks for (IPCSHIM_MAX_HOLDERS, _BLOCKS,
 * _LEASES), each within what a registry can hold: a bound above the
 * largest allowed (65536 holders, 2^24 blocks, 2^24 leases) is that
 * largest, a bound of 0 the default, each with one warning line naming the
 * variable and the value used. */
struct options;
void registry_caps_from_options(const struct options *opt, struct reg_caps *out);

/* Offsets for these capacities. -EINVAL if a capacity is 0 or too large. */
int registry_layout(const struct reg_caps *caps, struct reg_layout *out);

/* The same with lease chunks of `chunk` slots (a registry's own, from its
 * header; 0 = derived from caps). -EINVAL also if chunk is not a power of
 * two of at most REG_LEASE_CHUNK. */
int registry_layout_chunked(const struct reg_caps *caps, uint32_t chunk, struct reg_layout *out);

/* Points r's views (hdr, holders, blocks, ...) and capacities into the
 * segment mapped at r->base, as laid out by l for caps, and reads how much
 * is in use (registry_refresh). */
void registry_set_views(struct registry *r, const struct reg_caps *caps,
                        const struct reg_layout *l);

/* Reads how many records are in use now (another process may have grown
 * the registry). Done by registry_lock; a view that is behind only misses
 * records (the caller then asks under the lock), never reads past what is
 * reserved. */
void registry_refresh(struct registry *r);

/* How long an attacher waits for a segment's creator to publish `ready`
 * (2000 ms). Tests and the fuzz target shorten it. */
extern unsigned registry_attach_wait_ms;

/* Reserves bytes of the segment before they are touched (posix_fallocate):
 * 0 or an errno (ENOSPC: the directory's file system is full; the registry
 * is then refused, or does not grow: a page of a sparse file that cannot be
 * allocated would kill the host with SIGBUS at its first touch). A seam for
 * tests. */
extern int (*registry_reserve)(int fd, off_t offset, off_t len);

/* Create the domain's segment with caps as its bounds (laid out for at
 * least the default bounds: registry_capacity), or attach to the existing
 * one, raising its block and lease bounds to caps' within its capacities
 * (its holder slots are fixed: they size every block's bitmap). 0, or a
 * negative errno after logging why the segment was refused. *r is zeroed
 * on failure. */
int registry_open(struct registry *r, const char *domain, const struct reg_caps *caps);

/* The last process out: removes the registry's file when no holder slot is
 * in use or being taken (so that finished jobs leave nothing in /dev/shm),
 * and says whether it did. Lock held, our own slot released first. Dekker
 * with registry_removing(): it publishes `removing` and then reads every
 * slot, an attacher publishes its slot and then reads `removing` (both
 * seq-cst), so either it sees the attacher and keeps the file, or the
 * attacher sees it and backs off. */
bool registry_remove_if_unused(struct registry *r);

/* After taking a holder slot: is the file being removed by its last user?
 * Then release the slot, close, and open the path again (a new file). No
 * lock. Pairs with registry_remove_if_unused. */
bool registry_removing(struct registry *r);

/* Unmap and close. The caller's holder slot, if any, must be released first. */
void registry_close(struct registry *r);

/* In a forked child: replace the inherited descriptor (which shares the
 * parent's OFD locks) with a fresh one on the same segment, pinned by a
 * small mapping so that closing the descriptor cannot drop our lock byte
 * (an OFD lock lives as long as its description: any mapping made from it
 * keeps it). 0 or -errno. */
int registry_reopen_fd(struct registry *r);

/* ---- lock ---- */

/* Take the registry lock; if its owner died, repair and carry on. A lock
 * word that names a thread which is not a holder of this registry (it no
 * longer exists, or does not even map the registry: a corrupt word) is
 * repaired like a dead owner's lock. A live owner (a stopped process) is
 * waited for at most IPCSHIM_LOCK_WAIT, and once that bound passed for a
 * hold, later lockers of the same hold only probe briefly.
 * 0; -ETIMEDOUT (the bound passed: do this operation without the registry,
 * safely); -ENOTRECOVERABLE (the registry must not be used any more). */
int registry_lock(struct registry *r);
void registry_unlock(struct registry *r);

/* Rebuild every derived structure from the primary records. Lock held. */
void registry_repair(struct registry *r);

/* ---- holders ---- */

/* Take a FREE holder slot for this process and its OFD lock byte, without
 * the lock: the byte decides between attachers (F_OFD_SETLK gives it to
 * one), and a slot becomes FREE only when everything it held is released.
 * Call reg_sweep_dead first (a previous image of this process after exec
 * may still hold a slot). Slot index, or REG_NONE when no slot is FREE
 * (then reg_holder_attach). No lock. */
uint32_t reg_holder_claim(struct registry *r, uint64_t nonce);
/* reg_holder_claim that also sweeps and reuses a slot in a corrupt state.
 * Lock held. */
uint32_t reg_holder_attach(struct registry *r, uint64_t nonce);

/* Give back our own slot: let go of the blocks we exported
 * (reg_holder_let_go), mark it free, drop our lock byte. Lock held. */
void reg_holder_release(struct registry *r, uint32_t idx);

/* Liveness of another holder (see liveness.h). A free slot is not alive. */
bool reg_holder_alive(struct registry *r, uint32_t idx);
/* The cheap half of the rule (one fcntl): false only when the holder's lock
 * byte is certainly unheld. For hot paths; sweeps use reg_holder_alive. */
bool reg_holder_alive_quick(struct registry *r, uint32_t idx);

/* Drop every lease of a dead holder (its chunks), orphan or recycle its
 * blocks (a scan of the block table: deaths are rare), free its slot.
 * Redo-safe. Lock held. */
void reg_holder_sweep(struct registry *r, uint32_t idx);

/* Drop every lease of holder idx (walking its chunks) and give its chunks
 * back; returns how many leases. What a process's own exit does, besides
 * letting go of its exports (which it knows). Lock held. */
uint32_t reg_holder_drop_leases(struct registry *r, uint32_t idx);

/* Sweep every dead holder except self. The liveness checks (syscalls) run
 * before the lock is taken: the lock is then held only to release what was
 * found dead (and is still the same holder, by its nonce). Lock NOT held;
 * takes it only if somebody died. Returns how many were swept, or -1 when
 * the lock could not be had. */
int reg_sweep_dead(struct registry *r, uint32_t self);

/* Sweep the dead among the candidate holders (cand: max_holders flags),
 * as reg_sweep_dead does. Lock NOT held. Returns how many, or -1. */
int reg_sweep_among(struct registry *r, const uint8_t *cand);

/* Is holder idx still the one with this nonce, and active? No lock: the
 * open path's proof that an exporter is alive (the sweeps invalidate the
 * nonce of a dead holder: docs/crash-safety.md, "Opens do not ask the
 * kernel", states the window). */
static inline bool reg_holder_current(struct registry *r, uint32_t idx, uint64_t nonce)
{
    if (idx >= r->max_holders) return false;
    struct reg_holder *h = &r->holders[idx];
    /* pairs with take_slot's release store of ACTIVE (and the sweeps' FREE) */
    return __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == HOLDER_ACTIVE &&
           __atomic_load_n(&h->nonce, __ATOMIC_RELAXED) == nonce;
}

/* Bump a holder's futex word and wake it. Any thread, lock or not. */
void registry_wake(struct registry *r, uint32_t idx);

/* Wait on our futex word while it still reads `seen`, at most timeout_ns. */
void registry_wait(struct registry *r, uint32_t idx, uint32_t seen, uint64_t timeout_ns);

/* ---- blocks ---- */

/* The record at idx, or NULL if idx is out of range. */
static inline struct reg_block *reg_block_at(struct registry *r, uint32_t idx)
{
    return idx < r->max_blocks ? &r->blocks[idx] : NULL;
}
static inline struct reg_lease *reg_lease_at(struct registry *r, uint32_t idx)
{
    return idx < r->max_leases ? &r->leases[idx] : NULL;
}
static inline struct reg_holder *reg_holder_at(struct registry *r, uint32_t idx)
{
    return idx < r->max_holders ? &r->holders[idx] : NULL;
}
/* Block idx's held bitmap (held_words words); idx must be in range. */
static inline uint64_t *reg_block_held_words(struct registry *r, uint32_t idx)
{
    return r->held + (size_t)idx * r->held_words;
}

/* The block with these handle bytes, preferring a LIVE or LIMBO record over
 * ORPHANED/RETIRED ones. REG_NONE if none. Lock held. */
uint32_t reg_block_find(struct registry *r, const struct ipc_handle *h);

/* The same without the lock: a LIVE, LIMBO or RETIRING record with these
 * handle bytes whose generation did not change while it was compared, with
 * that generation in *gen. REG_NONE when none is seen -- also when a
 * concurrent change hid it: the caller then asks again under the lock. */
uint32_t reg_block_lookup(struct registry *r, const struct ipc_handle *h, uint32_t hash,
                          uint64_t *gen);

/* The hash that places handle h in the block table, for the calls that
 * take one (an open hashes its handle once for the prefetch and the
 * lookup). The same in every process of an ABI. */
uint32_t reg_handle_hash(const struct ipc_handle *h);

/* Hints, no lock, no effect on the segment (an index read is bounds-checked,
 * a prefetch never faults): start moving to this CPU the lines the
 * exporter's next step writes or decides on, so that their transfers from
 * an importer's CPU overlap the local work before it instead of stalling,
 * one after the other, the atomics and the unlock that need them
 * (docs/performance.md, "Prefetching the cycle's lines"). For the free
 * of our block idx; for an export of handle h into record idx (the free
 * list's head, or the record recycled just before it). */
void reg_prefetch_free(struct registry *r, uint32_t idx);
void reg_prefetch_create(struct registry *r, uint32_t idx, const struct ipc_handle *h);
/* The same for an importer's open of the handle of this hash
 * (reg_handle_hash): its bucket, and the lines
 * of record `guess` that the open reads, claims and sets its bit in. The
 * guess breaks the chain of misses (the bucket names the record): it is
 * the record this process opened last, which an exporter that frees and
 * exports again in turn recycles for its next handle. A wrong guess costs
 * one wasted line. */
void reg_prefetch_open(struct registry *r, uint32_t guess, uint32_t hash);
/* The record the next reg_block_create takes when nothing is recycled
 * before it (the free list's head), or REG_NONE. No lock: a hint. */
uint32_t reg_block_next_free(struct registry *r);

/* A fresh LIVE block (generation bumped, one pending hand-off), in the hash
 * index; the table grows (doubling, up to its capacity) when no record is
 * free. REG_NONE when it is full. kind: IPC_KIND_* (BLOCK_KIND_POOL in its
 * rules for a pool's export). */
uint32_t reg_block_create(struct registry *r, const struct ipc_handle *h, uint64_t base,
                          uint64_t size, int device, uint32_t exporter, uint64_t now, int kind);

/* Back to the free list; leases still naming it are left to their owners
 * (their generation no longer matches). The held bitmap is cleared. Off
 * its exporter's list. Lock held. */
void reg_block_recycle(struct registry *r, uint32_t idx);

/* ORPHANED (its exporter is gone; recycled with its last lease), off its
 * exporter's list. Lock held. */
void reg_block_orphan(struct registry *r, uint32_t idx);

/* Lets go of a block whose exporter is going or whose record is stale:
 * recycled when nothing holds it (or it is RETIRED), else orphaned. Lock
 * held. */
void reg_block_let_go(struct registry *r, uint32_t idx);

/* Lets go of every block holder idx exported (reg_block_let_go). Walks the
 * holder's own list (a scan of the table only if that list is corrupt).
 * Lock held. */
void reg_holder_let_go(struct registry *r, uint32_t idx);

/* Number of holders holding the block (bits set). No lock. */
uint32_t reg_block_leases(struct registry *r, uint32_t idx);

/* The first holder at or after slot `from` whose bit is set on block idx,
 * or REG_NONE: for (h = next(r, b, 0); h != REG_NONE; h = next(r, b, h + 1)).
 * No lock (a snapshot, word by word). */
uint32_t reg_block_next_holder(struct registry *r, uint32_t idx, uint32_t from);

/* Does anyone hold the block? No lock (seq-cst loads). */
bool reg_block_held(struct registry *r, uint32_t idx);

/* Set / clear holder's bit on block (seq-cst). No lock. reg_hold returns
 * whether the bit was clear before; reg_unhold whether the bitmap is empty
 * after. */
bool reg_hold(struct registry *r, uint32_t block, uint32_t holder);
bool reg_unhold(struct registry *r, uint32_t block, uint32_t holder);

/* After a lease of block bi (of this generation) went: an ORPHANED block
 * nobody holds any more is recycled; a LIMBO one is re-armed under the
 * window rule and its exporter returned, to wake. Else REG_NONE. Lock held. */
uint32_t reg_block_unheld(struct registry *r, uint32_t bi, uint64_t generation);

/* Try to retire a LIMBO block: RETIRING, then RETIRED if no holder and no
 * pending hand-off, else back to LIMBO. True when retired. No lock needed
 * (its exporter, under its local lock). */
bool reg_block_retire(struct registry *r, uint32_t idx);

/* ---- leases ---- */

/* A free lease slot in our own chunks, or REG_NONE (then reg_lease_claim,
 * or reg_lease_grow under the lock). No lock. */
uint32_t reg_lease_take(struct registry *r);

/* Claim a chunk no holder owns for our own holder slot, with a CAS on its
 * owner word; the chunk table grows (without the lock) when none is
 * unowned, and ahead of need when the claim took one of its last quarter.
 * 0; -EAGAIN when the table is full (then reg_lease_grow); -ENOSPC without
 * a slot. No lock. */
int reg_lease_claim(struct registry *r);

/* reg_lease_claim that may also take a chunk whose owner is not an active
 * holder. 0 or -ENOSPC. Lock held. */
int reg_lease_grow(struct registry *r);

/* The holder owning chunk c, or REG_NONE. */
uint32_t reg_chunk_owner(const struct registry *r, uint32_t c);

/* Fill our lease li for block (count 1, intent OPENING, then the bit set).
 * No lock. Returns whether the bit was clear before. */
bool reg_lease_begin(struct registry *r, uint32_t li, uint32_t block, uint64_t generation);

/* Release our lease li: CLOSING, bit cleared, FREE, slot back to our spare
 * list. Returns the block's exporter to wake when the block is in LIMBO and
 * nobody holds it any more (re-arming a hand-off first under the window
 * rule), else REG_NONE. No lock. */
uint32_t reg_lease_end(struct registry *r, uint32_t li);

/* holder's lease on block (any generation still current), or REG_NONE. Lock held. */
uint32_t reg_lease_find(struct registry *r, uint32_t block, uint32_t holder);

/* A new lease (count 1, intent OPENING, bit set) of any holder, claiming a
 * chunk for it if needed. REG_NONE if full. Lock held (tests, repairs). */
uint32_t reg_lease_create(struct registry *r, uint32_t block, uint32_t holder);

/* Drop any holder's lease (bit cleared, record freed). If its block is left
 * with no holder: an ORPHANED block is recycled; a LIMBO block is re-armed
 * in window mode and its exporter's index is returned (to wake, preferably
 * after unlocking). Else REG_NONE. Lock held. */
uint32_t reg_lease_drop(struct registry *r, uint32_t idx);

#endif
