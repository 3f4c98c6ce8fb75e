/* swap_real: what swap-real's two modes share. */
#ifndef SWAP_REAL_H
#define SWAP_REAL_H

/* The trace's name: its path's last component up to ".trace" (a static
 * buffer, valid until the next call). */
const char *swap_real_base_name(const char *path);

/* The worst ratio seen so far, and where (a goal line's "worst ..."). */
struct swap_real_worst {
    double v;
    char trace[256];
    double oversub;
};
/* Keep v, trace and oversub in *w when v is worse (larger) than w->v. */
void swap_real_note(struct swap_real_worst *w, double v, const char *trace, double oversub);

/* swap-real --model: the timing model over the traces at paths (see
 * swap_real_model.c); JSON to json when not NULL. 0, or 1 after printing
 * why. */
int swap_real_model(int n, char **paths, const char *json);

/* swap-real --designs: the VMM engine's variants (unit moved, schedule)
 * side by side over the traces at paths (swap_real_model.c). 0, or 1
 * after printing why. */
int swap_real_designs(int n, char **paths);

#endif
