//! The command line (docs/reference.md §2), declared with clap's derive. Parsing only: what a
//! command does lives with the command (`offline/` for the file-based ones).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// heaptui: a live heap inspector for native Linux processes. It tells, for every thread and
/// every stack frame, which heap memory it holds alone, which it shares, and what ending a
/// set of threads would free.
#[derive(Debug, Parser)]
#[command(name = "heaptui", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the analysis of a snapshot: threads ranked by the memory they hold, their frames,
    /// the shared groups, leaks.
    Report(ReportArgs),
    /// Run the bundled demo workload under the agent and open the terminal UI on it.
    Demo(DemoArgs),
    /// Open the terminal UI on a saved snapshot file or a recording (offline).
    Open(OpenArgs),
    /// Open the terminal UI on a running agent.
    Attach(AttachArgs),
    /// Print the absolute path of the agent shared object, for
    /// `LD_PRELOAD=$(heaptui agent-path) prog`.
    AgentPath,
    /// Take a snapshot of a running agent and save it as a binary snapshot file.
    Snapshot(SnapshotArgs),
    /// Start a program with the agent preloaded and open the terminal UI on it (q stops it,
    /// exit 0, its output in a log file named on exit); without a terminal, print its report
    /// once the agent answers and wait for the program to end (its exit status).
    Run(RunArgs),
    /// Ask a running agent to cancel a thread under its memory-shortage policy (HEAPTUI_POLICY)
    /// and print the verdict, then the release it measured; exits 1 when the agent refuses.
    Cancel(CancelArgs),
    /// List the processes whose agent answers (this user's; root: everyone's): pid, uptime,
    /// live heap, address, command. Files left in the token directory by dead processes are
    /// removed on the way.
    Ps(PsArgs),
}

#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// Print the list as JSON: an array of {pid, command, address, token_file, uptime_s,
    /// live_bytes, live_blocks, agent_version}.
    #[arg(long)]
    pub json: bool,
}

/// How many shared groups a report lists (`--groups N|all`), largest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupLimit {
    Largest(usize),
    All,
}

impl GroupLimit {
    /// What a report lists unless asked: a screenful of the largest.
    pub const DEFAULT: GroupLimit = GroupLimit::Largest(50);

    /// The number of groups to list out of `available`.
    pub fn of(self, available: usize) -> usize {
        match self {
            GroupLimit::Largest(n) => n.min(available),
            GroupLimit::All => available,
        }
    }
}

impl std::fmt::Display for GroupLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupLimit::Largest(n) => write!(f, "{n}"),
            GroupLimit::All => f.write_str("all"),
        }
    }
}

impl std::str::FromStr for GroupLimit {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.eq_ignore_ascii_case("all") {
            return Ok(GroupLimit::All);
        }
        text.parse()
            .map(GroupLimit::Largest)
            .map_err(|_| format!("expected a number of groups or `all`, not {text:?}"))
    }
}

/// How allocation sites are named (docs/reference.md §3 "Labels").
#[derive(Debug, Default, clap::Args)]
pub struct LabelArgs {
    /// Functions that allocate for their callers, as a regex matched against whole function
    /// names, added to the built-in allocator wrappers (malloc, operator new, xmalloc,
    /// g_malloc, Perl_safesysmalloc, PyMem_Malloc, …): a site is named by its first frame
    /// outside them.
    #[arg(long, value_name = "REGEX", env = "HEAPTUI_ALLOC_WRAPPERS")]
    pub wrappers: Option<String>,
}

impl Command {
    /// The `--wrappers` pattern of a command that names sites itself.
    pub fn wrappers(&self) -> Option<&str> {
        match self {
            Command::Report(a) => a.labels.wrappers.as_deref(),
            Command::Open(a) => a.labels.wrappers.as_deref(),
            Command::Run(a) => a.labels.wrappers.as_deref(),
            Command::Demo(a) => a.labels.wrappers.as_deref(),
            _ => None,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The agent's address: :PORT, HOST:PORT, unix:PATH, or pid:PID (the agent of that
    /// process, found through its token directory).
    #[arg(value_name = "ADDR")]
    pub address: String,
    /// The thread to cancel (its kernel thread id, as the ranking shows it).
    #[arg(value_name = "TID")]
    pub tid: u32,
    /// Decide and log only: the agent checks the policy and predicts the release, but does
    /// not cancel.
    #[arg(long)]
    pub dry_run: bool,
    /// After a cancel that acted, wait up to this many seconds for the release the agent
    /// measures once the thread has ended, and print it beside the prediction; 0: do not wait.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(0..=86_400)
    )]
    pub wait: u64,
    /// The agent's token file (needed for agents on other machines).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct SnapshotArgs {
    /// The agent's address: :PORT, HOST:PORT, unix:PATH, or pid:PID (the agent of that
    /// process, found through its token directory).
    #[arg(value_name = "ADDR")]
    pub address: String,
    /// The snapshot file to write.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Save the peak snapshot the agent keeps (HEAPTUI_AUTO_SNAPSHOT) instead of taking one.
    #[arg(long)]
    pub peak: bool,
    /// The agent's token file (needed for agents on other machines).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Where the agent listens (:PORT, HOST:PORT or unix:PATH); default: a private Unix socket.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The agent's memory-shortage policy file (docs/reference.md §7); without one, cancel is
    /// refused.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Seconds between automatic snapshots once `a` turns them on.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub refresh: f64,
    #[command(flatten)]
    pub labels: LabelArgs,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROG [ARGS]…")]
    pub program: Vec<std::ffi::OsString>,
}

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Seconds between automatic snapshots once `a` turns them on.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub refresh: f64,
    #[command(flatten)]
    pub labels: LabelArgs,
}

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The agent's address: :PORT, HOST:PORT, unix:PATH, or pid:PID (the agent of that
    /// process, found through its token directory).
    #[arg(value_name = "ADDR")]
    pub address: String,
    /// The agent's token file (needed for agents on other machines).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Seconds between automatic snapshots once `a` turns them on.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub refresh: f64,
}

#[derive(Debug, clap::Args)]
pub struct OpenArgs {
    /// A snapshot file (JSON `heaptui-snapshot` or the binary form) or a recording
    /// (HEAPTUI_RECORD), told apart by content.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub labels: LabelArgs,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A snapshot file (JSON `heaptui-snapshot` or the binary form, told apart by content), a
    /// recording (HEAPTUI_RECORD), or a live agent's address (:PORT, HOST:PORT, unix:PATH, or
    /// pid:PID for the agent of that process).
    #[arg(value_name = "SOURCE")]
    pub source: PathBuf,
    /// Print the report as JSON (`heaptui-report` version 1) instead of text tables; the same
    /// as `--format json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: text tables (default); json (`heaptui-report` version 1); csv (the
    /// thread ranking); collapsed (live bytes by allocation stack, for inferno or
    /// flamegraph.pl); pprof (gzipped pprof profile of live bytes and objects by allocation
    /// stack, for `go tool pprof` or speedscope).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<ReportFormat>,
    /// Also print the bytes freed if all of these threads ended (comma-separated thread ids).
    #[arg(long, value_name = "TID,TID…", value_delimiter = ',', num_args = 1)]
    pub release: Option<Vec<u32>>,
    /// The agent's token file when SOURCE is the address of an agent on another machine.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// How many shared groups to list, largest first: a number, or `all` (text and JSON; the
    /// report says how many it left out). A heap of millions of blocks can have millions of
    /// groups.
    #[arg(long, value_name = "N|all", default_value_t = GroupLimit::DEFAULT)]
    pub groups: GroupLimit,
    /// Also print leaks by allocation site, definitely and indirectly lost (a snapshot or a
    /// live agent).
    #[arg(long)]
    pub leaks: bool,
    /// Also print block ages (snapshots survived: 0, 1, 2, 3, >3) by site and by thread, and
    /// the oldest survivors (a recording's report always has them).
    #[arg(long)]
    pub ages: bool,
    /// A recording's allocation units: per library (default), function or thread.
    #[arg(long, value_enum, value_name = "UNIT")]
    pub units: Option<UnitsArg>,
    /// Which frames of a stack make its unit: outermost (default), innermost, or inclusive.
    #[arg(long, value_enum, value_name = "POSITION")]
    pub position: Option<PositionArg>,
    /// Who a free is charged to: the allocating unit (default) or the freeing one.
    #[arg(long, value_enum, value_name = "CHARGE")]
    pub charge: Option<ChargeArg>,
    #[command(flatten)]
    pub labels: LabelArgs,
}

/// `--units`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UnitsArg {
    Library,
    Function,
    Thread,
}

/// `--position`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PositionArg {
    Outermost,
    Innermost,
    Inclusive,
}

/// `--charge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ChargeArg {
    Allocator,
    Freer,
}

impl From<UnitsArg> for heaptui_protocol::UnitGranularity {
    fn from(a: UnitsArg) -> Self {
        match a {
            UnitsArg::Library => Self::Library,
            UnitsArg::Function => Self::Function,
            UnitsArg::Thread => Self::Thread,
        }
    }
}

impl From<PositionArg> for heaptui_protocol::UnitPosition {
    fn from(a: PositionArg) -> Self {
        match a {
            PositionArg::Outermost => Self::Outermost,
            PositionArg::Innermost => Self::Innermost,
            PositionArg::Inclusive => Self::Inclusive,
        }
    }
}

impl From<ChargeArg> for heaptui_protocol::UnitCharge {
    fn from(a: ChargeArg) -> Self {
        match a {
            ChargeArg::Allocator => Self::Allocator,
            ChargeArg::Freer => Self::Freer,
        }
    }
}

/// What `heaptui report` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
    Csv,
    Collapsed,
    Pprof,
}

impl ReportArgs {
    /// The format asked for, `--json` included.
    pub fn format(&self) -> ReportFormat {
        match self.format {
            Some(format) => format,
            None if self.json => ReportFormat::Json,
            None => ReportFormat::Text,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn release_takes_a_comma_separated_list() {
        let cli =
            Cli::try_parse_from(["heaptui", "report", "f.json", "--release", "1,2,3"]).unwrap();
        let Command::Report(args) = cli.command else {
            panic!("parsed as another command");
        };
        assert_eq!(args.release, Some(vec![1, 2, 3]));
        assert!(!args.json);
        let e =
            Cli::try_parse_from(["heaptui", "report", "f.json", "--release", "1,x"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn json_is_an_alias_of_format_json() {
        let format = |args: &[&str]| {
            let cli = Cli::try_parse_from(args.iter().copied()).unwrap();
            let Command::Report(args) = cli.command else {
                panic!("parsed as another command");
            };
            args.format()
        };
        assert_eq!(format(&["heaptui", "report", "f"]), ReportFormat::Text);
        assert_eq!(
            format(&["heaptui", "report", "f", "--json"]),
            ReportFormat::Json
        );
        assert_eq!(
            format(&["heaptui", "report", "f", "--format", "json"]),
            ReportFormat::Json
        );
        assert_eq!(
            format(&["heaptui", "report", "f", "--format", "pprof"]),
            ReportFormat::Pprof
        );
        for bad in [
            &["heaptui", "report", "f", "--format", "xml"][..],
            &["heaptui", "report", "f", "--json", "--format", "csv"],
        ] {
            assert_eq!(
                Cli::try_parse_from(bad).unwrap_err().exit_code(),
                2,
                "{bad:?}"
            );
        }
    }
}
