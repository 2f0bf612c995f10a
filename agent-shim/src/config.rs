//! The agent's configuration: every `HEAPTUI_*` variable of docs/reference.md §2, parsed once at
//! load.
//!
//! An unknown variable or a malformed value produces one line on stderr naming it, and the
//! default is used: the target program always runs. Hooks never call [`config`]; what they
//! need (the stack depth) is copied into atomics at init.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::OnceLock;

use heaptui_analysis::labels::{self, Wrappers};
use heaptui_protocol::SnapshotRule;

/// Allocation-stack depth when `HEAPTUI_STACK_DEPTH` is unset.
pub const DEFAULT_STACK_DEPTH: usize = 16;
/// Largest accepted `HEAPTUI_STACK_DEPTH`.
pub const MAX_STACK_DEPTH: usize = 64;
/// Where the agent listens when `HEAPTUI_LISTEN` is unset.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8000);

/// The address the agent's server listens on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `HEAPTUI_LISTEN`; loopback unless `HEAPTUI_LISTEN_PUBLIC=1`.
    pub listen: Listen,
    pub listen_public: bool,
    /// `HEAPTUI_POLICY`: the policy file (docs/reference.md §7); without one, cancel is refused.
    pub policy_path: Option<PathBuf>,
    /// `HEAPTUI_AUDIT`: the audit log file.
    pub audit_path: Option<PathBuf>,
    /// `HEAPTUI_STACK_DEPTH`: frames per allocation stack, 0 = off.
    pub stack_depth: usize,
    /// `HEAPTUI_DUMP=PREFIX`: SIGUSR2 and exit write `PREFIX.<pid>.<n>.hsnap`.
    pub dump_prefix: Option<String>,
    /// `HEAPTUI_RECORD`: event recording file.
    pub record_path: Option<PathBuf>,
    /// `HEAPTUI_METRICS`: Prometheus endpoint address; loopback unless
    /// `HEAPTUI_LISTEN_PUBLIC=1`.
    pub metrics: Option<SocketAddr>,
    /// `HEAPTUI_AUTO_SNAPSHOT`: `every:SIZE`, `tolerance:SIZE` or `off` (docs/reference.md §8).
    pub auto_snapshot: SnapshotRule,
    /// `HEAPTUI_LOG`: agent log file (else stderr).
    pub log_path: Option<String>,
    /// `HEAPTUI_FOLLOW_EXEC=1`: exec'd children keep the agent in `LD_PRELOAD`.
    pub follow_exec: bool,
    /// `HEAPTUI_FOLLOW_FORK=1`: each fork child gets a server of its own, on its per-process
    /// socket. Off by default: it costs every child a thread, two files and a few
    /// milliseconds inside `fork()`, which a pre-fork pool of hundreds of workers, or a
    /// program that forks only to exec, pays for nothing.
    pub follow_fork: bool,
    /// `HEAPTUI_HOLD_FREES=0`: every free reaches libc at once instead of in a thread's batch
    /// (`registry::held_frees`), at the cost of the speed batches bring.
    pub hold_frees: bool,
    /// `HEAPTUI_ALLOC_WRAPPERS`: a regex of functions that name no site, added to the
    /// built-in allocator wrappers (docs/reference.md §3 "Labels"); checked when parsed.
    pub alloc_wrappers: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: Listen::Tcp(DEFAULT_LISTEN),
            listen_public: false,
            policy_path: None,
            audit_path: None,
            stack_depth: DEFAULT_STACK_DEPTH,
            dump_prefix: None,
            record_path: None,
            metrics: None,
            auto_snapshot: SnapshotRule::Off,
            log_path: None,
            follow_exec: false,
            follow_fork: false,
            hold_frees: true,
            alloc_wrappers: None,
        }
    }
}

const KNOWN: &[&str] = &[
    "HEAPTUI_LISTEN",
    "HEAPTUI_LISTEN_PUBLIC",
    "HEAPTUI_POLICY",
    "HEAPTUI_AUDIT",
    "HEAPTUI_STACK_DEPTH",
    "HEAPTUI_DUMP",
    "HEAPTUI_RECORD",
    "HEAPTUI_METRICS",
    "HEAPTUI_LOG",
    "HEAPTUI_FOLLOW_EXEC",
    "HEAPTUI_FOLLOW_FORK",
    "HEAPTUI_AUTO_SNAPSHOT",
    "HEAPTUI_HOLD_FREES",
    "HEAPTUI_ALLOC_WRAPPERS",
];

impl Config {
    /// Parses the `HEAPTUI_*` variables among `vars`; returns the configuration and one
    /// message per unknown variable or malformed value (each names the variable).
    pub fn from_vars(vars: impl IntoIterator<Item = (OsString, OsString)>) -> (Self, Vec<String>) {
        let mut cfg = Self::default();
        let mut problems = Vec::new();
        let mut listen: Option<(String, SocketAddr)> = None;
        let mut metrics: Option<(String, SocketAddr)> = None;
        for (name, value) in vars {
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("HEAPTUI_") {
                continue;
            }
            if !KNOWN.contains(&name) {
                problems.push(format!("unknown variable {name} ignored"));
                continue;
            }
            let Some(value) = value.to_str() else {
                problems.push(format!("{name} is not valid UTF-8; using the default"));
                continue;
            };
            let bad = |what: &str| format!("{name}={value:?} is {what}; using the default");
            match name {
                "HEAPTUI_LISTEN" => match parse_listen(value) {
                    Some(Listen::Tcp(addr)) => listen = Some((value.to_owned(), addr)),
                    Some(unix) => cfg.listen = unix,
                    None => problems.push(bad("not HOST:PORT, :PORT or unix:PATH")),
                },
                "HEAPTUI_LISTEN_PUBLIC" => match parse_bool(value) {
                    Some(b) => cfg.listen_public = b,
                    None => problems.push(bad("not 0 or 1")),
                },
                "HEAPTUI_STACK_DEPTH" => match value.trim().parse::<usize>() {
                    Ok(d) if d <= MAX_STACK_DEPTH => cfg.stack_depth = d,
                    _ => problems.push(bad(&format!("not a depth from 0 to {MAX_STACK_DEPTH}"))),
                },
                "HEAPTUI_FOLLOW_EXEC" => match parse_bool(value) {
                    Some(b) => cfg.follow_exec = b,
                    None => problems.push(bad("not 0 or 1")),
                },
                "HEAPTUI_FOLLOW_FORK" => match parse_bool(value) {
                    Some(b) => cfg.follow_fork = b,
                    None => problems.push(bad("not 0 or 1")),
                },
                "HEAPTUI_HOLD_FREES" => match parse_bool(value) {
                    Some(b) => cfg.hold_frees = b,
                    None => problems.push(bad("not 0 or 1")),
                },
                "HEAPTUI_AUTO_SNAPSHOT" => match parse_rule(value) {
                    Ok(rule) => cfg.auto_snapshot = rule,
                    Err(why) => problems.push(bad(&why)),
                },
                _ if value.is_empty() => problems.push(bad("empty")),
                "HEAPTUI_POLICY" => cfg.policy_path = Some(value.into()),
                "HEAPTUI_AUDIT" => cfg.audit_path = Some(value.into()),
                "HEAPTUI_DUMP" => cfg.dump_prefix = Some(value.to_owned()),
                "HEAPTUI_RECORD" => cfg.record_path = Some(value.into()),
                "HEAPTUI_METRICS" => match parse_listen(value) {
                    Some(Listen::Tcp(addr)) => metrics = Some((value.to_owned(), addr)),
                    _ => problems.push(bad("not HOST:PORT or :PORT")),
                },
                "HEAPTUI_LOG" => cfg.log_path = Some(value.to_owned()),
                "HEAPTUI_ALLOC_WRAPPERS" => match Wrappers::with_pattern(value) {
                    Ok(_) => cfg.alloc_wrappers = Some(value.to_owned()),
                    Err(why) => problems.push(format!(
                        "HEAPTUI_ALLOC_WRAPPERS: {why}; using the built-in wrappers only"
                    )),
                },
                _ => unreachable!("every KNOWN name has an arm"),
            }
        }
        // Checked after the loop: HEAPTUI_LISTEN_PUBLIC may come later in the environment.
        if let Some((value, addr)) = listen {
            if addr.ip().is_loopback() || cfg.listen_public {
                cfg.listen = Listen::Tcp(addr);
            } else {
                problems.push(format!(
                    "HEAPTUI_LISTEN={value:?} is not a loopback address and HEAPTUI_LISTEN_PUBLIC=1 \
                     is not set; listening on {DEFAULT_LISTEN}"
                ));
            }
        }
        if let Some((value, addr)) = metrics {
            if addr.ip().is_loopback() || cfg.listen_public {
                cfg.metrics = Some(addr);
            } else {
                problems.push(format!(
                    "HEAPTUI_METRICS={value:?} is not a loopback address and HEAPTUI_LISTEN_PUBLIC=1 \
                     is not set; no metrics endpoint"
                ));
            }
        }
        (cfg, problems)
    }
}

/// Reads `HEAPTUI_AUTO_SNAPSHOT`: `off`, `every:SIZE` (a snapshot each SIZE bytes allocated)
/// or `tolerance:SIZE` (the kept peak snapshot within SIZE of the true peak); sizes as in the
/// policy file (`64MiB`, `1 MiB`, `4096`).
fn parse_rule(v: &str) -> Result<SnapshotRule, String> {
    const FORMS: &str = "not off, every:SIZE or tolerance:SIZE";
    let v = v.trim();
    if v.eq_ignore_ascii_case("off") || v.is_empty() {
        return Ok(SnapshotRule::Off);
    }
    let Some((kind, size)) = v.split_once(':') else {
        return Err(FORMS.to_string());
    };
    let size = crate::policy::parse::parse_size(size).map_err(|e| format!("{FORMS} ({e})"))?;
    match kind.trim().to_ascii_lowercase().as_str() {
        "every" if size > 0 => Ok(SnapshotRule::EveryBytes(size)),
        "every" => Err("every:0, which would snapshot on every allocation".to_string()),
        "tolerance" => Ok(SnapshotRule::Tolerance(size)),
        _ => Err(FORMS.to_string()),
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

fn parse_listen(v: &str) -> Option<Listen> {
    if let Some(path) = v.strip_prefix("unix:") {
        return (!path.is_empty()).then(|| Listen::Unix(path.into()));
    }
    if let Some(port) = v.strip_prefix(':') {
        return port
            .parse::<u16>()
            .ok()
            .map(|p| Listen::Tcp(SocketAddr::new(DEFAULT_LISTEN.ip(), p)));
    }
    if let Some(port) = v.strip_prefix("localhost:") {
        return port
            .parse::<u16>()
            .ok()
            .map(|p| Listen::Tcp(SocketAddr::new(DEFAULT_LISTEN.ip(), p)));
    }
    v.parse::<SocketAddr>().ok().map(Listen::Tcp)
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration, parsed from the environment on first use (the agent's constructor);
/// problems are reported on stderr exactly once.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(|| {
        let (cfg, problems) = Config::from_vars(std::env::vars_os());
        for p in problems {
            crate::log::to_stderr(format_args!("{p}"));
        }
        // Site labels are made by the analysis code the agent shares with heaptui; first
        // use is the agent's constructor, before any graph exists.
        if let Some(Ok(wrappers)) = cfg.alloc_wrappers.as_deref().map(Wrappers::with_pattern) {
            let _ = labels::configure(wrappers);
        }
        cfg
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> (Config, Vec<String>) {
        Config::from_vars(
            vars.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
    }

    #[test]
    fn defaults_without_variables() {
        let (cfg, problems) = parse(&[("PATH", "/bin")]);
        assert_eq!(cfg, Config::default());
        assert!(problems.is_empty());
        assert_eq!(cfg.stack_depth, 16);
    }

    #[test]
    fn reads_every_variable() {
        let (cfg, problems) = parse(&[
            ("HEAPTUI_LISTEN", "unix:/tmp/h.sock"),
            ("HEAPTUI_STACK_DEPTH", "0"),
            ("HEAPTUI_DUMP", "/tmp/snap"),
            ("HEAPTUI_LOG", "/tmp/log"),
            ("HEAPTUI_FOLLOW_EXEC", "1"),
            ("HEAPTUI_FOLLOW_FORK", "1"),
            ("HEAPTUI_POLICY", "/p.toml"),
            ("HEAPTUI_AUDIT", "/a.log"),
            ("HEAPTUI_RECORD", "/r"),
            ("HEAPTUI_METRICS", "127.0.0.1:9100"),
            ("HEAPTUI_HOLD_FREES", "0"),
            ("HEAPTUI_ALLOC_WRAPPERS", "pool_get|arena_.*"),
        ]);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.alloc_wrappers.as_deref(), Some("pool_get|arena_.*"));
        assert_eq!(cfg.listen, Listen::Unix("/tmp/h.sock".into()));
        assert_eq!(cfg.stack_depth, 0);
        assert_eq!(cfg.dump_prefix.as_deref(), Some("/tmp/snap"));
        assert_eq!(cfg.log_path.as_deref(), Some("/tmp/log"));
        assert!(cfg.follow_exec);
        assert!(cfg.follow_fork);
        assert!(!cfg.hold_frees);
        assert_eq!(cfg.policy_path, Some("/p.toml".into()));
        assert_eq!(cfg.audit_path, Some("/a.log".into()));
        assert_eq!(cfg.record_path, Some("/r".into()));
        assert_eq!(cfg.metrics, Some("127.0.0.1:9100".parse().unwrap()));
    }

    #[test]
    fn malformed_values_give_one_line_each_and_defaults() {
        let (cfg, problems) = parse(&[
            ("HEAPTUI_STACK_DEPTH", "lots"),
            ("HEAPTUI_LISTEN", "nowhere"),
            ("HEAPTUI_FOLLOW_EXEC", "maybe"),
            ("HEAPTUI_BOGUS", "1"),
            ("HEAPTUI_ALLOC_WRAPPERS", "pool_(get"),
        ]);
        assert_eq!(cfg, Config::default());
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems[0].contains("HEAPTUI_STACK_DEPTH=\"lots\""));
        assert!(problems[3].contains("unknown variable HEAPTUI_BOGUS"));
        assert!(
            problems[4].starts_with("HEAPTUI_ALLOC_WRAPPERS: \"pool_(get\" is not a valid regex"),
            "{problems:?}"
        );
        let (cfg, problems) = parse(&[("HEAPTUI_STACK_DEPTH", "65")]);
        assert_eq!((cfg.stack_depth, problems.len()), (16, 1));
    }

    #[test]
    fn public_listen_needs_the_opt_in() {
        let (cfg, problems) = parse(&[("HEAPTUI_LISTEN", "0.0.0.0:9000")]);
        assert_eq!(cfg.listen, Listen::Tcp(DEFAULT_LISTEN));
        assert_eq!(problems.len(), 1);
        let (cfg, problems) = parse(&[
            ("HEAPTUI_LISTEN", "0.0.0.0:9000"),
            ("HEAPTUI_LISTEN_PUBLIC", "1"),
        ]);
        assert_eq!(cfg.listen, Listen::Tcp("0.0.0.0:9000".parse().unwrap()));
        assert!(problems.is_empty());
        let (cfg, _) = parse(&[("HEAPTUI_LISTEN", ":7000")]);
        assert_eq!(cfg.listen, Listen::Tcp("127.0.0.1:7000".parse().unwrap()));
    }

    #[test]
    fn auto_snapshot_rules() {
        let rule = |v: &str| {
            let (cfg, problems) = parse(&[("HEAPTUI_AUTO_SNAPSHOT", v)]);
            (cfg.auto_snapshot, problems.len())
        };
        assert_eq!(rule("every:64MiB"), (SnapshotRule::EveryBytes(64 << 20), 0));
        assert_eq!(
            rule("tolerance: 1 MiB"),
            (SnapshotRule::Tolerance(1 << 20), 0)
        );
        assert_eq!(rule("tolerance:0"), (SnapshotRule::Tolerance(0), 0));
        assert_eq!(rule("OFF"), (SnapshotRule::Off, 0));
        for bad in [
            "every",
            "every:0",
            "sometimes:1M",
            "every:lots",
            "tolerance:-1",
        ] {
            assert_eq!(rule(bad), (SnapshotRule::Off, 1), "{bad}");
        }
        let (_, problems) = parse(&[("HEAPTUI_AUTO_SNAPSHOT", "every:lots")]);
        assert!(problems[0].starts_with("HEAPTUI_AUTO_SNAPSHOT=\"every:lots\""));
        assert_eq!(Config::default().auto_snapshot, SnapshotRule::Off);
    }

    #[test]
    fn metrics_address_is_loopback_unless_public() {
        let (cfg, problems) = parse(&[("HEAPTUI_METRICS", ":9464")]);
        assert_eq!(cfg.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert!(problems.is_empty());
        let (cfg, problems) = parse(&[("HEAPTUI_METRICS", "0.0.0.0:9464")]);
        assert_eq!((cfg.metrics, problems.len()), (None, 1));
        let (cfg, problems) = parse(&[("HEAPTUI_METRICS", "nowhere"), ("HEAPTUI_LOG", "x")]);
        assert_eq!((cfg.metrics, problems.len()), (None, 1));
        assert!(problems[0].contains("HEAPTUI_METRICS=\"nowhere\""));
        let (cfg, _) = parse(&[
            ("HEAPTUI_LISTEN_PUBLIC", "1"),
            ("HEAPTUI_METRICS", "0.0.0.0:9464"),
        ]);
        assert_eq!(cfg.metrics, Some("0.0.0.0:9464".parse().unwrap()));
    }
}
