/* A thread cut short in a system call whose number its registers do not tell, as glibc's
 * generic wrappers make them (the number loaded from another register): the napper calls
 * nanosleep(2) with `mov %r8d,%eax; syscall`, its own 1007-byte block as the call's `rem`
 * argument (rsi), and the address of a lost 3005-byte block in rdx, r10 and r9, which
 * nanosleep does not take. Every other register that could hold either is zeroed.
 *
 * The stop signal cuts a sleep short with EINTR even under SA_RESTART (the kernel does not
 * restart it for a handler), so the context the agent reads has the pc after the instruction
 * and rax = -EINTR: neither tells the call. The kernel's record of the call, read before the
 * stop, does: nanosleep, two arguments, so the 1007-byte block is the napper's and the
 * 3005-byte one is lost. (Were all six argument registers counted, it would be held.)
 *
 * main prints "ready" once the napper is blocked in nanosleep, then reads stdin until it
 * closes. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

static volatile pid_t napper_tid;

/* malloc(size), with the stack below the caller zeroed after it. */
__attribute__((noinline)) static void *alloc_scrubbed(size_t size) {
    void *p = malloc(size);
    scrub_stack();
    return p;
}

__attribute__((noinline)) static void nap(void) {
    struct timespec req = {1000, 0};
    void *rem = alloc_scrubbed(1007);
    void *dead = alloc_scrubbed(3005);
    register long r8 __asm__("r8") = SYS_nanosleep;
    register void *r9 __asm__("r9") = dead;
    register void *r10 __asm__("r10") = dead;
    /* For ever: a cut-short sleep sleeps again. */
    __asm__ volatile(
        "xor %%ebx, %%ebx\n\txor %%r12d, %%r12d\n\txor %%r13d, %%r13d\n\t"
        "xor %%r14d, %%r14d\n\txor %%r15d, %%r15d\n\t"
        "1:\n\t"
        "mov %%r8d, %%eax\n\t"
        "syscall\n\t"
        "jmp 1b"
        :
        : "D"(&req), "S"(rem), "d"(dead), "r"(r8), "r"(r9), "r"(r10)
        : "rax", "rbx", "rcx", "r11", "r12", "r13", "r14", "r15", "memory");
}

static void *napper(void *arg) {
    napper_tid = (pid_t)syscall(SYS_gettid);
    scrub_stack();
    nap();
    return arg;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, napper, NULL);
    while (!napper_tid || !blocked_in(napper_tid, SYS_nanosleep)) usleep(1000);
    printf("ready\n");
    char line[64];
    while (read(0, line, sizeof line) != 0) {
    }
    return 0;
}
