/* plugin_host: dlopens a plugin (argv[1]) that defines its own cudaMalloc and
 * calls it through dlsym on the plugin's handle; prints what came back. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) return printf("dlopen: %s\n", dlerror()), 2;
    int (*fn)(void **, size_t) = (int (*)(void **, size_t))dlsym(lib, "cudaMalloc");
    void *p = NULL;
    int r = fn ? fn(&p, 5) : -1;
    printf("plugin cudaMalloc: %d %#lx\n", r, (unsigned long)(uintptr_t)p);
    return r == 777 && p == (void *)0x1005 ? 0 : 1;
}
