//! Names a user can tell apart (docs/reference.md §3 "Labels"), on real programs under the
//! real agent: an allocation made through an inlined or wrapping function is named by the
//! caller, with the caller's own line — in the agent's answers, in `heaptui report` of its
//! snapshot, and for a program whose debug information is in a separate file — and libc's
//! frames are named from libc's debug file.

mod live_common;

use std::collections::BTreeMap;
use std::path::Path;

use heaptui_protocol::message::{Page, RequestBody, Response, SiteKey, Sort};
use live_common::*;

/// A C program built at -O2: `xmalloc` is inlined into every caller (and glibc's `strdup`
/// allocates for its caller), `fill_cache` is itself inlined into `main`, and `my_pool_get`
/// is an allocator of the program's own that only `HEAPTUI_ALLOC_WRAPPERS` /`--wrappers`
/// make a wrapper. Each block has a size of its own; `keep` holds them all. A second thread
/// waits in `read`, so that its frames show libc's thread start.
const C_SRC: &str = r#"#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline __attribute__((always_inline)) void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) abort();
    return p;
}

__attribute__((noinline)) void *my_pool_get(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" ::: "memory");
    return p;
}

void *keep[8];

__attribute__((noinline)) void build_index(void) {
    keep[0] = xmalloc(1000); /* AT build_index */
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void load_config(void) {
    keep[1] = xmalloc(2000); /* AT load_config */
    keep[2] = strdup("a setting the configuration keeps"); /* AT load_config strdup */
    __asm__ volatile("" ::: "memory");
}

static inline void fill_cache(void) {
    keep[3] = xmalloc(3000); /* AT fill_cache */
}

__attribute__((noinline)) void pooled(void) {
    keep[4] = my_pool_get(4000); /* AT pooled */
    __asm__ volatile("" ::: "memory");
}

static int pipe_fds[2];

static void *waiter(void *arg) {
    char c;
    (void)arg;
    return (void *)(long)read(pipe_fds[0], &c, 1);
}

int main(void) {
    pthread_t t;
    char line[64];
    if (pipe(pipe_fds) != 0 || pthread_create(&t, NULL, waiter, NULL) != 0) return 1;
    build_index();
    load_config();
    fill_cache();
    pooled();
    while (fgets(line, sizeof line, stdin)) {
        printf("ok\n");
        fflush(stdout);
    }
    if (write(pipe_fds[1], "x", 1) != 1) return 2;
    pthread_join(t, NULL);
    return 0;
}
"#;

/// The line of `src` holding the marker `/* AT what */`.
fn line_of(src: &str, what: &str) -> usize {
    let marker = format!("/* AT {what} */");
    src.lines()
        .position(|l| l.contains(&marker))
        .unwrap_or_else(|| panic!("no marker {marker}"))
        + 1
}

/// Each live block's size → its site's label, as the agent answers them.
fn agent_labels(target: &Target) -> BTreeMap<u64, String> {
    let mut client = target.client();
    client.snapshot();
    let Response::Sites(page) = client.ask(RequestBody::Sites {
        sort: Sort::desc(SiteKey::LiveBytes),
        page: Page::FIRST,
    }) else {
        panic!("no sites")
    };
    page.rows
        .into_iter()
        .filter(|row| row.blocks == 1)
        .map(|row| (row.live_bytes, row.label))
        .collect()
}

/// Each global-only group's size → its label, from `heaptui report FILE --json` with `args`.
fn report_labels(snapshot: &Path, args: &[&str]) -> BTreeMap<u64, String> {
    let out = heaptui()
        .arg("report")
        .arg(snapshot)
        .arg("--json")
        .args(args)
        .env_remove("HEAPTUI_ALLOC_WRAPPERS")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["objects"] == 1)
        .map(|g| {
            (
                g["size"].as_u64().unwrap(),
                g["label"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn expect(labels: &BTreeMap<u64, String>, size: u64, label: &str) {
    assert_eq!(
        labels.get(&size).map(String::as_str),
        Some(label),
        "the block of {size} bytes; every label: {labels:#?}"
    );
}

/// Runs `exe` under the agent with `env`, checks the labels the agent gives, saves its
/// snapshot to `dir/<name>.hsnap` and returns the snapshot's path.
fn check_c_program(dir: &Path, exe: &Path, name: &str) -> std::path::PathBuf {
    let mut target = Target::start(
        dir,
        exe,
        &format!("unix:{}/{name}.sock", dir.display()),
        &[("HEAPTUI_ALLOC_WRAPPERS", "my_pool_get")],
    );
    assert_eq!(target.command("ready?"), "ok");
    let at = |what: &str| format!("(labels.c:{})", line_of(C_SRC, what));
    let labels = agent_labels(&target);
    expect(&labels, 1000, &format!("build_index {}", at("build_index")));
    expect(&labels, 2000, &format!("load_config {}", at("load_config")));
    expect(
        &labels,
        "a setting the configuration keeps".len() as u64 + 1,
        &format!("load_config {}", at("load_config strdup")),
    );
    expect(&labels, 3000, &format!("fill_cache {}", at("fill_cache")));
    expect(&labels, 4000, &format!("pooled {}", at("pooled")));

    let snapshot = dir.join(format!("{name}.hsnap"));
    let out = heaptui()
        .args(["snapshot", &target.address, "-o"])
        .arg(&snapshot)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (out, log) = target.finish();
    assert!(out.status.success(), "{log}");
    snapshot
}

#[test]
fn inlined_and_wrapped_allocations_are_named_by_their_callers_in_c_at_o2() {
    let dir = Scratch::new("labels-c");
    let exe = compile("cc", dir.path(), "labels.c", C_SRC, &["-O2"]);
    let snapshot = check_c_program(dir.path(), &exe, "labels");

    // heaptui names the sites of a snapshot file itself: with the built-in wrappers only,
    // the program's own allocator is a site; `--wrappers` makes it a wrapper.
    let at = |what: &str| format!("(labels.c:{})", line_of(C_SRC, what));
    let built_in = report_labels(&snapshot, &[]);
    expect(
        &built_in,
        1000,
        &format!("build_index {}", at("build_index")),
    );
    expect(&built_in, 3000, &format!("fill_cache {}", at("fill_cache")));
    assert!(
        built_in[&4000].starts_with("my_pool_get (labels.c:"),
        "{built_in:#?}"
    );
    let wrapped = report_labels(&snapshot, &["--wrappers", "my_pool_.*"]);
    expect(&wrapped, 4000, &format!("pooled {}", at("pooled")));
    expect(
        &wrapped,
        1000,
        &format!("build_index {}", at("build_index")),
    );

    // A bad pattern is a usage error naming it.
    let out = heaptui()
        .arg("report")
        .arg(&snapshot)
        .args(["--wrappers", "my_pool_(get"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"my_pool_(get\" is not a valid regex"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn a_program_whose_debug_information_is_in_a_separate_file_is_named_the_same() {
    let dir = Scratch::new("labels-debuglink");
    let exe = compile("cc", dir.path(), "labels.c", C_SRC, &["-O2"]);
    // What distributions ship: the program stripped, its DWARF and symbols in a file that
    // `.gnu_debuglink` names, here in the `.debug/` directory beside it.
    let debug_dir = dir.path().join(".debug");
    std::fs::create_dir(&debug_dir).unwrap();
    let debug = debug_dir.join("labels.debug");
    for args in [
        vec!["--only-keep-debug".into(), exe.clone(), debug.clone()],
        vec!["--strip-all".into(), exe.clone()],
        vec![
            format!("--add-gnu-debuglink={}", debug.display()).into(),
            exe.clone(),
        ],
    ] {
        let out = std::process::Command::new("objcopy")
            .args(&args)
            .output()
            .expect("objcopy (binutils)");
        assert!(
            out.status.success(),
            "objcopy {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let nm = std::process::Command::new("nm").arg(&exe).output().unwrap();
    assert!(
        String::from_utf8_lossy(&nm.stderr).contains("no symbols"),
        "the program is stripped"
    );
    check_c_program(dir.path(), &exe, "stripped");
}

#[test]
fn libc_frames_are_named_from_its_debug_file() {
    // Debian's libc6-dbg puts libc's symbols and DWARF under /usr/lib/debug/.build-id/
    // (.ci/run installs it): the thread start and clone frames, which libc does not export,
    // are named as gdb names them.
    let libc = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.split_whitespace()
                .nth(5)
                .filter(|p| p.contains("/libc.so.6"))
                .map(str::to_owned)
        })
        .expect("libc is mapped");
    let id = std::process::Command::new("readelf")
        .args(["-n", &libc])
        .output()
        .unwrap();
    let id = String::from_utf8_lossy(&id.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_owned))
        .expect("libc has a build id");
    let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
    assert!(
        Path::new(&debug).is_file(),
        "{debug} is missing: install libc's debug file (Debian: apt-get install libc6-dbg)"
    );

    let dir = Scratch::new("labels-libc");
    let exe = compile("cc", dir.path(), "labels.c", C_SRC, &["-O2"]);
    let mut target = Target::start(
        dir.path(),
        &exe,
        &format!("unix:{}/libc.sock", dir.path().display()),
        &[],
    );
    assert_eq!(target.command("ready?"), "ok");
    let mut client = target.client();
    client.snapshot();
    // The waiting thread: the one whose frames include `waiter`.
    let names: Vec<(String, String)> = client
        .threads()
        .rows
        .iter()
        .map(|t| {
            let Response::Frames(frames) = client.ask(RequestBody::Frames {
                tid: t.tid,
                page: Page::FIRST,
            }) else {
                panic!("no frames of {}", t.tid)
            };
            frames
                .rows
                .into_iter()
                .map(|f| (f.function, f.module))
                .collect::<Vec<_>>()
        })
        .find(|frames| frames.iter().any(|(f, _)| f == "waiter"))
        .expect("the waiting thread");
    for wanted in ["start_thread", "clone3"] {
        assert!(
            names.iter().any(|(f, m)| f == wanted && m == "libc.so.6"),
            "{wanted} in libc.so.6: {names:?}"
        );
    }
    assert!(
        !names.iter().any(|(f, _)| f.starts_with("libc.so.6+")),
        "every libc frame is named: {names:?}"
    );
    drop(client);
    let (out, log) = target.finish();
    assert!(out.status.success(), "{log}");
}

/// A C++ program at -O2: `new` and `new[]`, directly and through an inlined helper.
const CPP_SRC: &str = r#"#include <cstdio>
#include <iostream>
#include <string>

struct Widget { char bytes[600]; };

void *keep[8];

template <typename T> static inline T *make() {
    return new T(); /* AT make */
}

__attribute__((noinline)) void make_widget() {
    keep[0] = new Widget(); /* AT make_widget */
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void make_buffer() {
    keep[1] = new char[700]; /* AT make_buffer */
    __asm__ volatile("" ::: "memory");
}

struct Big { char bytes[800]; };

__attribute__((noinline)) void make_big() {
    keep[2] = make<Big>(); /* AT make_big */
    __asm__ volatile("" ::: "memory");
}

int main() {
    make_widget();
    make_buffer();
    make_big();
    std::string line;
    while (std::getline(std::cin, line)) std::cout << "ok" << std::endl;
    return 0;
}
"#;

#[test]
fn new_and_inlined_helpers_are_named_by_their_callers_in_cpp_at_o2() {
    let dir = Scratch::new("labels-cpp");
    let exe = compile("c++", dir.path(), "labels.cpp", CPP_SRC, &["-O2"]);
    let mut target = Target::start(
        dir.path(),
        &exe,
        &format!("unix:{}/cpp.sock", dir.path().display()),
        &[],
    );
    assert_eq!(target.command("ready?"), "ok");
    let at = |what: &str| format!("(labels.cpp:{})", line_of(CPP_SRC, what));
    let labels = agent_labels(&target);
    expect(
        &labels,
        600,
        &format!("make_widget() {}", at("make_widget")),
    );
    expect(
        &labels,
        700,
        &format!("make_buffer() {}", at("make_buffer")),
    );
    // `make<Big>` is inlined into `make_big`, but it is no wrapper: it names the site, at
    // its own line (DWARF names an inlined function without its parameters).
    expect(&labels, 800, &format!("make<Big> {}", at("make")));
    let (out, log) = target.finish();
    assert!(out.status.success(), "{log}");
}
