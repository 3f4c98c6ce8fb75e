/* swap_layout: each kernel's parameter layout, as the real
 * cudaFuncGetParamInfo / cuFuncGetParamInfo give it, cached per function
 * for host swap's launch scan (host_swap.c): which parameter words may hold
 * a pointer to a swappable block. */
#include "swap_layout.h"
#include "log.h"
#include "resolve.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#define MAX_PARAMS 1024

static struct layout *layouts; /* under layouts_lock */
static pthread_mutex_t layouts_lock = PTHREAD_MUTEX_INITIALIZER;

/* The layout of fn as its door's real query gives it: count of parameters,
 * or -ENOTSUP (no layout known), -EAGAIN (not now: try again later). */
static long query_layout(enum fn_kind kind, const void *fn, uint64_t *off, uint64_t *size)
{
    size_t i;
    if (kind == FN_RUNTIME) {
        if (!real_cudaFuncGetParamInfo) return -ENOTSUP;
        /* The probe leaves an error behind (past the last parameter); never
         * clear one the program has not read yet. */
        if (real_cudaPeekAtLastError && real_cudaPeekAtLastError() != cudaSuccess) return -EAGAIN;
        cudaError_t r = cudaSuccess;
        for (i = 0; i < MAX_PARAMS; i++) {
            size_t o = 0, s = 0;
            if ((r = real_cudaFuncGetParamInfo(fn, i, &o, &s)) != cudaSuccess) break;
            off[i] = o, size[i] = s;
        }
        if (real_cudaGetLastError) real_cudaGetLastError();
        return i == 0 && r != cudaErrorInvalidValue ? -ENOTSUP : (long)i;
    }
    if (!real_cuFuncGetParamInfo) return -ENOTSUP;
    CUresult r = CUDA_SUCCESS;
    for (i = 0; i < MAX_PARAMS; i++) {
        size_t o = 0, s = 0;
        if ((r = real_cuFuncGetParamInfo((CUfunction)fn, i, &o, &s)) != CUDA_SUCCESS) break;
        off[i] = o, size[i] = s;
    }
    return i == 0 && r != CUDA_ERROR_INVALID_VALUE ? -ENOTSUP : (long)i;
}

const struct layout *layout_of(enum fn_kind kind, const void *fn)
{
    struct layout probe = {0}, *l = NULL;
    probe.key.fn = fn, probe.key.kind = kind;
    pthread_mutex_lock(&layouts_lock);
    HASH_FIND(hh, layouts, &probe.key, sizeof probe.key, l);
    pthread_mutex_unlock(&layouts_lock);
    if (l) return l;

    static uint64_t off[MAX_PARAMS], size[MAX_PARAMS]; /* under query_lock */
    static pthread_mutex_t query_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&query_lock);
    long n = query_layout(kind, fn, off, size);
    if (n == -EAGAIN) {
        pthread_mutex_unlock(&query_lock);
        return NULL;
    }
    size_t count = n > 0 ? (size_t)n : 0;
    l = calloc(1, sizeof *l + count * sizeof l->params[0]);
    if (l) {
        l->key = probe.key;
        l->known = n >= 0;
        l->n = swap_param_filter(off, size, count, l->params);
    }
    pthread_mutex_unlock(&query_lock);
    if (!l) return NULL;
    if (!l->known)
        LOG_RATE(LOG_INFO,
                 "swap: no parameter layout for kernel %p; its accesses are left to the hardware",
                 fn);
    pthread_mutex_lock(&layouts_lock);
    struct layout *old = NULL;
    HASH_FIND(hh, layouts, &l->key, sizeof l->key, old);
    if (old) {
        free(l);
        l = old;
    } else {
        HASH_ADD(hh, layouts, key, sizeof l->key, l);
        if (!UTH_ADDED(l, hh)) {
            pthread_mutex_unlock(&layouts_lock);
            free(l);
            return NULL;
        }
    }
    pthread_mutex_unlock(&layouts_lock);
    return l;
}
