/* run.h: running an end-to-end program on the simulated machine, with or
 * without the shim preloaded, and reading what it printed.
 *
 * Each test gets its own simulated machine and registry domain, named after
 * the test and its pid, and removes both when it ends (run_cleanup). The
 * build folders come from the environment meson sets for these tests:
 * E2E_BIN_DIR, IPCSHIM_LIB, SIMCUDA_DIR. */
#ifndef E2E_RUN_H
#define E2E_RUN_H

#include <stdbool.h>
#include <stddef.h>

struct run_result {
    int status; /* exit status, or 128 + signal */
    char out[16384];
};

/* NULL-terminated argument and environment lists for run_prog. */
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define ENV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* In a Criterion test: r's output has the line "key: value" (run_field). */
#define RUN_EXPECT_FIELD(r, key, value)                                                            \
    do {                                                                                           \
        char got_[256];                                                                            \
        const char *g_ = run_field((r), (key), got_, sizeof got_);                                 \
        cr_assert(g_, "no \"%s\" line in:\n%s", (key), (r)->out);                                  \
        cr_expect_str_eq(g_, (value), "%s: %s (expected %s)", (key), g_, (value));                 \
    } while (0)

/* Name this test's machine and domain; call from .init. */
void run_setup(const char *test_name);

/* Remove this test's shared-memory objects; call from .fini. */
void run_cleanup(void);

/* Run E2E_BIN_DIR/prog (or prog itself when it is an absolute path) with the NULL-terminated argv
 * tail, under the shim when shim is true, with extra "NAME=value" environment entries (NULL-
 * terminated list, may be NULL). Captures stdout. */
void run_prog(struct run_result *r, const char *prog, bool shim, const char *const *env,
              const char *const *args);

/* The value after "key" on its line in out ("consumer 0: ok" -> "ok"), or NULL. */
const char *run_field(const struct run_result *r, const char *key, char *buf, size_t len);

/* Number of lines of out that start with prefix. */
int run_count(const struct run_result *r, const char *prefix);

#endif
