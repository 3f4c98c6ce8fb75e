/* swap_mover: the VMM engine's jobs, finished after the call that made
 * them (swap_vmm.c, THE RULE): a victim's remap (its range unmapped and its
 * host copy mapped, once its write-back ended) and a fetch ahead (the chunks
 * mapped and the host copy copied in, without the caller waiting). With
 * IPCSHIM_SWAP_MOVER=thread (the default) one mover thread per process,
 * started at the first job, does them off the launching thread; with
 * inline, the launching thread completes remaps lazily (as each write-back
 * is seen complete, or when it needs the block) and fetches ahead are
 * ordinary fetches (swap_vmm_fetch_ahead).
 *
 * A block's job (b->job) is queued (on vmm_jobs, oldest first) or moving
 * (the mover's one job, `cur`, b->moving). The mover serves ready work
 * first: under vmm_lock it claims the oldest job whose wait is over (a
 * remap whose write-back event is complete; a fetch ahead whose snapshot,
 * below, is complete), else the oldest job, and drops the lock for the
 * driver work (host waits, unmap, map, copy); it takes it back for the
 * bookkeeping (pool events, counts). While it waits for its job's event
 * it looks at the queue at each poll (vmm_lock tried, never waited for):
 * when another job is ready, it gives its own back to the queue's head
 * untouched and claims that one, so that a fetch ahead never waits behind
 * a remap still held up by the victim's last launches. A job passed over
 * MOVER_PASS_MAX times (a younger job claimed before it, or work that made
 * its snapshot stale) is given back no more: no job starves. Who needs a
 * block:
 * - whose job is moving waits for the mover's driver work (job_wait) and
 *   does the bookkeeping itself;
 * - whose remap is queued completes it itself (the host waits for the
 *   write-back), as without a mover;
 * - whose fetch ahead is queued leaves it queued: the range still maps the
 *   host copy, which the work reads and writes over the link, and the
 *   mover's claim snapshots the block's events (that work included) and
 *   waits for them before it unmaps; an eviction, free or export of it
 *   cancels it (job_cancel_ahead); unknown work needs nothing more.
 * Trap: job_wait keeps vmm_lock (swap_lock) held. It is reached from
 * inside the swap engine's decisions (core/swap), which no other thread
 * may enter half-way; the mover's driver work needs no vmm_lock, so the
 * wait ends. Lock order: vmm_lock, then mv_lock; the mover never holds both.
 *
 * A fetch ahead's snapshot (ahead_snapshot) is taken when the mover first
 * looks at the queued job and kept in b->wb_ev; work recorded on b after
 * it (swap_vmm_after: job_touched) drops it, so the claim never waits for
 * less than every piece of work that may touch b's range.
 *
 * The mover waits for an event by polling (cuEventQuery, backing off to
 * 1 ms; at each poll the queue's events too, as above) while nobody waits
 * for its job, and blocks (cuEventSynchronize) once someone does; with no
 * job it sleeps until one is queued. It never calls the driver once it is
 * told to stop (at exit, before the driver's own teardown:
 * swap_vmm_stop_mover) or for a context that is ending
 * (swap_vmm_context_ending waits for its job). */
#include "swap_vmm_internal.h"
#include "context.h"
#include "hooks.h"
#include "host.h"
#include "log.h"
#include "resolve.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mv_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t mv_cond = PTHREAD_COND_INITIALIZER; /* driver work done; waiters; stop */
static pthread_cond_t kick = PTHREAD_COND_INITIALIZER;    /* with vmm_lock: a job queued; stop */
static pthread_t mover;
static bool started;         /* under vmm_lock; read at exit */
static int stopping;         /* atomic: the mover calls the driver no more */
static unsigned waiters;     /* under mv_lock: threads in job_wait */
static uint64_t done_ticket; /* under mv_lock: the last job whose driver work ended */
static uint64_t next_ticket; /* under vmm_lock */
static CUcontext ending_ctx; /* under vmm_lock: the mover claims no job of it */

/* The moving job: b and ticket under vmm_lock; rc and blocked published
 * with done_ticket under mv_lock. */
static struct {
    struct vmm_block *b;
    uint64_t ticket;
    int rc;       /* its driver work: 0, -EIO, or -ECANCELED (not done: stopping) */
    bool blocked; /* its event wait blocked for a waiter (a forced remap) */
} cur;

static bool is_stopping(void)
{
    return __atomic_load_n(&stopping, __ATOMIC_ACQUIRE);
}

/* ts = now (CLOCK_REALTIME, the condition variables' clock) + us. */
static struct timespec after_us(long us)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += us % 1000000 * 1000, ts.tv_sec += us / 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_nsec -= 1000000000, ts.tv_sec++;
    return ts;
}

/* ---- queue ---------------------------------------------------------------- */

static void unlink_job(struct vmm_block *b)
{
    struct vmm_block **at = &vmm_jobs;
    while (*at && *at != b)
        at = &(*at)->job_next;
    if (*at) *at = b->job_next;
    b->job_next = NULL;
}

static void start_mover(void);
static void settle_ahead(struct vmm_block *b);

/* A job passed over this many times is not given back for a younger one
 * once the mover owns it (other_ready). */
#define MOVER_PASS_MAX 16

void job_queue(struct vmm_block *b)
{
    struct vmm_block **at = &vmm_jobs;
    while (*at)
        at = &(*at)->job_next;
    *at = b, b->job_next = NULL;
    b->passed = 0;
    if (!vmm_mover_thread || is_stopping()) return;
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) start_mover();
    if (vmm_mover_thread)
        pthread_cond_signal(&kick);
    else if (b->job == JOB_AHEAD) /* no mover after all: nobody else would run it */
        settle_ahead(b);
}

/* ---- the driver work (no vmm_lock needed: the block is the caller's) ----- */

static bool other_ready(struct vmm_block *mine);

/* The host waits for ev, for job (the mover's own, or NULL: another
 * thread's wait). The mover polls while nobody waits for its job, stops
 * waiting when told to stop (-ECANCELED), and gives its job up when
 * another is ready (-EAGAIN, vmm_lock then held: other_ready); others
 * block. */
static int event_wait(CUevent ev, struct vmm_block *job, bool *blocked)
{
    if (!job) {
        if (real_cuEventQuery(ev) == CUDA_SUCCESS) return 0;
        *blocked = true;
        return real_cuEventSynchronize(ev) == CUDA_SUCCESS ? 0 : -EIO;
    }
    long us = 20;
    for (;;) {
        CUresult r = real_cuEventQuery(ev);
        if (r == CUDA_SUCCESS) return 0;
        if (r != CUDA_ERROR_NOT_READY) return -EIO;
        pthread_mutex_lock(&mv_lock);
        if (!waiters && !is_stopping()) {
            struct timespec until = after_us(us);
            pthread_cond_timedwait(&mv_cond, &mv_lock, &until);
        }
        bool hurry = waiters > 0;
        pthread_mutex_unlock(&mv_lock);
        if (is_stopping()) return -ECANCELED;
        if (hurry) {
            *blocked = true;
            return real_cuEventSynchronize(ev) == CUDA_SUCCESS ? 0 : -EIO;
        }
        if (other_ready(job)) return -EAGAIN;
        if (us < 1000) us *= 2;
    }
}

/* A remap's driver work: after wb, b's range off the chunks it gave away
 * and onto its host copy. 0; -EPROTO: done, but the driver refused the
 * wait for wb (the whole context was synchronised instead); -EIO: the
 * remap failed; -ECANCELED or -EAGAIN (event_wait): nothing done. */
static int remap_work(struct vmm_block *b, CUevent wb, bool mover_side, bool *blocked)
{
    bool pushed = shim_enter_context(b->ctx);
    int rc = event_wait(wb, mover_side ? b : NULL, blocked);
    /* A failed wait still has to end with the range off the chunks. */
    bool refused = rc == -EIO;
    if (refused) real_cuCtxSynchronize(), rc = 0;
    if (!rc && mover_side && is_stopping()) rc = -ECANCELED;
    if (!rc && (real_cuMemUnmap((CUdeviceptr)b->base, b->size) != CUDA_SUCCESS ||
                vmm_map_rw(b->base, b->size, b->host, b->device) != CUDA_SUCCESS))
        rc = -EIO;
    if (!rc && refused) rc = -EPROTO;
    shim_leave_context(pushed);
    return rc;
}

/* A fetch ahead's driver work: the host waits for evs[0..n) (the work that
 * may touch b's host copy), b's range onto its chunks, the host copy
 * copied in (ahead_copy) on the host-to-device stream, which already waits
 * for the chunks' write-backs (swap_vmm_fetch_ahead), and its event
 * recorded. -ECANCELED, -EAGAIN (event_wait) or -EIO: b's range maps its
 * host copy again. */
static int ahead_work(struct vmm_block *b, const CUevent *evs, int n, bool mover_side,
                      bool *blocked)
{
    struct vdev *d = &vmm_devs[b->device];
    bool pushed = shim_enter_context(b->ctx);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        rc = event_wait(evs[i], mover_side ? b : NULL, blocked);
    if (!rc && mover_side && is_stopping()) rc = -ECANCELED;
    if (!rc && real_cuMemUnmap((CUdeviceptr)b->base, b->size) != CUDA_SUCCESS) rc = -EIO;
    if (rc) goto out;
    CUresult r = vmm_map_chunks(b);
    if (r == CUDA_SUCCESS && b->ahead_copy)
        r = real_cuMemcpyDtoDAsync_v2((CUdeviceptr)b->base, (CUdeviceptr)b->staging, b->size,
                                      d->h2d);
    if (r == CUDA_SUCCESS) r = real_cuEventRecord(vmm_slots[d->h2d_slot].ev, d->h2d);
    if (r != CUDA_SUCCESS) {
        real_cuCtxSynchronize(); /* a copy may have been queued */
        real_cuMemUnmap((CUdeviceptr)b->base, b->size);
        if (vmm_map_rw(b->base, b->size, b->host, b->device) != CUDA_SUCCESS)
            log_msg(LOG_ERROR,
                    "swap: block %#llx could not be remapped (CUresult %d); its range is unmapped",
                    (unsigned long long)b->base, (int)r);
        rc = -EIO;
    }
out:
    shim_leave_context(pushed);
    return rc;
}

/* The events b's fetch ahead must wait for before it unmaps: its streams'
 * and those of unknown work. Under vmm_lock. */
static int ahead_events(const struct vmm_block *b, CUevent *evs)
{
    int n = 0;
    uint64_t mask = b->streams | vmm_all_mask;
    for (int k = 0; k < SLOTS; k++)
        if ((mask & slot_bit(k)) && vmm_slots[k].used && vmm_slots[k].done < vmm_slots[k].recorded)
            evs[n++] = vmm_slots[k].ev;
    return n;
}

/* The mover's snapshot of what b's fetch ahead waits for: the gate stream
 * waits for those events as recorded now and records one event of its own
 * (b->wb_ev), which the mover waits for instead: a stream's own event is
 * recorded again after each later launch, and on a stream that never
 * drains the mover would never see it complete. Under vmm_lock. */
static int ahead_snapshot(struct vmm_block *b, CUevent *evs)
{
    struct vdev *d = &vmm_devs[b->device];
    int n = ahead_events(b, evs);
    CUevent g = n && d->gate ? vmm_ev_get(d) : NULL;
    if (!g) return n;
    bool pushed = shim_enter_context(b->ctx);
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < n && r == CUDA_SUCCESS; i++)
        r = real_cuStreamWaitEvent(d->gate, evs[i], 0);
    if (r == CUDA_SUCCESS) r = real_cuEventRecord(g, d->gate);
    shim_leave_context(pushed);
    if (r != CUDA_SUCCESS) {
        vmm_ev_put(d, g);
        return n;
    }
    b->wb_ev = g, evs[0] = g;
    return 1;
}

/* b's queued fetch ahead's snapshot dropped (work may touch b after it). */
static void drop_snapshot(struct vmm_block *b)
{
    if (b->job != JOB_AHEAD || b->moving || !b->wb_ev) return;
    vmm_ev_put(&vmm_devs[b->device], b->wb_ev);
    b->wb_ev = NULL;
    if (b->passed < MOVER_PASS_MAX) b->passed++;
}

void job_touched(struct vmm_block *b)
{
    drop_snapshot(b);
}

void job_touched_all(void)
{
    for (struct vmm_block *b = vmm_jobs; b; b = b->job_next)
        drop_snapshot(b);
}

/* Whether queued job b's wait is over, its driver work then done at once:
 * a remap's write-back event complete (or failed: remap_work copes); a
 * fetch ahead's snapshot complete (taken here when it has none), or
 * nothing to wait for. Without a gate stream, its events themselves.
 * Under vmm_lock; the mover's. */
static bool job_ready(struct vmm_block *b)
{
    if (b->job == JOB_REMAP) return real_cuEventQuery(b->wb_ev) != CUDA_ERROR_NOT_READY;
    if (b->wb_ev) return real_cuEventQuery(b->wb_ev) != CUDA_ERROR_NOT_READY;
    CUevent evs[SLOTS];
    int n = ahead_snapshot(b, evs);
    if (b->wb_ev) return real_cuEventQuery(b->wb_ev) != CUDA_ERROR_NOT_READY;
    for (int i = 0; i < n; i++) /* no gate: the events as they are now */
        if (real_cuEventQuery(evs[i]) == CUDA_ERROR_NOT_READY) return false;
    return true;
}

/* ---- bookkeeping (under vmm_lock) ------------------------------------------ */

static void remap_done(struct vmm_block *b, int rc, bool blocked)
{
    struct vdev *d = &vmm_devs[b->device];
    if (rc == -ECANCELED) { /* not done: back to the queue's head, for whoever needs it */
        b->job_next = vmm_jobs, vmm_jobs = b;
        return;
    }
    b->job = JOB_NONE;
    b->remap_pending = false;
    if (rc == -EPROTO) {
        vmm_counts.remap_failures++;
        log_msg(LOG_WARN, "swap: the driver refused the wait for block %#llx's write-back",
                (unsigned long long)b->base);
    } else if (rc) {
        /* The chunks are another block's by now: nothing to fall back to. */
        vmm_counts.remap_failures++;
        log_msg(LOG_ERROR, "swap: block %#llx could not be remapped to its host copy",
                (unsigned long long)b->base);
    }
    for (size_t i = 0; i < d->npool; i++)
        if (d->pool_ev[i] == b->wb_ev) d->pool_ev[i] = NULL;
    vmm_ev_put(d, b->wb_ev);
    b->wb_ev = NULL;
    b->streams = 0;
    vmm_counts.to_host++;
    if (blocked)
        vmm_counts.remaps_forced++;
    else
        vmm_counts.remaps_async++;
}

static void ahead_done(struct vmm_block *b, int rc)
{
    struct vdev *d = &vmm_devs[b->device];
    if (b->wb_ev) vmm_ev_put(d, b->wb_ev); /* its gate event */
    b->wb_ev = NULL;
    if (rc == -ECANCELED) {
        b->job_next = vmm_jobs, vmm_jobs = b;
        return;
    }
    b->job = JOB_NONE;
    if (rc) { /* host-backed: correct, slow; the engine may still count it resident */
        vmm_chunks_give(b->device, b->size / d->gran, b->chunks, b->chunk_ev, NULL);
        b->on_device = false;
        vmm_counts.ahead_failures++;
        LOG_RATE(LOG_WARN, "swap: a fetch ahead of block %#llx failed; it stays on its host copy",
                 (unsigned long long)b->base);
        return;
    }
    struct slot *s = &vmm_slots[d->h2d_slot];
    s->recorded++, s->last_use = ++vmm_use_clock;
    b->streams = slot_bit(d->h2d_slot);
    b->fetch_rec = s->recorded;
    b->fetch_waiter = 0;
    b->fetch_epoch = vmm_unknown_epoch;
    if (b->ahead_copy) vmm_counts.fetch_copies++;
    vmm_counts.to_device++, vmm_counts.ahead++;
}

/* The moving job's bookkeeping, its driver work having ended. */
static void finish_cur(void)
{
    struct vmm_block *b = cur.b;
    cur.b = NULL;
    b->moving = false;
    if (cur.rc != -ECANCELED && vmm_mover_thread) vmm_counts.mover_jobs++;
    if (b->job == JOB_REMAP)
        remap_done(b, cur.rc, cur.blocked);
    else
        ahead_done(b, cur.rc);
}

/* Wait for the mover's driver work on the moving job, then finish it. Keeps
 * vmm_lock (the trap at the top). At exit, once the mover was told to stop,
 * at most a second: then the job is left as it is. */
static void job_wait(void)
{
    uint64_t t = cur.ticket;
    vmm_counts.mover_waits++;
    pthread_mutex_lock(&mv_lock);
    waiters++;
    pthread_cond_broadcast(&mv_cond);
    while (done_ticket < t) {
        if (!is_stopping()) {
            pthread_cond_wait(&mv_cond, &mv_lock);
            continue;
        }
        struct timespec until = after_us(1000000);
        if (pthread_cond_timedwait(&mv_cond, &mv_lock, &until) == ETIMEDOUT) break;
    }
    waiters--;
    bool done = done_ticket >= t;
    pthread_mutex_unlock(&mv_lock);
    if (done && cur.b && cur.ticket == t) finish_cur();
}

/* ---- what the launching thread asks (under vmm_lock) ----------------------- */

/* b's queued remap done here, the host waiting for its write-back. */
static void settle_remap(struct vmm_block *b)
{
    unlink_job(b);
    bool blocked = false;
    int rc = remap_work(b, b->wb_ev, false, &blocked);
    if (blocked) vmm_counts.host_waits++;
    remap_done(b, rc, blocked);
}

/* b's queued fetch ahead run here, the host waiting for its events. */
static void settle_ahead(struct vmm_block *b)
{
    unlink_job(b);
    CUevent evs[SLOTS];
    int n = ahead_events(b, evs);
    bool blocked = false;
    int rc = ahead_work(b, evs, n, false, &blocked);
    if (blocked) vmm_counts.host_waits++;
    ahead_done(b, rc);
}

void job_settle(struct vmm_block *b)
{
    if (b->moving) job_wait();
    /* Still queued (also: the mover stopped before its driver work). */
    if (b->job == JOB_REMAP && !b->moving) settle_remap(b);
}

void job_cancel_ahead(struct vmm_block *b)
{
    if (b->job != JOB_AHEAD) return;
    if (b->moving) job_wait();
    if (b->job != JOB_AHEAD || b->moving) return; /* done or failed: b is where it ended */
    unlink_job(b);
    drop_snapshot(b);
    b->job = JOB_NONE;
    vmm_chunks_give(b->device, b->size / vmm_devs[b->device].gran, b->chunks, b->chunk_ev, NULL);
    b->on_device = false;
    vmm_counts.ahead_cancelled++;
}

void job_settle_all(bool ready)
{
    if (cur.b && !ready) job_wait();
    struct vmm_block *b = vmm_jobs, *next;
    for (; b; b = next) {
        next = b->job_next;
        if (b->job == JOB_REMAP && (!ready || real_cuEventQuery(b->wb_ev) == CUDA_SUCCESS))
            settle_remap(b);
    }
}

void job_context_gone(CUcontext ctx)
{
    if (cur.b && cur.b->ctx == ctx) job_wait();
    if (cur.b && cur.b->ctx == ctx) { /* the mover did not stop in time: forget its job */
        cur.b->moving = false;
        cur.b = NULL;
    }
    struct vmm_block *b = vmm_jobs, *next;
    for (; b; b = next) {
        next = b->job_next;
        if (b->ctx == ctx) unlink_job(b), b->job = JOB_NONE;
    }
    if (ending_ctx == ctx) ending_ctx = NULL;
}

void swap_vmm_context_ending(CUcontext ctx)
{
    ending_ctx = ctx;
    if (ctx && cur.b && cur.b->ctx == ctx) job_wait();
}

/* ---- fetch ahead --------------------------------------------------------- */

bool job_mover_on(void)
{
    return vmm_mover_thread && !is_stopping();
}

int job_queue_ahead(struct vmm_block *b, unsigned flags)
{
    if (b->job) return -EBUSY; /* its remap is still to come: fetched when it is needed */
    struct vdev *d = &vmm_devs[b->device];
    size_t n = b->size / d->gran;
    if (d->h2d_slot < 0) return -EIO;
    if (vmm_chunks_take(b->device, n, b->chunks, b->chunk_ev)) return -ENOMEM;
    /* Nothing may write a chunk before its last holder's write-back read
     * it: the host-to-device stream waits now, while the events are
     * surely the write-backs' (a pooled event is reused once its remap is
     * done), and the copy or first touch comes after on that stream. */
    bool pushed = shim_enter_context(b->ctx);
    CUresult r = CUDA_SUCCESS;
    for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
        bool seen = !b->chunk_ev[i];
        for (size_t j = 0; j < i && !seen; j++)
            seen = b->chunk_ev[j] == b->chunk_ev[i];
        if (!seen) r = real_cuStreamWaitEvent(d->h2d, b->chunk_ev[i], 0);
    }
    shim_leave_context(pushed);
    if (r != CUDA_SUCCESS) {
        vmm_chunks_give(b->device, n, b->chunks, b->chunk_ev, NULL);
        return -EIO;
    }
    b->ahead_copy = !(flags & HOST_MOVE_NEW) || b->touched || b->alloc_epoch != vmm_unknown_epoch;
    b->on_device = true;
    b->job = JOB_AHEAD;
    job_queue(b);
    return 0;
}

/* ---- the mover thread ---------------------------------------------------- */

/* The first queued job not of an ending context that is ready (job_ready)
 * after skip (NULL: from the queue's head), or NULL. Under vmm_lock. */
static struct vmm_block *first_ready(struct vmm_block *skip)
{
    for (struct vmm_block *b = vmm_jobs; b; b = b->job_next)
        if (b != skip && b->ctx != ending_ctx && job_ready(b)) return b;
    return NULL;
}

/* The mover, waiting for its own job's event: whether another job is
 * ready, its own passed over fewer than MOVER_PASS_MAX times. true:
 * vmm_lock is held (taken here without waiting; no thread is in job_wait,
 * which holds it). */
static bool other_ready(struct vmm_block *mine)
{
    if (mine->passed >= MOVER_PASS_MAX || pthread_mutex_trylock(vmm_lock)) return false;
    if (!is_stopping() && first_ready(mine)) return true;
    pthread_mutex_unlock(vmm_lock);
    return false;
}

/* The job to claim, not of an ending context: the oldest that is ready,
 * else the oldest; NULL when none. The jobs older than the one taken count
 * a pass. Under vmm_lock. */
static struct vmm_block *pick_job(void)
{
    struct vmm_block *b, *pick = first_ready(NULL);
    for (b = vmm_jobs; pick && b != pick; b = b->job_next)
        if (b->ctx != ending_ctx && b->passed < MOVER_PASS_MAX) b->passed++;
    for (b = vmm_jobs; b && !pick; b = b->job_next)
        if (b->ctx != ending_ctx) pick = b;
    return pick;
}

/* Claim a job (pick_job), run its driver work without vmm_lock, finish
 * it, or give it back (another became ready while it waited). Under
 * vmm_lock (dropped and taken back). false: no job to claim. */
static bool mover_step(void)
{
    struct vmm_block *b = pick_job();
    if (!b) return false;
    unlink_job(b);
    b->moving = true;
    cur.b = b, cur.ticket = ++next_ticket;
    uint64_t t = cur.ticket;
    CUevent evs[SLOTS], wb = b->wb_ev;
    int n = 0;
    if (b->job == JOB_AHEAD) {
        /* its snapshot, unless a valid one was taken while it was queued */
        if (b->wb_ev)
            evs[0] = b->wb_ev, n = 1;
        else
            n = ahead_snapshot(b, evs);
        b->ahead_copy = b->ahead_copy || b->touched || b->alloc_epoch != vmm_unknown_epoch;
    }
    pthread_mutex_unlock(vmm_lock);
    bool blocked = false;
    int rc = b->job == JOB_REMAP ? remap_work(b, wb, true, &blocked)
                                 : ahead_work(b, evs, n, true, &blocked);
    if (rc == -EAGAIN) {
        /* vmm_lock held (other_ready): nothing done, nobody waited; back
         * to the queue's head, a fetch ahead with its snapshot (nothing
         * touched b while the mover owned it) */
        cur.b = NULL;
        b->moving = false;
        b->job_next = vmm_jobs, vmm_jobs = b;
        return true;
    }
    pthread_mutex_lock(&mv_lock);
    cur.rc = rc, cur.blocked = blocked, done_ticket = t;
    pthread_cond_broadcast(&mv_cond);
    pthread_mutex_unlock(&mv_lock);
    pthread_mutex_lock(vmm_lock);
    if (cur.b == b && cur.ticket == t) finish_cur();
    return true;
}

static void *mover_main(void *arg)
{
    (void)arg;
    /* The program's threads may capture streams in global mode, which
     * forbids "potentially unsafe" calls on every other thread (the call
     * fails and breaks the capture): the mover's calls are its own. */
    CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (real_cuThreadExchangeStreamCaptureMode) real_cuThreadExchangeStreamCaptureMode(&relaxed);
    pthread_mutex_lock(vmm_lock);
    while (!is_stopping())
        if (!mover_step() && !is_stopping()) pthread_cond_wait(&kick, vmm_lock);
    pthread_mutex_unlock(vmm_lock);
    return NULL;
}

/* Under vmm_lock: the mover started, with every signal blocked (they are
 * the program's), and the exit hook that stops it registered; when it
 * cannot start, jobs are done inline from now on. */
static void start_mover(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&mover, NULL, mover_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        vmm_mover_thread = false;
        LOG_ONCE(LOG_WARN, "swap: cannot start the mover thread (%s); remaps are done inline",
                 strerror(rc));
        return;
    }
    pthread_setname_np(mover, "ipcshim-mover");
    __atomic_store_n(&started, true, __ATOMIC_RELEASE);
    hooks_mover_started();
}

void swap_vmm_stop_mover(void)
{
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&mv_lock);
    pthread_cond_broadcast(&mv_cond);
    pthread_mutex_unlock(&mv_lock);
    /* Trap: a thread may hold vmm_lock across a real launch that waits for
     * a lock the exiting thread holds; wake the mover without it then. */
    struct timespec until = after_us(1000000);
    bool locked = pthread_mutex_timedlock(vmm_lock, &until) == 0;
    pthread_cond_broadcast(&kick);
    if (locked) pthread_mutex_unlock(vmm_lock);
    until = after_us(2000000);
    if (pthread_timedjoin_np(mover, NULL, &until))
        log_msg(LOG_WARN, "swap: the mover thread did not stop within 2 s; exiting without it");
    __atomic_store_n(&started, false, __ATOMIC_RELEASE);
}

void swap_vmm_postfork_child(void)
{
    pthread_mutex_init(&mv_lock, NULL);
    pthread_cond_init(&mv_cond, NULL);
    pthread_cond_init(&kick, NULL);
    __atomic_store_n(&started, false, __ATOMIC_RELAXED);
    __atomic_store_n(&stopping, 0, __ATOMIC_RELAXED);
    waiters = 0, cur.b = NULL;
}
