//! Whether this process can afford a snapshot now (docs/reference.md §7 "When memory for a
//! snapshot cannot be had").
//!
//! A snapshot costs the target memory: the kept snapshot in the process itself, and in the
//! copy-on-write scanning child the pages it writes, its findings, the graph and its analysis
//! (made there, `build`). The agent's memory comes from its own allocator, and Rust aborts the
//! process when an allocation fails, so a snapshot that runs out of memory half-way would kill
//! the host: the one thing the agent must never do (the child running out only fails the
//! snapshot). So before stopping the world the agent predicts what the snapshot needs from the
//! number of live blocks, compares it with what the process may still take, and refuses in
//! one sentence when it does not fit. The prediction uses the figures measured by
//! `bench/snapshot_cost.sh` (BENCHMARKS.md "What a snapshot costs the target") with a margin.
//!
//! What the process may take is the least of: its address-space limit (`RLIMIT_AS`) minus
//! its current size, the room left in its cgroup (v2 `memory.max` minus `memory.current`,
//! for the cgroup and each ancestor), and the machine's `MemAvailable`. The scanning child
//! starts as a copy of the process's address space under the same `RLIMIT_AS`, so the
//! address-space need is the larger of the two growths; both count in the same cgroup and
//! the same machine.

use std::path::{Path, PathBuf};

/// Peak bytes per live block the snapshot takes in the process itself: the kept snapshot
/// being received and the previous one (measured: 76 to 77 B/object on a 4.6M-block perl
/// heap, the previous snapshot held).
pub const PROCESS_BYTES_PER_BLOCK: u64 = 128;
/// Peak private bytes per live block of the scanning child: its written pages, findings,
/// graph, analysis and kept snapshot (measured: 138 to 142 B/object on the perl heap above,
/// about two references per object, since the analysis keeps its groups as columns; 245
/// before). The margin is for heaps with more references and threads per object: the
/// engine's own peak on synthetic graphs of four references per object is 104 B/object of
/// graph and analysis, before the scan's findings.
pub const CHILD_BYTES_PER_BLOCK: u64 = 224;
/// What any snapshot takes whatever the heap's size: symbol tables, the memory map, buffers.
pub const FIXED_BYTES: u64 = 32 << 20;

/// What a snapshot of `live_blocks` blocks needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    /// In an address space: this process's or the child's (a copy of this one, under the
    /// same `RLIMIT_AS`), whichever grows more.
    pub process: u64,
    /// In memory: this process and the scanning child together.
    pub resident: u64,
}

impl Need {
    pub fn of(live_blocks: u64) -> Need {
        let in_process = live_blocks.saturating_mul(PROCESS_BYTES_PER_BLOCK);
        let in_child = live_blocks.saturating_mul(CHILD_BYTES_PER_BLOCK);
        Need {
            process: FIXED_BYTES.saturating_add(in_process.max(in_child)),
            resident: FIXED_BYTES
                .saturating_add(in_process)
                .saturating_add(in_child),
        }
    }
}

/// What limits the memory a snapshot may take, and how much each leaves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// `RLIMIT_AS` minus the current address-space size, when a limit is set.
    pub address_space: Option<u64>,
    /// The least room left in this process's cgroup and its ancestors, when one has a limit:
    /// the bytes and the cgroup's path.
    pub cgroup: Option<(u64, String)>,
    /// The machine's `MemAvailable`.
    pub available: Option<u64>,
}

impl Room {
    /// Reads the limits of this process now.
    pub fn now() -> Room {
        Room {
            address_space: address_space_room(),
            cgroup: cgroup_room(Path::new("/proc/self/cgroup"), Path::new("/sys/fs/cgroup")),
            available: mem_available(Path::new("/proc/meminfo")),
        }
    }

    /// `Err(sentence)` when `need` does not fit, naming the limit that is too tight.
    pub fn admits(&self, need: Need) -> Result<(), String> {
        let mib = |b: u64| b.div_ceil(1 << 20);
        if let Some(room) = self.address_space
            && need.process > room
        {
            return Err(format!(
                "not enough memory for a snapshot: it needs about {} MiB and the process's \
                 address-space limit (RLIMIT_AS) leaves {} MiB; no snapshot taken",
                mib(need.process),
                mib(room)
            ));
        }
        if let Some((room, cgroup)) = &self.cgroup
            && need.resident > *room
        {
            return Err(format!(
                "not enough memory for a snapshot: it needs about {} MiB and cgroup {cgroup} \
                 leaves {} MiB (memory.max); no snapshot taken",
                mib(need.resident),
                mib(*room)
            ));
        }
        if let Some(room) = self.available
            && need.resident > room
        {
            return Err(format!(
                "not enough memory for a snapshot: it needs about {} MiB and the machine has \
                 {} MiB available (MemAvailable); no snapshot taken",
                mib(need.resident),
                mib(room)
            ));
        }
        Ok(())
    }
}

/// `RLIMIT_AS`'s soft limit minus the process's current size, or `None` without a limit.
fn address_space_room() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `limit`.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    Some(limit.rlim_cur.saturating_sub(pages * page))
}

/// The least `memory.max - memory.current` of the cgroup (v2) named in `proc_cgroup` and its
/// ancestors under `root`, with that cgroup's path; `None` when none has a limit.
fn cgroup_room(proc_cgroup: &Path, root: &Path) -> Option<(u64, String)> {
    let text = std::fs::read_to_string(proc_cgroup).ok()?;
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let mut least: Option<(u64, String)> = None;
    let mut dir: PathBuf = root.join(path.trim_start_matches('/'));
    while dir.starts_with(root) {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        if let (Some(max), Some(current)) = (read("memory.max"), read("memory.current"))
            && let (Ok(max), Ok(current)) =
                (max.trim().parse::<u64>(), current.trim().parse::<u64>())
        {
            let room = max.saturating_sub(current);
            if least.as_ref().is_none_or(|(l, _)| room < *l) {
                let shown = dir
                    .strip_prefix(root)
                    .map_or(String::new(), |p| p.display().to_string());
                least = Some((room, format!("/{shown}")));
            }
        }
        if !dir.pop() {
            break;
        }
    }
    least
}

/// `MemAvailable` of `meminfo`, in bytes.
fn mem_available(meminfo: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(meminfo).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("MemAvailable:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_need_grows_with_the_blocks() {
        let need = Need::of(1_000_000);
        // The child grows more than the process: its growth is the address-space need.
        assert_eq!(need.process, FIXED_BYTES + 224_000_000);
        assert_eq!(need.resident, need.process + 128_000_000);
    }

    #[test]
    fn the_tightest_limit_is_named() {
        let need = Need::of(1_000_000); // ~246 MiB in an address space, ~368 MiB resident
        let roomy = Room {
            address_space: Some(4 << 30),
            cgroup: Some((4 << 30, "/a".into())),
            available: Some(4 << 30),
        };
        assert_eq!(roomy.admits(need), Ok(()));
        assert_eq!(
            Room::default().admits(need),
            Ok(()),
            "no limit known: no refusal"
        );

        let refused = Room {
            address_space: Some(100 << 20),
            ..roomy.clone()
        }
        .admits(need)
        .unwrap_err();
        assert!(refused.contains("(RLIMIT_AS) leaves 100 MiB"), "{refused}");
        assert!(refused.contains("needs about 246 MiB"), "{refused}");

        // The process's and the child's pages both count in the cgroup.
        let refused = Room {
            cgroup: Some((300 << 20, "/work.slice/job".into())),
            ..roomy.clone()
        }
        .admits(need)
        .unwrap_err();
        assert!(
            refused.contains("cgroup /work.slice/job leaves 300 MiB"),
            "{refused}"
        );

        let refused = Room {
            available: Some(10 << 20),
            ..roomy
        }
        .admits(need)
        .unwrap_err();
        assert!(
            refused.contains("10 MiB available (MemAvailable)"),
            "{refused}"
        );
    }

    #[test]
    fn cgroup_limits_are_read_up_to_the_root() {
        let dir = std::env::temp_dir().join(format!("heaptui-budget-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let leaf = dir.join("fs/outer/inner");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(dir.join("cgroup"), "0::/outer/inner\n").unwrap();
        // The leaf has no limit; its parent leaves 30 MiB.
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        std::fs::write(leaf.join("memory.current"), "1000\n").unwrap();
        std::fs::write(dir.join("fs/outer/memory.max"), format!("{}\n", 100 << 20)).unwrap();
        std::fs::write(
            dir.join("fs/outer/memory.current"),
            format!("{}\n", 70 << 20),
        )
        .unwrap();
        let room = cgroup_room(&dir.join("cgroup"), &dir.join("fs"));
        assert_eq!(room, Some((30 << 20, "/outer".to_string())));

        std::fs::write(dir.join("fs/outer/memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_room(&dir.join("cgroup"), &dir.join("fs")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mem_available_is_read_in_bytes() {
        let dir = std::env::temp_dir().join(format!("heaptui-meminfo-{}", std::process::id()));
        std::fs::write(&dir, "MemTotal: 100 kB\nMemAvailable:    2048 kB\n").unwrap();
        assert_eq!(mem_available(&dir), Some(2 << 20));
        std::fs::remove_file(&dir).unwrap();
    }
}
