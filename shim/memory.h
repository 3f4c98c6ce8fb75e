/* memory: the allocation and IPC entry points' logic (their do_ functions
 * are declared in symbols.h), and core's device operations. */
#ifndef MEMORY_H
#define MEMORY_H

/* Install core's device operations and start core (ipc_init) when this
 * process tracks (shim_tracking, resolve.h); called once, from init.c's
 * start-up. */
void memory_init(void);

#endif
