/* Target of the protocol benchmark (bench/protocol.sh).
 *   protocol_target hold THREADS OBJECTS : THREADS waiting threads, OBJECTS 32-byte blocks in a
 *                                          list held by main; waits for end of stdin.
 *   protocol_target stress SECONDS       : 4 threads malloc/free for SECONDS; prints ops/s.   */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int quit;
static double seconds;
static long ops[4];

static void *waiter(void *arg) {
    char *volatile mine = malloc(64 + (long)arg % 512);
    pthread_mutex_lock(&mu);
    while (!quit) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    free(mine);
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *stress(void *arg) {
    long i = (long)arg, n = 0;
    void *slots[64] = {0};
    double end = now() + seconds;
    while (now() < end) {
        for (int k = 0; k < 1000; k++, n++) {
            int s = (n * 7 + k) & 63;
            free(slots[s]);
            slots[s] = malloc(16 + (n & 255));
        }
    }
    for (int s = 0; s < 64; s++) free(slots[s]);
    ops[i] = n;
    return 0;
}

struct node { struct node *next; char pad[24]; };

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "hold") == 0) {
        long threads = atol(argv[2]), objects = atol(argv[3]);
        pthread_t *t = malloc(threads * sizeof *t);
        for (long i = 0; i < threads; i++) pthread_create(&t[i], 0, waiter, (void *)i);
        struct node *volatile list = 0;
        for (long i = 0; i < objects; i++) {
            struct node *n = malloc(sizeof *n);
            n->next = list;
            list = n;
        }
        printf("ready\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) > 0) {}
        pthread_mutex_lock(&mu);
        quit = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
        for (long i = 0; i < threads; i++) pthread_join(t[i], 0);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "stress") == 0) {
        seconds = atof(argv[2]);
        pthread_t t[4];
        for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, stress, (void *)i);
        for (int i = 0; i < 4; i++) pthread_join(t[i], 0);
        printf("%.0f\n", (ops[0] + ops[1] + ops[2] + ops[3]) / seconds);
        return 0;
    }
    fprintf(stderr, "usage: %s hold THREADS OBJECTS | stress SECONDS\n", argv[0]);
    return 2;
}
