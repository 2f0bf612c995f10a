/* Cost of the agent's blocking-call wrappers (signals::blocking): N calls of poll(NULL, 0, 0)
 * and of select with a zero timeout, each a real system call that returns at once; run bare
 * and under the agent, the difference per call is the wrapper's cost. (A call with a
 * non-zero timeout also reads the monotonic clock once, ~20 ns, next to a sleep of at least
 * the kernel's timer slack, 50 us.) */
#include <poll.h>
#include <sys/select.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    double t0 = now();
    for (long i = 0; i < n; i++) poll(NULL, 0, 0);
    double t1 = now();
    for (long i = 0; i < n; i++) {
        struct timeval zero = {0, 0};
        select(0, NULL, NULL, NULL, &zero);
    }
    double t2 = now();
    printf("poll_ns=%.1f select_ns=%.1f\n", (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
    return 0;
}
