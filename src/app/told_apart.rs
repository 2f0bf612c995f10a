//! Rows that would read the same: an allocation site is labelled by one frame of its stack
//! (`gc_alloc (gcmodule.c:2283)`), so different stacks through the same frame give rows whose
//! labels are equal. Each such row also shows the first frame where its stack parts from the
//! closest other stack with that label: `gc_alloc (gcmodule.c:2283) ← PyTuple_New` (the
//! forms: docs/reference.md §3). The function alone is short enough for an 80-column table;
//! the frame's place is added only where the function leaves two rows alike.
//!
//! Computed once per list (the leaks screen, the allocation sites, growth, `heaptui report
//! --leaks`), from the rows' labels and frames only: a row whose label no other row shows is
//! unchanged.

use std::collections::HashMap;

use super::leaks::caller_start;
use heaptui_analysis::labels::function_of;

/// For each row of a list, given as its label and its frames (innermost first): `None` when no
/// other row has its label, else what to write after the label to tell it apart (` ← caller`,
/// ` ← … ← caller` when the stacks part further out than the first caller, ` via calloc` when
/// only the frames inside the label's differ).
pub fn told_apart(rows: &[(&str, &[String])]) -> Vec<Option<String>> {
    let mut by_label: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, (label, _)) in rows.iter().enumerate() {
        by_label.entry(*label).or_default().push(i);
    }
    let mut out = vec![None; rows.len()];
    for group in by_label.values().filter(|g| g.len() > 1) {
        // Each stack as the frames inside the one that names it (the allocator and its
        // wrappers, innermost first) and its callers.
        let stacks: Vec<(&[String], &[String])> = group
            .iter()
            .map(|&i| {
                let (label, frames) = rows[i];
                let start = caller_start(frames, label);
                let inner = &frames[..start.saturating_sub(1).min(frames.len())];
                (inner, &frames[start..])
            })
            .collect();
        let partings = partings(&stacks);
        // The function alone, unless that leaves two rows alike; then the places too, and
        // where that still does, how far out.
        let mut texts: Vec<String> = partings.iter().map(|p| p.text(false, false)).collect();
        for (full, numbered) in [(true, false), (true, true)] {
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for t in &texts {
                *seen.entry(t.as_str()).or_default() += 1;
            }
            let alike: Vec<bool> = texts.iter().map(|t| seen[t.as_str()] > 1).collect();
            for (a, alike) in alike.into_iter().enumerate() {
                if alike {
                    texts[a] = partings[a].text(full, numbered);
                }
            }
        }
        for (&i, text) in group.iter().zip(texts) {
            out[i] = Some(text);
        }
    }
    out
}

/// Where one stack parts from the closest other stack with its label.
enum Parting<'a> {
    /// At the caller `depth` frames out from the first (0: the first caller).
    Caller { depth: usize, frame: &'a str },
    /// Its callers are another's: inside, at this allocator or wrapper frame.
    Inside(&'a str),
    /// Its recorded stack ends where another's goes on.
    Ends,
    /// Every recorded frame reads the same (addresses named alike, or stacks that differ
    /// beyond the recorded frames).
    Same,
}

/// Where each stack parts from the closest other: in the stacks sorted by their callers (then
/// the frames inside), the closest other stack is next to it, so a group of thousands of rows
/// costs a sort, not every pair.
fn partings<'a>(stacks: &[(&'a [String], &'a [String])]) -> Vec<Parting<'a>> {
    let mut order: Vec<usize> = (0..stacks.len()).collect();
    order.sort_by(|&a, &b| (stacks[a].1, stacks[a].0).cmp(&(stacks[b].1, stacks[b].0)));
    let mut out: Vec<Option<Parting<'a>>> = (0..stacks.len()).map(|_| None).collect();
    for (at, &a) in order.iter().enumerate() {
        let (inner, callers) = stacks[a];
        let neighbours = [at.checked_sub(1), Some(at + 1)]
            .into_iter()
            .flatten()
            .filter_map(|n| order.get(n))
            .map(|&b| stacks[b]);
        let depth = neighbours
            .clone()
            .map(|(_, theirs)| common_prefix(callers, theirs))
            .max()
            .unwrap_or(0);
        out[a] = Some(if let Some(frame) = callers.get(depth) {
            Parting::Caller { depth, frame }
        } else {
            let inside = neighbours
                .filter(|(_, theirs)| *theirs == callers)
                .map(|(theirs, _)| common_prefix(inner, theirs))
                .max();
            match inside {
                None => Parting::Ends,
                Some(inside) => inner
                    .get(inside)
                    .map_or(Parting::Same, |f| Parting::Inside(f)),
            }
        });
    }
    out.into_iter().flatten().collect()
}

impl Parting<'_> {
    /// What follows the label: the frame's function, or (`full`) with its line;
    /// `numbered` says which caller it is.
    fn text(&self, full: bool, numbered: bool) -> String {
        let name = |frame: &str| {
            if full {
                with_line(frame)
            } else {
                function_of(frame).to_string()
            }
        };
        match *self {
            Parting::Caller { depth, frame } => match (depth, numbered) {
                (0, _) => format!(" ← {}", name(frame)),
                (_, false) => format!(" ← … ← {}", name(frame)),
                (_, true) => format!(" ← … ← {} (caller {})", name(frame), depth + 1),
            },
            Parting::Inside(frame) => format!(" via {}", name(frame)),
            Parting::Ends => " ← (no further caller)".to_string(),
            Parting::Same => " (same named frames)".to_string(),
        }
    }
}

/// Frames two stacks share, from the start.
fn common_prefix(a: &[String], b: &[String]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// `r_object:1228` of `r_object (marshal.c:1228)`: the function and its line (two rows
/// parting at one function part in one file); a place without a line whole.
fn with_line(frame: &str) -> String {
    let function = function_of(frame);
    let place = frame[function.len()..]
        .trim_start_matches(" (")
        .trim_end_matches(')');
    match place.rsplit_once(':') {
        Some((_, line)) if function != frame && line.bytes().all(|b| b.is_ascii_digit()) => {
            format!("{function}:{line}")
        }
        _ => frame.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::told_apart;
    use crate::app::table::{label_fitting, text_width};

    fn frames(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rows_with_one_label_show_the_first_caller_where_their_stacks_part() {
        let tuple = frames(&[
            "gc_alloc (gcmodule.c:2283)",
            "PyTuple_New (tupleobject.c:60)",
            "main (python.c:15)",
        ]);
        let list = frames(&[
            "gc_alloc (gcmodule.c:2283)",
            "PyList_New (listobject.c:161)",
            "main (python.c:15)",
        ]);
        let other = frames(&["build_cache (w.c:108)", "main (w.c:290)"]);
        let got = told_apart(&[
            ("gc_alloc (gcmodule.c:2283)", &tuple),
            ("build_cache (w.c:108)", &other),
            ("gc_alloc (gcmodule.c:2283)", &list),
        ]);
        assert_eq!(
            got,
            [
                Some(" ← PyTuple_New".to_string()),
                None,
                Some(" ← PyList_New".to_string()),
            ]
        );
    }

    #[test]
    fn stacks_parting_further_out_or_at_one_function_say_where() {
        // Three stacks through `x`: two share their first caller and part at the next.
        let a = frames(&["x", "p (f.c:1)", "q (f.c:2)"]);
        let b = frames(&["x", "p (f.c:1)", "r (f.c:3)"]);
        let c = frames(&["x", "s (f.c:4)"]);
        let got = told_apart(&[("x", &a), ("x", &b), ("x", &c)]);
        assert_eq!(
            got,
            [
                Some(" ← … ← q".to_string()),
                Some(" ← … ← r".to_string()),
                Some(" ← s".to_string()),
            ]
        );
        // Called from two lines of one function: the places tell them apart.
        let d = frames(&["x", "p (f.c:1)"]);
        let e = frames(&["x", "p (f.c:9)"]);
        let got = told_apart(&[("x", &d), ("x", &e)]);
        assert_eq!(
            got,
            [Some(" ← p:1".to_string()), Some(" ← p:9".to_string()),]
        );
        // Same callers, different allocators: the frame inside tells them apart.
        let h = frames(&["malloc", "x", "p (f.c:1)"]);
        let i = frames(&["calloc", "x", "p (f.c:1)"]);
        let got = told_apart(&[("x", &h), ("x", &i)]);
        assert_eq!(
            got,
            [
                Some(" via malloc".to_string()),
                Some(" via calloc".to_string())
            ]
        );
        // One frame at two depths: which caller it is.
        let j = frames(&["x", "p", "q", "r", "t"]);
        let k = frames(&["x", "p", "q", "w"]);
        let l = frames(&["x", "z", "r", "y"]);
        let m = frames(&["x", "z", "v"]);
        let got = told_apart(&[("x", &j), ("x", &k), ("x", &l), ("x", &m)]);
        assert_eq!(
            got,
            [
                Some(" ← … ← r (caller 3)".to_string()),
                Some(" ← … ← w".to_string()),
                Some(" ← … ← r (caller 2)".to_string()),
                Some(" ← … ← v".to_string()),
            ]
        );
        // One stack ends where the other goes on; raw addresses are shown whole.
        let f = frames(&["git+0x281f2a", "git+0x10"]);
        let g = frames(&["git+0x281f2a", "git+0x10", "git+0x20"]);
        let got = told_apart(&[("git+0x281f2a", &f), ("git+0x281f2a", &g)]);
        assert_eq!(
            got,
            [
                Some(" ← (no further caller)".to_string()),
                Some(" ← … ← git+0x20".to_string()),
            ]
        );
    }

    #[test]
    fn rows_told_apart_stay_apart_in_a_column_narrower_than_what_tells_them_apart() {
        let label = "PyUnicode_New (unicodeobject.c:1425)";
        let stack = |line: u32| {
            frames(&[
                "malloc",
                label,
                "unicode_decode_utf8 (unicodeobject.c:4611)",
                &format!("PyUnicode_FromStringAndSize (unicodeobject.c:{line})"),
            ])
        };
        let (a, b) = (stack(1234), stack(1240));
        let apart = told_apart(&[(label, &a), (label, &b)]);
        assert_eq!(
            apart,
            [
                Some(" ← … ← PyUnicode_FromStringAndSize:1234".to_string()),
                Some(" ← … ← PyUnicode_FromStringAndSize:1240".to_string()),
            ]
        );
        let shown = |width: u16| -> Vec<String> {
            apart
                .iter()
                .map(|t| {
                    label_fitting(label, t.as_deref().unwrap(), width)
                        .unwrap()
                        .text
                })
                .collect()
        };
        // Narrower than the callers alone: the label gives way to a few characters, and the
        // callers keep their end, where the rows differ.
        for width in [12, 24, 36, 44] {
            let rows = shown(width);
            assert_ne!(rows[0], rows[1], "at {width} cells");
            for (row, line) in rows.iter().zip(["1234", "1240"]) {
                assert!(text_width(row) <= width, "{row:?} in {width} cells");
                assert!(row.ends_with(line), "{row:?} in {width} cells");
            }
        }
        assert_eq!(
            shown(36),
            [
                "PyU… ← …icode_FromStringAndSize:1234",
                "PyU… ← …icode_FromStringAndSize:1240",
            ]
        );
        assert_eq!(
            shown(52),
            [
                "PyUnicode_New ← … ← PyUnicode_FromStringAndSize:1234",
                "PyUnicode_New ← … ← PyUnicode_FromStringAndSize:1240",
            ]
        );
        // Where the column holds the label cut and the caller, that is as before.
        let gc = "gc_alloc (gcmodule.c:2283)";
        let fitting = |width| label_fitting(gc, " ← PyTuple_New", width).unwrap().text;
        assert_eq!(fitting(40), "gc_alloc (gcmodule.c:2283) ← PyTuple_New");
        assert_eq!(fitting(31), "gc_alloc (gcmodu… ← PyTuple_New");
    }
}
