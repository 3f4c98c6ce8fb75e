/* ipc: the lifecycle across processes. The test process is usually the
 * exporter; importers are fork() children driven through a pipe. The fake
 * host records deferred frees. */
#include "helpers.h"
#include "ipcshim.h"
#include "inspect.h"
#include "liveness.h"

#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>

#define BASE 0x10000000ull
#define CTX 0xc0ull

static void setup(void)
{
    test_domain_setup("ipc");
    test_option("COLLECTOR", "0");
    test_option("MAX_BLOCKS", "256");
    test_option("MAX_HOLDERS", "16");
    test_option("MAX_LEASES", "512");
    test_ipc_init(&fake_host);
}

TestSuite(ipc, .init = setup, .fini = test_domain_teardown, .timeout = 20);

static struct ipcshim_stats stats(void)
{
    struct ipcshim_stats s;
    memset(&s, 0, sizeof s);
    ipc_stats(&s);
    return s;
}

/* ---- an importer child, driven by commands ---- */

enum {
    CMD_OPEN = 1,
    CMD_CLOSE,
    CMD_EXIT,
    CMD_STALE_ABORT,
    CMD_LOCK_AND_DIE,
    CMD_CLOSE_LATER,
    CMD_IMPORT,      /* a pool import (ipc_import_begin) in context arg */
    CMD_UNIMPORT,    /* a free of arg that may end a pool import */
    CMD_PASSES,      /* ipc_free_passes(arg) */
    CMD_IMPORT_POOL, /* a pool import through pool arg (ipc_import_pool_begin) in context 5 */
    CMD_CTX_GONE,    /* ipc_context_gone(arg): the number forgotten */
};

static void importer_loop(struct chan *c, struct ipc_handle h)
{
    struct ipc_open first;
    bool have_first = false;
    for (;;) {
        uint64_t cmd = CHILD_RECV(c), arg = CHILD_RECV(c);
        switch (cmd) {
        case CMD_OPEN: {
            struct ipc_open t;
            uint64_t ptr = 0;
            int r = ipc_open_begin(&h, arg, &t, &ptr);
            if (r == IPC_REAL) {
                ptr = 0x7000000000ull + (arg << 20);
                ipc_open_commit(&t, ptr);
                if (!have_first) first = t, have_first = true;
            }
            CHILD_SEND(c, (uint64_t)(int64_t)r);
            CHILD_SEND(c, ptr);
            break;
        }
        case CMD_CLOSE_LATER:
            sleep_ms(150);
            /* fall through */
        case CMD_CLOSE: {
            struct ipc_close t;
            uint64_t before = test_now_ns();
            int r = ipc_close_begin(arg, &t);
            if (r == IPC_REAL) ipc_close_finish(&t);
            CHILD_SEND(c, (uint64_t)(int64_t)r);
            CHILD_SEND(c, before);
            break;
        }
        case CMD_IMPORT: {
            struct ipc_open t;
            uint64_t ptr = 0;
            int r = ipc_import_begin(&h, arg, &t, &ptr);
            if (r == IPC_REAL) {
                ptr = 0x7100000000ull + (arg << 20);
                ipc_open_commit(&t, ptr);
            }
            CHILD_SEND(c, (uint64_t)(int64_t)r);
            CHILD_SEND(c, ptr);
            break;
        }
        case CMD_UNIMPORT: {
            struct ipc_close t;
            int r = ipc_unimport_begin(arg, &t);
            if (r == IPC_REAL) ipc_close_finish(&t);
            CHILD_SEND(c, (uint64_t)(int64_t)r);
            CHILD_SEND(c, 0);
            break;
        }
        case CMD_IMPORT_POOL: {
            struct ipc_open t;
            uint64_t ptr = 0;
            int r = ipc_import_pool_begin(&h, 5, arg, &t, &ptr);
            if (r == IPC_REAL) {
                ptr = 0x7100000000ull + (5ull << 20);
                ipc_open_commit(&t, ptr);
            }
            CHILD_SEND(c, (uint64_t)(int64_t)r);
            CHILD_SEND(c, ptr);
            break;
        }
        case CMD_CTX_GONE:
            CHILD_SEND(c, (uint64_t)(int64_t)ipc_context_gone(arg, NULL));
            CHILD_SEND(c, 0);
            break;
        case CMD_PASSES:
            CHILD_SEND(c, (uint64_t)ipc_free_passes(arg));
            CHILD_SEND(c, 0);
            break;
        case CMD_STALE_ABORT:
            ipc_open_abort(&first); /* a ticket from an earlier generation */
            CHILD_SEND(c, 0);
            CHILD_SEND(c, 0);
            break;
        case CMD_LOCK_AND_DIE: {
            struct registry v;
            open_view(&v);
            registry_lock(&v);
            kill(getpid(), SIGKILL);
            _exit(3);
        }
        case CMD_EXIT:
        default:
            _exit(0);
        }
    }
}

static void importer_start(struct importer *im, struct ipc_handle h)
{
    importer_spawn(im, importer_loop, h);
}

static int importer_open(struct importer *im, uint64_t ctx, uint64_t *ptr)
{
    return importer_call(im, CMD_OPEN, ctx, ptr);
}

static int importer_close(struct importer *im, uint64_t ptr)
{
    return importer_call(im, CMD_CLOSE, ptr, NULL);
}

static void importer_stop(struct importer *im)
{
    PARENT_SEND(&im->c, CMD_EXIT);
    PARENT_SEND(&im->c, 0);
    cr_assert_eq(child_wait(im->pid), 0);
}

static void importer_kill(struct importer *im)
{
    kill(im->pid, SIGKILL);
    child_wait(im->pid);
}

static uint32_t holder_of(struct registry *v, pid_t pid)
{
    for (uint32_t i = 0; i < v->max_holders; i++)
        if (v->holders[i].state == HOLDER_ACTIVE && v->holders[i].pid == pid) return i;
    return REG_NONE;
}

static unsigned records_with(struct registry *v, const struct ipc_handle *h)
{
    unsigned n = 0;
    for (uint32_t i = 0; i < v->max_blocks; i++)
        if (v->blocks[i].state != BLOCK_FREE && !memcmp(v->blocks[i].handle, h->bytes, 64)) n++;
    return n;
}

/* ---- tests ---- */

Test(ipc, export_open_free_close_reclaim)
{
    struct ipc_handle h = make_handle(1);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    cr_assert(ipc_active());
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    cr_assert_neq(bi, REG_NONE);
    cr_assert_eq(v.blocks[bi].pending, 1);

    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(v.blocks[bi].pending, 0, "the open claimed the hand-off");
    cr_assert_eq(reg_block_leases(&v, bi), 1);
    cr_assert_eq(first_lease(&v, bi)->intent, LEASE_OPEN);

    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    struct ipcshim_stats s = stats();
    cr_assert_eq(s.frees_deferred, 1);
    cr_assert_eq(s.limbo_blocks, 1);
    cr_assert_eq(s.limbo_bytes, 4096);
    cr_assert_eq(v.blocks[bi].state, BLOCK_LIMBO);
    cr_assert_eq(ipc_collect(), 0);
    cr_assert_eq(fake_free_count(), 0);

    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(fake_free_count(), 1);
    cr_assert_eq(fake_freed[0], BASE);
    s = stats();
    cr_assert_eq(s.frees_reclaimed, 1);
    cr_assert_eq(s.bytes_reclaimed, 4096);
    cr_assert_eq(s.limbo_blocks, 0);
    cr_assert_gt(s.longest_limbo_ns, 0);
    cr_assert_eq(v.blocks[bi].state, BLOCK_RETIRED, "recycled lazily, at the next round trip");
    cr_assert_eq(importer_open(&im, 1, &ptr), -ENOENT, "retired: no open can succeed");
    cr_assert_eq(ipc_collect(), 0);
    cr_assert_eq(reg_block_find(&v, &h), REG_NONE, "recycled");
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_PASS, "an unknown handle again");
    importer_stop(&im);
}

/* Pool IPC: the same record, lease and limbo; the importer lets go with a
 * free, which a legacy close does not do, and which the free path's filter
 * must not pass by. */
Test(ipc, pool_import_is_let_go_of_by_a_free)
{
    struct ipc_handle h = make_handle(2);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct ipc_open own;
    uint64_t own_ptr = 0;
    cr_assert_eq(ipc_import_begin(&h, CTX, &own, &own_ptr), IPC_PASS,
                 "an import of our own export is CUDA's to answer");

    struct importer im;
    importer_start(&im, h);
    uint64_t ptr, again;
    cr_assert_eq(importer_call(&im, CMD_PASSES, 0x7100000000ull + (5ull << 20), NULL), 1,
                 "nothing imported yet: every free passes");
    cr_assert_eq(importer_call(&im, CMD_IMPORT, 5, &ptr), IPC_REAL);
    cr_assert_eq(importer_call(&im, CMD_IMPORT, 5, &again), IPC_DONE,
                 "the same import again: the same pointer, not counted (NVIDIA's driver)");
    cr_assert_eq(again, ptr);
    cr_assert_eq(importer_call(&im, CMD_PASSES, ptr, NULL), 0, "the filter sees the import");
    cr_assert_eq(importer_open(&im, 5, &again), IPC_PASS,
                 "the same bytes through the legacy door are not this import");

    cr_assert_eq(ipc_free(BASE), IPC_DONE, "imported: the exporter's free waits in limbo");
    cr_assert_eq(importer_close(&im, ptr), IPC_PASS, "a legacy close does not end an import");
    cr_assert_eq(ipc_collect(), 0, "the import still held");
    cr_assert_eq(importer_call(&im, CMD_UNIMPORT, ptr, NULL), IPC_REAL,
                 "one free ends both imports, as the driver's does");
    cr_assert_eq(importer_call(&im, CMD_UNIMPORT, ptr, NULL), IPC_PASS,
                 "ended: a free like any (the driver refuses it)");
    cr_assert_eq(importer_call(&im, CMD_PASSES, ptr, NULL), 1, "the filter let go of it");
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(fake_freed[0], BASE);
    importer_stop(&im);
}

Test(ipc, pool_reimport_through_another_pool_asks_the_driver)
{
    struct ipc_handle h = make_handle(4);
    cr_assert_eq(ipc_export_identity(&h, BASE, 4096, 0, CTX, 0, IPC_KIND_POOL), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr, again;
    cr_assert_eq(importer_call(&im, CMD_IMPORT_POOL, 0xa0, &ptr), IPC_REAL);
    cr_assert_eq(importer_call(&im, CMD_IMPORT_POOL, 0xa0, &again), IPC_DONE,
                 "through the same pool: the same pointer");
    cr_assert_eq(again, ptr);
    cr_assert_eq(importer_call(&im, CMD_IMPORT_POOL, 0, &again), IPC_PASS,
                 "through a NULL pool: the driver answers");
    cr_assert_eq(importer_call(&im, CMD_IMPORT_POOL, 0xb0, &again), IPC_PASS,
                 "through another pool: the driver answers");
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(importer_call(&im, CMD_UNIMPORT, ptr, NULL), IPC_REAL, "still one import");
    cr_assert_eq(ipc_collect(), 1);
    importer_stop(&im);
}

Test(ipc, a_context_gone_forgets_its_mappings_and_leases)
{
    struct ipc_handle h = make_handle(6);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t p1, p2, again;
    cr_assert_eq(importer_open(&im, 1, &p1), IPC_REAL);
    cr_assert_eq(importer_open(&im, 1, &again), IPC_DONE, "counted twice in context 1");
    cr_assert_eq(importer_open(&im, 2, &p2), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(importer_call(&im, CMD_CTX_GONE, 1, NULL), 1, "context 1's one mapping");
    cr_assert_eq(importer_call(&im, CMD_CTX_GONE, 1, NULL), 0, "forgotten already");
    cr_assert_eq(ipc_collect(), 0, "context 2 still maps it");
    cr_assert_eq(importer_open(&im, 1, &again), IPC_REAL, "context 1 asks the driver again");
    cr_assert_eq(importer_close(&im, again), IPC_REAL, "and its one close is the last");
    cr_assert_eq(importer_call(&im, CMD_CTX_GONE, 2, NULL), 1);
    cr_assert_eq(ipc_collect(), 1, "no lease left: the deferred free");
    cr_assert_eq(fake_freed[0], BASE);
    importer_stop(&im);
}

Test(ipc, a_free_does_not_close_a_legacy_open)
{
    struct ipc_handle h = make_handle(3);
    cr_assert_eq(ipc_export(&h, BASE, 4096, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(importer_call(&im, CMD_UNIMPORT, ptr, NULL), IPC_PASS);
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL, "still open until closed");
    importer_stop(&im);
}

/* The allocation's identity noted at export travels with the export's own
 * record to the deferred free (the shim checks it there: a context reset may
 * have given the address to another allocation); a new allocation exported
 * at the same base carries its own. */
Test(ipc, deferred_free_gets_the_identity_noted_at_export)
{
    struct ipc_handle h = make_handle(41), h2 = make_handle(42);
    cr_assert_eq(ipc_export_identity(&h, BASE, 4096, 0, CTX, 1001, IPC_KIND_LEGACY), 0);
    cr_assert_eq(ipc_export_identity(&h, BASE, 4096, 0, CTX, 1001, IPC_KIND_LEGACY), 0,
                 "again: one record");
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    test_option("HANDOFF_TIMEOUT", "0ms"); /* the second export's hand-off */
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(fake_free_count(), 1);
    cr_assert_eq(fake_freed[0], BASE);
    cr_assert_eq(fake_freed_identity[0], 1001);

    /* The address again, a new allocation: its own identity, 0 when unknown. */
    test_option("HANDOFF_TIMEOUT", "30s");
    cr_assert_eq(ipc_export(&h2, BASE, 4096, 0, CTX), 0);
    importer_stop(&im);
    importer_start(&im, h2);
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(fake_free_count(), 2);
    cr_assert_eq(fake_freed_identity[1], 0, "ipc_export: identity unknown, not checked");
    importer_stop(&im);
}

/* Legacy IPC on VMM memory (shim/vmm.c): an export of kind IPC_KIND_VMM is
 * a block of kind VMM that the reports show, its importer holds a lease
 * like any other, and limbo's deferred free hands the shim's VMM identity
 * back (the shim then only closes its exported fd: the driver keeps VMM
 * memory alive while anything holds it). */
Test(ipc, vmm_export_is_its_own_kind_and_its_identity_reaches_the_host)
{
    struct ipc_handle h = make_handle(43);
    uint64_t id = IPC_IDENTITY_VMM | 7;
    cr_assert_eq(ipc_export_identity(&h, BASE, 4096, 0, CTX, id, IPC_KIND_VMM), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    struct inspect_snapshot s;
    char why[256];
    cr_assert_eq(inspect_snapshot(test_domain, &s, why, sizeof why), 0, "%s", why);
    cr_assert_eq(s.nblocks, 1);
    cr_expect(s.blocks[0].vmm && !s.blocks[0].pool, "shown as a VMM export");
    cr_expect_eq(s.blocks[0].nleases, 1, "the importer is named by its lease");
    inspect_free(&s);
    cr_assert_eq(ipc_free(BASE), IPC_DONE, "the exporter's unmap: limbo while imported");
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(fake_free_count(), 1);
    cr_assert_eq(fake_freed_identity[0], id, "the host knows it for the shim's own");
    importer_stop(&im);
}

/* A record moved off its address (ipc_export_move, the shim's unmap of an
 * exported VMM mapping): the address is no export of ours any more, so a
 * new allocation there is exported as a record of its own while the moved
 * one waits in limbo for its importer, keeps the address it was exported
 * from, and is freed through the host by its new name. */
Test(ipc, a_moved_record_frees_its_address_for_a_new_export)
{
    struct ipc_handle b = make_handle(44), c = make_handle(45);
    uint64_t moved = IPC_LEDGER_ADDRESS | (1ull << 60) | (1ull << 21);
    cr_assert_eq(ipc_export_identity(&b, BASE, 4096, 0, CTX, IPC_IDENTITY_VMM | 1, IPC_KIND_VMM),
                 0);
    struct importer im;
    importer_start(&im, b);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_export_move(BASE + 1, moved), -ENOENT, "no export there");
    cr_assert_eq(ipc_export_move(BASE, moved), 0);
    cr_assert_eq(ipc_free(moved), IPC_DONE, "limbo while imported");
    cr_expect(!ipc_in_limbo(BASE), "the address is not taken");
    cr_assert_eq(ipc_export_identity(&c, BASE, 4096, 0, CTX, IPC_IDENTITY_VMM | 2, IPC_KIND_VMM),
                 0);
    struct registry v;
    open_view(&v);
    cr_expect_eq(records_with(&v, &b), 1, "the moved record lives on");
    cr_expect_eq(records_with(&v, &c), 1, "the new export is a record of its own");
    for (uint32_t i = 0; i < v.max_blocks; i++)
        if (v.blocks[i].state != BLOCK_FREE && !memcmp(v.blocks[i].handle, b.bytes, 64))
            cr_expect_eq(v.blocks[i].base, BASE, "shown at the address it was exported from");
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(fake_freed_identity[0], IPC_IDENTITY_VMM | 1, "the moved one went");
    cr_assert_neq(ipc_free(BASE), IPC_PASS, "the new one is an export of its own");
    importer_stop(&im);
}

Test(ipc, free_with_nothing_holding_is_real)
{
    test_option("HANDOFF_TIMEOUT", "0ms");
    struct ipc_handle h = make_handle(2);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    cr_assert_eq(ipc_free(BASE), IPC_REAL);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    cr_assert_eq(v.blocks[bi].state, BLOCK_RETIRED);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), -ENOENT, "retired: no open can succeed");
    cr_assert_eq(v.blocks[bi].state, BLOCK_RETIRED, "recycled lazily, at the next round trip");
    cr_assert_eq(ipc_collect(), 0);
    cr_assert_eq(reg_block_find(&v, &h), REG_NONE);
    cr_assert_eq(fake_free_count(), 0, "the program's own free did it");
    cr_assert_eq(stats().handoffs_expired, 1);
    importer_stop(&im);
}

/* What an importer's open and close leave: the hand-off claimed, no bit. */
static void claim_handoff_as_an_importer_would(struct registry *v, const struct ipc_handle *h)
{
    uint32_t bi = reg_block_find(v, h);
    cr_assert_neq(bi, REG_NONE);
    __atomic_store_n(&v->blocks[bi].pending, 0, __ATOMIC_SEQ_CST);
}

static int lock_is_held;

static void *hold_registry_lock(void *arg)
{
    struct registry *v = arg;
    cr_assert_eq(registry_lock(v), 0);
    __atomic_store_n(&lock_is_held, 1, __ATOMIC_RELEASE);
    usleep(300 * 1000);
    registry_unlock(v);
    return NULL;
}

/* The common free (a block opened and closed, nothing pending) is decided
 * without the registry lock: another process holding it delays nothing. */
Test(ipc, common_free_takes_no_registry_lock)
{
    struct ipc_handle h = make_handle(41);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct registry v;
    open_view(&v);
    claim_handoff_as_an_importer_would(&v, &h);
    pthread_t holder;
    cr_assert_eq(pthread_create(&holder, NULL, hold_registry_lock, &v), 0);
    while (!__atomic_load_n(&lock_is_held, __ATOMIC_ACQUIRE))
        usleep(1000);
    uint64_t t0 = reg_now_ns();
    cr_assert_eq(ipc_free(BASE), IPC_REAL);
    uint64_t took = reg_now_ns() - t0;
    cr_assert_lt(took, 100 * 1000000ull, "no wait for the lock (%llu ns)",
                 (unsigned long long)took);
    cr_assert_eq(v.blocks[reg_block_find(&v, &h)].state, BLOCK_RETIRED);
    cr_assert_eq(stats().frees_deferred, 0);
    pthread_join(holder, NULL);
}

/* Retired records go back to the table in batches when nothing else takes
 * the lock: a process that only frees leaves at most a batch behind. */
Test(ipc, retired_records_are_recycled_in_batches)
{
    struct registry v;
    struct ipc_handle h[64];
    for (unsigned i = 0; i < 64; i++) {
        h[i] = make_handle(100 + i);
        cr_assert_eq(ipc_export(&h[i], BASE + i * 0x1000, 100, 0, CTX), 0);
        if (i == 0) open_view(&v);
        claim_handoff_as_an_importer_would(&v, &h[i]);
    }
    for (unsigned i = 0; i < 64; i++) {
        cr_assert_eq(ipc_free(BASE + i * 0x1000), IPC_REAL);
        if (i < 63) cr_assert_neq(reg_block_find(&v, &h[0]), REG_NONE, "kept until the batch");
    }
    for (unsigned i = 0; i < 64; i++)
        cr_assert_eq(reg_block_find(&v, &h[i]), REG_NONE, "the batch recycled them all");
}

Test(ipc, same_allocation_exported_twice_is_one_record)
{
    struct ipc_handle h = make_handle(3);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct registry v;
    open_view(&v);
    cr_assert_eq(records_with(&v, &h), 1);
    uint32_t bi = reg_block_find(&v, &h);
    cr_assert_eq(v.blocks[bi].pending, 2);
    cr_assert_eq(stats().exports, 2);
    struct importer a, b;
    importer_start(&a, h);
    importer_start(&b, h);
    uint64_t pa, pb;
    cr_assert_eq(importer_open(&a, 1, &pa), IPC_REAL);
    cr_assert_eq(importer_open(&b, 1, &pb), IPC_REAL);
    cr_assert_eq(v.blocks[bi].pending, 0);
    cr_assert_eq(reg_block_leases(&v, bi), 2);
    importer_stop(&a);
    importer_stop(&b);
}

Test(ipc, handle_reuse_gets_new_generation)
{
    test_option("HANDOFF_TIMEOUT", "0ms");
    struct ipc_handle h = make_handle(4);
    struct registry v;
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    open_view(&v);
    uint32_t b1 = reg_block_find(&v, &h);
    uint64_t g1 = v.blocks[b1].generation;
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_REAL);
    /* Same address, same handle bytes: a new allocation. */
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    uint32_t b2 = reg_block_find(&v, &h);
    cr_assert_eq(b2, b1, "the record is reused");
    cr_assert_gt(v.blocks[b2].generation, g1);
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(reg_block_leases(&v, b2), 1);
    /* The importer's ticket from the first generation touches nothing. */
    cr_assert_eq(importer_call(&im, CMD_STALE_ABORT, 0, NULL), 0);
    cr_assert_eq(reg_block_leases(&v, b2), 1);
    cr_assert_eq(first_lease(&v, b2)->count, 1);
    cr_assert_eq(v.blocks[b2].pending, 0, "no hand-off re-credited");
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(reg_block_leases(&v, b2), 0);
    importer_stop(&im);
}

Test(ipc, own_export_open_returns_base)
{
    struct ipc_handle h = make_handle(5);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct ipc_open t;
    uint64_t ptr = 0;
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_DONE);
    cr_assert_eq(ptr, BASE);
    cr_assert_eq(ipc_open_begin(&h, 77, &t, &ptr), IPC_DONE);
    struct ipc_close c;
    cr_assert_eq(ipc_close_begin(BASE, &c), IPC_DONE);
    cr_assert_eq(ipc_close_begin(BASE, &c), IPC_DONE);
    cr_assert_eq(ipc_close_begin(BASE, &c), IPC_PASS);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    cr_assert_eq(reg_block_leases(&v, bi), 0, "no lease on one's own export");
    cr_assert_eq(v.blocks[bi].pending, 1, "and no hand-off claimed");
    struct ipcshim_stats s = stats();
    cr_assert_eq(s.opens, 2);
    cr_assert_eq(s.closes, 2);
}

Test(ipc, open_twice_counts_and_double_close_passes)
{
    struct ipc_handle h = make_handle(6);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    struct importer im;
    importer_start(&im, h);
    uint64_t p1, p1b, p2;
    cr_assert_eq(importer_open(&im, 1, &p1), IPC_REAL);
    cr_assert_eq(importer_open(&im, 1, &p1b), IPC_DONE);
    cr_assert_eq(p1b, p1);
    cr_assert_eq(importer_open(&im, 2, &p2), IPC_REAL, "another context maps it again");
    cr_assert_neq(p2, p1);
    cr_assert_eq(reg_block_leases(&v, bi), 1, "one lease per (block, process)");
    cr_assert_eq(first_lease(&v, bi)->count, 2);
    cr_assert_eq(importer_close(&im, p1), IPC_DONE);
    cr_assert_eq(importer_close(&im, p1), IPC_REAL);
    cr_assert_eq(importer_close(&im, p1), IPC_PASS, "a double close is the driver's business");
    cr_assert_eq(reg_block_leases(&v, bi), 1);
    cr_assert_eq(importer_close(&im, p2), IPC_REAL);
    cr_assert_eq(reg_block_leases(&v, bi), 0);
    importer_stop(&im);
}

Test(ipc, unknown_pointers_pass)
{
    cr_assert_eq(ipc_free(0x1234), IPC_PASS);
    struct ipc_close c;
    cr_assert_eq(ipc_close_begin(0x1234, &c), IPC_PASS);
    struct ipc_handle h = make_handle(7), other = make_handle(8);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    cr_assert_eq(ipc_free(0x1234), IPC_PASS);
    cr_assert_eq(ipc_free(BASE + 8), IPC_PASS, "only the base is tracked");
    struct ipc_open t;
    uint64_t ptr;
    cr_assert_eq(ipc_open_begin(&other, CTX, &t, &ptr), IPC_PASS);
}

Test(ipc, handoff_expires)
{
    test_option("HANDOFF_TIMEOUT", "200ms");
    struct ipc_handle h = make_handle(9);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    cr_assert_eq(ipc_free(BASE), IPC_DONE, "an unclaimed hand-off keeps it");
    cr_assert_eq(ipc_collect(), 0);
    sleep_ms(250);
    cr_assert_eq(ipc_collect(), 1);
    cr_assert_eq(stats().handoffs_expired, 1);
    cr_assert_eq(fake_freed[0], BASE);
}

Test(ipc, pressure_expires_oldest_first)
{
    test_option("HANDOFF_TIMEOUT", "60s");
    struct ipc_handle a = make_handle(10), b = make_handle(11);
    cr_assert_eq(ipc_export(&a, BASE, 100, 0, CTX), 0);
    sleep_ms(1100);
    cr_assert_eq(ipc_export(&b, BASE + 0x1000, 100, 0, CTX), 0);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(ipc_free(BASE + 0x1000), IPC_DONE);
    cr_assert_eq(ipc_collect(), 0);
    cr_assert_eq(ipc_collect_pressure(), 1, "only the hand-off older than a second");
    cr_assert_eq(fake_freed[0], BASE);
    cr_assert_eq(ipc_collect_pressure(), 1, "then the rest");
    cr_assert_eq(fake_freed[1], BASE + 0x1000);
    cr_assert_eq(stats().handoffs_expired, 2);
}

Test(ipc, pressure_never_breaks_a_lease)
{
    struct ipc_handle h = make_handle(12);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(ipc_collect_pressure(), 0);
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(ipc_collect_pressure(), 1);
    importer_stop(&im);
}

Test(ipc, window_mode_rearms_after_last_close)
{
    test_option("HANDOFF", "window");
    test_option("HANDOFF_TIMEOUT", "300ms");
    struct ipc_handle h = make_handle(13);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    struct importer a, b;
    importer_start(&a, h);
    importer_start(&b, h);
    uint64_t pa, pb;
    cr_assert_eq(importer_open(&a, 1, &pa), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(importer_close(&a, pa), IPC_REAL);
    cr_assert_eq(v.blocks[bi].pending, 1, "re-armed by the last close");
    cr_assert_eq(ipc_collect(), 0);
    cr_assert_eq(importer_open(&b, 1, &pb), IPC_REAL, "a late importer is covered");
    cr_assert_eq(importer_close(&b, pb), IPC_REAL);
    cr_assert_eq(ipc_collect(), 0);
    sleep_ms(350);
    cr_assert_eq(ipc_collect(), 1);
    importer_stop(&a);
    importer_stop(&b);
}

/* The exporter's hand-off rule is the block's: an importer whose own
 * environment says "send" still re-arms the window when it closes last. */
Test(ipc, exporters_window_rule_is_obeyed_by_an_importer_with_send)
{
    test_option("HANDOFF", "send");
    struct ipc_handle h = make_handle(15);
    struct importer a;
    importer_start(&a, h); /* forked now: its options say send */
    test_option("HANDOFF", "window");
    test_option("HANDOFF_TIMEOUT", "300ms");
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    uint64_t pa;
    cr_assert_eq(importer_open(&a, 1, &pa), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(importer_close(&a, pa), IPC_REAL);
    cr_assert_eq(v.blocks[bi].pending, 1,
                 "re-armed by the importer's last close, by the exporter's rule");
    importer_stop(&a);
}

Test(ipc, send_mode_does_not_rearm)
{
    struct ipc_handle h = make_handle(14);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer a;
    importer_start(&a, h);
    uint64_t pa;
    cr_assert_eq(importer_open(&a, 1, &pa), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(importer_close(&a, pa), IPC_REAL);
    cr_assert_eq(ipc_collect(), 1);
    importer_stop(&a);
}

Test(ipc, killed_importer_is_reclaimed)
{
    struct ipc_handle h = make_handle(15);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(ipc_collect(), 0);
    importer_kill(&im);
    cr_assert_eq(ipc_collect(), 1);
    struct registry v;
    open_view(&v);
    cr_assert_eq(holder_of(&v, im.pid), REG_NONE, "the dead holder's slot is free");
}

Test(ipc, forged_holder_with_wrong_start_time_is_dead)
{
    test_option("HANDOFF_TIMEOUT", "0ms");
    struct ipc_handle h = make_handle(16);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    /* A holder with a live pid (ours) whose lock byte is held (by the
     * view's own description), holding a lease on the block. */
    struct registry v;
    open_view(&v);
    cr_assert_eq(registry_lock(&v), 0);
    uint32_t f = reg_holder_attach(&v, 0xf0f0);
    uint32_t bi = reg_block_find(&v, &h);
    uint32_t li = reg_lease_create(&v, bi, f);
    v.leases[li].intent = LEASE_OPEN;
    registry_unlock(&v);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(ipc_collect(), 0, "lock held, pid alive, start time right: alive");
    v.holders[f].start_time += 1;
    cr_assert_eq(ipc_collect(), 1, "a different start time: the pid was reused");
    cr_assert_eq(v.holders[f].state, HOLDER_FREE);
}

Test(ipc, death_holding_the_lock_is_repaired)
{
    struct ipc_handle h = make_handle(17);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    PARENT_SEND(&im.c, CMD_LOCK_AND_DIE);
    PARENT_SEND(&im.c, 0);
    cr_assert_eq(child_wait(im.pid), 128 + SIGKILL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE, "the next locker repairs and goes on");
    ipc_collect(); /* the free's own collect may have done it already */
    cr_assert_eq(fake_free_count(), 1, "and the dead importer's lease goes");
    struct registry v;
    open_view(&v);
    cr_assert_eq(v.hdr->repairs, 1);
}

Test(ipc, full_registry_is_untracked)
{
    test_option("MAX_BLOCKS", "2");
    test_option("MAX_LEASES", "1");
    struct ipc_handle h1 = make_handle(18), h2 = make_handle(19), h3 = make_handle(20);
    cr_assert_eq(ipc_export(&h1, BASE, 100, 0, CTX), 0);
    cr_assert_eq(ipc_export(&h2, BASE + 0x1000, 100, 0, CTX), 0);
    cr_assert_eq(ipc_export(&h3, BASE + 0x2000, 100, 0, CTX), -ENOSPC);
    cr_assert_eq(ipc_free(BASE + 0x2000), IPC_PASS);
    struct importer a, b;
    importer_start(&a, h3);
    uint64_t ptr;
    cr_assert_eq(importer_open(&a, 1, &ptr), IPC_PASS);
    importer_stop(&a);
    importer_start(&a, h1);
    importer_start(&b, h1);
    cr_assert_eq(importer_open(&a, 1, &ptr), IPC_REAL);
    cr_assert_eq(importer_open(&b, 1, &ptr), IPC_PASS, "no lease left: untracked");
    importer_stop(&a);
    importer_stop(&b);
}

Test(ipc, collector_frees_promptly_after_last_close)
{
    test_option("COLLECTOR", "1");
    struct ipc_handle h = make_handle(21);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr, closing_at;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    sleep_ms(50); /* let the collector settle into its wait */
    cr_assert_eq(fake_free_count(), 0);
    cr_assert_eq(importer_call(&im, CMD_CLOSE, ptr, &closing_at), IPC_REAL);
    for (int i = 0; i < 2000 && fake_free_count() == 0; i++)
        sleep_ms(1);
    cr_assert_eq(fake_free_count(), 1);
    uint64_t latency = __atomic_load_n(&fake_last_free_ns, __ATOMIC_SEQ_CST) - closing_at;
    cr_log_info("close-to-free latency: %llu us", (unsigned long long)latency / 1000);
    cr_assert_lt(latency, 100000000ull, "latency %llu ns", (unsigned long long)latency);
    importer_stop(&im);
}

Test(ipc, stats_frees_on_the_calling_thread_what_a_last_close_woke)
{
    test_option("COLLECTOR", "0"); /* no thread: only the caller can free it */
    struct ipc_handle h = make_handle(23);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr, closing_at;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    struct ipcshim_stats s = {0};
    ipc_stats(&s);
    cr_assert_eq(fake_free_count(), 0, "held: nothing to free");
    cr_assert_eq(s.frees_reclaimed, 0);
    cr_assert_eq(importer_call(&im, CMD_CLOSE, ptr, &closing_at), IPC_REAL);
    ipc_stats(&s);
    cr_assert_eq(fake_free_count(), 1, "the last close woke us: freed by this call");
    cr_assert_eq(s.frees_reclaimed, 1, "and counted in the same answer");
    ipc_stats(&s);
    cr_assert_eq(fake_free_count(), 1, "once");
    importer_stop(&im);
}

/* A wake a program thread claimed (ipc_stats) sends the collector back to
 * sleep; the next last close must still wake it and be freed by it, and
 * every block is freed once. */
Test(ipc, collector_takes_the_next_wake_after_one_the_program_claimed)
{
    test_option("COLLECTOR", "1");
    struct ipc_handle h1 = make_handle(24), h2 = make_handle(25);
    cr_assert_eq(ipc_export(&h1, BASE, 100, 0, CTX), 0);
    cr_assert_eq(ipc_export(&h2, BASE + 0x100000, 100, 0, CTX), 0);
    struct importer a, b;
    importer_start(&a, h1);
    importer_start(&b, h2);
    uint64_t p1, p2, closing_at;
    cr_assert_eq(importer_open(&a, 1, &p1), IPC_REAL);
    cr_assert_eq(importer_open(&b, 1, &p2), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    cr_assert_eq(ipc_free(BASE + 0x100000), IPC_DONE);
    sleep_ms(50); /* let the collector settle into its wait */
    struct ipcshim_stats s = {0};
    cr_assert_eq(importer_call(&a, CMD_CLOSE, p1, &closing_at), IPC_REAL);
    ipc_stats(&s); /* this thread claims the first wake (or the collector was first) */
    for (int i = 0; i < 2000 && fake_free_count() < 1; i++)
        sleep_ms(1);
    cr_assert_eq(fake_free_count(), 1);
    sleep_ms(20); /* the collector, woken too, back asleep */
    cr_assert_eq(importer_call(&b, CMD_CLOSE, p2, &closing_at), IPC_REAL);
    for (int i = 0; i < 2000 && fake_free_count() < 2; i++)
        sleep_ms(1); /* no call of ours: only the collector can free it */
    cr_assert_eq(fake_free_count(), 2, "the collector took the next wake");
    uint64_t latency = __atomic_load_n(&fake_last_free_ns, __ATOMIC_SEQ_CST) - closing_at;
    cr_assert_lt(latency, 100000000ull, "latency %llu ns", (unsigned long long)latency);
    sleep_ms(20);
    ipc_stats(&s);
    cr_assert_eq(fake_free_count(), 2, "each block freed once");
    importer_stop(&a);
    importer_stop(&b);
}

Test(ipc, fork_child_is_a_new_holder)
{
    struct ipc_handle h = make_handle(22);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct ipc_open t;
    uint64_t ptr;
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_DONE); /* own export, counted */
    struct registry v;
    open_view(&v);
    uint32_t me = holder_of(&v, getpid());
    cr_assert_neq(me, REG_NONE);
    struct chan c;
    chan_open(&c);
    pid_t pid = fork();
    if (pid == 0) {
        chan_child(&c);
        struct ipc_close cl;
        /* The parent's indexes were not inherited... */
        if (ipc_close_begin(BASE, &cl) != IPC_PASS) _exit(1);
        if (ipc_free(BASE) != IPC_PASS) _exit(2);
        /* ...and the parent's export is somebody else's now. */
        struct ipc_open ct;
        uint64_t p;
        if (ipc_open_begin(&h, CTX, &ct, &p) != IPC_REAL) _exit(3);
        ipc_open_commit(&ct, 0x5000);
        CHILD_SEND(&c, 1);
        CHILD_RECV(&c);
        _exit(0);
    }
    chan_parent(&c);
    cr_assert_eq(PARENT_RECV(&c), 1);
    uint32_t child = holder_of(&v, pid);
    cr_assert_neq(child, REG_NONE);
    cr_assert_neq(child, me);
    cr_assert_neq(v.holders[child].nonce, v.holders[me].nonce);
    uint32_t bi = reg_block_find(&v, &h);
    cr_assert_neq(reg_lease_find(&v, bi, child), REG_NONE);
    cr_assert_eq(reg_lease_find(&v, bi, me), REG_NONE);
    cr_assert(reg_holder_alive(&v, me), "the child did not take the parent's lock along");
    PARENT_SEND(&c, 0);
    cr_assert_eq(child_wait(pid), 0);
    cr_assert_eq(ipc_collect(), 0);
    cr_assert_eq(reg_lease_find(&v, bi, child), REG_NONE, "swept after it exited");
}

#ifdef SYS_fork
Test(ipc, raw_fork_without_atfork_is_detected)
{
    struct ipc_handle h = make_handle(23);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct chan c;
    chan_open(&c);
    pid_t pid = (pid_t)syscall(SYS_fork); /* no atfork handlers run */
    if (pid == 0) {
        chan_child(&c);
        struct ipc_open t;
        uint64_t p;
        int r = ipc_open_begin(&h, CTX, &t, &p);
        if (r == IPC_REAL) ipc_open_commit(&t, 0x5000);
        CHILD_SEND(&c, (uint64_t)(int64_t)r);
        _exit(0);
    }
    chan_parent(&c);
    cr_assert_eq((int)(int64_t)PARENT_RECV(&c), IPC_REAL, "the child is not the exporter");
    cr_assert_eq(child_wait(pid), 0);
}
#endif

Test(ipc, shutdown_waits_then_orphans)
{
    test_option("EXIT_WAIT", "300ms");
    test_option("COLLECTOR", "1");
    struct ipc_handle h = make_handle(24);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    struct importer im, late;
    importer_start(&im, h);
    importer_start(&late, h); /* before shutdown: a child inherits it */
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    uint64_t t0 = test_now_ns();
    ipc_shutdown();
    uint64_t waited = test_now_ns() - t0;
    cr_assert(waited >= 280000000ull && waited < 2000000000ull, "waited %llu ns",
              (unsigned long long)waited);
    cr_assert_eq(v.blocks[bi].state, BLOCK_ORPHANED);
    cr_assert_eq(holder_of(&v, getpid()), REG_NONE, "the slot was given back");
    cr_assert_eq(fake_free_count(), 0);
    ipc_shutdown(); /* idempotent */
    cr_assert_not(ipc_active());
    cr_assert_eq(ipc_free(BASE), IPC_PASS);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), -ENODEV);
    uint64_t late_ptr;
    cr_assert_eq(importer_open(&late, 1, &late_ptr), -EOWNERDEAD, "orphaned: no new opens");
    importer_stop(&late);
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    cr_assert_eq(reg_block_find(&v, &h), REG_NONE, "recycled with its last lease");
    importer_stop(&im);
}

/* Issue 33: the last process out removes the registry (finished jobs leave
 * nothing in /dev/shm); while another process holds a slot it stays. */
static bool registry_exists(void)
{
    char path[256], name[256];
    return registry_locate(test_domain, path, sizeof path, name, sizeof name) == 0;
}

Test(ipc, the_last_process_out_removes_the_registry)
{
    struct ipc_handle h = make_handle(26);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    cr_assert(registry_exists());
    test_option("EXIT_WAIT", "0");
    ipc_shutdown();
    cr_assert_not(registry_exists(), "left behind by the last process out");
}

Test(ipc, a_registry_another_process_holds_stays)
{
    struct ipc_handle h = make_handle(27);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(importer_close(&im, ptr), IPC_REAL);
    test_option("EXIT_WAIT", "0");
    ipc_shutdown();
    cr_assert(registry_exists(), "removed while the importer still holds a slot");
    struct registry v;
    open_view(&v);
    cr_assert_eq(v.hdr->removing, 0, "the decision was taken back");
    registry_close(&v);
    importer_stop(&im);
}

Test(ipc, shutdown_returns_once_drained)
{
    test_option("EXIT_WAIT", "5s");
    struct ipc_handle h = make_handle(25);
    cr_assert_eq(ipc_export(&h, BASE, 100, 0, CTX), 0);
    struct importer im;
    importer_start(&im, h);
    uint64_t ptr;
    cr_assert_eq(importer_open(&im, 1, &ptr), IPC_REAL);
    cr_assert_eq(ipc_free(BASE), IPC_DONE);
    PARENT_SEND(&im.c, CMD_CLOSE_LATER);
    PARENT_SEND(&im.c, ptr);
    uint64_t t0 = test_now_ns();
    ipc_shutdown();
    uint64_t waited = test_now_ns() - t0;
    cr_assert_lt(waited, 2000000000ull);
    cr_assert_eq(fake_free_count(), 1);
    cr_assert_eq((int)(int64_t)PARENT_RECV(&im.c), IPC_REAL);
    PARENT_RECV(&im.c);
    importer_stop(&im);
}

/* ---- one process, several threads ---- */

struct opener {
    struct ipc_handle h;
    int result;
    uint64_t ptr;
    int done;
};

static void *open_in_thread(void *arg)
{
    struct opener *o = arg;
    struct ipc_open t;
    o->result = ipc_open_begin(&o->h, CTX, &t, &o->ptr);
    __atomic_store_n(&o->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

Test(ipc, concurrent_opens_share_one_pointer)
{
    struct ipc_handle h = make_handle(26);
    struct chan c;
    chan_open(&c);
    pid_t pid = fork(); /* the exporter, this time */
    if (pid == 0) {
        chan_child(&c);
        if (ipc_export(&h, BASE, 100, 0, CTX) != 0) _exit(1);
        CHILD_SEND(&c, 1);
        CHILD_RECV(&c);
        _exit(0);
    }
    chan_parent(&c);
    cr_assert_eq(PARENT_RECV(&c), 1);
    struct ipc_open t;
    uint64_t ptr;
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_REAL);
    struct opener o = {.h = h};
    pthread_t th;
    pthread_create(&th, NULL, open_in_thread, &o);
    sleep_ms(50);
    cr_assert_eq(__atomic_load_n(&o.done, __ATOMIC_SEQ_CST), 0, "waits for the first open");
    ipc_open_commit(&t, 0x9000);
    pthread_join(th, NULL);
    cr_assert_eq(o.result, IPC_DONE);
    cr_assert_eq(o.ptr, 0x9000);
    struct ipc_close cl;
    cr_assert_eq(ipc_close_begin(0x9000, &cl), IPC_DONE);
    cr_assert_eq(ipc_close_begin(0x9000, &cl), IPC_REAL);
    ipc_close_finish(&cl);
    PARENT_SEND(&c, 0);
    cr_assert_eq(child_wait(pid), 0);
}

Test(ipc, aborted_open_gives_the_handoff_back)
{
    struct ipc_handle h = make_handle(27);
    struct chan c;
    chan_open(&c);
    pid_t pid = fork();
    if (pid == 0) {
        chan_child(&c);
        if (ipc_export(&h, BASE, 100, 0, CTX) != 0) _exit(1);
        CHILD_SEND(&c, 1);
        CHILD_RECV(&c);
        _exit(0);
    }
    chan_parent(&c);
    cr_assert_eq(PARENT_RECV(&c), 1);
    struct registry v;
    open_view(&v);
    uint32_t bi = reg_block_find(&v, &h);
    struct ipc_open t;
    uint64_t ptr;
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_REAL);
    cr_assert_eq(v.blocks[bi].pending, 0);
    cr_assert_eq(first_lease(&v, bi)->intent, LEASE_OPENING);
    ipc_open_abort(&t);
    cr_assert_eq(v.blocks[bi].pending, 1);
    cr_assert_eq(reg_block_leases(&v, bi), 0);
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_REAL, "nothing cached by the abort");
    ipc_open_abort(&t);
    PARENT_SEND(&c, 0);
    cr_assert_eq(child_wait(pid), 0);
    /* The window docs/performance.md states: until a sweep finds the
     * exporter dead, an open goes on to the driver (which refuses a dead
     * process's handle), and its lease goes with the abort. */
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_REAL, "not swept yet");
    ipc_open_abort(&t);
    cr_assert_eq(reg_block_leases(&v, bi), 0);
    ipc_collect(); /* sweeps: nobody held the dead exporter's block, so it is recycled */
    cr_assert_eq(reg_block_find(&v, &h), REG_NONE);
    cr_assert_eq(ipc_open_begin(&h, CTX, &t, &ptr), IPC_PASS, "an unknown handle: CUDA decides");
}
