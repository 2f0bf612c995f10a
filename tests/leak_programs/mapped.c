/* Pointers kept only in memory the program mapped itself (an anonymous mmap, as language
 * runtimes and custom allocators do): a start pointer keeps its block reachable, an interior
 * one makes its block possibly lost; a block whose pointer lies in a page that was unmapped
 * is definitely lost. */
#include "leak.h"
#include <sys/mman.h>

static NOINLINE void build(void) {
    void **page = mmap(0, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    page[0] = malloc(64);
    page[1000] = (char *)malloc(72) + 24;
    void **gone = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    gone[3] = malloc(88);
    munmap(gone, 4096);
}

int main(void) {
    RUN_AND_WIPE(build);
    return 0;
}
