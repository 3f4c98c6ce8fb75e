/* hooks: the table init.c gives the files below it (see hooks.h). Written
 * once with a release store, read with acquire loads: a file that sees the
 * table sees its members. */
#include "hooks.h"

#include <stddef.h>

static const struct shim_hooks *given;

void hooks_set(const struct shim_hooks *h)
{
    __atomic_store_n(&given, h, __ATOMIC_RELEASE);
}

bool hooks_given(void)
{
    return __atomic_load_n(&given, __ATOMIC_ACQUIRE) != NULL;
}

void hooks_start(void)
{
    const struct shim_hooks *h = __atomic_load_n(&given, __ATOMIC_ACQUIRE);
    if (h && h->start) h->start();
}

void hooks_first_export(void)
{
    const struct shim_hooks *h = __atomic_load_n(&given, __ATOMIC_ACQUIRE);
    if (h && h->first_export) h->first_export();
}

void hooks_first_open(void)
{
    const struct shim_hooks *h = __atomic_load_n(&given, __ATOMIC_ACQUIRE);
    if (h && h->first_open) h->first_open();
}

void hooks_context_gone(uint64_t ctx)
{
    const struct shim_hooks *h = __atomic_load_n(&given, __ATOMIC_ACQUIRE);
    if (h && h->context_gone) h->context_gone(ctx);
}

void hooks_context_ending(uint64_t ctx)
{
    const struct shim_hooks *h = __atomic_load_n(&given, __ATOMIC_ACQUIRE);
    if (h && h->context_ending) h->context_ending(ctx);
}

void hooks_mover_started(void)
{
    const struct shim_hooks *h = __atomic_load_n(&given, __ATOMIC_ACQUIRE);
    if (h && h->mover_started) h->mover_started();
}
