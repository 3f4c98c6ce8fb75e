/* options: parse the IPCSHIM_* environment into the one options table.
 * The table itself is options.def; this file only knows the value types.
 *
 * Secure execution (setuid/setgid programs, file capabilities: AT_SECURE)
 * obeys no variable: secure_getenv answers NULL there, so such a process
 * runs on the defaults, with its registry in the default place, no log or
 * trace file, and nothing the invoking user wrote reaching its output. */
#include "options.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stddef.h>
#include <sys/auxv.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static struct options current;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool loaded; /* set (release) once load_once has run: the hot path's check */

int options_parse_bool(const char *s, bool *out)
{
    static const char *yes[] = {"1", "yes", "on", "true"}, *no[] = {"0", "no", "off", "false"};
    for (unsigned i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return *out = true, 0;
        if (!strcasecmp(s, no[i])) return *out = false, 0;
    }
    return -EINVAL;
}

/* Parses an unsigned number followed by a suffix; *rest gets the suffix. */
static int parse_number(const char *s, uint64_t *n, const char **rest)
{
    char *end;
    if (!isdigit((unsigned char)*s)) return -EINVAL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -EINVAL;
    *n = v;
    *rest = end;
    return 0;
}

int options_parse_size(const char *s, uint64_t *out)
{
    uint64_t n, mult = 1;
    const char *suf;
    if (parse_number(s, &n, &suf)) return -EINVAL;
    switch (toupper((unsigned char)*suf)) {
    case 0:
        break;
    case 'K':
        mult = 1ull << 10;
        break;
    case 'M':
        mult = 1ull << 20;
        break;
    case 'G':
        mult = 1ull << 30;
        break;
    case 'T':
        mult = 1ull << 40;
        break;
    default:
        return -EINVAL;
    }
    if (*suf && suf[1] && strcasecmp(suf + 1, "B") && strcasecmp(suf + 1, "iB")) return -EINVAL;
    if (n > UINT64_MAX / mult) return -EINVAL;
    *out = n * mult;
    return 0;
}

int options_parse_ms(const char *s, uint64_t *out)
{
    uint64_t n, mult;
    const char *suf;
    if (parse_number(s, &n, &suf)) return -EINVAL;
    if (!*suf || !strcmp(suf, "s"))
        mult = 1000;
    else if (!strcmp(suf, "ms"))
        mult = 1;
    else if (!strcmp(suf, "m"))
        mult = 60000;
    else
        return -EINVAL;
    if (n > UINT64_MAX / mult) return -EINVAL;
    *out = n * mult;
    return 0;
}

/* Index of s in a '|'-separated list of choices, or -EINVAL. */
static int parse_choice(const char *s, const char *choices)
{
    int index = 0;
    size_t len = strlen(s);
    for (const char *c = choices; *c; index++) {
        const char *bar = strchr(c, '|');
        size_t n = bar ? (size_t)(bar - c) : strlen(c);
        if (n == len && !strncasecmp(c, s, n)) return index;
        if (!bar) break;
        c = bar + 1;
    }
    return -EINVAL;
}

/* One parser per value type, named after it for options.def; some types
 * may have no option yet. */
#define PARSER static __attribute__((unused)) int
PARSER parse_BOOL(const char *s, opt_BOOL *v, const char *ch)
{
    (void)ch;
    return options_parse_bool(s, v);
}
PARSER parse_SIZE(const char *s, opt_SIZE *v, const char *ch)
{
    (void)ch;
    return options_parse_size(s, v);
}
PARSER parse_MS(const char *s, opt_MS *v, const char *ch)
{
    (void)ch;
    return options_parse_ms(s, v);
}
PARSER parse_STRING(const char *s, opt_STRING *v, const char *ch)
{
    (void)ch;
    *v = s;
    return 0;
}
/* A name that becomes part of a file name (the registry's): 1-64 of
 * [A-Za-z0-9._-], as registry_name() requires (REG_DOMAIN_MAX). */
PARSER parse_NAME(const char *s, opt_NAME *v, const char *ch)
{
    size_t n = strlen(s);
    (void)ch;
    if (n < 1 || n > 64) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i])) return -EINVAL;
    *v = s;
    return 0;
}
PARSER parse_CHOICE(const char *s, opt_CHOICE *v, const char *ch)
{
    int i = parse_choice(s, ch);
    if (i < 0) return i;
    *v = i;
    return 0;
}
PARSER parse_COUNT(const char *s, opt_COUNT *v, const char *ch)
{
    const char *rest;
    (void)ch;
    if (parse_number(s, v, &rest) || *rest) return -EINVAL;
    return 0;
}

/* What a value of each type looks like, for the line about a bad one. */
static const char *expected(const char *type, const char *choices, char *buf, size_t len)
{
    if (!strcmp(type, "BOOL")) return "1, yes, on, true or 0, no, off, false";
    if (!strcmp(type, "SIZE")) return "bytes, or a number with a K, M, G or T suffix";
    if (!strcmp(type, "MS"))
        return "a duration such as 500ms, 30s or 2m (a bare number is seconds)";
    if (!strcmp(type, "COUNT")) return "a whole number";
    if (!strcmp(type, "NAME")) return "1-64 of A-Z a-z 0-9 . _ -";
    if (!strcmp(type, "CHOICE")) {
        snprintf(buf, len, "one of %s", choices);
        return buf;
    }
    return "text";
}

/* Upper-cases a field name and prefixes it: "max_blocks" -> "IPCSHIM_MAX_BLOCKS". */
static void env_name(const char *field, char *buf, size_t len)
{
    int n = snprintf(buf, len, "IPCSHIM_%s", field);
    for (int i = 8; i < n && (size_t)i < len; i++)
        buf[i] = (char)toupper((unsigned char)buf[i]);
}

/* FNV-1a over a string, continuing from h. */
static uint64_t hash_str(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator: "ab"+"c" is not "a"+"bc" */
}

/* Bad values are said once per domain, not by every process of a job:
 * the first process of this user and domain that meets these bad values
 * (hash) binds an abstract socket named after them, and keeps it while it
 * lives; a process that finds the name held by a live process of the same
 * user stays quiet. An abstract name is no file: nothing is left behind, and
 * it goes when its holder exits (or closes every descriptor: then the next
 * process says it again). Held by another user (a squatter, whom the peer
 * credentials tell apart), or on any error: say it. Trap: the holder never
 * accepts, so every check leaves a connection in its queue until it exits;
 * the queue is SOMAXCONN long and the check's connect never blocks (a full
 * queue, EAGAIN: say it). */
static bool first_to_say(const char *domain, uint64_t hash)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "ipcshim-bad-options-%u-%.64s-%016llx",
                     (unsigned)geteuid(), domain, (unsigned long long)hash);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return true;
    if (bind(s, (struct sockaddr *)&a, len) == 0 && listen(s, SOMAXCONN) == 0)
        return true; /* ours now: kept open on purpose, for as long as we live */
    close(s);
    s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct ucred peer = {0};
    socklen_t plen = sizeof peer;
    bool said = s >= 0 && connect(s, (struct sockaddr *)&a, len) == 0 &&
                getsockopt(s, SOL_SOCKET, SO_PEERCRED, &peer, &plen) == 0 && peer.uid == geteuid();
    if (s >= 0) close(s);
    return !said;
}

/* A value that did not parse, or an IPCSHIM_* name that is no setting
 * (type NULL, closest: the known name nearest to it), kept to be said once
 * the log is set up. */
struct bad_value {
    char name[64];
    const char *value, *type, *choices, *def, *help, *closest;
};

/* IPCSHIM_* names that are not the library's settings but are read by the
 * commands (docs/environment.md, "Commands") or by the test suites: never
 * reported as unknown, and offered as the closest name like any other. */
static const char *const other_names[] = {
    "IPCSHIM_LIBRARY",     "IPCSHIM_BUILD_DIR", "IPCSHIM_APT_LOCK_WAIT",   "IPCSHIM_LIB",
    "IPCSHIM_SOAK_ROUNDS", "IPCSHIM_SOAK_SEED", "IPCSHIM_THIRDPARTY_VENV",
};

/* Edit distance between a and b (at most 63 characters of each), ignoring
 * underscores: IPCSHIM_EXITWAIT is IPCSHIM_EXIT_WAIT misspelled by 0. */
static unsigned distance(const char *a, const char *b)
{
    char x[64], y[64];
    size_t n = 0, m = 0;
    for (; *a && n < sizeof x - 1; a++)
        if (*a != '_') x[n++] = (char)toupper((unsigned char)*a);
    for (; *b && m < sizeof y - 1; b++)
        if (*b != '_') y[m++] = (char)toupper((unsigned char)*b);
    unsigned row[64];
    for (size_t j = 0; j <= m; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= n; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= m; j++) {
            unsigned up = row[j], best = diag + (x[i - 1] != y[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m];
}

/* True when the words of a (split at '_') begin with all the words of b:
 * IPCSHIM_LOG_LEVEL begins with IPCSHIM_LOG. */
static bool word_prefix(const char *a, const char *b)
{
    size_t n = strlen(b);
    return strncasecmp(a, b, n) == 0 && (a[n] == '_' || a[n] == 0);
}

/* How far an unknown name is from a known one: a known name whose words
 * begin the unknown one (IPCSHIM_LOG for IPCSHIM_LOG_LEVEL) counts as one
 * edit, else the edit distance. */
static unsigned name_distance(const char *unknown, const char *known)
{
    unsigned d = distance(unknown, known);
    return word_prefix(unknown, known) && d > 1 ? 1 : d;
}

/* Whether name (NAME=... in the environment, n characters) is a setting or
 * one of other_names; if not, *closest gets the nearest of both. */
static bool known_name(const char *name, const char **closest)
{
    static const char *const settings[] = {
#define OPT(field, type, def, choices, help) "IPCSHIM_" #field,
#include "options.def"
#undef OPT
    };
    unsigned best = ~0u;
    char upper[64];
    for (size_t i = 0; i < sizeof settings / sizeof *settings; i++) {
        env_name(settings[i] + 8, upper, sizeof upper);
        if (!strcmp(upper, name)) return true;
        unsigned d = name_distance(name, upper);
        if (d < best) best = d, *closest = settings[i];
    }
    for (size_t i = 0; i < sizeof other_names / sizeof *other_names; i++) {
        if (!strcmp(other_names[i], name)) return true;
        unsigned d = name_distance(name, other_names[i]);
        if (d < best) best = d, *closest = other_names[i];
    }
    return false;
}

extern char **environ;

/* Adds each IPCSHIM_* name of the environment that is no setting to bad[]
 * (never in secure execution: the environment is not ours to read there). */
static void find_unknown_names(struct bad_value *bad, unsigned *nbad, unsigned max)
{
    if (options_secure()) return;
    for (char **e = environ; e && *e && *nbad < max; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "IPCSHIM_", 8) || !eq) continue;
        struct bad_value b = {.value = eq + 1};
        snprintf(b.name, sizeof b.name, "%.*s", (int)(eq - *e), *e);
        if (!known_name(b.name, &b.closest)) bad[(*nbad)++] = b;
    }
}

static void load(void)
{
    struct bad_value bad[64];
    unsigned nbad = 0;
    char name[64], want[96];
    const char *value;
    /* Defaults first, so a bad value of one option never leaves another unset. */
#define OPT(field, type, def, choices, help) parse_##type(def, &current.field, choices);
#include "options.def"
#undef OPT
#define OPT(field, type, def, choices, help)                                                       \
    env_name(#field, name, sizeof name);                                                           \
    if ((value = secure_getenv(name)) && *value && parse_##type(value, &current.field, choices)) { \
        parse_##type(def, &current.field, choices); /* a parser may have stored a partial value */ \
        if (nbad < sizeof bad / sizeof *bad) {                                                     \
            bad[nbad] = (struct bad_value){"", value, #type, choices, def, help, NULL};            \
            snprintf(bad[nbad++].name, sizeof bad->name, "%s", name);                              \
        }                                                                                          \
    }
#include "options.def"
#undef OPT
    find_unknown_names(bad, &nbad, sizeof bad / sizeof *bad);
    /* Said after the whole table is read, so that the log's own settings
     * apply; and by one process of the domain (first_to_say). */
    log_configure(current.log, current.log_file);
    if (!nbad) return;
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned k = 0; k < nbad; k++)
        hash = hash_str(hash_str(hash, bad[k].name), bad[k].value);
    if (!first_to_say(current.domain, hash)) {
        log_msg(LOG_DEBUG,
                "%u bad IPCSHIM_* value(s): already said by another process of domain %s", nbad,
                current.domain);
        return;
    }
    for (unsigned k = 0; k < nbad; k++) {
        const struct bad_value *b = &bad[k];
        if (!b->type) {
            char closest[64];
            env_name(b->closest + 8, closest, sizeof closest);
            log_msg(LOG_WARN, "%s is not an ipcshim setting (did you mean %s?); ignored", b->name,
                    closest);
            continue;
        }
        log_msg(LOG_ERROR, "%s=%s is not valid: expected %s; using the default %s%s (%s)", b->name,
                b->value, expected(b->type, b->choices, want, sizeof want), b->def,
                *b->def ? "" : "\"\"", b->help);
    }
}

static void load_once(void)
{
    load();
    if (options_secure())
        log_msg(LOG_DEBUG, "secure execution: IPCSHIM_* variables ignored, defaults in effect");
    if (current.log >= LOG_INFO) options_log();
    __atomic_store_n(&loaded, true, __ATOMIC_RELEASE);
}

bool options_secure(void)
{
    return getauxval(AT_SECURE) != 0;
}

const struct options *options_get(void)
{
    if (__builtin_expect(!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE), 0))
        pthread_once(&once, load_once);
    return &current;
}

void options_reload(void)
{
    pthread_once(&once, load_once);
    load();
}

static void options_log_one(const char *name, const char *type, const void *v, const char *choices);

void options_log(void)
{
    char name[64];
    log_msg(LOG_INFO, "options in effect:");
#define OPT(field, type, def, choices, help)                                                       \
    env_name(#field, name, sizeof name);                                                           \
    options_log_one(name, #type, &current.field, choices);
#include "options.def"
#undef OPT
}

/* Formats one option's value for options_log(). */
static void options_log_one(const char *name, const char *type, const void *v, const char *choices)
{
    if (!strcmp(type, "BOOL"))
        log_msg(LOG_INFO, "  %s=%s", name, *(const bool *)v ? "on" : "off");
    else if (!strcmp(type, "STRING") || !strcmp(type, "NAME"))
        log_msg(LOG_INFO, "  %s=%s", name, *(const char *const *)v);
    else if (!strcmp(type, "MS"))
        log_msg(LOG_INFO, "  %s=%llums", name, (unsigned long long)*(const uint64_t *)v);
    else if (!strcmp(type, "CHOICE")) {
        int index = *(const int *)v;
        const char *c = choices;
        for (int i = 0; i < index && c; i++)
            c = strchr(c, '|'), c = c ? c + 1 : c;
        const char *bar = c ? strchr(c, '|') : NULL;
        log_msg(LOG_INFO, "  %s=%.*s", name, c ? (int)(bar ? bar - c : (long)strlen(c)) : 1,
                c ? c : "?");
    } else
        log_msg(LOG_INFO, "  %s=%llu", name, (unsigned long long)*(const uint64_t *)v);
}
