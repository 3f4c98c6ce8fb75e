/* print_time: a program that never touches CUDA. It prints how far time()
 * is from the clock (86400 under the wrap_time tool, 0 without). */
#include <stdio.h>
#include <time.h>

int main(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long shift = (long)(time(NULL) - ts.tv_sec);
    printf("time shift: %ld\n", (shift + 5) / 10 * 10);
    return 0;
}
