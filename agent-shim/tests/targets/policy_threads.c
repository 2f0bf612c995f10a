/* Target of the policy tests: threads of known heap shapes, named, printed with their tids.
 *
 *   runaway   8 MiB in 128 blocks of 64 KiB; registered a cooperative cancel handler and polls
 *             heaptui_cancel_requested() (weak: runs unchanged without the agent); once
 *             cancelled it frees everything and ends.
 *   legacy    2 MiB; a plain C thread with pthread_cleanup_push handlers, sleeping in
 *             nanosleep (a cancellation point): pthread_cancel runs its handlers.
 *   holder-1  1 MiB, holder-2 1 MiB: never permitted; check their memory at the end.
 *   small     4 KiB: permitted, below any sensible min_release.
 *   short     ends when main reads "end-short" (holds nothing).
 *   grow-a    2 MiB, grow-b 6 MiB, one block each (only with the argument "grow-late"), for
 *             the autonomous trigger: grow-a starts at once, grow-b on the stdin command
 *             "grow-b" (so a client can subscribe to the agent's pushes first). Holders free
 *             their memory in a pthread_cleanup_push handler when cancelled.
 *
 * "ready" comes once every thread started at once has printed its tid. stdin commands:
 * "end-short" (short ends, main joins it and prints "short ended"), "rounds NAME" (prints
 * "rounds NAME N": how many times thread NAME has looked at its stop condition, and runaway at
 * its cancel request, so a test can tell it went on after a decision), "quit" (holders stop;
 * every remaining thread is stopped and joined; "exit ok"). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern int heaptui_on_cancel(void (*handler)(void *), void *arg) __attribute__((weak));
extern int heaptui_cancel_requested(void) __attribute__((weak));

static atomic_int stopping;
static atomic_int short_end;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void say(const char *fmt, ...) {
    /* No cancellation while holding out_lock (write is a cancellation point). */
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&out_lock);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    va_end(ap);
    pthread_setcancelstate(old, NULL);
}

static void nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

struct node {
    struct node *next;
    size_t size;
};

/* A list of n blocks of `size` bytes, each filled with `fill`. */
static struct node *make_list(int n, size_t size, int fill) {
    struct node *head = NULL;
    for (int i = 0; i < n; i++) {
        struct node *b = malloc(size);
        memset(b, fill, size);
        b->next = head;
        b->size = size;
        head = b;
    }
    return head;
}

static int check_list(struct node *head, int fill) {
    for (struct node *b = head; b; b = b->next)
        for (size_t i = sizeof *b; i < b->size; i++)
            if (((unsigned char *)b)[i] != (unsigned char)fill) return 0;
    return 1;
}

static size_t free_list(struct node *head) {
    size_t total = 0;
    while (head) {
        struct node *next = head->next;
        total += head->size;
        free(head);
        head = next;
    }
    return total;
}

/* The threads that printed their tids, with the rounds of their loops. */
static pthread_mutex_t named_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t named_cond = PTHREAD_COND_INITIALIZER;
static int named_count;
static struct {
    const char *name;
    atomic_int rounds;
} seen[8];

/* Names the calling thread, prints its tid; returns its round counter. */
static atomic_int *named(const char *name) {
    pthread_setname_np(pthread_self(), name);
    say("tid %s %ld", name, (long)syscall(SYS_gettid));
    pthread_mutex_lock(&named_lock);
    int i = named_count++;
    seen[i].name = name;
    pthread_cond_broadcast(&named_cond);
    pthread_mutex_unlock(&named_lock);
    return &seen[i].rounds;
}

static void wait_named(int n) {
    pthread_mutex_lock(&named_lock);
    while (named_count < n) pthread_cond_wait(&named_cond, &named_lock);
    pthread_mutex_unlock(&named_lock);
}

static int rounds_of(const char *name) {
    int rounds = -1;
    pthread_mutex_lock(&named_lock);
    for (int i = 0; i < named_count; i++)
        if (strcmp(seen[i].name, name) == 0) rounds = atomic_load(&seen[i].rounds);
    pthread_mutex_unlock(&named_lock);
    return rounds;
}

/* ---- runaway: cooperative ---- */
static atomic_int runaway_flag;
static void on_cancel(void *arg) {
    atomic_store((atomic_int *)arg, 1);
}
static int cancel_requested(void) {
    return heaptui_cancel_requested ? heaptui_cancel_requested() : 0;
}
static void *runaway(void *arg) {
    (void)arg;
    struct node *rows = make_list(128, 64 << 10, 0x5a);
    if (heaptui_on_cancel) heaptui_on_cancel(on_cancel, &runaway_flag);
    atomic_int *rounds = named("runaway");
    while (!atomic_load(&stopping)) {
        if (cancel_requested() && atomic_load(&runaway_flag)) {
            size_t freed = free_list(rows);
            say("runaway: cancelled, handler ran, freed %zu bytes", freed);
            return NULL;
        }
        atomic_fetch_add(rounds, 1);
        nap(5);
    }
    free_list(rows);
    say("runaway: not cancelled");
    return NULL;
}

/* ---- legacy: pthread_cancel ---- */
static void legacy_cleanup(void *arg) {
    size_t freed = free_list(*(struct node **)arg);
    say("legacy: cleanup ran, freed %zu bytes", freed);
}
static void legacy_note(void *arg) {
    (void)arg;
    say("legacy: second cleanup ran");
}
static void *legacy(void *arg) {
    (void)arg;
    struct node *rows = make_list(32, 64 << 10, 0x6b);
    pthread_cleanup_push(legacy_cleanup, &rows);
    pthread_cleanup_push(legacy_note, NULL);
    atomic_int *rounds = named("legacy");
    /* nap is a cancellation point: a round went by, a pending pthread_cancel would have acted. */
    while (!atomic_load(&stopping)) {
        nap(5);
        atomic_fetch_add(rounds, 1);
    }
    pthread_cleanup_pop(0);
    pthread_cleanup_pop(0);
    free_list(rows);
    say("legacy: not cancelled");
    return NULL;
}

/* ---- holders, small, short, grow ---- */
struct holder {
    const char *name;
    int blocks;
    size_t size;
    int fill;
};
struct held {
    struct holder *h;
    struct node *rows;
};
static void holder_cancelled(void *arg) {
    struct held *d = arg;
    size_t freed = free_list(d->rows);
    say("%s: cancelled, freed %zu bytes", d->h->name, freed);
}
static void *holder(void *arg) {
    struct held d = {arg, NULL};
    d.rows = make_list(d.h->blocks, d.h->size, d.h->fill);
    pthread_cleanup_push(holder_cancelled, &d);
    atomic_int *rounds = named(d.h->name);
    while (!atomic_load(&stopping)) {
        nap(5);
        atomic_fetch_add(rounds, 1);
    }
    pthread_cleanup_pop(0);
    say("%s %s", d.h->name, check_list(d.rows, d.h->fill) ? "ok" : "CORRUPT");
    free_list(d.rows);
    return NULL;
}
static void *shortlived(void *arg) {
    (void)arg;
    atomic_int *rounds = named("short");
    while (!atomic_load(&short_end)) {
        nap(5);
        atomic_fetch_add(rounds, 1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int grow_late = argc > 1 && strcmp(argv[1], "grow-late") == 0;
    static struct holder h1 = {"holder-1", 16, 64 << 10, 0x11};
    static struct holder h2 = {"holder-2", 16, 64 << 10, 0x22};
    static struct holder sm = {"small", 1, 4096, 0x33};
    /* One block each: live bytes jump over the test's limit in one step. */
    static struct holder ga = {"grow-a", 1, 2 << 20, 0x44};
    static struct holder gb = {"grow-b", 1, 6 << 20, 0x55};
    pthread_t t[8];
    int n = 0;
    pthread_create(&t[n++], NULL, holder, &h1);
    pthread_create(&t[n++], NULL, holder, &h2);
    if (grow_late) {
        pthread_create(&t[n++], NULL, holder, &ga);
    } else {
        pthread_create(&t[n++], NULL, runaway, NULL);
        pthread_create(&t[n++], NULL, legacy, NULL);
        pthread_create(&t[n++], NULL, holder, &sm);
    }
    pthread_t sh;
    pthread_create(&sh, NULL, shortlived, NULL);
    int short_joined = 0;
    wait_named(n + 1);
    say("ready");
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "end-short", 9) == 0) {
            atomic_store(&short_end, 1);
            pthread_join(sh, NULL);
            short_joined = 1;
            say("short ended");
        } else if (grow_late && strncmp(line, "grow-b", 6) == 0) {
            pthread_create(&t[n++], NULL, holder, &gb);
            say("grow-b started");
        } else if (strncmp(line, "rounds ", 7) == 0) {
            line[strcspn(line, "\n")] = 0;
            say("rounds %s %d", line + 7, rounds_of(line + 7));
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
    }
    atomic_store(&stopping, 1);
    atomic_store(&short_end, 1);
    if (!short_joined) pthread_join(sh, NULL);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    say("exit ok");
    return 0;
}
