/* Shared by the leak programs of tests/leaks_valgrind.rs.
 *
 * Each program builds its structures in functions that return, then wipes the stack below
 * main's frame and the caller-saved registers, so that no stale copy of a pointer is left
 * where a root scan would find it (valgrind's own leak tests do the same). What remains
 * reachable is reachable on purpose: through a global, a thread, mapped memory. */
#ifndef LEAK_H
#define LEAK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

/* The stack below the caller, zeroed: frames of the calls that built the structures. */
static NOINLINE void clear_stack(void) {
    volatile char pad[256 * 1024];
    memset((char *)pad, 0, sizeof pad);
    __asm__ volatile("" ::"r"(pad) : "memory");
}

/* Caller-saved registers that may still hold a pointer. */
#define CLEAR_REGISTERS()                                                              \
    __asm__ volatile("xor %%eax, %%eax\n\txor %%ecx, %%ecx\n\txor %%edx, %%edx\n\t"  \
                     "xor %%esi, %%esi\n\txor %%edi, %%edi\n\txor %%r8d, %%r8d\n\t"    \
                     "xor %%r9d, %%r9d\n\txor %%r10d, %%r10d\n\txor %%r11d, %%r11d"    \
                     ::: "rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11",   \
                       "memory")

/* Runs `build`, then wipes what it left on the stack and in registers. */
#define RUN_AND_WIPE(build) \
    do {                    \
        build();            \
        clear_stack();      \
        CLEAR_REGISTERS();  \
    } while (0)

/* Keeps a pointer from being optimised away without keeping it anywhere scanned. */
static inline void *opaque(void *p) {
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* Says on stdout whether `block` is the chunk at `freed_address`, freed just before: a
 * program that tests a stale word left in a freed chunk tests it only if malloc gave the
 * chunk back (glibc does, last in first out; under the agent only while the free went
 * straight to libc; valgrind never reuses a chunk that soon). tests/leaks_valgrind.rs
 * asserts it under the agent. Not an exit code: under valgrind the answer is "fresh". */
static inline void say_whether_reused(const void *block, uintptr_t freed_address) {
    const char *answer = (uintptr_t)block == freed_address ? "reused\n" : "fresh\n";
    if (write(1, answer, strlen(answer)) < 0) _exit(3);
}

#endif
