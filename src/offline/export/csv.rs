//! CSV of the thread ranking (RFC 4180), one row per thread in the report's order (total,
//! descending). Columns:
//!
//! | column | meaning |
//! |---|---|
//! | `tid` | thread id |
//! | `name` | thread name |
//! | `state` | `stopped`, or `not-stoppable` when the agent could not stop it |
//! | `proprietary` | bytes only this thread reaches (docs/reference.md §3) |
//! | `shared` | bytes this thread reaches along with another thread or the globals |
//! | `total` | `proprietary + shared` |
//! | `frames` | number of stack frames |
//! | `top_frame` | the innermost user frame's function (else the innermost frame's) |
//!
//! Frames are not rows of this table: a frame's figures belong to the report JSON.

use std::io::Write;

use heaptui_analysis::FrameKind;

use crate::offline::report::Report;

pub const HEADER: &str = "tid,name,state,proprietary,shared,total,frames,top_frame";

/// Writes the thread ranking of `report`.
pub fn write(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{HEADER}")?;
    for t in &report.threads {
        let top = t
            .frames
            .iter()
            .find(|f| f.kind == FrameKind::User)
            .or(t.frames.first())
            .map_or("", |f| f.function.as_str());
        writeln!(
            out,
            "{},{},{},{},{},{},{},{}",
            t.tid,
            field(&t.name),
            if t.not_stoppable.is_some() {
                "not-stoppable"
            } else {
                "stopped"
            },
            t.proprietary,
            t.shared,
            t.total,
            t.frames.len(),
            field(top)
        )?;
    }
    Ok(())
}

/// A field quoted when it holds a comma, a quote or a line break (quotes doubled).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn fields_are_quoted_only_when_needed() {
        assert_eq!(field("worker-1"), "worker-1");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
