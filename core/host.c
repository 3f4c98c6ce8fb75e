/* host: the table of the host's operations (see host.h). One pointer per
 * member, each written with a release store and read with an acquire load,
 * so that a member installed while other threads run is seen whole. */
#include "host.h"

#include <stddef.h>

static struct host installed;

void host_set(const struct host *h)
{
    if (h->free_block) __atomic_store_n(&installed.free_block, h->free_block, __ATOMIC_RELEASE);
    if (h->unwind) __atomic_store_n(&installed.unwind, h->unwind, __ATOMIC_RELEASE);
}

host_free_block_fn *host_free_block(void)
{
    return __atomic_load_n(&installed.free_block, __ATOMIC_ACQUIRE);
}

host_unwind_fn *host_unwind(void)
{
    return __atomic_load_n(&installed.unwind, __ATOMIC_ACQUIRE);
}
