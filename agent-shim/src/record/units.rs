//! The protocol's `Units` request, answered from the recording's live tracker: the query's
//! unit configuration picked among those the tracker computes, rows sorted and paged.
//!
//! Without `HEAPTUI_RECORD` there are no events to count and the answer is `Refused` with
//! a one-line reason naming the variable (see the module docs of `record`).

use heaptui_analysis::views::units::Units;
use heaptui_protocol::answer::{unit_config, unit_page};
use heaptui_protocol::views::{UnitKey, UnitPage, UnitQuery};
use heaptui_protocol::{ErrorKind, Page, Response, Sort};

/// Why `Units` is refused when nothing is recorded.
pub const NOT_RECORDING: &str = "allocation units need the agent's event stream: start the \
     target with HEAPTUI_RECORD=FILE";

/// One page of `units` in `sort` order (see [`unit_page`]).
pub fn page_of(
    units: &Units,
    query: UnitQuery,
    sort: Sort<UnitKey>,
    page: Page,
    events: u64,
) -> UnitPage {
    unit_page(units.figures(), units.unknown(), query, sort, page, events)
}

/// The answer to `Units { query, sort, page }`: every event claimed so far is recorded
/// first, so the figures include the calls that returned before the request.
pub fn answer(query: UnitQuery, sort: Sort<UnitKey>, page: Page) -> Response {
    if !super::enabled() {
        return Response::error(ErrorKind::Refused, NOT_RECORDING);
    }
    let config = unit_config(query);
    let answer = super::live::with_tracker(|tracker, events| {
        tracker
            .units_for(&config)
            .map(|units| page_of(units, query, sort, page, events))
    });
    match answer {
        Ok(Some(p)) => Response::Units(p),
        Ok(None) => Response::error(
            ErrorKind::Internal,
            format!("the agent does not compute units for {query:?}"),
        ),
        Err(e) => Response::error(ErrorKind::Refused, e),
    }
}

#[cfg(test)]
mod tests {
    use heaptui_analysis::recording::Event;
    use heaptui_analysis::views::units::AllocKind;
    use heaptui_analysis::views::{StackTable, Tracker, TrackerConfig};

    use super::*;
    use crate::record::live::unit_configs;
    use heaptui_protocol::views::{UnitCharge, UnitGranularity, UnitPosition};

    /// The issue's vector: malloc 100 in liba, malloc 50 in libb, free of the first from a
    /// libb stack, realloc of the second to 80 in libb; plus free(NULL) and an unknown free.
    fn tracker() -> Tracker {
        let mut t = Tracker::new(TrackerConfig::default());
        for c in unit_configs() {
            t.track_units(c);
        }
        let mut table = StackTable::new();
        let mut events = Vec::new();
        for s in ["exe", "main", "liba.so", "func_a0", "libb.so", "func_b0"] {
            table.intern(s);
            events.push(Event::String(s.into()));
        }
        events.push(Event::Module {
            name: 0,
            base: 0x1000,
            size: 0x1000,
        });
        // main (exe) → func_a0 (liba) [→ func_b0 (libb)], innermost first.
        let in_a = vec![(3, 2), (1, 0)];
        let in_b = vec![(5, 4), (3, 2), (1, 0)];
        events.push(Event::Stack(in_a));
        events.push(Event::Stack(in_b));
        let alloc = |seq, addr, size, stack| Event::Alloc {
            kind: AllocKind::Malloc,
            seq,
            addr,
            size,
            stack,
            tid: 7,
        };
        events.extend([
            alloc(1, 0x10, 100, 0),
            alloc(2, 0x20, 50, 1),
            Event::Free {
                addr: 0x10,
                stack: 1,
                tid: 7,
            },
            Event::Realloc {
                seq: 3,
                old_addr: 0x20,
                new_addr: 0x30,
                size: 80,
                stack: 1,
                tid: 7,
            },
        ]);
        for e in &events {
            t.apply(e);
        }
        t
    }

    fn query(charge: UnitCharge) -> UnitQuery {
        UnitQuery {
            granularity: UnitGranularity::Library,
            position: UnitPosition::Innermost,
            charge,
        }
    }

    #[test]
    fn the_issue_vector_sorted_and_paged() {
        let t = tracker();
        let q = query(UnitCharge::Freer);
        let units = t.units_for(&unit_config(q)).unwrap();
        let p = page_of(units, q, Sort::desc(UnitKey::Live), Page::new(0, 10), 4);
        assert_eq!(p.page.total, 2);
        let names: Vec<_> = p.rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["liba.so", "libb.so"]);
        let b = &p.rows[1];
        assert_eq!(
            (b.live, b.min, b.max, b.malloc, b.realloc, b.free),
            (-20, -50, 50, 1, 1, 1)
        );
        // Ascending by live, then the second page of one row.
        let p = page_of(units, q, Sort::asc(UnitKey::Live), Page::new(1, 1), 4);
        assert_eq!(p.rows.len(), 1);
        assert_eq!(p.rows[0].name, "liba.so");
        assert_eq!(p.page.offset, 1);
        // Charged to the allocator: liba 0, libb 80.
        let q = query(UnitCharge::Allocator);
        let units = t.units_for(&unit_config(q)).unwrap();
        let p = page_of(units, q, Sort::desc(UnitKey::Name), Page::FIRST, 4);
        let figures: Vec<_> = p.rows.iter().map(|r| (r.name.as_str(), r.live)).collect();
        assert_eq!(figures, [("libb.so", 80), ("liba.so", 0)]);
    }

    #[test]
    fn every_query_has_its_units() {
        let t = tracker();
        for granularity in [
            UnitGranularity::Library,
            UnitGranularity::Function,
            UnitGranularity::Thread,
        ] {
            for position in [
                UnitPosition::Outermost,
                UnitPosition::Innermost,
                UnitPosition::Inclusive,
            ] {
                for charge in [UnitCharge::Allocator, UnitCharge::Freer] {
                    let q = UnitQuery {
                        granularity,
                        position,
                        charge,
                    };
                    assert!(t.units_for(&unit_config(q)).is_some(), "{q:?}");
                }
            }
        }
    }
}
