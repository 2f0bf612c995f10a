//! The operator's cancel dialog (SPEC §7, issue 6) as plain state: which thread, the agent's
//! dry-run prediction and verdict, and the outcome of the confirmed cancel.
//!
//! The two phases live here so nothing real reaches the agent before the operator confirms:
//! opening asks only for a dry run; [`CancelDialog::confirm`] is the one way to the real cancel,
//! and it lets that happen once. The figures are the agent's (computed on its own fresh
//! snapshot); this module never predicts anything itself and never draws.

use heaptui_protocol::message::{CancelVerdict, Mechanism};

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
    /// "measured X (predicted Y)" once a later snapshot no longer has the thread.
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
            measured: None,
        }
    }

    /// Whether confirming now may send the real cancel: only once, only after the dry run
    /// answered (so the operator saw the verdict first).
    pub fn can_confirm(&self) -> bool {
        self.phase == CancelPhase::Ready
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

/// A done cancel waiting for a snapshot without its thread, to measure what it freed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measuring {
    pub tid: u32,
    pub predicted: Option<u64>,
    /// The snapshot and its live bytes when the cancel was confirmed.
    pub snapshot: u64,
    pub bytes_before: u64,
}
