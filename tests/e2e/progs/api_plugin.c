/* api_plugin.c: the e2e operations in a worker library that a host program
 * dlopens with RTLD_LOCAL, the way Python extensions and plugin hosts load
 * CUDA code. The worker (libe2e-worker.so, built from api_runtime.c) links
 * the shared runtime; the host links neither the runtime nor the driver. */
#include "api.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static const struct api *worker;

static int init(int device)
{
    char path[PATH_MAX];
    const char *dir = getenv("E2E_BIN_DIR");
    snprintf(path, sizeof path, "%s/libe2e-worker.so", dir ? dir : ".");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "api_plugin: %s\n", dlerror());
        return 3;
    }
    worker = (const struct api *)dlsym(lib, "api");
    return worker ? worker->init(device) : 500;
}
static int attach_thread(void)
{
    return worker->attach_thread();
}
static int alloc(uint64_t *p, size_t n)
{
    return worker->alloc(p, n);
}
static int release(uint64_t p)
{
    return worker->free(p);
}
static int get_handle(unsigned char h[64], uint64_t p)
{
    return worker->get_handle(h, p);
}
static int open_handle(uint64_t *p, const unsigned char h[64])
{
    return worker->open(p, h);
}
static int close_handle(uint64_t p)
{
    return worker->close(p);
}
static int to_device(uint64_t d, const void *s, size_t n)
{
    return worker->to_device(d, s, n);
}
static int to_host(void *d, uint64_t s, size_t n)
{
    return worker->to_host(d, s, n);
}
static int mem_info(size_t *f, size_t *t)
{
    return worker->mem_info(f, t);
}

const struct api api = {"plugin",    init,         attach_thread, alloc,   release, get_handle,
                        open_handle, close_handle, to_device,     to_host, mem_info};
