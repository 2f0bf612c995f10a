/* The units test's program (issue 7): the allocations of the vector through
 * main → func_0 (exe) → func_a0 (liba.so) [→ func_a1 (liba.so) → func_b0 (libb.so)] → malloc,
 * a free and a realloc from libb, free(NULL), and a free and a realloc of blocks the agent
 * never saw (from glibc's own entry point). Prints "ready", then waits for stdin to close.
 * With the argument "loop" it allocates and frees forever instead (the crash test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *func_a0(size_t n, int deep);
void free_b(void *p);
void *realloc_b(void *p, size_t n);
extern void *__libc_malloc(size_t);

static void *volatile keep[4];

__attribute__((noinline)) void *func_0(size_t n, int deep) {
    void *p = func_a0(n, deep);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void free_nothing(void) {
    void *volatile nothing = NULL; /* gcc drops a literal free(NULL) */
    free(nothing);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && strcmp(argv[1], "loop") == 0) {
        void *ring[64] = {0};
        for (unsigned long i = 0;; i++) {
            unsigned slot = i % 64;
            free_b(ring[slot]);
            ring[slot] = func_0(16 + i % 200, (int)(i & 1));
            if (i % 7 == 0) ring[slot] = realloc_b(ring[slot], 300);
            /* Paced, so that a loaded test machine's writer keeps up. */
            if (i % 1024 == 0) usleep(100);
        }
    }
    void *first = func_0(100, 0);  /* malloc 100 in liba */
    void *second = func_0(50, 1);  /* malloc 50 in libb */
    free_b(first);                 /* freed from a libb stack */
    keep[0] = realloc_b(second, 80); /* realloc of the second to 80 in libb */
    free_nothing();
    char *unseen = __libc_malloc(40);
    free(unseen);
    keep[1] = realloc(__libc_malloc(40), 4000);
    puts("ready");
    char c;
    while (read(0, &c, 1) > 0) {
    }
    return 0;
}
