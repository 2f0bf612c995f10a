// A Rust target for the outside capture (std's allocator is glibc's malloc): boxes, strings in
// a HashMap, and freed vectors. Prints "asked ADDR SIZE" (the size asked for) per block it
// holds, "freed ADDR" per block it gave back, then "ready", and exits 0 on a line on stdin.
use std::collections::HashMap;
use std::io::{BufRead, Write};

fn main() {
    let boxes: Vec<Box<[u8; 100]>> = (0..50).map(|i| Box::new([i as u8; 100])).collect();
    let mut map: HashMap<u64, String> = HashMap::new();
    for i in 0..100u64 {
        map.insert(i, "y".repeat(30 + i as usize));
    }
    // Sizes nothing else asks for, so that no later allocation reuses these chunks.
    let freed: Vec<u64> = (0..20)
        .map(|i| {
            let v = vec![7u8; 200 + 16 * i];
            v.as_ptr() as u64
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for b in &boxes {
        writeln!(out, "asked {:x} 100", b.as_ptr() as u64).unwrap();
    }
    for s in map.values() {
        writeln!(out, "asked {:x} {}", s.as_ptr() as u64, s.capacity()).unwrap();
    }
    for f in &freed {
        writeln!(out, "freed {f:x}").unwrap();
    }
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let held = boxes.iter().map(|b| b[0] as usize).sum::<usize>() + map.len();
    std::process::exit(if held > 0 { 0 } else { 1 });
}
