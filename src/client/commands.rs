//! The commands that work on a live agent: `report ADDR`, `snapshot ADDR -o FILE` and
//! `run [--listen ADDR] -- PROG ARGS`.
//!
//! A live report takes a snapshot, fetches its graph and prints it through the very code of
//! the file report (`offline::report`), so the two cannot differ; it adds the process and the
//! snapshot's timing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use anyhow::Context;

use super::{Address, Session, TokenSource};
use crate::cli::{ReportArgs, ReportFormat};
use crate::offline::report::{self, Timing};

/// A snapshot taken and fetched from a live agent.
pub struct LiveSnapshot {
    /// The graph as the binary snapshot file the agent sent (checked to read back).
    pub file: Vec<u8>,
    pub info: heaptui_protocol::SnapshotInfo,
}

/// A snapshot file is saved only when it reads back; checked without building its graph, so
/// the client of a snapshot of millions of blocks holds little more than the file.
fn check_reads_back(file: &[u8]) -> anyhow::Result<()> {
    heaptui_analysis::snapshot::check_bytes(file)
        .context("the agent sent a snapshot that does not read back")
}

/// Takes a snapshot on the agent and fetches its graph.
pub fn live_snapshot(session: &mut Session) -> anyhow::Result<LiveSnapshot> {
    let info = session.take_snapshot()?;
    let file = session.snapshot_file(info.snapshot)?;
    check_reads_back(&file)?;
    Ok(LiveSnapshot { file, info })
}

fn ms(us: u64) -> f64 {
    us as f64 / 1e3
}

/// `heaptui report ADDR [--json|--format …] [--release …]`: takes a snapshot and prints it
/// through the file report's code.
pub fn report(
    address: &Address,
    token: &TokenSource,
    args: &ReportArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut session = Session::connect(address, token)?;
    live_report(&mut session, args, out)
}

fn live_report(
    session: &mut Session,
    args: &ReportArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let info = session.take_snapshot()?;
    let timing = Timing {
        pause_ms: ms(info.pause_us),
        capture_ms: ms(info.capture_us),
        analysis_ms: ms(info.analysis_us),
        outside: false,
    };
    // The agent has analysed its snapshot: the report prints that analysis, fetched in its
    // kept form, rather than fetching the whole graph and analysing it again. Only the exports
    // by allocation stack need the graph itself.
    let needs_graph = matches!(args.format(), ReportFormat::Collapsed | ReportFormat::Pprof);
    let graph = if needs_graph {
        let file = session.snapshot_file(info.snapshot)?;
        Some(
            heaptui_analysis::snapshot::read_bytes(&file)
                .context("the agent sent a snapshot that does not read back")?,
        )
    } else {
        None
    };
    let kept = match &graph {
        Some(graph) => heaptui_analysis::Kept::new(graph, &heaptui_analysis::Analysis::new(graph)),
        None => session.kept(info.snapshot)?,
    };
    // Leaks and ages are the agent's: it knows the snapshot boundaries the ages count.
    let mut ask = |body| Ok(session.request(body)?);
    report::write_kept(
        &kept,
        graph.as_ref(),
        args,
        Some(timing),
        Some(&mut ask),
        out,
    )
}

/// The peak snapshot the agent keeps under its automatic rule (`HEAPTUI_AUTO_SNAPSHOT`),
/// fetched without taking a new one.
pub fn peak_snapshot(session: &mut Session) -> anyhow::Result<LiveSnapshot> {
    let process = match session.request(heaptui_protocol::RequestBody::ProcessInfo)? {
        heaptui_protocol::Response::ProcessInfo(p) => p,
        other => anyhow::bail!(
            "the agent answered a process-info request with {}",
            other.kind()
        ),
    };
    let Some(info) = process.peak_snapshot else {
        if process.snapshot_rule == heaptui_protocol::SnapshotRule::Off {
            anyhow::bail!(
                "the agent keeps no peak snapshot: start the target with \
                 HEAPTUI_AUTO_SNAPSHOT=tolerance:SIZE (or every:SIZE)"
            );
        }
        anyhow::bail!("the agent has taken no automatic snapshot yet: try again later");
    };
    let file = session.snapshot_file(info.snapshot)?;
    check_reads_back(&file)?;
    Ok(LiveSnapshot { file, info })
}

/// `heaptui snapshot ADDR -o FILE [--peak]`: writes the binary snapshot file (under a
/// temporary name, then renamed, so FILE is never half written); with `peak`, the agent's
/// peak snapshot rather than a new one.
pub fn snapshot(
    address: &Address,
    token: &TokenSource,
    output: &Path,
    peak: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut session = Session::connect(address, token)?;
    let live = if peak {
        peak_snapshot(&mut session)?
    } else {
        live_snapshot(&mut session)?
    };
    crate::offline::write_atomically(output, &live.file)?;
    let agent = session.agent();
    writeln!(
        out,
        "snapshot {} of pid {} ({}): {} objects, {} bytes, {} threads; pause {:.1} ms → {}",
        live.info.snapshot.0,
        agent.pid,
        crate::figures::one_line(agent.command.clone()),
        live.info.totals.objects,
        live.info.totals.bytes,
        live.info.threads,
        ms(live.info.pause_us),
        output.display()
    )?;
    Ok(())
}

/// `heaptui run` without a terminal: starts PROG under the agent, waits for the agent, prints
/// the report, and waits for PROG to end (its exit status is returned).
pub fn run(
    listen: Option<&Address>,
    wrappers: Option<&str>,
    program: &[std::ffi::OsString],
    out: &mut impl Write,
) -> anyhow::Result<ExitStatus> {
    let launch = crate::launch::Launch {
        listen: listen.cloned(),
        wrappers: wrappers.map(str::to_owned),
        ..Default::default()
    };
    let mut target = crate::launch::start(program, &launch)?;
    let args = ReportArgs {
        source: PathBuf::from(target.address.to_string()),
        json: false,
        format: None,
        release: None,
        token_file: None,
        groups: crate::cli::GroupLimit::DEFAULT,
        leaks: false,
        ages: false,
        units: None,
        position: None,
        charge: None,
        labels: Default::default(),
    };
    let result = live_report(&mut target.session, &args, out).and_then(|()| {
        writeln!(
            out,
            "\n{} keeps running; attach with: heaptui attach {}",
            Path::new(&program[0]).display(),
            target.address
        )?;
        out.flush()?;
        Ok(())
    });
    if let Err(e) = result {
        // The program runs on even when the report failed; say why, then wait for it.
        eprintln!("heaptui: {e:#}");
    }
    target.wait()
}
