//! The memory-shortage policy and thread cancel (docs/reference.md §7).
//!
//! Owns: the policy read once at load from `HEAPTUI_POLICY` (`parse`), the cooperative cancel
//! tables behind the C API (`cancel`), the `pthread_cancel` safety check (`cleanup`), the
//! decision (`decide`), the audit log (`audit`), and the agent's policy thread (`trigger`:
//! stale-request sweeps, measured-release follow-ups, the autonomous trigger).
//!
//! Every decision, operator or autonomous, takes a fresh snapshot, computes the release with
//! the engine, checks the policy, then acts or refuses with a reason, and writes one audit
//! line. A policy file that cannot be read or parsed leaves the agent running with every
//! cancel refused and the reason on stderr; the program is never harmed by a bad policy.
//!
//! Must never: act on numbers sent by a client, cancel without an audit line, run from a
//! hook, or cancel anything when `dry_run` is set.

pub mod audit;
pub mod cancel;
pub mod cleanup;
pub mod decide;
pub mod parse;
pub mod trigger;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use heaptui_analysis::Kept;
use heaptui_protocol::{CancelVerdict, Mechanism, PolicyAnswer, Verdict};
use serde_json::json;

use crate::registry::threads;
use crate::sync::PerProcess;
use decide::Refusal;
use parse::{Policy, mechanism_name};

/// The policy as loaded.
#[derive(Debug)]
pub enum Loaded {
    /// No `HEAPTUI_POLICY`.
    None,
    /// The file could not be read or parsed: every cancel is refused with this message.
    Invalid { path: PathBuf, error: String },
    Valid {
        path: PathBuf,
        text: String,
        policy: Policy,
    },
}

static LOADED: OnceLock<Loaded> = OnceLock::new();

/// Reads a policy file into a [`Loaded`]; the error names the file and, from the parser, the
/// key, line and column.
pub fn load(path: &Path) -> Loaded {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            return Loaded::Invalid {
                path: path.into(),
                error: format!(
                    "policy file {} invalid: cannot read it: {e}",
                    path.display()
                ),
            };
        }
    };
    match parse::parse(&text) {
        Ok(policy) => Loaded::Valid {
            path: path.into(),
            text,
            policy,
        },
        Err(e) => Loaded::Invalid {
            path: path.into(),
            error: format!("policy file {} invalid: {e}", path.display()),
        },
    }
}

/// The policy in force (read on first use: the agent's constructor calls [`start`]).
pub fn loaded() -> &'static Loaded {
    LOADED.get_or_init(|| match &crate::config::config().policy_path {
        None => Loaded::None,
        Some(p) => load(p),
    })
}

/// Whether a valid policy is in force.
pub fn is_loaded() -> bool {
    matches!(loaded(), Loaded::Valid { .. })
}

/// Loads the policy, opens the audit log and starts the policy thread; called once from the
/// agent's constructor. Problems are one line on stderr; the program always runs.
pub fn start() {
    let cfg = crate::config::config();
    if let Some(path) = &cfg.audit_path
        && let Err(e) = audit::open(path)
    {
        crate::log::to_stderr(format_args!("{e}; decisions are not audited"));
    }
    match loaded() {
        Loaded::None => {}
        Loaded::Invalid { error, .. } => {
            crate::log::to_stderr(format_args!("{error}; every cancel will be refused"));
            crate::agent_log!("{error}; every cancel will be refused");
        }
        Loaded::Valid { path, policy, .. } => {
            crate::agent_info!(
                "policy {} loaded: {} permit rule(s), min_release {} bytes{}{}",
                path.display(),
                policy.permits.len(),
                policy.min_release,
                if policy.dry_run { ", dry run" } else { "" },
                if policy.trigger.is_some() {
                    ", autonomous trigger on"
                } else {
                    ""
                }
            );
            trigger::start(policy);
        }
    }
}

/// The answer to the protocol's `Policy` request: the policy in force, or the file that failed
/// with its one-line error (every cancel is then refused).
pub fn policy_answer() -> PolicyAnswer {
    match loaded() {
        Loaded::Valid { path, text, policy } => PolicyAnswer::Loaded {
            path: path.display().to_string(),
            text: text.clone(),
            summary: policy.summary(),
        },
        Loaded::Invalid { path, error } => PolicyAnswer::Invalid {
            path: path.display().to_string(),
            error: error.clone(),
        },
        Loaded::None => PolicyAnswer::NotLoaded,
    }
}

/// Who asked for a decision.
#[derive(Clone, Debug)]
pub enum Who {
    /// An operator: the client's name and address.
    Operator(String),
    /// The agent's own trigger.
    Autonomous,
}

impl Who {
    fn text(&self) -> String {
        match self {
            Who::Operator(s) => format!("operator {s}"),
            Who::Autonomous => "autonomous".into(),
        }
    }
}

/// A snapshot taken for a decision.
pub struct Fresh {
    /// The analysed graph, kept (made by the capture's scanning child).
    pub kept: Kept,
}

/// Tids seen in the agent's snapshots, so a thread that has ended is told apart from a tid
/// that never was ours.
static SEEN: PerProcess<Mutex<Vec<u32>>> = PerProcess::new(Mutex::new(Vec::new()));

/// In a fork child that serves (`HEAPTUI_FOLLOW_FORK`): the policy's state starts afresh (the
/// parent's locks may have been held by threads the child does not have); the audit log stays
/// the same file.
pub fn renew_in_child() {
    SEEN.renew(Mutex::new(Vec::new()));
    trigger::renew_in_child();
    audit::renew_in_child();
}

/// Records the threads of a snapshot taken elsewhere (the server's), so that a cancel of a
/// thread the operator saw there, and that has ended since, is refused as "already gone".
pub fn note_snapshot(kept: &Kept) {
    remember(kept);
}

fn remember(kept: &Kept) {
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    seen.extend(kept.threads().iter().map(|t| t.tid));
    seen.sort_unstable();
    seen.dedup();
}

fn seen_before(tid: u32) -> bool {
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .binary_search(&tid)
        .is_ok()
}

/// Stops the world and analyses: the snapshot every decision is made on.
pub fn fresh_snapshot() -> Result<Fresh, String> {
    let capture = std::panic::catch_unwind(crate::capture::take)
        .map_err(|_| "the capture panicked".to_string())?
        .map_err(|e| e.to_string())?;
    remember(&capture.kept);
    Ok(Fresh { kept: capture.kept })
}

/// What one decision came to, before it is turned into a verdict and an audit line.
struct Outcome {
    verdict: Verdict,
    predicted: Option<u64>,
    rule: Option<String>,
    mechanism: Option<Mechanism>,
    name: Option<String>,
    /// Extra audit fields (the handler state, the need of an autonomous decision…).
    notes: Vec<(&'static str, serde_json::Value)>,
    /// Heap bytes of the snapshot decided on.
    heap_bytes: Option<u64>,
}

impl Outcome {
    fn refused(r: Refusal, tid: u32) -> Outcome {
        Outcome {
            verdict: Verdict::Refused(r.reason(tid)),
            predicted: None,
            rule: None,
            mechanism: None,
            name: None,
            notes: Vec::new(),
            heap_bytes: None,
        }
    }
}

fn verdict_text(v: &Verdict) -> (&'static str, Option<&str>) {
    match v {
        Verdict::Done => ("done", None),
        Verdict::DryRun => ("dry-run", None),
        Verdict::Refused(r) => ("refused", Some(r.as_str())),
    }
}

/// Writes the decision's audit line and agent-log line; returns its id.
fn record(who: &Who, tid: u32, o: &Outcome) -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (verdict, reason) = verdict_text(&o.verdict);
    let mut fields = vec![
        ("decision", json!(id)),
        ("who", json!(who.text())),
        ("tid", json!(tid)),
        ("thread", json!(o.name)),
        ("rule", json!(o.rule)),
        ("mechanism", json!(o.mechanism.map(mechanism_name))),
        ("predicted_release", json!(o.predicted)),
        ("verdict", json!(verdict)),
        ("reason", json!(reason)),
    ];
    fields.extend(o.notes.iter().cloned());
    audit::append("decision", fields);
    crate::agent_info!(
        "cancel decision {id} by {}: thread {tid}: {verdict}{}{}",
        who.text(),
        reason.map(|r| format!(" ({r})")).unwrap_or_default(),
        o.predicted
            .map(|p| format!(", predicted release {p} bytes"))
            .unwrap_or_default()
    );
    id
}

/// The checks before a snapshot: a usable policy, a tid that is a live thread of ours.
fn precheck(tid: u32) -> Result<&'static Policy, Refusal> {
    let policy = match loaded() {
        Loaded::None => return Err(Refusal::NoPolicy),
        Loaded::Invalid { error, .. } => return Err(Refusal::PolicyInvalid(error.clone())),
        Loaded::Valid { policy, .. } => policy,
    };
    if tid == 0 {
        return Err(Refusal::UnknownTid);
    }
    if threads::is_agent_thread(tid) {
        return Err(Refusal::AgentThread);
    }
    if !cancel::alive(tid) {
        return Err(if seen_before(tid) {
            Refusal::AlreadyGone
        } else {
            Refusal::UnknownTid
        });
    }
    Ok(policy)
}

/// The mechanism's own checks and, unless `dry_run`, the act. `Ok(notes)` when done (or
/// would be done).
fn act(
    tid: u32,
    mechanism: Mechanism,
    dry_run: bool,
) -> Result<Vec<(&'static str, serde_json::Value)>, Refusal> {
    match mechanism {
        Mechanism::Cooperative => {
            let handler = cancel::has_handler(tid);
            let notes = vec![("handler_registered", json!(handler))];
            if !dry_run && !cancel::request(tid) {
                return Err(Refusal::RequestTableFull);
            }
            Ok(notes)
        }
        Mechanism::PthreadCancel => {
            if tid == std::process::id() {
                return Err(Refusal::MainThread);
            }
            let Some(pthread) = threads::pthread_of(tid) else {
                return Err(Refusal::NoPthread);
            };
            match cleanup::check(tid) {
                cleanup::Cleanup::None => {}
                cleanup::Cleanup::Found {
                    frame,
                    function,
                    module,
                    what,
                } => {
                    return Err(Refusal::Cleanup(format!(
                        "frame #{frame} {function} ({module}) has {what}"
                    )));
                }
                cleanup::Cleanup::Gone => return Err(Refusal::AlreadyGone),
                cleanup::Cleanup::NotStoppable(why) => return Err(Refusal::NotStoppable(why)),
            }
            if !dry_run {
                // SAFETY: `pthread` is the handle of thread `tid`, alive a moment ago (its
                // registry entry goes when it exits; a handle of a thread that has just
                // ended but not been joined is still valid for pthread_cancel). Deferred
                // cancellation: it acts only at the thread's next cancellation point.
                let rc = unsafe { libc::pthread_cancel(pthread) };
                if rc != 0 {
                    return Err(Refusal::AlreadyGone);
                }
            }
            Ok(Vec::new())
        }
    }
}

/// Decides an operator's cancel of `tid` (the protocol's `Cancel` request) and acts on it.
pub fn operator_cancel(tid: u32, dry_run: bool, who: Who) -> CancelVerdict {
    let outcome = decide_one(tid, dry_run, &who, None);
    let id = record(&who, tid, &outcome);
    if outcome.verdict == Verdict::Done
        && let Some(p) = outcome.predicted
    {
        trigger::follow_up(id, vec![tid], p, outcome.heap_bytes);
    }
    CancelVerdict {
        tid,
        verdict: outcome.verdict,
        predicted_release: outcome.predicted,
        rule: outcome.rule,
        mechanism: outcome.mechanism,
    }
}

/// One thread's decision on `snapshot` (taken now when `None`).
fn decide_one(tid: u32, dry_run: bool, _who: &Who, snapshot: Option<&Fresh>) -> Outcome {
    let policy = match precheck(tid) {
        Ok(p) => p,
        Err(r) => return Outcome::refused(r, tid),
    };
    let taken;
    let fresh = match snapshot {
        Some(f) => f,
        None => match fresh_snapshot() {
            Ok(f) => {
                taken = f;
                &taken
            }
            Err(e) => return Outcome::refused(Refusal::SnapshotFailed(e), tid),
        },
    };
    let permitted = match decide::evaluate(policy, &fresh.kept, tid) {
        Ok(p) => p,
        Err(r) => {
            let mut o = Outcome::refused(r, tid);
            o.heap_bytes = Some(fresh.kept.totals().bytes);
            if let Some(t) = fresh.kept.threads().iter().find(|t| t.tid == tid) {
                o.name = Some(t.name.clone());
                o.predicted = fresh.kept.release(&[tid]).ok();
                o.rule = decide::permit_of(policy, t).map(|p| p.describe());
                o.mechanism = decide::permit_of(policy, t).map(|p| p.mechanism);
            }
            return o;
        }
    };
    let dry = dry_run || policy.dry_run;
    let mut o = Outcome {
        verdict: Verdict::Done,
        predicted: Some(permitted.predicted),
        rule: Some(permitted.permit.describe()),
        mechanism: Some(permitted.permit.mechanism),
        name: Some(permitted.name.clone()),
        notes: Vec::new(),
        heap_bytes: Some(fresh.kept.totals().bytes),
    };
    match act(tid, permitted.permit.mechanism, dry) {
        Ok(notes) => {
            o.notes = notes;
            if dry {
                o.verdict = Verdict::DryRun;
                o.notes.push((
                    "dry_run_by",
                    json!(if policy.dry_run { "policy" } else { "request" }),
                ));
            }
        }
        Err(r) => o.verdict = Verdict::Refused(r.reason(tid)),
    }
    o
}
