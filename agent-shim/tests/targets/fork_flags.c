/* Pointers kept only in mappings the program marked for fork (docs/reference.md §3, mapped
 * memory): roots all the same, as for memcheck, which scans the process itself, while the
 * capture scans a fork child of it.
 *   2468  its only pointer is in an anonymous mapping marked MADV_WIPEONFORK (a fork child
 *         reads it as zeros)
 *   1357  its only pointer is in an anonymous mapping marked MADV_DONTFORK (a fork child has
 *         no such mapping)
 * After the snapshot the program checks, in /proc/self/smaps, that both mappings still carry
 * their flag and prints "flags kept", and that the words are still there. */
#include <sys/mman.h>

__attribute__((noinline)) static void *fill(size_t size) {
    char *p = malloc(size);
    memset(p, 1, size);
    return p;
}

/* Whether the mapping starting at `start` has `flag` among its smaps VmFlags. */
static int has_flag(void *start, const char *flag) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512], head[32];
    snprintf(head, sizeof head, "%lx-", (unsigned long)start);
    int in = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, head, strlen(head)) == 0) in = 1;
        else if (in && strncmp(line, "VmFlags:", 8) == 0) {
            char word[8];
            snprintf(word, sizeof word, " %s ", flag);
            found = strstr(line, word) != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

static void *marked(int advice) {
    void **m = mmap(NULL, 4 << 12, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || madvise(m, 4 << 12, advice) != 0) exit(2);
    return m;
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    void **wiped = marked(MADV_WIPEONFORK);
    void **hidden = marked(MADV_DONTFORK);
    wiped[100] = fill(2468);
    hidden[200] = fill(1357);
    snapshot_and_wait(1);
    int kept = has_flag(wiped, "wf") && has_flag(hidden, "dc") && wiped[100] && hidden[200];
    printf("flags %s\n", kept ? "kept" : "LOST");
    return 0;
}
