/* What the agent may do with the program's descriptors: nothing.
 *
 *   quiet N              forks N children that allocate and exit normally, then exits
 *   reuse DATA           closes fd 2, opens DATA (it gets fd 2), writes a line to it, forks a
 *                        child that writes a line too and exits normally, then exits
 *   closer DATA0 DATA2   closes fds 0 and 2 and re-executes itself under the agent
 *                        (LD_PRELOAD=$AGENT_SO) as "reopen DATA0 DATA2"
 *   reopen DATA0 DATA2   opens DATA0 and DATA2, which must get the lowest free numbers, 0
 *                        and 2 (the agent must not hold them), prints the numbers and
 *                        whether the agent is loaded, writes a line to each and forks a
 *                        child that exits normally
 *
 * Output through write(2) on fd 1 only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void say(int fd, const char *s) { write(fd, s, strlen(s)); }

static void child_exits_normally(int data_fd) {
    pid_t pid = fork();
    if (pid == 0) {
        free(malloc(100));
        if (data_fd >= 0) say(data_fd, "child\n");
        exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
}

static int open_data(const char *path) {
    return open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "quiet") && argc > 2) {
        int n = atoi(argv[2]);
        for (int i = 0; i < n; i++) child_exits_normally(-1);
        say(1, "ok\n");
        return 0;
    }
    if (!strcmp(mode, "reuse") && argc > 2) {
        close(2);
        int fd = open_data(argv[2]);
        if (fd != 2) {
            say(1, "data file not on fd 2\n");
            return 1;
        }
        say(2, "parent\n");
        child_exits_normally(2);
        say(1, "ok\n");
        return 0;
    }
    if (!strcmp(mode, "closer") && argc > 3) {
        const char *agent = getenv("AGENT_SO");
        if (!agent) return 2;
        static char preload[4096];
        snprintf(preload, sizeof preload, "LD_PRELOAD=%s", agent);
        char *env[256];
        int n = 0;
        for (char **e = environ; *e && n < 254; e++)
            if (strncmp(*e, "LD_PRELOAD=", 11)) env[n++] = *e;
        env[n++] = preload;
        env[n] = NULL;
        close(0);
        close(2);
        char *args[] = {argv[0], "reopen", argv[2], argv[3], NULL};
        execve("/proc/self/exe", args, env);
        say(1, "exec failed\n");
        return 3;
    }
    if (!strcmp(mode, "reopen") && argc > 3) {
        int a = open_data(argv[2]);
        int b = open_data(argv[3]);
        char line[64];
        /* The agent's C API is there only when the agent is loaded. */
        int agent = dlsym(RTLD_DEFAULT, "heaptui_counters") != NULL;
        snprintf(line, sizeof line, "fds %d %d agent %d\n", a, b, agent);
        say(1, line);
        say(a, "data0\n");
        say(b, "data2\n");
        child_exits_normally(b);
        return 0;
    }
    say(1, "usage\n");
    return 2;
}
