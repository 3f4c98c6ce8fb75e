/* swap-gen: writes a synthetic training-like trace (swap_gen.h) in the text
 * format of swap_trace.h, to stdout or -o FILE.
 *   swap-gen [--variant train|infer|accum|jitter] [--layers N] [--iters N]
 *            [--accum N] [--jitter X] [--seed N] [-o FILE] */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "swap_gen.h"

static void usage(void)
{
    fprintf(stderr, "usage: swap-gen [--variant train|infer|accum|jitter] [--layers N] "
                    "[--iters N] [--accum N] [--jitter X] [--seed N] [-o FILE]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct swap_gen_params g = {.variant = SWAP_GEN_TRAIN};
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) usage();
        const char *a = argv[i], *v = argv[++i];
        if (!strcmp(a, "--variant")) {
            if (swap_gen_variant_parse(v, &g.variant)) usage();
        } else if (!strcmp(a, "--layers"))
            g.layers = (unsigned)strtoul(v, NULL, 0);
        else if (!strcmp(a, "--iters"))
            g.iterations = (unsigned)strtoul(v, NULL, 0);
        else if (!strcmp(a, "--accum"))
            g.accum_steps = (unsigned)strtoul(v, NULL, 0);
        else if (!strcmp(a, "--jitter"))
            g.jitter = strtod(v, NULL);
        else if (!strcmp(a, "--seed"))
            g.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "-o"))
            path = v;
        else
            usage();
    }
    struct swap_trace t = {0};
    int rc = swap_gen(&g, &t);
    if (!rc) rc = path ? swap_trace_save(path, &t) : swap_trace_write(stdout, &t);
    swap_trace_fini(&t);
    if (rc) {
        fprintf(stderr, "swap-gen: %s\n", strerror(-rc));
        return 1;
    }
    return 0;
}
