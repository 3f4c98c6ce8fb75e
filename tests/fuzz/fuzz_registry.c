/* fuzz_registry: a libFuzzer target over what a process trusts least -- the
 * bytes of a registry segment it did not write.
 *
 * Input: one flags byte, then a segment image. The image is written to a
 * fresh /dev/shm segment of this process's own domain, and the core attaches
 * to it exactly as the shim does (registry_open: ownership, mode, magic, ABI,
 * capacities, size, lock type). When it accepts the image, the target takes
 * the lock and drives the record operations a process performs on attached
 * bytes: handle lookups (reg_block_find with every recorded handle and one
 * from the input), lease lookups and counts, a sweep of dead holders, a
 * holder attach, a block and a lease created and dropped, a block recycled;
 * then a repair, after which the derived structures must be consistent
 * (abort() otherwise: a finding).
 *
 * flags bit 0: "fix up" the header first (magic, ABI, ready, capacities
 *   clamped to 1..64, size and bucket count that add up, image resized),
 *   so that mutations reach the records instead of dying at validation;
 * bit 1: repair before the operations (as after a lock owner's death);
 * bit 2: sweep dead holders first (as on attach, collect, pressure).
 * The lock word itself is re-initialised after attach: any process of the
 * same user can hold the lock, and what a lock held by a vanished thread
 * does is tested in tests/crash (lock_held_by_a_vanished_thread_never_hangs).
 *
 * Built with clang -fsanitize=fuzzer,address,undefined where available
 * (tests/fuzz/meson.build), else with standalone.c as the driver. */
#include "log.h"
#include "options.h"
#include "registry.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char domain[64], name[128];

static void init_once(void)
{
    snprintf(domain, sizeof domain, "fuzz-%d", (int)getpid());
    setenv("IPCSHIM_LOG_FILE", "/dev/null", 1);
    setenv("IPCSHIM_LOG", "error", 1);
    unsetenv("IPCSHIM_TEST_DELAY_US");
    setenv("IPCSHIM_REGISTRY_DIR", "/dev/shm", 1); /* where the images are written */
    options_reload();
    registry_attach_wait_ms = 0; /* an image that is not ready is refused at once */
    registry_name(domain, name, sizeof name);
}

static void init_lock(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

static uint32_t clamp(uint32_t v)
{
    return v % 64 + 1;
}

/* Makes the header of img valid for its (clamped) capacities; resizes. */
static uint8_t *fix_up(uint8_t *img, size_t *n)
{
    struct reg_header h;
    memset(&h, 0, sizeof h);
    memcpy(&h, img, *n < sizeof h ? *n : sizeof h);
    struct reg_caps caps = {clamp(h.max_holders), clamp(h.max_blocks), clamp(h.max_leases)};
    struct reg_layout l;
    if (registry_layout(&caps, &l) != 0) abort();
    uint8_t *out = calloc(1, l.size);
    if (!out) return img;
    memcpy(out, img, *n < l.size ? *n : l.size);
    free(img);
    struct reg_header *o = (struct reg_header *)out;
    o->magic = REG_MAGIC;
    o->abi = REG_ABI;
    o->ready = 1;
    o->size = l.size;
    o->max_holders = caps.max_holders;
    o->max_blocks = caps.max_blocks;
    o->max_leases = caps.max_leases;
    o->limit_blocks = caps.max_blocks;
    o->limit_leases = caps.max_leases;
    o->nbuckets = l.nbuckets;
    o->held_words = l.held_words;
    o->lease_chunk = l.lease_chunk;
    o->blocks_now = caps.max_blocks; /* all in use: every record is fair game */
    o->chunks_now = l.nchunks;
    o->nbuckets_now = l.nbuckets;
    init_lock(&o->lock.mutex);
    *n = l.size;
    return out;
}

/* After registry_repair the derived structures must agree with the records. */
static void check_consistent(struct registry *r)
{
    /* Each holder's list of exports: in range, its own, no cycle, and
     * every block LIVE..RETIRED of that exporter on it. */
    uint32_t listed = 0, on_lists = 0;
    for (uint32_t b = 0; b < r->max_blocks; b++) {
        uint32_t st = r->blocks[b].state;
        listed +=
            st != BLOCK_FREE && st != BLOCK_ORPHANED && r->blocks[b].exporter < r->max_holders;
    }
    for (uint32_t k = 0; k < r->max_holders; k++) {
        uint32_t prev = 0;
        for (uint32_t f = r->export_heads[k]; f; f = r->blocks[f - 1].exp_next) {
            if (f > r->max_blocks || r->blocks[f - 1].exp_on != k + 1 ||
                r->blocks[f - 1].exporter != k || r->blocks[f - 1].exp_prev != prev ||
                ++on_lists > r->max_blocks)
                abort();
            prev = f;
        }
    }
    if (on_lists != listed) abort();
    uint32_t seen = 0;
    for (uint32_t i = r->hdr->block_free; i != REG_NONE; i = r->blocks[i].hash_next) {
        if (i >= r->max_blocks || r->blocks[i].state != BLOCK_FREE || ++seen > r->max_blocks)
            abort();
    }
    /* Every lease left names a block of its generation, in a chunk of an
     * active holder; every bit set is an active holder's. */
    for (uint32_t li = 0; li < r->max_leases; li++) {
        struct reg_lease *l = &r->leases[li];
        if (l->intent == LEASE_FREE) continue;
        uint32_t owner = reg_chunk_owner(r, li / r->lease_chunk);
        if (l->intent > LEASE_CLOSING || l->block >= r->max_blocks ||
            r->blocks[l->block].state == BLOCK_FREE ||
            r->blocks[l->block].generation != l->block_gen || owner >= r->max_holders ||
            r->holders[owner].state != HOLDER_ACTIVE)
            abort();
    }
    for (uint32_t b = 0; b < r->max_blocks; b++) {
        struct reg_block *blk = &r->blocks[b];
        if (blk->state == BLOCK_FREE) continue;
        if (blk->state > BLOCK_RETIRED) abort();
        struct ipc_handle h;
        memcpy(h.bytes, blk->handle, sizeof h.bytes);
        uint32_t found = reg_block_find(r, &h);
        if (found == REG_NONE || memcmp(r->blocks[found].handle, blk->handle, IPC_HANDLE_BYTES))
            abort();
        const uint64_t *held = reg_block_held_words(r, b);
        for (uint32_t w = 0; w < r->held_words; w++)
            for (uint64_t m = held[w]; m; m &= m - 1) {
                uint32_t hi = w * 64 + (uint32_t)__builtin_ctzll(m);
                if (hi >= r->max_holders || r->holders[hi].state != HOLDER_ACTIVE) abort();
            }
    }
}

static void operate(struct registry *r, const uint8_t *data, size_t size, uint8_t flags)
{
    if (flags & 4) reg_sweep_dead(r, REG_NONE); /* takes the lock itself */
    if (registry_lock(r) != 0) return;
    if (flags & 2) registry_repair(r);
    /* Lookups with every recorded handle, and one from the input's tail. */
    for (uint32_t b = 0; b < r->max_blocks; b++) {
        struct ipc_handle h;
        memcpy(h.bytes, r->blocks[b].handle, sizeof h.bytes);
        uint32_t found = reg_block_find(r, &h);
        if (found != REG_NONE && !reg_block_at(r, found)) abort();
        (void)reg_block_leases(r, b);
        (void)reg_lease_find(r, b, r->blocks[b].exporter);
    }
    struct ipc_handle tail;
    memset(&tail, 0, sizeof tail);
    memcpy(tail.bytes, data + (size > 64 ? size - 64 : 0), size < 64 ? size : 64);
    (void)reg_block_find(r, &tail);
    /* What a process does next: attach, export, be opened, close, free. */
    uint32_t self = reg_holder_attach(r, 0x1234567);
    if (self != REG_NONE) {
        uint32_t b =
            reg_block_create(r, &tail, 0x7000, 4096, 0, self, reg_now_ns(), IPC_KIND_LEGACY);
        if (b != REG_NONE) {
            uint32_t other = (self + 1) % r->max_holders;
            uint32_t l = reg_lease_create(r, b, other);
            if (l != REG_NONE) (void)reg_lease_drop(r, l);
            reg_block_recycle(r, b);
        }
        /* a dead-looking holder's sweep, on whatever index the input names */
        reg_holder_sweep(r, size ? data[0] % r->max_holders : 0);
    }
    registry_repair(r);
    check_consistent(r);
    if (self != REG_NONE) reg_holder_release(r, self);
    registry_unlock(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) init_once(), ready = 1;
    if (size < 1) return 0;
    uint8_t flags = data[0];
    data++, size--;
    size_t n = size;
    uint8_t *img = malloc(n ? n : 1);
    if (!img) return 0;
    memcpy(img, data, n);
    if (flags & 1) img = fix_up(img, &n);

    shm_unlink(name);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        free(img);
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, img + done, n - done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    close(fd);
    free(img);

    struct registry r;
    struct reg_caps caps = {4, 4, 4};
    if (registry_open(&r, domain, &caps) == 0) {
        init_lock(&r.hdr->lock.mutex);
        operate(&r, data, size, flags);
        registry_close(&r);
    }
    shm_unlink(name);
    return 0;
}
