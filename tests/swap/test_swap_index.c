/* Tests of swap_index: containment lookups and the kernel-parameter scanner. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "swap_index.h"

static struct swap_index *x;

static void setup(void)
{
    cr_assert_eq(swap_index_create(&x), 0);
}
static void teardown(void)
{
    swap_index_destroy(x);
}
TestSuite(swap_index, .init = setup, .fini = teardown);

static void add(uint64_t base, uint64_t size)
{
    struct swap_block b = {.base = base, .size = size, .charge = size, .device = 0};
    cr_assert_eq(swap_index_insert(x, &b), 0, "insert %#lx", (unsigned long)base);
}

Test(swap_index, finds_the_containing_block_interior_and_edges)
{
    add(0x1000, 0x100);
    add(0x3000, 0x1000);
    add(0x2000, 0x10);
    cr_expect_null(swap_index_find(x, 0xfff));
    cr_expect_eq(swap_index_find(x, 0x1000)->base, 0x1000);
    cr_expect_eq(swap_index_find(x, 0x10ff)->base, 0x1000);
    cr_expect_null(swap_index_find(x, 0x1100));
    cr_expect_eq(swap_index_find(x, 0x200f)->base, 0x2000);
    cr_expect_null(swap_index_find(x, 0x2010));
    cr_expect_eq(swap_index_find(x, 0x3fff)->base, 0x3000);
    cr_expect_null(swap_index_find(x, 0x4000));
    cr_expect_null(swap_index_find(x, 0));
    cr_expect_null(swap_index_find(x, UINT64_MAX));
    cr_expect_eq(swap_index_count(x), 3);
}

Test(swap_index, rejects_overlaps_and_removes_by_base)
{
    add(0x1000, 0x100);
    struct swap_block b = {.base = 0x10f0, .size = 0x20};
    cr_expect_eq(swap_index_insert(x, &b), -EEXIST);
    b.base = 0xff0;
    cr_expect_eq(swap_index_insert(x, &b), -EEXIST);
    b.size = 0;
    cr_expect_eq(swap_index_insert(x, &b), -EINVAL);
    cr_expect_eq(swap_index_remove(x, 0x1010, NULL), -ENOENT);
    struct swap_block out;
    cr_expect_eq(swap_index_remove(x, 0x1000, &out), 0);
    cr_expect_eq(out.size, 0x100);
    cr_expect_null(swap_index_find(x, 0x1000));
    cr_expect_eq(swap_index_count(x), 0);
}

Test(swap_index, many_blocks_in_random_order)
{
    enum { N = 1000 };
    for (unsigned i = 0; i < N; i++)
        add(0x100000 + (uint64_t)((i * 7919u) % N) * 0x1000, 0x800);
    for (unsigned k = 0; k < N; k++) {
        uint64_t base = 0x100000 + (uint64_t)k * 0x1000;
        cr_assert_eq(swap_index_find(x, base + 0x7ff)->base, base);
        cr_assert_null(swap_index_find(x, base + 0x800));
    }
    for (unsigned k = 0; k < N; k += 2)
        cr_assert_eq(swap_index_remove(x, 0x100000 + (uint64_t)k * 0x1000, NULL), 0);
    cr_expect_null(swap_index_find(x, 0x100000));
    cr_expect_eq(swap_index_find(x, 0x101000)->base, 0x101000);
}

Test(swap_index, filter_keeps_only_parameters_that_can_hold_a_pointer)
{
    /* (int, float*, char, struct{int; void*} by value, float2 at 4-aligned offset) */
    uint64_t off[] = {0, 8, 16, 24, 40};
    uint64_t size[] = {4, 8, 1, 16, 8};
    struct swap_param p[5];
    size_t n = swap_param_filter(off, size, 5, p);
    cr_assert_eq(n, 3);
    cr_expect_eq(p[0].index, 1);
    cr_expect_eq(p[1].index, 3);
    cr_expect_eq(p[1].size, 16);
    cr_expect_eq(p[2].index, 4);
    uint64_t off2[] = {4};
    uint64_t size2[] = {8};
    cr_expect_eq(swap_param_filter(off2, size2, 1, p), 0);
}

Test(swap_index, scans_pointers_interior_pointers_and_structs_once_each)
{
    add(0x10000, 0x1000);
    add(0x20000, 0x1000);
    add(0x30000, 0x1000);
    int n = 5;
    uint64_t a = 0x10000, b_interior = 0x20010, a_again = 0x10008, stranger = 0x40000;
    struct {
        int k;
        uint64_t inner;
    } s = {3, 0x30ff8};
    void *args[] = {&n, &a, &b_interior, &a_again, &stranger, &s};
    uint64_t off[] = {0, 8, 16, 24, 32, 40};
    uint64_t size[] = {4, 8, 8, 8, 8, 16};
    struct swap_param p[6];
    size_t np = swap_param_filter(off, size, 6, p);
    struct swap_touch t = {0};
    swap_index_scan_args(x, args, p, np, &t);
    cr_assert_eq(t.n, 3);
    cr_expect_eq(t.block[0]->base, 0x10000);
    cr_expect_eq(t.block[1]->base, 0x20000);
    cr_expect_eq(t.block[2]->base, 0x30000);
    cr_expect_not(t.overflow);
}

Test(swap_index, scans_a_packed_buffer)
{
    add(0x10000, 0x1000);
    unsigned char buf[24] = {0};
    uint64_t v = 0x10100;
    memcpy(buf + 16, &v, 8);
    memcpy(buf + 4, &v, 8); /* misaligned: not a pointer slot */
    struct swap_touch t = {0};
    swap_index_scan_buffer(x, buf, 12, &t);
    cr_expect_eq(t.n, 0);
    swap_index_scan_buffer(x, buf, sizeof buf, &t);
    cr_expect_eq(t.n, 1);
}

Test(swap_index, empty_index_scans_nothing)
{
    uint64_t a = 0x10000;
    void *args[] = {&a};
    struct swap_param p = {0, 0, 8};
    struct swap_touch t = {0};
    swap_index_scan_args(x, args, &p, 1, &t);
    cr_expect_eq(t.n, 0);
    cr_expect_null(swap_index_touch(x, 0x10000, &t));
}
