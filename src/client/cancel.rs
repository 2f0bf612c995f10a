//! `heaptui cancel ADDR TID [--dry-run] [--wait SECONDS]` (docs/reference.md §2, §7): asks the
//! agent to cancel one thread under its memory-shortage policy and prints the verdict, then the
//! policy in force (its file, or why there is none that works: a file that failed to parse is named
//! with its error), and — when the cancel acted — the release the agent measured after the
//! thread ended, beside the prediction.
//!
//! The agent decides everything — fresh snapshot, predicted release, which rule permits it,
//! the threshold, the mechanism's safety check — and this command only relays the request
//! and renders the answer. It sends no numbers: the agent never trusts a client's.
//!
//! The measured release comes as the agent's `ReleaseMeasured` push, which a connection only
//! gets for events after it subscribed: so the command subscribes before it cancels, asks for
//! the policy before that (a push is never read by a request), and then waits for the push of
//! its thread for a bounded time. Never: wait after a refusal or a dry run (the agent measures
//! nothing then), or fail the command because the measurement is late (the cancel is done).

use std::io::Write;
use std::time::{Duration, Instant};

use heaptui_protocol::{
    CancelVerdict, MeasuredRelease, Mechanism, Push, RequestBody, Response, Verdict,
};

use super::{Address, ClientError, Session, TokenSource};
use crate::size::human_exact;

/// Whether the agent acted, would have acted (dry run), or refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    DryRun,
    Refused,
}

/// Sends the cancel and prints the verdict and the policy; after a cancel that acted, waits up
/// to `wait` for the measured release and prints it (or that it did not come). Returns what
/// the verdict was.
pub fn cancel(
    address: &Address,
    token: &TokenSource,
    tid: u32,
    dry_run: bool,
    wait: Duration,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let mut session = Session::connect(address, token)?;
    // The verdict is the answer; the policy line only explains it, so an agent that cannot
    // say leaves it out. Asked first: once subscribed, a request would skip the push.
    let policy = match session.request(RequestBody::Policy) {
        Ok(Response::Policy(policy)) => Some(policy),
        _ => None,
    };
    let waits = !dry_run && !wait.is_zero();
    if waits {
        match session.request(RequestBody::Subscribe)? {
            Response::Subscribed { .. } => {}
            other => return Err(unexpected(address, "a subscribe", &other).into()),
        }
    }
    let verdict = match session.request(RequestBody::Cancel { tid, dry_run })? {
        Response::Cancel(v) => v,
        other => return Err(unexpected(address, "a cancel", &other).into()),
    };
    writeln!(out, "{}", render(&verdict))?;
    if let Some(policy) = &policy {
        writeln!(out, "  policy {}", crate::app::cancel::policy_line(policy))?;
    }
    // The agent follows up only a cancel that acted on a prediction.
    if let (true, Verdict::Done, Some(predicted)) =
        (waits, &verdict.verdict, verdict.predicted_release)
    {
        // Make sure the verdict is seen while the measurement is awaited.
        out.flush()?;
        let deadline = Instant::now() + wait;
        let push = session.wait_push(deadline, |p| is_for(p, tid, predicted))?;
        let line = match push {
            Some(Push::ReleaseMeasured(m)) => measured_line(&m),
            _ => late_line(tid, wait),
        };
        writeln!(out, "{line}")?;
    }
    Ok(match verdict.verdict {
        Verdict::Done => Outcome::Done,
        Verdict::DryRun => Outcome::DryRun,
        Verdict::Refused(_) => Outcome::Refused,
    })
}

fn unexpected(address: &Address, asked: &str, got: &Response) -> ClientError {
    ClientError::new(format!(
        "the agent at {address} answered {asked} request with {}; is it the same heaptui version?",
        got.kind()
    ))
}

/// Whether `push` is the measured release of this command's cancel: the operator's cancel of
/// one thread, with the prediction its verdict gave (an autonomous cancel naming the same
/// thread has its own set and prediction).
fn is_for(push: &Push, tid: u32, predicted: u64) -> bool {
    matches!(push, Push::ReleaseMeasured(m) if m.tids == [tid] && m.predicted == predicted)
}

/// The measured release beside the prediction (the TUI dialog's words).
pub fn measured_line(m: &MeasuredRelease) -> String {
    format!("  release {}", crate::app::cancel::measured_line(m))
}

/// What the command says when the measured release did not come within `wait`.
pub fn late_line(tid: u32, wait: Duration) -> String {
    format!(
        "  release not measured yet: the agent sent no measured release for thread {tid} \
         within {} s (its audit log gets it when measured)",
        wait.as_secs_f64()
    )
}

fn mechanism(m: Mechanism) -> &'static str {
    match m {
        Mechanism::Cooperative => "cooperative",
        Mechanism::PthreadCancel => "pthread_cancel",
    }
}

/// The verdict as the lines the command prints.
pub fn render(v: &CancelVerdict) -> String {
    let mut details = Vec::new();
    if let Some(p) = v.predicted_release {
        details.push(format!("predicted release {}", human_exact(p)));
    }
    if let Some(m) = v.mechanism {
        details.push(format!("mechanism {}", mechanism(m)));
    }
    if let Some(r) = &v.rule {
        details.push(format!("rule {r}"));
    }
    let details = if details.is_empty() {
        String::new()
    } else {
        format!("\n  {}", details.join("\n  "))
    };
    match &v.verdict {
        Verdict::Done => format!("cancel of thread {}: done{details}", v.tid),
        Verdict::DryRun => format!(
            "cancel of thread {}: dry run, nothing done (the policy permits it){details}",
            v.tid
        ),
        Verdict::Refused(reason) => {
            format!("cancel of thread {}: refused: {reason}{details}", v.tid)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_render_with_their_details() {
        let done = CancelVerdict {
            tid: 7,
            verdict: Verdict::Done,
            predicted_release: Some(8 << 20),
            rule: Some("permit #1: thread = \"runaway\" (cooperative)".into()),
            mechanism: Some(Mechanism::Cooperative),
        };
        assert_eq!(
            render(&done),
            "cancel of thread 7: done\n  predicted release 8.0 MiB (8388608 bytes)\n  \
             mechanism cooperative\n  rule permit #1: thread = \"runaway\" (cooperative)"
        );
        let refused = CancelVerdict {
            tid: 9,
            verdict: Verdict::Refused("no policy: …".into()),
            predicted_release: None,
            rule: None,
            mechanism: None,
        };
        assert_eq!(
            render(&refused),
            "cancel of thread 9: refused: no policy: …"
        );
        let dry = CancelVerdict {
            verdict: Verdict::DryRun,
            ..done
        };
        assert!(render(&dry).starts_with("cancel of thread 7: dry run, nothing done"));
    }

    #[test]
    fn only_the_operators_cancel_of_this_thread_is_awaited() {
        let m = |tids: Vec<u32>, predicted| {
            Push::ReleaseMeasured(MeasuredRelease {
                decision: 3,
                tids,
                predicted,
                measured: Some(predicted - 10),
            })
        };
        assert!(is_for(&m(vec![7], 100), 7, 100));
        assert!(!is_for(&m(vec![8], 100), 7, 100));
        assert!(!is_for(&m(vec![7, 9], 100), 7, 100));
        assert!(!is_for(&m(vec![7], 200), 7, 100));
        let Push::ReleaseMeasured(got) = m(vec![7], 2048) else {
            unreachable!()
        };
        assert_eq!(
            measured_line(&got),
            "  release measured 2.0 KiB (2038 bytes); predicted 2.0 KiB (2048 bytes)"
        );
        assert_eq!(
            late_line(7, Duration::from_secs(10)),
            "  release not measured yet: the agent sent no measured release for thread 7 \
             within 10 s (its audit log gets it when measured)"
        );
    }
}
