/* hooks: what init.c, the top of the shim, gives the files below it, so
 * that none of them calls up into it: the start-up that resolve.c runs at
 * the first entry, and the exit hooks that memory.c and vmm.c ask for at the
 * first tracked export and open, and the end of a context that context.c
 * passes on to host swap. init.c's constructor gives them, once.
 * Trap: another library's constructor may enter the shim before that; such
 * calls find no start-up and pass through untracked (resolve.c). */
#ifndef HOOKS_H
#define HOOKS_H

#include <stdbool.h>
#include <stdint.h>

struct shim_hooks {
    /* The start-up after the real functions are found (memory and core,
     * the fork chain, host swap, the unwinder); run once, by resolve.c. */
    void (*start)(void);
    /* At each tracked export / open: registers the exit shutdown / the
     * importer's leak report, the first time. */
    void (*first_export)(void);
    void (*first_open)(void);
    /* A context ended (context.c): host swap forgets its VMM blocks. */
    void (*context_gone)(uint64_t ctx);
    /* A context is about to end (0: it did not, the call failed): host
     * swap's mover finishes its job of it first. */
    void (*context_ending)(uint64_t ctx);
    /* Host swap's mover thread started: registers its stop at exit. */
    void (*mover_started)(void);
};

/* Give the hooks (h must outlive the process); from init.c's constructor. */
void hooks_set(const struct shim_hooks *h);

/* Whether the hooks were given; the start-up hook, when they were. */
bool hooks_given(void);
void hooks_start(void);
/* The exit hooks; nothing until given. */
void hooks_first_export(void);
void hooks_first_open(void);
void hooks_context_gone(uint64_t ctx);
void hooks_context_ending(uint64_t ctx);
void hooks_mover_started(void);

#endif
