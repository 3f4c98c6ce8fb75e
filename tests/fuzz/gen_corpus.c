/* gen_corpus: writes the seed corpus of fuzz_registry.c -- small registry
 * images in the states a real one passes through: blank, holders attached,
 * blocks live / in limbo / orphaned / retired with leases in every intent,
 * a free list and hash chains made inconsistent as a death mid-update
 * leaves them -- each prefixed with the target's flags byte.
 *
 *   gen-corpus DIR      (the committed files came from this; see
 *                        docs/crash-safety.md) */
#include "options.h"
#include "registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void dump(const char *dir, const char *name, uint8_t flags, struct registry *r)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputc(flags, f);
    fwrite(r->base, 1, r->size, f);
    fclose(f);
}

static struct ipc_handle handle(unsigned seed)
{
    struct ipc_handle h;
    for (int i = 0; i < IPC_HANDLE_BYTES; i++)
        h.bytes[i] = (uint8_t)(seed * 131 + i * 7);
    return h;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen-corpus DIR\n");
        return 2;
    }
    char domain[64];
    snprintf(domain, sizeof domain, "gen-corpus-%d", (int)getpid());
    setenv("IPCSHIM_LOG", "error", 1);
    setenv("IPCSHIM_REGISTRY_DIR", "/dev/shm", 1);
    options_reload();
    struct registry r;
    struct reg_caps caps = {4, 8, 16};
    if (registry_open(&r, domain, &caps)) return 1;
    dump(argv[1], "blank", 0, &r);
    dump(argv[1], "blank-fixup", 1, &r);
    registry_lock(&r);
    uint32_t a = reg_holder_attach(&r, 0x1111), b = reg_holder_attach(&r, 0x2222);
    r.holders[b].pid = 999999; /* a dead importer */
    dump(argv[1], "holders", 0, &r);
    uint32_t live =
        reg_block_create(&r, &(struct ipc_handle){0}, 0x1000, 4096, 0, a, 1, IPC_KIND_LEGACY);
    struct ipc_handle h1 = handle(1), h2 = handle(2), h3 = handle(3), h4 = handle(4);
    uint32_t limbo = reg_block_create(&r, &h1, 0x2000, 4096, 0, a, 2, IPC_KIND_LEGACY);
    uint32_t orphan = reg_block_create(&r, &h2, 0x3000, 4096, 0, b, 3, IPC_KIND_LEGACY);
    uint32_t retired = reg_block_create(&r, &h3, 0x4000, 4096, 0, a, 4, IPC_KIND_LEGACY);
    (void)reg_block_create(&r, &h4, 0x5000, 4096, 1, b, 5, IPC_KIND_LEGACY);
    r.blocks[limbo].state = BLOCK_LIMBO;
    r.blocks[orphan].state = BLOCK_ORPHANED;
    r.blocks[retired].state = BLOCK_RETIRED;
    uint32_t l1 = reg_lease_create(&r, live, b), l2 = reg_lease_create(&r, limbo, b);
    uint32_t l3 = reg_lease_create(&r, orphan, a);
    (void)reg_lease_create(&r, limbo, a);
    r.leases[l1].intent = LEASE_OPEN;
    r.leases[l2].intent = LEASE_CLOSING;
    r.leases[l3].count = 3;
    dump(argv[1], "records", 0, &r);
    dump(argv[1], "records-repair", 2, &r);
    dump(argv[1], "records-sweep", 4, &r);
    dump(argv[1], "records-fixup-all", 7, &r);
    /* What a death mid-update leaves: derived links pointing the wrong way. */
    r.hdr->block_free = live;
    r.buckets[0] = orphan;
    r.blocks[orphan].hash_next = orphan; /* a cycle */
    r.leases[l2].block = 12345;          /* a lease naming no block */
    dump(argv[1], "torn", 0, &r);
    dump(argv[1], "torn-repair", 2, &r);
    registry_unlock(&r);
    char name[128];
    registry_name(domain, name, sizeof name);
    registry_close(&r);
    shm_unlink(name);
    return 0;
}
