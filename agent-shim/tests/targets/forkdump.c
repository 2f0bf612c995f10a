/* fork under HEAPTUI_DUMP (prepended with sync.h): a thread forks children again and again
 * while the main thread takes snapshots; each child allocates, sleeps a little (a wrapped
 * call) and exits normally. Then a child raises SIGUSR2 at SIG_DFL: with no agent thread of
 * its own, it must end by the signal, as without the agent. Prints the counts. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#define CHILDREN 20

static atomic_int children_ok, forks_done;

static void *forker(void *unused) {
    for (int i = 0; i < CHILDREN; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* volatile: the compiler must not elide the malloc/free pairs. */
            char *volatile keep = malloc(777);
            for (int k = 0; k < 100; k++) {
                char *volatile p = malloc(100 + k);
                p[0] = 1;
                free(p);
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            int slept = nanosleep(&ts, NULL) == 0;
            exit(keep && slept ? 0 : 1);
        }
        int status;
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            children_ok++;
        forks_done++;
    }
    return unused;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, forker, NULL);
    for (int n = 1; n <= 3; n++) snapshot_and_wait(n);
    pthread_join(t, NULL);

    pid_t pid = fork();
    if (pid == 0) {
        raise(SIGUSR2);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    int killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR2;
    printf("children ok: %d/%d, killed by SIGUSR2: %d\n", (int)children_ok, CHILDREN, killed);
    return 0;
}
