/* swap_gen_lib: the synthetic trace generator (see swap_gen.h).
 *
 * A model of L layers. Blocks, each a separate allocation (ids spaced like
 * device pointers), sizes log-normal and rounded up to 2 MiB, drawn once
 * from the seed:
 *   W[l] weights, dW[l] gradients (same size), M[l] V[l] Adam state (same
 *   size), A[0..L] activations (A[0] is the input batch), G[0..1] two
 *   ping-pong activation-gradient buffers (the largest activation), a small
 *   loss block and a small stats block.
 * One training iteration, one launch per line:
 *   copy-in       w A[0]
 *   forward l     r W[l], r A[l-1], w A[l]                for l = 1..L
 *   loss          r A[L], w G[L%2], w loss
 *   dgrad l       r W[l], r G[l%2], w G[(l-1)%2]          for l = L..1
 *   wgrad l       r A[l-1], r G[l%2], w dW[l]
 *   adam l        w W[l], r dW[l], w M[l], w V[l]         for l = 1..L
 * infer: copy-in, then forward with activations ping-ponging between two
 * buffers and a small output block; weights are only read. accum: copy-in
 * .. wgrad accum_steps times, then adam. jitter: train with every
 * activation's size redrawn within +-jitter each iteration (same ids: the
 * caching allocator keeps its segments) and, one iteration in four, an
 * extra stats kernel after a random forward layer. */
#include "swap_gen.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024.0 * 1024.0)
#define GRANULE (2u << 20)
#define ID_BASE 0x7f0000000000ULL
#define ID_STRIDE 0x40000000ULL

struct gen {
    const struct swap_gen_params *g;
    struct swap_trace *t;
    uint64_t rng;
    int rc;
};

static uint64_t next_u64(struct gen *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(struct gen *s)
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

/* Standard normal by Irwin-Hall (sum of 12 uniforms - 6): good enough and
 * needs no libm beyond exp(). */
static double normal(struct gen *s)
{
    double x = -6.0;
    for (int i = 0; i < 12; i++)
        x += uniform(s);
    return x;
}

static uint64_t round_up(double bytes)
{
    uint64_t b = (uint64_t)bytes;
    if (b < GRANULE) b = GRANULE;
    return (b + GRANULE - 1) / GRANULE * GRANULE;
}

static uint64_t lognormal(struct gen *s, double median_mib, double sigma)
{
    double z = normal(s);
    if (z > 3.0) z = 3.0;
    if (z < -3.0) z = -3.0;
    return round_up(median_mib * MiB * exp(sigma * z));
}

static void acc(struct gen *s, uint64_t id, uint64_t bytes, bool w)
{
    if (!s->rc)
        s->rc = swap_trace_push(
            s->t, (struct swap_event){
                      .kind = SWAP_EV_ACCESS, .block = id, .bytes = bytes, .is_write = w});
}

static void mark(struct gen *s, enum swap_event_kind k)
{
    if (!s->rc) s->rc = swap_trace_push(s->t, (struct swap_event){.kind = (uint8_t)k});
}

struct model {
    unsigned L;
    uint64_t *w, *a, *a_now; /* sizes; a_now: this iteration's (jitter) */
    uint64_t g_size;
};

/* Block ids: one range per role so that a trace reads well. */
enum { R_W, R_DW, R_M, R_V, R_A, R_G, R_MISC };
static uint64_t bid(unsigned role, unsigned i)
{
    return ID_BASE + ((uint64_t)role * 4096 + i) * ID_STRIDE;
}

static void train_pass(struct gen *s, struct model *m)
{
    unsigned L = m->L;
    acc(s, bid(R_A, 0), m->a_now[0], true);
    mark(s, SWAP_EV_LAUNCH);
    int extra = -1;
    if (s->g->variant == SWAP_GEN_JITTER && uniform(s) < 0.25) extra = 1 + (int)(uniform(s) * L);
    for (unsigned l = 1; l <= L; l++) {
        acc(s, bid(R_W, l), m->w[l], false);
        acc(s, bid(R_A, l - 1), m->a_now[l - 1], false);
        acc(s, bid(R_A, l), m->a_now[l], true);
        mark(s, SWAP_EV_LAUNCH);
        if ((int)l == extra) {
            acc(s, bid(R_A, l), m->a_now[l], false);
            acc(s, bid(R_MISC, 1), GRANULE, true);
            mark(s, SWAP_EV_LAUNCH);
        }
    }
    acc(s, bid(R_A, L), m->a_now[L], false);
    acc(s, bid(R_G, L % 2), m->g_size, true);
    acc(s, bid(R_MISC, 0), GRANULE, true);
    mark(s, SWAP_EV_LAUNCH);
    for (unsigned l = L; l >= 1; l--) {
        acc(s, bid(R_W, l), m->w[l], false);
        acc(s, bid(R_G, l % 2), m->g_size, false);
        acc(s, bid(R_G, (l - 1) % 2), m->g_size, true);
        mark(s, SWAP_EV_LAUNCH);
        acc(s, bid(R_A, l - 1), m->a_now[l - 1], false);
        acc(s, bid(R_G, l % 2), m->g_size, false);
        acc(s, bid(R_DW, l), m->w[l], true);
        mark(s, SWAP_EV_LAUNCH);
    }
}

static void adam(struct gen *s, struct model *m)
{
    for (unsigned l = 1; l <= m->L; l++) {
        acc(s, bid(R_W, l), m->w[l], true);
        acc(s, bid(R_DW, l), m->w[l], false);
        acc(s, bid(R_M, l), m->w[l], true);
        acc(s, bid(R_V, l), m->w[l], true);
        mark(s, SWAP_EV_LAUNCH);
    }
}

static void infer_pass(struct gen *s, struct model *m)
{
    unsigned L = m->L;
    acc(s, bid(R_A, 0), m->g_size, true);
    mark(s, SWAP_EV_LAUNCH);
    for (unsigned l = 1; l <= L; l++) {
        acc(s, bid(R_W, l), m->w[l], false);
        acc(s, bid(R_A, (l - 1) % 2), m->g_size, false);
        acc(s, bid(R_A, l % 2), m->g_size, true);
        mark(s, SWAP_EV_LAUNCH);
    }
    acc(s, bid(R_A, L % 2), m->g_size, false);
    acc(s, bid(R_MISC, 0), GRANULE, true);
    mark(s, SWAP_EV_LAUNCH);
}

int swap_gen(const struct swap_gen_params *gp, struct swap_trace *out)
{
    if (!gp || !out || gp->variant > SWAP_GEN_JITTER) return -EINVAL;
    struct swap_gen_params g = *gp;
    if (!g.layers) g.layers = 24;
    if (!g.iterations) g.iterations = 12;
    if (!g.accum_steps) g.accum_steps = 4;
    if (g.jitter <= 0) g.jitter = 0.10;
    if (!g.seed) g.seed = 1;
    struct gen s = {.g = &g, .t = out, .rng = g.seed};
    struct model m = {.L = g.layers};
    m.w = calloc(g.layers + 1, sizeof(*m.w));
    m.a = calloc(g.layers + 1, sizeof(*m.a));
    m.a_now = calloc(g.layers + 1, sizeof(*m.a_now));
    if (!m.w || !m.a || !m.a_now) {
        s.rc = -ENOMEM;
        goto out;
    }
    for (unsigned l = 1; l <= g.layers; l++)
        m.w[l] = lognormal(&s, 32, 0.7);
    for (unsigned l = 0; l <= g.layers; l++) {
        m.a[l] = lognormal(&s, 48, 0.5);
        uint64_t top = g.variant == SWAP_GEN_JITTER ? round_up(m.a[l] * (1 + g.jitter)) : m.a[l];
        if (top > m.g_size) m.g_size = top;
    }
    for (unsigned it = 0; it < g.iterations && !s.rc; it++) {
        for (unsigned l = 0; l <= g.layers; l++) {
            double f = g.variant == SWAP_GEN_JITTER ? 1 + g.jitter * (2 * uniform(&s) - 1) : 1;
            m.a_now[l] = f == 1 ? m.a[l] : round_up((double)m.a[l] * f);
        }
        switch (g.variant) {
        case SWAP_GEN_INFER:
            infer_pass(&s, &m);
            break;
        case SWAP_GEN_ACCUM:
            for (unsigned k = 0; k < g.accum_steps; k++)
                train_pass(&s, &m);
            adam(&s, &m);
            break;
        case SWAP_GEN_TRAIN:
        case SWAP_GEN_JITTER:
            train_pass(&s, &m);
            adam(&s, &m);
            break;
        }
        mark(&s, SWAP_EV_ITER);
    }
out:
    free(m.w);
    free(m.a);
    free(m.a_now);
    return s.rc;
}

static const char *const variant_names[] = {"train", "infer", "accum", "jitter"};

const char *swap_gen_variant_name(enum swap_gen_variant v)
{
    return v <= SWAP_GEN_JITTER ? variant_names[v] : "?";
}

int swap_gen_variant_parse(const char *name, enum swap_gen_variant *out)
{
    for (int v = 0; v <= SWAP_GEN_JITTER; v++)
        if (name && strcmp(name, variant_names[v]) == 0) {
            *out = (enum swap_gen_variant)v;
            return 0;
        }
    return -EINVAL;
}
