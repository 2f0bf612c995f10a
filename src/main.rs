//! `heaptui`: the one binary users run (docs/reference.md §2).
//!
//! Parses the command line and hands each command to its module. Exit codes: 0 success,
//! 1 runtime failure (one line on stderr, `heaptui: …`), 2 usage error (clap's own message).

mod app;
mod cli;
mod client;
mod embedded;
mod figures;
mod launch;
mod offline;
mod outside;
mod size;
mod source;
mod tui;
mod ui;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut stdout = std::io::stdout().lock();
    let result = match cli.command {
        Command::Report(args) => report(&args, &mut stdout),
        Command::Snapshot(args) => snapshot(&args, &mut stdout),
        Command::Run(args) => match run(&args, &mut stdout) {
            // The program's own exit status is `run`'s.
            Ok(code) => {
                let _ = stdout.flush();
                return code;
            }
            Err(e) => Err(e),
        },
        Command::Cancel(args) => match cancel(&args, &mut stdout) {
            // The agent refused: a runtime failure (docs/reference.md §2), the reason already
            // printed.
            Ok(client::cancel::Outcome::Refused) => {
                let _ = stdout.flush();
                return ExitCode::FAILURE;
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        },
        Command::Demo(args) => demo(&args),
        Command::Open(args) => tui::open(&args.file),
        Command::Attach(args) => tui::attach(&args),
        Command::Ps(args) => client::ps::ps(args.json, &mut stdout, &mut std::io::stderr()),
        Command::AgentPath => {
            embedded::agent_path().and_then(|path| Ok(writeln!(stdout, "{}", path.display())?))
        }
    };
    let result = result.and_then(|()| stdout.flush().map_err(Into::into));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`heaptui report … | head`) is the reader's choice, not a failure.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        // A flag that does not fit the source: a usage error, as clap's are.
        Err(e) if e.downcast_ref::<offline::views::UsageError>().is_some() => {
            eprintln!("heaptui: {e:#}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("heaptui: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A SOURCE that is no file but is written like an address is a live agent.
fn report(args: &cli::ReportArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let live = args
        .source
        .to_str()
        .filter(|s| !args.source.exists() && client::Address::looks_like(s));
    let Some(address) = live else {
        return offline::report::run(args, out);
    };
    match client::locate::resolve_source(address, args.token_file.as_deref())? {
        client::locate::Source::Agent(address, token) => {
            client::commands::report(&address, &token, args, out)
        }
        client::locate::Source::Outside(pid) => outside::commands::report(pid, args, out),
    }
}

fn snapshot(args: &cli::SnapshotArgs, out: &mut impl Write) -> anyhow::Result<()> {
    match client::locate::resolve_source(&args.address, args.token_file.as_deref())? {
        client::locate::Source::Agent(address, token) => {
            client::commands::snapshot(&address, &token, &args.output, args.peak, out)
        }
        client::locate::Source::Outside(pid) if args.peak => anyhow::bail!(
            "pid:{pid} has no agent, so no peak snapshot: the agent keeps it \
             (HEAPTUI_AUTO_SNAPSHOT); without --peak heaptui captures it from outside"
        ),
        client::locate::Source::Outside(pid) => outside::commands::snapshot(pid, &args.output, out),
    }
}

fn cancel(args: &cli::CancelArgs, out: &mut impl Write) -> anyhow::Result<client::cancel::Outcome> {
    let (address, token) = client::locate::resolve(&args.address, args.token_file.as_deref())?;
    client::cancel::cancel(
        &address,
        &token,
        args.tid,
        args.dry_run,
        std::time::Duration::from_secs(args.wait),
        out,
    )
}

/// `heaptui run`: the TUI on the program when stdout is a terminal; otherwise (scripts, CI)
/// the report, then the program's own exit status.
fn run(args: &cli::RunArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let listen = match &args.listen {
        Some(a) => Some(client::Address::parse(a).map_err(offline::views::UsageError)?),
        None => None,
    };
    let status = if std::io::stdout().is_terminal() {
        let launch = launch::Launch {
            listen,
            policy: args.policy.clone(),
            audit: None,
            output_log: Some(program_log("run")?),
            record: None,
            ready_line: None,
        };
        tui::run_program(&args.program, &launch, args.refresh)?
    } else {
        if args.policy.is_some() {
            anyhow::bail!("--policy needs the terminal UI: run heaptui run from a terminal");
        }
        client::commands::run(listen.as_ref(), &args.program, out)?
    };
    Ok(exit_code_of(status))
}

/// `heaptui demo`: the bundled workload under the agent, with a policy that lets the operator
/// cancel its runaway thread, and the TUI on it.
fn demo(args: &cli::DemoArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        std::io::stdout().is_terminal(),
        "heaptui demo needs a terminal; to script it use: heaptui run -- $(heaptui agent-path | xargs dirname)/heaptui-demo-*"
    );
    let dir = client::token::directory();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let policy = dir.join("demo-policy.toml");
    std::fs::write(&policy, include_str!("../demo/policy.toml"))
        .with_context(|| format!("cannot write {}", policy.display()))?;
    let log = program_log("demo")?;
    let audit = dir.join("demo-audit.jsonl");
    // Recorded, so that the units view (u) has the event stream it counts.
    let record = dir.join(format!("demo-{}.rec", std::process::id()));
    let launch = launch::Launch {
        listen: None,
        policy: Some(policy),
        audit: Some(audit.clone()),
        output_log: Some(log.clone()),
        record: Some(record.clone()),
        // The workload prints it once every thread holds its first data: the TUI's first
        // snapshot then shows all of them (auto-refresh is off by default).
        ready_line: Some("demo: ready".into()),
    };
    let status = tui::run_program(&[embedded::demo_path()?.into()], &launch, args.refresh)?;
    eprintln!(
        "heaptui: the demo ended ({status}); its output is in {}, policy decisions in {}, \
         its recording in {} (heaptui open replays it)",
        log.display(),
        audit.display(),
        record.display()
    );
    Ok(())
}

/// Where a program started under the TUI writes its output (not over the screen).
fn program_log(what: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = client::token::directory();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir.join(format!("{what}-{}.log", std::process::id())))
}

/// A program's exit status as ours: its code, or the shell's 128 + signal.
fn exit_code_of(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match status.code() {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        None => ExitCode::from((128 + status.signal().unwrap_or(0)).clamp(0, 255) as u8),
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}
