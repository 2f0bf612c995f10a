/* Possibly lost blocks: reachable only through a pointer into their middle. A buffer whose
 * only pointer (a global) points 10 bytes in, and the block that buffer points to at its
 * start (possibly lost too: no path of start pointers reaches it). A block held by a start
 * pointer and an interior one is plainly reachable. A lost block pointed into by another
 * lost block is indirectly lost, whatever the kind of pointer. */
#include "leak.h"

char *middle;
char *both_start, *both_interior;

static NOINLINE void build(void) {
    char *buffer = malloc(100);
    void **behind = malloc(40);
    behind[0] = 0;
    memcpy(buffer + 16, &behind, sizeof behind);
    middle = buffer + 10;
    both_start = malloc(30);
    both_interior = both_start + 5;
    /* Lost: a block holding a pointer into the middle of another. */
    char **lost = malloc(24);
    lost[0] = (char *)malloc(56) + 8;
    opaque(lost);
}

int main(void) {
    RUN_AND_WIPE(build);
    return 0;
}
