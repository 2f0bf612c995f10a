/* pthread_cancel of a thread blocked in recv or read on a socket with a receive timeout,
 * after a snapshot cut the call short (prepended with sync.h and proc_state.h), and of a
 * thread blocked in read that no snapshot touched.
 *
 * The agent resumes such a call by first waiting in poll(2) for what is left of the socket's
 * timeout (an hour here). recv and read are cancellation points, so a pthread_cancel must end
 * the thread there at once, as it ends it in the call without the agent: the wait must be one
 * too. A read no snapshot cut short is cancelled inside libc's read, below the agent's stub,
 * which the unwinder must cross. One line per case, "<case> cancelled", or what the call
 * returned; a cancel still pending after 30 s is reported and ends the target (the thread
 * would otherwise wait out the hour). */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <errno.h>
#include <time.h>

static int pair[2];
static atomic_int receiver_tid;
static long recv_result;
static int recv_errno;

/* arg: 0 to block in recv, 1 in read. */
static void *receiver(void *arg) {
    receiver_tid = gettid();
    char byte;
    recv_result = arg ? read(pair[0], &byte, 1) : recv(pair[0], &byte, 1, 0);
    recv_errno = errno;
    return NULL;
}

/* Waits until the receiver sleeps in one of the system calls `a` or `b`. */
static void wait_blocked_in(long a, long b, const char *what) {
    for (int k = 0; !blocked_in(receiver_tid, a) && !blocked_in(receiver_tid, b); k++) {
        if (k == 150000) {
            fprintf(stderr, "receiver never blocked in %s\n", what);
            exit(5);
        }
        usleep(200);
    }
}

/* Starts a receiver (`use_read`: in read, else recv), waits until it blocks, takes snapshot
 * `snapshot` first unless it is 0, cancels the receiver and says how it ended. */
static void cancel_case(const char *name, int use_read, int snapshot) {
    receiver_tid = 0;
    pthread_t t;
    pthread_create(&t, NULL, receiver, (void *)(long)use_read);
    while (!receiver_tid) usleep(1000);
    wait_blocked_in(use_read ? SYS_read : SYS_recvfrom, use_read ? SYS_read : SYS_recvfrom, name);
    if (snapshot) {
        snapshot_and_wait(snapshot);
        /* The snapshot cut the call short: the agent now waits for the rest of the hour, in
         * poll for recv, in read called again for read (signals::read_write). */
        wait_blocked_in(use_read ? SYS_read : SYS_poll, SYS_ppoll, "the resumed call's wait");
    }
    pthread_cancel(t);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 30;
    void *ret;
    int e = pthread_timedjoin_np(t, &ret, &deadline);
    if (e != 0) {
        printf("%s: still blocked 30 s after pthread_cancel: %s\n", name, strerror(e));
        fflush(stdout);
        _exit(1);
    }
    if (ret == PTHREAD_CANCELED)
        printf("%s cancelled\n", name);
    else
        printf("%s returned %ld, errno %d\n", name, recv_result, recv_errno);
}

int main(void) {
    struct timeval hour = {3600, 0};
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0 ||
        setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &hour, sizeof hour) != 0)
        return 3;
    cancel_case("recv", 0, 1);
    cancel_case("read", 1, 0);
    cancel_case("read_resumed", 1, 2);
    return 0;
}
