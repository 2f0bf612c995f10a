/* What the kernel says of a thread of this process, for the targets that wait until a thread
 * is really blocked. Prepended after sync.h by tests/capture_signals.rs,
 * tests/capture_stable.rs, src/outside/tests.rs and bench/signals.sh. */
#include <fcntl.h>

/* The scheduler state letter of thread `tid` (R, S, D, T, ...; '?' when it is gone). */
static char state_of(pid_t tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close = strrchr(buf, ')');
    return close && close[1] ? close[2] : '?';
}

/* Whether thread `tid` is blocked (sleeping) in system call `nr`. */
__attribute__((unused)) static int blocked_in(pid_t tid, long nr) {
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n > 0 && strtol(buf, NULL, 10) == nr && state_of(tid) == 'S';
}
