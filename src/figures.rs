//! How the other views' figures are written (docs/reference.md §8), shared by the TUI and the text
//! report so that both say the same thing the same way: age ranges and histograms, wall-clock ages,
//! unit queries, utilization.
//!
//! Formatting only: every number comes from the source.

use heaptui_protocol::message::{
    AGE_RANGES, AgeHistogram, LiveCounters, UnitCharge, UnitGranularity, UnitPosition, UnitQuery,
};

/// `s` on one line: each control character (a newline or tab in a command line such as
/// `python3 -c '…'`) becomes a space, so a row or a header line stays one line.
pub fn one_line(s: String) -> String {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    } else {
        s
    }
}

/// `1 thread`, `4 threads`: a count with its noun in the right number.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The age ranges' names, as the histogram columns are headed.
pub const RANGE_NAMES: [&str; AGE_RANGES] = ["0", "1", "2", "3", ">3"];

/// `0: 2, 1: 1, 2: 3, 3: 0, >3: 0` (blocks per range). Commas, not ` · `: a title gives way
/// by its ` · ` parts, and the histogram must go whole or stay whole.
pub fn histogram_text(h: &AgeHistogram) -> String {
    RANGE_NAMES
        .iter()
        .zip(h.blocks)
        .map(|(name, n)| format!("{name}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether possibly lost blocks are most of the heap, when a word beside their figure is due: an
/// interpreter or a pool allocator that keeps pointers past its blocks' start makes nearly
/// everything possibly lost (perl's heap is), for valgrind memcheck as for heaptui, and a user
/// should not read that as a leak.
pub fn mostly_possibly_lost(possibly_lost: u64, heap: u64) -> bool {
    heap > 0 && possibly_lost.saturating_mul(2) >= heap
}

/// `3.2 s`, `4 min`, `-` when the source does not know.
pub fn wall_age(ms: Option<u64>) -> String {
    match ms {
        None => "-".to_string(),
        Some(ms) if ms < 120_000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) if ms < 7_200_000 => format!("{} min", ms / 60_000),
        Some(ms) => format!("{} h", ms / 3_600_000),
    }
}

pub fn granularity_name(g: UnitGranularity) -> &'static str {
    match g {
        UnitGranularity::Library => "library",
        UnitGranularity::Function => "function",
        UnitGranularity::Thread => "thread",
    }
}

pub fn position_name(p: UnitPosition) -> &'static str {
    match p {
        UnitPosition::Outermost => "outermost",
        UnitPosition::Innermost => "innermost",
        UnitPosition::Inclusive => "inclusive",
    }
}

pub fn charge_name(c: UnitCharge) -> &'static str {
    match c {
        UnitCharge::Allocator => "allocator",
        UnitCharge::Freer => "freer",
    }
}

/// `library · outermost · frees charged to the allocator` (a thread unit has no position).
pub fn query_text(q: UnitQuery) -> String {
    let charge = format!("frees charged to the {}", charge_name(q.charge));
    if q.granularity == UnitGranularity::Thread {
        format!("{} · {charge}", granularity_name(q.granularity))
    } else {
        format!(
            "{} · {} · {charge}",
            granularity_name(q.granularity),
            position_name(q.position)
        )
    }
}

/// `live / allocated` as a percentage with one decimal, `-` when nothing was allocated.
pub fn utilization(c: &LiveCounters) -> String {
    if c.allocated_bytes == 0 {
        "-".to_string()
    } else {
        format!(
            "{:.1}%",
            c.live_bytes as f64 * 100.0 / c.allocated_bytes as f64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_figures_read_as_written() {
        let h = AgeHistogram {
            blocks: [2, 1, 3, 0, 0],
            bytes: [0; AGE_RANGES],
        };
        assert_eq!(histogram_text(&h), "0: 2, 1: 1, 2: 3, 3: 0, >3: 0");
        let c = LiveCounters {
            live_bytes: 200,
            allocated_bytes: 300,
            ..LiveCounters::default()
        };
        assert_eq!(utilization(&c), "66.7%");
        assert_eq!(utilization(&LiveCounters::default()), "-");
        assert_eq!(
            query_text(UnitQuery::default()),
            "library · outermost · frees charged to the allocator"
        );
        let threads = UnitQuery {
            granularity: UnitGranularity::Thread,
            position: UnitPosition::Inclusive,
            charge: UnitCharge::Freer,
        };
        assert_eq!(query_text(threads), "thread · frees charged to the freer");
    }

    #[test]
    fn wall_ages_read_in_the_right_unit() {
        assert_eq!(wall_age(None), "-");
        assert_eq!(wall_age(Some(3_200)), "3.2 s");
        assert_eq!(wall_age(Some(600_000)), "10 min");
        assert_eq!(wall_age(Some(10_800_000)), "3 h");
    }
}
