/*
 * driver_queue.c: queued work, and the fault that unmapping under it
 * causes. The simulator runs everything at once, so by default nothing is
 * ever queued. A test holds a stream (simcuda_stream_hold): kernels then
 * launched on it stay queued, as if the device were still running them,
 * until the stream or the whole context is synchronised or the hold is
 * released. cuStreamQuery answers CUDA_ERROR_NOT_READY while a held
 * stream has queued kernels; an event recorded after them answers
 * cuEventQuery with CUDA_ERROR_NOT_READY until they complete, and
 * cuEventSynchronize completes them (cuStreamWaitEvent does not hold the
 * waiting stream's later work: not simulated).
 *
 * What NVIDIA's driver does (../../shared/probes/README.md, `unmapbusy`
 * and `fault`, H200, driver 580): cuMemUnmap of a range that a running
 * kernel reads returns CUDA_SUCCESS at once; the kernel dies with
 * CUDA_ERROR_ILLEGAL_ADDRESS (700) and the context is dead: the next
 * cudaMalloc returns 700. Here: cuMemUnmap of mappings in a reservation
 * that a queued kernel may touch (one of its parameter words points into
 * that reservation, or its layout is unknown, so it may touch anything)
 * succeeds, the queued kernels are dropped (they died), and from then on
 * every driver call of this process returns CUDA_ERROR_ILLEGAL_ADDRESS (a
 * sticky error: the simulator has one such state per process, not per
 * context). The kernel that the probe ran on an unmapped range is not
 * simulated (kernels do not run).
 * State: process-local, under sim_drv_lock.
 */
#include "driver_internal.h"
#include "sim_image.h"

#include <stdlib.h>
#include <string.h>

#define QUEUE_WORDS 64 /* parameter words kept per queued kernel */
#define HELD_MAX 16

struct queued {
    CUstream stream;
    uint64_t seq; /* from 1, in launch order */
    unsigned n;
    int any; /* layout unknown: may touch anything */
    uint64_t words[QUEUE_WORDS];
};

static struct queued *g_queue;
static size_t g_queued, g_cap;
static CUstream g_held[HELD_MAX];
static unsigned g_nheld;
static uint64_t g_seq;

CUresult sim_drv_sticky;

/* The legacy stream has three names. */
static CUstream canon(CUstream s)
{
    return s == CU_STREAM_LEGACY ? NULL : s;
}

static int held_locked(CUstream s)
{
    for (unsigned i = 0; i < g_nheld; i++)
        if (g_held[i] == s) return 1;
    return 0;
}

static void scan(struct queued *q, const uint8_t *p, size_t n, size_t base)
{
    for (size_t j = (8 - base % 8) % 8; j + 8 <= n; j += 8) {
        uint64_t v;
        memcpy(&v, p + j, 8);
        if (!v) continue;
        if (q->n == QUEUE_WORDS) {
            q->any = 1; /* too many to keep: count it as touching anything */
            return;
        }
        q->words[q->n++] = v;
    }
}

/* The counts g_nheld and g_queued are also read without sim_drv_lock, as a
 * hint that there is nothing to do (a racing hold or launch of another
 * thread may be ordered either way, as on a device): the common case, no
 * stream held, then stays off the lock in every launch and synchronise, so
 * that the simulator's own cost does not grow the shim's measured share in
 * scripts/bench's instruction goals. */
void sim_drv_queue_launch(CUstream s, const struct sim_kernel *k, void **params, void **extra)
{
    if (!__atomic_load_n(&g_nheld, __ATOMIC_RELAXED)) return;
    s = canon(s);
    pthread_mutex_lock(&sim_drv_lock);
    if (!held_locked(s)) {
        pthread_mutex_unlock(&sim_drv_lock);
        return;
    }
    if (g_queued == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 16;
        struct queued *a = realloc(g_queue, cap * sizeof(*a));
        if (!a) { /* cannot keep it queued: it completes at once */
            pthread_mutex_unlock(&sim_drv_lock);
            return;
        }
        g_queue = a;
        g_cap = cap;
    }
    struct queued *q = &g_queue[g_queued++];
    memset(q, 0, sizeof(*q));
    q->stream = s;
    q->seq = ++g_seq;
    if (extra) {
        const uint8_t *buf = NULL;
        size_t size = 0;
        for (unsigned i = 0; i < 64 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = extra[i + 1];
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                size = *(const size_t *)extra[i + 1];
        }
        if (buf && size)
            scan(q, buf, size, 0);
        else
            q->any = 1;
    } else if (params && k) {
        for (unsigned i = 0; i < k->nparams; i++)
            if (params[i]) scan(q, params[i], k->params[i].size, k->params[i].offset);
    } else if (params) {
        q->any = 1;
    }
    pthread_mutex_unlock(&sim_drv_lock);
}

/* Drops the queued kernels of stream s (all when all is set): they ran to
 * completion. Caller holds sim_drv_lock. */
static void complete_locked(CUstream s, int all)
{
    size_t k = 0;
    for (size_t i = 0; i < g_queued; i++)
        if (!all && g_queue[i].stream != s) g_queue[k++] = g_queue[i];
    g_queued = k;
}

void sim_drv_queue_complete(CUstream s, int all)
{
    if (!__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&sim_drv_lock);
    complete_locked(canon(s), all);
    pthread_mutex_unlock(&sim_drv_lock);
}

int sim_drv_queue_busy(CUstream s)
{
    if (!__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return 0;
    s = canon(s);
    int busy = 0;
    pthread_mutex_lock(&sim_drv_lock);
    for (size_t i = 0; i < g_queued && !busy; i++)
        busy = g_queue[i].stream == s;
    pthread_mutex_unlock(&sim_drv_lock);
    return busy;
}

uint64_t sim_drv_queue_tail_locked(CUstream s)
{
    s = canon(s);
    uint64_t tail = 0;
    for (size_t i = 0; i < g_queued; i++)
        if (g_queue[i].stream == s && g_queue[i].seq > tail) tail = g_queue[i].seq;
    return tail;
}

int sim_drv_queue_done_locked(CUstream s, uint64_t upto)
{
    s = canon(s);
    for (size_t i = 0; i < g_queued; i++)
        if (g_queue[i].stream == s && g_queue[i].seq <= upto) return 0;
    return 1;
}

void sim_drv_queue_complete_upto_locked(CUstream s, uint64_t upto)
{
    s = canon(s);
    size_t k = 0;
    for (size_t i = 0; i < g_queued; i++)
        if (g_queue[i].stream != s || g_queue[i].seq > upto) g_queue[k++] = g_queue[i];
    g_queued = k;
}

void sim_drv_queue_unmapped_locked(CUdeviceptr lo, size_t size)
{
    int hit = 0;
    for (size_t i = 0; i < g_queued && !hit; i++) {
        const struct queued *q = &g_queue[i];
        hit = q->any;
        for (unsigned w = 0; w < q->n && !hit; w++)
            hit = q->words[w] >= lo && q->words[w] - lo < size;
    }
    if (!hit) return;
    g_queued = 0; /* the kernel faulted; the context's work is gone */
    sim_drv_sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
}

void sim_drv_queue_fork_child(void)
{
    g_queued = 0;
    g_nheld = 0;
}

/* ---- test-only (simcuda.h) ---- */

SIMCUDA_API int simcuda_stream_hold(void *stream, int on)
{
    CUstream s = canon((CUstream)stream);
    if (s && s != CU_STREAM_PER_THREAD && sim_drv_check_stream(s) != CUDA_SUCCESS) return -1;
    pthread_mutex_lock(&sim_drv_lock);
    int rc = 0;
    if (on && !held_locked(s)) {
        if (g_nheld < HELD_MAX)
            g_held[g_nheld++] = s;
        else
            rc = -1;
    } else if (!on) {
        unsigned k = 0;
        for (unsigned i = 0; i < g_nheld; i++)
            if (g_held[i] != s) g_held[k++] = g_held[i];
        g_nheld = k;
        complete_locked(s, 0);
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return rc;
}

SIMCUDA_API unsigned simcuda_queued_launches(void)
{
    pthread_mutex_lock(&sim_drv_lock);
    unsigned n = (unsigned)g_queued;
    pthread_mutex_unlock(&sim_drv_lock);
    return n;
}
