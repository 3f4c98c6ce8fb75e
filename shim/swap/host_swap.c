/* host_swap: host swap's hooks in the shim (docs/swap.md). Swappable
 * allocations are VMM-backed (shim/swap/swap_vmm.c: IPCSHIM_SWAP_ENGINE=vmm, the
 * default, blocks of at least the VMM granularity) or managed memory (the
 * rest, and every block with IPCSHIM_SWAP_ENGINE=managed), registered with
 * the swap engine
 * (core/swap/swap_engine.h), which owns the block index, one eviction policy per
 * device (core/swap/swap.h) and the budget accounting. Here: every kernel launch
 * has its parameter words scanned against the engine's index, every copy
 * and set its two ends looked up, and each block found is reported to the
 * engine before the real call; the engine decides and asks for moves
 * through its one device operation, cuda_move (a VMM block: swap_vmm_move;
 * a managed one: cuMemAdvise preferred location + cuMemPrefetchAsync on the
 * launch's stream). The launch, copy and set wrappers are generated from
 * symbols.def (RUNTIME_SWAP / DRIVER_SWAP lines and their hooks); after the
 * real call of one that touched a VMM block (or may have: unknown layout,
 * graph), swap_vmm_after records the stream's event for the blocks; after
 * the real call of one that touched any swappable block, the engine
 * fetches ahead (swap_engine_fetch_ahead) on its stream, behind it: a
 * managed block's cuMemPrefetchAsync queues after the work, a VMM block's
 * fetch goes to the mover. Copies and sets fetch ahead too: the policy
 * counts them as launches (its horizon is in those), so a run of copies
 * would otherwise use up the horizon with nothing fetched. Each launch's
 * blocks fetched ahead give the engine their lateness (ahead_late).
 *
 * Invariants:
 * - the bytes placed on a device (on_device blocks) are a subset of what
 *   that device's policy counts as resident, so they stay under
 *   IPCSHIM_DEVICE_BUDGET; the hardware may still fault in what the shim
 *   could not predict (a launch whose layout is unknown), never
 *   incorrectly, only at a cost;
 * - exported and imported blocks are never in the index: a managed
 *   swappable block refuses to be exported, a VMM-backed one is pinned on
 *   the device and leaves the index first (swap_vmm_alloc_pin), imports
 *   are never registered.
 *
 * Locking: one mutex (swap_lock) around the engine and
 * the trace, and swap_vmm.c's state (kernel layouts: swap_layout.c, its own). A free that is not of
 * a swappable block does not take it (a lock-free counting filter, base_filter). The prefetch and
 * advise calls and the VMM remaps are made under it. A launch, copy or set that touches a VMM block
 * (or may: unknown accesses) keeps it from before the real call until its event is recorded after
 * it (the thread-local `pending`): an eviction on another thread in between would not know of the
 * queued work and could unmap under it. One that touches managed blocks only keeps it too when
 * IPCSHIM_SWAP_AHEAD is on, for its fetches ahead; else it drops it before the real call.
 * Kernels are recorded as writing every block they touch: a launch does not say which parameters it
 * writes. Copies and sets record the source as read and the destination as
 * written, and neither fetch nor evict (a copy works wherever the block is;
 * the next launch fetches it); a new block a copy touches is placed first,
 * on the device if it fits, else on the host (swap_policy_copy). */
#include "host_swap.h"
#include "context.h"
#include "resolve.h"
#include "log.h"
#include "options.h"
#include "owned_file.h"
#include "swap_engine.h"
#include "swap_index.h"
#include "swap_layout.h"
#include "swap_managed_ahead.h"
#include "swap_trace.h"
#include "swap_vmm.h"
#include "swap_vmm_parts.h"
#include "uthash_wrap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Budget accounting unit: a block is charged its size rounded up to this
 * (managed memory migrates in pages; the simulator counts 512-byte units). */
#define CHARGE_UNIT 4096u

bool swap_enabled;
uint64_t swap_min_bytes;

static pthread_mutex_t swap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct swap_engine *engine; /* core/swap/swap_engine.h: index, policies, budget */
static unsigned long live_blocks;  /* atomic: launches skip the scan while 0 */
static enum swap_policy_kind policy_kind;
static bool engine_vmm;          /* IPCSHIM_SWAP_ENGINE=vmm */
static bool swap_ahead;          /* IPCSHIM_SWAP_AHEAD: the engine fetches ahead after the work */
static bool test_ahead;          /* IPCSHIM_TEST_SWAP_AHEAD: every VMM fetch is one ahead */
static unsigned long vmm_blocks; /* atomic: VMM-backed blocks live (pinned ones included) */

/* The work between a hook and its real call that after_call must follow:
 * set (swap_lock held) by a hook that saw swappable blocks, cleared
 * (swap_lock dropped) by after_call. vmm: swap_vmm_after records its event
 * (VMM blocks, or unknown accesses while VMM blocks live); ahead: the
 * engine fetches ahead behind it (the policy ticked for it). */
#define PENDING_MAX 64
static __thread __attribute__((tls_model("initial-exec"))) struct {
    bool active, all, vmm, ahead;
    CUstream stream;
    size_t n;
    struct vmm_block *v[PENDING_MAX];
} pending;
static uint64_t budget;
static uint64_t part_bytes; /* IPCSHIM_SWAP_PART_BYTES */
static FILE *trace;

/* The shim's own counts, beside the policies' (under swap_lock). */
static struct {
    uint64_t managed_allocs, fallback_allocs, launches_scanned, launches_no_layout, copies_recorded;
    uint64_t refused_exports;
} counts;

/* ---- moving blocks (the engine's one device operation) ----------------- */

static CUmemLocation location(int device)
{
    CUmemLocation l = {.type = device < 0 ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                       .id = device < 0 ? 0 : device};
    return l;
}

/* The engine's move (host_move_fn, core/host.h): a VMM block's remap (swap_vmm_move, which uses
 * flags; a fetch ahead, HOST_MOVE_AHEAD: swap_vmm_fetch_ahead); a managed block's prefetch of
 * [base, base + size) to device (or the host, -1) on stream, with the preferred location set the
 * same way (flags ignored). Under swap_lock (the engine is called under it). */
static int cuda_move(void *ctx, uint64_t base, uint64_t size, int device, uint64_t stream,
                     unsigned flags)
{
    (void)ctx;
    struct vmm_block *v = vmm_blocks ? swap_vmm_find(base) : NULL;
    if (v) {
        /* A part written by work its policy was not told of (past a learned
         * extent) is written back at its eviction. */
        struct vmm_alloc *a = swap_vmm_alloc_find(base);
        bool *unseen = a ? &a->unseen_write[swap_vmm_alloc_part(a, base - a->base)] : NULL;
        if (unseen && *unseen && device < 0) flags |= HOST_MOVE_DIRTY;
        if (device >= 0 && test_ahead) flags |= HOST_MOVE_AHEAD;
        int rc = device >= 0 && (flags & HOST_MOVE_AHEAD) ? swap_vmm_fetch_ahead(v, flags)
                                                          : swap_vmm_move(v, device, flags);
        if (!rc && unseen && device < 0) *unseen = false;
        return rc;
    }
    CUmemLocation to = location(device);
    if (device >= 0 && (flags & HOST_MOVE_AHEAD))
        managed_ahead_add(base, (CUstream)(uintptr_t)stream); /* its pre event comes before */
    if (real_cuMemAdvise_v2)
        real_cuMemAdvise_v2((CUdeviceptr)base, size, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, to);
    CUresult r =
        real_cuMemPrefetchAsync_v2((CUdeviceptr)base, size, to, 0, (CUstream)(uintptr_t)stream);
    if (r == CUDA_SUCCESS) return 0;
    LOG_RATE(LOG_WARN,
             "swap: prefetch of %#llx (%llu bytes) to %s failed: CUresult %d; left to the hardware",
             (unsigned long long)base, (unsigned long long)size,
             device < 0 ? "the host" : "the device", r);
    return -EIO;
}

/* ---- set-up ------------------------------------------------------------ */

void swap_flush_trace(void)
{
    pthread_mutex_lock(&swap_lock);
    if (trace) fflush(trace);
    pthread_mutex_unlock(&swap_lock);
}

bool swap_trace_opened(void)
{
    return trace != NULL;
}

/* The fork chain's child step (init.c): the swap engine works in the
 * parent's CUDA context, which a fork child cannot use (CUDA does not
 * survive fork), and swap_lock may be held by a thread the child does not
 * have: swap is off in the child, its calls passed through. */
void swap_postfork_child(void)
{
    pthread_mutex_init(&swap_lock, NULL);
    __atomic_store_n(&swap_enabled, false, __ATOMIC_RELAXED);
    swap_vmm_postfork_child();
}

void swap_stop_mover(void)
{
    swap_vmm_stop_mover();
}

void swap_init(void)
{
    const struct options *o = options_get();
    if (o->disable) return;
    /* One knob: a budget > 0 turns swap on. IPCSHIM_SWAP is a deprecated
     * alias that changes nothing (docs/environment.md). */
    if (o->swap)
        LOG_ONCE(LOG_WARN,
                 "IPCSHIM_SWAP is deprecated and has no effect: IPCSHIM_DEVICE_BUDGET > 0 "
                 "alone turns host swap on");
    if (!o->device_budget) {
        if (o->swap)
            LOG_ONCE(LOG_WARN,
                     "IPCSHIM_SWAP=1 but IPCSHIM_DEVICE_BUDGET is 0 or unset: host swap stays off");
        return;
    }
    if (!real_cuMemAllocManaged || !real_cuMemPrefetchAsync_v2 || !real_cuCtxGetDevice ||
        !real_cuMemFree_v2) {
        LOG_ONCE(
            LOG_WARN,
            "IPCSHIM_DEVICE_BUDGET is set but the driver lacks managed memory or prefetch; host "
            "swap stays off");
        return;
    }
    policy_kind = o->swap_policy == SWAP_OPT_LRU ? SWAP_POLICY_LRU : SWAP_POLICY_HISTORY;
    engine_vmm = o->swap_engine == SWAP_ENGINE_VMM;
    test_ahead = o->test_swap_ahead;
    swap_ahead = o->swap_ahead;
    swap_vmm_init(&swap_lock, o->swap_mover == SWAP_MOVER_THREAD);
    budget = o->device_budget;
    part_bytes = o->swap_part_bytes;
    static const struct swap_ops ops = {.move = cuda_move};
    if (swap_engine_create(policy_kind, budget, &ops, &engine)) {
        LOG_ONCE(LOG_WARN, "swap: out of memory; host swap stays off");
        return;
    }
    swap_min_bytes = o->swap_min_bytes;
    if (o->trace && *o->trace) {
        /* An owned file (0600, close-on-exec, no symlink, checked before
         * each flush): the trace says which blocks the program touches. */
        static struct owned_file trace_file = {.fd = -1};
        int rc = owned_file_open(&trace_file, o->trace);
        trace = rc ? NULL : owned_file_stream(&trace_file);
        if (!trace)
            LOG_ONCE(LOG_WARN, "swap: cannot open IPCSHIM_TRACE=%s (%s); no trace", o->trace,
                     rc == -EINVAL ? "not a regular file" : strerror(rc ? -rc : ENOMEM));
        else
            fprintf(trace, "# ipcshim swap trace v1\n"); /* init.c flushes it at exit */
    }
    log_msg(LOG_INFO,
            "host swap on: budget %llu bytes per device, blocks of %llu bytes and more, policy %s, "
            "engine %s",
            (unsigned long long)budget, (unsigned long long)swap_min_bytes,
            swap_policy_kind_name(policy_kind), engine_vmm ? "vmm" : "managed");
    __atomic_store_n(&swap_enabled, true, __ATOMIC_RELEASE);
}

static void trace_event(char kind, const struct swap_block *b, bool is_write, bool by_copy)
{
    if (!trace) return;
    struct swap_event e = {.kind = (uint8_t)kind,
                           .block = b ? b->base : 0,
                           .bytes = b ? b->charge : 0,
                           .is_write = is_write,
                           .is_copy = by_copy};
    swap_trace_write_event(trace, &e);
}

/* Report one access of the current launch to the engine, which applies the
 * decision through cuda_move. Under swap_lock. */
static void access_block(struct swap_block *b, bool is_write, bool by_copy, CUstream stream)
{
    int rc = swap_engine_access(engine, b, is_write, by_copy, (uint64_t)(uintptr_t)stream);
    trace_event(SWAP_EV_ACCESS, b, is_write, by_copy);
    if (rc == -ENOSPC)
        LOG_ONCE(
            LOG_WARN,
            "swap: one launch needs more than IPCSHIM_DEVICE_BUDGET=%llu bytes; the rest is left "
            "to demand paging",
            (unsigned long long)budget);
    else if (rc == -ENOMEM)
        LOG_ONCE(LOG_WARN,
                 "swap: cannot create the eviction policy; blocks are left to the hardware");
}

/* The launch is complete. Under swap_lock. */
static void end_launch(size_t n)
{
    swap_engine_end_launch(engine);
    if (trace && n) {
        struct swap_event e = {.kind = SWAP_EV_LAUNCH};
        swap_trace_write_event(trace, &e);
    }
}

/* ---- allocation, free, export ------------------------------------------ */

/* A counting filter over the bases of registered blocks, read without the
 * lock: a free whose slot counts 0 is not of a swappable block (the common
 * case, every ordinary free in the process) and returns at once. Counts
 * change under swap_lock; a block is counted before its allocation returns
 * and uncounted after it leaves the index, so a free of a registered block
 * always sees a count > 0 (false positives only take the lock). */
#define FILTER_SLOTS 16384u
static uint32_t base_filter[FILTER_SLOTS];

static uint32_t *filter_slot(uint64_t base)
{
    uint64_t x = base >> 12; /* managed blocks are page-aligned */
    x ^= x >> 17;
    x *= 0xed5ad4bbu;
    x ^= x >> 11;
    return &base_filter[x % FILTER_SLOTS];
}

static void unregister_locked(uint64_t base, bool vmm);

/* Parts 0..n of a leave the engine's index (and, with unregister, the
 * filter and the counts). Under swap_lock. */
static void parts_leave(const struct vmm_alloc *a, size_t n, bool unregister)
{
    for (size_t k = 0; k < n; k++) {
        swap_engine_remove(engine, a->base + k * a->part, NULL); /* a pinned one is not indexed */
        if (unregister) unregister_locked(a->base + k * a->part, true);
    }
}

/* Index a new block of device dev, charged in units of unit bytes. Under
 * swap_lock. 0, or the engine's negative errno (logged). */
static int register_locked(uint64_t base, size_t size, CUdevice dev, uint64_t unit, bool vmm)
{
    int rc = swap_engine_add(engine, base, size, dev, unit);
    if (!rc) {
        if (vmm)
            __atomic_add_fetch(&vmm_blocks, 1, __ATOMIC_RELAXED);
        else
            counts.managed_allocs++;
        __atomic_add_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(filter_slot(base), 1, __ATOMIC_RELEASE);
    } else {
        LOG_RATE(LOG_WARN, "swap: cannot index block %#llx (%d); left to the hardware",
                 (unsigned long long)base, rc);
    }
    return rc;
}

static void register_block(uint64_t base, size_t size)
{
    CUdevice dev = 0;
    real_cuCtxGetDevice(&dev);
    pthread_mutex_lock(&swap_lock);
    register_locked(base, size, dev, CHARGE_UNIT, false);
    pthread_mutex_unlock(&swap_lock);
}

/* A VMM-backed allocation of size bytes in the current context, each of its
 * parts indexed: true and *base; false when the block should be managed
 * instead (too small, no VMM engine, or the driver refused a step: logged
 * once by swap_vmm.c). */
static bool vmm_alloc(size_t size, uint64_t *base)
{
    if (!engine_vmm) return false;
    CUdevice dev = 0;
    CUcontext ctx = NULL;
    if (real_cuCtxGetDevice(&dev) != CUDA_SUCCESS || real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS ||
        !ctx)
        return false;
    pthread_mutex_lock(&swap_lock);
    uint64_t g = swap_vmm_granularity(dev);
    struct vmm_alloc *a = NULL;
    bool ok = g && size >= g && swap_vmm_alloc(size, part_bytes, dev, ctx, &a) == 0;
    size_t k = 0;
    for (; ok && k < a->n; k++)
        if (register_locked(a->base + k * a->part, swap_vmm_alloc_part_asked(a, k), dev, g, true))
            break;
    if (ok && k < a->n) {
        parts_leave(a, k, true);
        swap_vmm_alloc_free(a);
        ok = false;
    }
    if (ok) *base = a->base;
    pthread_mutex_unlock(&swap_lock);
    return ok;
}

static void fallback(int code)
{
    pthread_mutex_lock(&swap_lock);
    counts.fallback_allocs++;
    pthread_mutex_unlock(&swap_lock);
    LOG_ONCE(LOG_WARN,
             "swap: managed allocation failed (error %d); serving ordinary device memory instead",
             code);
}

bool swap_alloc_runtime(void **ptr, size_t size)
{
    if (!ptr || !real_cudaMallocManaged) return false;
    uint64_t base = 0;
    if (engine_vmm && shim_current_context(true) && vmm_alloc(size, &base)) {
        *ptr = (void *)(uintptr_t)base;
        return true;
    }
    cudaError_t r = real_cudaMallocManaged(ptr, size, cudaMemAttachGlobal);
    if (r != cudaSuccess) {
        if (real_cudaGetLastError) real_cudaGetLastError(); /* the ordinary allocation decides */
        fallback(r);
        return false;
    }
    register_block((uint64_t)*ptr, size);
    return true;
}

bool swap_alloc_driver(CUdeviceptr *ptr, size_t size)
{
    if (!ptr) return false;
    uint64_t base = 0;
    if (vmm_alloc(size, &base)) {
        *ptr = (CUdeviceptr)base;
        return true;
    }
    CUresult r = real_cuMemAllocManaged(ptr, size, CU_MEM_ATTACH_GLOBAL);
    if (r != CUDA_SUCCESS) {
        fallback(r);
        return false;
    }
    register_block((uint64_t)*ptr, size);
    return true;
}

/* The block at base leaves the filter and the counts (it left the index,
 * or was pinned out of it). Under swap_lock. */
static void unregister_locked(uint64_t base, bool vmm)
{
    __atomic_sub_fetch(&live_blocks, 1, __ATOMIC_RELAXED);
    if (vmm) __atomic_sub_fetch(&vmm_blocks, 1, __ATOMIC_RELAXED);
    __atomic_sub_fetch(filter_slot(base), 1, __ATOMIC_RELEASE);
    if (trace) {
        struct swap_event e = {.kind = SWAP_EV_FREE, .block = base};
        swap_trace_write_event(trace, &e);
    }
}

bool swap_on_free_slow(uint64_t ptr)
{
    if (!ptr || !__atomic_load_n(filter_slot(ptr), __ATOMIC_ACQUIRE)) return false; /* lock-free */
    struct swap_block b;
    pthread_mutex_lock(&swap_lock);
    struct vmm_alloc *a = vmm_blocks ? swap_vmm_alloc_find(ptr) : NULL;
    if (a && a->base != ptr) { /* inside an allocation: the real free refuses it */
        pthread_mutex_unlock(&swap_lock);
        return false;
    }
    if (a) {
        parts_leave(a, a->n, true);
        swap_vmm_alloc_free(a); /* the program's free is this one: never the real one */
    } else if (!swap_engine_remove(engine, ptr, &b)) {
        unregister_locked(ptr, false);
    }
    pthread_mutex_unlock(&swap_lock);
    return a != NULL;
}

/* The context ctx ended: its VMM blocks are forgotten (swap_vmm.c); each
 * leaves the index here. Under swap_lock. */
static void forget_block(uint64_t base)
{
    swap_engine_remove(engine, base, NULL);
    unregister_locked(base, true);
}

/* swap_lock, waiting at most a second. Trap: on the exit path (a context's
 * end in the runtime's teardown, the exit report) another thread may hold
 * swap_lock across a real launch that waits for a runtime lock the exiting
 * thread holds; waiting for ever would hang the program's exit. */
static bool lock_bounded(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    return pthread_mutex_timedlock(&swap_lock, &until) == 0;
}

void swap_context_gone(uint64_t ctx)
{
    /* Even with no block left: the engine's streams and chunks of ctx go too. */
    if (!__atomic_load_n(&swap_enabled, __ATOMIC_ACQUIRE) || !ctx || !engine_vmm) return;
    if (!lock_bounded()) {
        LOG_ONCE(LOG_WARN, "swap: a context ended while another thread held host swap's lock; "
                           "its VMM blocks are left as they are");
        return;
    }
    swap_vmm_context_gone((CUcontext)ctx, forget_block);
    swap_vmm_alloc_forget((CUcontext)ctx);
    pthread_mutex_unlock(&swap_lock);
}

void swap_context_ending(uint64_t ctx)
{
    if (!__atomic_load_n(&swap_enabled, __ATOMIC_ACQUIRE) || !engine_vmm) return;
    if (!lock_bounded()) return; /* then swap_context_gone gives up too */
    swap_vmm_context_ending((CUcontext)ctx);
    pthread_mutex_unlock(&swap_lock);
}

bool swap_refuses_export_slow(uint64_t ptr, const char *call)
{
    pthread_mutex_lock(&swap_lock);
    struct swap_block *b = engine ? swap_engine_find(engine, ptr) : NULL;
    uint64_t size = b ? b->size : 0, base = b ? b->base : 0;
    /* A VMM-backed block is exported from one device allocation, pinned
     * outside the engine and its budget (swap_vmm_alloc_pin). */
    struct vmm_alloc *a = b && vmm_blocks ? swap_vmm_alloc_find(base) : NULL;
    if (a && swap_vmm_alloc_pin(a) == 0) {
        parts_leave(a, a->n, false);
        size = a->asked;
        pthread_mutex_unlock(&swap_lock);
        LOG_RATE(LOG_INFO,
                 "%s(%#llx): the swappable block (%llu bytes) stays on the device, outside "
                 "IPCSHIM_DEVICE_BUDGET, from now on",
                 call, (unsigned long long)ptr, (unsigned long long)size);
        return false;
    }
    if (b) counts.refused_exports++;
    pthread_mutex_unlock(&swap_lock);
    if (!b) return false;
    LOG_RATE(
        LOG_WARN,
        "%s(%#llx) refused: the block (%llu bytes) is swappable managed memory "
        "(host swap is on), which CUDA IPC "
        "cannot export; set IPCSHIM_SWAP_MIN_BYTES above %llu (or IPCSHIM_DEVICE_BUDGET=0) for "
        "blocks you share",
        call, (unsigned long long)ptr, (unsigned long long)size, (unsigned long long)size);
    return true;
}

/* ---- launches ---------------------------------------------------------- */

/* A thread whose first CUDA call is a runtime launch has no current context
 * yet: let the runtime make its primary context current first. */
static void runtime_context(void)
{
    static __thread bool ready;
    if (ready) return;
    shim_current_context(true);
    ready = true;
}

/* Hold swap_lock until after the real call when the work touches VMM
 * blocks (t's, and the parts past learned extents in o, which the policy
 * was not told of) or may (all), with their pending remaps done (all:
 * every one) and the stream's waits for their fetches in place; else drop
 * it. Under swap_lock. */
static void keep_or_unlock(CUstream stream, const struct swap_touch *t, const struct swap_unseen *o,
                           bool all)
{
    size_t n = 0;
    if (__atomic_load_n(&vmm_blocks, __ATOMIC_RELAXED)) {
        for (size_t i = 0; i < t->n + (o ? o->n : 0); i++) {
            struct vmm_block *v =
                i < t->n ? swap_vmm_find(t->block[i]->base) : o->a[i - t->n]->parts[o->k[i - t->n]];
            if (!v) continue;
            swap_vmm_before(v, stream);
            if (n < PENDING_MAX)
                pending.v[n++] = v;
            else
                all = true;
        }
        if (all || (o && o->overflow)) swap_vmm_before_unknown(stream);
        all |= o && o->overflow;
    }
    bool vmm = n || (all && __atomic_load_n(&vmm_blocks, __ATOMIC_RELAXED));
    bool ahead = t->n > 0 && swap_ahead;
    if (!vmm && !ahead) { /* the common case: nothing to follow */
        pthread_mutex_unlock(&swap_lock);
        return;
    }
    pending.active = true, pending.all = all, pending.stream = stream, pending.n = n;
    pending.vmm = vmm, pending.ahead = ahead;
}

/* Whether stream is being captured into a graph (then nothing of the
 * engine's may be queued on it, nor may it be queried: a query breaks the
 * capture). */
static bool stream_capturing(CUstream stream)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return real_cuStreamIsCapturing && real_cuStreamIsCapturing(stream, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The engine's fetches ahead, queued behind the work just submitted on
 * stream. Under swap_lock. */
static void fetch_ahead(CUstream stream)
{
    if (stream_capturing(stream)) return; /* the graph's launch fetches on use */
    bool managed = __atomic_load_n(&live_blocks, __ATOMIC_RELAXED) >
                   __atomic_load_n(&vmm_blocks, __ATOMIC_RELAXED);
    if (managed) managed_ahead_begin();
    int rc = swap_engine_fetch_ahead(engine, (uint64_t)(uintptr_t)stream);
    if (managed) managed_ahead_end();
    if (rc == -ENOMEM)
        LOG_ONCE(LOG_WARN, "swap: out of memory while fetching ahead; blocks are fetched on use");
}

/* Whether b, fetched ahead, comes late for the launch about to be queued on
 * stream (swap_engine_ahead_feedback). Trap: "the fetch's event is not
 * complete at submission" alone would call every fetch late (the host runs
 * far ahead of the device); late is when the launch could start now and
 * must wait for the fetch. Before the launch's own moves and waits are
 * queued. Under swap_lock. */
static bool ahead_late(const struct swap_block *b, CUstream stream, int *idle)
{
    struct vmm_block *v = vmm_blocks ? swap_vmm_find(b->base) : NULL;
    if (!v) return managed_ahead_late(b->base, stream, idle);
    int state = swap_vmm_ahead_state(v);
    return state == 1 || (state == 2 && swap_stream_idle(stream, idle));
}

/* After the real call of work a hook kept swap_lock for: its event. */
static void after_call(void)
{
    pending.active = false;
    if (pending.vmm) swap_vmm_after(pending.stream, pending.v, pending.n, pending.all);
    if (pending.ahead) fetch_ahead(pending.stream);
    pthread_mutex_unlock(&swap_lock);
}

/* True when VMM blocks live and stream is being captured into a graph:
 * then host swap leaves the work alone (nothing runs now; the graph's
 * launch counts as touching every block), so that no event, wait or copy
 * of the engine's enters the capture. */
static bool capturing(CUstream stream)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return __atomic_load_n(&vmm_blocks, __ATOMIC_RELAXED) && real_cuStreamIsCapturing &&
           real_cuStreamIsCapturing(stream, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Everything before one launch: find the blocks its parameters point into,
 * report them, apply the decisions. */
static void before_launch(enum fn_kind kind, const void *fn, void **args, void **extra,
                          CUstream stream)
{
    if (!__atomic_load_n(&live_blocks, __ATOMIC_RELAXED) || !fn) return;
    const struct layout *l = args ? layout_of(kind, fn) : NULL;
    if (kind == FN_RUNTIME) runtime_context();
    if (capturing(stream)) return;
    pthread_mutex_lock(&swap_lock);
    struct swap_touch t = {0};
    struct swap_index *blocks = swap_engine_index(engine);
    if (l && l->known) swap_index_scan_args(blocks, args, l->params, l->n, &t);
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END && i < 64; i += 2) {
        if (extra[i] != CU_LAUNCH_PARAM_BUFFER_POINTER) continue;
        for (size_t j = 0; extra[j] != CU_LAUNCH_PARAM_END && j < 64; j += 2)
            if (extra[j] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[j + 1])
                swap_index_scan_buffer(blocks, extra[i + 1], *(size_t *)extra[j + 1], &t);
    }
    bool unknown = args && (!l || !l->known) && !extra;
    if (unknown) counts.launches_no_layout++;
    struct swap_unseen o;
    o.n = 0, o.overflow = false;
    if (swap_vmm_parted_live() && t.n)
        swap_vmm_launch_extents(blocks, l && l->known ? args : NULL, l ? l->params : NULL,
                                l ? l->n : 0, extra, &t, &o);
    /* Lateness first: the accesses below queue moves and waits on stream. */
    bool late[sizeof t.block / sizeof t.block[0]];
    int idle = -1;
    bool any = false;
    for (size_t i = 0; i < t.n; i++)
        any |= t.block[i]->ahead;
    if (any && stream_capturing(stream)) any = false, idle = 0; /* no query into a capture */
    for (size_t i = 0; i < t.n; i++)
        late[i] = any && t.block[i]->ahead && ahead_late(t.block[i], stream, &idle);
    for (size_t i = 0; i < t.n; i++) {
        bool ahead = t.block[i]->ahead;
        access_block(t.block[i], true, false, stream);
        /* the note cleared: the engine took the use (not an -ENOSPC access) */
        if (ahead && !t.block[i]->ahead)
            swap_engine_ahead_feedback(engine, t.block[i]->device, late[i]);
    }
    swap_vmm_unseen_written(blocks, &o);
    if (t.n) counts.launches_scanned++;
    end_launch(t.n);
    keep_or_unlock(stream, &t, &o, unknown || t.overflow);
}

/* One end of a copy or set at ptr, bytes long (0: unknown, to the end of
 * its allocation): the blocks it covers (the parts of a parted
 * allocation, whose learner records the start) reported and added to t. */
static void copy_end(uint64_t ptr, uint64_t bytes, bool write, CUstream stream,
                     struct swap_touch *t)
{
    struct swap_index *x = swap_engine_index(engine);
    struct swap_block *b = ptr ? swap_engine_find(engine, ptr) : NULL;
    struct vmm_alloc *a = b && swap_vmm_parted_live() ? swap_vmm_alloc_find(ptr) : NULL;
    if (!a || a->n < 2) {
        if (b) access_block(b, write, true, stream), swap_index_touch(x, ptr, t);
        return;
    }
    uint64_t off = ptr - a->base;
    swap_extent_add(&a->starts, off); /* not recorded (the bound): longer extents */
    uint64_t end = bytes && bytes <= a->asked - off ? off + bytes : a->asked;
    for (size_t k = swap_vmm_alloc_part(a, off); k <= swap_vmm_alloc_part(a, end - 1); k++) {
        uint64_t p = k ? a->base + k * a->part : ptr;
        if ((b = swap_engine_find(engine, p))) access_block(b, write, true, stream);
        swap_index_touch(x, p, t);
    }
}

/* One copy or set of bytes (0: unknown): src (read) and dst (written),
 * either may be 0. */
static void record_copy(uint64_t dst, uint64_t src, uint64_t bytes, CUstream stream)
{
    if (!__atomic_load_n(&live_blocks, __ATOMIC_RELAXED) || capturing(stream)) return;
    pthread_mutex_lock(&swap_lock);
    struct swap_touch t = {0};
    copy_end(src, bytes, false, stream, &t);
    copy_end(dst, bytes, true, stream, &t);
    if (t.n) counts.copies_recorded++;
    end_launch(t.n);
    keep_or_unlock(stream, &t, NULL, t.overflow);
}

/* Work whose accesses the shim cannot see (a graph launch, a 2D driver
 * copy): it may touch every swappable block. */
static void touch_all(CUstream stream)
{
    if (!__atomic_load_n(&vmm_blocks, __ATOMIC_RELAXED) || capturing(stream)) return;
    pthread_mutex_lock(&swap_lock);
    struct swap_touch t = {0};
    keep_or_unlock(stream, &t, NULL, true);
}

/* The per-thread variants' default stream. */
static CUstream pt(cudaStream_t s)
{
    return s ? (CUstream)s : CU_STREAM_PER_THREAD;
}

#define SWAP_ON __builtin_expect(swap_enabled, 0)

/* The launch, copy and set entry points: do_<name> for every RUNTIME_SWAP
 * and DRIVER_SWAP line of symbols.def: its hook, the real call, and
 * after_call when the hook kept swap_lock. A runtime-door hook first makes
 * the runtime's context current when VMM blocks live (their events are
 * recorded in it). */
#define RUNTIME_SWAP(ret, name, params, args, hook)                                                \
    ret do_##name params                                                                           \
    {                                                                                              \
        if (SWAP_ON) {                                                                             \
            if (__atomic_load_n(&vmm_blocks, __ATOMIC_RELAXED)) runtime_context();                 \
            hook;                                                                                  \
        }                                                                                          \
        ret r_ = CALL_REAL_RUNTIME(name, args);                                                    \
        if (SWAP_ON && pending.active) after_call();                                               \
        return r_;                                                                                 \
    }
#define DRIVER_SWAP(ret, name, base, ver, params, args, hook)                                      \
    ret do_##name params                                                                           \
    {                                                                                              \
        if (SWAP_ON) {                                                                             \
            hook;                                                                                  \
        }                                                                                          \
        ret r_ = CALL_REAL_DRIVER(name, args);                                                     \
        if (SWAP_ON && pending.active) after_call();                                               \
        return r_;                                                                                 \
    }
#include "symbols.def"

/* ---- report ------------------------------------------------------------ */

void swap_warn_refused(void)
{
    if (!swap_enabled) return;
    pthread_mutex_lock(&swap_lock);
    uint64_t n = counts.refused_exports;
    pthread_mutex_unlock(&swap_lock);
    if (n)
        log_msg(LOG_WARN,
                "swap: %llu export%s of swappable blocks %s refused (CUDA IPC cannot share "
                "managed memory): a program that did not check the error shared nothing; set "
                "IPCSHIM_SWAP_MIN_BYTES above the size of the blocks it shares",
                (unsigned long long)n, n == 1 ? "" : "s", n == 1 ? "was" : "were");
}

void swap_report(void)
{
    if (!swap_enabled) return;
    struct swap_counters sum;
    struct swap_engine_counts own;
    if (!lock_bounded()) return; /* a thread holds it across a real call (lock_bounded) */
    swap_engine_counters(engine, &sum, &own);
    log_report(
        "swap: policy %s, budget %llu bytes/device, managed blocks %llu (fallbacks %llu), launches "
        "with "
        "swappable blocks %llu, launches without a known layout %llu, copies/sets recorded %llu",
        swap_policy_kind_name(policy_kind), (unsigned long long)budget,
        (unsigned long long)counts.managed_allocs, (unsigned long long)counts.fallback_allocs,
        (unsigned long long)counts.launches_scanned, (unsigned long long)counts.launches_no_layout,
        (unsigned long long)counts.copies_recorded);
    log_report("swap: faults (fetches a launch needed) %llu, first touches %llu, evictions %llu "
               "(%llu dirty), "
               "prefetched to device %llu bytes, to host %llu bytes, new blocks placed %llu bytes, "
               "prefetch failures %llu, over budget %llu, exports refused %llu, fetched ahead "
               "%llu bytes (late %llu, early %llu, missed %llu)",
               (unsigned long long)sum.faults, (unsigned long long)sum.first_touches,
               (unsigned long long)sum.evictions, (unsigned long long)sum.dirty_evictions,
               (unsigned long long)own.to_device_bytes, (unsigned long long)own.to_host_bytes,
               (unsigned long long)own.created_bytes, (unsigned long long)own.move_failures,
               (unsigned long long)own.overflows, (unsigned long long)counts.refused_exports,
               (unsigned long long)own.ahead_bytes, (unsigned long long)own.ahead_late,
               (unsigned long long)own.ahead_early, (unsigned long long)own.ahead_missed);
    if (engine_vmm) {
        struct swap_vmm_counts v;
        swap_vmm_counts(&v);
        log_report(
            "swap: engine vmm: VMM blocks %llu (fell back to managed %llu), remaps to device "
            "%llu, to the host %llu, fetch copies %llu, write-backs %llu, fetches waited for by "
            "the launch's stream %llu, evictions remapped without a host wait %llu (with one "
            "%llu), host waits %llu, chunks created %llu, exports pinned on the device %llu, remap "
            "failures %llu, "
            "forgotten at a context's end %llu, moves by the mover thread %llu, waits for the "
            "mover %llu, fetches ahead %llu (failed %llu, dropped %llu)",
            (unsigned long long)v.blocks, (unsigned long long)v.fallbacks,
            (unsigned long long)v.to_device, (unsigned long long)v.to_host,
            (unsigned long long)v.fetch_copies, (unsigned long long)v.writebacks,
            (unsigned long long)v.stream_waits, (unsigned long long)v.remaps_async,
            (unsigned long long)v.remaps_forced, (unsigned long long)v.host_waits,
            (unsigned long long)v.chunks, (unsigned long long)v.exports,
            (unsigned long long)v.remap_failures, (unsigned long long)v.forgotten,
            (unsigned long long)v.mover_jobs, (unsigned long long)v.mover_waits,
            (unsigned long long)v.ahead, (unsigned long long)v.ahead_failures,
            (unsigned long long)v.ahead_cancelled);
    } else {
        log_report("swap: engine managed");
    }
    if (trace) fflush(trace);
    pthread_mutex_unlock(&swap_lock);
}
