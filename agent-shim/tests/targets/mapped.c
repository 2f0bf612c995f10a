/* Mapped memory as a root (docs/reference.md §3), beside memory that must never be one.
 *
 * Reachable through mapped memory only:
 *   1111  its only pointer is in an anonymous private mmap (a custom allocator's arena)
 *   6666  its only pointer is in an anonymous shared mmap
 *   7777  its only pointer is in a page written in the middle of a 1 GiB reservation
 *   the DTVs (_dl_allocate_tls) of eight started-and-joined threads: glibc's cache of
 *   finished threads' stacks points at them
 * Lost, although a word somewhere in memory still holds their address:
 *   2222  its pointer was overwritten (the agent's own tables hold every address)
 *   3333  only a freed main-arena block pointed at it
 *   4444  only a freed mmapped chunk (300000 bytes, held back by the agent) pointed at it
 *   5555  only a freed block of a thread's own arena pointed at it */
#include <pthread.h>
#include <sys/mman.h>

static void *volatile sink;

__attribute__((noinline)) static void *fill(size_t size) {
    char *p = malloc(size);
    memset(p, 1, size);
    return p;
}

/* Allocates in the calling thread's arena: a block pointing at 5555, then frees it. */
__attribute__((noinline)) static void *arena_worker(void *arg) {
    /* volatile: the compiler would drop a store into memory that is freed next. */
    void *volatile *holder = malloc(512);
    holder[32] = fill(5555);
    free((void *)holder);
    return arg;
}

__attribute__((noinline)) static void *joined_worker(void *arg) {
    sink = arg;
    return arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    /* 1111 in a private anonymous mapping. */
    void **arena = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    arena[1000] = fill(1111);
    /* 6666 in a shared anonymous mapping. */
    void **shared = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared[7] = fill(6666);
    /* 7777 in one touched page of a 1 GiB reservation. */
    char *reserve = mmap(NULL, 1ul << 30, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ((void **)(reserve + (512ul << 20)))[3] = fill(7777);
    /* 2222: overwritten. */
    sink = fill(2222);
    sink = NULL;
    /* 3333: only in a freed main-arena block (beyond the words free lists reuse). */
    void *volatile *small = malloc(5000);
    small[64] = fill(3333);
    free((void *)small);
    /* 4444: only in a freed mmapped chunk. */
    void *volatile *big = malloc(300000);
    big[1000] = fill(4444);
    free((void *)big);
    /* 5555: only in a freed block of a thread's own arena. */
    pthread_t t;
    pthread_create(&t, NULL, arena_worker, NULL);
    pthread_join(t, NULL);
    /* Eight threads started and joined, one after the other. */
    for (int i = 0; i < 8; i++) {
        pthread_create(&t, NULL, joined_worker, NULL);
        pthread_join(t, NULL);
    }
    sink = NULL;
    printf("mapped %p %p %p\n", (void *)arena, (void *)shared, (void *)reserve);
    snapshot_and_wait(1);
    return 0;
}
