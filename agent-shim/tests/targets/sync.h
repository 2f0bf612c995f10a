/* Synchronisation point of the capture test targets (prepended to each target's source).
 *
 * snapshot_and_wait(n) raises SIGUSR2 at the process (the agent, run with HEAPTUI_DUMP,
 * then writes PREFIX.<pid>.<n>.hsnap) and waits until that file exists, so the heap shape
 * is exact while the capture runs. It first zeroes the stack below its caller: the
 * conservative scan would otherwise find stale pointers left there by earlier calls (malloc's
 * own frames), which no real frame holds. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) static void scrub_stack(void) {
    volatile char buf[65536];
    for (unsigned i = 0; i < sizeof buf; i++) buf[i] = 0;
}

__attribute__((noinline)) static void wait_snapshot(int n) {
    scrub_stack();
    const char *prefix = getenv("HEAPTUI_DUMP");
    char path[4096];
    snprintf(path, sizeof path, "%s.%d.%d.hsnap", prefix ? prefix : "", (int)getpid(), n);
    for (int i = 0; i < 30000 && access(path, F_OK) != 0; i++) usleep(1000);
}

__attribute__((noinline)) static void snapshot_and_wait(int n) {
    scrub_stack();
    raise(SIGUSR2);
    wait_snapshot(n);
}
