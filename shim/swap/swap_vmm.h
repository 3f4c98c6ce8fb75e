/* swap_vmm: host swap's VMM backing (docs/swap.md, "The VMM engine"),
 * defined in shim/swap/swap_vmm.c and driven by shim/swap/host_swap.c, whose
 * swap_lock serialises every call here but swap_vmm_query (pointer queries,
 * shim/query.c, from any thread).
 *
 * A VMM-backed block is a reserved address range whose mapping moves:
 * resident, device chunks from a per-device pool; evicted, the block's own
 * host-located copy (once its remap, done after its write-back by the
 * mover thread or lazily, is no longer pending: swap_vmm.c, swap_mover.c),
 * which is also mapped for good at a second "staging" address (the copy
 * engines' host end). The ordering state is the per-stream events that
 * host_swap.c records after each launch, copy or set it sees
 * (swap_vmm_after), kept per block. */
#ifndef SHIM_SWAP_VMM_H
#define SHIM_SWAP_VMM_H

#include "symbols.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmm_block;

/* What the VMM backing did, for swap_report (under swap_lock). */
struct swap_vmm_counts {
    uint64_t blocks, fallbacks;           /* blocks VMM-backed; refused by the driver (managed) */
    uint64_t to_device, to_host;          /* remaps */
    uint64_t fetch_copies, writebacks;    /* copies host->device, device->host */
    uint64_t stream_waits;                /* fetch copies waited for by a launch's stream */
    uint64_t host_waits;                  /* events the launching thread waited for */
    uint64_t remaps_async, remaps_forced; /* victims' remaps done after their write-back
                                           * ended without a host wait; with one */
    uint64_t chunks;                      /* device chunks created (the pool's size) */
    uint64_t exports, remap_failures;     /* blocks pinned for export; remaps the driver refused */
    uint64_t forgotten;                   /* blocks of a context that ended, forgotten */
    uint64_t mover_jobs;                  /* remaps and fetches ahead done by the mover thread */
    uint64_t mover_waits;                 /* times a thread waited for the mover's job */
    uint64_t ahead, ahead_failures;       /* fetches ahead done; failed (left host-backed) */
    uint64_t ahead_cancelled;             /* queued fetches ahead dropped (evicted, freed) */
};

/* swap_lock, held around every call here but swap_vmm_query (the mover
 * thread takes it too), and IPCSHIM_SWAP_MOVER (thread: remaps and fetches
 * ahead on the mover thread; else on the launching thread). Once, at
 * swap_init. */
void swap_vmm_init(pthread_mutex_t *lock, bool mover_thread);

/* The VMM granularity of device dev when its driver can back blocks with
 * device and host-located VMM memory (attributes 102 and 141 or 145), else 0
 * (logged once). Probed once per device. */
uint64_t swap_vmm_granularity(CUdevice dev);

/* A new VMM-backed block (a whole allocation or one of its parts:
 * swap_vmm_parts.h) at [va, va + size), reserved by the caller, with its
 * host copy created and mapped there and at staging (also reserved by the
 * caller), device read/write access on both; size a multiple of the
 * granularity. The block starts host-backed. 0 and *out, or a negative
 * errno with nothing left behind but the reservations (logged once). */
int swap_vmm_block_make(uint64_t va, uint64_t staging, uint64_t size, CUdevice dev, CUcontext ctx,
                        struct vmm_block **out);

/* The VMM block whose base is base, or NULL (a managed block). */
struct vmm_block *swap_vmm_find(uint64_t base);

/* The engine's move of a VMM block (host_move_fn's contract, core/host.h):
 * to the host (device < 0) or to its device, flags HOST_MOVE_NEW /
 * HOST_MOVE_DIRTY. Evict: the device-to-host stream waits for the block's
 * events, copies it out when dirty and records the block's write-back
 * event; its chunks go to the pool at once, each to be waited for on the
 * device by its next user, and the range is remapped to the host copy
 * later (its remap is pending, see swap_vmm.c), by the mover thread or
 * lazily here. Fetch: complete the block's own pending remap (or wait for
 * the mover doing it), wait for its events on the host, remap, copy in on
 * the host-to-device stream after the chunks' write-backs (not waited for
 * here: swap_vmm_before makes the launch's stream wait). An eviction drops
 * the block's fetch ahead if it is still queued. Without a mover thread,
 * pending remaps whose write-back ended are done first, without a wait. 0,
 * or a negative errno with the block's range still mapping its current
 * bytes. */
int swap_vmm_move(struct vmm_block *b, int device, unsigned flags);

/* A fetch ahead of b's use (HOST_MOVE_AHEAD, flags as for a move): b's
 * chunks are taken now (the budget stays exact) and the host-to-device
 * stream waits for their last holders' write-backs; the mover thread then
 * waits for the work queued on b's host copy, maps the chunks, copies the
 * host copy in and records the copy's event. Until then whatever touches
 * b's range reads its host copy (correct), an eviction, free or export of
 * b drops the fetch, and once the mover owns it they wait for it. 0 (also:
 * already on the device), -EBUSY (b's own remap is still to come),
 * -ENOMEM (no chunk), -EIO; on failure b stays host-backed. Inline mode
 * (no mover thread): an ordinary fetch (swap_vmm_move). */
int swap_vmm_fetch_ahead(struct vmm_block *b, unsigned flags);

/* Before work on stream that touches b: b's pending remap is completed
 * (the host waits for its write-back); the stream waits for b's fetch copy
 * if it may still be running. */
void swap_vmm_before(struct vmm_block *b, CUstream stream);
/* Where b's fetch ahead stands for work about to be queued (before
 * swap_vmm_before), for the lateness feedback: 0 landed (or nothing to
 * tell), 1 still queued or moving on the mover, 2 its copy (or the copies
 * recorded after it) not complete. No host wait. */
int swap_vmm_ahead_state(const struct vmm_block *b);
/* Before work on stream whose accesses are unknown: every pending remap is
 * completed; the stream waits for every fetch copy that may still be
 * running. */
void swap_vmm_before_unknown(CUstream stream);
/* After work was queued on stream that touches blocks[0..n) (all: work of
 * unknown accesses, which may touch every block): one event recorded on
 * stream, kept by each block (all: by the stream's "touches everything"
 * mark). The thread's current context is the stream's. */
void swap_vmm_after(CUstream stream, struct vmm_block *const *blocks, size_t n, bool all);

/* The program frees the allocation made of the blocks p[0..n) (contiguous,
 * in address order, from the start of a reservation of reserved bytes;
 * their staging ranges likewise, in a reservation of their own): wait for
 * the device (as cudaFree does), unmap, chunks back to the pool, host
 * copies and both reservations released; the blocks are gone. 0, or a
 * negative errno (logged; the blocks are gone either way). */
int swap_vmm_free_parts(struct vmm_block *const *p, size_t n, uint64_t reserved);

/* A legacy export of the allocation made of p[0..n) (as for
 * swap_vmm_free_parts): every block's bytes move into one exportable device
 * allocation (created through the shim's own cuMemCreate and mapped through
 * its cuMemMap, so shim/vmm.c's legacy export of VMM memory serves the
 * handle) mapped at the whole range for good; every block is pinned (the
 * caller takes them out of the engine). 0 (also when pinned already), or a
 * negative errno with the blocks unchanged. */
int swap_vmm_pin_parts(struct vmm_block *const *p, size_t n);
bool swap_vmm_pinned(const struct vmm_block *b);

/* The context ctx ended (cudaDeviceReset, cuCtxDestroy): every block,
 * stream, event and chunk of it is forgotten without a driver call; each
 * block's base is passed to forget (the caller drops it from the engine). */
void swap_vmm_context_gone(CUcontext ctx, void (*forget)(uint64_t base));

/* Before the context ctx ends (its real destroy or reset): the mover
 * finishes a job of ctx first and takes none of it from now on; ctx 0: the
 * last context announced lives on (the call failed). */
void swap_vmm_context_ending(CUcontext ctx);

/* At exit, before the driver's teardown: the mover stops (waited for at
 * most 2 s) and calls the driver no more; jobs left are done inline when
 * needed. Any thread, swap_lock not held. */
void swap_vmm_stop_mover(void);
/* In a fork child (swap is off there): no mover, its locks new. */
void swap_vmm_postfork_child(void);

void swap_vmm_counts(struct swap_vmm_counts *out);

#endif
