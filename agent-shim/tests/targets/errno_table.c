/* Every function the agent interposes, called on its success and failure paths, one row per
 * call: "name ret=R errno=E". errno is set to SENTINEL before each call, so a row shows
 * whether the call changed it. Return values that differ from run to run (pointers, pids)
 * are printed as classes ("ptr", "null", "pid"). The test runs this bare and under the
 * agent and compares the output byte for byte (tests/hooks_errno.rs).
 *
 * Modes (argv[1]):
 *   table       the table of calls
 *   contention  threads sharing one malloc arena (one shard of the agent's table, so its lock
 *               is contended and its futex waits end in EAGAIN), interrupted by a signal
 *               without SA_RESTART (so they also end in EINTR); every call's errno checked
 *   emfile      no descriptor left: the agent's /proc/self/maps read for a thread's stack
 *               bounds fails (a new thread, a signal handler on an alternate stack), also
 *               in the unwinding done before realloc reaches libc
 *   enomem      no address space left: the agent's table cannot grow (its mmap fails) while
 *               libc still serves blocks from memory it already has
 *
 * Output uses write(2) only (stdio would allocate on first use, at a different moment in
 * each run). Built with -fno-builtin so every call reaches the library. */
#define _GNU_SOURCE
#include <aio.h>
#include <dlfcn.h>
#include <errno.h>
#include <semaphore.h>
#include <threads.h>
#include <sys/uio.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* Still in libc, no longer declared by its headers. */
extern sighandler_t bsd_signal(int sig, sighandler_t handler);
/* The fortified calls, called by name (what read, recv and recvfrom compile to under
 * _FORTIFY_SOURCE). */
extern ssize_t __read_chk(int fd, void *buf, size_t count, size_t size);
extern ssize_t __recv_chk(int fd, void *buf, size_t len, size_t size, int flags);
extern ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t size, int flags,
                              struct sockaddr *addr, socklen_t *addr_len);

#define SENTINEL 4242 /* no errno value has this number */

static void say(const char *s) { write(1, s, strlen(s)); }

static void row(const char *name, const char *ret, int err) {
    char line[256];
    if (err == SENTINEL)
        snprintf(line, sizeof line, "%s ret=%s errno=kept\n", name, ret);
    else
        snprintf(line, sizeof line, "%s ret=%s errno=%d\n", name, ret, err);
    say(line);
}

static void row_long(const char *name, long ret, int err) {
    char r[32];
    snprintf(r, sizeof r, "%ld", ret);
    row(name, r, err);
}

static void row_ptr(const char *name, const void *p, int err) { row(name, p ? "ptr" : "null", err); }

/* A call returning an integer / a pointer, with errno set to SENTINEL first. */
#define INT(name, expr)                                                                    \
    do {                                                                                   \
        errno = SENTINEL;                                                                  \
        long r_ = (long)(expr);                                                            \
        row_long(name, r_, errno);                                                         \
    } while (0)
#define PTR(name, var, expr)                                                               \
    do {                                                                                   \
        errno = SENTINEL;                                                                  \
        var = (expr);                                                                      \
        row_ptr(name, var, errno);                                                         \
    } while (0)

static volatile size_t huge = SIZE_MAX / 2;
static volatile size_t too_aligned = SIZE_MAX / 2 + 1;

static void memory(void) {
    void *p, *q, *r;
    PTR("malloc", p, malloc(32));
    PTR("malloc_0", q, malloc(0));
    free(q);
    PTR("malloc_huge", q, malloc(huge));
    PTR("calloc", q, calloc(8, 8));
    free(q);
    PTR("calloc_overflow", q, calloc(huge, 4));
    PTR("realloc_null", q, realloc(NULL, 64));
    PTR("realloc_grow", q, realloc(q, 100000));
    PTR("realloc_shrink", q, realloc(q, 16));
    PTR("realloc_huge", r, realloc(q, huge));
    PTR("realloc_zero", r, realloc(q, 0));
    PTR("reallocarray", q, reallocarray(NULL, 4, 8));
    PTR("reallocarray_overflow", r, reallocarray(q, huge, 4));
    PTR("reallocarray_grow", q, reallocarray(q, 100, 8));
    errno = SENTINEL;
    free(NULL);
    row("free_null", "void", errno);
    errno = SENTINEL;
    free(q);
    row("free", "void", errno);
    /* Enough frees to apply held-back batches, and big blocks that libc unmaps. */
    int changed = 0;
    for (int i = 0; i < 64; i++) {
        void *b = malloc(i % 8 == 0 ? (1 << 20) : 48);
        errno = SENTINEL;
        free(b);
        changed += errno != SENTINEL;
    }
    row_long("free_64", changed, SENTINEL);
    free(p);

    void *m = (void *)1;
    INT("posix_memalign", posix_memalign(&m, 64, 100));
    free(m);
    INT("posix_memalign_3", posix_memalign(&m, 3, 8));
    INT("posix_memalign_0", posix_memalign(&m, 0, 8));
    INT("posix_memalign_4", posix_memalign(&m, 4, 8));
    INT("posix_memalign_24", posix_memalign(&m, 24, 8));
    INT("posix_memalign_too_aligned", posix_memalign(&m, too_aligned, 8));
    INT("posix_memalign_huge", posix_memalign(&m, 64, huge));
    PTR("aligned_alloc", q, aligned_alloc(64, 128));
    free(q);
    PTR("aligned_alloc_3", q, aligned_alloc(3, 8));
    free(q);
    PTR("aligned_alloc_0", q, aligned_alloc(0, 8));
    free(q);
    PTR("aligned_alloc_24", q, aligned_alloc(24, 48));
    free(q);
    PTR("aligned_alloc_huge", q, aligned_alloc(64, huge));
    PTR("aligned_alloc_too_aligned", q, aligned_alloc(too_aligned, 8));
    PTR("memalign", q, memalign(4096, 10));
    free(q);
    PTR("memalign_3", q, memalign(3, 10));
    free(q);
    PTR("memalign_too_aligned", q, memalign(too_aligned, 8));
    PTR("valloc", q, valloc(10));
    free(q);
    PTR("valloc_huge", q, valloc(huge));
    PTR("pvalloc", q, pvalloc(10));
    free(q);
    PTR("pvalloc_huge", q, pvalloc(SIZE_MAX - 100));
}

static void *report_start_errno(void *arg) {
    (void)arg;
    return (void *)(long)errno;
}

static void *exits_with_42(void *arg) {
    (void)arg;
    pthread_exit((void *)42);
}

static void threads(void) {
    pthread_t t;
    void *ret = NULL;
    INT("pthread_create", pthread_create(&t, NULL, report_start_errno, NULL));
    pthread_join(t, &ret);
    row_long("thread_start_errno", (long)ret, SENTINEL);
    INT("pthread_create_exit", pthread_create(&t, NULL, exits_with_42, NULL));
    INT("pthread_join", pthread_join(t, &ret));
    row_long("pthread_exit_value", (long)ret, SENTINEL);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)1 << 46);
    INT("pthread_create_huge_stack", pthread_create(&t, &attr, report_start_errno, NULL));
    pthread_attr_destroy(&attr);
}

static volatile sig_atomic_t handled;
static void on_signal(int sig) {
    (void)sig;
    int saved = errno;
    /* What a handler may do on top of a hooked call: allocate (the hooks re-enter). */
    free(malloc(40));
    handled++;
    errno = saved;
}

static void signals(void) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);
    INT("sigaction", sigaction(SIGUSR1, &sa, &old));
    INT("sigaction_read", sigaction(SIGUSR1, NULL, &old));
    row_long("sigaction_read_back", old.sa_handler == on_signal, SENTINEL);
    INT("sigaction_0", sigaction(0, &sa, NULL));
    INT("sigaction_32", sigaction(32, &sa, NULL));
    INT("sigaction_33", sigaction(33, &sa, NULL));
    INT("sigaction_kill", sigaction(SIGKILL, &sa, NULL));
    INT("sigaction_65", sigaction(65, &sa, NULL));
    INT("sigaction_usr2", sigaction(SIGUSR2, &sa, NULL));
    INT("sigaction_usr2_read", sigaction(SIGUSR2, NULL, &old));
    row_long("sigaction_usr2_read_back", old.sa_handler == on_signal, SENTINEL);
    /* The agent's stop signal number: the program's setting is kept and read back. */
    INT("sigaction_rtmin4", sigaction(SIGRTMIN + 4, &sa, NULL));
    INT("sigaction_rtmin4_read", sigaction(SIGRTMIN + 4, NULL, &old));
    row_long("sigaction_rtmin4_read_back", old.sa_handler == on_signal, SENTINEL);

    sighandler_t h;
    errno = SENTINEL;
    h = signal(SIGUSR1, SIG_IGN);
    row_long("signal", h == on_signal, errno);
    errno = SENTINEL;
    h = signal(SIGUSR1, SIG_DFL);
    row_long("signal_again", h == SIG_IGN, errno);
    errno = SENTINEL;
    h = signal(0, SIG_IGN);
    row_long("signal_0", h == SIG_ERR, errno);
    errno = SENTINEL;
    h = signal(SIGKILL, SIG_IGN);
    row_long("signal_kill", h == SIG_ERR, errno);
    errno = SENTINEL;
    h = signal(SIGRTMIN + 4, SIG_DFL);
    row_long("signal_rtmin4", h == on_signal, errno);
    errno = SENTINEL;
    h = signal(SIGUSR2, SIG_DFL);
    row_long("signal_usr2", h == on_signal, errno);
    errno = SENTINEL;
    h = bsd_signal(SIGUSR1, SIG_IGN);
    row_long("bsd_signal", h == SIG_DFL, errno);
    errno = SENTINEL;
    h = sysv_signal(SIGUSR1, SIG_DFL);
    row_long("sysv_signal", h == SIG_IGN, errno);
    errno = SENTINEL;
    h = sysv_signal(0, SIG_DFL);
    row_long("sysv_signal_0", h == SIG_ERR, errno);

    sigset_t set, prev, full;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigfillset(&full);
    INT("sigprocmask_block", sigprocmask(SIG_BLOCK, &set, &prev));
    INT("sigprocmask_bad_how", sigprocmask(99, &set, NULL));
    INT("sigprocmask_bad_how_no_set", sigprocmask(99, NULL, &prev));
    INT("sigprocmask_setmask_full", sigprocmask(SIG_SETMASK, &full, &prev));
    INT("sigprocmask_setmask_back", sigprocmask(SIG_SETMASK, &prev, NULL));
    INT("sigprocmask_unblock", sigprocmask(SIG_UNBLOCK, &set, NULL));
    INT("pthread_sigmask_block", pthread_sigmask(SIG_BLOCK, &set, &prev));
    INT("pthread_sigmask_bad_how", pthread_sigmask(99, &set, NULL));
    INT("pthread_sigmask_setmask_full", pthread_sigmask(SIG_SETMASK, &full, &prev));
    INT("pthread_sigmask_back", pthread_sigmask(SIG_SETMASK, &prev, NULL));
    INT("pthread_sigmask_unblock", pthread_sigmask(SIG_UNBLOCK, &set, NULL));
}

/* Sends SIGUSR1 to the main thread every 2 ms until told to stop: a wait that the signal
 * must interrupt (pause) cannot miss it. */
static pthread_t main_thread;
static volatile int keep_poking;
static void *poker(void *arg) {
    (void)arg;
    struct timespec ts = {0, 2000000};
    while (keep_poking) {
        pthread_kill(main_thread, SIGUSR1);
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* System V objects outlive the process: removed at the end of the table, and on every other
 * exit path. */
static int sems = -1, queue = -1;
static void remove_ipc(void) {
    if (sems >= 0) semctl(sems, 0, IPC_RMID);
    if (queue >= 0) msgctl(queue, IPC_RMID, NULL);
    sems = queue = -1;
}

static void blocking(void) {
    sems = semget(IPC_PRIVATE, 1, 0600);
    queue = msgget(IPC_PRIVATE, 0600);
    atexit(remove_ipc);
    struct timespec short_ts = {0, 1000}, bad_ts = {0, -1}, over_ts = {0, 2000000000};
    INT("nanosleep", nanosleep(&short_ts, NULL));
    INT("nanosleep_bad", nanosleep(&bad_ts, NULL));
    INT("nanosleep_over", nanosleep(&over_ts, NULL));
    INT("clock_nanosleep", clock_nanosleep(CLOCK_MONOTONIC, 0, &short_ts, NULL));
    INT("clock_nanosleep_bad_clock", clock_nanosleep(999, 0, &short_ts, NULL));
    INT("clock_nanosleep_bad_ts", clock_nanosleep(CLOCK_MONOTONIC, 0, &bad_ts, NULL));
    INT("clock_nanosleep_thread_clock", clock_nanosleep(CLOCK_THREAD_CPUTIME_ID, 0, &short_ts, NULL));
    INT("sleep_0", sleep(0));
    INT("usleep", usleep(10));
    INT("poll_none", poll(NULL, 0, 1));
    struct pollfd *volatile unmapped = (struct pollfd *)8;
    INT("poll_fault", poll(unmapped, 1, 0));
    volatile nfds_t too_many = (nfds_t)-1;
    INT("poll_too_many", poll(NULL, too_many, 0));
    struct pollfd pfd = {.fd = -1, .events = POLLIN};
    INT("poll_negative_fd", poll(&pfd, 1, 0));
    INT("ppoll", ppoll(NULL, 0, &short_ts, NULL));
    INT("ppoll_bad_ts", ppoll(NULL, 0, &bad_ts, NULL));
    struct epoll_event ev;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    INT("epoll_wait", epoll_wait(ep, &ev, 1, 1));
    INT("epoll_wait_bad_fd", epoll_wait(-1, &ev, 1, 0));
    INT("epoll_wait_zero_max", epoll_wait(ep, &ev, 0, 0));
    sigset_t none;
    sigemptyset(&none);
    INT("epoll_pwait", epoll_pwait(ep, &ev, 1, 1, &none));
    INT("epoll_pwait_bad_fd", epoll_pwait(-1, &ev, 1, 0, &none));
    INT("epoll_pwait2", epoll_pwait2(ep, &ev, 1, &short_ts, &none));
    INT("epoll_pwait2_bad_ts", epoll_pwait2(ep, &ev, 1, &bad_ts, NULL));
    INT("epoll_pwait2_bad_fd", epoll_pwait2(-1, &ev, 1, NULL, NULL));
    close(ep);
    struct timeval tv = {0, 1000}, bad_tv = {0, -1};
    INT("select", select(0, NULL, NULL, NULL, &tv));
    INT("select_negative", select(-1, NULL, NULL, NULL, &tv));
    INT("select_bad_tv", select(0, NULL, NULL, NULL, &bad_tv));
    INT("pselect", pselect(0, NULL, NULL, NULL, &short_ts, NULL));
    INT("pselect_negative", pselect(-1, NULL, NULL, NULL, &short_ts, NULL));
    /* System V: a semaphore at 0 and an empty queue, removed at the end of the table. */
    struct sembuf take = {0, -1, 0}, give = {0, 1, 0}, try_take = {0, -1, IPC_NOWAIT};
    INT("semop_bad_id", semop(-1, &give, 1));
    INT("semop_give", semop(sems, &give, 1));
    INT("semop_take", semop(sems, &take, 1));
    INT("semop_would_block", semop(sems, &try_take, 1));
    INT("semtimedop_timeout", semtimedop(sems, &take, 1, &short_ts));
    INT("semtimedop_bad_ts", semtimedop(sems, &take, 1, &bad_ts));
    struct { long kind; char text[8]; } msg = {1, "abc"};
    INT("msgsnd", msgsnd(queue, &msg, 3, IPC_NOWAIT));
    INT("msgsnd_bad_kind", msgsnd(queue, &(struct { long kind; char c; }){0, 'x'}, 1, 0));
    INT("msgrcv", msgrcv(queue, &msg, sizeof msg.text, 0, 0));
    INT("msgrcv_empty", msgrcv(queue, &msg, sizeof msg.text, 0, IPC_NOWAIT));
    INT("msgrcv_bad_id", msgrcv(-1, &msg, sizeof msg.text, 0, 0));
    /* Sockets, a receive and a send timeout on one end of a pair (signals::sockets). */
    int sp[2], not_socket[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) != 0 || pipe(not_socket) != 0) exit(1);
    struct timeval short_tv = {0, 10000}, long_tv = {10, 0};
    setsockopt(sp[0], SOL_SOCKET, SO_RCVTIMEO, &short_tv, sizeof short_tv);
    setsockopt(sp[0], SOL_SOCKET, SO_SNDTIMEO, &short_tv, sizeof short_tv);
    char byte = 'x';
    struct iovec iov = {&byte, 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    struct sockaddr_un nobody = {.sun_family = AF_UNIX, .sun_path = "\0heaptui-nobody-listens"};
    INT("send", send(sp[1], &byte, 1, 0));
    INT("recv", recv(sp[0], &byte, 1, 0));
    INT("recv_timeout", recv(sp[0], &byte, 1, 0));
    INT("recv_bad_fd", recv(-1, &byte, 1, 0));
    INT("sendto", sendto(sp[1], &byte, 1, 0, NULL, 0));
    INT("recvfrom", recvfrom(sp[0], &byte, 1, 0, NULL, NULL));
    INT("recvfrom_not_socket", recvfrom(not_socket[0], &byte, 1, 0, NULL, NULL));
    INT("sendmsg", sendmsg(sp[1], &mh, 0));
    INT("recvmsg", recvmsg(sp[0], &mh, 0));
    INT("recvmsg_timeout", recvmsg(sp[0], &mh, 0));
    INT("sendmsg_bad_fd", sendmsg(-1, &mh, 0));
    INT("accept_not_listening", accept(sp[0], NULL, NULL));
    INT("accept4_bad_flags", accept4(sp[0], NULL, NULL, -1));
    int lone = socket(AF_UNIX, SOCK_STREAM, 0);
    INT("connect_refused", connect(lone, (struct sockaddr *)&nobody,
                                   offsetof(struct sockaddr_un, sun_path) + 23));
    close(lone);
    /* read and write, on the pair and elsewhere (signals::read_write). */
    INT("write", write(sp[1], &byte, 1));
    INT("read", read(sp[0], &byte, 1));
    INT("read_timeout", read(sp[0], &byte, 1));
    INT("read_bad_fd", read(-1, &byte, 1));
    INT("write_bad_fd", write(-1, &byte, 1));
    INT("writev", writev(sp[1], &iov, 1));
    INT("readv", readv(sp[0], &iov, 1));
    INT("readv_timeout", readv(sp[0], &iov, 1));
    INT("writev_bad_count", writev(sp[1], &iov, -1));
    INT("read_chk_timeout", __read_chk(sp[0], &byte, 1, 1));
    INT("read_chk_pipe_empty", (fcntl(not_socket[0], F_SETFL, O_NONBLOCK),
                                __read_chk(not_socket[0], &byte, 1, 1)));
    INT("recv_chk", (send(sp[1], &byte, 1, 0), __recv_chk(sp[0], &byte, 1, 1, 0)));
    INT("recv_chk_timeout", __recv_chk(sp[0], &byte, 1, 1, 0));
    INT("recvfrom_chk_timeout", __recvfrom_chk(sp[0], &byte, 1, 1, 0, NULL, NULL));
    INT("recvfrom_chk_bad_fd", __recvfrom_chk(-1, &byte, 1, 1, 0, NULL, NULL));
    struct mmsghdr mm = {.msg_hdr = mh};
    INT("sendmmsg", sendmmsg(sp[1], &mm, 1, 0));
    INT("recvmmsg", recvmmsg(sp[0], &mm, 1, 0, NULL));
    INT("recvmmsg_timeout", recvmmsg(sp[0], &mm, 1, 0, NULL));
    INT("sendmmsg_bad_fd", sendmmsg(-1, &mm, 1, 0));
    INT("recvmmsg_not_socket", recvmmsg(not_socket[0], &mm, 1, 0, NULL));
    /* Timed waits whose EINTR glibc hands back (signals::blocking). */
    sem_t sem;
    sem_init(&sem, 0, 1);
    struct timespec past = {0, 0};
    INT("sem_timedwait", sem_timedwait(&sem, &past));
    INT("sem_timedwait_timeout", sem_timedwait(&sem, &past));
    INT("sem_timedwait_bad_ts", sem_timedwait(&sem, &bad_ts));
    INT("sem_clockwait_timeout", sem_clockwait(&sem, CLOCK_MONOTONIC, &past));
    INT("sem_clockwait_bad_clock", sem_clockwait(&sem, 999, &past));
    INT("thrd_sleep", thrd_sleep(&short_ts, NULL));
    INT("thrd_sleep_bad_ts", thrd_sleep(&bad_ts, NULL));
    const struct aiocb *no_requests[1] = {NULL};
    INT("aio_suspend_nothing", aio_suspend(no_requests, 1, &short_ts));
    INT("aio_suspend_bad_count", aio_suspend(no_requests, -1, &short_ts));
    /* aio_suspend under the name _FILE_OFFSET_BITS=64 gives it (declared by aio.h). */
    const struct aiocb64 *no_requests64[1] = {NULL};
    INT("aio_suspend64_nothing", aio_suspend64(no_requests64, 1, &short_ts));
    /* Calls by number through syscall(3) (signals::raw_syscall). */
    INT("syscall_close_bad_fd", syscall(SYS_close, -1));
    INT("syscall_nanosleep", syscall(SYS_nanosleep, &short_ts, NULL));
    INT("syscall_nanosleep_bad_ts", syscall(SYS_nanosleep, &bad_ts, NULL));
    INT("syscall_io_getevents_bad_ctx", syscall(SYS_io_getevents, 0, 1, 1, NULL, &short_ts));
    INT("syscall_recvfrom_timeout", syscall(SYS_recvfrom, sp[0], &byte, 1, 0, NULL, NULL));
    INT("syscall_getppid_kept", syscall(SYS_getppid) > 0);

    /* Waits the program's own signal ends: EINTR, whatever the agent did meanwhile. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    main_thread = pthread_self();
    keep_poking = 1;
    pthread_t t;
    pthread_create(&t, NULL, poker, NULL);
    INT("pause", pause());
    sigset_t usr1, prev;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    INT("sigsuspend", sigsuspend(&none));
    struct timespec long_ts = {10, 0};
    INT("nanosleep_interrupted", nanosleep(&long_ts, NULL));
    INT("poll_interrupted", poll(NULL, 0, 10000));
    INT("semop_interrupted", semop(sems, &take, 1));
    INT("semtimedop_interrupted", semtimedop(sems, &take, 1, &long_ts));
    INT("msgrcv_interrupted", msgrcv(queue, &msg, sizeof msg.text, 0, 0));
    setsockopt(sp[0], SOL_SOCKET, SO_RCVTIMEO, &long_tv, sizeof long_tv);
    INT("recv_interrupted", recv(sp[0], &byte, 1, 0));
    INT("read_interrupted", read(sp[0], &byte, 1));
    struct timespec far;
    clock_gettime(CLOCK_REALTIME, &far);
    far.tv_sec += 10;
    INT("sem_timedwait_interrupted", sem_timedwait(&sem, &far));
    INT("syscall_recvfrom_interrupted", syscall(SYS_recvfrom, sp[0], &byte, 1, 0, NULL, NULL));
    INT("syscall_nanosleep_interrupted", syscall(SYS_nanosleep, &long_ts, NULL));
    keep_poking = 0;
    pthread_join(t, NULL);

    /* Signals waited for rather than handled. */
    sigprocmask(SIG_BLOCK, &usr1, &prev);
    siginfo_t info;
    raise(SIGUSR1);
    INT("sigwaitinfo", sigwaitinfo(&usr1, &info));
    INT("sigtimedwait_timeout", sigtimedwait(&usr1, &info, &short_ts));
    INT("sigtimedwait_bad_ts", sigtimedwait(&usr1, &info, &bad_ts));
    raise(SIGUSR1);
    int sig = 0;
    INT("sigwait", sigwait(&usr1, &sig));
    row_long("sigwait_signal", sig, SENTINEL);
    /* A signal sent to the process, not a thread: the kernel hands it to a thread that does
     * not block it, and the program has none (the agent's threads must not be such either). */
    pid_t sender = fork();
    if (sender == 0) {
        kill(getppid(), SIGUSR1);
        _exit(0);
    }
    /* Sent while every thread blocks it (a thread in sigtimedwait would not). */
    waitpid(sender, NULL, 0);
    struct timespec patience = {5, 0};
    INT("sigtimedwait_process_signal", sigtimedwait(&usr1, &info, &patience));
    sigprocmask(SIG_SETMASK, &prev, NULL);
    remove_ipc();
}

static void processes(char **envp) {
    errno = SENTINEL;
    pid_t pid = fork();
    if (pid == 0) _exit(errno == SENTINEL ? 0 : 1);
    row("fork", pid > 0 ? "pid" : "fail", errno);
    int status = -1;
    waitpid(pid, &status, 0);
    row_long("fork_child_errno_kept", WIFEXITED(status) && WEXITSTATUS(status) == 0, SENTINEL);
    errno = SENTINEL;
    pid = vfork();
    if (pid == 0) _exit(errno == SENTINEL ? 0 : 1);
    row("vfork", pid > 0 ? "pid" : "fail", errno);
    waitpid(pid, &status, 0);
    row_long("vfork_child_errno_kept", WIFEXITED(status) && WEXITSTATUS(status) == 0, SENTINEL);
    char *argv[] = {"x", NULL};
    INT("execve_missing", execve("/nonexistent/heaptui-x", argv, envp));
    INT("execvp_missing", execvp("heaptui-no-such-program", argv));
    INT("execv_not_executable", execv("/etc/passwd", argv));
    pid = fork();
    if (pid == 0) {
        char *true_argv[] = {"true", NULL};
        execvp("true", true_argv);
        _exit(127);
    }
    waitpid(pid, &status, 0);
    row_long("exec_true_status", WIFEXITED(status) ? WEXITSTATUS(status) : -1, SENTINEL);
    INT("waitpid_no_child", waitpid(-1, NULL, WNOHANG));
}

static void dl(void) {
    void *h, *none;
    PTR("dlopen", h, dlopen("libm.so.6", RTLD_NOW));
    PTR("dlopen_missing", none, dlopen("/nonexistent/libheaptui-x.so", RTLD_NOW));
    INT("dlclose", dlclose(h));
    errno = SENTINEL;
    char *e = dlerror();
    row_long("dlerror_after_dlclose", e != NULL, errno);
    PTR("dlopen_missing_again", none, dlopen("/nonexistent/libheaptui-x.so", RTLD_NOW));
    errno = SENTINEL;
    e = dlerror();
    row_long("dlerror_after_failed_dlopen", e != NULL, errno);
}

static void at_exit_errno(void) {
    row("atexit_handler", "void", errno);
}

static int table(char **envp) {
    memory();
    threads();
    signals();
    blocking();
    processes(envp);
    dl();
    atexit(at_exit_errno);
    errno = SENTINEL;
    return 0;
}

/* ---- contention ---- */

#define WORKERS 4
static volatile int stop_workers;
static long changes[WORKERS];

static void nothing(int sig) { (void)sig; }

static void *churn(void *arg) {
    long id = (long)arg, changed = 0;
    unsigned seed = (unsigned)id * 7919u + 1;
    void *held[64] = {0};
    for (int i = 0; i < 200000; i++) {
        int k = (int)(rand_r(&seed) % 64);
        errno = SENTINEL;
        if (held[k]) {
            if (i % 3 == 0) {
                void *q = realloc(held[k], 16 + rand_r(&seed) % 512);
                changed += errno != SENTINEL;
                if (q) held[k] = q;
            } else {
                free(held[k]);
                changed += errno != SENTINEL;
                held[k] = NULL;
            }
        } else {
            held[k] = malloc(16 + rand_r(&seed) % 512);
            changed += errno != SENTINEL;
        }
    }
    for (int k = 0; k < 64; k++) free(held[k]);
    changes[id] = changed;
    return NULL;
}

static int contention(void) {
    /* One arena for every thread: their blocks share one region, one shard of the agent's
     * table, one lock. */
    mallopt(M_ARENA_MAX, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = nothing; /* no SA_RESTART: an interrupted futex wait ends in EINTR */
    sigaction(SIGUSR1, &sa, NULL);
    pthread_t t[WORKERS];
    for (long i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, churn, (void *)i);
    /* Poke the workers while they run (signals to a finished thread are harmless). */
    struct timespec ts = {0, 100000};
    for (int round = 0; round < 2000; round++) {
        for (int i = 0; i < WORKERS; i++) pthread_kill(t[i], SIGUSR1);
        nanosleep(&ts, NULL);
    }
    long total = 0;
    for (int i = 0; i < WORKERS; i++) {
        pthread_join(t[i], NULL);
        total += changes[i];
    }
    row_long("contention_errno_changes", total, SENTINEL);
    return 0;
}

/* ---- emfile ---- */

static long emfile_changes;

static void *first_calls(void *arg) {
    (void)arg;
    /* This thread's first hooked calls: the agent looks its stack up in /proc/self/maps. */
    errno = SENTINEL;
    void *p = malloc(100);
    emfile_changes += errno != SENTINEL;
    errno = SENTINEL;
    p = realloc(p, 5000);
    emfile_changes += errno != SENTINEL;
    errno = SENTINEL;
    free(p);
    emfile_changes += errno != SENTINEL;
    return NULL;
}

static void on_alt_stack(int sig) {
    (void)sig;
    /* A stack the agent has not seen: it looks it up again. */
    int saved = errno;
    errno = SENTINEL;
    void *p = malloc(64);
    emfile_changes += errno != SENTINEL;
    errno = SENTINEL;
    free(p);
    emfile_changes += errno != SENTINEL;
    errno = saved;
}

static int emfile(void) {
    stack_t alt = {.ss_sp = malloc(1 << 16), .ss_size = 1 << 16};
    sigaltstack(&alt, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alt_stack;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    struct rlimit lim = {64, 64};
    setrlimit(RLIMIT_NOFILE, &lim);
    int first = -1, last = -1;
    for (;;) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) break;
        if (first < 0) first = fd;
        last = fd;
    }
    int open_errno = errno;
    pthread_t t;
    int rc = pthread_create(&t, NULL, first_calls, NULL);
    if (rc == 0) pthread_join(t, NULL);
    raise(SIGUSR1);
    for (int fd = first; fd >= 0 && fd <= last; fd++) close(fd);
    row_long("emfile_open", -1, open_errno);
    row_long("emfile_thread", rc, SENTINEL);
    row_long("emfile_errno_changes", emfile_changes, SENTINEL);
    return 0;
}

/* ---- enomem ---- */

static long vm_size_kib(void) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    long n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    char *at = strstr(buf, "VmSize:");
    return at ? strtol(at + 7, NULL, 10) : -1;
}

static int enomem(void) {
    /* libc keeps a 16 MiB top chunk (never trimmed, never mmapped) and serves the small
     * blocks below from it, with no system call. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 0);
    free(malloc(16 << 20));
    /* Frees that the agent holds back are applied by the batch they end (the 16 MiB block
     * goes back to libc's top chunk before the limit is set). */
    for (int i = 0; i < 32; i++) free(malloc(32));
    struct rlimit lim;
    getrlimit(RLIMIT_AS, &lim);
    lim.rlim_cur = (rlim_t)(vm_size_kib() + 256) * 1024;
    setrlimit(RLIMIT_AS, &lim);
    static void *blocks[200000];
    long failed = 0, changed = 0;
    for (int i = 0; i < 200000; i++) {
        errno = SENTINEL;
        blocks[i] = malloc(32);
        failed += blocks[i] == NULL;
        changed += errno != SENTINEL;
    }
    for (int i = 0; i < 200000; i++) {
        errno = SENTINEL;
        free(blocks[i]);
        changed += errno != SENTINEL;
    }
    row_long("enomem_failed_mallocs", failed, SENTINEL);
    row_long("enomem_errno_changes", changed, SENTINEL);
    return 0;
}

int main(int argc, char **argv, char **envp) {
    const char *mode = argc > 1 ? argv[1] : "table";
    if (!strcmp(mode, "table")) return table(envp);
    if (!strcmp(mode, "contention")) return contention();
    if (!strcmp(mode, "emfile")) return emfile();
    if (!strcmp(mode, "enomem")) return enomem();
    say("unknown mode\n");
    return 2;
}
