/*
 * sim_state.h: the simulated machine shared by every process of a user.
 *
 * One POSIX shared-memory segment "/simcuda-<uid>-<machine>" holds the
 * machine header, a table of processes ("holders"), the allocation table and,
 * per pool, two bitmaps and a start-index array that map any offset to its
 * allocation. A pool is a device's memory (pools 0..ndev-1) or the machine's
 * managed-memory pool (SIM_POOL_MANAGED). Each pool's memory is one sparse
 * shared-memory file ("/simcuda-<uid>-<machine>-dev<N>", "...-managed") that
 * each process maps once; a pointer is that mapping's base plus the
 * allocation's offset, so pointers differ between processes exactly as they
 * do with real CUDA IPC.
 *
 * The allocation table's capacity is the creator's choice (SIMCUDA_MAX_ALLOCS,
 * recorded in the header like the geometry). The segment is a sparse file
 * mapped without reserve: only the entries below high_water are ever
 * touched, so a large capacity costs address space, not memory.
 *
 * Managed allocations never move in memory (their bytes stay in the managed
 * pool, readable from host and "device" alike); what moves is their
 * residency: on the host, or on one device, per allocation (not per page).
 * Device-resident managed bytes count against that device's capacity next
 * to its ordinary allocations; a device that needs room evicts its
 * managed allocations to the host, least recently used first.
 *
 * Invariants (under the machine mutex, a robust process-shared mutex, except
 * where the table of IPC opens below says otherwise):
 * - a LIVE table entry owns the granules [offset, offset + rsize) of its
 *   pool: their alloc bits are set, the start bit of the first granule is
 *   set and start_entry[first granule] is the entry's index;
 * - dev[p].used is the sum of rsize over LIVE entries of pool p;
 * - dev[d].managed is the sum of rsize over LIVE managed entries resident
 *   on device d, and dev[d].used + dev[d].managed <= capacity;
 * - serials are never reused, so (index, serial) names one allocation forever;
 * - a map row (serial != 0) is one IPC open in force (a legacy open or a
 *   pool import, told apart by its kind) by a holder that is alive or not
 *   yet swept; a SIM_F_KEPT entry has no owner and at least one map row
 *   (the last row's removal releases it);
 * - a LIVE SIM_F_POOL entry's pool_id (written at its allocation, never
 *   changed) names its pool machine-wide: 0 for a device's default pool, a
 *   serial taken by cuMemPoolCreate otherwise.
 *
 * The table of IPC opens (ABI 4) is kept without the mutex, so that
 * cuIpcOpenMemHandle and cuIpcCloseMemHandle take no machine-wide lock in
 * the common case (the real driver does this work in the kernel; it has no
 * user-space cross-process lock a preempted process could hold):
 * - a row is free while its `holder` word is 0; an importer claims it with
 *   a CAS 0 -> its holder index + 1 (the intent word), fills index and
 *   ctx_id, then publishes the open with one seq-cst store of `serial`. Only
 *   the claiming process writes a claimed row, except a sweep (under the
 *   mutex) of a claimer that is gone; a row is given back by clearing
 *   `serial` (CAS S -> 0, so two threads of a process never both close it),
 *   then, after the kept-block check, `holder`;
 * - readers match rows by serial alone (serials are never reused, so a row
 *   being refilled can never be mistaken for an open of another block);
 * - maps_hw only grows, and is raised before a row at or above it is claimed;
 * - allocation fields an opener reads without the mutex (state, serial,
 *   device, offset, flags, owner) are written under the mutex, SIM_F_KEPT
 *   with a seq-cst atomic OR, and a release clears the serial first. The
 *   handshake between an owner's free and an open or a close is described
 *   at sim_owner_release_locked (sim_map.c).
 * Besides the segment, each process keeps a private record of each of its
 * own LIVE allocations (sim_own_find, struct own_rec in sim_state.c), so
 * that pointer queries take no machine-wide lock (README, "Which calls take
 * the machine lock").
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
#define SIM_ABI 5u
#define SIM_MAX_DEVICES SIMCUDA_MAX_DEVICES
#define SIM_DEFAULT_ALLOCS 2097152u /* table capacity (live allocations, machine-wide), default */
#define SIM_MAX_ALLOCS 16777216u    /* the most SIMCUDA_MAX_ALLOCS may ask for */
#define SIM_MAX_HOLDERS 4096u       /* processes that may have called cuInit at once */
#define SIM_MAX_MAPS 65536u         /* IPC opens in force, machine-wide (one row per open) */
#define SIM_GRANULE 512u            /* allocation alignment and accounting unit */
#define SIM_MAX_CAPACITY (256ull << 30) /* per device */
#define SIM_NO_INDEX 0xffffffffu
#define SIM_POOL_MANAGED SIM_MAX_DEVICES /* pool index of managed memory */
#define SIM_POOLS (SIM_MAX_DEVICES + 1)
#define SIM_HOST (-1)              /* residency / location: the host (CU_DEVICE_CPU) */
#define SIM_NOWHERE (-2)           /* no preferred location (CU_DEVICE_INVALID) */
#define SIM_ACCESS_HOST (1u << 31) /* accessed_by bit of the host */

enum sim_alloc_state { SIM_SLOT_FREE = 0, SIM_SLOT_LIVE = 1 };
enum sim_alloc_flags {
    SIM_F_EXPORTED = 1u << 0,
    SIM_F_MANAGED = 1u << 1,     /* lives in SIM_POOL_MANAGED */
    SIM_F_READ_MOSTLY = 1u << 2, /* advice recorded, no effect */
    SIM_F_POOL = 1u << 4,        /* stream-ordered (cuMemAllocAsync): not legacy-IPC capable */
    SIM_F_KEPT = 1u << 3,        /* freed by its owner, kept for its importers (keep mode): no
                                    owner, not openable, still LIVE and charged; with SIM_F_VMM:
                                    held by an exported fd alone (no handle, no mapping) */
    SIM_F_VMM = 1u << 5,         /* cuMemCreate memory: no owner; every process's handles and
                                    mappings are one SIM_MAP_VMM row; with SIM_F_EXPORTED its
                                    fd file exists (sim_vmm_export) */
};

/* What an owner's free does to an allocation some importer still maps. */
enum sim_free_mode {
    SIM_FREE_POISON = 0, /* release now; exported ones are poisoned */
    SIM_FREE_KEEP = 1,   /* keep (SIM_F_KEPT) until the last importer unmaps */
};

/* What a row of the table of opens records. */
enum sim_map_kind {
    SIM_MAP_IPC = 0,  /* a legacy IPC open (cuIpcOpenMemHandle) */
    SIM_MAP_POOL = 1, /* a pool import (cuMemPoolImportPointer) */
    SIM_MAP_VMM = 2,  /* one process's handles and mappings of a VMM allocation */
};

/* One IPC open in force: importer holder, allocation (index, serial) and the
 * importer's context. 32 bytes. holder 0 = free row; serial 0 = claimed but
 * not (or no longer) an open in force. Written without the mutex (see the
 * rules above); `kind` (enum sim_map_kind) is written by the claimer before
 * it publishes the serial, and read only by statistics. */
struct sim_map {
    uint32_t holder; /* claimer's holder index + 1, or 0 */
    uint32_t index;
    uint64_t serial;
    uint64_t ctx_id;
    uint64_t kind;
};

/* One allocation. 96 bytes. */
struct sim_alloc {
    uint32_t state;  /* enum sim_alloc_state */
    uint32_t device; /* pool: a device, or SIM_POOL_MANAGED */
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
    /* Managed entries only (zero otherwise; pool_id below is SIM_F_POOL's): */
    int32_t resident;     /* SIM_HOST or the device it is resident on */
    int32_t preferred;    /* advice: SIM_NOWHERE, SIM_HOST or a device */
    uint32_t accessed_by; /* advice: bit d = device d, SIM_ACCESS_HOST */
    uint32_t home;        /* device of the context that allocated it */
    union {
        uint64_t last_use; /* managed: machine lru_clock at the last device use */
        uint64_t pool_id;  /* SIM_F_POOL: its pool's machine-wide id (0: a default pool) */
    };
};

/* One process that called cuInit. 32 bytes. pid 0 = free slot. */
struct sim_holder {
    int32_t pid;
    uint32_t pad;
    uint64_t start; /* field 22 of /proc/PID/stat */
    uint64_t live;  /* LIVE allocations it owns */
    uint64_t pad2;
};

/* Per pool: `off` is the segment offset of its area: alloc bits
 * (bits_words words), then start bits (bits_words words), then start_entry
 * (units uint32_t, the table index of the allocation starting at a granule;
 * meaningful only where the start bit is set). 64 bytes. */
struct sim_dev_state {
    uint64_t used; /* bytes reserved by LIVE allocations in the pool */
    uint64_t hint; /* next-fit search start, in granules */
    uint64_t off;
    uint64_t capacity; /* bytes of the pool (its memory file's size) */
    uint64_t units;    /* granules */
    uint64_t bits_words;
    uint64_t managed; /* devices: bytes of managed memory resident here */
    uint64_t pad;
};

/* The header's `ready` word. SIM_REMOVING is set, under the mutex, by the
 * last holder to leave (sim_detach) just before it unlinks the machine's
 * files, and is never cleared: a process that mapped the segment but finds
 * it removing when it takes the mutex to register drops its mapping and
 * opens the name again (sim_attach). */
enum sim_ready {
    SIM_INITIALISING = 0, /* the creator is initialising */
    SIM_READY = 1,
    SIM_REMOVING = 2, /* the last holder left: the files are (being) unlinked */
};

/* The segment header. Sized and aligned to one page. */
struct sim_machine {
    uint64_t magic;
    uint32_t abi;
    uint32_t ready; /* enum sim_ready (release/acquire) */
    uint64_t total_size;
    uint64_t machine_id; /* random; in every IPC handle of this machine */
    uint32_t ndev;
    uint32_t max_allocs;
    uint32_t max_holders;
    uint32_t granule;
    uint64_t capacity;         /* bytes per device */
    uint64_t managed_capacity; /* bytes of the managed pool */
    uint64_t lru_clock;        /* ticks at every device use of managed memory */
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
    struct sim_dev_state dev[SIM_POOLS]; /* devices, then [SIM_POOL_MANAGED] */
    /* ABI 3: IPC opens in force, and what a free while mapped does. */
    uint64_t off_maps;
    uint32_t max_maps;
    uint32_t maps_hw;           /* rows >= maps_hw were never used (atomic, only grows) */
    uint32_t free_while_mapped; /* enum sim_free_mode, chosen by the creator */
    uint32_t map_hint;          /* ABI 4: where a claim starts looking for a free row (atomic) */
    uint64_t kept;              /* LIVE entries with SIM_F_KEPT */
    uint64_t kept_frees;        /* owner frees that were kept */
    uint64_t vmm_fd_kept;       /* ABI 5: LIVE VMM entries held by an exported fd alone */
};

/* Result codes of the sim_* functions; the driver_*.c files map them to CUresult. */
enum sim_rc {
    SIM_OK = 0,
    SIM_ENOMEM = -1, /* device (or table) full */
    SIM_EINVAL = -2, /* bad argument, unknown pointer */
    SIM_EOS = -3,    /* shared memory could not be created, mapped or trusted */
    SIM_EMINE = -4,  /* an IPC open of this process's own allocation */
};

/* Per-process counters kept by sim_state.c (read by simcuda_stats and
 * simcuda_managed_stats). Managed-memory traffic counts in the process
 * whose call caused it (an eviction counts in the process that needed the
 * room). */
struct sim_proc_counters {
    uint64_t frees;
    uint64_t poisoned_frees;
    uint64_t swept;
    uint64_t faults; /* bumped by the driver's launch path */
    uint64_t bytes_htod, bytes_dtoh, bytes_dtod;
    uint64_t migrations;                         /* residency changes, evictions included */
    uint64_t evictions;                          /* of those, made to free room on a device */
    uint64_t refused;                            /* moves to a device that could not make room */
    uint64_t fetches;                            /* moves host -> device (prefetch or fault) */
    uint64_t peak_resident[SIMCUDA_MAX_DEVICES]; /* highest managed bytes resident, per device */
    uint64_t last_free_ns; /* CLOCK_MONOTONIC of this process's last cuMemFree that released */
};

/* The attached machine, or NULL before sim_attach succeeds. */
SIM_INTERNAL extern struct sim_machine *sim_m;
SIM_INTERNAL extern struct sim_proc_counters sim_counters;

/* Attaches this process to machine `name` (creating it with `ndev` devices
 * of `capacity` bytes, a managed pool of `managed` bytes and a table of
 * `max_allocs` (1..SIM_MAX_ALLOCS) allocations if it does not exist: an
 * existing machine keeps its own geometry) and registers the process as a
 * holder. Idempotent within a process; after fork() the child must call it
 * again. Sweeps dead holders. */
SIM_INTERNAL int sim_attach(const char *name, unsigned ndev, uint64_t capacity, uint64_t managed,
                            uint32_t max_allocs);

/* True when this process is attached (and is not a fork child that has not
 * re-attached). */
SIM_INTERNAL int sim_attached(void);

/* Releases every allocation this process owns (poisoning exported ones)
 * and its holder slot. When no other holder is left (after a sweep of the
 * dead ones), marks the machine SIM_REMOVING and unlinks its shared-memory
 * files, all under the mutex: the last process out removes the machine.
 * Used by the library destructor. */
SIM_INTERNAL void sim_detach(void);

/* Machine mutex. sim_lock recovers a mutex whose holder died. */
SIM_INTERNAL void sim_lock(void);
SIM_INTERNAL void sim_unlock(void);

/* True when `pool` is a device of the attached machine or the managed pool. */
SIM_INTERNAL int sim_pool_valid(unsigned pool);

/* This process's mapping of pool `dev` (a device or SIM_POOL_MANAGED),
 * mapped on first use; NULL on failure or a bad pool. Never takes the
 * machine mutex. */
SIM_INTERNAL uint8_t *sim_window(unsigned dev);

/* The pool whose window (already mapped in this process) contains p, or
 * -1. Sets *off to p's offset in that pool. */
SIM_INTERNAL int sim_window_of(uintptr_t p, uint64_t *off);

/* Reserves `size` (> 0) bytes in pool `dev` for this process. On a device
 * that lacks room it first evicts that device's managed allocations (LRU
 * first), then sweeps dead owners and retries once. A managed allocation
 * (dev == SIM_POOL_MANAGED, flags with SIM_F_MANAGED) starts resident on
 * the host with `home` as its device. Sets *index and *offset. Caller holds
 * no lock. Returns SIM_OK, SIM_ENOMEM or SIM_EINVAL. */
SIM_INTERNAL int sim_alloc(unsigned dev, uint64_t size, uint64_t ctx_id, uint32_t flags,
                           unsigned home, uint32_t *index, uint64_t *offset);

/* The same for stream-ordered memory (SIM_F_POOL) of device `dev` from the
 * pool whose machine-wide id is pool_id (0: the device's default pool). */
SIM_INTERNAL int sim_alloc_pool(unsigned dev, uint64_t size, uint64_t ctx_id, uint64_t pool_id,
                                uint32_t *index, uint64_t *offset);

/* A new machine-wide serial (never reused, never 0), for pool ids. Takes the
 * mutex. */
SIM_INTERNAL uint64_t sim_new_serial(void);

/* Makes LIVE managed entry `index` resident at `to` (SIM_HOST or a device),
 * counting the bytes moved (rsize) in sim_counters. Moving onto a device
 * that lacks room first evicts its other managed allocations to the host,
 * least recently used first. A move to a device also marks the entry used
 * now (LRU). Caller holds the mutex. Returns SIM_OK (moved, or already
 * there), or SIM_ENOMEM when it cannot fit even after evicting every other
 * managed allocation of that device: it then stays where it was. */
SIM_INTERNAL int sim_managed_move_locked(uint32_t index, int to);

/* Marks LIVE managed entry `index` as used now. Caller holds the mutex. */
SIM_INTERNAL void sim_managed_touch_locked(uint32_t index);

/* Releases the allocation whose base is `offset` in pool `dev`, if this process
 * owns it. Poisons it first if it was ever exported. Caller holds no lock.
 * Returns SIM_OK or SIM_EINVAL. */
SIM_INTERNAL int sim_free(unsigned dev, uint64_t offset);

/* Releases every allocation of this process made in context `ctx_id`, and
 * drops this process's IPC opens made in that context. */
SIM_INTERNAL void sim_free_ctx(uint64_t ctx_id);

/* Records one IPC open (kind SIM_MAP_IPC) or pool import (SIM_MAP_POOL) by
 * this process, in context ctx_id, of allocation `serial` at table entry
 * `index`, which must be LIVE at (dev, offset), exported and not kept. Takes the mutex only when
 * the owner looks gone (to sweep). Caller holds no lock. Sets *row (a hint for sim_map_del).
 * Returns SIM_OK, SIM_EINVAL (freed, reused, kept, not exported or owner
 * gone), SIM_EMINE (this process owns it) or SIM_ENOMEM (table of opens
 * full). */
SIM_INTERNAL int sim_map_open(uint32_t index, uint64_t serial, unsigned dev, uint64_t offset,
                              uint64_t ctx_id, enum sim_map_kind kind, uint32_t *row);

/* Drops one IPC open recorded by sim_map_open (row: its hint, any value
 * works); when it was the last open of a kept allocation, that allocation
 * is really released (and poisoned): only then is the mutex taken. Caller
 * holds no lock. */
SIM_INTERNAL void sim_map_del(uint32_t index, uint64_t serial, uint64_t ctx_id, uint32_t row);

/* ---- VMM memory (cuMemCreate; sim_map.c, driver_vmm.c) ----
 * A VMM allocation has no owner: each process that holds a handle or a
 * mapping of it holds one SIM_MAP_VMM row (ctx_id SIM_VMM_CTX), and the
 * allocation is released when no row names it and no exported fd of it is
 * open anywhere (a read OFD lock on its record in the machine's one VMM fd
 * file, sim_vmm_fd_open). Every
 * call below takes the machine mutex (VMM calls are not hot paths); a
 * row's close without the mutex (sim_map_del, exit) takes it to release. */
#define SIM_VMM_CTX UINT64_MAX

/* Reserves `size` bytes of device `dev` as a VMM allocation held by this
 * process (one row). Sets *index, *offset, *serial, *row. Returns SIM_OK,
 * SIM_ENOMEM or SIM_EINVAL. Caller holds no lock. */
SIM_INTERNAL int sim_vmm_create(unsigned dev, uint64_t size, uint32_t *index, uint64_t *offset,
                                uint64_t *serial, uint32_t *row);
/* A new hold (row) by this process of LIVE VMM allocation (index, serial),
 * e.g. an import. Sets *dev, *offset, *size, *row. Returns SIM_OK,
 * SIM_EINVAL (not that allocation any more, or not VMM) or SIM_ENOMEM
 * (table of opens full). Caller holds no lock. */
SIM_INTERNAL int sim_vmm_hold(uint32_t index, uint64_t serial, unsigned *dev, uint64_t *offset,
                              uint64_t *size, uint32_t *row);
/* Drops the hold recorded by sim_vmm_create/sim_vmm_hold; the last hold
 * with no exported fd open releases the allocation. Caller holds no lock. */
SIM_INTERNAL void sim_vmm_drop(uint32_t index, uint64_t serial, uint32_t row);
/* The shm name of this process's machine's VMM fd file (sim_state.c). */
SIM_INTERNAL void sim_vmm_file_name(char *buf, size_t len);
/* Each VMM allocation's record in the machine's VMM fd file: SIM_VMM_RECORD
 * bytes at index * SIM_VMM_RECORD. */
#define SIM_VMM_RECORD 64
/* A new fd (O_RDONLY, no FD_CLOEXEC) on the machine's VMM fd file, a new
 * description per call, as NVIDIA's driver opens /dev/nvidiactl anew for
 * each export: positioned at the record of VMM allocation (index, serial),
 * which this process holds, and holding a read OFD lock on it; `rec`/`len`
 * (len <= SIM_VMM_RECORD) are the record, written at the allocation's first
 * export. Returns the fd or -1 (errno). Caller holds no lock. */
SIM_INTERNAL int sim_vmm_fd_open(uint32_t index, uint64_t serial, const void *rec, size_t len);
/* Releases the VMM allocations held by an exported fd alone whose fds are
 * all closed; unlinks the machine's VMM fd file instead when `all` (the
 * machine is being removed). Caller holds the mutex. Returns how many it
 * released. */
SIM_INTERNAL unsigned sim_vmm_reap_locked(int all);

/* What this process knows of one of its own LIVE allocations. */
struct sim_own {
    uint32_t index; /* table entry */
    uint32_t pool;  /* a device or SIM_POOL_MANAGED */
    uint64_t offset;
    uint64_t size;
    uint64_t serial;
    uint64_t ctx_id;
    uint32_t flags;   /* SIM_F_MANAGED and SIM_F_POOL only (they never change) */
    uint32_t home;    /* managed: the device of the context that allocated it */
    uint64_t pool_id; /* SIM_F_POOL: its pool's machine-wide id (0: a default pool) */
};

/* Finds this process's LIVE allocation containing byte `offset` of pool
 * `pool`, from a process-local table: takes no lock (the machine's bitmaps
 * are read as a hint, a per-process record decides). An allocation another
 * thread frees meanwhile may or may not be found. Returns 0 and fills *out,
 * or -1. */
SIM_INTERNAL int sim_own_find(unsigned pool, uint64_t offset, struct sim_own *out);

/* Bytes (rsize) of this process's LIVE SIM_F_POOL allocations on device
 * dev from pool pool_id (0: the default pool). Takes the mutex. */
SIM_INTERNAL uint64_t sim_pool_usage(unsigned dev, uint64_t pool_id);

/* Finds the LIVE allocation containing byte `offset` of pool `dev`. Caller holds
 * the machine mutex. Returns its index or SIM_NO_INDEX. */
SIM_INTERNAL uint32_t sim_find_locked(unsigned dev, uint64_t offset);

/* Table entry `index` (caller holds the mutex and checked index < max). */
SIM_INTERNAL struct sim_alloc *sim_entry(uint32_t index);
/* Is process pid, started at start (/proc field 22), still alive? */
SIM_INTERNAL int sim_proc_alive(pid_t pid, uint64_t start);

/* True when `a` is owned by this process. */
SIM_INTERNAL int sim_is_mine(const struct sim_alloc *a);

/* Whether the owner of LIVE entry `index` may still be running: this
 * process, or a holder whose pid and start time still match a live process
 * (unknown counts as alive). One liveness check, where a sweep checks every
 * holder. Kept entries (no owner) count as alive. Caller holds the mutex. */
SIM_INTERNAL int sim_owner_alive_locked(uint32_t index);

/* Releases the allocations of processes that are gone. Caller holds the
 * mutex. Returns how many allocations were released. */
SIM_INTERNAL unsigned sim_sweep_locked(void);

/* Fills the machine-wide fields of *out (takes the mutex). */
SIM_INTERNAL void sim_machine_stats(struct simcuda_stats *out);

/* Fills *out from sim_counters and the machine (takes the mutex). */
SIM_INTERNAL void sim_managed_stats(struct simcuda_managed_stats *out);
/* The same for struct simcuda_managed_peaks. */
SIM_INTERNAL void sim_managed_peaks(struct simcuda_managed_peaks *out);

/* Residency and advice of the LIVE managed allocation of this process at
 * managed-pool offset `off`; returns 0, or -1 when there is none. */
SIM_INTERNAL int sim_managed_query(uint64_t off, struct simcuda_residency *out);

/* Shared-memory object names for machine `name`: the state segment (dev
 * -1), device `dev`'s memory, or the managed pool (SIM_POOL_MANAGED). */
SIM_INTERNAL void sim_object_name(char *buf, size_t len, const char *name, int dev);

/* Start time of process `pid` (field 22 of /proc/PID/stat), 0 if unknown;
 * *zombie set when the process has exited but is not yet reaped. */
SIM_INTERNAL uint64_t sim_proc_start(pid_t pid, int *zombie);

/* Parses "123", "64K", "3M", "1G" (binary multiples). Returns 0 on success. */
SIM_INTERNAL int sim_parse_size(const char *s, uint64_t *out);

#endif /* SIM_STATE_H */
