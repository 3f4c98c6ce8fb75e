/* swap_vmm_internal: what the VMM engine's files share (swap_vmm.c, the
 * blocks, streams and moves; swap_mover.c, the jobs the mover thread or
 * the launching thread completes later: victims' remaps, fetches ahead;
 * and swap_pool.c, the chunk pool and mappings both use). Everything here
 * is under host_swap.c's swap_lock (vmm_lock), but what a comment says the
 * mover reads without it. Not for other files. */
#ifndef SHIM_SWAP_VMM_INTERNAL_H
#define SHIM_SWAP_VMM_INTERNAL_H

#include "swap_vmm.h"
#include "uthash_wrap.h"

#include <pthread.h>
#include <sys/types.h>

#define MAX_DEVICES 64
#define SLOTS 64 /* streams tracked at once; the least recently used is retired */

/* A block's job (swap_mover.c): queued on vmm_jobs, or the mover's own
 * while `moving`. While moving, the mover reads base, size, ctx, device,
 * host, staging, chunks and chunk_ev without the lock; nobody changes them. */
enum { JOB_NONE, JOB_REMAP, JOB_AHEAD };

struct vmm_block {
    uint64_t base; /* key: the program's address */
    uint64_t size; /* rounded up to the granularity */
    uint64_t staging;
    CUcontext ctx;
    int device;
    CUmemGenericAllocationHandle host;
    CUmemGenericAllocationHandle *chunks;  /* size / granularity, while on_device */
    CUevent *chunk_ev;                     /* chunks_take: write-backs to wait for first */
    CUmemGenericAllocationHandle exported; /* pinned: the exportable allocation */
    bool on_device, pinned;
    bool remap_pending;   /* evicted; its range still maps the chunks it gave away */
    CUevent wb_ev;        /* remap_pending: recorded after its write-back (or its events);
                           * a fetch ahead: its gate event, once the mover took its
                           * snapshot (swap_mover.c) */
    unsigned char job;    /* JOB_*: a remap (remap_pending) or a fetch ahead (on_device) */
    bool moving;          /* the mover owns its job */
    bool ahead_copy;      /* JOB_AHEAD: its host copy is copied in (else a first touch) */
    unsigned char passed; /* queued: times passed over (swap_mover.c, MOVER_PASS_MAX) */
    struct vmm_block *job_next;
    bool touched;         /* some work was recorded on it since its allocation */
    uint64_t streams;     /* slots whose last event may follow work on it */
    uint64_t fetch_rec;   /* the host-to-device slot's record count after its fetch copy */
    int fetch_waiter;     /* slot + 1 of a stream already made to wait for that copy */
    uint64_t alloc_epoch; /* vmm_unknown_epoch at allocation */
    uint64_t fetch_epoch; /* vmm_unknown_epoch when it was last placed on the device */
    UT_hash_handle hh;
};

/* A stream the shim has seen work on, with its one event. */
struct slot {
    bool used, internal; /* internal: a host-to-device stream of ours, never retired */
    CUstream stream;
    CUcontext ctx;
    pid_t tid; /* CU_STREAM_PER_THREAD names one stream per thread */
    CUevent ev;
    uint64_t recorded, done; /* records so far; records known complete */
    uint64_t all_upto;       /* the record that followed its last unknown work */
    uint64_t last_use;
};

struct vdev {
    bool probed;
    uint64_t gran; /* 0: not usable */
    int numa;      /* host NUMA id, -1: none (HOST location) */
    bool host_numa_ok, host_ok;
    CUcontext ctx; /* the context of its streams and events, NULL until made */
    CUstream h2d, d2h;
    CUstream gate; /* fetches ahead: waits for the work they must wait for (or NULL) */
    CUevent d2h_ev;
    int h2d_slot;
    CUmemGenericAllocationHandle *pool;
    CUevent *pool_ev; /* per pooled chunk: its last holder's write-back event, or NULL */
    size_t npool, cap;
    CUevent *free_ev; /* write-back events not in use */
    size_t nfree_ev, free_ev_cap;
};

extern struct vmm_block *vmm_jobs; /* queued jobs, oldest first, by job_next */
extern struct slot vmm_slots[SLOTS];
extern struct vdev vmm_devs[MAX_DEVICES];
extern uint64_t vmm_all_mask, vmm_use_clock, vmm_unknown_epoch;
extern struct swap_vmm_counts vmm_counts;
extern pthread_mutex_t *vmm_lock; /* swap_lock (swap_vmm_init) */
extern bool vmm_mover_thread;     /* IPCSHIM_SWAP_MOVER=thread */

/* Slot k's bit in a mask of streams. */
static inline uint64_t slot_bit(int k)
{
    return 1ull << k;
}

/* swap_pool.c (contracts there). */
CUmemAllocationProp vmm_device_prop(int dev);
CUresult vmm_map_rw(uint64_t va, uint64_t size, CUmemGenericAllocationHandle h, int dev);
CUresult vmm_map_chunks(struct vmm_block *b);
int vmm_chunks_take(int dev, size_t n, CUmemGenericAllocationHandle *out, CUevent *out_ev);
void vmm_chunks_give(int dev, size_t n, const CUmemGenericAllocationHandle *in,
                     const CUevent *in_ev, CUevent ev);
CUevent vmm_ev_get(struct vdev *d);
void vmm_ev_put(struct vdev *d, CUevent ev);

/* swap_mover.c: the jobs. Under vmm_lock. */
/* Queue b's job (b->job set): the mover takes it (thread), or whoever
 * needs b settles it (inline). */
void job_queue(struct vmm_block *b);
/* b's job done now: waits for the mover when it owns b; a queued remap is
 * completed here (the host waits for its write-back); a queued fetch ahead
 * is run here. Under b's context or not (it enters it). */
void job_settle(struct vmm_block *b);
/* b's queued fetch ahead dropped (b back to host-backed, its chunks to the
 * pool); a moving one is waited for first. */
void job_cancel_ahead(struct vmm_block *b);
/* Every job settled (unknown work); ready: only the remaps whose write-back
 * ended (the launching thread's lazy pass, inline mode). */
void job_settle_all(bool ready);
/* Work was recorded on b (job_touched) or on every block (job_touched_all):
 * a queued fetch ahead's snapshot no longer covers it and is dropped. */
void job_touched(struct vmm_block *b);
void job_touched_all(void);
/* Whether fetches ahead go to the mover (a thread, not stopped). */
bool job_mover_on(void);
/* b's fetch ahead queued (swap_vmm_fetch_ahead's contract, mover side). */
int job_queue_ahead(struct vmm_block *b, unsigned flags);
/* The jobs of ctx, which ends: the mover's, if it is one, waited for; the
 * queued ones dropped from the queue (their blocks are forgotten next). */
void job_context_gone(CUcontext ctx);

#endif
