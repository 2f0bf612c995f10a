//! The text form of a [`Report`]: a header with the totals, the threads ranked by the memory
//! they hold, each thread's frames, the shared groups (largest first), leaks and, when asked,
//! the release of a thread set. Drawn from the report model only; it computes no figure.

use std::io::{self, Write};
use std::path::Path;

use heaptui_analysis::{FrameKind, GroupId, GroupKind, Sharer};

use super::report::Report;
use super::table::{Column, Table};
use crate::figures::{count, one_line};
use crate::size::{human, human_exact};

pub fn render(report: &Report, source: &Path, out: &mut impl Write) -> io::Result<()> {
    header(report, source, out)?;
    threads(report, out)?;
    frames(report, out)?;
    groups(report, out)?;
    leaks(report, out)?;
    if let Some(release) = &report.release {
        writeln!(out)?;
        writeln!(out, "Release")?;
        writeln!(
            out,
            "  ending thread{} {} would free {}",
            if release.threads.len() == 1 { "" } else { "s" },
            join(release.threads.iter()),
            human_exact(release.bytes)
        )?;
    }
    Ok(())
}

fn header(report: &Report, source: &Path, out: &mut impl Write) -> io::Result<()> {
    let p = &report.process;
    let command = if p.command.is_empty() {
        "(unknown command)".to_string()
    } else {
        one_line(p.command.clone())
    };
    writeln!(out, "heaptui report of {}", source.display())?;
    writeln!(out, "process  {command} (pid {})", p.pid)?;
    if let Some(t) = &report.timing {
        writeln!(
            out,
            "snapshot {}: pause {:.1} ms, capture {:.1} ms, analysis {:.1} ms",
            if t.outside {
                "from outside (no agent)"
            } else {
                "live"
            },
            t.pause_ms,
            t.capture_ms,
            t.analysis_ms
        )?;
    }
    let t = &report.totals;
    writeln!(
        out,
        "heap     {} in {} objects; unreachable {}, global-only {}",
        human_exact(t.bytes),
        t.objects,
        human(t.unreachable_bytes),
        human(t.global_only_bytes)
    )?;
    writeln!(
        out,
        "         {}, {}",
        count(report.threads.len() as u64, "thread", "threads"),
        count(
            report.groups.len() as u64 + report.groups_omitted,
            "shared group",
            "shared groups"
        )
    )?;
    if report.threads_not_stopped > 0 {
        writeln!(out, "{}", incomplete(report.threads_not_stopped))?;
    }
    Ok(())
}

/// The line that says a snapshot is incomplete (docs/reference.md §3).
pub fn incomplete(threads_not_stopped: u32) -> String {
    format!(
        "INCOMPLETE: {} not stopped (frames unknown); leak figures may be overstated",
        count(u64::from(threads_not_stopped), "thread was", "threads were")
    )
}

fn threads(report: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(out, "Threads, ranked by total")?;
    let mut t = Table::new(&[
        Column::right("TID"),
        Column::left("NAME"),
        Column::right("PROPRIETARY"),
        Column::right("SHARED"),
        Column::right("TOTAL"),
        Column::right("TOTAL BYTES"),
        Column::right("FRAMES"),
    ]);
    for th in &report.threads {
        let name = if th.name.is_empty() {
            "(unnamed)"
        } else {
            &th.name
        };
        let name = match &th.not_stoppable {
            None => name.to_string(),
            Some(_) => format!("{name} (not stopped)"),
        };
        t.row(vec![
            th.tid.to_string(),
            name,
            human(th.proprietary),
            human(th.shared),
            human(th.total),
            th.total.to_string(),
            th.frames.len().to_string(),
        ]);
    }
    t.write(out, "  ")
}

fn frames(report: &Report, out: &mut impl Write) -> io::Result<()> {
    for th in &report.threads {
        writeln!(out)?;
        writeln!(
            out,
            "Frames of thread {} {}, innermost first",
            th.tid,
            quoted(&th.name)
        )?;
        if let Some(reason) = &th.not_stoppable {
            writeln!(
                out,
                "  (the agent could not stop this thread: {reason}; its frames may be incomplete)"
            )?;
        }
        if th.frames.is_empty() {
            writeln!(out, "  (no frames)")?;
            continue;
        }
        let mut t = Table::new(&[
            Column::right("#"),
            Column::left("FUNCTION"),
            Column::left("MODULE"),
            Column::left("KIND"),
            Column::right("PROPRIETARY"),
            Column::left("FRAME-SHARED"),
            Column::left("THREAD-SHARED"),
        ]);
        for f in &th.frames {
            t.row(vec![
                f.index.to_string(),
                f.function.clone(),
                f.module.clone(),
                match f.kind {
                    FrameKind::User => "user",
                    FrameKind::System => "system",
                }
                .to_string(),
                human(f.proprietary),
                ids(&f.frame_shared),
                ids(&f.thread_shared),
            ]);
        }
        t.write(out, "  ")?;
    }
    Ok(())
}

fn groups(report: &Report, out: &mut impl Write) -> io::Result<()> {
    writeln!(out)?;
    if report.groups.is_empty() {
        writeln!(out, "Shared groups: none")?;
        return Ok(());
    }
    // The report holds the largest groups, largest first (`--groups`).
    let shown = report.groups.len();
    let all = shown as u64 + report.groups_omitted;
    writeln!(out, "Shared groups, largest first ({shown} of {all})")?;
    let mut t = Table::new(&[
        Column::left("ID"),
        Column::left("KIND"),
        Column::right("ENTRY"),
        Column::right("ADDRESS"),
        Column::left("LABEL"),
        Column::right("SIZE"),
        Column::right("OBJECTS"),
        Column::left("SHARERS"),
        Column::left("REFS"),
    ]);
    for g in &report.groups {
        t.row(vec![
            g.id.to_string(),
            match g.kind {
                GroupKind::FrameShared => "frame-shared",
                GroupKind::ThreadShared => "thread-shared",
                GroupKind::GlobalOnly => "global-only",
            }
            .to_string(),
            g.entry.to_string(),
            format!("{:#x}", g.addr),
            g.label.clone(),
            human(g.size),
            g.objects.to_string(),
            sharers(&g.sharers),
            ids(&g.refs),
        ]);
    }
    t.write(out, "  ")?;
    if report.groups_omitted > 0 {
        writeln!(
            out,
            "  … {} smaller groups not shown (`--groups all` lists every group)",
            report.groups_omitted
        )?;
    }
    Ok(())
}

fn leaks(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let l = &report.leaks;
    writeln!(out)?;
    if l.objects == 0 && l.possibly_lost_objects == 0 {
        return writeln!(
            out,
            "Leaks: none (every block is reachable from a root by pointers to its start)"
        );
    }
    if l.objects == 0 {
        writeln!(out, "Leaks: no block is unreachable")?;
    } else {
        writeln!(out, "Leaks (blocks no root reaches)")?;
        if l.may_be_overstated {
            writeln!(
                out,
                "  may be overstated: a thread that was not stopped may hold some of these blocks"
            )?;
        }
        writeln!(
            out,
            "  {} in {}: definitely lost {} ({}), indirectly lost {} ({})",
            human_exact(l.bytes),
            objects(l.objects),
            human(l.definitely_lost),
            objects(l.definitely_lost_objects),
            human(l.indirectly_lost),
            objects(l.indirectly_lost_objects)
        )?;
    }
    if l.possibly_lost_objects > 0 {
        writeln!(
            out,
            "  possibly lost {} ({}): reachable only through pointers into their middle",
            human(l.possibly_lost),
            objects(l.possibly_lost_objects)
        )?;
        if crate::figures::mostly_possibly_lost(l.possibly_lost, report.totals.bytes) {
            writeln!(
                out,
                "  (most of the heap: the program points into its blocks past their start, as \
                 interpreters and pool allocators do, so these are seldom leaks)"
            )?;
        }
    }
    Ok(())
}

fn objects(n: u64) -> String {
    if n == 1 {
        "1 object".to_string()
    } else {
        format!("{n} objects")
    }
}

fn quoted(name: &str) -> String {
    if name.is_empty() {
        "(unnamed)".to_string()
    } else {
        format!("\"{name}\"")
    }
}

fn ids(ids: &[GroupId]) -> String {
    if ids.is_empty() {
        "-".to_string()
    } else {
        join(ids.iter())
    }
}

fn sharers(sharers: &[Sharer]) -> String {
    join(sharers.iter().map(|s| match s {
        Sharer::Thread(tid) => tid.to_string(),
        Sharer::Globals => "globals".to_string(),
    }))
}

fn join<T: ToString>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use heaptui_analysis::{Analysis, snapshot};

    use crate::cli::GroupLimit;

    use super::*;

    /// 60 objects each shared by threads 1 and 2 (60 thread-shared groups, sizes 1..=60);
    /// thread 2 could not be stopped.
    fn many_groups() -> String {
        let objects: Vec<String> = (1..=60)
            .map(|id| format!(r#"{{"id": {id}, "size": {id}, "refs": []}}"#))
            .collect();
        let refs: Vec<String> = (1..=60).map(|id| id.to_string()).collect();
        let refs = refs.join(", ");
        let json = format!(
            r#"{{"format": "heaptui-snapshot", "version": 1,
                "objects": [{}],
                "threads": [
                  {{"tid": 1, "name": "main", "frames": [{{"function": "main", "refs": [{refs}]}}]}},
                  {{"tid": 2, "state": {{"not-stoppable": "signals blocked"}},
                    "frames": [{{"function": "poll", "kind": "system", "refs": [{refs}]}}]}}]}}"#,
            objects.join(", ")
        );
        let graph = snapshot::read_bytes(json.as_bytes()).unwrap();
        let kept = heaptui_analysis::Kept::new(&graph, &Analysis::new(&graph));
        let report = Report::build(&kept, None, GroupLimit::DEFAULT);
        let mut out = Vec::new();
        render(&report, Path::new("many.json"), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// A 100-byte block that main's frame reaches only through a pointer into its middle, and a
    /// `small`-byte one it points at the start of.
    fn interior_report(small: u64) -> String {
        let json = format!(
            r#"{{"format": "heaptui-snapshot", "version": 1,
                "objects": [{{"id": 1, "size": 100, "refs": []}},
                            {{"id": 2, "size": {small}, "refs": []}}],
                "threads": [{{"tid": 1, "name": "main", "frames": [{{"function": "main",
                  "refs": [{{"id": 1, "interior": true}}, 2]}}]}}]}}"#
        );
        let graph = snapshot::read_bytes(json.as_bytes()).unwrap();
        let kept = heaptui_analysis::Kept::new(&graph, &Analysis::new(&graph));
        let report = Report::build(&kept, None, GroupLimit::DEFAULT);
        let mut out = Vec::new();
        render(&report, Path::new("interior.json"), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_heap_mostly_possibly_lost_is_said_to_be_seldom_leaks() {
        let hint = "(most of the heap: the program points into its blocks past their start";
        let mostly = interior_report(10);
        assert!(
            mostly.contains("  possibly lost 100 B (1 object): reachable only through"),
            "{mostly}"
        );
        assert!(mostly.contains(hint), "{mostly}");
        // 100 of 400 bytes: possibly lost, but not most of the heap.
        let some = interior_report(300);
        assert!(some.contains("  possibly lost 100 B (1 object)"), "{some}");
        assert!(!some.contains(hint), "{some}");
    }

    #[test]
    fn long_group_lists_are_cut_largest_first() {
        let text = many_groups();
        assert!(
            text.contains("Shared groups, largest first (50 of 60)"),
            "{text}"
        );
        assert!(
            text.contains("  … 10 smaller groups not shown (`--groups all` lists every group)"),
            "{text}"
        );
        // The largest group is listed first; the ten smallest (sizes 1..=10) are not.
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Shared groups"))
            .skip(2)
            .take(50)
            .collect();
        assert!(rows[0].contains("  60 B  "), "{}", rows[0]);
        assert!(rows[49].contains("  11 B  "), "{}", rows[49]);
        assert!(text.contains("Leaks: none"), "{text}");
    }

    #[test]
    fn a_thread_that_was_not_stopped_says_so() {
        let text = many_groups();
        assert!(text.contains("    2  (unnamed) (not stopped)  "), "{text}");
        assert!(
            text.contains(
                "  (the agent could not stop this thread: signals blocked; its frames may be \
                 incomplete)"
            ),
            "{text}"
        );
        assert!(
            text.contains("Frames of thread 2 (unnamed), innermost first"),
            "{text}"
        );
    }
}
