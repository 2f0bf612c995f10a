/* Threads the agent cannot stop (prepended with sync.h and proc_state.h): "rawmask" blocks
 * every signal with the raw system call (no wrapper sees it) and waits in read(2); "vforker"
 * vforks a child that sleeps 5 s (room for two snapshots on a loaded machine, each waiting the
 * 1 s deadline for one newcomer at most), so the thread waits in the kernel, in uninterruptible
 * sleep, until the child exits. Snapshot 1: rawmask only; snapshot 2: the vfork parent too,
 * seen for the first time; snapshot 3: the vfork parent again. Beside them, "sigwaiter" blocks every
 * signal and waits for all of them in sigwait(3), the usual signal-thread pattern: it must be
 * stopped like any thread, and receive only the program's SIGUSR1. Prints what sigwait
 * returned, then "done". */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int gate[2];
static pid_t vfork_tid, sigwaiter_tid;
static atomic_int vforking, rawmask_ready, sigwaiter_named;

static void *rawmask(void *unused) {
    pthread_setname_np(pthread_self(), "rawmask");
    sigset_t all;
    sigfillset(&all);
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, 0, 8);
    rawmask_ready = 1;
    char c;
    if (read(gate[0], &c, 1) != 1) abort();
    return unused;
}

static int sigwait_got;

static void *sigwaiter(void *unused) {
    pthread_setname_np(pthread_self(), "sigwaiter");
    sigwaiter_tid = (pid_t)syscall(SYS_gettid);
    sigwaiter_named = 1;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    int sig = 0;
    if (sigwait(&all, &sig) == 0) sigwait_got = sig;
    return unused;
}

static void *vforker(void *unused) {
    pthread_setname_np(pthread_self(), "vforker");
    vfork_tid = (pid_t)syscall(SYS_gettid);
    vforking = 1;
    pid_t pid = vfork();
    if (pid == 0) {
        /* The child shares our memory: only system calls here. */
        struct timespec ts = {5, 0};
        syscall(SYS_nanosleep, &ts, NULL);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return unused;
}

int main(void) {
    if (pipe(gate) != 0) return 3;
    pthread_t r, v, w;
    pthread_create(&r, NULL, rawmask, NULL);
    pthread_create(&w, NULL, sigwaiter, NULL);
    /* Snapshot 1 finds rawmask blocked and sigwaiter named and waiting in sigwait. */
    while (!rawmask_ready || !sigwaiter_named) usleep(1000);
    while (state_of(sigwaiter_tid) != 'S') usleep(1000);
    snapshot_and_wait(1);
    pthread_create(&v, NULL, vforker, NULL);
    while (!vforking) usleep(1000);
    for (int i = 0; i < 2000 && state_of(vfork_tid) != 'D'; i++) usleep(1000);
    snapshot_and_wait(2);
    snapshot_and_wait(3);
    if (write(gate[1], "x", 1) != 1) return 4;
    pthread_join(r, NULL);
    pthread_join(v, NULL);
    pthread_kill(w, SIGUSR1);
    pthread_join(w, NULL);
    printf("sigwait got SIGUSR1: %d\ndone\n", sigwait_got == SIGUSR1);
    return 0;
}
