/* ipc_handle: what names an export in every process -- its 64 bytes (a
 * CUipcMemHandle / cudaIpcMemHandle_t, or a pool's export data) and its
 * kind. Shared by the IPC interface (ipc.h) and the registry, which keeps
 * the bytes in each block record (registry.h). */
#ifndef IPC_HANDLE_H
#define IPC_HANDLE_H

#include <stdint.h>

#define IPC_HANDLE_BYTES 64

/* The bytes of a CUipcMemHandle / cudaIpcMemHandle_t. */
struct ipc_handle {
    uint8_t bytes[IPC_HANDLE_BYTES];
};

/* The kinds of shared allocation, keyed alike by 64 export bytes:
 * legacy IPC (cudaIpcGetMemHandle's handle; the importer lets go with
 * cudaIpcCloseMemHandle), stream-ordered pool IPC
 * (cudaMemPoolExportPointer's cudaMemPoolPtrExportData; the importer lets
 * go with a free of the imported pointer) and legacy IPC on VMM memory
 * (cuMemCreate + cuMemMap, which the driver refuses to export: the shim's
 * synthetic handle, shim/vmm.c; opened and closed like a legacy handle,
 * so IPC_KIND_VMM is an export's kind only, never a local mapping's). One
 * record, lease and limbo serve all; the kind says which call ends an
 * import, and the reports show it. */
enum { IPC_KIND_LEGACY = 0, IPC_KIND_POOL = 1, IPC_KIND_VMM = 2 };

/* An export identity (ipc_export_identity) with this bit set is not a
 * driver BUFFER_ID but the shim's own number of a VMM export: the host's
 * free_block then lets go of the shim's export (the driver keeps VMM
 * memory alive while any handle or mapping of it exists, so there is
 * nothing to free). Real BUFFER_IDs count up from 1 per process. */
#define IPC_IDENTITY_VMM (1ull << 63)

/* Addresses at or above this are no user address (x86-64 and AArch64 user
 * space ends far below): the host's ledger-only records and leases (the
 * shim's direct VMM sharing, shim/vmm.c), which nothing the program frees
 * or closes can reach. The leak report and watch leave them to the host,
 * which reports them itself. */
#define IPC_LEDGER_ADDRESS (1ull << 62)

#endif
