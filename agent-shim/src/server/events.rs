//! Events for attached clients: a small publish/subscribe of [`Push`]es other than the live
//! counters (the memory-shortage reports and measured releases of the policy thread).
//!
//! [`publish`] stores a push in a bounded ring ([`RING`] entries) under a sequence number and
//! returns at once; each subscribed connection keeps a [`Cursor`] and, on its own thread,
//! forwards the pushes it has not sent yet ([`Cursor::take`]). A connection only sees what was
//! published after it subscribed. A client slower than [`RING`] events between two of its
//! connection's wake-ups misses the oldest ones: the cursor counts them and the connection
//! logs how many, but nothing waits for it.
//!
//! Never: block the publisher on a client (the lock guards only the ring, never I/O, and is
//! held for a push or a copy of at most [`RING`] small messages), or grow without bound.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use heaptui_protocol::Push;

use crate::sync::PerProcess;

/// Most events kept for connections that have not forwarded them yet.
pub const RING: usize = 64;

struct Ring {
    /// `(sequence, push)`, oldest first, sequences consecutive.
    events: VecDeque<(u64, Push)>,
}

static EVENTS: PerProcess<Mutex<Ring>> = PerProcess::new(Mutex::new(Ring {
    events: VecDeque::new(),
}));

/// In a fork child that serves (`HEAPTUI_FOLLOW_FORK`): none of the parent's events.
pub fn renew_in_child() {
    EVENTS.renew(Mutex::new(Ring {
        events: VecDeque::new(),
    }));
}

/// The sequence number the next published event gets (the first is 1).
static NEXT: AtomicU64 = AtomicU64::new(1);

/// Publishes one push to every subscribed connection; returns its sequence number.
pub fn publish(push: Push) -> u64 {
    let mut ring = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
    // Numbered under the lock so the ring's sequences stay consecutive.
    let seq = NEXT.fetch_add(1, Ordering::AcqRel);
    if ring.events.len() == RING {
        ring.events.pop_front();
    }
    ring.events.push_back((seq, push));
    seq
}

/// Where one connection is in the event sequence.
#[derive(Debug)]
pub struct Cursor {
    /// The sequence number of the next event this connection has not sent.
    next: u64,
    /// Events published since the cursor was made that left the ring before it took them.
    pub missed: u64,
}

impl Cursor {
    /// A cursor at the present: it takes only events published from now on.
    pub fn now() -> Cursor {
        Cursor {
            next: NEXT.load(Ordering::Acquire),
            missed: 0,
        }
    }

    /// Whether events were published that this cursor has not taken (no lock).
    pub fn behind(&self) -> bool {
        NEXT.load(Ordering::Acquire) > self.next
    }

    /// The events published since the last take, oldest first; those that already left the
    /// ring are counted in [`Cursor::missed`] and returned as the count missed this time.
    pub fn take(&mut self) -> (Vec<Push>, u64) {
        if !self.behind() {
            return (Vec::new(), 0);
        }
        let ring = EVENTS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(&(oldest, _)) = ring.events.front() else {
            return (Vec::new(), 0);
        };
        let missed = oldest.saturating_sub(self.next);
        let out: Vec<Push> = ring
            .events
            .iter()
            .filter(|(seq, _)| *seq >= self.next)
            .map(|(_, p)| p.clone())
            .collect();
        if let Some(&(last, _)) = ring.events.back() {
            self.next = self.next.max(last + 1);
        }
        self.missed += missed;
        (out, missed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use heaptui_protocol::{MeasuredRelease, Push};

    fn measured(decision: u64) -> Push {
        Push::ReleaseMeasured(MeasuredRelease {
            decision,
            tids: vec![7],
            predicted: 100,
            measured: Some(99),
        })
    }

    fn decisions(pushes: &[Push]) -> Vec<u64> {
        pushes
            .iter()
            .map(|p| match p {
                Push::ReleaseMeasured(m) => m.decision,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    // One test, because the ring is process-wide and tests run in parallel threads.
    #[test]
    fn cursors_take_what_came_after_them_and_count_what_they_missed() {
        let mut early = Cursor::now();
        assert!(!early.behind());
        assert_eq!(early.take(), (Vec::new(), 0));
        publish(measured(1));
        publish(measured(2));
        let mut late = Cursor::now();
        assert!(early.behind() && !late.behind());
        let (got, missed) = early.take();
        assert_eq!((decisions(&got), missed), (vec![1, 2], 0));
        assert!(!early.behind());
        assert_eq!(early.take().0, Vec::new());
        publish(measured(3));
        assert_eq!(decisions(&late.take().0), vec![3]);
        assert_eq!(decisions(&early.take().0), vec![3]);

        // A cursor that falls more than RING behind loses the oldest, and says how many.
        let extra = 10;
        for d in 0..(RING as u64 + extra) {
            publish(measured(100 + d));
        }
        let (got, missed) = early.take();
        assert_eq!((got.len(), missed), (RING, extra));
        assert_eq!(decisions(&got)[0], 100 + extra);
        assert_eq!(early.missed, extra);
    }
}
