//! Automatic snapshots (mark-and-count, docs/reference.md §8) and the counter history, both driven
//! by one agent thread, `heaptui-watch`, that reads the live counters: every [`POLL`] while
//! `HEAPTUI_AUTO_SNAPSHOT` is on, to decide on snapshots, and every [`SAMPLE`] into a ring of
//! [`MAX_COUNTER_SAMPLES`] for the live-vs-allocated chart (`CounterHistory`).
//!
//! The rule is the one of `heaptui_analysis::views::mark_and_count` — `every:N` fires when the
//! bytes allocated since the last snapshot (`X`) reach `N`; `tolerance:T` fires when
//! `X + Y > Z + T`, `Y` the heap bytes of the last snapshot, `Z` those of the peak snapshot —
//! but evaluated on the polled counters, never in a hook: the allocation path pays nothing.
//! Every snapshot, automatic or requested, restarts the rule (`X` from the allocated-bytes
//! counter read just before its capture, `Y` from the bytes it holds).
//!
//! How close the kept peak is to the true peak. On the event stream the rule guarantees
//! `true peak − kept peak ≤ T` (see the engine's proof). Here `X` is monotone, so once due the
//! rule stays due until a snapshot is taken, and a poll sees it at most one [`POLL`] late; the
//! snapshot then sees the heap of its own freeze, a few milliseconds later still. So the
//! guarantee holds exactly for the decisions on the polled counter stream, and the kept peak
//! is within `T` plus what the program allocates between two polls and the capture's freeze
//! (tests: `polled_rule_bound_grows_by_one_poll`, and a live target stepping more slowly than
//! the poll). A program that rises and falls within a few milliseconds can have a peak no
//! poll saw; the peak live-bytes counter still reports that peak exactly.
//!
//! Never: take a snapshot from a hook, hold the rule's lock across a capture, or stop the
//! program when its thread cannot start (one line in the log, the counters go on without it).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use heaptui_protocol::{CounterHistory, LiveCounters, MAX_COUNTER_SAMPLES, SnapshotRule};

use super::state;
use crate::config::config;
use crate::registry::{counters, threads};
use crate::sync::PerProcess;

/// How often the rule is checked while it is on.
pub const POLL: Duration = Duration::from_millis(5);
/// How often the counters are sampled into the history.
pub const SAMPLE: Duration = Duration::from_secs(1);
/// How often the allocation clock ([`allocation_clock`]) is read.
pub const CLOCK_TICK: Duration = Duration::from_millis(100);
/// Most allocation-clock readings kept (16 bytes each); when full, every second one goes, so
/// old allocations keep a coarser time rather than none.
const CLOCK_CAP: usize = 32_768;
/// After a failed automatic snapshot, the rule waits this long before trying again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// The automatic-snapshot rule, evaluated on counter readings rather than on each event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolledRule {
    rule: SnapshotRule,
    /// The allocated-bytes counter when the last snapshot was taken (`X` counts from it).
    allocated_at_last: u64,
    /// `Y`: heap bytes of the last snapshot.
    live_at_last: u64,
    /// `Z`: heap bytes of the peak snapshot.
    kept: Option<u64>,
}

impl PolledRule {
    pub const fn new(rule: SnapshotRule) -> Self {
        PolledRule {
            rule,
            allocated_at_last: 0,
            live_at_last: 0,
            kept: None,
        }
    }

    pub fn rule(&self) -> SnapshotRule {
        self.rule
    }

    /// Whether a snapshot is due, the allocated-bytes counter reading `allocated`.
    pub fn due(&self, allocated: u64) -> bool {
        let x = allocated.saturating_sub(self.allocated_at_last);
        match self.rule {
            SnapshotRule::Off => false,
            SnapshotRule::EveryBytes(n) => x >= n.max(1),
            SnapshotRule::Tolerance(t) => {
                x.saturating_add(self.live_at_last) > self.kept.unwrap_or(0).saturating_add(t)
            }
        }
    }

    /// A snapshot holding `live` heap bytes was taken, the allocated-bytes counter reading
    /// `allocated` before its capture: the rule restarts from it. Returns whether it is the
    /// highest so far (strictly higher than the peak snapshot, or the first).
    pub fn taken(&mut self, allocated: u64, live: u64) -> bool {
        self.allocated_at_last = allocated;
        self.live_at_last = live;
        let higher = self.kept.is_none_or(|k| live > k);
        if higher {
            self.kept = Some(live);
        }
        higher
    }
}

static RULE: PerProcess<Mutex<PolledRule>> =
    PerProcess::new(Mutex::new(PolledRule::new(SnapshotRule::Off)));
static SAMPLES: PerProcess<Mutex<VecDeque<LiveCounters>>> =
    PerProcess::new(Mutex::new(VecDeque::new()));
/// `(sequence number, unix ms)` readings, ascending in both: a block with sequence number
/// `s` was allocated before the time of the first reading whose number is at least `s`.
static CLOCK: PerProcess<Mutex<Vec<(u64, u64)>>> = PerProcess::new(Mutex::new(Vec::new()));

/// In a fork child that serves (`HEAPTUI_FOLLOW_FORK`): the rule starts over, and there are no
/// samples or clock readings (the child has no watch thread to take them).
pub fn renew_in_child() {
    RULE.renew(Mutex::new(PolledRule::new(config().auto_snapshot)));
    SAMPLES.renew(Mutex::new(VecDeque::new()));
    CLOCK.renew(Mutex::new(Vec::new()));
}
/// Set by the watch thread once it runs.
static WATCHING: AtomicBool = AtomicBool::new(false);

fn rule() -> std::sync::MutexGuard<'static, PolledRule> {
    RULE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reports a snapshot to the rule (see [`PolledRule::taken`]).
pub fn snapshot_taken(allocated: u64, live: u64) -> bool {
    rule().taken(allocated, live)
}

/// Whether the rule wants a snapshot now.
pub fn due_now() -> bool {
    let r = *rule();
    r.rule() != SnapshotRule::Off && r.due(counters::counters().allocated_bytes)
}

/// The counter samples so far, oldest first.
pub fn counter_history() -> CounterHistory {
    let samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    CounterHistory {
        interval_ms: SAMPLE.as_millis() as u32,
        samples: samples.iter().cloned().collect(),
    }
}

/// The allocation clock: readings of the allocation sequence number against the wall clock,
/// every [`CLOCK_TICK`] while the program allocates (an idle program adds none), oldest
/// first. It dates a block by its sequence number — the table has no room for a time per
/// block — to within a tick, coarser for blocks older than the readings kept.
pub fn allocation_clock() -> Vec<(u64, u64)> {
    CLOCK.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn read_clock() {
    let seq = crate::registry::blocks::number_waiting();
    let mut clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    if clock.last().is_some_and(|&(last, _)| last == seq) {
        return;
    }
    if clock.len() >= CLOCK_CAP {
        // Keep every second reading (and the newest): old blocks get a coarser date.
        let mut i = 0;
        clock.retain(|_| {
            i += 1;
            i % 2 == 0
        });
    }
    clock.push((seq, state::unix_ms()));
}

fn sample() {
    let c = state::live_counters();
    let mut samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    if samples.len() >= MAX_COUNTER_SAMPLES {
        samples.pop_front();
    }
    samples.push_back(c);
}

/// Starts the watch thread from the agent's constructor with the configured rule.
pub fn start(rule_in_force: SnapshotRule) {
    *rule() = PolledRule::new(rule_in_force);
    // The ring is allocated once, here (agent memory), not while sampling.
    SAMPLES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reserve_exact(MAX_COUNTER_SAMPLES);
    CLOCK
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .reserve_exact(CLOCK_CAP);
    let first = crate::registry::blocks::number_waiting();
    let launched = std::thread::Builder::new()
        .name("heaptui-watch".into())
        .spawn(move || watch(rule_in_force));
    // As the server does: what libc allocates while the thread starts happens here, before the
    // program's main, and is recorded as the agent's.
    if launched.is_ok() {
        let started = Instant::now();
        while !WATCHING.load(Ordering::Acquire) && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    threads::note_agent_spawn(first);
    if let Err(e) = launched {
        crate::log::to_stderr(format_args!(
            "heaptui: cannot start the watch thread ({e}): no automatic snapshots, no counter history"
        ));
    }
}

fn watch(rule_in_force: SnapshotRule) {
    threads::enter_agent_thread();
    WATCHING.store(true, Ordering::Release);
    let on = rule_in_force != SnapshotRule::Off;
    let mut next_sample = Instant::now();
    let mut next_tick = Instant::now();
    let mut quiet_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if now >= next_tick {
            read_clock();
            next_tick = now + CLOCK_TICK;
        }
        if now >= next_sample {
            sample();
            next_sample += SAMPLE;
            if next_sample <= now {
                // Late (a long capture): sample on from now rather than catch up.
                next_sample = now + SAMPLE;
            }
        }
        if on && quiet_until.is_none_or(|q| now >= q) && due_now() {
            let taken = std::panic::catch_unwind(state::take_automatic)
                .unwrap_or_else(|_| Err("the snapshot panicked".to_string()));
            match taken {
                Ok(_) => quiet_until = None,
                Err(e) => {
                    crate::agent_log!(
                        "automatic snapshot failed ({e}); the rule tries again in {} s",
                        RETRY_AFTER_FAILURE.as_secs()
                    );
                    quiet_until = Some(Instant::now() + RETRY_AFTER_FAILURE);
                }
            }
        }
        let wait = if on {
            POLL
        } else {
            next_sample
                .min(next_tick)
                .saturating_duration_since(Instant::now())
        };
        std::thread::sleep(wait.max(Duration::from_millis(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_analysis::views::mark_and_count::{self, MarkAndCount};

    /// `a60` = alloc 60, `f60` = free 60.
    fn events(text: &str) -> Vec<i64> {
        text.split_whitespace()
            .map(|e| {
                let n: i64 = e[1..].parse().unwrap();
                if e.starts_with('a') { n } else { -n }
            })
            .collect()
    }

    /// Live bytes at each snapshot the polled rule takes when it is polled after every
    /// `every`-th event; each snapshot sees the heap of its poll. Returns them and the kept.
    fn polled(rule: SnapshotRule, trace: &[i64], every: usize) -> (Vec<u64>, Option<u64>) {
        let mut r = PolledRule::new(rule);
        let (mut live, mut allocated) = (0u64, 0u64);
        let mut taken = Vec::new();
        for (i, &e) in trace.iter().enumerate() {
            if e > 0 {
                live += e as u64;
                allocated += e as u64;
            } else {
                live -= (-e) as u64;
            }
            if (i + 1) % every == 0 && r.due(allocated) {
                r.taken(allocated, live);
                taken.push(live);
            }
        }
        (taken, r.kept)
    }

    fn engine(rule: SnapshotRule, trace: &[i64]) -> Vec<u64> {
        let rule = match rule {
            SnapshotRule::Off => mark_and_count::SnapshotRule::Off,
            SnapshotRule::EveryBytes(n) => mark_and_count::SnapshotRule::EveryBytes(n),
            SnapshotRule::Tolerance(t) => mark_and_count::SnapshotRule::Tolerance(t),
        };
        let mut m = MarkAndCount::new(rule);
        trace
            .iter()
            .filter_map(|&e| {
                if e > 0 {
                    m.alloc(e as u64).map(|t| t.live_bytes)
                } else {
                    m.free((-e) as u64);
                    None
                }
            })
            .collect()
    }

    #[test]
    fn issue_vectors_polled_after_every_event() {
        let first = events("a60 a50 f50 a30 a100 f100 f30 a200");
        for rule in [SnapshotRule::Tolerance(100), SnapshotRule::EveryBytes(100)] {
            let (taken, kept) = polled(rule, &first, 1);
            assert_eq!((taken, kept), (vec![110, 190, 260], Some(260)), "{rule:?}");
        }
        let second = events("a150 f150 a100 f100 a100 f100 a100 f100");
        assert_eq!(
            polled(SnapshotRule::Tolerance(100), &second, 1),
            (vec![150, 100], Some(150))
        );
        assert_eq!(
            polled(SnapshotRule::EveryBytes(100), &second, 1).0,
            [150, 100, 100, 100]
        );
        assert_eq!(polled(SnapshotRule::Off, &first, 1), (vec![], None));
    }

    /// A random trace of allocations and frees of earlier blocks (xorshift, fixed seeds).
    fn trace(seed: u64, n: usize) -> Vec<i64> {
        let mut x = seed | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut blocks: Vec<i64> = Vec::new();
        let mut out = Vec::new();
        for _ in 0..n {
            if blocks.is_empty() || next() % 3 != 0 {
                let size = (next() % 500 + 1) as i64;
                blocks.push(size);
                out.push(size);
            } else {
                let i = (next() % blocks.len() as u64) as usize;
                out.push(-blocks.swap_remove(i));
            }
        }
        out
    }

    fn true_peak(trace: &[i64]) -> u64 {
        let mut live = 0i64;
        trace
            .iter()
            .map(|&e| {
                live += e;
                live as u64
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn polled_after_every_event_it_is_the_engine() {
        for seed in 1..200u64 {
            let t = trace(seed, 400);
            for rule in [
                SnapshotRule::Tolerance(300),
                SnapshotRule::Tolerance(0),
                SnapshotRule::EveryBytes(1000),
            ] {
                let (taken, kept) = polled(rule, &t, 1);
                assert_eq!(taken, engine(rule, &t), "seed {seed} {rule:?}");
                if let SnapshotRule::Tolerance(tol) = rule {
                    assert!(true_peak(&t) - kept.unwrap_or(0) <= tol, "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn polled_rule_bound_grows_by_one_poll() {
        // Polled every k events, the kept peak is within T plus the bytes allocated between
        // two polls (at most k · 500 here).
        for seed in 1..200u64 {
            let t = trace(seed, 400);
            for k in [2usize, 5, 17] {
                let tol = 300;
                let (_, kept) = polled(SnapshotRule::Tolerance(tol), &t, k);
                let slack = t
                    .chunks(k)
                    .map(|c| c.iter().filter(|&&e| e > 0).sum::<i64>() as u64)
                    .max()
                    .unwrap_or(0);
                let gap = true_peak(&t) - kept.unwrap_or(0);
                assert!(gap <= tol + slack, "seed {seed} k {k}: gap {gap}");
            }
        }
    }

    #[test]
    fn a_snapshot_replaces_the_peak_only_when_higher() {
        let mut r = PolledRule::new(SnapshotRule::Tolerance(10));
        assert!(r.taken(0, 100));
        assert!(!r.taken(50, 100));
        assert!(!r.taken(60, 40));
        assert!(r.taken(70, 101));
        // X counts from the last snapshot: Y=101, Z=101, due when X > 10.
        assert!(!r.due(80));
        assert!(r.due(81));
    }

    #[test]
    fn the_history_ring_is_bounded() {
        for _ in 0..MAX_COUNTER_SAMPLES + 5 {
            sample();
        }
        let h = counter_history();
        assert_eq!(h.samples.len(), MAX_COUNTER_SAMPLES);
        assert_eq!(h.interval_ms, 1000);
        assert!(h.samples.windows(2).all(|w| w[0].unix_ms <= w[1].unix_ms));
    }
}
