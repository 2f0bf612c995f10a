/* One thread, known shapes: a buffer held by two frames (frame-shared), a 100k-node list
 * held by one frame (frame-proprietary), a block held only by a global (global-only), and
 * leaks (one definitely lost block, and a lost block pointing to another: indirectly lost). */
#include <stdio.h>
#include <stdlib.h>

struct node {
    struct node *next;
    long payload[4];
};

static char *volatile global_only;

__attribute__((noinline)) static void make_leaks(void) {
    char *volatile lost = malloc(5005);
    lost[0] = 1;
    char *volatile *volatile head = malloc(6006);
    head[0] = malloc(7007);
    head[0][0] = 2;
}

__attribute__((noinline)) static long inner(char *volatile shared) {
    struct node *volatile list = 0;
    for (int i = 0; i < 100000; i++) {
        struct node *n = malloc(sizeof *n);
        n->next = list;
        n->payload[0] = i;
        list = n;
    }
    snapshot_and_wait(1);
    long sum = 0;
    for (struct node *n = list; n;) {
        struct node *next = n->next;
        sum += n->payload[0];
        free(n);
        n = next;
    }
    return sum + shared[0];
}

__attribute__((noinline)) static long outer(void) {
    char *volatile shared = malloc(40004);
    shared[0] = 2;
    long r = inner(shared);
    free(shared);
    return r;
}

int main(void) {
    global_only = malloc(8008);
    global_only[0] = 3;
    make_leaks();
    scrub_stack();
    long r = outer();
    printf("sum %ld\n", r);
    return 7;
}
