/* wrap_time.c: another preloaded tool (as libfaketime, profilers, sanitizers
 * are) that wraps a libc function and finds the real one with
 * dlsym(RTLD_NEXT, ...). It shifts time() by one day. */
#include <dlfcn.h>
#include <time.h>

__attribute__((visibility("default"))) time_t time(time_t *t)
{
    static time_t (*next)(time_t *);
    if (!next) next = (time_t(*)(time_t *))dlsym(RTLD_NEXT, "time");
    if (!next) return (time_t)-1;
    time_t now = next(NULL) + 86400;
    if (t) *t = now;
    return now;
}
