/*
 * sim_image.c: kernel parameter layouts out of module images (see
 * sim_image.h for what is accepted).
 *
 * Formats, as checked against nvcc 13.0 output (readelf of the cubins,
 * the fat binaries' own headers):
 * - fat binary: header {u32 magic 0xBA55ED50, u16 version, u16 header
 *   size, u64 bytes of entries}; each entry {u16 kind (1 PTX, 2 ELF), u16,
 *   u32 header size, u64 payload size, u32 compressed size, ..., u64 flags
 *   at byte 40, u64 decompressed size at byte 56}; flags 0x2000 = LZ4 block,
 *   0x8000 = zstd frame. nvcc 13 by default stores small cubins plain and
 *   PTX zstd-compressed; -compress-mode=speed gives LZ4, =size/balance zstd.
 * - cubin .nv.info.<kernel>: records {u8 format, u8 attribute, u16 value};
 *   format 4 (EIFMT_SVAL) is followed by `value` bytes of data, formats 1-3
 *   carry nothing more. EIATTR_KPARAM_INFO (0x17), 12 bytes: u32 index,
 *   u16 ordinal, u16 offset, u32 bits (size = bits >> 18 & 0x3fff, cbank =
 *   bits >> 12 & 0x1f, log2 pointee alignment = bits & 0xff). Records come
 *   in reverse ordinal order; every ordinal appears once.
 * - PTX: `.entry name ( .param [.align A] .type [.ptr ...] name[[N]], ... )`;
 *   a parameter is aligned to A, else to its element size (an .align after
 *   .ptr is the pointee's and is ignored).
 * Every read of an ELF or fat-binary entry is bounds-checked against the
 * sizes the image declares; a malformed entry is skipped, never followed.
 */
#include "sim_image.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000ull
#define FATBIN_FLAG_ZSTD 0x8000ull
#define ENTRY_MIN_HEADER 64
#define EIFMT_SVAL 4
#define EIATTR_KPARAM_INFO 0x17
#define MAX_DECODED (1ull << 31) /* refuse to inflate an entry beyond 2 GiB */
#define MAX_PARAMS 4096

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* ---- result building ---- */

static int has_kernel(const struct sim_image *img, const char *name, size_t len)
{
    for (unsigned i = 0; i < img->nkernels; i++)
        if (strlen(img->kernels[i].name) == len && memcmp(img->kernels[i].name, name, len) == 0)
            return 1;
    return 0;
}

/* Adds a kernel (params copied) unless one of that name exists. Returns 0
 * or -1 when out of memory. */
static int add_kernel(struct sim_image *img, const char *name, size_t len,
                      const struct simcuda_param *params, unsigned n, enum sim_layout_source src)
{
    if (has_kernel(img, name, len)) return 0;
    struct sim_kernel *k = realloc(img->kernels, (img->nkernels + 1) * sizeof(*k));
    if (!k) return -1;
    img->kernels = k;
    k = &img->kernels[img->nkernels];
    memset(k, 0, sizeof(*k));
    k->name = malloc(len + 1);
    if (!k->name) return -1;
    memcpy(k->name, name, len);
    k->name[len] = '\0';
    if (n) {
        k->params = malloc(n * sizeof(*params));
        if (!k->params) {
            free(k->name);
            return -1;
        }
        memcpy(k->params, params, n * sizeof(*params));
    }
    k->nparams = n;
    k->source = src;
    img->nkernels++;
    return 0;
}

void sim_image_free(struct sim_image *img)
{
    if (!img) return;
    for (unsigned i = 0; i < img->nkernels; i++) {
        free(img->kernels[i].name);
        free(img->kernels[i].params);
    }
    free(img->kernels);
    memset(img, 0, sizeof(*img));
}

const struct sim_kernel *sim_image_find(const struct sim_image *img, const char *name)
{
    if (!img || !name) return NULL;
    for (unsigned i = 0; i < img->nkernels; i++)
        if (strcmp(img->kernels[i].name, name) == 0) return &img->kernels[i];
    return NULL;
}

/* ---- decompression ---- */

/* A raw LZ4 block of n bytes into exactly cap bytes. 0, or -1 if malformed. */
static int lz4_decode(const uint8_t *src, size_t n, uint8_t *dst, size_t cap)
{
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned tok = src[i++];
        size_t lit = tok >> 4;
        if (lit == 15) {
            unsigned b;
            do {
                if (i >= n) return -1;
                b = src[i++];
                lit += b;
            } while (b == 255);
        }
        if (lit > n - i || lit > cap - o) return -1;
        memcpy(dst + o, src + i, lit);
        i += lit;
        o += lit;
        if (i >= n) break; /* the last sequence has literals only */
        if (n - i < 2) return -1;
        size_t off = (size_t)src[i] | (size_t)src[i + 1] << 8;
        i += 2;
        size_t len = tok & 15;
        if (len == 15) {
            unsigned b;
            do {
                if (i >= n) return -1;
                b = src[i++];
                len += b;
            } while (b == 255);
        }
        len += 4;
        if (off == 0 || off > o || len > cap - o) return -1;
        for (size_t k = 0; k < len; k++, o++) /* may overlap: byte by byte */
            dst[o] = dst[o - off];
    }
    return o == cap ? 0 : -1;
}

typedef size_t (*zstd_decompress_fn)(void *, size_t, const void *, size_t);
typedef unsigned (*zstd_is_error_fn)(size_t);
static zstd_decompress_fn g_zstd_decompress;
static zstd_is_error_fn g_zstd_is_error;
static pthread_once_t g_zstd_once = PTHREAD_ONCE_INIT;

static void zstd_load(void)
{
    void *h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    g_zstd_decompress = (zstd_decompress_fn)dlsym(h, "ZSTD_decompress");
    g_zstd_is_error = (zstd_is_error_fn)dlsym(h, "ZSTD_isError");
    if (!g_zstd_decompress || !g_zstd_is_error) g_zstd_decompress = NULL;
}

static int zstd_decode(const uint8_t *src, size_t n, uint8_t *dst, size_t cap)
{
    pthread_once(&g_zstd_once, zstd_load);
    if (!g_zstd_decompress) return -1;
    size_t r = g_zstd_decompress(dst, cap, src, n);
    return g_zstd_is_error(r) || r != cap ? -1 : 0;
}

/* ---- ELF cubins ---- */

/* Size an ELF image claims (end of its section table or last section). */
static size_t elf_extent(const uint8_t *e)
{
    uint64_t shoff = rd64(e + 0x28);
    uint16_t shentsize = rd16(e + 0x3a), shnum = rd16(e + 0x3c);
    if (shentsize < 64) return 0;
    uint64_t end = shoff + (uint64_t)shnum * shentsize;
    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = e + shoff + (uint64_t)i * shentsize;
        if (rd32(sh + 4) == 8 /* SHT_NOBITS */) continue;
        uint64_t se = rd64(sh + 0x18) + rd64(sh + 0x20);
        if (se > end) end = se;
    }
    return end > (1ull << 32) ? 0 : (size_t)end;
}

static int is_elf64(const uint8_t *e, size_t n)
{
    return n >= 64 &&
           memcmp(e,
                  "\x7f"
                  "ELF",
                  4) == 0 &&
           e[4] == 2 /* ELFCLASS64 */ && e[5] == 1 /* little endian */;
}

/* One .nv.info.<kernel> section: its KPARAM_INFO records. */
static int parse_nv_info(struct sim_image *img, const char *name, size_t name_len, const uint8_t *d,
                         size_t n)
{
    struct simcuda_param *params = calloc(MAX_PARAMS, sizeof(*params));
    if (!params) return -1;
    unsigned count = 0;
    size_t pos = 0;
    while (pos + 4 <= n) {
        unsigned fmt = d[pos], attr = d[pos + 1];
        size_t len = 0;
        if (fmt == EIFMT_SVAL) {
            len = rd16(d + pos + 2);
            if (len > n - pos - 4) break;
        } else if (fmt < 1 || fmt > 4) {
            break; /* unknown format: the rest cannot be framed */
        }
        if (fmt == EIFMT_SVAL && attr == EIATTR_KPARAM_INFO && len >= 12) {
            const uint8_t *r = d + pos + 4;
            unsigned ordinal = rd16(r + 4);
            if (ordinal < MAX_PARAMS) {
                params[ordinal].offset = rd16(r + 6);
                params[ordinal].size = (rd32(r + 8) >> 18) & 0x3fff;
                if (ordinal + 1 > count) count = ordinal + 1;
            }
        }
        pos += 4 + len;
    }
    int rc = add_kernel(img, name, name_len, params, count, SIM_SRC_ELF);
    free(params);
    return rc;
}

/* Adds the kernels of an n-byte ELF cubin. Returns 1 if it was usable, 0
 * if malformed, -1 when out of memory. */
static int parse_elf(struct sim_image *img, const uint8_t *e, size_t n)
{
    if (!is_elf64(e, n)) return 0;
    uint64_t shoff = rd64(e + 0x28);
    uint16_t shentsize = rd16(e + 0x3a), shnum = rd16(e + 0x3c), shstrndx = rd16(e + 0x3e);
    if (shentsize < 64 || shstrndx >= shnum || shoff > n || (uint64_t)shnum * shentsize > n - shoff)
        return 0;
    const uint8_t *strsh = e + shoff + (uint64_t)shstrndx * shentsize;
    uint64_t stroff = rd64(strsh + 0x18), strsize = rd64(strsh + 0x20);
    if (stroff > n || strsize > n - stroff) return 0;
    const char *strtab = (const char *)e + stroff;
    static const char prefix[] = ".nv.info.";
    for (unsigned i = 0; i < shnum; i++) {
        const uint8_t *sh = e + shoff + (uint64_t)i * shentsize;
        uint32_t nm = rd32(sh);
        uint64_t off = rd64(sh + 0x18), size = rd64(sh + 0x20);
        if (nm >= strsize || off > n || size > n - off) continue;
        const char *name = strtab + nm;
        size_t maxlen = strsize - nm, len = strnlen(name, maxlen);
        if (len == maxlen || len <= sizeof(prefix) - 1 ||
            memcmp(name, prefix, sizeof(prefix) - 1) != 0)
            continue;
        if (parse_nv_info(img, name + sizeof(prefix) - 1, len - (sizeof(prefix) - 1), e + off,
                          size) < 0)
            return -1;
    }
    return 1;
}

/* ---- PTX ---- */

static const char *skip_space_and_comments(const char *p, const char *end)
{
    for (;;) {
        while (p < end && isspace((unsigned char)*p))
            p++;
        if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
            while (p < end && *p != '\n')
                p++;
        } else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
            const char *q = p + 2;
            while (end - q >= 2 && !(q[0] == '*' && q[1] == '/'))
                q++;
            p = end - q >= 2 ? q + 2 : end;
        } else {
            return p;
        }
    }
}

static int ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '.' || c == '%';
}

/* Size of a PTX fundamental type name (without the dot), 0 if unknown. */
static unsigned ptx_type_size(const char *t, size_t n)
{
    static const struct {
        const char *name;
        unsigned size;
    } types[] = {
        {"b8", 1},   {"u8", 1},  {"s8", 1},  {"b16", 2}, {"u16", 2},   {"s16", 2},   {"f16", 2},
        {"bf16", 2}, {"b32", 4}, {"u32", 4}, {"s32", 4}, {"f32", 4},   {"f16x2", 4}, {"bf16x2", 4},
        {"b64", 8},  {"u64", 8}, {"s64", 8}, {"f64", 8}, {"b128", 16},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strlen(types[i].name) == n && memcmp(types[i].name, t, n) == 0) return types[i].size;
    return 0;
}

/* Parses one parameter declaration [p, end) (between commas). Returns 0
 * and fills *size and *align, or -1 if it is not understood. */
static int ptx_param(const char *p, const char *end, unsigned *size, unsigned *align)
{
    unsigned elem = 0, al = 0, count = 1;
    int after_ptr = 0;
    while ((p = skip_space_and_comments(p, end)) < end) {
        const char *w = p;
        while (p < end && ident_char(*p))
            p++;
        size_t n = (size_t)(p - w);
        if (n == 0) return -1;
        if (*w == '.') {
            if (n == 6 && memcmp(w, ".align", 6) == 0) {
                p = skip_space_and_comments(p, end);
                unsigned long v = strtoul(p, (char **)&p, 10);
                if (!after_ptr) al = (unsigned)v;
            } else if (n == 4 && memcmp(w, ".ptr", 4) == 0) {
                after_ptr = 1;
            } else if (ptx_type_size(w + 1, n - 1)) {
                elem = ptx_type_size(w + 1, n - 1);
            }    /* .param, state spaces: nothing to learn */
        } else { /* the parameter's name, maybe with [N] */
            p = skip_space_and_comments(p, end);
            if (p < end && *p == '[') {
                unsigned long v = strtoul(p + 1, NULL, 10);
                if (v == 0 || v > (1ul << 20)) return -1;
                count = (unsigned)v;
            }
            break;
        }
    }
    if (!elem) return -1;
    *size = elem * count;
    *align = al ? al : elem;
    return (*align & (*align - 1)) ? -1 : 0;
}

/* Adds every `.entry` of NUL-free PTX text [t, t + n) (an entry whose
 * parameters are not understood is left out). Returns 1, or -1 when out of
 * memory. */
static int parse_ptx(struct sim_image *img, const char *t, size_t n)
{
    const char *end = t + n, *p = t;
    struct simcuda_param *params = calloc(MAX_PARAMS, sizeof(*params));
    if (!params) return -1;
    while ((p = skip_space_and_comments(p, end)) < end) {
        const char *w = p;
        while (p < end && ident_char(*p))
            p++;
        if (p == w) {
            p++;
            continue;
        }
        if (p - w != 6 || memcmp(w, ".entry", 6) != 0) continue;
        p = skip_space_and_comments(p, end);
        const char *name = p;
        while (p < end && ident_char(*p))
            p++;
        size_t name_len = (size_t)(p - name);
        if (!name_len) continue;
        p = skip_space_and_comments(p, end);
        unsigned count = 0, off = 0;
        int ok = 1;
        if (p < end && *p == '(') {
            p++;
            const char *close = p;
            while (close < end && *close != ')')
                close++;
            if (close == end) break;
            while (ok && skip_space_and_comments(p, close) < close) {
                const char *comma = p;
                while (comma < close && *comma != ',')
                    comma++;
                unsigned size, align;
                if (count >= MAX_PARAMS || ptx_param(p, comma, &size, &align) < 0) {
                    ok = 0;
                    break;
                }
                off = (off + align - 1) / align * align;
                params[count].offset = off;
                params[count].size = size;
                count++;
                off += size;
                p = comma < close ? comma + 1 : close;
            }
            p = close + 1;
        }
        if (!ok) continue; /* a declaration we do not understand: no layout */
        if (add_kernel(img, name, name_len, params, count, SIM_SRC_PTX) < 0) {
            free(params);
            return -1;
        }
    }
    free(params);
    return 1;
}

/* ---- fat binaries ---- */

/* Payload of entry `h` (header at h, payload of psize bytes after it):
 * points *out at it, decoding into *owned when compressed. 0 or -1. */
static int entry_payload(const uint8_t *h, uint32_t hsize, uint64_t psize, const uint8_t **out,
                         size_t *out_len, uint8_t **owned)
{
    const uint8_t *payload = h + hsize;
    uint64_t flags = rd64(h + 40);
    *owned = NULL;
    if (!(flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD))) {
        *out = payload;
        *out_len = (size_t)psize;
        return 0;
    }
    uint64_t csize = rd32(h + 16), dsize = rd64(h + 56);
    if (csize == 0 || csize > psize || dsize == 0 || dsize > MAX_DECODED) return -1;
    uint8_t *buf = malloc((size_t)dsize + 1);
    if (!buf) return -1;
    int rc = (flags & FATBIN_FLAG_LZ4) ? lz4_decode(payload, (size_t)csize, buf, (size_t)dsize)
                                       : zstd_decode(payload, (size_t)csize, buf, (size_t)dsize);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    buf[dsize] = '\0';
    *out = buf;
    *out_len = (size_t)dsize;
    *owned = buf;
    return 0;
}

/* Two passes over the entries: every cubin first, then PTX for kernels no
 * cubin described. Returns 0 or -1 when out of memory. */
static int parse_fatbin(struct sim_image *img, const uint8_t *f)
{
    uint16_t hsize = rd16(f + 6);
    uint64_t total = rd64(f + 8);
    if (hsize < 16 || total > (1ull << 40)) return 0;
    const uint8_t *first = f + hsize, *end = first + total;
    for (int kind = FATBIN_KIND_ELF; kind >= FATBIN_KIND_PTX; kind--) {
        for (const uint8_t *e = first; end - e >= ENTRY_MIN_HEADER;) {
            uint32_t ehs = rd32(e + 4);
            uint64_t psize = rd64(e + 8);
            if (ehs < ENTRY_MIN_HEADER || ehs > (uint64_t)(end - e) ||
                psize > (uint64_t)(end - e) - ehs)
                break;
            if (rd16(e) == kind) {
                const uint8_t *data;
                size_t len;
                uint8_t *owned;
                int rc = 0;
                if (entry_payload(e, ehs, psize, &data, &len, &owned) < 0) {
                    img->entries_skipped++;
                } else {
                    if (kind == FATBIN_KIND_ELF)
                        rc = parse_elf(img, data, len);
                    else
                        rc = parse_ptx(img, (const char *)data, strnlen((const char *)data, len));
                    free(owned);
                    if (rc < 0) return -1;
                    if (rc > 0)
                        img->entries_used++;
                    else
                        img->entries_skipped++;
                }
            }
            e += ehs + psize;
        }
    }
    return 0;
}

int sim_image_parse(const void *image, struct sim_image *out)
{
    memset(out, 0, sizeof(*out));
    if (!image) return SIM_IMAGE_NOT_AN_IMAGE;
    const uint8_t *p = image;
    int rc = 0;
    if (rd32(p) == WRAPPER_MAGIC) { /* {int magic, int version, data, ...} */
        const uint8_t *data;
        memcpy(&data, p + 8, sizeof(data));
        if (!data || rd32(data) != FATBIN_MAGIC) return SIM_IMAGE_NOT_AN_IMAGE;
        p = data;
    }
    if (rd32(p) == FATBIN_MAGIC) {
        rc = parse_fatbin(out, p);
    } else if (is_elf64(p, 64)) {
        size_t n = elf_extent(p);
        rc = n ? parse_elf(out, p, n) : 0;
        if (rc > 0) out->entries_used++;
    } else {
        size_t n = strnlen((const char *)p, 1u << 30);
        if (!memmem(p, n, ".entry", 6) && !memmem(p, n, ".version", 8))
            return SIM_IMAGE_NOT_AN_IMAGE;
        rc = parse_ptx(out, (const char *)p, n);
        if (rc > 0) out->entries_used++;
    }
    if (rc < 0) {
        sim_image_free(out);
        return SIM_IMAGE_NOMEM;
    }
    if (out->entries_used == 0) {
        sim_image_free(out);
        return SIM_IMAGE_NO_CODE;
    }
    return SIM_IMAGE_OK;
}
