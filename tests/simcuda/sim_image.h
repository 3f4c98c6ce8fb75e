/*
 * sim_image.h: what the simulated driver learns from a module image (the
 * bytes given to cuModuleLoadData / cuModuleLoadFatBinary, which is also
 * what the simulated runtime hands over for an nvcc fat binary): the
 * kernels it defines and the layout of their parameters, nothing else.
 *
 * Accepted images: nvcc's fat-binary wrapper (__fatBinC_Wrapper_t, magic
 * 0x466243b1, followed to its fat binary), a fat binary (magic 0xBA55ED50:
 * one container of entries; a container that follows it in memory is not
 * looked at), an ELF cubin, or NUL-terminated PTX text. Layouts come from the cubin's
 * .nv.info.<kernel> sections (EIATTR_KPARAM_INFO: ordinal, offset, size) and, for kernels no cubin
 * describes, from the PTX `.entry name(.param ...)` list (offsets computed
 * with PTX alignment rules). Fat-binary entries may be compressed: LZ4
 * (flag 0x2000, decoded here) or zstd (flag 0x8000, decoded through
 * libzstd.so.1 when it can be dlopen'ed; otherwise the entry is skipped).
 * Internal to libcuda (hidden visibility).
 */
#ifndef SIM_IMAGE_H
#define SIM_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "simcuda.h"

#define SIM_IMAGE_INTERNAL __attribute__((visibility("hidden")))

/* Where a kernel's layout came from. */
enum sim_layout_source { SIM_SRC_ELF = 1, SIM_SRC_PTX = 2 };

struct sim_kernel {
    char *name; /* mangled entry name */
    unsigned nparams;
    struct simcuda_param *params; /* by ordinal; NULL when nparams == 0 */
    enum sim_layout_source source;
};

struct sim_image {
    unsigned nkernels;
    struct sim_kernel *kernels;
    unsigned entries_used;    /* fat-binary entries (or whole images) decoded */
    unsigned entries_skipped; /* entries that could not be decoded */
};

enum sim_image_rc {
    SIM_IMAGE_OK = 0,
    SIM_IMAGE_NOT_AN_IMAGE = -1, /* no known magic, not PTX text */
    SIM_IMAGE_NO_CODE = -2,      /* an image, but no entry could be decoded */
    SIM_IMAGE_NOMEM = -3,
};

/* Parses `image` into *out (zeroed first). Trusts the sizes the image
 * declares for itself, as the real driver does. Returns an sim_image_rc;
 * on failure *out holds nothing to free. */
SIM_IMAGE_INTERNAL int sim_image_parse(const void *image, struct sim_image *out);

/* The kernel named `name` in img, or NULL. */
SIM_IMAGE_INTERNAL const struct sim_kernel *sim_image_find(const struct sim_image *img,
                                                           const char *name);

SIM_IMAGE_INTERNAL void sim_image_free(struct sim_image *img);

#endif /* SIM_IMAGE_H */
