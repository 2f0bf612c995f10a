//! The target of the outside-capture tests (`outside_cli`, `outside_safety`): a C program with
//! a known heap, started without the agent, and the check that a process is neither stopped nor
//! traced.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::live_common::compile_c;

/// A program that keeps a known heap and uses no stdio (whose buffers would be blocks too):
/// a list of 200 nodes of 40 usable bytes with every third one freed, a 1 MiB block (an
/// mmapped chunk, which `check` reads so that the compiler keeps its static pointer) and, in a second thread, 50 blocks of 24 usable bytes (another arena). It
/// prints `ready OBJECTS BYTES` (their `malloc_usable_size`) and answers `check` with the sum
/// of its list, then `quit` with exit 0.
pub const TARGET: &str = r#"
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct node { struct node *next; long value; char pad[24]; };
static struct node *list;
static void *big;
static unsigned long objects, bytes;
static pthread_barrier_t made;

static void say(const char *text) { write(1, text, strlen(text)); }
static void count(void *p) { objects++; bytes += malloc_usable_size(p); }

static void *worker(void *arg) {
  void *mine[50];
  for (int i = 0; i < 50; i++) mine[i] = malloc(24);
  for (int i = 0; i < 50; i++) count(mine[i]);
  pthread_barrier_wait(&made);
  pause();
  return mine[0];
}

int main(void) {
  pthread_barrier_init(&made, 0, 2);
  pthread_t t;
  pthread_create(&t, 0, worker, 0);
  struct node *freed[200];
  int n = 0;
  for (long i = 0; i < 200; i++) {
    struct node *e = malloc(sizeof *e);
    e->value = i;
    if (i % 3 == 0) { freed[n++] = e; continue; }
    e->next = list;
    list = e;
    count(e);
  }
  for (int i = 0; i < n; i++) free(freed[i]);
  big = calloc(1, 1 << 20);
  count(big);
  pthread_barrier_wait(&made);
  char line[128];
  snprintf(line, sizeof line, "ready %lu %lu\n", objects, bytes);
  say(line);
  char cmd[64];
  for (;;) {
    ssize_t got = read(0, cmd, sizeof cmd - 1);
    if (got <= 0 || strncmp(cmd, "quit", 4) == 0) return 0;
    long sum = ((char *)big)[0];
    for (struct node *e = list; e; e = e->next) sum += e->value;
    snprintf(line, sizeof line, "sum %ld\n", sum);
    say(line);
  }
}
"#;

/// The sum `check` answers: the values 0..200 that are not multiples of 3.
pub const SUM: &str = "sum 13267";

/// A running target, killed when dropped.
pub struct Target {
    pub child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// The objects and bytes it says it holds.
    pub objects: u64,
    pub bytes: u64,
}

impl Target {
    pub fn start(mut command: Command) -> Target {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let mut f = line.split_whitespace();
        assert_eq!(f.next(), Some("ready"), "{line:?}");
        let objects = f.next().unwrap().parse().unwrap();
        let bytes = f.next().unwrap().parse().unwrap();
        Target {
            child,
            stdin,
            stdout,
            objects,
            bytes,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Asks for the list's sum: the program runs and its heap is intact.
    pub fn check(&mut self) -> String {
        writeln!(self.stdin, "check").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    pub fn quit(mut self) -> Option<i32> {
        writeln!(self.stdin, "quit").unwrap();
        self.child.wait().unwrap().code()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn target_exe(dir: &Path) -> std::path::PathBuf {
    compile_c(dir, "kept", TARGET)
}

/// Whether process `pid` is traced, or one of its threads stopped.
pub fn stopped_or_traced(pid: u32) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .map(str::trim)
        .unwrap();
    if tracer != "0" {
        return Some(format!("traced by {tracer}"));
    }
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
        let state = stat.rsplit_once(')').unwrap().1.trim_start();
        if state.starts_with(['t', 'T']) {
            return Some(format!("a thread in state {state:.1}"));
        }
    }
    None
}
