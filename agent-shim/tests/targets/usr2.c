/* A program with SIGUSR2 handlers of its own (prepended with sync.h), run with HEAPTUI_DUMP.
 * Each step prints one line; the test compares them all. */
#include <errno.h>
#include <stdatomic.h>
#include <sys/wait.h>

static atomic_int info_calls, plain_calls, oneshot_calls;
static atomic_int mask_had_usr1, info_ok;

static void on_info(int sig, siginfo_t *info, void *uctx) {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, NULL, &now);
    if (sigismember(&now, SIGUSR1)) mask_had_usr1++;
    if (sig == SIGUSR2 && info && info->si_signo == SIGUSR2 && uctx) info_ok++;
    info_calls++;
}

static void on_plain(int sig) {
    if (sig == SIGUSR2) plain_calls++;
}

static void on_oneshot(int sig) {
    if (sig == SIGUSR2) oneshot_calls++;
}

/* A child process sends SIGUSR2 to us, as an operator's `kill -USR2` would. */
static void from_outside(void) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        kill(parent, SIGUSR2);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
}

int main(void) {
    /* Unbuffered: without HEAPTUI_DUMP, step 7 ends the process by SIGUSR2. */
    setvbuf(stdout, NULL, _IONBF, 0);
    int dumping = getenv("HEAPTUI_DUMP") != NULL;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    memset(&old, 0xff, sizeof old);
    /* 1. What the process inherited is what the program sees. */
    sigaction(SIGUSR2, NULL, &old);
    printf("inherited default: %d\n", old.sa_handler == SIG_DFL);

    /* 2. An SA_SIGINFO handler with SIGUSR1 in its mask. */
    sa.sa_sigaction = on_info;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaction(SIGUSR2, &sa, &old);
    printf("old was default: %d\n", old.sa_handler == SIG_DFL);
    struct sigaction cur;
    sigaction(SIGUSR2, NULL, &cur);
    printf("reads back: %d %d %d\n", cur.sa_sigaction == on_info,
           (cur.sa_flags & (SA_SIGINFO | SA_RESTART)) == (SA_SIGINFO | SA_RESTART),
           sigismember(&cur.sa_mask, SIGUSR1));

    /* 3. Raised by the program itself: its handler only. */
    raise(SIGUSR2);
    printf("own raise: calls=%d info=%d mask=%d\n", (int)info_calls, (int)info_ok,
           (int)mask_had_usr1);

    /* 4. Sent from outside: its handler, and a snapshot (1). */
    from_outside();
    if (dumping) wait_snapshot(1);
    printf("outside: calls=%d\n", (int)info_calls);

    /* 5. signal(): a plain handler; signal() returns the previous one. */
    void (*prev)(int) = signal(SIGUSR2, on_plain);
    printf("signal returned previous: %d\n", prev == (void (*)(int))on_info);
    raise(SIGUSR2);
    printf("plain: %d\n", (int)plain_calls);

    /* 6. SA_RESETHAND: runs once, then the disposition reads back as SIG_DFL. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_oneshot;
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGUSR2, &sa, &old);
    printf("old was plain: %d\n", old.sa_handler == on_plain);
    raise(SIGUSR2);
    sigaction(SIGUSR2, NULL, &cur);
    printf("oneshot: %d, then default: %d\n", (int)oneshot_calls, cur.sa_handler == SIG_DFL);

    /* 7. Back at SIG_DFL, the agent's dump trigger is SIGUSR2's default action: snapshot 2,
     * and the process lives on. */
    raise(SIGUSR2);
    wait_snapshot(2);
    printf("default dumps: oneshot=%d\n", (int)oneshot_calls);

    /* 8. SIG_IGN reads back, and nothing the program sees happens. */
    signal(SIGUSR2, SIG_IGN);
    sigaction(SIGUSR2, NULL, &cur);
    printf("ignored: %d\n", cur.sa_handler == SIG_IGN);

    /* 9. Other signals are untouched. */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_plain;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR1, NULL, &cur);
    printf("usr1 direct: %d\n", cur.sa_handler == on_plain);
    return 0;
}
