/* inspect: a read-only snapshot of a domain's registry, for ipcshim-stat.
 *
 * The segment is opened O_RDONLY and mapped PROT_READ: nothing here can
 * modify it, take its lock or disturb a process that uses it. It is refused
 * on exactly the grounds registry_open() refuses it (owner, mode, magic, ABI,
 * capacities, size), and every index read from it is bounds-checked.
 *
 * Records are copied out without the registry lock (taking it would need
 * write access and could stall the programs being watched). A snapshot taken
 * while programs run may therefore be torn: a record that changed while it
 * was copied can show a mix of old and new fields, and a lease can name a
 * block that was recycled meanwhile (such leases are counted in `skipped`,
 * not shown). Each record's state field is read first (acquire), the way
 * writers publish it last, so a record is never shown as in use before its
 * writer committed it. Good enough for a monitor; never for decisions.
 *
 * Liveness of holders follows core's rule (liveness.h): a test of the
 * holder's OFD lock byte through our own read-only descriptor (F_OFD_GETLK
 * needs no write access), then pid and start time. */
#ifndef INSPECT_H
#define INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct inspect_holder {
    uint32_t slot;
    int32_t pid;
    uint64_t start_time; /* field 22 of /proc/PID/stat, as recorded */
    uint64_t attach_ns;  /* CLOCK_MONOTONIC */
    bool alive;          /* liveness_alive(); unknown counts as alive */
    char comm[17];       /* /proc/PID/comm when alive, else "" */
    /* Derived from the blocks and leases of the snapshot: */
    uint32_t exports; /* blocks it exported (any state) */
    uint32_t imports; /* leases it holds */
    uint32_t opens;   /* sum of those leases' open counts */
    uint32_t limbo_blocks;
    uint64_t limbo_bytes;
    uint64_t oldest_limbo_ns; /* limbo_since_ns of its oldest limbo block, 0 if none */
    /* Observability (registry ABI 2): */
    char reg_comm[17];          /* command name it recorded itself (also when dead) */
    uint64_t exported_bytes;    /* its current exports, live or in limbo */
    uint64_t imported_bytes;    /* blocks it holds a lease on */
    uint64_t dead_pinned_bytes; /* of those, blocks whose exporter is gone or dead */
    uint32_t dead_pinned_blocks;
    uint64_t oldest_dead_ns; /* earliest orphaned_ns among those, 0 if unknown */
};

struct inspect_lease {
    uint32_t slot;
    uint32_t block;  /* index into the registry's blocks (== inspect_block.slot) */
    uint32_t holder; /* holder slot */
    uint32_t count;  /* opens in that holder */
    uint32_t intent; /* LEASE_OPENING / OPEN / CLOSING */

    uint64_t open_ns; /* CLOCK_MONOTONIC of its first open (ABI 2) */
};

struct inspect_block {
    uint32_t slot;
    uint32_t state; /* BLOCK_LIVE / LIMBO / ORPHANED / RETIRED */
    uint64_t base, size, generation;
    uint64_t first_export_ns, last_export_ns, limbo_since_ns; /* CLOCK_MONOTONIC */
    int32_t device;
    uint32_t exporter;     /* holder slot, REG_NONE if out of range */
    bool exporter_current; /* that slot is still the exporting process (nonce matches) */
    uint32_t pending;      /* unclaimed hand-offs */
    uint32_t first_lease;  /* index into snapshot.leases of its first lease, or UINT32_MAX */
    uint32_t nleases;      /* its leases are leases[first_lease .. first_lease+nleases) */
    uint8_t handle[64];
    /* Observability (registry ABI 2): */
    int32_t exporter_pid; /* recorded at creation: known after the exporter died */
    char exporter_comm[17];
    bool exporter_dead;        /* exporter gone, or its holder is not alive */
    uint32_t claimed, expired; /* hand-offs claimed by a first open; expired unclaimed */
    uint64_t orphaned_ns;      /* CLOCK_MONOTONIC when orphaned, 0 if not (or unknown) */
    bool pool; /* a stream-ordered pool's export (BLOCK_KIND_POOL), not legacy IPC */
    bool vmm;  /* legacy IPC on VMM memory, the shim's synthetic handle (BLOCK_KIND_VMM) */
};

struct inspect_snapshot {
    char name[256]; /* "/ipcshim-<uid>-<domain>" in /dev/shm, else the file's path */
    uint32_t abi;
    uint64_t size;
    uint32_t max_holders, max_blocks, max_leases;
    uint32_t repairs;
    uint32_t swept; /* holders swept dead so far (reg_header.swept) */
    int32_t creator_pid;
    /* The registry lock when the snapshot was taken: the thread its word
     * names (0: free), the pid its holder recorded, and for how long. */
    int32_t lock_tid, lock_pid;
    uint64_t lock_held_ns;
    uint64_t created_ns;    /* CLOCK_REALTIME */
    uint64_t taken_ns;      /* CLOCK_MONOTONIC when the snapshot was taken */
    uint64_t taken_real_ns; /* CLOCK_REALTIME, same moment */
    /* Records in use, in slot order; leases grouped by block (block order). */
    struct inspect_holder *holders;
    struct inspect_block *blocks;
    struct inspect_lease *leases;
    uint32_t nholders, nblocks, nleases;
    uint32_t skipped; /* in-use records left out as inconsistent (torn read or corrupt) */
};

/* Snapshot the registry of `domain` into *s (free with inspect_free).
 * 0, or a negative errno with a one-line reason in why[]:
 *   -EINVAL bad domain name; -ENOENT no registry; -EACCES/-EPERM not readable
 *   or not ours; -EPROTO not a registry we understand; -ETIMEDOUT never
 *   initialised; other -errno from the system. */
int inspect_snapshot(const char *domain, struct inspect_snapshot *s, char *why, size_t whylen);

void inspect_free(struct inspect_snapshot *s);

/* "live", "limbo", "orphaned", "retired", or "?"; lease intents likewise. */
const char *inspect_block_state(uint32_t state);
const char *inspect_lease_intent(uint32_t intent);

/* The holder record with this slot in s, or NULL. */
const struct inspect_holder *inspect_holder_by_slot(const struct inspect_snapshot *s,
                                                    uint32_t slot);

#endif
