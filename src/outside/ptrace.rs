//! Stopping every thread of a process that has no agent, and letting it go again.
//!
//! Owns [`World`]: each thread is attached with `PTRACE_SEIZE` and stopped with
//! `PTRACE_INTERRUPT` — never a `SIGSTOP`, which the process could see, and which would be left
//! pending (the process stopped) if heaptui died. New threads made while the stop is under way
//! are attached until a listing of `/proc/PID/task` finds no new one (a stopped thread cannot
//! make more). Then each stopped thread's registers are read.
//!
//! Resuming is the contract of this module: the target must never stay stopped or traced.
//! - The normal path and every error path ([`World::resume`], and `Drop` when a panic unwinds)
//!   detach each thread stopped by our interrupt with `PTRACE_DETACH`.
//! - A thread found on its way to a signal (a signal-delivery stop) keeps that signal: it is
//!   *not* detached here, because `nix` cannot pass signal numbers above 31 (glibc's own
//!   `SIGCANCEL`, `SIGSETXID` and every real-time signal are above) and detaching with 0 would
//!   drop the signal. The kernel detaches it, with its signal and `siginfo` untouched, when the
//!   tracing thread exits (`exit_ptrace`). Threads that did not stop before the deadline (in an
//!   uninterruptible sleep) are released the same way.
//! - If heaptui itself is killed, the kernel detaches every thread the same way, and nothing is
//!   left pending: a seized thread has no stop signal queued.
//!
//! So a [`World`] must live on a thread of its own that ends once the world is dropped (ptrace
//! requests are also only accepted from the thread that attached): see `outside::capture`.
//! Waiting uses `rustix`'s `waitpid`, which returns the raw status (nix's refuses real-time
//! signals after having consumed the status).
//!
//! One side effect of any ptrace stop is undone here. A few blocking calls do not restart after a
//! stop that delivers no signal: they return `EINTR` (`epoll_wait`, `sigwaitinfo`, `semop`, a
//! read of an inotify descriptor — the kernel's own list in ptrace(2) "BUGS", checked on this
//! machine). So when a thread stopped at the exit of such an untimed wait with `-EINTR`, its
//! result register is set to `-ERESTARTNOHAND` before detaching: the value with which the
//! kernel restarts `poll` or `pause` when no handler runs and returns `EINTR` when one does —
//! exactly what the program would have seen had heaptui not been there ([`restart_value`]).
//! A timed wait is left with its `EINTR` (restarting it would lengthen its timeout), as a
//! debugger attaching would leave it. Nothing else is ever written: no memory, no other
//! register, no signal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::sys::ptrace;
use nix::unistd::Pid;
use rustix::process::{Pid as RPid, WaitOptions, WaitStatus, waitpid};

/// `__WALL`: wait for threads too, not only for children that signal their parent.
const WALL: u32 = 0x4000_0000;
/// `PTRACE_EVENT_STOP`, the event of a stop made by `PTRACE_INTERRUPT` or a group stop.
const EVENT_STOP: i32 = 128;

/// How long the stop waits for a thread to reach its stop before calling it unstoppable (a
/// thread in an uninterruptible sleep only stops when it gets out of it).
pub const STOP_DEADLINE: Duration = Duration::from_secs(1);

/// How one thread ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Stopped by our interrupt, or in a group stop the process was already in.
    Trap,
    /// Stopped on its way to handle signal `0`, which it keeps.
    Signal(i32),
    /// Attached but not stopped before the deadline (its state letter in `/proc`, e.g. `D`).
    NotStopped(char),
    /// Ended while being attached.
    Gone,
}

/// One thread of the stopped process.
#[derive(Clone, Debug)]
pub struct Thread {
    pub tid: u32,
    pub stop: Stop,
    /// Its registers, when it is stopped.
    pub regs: Option<libc::user_regs_struct>,
    /// The code around its program counter, read while it was stopped: `(address, bytes)`
    /// from [`CODE_BEFORE`] bytes below the pc to 2 above (to tell a system call, as the
    /// agent does: `heaptui_capture::registers`).
    pub code: Option<(u64, Vec<u8>)>,
}

/// How many bytes of code below a stopped thread's program counter are read.
pub const CODE_BEFORE: u64 = 16;

/// Why the process could not be stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum StopError {
    /// `PTRACE_SEIZE` of the process's first thread failed.
    Attach(Errno),
    /// The process has no threads left (it exited).
    Gone,
}

/// The stopped process. Dropping it resumes every thread (see the module docs).
pub struct World {
    pid: Pid,
    threads: BTreeMap<u32, Thread>,
    /// Set once resumed: nothing left to detach.
    resumed: bool,
    /// When the last thread was stopped.
    pub stopped_at: Instant,
}

impl World {
    /// Attaches every thread of `pid` and stops it. Threads that stop on their way to a
    /// signal count as stopped; threads still running at the deadline are listed as
    /// [`Stop::NotStopped`].
    pub fn stop(pid: Pid, deadline: Duration) -> Result<World, StopError> {
        let mut world = World {
            pid,
            threads: BTreeMap::new(),
            resumed: false,
            stopped_at: Instant::now(),
        };
        let began = Instant::now();
        loop {
            let tids = list_threads(pid);
            if tids.is_empty() && world.threads.is_empty() {
                return Err(StopError::Gone);
            }
            let fresh: Vec<u32> = tids
                .into_iter()
                .filter(|t| !world.threads.contains_key(t))
                .collect();
            if fresh.is_empty() {
                break;
            }
            let mut waiting = Vec::with_capacity(fresh.len());
            for tid in fresh {
                let t = Pid::from_raw(tid as i32);
                let stop = match ptrace::seize(t, ptrace::Options::empty()) {
                    Ok(()) => match ptrace::interrupt(t) {
                        Ok(()) => {
                            waiting.push(tid);
                            Stop::NotStopped('R')
                        }
                        Err(_) => Stop::Gone,
                    },
                    Err(Errno::ESRCH) => Stop::Gone,
                    // Nothing attached yet and the thread is there: the process is out of
                    // reach (permissions, already traced). Later, a refusal is a thread ending.
                    Err(e)
                        if world.threads.values().all(|t| t.stop == Stop::Gone)
                            && thread_state(pid, tid).is_some() =>
                    {
                        return Err(StopError::Attach(e));
                    }
                    Err(_) => Stop::Gone,
                };
                world.threads.insert(
                    tid,
                    Thread {
                        tid,
                        stop,
                        regs: None,
                        code: None,
                    },
                );
            }
            world.wait_for(&waiting, began + deadline);
        }
        world.stopped_at = Instant::now();
        for t in world.threads.values_mut() {
            if matches!(t.stop, Stop::Trap | Stop::Signal(_)) {
                t.regs = ptrace::getregs(Pid::from_raw(t.tid as i32)).ok();
                t.code = t.regs.as_ref().and_then(|r| {
                    let at = r.rip.checked_sub(CODE_BEFORE)?;
                    let bytes = super::memory::read_exact(pid, at, CODE_BEFORE as usize + 2)?;
                    Some((at, bytes))
                });
            }
        }
        Ok(world)
    }

    /// Waits until each of `tids` has stopped or ended, or the deadline has passed.
    fn wait_for(&mut self, tids: &[u32], deadline: Instant) {
        let mut pending: Vec<u32> = tids.to_vec();
        let mut pause = Duration::from_micros(20);
        while !pending.is_empty() {
            pending.retain(|&tid| {
                let stop = match waitpid(
                    RPid::from_raw(tid as i32),
                    WaitOptions::from_bits_retain(WALL) | WaitOptions::NOHANG,
                ) {
                    Ok(None) => return true,
                    Ok(Some((_, status))) => decode(status),
                    Err(_) => Stop::Gone,
                };
                if let Some(t) = self.threads.get_mut(&tid) {
                    t.stop = stop;
                }
                false
            });
            if pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                for tid in pending {
                    let state = thread_state(self.pid, tid).unwrap_or('?');
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.stop = Stop::NotStopped(state);
                    }
                }
                break;
            }
            // Polling, because a thread may never stop (see STOP_DEADLINE) and waitpid has no
            // timeout; the pause grows so a slow thread does not cost a busy loop.
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(2));
        }
    }

    /// Every thread found, in thread-id order.
    pub fn threads(&self) -> impl Iterator<Item = &Thread> {
        self.threads.values()
    }

    /// Lets every thread run again: detaches the ones stopped by our interrupt now; the others
    /// are released when this thread exits (module docs). Idempotent.
    pub fn resume(&mut self) {
        if self.resumed {
            return;
        }
        self.resumed = true;
        for t in self.threads.values() {
            if t.stop == Stop::Trap {
                let tid = Pid::from_raw(t.tid as i32);
                if let Some(regs) = t.regs.as_ref().filter(|r| restart_value(r).is_some()) {
                    let mut restarted = *regs;
                    restarted.rax = restart_value(regs).unwrap_or(regs.rax);
                    let _ = ptrace::setregs(tid, restarted);
                }
                // ESRCH: it ended (or was killed) meanwhile; nothing to release.
                let _ = ptrace::detach(tid, None);
            }
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.resume();
    }
}

/// x86-64 system call numbers of the untimed waits that return `EINTR` from a ptrace stop.
const SYS_READ: u64 = 0;
const SYS_SEMOP: u64 = 65;
const SYS_RT_SIGTIMEDWAIT: u64 = 128;
const SYS_SEMTIMEDOP: u64 = 220;
const SYS_EPOLL_WAIT: u64 = 232;
const SYS_EPOLL_PWAIT: u64 = 281;
const SYS_EPOLL_PWAIT2: u64 = 441;
const EINTR: i64 = 4;
/// The kernel's "restart if no handler runs" result (`include/linux/errno.h`).
const ERESTARTNOHAND: i64 = 514;

/// For a thread stopped at the exit of an untimed wait that our stop cut short with `EINTR`,
/// the result register value that makes the kernel restart it instead (module docs).
pub fn restart_value(r: &libc::user_regs_struct) -> Option<u64> {
    if r.rax as i64 != -EINTR {
        return None;
    }
    // The wait's arguments are still in their registers at the call's exit.
    let untimed = match r.orig_rax {
        SYS_READ | SYS_SEMOP => true,
        SYS_EPOLL_WAIT | SYS_EPOLL_PWAIT => (r.r10 as i32) < 0,
        SYS_EPOLL_PWAIT2 | SYS_SEMTIMEDOP => r.r10 == 0,
        SYS_RT_SIGTIMEDWAIT => r.rdx == 0,
        _ => false,
    };
    untimed.then_some((-ERESTARTNOHAND) as u64)
}

/// What a wait status says about a thread we asked to stop.
fn decode(status: WaitStatus) -> Stop {
    if status.exited() || status.signaled() {
        return Stop::Gone;
    }
    let Some(sig) = status.stopping_signal() else {
        return Stop::Gone;
    };
    // A ptrace event stop has the event in bits 16..24 of the status.
    let event = (status.as_raw() >> 16) & 0xff;
    if event == EVENT_STOP {
        Stop::Trap
    } else {
        Stop::Signal(sig)
    }
}

/// The thread ids of `pid` (empty when the process is gone), zombie threads left out: they
/// have no user stack and can never stop.
pub fn list_threads(pid: Pid) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&tid| !matches!(thread_state(pid, tid), Some('Z' | 'X') | None))
        .collect();
    tids.sort_unstable();
    tids
}

/// The state letter of a thread in `/proc/PID/task/TID/stat` (`R`, `S`, `D`, `t`, `Z`…).
pub fn thread_state(pid: Pid, tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: the state follows the
    // last closing parenthesis.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zero_regs() -> libc::user_regs_struct {
        libc::user_regs_struct {
            r15: 0,
            r14: 0,
            r13: 0,
            r12: 0,
            rbp: 0,
            rbx: 0,
            r11: 0,
            r10: 0,
            r9: 0,
            r8: 0,
            rax: 0,
            rcx: 0,
            rdx: 0,
            rsi: 0,
            rdi: 0,
            orig_rax: 0,
            rip: 0,
            cs: 0,
            eflags: 0,
            rsp: 0,
            ss: 0,
            fs_base: 0,
            gs_base: 0,
            ds: 0,
            es: 0,
            fs: 0,
            gs: 0,
        }
    }

    #[test]
    fn only_untimed_waits_cut_short_by_the_stop_are_restarted() {
        let regs = |nr: u64, rax: i64, rdx: u64, r10: u64| libc::user_regs_struct {
            orig_rax: nr,
            rax: rax as u64,
            rdx,
            r10,
            ..zero_regs()
        };
        let restart = Some((-ERESTARTNOHAND) as u64);
        assert_eq!(
            restart_value(&regs(SYS_EPOLL_WAIT, -EINTR, 0, u64::MAX)),
            restart
        );
        assert_eq!(restart_value(&regs(SYS_EPOLL_WAIT, -EINTR, 0, 1000)), None);
        assert_eq!(
            restart_value(&regs(SYS_EPOLL_PWAIT2, -EINTR, 0, 0)),
            restart
        );
        assert_eq!(
            restart_value(&regs(SYS_RT_SIGTIMEDWAIT, -EINTR, 0x1000, 0)),
            None
        );
        assert_eq!(
            restart_value(&regs(SYS_RT_SIGTIMEDWAIT, -EINTR, 0, 0)),
            restart
        );
        assert_eq!(restart_value(&regs(SYS_SEMOP, -EINTR, 0, 0)), restart);
        // Restarted by the kernel itself, or finished: left alone.
        assert_eq!(
            restart_value(&regs(SYS_EPOLL_WAIT, -512, 0, u64::MAX)),
            None
        );
        assert_eq!(restart_value(&regs(SYS_READ, 5, 0, 0)), None);
        // Not in a system call (orig_rax is -1).
        assert_eq!(restart_value(&regs(u64::MAX, -EINTR, 0, 0)), None);
    }

    #[test]
    fn the_state_letter_follows_the_last_parenthesis() {
        let me = Pid::this();
        // This thread is running: it is the one reading.
        let tid = nix::unistd::gettid().as_raw() as u32;
        assert_eq!(thread_state(me, tid), Some('R'));
        assert!(list_threads(me).contains(&tid));
        assert!(list_threads(Pid::from_raw(i32::MAX)).is_empty());
    }
}
