//! A target run under the agent with `HEAPTUI_DUMP`, and its first snapshot read back and
//! analysed, with lookups by the marker sizes and function names the targets use.

use std::path::{Path, PathBuf};

use heaptui_analysis::{Analysis, HeapGraph, ObjectIndex, snapshot};

use super::{TempDir, run_dumping};

/// A finished target run and its first snapshot.
pub struct Captured {
    pub graph: HeapGraph,
    pub analysis: Analysis,
}

pub fn snapshot_file(dir: &Path, n: u32) -> PathBuf {
    let suffix = format!(".{n}.hsnap");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("snap.") && name.ends_with(&suffix)
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one snapshot {n} in {}: {found:?}",
        dir.display()
    );
    found.remove(0)
}

/// Runs `exe` under the agent and returns snapshot 1, after checking the program's own
/// output and exit code, and that an exit snapshot (2) was written too.
pub fn run(dir: &TempDir, exe: &Path, stdout: &str, code: i32) -> Captured {
    let r = run_dumping(dir, exe);
    assert_eq!(
        r.code,
        Some(code),
        "exit code; stderr:\n{}\nlog:\n{}",
        r.stderr,
        r.log
    );
    assert!(r.stdout.starts_with(stdout), "stdout {:?}", r.stdout);
    assert!(
        r.log.contains("pause_ms="),
        "the capture logs its timings:\n{}",
        r.log
    );
    let path = snapshot_file(dir.path(), 1);
    snapshot_file(dir.path(), 2);
    let graph = snapshot::read_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let analysis = Analysis::new(&graph);
    Captured { graph, analysis }
}

impl Captured {
    /// The one object of this size.
    pub fn object(&self, size: u64) -> ObjectIndex {
        let sizes = &self.graph.objects().size;
        let all: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] == size).collect();
        assert_eq!(all.len(), 1, "one object of {size} bytes");
        all[0] as ObjectIndex
    }

    /// Index of the thread whose frames include `function`.
    pub fn thread_running(&self, function: &str) -> usize {
        self.graph
            .threads
            .iter()
            .position(|t| t.frames.iter().any(|f| f.function == function))
            .unwrap_or_else(|| panic!("no thread runs {function}: {:#?}", self.frame_names()))
    }

    pub fn frame(&self, thread: usize, function: &str) -> usize {
        self.graph.threads[thread]
            .frames
            .iter()
            .position(|f| f.function == function)
            .unwrap_or_else(|| panic!("no frame {function}: {:?}", self.frame_names()[thread]))
    }

    pub fn frame_names(&self) -> Vec<Vec<String>> {
        self.graph
            .threads
            .iter()
            .map(|t| t.frames.iter().map(|f| f.function.clone()).collect())
            .collect()
    }

    /// Bytes of the objects frame-proprietary to the `<thread>` pseudo-frame of `thread`
    /// (libc's own per-thread blocks, such as the thread's DTV), which are checked to be
    /// small and not any of the target's marker blocks.
    pub fn thread_frame_bytes(&self, thread: usize, markers: &[u64]) -> u64 {
        let last = self.graph.threads[thread].frames.len() - 1;
        assert_eq!(self.graph.threads[thread].frames[last].function, "<thread>");
        self.analysis
            .frame_members(thread, last)
            .iter()
            .map(|&o| {
                let size = self.graph.objects().size[o as usize];
                assert!(size < 4096 && !markers.contains(&size), "libc block {size}");
                size
            })
            .sum()
    }
}
