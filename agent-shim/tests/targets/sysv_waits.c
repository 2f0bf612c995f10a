/* System V waits under snapshots taken over the protocol (prepended with sync.h and
 * proc_state.h). Two threads, one in semop on a semaphore at 0, one in msgrcv on an empty
 * queue, each for two rounds; stdin commands:
 *   (start)    "ready" once both are asleep in their call: the test then takes snapshots
 *   release    posts the semaphore and sends "hello": round 1 of each must succeed (the
 *              snapshots' stop signal must not have ended it with EINTR); "blocked again"
 *              once both are asleep in round 2
 *   interrupt  the program's own SIGUSR1 (handler without SA_RESTART) to both: round 2 of
 *              each must end with EINTR, as without the agent
 *   quit */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/syscall.h>

static int sem_id = -1, queue_id = -1;
static pid_t tids[2];
static atomic_int round_of[2];
static char results[2][2][64];
static atomic_int usr1_handled;

static void on_usr1(int sig) { (void)sig; usr1_handled++; }

static void remove_ipc(void) {
    if (sem_id >= 0) semctl(sem_id, 0, IPC_RMID);
    if (queue_id >= 0) msgctl(queue_id, IPC_RMID, NULL);
}

static const char *outcome(int ok, char *buf, size_t size, const char *what) {
    if (ok) snprintf(buf, size, "%s", what);
    else snprintf(buf, size, "%s", errno == EINTR ? "EINTR" : strerror(errno));
    return buf;
}

static void *semop_waiter(void *arg) {
    (void)arg;
    tids[0] = (pid_t)syscall(SYS_gettid);
    for (int round = 0; round < 2; round++) {
        struct sembuf take = {0, -1, 0};
        round_of[0] = round + 1;
        int r = semop(sem_id, &take, 1);
        outcome(r == 0, results[0][round], sizeof results[0][round], "0");
    }
    return NULL;
}

static void *msgrcv_waiter(void *arg) {
    (void)arg;
    tids[1] = (pid_t)syscall(SYS_gettid);
    for (int round = 0; round < 2; round++) {
        struct { long kind; char text[16]; } m = {0, {0}};
        round_of[1] = round + 1;
        ssize_t n = msgrcv(queue_id, &m, sizeof m.text - 1, 0, 0);
        char what[32];
        snprintf(what, sizeof what, "%zd %s", n, m.text);
        outcome(n >= 0, results[1][round], sizeof results[1][round], what);
    }
    return NULL;
}

/* Waits until both threads are asleep in their call of round `round`. */
static void wait_blocked(int round) {
    for (int i = 0; i < 2; i++) {
        while (round_of[i] != round) usleep(1000);
        for (int k = 0;; k++) {
            int in = i == 0 ? blocked_in(tids[i], SYS_semtimedop) || blocked_in(tids[i], SYS_semop)
                            : blocked_in(tids[i], SYS_msgrcv);
            if (in) break;
            if (k == 150000) {
                fprintf(stderr, "thread %d never blocked in round %d\n", i, round);
                exit(5);
            }
            usleep(200);
        }
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sem_id = semget(IPC_PRIVATE, 1, 0600);
    queue_id = msgget(IPC_PRIVATE, 0600);
    atexit(remove_ipc);
    before_giving_up = remove_ipc;
    if (sem_id < 0 || queue_id < 0) return 4;
    pthread_t t[2];
    pthread_create(&t[0], NULL, semop_waiter, NULL);
    pthread_create(&t[1], NULL, msgrcv_waiter, NULL);
    wait_blocked(1);
    printf("ready\n");
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "release", 7)) {
            struct sembuf post = {0, 1, 0};
            struct { long kind; char text[8]; } hello = {1, "hello"};
            if (semop(sem_id, &post, 1) != 0 || msgsnd(queue_id, &hello, 5, 0) != 0) return 6;
            wait_blocked(2);
            printf("semop 1: %s\nmsgrcv 1: %s\nblocked again\n", results[0][0], results[1][0]);
        } else if (!strncmp(line, "interrupt", 9)) {
            for (int i = 0; i < 2; i++) pthread_kill(t[i], SIGUSR1);
            for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
            printf("semop 2: %s\nmsgrcv 2: %s\nusr1 handled: %d\n", results[0][1], results[1][1],
                   (int)usr1_handled);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        }
    }
    return 0;
}
