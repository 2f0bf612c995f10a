//! The other views (docs/reference.md §8) in `heaptui report`: leaks by site and block ages for a
//! snapshot or a live agent (`--leaks`, `--ages`), and the whole report of a recording (counters,
//! allocation units under `--units/--position/--charge`, ages, recorded counters).
//!
//! Every figure comes from a protocol answer — the snapshot's `Answerer`, the live agent, or a
//! replayed `Recording` — so the report shows what the TUI shows. This module gathers pages,
//! shapes them for text tables and JSON, and checks which flags fit which source; it computes
//! no figure itself.
//!
//! JSON: a snapshot's or live agent's report stays `heaptui-report` version 1 with two more
//! members when asked, `leak_sites` and `ages` (docs/reference.md §5: members may be added, none
//! changes meaning). A recording has no heap graph, so no `heaptui-report` (threads, groups are its
//! required meaning): it is a document of its own, `heaptui-recording-report` version 1.

use std::io::{self, Write};
use std::path::Path;

use heaptui_protocol::message::{
    AgeHistogram, AgeRow, AgeScope, AgesAnswer, LeakRow, LiveCounters, MAX_PAGE_ROWS, Page,
    RequestBody, Response, Sort, Survivor, UnitKey, UnitPage, UnitQuery, UnitRow,
};
use serde::Serialize;

use super::recording::{self, Recording};
use super::table::{Column, Table};
use crate::app::told_apart::told_apart;
use crate::cli::{ReportArgs, ReportFormat};
use crate::figures::{
    RANGE_NAMES, charge_name, granularity_name, histogram_text, position_name, query_text,
    utilization, wall_age,
};
use crate::size::{human, human_exact};

/// Survivors listed in text (JSON lists [`OLDEST_JSON`]).
const OLDEST_TEXT: usize = 10;
const OLDEST_JSON: u32 = 100;
/// Rows of a per-site or per-thread table listed in text; the JSON has them all.
const ROWS_TEXT: usize = 50;

/// A flag that does not fit the source: a usage error (exit 2), naming the flag.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Leaks and ages asked of a snapshot or a live agent (and a live agent's units).
#[derive(Debug, Default, Serialize)]
pub struct ViewsReport {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<UnitsReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leak_sites: Option<Vec<LeakSite>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ages: Option<AgesReport>,
}

/// The leaked blocks of one allocation site, per leak class (docs/reference.md §3).
#[derive(Debug, Serialize)]
pub struct LeakSite {
    pub label: String,
    /// Innermost first.
    pub frames: Vec<String>,
    pub definitely_lost: u64,
    pub definitely_lost_objects: u64,
    pub indirectly_lost: u64,
    pub indirectly_lost_objects: u64,
    pub possibly_lost: u64,
    pub possibly_lost_objects: u64,
}

/// Blocks and bytes per age range (`ranges` names them).
#[derive(Clone, Debug, Serialize)]
pub struct Histogram {
    pub blocks: [u64; 5],
    pub bytes: [u64; 5],
}

#[derive(Debug, Serialize)]
pub struct AgeGroup {
    /// Site label, or thread name.
    pub label: String,
    /// Thread id, for a thread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(flatten)]
    pub histogram: Histogram,
}

#[derive(Debug, Serialize)]
pub struct SurvivorReport {
    pub addr: u64,
    pub size: u64,
    /// Snapshots survived.
    pub age: Option<u32>,
    /// Wall-clock age, when known.
    pub age_ms: Option<u64>,
    pub site: String,
    pub thread: u32,
    pub seq: u64,
}

/// The age view: per range, per site, per thread, and the oldest blocks.
#[derive(Debug, Serialize)]
pub struct AgesReport {
    /// Snapshot boundaries the ages count (0: every block has age 0).
    pub boundaries: u32,
    pub ranges: [&'static str; 5],
    pub total: Histogram,
    pub by_site: Vec<AgeGroup>,
    pub by_thread: Vec<AgeGroup>,
    /// Oldest first.
    pub oldest: Vec<SurvivorReport>,
}

fn histogram(h: &AgeHistogram) -> Histogram {
    Histogram {
        blocks: h.blocks,
        bytes: h.bytes,
    }
}

fn group(row: AgeRow, by: AgeScope) -> AgeGroup {
    AgeGroup {
        tid: (by == AgeScope::Threads).then_some(row.key),
        label: row.label,
        histogram: histogram(&row.histogram),
    }
}

fn survivor(s: Survivor) -> SurvivorReport {
    SurvivorReport {
        addr: s.object.addr,
        size: s.object.size,
        age: s.object.age,
        age_ms: s.age_ms,
        site: s.object.site_label,
        thread: s.object.thread,
        seq: s.object.seq,
    }
}

/// Asks a source one request (the snapshot's answerer, a live agent's session).
pub type Ask<'a> = dyn FnMut(RequestBody) -> anyhow::Result<Response> + 'a;

fn unexpected(asked: &str, got: &Response) -> anyhow::Error {
    anyhow::anyhow!("asked for {asked}, the source answered {}", got.kind())
}

/// Every leak row, page after page.
fn leak_sites(ask: &mut Ask<'_>) -> anyhow::Result<Vec<LeakSite>> {
    let mut rows: Vec<LeakRow> = Vec::new();
    loop {
        let offset = rows.len() as u32;
        let page = match ask(RequestBody::Leaks {
            page: Page::new(offset, MAX_PAGE_ROWS),
        })? {
            Response::Leaks(p) => p,
            Response::Error(e) => anyhow::bail!("leaks: {}", e.message),
            other => return Err(unexpected("leaks", &other)),
        };
        let got = page.rows.len();
        rows.extend(page.rows);
        if got == 0 || rows.len() >= page.page.total as usize {
            break;
        }
    }
    Ok(rows
        .into_iter()
        .map(|r| LeakSite {
            label: r.label,
            frames: r.frames,
            definitely_lost: r.definitely_lost,
            definitely_lost_objects: r.definitely_lost_objects,
            indirectly_lost: r.indirectly_lost,
            indirectly_lost_objects: r.indirectly_lost_objects,
            possibly_lost: r.possibly_lost,
            possibly_lost_objects: r.possibly_lost_objects,
        })
        .collect())
}

/// Every age row of one grouping, page after page; the first answer's totals and survivors.
fn ages_by(
    ask: &mut dyn FnMut(AgeScope, Page, u32) -> anyhow::Result<AgesAnswer>,
    by: AgeScope,
    oldest: u32,
) -> anyhow::Result<(AgesAnswer, Vec<AgeRow>)> {
    let first = ask(by, Page::new(0, MAX_PAGE_ROWS), oldest)?;
    let mut rows = first.rows.clone();
    while !rows.is_empty() && rows.len() < first.page.total as usize {
        let next = ask(by, Page::new(rows.len() as u32, MAX_PAGE_ROWS), 0)?;
        if next.rows.is_empty() {
            break;
        }
        rows.extend(next.rows);
    }
    Ok((first, rows))
}

fn ages_report(
    ask: &mut dyn FnMut(AgeScope, Page, u32) -> anyhow::Result<AgesAnswer>,
) -> anyhow::Result<AgesReport> {
    let (first, by_site) = ages_by(ask, AgeScope::Sites, OLDEST_JSON)?;
    let (_, by_thread) = ages_by(ask, AgeScope::Threads, 0)?;
    Ok(AgesReport {
        boundaries: first.boundaries,
        ranges: RANGE_NAMES,
        total: histogram(&first.total),
        by_site: by_site
            .into_iter()
            .map(|r| group(r, AgeScope::Sites))
            .collect(),
        by_thread: by_thread
            .into_iter()
            .map(|r| group(r, AgeScope::Threads))
            .collect(),
        oldest: first.oldest.into_iter().map(survivor).collect(),
    })
}

/// The leaks, ages and units `args` asks for, from `ask`; `None` when none is asked. They
/// print as text or JSON only: with another format, asking for them is a usage error.
pub fn gather(args: &ReportArgs, ask: &mut Ask<'_>) -> anyhow::Result<Option<ViewsReport>> {
    let units_asked = args.units.is_some() || args.position.is_some() || args.charge.is_some();
    if !args.leaks && !args.ages && !units_asked {
        return Ok(None);
    }
    if !matches!(args.format(), ReportFormat::Text | ReportFormat::Json) {
        let flag = if args.leaks {
            "--leaks"
        } else if args.ages {
            "--ages"
        } else {
            "--units"
        };
        return Err(UsageError(format!(
            "{flag} prints with the text or json format only, not --format {}",
            format_name(args.format())
        ))
        .into());
    }
    let units = if units_asked {
        let query = unit_query(args);
        let mut ask_units = |page| match ask(RequestBody::Units {
            query,
            sort: Sort::desc(UnitKey::Live),
            page,
        })? {
            Response::Units(p) => Ok(p),
            Response::Error(e) => anyhow::bail!("units: {}", e.message),
            other => Err(unexpected("units", &other)),
        };
        Some(units_report(query, &mut ask_units)?)
    } else {
        None
    };
    let leak_sites = if args.leaks {
        Some(leak_sites(ask)?)
    } else {
        None
    };
    let ages = if args.ages {
        let mut ask_ages = |by, page, oldest| match ask(RequestBody::Ages { by, page, oldest })? {
            Response::Ages(a) => Ok(a),
            Response::Error(e) => anyhow::bail!("ages: {}", e.message),
            other => Err(unexpected("ages", &other)),
        };
        Some(ages_report(&mut ask_ages)?)
    } else {
        None
    };
    Ok(Some(ViewsReport {
        units,
        leak_sites,
        ages,
    }))
}

fn format_name(format: ReportFormat) -> &'static str {
    match format {
        ReportFormat::Text => "text",
        ReportFormat::Json => "json",
        ReportFormat::Csv => "csv",
        ReportFormat::Collapsed => "collapsed",
        ReportFormat::Pprof => "pprof",
    }
}

/// Checks the flags that need a source of one kind, for a snapshot or a live agent.
pub fn check_graph_flags(args: &ReportArgs) -> Result<(), UsageError> {
    let flag = if args.units.is_some() {
        "--units"
    } else if args.position.is_some() {
        "--position"
    } else if args.charge.is_some() {
        "--charge"
    } else {
        return Ok(());
    };
    Err(UsageError(format!(
        "{flag} needs a recording (HEAPTUI_RECORD=FILE): {} is a snapshot, which keeps no \
         allocation events",
        args.source.display()
    )))
}

/// Text of the leaks and ages sections, after the report's own tables.
pub fn render(views: &ViewsReport, out: &mut impl Write) -> io::Result<()> {
    if let Some(units) = &views.units {
        writeln!(out)?;
        render_units(units, out)?;
    }
    if let Some(sites) = &views.leak_sites {
        render_leaks(sites, out)?;
    }
    if let Some(ages) = &views.ages {
        render_ages(ages, out)?;
    }
    Ok(())
}

fn render_leaks(sites: &[LeakSite], out: &mut impl Write) -> io::Result<()> {
    writeln!(out)?;
    if sites.is_empty() {
        return writeln!(out, "Leaks by site: none");
    }
    let shown = sites.len().min(ROWS_TEXT);
    writeln!(
        out,
        "Leaks by site, most lost bytes first ({shown} of {})",
        sites.len()
    )?;
    let mut t = Table::new(&[
        Column::left("SITE"),
        Column::right("DEFINITELY LOST"),
        Column::right("BLOCKS"),
        Column::right("INDIRECTLY LOST"),
        Column::right("BLOCKS"),
        Column::right("LOST BYTES"),
        Column::right("POSSIBLY LOST"),
        Column::right("BLOCKS"),
    ]);
    let stacks: Vec<(&str, &[String])> = sites
        .iter()
        .map(|s| (s.label.as_str(), s.frames.as_slice()))
        .collect();
    let told_apart = told_apart(&stacks);
    for (s, apart) in sites[..shown].iter().zip(told_apart) {
        t.row(vec![
            format!("{}{}", s.label, apart.unwrap_or_default()),
            human(s.definitely_lost),
            s.definitely_lost_objects.to_string(),
            human(s.indirectly_lost),
            s.indirectly_lost_objects.to_string(),
            (s.definitely_lost + s.indirectly_lost).to_string(),
            human(s.possibly_lost),
            s.possibly_lost_objects.to_string(),
        ]);
    }
    t.write(out, "  ")
}

fn render_ages(ages: &AgesReport, out: &mut impl Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "Ages (snapshots each block survived) against {} snapshot boundar{}",
        ages.boundaries,
        if ages.boundaries == 1 { "y" } else { "ies" }
    )?;
    if ages.boundaries == 0 {
        writeln!(
            out,
            "  (no boundaries recorded: every block counts as age 0; a live agent or a \
             recording keeps them)"
        )?;
    }
    let total = AgeHistogram {
        blocks: ages.total.blocks,
        bytes: ages.total.bytes,
    };
    writeln!(out, "  all blocks  {}", histogram_text(&total))?;
    if total.blocks.iter().sum::<u64>() == 0 && !ages.by_site.is_empty() {
        writeln!(
            out,
            "  (no block carries an allocation sequence number: no ages to count)"
        )?;
    }
    for (title, groups) in [("by site", &ages.by_site), ("by thread", &ages.by_thread)] {
        writeln!(out)?;
        let shown = groups.len().min(ROWS_TEXT);
        writeln!(out, "Ages {title} ({shown} of {})", groups.len())?;
        let mut t = Table::new(&[
            Column::left(if title == "by site" { "SITE" } else { "THREAD" }),
            Column::right("AGE 0"),
            Column::right("1"),
            Column::right("2"),
            Column::right("3"),
            Column::right(">3"),
            Column::right("BYTES"),
        ]);
        for g in &groups[..shown] {
            let mut cells = vec![match g.tid {
                Some(tid) if g.label != format!("thread {tid}") => format!("{tid} {}", g.label),
                _ => g.label.clone(),
            }];
            cells.extend(g.histogram.blocks.iter().map(u64::to_string));
            cells.push(human(g.histogram.bytes.iter().sum()));
            t.row(cells);
        }
        t.write(out, "  ")?;
    }
    writeln!(out)?;
    let shown = ages.oldest.len().min(OLDEST_TEXT);
    writeln!(out, "Oldest survivors ({shown} shown, `--json` lists more)")?;
    let mut t = Table::new(&[
        Column::right("ADDRESS"),
        Column::right("SIZE"),
        Column::right("AGE"),
        Column::right("WALL AGE"),
        Column::left("SITE"),
        Column::right("THREAD"),
        Column::right("SEQ"),
    ]);
    for s in &ages.oldest[..shown] {
        t.row(vec![
            format!("{:#x}", s.addr),
            human(s.size),
            s.age.map_or_else(|| "-".to_string(), |a| a.to_string()),
            wall_age(s.age_ms),
            s.site.clone(),
            s.thread.to_string(),
            s.seq.to_string(),
        ]);
    }
    t.write(out, "  ")
}

// ----- recordings ------------------------------------------------------------------------

/// The report of a recording, `heaptui-recording-report` version 1.
#[derive(Debug, Serialize)]
pub struct RecordingReport {
    pub format: &'static str,
    pub version: u32,
    /// Records replayed, of every kind.
    pub events: u64,
    /// Allocations, frees and reallocs among them.
    pub heap_events: u64,
    /// Byte offset of a record cut short at the end of the file (ignored), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated_at: Option<usize>,
    pub counters: CountersReport,
    pub units: UnitsReport,
    pub ages: AgesReport,
}

/// The counters recomputed from the events, and what the agent recorded.
#[derive(Debug, Serialize)]
pub struct CountersReport {
    pub live_bytes: u64,
    pub live_blocks: u64,
    pub allocated_bytes: u64,
    pub peak_live_bytes: u64,
    /// `live_bytes / allocated_bytes`, 0 when nothing was allocated.
    pub utilization: f64,
    /// Counter samples the agent recorded.
    pub recorded_samples: usize,
}

#[derive(Debug, Serialize)]
pub struct UnitsReport {
    #[serde(skip)]
    pub query: UnitQuery,
    pub granularity: &'static str,
    pub position: &'static str,
    pub charge: &'static str,
    pub unknown_frees: u64,
    pub unknown_reallocs: u64,
    /// Most live bytes first.
    pub rows: Vec<UnitRow>,
}

pub const RECORDING_REPORT_FORMAT: &str = "heaptui-recording-report";
pub const RECORDING_REPORT_VERSION: u32 = 1;

/// The flags a recording cannot honour: each is named.
fn check_recording_flags(args: &ReportArgs) -> Result<(), UsageError> {
    let source = args.source.display();
    let refuse = |flag: &str| {
        Err(UsageError(format!(
            "{flag} needs a snapshot or a live agent: {source} is a recording, which has no \
             heap graph (take one with `heaptui snapshot` or HEAPTUI_DUMP)"
        )))
    };
    if args.release.is_some() {
        return refuse("--release");
    }
    if args.leaks {
        return refuse("--leaks");
    }
    match args.format() {
        ReportFormat::Text | ReportFormat::Json => Ok(()),
        ReportFormat::Csv => refuse("--format csv"),
        ReportFormat::Collapsed => refuse("--format collapsed"),
        ReportFormat::Pprof => refuse("--format pprof"),
    }
}

fn unit_query(args: &ReportArgs) -> UnitQuery {
    UnitQuery {
        granularity: args.units.map(Into::into).unwrap_or_default(),
        position: args.position.map(Into::into).unwrap_or_default(),
        charge: args.charge.map(Into::into).unwrap_or_default(),
    }
}

/// Builds a recording's report (counters, units of the query `args` gives, ages).
pub fn recording_report(
    recording: &mut Recording,
    args: &ReportArgs,
) -> anyhow::Result<RecordingReport> {
    let query = unit_query(args);
    let units = units_report(query, &mut |page| {
        Ok(recording.unit_page(query, Sort::desc(UnitKey::Live), page)?)
    })?;
    let mut ask_ages = |by, page, oldest| Ok(recording.ages(by, page, oldest));
    let ages = ages_report(&mut ask_ages)?;
    let c = recording.counters();
    Ok(RecordingReport {
        format: RECORDING_REPORT_FORMAT,
        version: RECORDING_REPORT_VERSION,
        events: recording.events(),
        heap_events: recording.heap_events(),
        truncated_at: recording.truncated(),
        counters: CountersReport {
            live_bytes: c.live_bytes,
            live_blocks: c.live_blocks,
            allocated_bytes: c.allocated_bytes,
            peak_live_bytes: c.peak_live_bytes,
            utilization: c.utilization(),
            recorded_samples: recording.history().len(),
        },
        units,
        ages,
    })
}

/// Every unit of `query`, page after page, most live bytes first.
fn units_report(
    query: UnitQuery,
    ask: &mut dyn FnMut(Page) -> anyhow::Result<UnitPage>,
) -> anyhow::Result<UnitsReport> {
    let mut rows: Vec<UnitRow> = Vec::new();
    let (unknown_frees, unknown_reallocs) = loop {
        let mut page = ask(Page::new(rows.len() as u32, MAX_PAGE_ROWS))?;
        let got = page.rows.len();
        rows.append(&mut page.rows);
        if got == 0 || rows.len() >= page.page.total as usize {
            break (page.unknown_frees, page.unknown_reallocs);
        }
    };
    Ok(UnitsReport {
        granularity: granularity_name(query.granularity),
        position: position_name(query.position),
        charge: charge_name(query.charge),
        query,
        unknown_frees,
        unknown_reallocs,
        rows,
    })
}

/// `heaptui report REC`: checks the flags, replays, prints text or JSON.
pub fn run_recording(args: &ReportArgs, out: &mut impl Write) -> anyhow::Result<()> {
    check_recording_flags(args)?;
    let mut recording = recording::load(&args.source)?;
    let report = recording_report(&mut recording, args)?;
    let mut out = io::BufWriter::with_capacity(1 << 16, out);
    if args.format() == ReportFormat::Json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        render_recording(&report, &args.source, &mut out)?;
    }
    out.flush()?;
    Ok(())
}

fn render_units(u: &UnitsReport, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "Allocation units · {} ({} units)",
        query_text(u.query),
        u.rows.len()
    )?;
    let mut t = Table::new(&[
        Column::left("UNIT"),
        Column::right("LIVE BYTES"),
        Column::right("MIN"),
        Column::right("MAX"),
        Column::right("MALLOC"),
        Column::right("REALLOC"),
        Column::right("FREE"),
        Column::right("MEMALIGN"),
    ]);
    for row in &u.rows {
        t.row(vec![
            row.name.clone(),
            row.live.to_string(),
            row.min.to_string(),
            row.max.to_string(),
            row.malloc.to_string(),
            row.realloc.to_string(),
            row.free.to_string(),
            row.memalign.to_string(),
        ]);
    }
    t.write(out, "  ")?;
    if u.unknown_frees + u.unknown_reallocs > 0 {
        writeln!(
            out,
            "  unknown pointers (totals unchanged): {} frees, {} reallocs",
            u.unknown_frees, u.unknown_reallocs
        )?;
    }
    Ok(())
}

fn render_recording(r: &RecordingReport, source: &Path, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "heaptui report of {} (recording)", source.display())?;
    write!(out, "records  {} ({} heap events)", r.events, r.heap_events)?;
    match r.truncated_at {
        Some(at) => writeln!(
            out,
            "; a record cut at byte {at} was ignored (the target stopped mid-write)"
        )?,
        None => writeln!(out)?,
    }
    let c = &r.counters;
    let counters = LiveCounters {
        live_bytes: c.live_bytes,
        allocated_bytes: c.allocated_bytes,
        ..LiveCounters::default()
    };
    writeln!(
        out,
        "counters live {} in {} blocks · allocated {} · utilization {} · peak {}",
        human_exact(c.live_bytes),
        c.live_blocks,
        human_exact(c.allocated_bytes),
        utilization(&counters),
        human_exact(c.peak_live_bytes)
    )?;
    writeln!(
        out,
        "         {} counter samples recorded by the agent",
        c.recorded_samples
    )?;
    writeln!(out)?;
    render_units(&r.units, out)?;
    render_ages(&r.ages, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn args(line: &[&str]) -> ReportArgs {
        let Command::Report(args) = Cli::try_parse_from(line).unwrap().command else {
            panic!("not a report")
        };
        args
    }

    #[test]
    fn leak_sites_with_one_label_show_where_their_stacks_part() {
        let site = |label: &str, frames: &[&str], lost: u64| LeakSite {
            label: label.to_string(),
            frames: frames.iter().map(|f| f.to_string()).collect(),
            definitely_lost: lost,
            definitely_lost_objects: 1,
            indirectly_lost: 0,
            indirectly_lost_objects: 0,
            possibly_lost: 0,
            possibly_lost_objects: 0,
        };
        let sites = [
            site("git+0x281f2a", &["git+0x281f2a", "git+0x1000"], 300),
            site("cmd_main (git.c:9)", &["cmd_main (git.c:9)"], 200),
            site("git+0x281f2a", &["git+0x281f2a", "git+0x2000"], 100),
        ];
        let mut out = Vec::new();
        render_leaks(&sites, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let labels: Vec<&str> = text
            .lines()
            .skip(3)
            .map(|l| l.trim_start().split("  ").next().unwrap())
            .collect();
        assert_eq!(
            labels,
            [
                "git+0x281f2a ← git+0x1000",
                "cmd_main (git.c:9)",
                "git+0x281f2a ← git+0x2000",
            ],
            "{text}"
        );
    }

    #[test]
    fn a_recording_refuses_graph_flags_naming_them() {
        for (flag, line) in [
            ("--leaks", &["heaptui", "report", "r.rec", "--leaks"][..]),
            (
                "--release",
                &["heaptui", "report", "r.rec", "--release", "1"],
            ),
            (
                "--format pprof",
                &["heaptui", "report", "r.rec", "--format", "pprof"],
            ),
        ] {
            let e = check_recording_flags(&args(line)).unwrap_err();
            assert!(
                e.0.starts_with(&format!(
                    "{flag} needs a snapshot or a live agent: r.rec is a recording"
                )),
                "{e}"
            );
        }
        assert!(check_recording_flags(&args(&["heaptui", "report", "r.rec", "--ages"])).is_ok());
        let e = check_graph_flags(&args(&["heaptui", "report", "s.json", "--units", "thread"]))
            .unwrap_err();
        assert!(e.0.starts_with("--units needs a recording"), "{e}");
    }
}
