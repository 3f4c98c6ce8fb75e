/*
 * sim_state_internal.h: what the two halves of the shared machine share:
 * sim_state.c (attach, layout, allocation, sweep, detach) and sim_map.c
 * (the table of IPC opens in force and the owner's free-while-mapped
 * handshake). Internal to libcuda (hidden visibility). Every function here
 * but the layout accessors and sim_self_* wants the machine mutex held
 * (the _locked ones) or says so.
 */
#ifndef SIM_STATE_INTERNAL_H
#define SIM_STATE_INTERNAL_H

#include "sim_state.h"

#include <sys/types.h>

/* Loads and stores of fields that openers and closers read or write without
 * the mutex. Sequentially consistent: the handshake at sim_owner_release_locked
 * needs a total order of its stores and loads. */
#define LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)

/* The machine's holder table and table of IPC opens (sim_state.c). */
SIM_INTERNAL struct sim_holder *sim_holders(void);
SIM_INTERNAL struct sim_map *sim_maps(void);
/* This process's holder slot (SIM_NO_INDEX before attach) and the pid that
 * attached (0: not attached, or a fork child). */
SIM_INTERNAL uint32_t sim_self_holder(void);
SIM_INTERNAL pid_t sim_self_pid(void);

/* Releases LIVE entry `index`. Caller holds the mutex (sim_state.c). */
SIM_INTERNAL void sim_release_locked(uint32_t index);
/* Withdraws this process's record of allocation `index` (sim_state.c). */
SIM_INTERNAL void sim_own_forget(uint32_t index);

/* The owner lets go of LIVE entry `index`: released now, or kept while an
 * open names it (keep mode). Caller holds the mutex (sim_map.c). */
SIM_INTERNAL void sim_owner_release_locked(uint32_t index);
/* Drops the opens of holder k (in context ctx_id unless all). Caller holds
 * the mutex (sim_map.c). */
SIM_INTERNAL void sim_unmap_holder_locked(uint32_t k, int all, uint64_t ctx_id);

#endif /* SIM_STATE_INTERNAL_H */
