/* Synchronisation point of the capture test targets (prepended to each target's source).
 *
 * snapshot_and_wait(n) raises SIGUSR2 at the process (the agent, run with HEAPTUI_DUMP,
 * then writes PREFIX.<pid>.<n>.hsnap) and waits until that file exists, so the heap shape
 * is exact while the capture runs. It first zeroes the stack below its caller: the
 * conservative scan would otherwise find stale pointers left there by earlier calls (malloc's
 * own frames), which no real frame holds.
 *
 * A snapshot that fails ends the target at once, with the agent's reason on stderr and exit
 * code 86: the wait watches the agent log (HEAPTUI_LOG, which the tests always set) for its
 * "snapshot failed:" line. A file that still has not come after 30 s ends it the same way.
 * Neither allocates (the heap is what the snapshot looks at): the log is read with read(2)
 * into a static buffer, and _exit skips the exit snapshot. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

__attribute__((noinline)) static void scrub_stack(void) {
    volatile char buf[65536];
    for (unsigned i = 0; i < sizeof buf; i++) buf[i] = 0;
}

/* The agent's "snapshot failed:" line in its log, or NULL (read without allocating). */
__attribute__((noinline)) static const char *capture_failure(void) {
    static char log[1 << 16];
    const char *path = getenv("HEAPTUI_LOG");
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) return NULL;
    ssize_t len = read(fd, log, sizeof log - 1);
    close(fd);
    log[len > 0 ? len : 0] = 0;
    return strstr(log, "snapshot failed:");
}

/* Run before a failed snapshot ends the target with _exit (which skips atexit handlers): a
 * target that made System V objects removes them here, as they outlive the process. */
static void (*before_giving_up)(void);

/* Ends the target: snapshot `n` `what`, with the agent's reason when it logged one. */
__attribute__((noinline)) static void snapshot_gave_up(int n, const char *what) {
    if (before_giving_up) before_giving_up();
    const char *failure = capture_failure();
    char line[512];
    int len = snprintf(line, sizeof line, "snapshot %d %s: %.*s\n", n, what,
                       failure ? (int)strcspn(failure, "\n") : 0, failure ? failure : "");
    if (write(2, line, len < (int)sizeof line ? (size_t)len : sizeof line - 1) < 0) _exit(87);
    _exit(86);
}

__attribute__((noinline)) static void wait_snapshot(int n) {
    scrub_stack();
    const char *prefix = getenv("HEAPTUI_DUMP");
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.%d.hsnap", prefix ? prefix : "", (int)getpid(), n);
    for (int i = 0; access(path, F_OK) != 0; i++) {
        if (i % 20 == 19 && capture_failure()) snapshot_gave_up(n, "failed");
        if (i == 30000) snapshot_gave_up(n, "never came (30 s)");
        usleep(1000);
    }
}

__attribute__((noinline)) static void snapshot_and_wait(int n) {
    scrub_stack();
    raise(SIGUSR2);
    wait_snapshot(n);
}
