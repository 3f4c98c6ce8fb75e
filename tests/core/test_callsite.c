/* test_callsite: core/callsite.h -- capture, interning, formatting, off.
 * The frames come from this test binary, built with -rdynamic below, so
 * the capturing function shows by name; the end-to-end tests check the
 * same through the shim (tests/e2e/test_leaks.c). */
#include "callsite.h"

#include <criterion/criterion.h>
#include <string.h>

TestSuite(callsite, .timeout = 30);

/* The named-frame checks need the test's own frames as the unwinder sees
 * them in an ordinary build; AddressSanitizer's instrumentation (scripts/test
 * runs this suite again under it) adds and renames frames. */
#if defined(__SANITIZE_ADDRESS__)
#define SKIP_UNDER_ASAN()                                                                          \
    cr_skip_test("frame names differ under AddressSanitizer; checked in the plain build")
#else
#define SKIP_UNDER_ASAN() ((void)0)
#endif

__attribute__((noinline, visibility("default"))) uint32_t callsite_test_capture_here(void)
{
    uint32_t id = callsite_capture();
    __asm__ volatile("" ::: "memory"); /* no tail call */
    return id;
}

__attribute__((noinline, visibility("default"))) uint32_t callsite_test_other_site(void)
{
    uint32_t id = callsite_capture();
    __asm__ volatile("" ::: "memory");
    return id;
}

Test(callsite, off_at_depth_0)
{
    callsite_init(0);
    cr_assert_eq(callsite_capture(), 0);
    char buf[64];
    cr_assert_str_eq(callsite_format(0, buf, sizeof buf), "unknown");
}

Test(callsite, same_stack_same_id_and_named_frames)
{
    SKIP_UNDER_ASAN();
    callsite_init(4);
    uint32_t ids[2];
    volatile int n = 2; /* an unknown trip count: one call instruction, not peeled */
    for (int i = 0; i < n; i++)
        ids[i & 1] = callsite_test_capture_here();
    uint32_t a = ids[0], b = ids[1];
    cr_assert_neq(a, 0);
    char fa[64], fb[64], text[1024];
    cr_assert_str_eq(callsite_function(a, fa, sizeof fa), "callsite_test_capture_here");
    cr_assert_str_eq(callsite_function(b, fb, sizeof fb), "callsite_test_capture_here");
    callsite_format(a, text, sizeof text);
    cr_assert(strstr(text, "callsite_test_capture_here+"), "%s", text);
    cr_assert_eq(a, b, "one call site in a loop, one interned id");
    uint32_t o = callsite_test_other_site();
    cr_assert_neq(o, a, "another function, another id");
    cr_assert_str_eq(callsite_function(o, fa, sizeof fa), "callsite_test_other_site");
}

Test(callsite, depth_limits_the_frames_shown)
{
    SKIP_UNDER_ASAN();
    callsite_init(1);
    char text[1024];
    callsite_format(callsite_test_capture_here(), text, sizeof text);
    cr_assert(strstr(text, "callsite_test_capture_here+"), "%s", text);
    cr_assert_null(strstr(text, " < "), "one frame at depth 1: %s", text);
}

/* An entry point as the shim's are (shim/entry.c): it marks where the
 * program's call returns to before capturing. */
__attribute__((noinline, visibility("default"))) uint32_t callsite_test_entry(void)
{
    callsite_mark(__builtin_return_address(0), (void *const *)__builtin_frame_address(0) + 1);
    uint32_t id = callsite_capture();
    callsite_mark(NULL, NULL);
    __asm__ volatile("" ::: "memory");
    return id;
}

/* One helper calling the entry, reached from two callers with frames alike:
 * the entry's return address and its stack word are the same for both, only
 * an outer frame tells them apart. */
__attribute__((noinline, visibility("default"))) uint32_t callsite_test_helper(void)
{
    uint32_t id = callsite_test_entry();
    __asm__ volatile("" ::: "memory");
    return id;
}
__attribute__((noinline, visibility("default"))) uint32_t callsite_test_caller_a(void)
{
    uint32_t id = callsite_test_helper();
    __asm__ volatile("" ::: "memory");
    return id;
}
__attribute__((noinline, visibility("default"))) uint32_t callsite_test_caller_b(void)
{
    uint32_t id = callsite_test_helper();
    __asm__ volatile("" ::: "memory");
    return id;
}

Test(callsite, marked_captures_are_memoised_and_never_mixed_up)
{
    SKIP_UNDER_ASAN();
    callsite_init(4);
    uint32_t a[4], b[4];
    uint64_t hits0 = callsite_memo_hits();
    volatile int n = 4;
    for (int i = 0; i < n; i++) {
        a[i] = callsite_test_caller_a();
        b[i] = callsite_test_caller_b();
    }
    char text[1024];
    callsite_format(a[0], text, sizeof text);
    cr_assert(strstr(text, "callsite_test_caller_a+"), "%s", text);
    cr_assert_null(strstr(text, "callsite_test_caller_b"), "%s", text);
    callsite_format(b[0], text, sizeof text);
    cr_assert(strstr(text, "callsite_test_caller_b+"), "%s", text);
    cr_assert_null(strstr(text, "callsite_test_caller_a"), "%s", text);
    for (int i = 1; i < 4; i++) {
        cr_assert_eq(a[i], a[0], "the same calls, the same id");
        cr_assert_eq(b[i], b[0], "the same calls, the same id");
    }
    cr_assert_neq(a[0], b[0], "another outer caller, another id");
    cr_assert_gt(callsite_memo_hits(), hits0, "answered without unwinding");
    /* Another depth: the memo's ids are not reused for it. */
    callsite_init(1);
    callsite_format(callsite_test_caller_a(), text, sizeof text);
    cr_assert_null(strstr(text, " < "), "one frame at depth 1: %s", text);
}
