/* A lost ring of three 32-byte blocks entered from a 48-byte block allocated after it (at a
 * higher address, in glibc's heap as in valgrind's). docs/reference.md §3: the entry block
 * is the one definitely lost block, the ring indirectly lost. memcheck walks lost blocks in
 * address order and starts with the ring's lowest member, which stays definitely lost when
 * the entry's walk later stops at the ring: one definitely lost block (32 bytes) more than
 * heaptui, and one indirectly lost block less. */
#include "leak.h"

struct node { struct node *next; char pad[24]; };

static NOINLINE void build(void) {
    struct node *ring[3];
    for (int i = 0; i < 3; i++) ring[i] = calloc(1, sizeof *ring[i]);
    for (int i = 0; i < 3; i++) ring[i]->next = ring[(i + 1) % 3];
    void **entry = calloc(1, 48);
    entry[0] = ring[1];
    opaque(entry);
}

int main(void) {
    RUN_AND_WIPE(build);
    return 0;
}
