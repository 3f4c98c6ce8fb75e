/* sys: the kernel calls core makes that libc has no wrapper for (futex,
 * sched_setattr), made directly.
 *
 * Trap: the shim exports a `syscall` of its own (shim/pidfd.c, for
 * programs that call pidfd_getfd through it), and a call by that name
 * from inside this library binds to that export, not to libc's: core's
 * futex waits and wakes would detour through the interposer. These go to
 * the kernel straight. Each returns what the kernel returns: >= 0, or a
 * negative errno (errno is not touched). */
#ifndef SYS_H
#define SYS_H

#include <sys/syscall.h>
#include <unistd.h>

static inline long sys_call6(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
#else /* CUDA 13 runs on these two; another needs its own lines here */
#error "core/sys.h: no direct system call for this architecture"
#endif
}

#endif
