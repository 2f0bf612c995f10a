//! The thread registry: threads started through `pthread_create` (recorded by the
//! interposed `pthread_create`, see `hooks::pthread`), reconciled with `/proc/self/task`
//! when listed, so threads that existed before the agent loaded and raw `clone` threads are
//! listed too. The agent's own threads are marked and never listed.
//!
//! Registering happens on thread start and exit (not in malloc hooks) and uses the agent
//! allocator; [`list`] allocates (agent allocator only — never libc malloc: the task
//! directory is read with getdents64 and names with read(2)).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::sync::SpinLock;
use crate::sys;

/// A live thread of the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadEntry {
    pub tid: u32,
    /// From `/proc/self/task/<tid>/comm` (empty if the thread ended meanwhile).
    pub name: String,
}

#[derive(Clone, Copy)]
struct Known {
    tid: u32,
    pthread: libc::pthread_t,
}

static REGISTRY: SpinLock<Vec<Known>> = SpinLock::new(Vec::new());
pub const MAX_AGENT_THREADS: usize = 64;
static AGENT_TIDS: [AtomicU32; MAX_AGENT_THREADS] =
    [const { AtomicU32::new(0) }; MAX_AGENT_THREADS];
/// The thread pointer (`pthread_self`, glibc's thread descriptor at the top of the thread's
/// stack mapping) of the agent thread in the same slot of `AGENT_TIDS`, 0 when unknown: a
/// capture leaves the agent threads' stacks and TLS out of the program's mapped memory.
static AGENT_POINTERS: [AtomicU64; MAX_AGENT_THREADS] =
    [const { AtomicU64::new(0) }; MAX_AGENT_THREADS];

/// Records the calling thread (started through pthread_create) with its pthread handle.
pub fn register_current() {
    let me = Known {
        tid: sys::current_tid(),
        pthread: pthread_self(),
    };
    let mut reg = REGISTRY.lock();
    reg.retain(|k| k.tid != me.tid);
    reg.push(me);
}

/// Forgets a thread that is ending.
pub fn deregister(tid: u32) {
    REGISTRY.lock().retain(|k| k.tid != tid);
    for (slot, pointer) in AGENT_TIDS.iter().zip(&AGENT_POINTERS) {
        if slot.load(Ordering::Relaxed) == tid {
            pointer.store(0, Ordering::Relaxed);
            let _ = slot.compare_exchange(tid, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

fn pthread_self() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

/// The pthread handle of a thread started through pthread_create (None for the main thread
/// of a process the agent did not see start, raw clone threads, or ended threads).
pub fn pthread_of(tid: u32) -> Option<libc::pthread_t> {
    REGISTRY
        .lock()
        .iter()
        .find(|k| k.tid == tid)
        .map(|k| k.pthread)
}

/// Marks the calling thread as the agent's own: never stopped, never listed, its libc
/// allocations still tracked normally.
pub fn mark_current_as_agent() {
    sys::thread_state().set_agent(true);
    let tid = sys::current_tid();
    if is_agent_thread(tid) {
        return;
    }
    for (slot, pointer) in AGENT_TIDS.iter().zip(&AGENT_POINTERS) {
        if slot
            .compare_exchange(0, tid, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            pointer.store(pthread_self() as u64, Ordering::Relaxed);
            return;
        }
    }
    crate::agent_log!("more than {MAX_AGENT_THREADS} agent threads; thread {tid} is listed");
}

/// Appends the thread pointer of every agent thread (see `AGENT_POINTERS`). Allocation-free
/// when `out` has room for [`MAX_AGENT_THREADS`] more.
pub fn agent_thread_pointers(out: &mut Vec<u64>) {
    out.extend(
        AGENT_POINTERS
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .filter(|&p| p != 0),
    );
}

/// The first call of every thread the agent starts itself (its server, client, dump, policy,
/// watch, metrics and recording threads): marks it as the agent's and blocks every signal on
/// it (see [`block_program_signals`]). Not for threads the `pthread_create` wrapper merely
/// classifies as the agent's code: in a test binary that links the agent, those are the test
/// harness's own threads, whose children must inherit their signal mask as it is.
pub fn enter_agent_thread() {
    mark_current_as_agent();
    block_program_signals();
}

/// Blocks every signal on the calling agent thread, so the kernel hands a signal sent to the
/// process to one of the program's threads, as it would without the agent (a program's
/// handler never runs on an agent thread, `pause()` in a single-threaded program is woken).
/// The raw system call: the `pthread_sigmask` the agent exports would keep the stop signal.
fn block_program_signals() {
    let all = [u64::MAX; 1];
    // SAFETY: rt_sigprocmask reads 8 bytes of mask from a live array; SIGKILL and SIGSTOP,
    // which cannot be blocked, are ignored by the kernel.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK,
            all.as_ptr(),
            std::ptr::null_mut::<u64>(),
            8usize,
        );
    }
}

pub fn is_agent_thread(tid: u32) -> bool {
    tid != 0 && AGENT_TIDS.iter().any(|t| t.load(Ordering::Relaxed) == tid)
}

/// Live threads of the process (registry reconciled with /proc/self/task), agent threads
/// excluded, sorted by tid. Allocates (agent allocator) — call before freezing/stopping.
pub fn list() -> Vec<ThreadEntry> {
    let mut tids = Vec::new();
    sys::for_each_task(|tid| tids.push(tid));
    tids.sort_unstable();
    // Registry entries of threads that have gone without running their exit destructor
    // (killed by a raw exit syscall) are pruned here.
    REGISTRY
        .lock()
        .retain(|k| tids.binary_search(&k.tid).is_ok());
    tids.into_iter()
        .filter(|&tid| !is_agent_thread(tid))
        .map(|tid| {
            let mut buf = [0u8; 32];
            let n = sys::thread_comm(tid, &mut buf);
            ThreadEntry {
                tid,
                name: String::from_utf8_lossy(&buf[..n]).into_owned(),
            }
        })
        .collect()
}

/// Takes the registry lock (fork prepare).
pub(crate) fn lock() {
    REGISTRY.raw().lock();
}

/// Releases it in the parent.
pub(crate) fn unlock() {
    REGISTRY.raw().unlock();
}

/// In the fork child: only the forking thread survives; agent threads are gone.
pub(crate) fn reset_in_child() {
    REGISTRY.raw().unlock();
    let mut reg = REGISTRY.lock();
    reg.clear();
    reg.push(Known {
        tid: sys::current_tid(),
        pthread: pthread_self(),
    });
    drop(reg);
    for (slot, pointer) in AGENT_TIDS.iter().zip(&AGENT_POINTERS) {
        slot.store(0, Ordering::Relaxed);
        pointer.store(0, Ordering::Relaxed);
    }
}

/// Sequence-number ranges `(first, last]` of the blocks libc allocated while the agent started
/// one of its own threads (the new thread's DTV, its exit bookkeeping): the agent's memory,
/// not the program's, so captures leave them out. One slot per agent thread started by the
/// constructor or the agent itself; the few there are fit a fixed array (no allocation).
static SPAWN_RANGES: [(AtomicU64, AtomicU64); 8] =
    [const { (AtomicU64::new(0), AtomicU64::new(0)) }; 8];
static SPAWN_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Records that the blocks numbered `(first, now]` were allocated while an agent thread was
/// started. Call with `first = blocks::number_waiting()` taken before the spawn, once the new
/// thread is up; only meaningful while no program thread allocates meanwhile (the
/// constructor), otherwise the program's blocks of that window would be left out too.
pub fn note_agent_spawn(first: u64) {
    let last = super::blocks::number_waiting();
    let slot = SPAWN_COUNT.fetch_add(1, Ordering::AcqRel);
    match SPAWN_RANGES.get(slot) {
        Some((start, end)) => {
            start.store(first, Ordering::Relaxed);
            end.store(last, Ordering::Release);
        }
        None => crate::agent_log!(
            "more agent threads than spawn slots: blocks {first}..{last} show as the program's"
        ),
    }
}

/// Whether block sequence number `seq` was allocated while an agent thread was started.
pub fn spawned_for_agent(seq: u64) -> bool {
    let used = SPAWN_COUNT.load(Ordering::Acquire).min(SPAWN_RANGES.len());
    SPAWN_RANGES[..used].iter().any(|(start, end)| {
        seq > start.load(Ordering::Relaxed) && seq <= end.load(Ordering::Acquire)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn lists_named_threads_and_hides_agent_threads() {
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let named = std::thread::Builder::new()
            .name("reg-worker".into())
            .spawn({
                let stop_rx = stop_rx;
                move || {
                    register_current();
                    ready_tx.send(sys::current_tid()).unwrap();
                    let _ = stop_rx.recv();
                }
            })
            .unwrap();
        let (agent_stop_tx, agent_stop_rx) = mpsc::channel::<()>();
        let (agent_ready_tx, agent_ready_rx) = mpsc::channel();
        let agent = std::thread::spawn(move || {
            mark_current_as_agent();
            agent_ready_tx.send(sys::current_tid()).unwrap();
            let _ = agent_stop_rx.recv();
        });
        let worker_tid = ready_rx.recv().unwrap();
        let agent_tid = agent_ready_rx.recv().unwrap();
        let threads = list();
        let worker = threads
            .iter()
            .find(|t| t.tid == worker_tid)
            .expect("worker listed");
        assert_eq!(worker.name, "reg-worker");
        assert!(threads.iter().all(|t| t.tid != agent_tid));
        assert!(is_agent_thread(agent_tid));
        assert!(pthread_of(worker_tid).is_some());
        assert!(threads.iter().any(|t| t.tid == sys::current_tid()));
        stop_tx.send(()).unwrap();
        agent_stop_tx.send(()).unwrap();
        named.join().unwrap();
        agent.join().unwrap();
        deregister(agent_tid);
        assert!(!is_agent_thread(agent_tid));
        // The ended worker is pruned from the registry on the next list.
        let _ = list();
        assert!(pthread_of(worker_tid).is_none());
    }
}
