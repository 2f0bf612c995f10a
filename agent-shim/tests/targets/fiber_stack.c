/* A live thread running on another stack still holds what the suspended frames on its own
 * stack hold (docs/reference.md §3). Only a finished thread's cached stack is a root from its
 * TLS up; a live thread's glibc stack has the same shape (its descriptor at the top), but
 * while the thread runs a fiber (entered with swapcontext, as coroutine libraries do) or a
 * handler on an alternate signal stack, the frames on its own stack are not stale.
 *
 *   7777  held only by the worker's frame on its own stack, suspended while the worker runs a
 *         fiber on a stack of its own, where the snapshot is taken: not lost */
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>

enum { FIBER_STACK = 1 << 18 };

static void fiber(void) {
    printf("in fiber\n");
    snapshot_and_wait(1);
}

/* Stores the block's address in the caller's frame only: no register of the worker's, saved
 * by getcontext or swapcontext, holds it. */
__attribute__((noinline)) static void allocate_into(void *volatile *slot) {
    void *p = malloc(7777);
    memset(p, 3, 7777);
    *slot = p;
}

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    void *volatile held;
    allocate_into(&held);
    char *stack = mmap(NULL, FIBER_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    if (stack == MAP_FAILED) exit(3);
    ucontext_t own, in_fiber;
    getcontext(&in_fiber);
    in_fiber.uc_stack.ss_sp = stack;
    in_fiber.uc_stack.ss_size = FIBER_STACK;
    in_fiber.uc_link = &own;
    makecontext(&in_fiber, fiber, 0);
    swapcontext(&own, &in_fiber);
    free((void *)held);
    munmap(stack, FIBER_STACK);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    return 0;
}
