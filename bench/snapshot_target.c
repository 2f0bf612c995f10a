/* Snapshot benchmark workload: BLOCKS live heap blocks of SIZE bytes spread over THREADS
 * threads, each thread holding its share as a linked list from a local of one frame.
 * Usage: snapshot_target BLOCKS THREADS SIZE [wait]
 * With `wait` (bench/outside.sh) it prints `ready` once every thread holds its blocks and
 * waits for a line on stdin before going on.
 * Under HEAPTUI_DUMP=PREFIX it raises SIGUSR2 once every thread is ready, waits for
 * PREFIX.<pid>.1.hsnap, then times one sequential read of every block's bytes (the physical
 * floor of any scan) and prints `read_ms=<ms> bytes=<n>`. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct block {
    struct block *next;
};

static long blocks, threads, size;
static pthread_barrier_t ready, done;
static struct block **heads;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static void *worker(void *arg) {
    long t = (long)arg;
    long mine = blocks / threads + (t < blocks % threads);
    struct block *volatile head = 0;
    for (long i = 0; i < mine; i++) {
        struct block *b = malloc(size);
        memset(b, 0, size);
        b->next = head;
        head = b;
    }
    heads[t] = head;
    pthread_barrier_wait(&ready);
    pthread_barrier_wait(&done);
    for (struct block *b = head; b;) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "wait") == 0)) {
        fprintf(stderr, "usage: snapshot_target BLOCKS THREADS SIZE [wait]\n");
        return 2;
    }
    blocks = atol(argv[1]);
    threads = atol(argv[2]);
    size = atol(argv[3]);
    if (blocks < 1 || threads < 1 || size < (long)sizeof(struct block)) {
        fprintf(stderr, "snapshot_target: BLOCKS and THREADS must be >= 1, SIZE >= 8\n");
        return 2;
    }
    heads = calloc(threads, sizeof *heads);
    pthread_barrier_init(&ready, 0, threads + 1);
    pthread_barrier_init(&done, 0, threads + 1);
    pthread_t *t = malloc(threads * sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (long i = 0; i < threads; i++)
        if (pthread_create(&t[i], &attr, worker, (void *)i) != 0) return 1;
    pthread_barrier_wait(&ready);

    if (argc == 5) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
    }

    const char *prefix = getenv("HEAPTUI_DUMP");
    if (prefix) {
        char path[4096];
        snprintf(path, sizeof path, "%s.%d.1.hsnap", prefix, (int)getpid());
        raise(SIGUSR2);
        for (int i = 0; i < 600000 && access(path, F_OK) != 0; i++) usleep(100);
    }

    double start = now_ms();
    unsigned long sum = 0, bytes = 0;
    for (long i = 0; i < threads; i++)
        for (struct block *b = heads[i]; b; b = b->next) {
            const unsigned long *w = (const unsigned long *)b;
            for (long k = 0; k < size / 8; k++) sum += w[k];
            bytes += size;
        }
    double read_ms = now_ms() - start;
    printf("read_ms=%.3f bytes=%lu sum=%lu\n", read_ms, bytes, sum & 1);

    pthread_barrier_wait(&done);
    for (long i = 0; i < threads; i++) pthread_join(t[i], 0);
    free(t);
    free(heads);
    return 0;
}
