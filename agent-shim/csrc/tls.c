/* Per-thread state of the heaptui agent's hooks.
 *
 * Rust has no stable way to declare an initial-exec TLS variable, and `thread_local!` in a
 * preloaded cdylib goes through __tls_get_addr, which glibc may serve by calling malloc — from
 * inside malloc. The agent is loaded with the initial executable (LD_PRELOAD), so its TLS block
 * is part of the static TLS area and the initial-exec model is valid: the access is one
 * %fs-relative load, it never allocates and never takes a lock. The Rust side (src/sys.rs,
 * `thread_state`) computes the address inline with that same initial-exec sequence, so the
 * variable is visible to the rest of the library (hidden from every other module). */
#include <stdint.h>

struct heaptui_thread {
    uint32_t tid;       /* cached gettid(), 0 until first use (reset in the fork child) */
    uint32_t busy;      /* re-entrancy depth of the hooks on this thread */
    uintptr_t stack_lo; /* the mapping that holds this thread's stack, 0 until looked up */
    uintptr_t stack_hi;
    uint32_t agent;     /* 1 on the agent's own threads (their calls are also counted apart) */
    uint32_t held;      /* the slot of frees held back (registry/held_frees.rs): 0 none yet,
                           n = slot n - 1, UINT32_MAX never (the thread is ending or none left) */
};

__attribute__((visibility("hidden"), tls_model("initial-exec"))) __thread struct heaptui_thread
    heaptui_thread_state;
