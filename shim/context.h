/* context: the calling thread's context, the close-sync wait, and the
 * context teardown entry points (cudaDeviceReset, cuCtxDestroy,
 * cuDevicePrimaryCtxReset, the last cuDevicePrimaryCtxRelease: context.c's
 * do_ functions; after the real call succeeds, core forgets the context's
 * mappings, ipc_context_gone). */
#ifndef CONTEXT_H
#define CONTEXT_H

#include "symbols.h"

#include <stdbool.h>
#include <stdint.h>

/* The calling thread's current context; for the runtime door, after making
 * the runtime create and set its primary context if none is current. */
uint64_t shim_current_context(bool runtime_door);
/* With IPCSHIM_CLOSE_SYNC (the default), wait for ctx's work to finish,
 * before a real close unmaps what it may still use. */
void shim_synchronize_context(uint64_t ctx);
/* Make ctx current on this thread unless it is already: true when it was
 * pushed, to be undone by shim_leave_context(true). */
bool shim_enter_context(CUcontext ctx);
void shim_leave_context(bool pushed);

#endif
