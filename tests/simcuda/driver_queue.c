/*
 * driver_queue.c: queued work, stream order, and the fault that unmapping
 * under queued work causes. The simulator runs everything at once, so by
 * default nothing is ever queued. A test holds a stream
 * (simcuda_stream_hold): work then issued on it (kernels, asynchronous
 * copies and sets) stays queued, as if the device were still running it,
 * until the stream or the whole context is synchronised or the hold is
 * released. cuStreamWaitEvent on an event recorded after queued work makes
 * the waiting stream's later work queue behind it, as on a device. Work
 * that completes has its effect then: a copy moves its bytes, a set writes
 * them, a builtin kernel (driver_kernels.c) runs; other kernels do nothing.
 *
 * Order: each stream runs its work in issue order; a wait entry completes
 * when the work it waits for has. A held stream completes nothing until it
 * is released or synchronised. Synchronising (a stream, an event, the
 * context) completes what it waits for, including the work of other
 * streams it depends on, held or not: on a device the host would wait
 * until that work finished; here finishing it is instant.
 *
 * What NVIDIA's driver does (../../shared/probes/README.md, `unmapbusy`
 * and `fault`, H200, driver 580): cuMemUnmap of a range that a running
 * kernel reads returns CUDA_SUCCESS at once; the kernel dies with
 * CUDA_ERROR_ILLEGAL_ADDRESS (700) and the context is dead: the next
 * cudaMalloc returns 700. Here: cuMemUnmap of mappings in a reservation
 * that queued work may touch (a kernel's parameter word points into that
 * reservation, or its layout is unknown, so it may touch anything; a copy
 * or set has an end in it) succeeds, the queued work is dropped (it died),
 * and from then on every driver call of this process returns
 * CUDA_ERROR_ILLEGAL_ADDRESS (a sticky error: the simulator has one such
 * state per process, not per context). Work that completes on memory no
 * longer valid faults the same way.
 * State: process-local, under sim_drv_lock; effects run without it, one at
 * a time under g_run_lock (taken before sim_drv_lock), so that work leaves
 * the queue and has its effect in one step and a stream's work keeps its
 * order when several threads complete work at once. The work taken out and
 * not yet done (g_running) still counts as queued for an event's query and
 * record: the host sees an event complete only once its work's bytes are.
 */
#include "driver_internal.h"
#include "sim_image.h"

#include <stdlib.h>
#include <string.h>

#define QUEUE_WORDS 64 /* parameter words kept per queued kernel */
#define HELD_MAX 16

enum qkind { Q_KERNEL, Q_COPY, Q_SET, Q_WAIT };

struct queued {
    CUstream stream;
    uint64_t seq; /* from 1, in issue order */
    enum qkind kind;
    /* Q_KERNEL: what it may touch; its effect when builtin */
    unsigned n;
    int any; /* layout unknown: may touch anything */
    uint64_t words[QUEUE_WORDS];
    int builtin;
    struct sim_builtin_args args;
    /* Q_COPY: [src, src + bytes) -> dst (staged: the source's bytes taken at
     * issue, or NULL: read at completion); Q_SET: bytes at dst, `width`-byte
     * elements of `value` */
    CUdeviceptr dst, src;
    size_t bytes;
    void *staged;
    unsigned value, width;
    /* Q_WAIT: the work of stream `dep` up to `dep_upto` */
    CUstream dep;
    uint64_t dep_upto;
};

static struct queued *g_queue; /* in seq order */
static size_t g_queued, g_cap;
static CUstream g_held[HELD_MAX];
static unsigned g_nheld;
static uint64_t g_seq;
static pthread_mutex_t g_run_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int on;
    CUstream stream;
    uint64_t seq;
} g_running; /* under sim_drv_lock: the work run() is doing */

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

static int has_work_locked(CUstream s)
{
    for (size_t i = 0; i < g_queued; i++)
        if (g_queue[i].stream == s) return 1;
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

/* A new entry at the tail for stream s (canonical), or NULL when out of
 * memory (the work then completes at once). Caller holds sim_drv_lock. */
static struct queued *push_locked(CUstream s, enum qkind kind)
{
    if (g_queued == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 16;
        struct queued *a = realloc(g_queue, cap * sizeof(*a));
        if (!a) return NULL;
        g_queue = a;
        g_cap = cap;
    }
    struct queued *q = &g_queue[g_queued++];
    memset(q, 0, sizeof(*q));
    q->stream = s;
    q->seq = ++g_seq;
    q->kind = kind;
    return q;
}

static void fault_locked(void)
{
    for (size_t i = 0; i < g_queued; i++)
        free(g_queue[i].staged);
    g_queued = 0; /* the work faulted; the context's work is gone */
    sim_drv_sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* Does q's work: its bytes move (copy, set) or its builtin runs. Called
 * without sim_drv_lock (the range checks take it); frees q's staging. */
static void run(struct queued *q)
{
    CUresult r = CUDA_SUCCESS;
    switch (q->kind) {
    case Q_KERNEL:
        if (q->builtin) r = sim_drv_builtin_run(q->builtin, &q->args);
        break;
    case Q_COPY:
        if ((r = sim_drv_check_range(q->dst, q->bytes, ANY_MEMORY)) == CUDA_SUCCESS &&
            (q->staged || (r = sim_drv_check_range(q->src, q->bytes, ANY_MEMORY)) == CUDA_SUCCESS))
            memmove((void *)(uintptr_t)q->dst,
                    q->staged ? q->staged : (const void *)(uintptr_t)q->src, q->bytes);
        break;
    case Q_SET:
        if ((r = sim_drv_check_range(q->dst, q->bytes, DEVICE_OR_PINNED)) == CUDA_SUCCESS)
            sim_drv_fill(q->dst, q->value, q->width, q->bytes / q->width);
        break;
    case Q_WAIT:
        break;
    }
    free(q->staged);
    pthread_mutex_lock(&sim_drv_lock);
    g_running.on = 0;
    if (r != CUDA_SUCCESS) fault_locked(); /* the memory went away under the work: it faulted */
    pthread_mutex_unlock(&sim_drv_lock);
}

/* Removes entry i into *out. Caller holds sim_drv_lock. */
static void take_locked(size_t i, struct queued *out)
{
    *out = g_queue[i];
    memmove(&g_queue[i], &g_queue[i + 1], (g_queued - i - 1) * sizeof(*g_queue));
    g_queued--;
    g_running.on = 1, g_running.stream = out->stream, g_running.seq = out->seq;
}

static int done_locked(CUstream s, uint64_t upto)
{
    if (g_running.on && g_running.stream == s && g_running.seq <= upto) return 0;
    for (size_t i = 0; i < g_queued; i++)
        if (g_queue[i].stream == s && g_queue[i].seq <= upto) return 0;
    return 1;
}

/* Index of the first entry of stream s, or g_queued. */
static size_t first_of_locked(CUstream s)
{
    size_t i = 0;
    while (i < g_queued && g_queue[i].stream != s)
        i++;
    return i;
}

/* Completes, in order, whatever can run: the first entry of every stream
 * that is not held, a wait only once its work is done. */
static void drain(void)
{
    for (;;) {
        struct queued q;
        int found = 0;
        pthread_mutex_lock(&g_run_lock);
        pthread_mutex_lock(&sim_drv_lock);
        for (size_t i = 0; i < g_queued && !found; i++) {
            const struct queued *e = &g_queue[i];
            if (first_of_locked(e->stream) != i || held_locked(e->stream)) continue;
            if (e->kind == Q_WAIT && !done_locked(e->dep, e->dep_upto)) continue;
            take_locked(i, &q);
            found = 1;
        }
        pthread_mutex_unlock(&sim_drv_lock);
        if (found) run(&q);
        pthread_mutex_unlock(&g_run_lock);
        if (!found) return;
    }
}

/* Completes the work of stream s up to sequence upto, and the work of other
 * streams it waits for, held or not: what the host waiting for it sees. */
static void force(CUstream s, uint64_t upto)
{
    for (;;) {
        struct queued q;
        pthread_mutex_lock(&g_run_lock);
        pthread_mutex_lock(&sim_drv_lock);
        size_t i = first_of_locked(s);
        if (i == g_queued || g_queue[i].seq > upto) {
            pthread_mutex_unlock(&sim_drv_lock);
            pthread_mutex_unlock(&g_run_lock);
            break;
        }
        if (g_queue[i].kind == Q_WAIT && !done_locked(g_queue[i].dep, g_queue[i].dep_upto)) {
            CUstream dep = g_queue[i].dep; /* waits point back in time: this ends */
            uint64_t dep_upto = g_queue[i].dep_upto;
            pthread_mutex_unlock(&sim_drv_lock);
            pthread_mutex_unlock(&g_run_lock);
            force(dep, dep_upto);
            continue;
        }
        take_locked(i, &q);
        pthread_mutex_unlock(&sim_drv_lock);
        run(&q);
        pthread_mutex_unlock(&g_run_lock);
    }
    drain();
}

static void force_all(void)
{
    for (;;) {
        struct queued q;
        pthread_mutex_lock(&g_run_lock);
        pthread_mutex_lock(&sim_drv_lock);
        int any = g_queued > 0;
        if (any) take_locked(0, &q); /* the oldest waits for nothing older */
        pthread_mutex_unlock(&sim_drv_lock);
        if (any) run(&q);
        pthread_mutex_unlock(&g_run_lock);
        if (!any) return;
    }
}

/* The counts g_nheld and g_queued are also read without sim_drv_lock, as a
 * hint that there is nothing to do (a racing hold or launch of another
 * thread may be ordered either way, as on a device): the common case, no
 * stream held, then stays off the lock in every launch and synchronise, so
 * that the simulator's own cost does not grow the shim's measured share in
 * scripts/bench's instruction goals. */
int sim_drv_queue_idle(void)
{
    return !__atomic_load_n(&g_nheld, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&g_queued, __ATOMIC_RELAXED);
}

int sim_drv_queue_launch(CUstream s, const struct sim_kernel *k, int builtin,
                         const struct sim_builtin_args *args, void **params, void **extra)
{
    if (sim_drv_queue_idle()) return 0;
    s = canon(s);
    pthread_mutex_lock(&sim_drv_lock);
    struct queued *q = held_locked(s) || has_work_locked(s) ? push_locked(s, Q_KERNEL) : NULL;
    if (!q) { /* not queued (or cannot be kept queued): it completes at once */
        pthread_mutex_unlock(&sim_drv_lock);
        return 0;
    }
    q->builtin = builtin;
    if (args) q->args = *args;
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
    return 1;
}

int sim_drv_queue_copy(CUstream s, CUdeviceptr dst, CUdeviceptr src, size_t n, int stage)
{
    if (sim_drv_queue_idle()) return 0;
    void *staged = NULL;
    if (stage && !(staged = malloc(n))) return 0;
    if (staged) memcpy(staged, (const void *)(uintptr_t)src, n);
    s = canon(s);
    pthread_mutex_lock(&sim_drv_lock);
    struct queued *q = held_locked(s) || has_work_locked(s) ? push_locked(s, Q_COPY) : NULL;
    if (q) q->dst = dst, q->src = src, q->bytes = n, q->staged = staged;
    pthread_mutex_unlock(&sim_drv_lock);
    if (!q) free(staged);
    return q != NULL;
}

int sim_drv_queue_set(CUstream s, CUdeviceptr dst, unsigned value, unsigned width, size_t n)
{
    if (sim_drv_queue_idle()) return 0;
    s = canon(s);
    pthread_mutex_lock(&sim_drv_lock);
    struct queued *q = held_locked(s) || has_work_locked(s) ? push_locked(s, Q_SET) : NULL;
    if (q) q->dst = dst, q->value = value, q->width = width, q->bytes = n * width;
    pthread_mutex_unlock(&sim_drv_lock);
    return q != NULL;
}

void sim_drv_queue_wait(CUstream s, CUstream on, uint64_t upto)
{
    if (!upto || !__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return;
    s = canon(s), on = canon(on);
    if (s == on) return; /* a stream's own order already holds */
    pthread_mutex_lock(&sim_drv_lock);
    if (!done_locked(on, upto)) {
        struct queued *q = push_locked(s, Q_WAIT);
        if (q) q->dep = on, q->dep_upto = upto;
    }
    pthread_mutex_unlock(&sim_drv_lock);
}

void sim_drv_queue_sync(CUstream s)
{
    if (!__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return;
    force(canon(s), UINT64_MAX);
}

void sim_drv_queue_sync_all(void)
{
    if (!__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return;
    force_all();
}

void sim_drv_queue_sync_upto(CUstream s, uint64_t upto)
{
    if (!upto || !__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return;
    force(canon(s), upto);
}

int sim_drv_queue_busy(CUstream s)
{
    if (!__atomic_load_n(&g_queued, __ATOMIC_RELAXED)) return 0;
    pthread_mutex_lock(&sim_drv_lock);
    int busy = has_work_locked(canon(s));
    pthread_mutex_unlock(&sim_drv_lock);
    return busy;
}

uint64_t sim_drv_queue_tail_locked(CUstream s)
{
    s = canon(s);
    uint64_t tail = g_running.on && g_running.stream == s ? g_running.seq : 0;
    for (size_t i = 0; i < g_queued; i++)
        if (g_queue[i].stream == s && g_queue[i].seq > tail) tail = g_queue[i].seq;
    return tail;
}

int sim_drv_queue_done_locked(CUstream s, uint64_t upto)
{
    return done_locked(canon(s), upto);
}

static int overlaps(CUdeviceptr a, size_t n, CUdeviceptr lo, size_t size)
{
    return n && a < lo + size && lo < a + n;
}

void sim_drv_queue_unmapped_locked(CUdeviceptr res, size_t res_size, CUdeviceptr lo, size_t size)
{
    int hit = 0;
    for (size_t i = 0; i < g_queued && !hit; i++) {
        const struct queued *q = &g_queue[i];
        switch (q->kind) {
        case Q_KERNEL: /* a pointer may reach anything in its reservation, either way */
            hit = q->any;
            for (unsigned w = 0; w < q->n && !hit; w++)
                hit = q->words[w] >= res && q->words[w] - res < res_size;
            break;
        case Q_COPY:
            hit = overlaps(q->dst, q->bytes, lo, size) ||
                  (!q->staged && overlaps(q->src, q->bytes, lo, size));
            break;
        case Q_SET:
            hit = overlaps(q->dst, q->bytes, lo, size);
            break;
        case Q_WAIT:
            break;
        }
    }
    if (hit) fault_locked();
}

void sim_drv_queue_drop_locked(void)
{
    for (size_t i = 0; i < g_queued; i++)
        free(g_queue[i].staged);
    g_queued = 0;
    g_nheld = 0;
    g_running.on = 0;
}

void sim_drv_queue_fork_child(void)
{
    pthread_mutex_init(&g_run_lock, NULL);
    sim_drv_queue_drop_locked();
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
    }
    pthread_mutex_unlock(&sim_drv_lock);
    if (!on) drain(); /* its work completes, behind what it waits for */
    return rc;
}

SIMCUDA_API unsigned simcuda_queued_launches(void)
{
    pthread_mutex_lock(&sim_drv_lock);
    unsigned n = 0;
    for (size_t i = 0; i < g_queued; i++)
        n += g_queue[i].kind == Q_KERNEL;
    pthread_mutex_unlock(&sim_drv_lock);
    return n;
}

SIMCUDA_API unsigned simcuda_queued_work(void)
{
    pthread_mutex_lock(&sim_drv_lock);
    unsigned n = 0;
    for (size_t i = 0; i < g_queued; i++)
        n += g_queue[i].kind != Q_WAIT;
    pthread_mutex_unlock(&sim_drv_lock);
    return n;
}
