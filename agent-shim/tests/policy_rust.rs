//! The Rust wrapper of the cooperative cancel (include/heaptui.rs) in a Rust target: cancelled
//! through the protocol under the agent, and running unchanged without it.

mod common;
mod policy_support;

use common::{TempDir, compile_rust};
use heaptui_protocol::Verdict;
use policy_support::Target;

fn source() -> String {
    format!(
        "mod heaptui {{\n{}\n}}\n{}",
        include_str!("../include/heaptui.rs").replace("#![allow(dead_code)]", ""),
        r#"
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};

static CANCEL: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

fn main() {
    let (named, is_named) = std::sync::mpsc::channel();
    let worker = std::thread::Builder::new()
        .name("rs-runaway".into())
        .spawn(move || {
            let rows: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 64 << 10]).collect();
            let registered = heaptui::on_cancel_set(&CANCEL);
            println!("registered {registered} agent {}", heaptui::agent_present());
            println!("tid rs-runaway {}", std::fs::read_link("/proc/thread-self").unwrap()
                .file_name().unwrap().to_str().unwrap());
            named.send(()).unwrap();
            while !STOP.load(Ordering::SeqCst) {
                if heaptui::cancel_requested() && CANCEL.load(Ordering::SeqCst) {
                    let n: usize = rows.iter().map(|r| r.len()).sum();
                    drop(rows);
                    println!("rs: cancelled, freed {n} bytes");
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            println!("rs: not cancelled, {} rows", rows.len());
        })
        .unwrap();
    is_named.recv().unwrap();
    println!("ready");
    for line in std::io::stdin().lock().lines() {
        if line.unwrap().starts_with("quit") { break; }
    }
    STOP.store(true, Ordering::SeqCst);
    worker.join().unwrap();
    println!("exit ok");
}
"#
    )
}

#[test]
fn a_rust_thread_registers_through_the_wrapper_and_is_cancelled() {
    let dir = TempDir::new("policy-rust");
    let exe = compile_rust(&dir, "rs_target", &source());
    let policy = "[[permit]]\nthread = \"rs-*\"\n";
    let t = Target::start(&dir, &exe, &[], Some(policy));
    t.wait_line("registered true agent true");
    let tid = t.tids()["rs-runaway"];
    let mut c = t.client();
    let v = c.cancel(tid, false);
    assert_eq!(v.verdict, Verdict::Done, "{v:?}");
    assert!(v.predicted_release.unwrap() >= 64 * (64 << 10), "{v:?}");
    let line = t.wait_line("rs: cancelled");
    assert_eq!(line, "rs: cancelled, freed 4194304 bytes");
    let lines = t.quit();
    assert!(lines.iter().any(|l| l == "exit ok"), "{lines:?}");
}

#[test]
fn without_the_agent_the_wrapper_says_so_and_the_program_runs() {
    let dir = TempDir::new("policy-rust-bare");
    let exe = compile_rust(&dir, "rs_target", &source());
    let mut child = std::process::Command::new(&exe)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .env_remove("LD_PRELOAD")
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(child.stdin.as_mut().unwrap(), "quit").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("registered false agent false"), "{text}");
    assert!(text.contains("rs: not cancelled, 64 rows"), "{text}");
}
