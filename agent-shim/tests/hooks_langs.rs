//! C++ (new/delete, std::vector, std::string, std::thread) and Rust (system allocator,
//! Vec/String/Box, threads) targets under the agent: normal output and exit code, every
//! free matched to a tracked block, and the target's own allocations counted.

mod common;

use common::*;

/// argv[1] = work scale (0 = the baseline: same runtime start-up and exit, no work).
const CPP: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

struct Node { Node *next; char pad[40]; };

static long work(int scale, int seed) {
    long sum = 0;
    for (int round = 0; round < scale; round++) {
        std::vector<int> v;
        for (int i = 0; i < 1000; i++) v.push_back(i + seed);
        std::string s;
        for (int i = 0; i < 100; i++) s += "0123456789abcdefghij";
        Node *head = nullptr;
        for (int i = 0; i < 100; i++) head = new Node{head, {}};
        while (head) { Node *n = head->next; delete head; head = n; }
        int *arr = new int[1000];
        arr[999] = round;
        sum += v[999] + (long)s.size() + arr[999];
        delete[] arr;
    }
    return sum;
}

int main(int argc, char **argv) {
    int scale = std::atoi(argv[1]);
    long results[4] = {};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; t++) threads.emplace_back([&, t] { results[t] = work(scale, t); });
    for (auto &t : threads) t.join();
    long total = results[0] + results[1] + results[2] + results[3];
    std::printf("total %ld\n", total);
    return 0;
}
"#;

fn expected_cpp_total(scale: i64) -> i64 {
    (0..4)
        .map(|t| (0..scale).map(|round| 999 + t + 2000 + round).sum::<i64>())
        .sum()
}

#[test]
fn cpp_target_runs_normally_and_every_delete_is_known() {
    let dir = TempDir::new("hooks-cpp");
    let exe = compile_cpp(&dir, "cpp", CPP, &[]);
    let base = run_preloaded(&dir, &exe, &["0"], &[]);
    assert_eq!(
        (base.code, base.stdout.as_str()),
        (Some(0), "total 0\n"),
        "{}",
        base.stderr
    );
    let run = run_preloaded(&dir, &exe, &["20"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, format!("total {}\n", expected_cpp_total(20)));
    let d = run.summary().minus(&base.summary());
    // Per round and thread: 100 nodes + 1 array + the vector's and string's growth steps.
    assert!(d["malloc"] >= 4 * 20 * 101, "{d:?}");
    assert_eq!(d["live_blocks"], 0, "{d:?}");
    assert_eq!(d["live_bytes"], 0, "{d:?}");
    assert_eq!(d["unknown_frees"], 0);
    assert_eq!(d["untracked"], 0);
}

const RUST: &str = r#"
use std::collections::HashMap;

fn work(scale: usize, seed: usize) -> usize {
    let mut sum = 0;
    for round in 0..scale {
        let v: Vec<usize> = (0..1000).map(|i| i + seed).collect();
        let mut s = String::new();
        for _ in 0..100 { s.push_str("0123456789abcdefghij"); }
        let boxed: Vec<Box<[u8; 40]>> = (0..100).map(|_| Box::new([round as u8; 40])).collect();
        let mut m = HashMap::new();
        for i in 0..100 { m.insert(i, i * 2); }
        sum += v[999] + s.len() + boxed.len() + m[&99];
    }
    sum
}

fn main() {
    let scale: usize = std::env::args().nth(1).unwrap().parse().unwrap();
    let threads: Vec<_> = (0..4).map(|t| std::thread::spawn(move || work(scale, t))).collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    println!("total {total}");
}
"#;

#[test]
fn rust_target_runs_normally_and_every_free_is_known() {
    let dir = TempDir::new("hooks-rust");
    let exe = compile_rust(&dir, "rusty", RUST);
    let base = run_preloaded(&dir, &exe, &["0"], &[]);
    assert_eq!(
        (base.code, base.stdout.as_str()),
        (Some(0), "total 0\n"),
        "{}",
        base.stderr
    );
    let run = run_preloaded(&dir, &exe, &["20"], &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let per_round = |t: usize| 999 + t + 2000 + 100 + 198;
    let total: usize = (0..4).map(|t| per_round(t) * 20).sum();
    assert_eq!(run.stdout, format!("total {total}\n"));
    let d = run.summary().minus(&base.summary());
    // Per round and thread: 100 boxes + the vectors, string and map.
    assert!(d["malloc"] >= 4 * 20 * 100, "{d:?}");
    assert_eq!(d["live_blocks"], 0, "{d:?}");
    assert_eq!(d["live_bytes"], 0, "{d:?}");
    assert_eq!(d["unknown_frees"], 0);
    assert_eq!(d["untracked"], 0);
}
