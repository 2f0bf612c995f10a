//! Allocation-site units against every vector of issue 7, through the real event path
//! (`Tracker`: addresses resolved to blocks, then charged to units).

use heaptui_analysis::views::units::{
    AllocKind, Caller, Charge, Granularity, Position, UnitConfig, UnitFigures, Units, Unknown,
};
use heaptui_analysis::views::{StackId, StackTable, Tracker, TrackerConfig};

/// The issue's stack, innermost first:
/// main → func_0 (exe) → func_a0 (liba.so) → func_a1 (liba.so) → func_b0 (libb.so) → malloc.
const ISSUE_STACK: &[(&str, &str)] = &[
    ("malloc", "libc.so.6"),
    ("func_b0", "libb.so"),
    ("func_a1", "liba.so"),
    ("func_a0", "liba.so"),
    ("func_0", "exe"),
    ("main", "exe"),
    ("__libc_start_main", "libc.so.6"),
];

fn intern(table: &mut StackTable, frames: &[(&str, &str)]) -> StackId {
    let ids: Vec<(u32, u32)> = frames
        .iter()
        .map(|(f, m)| (table.intern(f).0, table.intern(m).0))
        .collect();
    table.intern_stack(&ids).0
}

fn names(granularity: Granularity, position: Position) -> Vec<String> {
    let mut table = StackTable::new();
    let stack = intern(&mut table, ISSUE_STACK);
    let mut units = Units::new(UnitConfig {
        granularity,
        position,
        ..UnitConfig::default()
    });
    units.alloc(&table, AllocKind::Malloc, 10, Caller { stack, tid: 1 });
    units.figures().iter().map(|f| f.name.clone()).collect()
}

#[test]
fn the_unit_of_the_issue_stack() {
    use Granularity::{Function, Library};
    use Position::{Inclusive, Innermost, Outermost};
    assert_eq!(names(Library, Outermost), ["liba.so"]);
    assert_eq!(names(Function, Outermost), ["func_a0 (liba.so)"]);
    assert_eq!(names(Library, Innermost), ["libb.so"]);
    assert_eq!(names(Function, Innermost), ["func_b0 (libb.so)"]);
    assert_eq!(names(Library, Inclusive), ["liba.so", "libb.so"]);
    assert_eq!(
        names(Function, Inclusive),
        [
            "func_a0 (liba.so)",
            "func_a1 (liba.so)",
            "func_b0 (libb.so)"
        ]
    );
}

#[test]
fn the_agent_and_the_allocator_are_skipped_and_the_program_is_a_fallback() {
    let mut table = StackTable::new();
    let own = intern(
        &mut table,
        &[
            ("hook_malloc", "libheaptui_agent.so"),
            ("_Znwm", "libstdc++.so.6"),
            ("parse", "exe"),
            ("main", "exe"),
        ],
    );
    let empty = intern(&mut table, &[("malloc", "libc.so.6"), ("main", "exe")]);
    let thread = intern(
        &mut table,
        &[("work", "exe"), ("start_thread", "libc.so.6")],
    );
    let mut units = Units::new(UnitConfig {
        granularity: Granularity::Function,
        position: Position::Innermost,
        program: Some("exe".into()),
        ..UnitConfig::default()
    });
    units.alloc(&table, AllocKind::Malloc, 1, Caller { stack: own, tid: 1 });
    units.alloc(
        &table,
        AllocKind::Malloc,
        2,
        Caller {
            stack: empty,
            tid: 1,
        },
    );
    units.alloc(
        &table,
        AllocKind::Malloc,
        4,
        Caller {
            stack: thread,
            tid: 2,
        },
    );
    let live: Vec<(&str, i64)> = units
        .figures()
        .iter()
        .map(|f| (f.name.as_str(), f.live))
        .collect();
    // Another thread's stack ends at start_thread, not main: the same boundary. `main`
    // allocating in its own frame has no frame below the boundary: `main` is its unit.
    assert_eq!(
        live,
        [("parse (exe)", 1), ("main (exe)", 2), ("work (exe)", 4)]
    );
}

/// The issue's event vector; returns the units' figures and the unknown-pointer counts.
fn issue_events(charge: Charge) -> (Vec<UnitFigures>, Unknown) {
    let mut t = Tracker::new(TrackerConfig {
        units: UnitConfig {
            granularity: Granularity::Library,
            position: Position::Outermost,
            charge,
            program: None,
        },
        ..TrackerConfig::default()
    });
    let stacks = {
        let mut table = StackTable::new();
        let a = intern(
            &mut table,
            &[("malloc", "libc"), ("fa", "liba.so"), ("main", "exe")],
        );
        let b = intern(
            &mut table,
            &[("malloc", "libc"), ("fb", "libb.so"), ("main", "exe")],
        );
        (table, a, b)
    };
    let (table, in_a, in_b) = stacks;
    // Feed the same definitions through the tracker, as a recording would.
    for i in 0..table.strings() as u32 {
        t.apply(&heaptui_analysis::recording::Event::String(
            table.string(i).to_string(),
        ));
    }
    for s in 0..table.stacks() as u32 {
        t.apply(&heaptui_analysis::recording::Event::Stack(
            table.stack(s).unwrap().to_vec(),
        ));
    }
    let a = Caller {
        stack: in_a,
        tid: 1,
    };
    let b = Caller {
        stack: in_b,
        tid: 2,
    };
    t.alloc(AllocKind::Malloc, 1, 0x1000, 100, a);
    t.alloc(AllocKind::Malloc, 2, 0x2000, 50, b);
    t.free(0x1000, b);
    t.realloc(3, 0x2000, 0x3000, 80, b);
    let live = t.counters().counters().live_bytes;
    assert_eq!(live, 80);
    // free(NULL) counts a free and changes no size.
    t.free(0, b);
    // Unknown pointers are reported and change nothing.
    t.free(0xdead, a);
    t.realloc(4, 0xbeef, 0x4000, 999, a);
    assert_eq!(t.counters().counters().live_bytes, 80);
    assert_eq!(t.counters().counters().live_blocks, 1);
    (t.units().figures().to_vec(), t.units().unknown())
}

fn unit<'a>(figures: &'a [UnitFigures], name: &str) -> &'a UnitFigures {
    figures.iter().find(|f| f.name == name).expect(name)
}

#[test]
fn charged_to_the_freer() {
    let (figures, unknown) = issue_events(Charge::Freer);
    assert_eq!(
        unit(&figures, "liba.so"),
        &UnitFigures {
            name: "liba.so".into(),
            live: 100,
            min: 0,
            max: 100,
            malloc: 1,
            ..UnitFigures::default()
        }
    );
    assert_eq!(
        unit(&figures, "libb.so"),
        &UnitFigures {
            name: "libb.so".into(),
            live: -20,
            min: -50,
            max: 50,
            malloc: 1,
            realloc: 1,
            // The vector's free, and free(NULL).
            free: 2,
            memalign: 0,
        }
    );
    assert_eq!(
        unknown,
        Unknown {
            frees: 1,
            reallocs: 1
        }
    );
    assert_eq!(figures.len(), 2, "no unit for the unknown pointers");
}

#[test]
fn charged_to_the_allocator() {
    let (figures, unknown) = issue_events(Charge::Allocator);
    let a = unit(&figures, "liba.so");
    let b = unit(&figures, "libb.so");
    assert_eq!((a.live, a.min, a.max, a.malloc, a.free), (0, 0, 100, 1, 1));
    assert_eq!((b.live, b.min, b.max), (80, 0, 80));
    assert_eq!(
        (b.malloc, b.realloc, b.free),
        (1, 1, 1),
        "free(NULL) is libb's call"
    );
    assert_eq!(
        unknown,
        Unknown {
            frees: 1,
            reallocs: 1
        }
    );
}

#[test]
fn per_thread_units_and_memalign_counts() {
    let table = StackTable::new();
    let mut units = Units::new(UnitConfig {
        granularity: Granularity::Thread,
        ..UnitConfig::default()
    });
    let by = |tid| Caller {
        stack: heaptui_analysis::views::NO_STACK,
        tid,
    };
    units.alloc(&table, AllocKind::Memalign, 64, by(7));
    units.alloc(&table, AllocKind::Calloc, 16, by(8));
    let released = heaptui_analysis::views::units::Released {
        size: 64,
        stack: 0,
        tid: 7,
    };
    units.free(&table, Some(released), by(8));
    let t7 = units.get("thread 7").unwrap();
    assert_eq!((t7.live, t7.memalign, t7.free, t7.max), (0, 1, 1, 64));
    let t8 = units.get("thread 8").unwrap();
    assert_eq!((t8.live, t8.malloc, t8.free), (16, 1, 0));
    assert_eq!(units.ranking()[0].name, "thread 8");
}

#[test]
fn inclusive_counts_a_recursive_library_once_per_event() {
    let mut table = StackTable::new();
    let stack = intern(
        &mut table,
        &[
            ("f", "liba.so"),
            ("g", "libb.so"),
            ("f", "liba.so"),
            ("main", "exe"),
        ],
    );
    let mut units = Units::new(UnitConfig {
        position: Position::Inclusive,
        ..UnitConfig::default()
    });
    units.alloc(&table, AllocKind::Malloc, 10, Caller { stack, tid: 1 });
    assert_eq!(units.get("liba.so").unwrap().live, 10);
    assert_eq!(units.get("libb.so").unwrap().live, 10);
}

#[test]
fn the_first_recorded_module_is_the_program_for_stacks_without_main() {
    use heaptui_analysis::recording::Event;
    let mut t = Tracker::new(TrackerConfig::default());
    let mut table = StackTable::new();
    let exe = table.intern("server").0;
    // A worker thread's stack: server frames around a library call, no main.
    let stack = intern(
        &mut table,
        &[
            ("malloc", "libc.so.6"),
            ("inflate", "libz.so.1"),
            ("handle", "server"),
            ("worker", "server"),
            ("start_thread", "libc.so.6"),
        ],
    );
    for i in 0..table.strings() as u32 {
        t.apply(&Event::String(table.string(i).to_string()));
    }
    t.apply(&Event::Stack(table.stack(stack).unwrap().to_vec()));
    t.apply(&Event::Module {
        name: exe,
        base: 0x400000,
        size: 0x1000,
    });
    t.alloc(AllocKind::Malloc, 1, 0x10, 32, Caller { stack, tid: 5 });
    // Outermost library: libz, not the program's own `worker`.
    assert_eq!(t.units().get("libz.so.1").unwrap().live, 32);
    assert_eq!(t.units().config().program.as_deref(), Some("server"));
}

#[test]
fn an_address_handed_out_twice_releases_the_stale_block_everywhere() {
    let mut t = Tracker::new(TrackerConfig::default());
    let by = Caller {
        stack: heaptui_analysis::views::NO_STACK,
        tid: 1,
    };
    t.alloc(AllocKind::Malloc, 1, 0x10, 100, by);
    // The free of 0x10 was lost; the allocator returns 0x10 again.
    t.alloc(AllocKind::Malloc, 2, 0x10, 40, by);
    let c = t.counters().counters();
    assert_eq!((c.live_bytes, c.live_blocks), (40, 1));
    assert_eq!(t.units().get("?").unwrap().live, 40);
}

#[test]
fn an_unsymbolized_thread_start_in_the_c_library_is_not_a_unit() {
    // A worker thread of a program that calls no library: the C library's thread start has
    // no symbol (`__clone3` is local to a stripped libc), so no named boundary cuts it off.
    let mut table = StackTable::new();
    let stack = intern(
        &mut table,
        &[
            ("malloc", "libc.so.6"),
            ("xmalloc", "/opt/demo/workload"),
            ("worker_main", "/opt/demo/workload"),
            ("libc.so.6+0x94ac3", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
            ("libc.so.6+0x1098eb", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
        ],
    );
    for (granularity, position, expected) in [
        (
            Granularity::Library,
            Position::Outermost,
            "/opt/demo/workload",
        ),
        (
            Granularity::Function,
            Position::Outermost,
            "worker_main (/opt/demo/workload)",
        ),
        // `xmalloc` only wraps malloc (docs/reference.md §3 "Labels"): not a unit either.
        (
            Granularity::Function,
            Position::Innermost,
            "worker_main (/opt/demo/workload)",
        ),
    ] {
        let mut units = Units::new(UnitConfig {
            granularity,
            position,
            ..UnitConfig::default()
        });
        units.alloc(&table, AllocKind::Malloc, 10, Caller { stack, tid: 7 });
        let names: Vec<&str> = units.figures().iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, [expected], "{granularity:?} {position:?}");
    }
}
