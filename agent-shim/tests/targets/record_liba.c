/* liba.so of the units test (issue 7): func_a0 → func_a1 → func_b0 (libb.so) → malloc. */
#include <stdlib.h>

void *func_b0(size_t n);

__attribute__((noinline)) void *func_a1(size_t n) {
    void *p = func_b0(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

/* deep: through func_a1 and libb; else malloc right here, in liba. */
__attribute__((noinline)) void *func_a0(size_t n, int deep) {
    void *p = deep ? func_a1(n) : malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}
