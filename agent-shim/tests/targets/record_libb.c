/* libb.so of the units test (issue 7): the innermost library. */
#include <stdlib.h>

__attribute__((noinline)) void *func_b0(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) void free_b(void *p) {
    free(p);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void *realloc_b(void *p, size_t n) {
    void *q = realloc(p, n);
    __asm__ volatile("" ::: "memory");
    return q;
}
