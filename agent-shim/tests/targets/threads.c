/* Threads of every sort, each holding a private buffer; two of them also hold one shared
 * buffer: a thread blocked in read(2), a thread that blocks every signal with
 * pthread_sigmask (the agent keeps its stop signal deliverable), a busy-looping one, and one
 * that blocks every signal with the raw system call (no wrapper sees it: not stoppable)
 * while blocked in read(2). */
#include <pthread.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <stdlib.h>

static int gate[2];
static volatile int stop_busy;
static pthread_barrier_t ready;

__attribute__((noinline)) static void *reader(void *shared_arg) {
    pthread_setname_np(pthread_self(), "reader");
    char *volatile shared = shared_arg;
    char *volatile own = malloc(10001);
    own[0] = 1;
    scrub_stack();
    pthread_barrier_wait(&ready);
    char c;
    if (read(gate[0], &c, 1) != 1) abort();
    free(own);
    return (void *)shared;
}

__attribute__((noinline)) static void *masked(void *shared_arg) {
    pthread_setname_np(pthread_self(), "masked");
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, 0);
    char *volatile shared = shared_arg;
    char *volatile own = malloc(20002);
    own[0] = 1;
    scrub_stack();
    pthread_barrier_wait(&ready);
    while (!stop_busy) usleep(1000);
    free(own);
    return (void *)shared;
}

__attribute__((noinline)) static void *busy(void *unused) {
    pthread_setname_np(pthread_self(), "busy");
    char *volatile own = malloc(30003);
    own[0] = 1;
    scrub_stack();
    pthread_barrier_wait(&ready);
    while (!stop_busy) own[1]++;
    free(own);
    return unused;
}

__attribute__((noinline)) static void *rawmask(void *unused) {
    pthread_setname_np(pthread_self(), "rawmask");
    sigset_t all;
    sigfillset(&all);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8);
    char *volatile own = malloc(50005);
    own[0] = 1;
    scrub_stack();
    pthread_barrier_wait(&ready);
    char c;
    if (read(gate[0], &c, 1) != 1) abort();
    free(own);
    return unused;
}

static pthread_t t[4];

/* main itself never holds the shared buffer: only the two threads do. */
__attribute__((noinline)) static void start_threads(void) {
    char *shared = malloc(40004);
    pthread_create(&t[0], 0, reader, shared);
    pthread_create(&t[1], 0, masked, shared);
    pthread_create(&t[2], 0, busy, 0);
    pthread_create(&t[3], 0, rawmask, 0);
}

int main(void) {
    if (pipe(gate) != 0) return 1;
    pthread_barrier_init(&ready, 0, 5);
    start_threads();
    scrub_stack();
    pthread_barrier_wait(&ready);
    snapshot_and_wait(1);
    stop_busy = 1;
    if (write(gate[1], "xx", 2) != 2) return 1;
    void *r0, *r1;
    pthread_join(t[0], &r0);
    pthread_join(t[1], &r1);
    pthread_join(t[2], 0);
    pthread_join(t[3], 0);
    free(r0);
    printf("joined 4 threads\n");
    return 0;
}
