/* The main thread's own units (record_units.rs): main allocates blocks of 1001 bytes itself
 * (its own frame is the innermost and the outermost one below the C runtime's) and frees a
 * few, 1002-byte blocks through a helper, and a worker thread allocates 1003-byte blocks in
 * its start routine. Prints "ready" once the worker ended, then waits for stdin to close. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define MAIN_BLOCKS 40
#define MAIN_FREED 4
#define HELPER_BLOCKS 12
#define WORKER_BLOCKS 9

static void *volatile keep[MAIN_BLOCKS + HELPER_BLOCKS + WORKER_BLOCKS];

__attribute__((noinline)) void *helper(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void *worker(void *unused) {
    for (int i = 0; i < WORKER_BLOCKS; i++) keep[MAIN_BLOCKS + HELPER_BLOCKS + i] = malloc(1003);
    __asm__ volatile("" ::: "memory");
    return unused;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int i = 0; i < MAIN_BLOCKS; i++) keep[i] = malloc(1001);
    for (int i = 0; i < MAIN_FREED; i++) free(keep[i]);
    for (int i = 0; i < HELPER_BLOCKS; i++) keep[MAIN_BLOCKS + i] = helper(1002);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
    puts("ready");
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}
