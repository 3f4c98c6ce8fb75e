/* api: the public ipcshim_* functions (include/ipcshim.h) and the
 * IPCSHIM_STATS exit report, which init.c's exit hook runs: core's figures
 * (ipc_stats), host swap's, and the entry points' call counts per door. */
#include "ipcshim.h"
#include "ipc.h"
#include "log.h"
#include "options.h"
#include "api.h"
#include "entry.h"
#include "resolve.h"
#include "host_swap.h"

#include <errno.h>
#include <string.h>

/* Answers from the options alone, so that asking first (before any CUDA
 * call, before the runtime is even loaded) changes nothing. */
SHIM_EXPORT int ipcshim_active(void)
{
    return !options_get()->disable;
}

#ifndef SHIM_VERSION_STRING
#error "SHIM_VERSION_STRING (the project version) comes from shim/meson.build"
#endif

SHIM_EXPORT const char *ipcshim_version(void)
{
    return SHIM_VERSION_STRING;
}

SHIM_EXPORT int ipcshim_collect(void)
{
    resolve_all();
    shim_depth++; /* inside the shim: an _exit from a signal handler now releases nothing (init.c)
                   */
    int n = shim_tracking() ? ipc_collect() : 0;
    shim_depth--;
    return n;
}

static void fill_stats(struct ipcshim_stats *s)
{
    memset(s, 0, sizeof *s);
    s->version = IPCSHIM_STATS_VERSION;
    s->size = sizeof *s;
    if (shim_tracking()) ipc_stats(s);
    long long calls[DOOR_COUNT];
    entry_calls_by_door(calls);
    s->calls_runtime = calls[DOOR_RUNTIME];
    s->calls_driver = calls[DOOR_DRIVER];
    s->calls_resolver = calls[DOOR_RESOLVER];
}

SHIM_EXPORT int ipcshim_stats(struct ipcshim_stats *out, size_t size)
{
    struct ipcshim_stats s;
    if (!out || size < offsetof(struct ipcshim_stats, exports)) return -EINVAL;
    resolve_all();
    fill_stats(&s);
    if (size > sizeof s) size = sizeof s;
    s.size = (uint32_t)size;
    memcpy(out, &s, size);
    return 0;
}

static const char *const door_names[DOOR_COUNT] = {"runtime", "driver", "resolver"};

SHIM_EXPORT long long ipcshim_calls(const char *symbol, const char *door)
{
    if (!symbol || !door) return -1;
    for (int d = 0; d < DOOR_COUNT; d++) {
        if (strcmp(door, door_names[d])) continue;
        for (int id = 0; id < SYM_COUNT; id++)
            if (!strcmp(symbol, entry_name(id))) return entry_calls(id, d);
    }
    return -1;
}

/* With IPCSHIM_STATS=1, a short summary at exit, only for processes that
 * used CUDA. */
void api_report_stats(void)
{
    if (!options_get()->stats) return;
    struct ipcshim_stats s;
    fill_stats(&s);
    if (!s.calls_runtime && !s.calls_driver && !s.calls_resolver) return;
    log_report("exports %llu, opens %llu, closes %llu, deferred frees %llu, "
               "reclaimed %llu blocks (%llu bytes), still in limbo %llu, longest limbo %.3f ms, "
               "hand-offs expired %llu",
               (unsigned long long)s.exports, (unsigned long long)s.opens,
               (unsigned long long)s.closes, (unsigned long long)s.frees_deferred,
               (unsigned long long)s.frees_reclaimed, (unsigned long long)s.bytes_reclaimed,
               (unsigned long long)s.limbo_blocks, s.longest_limbo_ns / 1e6,
               (unsigned long long)s.handoffs_expired);
    swap_report();
    for (int id = 0; id < SYM_COUNT; id++)
        for (int d = 0; d < DOOR_COUNT; d++)
            if (entry_calls(id, d))
                log_report("calls %s via %s: %lld", entry_name(id), door_names[d],
                           entry_calls(id, d));
}
