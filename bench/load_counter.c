/* What noticing module loads would cost a hook (hooks/unwind/loads.rs): dl_iterate_phdr's
 * dlpi_adds, the documented count of loads, asked for in every hook, against the plain loads
 * of the watched words of the loader's data that the hooks do instead. Each is timed on 1
 * and on 2 threads at once (ns per call, per thread; the loader's lock is one for all).
 * Build and run: bench/load_counter.sh. */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { CALLS = 2000000 };

static int first(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

/* Stand-ins for the watched words (two, as the agent finds at start on glibc 2.36). */
static _Atomic unsigned long long words[2];
static unsigned long long seen[2];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *by_iterate(void *arg) {
    unsigned long long adds = 0, sum = 0;
    double t0 = now();
    for (int i = 0; i < CALLS; i++) {
        dl_iterate_phdr(first, &adds);
        sum += adds;
    }
    *(double *)arg = (now() - t0) / CALLS * 1e9;
    return (void *)(unsigned long)(sum == 1);
}

static void *by_words(void *arg) {
    unsigned long long changed = 0;
    double t0 = now();
    for (int i = 0; i < CALLS; i++)
        for (int k = 0; k < 2; k++)
            changed += atomic_load_explicit(&words[k], memory_order_relaxed) != seen[k];
    *(double *)arg = (now() - t0) / CALLS * 1e9;
    return (void *)(unsigned long)changed;
}

static void run(const char *name, void *(*f)(void *)) {
    for (int threads = 1; threads <= 2; threads++) {
        pthread_t t[2];
        double ns[2];
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, f, &ns[i]);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        double sum = 0;
        for (int i = 0; i < threads; i++) sum += ns[i];
        printf("| %s | %d | %.1f |\n", name, threads, sum / threads);
    }
}

int main(void) {
    printf("| per hook | threads | ns per call |\n|---|---:|---:|\n");
    run("`dl_iterate_phdr` (first module's `dlpi_adds`)", by_iterate);
    run("two watched words, plain loads", by_words);
    return 0;
}
