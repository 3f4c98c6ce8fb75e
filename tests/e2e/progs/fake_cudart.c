/* fake_cudart.c: a plugin library that defines its own cudaMalloc (a stub,
 * a mock, another vendor's shim). A host that looks it up by handle must get
 * this function, not the shim's. */
#include <stddef.h>

__attribute__((visibility("default"))) int cudaMalloc(void **p, size_t n)
{
    *p = (void *)(0x1000 + n);
    return 777;
}
