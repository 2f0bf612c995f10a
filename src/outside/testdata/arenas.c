#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static pthread_barrier_t bar;
static void report(const char *what, void *p) { printf("%s %lx %zu\n", what, (unsigned long)p, strcmp(what,"live")==0 ? malloc_usable_size(p) : (size_t)0); }
static void *worker(void *arg) {
  long i = (long)arg;
  void *keep[50], *drop[50];
  for (int k = 0; k < 50; k++) { keep[k] = malloc(24 + 16 * k + i); drop[k] = malloc(40 + 8 * k); }
  for (int k = 0; k < 50; k++) free(drop[k]);
  flockfile(stdout);
  for (int k = 0; k < 50; k++) report("live", keep[k]);
  for (int k = 0; k < 50; k++) report("freed", drop[k]);
  funlockfile(stdout);
  pthread_barrier_wait(&bar);
  pause();
  return keep[0];
}
int main(void) {
  setvbuf(stdout, 0, _IOFBF, 1<<20);
  pthread_barrier_init(&bar, 0, 5);
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, (void *)i);
  void *big = malloc(1 << 20), *big2 = malloc(300000);
  void *small[1000];
  for (int k = 0; k < 1000; k++) small[k] = malloc(k % 200 + 1);
  for (int k = 0; k < 1000; k += 3) { free(small[k]); }
  pthread_barrier_wait(&bar);
  flockfile(stdout);
  report("live", big); report("live", big2);
  for (int k = 0; k < 1000; k++) report(k % 3 ? "live" : "freed", small[k]);
  printf("ready\n"); fflush(stdout);
  funlockfile(stdout);
  char c; read(0, &c, 1);
  return 0;
}
