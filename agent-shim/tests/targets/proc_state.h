/* The scheduler state letter of a thread of this process (R, S, D, T, ...; '?' when it is
 * gone), for the signal targets that wait until a thread is really blocked. Prepended after
 * sync.h by tests/capture_signals.rs and bench/signals.sh. */
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
