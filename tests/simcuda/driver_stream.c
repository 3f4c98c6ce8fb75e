/*
 * driver_stream.c: streams and events. Work is synchronous unless a test
 * holds a stream (driver_queue.c, which owns queries, waits and
 * synchronisations of queued work); an event records the time of its
 * cuEventRecord for cuEventElapsedTime and the queued work it follows. Both belong to the context
 * current at their creation and go with it (driver_ctx.c). Interprocess event handles are
 * driver_ipc.c.
 */
#include "driver_internal.h"

#include <stdlib.h>
#include <time.h>

/* Validates a stream handle: the special streams and registered ones. */
CUresult sim_drv_check_stream(CUstream s)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
    pthread_mutex_lock(&sim_drv_lock);
    struct obj *o = sim_drv_obj_find(s, OBJ_STREAM);
    pthread_mutex_unlock(&sim_drv_lock);
    return o ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- streams ---- */

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    ENTER();
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_stream *s = calloc(1, sizeof(*s));
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    pthread_mutex_lock(&sim_drv_lock);
    int rc = sim_drv_obj_add(&s->o, OBJ_STREAM);
    pthread_mutex_unlock(&sim_drv_lock);
    if (rc < 0) {
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return cuStreamCreateWithPriority(phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    ENTER();
    pthread_mutex_lock(&sim_drv_lock);
    struct obj *o = sim_drv_obj_find(hStream, OBJ_STREAM);
    if (o) HASH_DEL(sim_drv_objs, o);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!o) return CUDA_ERROR_INVALID_HANDLE;
    free(o);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    ENTER();
    CUresult r = sim_drv_check_stream(hStream);
    if (r == CUDA_SUCCESS) sim_drv_queue_sync(hStream); /* driver_queue.c */
    return r;
}
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return cuStreamSynchronize(hStream);
}
CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    ENTER();
    CUresult r = sim_drv_check_stream(hStream); /* complete unless held (driver_queue.c) */
    return r == CUDA_SUCCESS && sim_drv_queue_busy(hStream) ? CUDA_ERROR_NOT_READY : r;
}
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
    return cuStreamQuery(hStream);
}

CUresult sim_drv_check_event(CUevent e, struct sim_event *copy_out)
{
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_event *ev = (struct sim_event *)sim_drv_obj_find(e, OBJ_EVENT);
    if (ev && copy_out) *copy_out = *ev;
    pthread_mutex_unlock(&sim_drv_lock);
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Waits counted per waiting stream (simcuda_stream_waits): host swap's
 * tests check that a launch's stream, not the host, waits for a fetch. */
#define WAIT_COUNTED 64
static struct {
    CUstream stream;
    unsigned long n;
} g_waits[WAIT_COUNTED];

static void count_wait(CUstream s)
{
    if (s == CU_STREAM_LEGACY) s = NULL;
    pthread_mutex_lock(&sim_drv_lock);
    for (unsigned i = 0; i < WAIT_COUNTED; i++)
        if (g_waits[i].stream == s || !g_waits[i].n) {
            g_waits[i].stream = s;
            g_waits[i].n++;
            break;
        }
    pthread_mutex_unlock(&sim_drv_lock);
}

SIMCUDA_API unsigned long simcuda_stream_waits(void *stream)
{
    CUstream s = stream == (void *)CU_STREAM_LEGACY ? NULL : (CUstream)stream;
    unsigned long n = 0;
    pthread_mutex_lock(&sim_drv_lock);
    for (unsigned i = 0; i < WAIT_COUNTED && g_waits[i].n; i++)
        if (g_waits[i].stream == s) n = g_waits[i].n;
    pthread_mutex_unlock(&sim_drv_lock);
    return n;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    ENTER();
    CUresult r = sim_drv_check_stream(hStream);
    if (r != CUDA_SUCCESS) return r;
    (void)Flags;
    struct sim_event e;
    if ((r = sim_drv_check_event(hEvent, &e)) != CUDA_SUCCESS) return r;
    if (e.after) sim_drv_queue_wait(hStream, e.stream, e.after); /* driver_queue.c */
    count_wait(hStream);
    return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return cuStreamWaitEvent(hStream, hEvent, Flags);
}

/* ---- events ---- */

CUresult sim_drv_event_new(CUevent *phEvent, unsigned int Flags)
{
    struct sim_ctx *c = sim_drv_current_ctx();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    struct sim_event *e = calloc(1, sizeof(*e));
    if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = c;
    e->flags = Flags;
    pthread_mutex_lock(&sim_drv_lock);
    e->serial = sim_drv_next_id++;
    int rc = sim_drv_obj_add(&e->o, OBJ_EVENT);
    pthread_mutex_unlock(&sim_drv_lock);
    if (rc < 0) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phEvent = (CUevent)e;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    ENTER();
    const unsigned all = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~all) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_drv_event_new(phEvent, Flags);
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    ENTER();
    CUresult r = sim_drv_check_stream(hStream);
    if (r != CUDA_SUCCESS) return r;
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_event *e = (struct sim_event *)sim_drv_obj_find(hEvent, OBJ_EVENT);
    if (e) {
        e->recorded = 1;
        clock_gettime(CLOCK_MONOTONIC, &e->when);
        e->stream = hStream;
        e->after = sim_drv_queue_tail_locked(hStream); /* driver_queue.c */
    }
    pthread_mutex_unlock(&sim_drv_lock);
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return cuEventRecord(hEvent, hStream);
}

/* Complete unless recorded after work still queued (driver_queue.c). */
CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
    ENTER();
    pthread_mutex_lock(&sim_drv_lock);
    struct sim_event *e = (struct sim_event *)sim_drv_obj_find(hEvent, OBJ_EVENT);
    int done = !e || !e->after || sim_drv_queue_done_locked(e->stream, e->after);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Completes the queued work the event follows (driver_queue.c). */
CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    ENTER();
    struct sim_event e;
    if (sim_drv_check_event(hEvent, &e) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_HANDLE;
    sim_drv_queue_sync_upto(e.stream, e.after);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    ENTER();
    if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
    struct sim_event a, b;
    if (sim_drv_check_event(hStart, &a) != CUDA_SUCCESS ||
        sim_drv_check_event(hEnd, &b) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_HANDLE;
    if ((a.flags | b.flags) & CU_EVENT_DISABLE_TIMING || !a.recorded || !b.recorded)
        return CUDA_ERROR_INVALID_HANDLE;
    double ms = (double)(b.when.tv_sec - a.when.tv_sec) * 1e3 +
                (double)(b.when.tv_nsec - a.when.tv_nsec) / 1e6;
    *pMilliseconds = (float)ms;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
    ENTER();
    pthread_mutex_lock(&sim_drv_lock);
    struct obj *o = sim_drv_obj_find(hEvent, OBJ_EVENT);
    if (o) HASH_DEL(sim_drv_objs, o);
    pthread_mutex_unlock(&sim_drv_lock);
    if (!o) return CUDA_ERROR_INVALID_HANDLE;
    free(o);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}
