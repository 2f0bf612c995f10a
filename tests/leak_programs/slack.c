/* A block's slack. malloc gives a block at least the bytes asked for; those past the asked
 * size keep whatever its chunk held before. A block asked for 42 bytes has five whole
 * words; its sixth is two bytes of the program's and six of slack. Here a freed 48-byte
 * block of the same chunk held, in that sixth word, a pointer into a block that is then
 * lost, on a 64 KiB boundary: the program's two zero bytes complete the stale six into
 * that pointer again. Neither tool counts that word (memcheck scans a block's whole words
 * within its asked size: docs/reference.md §3), so the big block is definitely lost for
 * both (perl's shared hash keys are such blocks: 42 bytes for an 8-byte key). */
#include <stdint.h>

#include "leak.h"

char *record;

static NOINLINE void build(void) {
    char *big = malloc(70000);
    memset(big, 1, 70000);
    /* A cursor into big's middle, on a 64 KiB boundary: its low two bytes are zero. */
    char *cursor = (char *)(((uintptr_t)big + 0xffff) & ~(uintptr_t)0xffff);
    char **old = opaque(malloc(48));
    uintptr_t old_address = (uintptr_t)old;
    memset(old, 0, 48);
    *(char *volatile *)&old[5] = cursor;
    free(old);
    /* The same chunk again (glibc's tcache is last in, first out), its sixth word as the
     * freed block left it but for the two bytes written here. */
    record = malloc(42);
    memset(record, 'k', 40);
    record[40] = 0;
    record[41] = 0;
    say_whether_reused(record, old_address);
    opaque(big);
}

int main(void) {
    RUN_AND_WIPE(build);
    return 0;
}
