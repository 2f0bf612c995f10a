/* A program's own EINTR on a pipe stays the program's when a snapshot's stop lands while the
 * program's handler runs (prepended with sync.h and proc_state.h). A reader thread blocks in
 * read(2) on an empty pipe. stdin commands:
 *   interrupt  SIGALRM to the reader; its handler (installed without SA_RESTART; it blocks
 *              every signal while it runs) says "in handler", waits until a signal is pending (the
 *              test's snapshot: its stop signal, held back by the handler's mask) and returns.
 *              The read then ends with EINTR, and the stop is delivered with the registers of
 *              the read it ended: the agent must not take that EINTR for its own.
 *   result     "read: EINTR" (or what the read gave; "still blocked" after 10 s)
 *   quit */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>

static int pipe_fds[2];
static pid_t reader_tid;
static char result[64] = "still blocked";

static void on_alarm(int sig) {
    (void)sig;
    /* The agent keeps its stop signal out of a handler's sa_mask and out of the masks given
     * to sigprocmask, but a program may block it with the system call itself (as some
     * runtimes do); the mask the handler ran with comes back when it returns. */
    unsigned long all = ~0UL;
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, NULL, sizeof all);
    static const char said[] = "in handler\n";
    if (write(1, said, sizeof said - 1) < 0) _exit(7);
    /* Asked of the kernel itself: the agent's sigpending leaves its stop signal out. */
    for (int k = 0; k < 10000; k++) {
        unsigned long pending = 0;
        syscall(SYS_rt_sigpending, &pending, sizeof pending);
        if (pending) return;
        usleep(1000);
    }
}

static void *reader(void *arg) {
    (void)arg;
    reader_tid = (pid_t)syscall(SYS_gettid);
    char c;
    ssize_t n = read(pipe_fds[0], &c, 1);
    if (n < 0) snprintf(result, sizeof result, "%s", errno == EINTR ? "EINTR" : strerror(errno));
    else snprintf(result, sizeof result, "%zd", n);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigfillset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    if (pipe(pipe_fds) != 0) return 4;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    for (int k = 0; !reader_tid || !blocked_in(reader_tid, SYS_read); k++) {
        if (k == 50000) return 5;
        usleep(200);
    }
    printf("ready\n");
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "interrupt", 9)) {
            pthread_kill(t, SIGALRM);
        } else if (!strncmp(line, "result", 6)) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 10;
            if (pthread_timedjoin_np(t, NULL, &until) != 0) {
                printf("read: still blocked\n");
                _exit(0);
            }
            printf("read: %s\n", result);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        }
    }
    return 0;
}
