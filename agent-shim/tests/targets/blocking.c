/* Blocking calls under snapshots (prepended with sync.h).
 *
 * One worker thread per blocking function. Phase 1: each blocks for 2 s while the main thread
 * takes three snapshots (every stop signal lands in the calls); each must block the full 2 s
 * and see no EINTR (the waits without a timeout — pause, sigsuspend, sigwaitinfo — are ended
 * after 2.2 s by the program's own WAKE signal, which they must be the first to see; the
 * System V waits without one — semop, msgrcv, msgsnd — by the main thread posting the
 * semaphore, sending the message or making room in the full queue, and must then succeed).
 * Phase 2: each blocks for 6 s; the main thread takes a snapshot, then
 * sends every worker SIGUSR1, whose handler the program installed: each call must end early
 * with EINTR, exactly as without the agent. One line per function:
 * "<name> full=ok intr=eintr".
 *
 * The socket calls wait on sockets with a receive or send timeout (SO_RCVTIMEO/SO_SNDTIMEO of
 * the round's length), which the kernel ends with EINTR after any handler: each must end at
 * its timeout with the call's own timeout error (EAGAIN; EINPROGRESS for a TCP connect). recv*
 * wait on an empty stream socket pair, send* on one whose send buffer is full, accept on a
 * Unix listener nobody connects to, connect on listeners whose backlog (0) one connection
 * already fills. The raw_* calls are made by number through syscall(3); libaio's io_getevents
 * (loaded with dlopen: the target needs no libaio headers) makes its call that way too and
 * returns -errno. raw_ppoll, raw_pselect6 and raw_io_pgetevents install a mask that blocks
 * every signal but SIGUSR1 (the stop signal among them): the agent must take the stop signal
 * out of it, or the threads could not be stopped for the snapshots. */
#include <aio.h>
#include <errno.h>
#include <poll.h>
#include <semaphore.h>
#include <threads.h>
#include <sys/uio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <dlfcn.h>
#include <stddef.h>
#include <linux/aio_abi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

enum { NANOSLEEP, CLOCK_REL, CLOCK_ABS, SLEEP, USLEEP, POLL, PPOLL, EPOLL_WAIT, EPOLL_PWAIT,
       SELECT, PSELECT, PAUSE, SIGSUSPEND, SIGWAITINFO, SIGTIMEDWAIT, EPOLL_PWAIT2, SEMOP,
       SEMTIMEDOP, MSGRCV, MSGSND, RECV, RECVFROM, RECVMSG, SEND, SENDTO, SENDMSG, ACCEPT,
       ACCEPT4, CONNECT_TCP, CONNECT_UNIX, RAW_NANOSLEEP, RAW_PPOLL, RAW_RECVFROM,
       RAW_IO_GETEVENTS, LIBAIO_IO_GETEVENTS, RAW_PSELECT6, RAW_IO_PGETEVENTS, READ_SOCK,
       WRITE_SOCK, READV_SOCK, WRITEV_SOCK, READ_CHK, RECVMMSG, SENDMMSG, RAW_RECVMMSG,
       SEM_TIMEDWAIT, SEM_CLOCKWAIT, AIO_SUSPEND, THRD_SLEEP, RECV_CHK, RECVFROM_CHK, N };
/* The calls on sockets that wait to receive, and those that wait to send. */
static int receives(int i) {
    return i == RECV || i == RECVFROM || i == RECVMSG || i == RAW_RECVFROM || i == READ_SOCK ||
           i == READV_SOCK || i == READ_CHK || i == RECVMMSG || i == RAW_RECVMMSG ||
           i == RECV_CHK || i == RECVFROM_CHK;
}
static int sends(int i) {
    return i == SEND || i == SENDTO || i == SENDMSG || i == WRITE_SOCK || i == WRITEV_SOCK ||
           i == SENDMMSG;
}
static const char *names[N] = {"nanosleep", "clock_nanosleep", "clock_nanosleep_abs", "sleep",
                               "usleep", "poll", "ppoll", "epoll_wait", "epoll_pwait",
                               "select", "pselect", "pause", "sigsuspend", "sigwaitinfo",
                               "sigtimedwait", "epoll_pwait2", "semop", "semtimedop",
                               "msgrcv", "msgsnd", "recv", "recvfrom", "recvmsg", "send",
                               "sendto", "sendmsg", "accept", "accept4", "connect_tcp",
                               "connect_unix", "raw_nanosleep", "raw_ppoll", "raw_recvfrom",
                               "raw_io_getevents", "libaio_io_getevents", "raw_pselect6",
                               "raw_io_pgetevents", "read_socket", "write_socket",
                               "readv_socket", "writev_socket", "read_chk_socket", "recvmmsg",
                               "sendmmsg", "raw_recvmmsg", "sem_timedwait", "sem_clockwait",
                               "aio_suspend", "thrd_sleep", "recv_chk", "recvfrom_chk"};
#define WAKE (SIGRTMIN + 10)
#define NEVER (SIGRTMIN + 11)
static __thread volatile sig_atomic_t woke;
static void on_wake(int sig) { (void)sig; woke = 1; }

static int pipefd[2], epfd;
/* Semaphores 0 (semop) and 1 (semtimedop), both at 0; a queue nothing is sent to but by
 * main (msgrcv); a queue kept full, its room cut to one message of QUEUE_ROOM (msgsnd). */
static int sems, inbox, full_queue;
enum { QUEUE_ROOM = 64 };
struct message { long kind; char text[QUEUE_ROOM]; };

/* System V objects outlive the process: removed on every exit path. */
static void remove_ipc(void) {
    if (sems >= 0) semctl(sems, 0, IPC_RMID);
    if (inbox >= 0) msgctl(inbox, IPC_RMID, NULL);
    if (full_queue >= 0) msgctl(full_queue, IPC_RMID, NULL);
}
/* One socket per socket call (recv* and send*: one end of a stream pair, send*'s with its send
 * buffer filled); the listeners of accept and of the two connects. */
static int sock_of[N], unix_listener, tcp_full_listener, unix_full_listener;
static struct sockaddr_in tcp_full_addr;
static struct sockaddr_un unix_full_addr;
static aio_context_t aio_ctx;
/* A semaphore nobody posts (sem_timedwait, sem_clockwait); a POSIX AIO read of a pipe nothing
 * is written to (aio_suspend). */
static sem_t never_posted;
static int aio_pipe[2];
static struct aiocb aio_pending;
static char aio_byte;
/* The fortified calls, called by name (what the compiler makes of read, recv and recvfrom
 * into a buffer of known size under _FORTIFY_SOURCE). */
extern ssize_t __read_chk(int fd, void *buf, size_t count, size_t size);
extern ssize_t __recv_chk(int fd, void *buf, size_t len, size_t size, int flags);
extern ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t size, int flags,
                              struct sockaddr *addr, socklen_t *addr_len);
static int (*libaio_setup)(int, unsigned long *);
static int (*libaio_getevents)(unsigned long, long, long, struct io_event *, struct timespec *);
static unsigned long libaio_ctx;

/* A Unix socket address in the abstract namespace, unique to this process and `tag`. */
static socklen_t unix_addr(struct sockaddr_un *a, const char *tag) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "heaptui-blocking-%d-%s",
                     (int)getpid(), tag);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static void set_timeout(int fd, int option, int secs) {
    struct timeval tv = {secs, 0};
    if (setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv) != 0) {
        perror("setsockopt");
        exit(4);
    }
}

/* Waits until listener `fd` holds a connection nobody accepted (its backlog is then full). */
static void wait_pending(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) {
        fprintf(stderr, "the backlog's connection never arrived\n");
        exit(4);
    }
}

static void open_sockets(void) {
    for (int i = 0; i < N; i++) {
        if (!receives(i) && !sends(i)) continue;
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) exit(4);
        sock_of[i] = sv[0];
        if (sends(i)) {
            char chunk[4096] = {0};
            while (send(sv[0], chunk, sizeof chunk, MSG_DONTWAIT) > 0) {}
            if (errno != EAGAIN) exit(4);
        }
    }
    struct sockaddr_un a;
    unix_listener = socket(AF_UNIX, SOCK_STREAM, 0);
    if (bind(unix_listener, (struct sockaddr *)&a, unix_addr(&a, "accept")) != 0 ||
        listen(unix_listener, 8) != 0)
        exit(4);
    unix_full_listener = socket(AF_UNIX, SOCK_STREAM, 0);
    socklen_t len = unix_addr(&unix_full_addr, "full");
    if (bind(unix_full_listener, (struct sockaddr *)&unix_full_addr, len) != 0 ||
        listen(unix_full_listener, 0) != 0)
        exit(4);
    int filler = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(filler, (struct sockaddr *)&unix_full_addr, len) != 0) exit(4);
    wait_pending(unix_full_listener);
    tcp_full_listener = socket(AF_INET, SOCK_STREAM, 0);
    tcp_full_addr.sin_family = AF_INET;
    tcp_full_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof tcp_full_addr;
    if (bind(tcp_full_listener, (struct sockaddr *)&tcp_full_addr, len) != 0 ||
        listen(tcp_full_listener, 0) != 0 ||
        getsockname(tcp_full_listener, (struct sockaddr *)&tcp_full_addr, &len) != 0)
        exit(4);
    filler = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(filler, (struct sockaddr *)&tcp_full_addr, sizeof tcp_full_addr) != 0) exit(4);
    wait_pending(tcp_full_listener);
    if (syscall(SYS_io_setup, 4, &aio_ctx) != 0) {
        perror("io_setup");
        exit(4);
    }
    void *aio = dlopen("libaio.so.1", RTLD_NOW);
    if (!aio) {
        fprintf(stderr, "libaio is not installed (libaio.so.1: %s)\n", dlerror());
        exit(7);
    }
    libaio_setup = (int (*)(int, unsigned long *))dlsym(aio, "io_setup");
    libaio_getevents = (int (*)(unsigned long, long, long, struct io_event *,
                                struct timespec *))dlsym(aio, "io_getevents");
    if (!libaio_setup || !libaio_getevents || libaio_setup(4, &libaio_ctx) != 0) exit(4);
}

/* A socket call's result: 0 when it ended at its timeout with `timed_out` in errno, else the
 * errno (-1 when it succeeded). */
static int timed_out(long r, int expected) { return r < 0 ? (errno == expected ? 0 : errno) : -1; }

/* Blocks in socket call `which` for `secs` (the socket's timeout). */
static int block_socket(int which, int secs) {
    char byte = 0;
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    int fd = sock_of[which], e;
    struct mmsghdr mm = {.msg_hdr = msg};
    if (receives(which)) set_timeout(fd, SO_RCVTIMEO, secs);
    if (sends(which)) set_timeout(fd, SO_SNDTIMEO, secs);
    switch (which) {
    case READ_SOCK: return timed_out(read(fd, &byte, 1), EAGAIN);
    case WRITE_SOCK: return timed_out(write(fd, &byte, 1), EAGAIN);
    case READV_SOCK: return timed_out(readv(fd, &iov, 1), EAGAIN);
    case WRITEV_SOCK: return timed_out(writev(fd, &iov, 1), EAGAIN);
    case READ_CHK: return timed_out(__read_chk(fd, &byte, 1, sizeof byte), EAGAIN);
    case RECVMMSG: return timed_out(recvmmsg(fd, &mm, 1, 0, NULL), EAGAIN);
    case SENDMMSG: return timed_out(sendmmsg(fd, &mm, 1, 0), EAGAIN);
    case RAW_RECVMMSG: return timed_out(syscall(SYS_recvmmsg, fd, &mm, 1, 0, NULL), EAGAIN);
    case RECV_CHK: return timed_out(__recv_chk(fd, &byte, 1, 1, 0), EAGAIN);
    case RECVFROM_CHK:
        return timed_out(__recvfrom_chk(fd, &byte, 1, 1, 0, NULL, NULL), EAGAIN);
    case RECV: return timed_out(recv(fd, &byte, 1, 0), EAGAIN);
    case RECVFROM: return timed_out(recvfrom(fd, &byte, 1, 0, NULL, NULL), EAGAIN);
    case RECVMSG: return timed_out(recvmsg(fd, &msg, 0), EAGAIN);
    case RAW_RECVFROM:
        return timed_out(syscall(SYS_recvfrom, fd, &byte, 1, 0, NULL, NULL), EAGAIN);
    case SEND: return timed_out(send(fd, &byte, 1, 0), EAGAIN);
    case SENDTO: return timed_out(sendto(fd, &byte, 1, 0, NULL, 0), EAGAIN);
    case SENDMSG: return timed_out(sendmsg(fd, &msg, 0), EAGAIN);
    case ACCEPT:
    case ACCEPT4:
        set_timeout(unix_listener, SO_RCVTIMEO, secs);
        return timed_out(which == ACCEPT ? accept(unix_listener, NULL, NULL)
                                         : accept4(unix_listener, NULL, NULL, SOCK_CLOEXEC),
                         EAGAIN);
    default: { /* the connects: a fresh socket each round, closed after */
        int tcp = which == CONNECT_TCP;
        fd = socket(tcp ? AF_INET : AF_UNIX, SOCK_STREAM, 0);
        set_timeout(fd, SO_SNDTIMEO, secs);
        long r = tcp ? connect(fd, (struct sockaddr *)&tcp_full_addr, sizeof tcp_full_addr)
                     : connect(fd, (struct sockaddr *)&unix_full_addr,
                               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                                           strlen(unix_full_addr.sun_path + 1)));
        e = timed_out(r, tcp ? EINPROGRESS : EAGAIN);
        close(fd);
        return e;
    }
    }
}

/* Every signal but SIGUSR1, for the raw calls that install a mask. */
static sigset_t all_but_usr1;

static pid_t tids[N];
static atomic_int entered[N];
static pthread_barrier_t phase;
static int full_err[N], intr_err[N];
static double full_s[N], intr_s[N];
static atomic_int usr1_handled;

static void on_usr1(int sig) { (void)sig; usr1_handled++; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Blocks for `secs` with function `which`; returns 0 after a full timeout, else the errno
 * (or -1 when the call reported something else, such as a ready descriptor). */
static int block(int which, int secs) {
    struct timespec ts = {secs, 0}, rem;
    struct pollfd p = {pipefd[0], POLLIN, 0};
    struct epoll_event ev;
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(pipefd[0], &rs);
    struct timeval tv = {secs, 0};
    int r;
    sigset_t set;
    sigemptyset(&set);
    switch (which) {
    case PAUSE:
    case SIGSUSPEND:
        woke = 0;
        r = which == PAUSE ? pause() : sigsuspend(&set);
        return woke ? 0 : errno;
    case SIGWAITINFO:
        sigaddset(&set, WAKE);
        r = sigwaitinfo(&set, NULL);
        return r == WAKE ? 0 : r < 0 ? errno : -1;
    case SIGTIMEDWAIT:
        sigaddset(&set, NEVER);
        r = sigtimedwait(&set, NULL, &ts);
        return r < 0 && errno == EAGAIN ? 0 : r < 0 ? errno : -1;
    case NANOSLEEP:
        return nanosleep(&ts, &rem) == 0 ? 0 : errno;
    case CLOCK_REL:
        return clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &rem);
    case CLOCK_ABS: {
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += secs;
        return clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
    }
    case SLEEP:
        errno = 0;
        sleep(secs);
        return errno == EINTR ? EINTR : 0;
    case USLEEP:
        return usleep(secs * 1000000u) == 0 ? 0 : errno;
    case POLL:
        r = poll(&p, 1, secs * 1000);
        break;
    case PPOLL:
        r = ppoll(&p, 1, &ts, NULL);
        break;
    case EPOLL_WAIT:
        r = epoll_wait(epfd, &ev, 1, secs * 1000);
        break;
    case EPOLL_PWAIT:
        r = epoll_pwait(epfd, &ev, 1, secs * 1000, NULL);
        break;
    case EPOLL_PWAIT2:
        r = epoll_pwait2(epfd, &ev, 1, &ts, NULL);
        break;
    case SEMOP: {
        struct sembuf take = {0, -1, 0};
        return semop(sems, &take, 1) == 0 ? 0 : errno;
    }
    case SEMTIMEDOP: {
        struct sembuf take = {1, -1, 0};
        r = semtimedop(sems, &take, 1, &ts);
        return r < 0 && errno == EAGAIN ? 0 : r < 0 ? errno : -1;
    }
    case MSGRCV: {
        struct message m;
        ssize_t got = msgrcv(inbox, &m, sizeof m.text, 0, 0);
        return got == 5 && memcmp(m.text, "hello", 5) == 0 ? 0 : got < 0 ? errno : -1;
    }
    case MSGSND: {
        struct message m = {1, {0}};
        return msgsnd(full_queue, &m, sizeof m.text, 0) == 0 ? 0 : errno;
    }
    case RAW_NANOSLEEP:
        return syscall(SYS_nanosleep, &ts, &rem) == 0 ? 0 : errno;
    case RAW_PPOLL:
        r = (int)syscall(SYS_ppoll, &p, 1, &ts, &all_but_usr1, 8);
        break;
    case RAW_PSELECT6: {
        struct { const sigset_t *set; size_t size; } mask = {&all_but_usr1, 8};
        r = (int)syscall(SYS_pselect6, pipefd[0] + 1, &rs, NULL, NULL, &ts, &mask);
        break;
    }
    case RAW_IO_PGETEVENTS: {
        struct io_event events[1];
        struct { const sigset_t *set; size_t size; } mask = {&all_but_usr1, 8};
        long got = syscall(SYS_io_pgetevents, aio_ctx, 1, 1, events, &ts, &mask);
        return got == 0 ? 0 : got < 0 ? errno : -1;
    }
    case RAW_IO_GETEVENTS: {
        struct io_event events[1];
        long got = syscall(SYS_io_getevents, aio_ctx, 1, 1, events, &ts);
        return got == 0 ? 0 : got < 0 ? errno : -1;
    }
    case LIBAIO_IO_GETEVENTS: {
        struct io_event events[1];
        int got = libaio_getevents(libaio_ctx, 1, 1, events, &ts);
        return got == 0 ? 0 : got < 0 ? -got : -1;
    }
    case SEM_TIMEDWAIT:
    case SEM_CLOCKWAIT: {
        struct timespec at;
        clock_gettime(which == SEM_TIMEDWAIT ? CLOCK_REALTIME : CLOCK_MONOTONIC, &at);
        at.tv_sec += secs;
        r = which == SEM_TIMEDWAIT ? sem_timedwait(&never_posted, &at)
                                   : sem_clockwait(&never_posted, CLOCK_MONOTONIC, &at);
        return r < 0 && errno == ETIMEDOUT ? 0 : r < 0 ? errno : -1;
    }
    case AIO_SUSPEND: {
        const struct aiocb *list[1] = {&aio_pending};
        r = aio_suspend(list, 1, &ts);
        return r < 0 && errno == EAGAIN ? 0 : r < 0 ? errno : -1;
    }
    case THRD_SLEEP:
        r = thrd_sleep(&ts, &rem);
        return r == 0 ? 0 : r == -1 ? EINTR : -1;
    case SELECT:
        r = select(pipefd[0] + 1, &rs, NULL, NULL, &tv);
        break;
    case PSELECT:
        r = pselect(pipefd[0] + 1, &rs, NULL, NULL, &ts, NULL);
        break;
    default:
        return block_socket(which, secs);
    }
    return r == 0 ? 0 : r < 0 ? errno : -1;
}

static void *worker(void *arg) {
    int which = (int)(long)arg;
    tids[which] = (pid_t)syscall(SYS_gettid);
    /* What sigwaitinfo and sigtimedwait wait for must be blocked. */
    sigset_t waited;
    sigemptyset(&waited);
    sigaddset(&waited, WAKE);
    sigaddset(&waited, NEVER);
    if (which == SIGWAITINFO || which == SIGTIMEDWAIT) pthread_sigmask(SIG_BLOCK, &waited, NULL);
    for (int round = 0; round < 2; round++) {
        pthread_barrier_wait(&phase);
        int secs = round == 0 ? 2 : 6;
        double t0 = now();
        entered[which] = round + 1;
        int e = block(which, secs);
        double took = now() - t0;
        if (round == 0) { full_err[which] = e; full_s[which] = took; }
        else { intr_err[which] = e; intr_s[which] = took; }
    }
    return NULL;
}

/* Waits until every worker is inside its call of round `round` (1 or 2): it said it entered
 * and /proc shows it asleep (nothing else between its word and its call sleeps). */
static void wait_blocked(int round) {
    for (int i = 0; i < N; i++) {
        while (entered[i] != round) usleep(1000);
        for (int k = 0; state_of(tids[i]) != 'S'; k++) {
            if (k == 150000) {
                fprintf(stderr, "%s never blocked\n", names[i]);
                exit(5);
            }
            usleep(200);
        }
    }
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1; /* no SA_RESTART: none of these calls restarts anyway */
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_wake;
    sigaction(WAKE, &sa, NULL);
    if (pipe(pipefd) != 0) return 3;
    epfd = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(epfd, EPOLL_CTL_ADD, pipefd[0], &ev);
    sems = semget(IPC_PRIVATE, 2, 0600);
    inbox = msgget(IPC_PRIVATE, 0600);
    full_queue = msgget(IPC_PRIVATE, 0600);
    atexit(remove_ipc);
    before_giving_up = remove_ipc;
    if (sems < 0 || inbox < 0 || full_queue < 0) return 4;
    struct msqid_ds q;
    msgctl(full_queue, IPC_STAT, &q);
    q.msg_qbytes = QUEUE_ROOM;
    struct message filler = {1, {0}};
    if (msgctl(full_queue, IPC_SET, &q) != 0 ||
        msgsnd(full_queue, &filler, sizeof filler.text, IPC_NOWAIT) != 0)
        return 4;
    open_sockets();
    if (sem_init(&never_posted, 0, 0) != 0 || pipe(aio_pipe) != 0) return 4;
    aio_pending.aio_fildes = aio_pipe[0];
    aio_pending.aio_buf = &aio_byte;
    aio_pending.aio_nbytes = 1;
    if (aio_read(&aio_pending) != 0) return 4;
    sigfillset(&all_but_usr1);
    sigdelset(&all_but_usr1, SIGUSR1);
    pthread_barrier_init(&phase, NULL, N + 1);
    pthread_t t[N];
    for (long i = 0; i < N; i++) pthread_create(&t[i], NULL, worker, (void *)i);

    pthread_barrier_wait(&phase);
    double start = now();
    wait_blocked(1);
    for (int n = 1; n <= 3; n++) snapshot_and_wait(n);
    while (now() - start < 2.2) usleep(10000);
    for (int i = PAUSE; i <= SIGWAITINFO; i++) pthread_kill(t[i], WAKE);
    struct sembuf post = {0, 1, 0};
    struct message hello = {1, "hello"}, room;
    if (semop(sems, &post, 1) != 0 || msgsnd(inbox, &hello, 5, 0) != 0 ||
        msgrcv(full_queue, &room, sizeof room.text, 0, 0) != QUEUE_ROOM)
        return 6;

    pthread_barrier_wait(&phase);
    wait_blocked(2);
    snapshot_and_wait(4);
    for (int i = 0; i < N; i++) pthread_kill(t[i], SIGUSR1);
    for (int i = 0; i < N; i++) pthread_join(t[i], NULL);

    int bad = 0;
    for (int i = 0; i < N; i++) {
        int full = full_err[i] == 0 && full_s[i] >= 2.0;
        int intr = intr_err[i] == EINTR && intr_s[i] < 5.0;
        printf("%s full=%s intr=%s\n", names[i], full ? "ok" : "short", intr ? "eintr" : "missed");
        if (!full || !intr)
            fprintf(stderr, "%s: full err %d after %.3f s; interrupted err %d after %.3f s\n",
                    names[i], full_err[i], full_s[i], intr_err[i], intr_s[i]);
        bad += !full || !intr;
    }
    printf("usr1 handled: %d\n", (int)usr1_handled);
    return bad ? 1 : 0;
}
