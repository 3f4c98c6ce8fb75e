/* swap_model: a timing model of host swap, for the offline tools only. It
 * replays a trace with a policy's decisions through a host thread that
 * submits launches, one compute queue, two copy engines and mover threads
 * that remap address ranges, at rates measured on real GPUs, and gives
 * each iteration's modeled time beside its physical bound.
 *
 * Engines:
 * - SWAP_MODEL_NONE: no budget, no moves (the unlimited run).
 * - SWAP_MODEL_MANAGED: today's engine. Every move is a managed-memory
 *   migration of the whole block (clean evictions too) on the launch's own
 *   stream, before the launch, one direction at a time, at the managed
 *   migration rates.
 * - SWAP_MODEL_VMM: the planned engine. Evictions on the device->host copy
 *   engine, fetches on the host->device one, both at the pinned-copy rates
 *   (the both-ways rate while the other engine is busy), each followed by a
 *   remap (unmap, map, set access) on the mover threads (the first free
 *   one takes the next remap, in decision order); a clean eviction is a
 *   remap alone. An eviction waits until every launch that touched its
 *   block has completed; a fetch waits for room on the device (below) and
 *   for the block's host copy; a launch waits for its blocks' fetches.
 *   Fetches start as early as room allows (an ideal fetch-ahead: the
 *   policy's decision stands for a perfect prediction). A block's first
 *   touch costs no remap: the engine maps a new block when it is
 *   allocated, which the trace does not show; it waits only for room.
 * - SWAP_MODEL_BUILT: the VMM engine as the shim builds it today
 *   (shim/swap/swap_vmm.c): each unit moves whole, only when the launch that
 *   needs it is decided, on the host thread before that launch is
 *   submitted. An eviction makes the host wait for the victim's events
 *   and, dirty, for its write-back on the device->host engine, then remap;
 *   a fetch is a remap by the host, then a copy on the host->device engine
 *   that only the launch waits for; a first touch is a remap alone (a new
 *   block starts host-backed). The shim records one event per stream, re-
 *   recorded after each launch, so with the model's one compute queue the
 *   victim's events are every launch submitted so far (params.built_wait
 *   SWAP_MODEL_WAIT_LAST_USE: only the launches that used the victim, as
 *   per-block events would give). A fetch's remap maps the unit's 2 MiB
 *   chunks one cuMemMap each: the remap of the unit's size plus
 *   map_chunk_us for every chunk after the first. No room is tracked: the
 *   host finishes each eviction before the next fetch starts. Units under
 *   2 MiB with SWAP_MODEL_UNIT_SMALL_MANAGED move as SWAP_MODEL_VMM's.
 *   With params.built_async (async evictions, the candidate next step) the
 *   host does not wait at an eviction: its write-back waits on the device
 *   for the victim's events (a clean one: nothing copied), and the next
 *   fetch or first touch of the same launch takes its chunks, the host
 *   mapping them at once and the fetch's copy waiting for the write-back
 *   (for the victim's events when clean); a mover thread then remaps the
 *   victim's range to its host copy. A later access to the victim (fetch,
 *   or a launch that reads it on the host) waits on the host for that
 *   remap. With params.built_ahead too (what the shim has once the mover
 *   thread executes fetches ahead), after each launch is submitted the
 *   engine's fetches ahead are decided by the same policy call and
 *   horizon as the shim's (swap_policy_prefetch within swap_ahead's
 *   horizon, at most SWAP_AHEAD_PER_LAUNCH) and executed by one mover
 *   thread: each victim as an async eviction (its write-back on the
 *   device->host engine after its events, then its remap), then the
 *   block's remap to device chunks (as a fetch's, above) and its copy on
 *   the host->device engine after the victims' write-backs; on-demand
 *   fetches stay on the host thread. The horizon takes the feedback the
 *   shim gives: a launch that uses a block fetched ahead whose copy ended
 *   after both the launch's submission and the end of the launch before it
 *   waited for it (late), else it arrived early; an on-demand fetch of a
 *   block the prediction saw coming is late. A block
 *   on the managed path (unit SWAP_MODEL_UNIT_SMALL_MANAGED) fetched ahead
 *   migrates on the launch's stream, as on demand. The mover threads serve
 *   ready work first, as the shim's does (shim/swap/swap_mover.c): a job runs
 *   in an idle stretch of a mover before a job decided earlier that still
 *   waits for its events (a victim's remap behind its write-back) when it
 *   ends before that one starts, else after the mover's last job; a job
 *   placed is never delayed by a later one (the shim's mover would start
 *   a ready job in a stretch too short for it and delay the older one a
 *   little: the model is that much slower for the younger one).
 *   params.mover_fifo: the order decided, the first free mover taking the
 *   next job and waiting there for its events (the shim before).
 *
 * Room: the device holds at most `budget` bytes at every instant. A fetch
 * takes its bytes when its copy starts, a first touch when it is mapped;
 * an eviction gives them back when its remap ends, a freed block when the
 * last launch that used it ends. The policy runs at
 * budget - headroom, so `headroom` bytes are kept for fetches in flight:
 * with headroom 0 a fetch waits for the evictions that make its room; with
 * more, the policy evicts earlier and fetches start before the victims'
 * last uses end.
 *
 * The unit moved (params.unit): each block alone; blocks under 2 MiB on
 * the managed path (migrated on the launch's stream as SWAP_MODEL_MANAGED
 * does, sharing the budget); or blocks packed in allocation order into
 * units of unit_bytes (swap_model_pack). params.segments first rewrites a
 * PyTorch trace's tensors into the caching allocator's segments, whole or
 * in chunks (swap_model_segments), each kernel access's chunks from the
 * trace or as the shim would learn them (params.extent): the blocks the
 * shim sees under PyTorch.
 * A rewritten trace keeps the original's launch durations.
 *
 * A launch made only of copies and sets makes the host wait for it (the
 * trace does not tell a synchronous copy from an asynchronous one), so the
 * host never runs more than one such copy ahead of the device.
 *
 * Launch durations: recorded ones when given (one per launch, in
 * nanoseconds), else the estimate documented at swap_model_launch_estimate.
 * All rates and costs are the defaults of struct swap_model_rates, each
 * with the measurement it comes from (swap_model.c). */
#ifndef SWAP_MODEL_H
#define SWAP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "swap_offline.h"

enum swap_model_engine {
    SWAP_MODEL_NONE,
    SWAP_MODEL_MANAGED,
    SWAP_MODEL_VMM,
    SWAP_MODEL_BUILT,
};

/* What an eviction waits for under SWAP_MODEL_BUILT. */
enum swap_model_wait {
    SWAP_MODEL_WAIT_QUEUE,    /* every launch submitted so far (the shim's stream events) */
    SWAP_MODEL_WAIT_LAST_USE, /* the launches that used the victim */
};

/* Which chunks a kernel access touches, for params.segments with chunks
 * (swap_model_segments_extent). Copies and sets carry their size: their
 * extent is always the true one. */
enum swap_model_extent {
    SWAP_MODEL_EXTENT_TRUE,    /* the tensor's bytes, from the trace */
    SWAP_MODEL_EXTENT_LEARNED, /* what the shim can know: see swap_model_segments_extent */
};

/* In a trace rewritten with SWAP_MODEL_EXTENT_LEARNED: a chunk after an
 * access's learned extent, up to its segment's end, which the engine must
 * count as touched (the launch is ordered after its moves; resident, it
 * turns dirty when the access writes) without fetching it. block is the
 * chunk, bytes what the kernel really reads of it (0: not touched), read
 * over the link when the chunk is not resident. */
#define SWAP_MODEL_EV_UNSEEN 'u'

enum swap_model_unit {
    SWAP_MODEL_UNIT_BLOCK,         /* every block moved alone */
    SWAP_MODEL_UNIT_SMALL_MANAGED, /* blocks under 2 MiB on the managed path */
    SWAP_MODEL_UNIT_PACK,          /* packed into units of unit_bytes */
};

/* A rate that depends on the size of one transfer: GB/s (1e9 bytes per
 * second) at increasing sizes, interpolated linearly in log2(size) and
 * clamped at both ends. */
#define SWAP_MODEL_CURVE_MAX 6
struct swap_model_curve {
    size_t n;
    uint64_t size[SWAP_MODEL_CURVE_MAX];
    double gbps[SWAP_MODEL_CURVE_MAX];
};

struct swap_model_rates {
    struct swap_model_curve pinned_d2h, pinned_h2d; /* one direction alone */
    struct swap_model_curve pinned_both;            /* each way, both at once */
    struct swap_model_curve managed_d2h, managed_h2d;
    /* Remap (unmap + map + set access) in microseconds at remap_size[0] and
     * remap_size[1], linear in size between and beyond; sizes below the
     * first cost the first (one granule is the least a map covers). */
    uint64_t remap_size[2];
    double remap_us[2];
    double host_read_gbps; /* a kernel reading host-backed memory */
    double device_gbps;    /* device memory bandwidth */
    double device_share;   /* share of it a launch's estimate assumes */
    double kernel_min_us;  /* the least a launch takes on the device */
    double submit_us;      /* host time to submit one launch */
    double map_chunk_us;   /* SWAP_MODEL_BUILT: one cuMemMap of a 2 MiB chunk */
};

/* The defaults, with their sources in swap_model.c. */
void swap_model_default_rates(struct swap_model_rates *r);

/* Seconds to move bytes at a curve's rate for that size. */
double swap_model_curve_seconds(const struct swap_model_curve *c, uint64_t bytes);
/* Seconds of one remap of a range of bytes. */
double swap_model_remap_seconds(const struct swap_model_rates *r, uint64_t bytes);
/* The estimated device time of a launch that touches bytes in all
 * (kernel): max(kernel_min_us, bytes / (device_share * device_gbps)); of a
 * copy or set (copy): bytes at the one-way pinned host->device rate. */
double swap_model_launch_estimate(const struct swap_model_rates *r, uint64_t bytes, int copy);

struct swap_model_params {
    enum swap_model_engine engine;
    enum swap_policy_kind kind;           /* the policy whose decisions are replayed */
    uint64_t budget;                      /* ignored for SWAP_MODEL_NONE */
    double clean_weight;                  /* kind MIN: swap_policy_set_clean_weight, 0 = default */
    const struct swap_model_rates *rates; /* NULL: the defaults */
    /* Recorded device time of each launch in nanoseconds (launch k is the
     * k-th L of the trace); NULL or shorter than the trace: the estimate
     * for the rest. */
    const uint64_t *launch_ns;
    size_t n_launch_ns;
    /* Both engines: rewrite into PyTorch's segments first, moved whole
     * (chunk 0) or in chunks of that many bytes (swap_model_segments). */
    bool segments;
    uint64_t chunk;
    /* with segments and chunk > 0: which chunks a kernel access touches
     * (swap_model_segments_extent); not with SWAP_MODEL_UNIT_PACK */
    enum swap_model_extent extent;
    /* SWAP_MODEL_VMM (zero: one block per unit, no headroom, one mover);
     * SWAP_MODEL_BUILT takes unit too. */
    enum swap_model_unit unit;
    uint64_t unit_bytes; /* SWAP_MODEL_UNIT_PACK: U */
    uint64_t headroom;   /* bytes kept free for fetches in flight, < budget */
    unsigned movers;     /* remapping threads, 0 = 1, at most SWAP_MODEL_MOVERS_MAX */
    /* SWAP_MODEL_BUILT only; unit as for SWAP_MODEL_VMM. */
    enum swap_model_wait built_wait;
    bool built_async; /* SWAP_MODEL_BUILT: async evictions (above) */
    /* with built_async: the host's remaps and the mover's run one at a
     * time, first come first served (whether the driver runs remaps of
     * different ranges from two threads side by side is not measured) */
    bool built_remaps_serial;
    /* SWAP_MODEL_BUILT with built_async, not built_remaps_serial, kind
     * history: fetches ahead (above), the horizon adapting to the modeled
     * lateness */
    bool built_ahead;
    double ahead_margin; /* built_ahead: swap_policy_set_ahead_margin, 0 = default */
    /* SWAP_MODEL_BUILT: the mover threads take their jobs in the order they
     * were decided (the first free one the next job, which may wait there
     * for its events), as the shim did before it served ready work first */
    bool mover_fifo;
};

#define SWAP_MODEL_MOVERS_MAX 16

/* One iteration (the events up to an I line, or after the last one). */
struct swap_model_iter {
    double seconds; /* modeled: end of its last launch - end of the previous iteration's */
    uint64_t launches;
    uint64_t h2d_bytes, d2h_bytes; /* moved by the engine (managed: clean evictions too) */
    /* read by launches over the link from non-resident blocks: overflows
     * and, with learned extents, chunks the engine did not know of */
    uint64_t link_read_bytes;
    /* The same moves at the both-ways pinned rate for their sizes: what the
     * link needs for them, each direction alone (T_bound's B / BW). */
    double h2d_link_seconds, d2h_link_seconds;
};

struct swap_model_result {
    struct swap_model_iter *it; /* malloc'd; swap_model_result_fini */
    size_t iterations;
    double seconds; /* end of the last launch */
    uint64_t h2d_bytes, d2h_bytes;
    uint64_t launches, estimated_launches; /* how many got the estimate */
    uint64_t overflows;                    /* accesses read over the link */
    uint64_t link_read_bytes;              /* the iterations' link_read_bytes */
    /* VMM: moves that found the device over the budget for good (the
     * policy's books and the room disagree); 0 in a sound run. */
    uint64_t room_overruns;
    /* SWAP_MODEL_BUILT: the host thread's time waiting in moves (for a
     * victim's events and write-back, or for a fetched block's pending
     * eviction) and remapping (evictions, fetches and first touches). */
    double host_evict_wait_seconds, host_remap_seconds;
};

void swap_model_result_fini(struct swap_model_result *r);

/* The trace with its blocks packed in allocation order (a block's first
 * access, or its first after a free) into units of unit_bytes: a block
 * goes into the open unit if it fits in what is left of it, else opens a
 * new one; a block of unit_bytes or more is a unit of its own, its size
 * rounded up to 2 MiB. A unit is accessed in a launch when any member is
 * (once, written when any member access writes, by a copy when all are
 * copies), has the unit's size, and is freed when no more blocks go into
 * it and every member is freed. Launches, iterations and their order are
 * kept. -EINVAL (unit_bytes 0), -ENOMEM. */
int swap_model_pack(const struct swap_trace *in, uint64_t unit_bytes, struct swap_trace *out);

/* The trace as the shim sees a PyTorch program: every block is a tensor
 * placed by PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp)
 * and the new blocks are its segments, accessed as swap_model_pack's units
 * and never freed (the allocator caches them); with chunk > 0, each
 * segment's chunks of that many bytes instead, a tensor's access touching
 * the chunks its bytes lie in (an engine that maps a segment as chunks and
 * moves each alone). The rules: sizes rounded up
 * to 512 bytes; tensors of 1 MiB or less from the small pool, whose
 * segments are 2 MiB, larger ones from the large pool, whose segments are
 * 20 MiB for tensors under 10 MiB and the tensor's size rounded up to
 * 2 MiB above; the smallest free piece that fits is taken (best fit, then
 * the lowest segment and offset), split when the rest is 512 bytes or
 * more (small pool) or more than 1 MiB (large pool); freed pieces merge
 * with free neighbours of their segment. One stream, no empty_cache, no
 * expandable segments. -ENOMEM. */
int swap_model_segments(const struct swap_trace *in, uint64_t chunk, struct swap_trace *out);

/* swap_model_segments with the kernel accesses' extents as extent says.
 * SWAP_MODEL_EXTENT_LEARNED (chunk > 0): the shim sees a kernel's pointer
 * (the segment's base + the tensor's offset), not its size, and learns as
 * the run goes the start pointers of the accesses in each segment: those
 * of every earlier launch and of the current one (the shim reads a
 * launch's parameters before it moves anything; the earlier launches'
 * alone give the same chunks, since an extent cut at one of the launch's
 * own starts is continued by that access's), kernels' and copies' alike,
 * kept for the whole run (the caching allocator never frees a
 * segment; a tensor freed leaves its start behind). A kernel access
 * touches, as far as the engine knows, the chunks from its pointer's to
 * the one that holds the byte before the next start above its pointer, or
 * to the segment's last when none is known: accessed as with the true
 * extent (more chunks than the tensor's when the extent is too long).
 * Every other chunk of the segment (before the pointer too: a kernel may
 * index either way) follows the launch's accesses as a
 * SWAP_MODEL_EV_UNSEEN event with the bytes of the tensor it holds (none
 * when the extent was long enough). Copies and sets keep their true
 * extent. -EINVAL, -ENOMEM. */
int swap_model_segments_extent(const struct swap_trace *in, uint64_t chunk,
                               enum swap_model_extent extent, struct swap_trace *out);

/* Run the model. -EINVAL (bad params), -ENOMEM. */
int swap_model_run(const struct swap_trace *t, const struct swap_model_params *p,
                   struct swap_model_result *r);

/* The offline schedule at a budget as the model sees it: the MIN family's
 * clean weights, history and lru replayed, the one that moves the fewest
 * bytes (h2d + written-back d2h) over the whole run kept (*which: "min",
 * "history" or "lru"), its moves in r (engine VMM, whose d2h are the
 * write-backs). -EINVAL, -ENOMEM. */
int swap_model_offline(const struct swap_trace *t, uint64_t budget,
                       const struct swap_model_rates *rates, struct swap_model_result *r,
                       const char **which);

/* T_bound of iteration i: max(unlimited seconds, offline h2d link seconds,
 * offline d2h link seconds). */
double swap_model_bound(const struct swap_model_iter *unlimited, const struct swap_model_iter *off);

#endif
