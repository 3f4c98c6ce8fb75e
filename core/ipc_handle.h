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

/* The two kinds of shared allocation, keyed alike by 64 export bytes:
 * legacy IPC (cudaIpcGetMemHandle's handle; the importer lets go with
 * cudaIpcCloseMemHandle) and stream-ordered pool IPC
 * (cudaMemPoolExportPointer's cudaMemPoolPtrExportData; the importer lets
 * go with a free of the imported pointer). One record, lease and limbo
 * serve both; the kind says which call ends an import. */
enum { IPC_KIND_LEGACY = 0, IPC_KIND_POOL = 1 };

#endif
