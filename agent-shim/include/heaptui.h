/* heaptui agent C API.
 *
 * The agent (LD_PRELOAD=$(heaptui agent-path) prog) exports these functions. A program can
 * declare them weak and run unchanged without the agent:
 *
 *     #pragma weak heaptui_counters
 *     if (heaptui_counters) { struct heaptui_counters c; heaptui_counters(&c); }
 *
 * The allocation functions themselves (malloc, calloc, realloc, reallocarray, free,
 * posix_memalign, aligned_alloc, memalign, valloc, pvalloc) and pthread_create are
 * interposed with their standard signatures and need no declaration here. */
#ifndef HEAPTUI_H
#define HEAPTUI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Indexes of heaptui_counters.calls. */
enum heaptui_op {
    HEAPTUI_MALLOC,
    HEAPTUI_CALLOC,
    HEAPTUI_REALLOC,
    HEAPTUI_REALLOCARRAY,
    HEAPTUI_FREE,
    HEAPTUI_POSIX_MEMALIGN,
    HEAPTUI_ALIGNED_ALLOC,
    HEAPTUI_MEMALIGN,
    HEAPTUI_VALLOC,
    HEAPTUI_PVALLOC,
    HEAPTUI_OPS
};

/* The agent's live counters. Fields are only ever appended. */
struct heaptui_counters {
    uint64_t live_bytes;      /* requested bytes of the live tracked blocks */
    uint64_t live_blocks;
    uint64_t allocated_bytes; /* every block ever tracked (a realloc counts its new size) */
    uint64_t freed_bytes;     /* every block released (a realloc counts its old size) */
    uint64_t peak_live_bytes; /* maximum of live_bytes so far: within 1/64 above 1 MiB, and
                                 it may include up to 15 blocks per thread whose free was
                                 held back to be applied in a batch */
    uint64_t calls[HEAPTUI_OPS]; /* calls per function, failures included */
    uint64_t null_returns;    /* calls that failed (NULL, ENOMEM, EINVAL) */
    uint64_t free_null;       /* free(NULL) calls */
    uint64_t unknown_frees;   /* frees of pointers the agent never saw allocated */
    uint64_t unknown_reallocs;
    uint64_t untracked;       /* blocks the agent could not record (see the agent log) */
};

/* Fills *out; returns 0, or -1 if out is NULL. */
int heaptui_counters(struct heaptui_counters *out);

/* Copies up to max return addresses of the allocation stack of the live block that starts
 * at block (innermost first) into frames; returns the stack's length (0 for an unknown block
 * or when HEAPTUI_STACK_DEPTH=0). */
size_t heaptui_allocation_stack(const void *block, uint64_t *frames, size_t max);

/* ---- cooperative cancel (memory-shortage policy, HEAPTUI_POLICY) ----
 *
 * When the agent's policy permits cancelling a thread (an operator's `heaptui cancel`, or the
 * autonomous trigger), the agent never kills it: it raises the thread's request flag, and the
 * thread ends itself at a point of its choosing. Both calls take no lock and never allocate;
 * through weak symbols a program runs unchanged without the agent:
 *
 *     #pragma weak heaptui_cancel_requested
 *     while (work_left() && !(heaptui_cancel_requested && heaptui_cancel_requested())) ...
 *
 * heaptui_on_cancel registers the calling thread's handler (NULL removes it): it runs once,
 * ON THIS THREAD, inside its first heaptui_cancel_requested() poll after the request — never
 * from a signal handler, so it may free memory, take the program's locks or set flags as at
 * any other point of the poll loop. Returns 0, or -1 when the agent's table is full (1024
 * threads with handlers at once).
 *
 * heaptui_cancel_requested returns 1 once a cancel of the calling thread was requested (and
 * on every later call), else 0. Without a request it costs one relaxed atomic load. */
int heaptui_on_cancel(void (*handler)(void *), void *arg);
int heaptui_cancel_requested(void);

#ifdef __cplusplus
}
#endif

#endif /* HEAPTUI_H */
