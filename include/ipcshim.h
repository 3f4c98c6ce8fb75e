/* ipcshim.h: the public API of libipcshim.so.
 *
 * Programs need not link against the shim to use these: resolve them with
 * dlsym(RTLD_DEFAULT, "ipcshim_collect") and treat NULL as "not loaded".
 * Every function is thread-safe and never blocks on another process. */
#ifndef IPCSHIM_H
#define IPCSHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IPCSHIM_STATS_VERSION 1

struct ipcshim_stats {
    uint32_t version;          /* IPCSHIM_STATS_VERSION */
    uint32_t size;             /* sizeof(struct ipcshim_stats) as filled */
    uint64_t exports;          /* get-handle calls recorded */
    uint64_t opens;            /* successful opens (every count) */
    uint64_t closes;           /* successful closes (every count) */
    uint64_t frees_deferred;   /* frees that went to limbo */
    uint64_t frees_reclaimed;  /* limbo blocks really freed */
    uint64_t bytes_reclaimed;  /* bytes of those */
    uint64_t limbo_blocks;     /* in limbo now */
    uint64_t limbo_bytes;      /* in limbo now */
    uint64_t handoffs_expired; /* unclaimed hand-offs that timed out */
    uint64_t longest_limbo_ns; /* longest time a block spent in limbo */
    uint64_t calls_runtime;    /* interposed calls that came through each door */
    uint64_t calls_driver;
    uint64_t calls_resolver;
};

/* 1 when the shim is loaded and not disabled (IPCSHIM_DISABLE), from the
 * first moment, whatever the process has called; 0 when loaded but
 * disabled. (Not loaded: the symbol does not resolve.) */
int ipcshim_active(void);

/* Free every block of this process whose importers have all let go.
 * Returns the number of blocks freed, or a negative errno. */
int ipcshim_collect(void);

/* Fill *out (out->size bytes at most; pass sizeof *out). 0 or -EINVAL.
 * When an importer's last close has made a block of this process's limbo
 * freeable since the last look, the calling thread frees it first (the
 * collector thread would, one wake-up later), so a program that polls
 * frees_reclaimed sees its memory back without waiting for a scheduler. */
int ipcshim_stats(struct ipcshim_stats *out, size_t size);

/* Calls seen on one interposed entry point ("cudaMalloc", "cuMemFree_v2")
 * through one door ("runtime", "driver" or "resolver"); -1 if unknown. */
long long ipcshim_calls(const char *symbol, const char *door);

/* The library's version, "MAJOR.MINOR.PATCH" (the project version; the
 * soname carries MAJOR). A static string; never NULL. */
const char *ipcshim_version(void);

#ifdef __cplusplus
}
#endif
#endif
