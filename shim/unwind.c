/* unwind: the fast unwinder behind call sites (core/callsite.h).
 *
 * glibc's backtrace() interprets DWARF for every frame (about 2 us for the
 * dozen frames of an export); libunwind's unw_backtrace caches each return
 * address's frame rule and walks the same stack in about 0.1 us. It is an
 * optional dependency: libunwind.so.8 (Debian libunwind8) is opened
 * RTLD_LOCAL, so that its own _Unwind_* functions never replace the ones the
 * program's C++ exceptions use, and only when IPCSHIM_CALLSITE_DEPTH > 0.
 * Without it call sites still work through glibc, only slower. */
#include "callsite.h"
#include "log.h"
#include "options.h"
#include "shim.h"

#include <dlfcn.h>

enum { UNW_CACHE_PER_THREAD = 2 }; /* libunwind.h's unw_caching_policy_t */

void unwind_init(void)
{
    if (!options_get()->callsite_depth) return;
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        log_msg(LOG_INFO, "libunwind.so.8 not found: call sites use glibc's backtrace (slower)");
        return;
    }
    int (*bt)(void **, int) = (int (*)(void **, int))dlsym(h, "unw_backtrace");
    int (*policy)(void *, int) = (int (*)(void *, int))dlsym(h, "_ULx86_64_set_caching_policy");
    void **space = (void **)dlsym(h, "_ULx86_64_local_addr_space");
    if (!bt) {
        dlclose(h);
        return;
    }
    if (policy && space) policy(*space, UNW_CACHE_PER_THREAD);
    callsite_set_unwinder(bt);
}
