/* test_check.h: the checks the simulator's Criterion suites share: a CUDA
 * call that must succeed (OK) or fail with a given code (FAILS), and the
 * same in forked children, which report on stderr and return 1 instead of
 * asserting (CHILD_OK, CHILD_FAILS, CHILD_EXPECT). */
#ifndef SIMCUDA_TEST_CHECK_H
#define SIMCUDA_TEST_CHECK_H

#include <criterion/criterion.h>
#include <cuda.h>
#include <stdio.h>

#define OK(expr)                                                                                   \
    do {                                                                                           \
        CUresult r_ = (expr);                                                                      \
        cr_assert_eq(r_, CUDA_SUCCESS, "%s returned %d", #expr, (int)r_);                          \
    } while (0)
#define FAILS(expr, code)                                                                          \
    do {                                                                                           \
        CUresult r_ = (expr);                                                                      \
        cr_assert_eq(r_, (code), "%s returned %d, expected %d", #expr, (int)r_, (int)(code));      \
    } while (0)

/* In forked children: no Criterion asserts, report and fail. */
#define CHILD_OK(expr)                                                                             \
    do {                                                                                           \
        CUresult r_ = (expr);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "child line %d: %s returned %d\n", __LINE__, #expr, (int)r_);          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CHILD_FAILS(expr, code)                                                                    \
    do {                                                                                           \
        CUresult r_ = (expr);                                                                      \
        if (r_ != (code)) {                                                                        \
            fprintf(stderr, "child line %d: %s returned %d, expected %d\n", __LINE__, #expr,       \
                    (int)r_, (int)(code));                                                         \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CHILD_EXPECT(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "child line %d: %s is false\n", __LINE__, #cond);                      \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#endif
