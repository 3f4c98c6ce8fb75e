/*
 * sim_state.h: the simulated machine shared by every process of a user.
 *
 * One POSIX shared-memory segment "/simcuda-<uid>-<machine>" holds the
 * machine header, a table of processes ("holders"), the allocation table and,
 * per device, two bitmaps and a start-index array that map any device offset
 * to its allocation. Device memory itself is one sparse shared-memory file
 * per device ("/simcuda-<uid>-<machine>-dev<N>", size = capacity) that each
 * process maps once; a device pointer is that mapping's base plus the
 * allocation's offset, so pointers differ between processes exactly as they
 * do with real CUDA IPC.
 *
 * Invariants (all under the machine mutex, a robust process-shared mutex):
 * - a LIVE table entry owns the granules [offset, offset + rsize) of its
 *   device: their alloc bits are set, the start bit of the first granule is
 *   set and start_entry[first granule] is the entry's index;
 * - dev[d].used is the sum of rsize over LIVE entries of device d;
 * - serials are never reused, so (index, serial) names one allocation forever.
 * Everything is fixed-width and index-based; the layout is pinned by a test.
 * These functions are internal to libcuda (hidden visibility).
 */
#ifndef SIM_STATE_H
#define SIM_STATE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "simcuda.h"

#define SIM_INTERNAL __attribute__((visibility("hidden")))

#define SIM_MAGIC 0x31414455434d4953ull /* "SIMCUDA1" */
#define SIM_ABI 1u
#define SIM_MAX_DEVICES SIMCUDA_MAX_DEVICES
#define SIM_MAX_ALLOCS 262144u          /* table capacity: live allocations, machine-wide */
#define SIM_MAX_HOLDERS 4096u           /* processes that may have called cuInit at once */
#define SIM_GRANULE 512u                /* allocation alignment and accounting unit */
#define SIM_MAX_CAPACITY (256ull << 30) /* per device */
#define SIM_NO_INDEX 0xffffffffu

enum sim_alloc_state { SIM_SLOT_FREE = 0, SIM_SLOT_LIVE = 1 };
enum sim_alloc_flags { SIM_F_EXPORTED = 1u << 0, SIM_F_MANAGED = 1u << 1 };

/* One allocation. 72 bytes. */
struct sim_alloc {
    uint32_t state; /* enum sim_alloc_state */
    uint32_t device;
    uint32_t holder; /* index of the owning process in the holder table */
    uint32_t flags;  /* enum sim_alloc_flags */
    uint64_t offset; /* bytes from the start of the device file */
    uint64_t size;   /* bytes requested */
    uint64_t rsize;  /* bytes reserved: size rounded up to SIM_GRANULE */
    uint64_t serial; /* machine-unique, never reused; the BUFFER_ID */
    uint64_t ctx_id; /* owner's context id (meaningful in the owner only) */
    int32_t owner_pid;
    uint32_t next_free;   /* free-list link while SIM_SLOT_FREE */
    uint64_t owner_start; /* owner's start time, field 22 of /proc/PID/stat */
};

/* One process that called cuInit. 32 bytes. pid 0 = free slot. */
struct sim_holder {
    int32_t pid;
    uint32_t pad;
    uint64_t start; /* field 22 of /proc/PID/stat */
    uint64_t live;  /* LIVE allocations it owns */
    uint64_t pad2;
};

/* Per device: `off` is the segment offset of its area: alloc bits
 * (bits_words words), then start bits (bits_words words), then start_entry
 * (units uint32_t, the table index of the allocation starting at a granule;
 * meaningful only where the start bit is set). */
struct sim_dev_state {
    uint64_t used; /* bytes reserved by LIVE allocations */
    uint64_t hint; /* next-fit search start, in granules */
    uint64_t off;
};

/* The segment header. Sized and aligned to one page. */
struct sim_machine {
    uint64_t magic;
    uint32_t abi;
    uint32_t ready; /* 0 while the creator initialises, then 1 (release/acquire) */
    uint64_t total_size;
    uint64_t machine_id; /* random; in every IPC handle of this machine */
    uint32_t ndev;
    uint32_t max_allocs;
    uint32_t max_holders;
    uint32_t granule;
    uint64_t capacity;   /* bytes per device */
    uint64_t units;      /* granules per device */
    uint64_t bits_words; /* 64-bit words per bitmap */
    uint64_t off_holders;
    uint64_t off_allocs;
    union {
        pthread_mutex_t mutex;
        uint8_t pad[64];
    } lock;
    uint64_t next_serial;
    uint32_t free_head;  /* first free table slot below high_water, or SIM_NO_INDEX */
    uint32_t high_water; /* slots >= high_water were never used */
    uint32_t live;
    uint32_t holder_hw; /* holder slots >= holder_hw were never used */
    uint64_t poisoned_frees;
    struct sim_dev_state dev[SIM_MAX_DEVICES];
};

/* Result codes of the sim_* functions; driver.c maps them to CUresult. */
enum sim_rc {
    SIM_OK = 0,
    SIM_ENOMEM = -1, /* device (or table) full */
    SIM_EINVAL = -2, /* bad argument, unknown pointer */
    SIM_EOS = -3,    /* shared memory could not be created, mapped or trusted */
};

/* Per-process counters kept by sim_state.c (read by simcuda_stats). */
struct sim_proc_counters {
    uint64_t frees;
    uint64_t poisoned_frees;
    uint64_t swept;
};

/* The attached machine, or NULL before sim_attach succeeds. */
SIM_INTERNAL extern struct sim_machine *sim_m;
SIM_INTERNAL extern struct sim_proc_counters sim_counters;

/* Attaches this process to machine `name` (creating it with `ndev` devices
 * of `capacity` bytes if it does not exist: an existing machine keeps its
 * own geometry) and registers the process as a holder. Idempotent within a
 * process; after fork() the child must call it again. Sweeps dead holders. */
SIM_INTERNAL int sim_attach(const char *name, unsigned ndev, uint64_t capacity);

/* True when this process is attached (and is not a fork child that has not
 * re-attached). */
SIM_INTERNAL int sim_attached(void);

/* Releases every allocation this process owns (poisoning exported ones)
 * and its holder slot. Used by the library destructor. */
SIM_INTERNAL void sim_detach(void);

/* Machine mutex. sim_lock recovers a mutex whose holder died. */
SIM_INTERNAL void sim_lock(void);
SIM_INTERNAL void sim_unlock(void);

/* This process's mapping of device `dev`, mapped on first use; NULL on
 * failure or a bad device. Never takes the machine mutex. */
SIM_INTERNAL uint8_t *sim_window(unsigned dev);

/* The device whose window (already mapped in this process) contains p, or
 * -1. Sets *off to p's offset in that device. */
SIM_INTERNAL int sim_window_of(uintptr_t p, uint64_t *off);

/* Reserves `size` (> 0) bytes on `dev` for this process; on a full device
 * sweeps dead owners and retries once. Sets *index and *offset.
 * Caller holds no lock. Returns SIM_OK, SIM_ENOMEM or SIM_EINVAL. */
SIM_INTERNAL int sim_alloc(unsigned dev, uint64_t size, uint64_t ctx_id, uint32_t flags,
                           uint32_t *index, uint64_t *offset);

/* Releases the allocation whose base is `offset` on `dev`, if this process
 * owns it. Poisons it first if it was ever exported. Caller holds no lock.
 * Returns SIM_OK or SIM_EINVAL. */
SIM_INTERNAL int sim_free(unsigned dev, uint64_t offset);

/* Releases every allocation of this process made in context `ctx_id`. */
SIM_INTERNAL void sim_free_ctx(uint64_t ctx_id);

/* Finds the LIVE allocation containing byte `offset` of `dev`. Caller holds
 * the machine mutex. Returns its index or SIM_NO_INDEX. */
SIM_INTERNAL uint32_t sim_find_locked(unsigned dev, uint64_t offset);

/* Table entry `index` (caller holds the mutex and checked index < max). */
SIM_INTERNAL struct sim_alloc *sim_entry(uint32_t index);

/* True when `a` is owned by this process. */
SIM_INTERNAL int sim_is_mine(const struct sim_alloc *a);

/* Releases the allocations of processes that are gone. Caller holds the
 * mutex. Returns how many allocations were released. */
SIM_INTERNAL unsigned sim_sweep_locked(void);

/* Fills the machine-wide fields of *out (takes the mutex). */
SIM_INTERNAL void sim_machine_stats(struct simcuda_stats *out);

/* Shared-memory object names for machine `name`: the state segment, and
 * device `dev`'s memory when dev >= 0. */
SIM_INTERNAL void sim_object_name(char *buf, size_t len, const char *name, int dev);

/* Start time of process `pid` (field 22 of /proc/PID/stat), 0 if unknown;
 * *zombie set when the process has exited but is not yet reaped. */
SIM_INTERNAL uint64_t sim_proc_start(pid_t pid, int *zombie);

/* Parses "123", "64K", "3M", "1G" (binary multiples). Returns 0 on success. */
SIM_INTERNAL int sim_parse_size(const char *s, uint64_t *out);

#endif /* SIM_STATE_H */
