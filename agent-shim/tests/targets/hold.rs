// Rust with the system allocator: a Vec held by one function's frame.
use std::io::Read;
use std::path::{Path, PathBuf};

extern "C" {
    fn raise(sig: i32) -> i32;
    fn _exit(code: i32) -> !;
}
const SIGUSR2: i32 = 12;

#[inline(never)]
fn scrub_stack() {
    let mut buf = [0u8; 65536];
    std::hint::black_box(&mut buf);
}

/// The agent's "snapshot failed:" line in its log, if it logged one. The log is read into a
/// buffer on the stack: nothing is allocated while the snapshot may be looking at the heap.
#[inline(never)]
fn capture_failure(log: &Path) -> Option<String> {
    let mut buf = [0u8; 16384];
    let len = std::fs::File::open(log).and_then(|mut f| f.read(&mut buf)).ok()?;
    let text = &buf[..len];
    let needle = b"snapshot failed:";
    let at = text.windows(needle.len()).position(|w| w == needle)?;
    let line = text[at..].split(|&b| b == b'\n').next()?;
    Some(String::from_utf8_lossy(line).into_owned())
}

/// Raises SIGUSR2 and waits for snapshot `n`'s file; a snapshot the agent says failed, or a
/// file that has not come after 30 s, ends the process at once with the reason (as sync.h's).
#[inline(never)]
fn snapshot_and_wait(n: u32) {
    scrub_stack();
    let prefix = std::env::var("HEAPTUI_DUMP").unwrap_or_default();
    let log = PathBuf::from(std::env::var_os("HEAPTUI_LOG").unwrap_or_default());
    let path = PathBuf::from(format!("{prefix}.{}.{n}.hsnap", std::process::id()));
    // SAFETY: raising a signal at our own process.
    unsafe { raise(SIGUSR2) };
    let mut waited = 0;
    while !path.exists() {
        let failed = waited % 20 == 19 && capture_failure(&log).is_some();
        if failed || waited == 30000 {
            let why = capture_failure(&log).unwrap_or_default();
            let what = if failed { "failed" } else { "never came (30 s)" };
            eprintln!("snapshot {n} {what}: {why}");
            // SAFETY: ends the process without the exit snapshot (which would fail as well).
            unsafe { _exit(86) };
        }
        waited += 1;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[inline(never)]
fn hold_buffer() -> usize {
    let v: Vec<u8> = vec![7u8; 12345];
    let v = std::hint::black_box(v);
    // Zero the stack below this frame first: snapshot_and_wait's large frame would otherwise
    // hold stale copies of the pointer left there by the allocation's own calls.
    scrub_stack();
    snapshot_and_wait(1);
    std::hint::black_box(&v);
    v.len()
}

fn main() {
    let n = hold_buffer();
    println!("len {n}");
    std::process::exit(5);
}
