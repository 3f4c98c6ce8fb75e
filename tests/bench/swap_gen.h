/* swap_gen: deterministic synthetic traces of training-like programs, for
 * the swap replay tools and tests. Same parameters, same trace, byte for
 * byte (own PRNG, no libm randomness, no time or pid). */
#ifndef SWAP_GEN_H
#define SWAP_GEN_H

#include <stdint.h>

#include "swap_trace.h"

enum swap_gen_variant {
    SWAP_GEN_TRAIN,  /* forward, backward, Adam step, every iteration */
    SWAP_GEN_INFER,  /* forward only: a loop over read-only weights */
    SWAP_GEN_ACCUM,  /* accum_steps forward+backward per optimizer step */
    SWAP_GEN_JITTER, /* train with activation sizes varying per iteration and
                      * an occasional extra kernel */
};

struct swap_gen_params {
    enum swap_gen_variant variant;
    unsigned layers;      /* default 24 */
    unsigned iterations;  /* default 12; an iteration is one optimizer step */
    unsigned accum_steps; /* ACCUM: micro-batches per step, default 4 */
    double jitter;        /* JITTER: relative size variation, default 0.10 */
    uint64_t seed;        /* default 1 */
};

/* Append the trace to out (an I line after each iteration). -EINVAL, -ENOMEM. */
int swap_gen(const struct swap_gen_params *g, struct swap_trace *out);

const char *swap_gen_variant_name(enum swap_gen_variant v);
int swap_gen_variant_parse(const char *name, enum swap_gen_variant *out);

#endif
