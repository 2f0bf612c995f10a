//! The agent shared object and the demo workload that this binary carries (see `build.rs`), and
//! where they are put on disk so that the dynamic loader and `exec` can use them.
//!
//! Each artifact is written once per content to a per-user cache directory
//! (`$XDG_CACHE_HOME/heaptui`, else `~/.cache/heaptui`, else `/tmp/heaptui-$UID`), under a name
//! that carries a hash of its bytes: two heaptui builds never overwrite each other's agent, and a
//! target that has the agent mapped never sees the file change under it. Files are written to a
//! temporary name and renamed, so a concurrent heaptui sees either nothing or the whole file.
//!
//! Every build adds its own copy (the agent is tens of MB), so writing a new one also removes
//! the copies of other builds that no process maps and no heaptui has used for a week: using a
//! copy renews its time, and a process started with an old copy keeps that copy for as long as
//! it has it mapped (its children started with the same `LD_PRELOAD` find it there).

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};

static AGENT: &[u8] = include_bytes!(env!("EMBEDDED_HEAPTUI_AGENT"));
static DEMO: &[u8] = include_bytes!(env!("EMBEDDED_HEAPTUI_DEMO"));

/// The absolute path of the agent, for `LD_PRELOAD`. `HEAPTUI_AGENT` overrides it (an agent
/// built separately, e.g. while developing the agent itself).
pub fn agent_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("HEAPTUI_AGENT") {
        let path = PathBuf::from(path);
        anyhow::ensure!(
            path.is_file(),
            "HEAPTUI_AGENT names {}, which is not a file — unset it to use the agent built into heaptui",
            path.display()
        );
        return path
            .canonicalize()
            .with_context(|| format!("cannot resolve HEAPTUI_AGENT {}", path.display()));
    }
    materialize(&cache_dir()?, "libheaptui_agent", ".so", AGENT, 0o644)
}

/// The path of the demo workload executable.
pub fn demo_path() -> Result<PathBuf> {
    materialize(&cache_dir()?, "heaptui-demo", "", DEMO, 0o755)
}

/// Writes `bytes` into `dir` under a name tagged with their hash, unless that file is there.
fn materialize(dir: &Path, stem: &str, suffix: &str, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    let path = dir.join(format!(
        "{stem}-{}-{:016x}{suffix}",
        env!("CARGO_PKG_VERSION"),
        fnv1a(bytes)
    ));
    if fs::metadata(&path).is_ok_and(|m| m.len() == bytes.len() as u64) {
        // Used: not a candidate for another build's pruning (best effort, as a read-only
        // file's owner may).
        let _ = fs::File::open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        return Ok(path);
    }
    let temporary = dir.join(format!(".{stem}.{}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, &path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&temporary);
        anyhow::anyhow!(
            "cannot write {}: {e} — make {} writable or set XDG_CACHE_HOME",
            path.display(),
            dir.display()
        )
    })?;
    prune_other_builds(dir, stem, &path, UNUSED_FOR);
    Ok(path)
}

/// How long another build's copy stays after its last use.
const UNUSED_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

/// Removes the copies of `stem` other than `keep` that were not used for `unused_for` and that
/// no process maps. Best effort: what cannot be read or removed stays.
fn prune_other_builds(dir: &Path, stem: &str, keep: &Path, unused_for: Duration) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{stem}-");
    let now = SystemTime::now();
    let stale: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .filter(|p| p != keep)
        .filter(|p| {
            fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > unused_for))
        })
        .collect();
    if stale.is_empty() {
        return;
    }
    let mapped = mapped_paths();
    for path in stale.iter().filter(|p| !mapped.contains(*p)) {
        let _ = fs::remove_file(path);
    }
}

/// Every file some process we can see has mapped (its executable and shared objects included).
fn mapped_paths() -> HashSet<PathBuf> {
    let mut mapped = HashSet::new();
    let Ok(processes) = fs::read_dir("/proc") else {
        return mapped;
    };
    for process in processes.flatten() {
        if !process
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(maps) = fs::read_to_string(process.path().join("maps")) else {
            continue;
        };
        // `start-end perms offset dev inode path`: the path is what follows the fifth field.
        for line in maps.lines() {
            if let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim_start)
                && path.starts_with('/')
            {
                mapped.insert(PathBuf::from(path.trim_end_matches(" (deleted)")));
            }
        }
    }
    mapped
}

/// The first usable of `$XDG_CACHE_HOME/heaptui`, `~/.cache/heaptui`, `/tmp/heaptui-$UID`,
/// created with mode 0700.
fn cache_dir() -> Result<PathBuf> {
    let home_cache = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache"));
    let candidates = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .into_iter()
        .chain(home_cache)
        .map(|base| base.join("heaptui"))
        .chain(std::iter::once(
            std::env::temp_dir().join(format!("heaptui-{}", current_uid())),
        ));
    let mut tried = Vec::new();
    for dir in candidates {
        match fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
        {
            Ok(()) if is_private_dir(&dir) => return Ok(dir),
            Ok(()) => tried.push(format!("{} (not a private directory)", dir.display())),
            Err(e) => tried.push(format!("{} ({e})", dir.display())),
        }
    }
    anyhow::bail!(
        "no directory to unpack the agent into: tried {} — set XDG_CACHE_HOME to a writable directory",
        tried.join(", ")
    )
}

/// A directory owned by us that others cannot write into: what we put there is what we load.
fn is_private_dir(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(dir).is_ok_and(|m| {
        m.is_dir() && m.uid() == current_uid() && m.permissions().mode() & 0o022 == 0
    })
}

fn current_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    // The owner of our own /proc entry is our real uid; no libc call needed.
    fs::metadata("/proc/self").map_or(0, |m| m.uid())
}

/// 64-bit FNV-1a: a content tag for file names, not a security measure.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_agent_is_a_shared_object_and_unpacks_once() {
        assert_eq!(
            &AGENT[..4],
            b"\x7fELF",
            "the embedded agent is not an ELF file"
        );
        let dir = tempdir("agent");
        let first = materialize(&dir, "libheaptui_agent", ".so", AGENT, 0o644).unwrap();
        let second = materialize(&dir, "libheaptui_agent", ".so", AGENT, 0o644).unwrap();
        assert_eq!(first, second);
        assert_eq!(fs::read(&first).unwrap(), AGENT);
        assert_eq!(
            fs::read_dir(&*dir).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn the_demo_unpacks_executable() {
        assert_eq!(
            &DEMO[..4],
            b"\x7fELF",
            "the embedded demo is not an ELF file"
        );
        let dir = tempdir("demo");
        let demo = materialize(&dir, "heaptui-demo", "", DEMO, 0o755).unwrap();
        let mode = fs::metadata(&demo).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "demo not executable: {mode:o}");
    }

    #[test]
    fn a_new_build_removes_old_unused_copies_and_keeps_used_or_mapped_ones() {
        let dir = tempdir("prune");
        let week_and_a_day = SystemTime::now() - UNUSED_FOR - Duration::from_secs(86_400);
        let old = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            fs::write(&path, bytes).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
            fs::File::open(&path)
                .unwrap()
                .set_modified(week_and_a_day)
                .unwrap();
            path
        };
        let unused = old("heaptui-demo-0.0.9-00000000000000aa", b"an old build");
        // An old demo still running: its executable is mapped.
        let running = old(
            "heaptui-demo-0.0.9-00000000000000bb",
            &fs::read("/bin/sleep").unwrap(),
        );
        let other_stem = old(
            "libheaptui_agent-0.0.9-00000000000000cc.so",
            b"an old agent",
        );
        let recent = dir.join("heaptui-demo-0.0.9-00000000000000dd");
        fs::write(&recent, b"used yesterday").unwrap();
        let mut process = std::process::Command::new(&running)
            .arg("60")
            .spawn()
            .unwrap();

        let new = materialize(&dir, "heaptui-demo", "", b"\x7fELF new", 0o755).unwrap();
        let _ = process.kill();
        let _ = process.wait();

        assert!(new.exists());
        assert!(!unused.exists(), "an unused old copy stays");
        assert!(running.exists(), "the copy a process runs was removed");
        assert!(recent.exists(), "a recently used copy was removed");
        assert!(other_stem.exists(), "another artifact's copy was removed");
    }

    #[test]
    fn the_agent_path_is_absolute_and_private() {
        let path = agent_path().unwrap();
        assert!(path.is_absolute(), "{}", path.display());
        assert!(is_private_dir(path.parent().unwrap()));
    }

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    /// A fresh directory for one test, removed when the test ends (each unpacks a 70 MB agent
    /// or demo: left behind, every test run would cost /tmp that much again).
    struct TempDir(PathBuf);

    impl std::ops::Deref for TempDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn tempdir(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "heaptui-embedded-test-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
