/* entry: the doors. The exported entry points (runtime and driver doors),
 * their resolver-door twins, and the resolver door itself (dlsym by handle,
 * cuGetProcAddress), generated from symbols.def; per-door call counts. */
#ifndef ENTRY_H
#define ENTRY_H

#include "symbols.h"

/* Doors through which a program reaches an entry point (ARCHITECTURE). */
enum door { DOOR_RUNTIME, DOOR_DRIVER, DOOR_RESOLVER, DOOR_COUNT };

/* Thread-local depth of shim entries on this thread: an entry point reached
 * while already inside the shim is passed straight through. */
extern __thread int shim_depth __attribute__((tls_model("initial-exec")));

const char *entry_name(enum symbol_id id);
long long entry_calls(enum symbol_id id, enum door door);
/* Every entry point's calls, summed per door, under one lock (ipcshim_stats,
 * which programs may poll). */
void entry_calls_by_door(long long out[DOOR_COUNT]);

#endif
