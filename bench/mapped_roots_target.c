/* Target of bench/mapped_roots.sh: a malloc heap of BLOCKS 256-byte blocks (pointed at from a
 * global array) and, when MAP_MIB > 0, an anonymous private mapping of MAP_MIB MiB of which
 * TOUCH_MIB MiB are written (small integers, no pointers), the rest never touched: the shape
 * of a JIT's or a database's reservation. With a fourth argument `dontfork`, the mapping is
 * marked MADV_DONTFORK, as V8 marks its pages. It exits at once; HEAPTUI_DUMP captures it at
 * exit.
 *
 *   mapped_roots_target BLOCKS MAP_MIB TOUCH_MIB [dontfork]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void **blocks;

int main(int argc, char **argv) {
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "dontfork") == 0)) {
        fprintf(stderr, "usage: %s BLOCKS MAP_MIB TOUCH_MIB [dontfork]\n", argv[0]);
        return 2;
    }
    size_t n = strtoul(argv[1], 0, 10);
    size_t map = strtoul(argv[2], 0, 10) << 20, touch = strtoul(argv[3], 0, 10) << 20;
    blocks = malloc(n * sizeof *blocks);
    for (size_t i = 0; i < n; i++) blocks[i] = calloc(1, 256);
    if (map) {
        uint64_t *m = mmap(0, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        if (argc == 5 && madvise(m, map, MADV_DONTFORK) != 0) {
            perror("madvise");
            return 1;
        }
        for (size_t i = 0; i < touch / sizeof *m; i++) m[i] = i & 0xffff;
    }
    printf("%zu blocks, %zu MiB mapped, %zu MiB touched\n", n, map >> 20, touch >> 20);
    return 0;
}
