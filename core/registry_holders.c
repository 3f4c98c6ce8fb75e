/* registry_holders: one record per attached process. Taking a slot (its
 * OFD lock byte decides, without the lock), giving it back, liveness (the
 * lock byte, then the pid and its start time), the sweep of a dead
 * holder's leases and exports, and each holder's futex word, by which
 * importers wake an exporter's collector. The sweeps' liveness syscalls run
 * before the lock is taken (find_dead). */
#include "registry_internal.h"
#include "sys.h"
#include "liveness.h"
#include "log.h"

#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Takes slot i for this process if its lock byte is ours to take (the
 * arbiter: F_OFD_SETLK gives a byte to one description only, so two
 * attachers never get the same slot, with or without the registry lock).
 * The record is written, then published ACTIVE. */
static bool take_slot(struct registry *r, int fd, uint32_t i, const struct reg_holder *fields)
{
    struct reg_holder *h = &r->holders[i];
    /* Held by a description that outlived its holder (a fork child's
     * inherited copy), or by another attacher right now: not ours. */
    if (liveness_lock_byte(fd, r->lock_base + i) != 0) return false;
    reg_test_delay(); /* a death here leaves the slot FREE: the byte goes with it */
    uint32_t state = LOAD_STATE(h->state);
    if (state == HOLDER_ACTIVE) { /* attached meanwhile, and gone again: a sweep's */
        liveness_unlock_byte(fd, r->lock_base + i);
        return false;
    }
    if (state != HOLDER_FREE)
        reg_holder_sweep(r, i); /* corrupt (lock held): what it claimed goes */
    h->pid = fields->pid;
    h->pidns = fields->pidns;
    h->start_time = fields->start_time;
    h->nonce = fields->nonce;
    h->attach_ns = reg_now_ns();
    memcpy(h->comm, fields->comm, sizeof h->comm);
    /* pairs with registry_remove_if_unused's seq_cst loads (then registry_removing) and
     * reg_holder_current */
    STORE_STATE(h->state, HOLDER_ACTIVE);
    r->self_slot = i;
    r->self_nonce = fields->nonce;
    return true;
}

/* reg_holder_claim (locked false: FREE slots only) and reg_holder_attach. */
static uint32_t attach_slot(struct registry *r, uint64_t nonce, bool locked)
{
    struct reg_holder me = {.pid = (int32_t)getpid(), .pidns = reg_own_pidns(), .nonce = nonce};
    (void)liveness_start_time(me.pid, &me.start_time);
    if (prctl(PR_GET_NAME, me.comm) != 0) me.comm[0] = 0; /* observability */
    int fd = registry_fd(r);
    if (fd < 0) return REG_NONE;
    for (uint32_t i = 0; i < r->max_holders; i++) {
        uint32_t state = LOAD_STATE(r->holders[i].state);
        /* A state that is neither FREE nor ACTIVE is a corrupt record:
         * reused under the lock only (it must be swept first). */
        if (state == HOLDER_ACTIVE || (state != HOLDER_FREE && !locked)) continue;
        if (take_slot(r, fd, i, &me)) return i;
    }
    return REG_NONE;
}

uint32_t reg_holder_claim(struct registry *r, uint64_t nonce)
{
    return attach_slot(r, nonce, false);
}

uint32_t reg_holder_attach(struct registry *r, uint64_t nonce)
{
    return attach_slot(r, nonce, true);
}

void reg_holder_release(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    reg_holder_let_go(r, idx);
    STORE_STATE(h->state, HOLDER_FREE);
    if (r->self_slot == idx) r->self_slot = REG_NONE;
    int fd = registry_fd(r);
    if (fd >= 0) liveness_unlock_byte(fd, r->lock_base + idx);
}

/* A holder's lock byte is held (true) unless we know it is free. The
 * descriptor is believed at once only when it says "held" (a number the
 * program reused can make a dead holder look alive -- a leak -- but never
 * the reverse); "free" or an error is asked again through the verified
 * descriptor (registry_fd). So a live holder is never judged dead through
 * the wrong file, and the common case costs one fcntl, as before. */
static bool holder_byte_locked(struct registry *r, uint32_t idx)
{
    off_t off = r->lock_base + idx;
    if (r->fd >= 0 && liveness_byte_state(r->fd, off) == 1) return true;
    int fd = registry_fd(r);
    if (fd < 0) return true; /* unknown: alive */
    return liveness_byte_state(fd, off) != 0;
}

/* The pid and start-time rule applies only to a holder of our own PID
 * namespace (or of an unknown one: records of earlier builds); in another
 * namespace its pid names some other process here, so the lock decides. */
static bool same_pidns(const struct reg_holder *h)
{
    static uint32_t mine;
    if (!mine) mine = reg_own_pidns();
    uint32_t theirs = __atomic_load_n(&h->pidns, __ATOMIC_RELAXED);
    return !theirs || !mine || theirs == mine;
}

bool reg_holder_alive(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h || LOAD_STATE(h->state) != HOLDER_ACTIVE) return false;
    if (!holder_byte_locked(r, idx)) return false;
    return !same_pidns(h) || liveness_pid_alive(h->pid, h->start_time);
}

bool reg_holder_alive_quick(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h || LOAD_STATE(h->state) != HOLDER_ACTIVE) return false;
    return holder_byte_locked(r, idx);
}

uint32_t reg_holder_drop_leases(struct registry *r, uint32_t idx)
{
    uint32_t n = 0;
    for (uint32_t c = 0; c < r->nchunks; c++) {
        if (reg_chunk_owner_of(r, c) != idx) continue;
        for (uint32_t li = c * r->lease_chunk; li < (c + 1) * r->lease_chunk; li++) {
            struct reg_lease *l = &r->leases[li];
            if (LOAD_STATE(l->intent) == LEASE_FREE) continue;
            uint32_t bi = l->block;
            uint64_t gen = l->block_gen;
            l->holder = idx; /* the chunk's owner's bit, whatever the record says */
            reg_lease_free(r, li);
            n++;
            uint32_t wake = reg_block_unheld(r, bi, gen);
            if (wake != REG_NONE && wake != idx) registry_wake(r, wake);
        }
        reg_chunk_disown(r, c); /* after its leases */
    }
    if (r->self_slot == idx) r->nspare = 0;
    return n;
}

void reg_holder_sweep(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    reg_holder_drop_leases(r, idx);
    reg_test_delay();
    /* Its own records only: its lease chunks above, its exports here. (A
     * bit without a lease cannot be left by any death in this build: the
     * lease is written before the bit and freed after it. One in a
     * corrupt segment pins its block until a repair clears the bits of
     * holders that are not active.) */
    reg_holder_let_go(r, idx);
    STORE_STATE(h->state, HOLDER_FREE);
}

/* The dead among the candidates (flags, max_holders of them), checked
 * without the lock: their indices and nonces into dead[]/nonce[]. */
static uint32_t find_dead(struct registry *r, const uint8_t *cand, uint32_t *dead, uint64_t *nonce)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < r->max_holders; i++) {
        if (!cand[i]) continue;
        struct reg_holder *h = &r->holders[i];
        uint64_t before = __atomic_load_n(&h->nonce, __ATOMIC_RELAXED);
        if (LOAD_STATE(h->state) != HOLDER_ACTIVE || reg_holder_alive(r, i)) continue;
        dead[n] = i;
        nonce[n++] = before;
    }
    return n;
}

/* Sweeps those find_dead returned that are still those holders. Lock held. */
static int sweep_found(struct registry *r, const uint32_t *dead, const uint64_t *nonce, uint32_t n)
{
    REG_ASSERT_LOCKED(r);
    int swept = 0;
    for (uint32_t k = 0; k < n; k++) {
        struct reg_holder *h = reg_holder_at(r, dead[k]);
        /* Still the holder we found dead: its slot stays ACTIVE until a
         * sweep (under this lock) frees it, and a new attacher takes only a
         * FREE slot, with a new nonce. */
        if (!h || LOAD_STATE(h->state) != HOLDER_ACTIVE || h->nonce != nonce[k]) continue;
        log_msg(LOG_INFO, "holder %u (pid %d) is gone; releasing its leases and blocks", dead[k],
                (int)h->pid);
        reg_holder_sweep(r, dead[k]);
        r->hdr->swept++;
        swept++;
    }
    return swept;
}

int reg_sweep_among(struct registry *r, const uint8_t *cand)
{
    uint32_t *dead = malloc(r->max_holders * sizeof *dead);
    uint64_t *nonce = malloc(r->max_holders * sizeof *nonce);
    int swept = 0;
    uint32_t n = dead && nonce ? find_dead(r, cand, dead, nonce) : 0;
    if (n) {
        if (registry_lock(r) == 0) {
            swept = sweep_found(r, dead, nonce, n);
            registry_unlock(r);
        } else {
            swept = -1;
        }
    }
    free(dead);
    free(nonce);
    return swept;
}

int reg_sweep_dead(struct registry *r, uint32_t self)
{
    uint8_t *cand = calloc(r->max_holders, 1);
    if (!cand) return 0;
    for (uint32_t i = 0; i < r->max_holders; i++)
        cand[i] = i != self && LOAD_STATE(r->holders[i].state) == HOLDER_ACTIVE;
    int swept = reg_sweep_among(r, cand);
    free(cand);
    return swept;
}

void registry_wake(struct registry *r, uint32_t idx)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    /* pairs with the holder's seq_cst load of wake before it collects (ipc.c) */
    __atomic_fetch_add(&h->wake, 1, __ATOMIC_SEQ_CST);
    sys_call6(SYS_futex, (long)&h->wake, FUTEX_WAKE, INT_MAX, 0, 0, 0);
}

void registry_wait(struct registry *r, uint32_t idx, uint32_t seen, uint64_t timeout_ns)
{
    struct reg_holder *h = reg_holder_at(r, idx);
    if (!h) return;
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    /* Shared (not FUTEX_PRIVATE): wakers live in other processes. */
    sys_call6(SYS_futex, (long)&h->wake, FUTEX_WAIT, seen, (long)&ts, 0, 0);
}
