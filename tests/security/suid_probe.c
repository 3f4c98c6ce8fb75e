/* suid_probe: a program that a setuid install runs with the invoking user's
 * environment (test_setuid.c). It is linked to the shim and to the simulated
 * driver by absolute paths (the loader ignores LD_PRELOAD paths, $ORIGIN and
 * LD_LIBRARY_PATH in secure execution, as it does for a setuid program on a
 * node that preloads the shim through /etc/ld.so.preload), and does what
 * makes the shim read its options and open its files: a dlsym call (as PAM's
 * module loading does in su, passwd and sudo), then an export of device
 * memory through the driver API and a free. Between the export and the free
 * it prints "ready" and waits for its standard input to close, so that the
 * test can look at what exists while the shim holds it (the last process
 * out removes its registry). Exit 0 when every call worked, else the step
 * that failed. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CUipcMemHandle h;
    if (!dlsym(RTLD_DEFAULT, "cuInit")) return 10;
    if (cuInit(0) || cuDeviceGet(&dev, 0)) return 11;
    if (cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 12;
    if (cuMemAlloc(&p, 4 << 20)) return 13;
    if (cuIpcGetMemHandle(&h, p)) return 14;
    printf("ready\n");
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    if (cuMemFree(p)) return 15;
    return 0;
}
