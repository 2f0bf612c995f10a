/* Direct leaks, indirect ones behind them, a tree, a lost doubly linked list, lost cycles
 * of one, two and three blocks, realloc'd, calloc'd and aligned blocks. Every block of one
 * lost structure has the same size, so that which member memcheck and heaptui call
 * definitely lost (the lowest address, which differs between their allocators) does not
 * change the bytes. */
#include "leak.h"
#include <stdint.h>

struct node { struct node *next, *prev; char pad[16]; };
struct tree { struct tree *left, *right; long value; };

void *kept_global;

static NOINLINE void direct(void) {
    for (int i = 0; i < 5; i++) opaque(malloc(100 + i));
}

static NOINLINE void chain(void) {
    /* A lost singly linked list of 4: 1 definite, 3 indirect. */
    struct node *head = 0;
    for (int i = 0; i < 4; i++) {
        struct node *n = calloc(1, sizeof *n);
        n->next = head;
        head = n;
    }
    opaque(head);
}

static struct tree *grow(int depth) {
    if (depth == 0) return 0;
    struct tree *t = malloc(sizeof *t);
    t->left = grow(depth - 1);
    t->right = grow(depth - 1);
    t->value = depth;
    return t;
}

static NOINLINE void tree(void) { opaque(grow(5)); } /* 31 nodes */

static NOINLINE void doubly(void) {
    /* A lost doubly linked list of 6: one strongly connected component. */
    struct node *first = 0, *last = 0;
    for (int i = 0; i < 6; i++) {
        struct node *n = calloc(1, sizeof *n);
        n->prev = last;
        if (last) last->next = n; else first = n;
        last = n;
    }
    opaque(first);
}

static NOINLINE void cycles(void) {
    /* A block pointing to itself. */
    struct node *self = calloc(1, sizeof *self);
    self->next = self;
    opaque(self);
    /* A two-cycle and a three-cycle, each alone. */
    struct node *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    a->next = b;
    b->next = a;
    opaque(a);
    struct node *c[3];
    for (int i = 0; i < 3; i++) c[i] = calloc(1, sizeof *c[i]);
    for (int i = 0; i < 3; i++) c[i]->next = c[(i + 1) % 3];
    opaque(c[0]);
}

static NOINLINE void reallocated(void) {
    char *p = malloc(10);
    for (int i = 0; i < 6; i++) p = realloc(p, 64 << i); /* ends at 2048 */
    opaque(p);
    void **q = realloc(0, 48);
    q[0] = malloc(24); /* indirect behind q */
    opaque(q);
}

static NOINLINE void aligned(void) {
    void *p = aligned_alloc(64, 256);
    opaque(p);
    void *m = 0;
    if (posix_memalign(&m, 128, 80) == 0) opaque(m);
    /* A reachable one: the global holds it. */
    kept_global = aligned_alloc(32, 96);
}

int main(void) {
    RUN_AND_WIPE(direct);
    RUN_AND_WIPE(chain);
    RUN_AND_WIPE(tree);
    RUN_AND_WIPE(doubly);
    RUN_AND_WIPE(cycles);
    RUN_AND_WIPE(reallocated);
    RUN_AND_WIPE(aligned);
    return 0;
}
