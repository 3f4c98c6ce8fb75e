/* swap_vmm: host swap's VMM backing (swap_vmm.h, docs/swap.md). Every call
 * but swap_vmm_query runs under host_swap.c's swap_lock; nothing here locks
 * but the query view's leaf lock (ranges_lock). The chunk pool and the
 * mappings are swap_pool.c's, the jobs done later swap_mover.c's.
 *
 * THE INVARIANT, for every block here: its range always maps the current
 * copy of its bytes with device read/write access -- device chunks while
 * resident, its host copy while evicted -- so a wrong or missing prediction
 * is slow (a kernel reads the host copy over the link), never wrong; and a
 * range is never unmapped while queued work may touch it. "May touch" is
 * known from events: after every launch, copy or set that host_swap.c sees
 * touching a VMM block, the stream's event is recorded again and the block
 * keeps the stream's bit (struct vmm_block.streams); work whose accesses
 * are unknown (a kernel without a layout, a graph, a 2D driver copy) puts
 * its stream in all_mask, which every block's wait includes. Before any
 * unmap the host waits for those events (or, for a write-back, the copy
 * waits for them on the device and the host waits for the copy). A fetch's
 * copy is never waited for by the host: the launch's stream waits for it
 * (swap_vmm_before). An event recorded later on the same stream stands for
 * everything before it, so each stream needs one event, re-recorded.
 *
 * ASYNC EVICTIONS, and the exception to the invariant they make: an
 * eviction does not wait on the host. The device-to-host stream waits for
 * the victim's events, writes it back (dirty only) and records the
 * victim's own event (wb_ev); the victim's chunks go to the pool at once,
 * each keeping that event (pool_ev), and whoever takes a chunk makes the
 * host-to-device stream wait for it before anything writes the chunk (a
 * fetch's copy; a first touch records the host-to-device event after the
 * wait, which the launch's stream then waits for like a copy). Until its
 * remap, the victim's range still maps those chunks, which may already
 * be another block's: an alias, with remap_pending set. The remap
 * (unmap, host copy mapped) is a job (swap_mover.c): the mover thread's,
 * once the event is complete, or (IPCSHIM_SWAP_MOVER=inline) the launching
 * thread's, lazily at every move for each remap whose event is complete,
 * and forced (the host waits for the event) when needed. THE RULE: while a
 * block's remap is pending, nothing may touch its range. Work that touches
 * it (a launch, copy or set: swap_vmm_before; a fetch of it; its free; its
 * export) completes its remap first, or waits for the mover that owns it;
 * work of unknown accesses (a kernel without a layout, a graph, a 2D copy:
 * swap_vmm_before_unknown) does so for every pending remap. A fetch ahead
 * is a job too (swap_mover.c says what may meet it). Captured
 * work runs at its graph's launch, which is unknown work. Pointer queries
 * answer from the tables, never from the bytes. Fork turns swap off;
 * a context's end forgets its blocks as before. The pool (and so the
 * budget) counts a chunk once, wherever it is mapped; a chunk taken from
 * the pool belongs to one block. */
#include "swap_vmm_internal.h"
#include "swap_vmm_view.h"
#include "context.h"
#include "host.h"
#include "log.h"
#include "resolve.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct vmm_block *blocks;
struct vmm_block *vmm_jobs;
struct slot vmm_slots[SLOTS];

struct vdev vmm_devs[MAX_DEVICES];
uint64_t vmm_all_mask, vmm_use_clock, vmm_unknown_epoch;
struct swap_vmm_counts vmm_counts;
pthread_mutex_t *vmm_lock;
bool vmm_mover_thread;

/* ---- device probe and its streams --------------------------------------- */

/* Attribute a of dev, or otherwise when the driver does not answer. */
static int attribute(CUdevice dev, CUdevice_attribute a, int otherwise)
{
    int v = otherwise;
    if (!real_cuDeviceGetAttribute || real_cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS)
        return otherwise;
    return v;
}

uint64_t swap_vmm_granularity(CUdevice dev)
{
    if (dev < 0 || dev >= MAX_DEVICES) return 0;
    struct vdev *d = &vmm_devs[dev];
    if (d->probed) return d->gran;
    d->probed = true;
    d->h2d_slot = -1;
    if (!REAL(cuMemCreate) || !REAL(cuMemMap) || !REAL(cuMemUnmap) || !REAL(cuMemRelease) ||
        !REAL(cuMemAddressReserve) || !REAL(cuMemAddressFree) || !REAL(cuMemSetAccess) ||
        !REAL(cuMemGetAllocationGranularity) || !REAL(cuDeviceGetAttribute) ||
        !REAL(cuStreamCreate) || !REAL(cuStreamWaitEvent) || !REAL(cuEventCreate) ||
        !REAL(cuEventRecord) || !REAL(cuEventSynchronize) || !REAL(cuEventQuery) ||
        !REAL(cuEventDestroy_v2) || !REAL(cuMemcpyDtoDAsync_v2)) {
        LOG_ONCE(LOG_WARN, "swap: the driver lacks the VMM calls host swap's vmm engine needs; "
                           "swappable blocks use managed memory");
        return 0;
    }
    d->host_numa_ok =
        attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == 1;
    d->host_ok =
        attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == 1;
    d->numa = attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1);
    if (attribute(dev, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) != 1 ||
        (!d->host_numa_ok && !d->host_ok)) {
        LOG_ONCE(LOG_WARN,
                 "swap: device %d has no host-located VMM memory (attributes 141/145); "
                 "swappable blocks use managed memory",
                 (int)dev);
        return 0;
    }
    /* One unit for the range, the chunks and the host copy: the larger of
     * the device's and the host location's granularities (powers of two). */
    CUmemAllocationProp p = vmm_device_prop(dev);
    size_t g = 0, h = 0;
    if (real_cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        !g || (g & (g - 1)))
        return 0;
    p.location.type = d->host_numa_ok && d->numa >= 0 ? CU_MEM_LOCATION_TYPE_HOST_NUMA
                                                      : CU_MEM_LOCATION_TYPE_HOST;
    p.location.id = p.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? d->numa : 0;
    if (real_cuMemGetAllocationGranularity(&h, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            CUDA_SUCCESS &&
        h > g && !(h & (h - 1)))
        g = h;
    d->gran = g;
    return g;
}

static int slot_new(CUstream s, CUcontext ctx, pid_t tid, bool internal);

/* The device's two copy streams and the write-back event, made once per
 * context in ctx (current). 0 or -EIO. */
static int dev_streams(int dev, CUcontext ctx)
{
    struct vdev *d = &vmm_devs[dev];
    if (d->ctx == ctx && d->h2d) return 0;
    if (d->ctx && d->ctx != ctx) return -EIO; /* one context per device */
    CUstream h2d = NULL, d2h = NULL;
    CUevent ev = NULL;
    if (real_cuStreamCreate(&h2d, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        real_cuStreamCreate(&d2h, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        LOG_ONCE(LOG_WARN, "swap: cannot create the VMM engine's copy streams");
        return -EIO; /* a stream made is left: the context may still use it */
    }
    int k = slot_new(h2d, ctx, 0, true);
    if (k < 0) return -EIO;
    CUstream gate = NULL; /* without it, a fetch ahead waits on the slots' own events */
    if (real_cuStreamCreate(&gate, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) gate = NULL;
    d->ctx = ctx, d->h2d = h2d, d->d2h = d2h, d->d2h_ev = ev, d->h2d_slot = k, d->gate = gate;
    return 0;
}

/* ---- stream slots -------------------------------------------------------- */

/* The host waits for the events of the slots in mask; they count as done.
 * A failed wait leaves the slot as it was (-EIO): the caller must not unmap. */
static int wait_host(uint64_t mask)
{
    int rc = 0;
    for (int k = 0; k < SLOTS; k++) {
        if (!(mask & slot_bit(k)) || !vmm_slots[k].used) continue;
        struct slot *s = &vmm_slots[k];
        if (s->done >= s->recorded) continue;
        uint64_t upto = s->recorded;
        vmm_counts.host_waits++;
        if (real_cuEventSynchronize(s->ev) != CUDA_SUCCESS) {
            rc = -EIO;
            continue;
        }
        s->done = upto;
        if (s->done >= s->all_upto) vmm_all_mask &= ~slot_bit(k);
    }
    return rc;
}

/* stream waits (on the device) for the events of the slots in mask. */
static int wait_stream(CUstream stream, uint64_t mask)
{
    int rc = 0;
    for (int k = 0; k < SLOTS; k++)
        if ((mask & slot_bit(k)) && vmm_slots[k].used &&
            vmm_slots[k].done < vmm_slots[k].recorded &&
            real_cuStreamWaitEvent(stream, vmm_slots[k].ev, 0) != CUDA_SUCCESS)
            rc = -EIO;
    return rc;
}

/* A free slot for (s, ctx, tid): a new event in the current context (ctx);
 * the least recently used slot is retired when none is free (its work is
 * waited for, so that no block needs it). The index, or -1. */
static int slot_new(CUstream s, CUcontext ctx, pid_t tid, bool internal)
{
    int k = -1;
    for (int i = 0; i < SLOTS && k < 0; i++)
        if (!vmm_slots[i].used) k = i;
    if (k < 0) {
        uint64_t oldest = UINT64_MAX;
        for (int i = 0; i < SLOTS; i++)
            if (!vmm_slots[i].internal && vmm_slots[i].last_use < oldest)
                oldest = vmm_slots[i].last_use, k = i;
        if (k < 0 || wait_host(slot_bit(k))) return -1;
        struct vmm_block *b, *tmp;
        HASH_ITER(hh, blocks, b, tmp)
        {
            b->streams &= ~slot_bit(k);
            if (b->fetch_waiter == k + 1) b->fetch_waiter = 0;
        }
        vmm_all_mask &= ~slot_bit(k);
        /* its event is kept for the new stream: an event may be recorded on any stream of its
         * context */
        if (vmm_slots[k].ctx != ctx) vmm_slots[k].ev = NULL;
    }
    CUevent ev = vmm_slots[k].used ? vmm_slots[k].ev : NULL;
    if (!ev && real_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
        vmm_slots[k].used = false;
        return -1;
    }
    vmm_slots[k] = (struct slot){.used = true,
                                 .internal = internal,
                                 .stream = s,
                                 .ctx = ctx,
                                 .tid = tid,
                                 .ev = ev,
                                 .last_use = ++vmm_use_clock};
    return k;
}

/* The slot of stream in the current context, made when new; -1 when none can be had. */
static int slot_of(CUstream stream)
{
    CUcontext ctx = NULL;
    if (real_cuCtxGetCurrent) real_cuCtxGetCurrent(&ctx);
    if (stream == CU_STREAM_LEGACY) stream = NULL;
    pid_t tid = stream == CU_STREAM_PER_THREAD ? gettid() : 0;
    for (int k = 0; k < SLOTS; k++)
        if (vmm_slots[k].used && vmm_slots[k].stream == stream && vmm_slots[k].ctx == ctx &&
            vmm_slots[k].tid == tid) {
            vmm_slots[k].last_use = ++vmm_use_clock;
            return k;
        }
    return slot_new(stream, ctx, tid, false);
}

/* ---- blocks ------------------------------------------------------------- */

struct vmm_block *swap_vmm_find(uint64_t base)
{
    struct vmm_block *b = NULL;
    if (blocks) HASH_FIND(hh, blocks, &base, sizeof base, b);
    return b;
}

bool swap_vmm_pinned(const struct vmm_block *b)
{
    return b && b->pinned;
}

/* The block's host copy: HOST_NUMA on the device's node, else HOST. */
static CUresult create_host(const struct vdev *d, uint64_t size, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp p = {.type = CU_MEM_ALLOCATION_TYPE_PINNED};
    CUresult r = CUDA_ERROR_NOT_SUPPORTED;
    if (d->host_numa_ok && d->numa >= 0) {
        p.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, p.location.id = d->numa;
        r = real_cuMemCreate(h, size, &p, 0);
    }
    if (r != CUDA_SUCCESS && d->host_ok) {
        p.location.type = CU_MEM_LOCATION_TYPE_HOST, p.location.id = 0;
        r = real_cuMemCreate(h, size, &p, 0);
    }
    return r;
}

int swap_vmm_block_make(uint64_t va, uint64_t staging, uint64_t size, CUdevice dev, CUcontext ctx,
                        struct vmm_block **out)
{
    uint64_t g = swap_vmm_granularity(dev);
    if (!g || !size || size % g || !out) return -EINVAL;
    struct vdev *d = &vmm_devs[dev];
    CUmemGenericAllocationHandle host = 0;
    bool mapped_va = false, mapped_staging = false;
    struct vmm_block *b = calloc(1, sizeof *b);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    const char *what = "memory";
    if (!b) goto fail;
    if (dev_streams(dev, ctx)) {
        what = "streams";
        goto fail;
    }
    what = "host-located cuMemCreate";
    if ((r = create_host(d, size, &host)) != CUDA_SUCCESS) goto fail;
    what = "cuMemMap";
    if ((r = vmm_map_rw(staging, size, host, dev)) != CUDA_SUCCESS) goto fail;
    mapped_staging = true;
    if ((r = vmm_map_rw(va, size, host, dev)) != CUDA_SUCCESS) goto fail;
    mapped_va = true;
    b->chunks = calloc(size / g, sizeof *b->chunks);
    b->chunk_ev = calloc(size / g, sizeof *b->chunk_ev);
    r = CUDA_ERROR_OUT_OF_MEMORY, what = "memory";
    if (!b->chunks || !b->chunk_ev) goto fail;
    b->base = va, b->size = size, b->staging = staging, b->ctx = ctx, b->device = dev;
    b->host = host;
    b->alloc_epoch = b->fetch_epoch = vmm_unknown_epoch;
    HASH_ADD(hh, blocks, base, sizeof b->base, b);
    if (!UTH_ADDED(b, hh)) goto fail;
    vmm_counts.blocks++;
    *out = b;
    return 0;
fail:
    if (mapped_va) real_cuMemUnmap(va, size);
    if (mapped_staging) real_cuMemUnmap(staging, size);
    if (host) real_cuMemRelease(host);
    if (b) free(b->chunks), free(b->chunk_ev);
    free(b);
    vmm_counts.fallbacks++;
    LOG_ONCE(LOG_WARN,
             "swap: a VMM-backed block could not be made (%s: CUresult %d); such blocks use "
             "managed memory instead",
             what, (int)r);
    return -ENOMEM;
}

/* ---- moves -------------------------------------------------------------- */

/* b (on its device) to its host copy, without a host wait: the
 * device-to-host stream waits for b's events, writes b back when dirty and
 * records b's write-back event; b's chunks go to the pool with that event
 * and its remap is pending (THE RULE, at the top). 0, or -EIO with b still
 * on the device. */
static int evict(struct vmm_block *b, unsigned flags)
{
    struct vdev *d = &vmm_devs[b->device];
    uint64_t mask = b->streams | vmm_all_mask;
    /* Unknown work since the fetch may have written it: write it back. */
    bool dirty = (flags & HOST_MOVE_DIRTY) || b->fetch_epoch != vmm_unknown_epoch;
    CUevent ev = vmm_ev_get(d);
    if (!ev) return -EIO;
    if (wait_stream(d->d2h, mask) ||
        (dirty && real_cuMemcpyDtoDAsync_v2((CUdeviceptr)b->staging, (CUdeviceptr)b->base, b->size,
                                            d->d2h) != CUDA_SUCCESS) ||
        real_cuEventRecord(ev, d->d2h) != CUDA_SUCCESS) {
        vmm_ev_put(d, ev);
        return -EIO; /* a write-back queued is harmless: b's range still maps its bytes */
    }
    if (dirty) vmm_counts.writebacks++;
    vmm_chunks_give(b->device, b->size / d->gran, b->chunks, NULL, ev);
    b->on_device = false;
    b->remap_pending = true;
    b->wb_ev = ev;
    b->job = JOB_REMAP;
    job_queue(b);
    return 0;
}

/* b (host-backed) onto device chunks, its host copy copied in on the
 * host-to-device stream unless it is new, after the write-backs of the
 * chunks' last holders; the copy is not waited for here.
 * 0, -ENOMEM (no chunk: b stays host-backed), or -EIO with b host-backed. */
static int fetch(struct vmm_block *b, unsigned flags)
{
    struct vdev *d = &vmm_devs[b->device];
    size_t n = b->size / d->gran;
    job_settle(b);
    if (vmm_chunks_take(b->device, n, b->chunks, b->chunk_ev)) return -ENOMEM;
    /* Work queued on the host copy (a launch that could not be predicted
     * reads it over the link) must be done before it is unmapped. */
    if (wait_host(b->streams | vmm_all_mask) ||
        real_cuMemUnmap((CUdeviceptr)b->base, b->size) != CUDA_SUCCESS) {
        vmm_chunks_give(b->device, n, b->chunks, b->chunk_ev, NULL);
        return -EIO;
    }
    CUresult r = vmm_map_chunks(b);
    /* A new block's bytes are undefined: nothing to copy, unless some work
     * the policy did not see may have written the host copy already. */
    bool copy = !(flags & HOST_MOVE_NEW) || b->touched || b->alloc_epoch != vmm_unknown_epoch;
    /* Nothing may write a chunk before its last holder's write-back read
     * it: the copy, or (first touch) the launch through the event below. */
    bool waited = false;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        if (!b->chunk_ev[i]) continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = b->chunk_ev[j] == b->chunk_ev[i];
        if (!seen) r = real_cuStreamWaitEvent(d->h2d, b->chunk_ev[i], 0);
        waited = true;
    }
    struct slot *s = &vmm_slots[d->h2d_slot];
    if (r == CUDA_SUCCESS && copy)
        r = real_cuMemcpyDtoDAsync_v2((CUdeviceptr)b->base, (CUdeviceptr)b->staging, b->size,
                                      d->h2d);
    if (r == CUDA_SUCCESS && (copy || waited)) r = real_cuEventRecord(s->ev, d->h2d);
    if (r != CUDA_SUCCESS) {
        /* A copy may have been queued: wait for it before unmapping. */
        real_cuCtxSynchronize();
        real_cuMemUnmap((CUdeviceptr)b->base, b->size);
        if (vmm_map_rw(b->base, b->size, b->host, b->device) != CUDA_SUCCESS)
            log_msg(LOG_ERROR,
                    "swap: block %#llx could not be remapped (CUresult %d); its range is unmapped",
                    (unsigned long long)b->base, (int)r);
        vmm_chunks_give(b->device, n, b->chunks, NULL, NULL); /* the device is idle now */
        return -EIO;
    }
    b->streams = 0;
    if (copy || waited) {
        s->recorded++, s->last_use = ++vmm_use_clock;
        b->streams = slot_bit(d->h2d_slot);
        b->fetch_rec = s->recorded;
        b->fetch_waiter = 0;
        if (copy) vmm_counts.fetch_copies++;
    }
    b->on_device = true;
    b->fetch_epoch = vmm_unknown_epoch;
    vmm_counts.to_device++;
    return 0;
}

int swap_vmm_move(struct vmm_block *b, int device, unsigned flags)
{
    if (!b || b->pinned) return -EINVAL;
    if (device < 0) job_cancel_ahead(b); /* a fetch ahead still queued is dropped */
    if ((device >= 0) == b->on_device) return 0;
    if (!vmm_mover_thread) job_settle_all(true);
    bool pushed = shim_enter_context(b->ctx);
    int rc = device < 0 ? evict(b, flags) : fetch(b, flags);
    shim_leave_context(pushed);
    if (rc) vmm_counts.remap_failures++;
    return rc;
}

int swap_vmm_fetch_ahead(struct vmm_block *b, unsigned flags)
{
    if (!b || b->pinned) return -EINVAL;
    if (b->on_device) return 0;
    if (!job_mover_on()) return swap_vmm_move(b, b->device, flags & ~HOST_MOVE_AHEAD);
    return job_queue_ahead(b, flags);
}

/* ---- ordering around the program's work --------------------------------- */

void swap_vmm_before(struct vmm_block *b, CUstream stream)
{
    if (b && b->job) job_settle(b);
    if (b && b->job == JOB_AHEAD) return; /* queued: the work reads the host copy (swap_mover.c) */
    if (!b || !b->on_device || b->pinned) return;
    struct vdev *d = &vmm_devs[b->device];
    if (d->h2d_slot < 0) return;
    struct slot *s = &vmm_slots[d->h2d_slot];
    if (b->fetch_rec <= s->done) return;
    /* A stream that waited for this copy once has every later piece of its
     * work ordered after it. */
    int k = slot_of(stream);
    if (k >= 0 && b->fetch_waiter == k + 1) return;
    if (real_cuStreamWaitEvent(stream, s->ev, 0) != CUDA_SUCCESS) return;
    vmm_counts.stream_waits++;
    b->fetch_waiter = k + 1;
}

int swap_vmm_ahead_state(const struct vmm_block *b)
{
    if (!b || b->pinned || !b->on_device) return 0;
    if (b->job == JOB_AHEAD) return 1; /* the work reads the host copy, or waits for the mover */
    const struct vdev *d = &vmm_devs[b->device];
    if (d->h2d_slot < 0 || !real_cuEventQuery) return 0;
    const struct slot *s = &vmm_slots[d->h2d_slot];
    if (b->fetch_rec <= s->done) return 0;
    /* The slot's event stands for the copies recorded after b's too: at
     * worst a launch that waits for a newer copy counts b as in flight. */
    return real_cuEventQuery(s->ev) == CUDA_ERROR_NOT_READY ? 2 : 0;
}

void swap_vmm_before_unknown(CUstream stream)
{
    job_settle_all(false);
    for (int dev = 0; dev < MAX_DEVICES; dev++) {
        struct vdev *d = &vmm_devs[dev];
        if (d->h2d_slot < 0 || !d->h2d) continue;
        if (wait_stream(stream, slot_bit(d->h2d_slot)) == 0 &&
            vmm_slots[d->h2d_slot].done < vmm_slots[d->h2d_slot].recorded)
            vmm_counts.stream_waits++;
    }
}

void swap_vmm_after(CUstream stream, struct vmm_block *const *touched, size_t n, bool all)
{
    int k = slot_of(stream);
    if (k < 0 || real_cuEventRecord(vmm_slots[k].ev, stream) != CUDA_SUCCESS) {
        /* Cannot be tracked: wait for it now rather than remap under it. */
        LOG_ONCE(LOG_WARN, "swap: cannot record an event after a launch; waiting for it instead");
        real_cuCtxSynchronize();
        return;
    }
    struct slot *s = &vmm_slots[k];
    s->recorded++;
    for (size_t i = 0; i < n; i++)
        if (touched[i]) {
            touched[i]->streams |= slot_bit(k), touched[i]->touched = true;
            if (touched[i]->job == JOB_AHEAD) job_touched(touched[i]);
        }
    if (all) {
        job_touched_all();
        vmm_all_mask |= slot_bit(k);
        s->all_upto = s->recorded;
        vmm_unknown_epoch++; /* every block may have been written (alloc_epoch, fetch_epoch) */
    }
}

/* ---- free, export, context end ------------------------------------------ */

/* [base, base + size): the range of the parts p[0..n). */
static uint64_t parts_size(struct vmm_block *const *p, size_t n)
{
    return p[n - 1]->base + p[n - 1]->size - p[0]->base;
}

int swap_vmm_free_parts(struct vmm_block *const *p, size_t n, uint64_t reserved)
{
    if (!n || !p[0]) return -EINVAL;
    uint64_t base = p[0]->base, staging = p[0]->staging, size = parts_size(p, n);
    for (size_t i = 0; i < n; i++) {
        job_cancel_ahead(p[i]);
        job_settle(p[i]);
    }
    bool pushed = shim_enter_context(p[0]->ctx);
    /* Never unmap under queued work (a pinned block's accesses are no
     * longer recorded); and the program's cudaFree/cuMemFree would have
     * waited for the device: a program may count on that. */
    int rc = real_cuCtxSynchronize() == CUDA_SUCCESS ? 0 : -EIO;
    if (p[0]->pinned) {
        /* The ledger's free of an exported mapping (limbo while importers hold it). */
        if (do_cuMemUnmap((CUdeviceptr)base, size) != CUDA_SUCCESS) rc = -EIO;
        do_cuMemRelease(p[0]->exported);
    }
    for (size_t i = 0; i < n; i++) {
        struct vmm_block *b = p[i];
        if (!b->pinned && real_cuMemUnmap((CUdeviceptr)b->base, b->size) != CUDA_SUCCESS) rc = -EIO;
        if (!b->pinned && b->on_device)
            vmm_chunks_give(b->device, b->size / vmm_devs[b->device].gran, b->chunks, NULL, NULL);
        real_cuMemUnmap((CUdeviceptr)b->staging, b->size);
        real_cuMemRelease(b->host);
        HASH_DEL(blocks, b);
        free(b->chunks);
        free(b->chunk_ev);
        free(b);
    }
    if (real_cuMemAddressFree((CUdeviceptr)staging, reserved) != CUDA_SUCCESS) rc = -EIO;
    if (real_cuMemAddressFree((CUdeviceptr)base, reserved) != CUDA_SUCCESS) rc = -EIO;
    shim_leave_context(pushed);
    if (rc) LOG_RATE(LOG_WARN, "swap: free of a VMM-backed block: the driver refused a step");
    return rc;
}

/* Map b's current copy at its range again (device chunks or its host copy). */
static CUresult remap_current(struct vmm_block *b)
{
    return b->on_device ? vmm_map_chunks(b) : vmm_map_rw(b->base, b->size, b->host, b->device);
}

int swap_vmm_pin_parts(struct vmm_block *const *p, size_t n)
{
    if (!n || !p[0]) return -EINVAL;
    if (p[0]->pinned) return 0;
    struct vdev *d = &vmm_devs[p[0]->device];
    for (size_t i = 0; i < n; i++) {
        job_cancel_ahead(p[i]);
        job_settle(p[i]);
    }
    uint64_t base = p[0]->base, size = parts_size(p, n), mask = vmm_all_mask;
    bool pushed = shim_enter_context(p[0]->ctx), wrote = false;
    int rc = -EIO;
    size_t unmapped = 0;
    CUmemGenericAllocationHandle h = 0;
    /* Every host copy first becomes current (a write-back, whatever the policy thinks). */
    for (size_t i = 0; i < n; i++) {
        struct vmm_block *b = p[i];
        mask |= b->streams;
        if (!b->on_device) continue;
        if (wait_stream(d->d2h, b->streams | vmm_all_mask) ||
            real_cuMemcpyDtoDAsync_v2((CUdeviceptr)b->staging, (CUdeviceptr)b->base, b->size,
                                      d->d2h) != CUDA_SUCCESS)
            goto out;
        vmm_counts.writebacks++, wrote = true;
    }
    if (wrote && (real_cuEventRecord(d->d2h_ev, d->d2h) != CUDA_SUCCESS ||
                  real_cuEventSynchronize(d->d2h_ev) != CUDA_SUCCESS))
        goto out;
    vmm_counts.host_waits += wrote;
    if (wait_host(mask)) goto out;
    CUmemAllocationProp prop = vmm_device_prop(p[0]->device);
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (do_cuMemCreate(&h, size, &prop, 0) != CUDA_SUCCESS) {
        h = 0;
        goto out;
    }
    for (; unmapped < n; unmapped++)
        if (real_cuMemUnmap((CUdeviceptr)p[unmapped]->base, p[unmapped]->size) != CUDA_SUCCESS)
            goto restore;
    CUresult r = do_cuMemMap((CUdeviceptr)base, size, 0, h, 0);
    CUmemAccessDesc a = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = p[0]->device},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (r == CUDA_SUCCESS) r = real_cuMemSetAccess((CUdeviceptr)base, size, &a, 1);
    /* the parts' staging ranges are one range (swap_vmm_parts.c) */
    if (r == CUDA_SUCCESS)
        r = real_cuMemcpyDtoDAsync_v2((CUdeviceptr)base, (CUdeviceptr)p[0]->staging, size, d->h2d);
    if (r == CUDA_SUCCESS) r = real_cuEventRecord(d->d2h_ev, d->h2d);
    if (r == CUDA_SUCCESS) r = real_cuEventSynchronize(d->d2h_ev);
    if (r != CUDA_SUCCESS) {
        real_cuCtxSynchronize();
        do_cuMemUnmap((CUdeviceptr)base, size);
        goto restore;
    }
    for (size_t i = 0; i < n; i++) {
        struct vmm_block *b = p[i];
        if (b->on_device) vmm_chunks_give(b->device, b->size / d->gran, b->chunks, NULL, NULL);
        b->pinned = true, b->on_device = true, b->streams = 0;
    }
    p[0]->exported = h;
    h = 0;
    vmm_counts.exports++;
    rc = 0;
    goto out;
restore: /* back to what each part was: its device copy (still in the chunks) or the host's */
    for (size_t i = 0; i < unmapped; i++)
        if (remap_current(p[i]) != CUDA_SUCCESS)
            log_msg(LOG_ERROR, "swap: block %#llx could not be remapped; its range is unmapped",
                    (unsigned long long)p[i]->base);
out:
    if (h) do_cuMemRelease(h);
    shim_leave_context(pushed);
    if (rc)
        LOG_RATE(LOG_WARN, "swap: block %#llx could not be made exportable",
                 (unsigned long long)base);
    return rc;
}

void swap_vmm_context_gone(CUcontext ctx, void (*forget)(uint64_t base))
{
    struct vmm_block *b, *tmp;
    job_context_gone(ctx);
    HASH_ITER(hh, blocks, b, tmp)
    {
        if (b->ctx != ctx) continue;
        swap_vmm_view_remove(b->base);
        HASH_DEL(blocks, b);
        if (forget) forget(b->base);
        free(b->chunks);
        free(b->chunk_ev);
        free(b);
        vmm_counts.forgotten++;
    }
    for (int k = 0; k < SLOTS; k++)
        if (vmm_slots[k].used && vmm_slots[k].ctx == ctx) {
            vmm_slots[k] = (struct slot){0};
            vmm_all_mask &= ~slot_bit(k);
            HASH_ITER(hh, blocks, b, tmp)
            {
                b->streams &= ~slot_bit(k);
                if (b->fetch_waiter == k + 1) b->fetch_waiter = 0;
            }
        }
    for (int dev = 0; dev < MAX_DEVICES; dev++) {
        struct vdev *d = &vmm_devs[dev];
        if (d->ctx != ctx) continue;
        free(d->pool); /* the chunks and events are the driver's to reclaim */
        free(d->pool_ev);
        free(d->free_ev);
        d->pool = NULL, d->pool_ev = NULL, d->npool = d->cap = 0;
        d->free_ev = NULL, d->nfree_ev = d->free_ev_cap = 0;
        d->ctx = NULL, d->h2d = d->d2h = d->gate = NULL, d->d2h_ev = NULL, d->h2d_slot = -1;
    }
}

void swap_vmm_init(pthread_mutex_t *lock, bool mover_thread)
{
    vmm_lock = lock;
    vmm_mover_thread = mover_thread;
}

void swap_vmm_counts(struct swap_vmm_counts *out)
{
    *out = vmm_counts;
}
