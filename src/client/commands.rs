//! The commands that work on a live agent: `report ADDR`, `snapshot ADDR -o FILE` and
//! `run [--listen ADDR] -- PROG ARGS`.
//!
//! A live report takes a snapshot, fetches its graph and prints it through the very code of
//! the file report (`offline::report`), so the two cannot differ; it adds the process and the
//! snapshot's timing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use heaptui_analysis::HeapGraph;

use super::{Address, ClientError, Session, TokenSource};
use crate::cli::ReportArgs;
use crate::offline::report::{self, Timing};

/// A snapshot taken and fetched from a live agent.
pub struct LiveSnapshot {
    pub graph: HeapGraph,
    /// The graph as the binary snapshot file the agent sent.
    pub file: Vec<u8>,
    pub info: heaptui_protocol::SnapshotInfo,
}

/// Takes a snapshot on the agent and fetches its graph.
pub fn live_snapshot(session: &mut Session) -> anyhow::Result<LiveSnapshot> {
    let info = session.take_snapshot()?;
    let file = session.snapshot_file(info.snapshot)?;
    let graph = heaptui_analysis::snapshot::read_bytes(&file)
        .context("the agent sent a snapshot that does not read back")?;
    Ok(LiveSnapshot { graph, file, info })
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
    let live = live_snapshot(session)?;
    let timing = Timing {
        pause_ms: ms(live.info.pause_us),
        capture_ms: ms(live.info.capture_us),
        analysis_ms: ms(live.info.analysis_us),
    };
    report::write(&live.graph, args, Some(timing), out)
}

/// `heaptui snapshot ADDR -o FILE`: writes the binary snapshot file (under a temporary name,
/// then renamed, so FILE is never half written).
pub fn snapshot(
    address: &Address,
    token: &TokenSource,
    output: &Path,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut session = Session::connect(address, token)?;
    let live = live_snapshot(&mut session)?;
    let mut tmp = output.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, &live.file)
        .and_then(|()| std::fs::rename(&tmp, output))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow::anyhow!("cannot write {}: {e}", output.display())
        })?;
    let agent = session.agent();
    writeln!(
        out,
        "snapshot {} of pid {} ({}): {} objects, {} bytes, {} threads; pause {:.1} ms → {}",
        live.info.snapshot.0,
        agent.pid,
        agent.command,
        live.info.totals.objects,
        live.info.totals.bytes,
        live.info.threads,
        ms(live.info.pause_us),
        output.display()
    )?;
    Ok(())
}

/// How long `run` waits for the agent to answer after starting the program.
const AGENT_WAIT: Duration = Duration::from_secs(20);

/// `heaptui run [--listen ADDR] -- PROG ARGS`: starts PROG under the agent, waits for the
/// agent, prints the report, and waits for PROG to end (its exit status is returned).
pub fn run(
    listen: Option<&Address>,
    program: &[std::ffi::OsString],
    out: &mut impl Write,
) -> anyhow::Result<ExitStatus> {
    let Some((prog, args)) = program.split_first() else {
        bail!("no program to run: give it after --, e.g. heaptui run -- ./server");
    };
    let agent = crate::embedded::agent_path()?;
    let address = match listen {
        Some(a) => a.clone(),
        None => {
            // A Unix socket in the private token directory: no port to collide with.
            let dir = super::token::directory();
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Address::Unix(dir.join(format!("run-{}.sock", std::process::id())))
        }
    };
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(existing) if !existing.is_empty() => {
            let mut p = agent.clone().into_os_string();
            p.push(" ");
            p.push(existing);
            p
        }
        _ => agent.clone().into_os_string(),
    };
    let mut child = Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("HEAPTUI_LISTEN", address.to_string())
        .spawn()
        .with_context(|| format!("cannot start {}", Path::new(prog).display()))?;
    let result = wait_for_agent(&mut child, &address).and_then(|mut session| {
        let args = ReportArgs {
            source: PathBuf::from(address.to_string()),
            json: false,
            format: None,
            release: None,
            token_file: None,
        };
        live_report(&mut session, &args, out)?;
        writeln!(
            out,
            "\n{} keeps running; attach with: heaptui report {address}",
            Path::new(prog).display()
        )?;
        out.flush()?;
        Ok(())
    });
    if let Err(e) = result {
        // The program runs on even when the report failed; say why, then wait for it.
        eprintln!("heaptui: {e:#}");
    }
    Ok(child.wait()?)
}

fn wait_for_agent(child: &mut Child, address: &Address) -> anyhow::Result<Session> {
    let started = Instant::now();
    let mut last: Option<ClientError> = None;
    while started.elapsed() < AGENT_WAIT {
        if let Some(status) = child.try_wait()? {
            bail!("the program ended ({status}) before its agent answered on {address}");
        }
        match Session::connect(address, &TokenSource::Discover) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "the agent did not answer on {address} within {} s: {}",
        AGENT_WAIT.as_secs(),
        last.map_or_else(String::new, |e| e.to_string())
    )
}
