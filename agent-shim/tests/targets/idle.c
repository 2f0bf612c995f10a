/* An idle multithreaded process: every thread holds a block of its own and blocks in a
 * different call — read (libc), sleep, nanosleep, poll, select and epoll_wait (each wrapped
 * by the agent), a condition variable (futex) — while main waits on stdin. Captures of it
 * must all be the same, and show none of the agent's frames.
 *
 * Dead registers of a thread blocked in a system call are not roots: the reader leaves the
 * address of a lost 3003-byte block in r9 (the last argument of an empty call), which libc's
 * read(2) never touches, and the raw reader makes the read system call itself with the
 * address of a lost 3004-byte block in r8, r9 and r10, which read(2) does not take.
 *
 * Each worker zeroes the stack below it before it blocks (scrub_stack): a libc frame's unused
 * slot would otherwise keep a stale copy of its block's address from the calls that made it.
 *
 * main prints "ready" once every thread is inside its blocking system call (from
 * /proc/self/task/<tid>/syscall), then reads stdin until it closes (the test waits until it
 * is inside that read). */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>

#define KEEP(p) __asm__ volatile("" ::"r"(p) : "memory")

enum { READER, RAW_READER, SLEEPER, NANOSLEEPER, POLLER, SELECTER, EPOLLER, WAITER, WORKERS };
static const long blocking_call[WORKERS] = {
    SYS_read, SYS_read, SYS_clock_nanosleep, SYS_clock_nanosleep, SYS_poll,
    SYS_pselect6, SYS_epoll_wait, SYS_futex,
};
static volatile pid_t tids[WORKERS];
static int gate[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static void *own(int worker, size_t size) {
    tids[worker] = (pid_t)syscall(SYS_gettid);
    char *p = malloc(size);
    memset(p, worker, size);
    return p;
}

/* malloc(size), with the stack below the caller zeroed after it: malloc's frames (and the
 * agent's hook) leave copies of the address in slots that the caller's next call reuses
 * without writing them (libc's read(2) leaves two of its frame's words as they were). The
 * address lives only in a callee-saved register of this function meanwhile, which it
 * restores. */
__attribute__((noinline)) static void *alloc_scrubbed(size_t size) {
    void *p = malloc(size);
    scrub_stack();
    return p;
}

__attribute__((noinline)) static void six(long a, long b, long c, long d, void *e, void *f) {
    KEEP(a);
    KEEP(e);
    KEEP(f);
}

__attribute__((noinline)) static void *reader(void *arg) {
    char *mine = own(READER, 7000);
    scrub_stack();
    /* The lost block's address goes to r8 and r9; read(2) overwrites r8, not r9. */
    void *lost = alloc_scrubbed(3003);
    six(0, 0, 0, 0, lost, lost);
    char c;
    if (read(gate[0], &c, 1) < 0) abort();
    KEEP(mine);
    return arg;
}

/* read(2) of one byte from `fd`, with `dead` in the registers it does not take. */
__attribute__((noinline)) static long read_holding(int fd, void *buf, void *dead) {
    long ret;
    register void *r8 __asm__("r8") = dead;
    register void *r9 __asm__("r9") = dead;
    register void *r10 __asm__("r10") = dead;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"((long)SYS_read), "D"(fd), "S"(buf), "d"(1L), "r"(r8), "r"(r9), "r"(r10)
                     : "rcx", "r11", "memory");
    return ret;
}

__attribute__((noinline)) static void *raw_reader(void *arg) {
    char *mine = own(RAW_READER, 8000);
    scrub_stack();
    char c;
    if (read_holding(gate[0], &c, alloc_scrubbed(3004)) < 0) abort();
    KEEP(mine);
    return arg;
}

__attribute__((noinline)) static void *sleeper(void *arg) {
    char *mine = own(SLEEPER, 1001);
    scrub_stack();
    for (;;) {
        sleep(1000);
        KEEP(mine);
    }
    return arg;
}

__attribute__((noinline)) static void *nanosleeper(void *arg) {
    char *mine = own(NANOSLEEPER, 1002);
    scrub_stack();
    struct timespec t = {1000, 0};
    for (;;) {
        nanosleep(&t, NULL);
        KEEP(mine);
    }
    return arg;
}

__attribute__((noinline)) static void *poller(void *arg) {
    char *mine = own(POLLER, 1003);
    scrub_stack();
    struct pollfd p = {.fd = gate[0], .events = POLLPRI};
    poll(&p, 1, -1);
    KEEP(mine);
    return arg;
}

__attribute__((noinline)) static void *selecter(void *arg) {
    char *mine = own(SELECTER, 1004);
    scrub_stack();
    select(0, NULL, NULL, NULL, NULL);
    KEEP(mine);
    return arg;
}

__attribute__((noinline)) static void *epoller(void *arg) {
    char *mine = own(EPOLLER, 1005);
    scrub_stack();
    int ep = epoll_create1(0);
    struct epoll_event ev;
    epoll_wait(ep, &ev, 1, -1);
    KEEP(mine);
    return arg;
}

__attribute__((noinline)) static void *waiter(void *arg) {
    char *mine = own(WAITER, 1006);
    scrub_stack();
    pthread_mutex_lock(&mu);
    for (;;) {
        pthread_cond_wait(&cv, &mu);
        KEEP(mine);
    }
    return arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (pipe(gate) != 0) abort();
    void *(*start[WORKERS])(void *) = {reader,   raw_reader, sleeper, nanosleeper,
                                       poller,   selecter,   epoller, waiter};
    for (int i = 0; i < WORKERS; i++) {
        pthread_t t;
        pthread_create(&t, NULL, start[i], NULL);
    }
    for (int i = 0; i < WORKERS; i++)
        while (!tids[i] || !blocked_in(tids[i], blocking_call[i])) usleep(1000);
    printf("ready\n");
    /* Raw reads (no stdio buffer to allocate after "ready"), again after an EINTR. */
    char line[64];
    while (read(0, line, sizeof line) != 0) {
    }
    return 0;
}
