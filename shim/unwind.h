/* unwind: call sites through libunwind, when IPCSHIM_CALLSITE_DEPTH > 0. */
#ifndef UNWIND_H
#define UNWIND_H

/* Load libunwind and give core its unwinder; once, from init.c's start-up. */
void unwind_init(void);

#endif
