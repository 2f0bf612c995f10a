//! The audit log (`HEAPTUI_AUDIT`, docs/reference.md §7): one JSON object per line, appended, each
//! line written with a single `write(2)` on an `O_APPEND` descriptor (so it is on disk — in the
//! kernel's page cache — when the decision returns, and lines of concurrent writers never
//! interleave).
//!
//! Line kinds (`"event"`): `decision` (every operator or autonomous decision: done, refused,
//! dry-run), `measured` (the release measured after the next snapshot, for a decision that
//! acted), `shortage` (the trigger fired and no permitted set suffices).
//!
//! Owns the file and the line format. Must never be written from a hook, or hold up a
//! decision when the file cannot be written (the failure goes to the agent log, once).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::sync::PerProcess;

static FILE: PerProcess<Mutex<Option<File>>> = PerProcess::new(Mutex::new(None));

/// In a fork child: the same audit log through a lock of its own (a copy of the parent's
/// descriptor; none when the parent's lock was held at the fork, and the child then says so at
/// its first decision).
pub fn renew_in_child() {
    let file = FILE
        .try_lock()
        .ok()
        .and_then(|f| f.as_ref().and_then(|f| f.try_clone().ok()));
    FILE.renew(Mutex::new(file));
}
static FAILED: AtomicBool = AtomicBool::new(false);

/// Opens (creates, 0600, append) the audit log.
pub fn open(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .and_then(crate::sys::own_fd)
        .map_err(|e| format!("cannot open HEAPTUI_AUDIT={}: {e}", path.display()))?;
    *FILE.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    Ok(())
}

/// `2026-11-23T01:02:03.456Z` for milliseconds since the epoch (UTC, proleptic Gregorian).
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms % 1000
    )
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Builds one line: `time`, `unix_ms`, `event`, then `fields` in order.
pub fn line(event: &str, fields: Vec<(&str, Value)>) -> String {
    let now = unix_ms();
    let mut m = Map::new();
    m.insert("time".into(), json!(rfc3339(now)));
    m.insert("unix_ms".into(), json!(now));
    m.insert("event".into(), json!(event));
    for (k, v) in fields {
        m.insert(k.into(), v);
    }
    let mut s = Value::Object(m).to_string();
    s.push('\n');
    s
}

/// Appends one line; without `HEAPTUI_AUDIT` it goes nowhere (callers also write a summary
/// line to the agent log).
pub fn append(event: &str, fields: Vec<(&str, Value)>) {
    let text = line(event, fields);
    let mut guard = FILE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(f) = guard.as_mut() else { return };
    if let Err(e) = f.write_all(text.as_bytes())
        && !FAILED.swap(true, Ordering::Relaxed)
    {
        crate::agent_log!("cannot write the audit log: {e}; later failures are not reported");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_395_723_456), "2026-11-23T01:02:03.456Z");
    }

    #[test]
    fn a_line_is_one_json_object() {
        let l = line(
            "decision",
            vec![("tid", json!(7)), ("who", json!("a \"b\"\n"))],
        );
        assert!(l.ends_with('\n') && l.matches('\n').count() == 1);
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["event"], "decision");
        assert_eq!(v["tid"], 7);
        assert_eq!(v["who"], "a \"b\"\n");
        assert!(v["time"].as_str().unwrap().ends_with('Z'));
    }
}
