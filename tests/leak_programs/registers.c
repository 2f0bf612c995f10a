/* Pointers held only in registers of threads blocked in a system call, as main exits:
 * - one thread blocks in read(2) with a block (and, through it, a second one) only in r12, a
 *   callee-saved register the call preserves;
 * - another blocks in read(2) into a heap buffer that only the call's own argument register
 *   (rsi) points at.
 * Every other copy (the stack slot, the registers malloc left, the stack below) is wiped, and
 * the system calls are made by inline assembly, so nothing but the register holds them.
 * memcheck scans every register of every thread: all three blocks are reachable. heaptui
 * counts a blocked thread's call arguments and callee-saved registers (docs/reference.md §3,
 * "Registers of a blocked thread"): reachable too. main also leaks a block and, through it,
 * another (definitely and indirectly lost), so that the figures are not all zero.
 *
 * Each thread tells main it is ready by a write(2) to a pipe before it blocks; from then on
 * the pointer is in a register at every instruction, so the capture at exit finds it
 * wherever it stops the thread. The functions keep their frame pointer, so that rbp is
 * never a copy of the pointer at -O2. */
#include "leak.h"
#include <pthread.h>
#include <unistd.h>

static int gate[2], ready[2];
static char byte;

#define ZERO_OTHER_REGISTERS                                                          \
    "xor %%eax, %%eax\n\txor %%ebx, %%ebx\n\txor %%ecx, %%ecx\n\txor %%edx, %%edx\n\t" \
    "xor %%esi, %%esi\n\txor %%edi, %%edi\n\txor %%r8d, %%r8d\n\txor %%r9d, %%r9d\n\t" \
    "xor %%r10d, %%r10d\n\txor %%r11d, %%r11d\n\txor %%r13d, %%r13d\n\t"              \
    "xor %%r14d, %%r14d\n\txor %%r15d, %%r15d\n\t"

/* write(ready[1], &byte, 1): main may go on. */
#define SAY_READY                                                        \
    "mov %[ready], %%edi\n\tlea %[byte], %%rsi\n\tmov $1, %%edx\n\t"     \
    "mov $1, %%eax\n\tsyscall\n\t"

#define CLOBBERS                                                                    \
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", \
        "r14", "r15", "memory"

/* Never returns: blocked in read(gate[0], &byte, 1) with `held` only in r12. */
__attribute__((optimize("no-omit-frame-pointer"))) static void *held_in_r12(void *arg) {
    (void)arg;
    void **held = malloc(72);
    held[0] = malloc(24);
    clear_stack();
    __asm__ volatile(
        "mov %[held], %%r12\n\t"
        "movq $0, %[held]\n\t" ZERO_OTHER_REGISTERS SAY_READY
        "1:\n\t"
        "mov %[gate], %%edi\n\tlea %[byte], %%rsi\n\tmov $1, %%edx\n\t"
        "xor %%eax, %%eax\n\tsyscall\n\t"
        "jmp 1b"
        : [held] "+m"(held)
        : [ready] "m"(ready[1]), [gate] "m"(gate[0]), [byte] "m"(byte)
        : CLOBBERS);
    return 0;
}

/* Never returns: blocked in read(gate[0], buffer, 1) with `buffer` only in rsi (kept in r12
 * only while it says it is ready). */
__attribute__((optimize("no-omit-frame-pointer"))) static void *reading_into_a_block(void *arg) {
    (void)arg;
    char *buffer = malloc(32);
    clear_stack();
    __asm__ volatile(
        "mov %[buffer], %%r12\n\t"
        "movq $0, %[buffer]\n\t" ZERO_OTHER_REGISTERS SAY_READY
        "mov %%r12, %%rsi\n\t"
        "xor %%r12d, %%r12d\n\t"
        "1:\n\t"
        "mov %[gate], %%edi\n\tmov $1, %%edx\n\t"
        "xor %%eax, %%eax\n\tsyscall\n\t"
        "jmp 1b"
        : [buffer] "+m"(buffer)
        : [ready] "m"(ready[1]), [gate] "m"(gate[0]), [byte] "m"(byte)
        : CLOBBERS);
    return 0;
}

static NOINLINE void leak(void) {
    void **lost = malloc(40);
    lost[0] = malloc(56);
    opaque(lost);
}

static NOINLINE void start(void) {
    pthread_t t;
    pthread_create(&t, 0, held_in_r12, 0);
    pthread_create(&t, 0, reading_into_a_block, 0);
    char c;
    for (int ready_threads = 0; ready_threads < 2;) {
        if (read(ready[0], &c, 1) == 1) ready_threads++;
    }
}

int main(void) {
    if (pipe(gate) != 0 || pipe(ready) != 0) return 1;
    RUN_AND_WIPE(start);
    RUN_AND_WIPE(leak);
    return 0;
}
