/*
 * test_driver.h: what the parts of the simcuda-driver test program share
 * (test_driver.c, test_driver_ipc.c, test_driver_machine.c,
 * test_driver_resolver.c: one Criterion program, suite `simcuda`, whose
 * .init and .fini test_driver.c defines): the includes, the machine's name,
 * and the helpers for a current context, free memory and forked children.
 */
#ifndef SIMCUDA_TEST_DRIVER_H
#define SIMCUDA_TEST_DRIVER_H

#include <cuda.h>
#include <cudaProfiler.h>
#include <criterion/criterion.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sim_state.h"
#include "simcuda.h"
#include "test_check.h"

/* The test's machine (SIMCUDA_MACHINE), named in .init after the test and
 * the pid. */
extern char g_machine[160];

/* cuInit plus a current primary context on device `dev`. */
CUresult init_on(int dev);
/* The current device's free memory (cuMemGetInfo). */
size_t free_bytes(void);
/* Runs fn(arg) in a forked child; returns its exit status (or 128+signal). */
int run_child(int (*fn)(void *), void *arg);
void write_all(int fd, const void *p, size_t n);
/* The driver's exported function `name` (asserts it is there). */
void *sym(const char *name);
/* What cuGetProcAddress hands out for (name, version, flags); asserts success
 * (test_driver_resolver.c). */
void *resolve(const char *name, int version, cuuint64_t flags);

/* An IPC handle for a forked child, and pipes both ways. */
struct ipc_args {
    CUipcMemHandle h;
    int to_parent[2];
    int to_child[2];
};

#endif /* SIMCUDA_TEST_DRIVER_H */
