//! The agent's policy thread: every [`TICK`] it forgets cancel requests of ended threads,
//! measures the release of cancels that acted (the audit log's second line, after the
//! threads ended or [`FOLLOW_UP_DEADLINE`]), and — with a `[trigger]` — watches the live
//! counters and runs the autonomous mode.
//!
//! Autonomous mode: the trigger fires when live heap bytes exceed `live_bytes` on two
//! consecutive ticks (a soft limit: a spike shorter than a tick is ignored), or when the
//! count of failed allocations (`null_returns` of the agent's counters: malloc, calloc,
//! realloc returning NULL, posix_memalign/aligned_alloc failing) grew and
//! `on_malloc_failure` is set. The need is `live − live_bytes` (at least 1 byte, and at least
//! `min_release`). It then takes a fresh snapshot, ranks the permitted threads and cancels
//! the smallest set whose release meets the need (`decide::choose`), each with its own
//! decision line; if none suffices it cancels nothing and reports a memory shortage (agent
//! log and audit log). Every episode — cancelled, dry run or unresolved — is published to
//! attached clients as a `Push::Shortage`, and every measured line as a
//! `Push::ReleaseMeasured` (operator cancels too). After acting it waits for the follow-up
//! before firing again; a shortage is reported once per episode (until the trigger clears).
//!
//! Never: runs on a hook's path; it is an agent thread (never stopped, never listed).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use heaptui_protocol::{
    MeasuredRelease, Push, ShortageCause, ShortageOutcome, ShortageReport, Verdict,
};
use serde_json::json;

use super::parse::{Policy, TriggerRule};
use super::{Fresh, Outcome, Who, audit, cancel, decide, fresh_snapshot, record};
use crate::registry::{counters, threads};
use crate::server::events;
use crate::sync::PerProcess;

/// The thread's period.
pub const TICK: Duration = Duration::from_millis(100);
/// The longest a follow-up waits for cancelled threads to end before measuring.
pub const FOLLOW_UP_DEADLINE: Duration = Duration::from_secs(5);

struct FollowUp {
    decisions: Vec<u64>,
    tids: Vec<u32>,
    predicted: u64,
    /// Heap bytes of the decision's snapshot, when one was taken here.
    before: Option<u64>,
    since: Instant,
}

static FOLLOW_UPS: PerProcess<Mutex<Vec<FollowUp>>> = PerProcess::new(Mutex::new(Vec::new()));

/// In a fork child: no follow-ups of the parent's decisions.
pub fn renew_in_child() {
    FOLLOW_UPS.renew(Mutex::new(Vec::new()));
}

/// Schedules the measured-release line of decision `id` (threads `tids`, predicted release
/// `predicted`; `before` = heap bytes of the snapshot it was decided on).
pub fn follow_up(id: u64, tids: Vec<u32>, predicted: u64, before: Option<u64>) {
    FOLLOW_UPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(FollowUp {
            decisions: vec![id],
            tids,
            predicted,
            before,
            since: Instant::now(),
        });
}

/// Starts the policy thread.
pub fn start(policy: &'static Policy) {
    let first = crate::registry::blocks::number_waiting();
    let spawned = std::thread::Builder::new()
        .name("heaptui-policy".into())
        .spawn(move || run(policy));
    // What libc allocated for the new thread on this (the constructor's) thread is ours.
    crate::registry::threads::note_agent_spawn(first);
    if let Err(e) = spawned {
        crate::agent_log!(
            "cannot start the policy thread ({e}): no autonomous mode, no measured releases"
        );
    }
}

fn run(policy: &'static Policy) {
    threads::enter_agent_thread();
    let mut watch = Watch::new(policy.trigger);
    loop {
        std::thread::sleep(TICK);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cancel::sweep();
            measure_due();
            if let Some(fire) = watch.check() {
                autonomous(policy, fire, &mut watch);
            }
        }));
        if result.is_err() {
            crate::agent_log!("the policy thread caught a panic; it carries on");
        }
    }
}

/// Why the trigger fired and how much must be freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fire {
    pub live: u64,
    pub limit: Option<u64>,
    pub malloc_failed: bool,
    /// Allocations that failed since the previous tick.
    pub failures: u64,
    pub need: u64,
}

impl Fire {
    fn cause(&self) -> ShortageCause {
        match self.limit {
            Some(limit) if !self.malloc_failed => ShortageCause::SoftLimit { limit },
            _ => ShortageCause::AllocationFailed {
                failures: self.failures,
            },
        }
    }
}

/// Tells attached clients about a shortage episode.
fn publish(fire: &Fire, need: u64, outcome: ShortageOutcome) {
    events::publish(Push::Shortage(ShortageReport {
        unix_ms: audit::unix_ms(),
        cause: fire.cause(),
        live_bytes: fire.live,
        need_bytes: need,
        outcome,
    }));
}

/// The trigger's state between ticks.
pub struct Watch {
    rule: Option<TriggerRule>,
    nulls: u64,
    /// Don't fire again before this (after acting: until the follow-up measured).
    quiet_until: Option<Instant>,
    /// A shortage was reported in this episode.
    reported: bool,
    /// The limit was exceeded at the previous tick too.
    was_over: bool,
}

impl Watch {
    fn new(rule: Option<TriggerRule>) -> Watch {
        Watch {
            rule,
            nulls: counters::counters().null_returns,
            quiet_until: None,
            reported: false,
            was_over: false,
        }
    }

    fn check(&mut self) -> Option<Fire> {
        let rule = self.rule?;
        let c = counters::counters();
        let fire = evaluate(rule, c.live_bytes, c.null_returns, self.nulls);
        self.nulls = c.null_returns;
        let Some(fire) = fire else {
            self.reported = false;
            self.was_over = false;
            return None;
        };
        // A soft limit: over it on two consecutive ticks, so a passing spike is no shortage and
        // the allocation that crossed it has settled (its block is in the table, its pointer
        // in a frame) when the snapshot is taken. A failed allocation acts at once.
        let sustained = std::mem::replace(&mut self.was_over, true);
        if !fire.malloc_failed && !sustained {
            return None;
        }
        if self.quiet_until.is_some_and(|t| Instant::now() < t) || self.reported {
            return None;
        }
        Some(fire)
    }
}

/// Whether the trigger fires for these counters (pure).
pub fn evaluate(rule: TriggerRule, live: u64, nulls: u64, nulls_before: u64) -> Option<Fire> {
    let over = rule.live_bytes.filter(|&limit| live > limit);
    let malloc_failed = rule.on_malloc_failure && nulls > nulls_before;
    if over.is_none() && !malloc_failed {
        return None;
    }
    Some(Fire {
        live,
        limit: rule.live_bytes,
        malloc_failed,
        failures: if malloc_failed {
            nulls - nulls_before
        } else {
            0
        },
        need: rule.live_bytes.map_or(0, |l| live.saturating_sub(l)).max(1),
    })
}

fn autonomous(policy: &'static Policy, fire: Fire, watch: &mut Watch) {
    let snap: Fresh = match fresh_snapshot() {
        Ok(s) => s,
        Err(e) => {
            crate::agent_log!("memory trigger fired but no snapshot could be taken: {e}");
            publish(
                &fire,
                fire.need.max(policy.min_release),
                ShortageOutcome::Unresolved {
                    reason: format!("no snapshot could be taken to decide on: {e}"),
                },
            );
            watch.quiet_until = Some(Instant::now() + FOLLOW_UP_DEADLINE);
            return;
        }
    };
    let target = fire.need.max(policy.min_release);
    let trigger_fields = |extra: u64| {
        vec![
            ("live_bytes", json!(fire.live)),
            ("limit", json!(fire.limit)),
            ("malloc_failed", json!(fire.malloc_failed)),
            ("need", json!(target)),
            ("set_release", json!(extra)),
        ]
    };
    // Threads already asked to end are not asked again; threads a mechanism check refuses
    // are dropped and the choice is made again without them.
    let mut exclude: Vec<u32> = snap
        .kept
        .threads()
        .iter()
        .map(|t| t.tid)
        .filter(|&t| cancel::is_requested(t))
        .collect();
    loop {
        let ranked = decide::candidates(policy, &snap.kept, &exclude);
        let Some((set, release)) = decide::choose(&ranked, &snap.kept, target) else {
            shortage(&fire, target, &ranked, &snap, watch);
            return;
        };
        // Check every member's mechanism before acting on any (dry run), so a set is never
        // half cancelled because of a later member.
        let unfit: Vec<(u32, String)> = set
            .iter()
            .filter_map(|c| {
                super::act(c.tid, c.permit.mechanism, true)
                    .err()
                    .map(|r| (c.tid, r.reason(c.tid)))
            })
            .collect();
        if !unfit.is_empty() {
            for (tid, reason) in unfit {
                crate::agent_info!("autonomous mode: thread {tid} left out: {reason}");
                exclude.push(tid);
            }
            continue;
        }
        let mut ids = Vec::new();
        let mut tids = Vec::new();
        let mut refusals = Vec::new();
        for c in &set {
            let dry = policy.dry_run;
            let mut o = Outcome {
                verdict: Verdict::Done,
                predicted: Some(c.release),
                rule: Some(c.permit.describe()),
                mechanism: Some(c.permit.mechanism),
                name: Some(c.name.clone()),
                notes: trigger_fields(release),
                heap_bytes: Some(snap.kept.totals().bytes),
            };
            match super::act(c.tid, c.permit.mechanism, dry) {
                Ok(notes) => {
                    o.notes.extend(notes);
                    if dry {
                        o.verdict = Verdict::DryRun;
                        o.notes.push(("dry_run_by", json!("policy")));
                    }
                }
                Err(r) => o.verdict = Verdict::Refused(r.reason(c.tid)),
            }
            let acted = o.verdict == Verdict::Done;
            if let Verdict::Refused(r) = &o.verdict {
                refusals.push(r.clone());
            }
            ids.push(record(&Who::Autonomous, c.tid, &o));
            if acted {
                tids.push(c.tid);
            }
        }
        let set_tids: Vec<u32> = set.iter().map(|c| c.tid).collect();
        publish(
            &fire,
            target,
            if policy.dry_run {
                ShortageOutcome::DryRun {
                    tids: set_tids,
                    predicted_release: release,
                }
            } else if !tids.is_empty() {
                ShortageOutcome::Cancelled {
                    tids: tids.clone(),
                    predicted_release: release,
                }
            } else {
                // The mechanism checks passed a moment before; the threads changed since.
                ShortageOutcome::Unresolved {
                    reason: format!(
                        "the chosen threads {set_tids:?} were refused: {}",
                        refusals.join("; ")
                    ),
                }
            },
        );
        if !tids.is_empty() {
            FOLLOW_UPS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(FollowUp {
                    decisions: ids,
                    tids,
                    predicted: release,
                    before: Some(snap.kept.totals().bytes),
                    since: Instant::now(),
                });
        }
        watch.quiet_until = Some(Instant::now() + FOLLOW_UP_DEADLINE + TICK);
        if policy.dry_run {
            // Nothing will change: report the episode once, like a shortage.
            watch.reported = true;
        }
        return;
    }
}

fn shortage(
    fire: &Fire,
    target: u64,
    ranked: &[decide::Candidate],
    snap: &Fresh,
    watch: &mut Watch,
) {
    let all: Vec<u32> = ranked.iter().map(|c| c.tid).collect();
    // The release of every permitted thread together: the most the policy allows.
    let best = snap.kept.release(&all).unwrap_or(0);
    let why = if fire.malloc_failed {
        "an allocation failed"
    } else {
        "live heap bytes over the limit"
    };
    crate::agent_log!(
        "memory shortage: {why} (live {} bytes, limit {:?}); need {target} bytes, but the {} permitted thread(s) free at most {best} bytes together: nothing cancelled",
        fire.live,
        fire.limit,
        all.len()
    );
    audit::append(
        "shortage",
        vec![
            ("who", json!("autonomous")),
            ("live_bytes", json!(fire.live)),
            ("limit", json!(fire.limit)),
            ("malloc_failed", json!(fire.malloc_failed)),
            ("need", json!(target)),
            ("permitted_threads", json!(all)),
            ("permitted_release", json!(best)),
            ("verdict", json!("shortage")),
        ],
    );
    publish(
        fire,
        target,
        ShortageOutcome::Unresolved {
            reason: format!(
                "{why}: need {target} bytes, but the {} permitted thread(s) free at most {best} bytes together; nothing cancelled",
                all.len()
            ),
        },
    );
    watch.reported = true;
}

/// Writes the measured-release lines whose threads have ended or whose deadline passed.
fn measure_due() {
    let due: Vec<FollowUp> = {
        let mut list = FOLLOW_UPS.lock().unwrap_or_else(|e| e.into_inner());
        if list.is_empty() {
            return;
        }
        let (due, wait): (Vec<FollowUp>, Vec<FollowUp>) =
            std::mem::take(&mut *list).into_iter().partition(|f| {
                f.since.elapsed() >= FOLLOW_UP_DEADLINE || f.tids.iter().all(|&t| !cancel::alive(t))
            });
        *list = wait;
        due
    };
    if due.is_empty() {
        return;
    }
    let after = fresh_snapshot();
    for f in due {
        let ended: Vec<u32> = f
            .tids
            .iter()
            .copied()
            .filter(|&t| !cancel::alive(t))
            .collect();
        let (after_bytes, measured, error) = match (&after, f.before) {
            (Ok(a), Some(b)) => {
                let now = a.kept.totals().bytes;
                (Some(now), Some(b.saturating_sub(now)), None)
            }
            (Ok(a), None) => (Some(a.kept.totals().bytes), None, None),
            (Err(e), _) => (None, None, Some(e.clone())),
        };
        for &id in &f.decisions {
            audit::append(
                "measured",
                vec![
                    ("decision", json!(id)),
                    ("tids", json!(f.tids)),
                    ("ended", json!(ended)),
                    ("predicted_release", json!(f.predicted)),
                    ("measured_release", json!(measured)),
                    ("heap_bytes_before", json!(f.before)),
                    ("heap_bytes_after", json!(after_bytes)),
                    ("error", json!(error)),
                ],
            );
            events::publish(Push::ReleaseMeasured(MeasuredRelease {
                decision: id,
                tids: f.tids.clone(),
                predicted: f.predicted,
                measured,
            }));
        }
        crate::agent_info!(
            "cancel decision(s) {:?}: predicted release {} bytes, measured {:?} bytes (heap {:?} -> {:?}), ended threads {:?}",
            f.decisions,
            f.predicted,
            measured,
            f.before,
            after_bytes,
            ended
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trigger_fires_over_the_limit_or_on_a_new_failure() {
        let both = TriggerRule {
            live_bytes: Some(1000),
            on_malloc_failure: true,
        };
        assert_eq!(evaluate(both, 1000, 0, 0), None);
        let f = evaluate(both, 1500, 0, 0).unwrap();
        assert_eq!((f.need, f.malloc_failed), (500, false));
        let f = evaluate(both, 10, 3, 2).unwrap();
        assert_eq!((f.need, f.malloc_failed, f.failures), (1, true, 1));
        assert_eq!(f.cause(), ShortageCause::AllocationFailed { failures: 1 });
        let f = evaluate(both, 1500, 7, 7).unwrap();
        assert_eq!(f.cause(), ShortageCause::SoftLimit { limit: 1000 });
        let limit_only = TriggerRule {
            live_bytes: Some(1000),
            on_malloc_failure: false,
        };
        assert_eq!(evaluate(limit_only, 10, 3, 2), None);
        let failures_only = TriggerRule {
            live_bytes: None,
            on_malloc_failure: true,
        };
        assert_eq!(evaluate(failures_only, u64::MAX, 5, 5), None);
        assert_eq!(evaluate(failures_only, 7, 6, 5).unwrap().need, 1);
    }
}
