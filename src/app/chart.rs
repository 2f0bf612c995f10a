//! The header's chart of live vs allocated bytes: the agent's counter history, asked once at
//! attach ([`RequestBody::CounterHistory`](heaptui_protocol::message::RequestBody)), then
//! every pushed `Counters`, oldest first, bounded.
//!
//! State only: samples in, series out; drawing is `ui::widgets::header`'s.

use std::collections::VecDeque;

use heaptui_protocol::message::LiveCounters;

/// Samples kept: enough for a full-width header on a wide terminal.
pub const CHART_SAMPLES: usize = 600;

#[derive(Clone, Debug, Default)]
pub struct Chart {
    samples: VecDeque<LiveCounters>,
}

impl Chart {
    /// A pushed sample, appended (the oldest dropped past [`CHART_SAMPLES`]).
    pub fn push(&mut self, sample: LiveCounters) {
        if self.samples.len() == CHART_SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The agent's history arrived: it goes before the samples pushed since, which may
    /// overlap its end (they are kept, the history's copies dropped).
    pub fn set_history(&mut self, history: &[LiveCounters]) {
        let first_pushed = self.samples.front().map(|s| s.unix_ms);
        let older = history
            .iter()
            .filter(|s| first_pushed.is_none_or(|first| s.unix_ms < first));
        let mut merged: VecDeque<LiveCounters> = older.copied().collect();
        merged.extend(self.samples.drain(..));
        while merged.len() > CHART_SAMPLES {
            merged.pop_front();
        }
        self.samples = merged;
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// The latest `n` values of one series, oldest first.
    pub fn series(&self, n: usize, value: impl Fn(&LiveCounters) -> u64) -> Vec<u64> {
        let skip = self.samples.len().saturating_sub(n);
        self.samples.iter().skip(skip).map(value).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(unix_ms: u64, live_bytes: u64) -> LiveCounters {
        LiveCounters {
            live_bytes,
            allocated_bytes: live_bytes * 2,
            unix_ms,
            ..LiveCounters::default()
        }
    }

    #[test]
    fn history_goes_before_the_pushes_without_repeats() {
        let mut c = Chart::default();
        c.push(at(3000, 30));
        c.push(at(4000, 40));
        c.set_history(&[at(1000, 10), at(2000, 20), at(3000, 30)]);
        assert_eq!(c.series(10, |s| s.live_bytes), [10, 20, 30, 40]);
        assert_eq!(c.series(2, |s| s.allocated_bytes), [60, 80]);
        let mut empty = Chart::default();
        empty.set_history(&[at(1000, 10)]);
        assert_eq!(empty.len(), 1);
    }

    #[test]
    fn samples_are_bounded() {
        let mut c = Chart::default();
        for i in 0..(CHART_SAMPLES as u64 + 10) {
            c.push(at(i, i));
        }
        assert_eq!(c.len(), CHART_SAMPLES);
        assert_eq!(c.series(1, |s| s.live_bytes), [CHART_SAMPLES as u64 + 9]);
    }
}
