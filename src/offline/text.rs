//! The text form of a [`Report`]: a header with the totals, the threads ranked by the memory
//! they hold, each thread's frames, the shared groups (largest first), leaks and, when asked,
//! the release of a thread set. Drawn from the report model only; it computes no figure.

use std::io::{self, Write};

use heaptui_analysis::{FrameKind, GroupId, GroupKind, Sharer};

use super::report::Report;
use super::table::{Column, Table};
use crate::size::{human, human_exact};

/// At most this many groups are listed in text; the JSON has them all.
const GROUPS_SHOWN: usize = 50;

pub fn render(report: &Report, source: &str, out: &mut impl Write) -> io::Result<()> {
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

fn header(report: &Report, source: &str, out: &mut impl Write) -> io::Result<()> {
    let p = &report.process;
    let command = if p.command.is_empty() {
        "(unknown command)"
    } else {
        &p.command
    };
    writeln!(out, "heaptui report of {source}")?;
    writeln!(out, "process  {command} (pid {})", p.pid)?;
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
        "         {} threads, {} shared groups",
        report.threads.len(),
        report.groups.len()
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
        let name = match &th.not_stoppable {
            None => th.name.clone(),
            Some(_) => format!("{} (not stopped)", th.name),
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
    // Largest first; the ids (F1…, T1…, G1…) break ties so the order is stable.
    let mut order: Vec<usize> = (0..report.groups.len()).collect();
    order.sort_by_key(|&i| {
        (
            std::cmp::Reverse(report.groups[i].size),
            report.groups[i].id,
        )
    });
    let shown = order.len().min(GROUPS_SHOWN);
    writeln!(
        out,
        "Shared groups, largest first ({} of {})",
        shown,
        report.groups.len()
    )?;
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
    for &i in &order[..shown] {
        let g = &report.groups[i];
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
    if shown < order.len() {
        writeln!(
            out,
            "  … {} smaller groups not shown (`--json` lists every group)",
            order.len() - shown
        )?;
    }
    Ok(())
}

fn leaks(report: &Report, out: &mut impl Write) -> io::Result<()> {
    let l = &report.leaks;
    writeln!(out)?;
    if l.objects == 0 {
        return writeln!(out, "Leaks: none (every block is reachable from a root)");
    }
    writeln!(out, "Leaks (blocks no root reaches)")?;
    writeln!(
        out,
        "  {} in {}: definitely lost {} ({}), indirectly lost {} ({})",
        human_exact(l.bytes),
        objects(l.objects),
        human(l.definitely_lost),
        objects(l.definitely_lost_objects),
        human(l.indirectly_lost),
        objects(l.indirectly_lost_objects)
    )
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
