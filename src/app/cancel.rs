//! The operator's cancel dialog (docs/reference.md §7, issue 6) as plain state: which thread, the
//! agent's policy, its dry-run prediction and verdict, the outcome of the confirmed cancel and the
//! release the agent measured afterwards; and the one-line texts of the agent's policy,
//! memory-shortage reports and measured releases.
//!
//! The two phases live here so nothing real reaches the agent before the operator confirms:
//! opening asks only for a dry run; [`CancelDialog::confirm`] is the one way to the real cancel,
//! and it lets that happen once. The figures are the agent's (computed on its own fresh
//! snapshot); this module never predicts anything itself and never draws.

use heaptui_protocol::message::{
    CancelVerdict, MeasuredRelease, Mechanism, PolicyAnswer, ShortageCause, ShortageOutcome,
    ShortageReport, Verdict,
};

use crate::figures::count;
use crate::size::{human, human_exact};

/// Where the dialog is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelPhase {
    /// The dry run has been asked for; no answer yet.
    Predicting,
    /// The dry run answered (or failed): the operator decides.
    Ready,
    /// The real cancel has been sent; no answer yet.
    Sending,
    /// The real cancel answered (or failed); the dialog only shows it now.
    Finished,
}

/// The confirmation dialog for cancelling one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelDialog {
    pub tid: u32,
    pub name: String,
    pub phase: CancelPhase,
    /// The agent's dry-run answer: predicted release, rule, mechanism, verdict.
    pub prediction: Option<CancelVerdict>,
    /// The answer to the real cancel.
    pub outcome: Option<CancelVerdict>,
    /// A failed request (dry run or real), kept in the dialog.
    pub error: Option<String>,
    /// The agent's policy, when it answered.
    pub policy: Option<PolicyAnswer>,
    /// "measured X; predicted Y", from the agent's `ReleaseMeasured` push.
    pub measured: Option<String>,
}

impl CancelDialog {
    pub fn new(tid: u32, name: String) -> Self {
        CancelDialog {
            tid,
            name,
            phase: CancelPhase::Predicting,
            prediction: None,
            outcome: None,
            error: None,
            policy: None,
            measured: None,
        }
    }

    /// Whether confirming now may send the real cancel: only once, only after the dry run
    /// answered (so the operator saw the verdict first), and not when it refused (the agent
    /// would refuse again).
    pub fn can_confirm(&self) -> bool {
        self.phase == CancelPhase::Ready
            && !self
                .prediction
                .as_ref()
                .is_some_and(|p| matches!(p.verdict, Verdict::Refused(_)))
    }

    /// The release the agent predicted when it acted, when it is not the dry run's: the
    /// thread's heap changed between the two (the demo's runaway starts over at a cap).
    pub fn acted_on(&self) -> Option<(u64, u64)> {
        let dry_run = self.prediction.as_ref()?.predicted_release?;
        let acted = self.outcome.as_ref()?.predicted_release?;
        (acted != dry_run).then_some((acted, dry_run))
    }

    /// The operator confirmed: true when the real cancel is to be sent now.
    pub fn confirm(&mut self) -> bool {
        if self.can_confirm() {
            self.phase = CancelPhase::Sending;
            self.error = None;
            true
        } else {
            false
        }
    }

    /// The answer to the request this dialog is waiting for.
    pub fn answered(&mut self, verdict: CancelVerdict) {
        match self.phase {
            CancelPhase::Predicting => {
                self.prediction = Some(verdict);
                self.phase = CancelPhase::Ready;
            }
            CancelPhase::Sending => {
                self.outcome = Some(verdict);
                self.phase = CancelPhase::Finished;
            }
            CancelPhase::Ready | CancelPhase::Finished => {}
        }
    }

    /// The request this dialog is waiting for failed: the reason stays in the dialog.
    pub fn failed(&mut self, message: String) {
        self.error = Some(message);
        self.phase = match self.phase {
            // A failed dry run: the operator can still decide (the agent decides again).
            CancelPhase::Predicting => CancelPhase::Ready,
            _ => CancelPhase::Finished,
        };
    }
}

pub fn mechanism_name(m: Mechanism) -> &'static str {
    match m {
        Mechanism::Cooperative => "cooperative",
        Mechanism::PthreadCancel => "pthread_cancel",
    }
}

fn tid_list(tids: &[u32]) -> String {
    tids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The policy in force, in one line: its file and rules, or why every cancel is refused.
pub fn policy_line(p: &PolicyAnswer) -> String {
    match p {
        PolicyAnswer::NotLoaded => {
            "none: the agent runs without HEAPTUI_POLICY, so every cancel is refused".into()
        }
        PolicyAnswer::Loaded { path, summary, .. } => format!(
            "{path}: {}, min_release {}{}{}",
            count(summary.permits.len() as u64, "permit rule", "permit rules"),
            human(summary.min_release),
            if summary.trigger.is_some() {
                ", autonomous trigger on"
            } else {
                ""
            },
            if summary.dry_run { ", dry run" } else { "" },
        ),
        PolicyAnswer::Invalid { path, error } => {
            format!("{path} is invalid, so every cancel is refused: {error}")
        }
    }
}

/// A memory-shortage episode in one line, for the banner.
pub fn shortage_line(r: &ShortageReport) -> String {
    let cause = match r.cause {
        ShortageCause::SoftLimit { limit } => {
            format!("live {} > {} limit", human(r.live_bytes), human(limit))
        }
        ShortageCause::AllocationFailed { failures } => format!(
            "{failures} allocation(s) failed at live {}",
            human(r.live_bytes)
        ),
    };
    let what = match &r.outcome {
        ShortageOutcome::Cancelled {
            tids,
            predicted_release,
        } => format!(
            "cancelled thread {}, predicted to free {}",
            tid_list(tids),
            human(*predicted_release)
        ),
        ShortageOutcome::DryRun {
            tids,
            predicted_release,
        } => format!(
            "dry run: would cancel thread {}, freeing {}",
            tid_list(tids),
            human(*predicted_release)
        ),
        ShortageOutcome::Unresolved { reason } => format!("nothing cancelled: {reason}"),
    };
    format!(
        "MEMORY SHORTAGE: {cause}, need {}; {what}",
        human(r.need_bytes)
    )
}

/// A measured release beside its prediction.
pub fn measured_line(m: &MeasuredRelease) -> String {
    match m.measured {
        Some(bytes) => format!(
            "measured {}; predicted {}",
            human_exact(bytes),
            human_exact(m.predicted)
        ),
        None => format!(
            "not measured (the agent's audit log says why); predicted {}",
            human_exact(m.predicted)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_protocol::message::{PolicySummary, Trigger};

    #[test]
    fn lines_for_the_policy_shortages_and_measured_releases() {
        let invalid = PolicyAnswer::Invalid {
            path: "/etc/p.toml".into(),
            error: "line 4, column 1: unknown key `mechansim`".into(),
        };
        assert_eq!(
            policy_line(&invalid),
            "/etc/p.toml is invalid, so every cancel is refused: line 4, column 1: unknown key `mechansim`"
        );
        let loaded = PolicyAnswer::Loaded {
            path: "p.toml".into(),
            text: String::new(),
            summary: PolicySummary {
                dry_run: false,
                min_release: 1 << 20,
                permits: Vec::new(),
                trigger: Some(Trigger {
                    live_bytes: Some(1 << 30),
                    on_malloc_failure: false,
                }),
            },
        };
        assert_eq!(
            policy_line(&loaded),
            "p.toml: 0 permit rules, min_release 1.0 MiB, autonomous trigger on"
        );
        assert!(policy_line(&PolicyAnswer::NotLoaded).starts_with("none"));

        let mut r = ShortageReport {
            unix_ms: 0,
            cause: ShortageCause::SoftLimit { limit: 7 << 20 },
            live_bytes: 10 << 20,
            need_bytes: 3 << 20,
            outcome: ShortageOutcome::Cancelled {
                tids: vec![7, 9],
                predicted_release: 6 << 20,
            },
        };
        assert_eq!(
            shortage_line(&r),
            "MEMORY SHORTAGE: live 10.0 MiB > 7.0 MiB limit, need 3.0 MiB; \
             cancelled thread 7, 9, predicted to free 6.0 MiB"
        );
        r.cause = ShortageCause::AllocationFailed { failures: 2 };
        r.outcome = ShortageOutcome::Unresolved {
            reason: "no permitted thread".into(),
        };
        assert_eq!(
            shortage_line(&r),
            "MEMORY SHORTAGE: 2 allocation(s) failed at live 10.0 MiB, need 3.0 MiB; \
             nothing cancelled: no permitted thread"
        );

        let mut m = MeasuredRelease {
            decision: 3,
            tids: vec![7],
            predicted: 2048,
            measured: Some(1024),
        };
        assert_eq!(
            measured_line(&m),
            "measured 1.0 KiB (1024 bytes); predicted 2.0 KiB (2048 bytes)"
        );
        m.measured = None;
        assert!(measured_line(&m).starts_with("not measured"));
    }
}
