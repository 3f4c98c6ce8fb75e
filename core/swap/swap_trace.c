/* swap_trace: reader and writer of the text trace format described in
 * swap_trace.h. The reader is strict (a malformed
 * line is an error with its line number) so that a truncated or foreign file
 * is not silently replayed as something else. */
#include "swap_trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_HEADER "# ipcshim swap trace v1"

void swap_trace_fini(struct swap_trace *t)
{
    free(t->ev);
    *t = (struct swap_trace){0};
}

int swap_trace_push(struct swap_trace *t, struct swap_event e)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        struct swap_event *ev = realloc(t->ev, cap * sizeof(*ev));
        if (!ev) return -ENOMEM;
        t->ev = ev;
        t->cap = cap;
    }
    t->ev[t->n++] = e;
    return 0;
}

int swap_trace_write_event(FILE *f, const struct swap_event *e)
{
    int n;
    switch (e->kind) {
    case SWAP_EV_ACCESS:
        n = fprintf(f, "A 0x%" PRIx64 " %" PRIu64 " %c%s\n", e->block, e->bytes,
                    e->is_write ? 'w' : 'r', e->is_copy ? " c" : "");
        break;
    case SWAP_EV_FREE:
        n = fprintf(f, "F 0x%" PRIx64 "\n", e->block);
        break;
    case SWAP_EV_LAUNCH:
    case SWAP_EV_ITER:
        n = fprintf(f, "%c\n", e->kind);
        break;
    default:
        return -EINVAL;
    }
    return n < 0 ? -EIO : 0;
}

int swap_trace_write(FILE *f, const struct swap_trace *t)
{
    if (fprintf(f, "%s\n", TRACE_HEADER) < 0) return -EIO;
    for (size_t i = 0; i < t->n; i++) {
        int rc = swap_trace_write_event(f, &t->ev[i]);
        if (rc) return rc;
    }
    return fflush(f) ? -EIO : 0;
}

/* Parse a u64 field that must be followed by a space or the end of line. */
static bool parse_u64(char **s, uint64_t *out)
{
    char *end;
    if (**s < '0' || **s > '9') return false;
    errno = 0;
    unsigned long long v = strtoull(*s, &end, 0);
    if (errno || end == *s || (*end != ' ' && *end != '\0')) return false;
    *out = v;
    *s = *end ? end + 1 : end;
    return true;
}

static bool parse_line(char *s, struct swap_event *e)
{
    *e = (struct swap_event){.kind = (uint8_t)s[0]};
    switch (s[0]) {
    case 'L':
    case 'I':
        return s[1] == '\0';
    case 'F':
        s += 1;
        if (*s++ != ' ') return false;
        return parse_u64(&s, &e->block) && *s == '\0';
    case 'A':
        s += 1;
        if (*s++ != ' ') return false;
        if (!parse_u64(&s, &e->block) || !parse_u64(&s, &e->bytes) || e->bytes == 0) return false;
        if (s[0] != 'r' && s[0] != 'w') return false;
        e->is_write = s[0] == 'w';
        e->is_copy = s[1] == ' ' && s[2] == 'c' && s[3] == '\0';
        return s[1] == '\0' || e->is_copy;
    default:
        return false;
    }
}

int swap_trace_read(FILE *f, struct swap_trace *t, size_t *bad_line)
{
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0 || line[0] == '#') continue;
        struct swap_event e;
        if (!parse_line(line, &e)) {
            rc = -EINVAL;
            if (bad_line) *bad_line = lineno;
            break;
        }
        if ((rc = swap_trace_push(t, e))) break;
    }
    if (!rc && ferror(f)) rc = -EIO;
    free(line);
    return rc;
}

int swap_trace_save(const char *path, const struct swap_trace *t)
{
    FILE *f = fopen(path, "w");
    if (!f) return -errno;
    int rc = swap_trace_write(f, t);
    if (fclose(f) && !rc) rc = -EIO;
    return rc;
}

int swap_trace_load(const char *path, struct swap_trace *t, size_t *bad_line)
{
    FILE *f = fopen(path, "r");
    if (!f) return -errno;
    int rc = swap_trace_read(f, t, bad_line);
    fclose(f);
    return rc;
}
