// A target for the outside capture's safety tests: threads blocked in the waits a ptrace stop
// can cut short (epoll_wait, sigwaitinfo, semop, a read of an inotify descriptor), a busy
// thread and a sleeping one with every signal blocked, and N idle threads waiting on a
// condition variable, each holding a block of its own. Every wait treats EINTR as fatal, so a
// stop that leaks an EINTR into the program shows in its output.
//
// Usage: threads N. Prints "live ADDR SIZE" per block it holds, then "ready". Commands on
// stdin, each answered by one line: "step" (a checksum of the heap list, and the busy
// thread's progress flag), "wake" (wakes and joins the blocked threads, "woke" + what each saw),
// "quit" (exits 0, or 3 when a wait saw EINTR).
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/sem.h>
#include <time.h>
#include <unistd.h>

static int pipe_fds[2], epoll_fd, inotify_fd, sem_id;
static char watched[256];
static volatile unsigned long busy_rounds;
static volatile int stop_busy;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int quit, idle_ready;
static char results[5][64];

static void block_all_signals(void) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, 0);
}

static void *epoll_waiter(void *arg) {
  struct epoll_event ev;
  int r = epoll_wait(epoll_fd, &ev, 1, -1);
  snprintf(results[0], 64, "epoll %s", r == 1 ? "ok" : strerror(errno));
  return arg;
}

static void *signal_waiter(void *arg) {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGUSR1);
  siginfo_t si;
  int r = sigwaitinfo(&s, &si);
  snprintf(results[1], 64, "sigwait %s", r == SIGUSR1 ? "ok" : strerror(errno));
  return arg;
}

static void *sem_waiter(void *arg) {
  struct sembuf down = {0, -1, 0};
  int r = semop(sem_id, &down, 1);
  snprintf(results[2], 64, "semop %s", r == 0 ? "ok" : strerror(errno));
  return arg;
}

static void *inotify_reader(void *arg) {
  char buf[4096];
  ssize_t r = read(inotify_fd, buf, sizeof buf);
  snprintf(results[3], 64, "inotify %s", r > 0 ? "ok" : strerror(errno));
  return arg;
}

static void *busy(void *arg) {
  block_all_signals();
  char *mine = malloc(777);
  memset(mine, 7, 777);
  while (!stop_busy) busy_rounds++;
  snprintf(results[4], 64, "busy ok");
  free(mine);
  return arg;
}

static void *sleeper(void *arg) {
  block_all_signals();
  char *volatile mine = malloc(555);
  while (!stop_busy) {
    struct timespec t = {0, 1000000};
    if (nanosleep(&t, 0) != 0 && errno == EINTR) { /* restarted by the kernel, never seen */ }
  }
  free(mine);
  return arg;
}

static void *idle(void *arg) {
  long i = (long)arg;
  char *volatile mine = malloc(64 + i);
  memset(mine, 1, 64 + i);
  pthread_mutex_lock(&mu);
  printf("live %lx %zu\n", (unsigned long)mine, malloc_usable_size(mine));
  idle_ready++;
  pthread_cond_broadcast(&cv);
  while (!quit) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  free(mine);
  return arg;
}

struct node {
  struct node *next;
  long value;
};

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 8;
  setvbuf(stdout, 0, _IOLBF, 0);
  // SIGUSR1 waits for sigwaitinfo in every thread (blocked before any thread is made).
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &usr1, 0);
  if (pipe(pipe_fds) != 0) return 1;
  epoll_fd = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN};
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, pipe_fds[0], &ev);
  snprintf(watched, sizeof watched, "/tmp/heaptui-threads-%d", getpid());
  FILE *f = fopen(watched, "w");
  if (f) fclose(f);
  inotify_fd = inotify_init();
  inotify_add_watch(inotify_fd, watched, IN_MODIFY);
  sem_id = semget(IPC_PRIVATE, 1, 0600);

  struct node *list = 0;
  for (long k = 0; k < 1000; k++) {
    struct node *x = malloc(sizeof *x);
    x->next = list;
    x->value = k * 7 + 3;
    list = x;
    printf("live %lx %zu\n", (unsigned long)x, malloc_usable_size(x));
  }
  pthread_t waiters[4], spin, nap;
  pthread_create(&waiters[0], 0, epoll_waiter, 0);
  pthread_create(&waiters[1], 0, signal_waiter, 0);
  pthread_create(&waiters[2], 0, sem_waiter, 0);
  pthread_create(&waiters[3], 0, inotify_reader, 0);
  pthread_create(&spin, 0, busy, 0);
  pthread_create(&nap, 0, sleeper, 0);
  pthread_t *idlers = calloc(n, sizeof *idlers);
  for (long i = 0; i < n; i++) pthread_create(&idlers[i], 0, idle, (void *)i);
  pthread_mutex_lock(&mu);
  while (idle_ready < n) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  printf("ready\n");

  char line[64];
  int eintr = 0, woken = 0;
  while (fgets(line, sizeof line, stdin)) {
    if (strncmp(line, "step", 4) == 0) {
      unsigned long sum = 0;
      for (struct node *x = list; x; x = x->next) sum = sum * 31 + x->value;
      unsigned long before = busy_rounds;
      while (busy_rounds == before) {}
      printf("step %lx busy moving\n", sum);
    } else if (strncmp(line, "wake", 4) == 0 && !woken) {
      woken = 1;
      if (write(pipe_fds[1], "x", 1) != 1) return 1;
      pthread_kill(waiters[1], SIGUSR1);
      struct sembuf up = {0, 1, 0};
      semop(sem_id, &up, 1);
      f = fopen(watched, "w");
      if (f) { fputs("x", f); fclose(f); }
      for (int i = 0; i < 4; i++) pthread_join(waiters[i], 0);
      printf("woke %s, %s, %s, %s\n", results[0], results[1], results[2], results[3]);
      for (int i = 0; i < 4; i++) eintr |= strstr(results[i], "ok") == 0;
    } else if (strncmp(line, "quit", 4) == 0) {
      break;
    } else {
      printf("?\n");
    }
  }
  stop_busy = 1;
  pthread_join(spin, 0);
  pthread_join(nap, 0);
  pthread_mutex_lock(&mu);
  quit = 1;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  for (long i = 0; i < n; i++) pthread_join(idlers[i], 0);
  unlink(watched);
  semctl(sem_id, 0, IPC_RMID);
  return eintr ? 3 : 0;
}
