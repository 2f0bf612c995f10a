//! `heaptui`: the one binary users run (SPEC §2).
//!
//! Parses the command line and hands each command to its module. Exit codes: 0 success,
//! 1 runtime failure (one line on stderr, `heaptui: …`), 2 usage error (clap's own message).

mod app;
mod cli;
mod client;
mod embedded;
mod offline;
mod size;
mod source;
mod tui;
mod ui;

use std::io::Write;
use std::process::ExitCode;

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
            // The agent refused: a runtime failure (SPEC §2), the reason already printed.
            Ok(client::cancel::Outcome::Refused) => {
                let _ = stdout.flush();
                return ExitCode::FAILURE;
            }
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        },
        Command::Open(args) => tui::open(&args.file),
        Command::Attach(args) => tui::attach(&args),
        Command::AgentPath => embedded::agent_path()
            .and_then(|path| Ok(writeln!(stdout, "{}", path.display())?)),
    };
    let result = result.and_then(|()| stdout.flush().map_err(Into::into));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`heaptui report … | head`) is the reader's choice, not a failure.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
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
    let address = client::Address::parse(address).map_err(anyhow::Error::msg)?;
    client::commands::report(&address, &token_source(args.token_file.as_deref()), args, out)
}

fn token_source(file: Option<&std::path::Path>) -> client::TokenSource {
    file.map_or(client::TokenSource::Discover, |f| {
        client::TokenSource::File(f.to_path_buf())
    })
}

fn snapshot(args: &cli::SnapshotArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let address = client::Address::parse(&args.address).map_err(anyhow::Error::msg)?;
    client::commands::snapshot(
        &address,
        &token_source(args.token_file.as_deref()),
        &args.output,
        out,
    )
}

fn cancel(args: &cli::CancelArgs, out: &mut impl Write) -> anyhow::Result<client::cancel::Outcome> {
    let address = client::Address::parse(&args.address).map_err(anyhow::Error::msg)?;
    client::cancel::cancel(
        &address,
        &token_source(args.token_file.as_deref()),
        args.tid,
        args.dry_run,
        out,
    )
}

fn run(args: &cli::RunArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let listen = match &args.listen {
        Some(a) => Some(client::Address::parse(a).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let status = client::commands::run(listen.as_ref(), &args.program, out)?;
    Ok(match status.code() {
        Some(code) => ExitCode::from(code.clamp(0, 255) as u8),
        // Killed by a signal: the shell's convention, 128 + signal.
        None => {
            use std::os::unix::process::ExitStatusExt;
            ExitCode::from((128 + status.signal().unwrap_or(0)).clamp(0, 255) as u8)
        }
    })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}
