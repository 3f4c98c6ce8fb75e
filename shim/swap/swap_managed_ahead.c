/* swap_managed_ahead: the lateness of managed blocks fetched ahead
 * (host_swap.c's feedback to swap_engine_ahead_feedback). Each call of the
 * engine's fetch ahead that prefetches managed blocks is a batch, with an
 * event recorded on its stream before the first prefetch and one after the
 * last, kept in a ring. Everything here runs under host_swap.c's swap_lock. */
#include "swap_managed_ahead.h"
#include "resolve.h"
#include "swap.h"

/* A block leaves its batch at its use. */
#define AHEAD_BATCHES 16
static struct ahead_batch {
    CUcontext ctx; /* the events' context; NULL: none */
    CUevent pre, post;
    CUstream stream;
    bool pre_recorded;
    size_t n;
    uint64_t base[SWAP_AHEAD_PER_LAUNCH * 4];
} batches[AHEAD_BATCHES];
static unsigned batch_next;
static struct ahead_batch *batch_cur; /* the batch fetch_ahead fills, or NULL */

/* A managed block at base is prefetched ahead on stream: into the current
 * batch, its pre event recorded first. */
void managed_ahead_add(uint64_t base, CUstream stream)
{
    struct ahead_batch *m = batch_cur;
    if (!m || m->n == sizeof m->base / sizeof m->base[0]) return;
    if (!m->pre_recorded) {
        if (real_cuEventRecord(m->pre, stream) != CUDA_SUCCESS) return;
        m->pre_recorded = true, m->stream = stream;
    }
    m->base[m->n++] = base;
}

/* The context's managed-fetch batch to fill next (its events made in the
 * current context when new), or NULL when none can be had. Under swap_lock. */
static struct ahead_batch *batch_take(void)
{
    CUcontext ctx = NULL;
    if (real_cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) return NULL;
    struct ahead_batch *m = &batches[batch_next % AHEAD_BATCHES];
    if (m->ctx != ctx) {
        /* Events of another context are left to it (it may be gone). */
        m->ctx = NULL;
        if (real_cuEventCreate(&m->pre, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return NULL;
        if (real_cuEventCreate(&m->post, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
            real_cuEventDestroy_v2(m->pre);
            return NULL;
        }
        m->ctx = ctx;
    }
    m->n = 0, m->pre_recorded = false;
    return m;
}

void managed_ahead_begin(void)
{
    batch_cur = batch_take();
}

void managed_ahead_end(void)
{
    struct ahead_batch *m = batch_cur;
    batch_cur = NULL;
    if (!m || !m->n) return;
    if (real_cuEventRecord(m->post, m->stream) != CUDA_SUCCESS) {
        m->n = 0;
        return;
    }
    batch_next++;
}

/* Whether stream has no work left (cached in *idle across one launch's
 * blocks: -1 not asked yet). Asked in relaxed capture mode: another
 * thread's capture in global mode would refuse it (and be broken by it). */
bool swap_stream_idle(CUstream stream, int *idle)
{
    if (*idle >= 0) return *idle > 0;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    bool swapped = real_cuThreadExchangeStreamCaptureMode &&
                   real_cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
    *idle = real_cuStreamQuery && real_cuStreamQuery(stream) == CUDA_SUCCESS;
    if (swapped) real_cuThreadExchangeStreamCaptureMode(&mode);
    return *idle > 0;
}

/* Whether managed block base, fetched ahead, comes late for work about to
 * be queued on stream: its prefetch not complete while the work could
 * start now (stream idle, or on the prefetch's own stream, everything
 * before the prefetch done). Leaves its batch. No host wait. */
bool managed_ahead_late(uint64_t base, CUstream stream, int *idle)
{
    CUcontext ctx = NULL;
    real_cuCtxGetCurrent(&ctx);
    for (unsigned i = 0; i < AHEAD_BATCHES; i++) {
        struct ahead_batch *m = &batches[(batch_next - 1 - i) % AHEAD_BATCHES];
        for (size_t k = 0; k < m->n; k++) {
            if (m->base[k] != base) continue;
            m->base[k] = 0;
            if (!ctx || m->ctx != ctx || real_cuEventQuery(m->post) != CUDA_ERROR_NOT_READY)
                return false;
            if (m->stream == stream) return real_cuEventQuery(m->pre) == CUDA_SUCCESS;
            return swap_stream_idle(stream, idle);
        }
    }
    return false;
}
