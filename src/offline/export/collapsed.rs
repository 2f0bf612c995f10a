//! Collapsed stacks of live bytes by allocation stack, the input of inferno and
//! flamegraph.pl: one line per stack, `outer;…;inner BYTES`, outermost frame first.
//!
//! A frame's own `;` would split it in two and a line break would end the line, so both are
//! written as `:` and a space. Lines are sorted by stack, so the output is deterministic.

use std::io::Write;

use heaptui_analysis::HeapGraph;

use super::{merge_in_order, site_frames, totals_by_site};

/// Writes the collapsed stacks of `graph`'s live bytes.
pub fn write(graph: &HeapGraph, out: &mut impl Write) -> std::io::Result<()> {
    let lines = merge_in_order(totals_by_site(graph).into_iter().map(|(site, t)| {
        let frames: Vec<String> = site_frames(graph, site)
            .iter()
            .rev()
            .map(|f| f.replace(';', ":").replace(['\n', '\r'], " "))
            .collect();
        (frames.join(";"), t)
    }));
    let mut lines: Vec<(String, u64)> = lines.into_iter().map(|(s, t)| (s, t.bytes)).collect();
    lines.sort();
    for (stack, bytes) in lines {
        writeln!(out, "{stack} {bytes}")?;
    }
    Ok(())
}
