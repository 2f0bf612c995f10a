/* sqlite3's pattern in a loop: every malloc and free inside a pthread mutex, as sqlite3Malloc
 * and sqlite3_free take their memory mutex. Prints nanoseconds an iteration. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 5000000;
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    void *keep[4] = {0};
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        void *p = malloc(24 + (i & 3) * 8);
        pthread_mutex_unlock(&m);
        pthread_mutex_lock(&m);
        free(keep[i & 3]);
        pthread_mutex_unlock(&m);
        keep[i & 3] = p;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    for (int i = 0; i < 4; i++)
        free(keep[i]);
    return 0;
}
