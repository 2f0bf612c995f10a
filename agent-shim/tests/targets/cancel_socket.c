/* pthread_cancel of a thread blocked in recv on a socket with a receive timeout, after a
 * snapshot cut the recv short (prepended with sync.h and proc_state.h).
 *
 * The agent resumes such a recv by first waiting in poll(2) for what is left of the socket's
 * timeout (an hour here). recv is a cancellation point, so a pthread_cancel must end the
 * thread there at once, as it ends it in recv without the agent: the wait must be one too.
 * Prints "cancelled", or what recv returned; a cancel still pending after 30 s is reported and
 * ends the target (the thread would otherwise wait out the hour). */
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

static void *receiver(void *arg) {
    (void)arg;
    receiver_tid = gettid();
    char byte;
    recv_result = recv(pair[0], &byte, 1, 0);
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

int main(void) {
    struct timeval hour = {3600, 0};
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0 ||
        setsockopt(pair[0], SOL_SOCKET, SO_RCVTIMEO, &hour, sizeof hour) != 0)
        return 3;
    pthread_t t;
    pthread_create(&t, NULL, receiver, NULL);
    while (!receiver_tid) usleep(1000);
    wait_blocked_in(SYS_recvfrom, SYS_recvfrom, "recv");
    snapshot_and_wait(1);
    /* The snapshot cut recv short: the agent now waits for the rest of the hour. */
    wait_blocked_in(SYS_poll, SYS_ppoll, "the resumed recv's wait");
    pthread_cancel(t);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 30;
    void *ret;
    int e = pthread_timedjoin_np(t, &ret, &deadline);
    if (e != 0) {
        printf("still blocked 30 s after pthread_cancel: %s\n", strerror(e));
        fflush(stdout);
        _exit(1);
    }
    if (ret == PTHREAD_CANCELED)
        printf("cancelled\n");
    else
        printf("recv returned %ld, errno %d\n", recv_result, recv_errno);
    return 0;
}
