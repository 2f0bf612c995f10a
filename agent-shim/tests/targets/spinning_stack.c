/* A thread the agent cannot stop (every signal blocked with the raw system call) that spins in
 * user space: the capture knows neither its stack pointer nor its thread pointer, so the frames
 * on its own stack stay mapped-memory roots (docs/reference.md §3), though its stack has the
 * shape of glibc's cached stacks of finished threads, of which only the TLS up is a root.
 *
 *   6161  held only by the spinning thread's frame: not lost */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>

static atomic_int spinning, done;

/* Stores the block's address in the caller's frame only. */
__attribute__((noinline)) static void allocate_into(void *volatile *slot) {
    void *p = malloc(6161);
    memset(p, 4, 6161);
    *slot = p;
}

static void *spinner(void *arg) {
    void *volatile held;
    allocate_into(&held);
    sigset_t all;
    sigfillset(&all);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8);
    spinning = 1;
    while (!done) {
    }
    free((void *)held);
    return arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, spinner, NULL);
    while (!spinning) usleep(1000);
    printf("spinning\n");
    snapshot_and_wait(1);
    done = 1;
    pthread_join(t, NULL);
    return 0;
}
