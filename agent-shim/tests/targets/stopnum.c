/* A program that resets every signal to SIG_DFL, then takes the agent's stop-signal number
 * (SIGRTMIN + 4, capture/stop.rs) for a handler of its own (prepended with sync.h). Without
 * the agent's protection the first would make the next stop kill the process, the second
 * would hand the agent's stops to the program. A second thread waits in read(2) throughout. */
#include <pthread.h>
#include <stdatomic.h>

static int gate[2];
static atomic_int mine;

static void on_rt(int sig, siginfo_t *info, void *uctx) {
    if (sig == SIGRTMIN + 4 && info && info->si_code == SI_TKILL && uctx) mine++;
}

static void *reader(void *unused) {
    char c;
    if (read(gate[0], &c, 1) != 1) abort();
    return unused;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (pipe(gate) != 0) return 3;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    int reset = 0;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP && sigaction(s, &dfl, NULL) == 0) reset++;
    snapshot_and_wait(1);
    printf("alive after resetting %s signals\n", reset >= 60 ? "all" : "some");

    int sig = SIGRTMIN + 4;
    struct sigaction sa, cur, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO;
    sigaction(sig, &sa, &old);
    sigaction(sig, NULL, &cur);
    printf("old was default: %d, reads back: %d\n", old.sa_handler == SIG_DFL,
           cur.sa_sigaction == on_rt);
    pthread_kill(pthread_self(), sig);
    printf("own handler: %d\n", (int)mine);
    snapshot_and_wait(2);
    printf("after a snapshot: %d\n", (int)mine);
    if (write(gate[1], "x", 1) != 1) return 4;
    pthread_join(t, NULL);
    return 0;
}
