//! Whether heaptui may trace a process, and what to do when it may not.
//!
//! Owns turning a refused `PTRACE_SEIZE` (or a process that is plainly out of reach before
//! trying) into one sentence that says why and what to do: the process does not exist, a
//! debugger already traces it, Yama's `ptrace_scope` forbids it, it belongs to another user,
//! it is not dumpable, or heaptui lacks `CAP_SYS_PTRACE`. The facts come from `/proc`; the
//! wording is a pure function of them ([`explain`]) so every case is tested, including those
//! this machine cannot produce (a kernel without Yama).
//!
//! Never changes anything: no sysctl, no capability, no signal.

use nix::errno::Errno;
use nix::unistd::Pid;

/// `CAP_SYS_PTRACE`'s bit in the capability sets of `/proc/PID/status`.
const CAP_SYS_PTRACE: u32 = 19;

/// What `/proc` says about the target and about heaptui.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    pub pid: u32,
    /// The process's command name, if it exists.
    pub command: Option<String>,
    /// Its real user id.
    pub uid: Option<u32>,
    /// The process tracing it, 0 for none.
    pub tracer: u32,
    /// The tracer's command name.
    pub tracer_command: String,
    /// heaptui's real user id.
    pub our_uid: u32,
    /// Whether heaptui has `CAP_SYS_PTRACE` in its effective set.
    pub cap_sys_ptrace: bool,
    /// `kernel.yama.ptrace_scope`, when Yama is there.
    pub ptrace_scope: Option<u32>,
    /// Whether the target's `/proc` files belong to root while it runs as another user: the
    /// kernel's sign of a process that is not dumpable (setuid, or `PR_SET_DUMPABLE` 0).
    pub not_dumpable: bool,
    /// Whether heaptui is an ancestor of the target (Yama scope 1 allows that).
    pub ancestor: bool,
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// The parent of a process, from its status.
fn parent_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field(&status, "PPid")?.parse().ok()
}

fn command_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_string())
}

/// Reads the facts about `pid` from `/proc`.
pub fn facts(pid: Pid) -> Facts {
    use std::os::unix::fs::MetadataExt;
    let raw = pid.as_raw() as u32;
    let status = std::fs::read_to_string(format!("/proc/{raw}/status")).unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status_field(&status, "Uid").and_then(|u| u.split_whitespace().next()?.parse().ok());
    let tracer: u32 = status_field(&status, "TracerPid")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let cap_sys_ptrace = status_field(&own, "CapEff")
        .and_then(|c| u64::from_str_radix(c, 16).ok())
        .is_some_and(|c| c & (1 << CAP_SYS_PTRACE) != 0);
    let owner = std::fs::metadata(format!("/proc/{raw}/mem"))
        .map(|m| m.uid())
        .ok();
    let me = std::process::id();
    let mut ancestor = false;
    let mut p = raw;
    for _ in 0..4096 {
        match parent_of(p) {
            Some(parent) if parent == me => {
                ancestor = true;
                break;
            }
            Some(parent) if parent > 1 => p = parent,
            _ => break,
        }
    }
    Facts {
        pid: raw,
        command: command_of(raw).filter(|_| !status.is_empty()),
        uid,
        tracer,
        tracer_command: command_of(tracer).unwrap_or_default(),
        our_uid: status_field(&own, "Uid")
            .and_then(|u| u.split_whitespace().next()?.parse().ok())
            .unwrap_or(u32::MAX),
        cap_sys_ptrace,
        ptrace_scope: std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        not_dumpable: matches!((owner, uid), (Some(0), Some(u)) if u != 0),
        ancestor,
    }
}

/// A reason heaptui cannot trace the process, before trying (`None`: try).
pub fn refuse_early(f: &Facts) -> Option<String> {
    if f.command.is_none() {
        return Some(format!("no process {} (it is not running)", f.pid));
    }
    if f.tracer != 0 {
        return Some(explain(f, Errno::EPERM));
    }
    None
}

/// The one-line error for a `PTRACE_SEIZE` of the process that failed with `errno`.
pub fn explain(f: &Facts, errno: Errno) -> String {
    let name = format!(
        "process {} ({})",
        f.pid,
        f.command.as_deref().unwrap_or("?")
    );
    if errno == Errno::ESRCH || f.command.is_none() {
        return format!("no process {} (it is not running)", f.pid);
    }
    if f.tracer != 0 {
        return format!(
            "{name} is already traced by process {} ({}), a debugger or tracer: detach it \
             first (gdb: `detach`), then try again",
            f.tracer, f.tracer_command
        );
    }
    match f.ptrace_scope {
        Some(3) => {
            return format!(
                "cannot trace {name}: kernel.yama.ptrace_scope is 3, which forbids tracing \
                 until reboot — start the program with LD_PRELOAD=$(heaptui agent-path) instead"
            );
        }
        Some(2) if !f.cap_sys_ptrace => {
            return format!(
                "cannot trace {name}: kernel.yama.ptrace_scope is 2 (only CAP_SYS_PTRACE may \
                 trace) — run heaptui as root, or `sysctl kernel.yama.ptrace_scope=1`"
            );
        }
        Some(1) if !f.cap_sys_ptrace && !f.ancestor && f.uid == Some(f.our_uid) => {
            return format!(
                "cannot trace {name}: kernel.yama.ptrace_scope is 1 (only a parent may trace \
                 its children) — run heaptui with sudo, or `sysctl kernel.yama.ptrace_scope=0`"
            );
        }
        _ => {}
    }
    if f.uid.is_some_and(|u| u != f.our_uid) && !f.cap_sys_ptrace {
        let owner = f.uid.map_or_else(|| "?".into(), |u| u.to_string());
        return if f.our_uid == 0 {
            format!(
                "cannot trace {name} of user {owner}: heaptui runs as root without \
                 CAP_SYS_PTRACE (a container or a restricted service?) — grant it \
                 CAP_SYS_PTRACE, or run heaptui as user {owner}"
            )
        } else {
            format!(
                "cannot trace {name}: it belongs to user {owner}, heaptui runs as user {} — run \
                 heaptui as that user, or with sudo",
                f.our_uid
            )
        };
    }
    if f.not_dumpable && !f.cap_sys_ptrace {
        return format!(
            "cannot trace {name}: it is not dumpable (setuid, or it called \
             prctl(PR_SET_DUMPABLE, 0)), so only CAP_SYS_PTRACE may trace it — run heaptui with \
             sudo"
        );
    }
    if !f.cap_sys_ptrace {
        return format!(
            "cannot trace {name}: {} — heaptui needs the right to ptrace it: run it as the \
             process's user with kernel.yama.ptrace_scope=0, or with CAP_SYS_PTRACE (sudo)",
            errno.desc()
        );
    }
    format!("cannot trace {name}: {}", errno.desc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Facts {
        Facts {
            pid: 42,
            command: Some("server".into()),
            uid: Some(1000),
            our_uid: 1000,
            ..Facts::default()
        }
    }

    #[test]
    fn every_refusal_says_what_to_do_in_one_line() {
        let cases: Vec<(Facts, Errno, &str)> = vec![
            (
                Facts {
                    command: None,
                    ..base()
                },
                Errno::ESRCH,
                "no process 42",
            ),
            (
                Facts {
                    tracer: 7,
                    tracer_command: "gdb".into(),
                    ..base()
                },
                Errno::EPERM,
                "already traced by process 7 (gdb)",
            ),
            (
                Facts {
                    ptrace_scope: Some(3),
                    ..base()
                },
                Errno::EPERM,
                "ptrace_scope is 3",
            ),
            (
                Facts {
                    ptrace_scope: Some(2),
                    ..base()
                },
                Errno::EPERM,
                "ptrace_scope is 2",
            ),
            (
                Facts {
                    ptrace_scope: Some(1),
                    ..base()
                },
                Errno::EPERM,
                "ptrace_scope is 1",
            ),
            (
                Facts {
                    uid: Some(0),
                    ..base()
                },
                Errno::EPERM,
                "belongs to user 0",
            ),
            (
                Facts {
                    uid: Some(65534),
                    our_uid: 0,
                    ..base()
                },
                Errno::EPERM,
                "root without CAP_SYS_PTRACE",
            ),
            (
                Facts {
                    not_dumpable: true,
                    ..base()
                },
                Errno::EPERM,
                "not dumpable",
            ),
            (base(), Errno::EPERM, "needs the right to ptrace"),
        ];
        for (facts, errno, expect) in cases {
            let line = explain(&facts, errno);
            assert!(line.contains(expect), "{line:?} lacks {expect:?}");
            assert!(!line.contains('\n'), "{line:?}");
        }
        // A parent under scope 1 and root with the capability are not refused for the scope.
        let parent = Facts {
            ptrace_scope: Some(1),
            ancestor: true,
            ..base()
        };
        assert!(!explain(&parent, Errno::EPERM).contains("ptrace_scope is"));
        let root = Facts {
            ptrace_scope: Some(2),
            cap_sys_ptrace: true,
            ..base()
        };
        assert!(!explain(&root, Errno::EPERM).contains("ptrace_scope is"));
    }

    #[test]
    fn the_facts_of_this_process_and_a_missing_one() {
        let me = facts(Pid::this());
        assert!(me.command.is_some());
        assert_eq!(me.uid, Some(me.our_uid));
        assert_eq!(refuse_early(&me), None);
        let gone = facts(Pid::from_raw(i32::MAX));
        assert_eq!(
            refuse_early(&gone).as_deref(),
            Some(&*format!("no process {} (it is not running)", i32::MAX))
        );
    }
}
