/* A preload that only starts one idle thread: what a second thread alone costs a program,
 * since glibc skips its atomics while a process is single-threaded (its mutexes and malloc's
 * arena lock). bench/thread_tax.sh compares it with the agent, which starts its own threads. */
#include <pthread.h>
#include <unistd.h>

static void *idle(void *arg) {
    (void)arg;
    for (;;)
        pause();
    return 0;
}

__attribute__((constructor)) static void start(void) {
    pthread_t t;
    pthread_create(&t, 0, idle, 0);
}
