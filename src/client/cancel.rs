//! `heaptui cancel ADDR TID [--dry-run]` (SPEC §2, §7): asks the agent to cancel one thread
//! under its memory-shortage policy and prints the verdict, then the policy in force (its
//! file, or why there is none that works: a file that failed to parse is named with its
//! error).
//!
//! The agent decides everything — fresh snapshot, predicted release, which rule permits it,
//! the threshold, the mechanism's safety check — and this command only relays the request
//! and renders the answer. It sends no numbers: the agent never trusts a client's.

use std::io::Write;

use heaptui_protocol::{CancelVerdict, Mechanism, RequestBody, Response, Verdict};

use super::{Address, ClientError, Session, TokenSource};
use crate::size::human_exact;

/// Whether the agent acted, would have acted (dry run), or refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    DryRun,
    Refused,
}

/// Sends the cancel and prints the verdict; returns what it was.
pub fn cancel(
    address: &Address,
    token: &TokenSource,
    tid: u32,
    dry_run: bool,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let mut session = Session::connect(address, token)?;
    let verdict = match session.request(RequestBody::Cancel { tid, dry_run })? {
        Response::Cancel(v) => v,
        other => {
            return Err(ClientError::new(format!(
                "the agent at {address} answered a cancel with {other:?}; is it the same heaptui version?"
            ))
            .into());
        }
    };
    writeln!(out, "{}", render(&verdict))?;
    // The verdict is the answer; the policy line only explains it, so an agent that cannot
    // say leaves it out.
    if let Ok(Response::Policy(policy)) = session.request(RequestBody::Policy) {
        writeln!(out, "  policy {}", crate::app::cancel::policy_line(&policy))?;
    }
    Ok(match verdict.verdict {
        Verdict::Done => Outcome::Done,
        Verdict::DryRun => Outcome::DryRun,
        Verdict::Refused(_) => Outcome::Refused,
    })
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
}
