/* The one difference of scanning that no rule removes: memcheck skips a word with a byte the
 * program never wrote (it tracks which bytes are defined), heaptui cannot tell. A freed
 * 48-byte block held a pointer to `lost` in its third word; the next 48-byte block is the
 * same chunk (glibc's tcache is last in, first out; malloc clears only the second word), and
 * the program writes only its first word. The stale third word keeps `lost` reachable for
 * heaptui; for memcheck it is undefined and `lost` is definitely lost
 * (docs/reference.md §3). */
#include "leak.h"

void **record;

static NOINLINE void build(void) {
    char *lost = malloc(100);
    memset(lost, 1, 100);
    void **old = opaque(malloc(48));
    uintptr_t old_address = (uintptr_t)old;
    memset(old, 0, 48);
    *(void *volatile *)&old[2] = lost;
    free(old);
    record = malloc(48);
    record[0] = 0;
    say_whether_reused(record, old_address);
}

int main(void) {
    RUN_AND_WIPE(build);
    return 0;
}
