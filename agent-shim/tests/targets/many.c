/* 256 threads, each holding a private buffer of a size of its own (1000 + i). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 256
static pthread_barrier_t ready, done;

__attribute__((noinline)) static void *worker(void *arg) {
    long i = (long)arg;
    char *volatile own = malloc(1000 + i);
    own[0] = 1;
    scrub_stack();
    pthread_barrier_wait(&ready);
    pthread_barrier_wait(&done);
    free(own);
    return 0;
}

int main(void) {
    pthread_barrier_init(&ready, 0, THREADS + 1);
    pthread_barrier_init(&done, 0, THREADS + 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    static pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], &attr, worker, (void *)i) != 0) return 1;
    pthread_barrier_wait(&ready);
    snapshot_and_wait(1);
    pthread_barrier_wait(&done);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], 0);
    printf("joined %d threads\n", THREADS);
    return 0;
}
