/* Tests of swap_extent: the learned extent rule (next start seen, else the
 * block's end) and its bound. */
#include <criterion/criterion.h>
#include <errno.h>

#include "swap_extent.h"

#define MIB (1024ULL * 1024ULL)

static struct swap_extent x;

static void setup(void)
{
    swap_extent_init(&x, 20 * MIB);
}
static void teardown(void)
{
    swap_extent_fini(&x);
}
TestSuite(swap_extent, .init = setup, .fini = teardown);

Test(swap_extent, an_unknown_block_runs_to_its_end)
{
    cr_assert_eq(swap_extent_next(&x, 0), 20 * MIB);
    cr_assert_eq(swap_extent_next(&x, 9 * MIB), 20 * MIB);
}

Test(swap_extent, an_access_runs_to_the_next_start_above_it)
{
    cr_assert_eq(swap_extent_add(&x, 12 * MIB), 0);
    cr_assert_eq(swap_extent_add(&x, 4 * MIB), 0);
    cr_assert_eq(swap_extent_add(&x, 0), 0);
    cr_assert_eq(swap_extent_next(&x, 0), 4 * MIB);
    cr_assert_eq(swap_extent_next(&x, 4 * MIB), 12 * MIB, "its own start does not end it");
    cr_assert_eq(swap_extent_next(&x, 5 * MIB), 12 * MIB);
    cr_assert_eq(swap_extent_next(&x, 12 * MIB), 20 * MIB);
    cr_assert_eq(x.n, 3);
}

Test(swap_extent, a_start_is_kept_once)
{
    for (int i = 0; i < 5; i++)
        cr_assert_eq(swap_extent_add(&x, 8 * MIB), 0);
    cr_assert_eq(x.n, 1);
    cr_assert_eq(swap_extent_next(&x, 1), 8 * MIB);
}

Test(swap_extent, a_start_outside_the_block_is_refused)
{
    cr_assert_eq(swap_extent_add(&x, 20 * MIB), -EINVAL);
    cr_assert_eq(x.n, 0);
}

Test(swap_extent, past_the_bound_extents_stay_longer_never_shorter)
{
    for (uint32_t i = 0; i < SWAP_EXTENT_MAX_STARTS; i++)
        cr_assert_eq(swap_extent_add(&x, 2 * MIB + 512ULL * i), 0);
    cr_assert_eq(x.n, SWAP_EXTENT_MAX_STARTS);
    cr_assert_eq(swap_extent_add(&x, 4096), -ENOSPC);
    cr_assert(x.full);
    cr_assert_eq(swap_extent_next(&x, 0), 2 * MIB, "the dropped start does not cut the extent");
    cr_assert_eq(swap_extent_add(&x, 2 * MIB), 0, "a known start is still fine");
    cr_assert_leq(x.cap, SWAP_EXTENT_MAX_STARTS, "memory stays bounded");
}

Test(swap_extent, fini_forgets_and_init_needs_no_memory)
{
    cr_assert_eq(swap_extent_add(&x, 3), 0);
    swap_extent_fini(&x);
    cr_assert_eq(x.n, 0);
    cr_assert_null(x.starts);
    cr_assert_eq(swap_extent_next(&x, 0), 20 * MIB);
}
