/* callsite: where an export or an open came from, for the leak report.
 *
 * callsite_capture() takes a short native backtrace (no symbolization:
 * the host's unwinder, host.h -- libunwind's unw_backtrace when the shim
 * could load it -- else glibc's backtrace(), about 20 times slower) and
 * interns it in a fixed table of this process, returning a small id;
 * callsite_format() turns an id into text lazily, at report time
 * (backtrace_symbols(): names of dynamic symbols, else module+offset, which
 * addr2line reads). Captured only at export and open, never on
 * allocations or frees.
 *
 * The table is lock-free (a slot is claimed by CAS on its hash word and
 * published by a release store), so capture is safe from any thread, in a
 * fork child, and under the shim's own locks. When it is full, new stacks
 * get id 0, which formats as "unknown". Depth 0 (IPCSHIM_CALLSITE_DEPTH=0)
 * turns capture off: callsite_capture() then returns 0 at once. */
#ifndef CALLSITE_H
#define CALLSITE_H

#include <stddef.h>
#include <stdint.h>

/* Frames kept per call site at most (IPCSHIM_CALLSITE_DEPTH is clamped). */
#define CALLSITE_MAX_DEPTH 16

/* Set the depth (frames of the program shown; 0 = off). Idempotent; also
 * warms backtrace() up (its first call loads libgcc_s) when depth > 0. */
void callsite_init(unsigned depth);

/* Under valgrind, a capture reads words of the program's stack that were
 * never written (the memo's scan for return addresses, libunwind's check of
 * each address it reads, which passes it to write(2)); memcheck would
 * report both at every export and open. So callsite_valgrind() says:
 * - CALLSITE_NATIVE: not under valgrind, or under a valgrind tool that
 *   checks no memory (callgrind, cachegrind, massif: valgrind preloads no
 *   vgpreload_memcheck then), so that a profile shows the native path;
 * - CALLSITE_VALGRIND_QUIET: under valgrind, found with its client request
 *   (built with valgrind/memcheck.h): each capture turns this thread's error
 *   reports off while it runs and marks what it keeps defined, so call
 *   sites and the memo work as natively and the program's memory stays as
 *   memcheck sees it;
 * - CALLSITE_VALGRIND_BLIND: under valgrind, found from its preload in
 *   LD_PRELOAD (built without the header): the memo is off (every capture
 *   unwinds), and the caller must not install libunwind (shim/unwind.c).
 * Decided once, at the first call. */
enum callsite_valgrind { CALLSITE_NATIVE, CALLSITE_VALGRIND_QUIET, CALLSITE_VALGRIND_BLIND };
enum callsite_valgrind callsite_valgrind(void);

/* The current stack as an interned id; 0 when off, full or unknown. */
uint32_t callsite_capture(void);

/* From an entry point of the shim, before the operation that captures: ra,
 * where the program's call returns to, and slot, the stack word holding it
 * (ignored unless *slot == ra). Until callsite_mark(NULL, NULL), this
 * thread's captures under it are memoised per (ra, slot) and answered
 * without unwinding while the outer frames' return addresses are still in
 * their stack words (the same calls led here): ids as a capture gives. */
void callsite_mark(void *ra, void *const *slot);

/* Captures this thread answered from its memo (for tests). */
uint64_t callsite_memo_hits(void);

/* Writes the program's frames of call site id into buf, innermost first,
 * separated by " < ", leaving out this library's and the CUDA libraries'
 * frames: "open_block+0x1f (leaky) < main+0x8c (leaky)". Returns buf.
 * "unknown" for id 0. Not async-signal-safe (it allocates). */
const char *callsite_format(uint32_t id, char *buf, size_t len);

/* The first (innermost) program frame's function name of id, e.g.
 * "open_block", or "" when it has no symbol. Returns buf. */
const char *callsite_function(uint32_t id, char *buf, size_t len);

#endif
