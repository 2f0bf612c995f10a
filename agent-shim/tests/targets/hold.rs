// Rust with the system allocator: a Vec held by one function's frame.
use std::path::PathBuf;

extern "C" {
    fn raise(sig: i32) -> i32;
}
const SIGUSR2: i32 = 12;

#[inline(never)]
fn scrub_stack() {
    let mut buf = [0u8; 65536];
    std::hint::black_box(&mut buf);
}

#[inline(never)]
fn snapshot_and_wait(n: u32) {
    scrub_stack();
    let prefix = std::env::var("HEAPTUI_DUMP").unwrap_or_default();
    let path = PathBuf::from(format!("{prefix}.{}.{n}.hsnap", std::process::id()));
    // SAFETY: raising a signal at our own process.
    unsafe { raise(SIGUSR2) };
    for _ in 0..30000 {
        if path.exists() {
            break;
        }
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
