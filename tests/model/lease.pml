/* lease.pml: the lock-free lease protocol of ipcshim, as core/registry_*.c and
 * core/ipc.c implement it, for the spin model checker (tests/model/check).
 *
 * One exported block, its exporter, two importers (holder slots 0 and 1),
 * a sweeper per importer (reg_sweep_dead / reg_holder_sweep, run by any
 * process once the importer is dead) and one repair of the registry under
 * its lock (rebuild_index, run by grow_blocks or by a locker that recovered
 * the lock from a dead owner), all interleaved in every order. Each shared
 * word is one Promela variable and each atomic of the C code one Promela
 * statement; the code's atomics on these words are all seq_cst (or the
 * registry lock orders them), and spin's interleaving is sequential
 * consistency, so the model is exact for them.
 *
 * An importer may die between any two of its steps (DIE): its mapping goes
 * with it (the driver unmaps a dead process), its bit and lease record stay
 * as they were, and its sweeper then does what reg_holder_sweep does.
 *
 * Checked (tests/model/check):
 *  - no use after free: the exporter's real free finds no importer mapping
 *    the block (or deciding to), and no importer touches it after that free;
 *  - no leak: every run ends with the block freed, no bit set and every
 *    lease record FREE; an exporter still waiting when nothing else can
 *    move is an invalid end state, and so is any other blocked process
 *    (no deadlock);
 *  - LIVENESS: the same as an LTL formula, <> freed.
 *
 * Abstracted away: the registry's record allocation, hash chains and
 * generations (one block, one generation: recycling and ABA are not
 * modelled), the exporter's death (its memory goes with it: the driver's
 * business), lease counts of several contexts in one process, the local
 * mutex (each process here is one thread doing one thing at a time, as the
 * local mutex makes it), the exporter's nonce check on open, and time: the
 * importer's wait on RETIRING is unbounded here (settle_state gives up after
 * IPCSHIM_LOCK_WAIT and passes the open untracked, a documented gap), and
 * the collector's timed wakes (the 1 s poll of a non-empty limbo, a
 * hand-off's deadline) are spin's `timeout`: they fire when nothing else
 * can move, the worst case for a leak.
 *
 * Variants (spin -DNAME), which tests/model/check expects to FAIL:
 *  BROKEN_ORDER    the importer reads the state before setting its bit
 *                  (the Dekker pair's order swapped): use after free;
 *  BROKEN_STORE    the exporter's final RETIRING -> RETIRED is a plain
 *                  store, not a CAS, so a repair's RETIRING -> LIMBO is
 *                  overwritten: use after free;
 *  BROKEN_BIT_FIRST the importer sets its bit before its lease record says
 *                  OPENING: a death between the two leaves a bit no sweep
 *                  clears: leak;
 *  BROKEN_RETIRING_WAKE (with NO_POLL NODEATH: the collector waits for
 *                  wakes only, no 1 s poll) the code before waits_on_holders:
 *                  a last close that lands while the exporter is RETIRING
 *                  sees RETIRING, not LIMBO, and wakes nobody, while the
 *                  exporter saw the bit and went back to LIMBO: leak (in
 *                  that code, a wait of up to LIMBO_POLL_NS; this model
 *                  found it);
 *  and which it expects to pass: NO_POLL NODEATH (wakes alone free every
 *  block, now that a RETIRING block's last close wakes too); WINDOW
 *  (IPCSHIM_HANDOFF=window: a LIMBO block that loses its last holder
 *  re-arms a hand-off). */

#define B_FREE     0 /* BLOCK_FREE: recycled (or another generation) */
#define B_LIVE     1 /* BLOCK_LIVE */
#define B_LIMBO    2 /* BLOCK_LIMBO */
#define B_RETIRED  4 /* BLOCK_RETIRED */
#define B_RETIRING 5 /* BLOCK_RETIRING */

#define L_FREE    0 /* LEASE_FREE */
#define L_OPENING 1 /* LEASE_OPENING */
#define L_OPEN    2 /* LEASE_OPEN */
#define L_CLOSING 3 /* LEASE_CLOSING */

#define NIMP 2

/* reg_block (registry.h). The block was exported before anyone runs
 * (ipc_export -> reg_block_create: LIVE, one pending hand-off). */
byte state = B_LIVE;
byte held = 0;    /* the held bitmap's word: bit i is importer i */
byte pending = 1; /* unclaimed hand-offs */
byte wake = 0;    /* the exporter's reg_holder.wake (futex word) */
bit reglock = 0;  /* the registry mutex */

/* reg_lease.intent of importer i's lease record */
byte intent[NIMP];

/* Ghost state, for the assertions. */
bool mapped[NIMP];   /* importer i decided to map the block, until its real close */
bool dead[NIMP];
bool finished[NIMP]; /* closed, refused, or dead */
bool freed = false;  /* the exporter's real free (the host's free_block / real cuMemFree) */
bool due = false;    /* time passed: a pending hand-off's deadline is reached */

#ifdef NODEATH
#define DIE skip
#else
#define DIE                                                                                        \
    if                                                                                             \
    :: goto died                                                                                   \
    :: skip                                                                                        \
    fi
#endif

#define LOCK   atomic { reglock == 0 -> reglock = 1 }
#define UNLOCK reglock = 0

/* reg_block_limbo_unheld (core/registry_blocks.c): under the window rule a LIMBO block that
 * lost its last holder re-arms one hand-off (CAS pending 0 -> 1). */
#ifdef WINDOW
#define LIMBO_UNHELD                                                                               \
    atomic {                                                                                       \
        if                                                                                         \
        :: pending == 0 -> pending = 1                                                             \
        :: else                                                                                    \
        fi                                                                                         \
    }
#else
#define LIMBO_UNHELD skip
#endif

/* ---- importer ---- */

proctype Importer(byte i)
{
    byte s;
    bool none, claimed;

    /* open_lockfree (core/ipc.c): reg_block_lookup finds a LIVE, LIMBO or
     * RETIRING record (else open_locked finds it RETIRED or gone: refused). */
    if
    :: state == B_LIVE || state == B_LIMBO || state == B_RETIRING -> skip
    :: else -> goto refused
    fi;
    DIE;
#ifdef BROKEN_BIT_FIRST
    held = held | (1 << i);
    DIE;
    intent[i] = L_OPENING;
#else
    /* reg_lease_begin: the record (block, generation, count 1), then
     * STORE_STATE(intent, OPENING) "before the bit: a sweep finds it" */
    intent[i] = L_OPENING;
    DIE;
#ifdef BROKEN_ORDER
    atomic { state != B_RETIRING -> s = state; mapped[i] = (s == B_LIVE || s == B_LIMBO) };
    DIE;
    held = held | (1 << i);
#else
    /* reg_hold: __atomic_fetch_or(held, bit, SEQ_CST). Pairs with the
     * exporter's reg_block_held load in reg_block_retire (Dekker). */
    held = held | (1 << i);
#endif
#endif
    DIE;
#ifndef BROKEN_ORDER
    /* settle_state: a seq_cst load of state, repeated while RETIRING (the
     * exporter decides without the lock); the other half of the Dekker pair.
     * Deciding to go on is deciding to map: mapped from here. */
    atomic { state != B_RETIRING -> s = state; mapped[i] = (s == B_LIVE || s == B_LIMBO) };
    DIE;
#endif
    if
    :: s == B_LIVE || s == B_LIMBO -> skip
    :: else ->
        /* not LIVE or LIMBO: reg_lease_end, "not LIMBO: nobody to wake" */
        intent[i] = L_CLOSING;
        DIE;
        held = held & ~(1 << i);
        DIE;
        intent[i] = L_FREE;
        goto refused
    fi;
    /* claim_handoff: CAS pending -> pending - 1 if > 0 (the first lease) */
    atomic {
        if
        :: pending > 0 -> pending--; claimed = true
        :: else
        fi
    };
    DIE;
    /* the real cuIpcOpenMemHandle: fails (ipc_open_abort) or succeeds */
    if
    :: true ->
        /* ipc_open_abort -> release_lease(give_back): nothing was mapped; a
         * claimed hand-off goes back first, if the block is LIVE or LIMBO */
        mapped[i] = false;
        if
        :: claimed ->
            atomic {
                if
                :: state == B_LIVE || state == B_LIMBO -> pending++
                :: else
                fi
            };
            DIE
        :: else
        fi;
        goto close_lease
    :: true -> skip
    fi;
    /* ipc_open_commit: CAS intent OPENING -> OPEN */
    intent[i] = L_OPEN;
    DIE;
    assert(!freed); /* the program reads the mapping */
    DIE;
    /* ipc_close_begin: CAS intent OPEN -> CLOSING (count 1) */
    intent[i] = L_CLOSING;
    DIE;
    /* the real cuIpcCloseMemHandle syncs and unmaps: the last access */
    assert(!freed);
    mapped[i] = false;
    DIE;
close_lease:
    /* ipc_close_finish -> release_lease -> reg_lease_end (core/registry_leases.c):
     * CLOSING, the bit cleared, emptiness read, count 0, FREE */
    intent[i] = L_CLOSING;
    DIE;
    held = held & ~(1 << i); /* reg_unhold: __atomic_fetch_and, SEQ_CST */
    DIE;
    none = (held == 0); /* reg_unhold: !reg_block_held (a separate load) */
    DIE;
    intent[i] = L_FREE;
    DIE;
    /* "if (!empty) return REG_NONE"; generation and LOAD_STATE(state) ==
     * LIMBO -> limbo_unheld -> the exporter, woken after the local unlock */
    if
    :: none ->
        if
        :: state == B_LIMBO -> LIMBO_UNHELD; DIE; wake++
#ifndef BROKEN_RETIRING_WAKE
        :: state == B_RETIRING -> LIMBO_UNHELD; DIE; wake++ /* waits_on_holders */
#endif
        :: else
        fi
    :: else
    fi;
refused:
    finished[i] = true;
    goto out;
died:
    atomic { dead[i] = true; mapped[i] = false; finished[i] = true };
out:
    skip
}

/* ---- sweeper of a dead importer ---- */

/* reg_sweep_dead -> sweep_found -> reg_holder_sweep -> reg_holder_drop_leases
 * (core/registry_holders.c), under the registry lock, once importer j is dead. */
proctype Sweeper(byte j)
{
    finished[j];
    if
    :: dead[j] ->
        LOCK;
        if
        :: intent[j] != L_FREE ->
            /* free_lease: reg_unhold (the bit), then the record FREE */
            held = held & ~(1 << j);
            intent[j] = L_FREE;
            /* reg_block_unheld: !reg_block_held, then LOAD_STATE(state) */
            if
            :: held == 0 ->
                if
                :: state == B_LIMBO -> LIMBO_UNHELD; wake++ /* registry_wake */
#ifndef BROKEN_RETIRING_WAKE
                :: state == B_RETIRING -> LIMBO_UNHELD; wake++ /* waits_on_holders */
#endif
                :: else
                fi
            :: else
            fi
        :: else
        fi;
        UNLOCK /* STORE_STATE(h->state, HOLDER_FREE) */
    :: else
    fi
}

/* ---- a repair under the registry lock ---- */

/* rebuild_index (core/registry_blocks.c; from grow_blocks or registry_repair):
 * "An exporter deciding (it retires without the lock), or one that died
 * deciding: limbo until it says otherwise. A CAS." */
proctype Repairer()
{
    LOCK;
    atomic {
        if
        :: state == B_RETIRING -> state = B_LIMBO
        :: else
        fi
    };
    UNLOCK
}

/* ---- exporter ---- */

/* reg_block_retire (core/registry_blocks.c): CAS LIMBO -> RETIRING; read the
 * bitmap and pending (seq_cst; pairs with the importer's fetch_or, then its
 * load of state); CAS RETIRING -> RETIRED if both are empty, else -> LIMBO.
 * A repair may have turned RETIRING into LIMBO meanwhile: then the CAS
 * fails and the block stays in limbo. */
inline retire(ok)
{
    ok = false;
    atomic {
        if
        :: state == B_LIMBO -> state = B_RETIRING; retiring = true
        :: else -> retiring = false
        fi
    };
    if
    :: retiring ->
        free_now = (held == 0);
        if
        :: free_now -> free_now = (pending == 0)
        :: else
        fi;
#ifdef BROKEN_STORE
        if
        :: free_now -> state = B_RETIRED
        :: else -> state = B_LIMBO
        fi;
        ok = free_now
#else
        atomic {
            if
            :: state == B_RETIRING ->
                if
                :: free_now -> state = B_RETIRED
                :: else -> state = B_LIMBO
                fi;
                ok = free_now
            :: else
            fi
        }
#endif
    :: else
    fi
}

/* expire_handoffs (core/ipc.c): pending -> 0 (an exchange) when its
 * deadline passed: maybe, or certainly once time passed (due). */
inline expire()
{
    atomic {
        if
        :: pending > 0 ->
            if
            :: pending = 0
            :: !due -> skip
            fi
        :: else
        fi
    }
}

/* The real free, from limbo (limbo.c free_limbo's host free_block) or at once
 * (ipc_free_begin's IPC_REAL): no importer may be mapping the block. */
inline real_free()
{
    assert(!mapped[0] && !mapped[1]);
    freed = true
}

/* free_limbo (core/ipc.c), local and registry locks held: the block is
 * still ours and in LIMBO; expire_handoffs; "Held or awaited: not worth a
 * RETIRING round" (pending, then reg_block_held), else reg_block_retire;
 * the real free after both unlocks. */
inline free_limbo(ok)
{
    ok = false;
    LOCK;
    if
    :: state == B_LIMBO ->
        expire();
        if
        :: pending != 0 -> skip
        :: else ->
            if
            :: held != 0 -> skip
            :: else -> retire(ok)
            fi
        fi
    :: else
    fi;
    UNLOCK;
    if
    :: ok -> real_free()
    :: else
    fi
}

proctype Exporter()
{
    bool ok, retiring, free_now, polled;
    byte seen;

    /* The program frees the block: ipc_free_begin. */
    if
    :: pending == 0 ->
        /* limbo_free_needs_no_lock (LIVE, nothing pending) -> limbo_free_into
         * without the registry lock */
        state = B_LIMBO;
        retire(ok)
    :: else ->
        /* a hand-off pending: under the registry lock, expire_handoffs if
         * due, then limbo_free_into */
        LOCK;
        expire();
        state = B_LIMBO;
        retire(ok);
        UNLOCK
    fi;
    if
    :: ok -> real_free(); goto out /* IPC_REAL: the real free at once */
    :: else
    fi;
    /* IPC_DONE (local_limbo_add): limbo_collector_kick, then limbo_collect(DUE)
     * at once; then the collector thread's limbo_collector_step: the wake
     * word read before collecting, collect, registry_wait(seen, wait). */
    do
    :: seen = wake;
        free_limbo(ok);
        if
        :: ok -> break
        :: else
        fi;
        /* Nothing freed after the poll, when nothing else could move: the
         * block is held by nobody who will ever let it go. */
        assert(!polled);
        if
        :: wake != seen -> skip /* registry_wake from a close or a sweep */
#ifdef NO_POLL
        :: timeout && pending > 0 -> due = true /* only a hand-off's deadline */
#else
        :: timeout -> due = true; polled = true /* LIMBO_POLL_NS, or a hand-off's deadline */
#endif
        fi
    od;
out:
    skip
}

init
{
    atomic {
        run Exporter();
        run Importer(0);
        run Importer(1);
        run Sweeper(0);
        run Sweeper(1);
        run Repairer()
    };
    /* Everyone finished: nothing leaked. */
    _nr_pr == 1;
    assert(freed && held == 0 && intent[0] == L_FREE && intent[1] == L_FREE)
}

#ifdef LIVENESS
ltl eventually_freed { <>freed }
#endif
