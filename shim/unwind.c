/* unwind: the fast unwinder behind call sites (core/callsite.h), handed to
 * core as the host's unwind (core/host.h).
 *
 * glibc's backtrace() interprets DWARF for every frame (about 2 us for the
 * dozen frames of an export); libunwind's unw_backtrace caches each return
 * address's frame rule and walks the same stack in about 0.1 us. It is an
 * optional dependency: libunwind.so.8 (Debian libunwind8) is opened
 * RTLD_LOCAL, so that its own _Unwind_* functions never replace the ones the
 * program's C++ exceptions use, and only when IPCSHIM_CALLSITE_DEPTH > 0.
 * Without it call sites still work through glibc, only slower.
 *
 * Under valgrind libunwind checks each address it reads by passing it to
 * write(2), which memcheck reports as a read of uninitialised bytes; the
 * capture silences that when the shim can tell memcheck (callsite.h,
 * CALLSITE_VALGRIND_QUIET). When it cannot (built without valgrind's
 * headers), libunwind is left out: glibc's unwinder is clean under
 * memcheck, and its cost is lost in valgrind's. scripts/ipcshim.supp
 * covers libunwind for the rest (a program that uses it itself). */
#include "callsite.h"
#include "host.h"
#include "log.h"
#include "options.h"
#include "resolve.h"
#include "unwind.h"

#include <dlfcn.h>

enum { UNW_CACHE_PER_THREAD = 2 }; /* libunwind.h's unw_caching_policy_t */

/* Runs once at start-up (init.c), which resolve.c reaches only after it
 * found the real dlsym: libunwind's functions are looked up with it, not
 * through the shim's own dlsym door. */
void unwind_init(void)
{
    if (!options_get()->callsite_depth) return;
    switch (callsite_valgrind()) {
    case CALLSITE_NATIVE:
        break;
    case CALLSITE_VALGRIND_QUIET:
        log_msg(LOG_DEBUG, "under valgrind: memcheck's reports are off while a call site is taken");
        break;
    case CALLSITE_VALGRIND_BLIND:
        log_msg(LOG_INFO, "under valgrind, in a build without valgrind's headers: call sites use "
                          "glibc's backtrace and unwind at every export and open");
        return;
    }
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        log_msg(LOG_INFO, "libunwind.so.8 not found: call sites use glibc's backtrace (slower)");
        return;
    }
    int (*bt)(void **, int) = (int (*)(void **, int))real_dlsym(h, "unw_backtrace");
    int (*policy)(void *, int) =
        (int (*)(void *, int))real_dlsym(h, "_ULx86_64_set_caching_policy");
    void **space = (void **)real_dlsym(h, "_ULx86_64_local_addr_space");
    if (!bt) {
        dlclose(h);
        return;
    }
    if (policy && space) policy(*space, UNW_CACHE_PER_THREAD);
    host_set(&(struct host){.unwind = bt}); /* core's unwinder (core/host.h) */
}
