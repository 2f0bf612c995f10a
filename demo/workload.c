/*
 * The heaptui demo workload: a small "server" whose heap has every shape heaptui explains.
 *
 *   worker-1..4     request threads: private buffers per request (frame-proprietary), a request
 *                   context passed down several frames (frame-shared), and a pointer to the cache
 *   cache           one cache built by main and referenced by every worker (thread-shared)
 *   config          a table reachable only from a global (global-only)
 *   log-shipper     leaks a little on every batch (definitely and indirectly lost blocks)
 *   report-builder  a runaway report that keeps growing; it polls heaptui's cooperative cancel
 *                   (through a weak symbol, so the program runs unchanged without the agent) and
 *                   starts over at a cap so a demo never exhausts the machine
 *
 * Every thread sleeps between steps: the workload is meant to be watched, not to be fast.
 * Once every thread has started, named itself and allocated its first data (the runaway: its
 * first 8 MiB), main prints "demo: ready" (heaptui demo waits for that line before its first
 * snapshot, so the ranking shows every thread as it runs, the runaway first). It runs until it receives SIGTERM or SIGINT, then exits 0.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Exported by the heaptui agent when it is preloaded; NULL otherwise. */
extern int heaptui_cancel_requested(void) __attribute__((weak));

#define WORKERS 4
#define CACHE_ENTRIES 256
#define REPORT_CAP_ROWS 40000 /* ~160 MiB of rows before the report starts over */
/* The runaway says it is ready once it is the runaway: 8 MiB of rows (1.6 s), more than any
 * other thread holds, so the first snapshot already ranks it first. */
#define REPORT_READY_ROWS 2048

static volatile sig_atomic_t stopping;

/* How many threads have started, named themselves and allocated their first data. */
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
static int ready_threads;

/* Called once by each thread when its initial heap is in place. */
static void thread_ready(void) {
    pthread_mutex_lock(&ready_lock);
    ready_threads++;
    pthread_cond_broadcast(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
}

/* Waits until `n` threads have called thread_ready(). */
static void wait_ready(int n) {
    pthread_mutex_lock(&ready_lock);
    while (ready_threads < n) {
        pthread_cond_wait(&ready_cond, &ready_lock);
    }
    pthread_mutex_unlock(&ready_lock);
}

struct cache_entry {
    char key[32];
    char *value;
    size_t value_len;
};

struct cache {
    pthread_mutex_t lock;
    struct cache_entry *entries;
    size_t count;
};

struct config_table {
    char *names[16];
    size_t count;
};

/* Reachable from this global only. */
static struct config_table *config;

struct request_context {
    unsigned long id;
    char *headers;
    char *body;
    struct cache *cache;
};

struct worker_args {
    int index;
    struct cache *cache;
};

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && !stopping) {
    }
}

static inline __attribute__((always_inline)) void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "demo: out of memory allocating %zu bytes\n", n);
        exit(1);
    }
    return p;
}

static struct cache *build_cache(void) {
    struct cache *c = xmalloc(sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->count = CACHE_ENTRIES;
    c->entries = calloc(CACHE_ENTRIES, sizeof *c->entries);
    for (size_t i = 0; i < CACHE_ENTRIES; i++) {
        snprintf(c->entries[i].key, sizeof c->entries[i].key, "entry-%zu", i);
        c->entries[i].value_len = 4096;
        c->entries[i].value = xmalloc(c->entries[i].value_len);
        memset(c->entries[i].value, 'v', c->entries[i].value_len);
    }
    return c;
}

static void load_config(void) {
    config = xmalloc(sizeof *config);
    config->count = 16;
    for (size_t i = 0; i < config->count; i++) {
        config->names[i] = xmalloc(512);
        snprintf(config->names[i], 512, "setting-%zu", i);
    }
}

__attribute__((noinline)) static size_t render_response(struct request_context *ctx, char *scratch) {
    pthread_mutex_lock(&ctx->cache->lock);
    struct cache_entry *e = &ctx->cache->entries[ctx->id % ctx->cache->count];
    size_t n = e->value_len < 1024 ? e->value_len : 1024;
    memcpy(scratch, e->value, n);
    pthread_mutex_unlock(&ctx->cache->lock);
    nap_ms(150); /* the slow part of every request: most captures land here */
    return n + strlen(ctx->headers);
}

__attribute__((noinline)) static size_t handle_request(struct request_context *ctx) {
    char *scratch = xmalloc(16384); /* this frame's own buffer */
    size_t n = render_response(ctx, scratch);
    free(scratch);
    return n;
}

__attribute__((noinline)) static size_t parse_request(struct request_context *ctx) {
    ctx->headers = xmalloc(2048);
    snprintf(ctx->headers, 2048, "GET /item/%lu HTTP/1.1", ctx->id);
    ctx->body = xmalloc(8192 + (ctx->id % 8) * 1024);
    memset(ctx->body, 'b', 8192);
    size_t n = handle_request(ctx);
    return n;
}

__attribute__((noinline)) static size_t serve_request(struct cache *cache, unsigned long id) {
    struct request_context *ctx = xmalloc(sizeof *ctx);
    ctx->id = id;
    ctx->cache = cache;
    size_t n = parse_request(ctx);
    free(ctx->body);
    free(ctx->headers);
    free(ctx);
    return n;
}

static void *worker_main(void *arg) {
    struct worker_args *w = arg;
    char name[16];
    snprintf(name, sizeof name, "worker-%d", w->index);
    pthread_setname_np(pthread_self(), name);
    /* A per-worker connection buffer held for the thread's whole life. */
    char *connection_buffer = xmalloc(64 * 1024 * (size_t)w->index);
    memset(connection_buffer, 0, 64 * 1024 * (size_t)w->index);
    thread_ready();
    unsigned long id = (unsigned long)w->index * 1000000UL;
    while (!stopping) {
        serve_request(w->cache, id++);
        nap_ms(20);
    }
    free(connection_buffer);
    return NULL;
}

struct log_record {
    struct log_record *next;
    char *text;
};

__attribute__((noinline)) static void ship_batch(unsigned long batch) {
    struct log_record *head = NULL;
    for (int i = 0; i < 4; i++) {
        struct log_record *r = xmalloc(sizeof *r);
        r->text = xmalloc(256);
        snprintf(r->text, 256, "batch %lu record %d", batch, i);
        r->next = head;
        head = r;
    }
    /* The bug: every eighth batch is never freed, so its records leak. */
    if (batch % 8 == 0) {
        head = NULL;
        return;
    }
    while (head) {
        struct log_record *next = head->next;
        free(head->text);
        free(head);
        head = next;
    }
}

static void *log_shipper_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "log-shipper");
    thread_ready(); /* its batches come and go: nothing is held from the start */
    for (unsigned long batch = 1; !stopping; batch++) {
        ship_batch(batch);
        nap_ms(100);
    }
    return NULL;
}

struct report_row {
    struct report_row *next;
    char cells[4096 - sizeof(struct report_row *)];
};

__attribute__((noinline)) static struct report_row *append_rows(struct report_row *rows, int n) {
    for (int i = 0; i < n; i++) {
        struct report_row *r = xmalloc(sizeof *r);
        memset(r->cells, 'r', sizeof r->cells);
        r->next = rows;
        rows = r;
    }
    return rows;
}

static void free_rows(struct report_row *rows) {
    while (rows) {
        struct report_row *next = rows->next;
        free(rows);
        rows = next;
    }
}

static int cancel_requested(void) {
    return heaptui_cancel_requested ? heaptui_cancel_requested() : 0;
}

/* The runaway: keeps adding rows to a report nobody reads. */
__attribute__((noinline)) static void build_report(void) {
    struct report_row *rows = NULL;
    long count = 0;
    int told_ready = 0;
    while (!stopping && !cancel_requested()) {
        rows = append_rows(rows, 64); /* 256 KiB per step */
        count += 64;
        if (!told_ready && count >= REPORT_READY_ROWS) {
            told_ready = 1;
            thread_ready();
        }
        if (count >= REPORT_CAP_ROWS) {
            free_rows(rows);
            rows = NULL;
            count = 0;
        }
        nap_ms(50);
    }
    if (!told_ready) {
        thread_ready(); /* stopped before it grew: main must not wait for it */
    }
    free_rows(rows);
}

static void *report_builder_main(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "report-builder");
    build_report();
    if (!stopping) {
        fprintf(stderr, "demo: report-builder cancelled, its rows freed\n");
    }
    return NULL;
}

static void on_signal(int sig) {
    (void)sig;
    stopping = 1;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    pthread_setname_np(pthread_self(), "demo-main");

    load_config();
    struct cache *cache = build_cache();
    struct worker_args args[WORKERS];
    pthread_t threads[WORKERS + 2];
    for (int i = 0; i < WORKERS; i++) {
        args[i] = (struct worker_args){.index = i + 1, .cache = cache};
        pthread_create(&threads[i], NULL, worker_main, &args[i]);
    }
    pthread_create(&threads[WORKERS], NULL, log_shipper_main, NULL);
    pthread_create(&threads[WORKERS + 1], NULL, report_builder_main, NULL);
    wait_ready(WORKERS + 2);
    printf("demo: ready (pid %d, %d threads); stop with SIGTERM\n", (int)getpid(), WORKERS + 3);
    fflush(stdout);
    while (!stopping) {
        nap_ms(200);
    }
    for (int i = 0; i < WORKERS + 2; i++) {
        pthread_join(threads[i], NULL);
    }
    return 0;
}
