//! The event recording (`HEAPTUI_RECORD=FILE`, docs/reference.md §8) and the live allocation units
//! that are computed from the same events.
//!
//! Owns: the hooks' side ([`on_alloc`], [`on_free`], [`Realloc`]: one call each, behind the
//! relaxed flag [`enabled`]), the lock-free event ring between hooks and writer (`ring`),
//! the writer thread (`writer`) that drains the ring, symbolizes new allocation stacks, writes
//! the file in the format of `heaptui_analysis::recording` and flushes it every
//! [`writer::PERIOD`], the live units read back from the file (`live`) and the answer to the
//! protocol's `Units` request (`units`).
//!
//! What the file holds: modules (the program first), threads with their names (at first
//! sight and whenever a name changes), every allocation, free (with the freeing stack),
//! realloc and `free(NULL)` of the program's threads in the order the hooks claimed them,
//! wall-clock readings, the live counters every second, snapshot boundaries
//! ([`snapshot_boundary`]) and, when the ring was full, a running count of lost events.
//! A recording with a `Lost` record is incomplete (`Tracker::lost` > 0): its figures are a
//! lower bound, and frees of blocks whose allocation was lost show as unknown pointers.
//! `%p` in FILE stands for the process id (with `HEAPTUI_FOLLOW_EXEC=1`, each exec'd program
//! then writes its own file). Blocks allocated before the agent's constructor, and the libc
//! calls of the agent's own threads, are not recorded (frees of the former show as unknown
//! pointers).
//!
//! Survives a crash: the file is written record by record and flushed after every drain, so
//! a target killed at any moment leaves a file whose cut tail the reader ignores; what the
//! ring held at the kill (at most one drain period of events) is lost.
//!
//! Units (`live`): a `Units` request drains the ring into the file, then brings a
//! `heaptui_analysis::views::Tracker` up to date by reading the file on from where it last
//! stopped; the tracker computes the units under every configuration a client can ask for.
//! So a live `Units` answer is exactly the replay of the file up to the request, and the
//! writer spends nothing per event on units nobody asked for (it keeps up with the hooks
//! better). Without `HEAPTUI_RECORD` nothing is collected and `Units` is refused with a
//! one-line reason naming the variable: the event stream costs a ring slot per call and a
//! writer thread, which a target should pay only when asked.
//!
//! Must never, on the hook side: allocate, lock, block, print or touch a Rust thread-local;
//! a full ring loses the event and counts it. Symbolization and file I/O run on the writer
//! thread, the tracker on the requesting server thread, never in a hook.

pub mod live;
pub mod ring;
pub mod units;
pub mod writer;

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::registry::blocks;
use crate::registry::counters::Op;
use crate::sys;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether events are being recorded: the hooks' one check.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The recording's allocation-kind code of a hooked allocation call.
fn kind_code(op: Op) -> u8 {
    match op {
        Op::Calloc => 1,
        Op::PosixMemalign | Op::AlignedAlloc | Op::Memalign | Op::Valloc | Op::Pvalloc => 2,
        _ => 0,
    }
}

/// The allocation sequence number the block table gave the block at `addr`, which the
/// calling hook has just inserted and not yet returned (so no other thread can have it).
#[inline]
fn seq_of(addr: u64) -> u64 {
    blocks::lookup(addr).map_or(0, |r| r.seq)
}

/// The agent's own threads are not recorded (their libc calls are the agent's business).
#[inline]
fn on_agent_thread() -> bool {
    sys::thread_state().agent()
}

/// A block the hook has just put in the table (`op` tells malloc/calloc/memalign apart;
/// realloc and reallocarray of NULL are recorded as reallocs of NULL).
#[inline]
pub fn on_alloc(addr: u64, size: u64, op: Op, tid: u32, stack: u32) {
    if on_agent_thread() {
        return;
    }
    let seq = seq_of(addr);
    let raw = match op {
        Op::Realloc | Op::Reallocarray => ring::Raw::Realloc {
            seq,
            old: 0,
            new: addr,
            size,
            stack,
            tid,
        },
        _ => ring::Raw::Alloc {
            kind: kind_code(op),
            seq,
            addr,
            size,
            stack,
            tid,
        },
    };
    ring::push(raw);
}

/// `free(addr)` (0 for `free(NULL)`), before libc gets the block back; `stack` is the
/// freeing stack (0 when stacks are off).
#[inline]
pub fn on_free(addr: u64, tid: u32, stack: u32) {
    if on_agent_thread() {
        return;
    }
    ring::push(ring::Raw::Free { addr, stack, tid });
}

/// A realloc's place in the recording, claimed once libc returned and before the block
/// table's move is finished: a thread that gets the old address from libc meanwhile waits
/// for that move (registry::blocks), so its allocation is recorded after this realloc, and
/// a free that gave libc the new address was recorded before. Dropped unfilled (a failed
/// realloc), it records nothing.
pub struct Realloc(Option<ring::Claim>);

impl Realloc {
    /// Claims the place (nothing when recording is off or this is an agent thread).
    #[inline]
    pub fn claim() -> Realloc {
        if !enabled() || on_agent_thread() {
            return Realloc(None);
        }
        Realloc(ring::claim())
    }

    /// The realloc moved or resized `old` to `new` (already in the table).
    #[inline]
    pub fn moved(self, old: u64, new: u64, size: u64, tid: u32, stack: u32) {
        if let Some(c) = self.0 {
            c.publish(ring::Raw::Realloc {
                seq: seq_of(new),
                old,
                new,
                size,
                stack,
                tid,
            });
        }
    }

    /// `realloc(old, 0)` freed `old`; `stack` captures the freeing stack (called only when
    /// recording).
    #[inline]
    pub fn freed(self, old: u64, tid: u32, stack: impl FnOnce() -> u32) {
        if let Some(c) = self.0 {
            c.publish(ring::Raw::Free {
                addr: old,
                stack: stack(),
                tid,
            });
        }
    }
}

/// Records that a snapshot was taken after allocation `last_seq` (the agent server calls
/// it for every snapshot, so a replay computes the same block ages).
pub fn snapshot_boundary(last_seq: u64, unix_ms: u64) {
    if enabled() {
        ring::push(ring::Raw::Boundary { last_seq, unix_ms });
    }
}

/// Starts recording when `HEAPTUI_RECORD` is set: maps the ring, creates the file, starts
/// the writer thread. Called once from the agent's constructor; any failure is one line on
/// stderr and the program runs on unrecorded.
pub fn start() {
    let Some(path) = crate::config::config().record_path.as_deref() else {
        return;
    };
    // SAFETY: getpid cannot fail.
    let path = with_pid(path, unsafe { libc::getpid() } as u32);
    let refused = |why: String| {
        crate::log::to_stderr(format_args!(
            "HEAPTUI_RECORD={}: {why}; the program runs on without a recording",
            path.display()
        ));
    };
    if !ring::init() {
        return refused("cannot map the event ring".into());
    }
    if let Err(e) = writer::start(&path) {
        return refused(e);
    }
    ENABLED.store(true, Ordering::Release);
    // SAFETY: `in_fork_child` only stores to an atomic.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(in_fork_child)) };
    if rc != 0 {
        crate::agent_log!("pthread_atfork failed ({rc}); a fork child would record nothing");
    }
    crate::agent_info!("recording events to {}", path.display());
}

/// `path` with every `%p` replaced by `pid`: with `HEAPTUI_FOLLOW_EXEC=1` each program the
/// target execs loads the agent again, and would otherwise truncate the same file.
pub fn with_pid(path: &Path, pid: u32) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    let mut out = Vec::with_capacity(bytes.len() + 8);
    let mut rest = bytes;
    while let Some(at) = rest.windows(2).position(|w| w == b"%p") {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(pid.to_string().as_bytes());
        rest = &rest[at + 2..];
    }
    out.extend_from_slice(rest);
    PathBuf::from(OsString::from_vec(out))
}

/// A fork child has no writer thread and must not write its parent's file: it records
/// nothing.
extern "C" fn in_fork_child() {
    ENABLED.store(false, Ordering::Relaxed);
}

/// At exit: the events still in the ring go to the file, with the final counters.
pub fn at_exit() {
    if enabled() {
        writer::finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_p_in_the_path_is_the_pid() {
        assert_eq!(
            with_pid(Path::new("/tmp/run.%p.hrec"), 42),
            Path::new("/tmp/run.42.hrec")
        );
        assert_eq!(with_pid(Path::new("%p%p"), 7), Path::new("77"));
        assert_eq!(
            with_pid(Path::new("/tmp/plain"), 7),
            Path::new("/tmp/plain")
        );
    }
}
