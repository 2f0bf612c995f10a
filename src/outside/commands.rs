//! The commands on a process without an agent: `report pid:PID` and `snapshot pid:PID -o FILE`
//! (the TUI's `attach pid:PID` is [`super::source`]).
//!
//! Owns capturing once, printing what the capture found partial as notes on stderr, and
//! handing the kept snapshot to the very code that prints a file's or a live agent's report and
//! writes snapshot files, so the three cannot differ. As for a live agent, the captured graph
//! is kept only for the exports by allocation stack, which read it.

use std::io::Write;
use std::path::Path;

use heaptui_analysis::HeapGraph;
use heaptui_protocol::message::SnapshotId;

use super::source::Kept;
use crate::cli::{ReportArgs, ReportFormat};
use crate::offline::report::{self, Timing};

/// Captures process `pid` from outside and keeps it, its notes printed on stderr; with the
/// captured graph and the bytes copied while it was stopped.
fn capture_kept(pid: u32) -> anyhow::Result<(Kept, HeapGraph, u64)> {
    let capture = super::capture(pid).map_err(|e| anyhow::anyhow!("{e}"))?;
    let copied = capture.copied;
    let (kept, graph) = Kept::with_graph(SnapshotId(1), capture);
    for w in &kept.warnings {
        eprintln!("heaptui: note: {w}");
    }
    Ok((kept, graph, copied))
}

fn timing(kept: &Kept) -> Timing {
    let ms = |us: u64| us as f64 / 1e3;
    Timing {
        pause_ms: ms(kept.info.pause_us),
        capture_ms: ms(kept.info.capture_us),
        analysis_ms: ms(kept.info.analysis_us),
        outside: true,
    }
}

/// `heaptui report pid:PID` of a process without an agent.
pub fn report(pid: u32, args: &ReportArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let (kept, graph, _) = capture_kept(pid)?;
    let needs_graph = matches!(args.format(), ReportFormat::Collapsed | ReportFormat::Pprof);
    let graph = needs_graph.then_some(graph);
    let mut ask = |body| Ok(kept.answer(&body));
    report::write_kept(
        &kept.columns,
        graph.as_ref(),
        args,
        Some(timing(&kept)),
        Some(&mut ask),
        out,
    )
}

/// `heaptui snapshot pid:PID -o FILE` of a process without an agent: the binary snapshot file,
/// written under a temporary name then renamed, so FILE is never half written.
pub fn snapshot(pid: u32, output: &Path, out: &mut impl Write) -> anyhow::Result<()> {
    let (kept, graph, copied) = capture_kept(pid)?;
    drop(graph);
    let mut file = Vec::new();
    heaptui_analysis::snapshot::write_binary_kept(&kept.columns, &mut file)?;
    crate::offline::write_atomically(output, &file)?;
    let totals = &kept.info.totals;
    writeln!(
        out,
        "snapshot of pid {pid} ({}) from outside: {} objects, {} bytes, {} threads; pause {:.1} \
         ms ({:.1} MiB copied) → {}",
        kept.process().command,
        totals.objects,
        totals.bytes,
        kept.info.threads,
        kept.info.pause_us as f64 / 1e3,
        copied as f64 / 1048576.0,
        output.display()
    )?;
    Ok(())
}
