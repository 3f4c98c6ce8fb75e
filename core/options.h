/* options: the one table of settings, read once from IPCSHIM_* variables.
 *
 * options_get() parses the environment on first use (thread-safe) and never
 * fails: a bad value logs one warning and keeps the default. Nothing else in
 * the library reads IPCSHIM_* names, and in secure execution (a setuid
 * program) none is obeyed: options_secure(). */
#ifndef OPTIONS_H
#define OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

typedef bool opt_BOOL;
typedef uint64_t opt_SIZE;
typedef uint64_t opt_COUNT;
typedef uint64_t opt_MS;
typedef const char *opt_STRING;
typedef const char *opt_NAME; /* 1-64 of [A-Za-z0-9._-] */
typedef int opt_CHOICE;       /* an index into the option's choices ("log": LOG_* in log.h) */

struct options {
#define OPT(field, type, def, choices, help) opt_##type field;
#include "options.def"
#undef OPT
};

enum { HANDOFF_SEND, HANDOFF_WINDOW };         /* indices of "handoff" */
enum { SWAP_OPT_HISTORY, SWAP_OPT_LRU };       /* indices of "swap_policy" */
enum { SWAP_ENGINE_VMM, SWAP_ENGINE_MANAGED }; /* indices of "swap_engine" */
enum { SWAP_MOVER_THREAD, SWAP_MOVER_INLINE }; /* indices of "swap_mover" */

/* The options in effect. Parsed once; the pointer stays valid forever. */
const struct options *options_get(void);

/* True in secure execution (AT_SECURE: setuid/setgid, capabilities): the
 * environment is the invoking user's, so no IPCSHIM_* variable is obeyed. */
bool options_secure(void);

/* Re-read the environment (tests only; not thread-safe against readers). */
void options_reload(void);

/* Log every option and its value at info level. */
void options_log(void);

/* Parsers, exposed for tests. Each returns 0, or -EINVAL on a bad value. */
int options_parse_bool(const char *s, bool *out);
int options_parse_size(const char *s, uint64_t *out);
int options_parse_ms(const char *s, uint64_t *out);

#endif
