/* Built with -O2: holder keeps its only pointer to the block in a callee-saved register
 * across a blocking call; the register is spilled by a callee, and the block must still be
 * attributed to holder's frame. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static void wait_here(void) {
    snapshot_and_wait(1);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static int holder(int k) {
    char *p = malloc(9009);
    p[0] = (char)k;
    p[1] = 2;
    /* p escapes into an empty asm, so the allocation cannot be optimised away. */
    __asm__ volatile("" : : "r"(p) : "memory");
    wait_here();
    int r = p[0] + p[1];
    free(p);
    return r;
}

int main(int argc, char **argv) {
    (void)argv;
    int r = holder(argc);
    printf("r=%d\n", r);
    return 0;
}
