// A target whose second thread sits inside its own signal handler: the handler allocates a
// block, keeps it in a local and waits there for good; the code it interrupted holds a block
// of its own. Prints "live ADDR SIZE" for both blocks, then "ready", and exits 0 on a line on
// stdin.
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_barrier_t in_handler;

__attribute__((noinline)) static void handler(int sig) {
  char *volatile mine = malloc(3001);
  memset(mine, sig, 3001);
  printf("live %lx %zu\n", (unsigned long)mine, malloc_usable_size(mine));
  pthread_barrier_wait(&in_handler);
  for (;;) pause();
}

__attribute__((noinline)) static void *interrupted(void *arg) {
  char *volatile before = malloc(2001);
  memset(before, 1, 2001);
  printf("live %lx %zu\n", (unsigned long)before, malloc_usable_size(before));
  raise(SIGUSR2);
  return arg;
}

int main(void) {
  setvbuf(stdout, 0, _IOLBF, 0);
  pthread_barrier_init(&in_handler, 0, 2);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigaction(SIGUSR2, &sa, 0);
  pthread_t t;
  pthread_create(&t, 0, interrupted, 0);
  pthread_barrier_wait(&in_handler);
  printf("ready\n");
  char c;
  return read(0, &c, 1) == 1 ? 0 : 1;
}
