//! `heaptui`: the one binary users run (SPEC §2).
//!
//! Parses the command line and hands each command to its module. Exit codes: 0 success,
//! 1 runtime failure (one line on stderr, `heaptui: …`), 2 usage error (clap's own message).

mod app;
mod cli;
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
        Command::Report(args) => offline::report::run(&args, &mut stdout),
        Command::Open(args) => tui::open(&args.file),
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

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}
