//! Benchmark of the snapshot files: write and read synthetic graphs in the binary form (and
//! in JSON up to 1M objects), against one sequential read of the same bytes as the floor.
//!
//!     cargo run --release --example snapshot_files -- [OBJECTS…]
//!     cargo run --release --example snapshot_files -- --write OBJECTS FILE
//!
//! The second form only writes one synthetic binary snapshot (e.g. for timing
//! `heaptui report FILE` on a big heap).
//! Defaults to 1M and 10M objects (64 threads × 16 frames, the engine benchmark's shape).
//! Each time is the median of three runs. The peak memory of reading is measured in a fresh
//! process (this program run with `--read FILE`), so the generator's memory does not count.
//! Files go to `$TMPDIR` and are removed afterwards.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use heaptui_analysis::snapshot;
use heaptui_analysis::synthetic::{SyntheticConfig, generate};

const RUNS: usize = 3;
const JSON_UP_TO: usize = 1_000_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, file] = args.as_slice()
        && flag == "--read"
    {
        read_once(Path::new(file));
        return;
    }
    if let [flag, objects, file] = args.as_slice()
        && flag == "--write"
    {
        let objects: usize = objects.replace('_', "").parse().expect("an object count");
        let graph = generate(&SyntheticConfig::new(objects, 64, 16));
        let out = std::fs::File::create(file).expect("a writable file");
        snapshot::write_binary(&graph, out).unwrap();
        return;
    }
    let sizes: Vec<usize> = if args.is_empty() {
        vec![1_000_000, 10_000_000]
    } else {
        args.iter()
            .map(|a| a.replace('_', "").parse().expect("object counts"))
            .collect()
    };
    let dir = std::env::temp_dir().join(format!("heaptui-snapshot-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!(
        "| objects | edges | binary size | bytes/object | write binary | read binary | \
         floor (fs::read) | read / floor | read peak RSS | RSS/object | write JSON | \
         read JSON | JSON size |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for &n in &sizes {
        bench(n, &dir);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn bench(objects: usize, dir: &Path) {
    let graph = generate(&SyntheticConfig::new(objects, 64, 16));
    let edges = graph.edges().len();
    let bin = dir.join(format!("{objects}.hsnap"));

    let write = median(|| {
        let file = std::fs::File::create(&bin).unwrap();
        snapshot::write_binary(&graph, file).unwrap();
    });
    let size = std::fs::metadata(&bin).unwrap().len();
    let floor = median(|| {
        std::hint::black_box(std::fs::read(&bin).unwrap());
    });
    let read = median(|| {
        let back = snapshot::read_file(&bin).unwrap();
        assert_eq!(back.object_count(), objects);
    });
    let peak = peak_of_reading(&bin);
    // Checked once so that the benchmark never times a reader that reads wrongly.
    assert!(snapshot::read_file(&bin).unwrap() == graph);
    std::fs::remove_file(&bin).unwrap();

    let (json_write, json_read, json_size) = if objects <= JSON_UP_TO {
        let json = dir.join(format!("{objects}.json"));
        let w = median(|| {
            let file = std::fs::File::create(&json).unwrap();
            snapshot::write_json(&graph, file).unwrap();
        });
        let r = median(|| {
            std::hint::black_box(snapshot::read_file(&json).unwrap());
        });
        let s = std::fs::metadata(&json).unwrap().len();
        std::fs::remove_file(&json).unwrap();
        (secs(w), secs(r), mib(s))
    } else {
        ("—".into(), "—".into(), "—".into())
    };
    println!(
        "| {objects} | {edges} | {} | {:.1} | {} | {} | {} | {:.1}× | {} | {:.0} B | \
         {json_write} | {json_read} | {json_size} |",
        mib(size),
        size as f64 / objects as f64,
        secs(write),
        secs(read),
        secs(floor),
        read.as_secs_f64() / floor.as_secs_f64(),
        mib(peak),
        peak as f64 / objects as f64,
    );
}

/// Reads `file` once in a fresh process and returns that process's peak resident memory.
fn peak_of_reading(file: &Path) -> u64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--read")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn read_once(file: &Path) {
    let graph = snapshot::read_file(file).unwrap();
    std::hint::black_box(&graph);
    println!("{}", vm_hwm());
}

/// This process's peak resident set size in bytes (`VmHWM`).
fn vm_hwm() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = text.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

fn median(mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
