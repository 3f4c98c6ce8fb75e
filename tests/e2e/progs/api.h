/* api.h: the CUDA operations the end-to-end programs use, behind one table,
 * so the same producer/consumer logic runs through each door a real program
 * may use: the runtime (api_runtime.c), the driver linked directly
 * (api_driver.c), and the driver reached only through dlopen +
 * cuGetProcAddress_v2, as the statically linked runtime does
 * (api_resolver.c). Every function returns 0 or the CUDA error number. */
#ifndef E2E_API_H
#define E2E_API_H

#include <stddef.h>
#include <stdint.h>

struct api {
    const char *door;
    int (*init)(int device);
    int (*attach_thread)(void); /* make init's context current on this thread */
    int (*alloc)(uint64_t *ptr, size_t bytes);
    int (*free)(uint64_t ptr);
    int (*get_handle)(unsigned char handle[64], uint64_t ptr);
    int (*open)(uint64_t *ptr, const unsigned char handle[64]);
    int (*close)(uint64_t ptr);
    int (*to_device)(uint64_t dst, const void *src, size_t bytes);
    int (*to_host)(void *dst, uint64_t src, size_t bytes);
    int (*mem_info)(size_t *free_bytes, size_t *total_bytes);
};

extern const struct api api;

#endif
