/* Multi-threaded malloc/free stress for the hook-overhead benchmark (bench/hooks.sh).
 *
 * THREADS threads (default 4) each keep LIVE (10k) blocks live and perform OPS_TOTAL / THREADS
 * operations (2M operations in total, not per thread). One operation replaces a random live
 * block: free() it, then malloc() a new one of a random size in 16..4096 bytes, allocated
 * DEPTH (10) calls deep through a recursive helper, and touch its first and last byte.
 * So 2M operations are 2M frees + 2M mallocs. The blocks are left live at exit, so the
 * agent's exit summary shows the table at THREADS * LIVE tracked blocks.
 *
 * Build: gcc -O2 -fno-omit-frame-pointer -pthread bench/stress.c -o stress
 * Usage: stress [threads] [total_ops] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 10000
#define DEPTH 10

static long ops_per_thread;

static uint64_t next(uint64_t *s) {
    /* xorshift64*: cheap, per thread, no locks (unlike rand()). */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

__attribute__((noinline)) static char *alloc_deep(int depth, size_t size) {
    if (depth == 0) {
        char *p = malloc(size);
        if (!p) abort();
        p[0] = 1;
        p[size - 1] = 2;
        return p;
    }
    char *p = alloc_deep(depth - 1, size);
    __asm__ volatile("" ::: "memory"); /* keep the recursion (no tail call) */
    return p;
}

static void *worker(void *arg) {
    uint64_t seed = 0x9E3779B97F4A7C15ULL * ((uint64_t)(uintptr_t)arg + 1);
    char **live = calloc(LIVE, sizeof *live);
    for (int i = 0; i < LIVE; i++) live[i] = alloc_deep(DEPTH, 16 + next(&seed) % 4081);
    for (long op = 0; op < ops_per_thread; op++) {
        uint64_t r = next(&seed);
        size_t slot = r % LIVE;
        free(live[slot]);
        live[slot] = alloc_deep(DEPTH, 16 + (r >> 32) % 4081);
    }
    return live; /* the blocks stay live */
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    long total = argc > 2 ? atol(argv[2]) : 2000000;
    if (threads < 1 || threads > 1024 || total < 0) {
        fprintf(stderr, "usage: stress [threads 1..1024] [total_ops]\n");
        return 2;
    }
    ops_per_thread = total / threads;
    pthread_t t[1024];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    long sum = 0;
    for (int i = 0; i < threads; i++) {
        char **live;
        pthread_join(t[i], (void **)&live);
        for (int j = 0; j < LIVE; j++) sum += live[j][0];
    }
    printf("%d threads, %ld operations, %ld live blocks\n", threads, ops_per_thread * threads, sum);
    return 0;
}
