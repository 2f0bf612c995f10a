// A target with a large reservation it barely touches: a 1 GiB block (an mmapped chunk) of
// which one page, far inside, holds the only pointer to a small block. Prints "live ADDR SIZE"
// for both blocks, then "ready", and exits 0 on a line on stdin.
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void **big;

int main(void) {
  big = malloc(1UL << 30);
  char *small = malloc(100);
  for (int k = 0; k < 100; k++) small[k] = (char)k;
  big[(512UL << 20) / sizeof *big] = small;
  printf("live %lx %zu\n", (unsigned long)big, malloc_usable_size(big));
  printf("live %lx %zu\n", (unsigned long)small, malloc_usable_size(small));
  small = 0;
  printf("ready\n");
  fflush(stdout);
  char c;
  return read(0, &c, 1) == 1 && big[(512UL << 20) / sizeof *big] ? 0 : 1;
}
