/* swap_engine: host swap's orchestration, in core. It owns the index of
 * swappable blocks and one eviction policy per device, keeps the budget
 * accounting, and turns each access into device operations: the victims to
 * move to the host, then the block to bring to its device. What a move is
 * (in the shim a VMM remap with its copies, or cuMemAdvise +
 * cuMemPrefetchAsync for managed memory; a recording in the unit tests) is
 * the host's move (host_move_fn, host.h, whose contract it keeps: each move
 * says whether the block is new and whether an eviction writes it back),
 * handed to each engine with its own context: core never calls CUDA.
 *
 * Guarantee: the bytes the engine has placed on a device (blocks whose
 * on_device note is set) are always a subset of what that device's policy
 * counts as resident, so they never exceed the budget. A failed move leaves
 * the block where it was (demand paging serves it).
 *
 * No locking inside: the caller serialises every call (the shim holds its
 * swap lock). Everything returns 0 or a negative errno. */
#ifndef SWAP_ENGINE_H
#define SWAP_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "host.h"
#include "swap.h"
#include "swap_index.h"

#define SWAP_ENGINE_MAX_DEVICES 64

/* The engine's one device operation: a parameter rather than a member of
 * the host's table (host.h) because each engine carries its own ctx (the
 * unit tests drive several engines, each recording its moves). */
struct swap_ops {
    host_move_fn *move; /* called with the caller's lock held */
    void *ctx;          /* passed to move */
};

struct swap_engine_counts {
    /* charged bytes of successful moves: fetches, evictions, and new blocks
     * placed before their first access (on the device, or on the host for a
     * copy with no room: nothing to copy) */
    uint64_t to_device_bytes, to_host_bytes, created_bytes;
    uint64_t move_failures;
    uint64_t overflows; /* accesses left to demand paging: the launch does not fit */
    /* fetches ahead (swap_engine_fetch_ahead): bytes (in to_device_bytes
     * too), and the launches' feedback (swap_engine_ahead_feedback): blocks
     * used late (the launch waited for the copy) or early, and fetches on
     * demand of blocks the prediction saw coming */
    uint64_t ahead_bytes, ahead_late, ahead_early, ahead_missed;
};

struct swap_engine;

/* kind and budget (> 0) of every device's policy, created on first use.
 * -EINVAL, -ENOMEM. */
int swap_engine_create(enum swap_policy_kind kind, uint64_t budget, const struct swap_ops *ops,
                       struct swap_engine **out);
void swap_engine_destroy(struct swap_engine *e);

/* A new swappable block of size bytes on device, charged its size rounded up
 * to charge_unit. -EINVAL (size 0, bad device), -EEXIST, -ENOMEM. */
int swap_engine_add(struct swap_engine *e, uint64_t base, uint64_t size, int device,
                    uint64_t charge_unit);

/* The block at base is freed: it leaves the index and its policy's budget
 * (into *out when not NULL). -ENOENT if it is not a swappable block. */
int swap_engine_remove(struct swap_engine *e, uint64_t base, struct swap_block *out);

/* The block containing addr, or NULL (valid until the next add/remove). */
struct swap_block *swap_engine_find(const struct swap_engine *e, uint64_t addr);

/* The index, for the launch scanner (swap_index_scan_args). */
struct swap_index *swap_engine_index(struct swap_engine *e);

/* The current launch accesses b: its policy decides; the victims that are
 * on their device are moved to the host first, then b, when it is not on
 * its device, is moved there, all on stream. by_copy: the access is a copy
 * or set (swap_policy_copy): b moves only when it is new, to its device
 * when the policy counts it resident, else to the host, before the copy.
 * -ENOSPC: the launch's blocks do not fit the budget; nothing moved, the
 * access is left to demand paging (counted). -ENOMEM. */
int swap_engine_access(struct swap_engine *e, struct swap_block *b, bool is_write, bool by_copy,
                       uint64_t stream);

/* The current launch is complete: every policy it touched advances, and
 * its device's fetch-ahead horizon takes the launch's feedback
 * (swap_ahead_end_launch). */
void swap_engine_end_launch(struct swap_engine *e);

/* Fetch ahead, between launches (after swap_engine_end_launch, before the
 * next launch's first swap_engine_access): for every device, up to
 * SWAP_AHEAD_PER_LAUNCH blocks predicted within the device's horizon
 * (swap_policy_prefetch), each as moves on stream: its victims that are on
 * the device to the host (as swap_engine_access moves them), then the block
 * to its device with HOST_MOVE_AHEAD (the caller does not wait for the
 * copy; the launch that uses the block must). A successful one sets the
 * block's ahead note. A failed move leaves the block on the host (the
 * launch that uses it moves it on demand), and so does a victim's failed
 * move (nothing is added beside a victim left on the device). Returns how
 * many blocks were fetched ahead, or -ENOMEM. */
int swap_engine_fetch_ahead(struct swap_engine *e, uint64_t stream);

/* Feedback for device's horizon, from the host: a launch used a block
 * fetched ahead (its ahead note was set when the launch's access was
 * reported) and waited for its copy (late: the copy ended after the
 * stream reached the launch), or did not (early). It may come launches
 * later (once the host can tell); it counts toward the launch current
 * then. Blocks fetched on demand that the prediction saw coming count as
 * late without the host (swap_engine_access). */
void swap_engine_ahead_feedback(struct swap_engine *e, int device, bool late);

/* Device d's fetch-ahead horizon in launches (swap_ahead), 0 for a device
 * with no policy yet. */
uint32_t swap_engine_horizon(const struct swap_engine *e, int device);

/* Sum of the policies' counters, and the engine's own. */
void swap_engine_counters(const struct swap_engine *e, struct swap_counters *policy,
                          struct swap_engine_counts *own);

/* Bytes on device d as the engine placed them (on_device notes), and as
 * its policy counts them. */
uint64_t swap_engine_placed_bytes(const struct swap_engine *e, int device);
uint64_t swap_engine_resident_bytes(const struct swap_engine *e, int device);

#endif
