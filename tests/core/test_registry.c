/* registry: the shared segment's layout, creation, attach checks, robust-lock
 * repair and the derived indexes. */
#include "helpers.h"
#include "liveness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

static void setup(void)
{
    test_domain_setup("reg");
    test_option("MAX_BLOCKS", "64");
    test_option("MAX_HOLDERS", "8");
    test_option("MAX_LEASES", "128");
}

TestSuite(registry, .init = setup, .fini = test_domain_teardown, .timeout = 20);

Test(registry, layout_pinned)
{
    cr_assert_eq(sizeof(struct reg_header), 256);
    cr_assert_eq(offsetof(struct reg_header, magic), 0);
    cr_assert_eq(offsetof(struct reg_header, abi), 8);
    cr_assert_eq(offsetof(struct reg_header, ready), 12);
    cr_assert_eq(offsetof(struct reg_header, size), 16);
    cr_assert_eq(offsetof(struct reg_header, max_holders), 24);
    cr_assert_eq(offsetof(struct reg_header, max_blocks), 28);
    cr_assert_eq(offsetof(struct reg_header, max_leases), 32);
    cr_assert_eq(offsetof(struct reg_header, nbuckets), 36);
    cr_assert_eq(offsetof(struct reg_header, block_free), 40);
    cr_assert_eq(offsetof(struct reg_header, held_words), 44);
    cr_assert_eq(offsetof(struct reg_header, repairs), 48);
    cr_assert_eq(offsetof(struct reg_header, creator_pid), 52);
    cr_assert_eq(offsetof(struct reg_header, created_ns), 56);
    cr_assert_eq(offsetof(struct reg_header, lock), 64);
    cr_assert_eq(offsetof(struct reg_header, lock_since_ns), 128);
    cr_assert_eq(offsetof(struct reg_header, blocks_now), 136);
    cr_assert_eq(offsetof(struct reg_header, chunks_now), 140);
    cr_assert_eq(offsetof(struct reg_header, nbuckets_now), 144);
    cr_assert_eq(offsetof(struct reg_header, lease_chunk), 148);
    cr_assert_eq(offsetof(struct reg_header, limit_blocks), 152);
    cr_assert_eq(offsetof(struct reg_header, limit_leases), 156);
    cr_assert_eq(offsetof(struct reg_header, removing), 160);
    cr_assert_eq(offsetof(struct reg_header, swept), 164);
    cr_assert_eq(offsetof(struct reg_header, reserved), 168);

    cr_assert_eq(sizeof(struct reg_holder), 80);
    cr_assert_eq(offsetof(struct reg_holder, comm), 64);
    cr_assert_eq(offsetof(struct reg_holder, start_time), 0);
    cr_assert_eq(offsetof(struct reg_holder, nonce), 8);
    cr_assert_eq(offsetof(struct reg_holder, attach_ns), 16);
    cr_assert_eq(offsetof(struct reg_holder, pid), 24);
    cr_assert_eq(offsetof(struct reg_holder, state), 28);
    cr_assert_eq(offsetof(struct reg_holder, wake), 32);
    cr_assert_eq(offsetof(struct reg_holder, pidns), 36);
    cr_assert_eq(offsetof(struct reg_holder, reserved), 40);

    cr_assert_eq(sizeof(struct reg_block), 192);
    cr_assert_eq(offsetof(struct reg_block, handle), 0);
    cr_assert_eq(offsetof(struct reg_block, generation), 64);
    cr_assert_eq(offsetof(struct reg_block, exporter_nonce), 72);
    cr_assert_eq(offsetof(struct reg_block, base), 80);
    cr_assert_eq(offsetof(struct reg_block, size), 88);
    cr_assert_eq(offsetof(struct reg_block, exporter), 96);
    cr_assert_eq(offsetof(struct reg_block, state), 100);
    cr_assert_eq(offsetof(struct reg_block, pending), 104);
    cr_assert_eq(offsetof(struct reg_block, claimed), 108);
    cr_assert_eq(offsetof(struct reg_block, hash_next), 112);
    cr_assert_eq(offsetof(struct reg_block, rules), 116);
    cr_assert_eq(offsetof(struct reg_block, device), 120);
    cr_assert_eq(offsetof(struct reg_block, exporter_pid), 124);
    cr_assert_eq(offsetof(struct reg_block, first_export_ns), 128);
    cr_assert_eq(offsetof(struct reg_block, last_export_ns), 136);
    cr_assert_eq(offsetof(struct reg_block, limbo_since_ns), 144);
    cr_assert_eq(offsetof(struct reg_block, orphaned_ns), 152);
    cr_assert_eq(offsetof(struct reg_block, exp_next), 160);
    cr_assert_eq(offsetof(struct reg_block, exp_prev), 164);
    cr_assert_eq(offsetof(struct reg_block, exp_on), 168);
    cr_assert_eq(offsetof(struct reg_block, expired), 172);
    cr_assert_eq(offsetof(struct reg_block, exporter_comm), 176);

    cr_assert_eq(sizeof(struct reg_lease), 32);
    cr_assert_eq(offsetof(struct reg_lease, open_ns), 24);
    cr_assert_eq(offsetof(struct reg_lease, block_gen), 0);
    cr_assert_eq(offsetof(struct reg_lease, block), 8);
    cr_assert_eq(offsetof(struct reg_lease, holder), 12);
    cr_assert_eq(offsetof(struct reg_lease, count), 16);
    cr_assert_eq(offsetof(struct reg_lease, intent), 20);

    /* The default capacities: 512 holders, 16384 blocks, 65536 leases. */
    struct reg_caps caps = {512, 16384, 65536};
    struct reg_layout l;
    cr_assert_eq(registry_layout(&caps, &l), 0);
    cr_assert_eq(l.locks, 256);
    cr_assert_eq(l.holders, 256 + 512);
    cr_assert_eq(l.heads, 256 + 512 + 512 * 80);
    cr_assert_eq(l.blocks, l.heads + 512 * 4);
    cr_assert_eq(l.held_words, 8, "one bit per holder slot");
    cr_assert_eq(l.held, l.blocks + 16384 * 192);
    cr_assert_eq(l.leases, l.held + 16384 * 64);
    cr_assert_eq(l.nchunks, 65536 / REG_LEASE_CHUNK);
    cr_assert_eq(l.chunks, l.leases + 65536 * 32);
    cr_assert_eq(l.buckets, l.chunks + 2048 * 4);
    cr_assert_eq(l.nbuckets, 16384);
    cr_assert_eq(l.size, l.buckets + 16384 * 4);
    cr_assert_eq(l.size, 6408960); /* about 6.1 MiB */
    cr_assert_eq(l.lease_chunk, REG_LEASE_CHUNK);
    /* A small lease table for its holders gets smaller chunks, so that
     * every holder that opens something can own one. */
    struct reg_caps small = {8, 16, 32};
    cr_assert_eq(registry_layout(&small, &l), 0);
    cr_assert_eq(l.lease_chunk, 4);
    cr_assert_eq(l.nchunks, 8);
    struct reg_caps bad = {0, 1, 1};
    cr_assert_eq(registry_layout(&bad, &l), -EINVAL);
}

Test(registry, domain_names)
{
    char buf[128];
    cr_assert_eq(registry_name("a.b_c-9", buf, sizeof buf), 0);
    char want[128];
    snprintf(want, sizeof want, "/ipcshim-%u-a.b_c-9", (unsigned)geteuid());
    cr_assert_str_eq(buf, want);
    cr_assert_eq(registry_name("", buf, sizeof buf), -EINVAL);
    cr_assert_eq(registry_name("a/b", buf, sizeof buf), -EINVAL);
    cr_assert_eq(registry_name("..x y", buf, sizeof buf), -EINVAL);
    char longname[80];
    memset(longname, 'x', 65);
    longname[65] = 0;
    cr_assert_eq(registry_name(longname, buf, sizeof buf), -EINVAL);
    longname[64] = 0;
    cr_assert_eq(registry_name(longname, buf, sizeof buf), 0);
}

/* A bad IPCSHIM_DOMAIN is no file name, and does not turn tracking off:
 * the default domain is used (the registry under that name is not touched
 * here: it may be another program's). */
Test(registry, bad_domain_keeps_the_default)
{
    const char *bad[] = {"no/slashes", "../escape", "x y", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        test_option("DOMAIN", bad[i]);
        cr_expect_str_eq(options_get()->domain, "default", "IPCSHIM_DOMAIN=\"%s\"", bad[i]);
    }
    test_option("DOMAIN", "job-42.a_b");
    cr_expect_str_eq(options_get()->domain, "job-42.a_b");
}

Test(registry, create_then_attach)
{
    struct registry a, b;
    open_view(&a);
    cr_assert_eq(a.hdr->magic, REG_MAGIC);
    cr_assert_eq(a.hdr->ready, 1);
    cr_assert_eq(a.max_blocks, 64);
    struct stat st;
    cr_assert_eq(fstat(a.fd, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600);
    cr_assert_eq((size_t)st.st_size, a.size);
    /* An attacher asking for other bounds gets the creator's holder slots
     * (they size every bitmap) and the larger block and lease bounds. */
    struct reg_caps other = {4, 1000, 2000};
    cr_assert_eq(registry_open(&b, test_domain, &other), 0);
    cr_assert_eq(b.max_blocks, 64, "in use: unchanged until a growth");
    cr_assert_eq(b.limit_blocks, 1000);
    cr_assert_eq(b.max_holders, 8);
    cr_assert_eq(b.size, a.size);
    a.hdr->repairs = 7;
    cr_assert_eq(b.hdr->repairs, 7, "both views map the same memory");
    registry_close(&b);
    registry_close(&a);
}

/* Builds with -Dlock_checks=true check the protocol table's "lock" rows: a
 * block created without the registry lock aborts there. Elsewhere the test
 * skips, and expects no signal (a skip is not an abort). */
#if defined(IPCSHIM_LOCK_CHECKS) && !defined(NDEBUG)
#define LOCK_CHECK_SIGNAL SIGABRT
#else
#define LOCK_CHECK_SIGNAL 0
#endif
Test(registry, a_record_written_without_the_lock_aborts_a_debug_build, .signal = LOCK_CHECK_SIGNAL)
{
#if !defined(IPCSHIM_LOCK_CHECKS) || defined(NDEBUG)
    cr_skip_test("the lock checks are built only with -Dlock_checks=true (scripts/test's sanitizer "
                 "run has them)");
#endif
    struct registry a;
    open_view(&a);
    cr_assert_eq(registry_lock(&a), 0);
    uint32_t me = reg_holder_attach(&a, 1);
    registry_unlock(&a);
    struct ipc_handle h = make_handle(1);
    reg_block_create(&a, &h, 0x1000, 1, 0, me, 1, IPC_KIND_LEGACY);
}

/* Issue 27: one early process that asks for tiny bounds (or a setuid
 * program's user, before secure execution was honoured) cannot cap the
 * domain for everyone after it: a later process that asks for more raises
 * the bounds, and what it raised is what the first process's growth obeys
 * too. Asking for less never lowers them, and the creator's exact small
 * bounds hold until raised. */
Test(registry, a_later_process_raises_the_bounds)
{
    struct reg_caps tiny = {8, 2, 1}, wide = {8, 3000, 4000}, small = {8, 10, 10};
    struct registry a, b, c;
    cr_assert_eq(registry_open(&a, test_domain, &tiny), 0);
    cr_assert_eq(a.limit_blocks, 2);
    cr_assert_eq(a.limit_chunks * a.lease_chunk, 1, "a lease bound of 1 stays exact");
    cr_assert_eq(registry_lock(&a), 0);
    uint32_t me = reg_holder_attach(&a, 1);
    for (unsigned i = 0; i < 2; i++) {
        struct ipc_handle h = make_handle(i + 1);
        cr_assert_neq(reg_block_create(&a, &h, 0x1000ull * (i + 1), 1, 0, me, 1, IPC_KIND_LEGACY),
                      REG_NONE);
    }
    struct ipc_handle h3 = make_handle(3);
    cr_assert_eq(reg_block_create(&a, &h3, 0x3000, 1, 0, me, 1, IPC_KIND_LEGACY), REG_NONE,
                 "bounded at 2");
    registry_unlock(&a);
    /* A later process asks for more: raised, within what the file holds. */
    cr_assert_eq(registry_open(&b, test_domain, &wide), 0);
    cr_assert_eq(b.limit_blocks, 3000);
    cr_assert_eq(b.limit_chunks * b.lease_chunk, 4000);
    cr_assert_eq(a.hdr->limit_blocks, 3000, "raised in the shared header");
    /* ... and the first process grows past its own bound. */
    cr_assert_eq(registry_lock(&a), 0);
    for (unsigned i = 2; i < 3000; i++) {
        struct ipc_handle h = make_handle(i + 1);
        cr_assert_neq(reg_block_create(&a, &h, 0x1000ull * (i + 1), 1, 0, me, 1, IPC_KIND_LEGACY),
                      REG_NONE, "block %u", i);
    }
    struct ipc_handle last = make_handle(99999);
    cr_assert_eq(reg_block_create(&a, &last, 1, 1, 0, me, 1, IPC_KIND_LEGACY), REG_NONE,
                 "bounded at 3000");
    registry_unlock(&a);
    /* Asking for less lowers nothing. */
    cr_assert_eq(registry_open(&c, test_domain, &small), 0);
    cr_assert_eq(c.limit_blocks, 3000);
    registry_close(&c);
    registry_close(&b);
    registry_close(&a);
}

/* Creates the segment, damages it with `how`, and checks that both a fresh
 * view and the ipc layer refuse it. */
static void refuse_after(void (*how)(struct registry *r), int want)
{
    struct registry a, b;
    open_view(&a);
    how(&a);
    struct reg_caps caps = {8, 64, 128};
    cr_assert_eq(registry_open(&b, test_domain, &caps), want);
    cr_assert_eq(b.base, NULL);
    registry_close(&a);
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(2);
    cr_assert_eq(ipc_export(&h, 0x1000, 4096, 0, 1), -ENODEV);
    struct ipc_open t;
    uint64_t p;
    cr_assert_eq(ipc_open_begin(&h, 1, &t, &p), IPC_PASS);
    cr_assert_eq(ipc_free(0x1000), IPC_PASS);
    cr_assert_not(ipc_active());
}

static void bad_magic(struct registry *r)
{
    r->hdr->magic ^= 1;
}
static void bad_abi(struct registry *r)
{
    r->hdr->abi = REG_ABI + 1;
}
static void truncated(struct registry *r)
{
    cr_assert_eq(ftruncate(r->fd, 4096), 0);
}
static void grown(struct registry *r)
{
    cr_assert_eq(ftruncate(r->fd, (off_t)r->size + 4096), 0);
}
static void bad_caps(struct registry *r)
{
    r->hdr->max_blocks = 1u << 30;
}
static void shared_mode(struct registry *r)
{
    cr_assert_eq(fchmod(r->fd, 0644), 0);
}

Test(registry, refuses_wrong_magic)
{
    refuse_after(bad_magic, -EPROTO);
}
Test(registry, refuses_wrong_abi)
{
    refuse_after(bad_abi, -EPROTO);
}
Test(registry, refuses_truncated)
{
    refuse_after(truncated, -EPROTO);
}
Test(registry, refuses_wrong_size)
{
    refuse_after(grown, -EPROTO);
}
Test(registry, refuses_absurd_capacities)
{
    refuse_after(bad_caps, -EPROTO);
}
Test(registry, refuses_group_access)
{
    refuse_after(shared_mode, -EPERM);
}

Test(registry, refuses_never_initialised, .timeout = 10)
{
    char name[128];
    cr_assert_eq(registry_name(test_domain, name, sizeof name), 0);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, 1 << 20), 0); /* a creator that died before "ready" */
    close(fd);
    struct registry r;
    struct reg_caps caps = {8, 64, 128};
    uint64_t t0 = test_now_ns();
    cr_assert_eq(registry_open(&r, test_domain, &caps), -ETIMEDOUT);
    uint64_t waited = test_now_ns() - t0;
    cr_assert(waited >= 1500000000ull && waited < 5000000000ull, "waited %llu ns",
              (unsigned long long)waited);
}

Test(registry, records_and_hash)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 42);
    cr_assert_neq(me, REG_NONE);
    struct ipc_handle h1 = make_handle(1), h2 = make_handle(2);
    uint32_t b1 = reg_block_create(&r, &h1, 0x1000, 10, 0, me, 5, IPC_KIND_LEGACY);
    uint32_t b2 = reg_block_create(&r, &h2, 0x2000, 20, 0, me, 5, IPC_KIND_LEGACY);
    cr_assert_neq(b1, b2);
    cr_assert_eq(reg_block_find(&r, &h1), b1);
    cr_assert_eq(reg_block_find(&r, &h2), b2);
    cr_assert_eq(r.blocks[b1].pending, 1);
    uint64_t gen = r.blocks[b1].generation;
    uint32_t l = reg_lease_create(&r, b1, me);
    cr_assert_eq(reg_lease_find(&r, b1, me), l);
    cr_assert_eq(reg_block_leases(&r, b1), 1);
    reg_block_recycle(&r, b1);
    cr_assert_eq(reg_block_find(&r, &h1), REG_NONE);
    cr_assert_eq(reg_block_leases(&r, b1), 0, "recycling clears who holds it");
    cr_assert_eq(reg_lease_find(&r, b1, me), REG_NONE, "a lease of the old generation is not one");
    uint32_t b3 = reg_block_create(&r, &h1, 0x1000, 10, 0, me, 6, IPC_KIND_LEGACY);
    cr_assert_eq(b3, b1, "the free list is LIFO");
    cr_assert_gt(r.blocks[b3].generation, gen, "a reused record has a new generation");
    registry_unlock(&r);
    registry_close(&r);
}

/* The exporter's prefetch hints (registry.h) name the record the next
 * create takes and write nothing: the segment is byte for byte the same
 * after them, whatever index they are given (out of range, a live record,
 * a free one). */
Test(registry, prefetch_hints_change_nothing)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 7);
    struct ipc_handle h1 = make_handle(1), h2 = make_handle(2);
    uint32_t b1 = reg_block_create(&r, &h1, 0x1000, 10, 0, me, 5, IPC_KIND_LEGACY);
    uint32_t next = reg_block_next_free(&r);
    cr_assert_neq(next, REG_NONE);
    cr_assert_eq(r.blocks[next].state, BLOCK_FREE, "the hint names a free record");
    uint8_t *before = malloc(r.size);
    cr_assert_not_null(before);
    memcpy(before, r.base, r.size);
    uint32_t idxs[] = {b1, next, REG_NONE, r.max_blocks, r.max_blocks + 12345u};
    for (size_t i = 0; i < sizeof idxs / sizeof idxs[0]; i++) {
        reg_prefetch_free(&r, idxs[i]);
        reg_prefetch_create(&r, idxs[i], &h2);
        reg_prefetch_open(&r, idxs[i], reg_handle_hash(&h1));
    }
    struct registry unmapped = {.self_slot = REG_NONE};
    reg_prefetch_open(&unmapped, 0, reg_handle_hash(&h1)); /* before the first attach: nothing */
    cr_assert_eq(memcmp(before, r.base, r.size), 0, "a hint wrote to the segment");
    free(before);
    cr_assert_eq(reg_block_create(&r, &h2, 0x2000, 20, 0, me, 5, IPC_KIND_LEGACY), next,
                 "the create takes the record the hint named");
    registry_unlock(&r);
    registry_close(&r);
}

Test(registry, full_tables)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 1);
    for (unsigned i = 0; i < 64; i++) {
        struct ipc_handle h = make_handle(i);
        cr_assert_neq(reg_block_create(&r, &h, 0x1000 * (i + 1), 1, 0, me, 1, IPC_KIND_LEGACY),
                      REG_NONE);
    }
    struct ipc_handle h = make_handle(999);
    cr_assert_eq(reg_block_create(&r, &h, 1, 1, 0, me, 1, IPC_KIND_LEGACY), REG_NONE);
    for (unsigned i = 0; i < 128; i++)
        cr_assert_neq(reg_lease_create(&r, i % 64, me), REG_NONE);
    cr_assert_eq(reg_lease_create(&r, 0, me), REG_NONE);
    registry_unlock(&r);
    registry_close(&r);
}

/* The table starts small and doubles on demand, reserving what it adds:
 * the file's allocated bytes follow use, a second view that is behind
 * catches up at its next lock, and the bound still bounds it. */
Test(registry, grows_on_demand)
{
    struct reg_caps caps = {8, 3000, 128 * REG_LEASE_CHUNK};
    struct registry r, v;
    cr_assert_eq(registry_open(&r, test_domain, &caps), 0);
    cr_assert_eq(registry_open(&v, test_domain, &caps), 0);
    struct stat st0, st1;
    cr_assert_eq(fstat(r.fd, &st0), 0);
    cr_assert_eq(r.max_blocks, 1024, "starts with 1024 records in use");
    cr_assert_eq(r.limit_blocks, 3000);
    cr_assert_lt((uint64_t)st0.st_blocks * 512, (uint64_t)st0.st_size / 2, "sparse");
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 1);
    for (unsigned i = 0; i < 3000; i++) {
        struct ipc_handle h = make_handle(i + 1);
        cr_assert_neq(reg_block_create(&r, &h, 0x1000ull * (i + 1), 1, 0, me, 1, IPC_KIND_LEGACY),
                      REG_NONE, "block %u", i);
    }
    struct ipc_handle h = make_handle(99999);
    cr_assert_eq(reg_block_create(&r, &h, 1, 1, 0, me, 1, IPC_KIND_LEGACY), REG_NONE,
                 "the bound bounds it");
    cr_assert_eq(r.max_blocks, 3000);
    cr_assert_eq(r.nbuckets, 4096);
    for (unsigned i = 0; i < 3000; i += 7) {
        struct ipc_handle k = make_handle(i + 1);
        uint64_t gen;
        uint32_t b = reg_block_lookup(&r, &k, reg_handle_hash(&k), &gen);
        cr_assert(b != REG_NONE && r.blocks[b].base == 0x1000ull * (i + 1), "block %u", i);
    }
    /* 200 leases: the chunk table grows from 32 chunks too. */
    for (unsigned i = 0; i < 40 * REG_LEASE_CHUNK; i++)
        cr_assert_neq(reg_lease_create(&r, i % 3000, me), REG_NONE);
    cr_assert_eq(r.nchunks, 64);
    registry_unlock(&r);
    cr_assert_eq(fstat(r.fd, &st1), 0);
    cr_assert_gt(st1.st_blocks, st0.st_blocks, "what it added is reserved");
    uint64_t gen;
    struct ipc_handle last = make_handle(3000);
    cr_assert_eq(v.max_blocks, 1024, "the second view is behind ...");
    cr_assert_eq(reg_block_lookup(&v, &last, reg_handle_hash(&last), &gen), REG_NONE,
                 "... and only misses records");
    cr_assert_eq(registry_lock(&v), 0);
    cr_assert_eq(v.max_blocks, 3000, "... until its next lock");
    cr_assert_neq(reg_block_find(&v, &last), REG_NONE);
    registry_unlock(&v);
    registry_close(&v);
    registry_close(&r);
}

/* Who holds a block, bit by bit, across words; setting twice changes
 * nothing, and the last clear says the block is free. */
Test(registry, holders_of_a_block)
{
    struct reg_caps caps = {130, 64, 4096};
    struct registry r;
    cr_assert_eq(registry_open(&r, test_domain, &caps), 0);
    cr_assert_eq(r.held_words, 3);
    cr_assert_eq(reg_block_next_holder(&r, 7, 0), REG_NONE);
    cr_assert(reg_hold(&r, 7, 3));
    cr_assert(reg_hold(&r, 7, 69));
    cr_assert(reg_hold(&r, 7, 129));
    cr_assert_not(reg_hold(&r, 7, 69), "already set");
    uint32_t seen[4], n = 0;
    for (uint32_t h = reg_block_next_holder(&r, 7, 0); h != REG_NONE && n < 4;
         h = reg_block_next_holder(&r, 7, h + 1))
        seen[n++] = h;
    cr_assert_eq(n, 3);
    cr_assert(seen[0] == 3 && seen[1] == 69 && seen[2] == 129);
    cr_assert_eq(reg_block_leases(&r, 7), 3);
    cr_assert_not(reg_unhold(&r, 7, 3));
    cr_assert_not(reg_unhold(&r, 7, 69));
    cr_assert(reg_unhold(&r, 7, 129), "the last clear leaves it free");
    cr_assert_not(reg_block_held(&r, 7));
    registry_close(&r);
}

/* Holder slots and lease chunks are claimed without the registry lock:
 * with the lock held by the parent all along, six processes starting at
 * once each get a slot and a chunk of their own; a FREE slot whose lock
 * byte another description holds is passed over; when every chunk is
 * owned the claim says so (the lock-held grow takes over). */
Test(registry, slots_and_chunks_claimed_without_the_lock)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0, "held by the parent throughout");
    int other = open(r.path, O_RDWR | O_CLOEXEC); /* another description */
    cr_assert_geq(other, 0);
    cr_assert_eq(liveness_lock_byte(other, r.lock_base + 0), 0, "slot 0's byte is taken");
    enum { KIDS = 6 };
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    pid_t kids[KIDS];
    for (int k = 0; k < KIDS; k++) {
        kids[k] = fork();
        if (kids[k] == 0) {
            close(down[1]);
            struct registry mine;
            struct reg_caps caps = {8, 64, 128};
            uint32_t got[2] = {REG_NONE, REG_NONE};
            if (registry_open(&mine, options_get()->domain, &caps) == 0) {
                got[0] = reg_holder_claim(&mine, 100 + (uint64_t)k);
                if (got[0] != REG_NONE && reg_lease_claim(&mine) >= 0) {
                    uint32_t li = reg_lease_take(&mine);
                    got[1] = li == REG_NONE ? REG_NONE : li / mine.lease_chunk;
                }
            }
            if (write(up[1], got, sizeof got) != sizeof got) _exit(3);
            char x;
            (void)!read(down[0], &x, 1); /* alive until the parent has looked */
            _exit(0);
        }
    }
    close(up[1]);
    close(down[0]);
    bool slot_seen[8] = {0}, chunk_seen[8] = {0};
    for (int k = 0; k < KIDS; k++) {
        uint32_t got[2];
        cr_assert_eq(read(up[0], got, sizeof got), (ssize_t)sizeof got);
        cr_assert(got[0] != REG_NONE && got[0] != 0 && got[0] < 8, "a slot, not slot 0: %u",
                  got[0]);
        cr_assert(got[1] != REG_NONE && got[1] < r.nchunks, "a chunk");
        cr_assert_not(slot_seen[got[0]], "slot %u taken twice", got[0]);
        cr_assert_not(chunk_seen[got[1]], "chunk %u taken twice", got[1]);
        slot_seen[got[0]] = chunk_seen[got[1]] = true;
        cr_assert_eq(reg_chunk_owner(&r, got[1]), got[0]);
        cr_assert_eq(r.holders[got[0]].state, HOLDER_ACTIVE);
    }
    /* The last free slot (slot 0's byte is held elsewhere) and the last chunks. */
    uint32_t me = reg_holder_claim(&r, 7);
    cr_assert(me != REG_NONE && me != 0 && !slot_seen[me]);
    cr_assert_eq(reg_holder_claim(&r, 8), REG_NONE, "no FREE slot left whose byte is free");
    int rc;
    unsigned claimed = 0;
    while ((rc = reg_lease_claim(&r)) >= 0)
        claimed++;
    cr_assert_eq(rc, -EAGAIN, "every chunk is owned");
    cr_assert_eq(claimed, r.nchunks - KIDS);
    close(down[1]);
    for (int k = 0; k < KIDS; k++)
        waitpid(kids[k], NULL, 0);
    close(other);
    registry_unlock(&r);
    registry_close(&r);
}

/* The chunk table grows without the lock: a claim of one of the last
 * quarter of the chunks doubles it ahead of need, and two growers at once
 * (another view) change nothing; the new chunks are unowned. */
Test(registry, chunk_table_grows_without_the_lock)
{
    struct reg_caps caps = {8, 64, 128 * REG_LEASE_CHUNK};
    struct registry r, v;
    cr_assert_eq(registry_open(&r, test_domain, &caps), 0);
    cr_assert_eq(registry_open(&v, test_domain, &caps), 0);
    cr_assert_eq(registry_lock(&r), 0, "held throughout: nothing below takes it");
    cr_assert_neq(reg_holder_claim(&r, 1), REG_NONE);
    cr_assert_neq(reg_holder_claim(&v, 2), REG_NONE);
    cr_assert_eq(r.nchunks, 32);
    for (unsigned c = 0; c < 24; c++)
        cr_assert_eq(reg_lease_claim(&r), 0, "chunk %u", c);
    cr_assert_eq(r.nchunks, 32, "not yet");
    cr_assert_eq(reg_lease_claim(&v), 0);
    cr_assert_eq(v.nchunks, 64, "one of the last quarter: doubled ahead");
    cr_assert_eq(reg_lease_claim(&r), 0);
    cr_assert_eq(r.nchunks, 64, "the other view sees it at its next claim");
    for (uint32_t c = 26; c < 64; c++)
        cr_assert_eq(reg_chunk_owner(&r, c), REG_NONE, "chunk %u unowned", c);
    while (r.nchunks < 128)
        cr_assert_eq(reg_lease_claim(&r), 0);
    unsigned n = 0;
    while (reg_lease_claim(&r) == 0)
        n++;
    cr_assert_eq(reg_lease_claim(&v), -EAGAIN, "at capacity, every chunk owned");
    cr_assert_eq(r.nchunks, 128);
    registry_unlock(&r);
    registry_close(&v);
    registry_close(&r);
}

/* Length of holder k's list of exports, following exp_next (at most 100). */
static unsigned exports_of(struct registry *r, uint32_t k)
{
    unsigned n = 0;
    for (uint32_t f = r->export_heads[k]; f && n < 100; f = r->blocks[f - 1].exp_next)
        n++;
    return n;
}

/* Each exporter's blocks are on its own list: a recycle or an orphaning
 * takes a block off; letting a holder go walks its list only (the other
 * holder's blocks untouched), recycling what nothing holds and orphaning
 * the rest; a corrupt list falls back to the table; repair rebuilds them. */
Test(registry, exports_listed_per_holder)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t a = reg_holder_attach(&r, 1), b = reg_holder_attach(&r, 2);
    cr_assert(a != REG_NONE && b != REG_NONE && a != b);
    uint32_t ablk[5], bblk[3];
    for (unsigned i = 0; i < 5; i++) {
        struct ipc_handle h = make_handle(i + 1);
        ablk[i] = reg_block_create(&r, &h, 0x1000 * (i + 1), 1, 0, a, 1, IPC_KIND_LEGACY);
    }
    for (unsigned i = 0; i < 3; i++) {
        struct ipc_handle h = make_handle(i + 100);
        bblk[i] = reg_block_create(&r, &h, 0x100000 * (i + 1), 1, 0, b, 1, IPC_KIND_LEGACY);
    }
    cr_assert_eq(exports_of(&r, a), 5);
    cr_assert_eq(exports_of(&r, b), 3);
    reg_block_recycle(&r, ablk[1]);
    reg_block_orphan(&r, ablk[3]);
    cr_assert_eq(exports_of(&r, a), 3, "recycled and orphaned blocks are off the list");
    cr_assert(reg_hold(&r, ablk[2], b));
    reg_holder_let_go(&r, a);
    cr_assert_eq(exports_of(&r, a), 0);
    cr_assert_eq(r.blocks[ablk[2]].state, BLOCK_ORPHANED, "held by b: orphaned");
    cr_assert_eq(r.blocks[ablk[0]].state, BLOCK_FREE, "held by nobody: recycled");
    cr_assert_eq(r.blocks[ablk[4]].state, BLOCK_FREE);
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(r.blocks[bblk[i]].state, BLOCK_LIVE, "the other holder's blocks untouched");
    cr_assert_eq(exports_of(&r, b), 3);
    /* Scrambled links: repair rebuilds the lists from the records. */
    for (unsigned i = 0; i < 3; i++)
        r.blocks[bblk[i]].exp_next = 77777, r.blocks[bblk[i]].exp_on = 0;
    r.export_heads[b] = 0;
    registry_repair(&r);
    cr_assert_eq(exports_of(&r, b), 3, "rebuilt");
    /* A corrupt list head: letting go falls back to the table. */
    r.export_heads[b] = 123456;
    reg_holder_let_go(&r, b);
    for (unsigned i = 0; i < 3; i++)
        cr_assert_eq(r.blocks[bblk[i]].state, BLOCK_FREE, "found through the table");
    cr_assert_eq(r.export_heads[b], 0);
    registry_unlock(&r);
    registry_close(&r);
}

/* Scrambles every derived structure; repair must rebuild them from records. */
Test(registry, repair_rebuilds_derived)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 7);
    struct ipc_handle h1 = make_handle(1), h2 = make_handle(2);
    uint32_t b1 = reg_block_create(&r, &h1, 0x1000, 10, 0, me, 5, IPC_KIND_LEGACY);
    uint32_t b2 = reg_block_create(&r, &h2, 0x2000, 20, 0, me, 5, IPC_KIND_LEGACY);
    uint32_t l1 = reg_lease_create(&r, b1, me);
    r.leases[l1].intent = LEASE_OPEN;
    for (uint32_t i = 0; i < r.nbuckets; i++)
        r.buckets[i] = 0xdeadbeef;
    for (uint32_t i = 0; i < r.max_blocks; i++)
        r.blocks[i].hash_next = i; /* cycles */
    r.hdr->block_free = 3;
    reg_block_held_words(&r, b2)[0] |= 1ull << 5; /* a bit of a slot nobody holds */
    /* Hostile indexes never crash lookups (bounded walks, checked indexes). */
    cr_assert_eq(reg_block_find(&r, &h1), REG_NONE);
    uint64_t gen;
    cr_assert_eq(reg_block_lookup(&r, &h1, reg_handle_hash(&h1), &gen), REG_NONE);
    registry_repair(&r);
    cr_assert_eq(reg_block_lookup(&r, &h1, reg_handle_hash(&h1), &gen), b1);
    cr_assert_eq(gen, r.blocks[b1].generation);
    cr_assert_eq(reg_block_find(&r, &h1), b1);
    cr_assert_eq(reg_block_find(&r, &h2), b2);
    cr_assert_eq(reg_lease_find(&r, b1, me), l1);
    cr_assert_eq(reg_block_leases(&r, b2), 0);
    struct ipc_handle h3 = make_handle(3);
    uint32_t b3 = reg_block_create(&r, &h3, 0x3000, 1, 0, me, 5, IPC_KIND_LEGACY);
    cr_assert(b3 != REG_NONE && b3 != b1 && b3 != b2);
    cr_assert_neq(reg_lease_create(&r, b2, me), l1);
    registry_unlock(&r);
    registry_close(&r);
}

static void *retire_block(void *arg)
{
    struct registry *r = arg;
    return (void *)(uintptr_t)reg_block_retire(r, 0);
}

/* The exporter retires without the lock, so a repair under it may meet a
 * block mid-decision (RETIRING): it makes it LIMBO again, and the
 * exporter's answer, a CAS from RETIRING, then fails: the block stays in
 * limbo rather than being freed after the repair said it was not. */
Test(registry, repair_during_a_lockfree_retire_keeps_the_block)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 7);
    struct ipc_handle h = make_handle(1);
    uint32_t bi = reg_block_create(&r, &h, 0x1000, 10, 0, me, 5, IPC_KIND_LEGACY);
    registry_unlock(&r);
    cr_assert_eq(bi, 0);
    struct reg_block *b = &r.blocks[bi];
    __atomic_store_n(&b->pending, 0, __ATOMIC_SEQ_CST);         /* claimed */
    __atomic_store_n(&b->state, BLOCK_LIMBO, __ATOMIC_SEQ_CST); /* freed by its program */
    test_option("TEST_DELAY_US", "300000"); /* the pause between RETIRING and the answer */
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, retire_block, &r), 0);
    while (__atomic_load_n(&b->state, __ATOMIC_SEQ_CST) != BLOCK_RETIRING)
        usleep(100);
    registry_repair(&r);
    cr_assert_eq(b->state, BLOCK_LIMBO, "the repair reads a decision in flight as limbo");
    void *retired;
    pthread_join(t, &retired);
    test_option("TEST_DELAY_US", "0");
    cr_assert_not((uintptr_t)retired, "the exporter's answer lost to the repair's");
    cr_assert_eq(b->state, BLOCK_LIMBO, "still in limbo: freed later, by the collector");
    cr_assert_eq(reg_block_find(&r, &h), bi, "and still found");
    registry_close(&r);
}

/* A process that dies holding the lock: the next locker repairs and goes on. */
Test(registry, lock_owner_death_repaired)
{
    struct registry r;
    open_view(&r);
    pid_t pid = fork();
    if (pid == 0) {
        struct registry c;
        struct reg_caps caps = {8, 64, 128};
        if (registry_open(&c, test_domain, &caps) || registry_lock(&c)) _exit(1);
        _exit(0); /* dies holding it */
    }
    cr_assert_eq(child_wait(pid), 0);
    cr_assert_eq(registry_lock(&r), 0);
    cr_assert_eq(r.hdr->repairs, 1);
    registry_unlock(&r);
    cr_assert_eq(registry_lock(&r), 0, "the lock is consistent again");
    cr_assert_eq(r.hdr->repairs, 1);
    registry_unlock(&r);
    registry_close(&r);
}

/* Killed in the middle of a mutation, with derived indexes half-written. */
Test(registry, killed_mid_mutation_repaired)
{
    struct registry r;
    open_view(&r);
    cr_assert_eq(registry_lock(&r), 0);
    uint32_t me = reg_holder_attach(&r, 9);
    struct ipc_handle h1 = make_handle(1);
    uint32_t b1 = reg_block_create(&r, &h1, 0x1000, 10, 0, me, 5, IPC_KIND_LEGACY);
    registry_unlock(&r);
    pid_t pid = fork();
    if (pid == 0) {
        struct registry c;
        struct reg_caps caps = {8, 64, 128};
        if (registry_open(&c, test_domain, &caps) || registry_lock(&c)) _exit(1);
        c.hdr->block_free = b1; /* a free list pointing at a live record */
        c.buckets[0] = 0xffff0000;
        kill(getpid(), SIGKILL);
        _exit(2);
    }
    cr_assert_eq(child_wait(pid), 128 + SIGKILL);
    cr_assert_eq(registry_lock(&r), 0);
    cr_assert_eq(r.hdr->repairs, 1);
    cr_assert_eq(reg_block_find(&r, &h1), b1);
    struct ipc_handle h2 = make_handle(2);
    uint32_t b2 = reg_block_create(&r, &h2, 0x2000, 10, 0, me, 5, IPC_KIND_LEGACY);
    cr_assert(b2 != REG_NONE && b2 != b1);
    cr_assert_neq(reg_lease_create(&r, b1, me), REG_NONE);
    registry_unlock(&r);
    registry_close(&r);
}

/* A malformed capacity keeps the default, as the warning says (it used to
 * keep the digits before the suffix: 64K made a 64-block registry that
 * outlived everyone in /dev/shm). */
Test(registry, malformed_capacity_keeps_the_default)
{
    test_option("MAX_BLOCKS", "64K");
    cr_assert_eq(options_get()->max_blocks, 4194304);
    test_option("MAX_LEASES", "12x");
    cr_assert_eq(options_get()->max_leases, 8388608);
    test_option("MAX_BLOCKS", "4096");
    cr_assert_eq(options_get()->max_blocks, 4096);
}

/* Issue 27: a bound beyond what a registry can hold is clamped to the
 * largest allowed, and 0 is the default, each with one line naming the
 * variable and the value used (above 2^32 it used to be clamped to a value
 * the registry refused: the whole job ran untracked). */
Test(registry, out_of_range_bounds_fall_back_with_one_line)
{
    char log_path[64];
    snprintf(log_path, sizeof log_path, "/tmp/reg-bounds-%d.log", (int)getpid());
    unlink(log_path);
    test_option("LOG_FILE", log_path);
    test_option("LOG", "warn");
    test_option("MAX_BLOCKS", "8589934592"); /* 2^33 */
    test_option("MAX_LEASES", "16777217");   /* 2^24 + 1 */
    test_option("MAX_HOLDERS", "0");
    struct reg_caps caps;
    registry_caps_from_options(options_get(), &caps);
    cr_expect_eq(caps.max_blocks, 1u << 24);
    cr_expect_eq(caps.max_leases, 1u << 24);
    cr_expect_eq(caps.max_holders, 512);
    registry_caps_from_options(options_get(), &caps); /* once per variable, not per call */
    struct reg_layout l;
    cr_expect_eq(registry_layout(&caps, &l), 0, "the registry refuses the clamped bounds");
    /* And the ipc core tracks under them. */
    test_ipc_init(&fake_host);
    struct ipc_handle h = make_handle(27);
    cr_expect_eq(ipc_export(&h, 0x1000, 4096, 0, 0xc0), 0, "not tracked");
    struct registry v;
    cr_assert_eq(registry_open(&v, options_get()->domain, &caps), 0);
    cr_expect_eq(v.cap_blocks, 1u << 24);
    cr_expect_eq(v.max_holders, 512);
    registry_close(&v);
    ipc_shutdown();
    FILE *f = fopen(log_path, "r");
    char text[4096] = "";
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
    }
    unlink(log_path);
    cr_expect(strstr(text, "IPCSHIM_MAX_BLOCKS=8589934592 is more than a registry can hold; "
                           "using 16777216"),
              "log:\n%s", text);
    cr_expect(strstr(text, "IPCSHIM_MAX_LEASES=16777217 is more than a registry can hold; "
                           "using 16777216"),
              "log:\n%s", text);
    cr_expect(strstr(text, "IPCSHIM_MAX_HOLDERS=0 is not a valid bound; using the default 512"),
              "log:\n%s", text);
    int lines = 0;
    for (const char *p = text; (p = strstr(p, ": warn: IPCSHIM_MAX_")); p++)
        lines++;
    cr_expect_eq(lines, 3, "one line for each variable:\n%s", text);
}

/* Containers: a holder in another PID namespace (a pod sharing /dev/shm)
 * has a pid that means something else here; its lock byte alone says it is
 * alive, and its exit (the kernel drops the lock) says it is not. */
Test(registry, holder_in_another_pid_namespace_is_judged_by_its_lock, .timeout = 20)
{
    struct registry r;
    open_view(&r);
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    pid_t c = fork();
    if (c == 0) {
        close(up[0]);
        close(down[1]); /* so that the parent's close is the end of the pipe */
        if (unshare(CLONE_NEWPID) != 0) _exit(77); /* not allowed here */
        bool own_proc =
            unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
        pid_t g = fork(); /* pid 1 of the new namespace */
        if (g == 0) {
            /* A container's own /proc, where pid 1 is this process: the start
             * time it records is its own, not the host's init's. */
            if (own_proc) (void)!mount("proc", "/proc", "proc", 0, NULL);
            struct registry mine;
            uint32_t idx = REG_NONE;
            struct reg_caps caps = {(uint32_t)options_get()->max_holders,
                                    (uint32_t)options_get()->max_blocks,
                                    (uint32_t)options_get()->max_leases};
            if (registry_open(&mine, options_get()->domain, &caps) == 0 &&
                registry_lock(&mine) == 0) {
                idx = reg_holder_attach(&mine, 77);
                registry_unlock(&mine);
            }
            if (write(up[1], &idx, sizeof idx) != sizeof idx) _exit(3);
            char x;
            (void)!read(down[0], &x, 1); /* until the parent closes it */
            _exit(0);
        }
        int st = 0;
        waitpid(g, &st, 0);
        _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 4);
    }
    close(up[1]);
    close(down[0]);
    uint32_t idx = REG_NONE;
    ssize_t n = read(up[0], &idx, sizeof idx);
    if (n != sizeof idx) {
        int st = 0;
        waitpid(c, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
            cr_skip_test("unshare(CLONE_NEWPID) is not allowed here");
        cr_assert_fail("the child in a new PID namespace did not attach (status %d)", st);
    }
    cr_assert_neq(idx, REG_NONE);
    cr_assert_eq(r.holders[idx].pid, 1, "pid 1 in its own namespace");
    cr_assert_neq(r.holders[idx].pidns, 0);
    cr_assert(reg_holder_alive(&r, idx), "alive by its lock, whatever pid 1 is here");
    close(down[1]);
    int st = 0;
    waitpid(c, &st, 0);
    cr_assert_not(reg_holder_alive(&r, idx), "dead once its lock went with it");
    registry_close(&r);
}

/* Issue 33: the last process out removes the file, but never while a slot
 * is in use or an attacher is between taking its slot's lock byte and
 * publishing the slot (take_slot); the decision it takes back leaves
 * `removing` at 0, and a lock repair clears a dead decider's. */
Test(registry, removed_only_when_no_slot_is_used_or_being_taken)
{
    struct reg_caps caps = {8, 64, 128};
    struct registry a, b;
    cr_assert_eq(registry_open(&a, test_domain, &caps), 0);
    cr_assert_eq(registry_open(&b, test_domain, &caps), 0);
    cr_assert_eq(registry_lock(&a), 0);
    uint32_t other = reg_holder_attach(&b, 7);
    cr_assert_neq(other, REG_NONE);
    cr_assert_not(registry_remove_if_unused(&a), "removed under an active holder");
    cr_assert_eq(a.hdr->removing, 0);
    reg_holder_release(&b, other);
    /* An attacher that holds its byte but has not published its slot yet. */
    int fd = open(a.path, O_RDWR | O_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(liveness_lock_byte(fd, a.lock_base + 5), 0);
    cr_assert_not(registry_remove_if_unused(&a), "removed under an attacher's lock byte");
    cr_assert_eq(a.hdr->removing, 0);
    close(fd);
    a.hdr->removing = 1; /* a decider that died before deciding */
    registry_repair(&a);
    cr_assert_eq(a.hdr->removing, 0, "the repair left the flag set");
    cr_assert(registry_remove_if_unused(&a));
    cr_assert(registry_removing(&b), "a late attacher is told to back off");
    struct stat st;
    cr_assert_neq(stat(a.path, &st), 0, "the file is still there");
    registry_unlock(&a);
    registry_close(&b);
    registry_close(&a);
}
