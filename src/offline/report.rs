//! `heaptui report SOURCE [--json] [--release TID,…]`: the whole analysis of one snapshot,
//! as text tables or as the report JSON of docs/reference.md §5 (`--format` also offers the exports
//! of `export/`).
//!
//! [`Report`] is the one model of a report: the JSON is its serialization and the text
//! tables (`text`) are drawn from it, so the two cannot disagree. Building it reads the
//! engine's figures and the graph's names; it computes no figure itself.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufWriter, Write};
use std::path::Path;

use heaptui_analysis::kept::GroupTable;
use heaptui_analysis::{
    Analysis, FrameKind, GroupId, GroupKind, HeapGraph, Kept, Leaks, Sharer, ThreadState, Totals,
};
use serde::Serialize;

use crate::cli::{GroupLimit, ReportArgs, ReportFormat};

/// The report format name and version (docs/reference.md §5).
pub const REPORT_FORMAT: &str = "heaptui-report";
pub const REPORT_VERSION: u32 = 1;

/// Runs the command: load, analyse, print (a recording has a report of its own).
pub fn run(args: &ReportArgs, out: &mut impl Write) -> anyhow::Result<()> {
    if super::recording::is_recording(&args.source) {
        return super::views::run_recording(args, out);
    }
    super::views::check_graph_flags(args)?;
    let graph = super::load(&args.source)?;
    write(&graph, args, None, out)
}

/// Analyses `graph` and prints it in the format `args` asks for.
pub fn write(
    graph: &HeapGraph,
    args: &ReportArgs,
    timing: Option<Timing>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let kept = Kept::new(graph, &Analysis::new(graph));
    write_kept(&kept, Some(graph), args, timing, None, out)
}

/// Prints the report of a kept (analysed) snapshot in the format `args` asks for: the live
/// report prints the agent's own analysis through here. The exports by allocation stack
/// (`collapsed`, `pprof`) need the `graph`.
pub fn write_kept(
    kept: &Kept,
    graph: Option<&HeapGraph>,
    args: &ReportArgs,
    timing: Option<Timing>,
    ask: Option<&mut super::views::Ask<'_>>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let release = match &args.release {
        Some(tids) => Some(release(kept, tids)?),
        None => None,
    };
    let mut report = Report::build(kept, release, args.groups);
    report.timing = timing;
    report.views = match ask {
        Some(ask) => super::views::gather(args, ask)?,
        None => {
            let answerer =
                heaptui_protocol::answer::Answerer::new(crate::source::OFFLINE_SNAPSHOT, kept);
            super::views::gather(args, &mut |body| {
                answerer.answer(&body).ok_or_else(|| {
                    anyhow::anyhow!("{}: a snapshot file cannot answer this", body.kind())
                })
            })?
        }
    };
    let graph = || graph.ok_or_else(|| anyhow::anyhow!("this format needs the snapshot's graph"));
    match args.format() {
        ReportFormat::Text => print(&report, false, &args.source, out),
        ReportFormat::Json => print(&report, true, &args.source, out),
        ReportFormat::Csv => Ok(super::export::csv::write(&report, out)?),
        ReportFormat::Collapsed => Ok(super::export::collapsed::write(graph()?, out)?),
        ReportFormat::Pprof => Ok(super::export::pprof::write(graph()?, out)?),
    }
}

/// Prints a report as JSON or as text tables (`source` names it in the text header); the
/// live report (`client::commands`) prints through here too.
pub fn print(
    report: &Report,
    json: bool,
    source: &Path,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // Stdout is line-buffered: a report of a million objects has millions of lines, and a
    // write call each took most of the run.
    let mut out = BufWriter::with_capacity(1 << 16, out);
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        super::text::render(report, source, &mut out)?;
        if let Some(views) = &report.views {
            super::views::render(views, &mut out)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// A report, serialized as `heaptui-report` version 1.
#[derive(Debug, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub version: u32,
    pub process: ProcessInfo,
    pub totals: Totals,
    /// Ranked by total, descending (ties by tid).
    pub threads: Vec<ThreadReport>,
    /// The largest groups, largest first (ties in id order: F1…, T1…, G1…), as many as
    /// `--groups` asks for.
    pub groups: Vec<GroupReport>,
    /// How many smaller groups `groups` leaves out.
    pub groups_omitted: u64,
    /// Threads the capture could not stop: the snapshot is incomplete (their frames are
    /// unknown), and what only those frames held counts as leaked.
    pub threads_not_stopped: u32,
    pub leaks: LeaksReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<Release>,
    /// A live report's snapshot timing (docs/reference.md §5), absent for a file.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// `--leaks`/`--ages` (members `leak_sites`, `ages`), absent unless asked.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub views: Option<super::views::ViewsReport>,
}

/// The engine's leak figures and whether they may be overstated: a thread that was not
/// stopped may hold blocks through frames nobody scanned.
#[derive(Debug, Serialize)]
pub struct LeaksReport {
    #[serde(flatten)]
    pub figures: Leaks,
    pub may_be_overstated: bool,
}

/// The figures read through: `report.leaks.bytes` is the engine's figure.
impl std::ops::Deref for LeaksReport {
    type Target = Leaks;
    fn deref(&self) -> &Leaks {
        &self.figures
    }
}

/// How long the live snapshot of a report took, in milliseconds.
#[derive(Debug, Serialize)]
pub struct Timing {
    pub pause_ms: f64,
    pub capture_ms: f64,
    pub analysis_ms: f64,
    /// Captured from outside (a process without an agent): `"outside": true`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outside: bool,
}

#[derive(Debug, Serialize)]
pub struct ProcessInfo {
    pub pid: u32,
    pub command: String,
}

#[derive(Debug, Serialize)]
pub struct ThreadReport {
    pub tid: u32,
    pub name: String,
    /// Why the agent could not stop this thread (its frames may then be incomplete);
    /// absent for threads that were stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_stoppable: Option<String>,
    pub proprietary: u64,
    pub shared: u64,
    pub total: u64,
    /// Innermost first.
    pub frames: Vec<FrameReport>,
}

#[derive(Debug, Serialize)]
pub struct FrameReport {
    pub index: usize,
    pub function: String,
    pub module: String,
    pub kind: FrameKind,
    pub proprietary: u64,
    pub frame_shared: Vec<GroupId>,
    pub thread_shared: Vec<GroupId>,
}

#[derive(Debug, Serialize)]
pub struct GroupReport {
    pub id: GroupId,
    pub kind: GroupKind,
    /// The entry object's id in the snapshot.
    pub entry: u64,
    /// The entry object's address.
    pub addr: u64,
    /// The entry object's allocation site.
    pub label: String,
    pub size: u64,
    pub objects: u64,
    pub sharers: Vec<Sharer>,
    pub refs: Vec<GroupId>,
}

#[derive(Debug, Serialize)]
pub struct Release {
    /// Ascending, without repeats.
    pub threads: Vec<u32>,
    pub bytes: u64,
}

/// The release of `tids` (deduplicated), or an error naming the first unknown thread id.
fn release(kept: &Kept, tids: &[u32]) -> anyhow::Result<Release> {
    let mut threads = tids.to_vec();
    threads.sort_unstable();
    threads.dedup();
    if let Some(&unknown) = threads.iter().find(|&&t| kept.thread_index(t).is_none()) {
        // An argument that does not fit the file: a usage error (exit 2), as README says.
        return Err(super::views::UsageError(format!(
            "unknown thread id {unknown} in --release (threads in this snapshot: {})",
            tid_list(kept)
        ))
        .into());
    }
    let bytes = kept.release(&threads)?;
    Ok(Release { threads, bytes })
}

/// The snapshot's thread ids, ascending; long lists are cut.
fn tid_list(kept: &Kept) -> String {
    const SHOWN: usize = 16;
    let mut tids: Vec<u32> = kept.threads().iter().map(|t| t.tid).collect();
    tids.sort_unstable();
    if tids.is_empty() {
        return "none".to_string();
    }
    let mut list: Vec<String> = tids.iter().take(SHOWN).map(u32::to_string).collect();
    if tids.len() > SHOWN {
        list.push(format!("… {} in all", tids.len()));
    }
    list.join(", ")
}

impl Report {
    /// The report of a kept snapshot, listing the `limit` largest of its groups.
    pub fn build(kept: &Kept, release: Option<Release>, limit: GroupLimit) -> Report {
        let figures = kept.figures();
        let threads = kept
            .ranking()
            .into_iter()
            .map(|t| {
                let thread = &kept.threads()[t];
                let fig = &figures[t];
                ThreadReport {
                    tid: thread.tid,
                    name: thread.name.clone(),
                    not_stoppable: match &thread.state {
                        ThreadState::Stopped => None,
                        ThreadState::NotStoppable(reason) => Some(reason.clone()),
                    },
                    proprietary: fig.proprietary,
                    shared: fig.shared,
                    total: fig.total,
                    frames: thread
                        .frames
                        .iter()
                        .zip(&fig.frames)
                        .enumerate()
                        .map(|(index, (frame, ff))| FrameReport {
                            index,
                            function: frame.function.clone(),
                            module: frame.module.clone(),
                            kind: frame.kind,
                            proprietary: ff.proprietary,
                            frame_shared: ff.frame_shared.clone(),
                            thread_shared: ff.thread_shared.clone(),
                        })
                        .collect(),
                }
            })
            .collect();
        let all = kept.groups();
        let listed = largest_groups(all, limit);
        let groups_omitted = (all.len() - listed.len()) as u64;
        let groups = listed
            .into_iter()
            .map(|g| all.at(g))
            .map(|g| GroupReport {
                id: g.id,
                kind: g.id.kind,
                entry: kept.id(g.entry),
                addr: kept.addr(g.entry),
                label: kept.site_label(g.entry).to_string(),
                size: g.size,
                objects: g.objects,
                sharers: g.sharers.to_vec(),
                refs: g.refs().collect(),
            })
            .collect();
        let threads_not_stopped = kept
            .threads()
            .iter()
            .filter(|t| t.state != ThreadState::Stopped)
            .count() as u32;
        Report {
            format: REPORT_FORMAT,
            version: REPORT_VERSION,
            process: ProcessInfo {
                pid: kept.process().pid,
                command: kept.process().command.clone(),
            },
            totals: kept.totals(),
            threads,
            groups,
            groups_omitted,
            threads_not_stopped,
            leaks: LeaksReport {
                figures: kept.leaks(),
                may_be_overstated: threads_not_stopped > 0,
            },
            release,
            timing: None,
            views: None,
        }
    }
}

/// The indices of the `limit` largest of `groups`, largest first, ties in id order. Only
/// these become report rows: a heap of millions of blocks can have millions of groups, and
/// a row each (with its label) would cost the client more than the rest of the report.
fn largest_groups(groups: &GroupTable, limit: GroupLimit) -> Vec<u32> {
    // One pass keeping the `listed` largest in a heap whose top is the smallest of them:
    // each size is read out of the packed columns once (a selection over all groups read it
    // at every comparison, a tenth of a live report's client CPU on a 4.56M-block heap), an
    // id only for a size that can enter, and the memory is that of the listed groups. The
    // keys are distinct (a group's id is), so the order is that of a sort of them all.
    let listed = limit.of(groups.len());
    let mut largest: BinaryHeap<(Reverse<u64>, GroupId, u32)> = BinaryHeap::with_capacity(listed);
    for g in 0..groups.len() as u32 {
        let size = groups.size_at(g);
        if largest.len() < listed {
            largest.push((Reverse(size), groups.id(g), g));
            continue;
        }
        let Some(mut smallest) = largest.peek_mut() else {
            break; // nothing is listed
        };
        let Reverse(smallest_size) = smallest.0;
        if size < smallest_size {
            continue;
        }
        let key = (Reverse(size), groups.id(g), g);
        if key < *smallest {
            *smallest = key;
        }
    }
    largest
        .into_sorted_vec()
        .into_iter()
        .map(|(_, _, g)| g)
        .collect()
}
