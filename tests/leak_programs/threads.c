/* Threads: one blocked in read(2) holding a block on its stack and another in its
 * thread-local storage; joined threads, one of which returned a block the program keeps in a
 * global and two of which leaked a block each. glibc keeps joined threads' stacks in a cache
 * (an mmap), whose thread descriptors still point at their TLS vectors 16 bytes in: possibly
 * lost for memcheck and heaptui alike (heaptui's TLS vectors are 16 bytes longer: the agent
 * is one more module with thread-local storage).
 *
 * A finished thread's stack is not a root for either tool below its TLS: memcheck never scans
 * stack memory a thread returned from, and heaptui scans only the TLS and descriptor of a
 * cached stack (docs/reference.md §3). So the workers do not wipe their stacks: each leaves
 * copies of its blocks' addresses in frames it returned from, and the leaked blocks are
 * definitely lost for both all the same. */
#include "leak.h"
#include <pthread.h>
#include <unistd.h>

__thread void *tls_block; /* not static: its stores must stay at -O2 */
static int gate[2];
void *returned;

static void *blocked(void *arg) {
    (void)arg;
    void *volatile on_stack = malloc(40);
    tls_block = malloc(56);
    char c;
    /* Never returns: nobody writes to the pipe. */
    while (read(gate[0], &c, 1) != 0) {
    }
    return on_stack;
}

/* Copies of `p` in a frame that returns: stale words in the thread's stack, 16 KiB of them
 * (deeper than what runs on the stack after the thread's function returned: glibc's thread
 * exit and the agent's thread-exit handler overwrite the shallower ones). */
static NOINLINE void leave_copies(void *p) {
    void *volatile copies[2048];
    for (int i = 0; i < 2048; i++) copies[i] = p;
    __asm__ volatile("" ::"r"(copies) : "memory");
}

static NOINLINE void *work(void *arg) {
    if (arg) return malloc(64);
    leave_copies(opaque(malloc(48))); /* leaked by the thread */
    return 0;
}

static void *worker(void *arg) { return work(arg); }

static NOINLINE void build(void) {
    pthread_t t;
    pthread_create(&t, 0, blocked, 0);
    for (int i = 0; i < 3; i++) {
        pthread_t w;
        void *out = 0;
        pthread_create(&w, 0, worker, (void *)(long)(i == 0));
        pthread_join(w, &out);
        if (out) returned = out;
    }
}

int main(void) {
    if (pipe(gate) != 0) return 1;
    tls_block = malloc(24);
    RUN_AND_WIPE(build);
    return 0;
}
