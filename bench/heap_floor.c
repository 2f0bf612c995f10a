/* The physical floor of a heap scan, for bench/snapshot_cost.sh: copies the [heap] mapping of
 * process PID (the brk heap, where a single-threaded glibc program keeps its blocks) with
 * process_vm_readv, then reads the copy once word by word, and prints
 * "bytes copy_seconds read_seconds". The read is what a scan cannot do with less: every word
 * of the heap, once, in address order. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: heap_floor PID\n");
        return 2;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/maps", argv[1]);
    FILE *maps = fopen(path, "r");
    if (!maps) {
        perror(path);
        return 1;
    }
    char line[512];
    unsigned long start = 0, end = 0;
    while (fgets(line, sizeof line, maps)) {
        if (strstr(line, "[heap]")) {
            sscanf(line, "%lx-%lx", &start, &end);
            break;
        }
    }
    fclose(maps);
    if (end <= start) {
        fprintf(stderr, "no [heap] mapping in %s\n", path);
        return 1;
    }
    size_t len = end - start;
    uint64_t *copy = malloc(len);
    if (!copy) {
        perror("malloc");
        return 1;
    }
    double t0 = now();
    size_t done = 0;
    while (done < len) {
        size_t n = len - done < (1u << 26) ? len - done : (1u << 26);
        struct iovec local = {(char *)copy + done, n}, remote = {(void *)(start + done), n};
        ssize_t got = process_vm_readv(atoi(argv[1]), &local, 1, &remote, 1, 0);
        if (got <= 0) {
            perror("process_vm_readv");
            return 1;
        }
        done += (size_t)got;
    }
    double t1 = now();
    uint64_t sum = 0;
    for (size_t i = 0; i < len / 8; i++)
        sum += copy[i];
    double t2 = now();
    printf("%zu %.3f %.3f\n", len, t1 - t0, t2 - t1);
    return sum == 42; /* keeps the loop */
}
