//! `heaptui ps` (docs/reference.md §2): the processes whose agent answers — pid, uptime, live
//! heap, address, command — found through the token directories (`locate::agents`, which
//! also sweeps the files of dead agents), each asked for its counters over the protocol.
//!
//! An agent that does not answer within [`ANSWER_TIMEOUT`] (its process stopped, say) is not
//! listed; it gets one line on stderr instead, so the table only holds what answers.

use std::io::Write;
use std::time::Duration;

use heaptui_protocol::{ProcessInfo, RequestBody, Response};
use serde::Serialize;

use super::locate::{self, Found};
use super::{ClientError, Session, TokenSource};
use crate::offline::table::{Column, Table};
use crate::size::human;

/// How long one agent may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// One row of the listing (and one object of `--json`).
#[derive(Debug, Serialize)]
pub struct Row {
    pub pid: u32,
    pub command: String,
    pub address: String,
    pub token_file: String,
    pub uptime_s: u64,
    pub live_bytes: u64,
    pub live_blocks: u64,
    pub agent_version: String,
}

fn ask(found: &Found) -> Result<ProcessInfo, ClientError> {
    let token = TokenSource::File(found.token_file.clone());
    let mut session = Session::connect_within(&found.address, &token, ANSWER_TIMEOUT)?;
    match session.request(RequestBody::ProcessInfo)? {
        Response::ProcessInfo(p) => Ok(p),
        other => Err(ClientError::new(format!(
            "the agent at {} answered a process-info request with {}",
            found.address,
            other.kind()
        ))),
    }
}

/// Seconds process `pid` has been running, from its start time and the machine's uptime.
fn uptime_s(start_ticks: u64) -> u64 {
    // USER_HZ: the unit of /proc's clock-tick fields, 100 on every Linux this runs on (x86-64).
    const TICKS_PER_S: u64 = 100;
    let up = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    (up as u64).saturating_sub(start_ticks / TICKS_PER_S)
}

/// `12s`, `3m05s`, `2h07m`, `3d04h`.
fn duration(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The agents that answer, in pid order; the others get a line on `err`.
pub fn rows(err: &mut impl Write) -> Vec<Row> {
    let mut rows = Vec::new();
    for found in locate::agents() {
        let pid = found.record.pid;
        match ask(&found) {
            Ok(info) => rows.push(Row {
                pid,
                command: locate::command_of(pid)
                    .filter(|c| !c.is_empty())
                    .unwrap_or(info.command),
                address: found.address.to_string(),
                token_file: found.token_file.display().to_string(),
                uptime_s: uptime_s(found.record.start),
                live_bytes: info.counters.live_bytes,
                live_blocks: info.counters.live_blocks,
                agent_version: info.agent_version,
            }),
            Err(e) => {
                let _ = writeln!(err, "heaptui: pid {pid}: {e}");
            }
        }
    }
    rows
}

/// `heaptui ps [--json]`.
pub fn ps(json: bool, out: &mut impl Write, err: &mut impl Write) -> anyhow::Result<()> {
    let rows = rows(err);
    if json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    if rows.is_empty() {
        writeln!(
            out,
            "no agent answers (processes run under LD_PRELOAD=$(heaptui agent-path) show here)"
        )?;
        return Ok(());
    }
    let mut table = Table::new(&[
        Column::right("PID"),
        Column::right("UPTIME"),
        Column::right("LIVE HEAP"),
        // Never cut: it is there to be copied.
        Column {
            max: usize::MAX,
            ..Column::left("ADDRESS")
        },
        Column {
            max: 80,
            ..Column::left("COMMAND")
        },
    ]);
    for r in &rows {
        table.row(vec![
            r.pid.to_string(),
            duration(r.uptime_s),
            human(r.live_bytes),
            r.address.clone(),
            crate::figures::one_line(r.command.clone()),
        ]);
    }
    table.write(out, "")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(59), "59s");
        assert_eq!(duration(185), "3m05s");
        assert_eq!(duration(7620), "2h07m");
        assert_eq!(duration(273_600), "3d04h");
    }
}
