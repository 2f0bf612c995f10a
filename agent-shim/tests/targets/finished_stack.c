/* A finished thread's stale words are not roots (docs/reference.md §3): glibc keeps the stack
 * of a joined thread in its cache, an anonymous mapping, and only its TLS and thread
 * descriptor are scanned as mapped memory, not the frames the thread returned from — neither
 * the program's own stale words there nor those of the agent's hooks, which ran on that stack.
 *
 *   8888  held by main's frame only; a worker thread left 1024 copies of its address in a
 *         frame it returned from, then ended: still main's own block, not globals'
 *   9999  allocated by the worker (its hooks ran on the worker's stack) and left only in 1024
 *         copies in a frame it returned from: definitely lost
 *   the worker's DTV (_dl_allocate_tls): still reachable from the cached stack's descriptor */
#include <pthread.h>

static void *volatile mailbox;

/* 1024 copies of each of `a` and `b` in a frame that returns: 16 KiB, deeper than what runs
 * on the stack after the thread's function returned (glibc's thread exit, the agent's
 * thread-exit handler), which overwrites the shallower ones. */
__attribute__((noinline)) static void leave_copies(void *a, void *b) {
    void *volatile copies[2048];
    for (int i = 0; i < 2048; i += 2) {
        copies[i] = a;
        copies[i + 1] = b;
    }
    __asm__ volatile("" ::"r"(copies) : "memory");
}

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    void *lost = malloc(9999);
    memset(lost, 1, 9999);
    leave_copies(mailbox, lost);
    mailbox = NULL;
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    void *volatile held = malloc(8888);
    memset((void *)held, 2, 8888);
    mailbox = (void *)held;
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    printf("joined\n");
    snapshot_and_wait(1);
    free((void *)held);
    return 0;
}
