/* Cost of the agent's blocking-call wrappers (signals::blocking, signals::sockets,
 * signals::raw_syscall): N calls of poll(NULL, 0, 0) and of select with a zero timeout, N
 * pairs of a one-byte send and recv on a Unix stream socket pair (which return at once), N
 * pairs of a one-byte write and read on a pipe (signals::read_write: nothing added until a call
 * fails), the same through libc's own write and read (dlopen: past the agent's stubs, so the
 * difference under the agent is the stubs' alone, the process being multithreaded either way:
 * glibc's read and write take their cancellation path then), and
 * N calls of syscall(SYS_getppid) (a number the agent passes straight through) and of
 * syscall(SYS_poll, NULL, 0, 0) (one it resumes); each a real system call that returns at
 * once; run bare and under the agent, the difference per call is the wrapper's cost. (A call
 * with a non-zero timeout also reads the monotonic clock once, ~20 ns, next to a sleep of at
 * least the kernel's timer slack, 50 us; the socket wrappers read it on every call.) Each
 * figure is given twice: wall time, and user CPU time alone (getrusage), which is where a
 * wrapper's cost lands and which a loaded machine disturbs less (the system call's own time,
 * and time spent waiting for a core, are left out). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/select.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double user(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6;
}

/* Wall and user time so far. */
struct mark { double wall, user; };
static struct mark mark(void) { return (struct mark){now(), user()}; }
static void say(const char *name, struct mark a, struct mark b, long n) {
    printf("%s_ns=%.1f %s_user_ns=%.1f ", name, (b.wall - a.wall) / n * 1e9, name,
           (b.user - a.user) / n * 1e9);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    struct mark m0 = mark();
    for (long i = 0; i < n; i++) poll(NULL, 0, 0);
    struct mark m1 = mark();
    for (long i = 0; i < n; i++) {
        struct timeval zero = {0, 0};
        select(0, NULL, NULL, NULL, &zero);
    }
    struct mark m2 = mark();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
    char byte = 0;
    for (long i = 0; i < n; i++) {
        if (send(sv[0], &byte, 1, 0) != 1 || recv(sv[1], &byte, 1, 0) != 1) return 1;
    }
    struct mark m3 = mark();
    for (long i = 0; i < n; i++) syscall(SYS_getppid);
    struct mark m4 = mark();
    for (long i = 0; i < n; i++) syscall(SYS_poll, NULL, 0, 0);
    struct mark m5 = mark();
    int fds[2];
    if (pipe(fds) != 0) return 1;
    for (long i = 0; i < n; i++) {
        if (write(fds[1], &byte, 1) != 1 || read(fds[0], &byte, 1) != 1) return 1;
    }
    struct mark m6 = mark();
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    ssize_t (*libc_write)(int, const void *, size_t) = libc ? dlsym(libc, "write") : NULL;
    ssize_t (*libc_read)(int, void *, size_t) = libc ? dlsym(libc, "read") : NULL;
    if (!libc_write || !libc_read) return 1;
    for (long i = 0; i < n; i++) {
        if (libc_write(fds[1], &byte, 1) != 1 || libc_read(fds[0], &byte, 1) != 1) return 1;
    }
    struct mark m7 = mark();
    say("poll", m0, m1, n);
    say("select", m1, m2, n);
    say("send_recv", m2, m3, n);
    say("syscall_getppid", m3, m4, n);
    say("syscall_poll", m4, m5, n);
    say("write_read", m5, m6, n);
    say("libc_write_read", m6, m7, n);
    printf("\n");
    return 0;
}
