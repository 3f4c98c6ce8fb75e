/* vmm: the VMM API (cuMemCreate, cuMemMap, shareable handles), legacy IPC
 * on VMM memory through the shim's synthetic handles, and the VMM ledger
 * (who maps what, since when, from where). See vmm.c. */
#ifndef VMM_H
#define VMM_H

#include <stdbool.h>
#include <stdint.h>

/* True when handle (64 bytes) has the synthetic handle's magic and check
 * word; it may still be forged or stale (the registry says: ipc_open_begin). */
bool vmm_handle_synthetic(const void *handle);
/* After a real get-handle refused ptr: if it lies in a VMM mapping of a
 * shareable allocation of this process, export it (once per mapping) and
 * write the synthetic handle to handle_out (64 bytes). 0, or a negative
 * errno: the driver's refusal stands. */
int vmm_export_legacy(void *handle_out, uint64_t ptr);
/* Open a synthetic handle (ipc_open_begin said IPC_REAL): fetch the
 * exporter's fd, import, reserve, map, set access. 0 and *out, or a
 * negative errno with nothing left behind. */
int vmm_open(const void *handle, uint64_t *out);
/* True when ptr is a vmm_open's pointer; vmm_close unmaps, releases and
 * frees its reservation (0, or -ENOENT when it is not one). */
bool vmm_is_open(uint64_t ptr);
int vmm_close(uint64_t ptr);
/* The host's free_block for an identity with IPC_IDENTITY_VMM: closes the
 * export's fd (the driver keeps the memory while anything holds it). 0. */
int vmm_free_block(uint64_t identity);
/* True when handle (64 bytes) is a direct-sharing ledger key (vmm.c): a
 * registry key, never a handle a program may open. */
bool vmm_handle_direct(const void *handle);
/* At normal exit: the VMM allocations imported and never released, and the
 * mappings left, each once with its call site (log_report). */
void vmm_report_exit(void);
/* The fork chain's child step (init.c): forget the parent's tables. */
void vmm_postfork_child(void);

/* The fork chain's child step (init.c): forget the parent's tables. */
void vmm_postfork_child(void);

#endif
