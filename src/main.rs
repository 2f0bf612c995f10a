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
use heaptui_analysis::labels::{self, Wrappers};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(pattern) = cli.command.wrappers() {
        match Wrappers::with_pattern(pattern) {
            // The first and only call: no graph exists yet.
            Ok(wrappers) => drop(labels::configure(wrappers)),
            Err(why) => {
                eprintln!("heaptui: --wrappers (or HEAPTUI_ALLOC_WRAPPERS): {why}");
                return ExitCode::from(2);
            }
        }
    }
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
        // `report 8000`: a port written without its colon reads as a file name.
        if let Some(port) = args.source.to_str().filter(|s| {
            !args.source.exists() && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
        }) {
            anyhow::bail!(
                "{port}: no such file; for the agent listening on port {port}, write :{port}"
            );
        }
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
        let log = program_log("run")?;
        let launch = launch::Launch {
            listen,
            policy: args.policy.clone(),
            audit: None,
            output_log: Some(log.clone()),
            record: None,
            ready_line: None,
            wrappers: args.labels.wrappers.clone(),
        };
        let status = tui::run_program(&args.program, &launch, args.refresh)?;
        // Quitting the TUI is a success: the program was stopped because the operator asked
        // (docs/reference.md §2); its own status is said, with where its output went.
        eprintln!(
            "heaptui: {} ended ({status}); its output is in {}",
            args.program[0].to_string_lossy(),
            log.display()
        );
        return Ok(ExitCode::SUCCESS);
    } else {
        if args.policy.is_some() {
            anyhow::bail!("--policy needs the terminal UI: run heaptui run from a terminal");
        }
        client::commands::run(
            listen.as_ref(),
            args.labels.wrappers.as_deref(),
            &args.program,
            out,
        )?
    };
    Ok(exit_code_of(status))
}

/// `heaptui demo`: the bundled workload under the agent, with a policy that lets the operator
/// cancel its runaway thread, and the TUI on it.
fn demo(args: &cli::DemoArgs) -> anyhow::Result<()> {
    if !std::io::stdout().is_terminal() {
        // The very build this heaptui carries: a glob would match every cached version.
        anyhow::bail!(
            "heaptui demo needs a terminal; to script it use: heaptui run -- {}",
            embedded::demo_path()?.display()
        );
    }
    let dir = client::token::directory();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let policy = dir.join("demo-policy.toml");
    std::fs::write(&policy, include_str!("../demo/policy.toml"))
        .with_context(|| format!("cannot write {}", policy.display()))?;
    // Each run leaves its output log and its recording (so that the units view, u, has the
    // event stream it counts; a few MB): the newest few of each are kept, older ones removed.
    remove_old_demo_files(&dir, ".log", KEPT_DEMO_RUNS - 1);
    remove_old_demo_files(&dir, ".rec", KEPT_DEMO_RUNS - 1);
    let log = program_log("demo")?;
    let audit = dir.join("demo-audit.jsonl");
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
        wrappers: args.labels.wrappers.clone(),
    };
    let status = tui::run_program(&[embedded::demo_path()?.into()], &launch, args.refresh)?;
    eprintln!(
        "heaptui: the demo ended ({status}); its output is in {}, policy decisions in {}, \
         its recording in {} (heaptui open replays it; the last {KEPT_DEMO_RUNS} runs' logs and \
         recordings are kept)",
        log.display(),
        audit.display(),
        record.display()
    );
    Ok(())
}

/// How many demo runs' output logs and recordings stay in the token directory.
const KEPT_DEMO_RUNS: usize = 3;

/// Removes `demo-*<suffix>` files in `dir` but the `keep` newest; one that cannot be removed
/// stays.
fn remove_old_demo_files(dir: &std::path::Path, suffix: &str, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut recordings: Vec<(std::time::SystemTime, std::path::PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("demo-") && name.ends_with(suffix)
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    recordings.sort_by_key(|r| std::cmp::Reverse(r.0));
    for (_, old) in recordings.into_iter().skip(keep) {
        let _ = std::fs::remove_file(old);
    }
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    #[test]
    fn old_demo_recordings_and_logs_go_the_newest_stay() {
        let dir = std::env::temp_dir().join(format!("heaptui-recordings-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for i in 0..5u64 {
            let file = std::fs::File::create(dir.join(format!("demo-{i}.rec"))).unwrap();
            file.set_modified(epoch + Duration::from_secs(i)).unwrap();
        }
        for i in 0..3u64 {
            let file = std::fs::File::create(dir.join(format!("demo-{i}.log"))).unwrap();
            file.set_modified(epoch + Duration::from_secs(i)).unwrap();
        }
        std::fs::write(dir.join("run-1.log"), "kept").unwrap();
        std::fs::write(dir.join("demo-audit.jsonl"), "kept").unwrap();
        super::remove_old_demo_files(&dir, ".rec", 2);
        super::remove_old_demo_files(&dir, ".log", 1);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "demo-2.log",
                "demo-3.rec",
                "demo-4.rec",
                "demo-audit.jsonl",
                "run-1.log"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
