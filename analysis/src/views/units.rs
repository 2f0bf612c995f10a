//! Allocation-site units (docs/reference.md §8): live bytes, running min/max and call counts per
//! library, per function or per thread, with the unit chosen at analysis time.
//!
//! [`Units`] is fed resolved heap events — an allocation with its stack and thread, a free or
//! realloc together with the block it released (or the news that the pointer was unknown) —
//! and charges each to one or more units. Resolving addresses to blocks is the caller's job
//! (`views::Tracker` does it for a recording); this module never sees an address, reads no
//! file and never symbolizes.
//!
//! # Which frames make the unit
//! Stacks are innermost first. Frames at and above `main` (`main`, `__libc_start_main`,
//! `_start`; on other threads `start_thread` and `clone`) are dropped, and so are the agent's frames (a module whose name contains
//! `heaptui_agent`) and the allocator's and its wrappers' (`malloc`, `operator new`, `xmalloc`,
//! …: [`Wrappers`](crate::labels::Wrappers), the list that also names sites).
//! Of the remaining frames, those of a *library* — a module other than the program, which is
//! the module `main` is in, or [`UnitConfig::program`] — are preferred: with the stack
//! `main → func_0 (exe) → func_a0 (liba) → func_a1 (liba) → func_b0 (libb) → malloc`,
//! outermost is `liba.so` / `func_a0`, innermost `libb.so` / `func_b0`, inclusive both
//! libraries (`func_a0`, `func_a1` and `func_b0` as functions). A stack with no library frame
//! falls back to the program's own frames, and one with no frame below `main` (`main`'s own
//! allocations) to `main`; a stack with no frame left (the C runtime's own calls) is the unit
//! `?`.
//! Inclusive charges each distinct unit of a stack once per event (recursion does not count
//! twice).
//!
//! # Who is charged
//! With [`Charge::Allocator`] (default), a free, and the release of the old block in a
//! realloc, are charged to the units of the stack that allocated the block; with
//! [`Charge::Freer`], to the units of the freeing stack (units' live bytes may then go
//! negative). The new block of a realloc and the realloc count always go to the realloc's own
//! stack. `free(NULL)` counts a free for the caller and changes no size. A free or realloc of
//! an unknown pointer changes nothing and is counted in [`Unknown`].

use std::collections::HashMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::{NO_STACK, StackId, StackTable};

/// The frames from `main` (or, on other threads, from the thread's start routine's caller)
/// outwards are the C runtime's, not a unit.
const OUTER_BOUNDARIES: &[&str] = &[
    "main",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
];
const AGENT_MODULE: &str = "heaptui_agent";

/// Whether `module` is the C library or the dynamic loader, whose frames start threads.
fn is_c_runtime(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    name.starts_with("libc.so") || name.starts_with("ld-linux")
}

/// What a unit is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Granularity {
    #[default]
    Library,
    Function,
    Thread,
}

/// Which frames of a stack make its unit(s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Position {
    #[default]
    Outermost,
    Innermost,
    Inclusive,
}

/// Who is charged with a free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Charge {
    #[default]
    Allocator,
    Freer,
}

/// How events are turned into units.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitConfig {
    pub granularity: Granularity,
    pub position: Position,
    pub charge: Charge,
    /// The program's module, for stacks that do not reach `main` (other threads).
    pub program: Option<String>,
}

/// The allocating call, as counted per unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AllocKind {
    /// `malloc`, and `calloc` (counted with malloc).
    #[default]
    Malloc,
    Calloc,
    /// `posix_memalign`, `aligned_alloc`, `memalign`, `valloc`, `pvalloc`.
    Memalign,
}

/// The block a free or realloc released: what the caller's block table knew of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Released {
    pub size: u64,
    pub stack: StackId,
    pub tid: u32,
}

/// Who made a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub stack: StackId,
    pub tid: u32,
}

/// What the old pointer of a realloc was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldBlock {
    /// `realloc(NULL, n)`: a plain allocation, counted as a realloc.
    Null,
    /// A pointer no block starts at: reported, nothing changes.
    Unknown,
    Block(Released),
}

/// The figures of one unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitFigures {
    /// `liba.so`, `func_a0 (liba.so)` or `thread 42`.
    pub name: String,
    /// Bytes charged in minus bytes charged out (negative when charged to the freer).
    pub live: i64,
    /// Lowest and highest `live` ever, starting from 0.
    pub min: i64,
    pub max: i64,
    pub malloc: u64,
    pub realloc: u64,
    pub free: u64,
    pub memalign: u64,
}

/// Frees and reallocs that named a pointer no block starts at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unknown {
    pub frees: u64,
    pub reallocs: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum UnitKey {
    Unknown,
    Module(u32),
    Function { function: u32, module: u32 },
    Thread(u32),
}

/// The per-unit aggregation; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Units {
    config: UnitConfig,
    figures: Vec<UnitFigures>,
    keys: HashMap<UnitKey, u32>,
    /// Per stack id, the range of `lists` holding its units (resolved once per stack).
    resolved: Vec<Option<Range<u32>>>,
    lists: Vec<u32>,
    unknown: Unknown,
    scratch: Vec<u32>,
    /// (unit, bytes, counted) of the realloc being charged.
    deltas: Vec<(u32, i64, bool)>,
}

impl Units {
    pub fn new(config: UnitConfig) -> Units {
        Units {
            config,
            ..Units::default()
        }
    }

    /// Sets [`UnitConfig::program`] unless it was given; stacks resolved from now on use it.
    pub fn set_default_program(&mut self, program: &str) {
        if self.config.program.is_none() {
            self.config.program = Some(program.to_string());
            self.resolved.clear();
        }
    }

    pub fn config(&self) -> &UnitConfig {
        &self.config
    }

    /// A block of `size` bytes was allocated by `by`.
    pub fn alloc(&mut self, stacks: &StackTable, kind: AllocKind, size: u64, by: Caller) {
        self.charge(stacks, by.stack, by.tid, size as i64, |f| match kind {
            AllocKind::Malloc | AllocKind::Calloc => f.malloc += 1,
            AllocKind::Memalign => f.memalign += 1,
        });
    }

    /// `free(ptr)` by `by`; `released` is the block `ptr` started, `None` for an unknown
    /// pointer. Use [`Units::free_null`] for `free(NULL)`.
    pub fn free(&mut self, stacks: &StackTable, released: Option<Released>, by: Caller) {
        let Some(block) = released else {
            self.unknown.frees += 1;
            return;
        };
        let (stack, tid) = self.charged(block, by);
        self.charge(stacks, stack, tid, -(block.size as i64), |f| f.free += 1);
    }

    /// `free(NULL)`: a free for the caller, no size change.
    pub fn free_null(&mut self, stacks: &StackTable, by: Caller) {
        self.charge(stacks, by.stack, by.tid, 0, |f| f.free += 1);
    }

    /// `realloc(old, size)` by `by`. One event: a unit that both releases the old block and
    /// receives the new one sees only the difference (50 → 80 is +30, never −50 first).
    pub fn realloc(&mut self, stacks: &StackTable, old: OldBlock, size: u64, by: Caller) {
        let mut deltas = std::mem::take(&mut self.deltas);
        deltas.clear();
        match old {
            OldBlock::Unknown => {
                self.unknown.reallocs += 1;
                self.deltas = deltas;
                return;
            }
            OldBlock::Null => {}
            OldBlock::Block(block) => {
                let (stack, tid) = self.charged(block, by);
                self.collect(stacks, stack, tid);
                deltas.extend(
                    self.scratch
                        .iter()
                        .map(|&u| (u, -(block.size as i64), false)),
                );
            }
        }
        self.collect(stacks, by.stack, by.tid);
        for &u in &self.scratch {
            match deltas.iter_mut().find(|(v, _, _)| *v == u) {
                Some(entry) => {
                    entry.1 += size as i64;
                    entry.2 = true;
                }
                None => deltas.push((u, size as i64, true)),
            }
        }
        for &(u, delta, counted) in &deltas {
            let f = &mut self.figures[u as usize];
            f.live += delta;
            f.min = f.min.min(f.live);
            f.max = f.max.max(f.live);
            if counted {
                f.realloc += 1;
            }
        }
        self.deltas = deltas;
    }

    fn charged(&self, block: Released, by: Caller) -> (StackId, u32) {
        match self.config.charge {
            Charge::Allocator => (block.stack, block.tid),
            Charge::Freer => (by.stack, by.tid),
        }
    }

    fn charge(
        &mut self,
        stacks: &StackTable,
        stack: StackId,
        tid: u32,
        delta: i64,
        count: impl Fn(&mut UnitFigures),
    ) {
        self.collect(stacks, stack, tid);
        for &u in &self.scratch {
            let f = &mut self.figures[u as usize];
            f.live += delta;
            f.min = f.min.min(f.live);
            f.max = f.max.max(f.live);
            count(f);
        }
    }

    /// Puts the units of a stack (or of a thread) in `scratch`.
    fn collect(&mut self, stacks: &StackTable, stack: StackId, tid: u32) {
        let mut units = std::mem::take(&mut self.scratch);
        units.clear();
        if self.config.granularity == Granularity::Thread {
            units.push(self.unit(stacks, UnitKey::Thread(tid)));
        } else {
            let range = self.units_of(stacks, stack);
            units.extend_from_slice(&self.lists[range.start as usize..range.end as usize]);
        }
        self.scratch = units;
    }

    /// The units of a stack, resolved on first use.
    fn units_of(&mut self, stacks: &StackTable, stack: StackId) -> Range<u32> {
        let slot = if stack == NO_STACK {
            None
        } else {
            Some(stack as usize)
        };
        if let Some(s) = slot {
            if self.resolved.len() <= s {
                self.resolved.resize(s + 1, None);
            }
            if let Some(range) = self.resolved[s].clone() {
                return range;
            }
        }
        let keys = self.keys_of(stacks, stack);
        let start = self.lists.len() as u32;
        for key in keys {
            let u = self.unit(stacks, key);
            self.lists.push(u);
        }
        let range = start..self.lists.len() as u32;
        if let Some(s) = slot {
            self.resolved[s] = Some(range.clone());
        }
        range
    }

    fn keys_of(&self, stacks: &StackTable, stack: StackId) -> Vec<UnitKey> {
        let Some(frames) = stacks.stack(stack) else {
            return vec![UnitKey::Unknown];
        };
        let below_main = frames
            .iter()
            .position(|&(function, _)| OUTER_BOUNDARIES.contains(&stacks.string(function)));
        let program_of_main = below_main
            .filter(|&i| stacks.string(frames[i].0) == "main")
            .map(|i| frames[i].1);
        let program = self.config.program.as_deref();
        let wrappers = crate::labels::Wrappers::process();
        let is_program =
            |module: u32| Some(module) == program_of_main || Some(stacks.string(module)) == program;
        // Without a named boundary (the C library's thread start is often unsymbolized:
        // `libc.so.6+0x1098eb`), the C runtime's frames at the outer end are still not a unit.
        let end = below_main.unwrap_or_else(|| {
            let runtime = frames
                .iter()
                .rev()
                .take_while(|&&(_, module)| is_c_runtime(stacks.string(module)))
                .count();
            frames.len() - runtime
        });
        let considered: Vec<(u32, u32)> = frames[..end]
            .iter()
            .copied()
            .filter(|&(function, module)| {
                !stacks.string(module).contains(AGENT_MODULE)
                    && !wrappers.is_wrapper(stacks.string(function))
            })
            .collect();
        let libraries: Vec<(u32, u32)> = considered
            .iter()
            .copied()
            .filter(|&(_, module)| !is_program(module))
            .collect();
        let chosen = if !libraries.is_empty() {
            libraries
        } else if !considered.is_empty() {
            considered
        } else if let Some(i) = program_of_main.and(below_main) {
            // `main` allocated in its own frame (its helpers inlined, as in the demo): no
            // frame below it, so `main` itself is the unit, as a thread's start routine is
            // for its own allocations.
            vec![frames[i]]
        } else {
            Vec::new()
        };
        let key = |(function, module): (u32, u32)| match self.config.granularity {
            Granularity::Function => UnitKey::Function { function, module },
            _ => UnitKey::Module(module),
        };
        let mut keys: Vec<UnitKey> = match self.config.position {
            Position::Innermost => chosen.first().copied().map(key).into_iter().collect(),
            Position::Outermost => chosen.last().copied().map(key).into_iter().collect(),
            Position::Inclusive => chosen.iter().rev().copied().map(key).collect(),
        };
        // Once per event: keep the first (outermost) occurrence of each unit.
        let mut seen = Vec::with_capacity(keys.len());
        keys.retain(|k| {
            let new = !seen.contains(k);
            seen.push(*k);
            new
        });
        if keys.is_empty() {
            keys.push(UnitKey::Unknown);
        }
        keys
    }

    fn unit(&mut self, stacks: &StackTable, key: UnitKey) -> u32 {
        if let Some(&u) = self.keys.get(&key) {
            return u;
        }
        let name = match key {
            UnitKey::Unknown => "?".to_string(),
            UnitKey::Module(m) => stacks.string(m).to_string(),
            UnitKey::Function { function, module } => {
                format!("{} ({})", stacks.string(function), stacks.string(module))
            }
            UnitKey::Thread(tid) => format!("thread {tid}"),
        };
        let u = self.figures.len() as u32;
        self.figures.push(UnitFigures {
            name,
            ..UnitFigures::default()
        });
        self.keys.insert(key, u);
        u
    }

    /// Every unit charged so far, in order of first charge.
    pub fn figures(&self) -> &[UnitFigures] {
        &self.figures
    }

    /// The unit with this name, if it was charged.
    pub fn get(&self, name: &str) -> Option<&UnitFigures> {
        self.figures.iter().find(|f| f.name == name)
    }

    /// Units by live bytes, highest first (ties by name).
    pub fn ranking(&self) -> Vec<&UnitFigures> {
        let mut rows: Vec<&UnitFigures> = self.figures.iter().collect();
        rows.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| a.name.cmp(&b.name)));
        rows
    }

    pub fn unknown(&self) -> Unknown {
        self.unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(table: &mut StackTable, frames: &[(&str, &str)]) -> StackId {
        let ids: Vec<(u32, u32)> = frames
            .iter()
            .map(|(f, m)| (table.intern(f).0, table.intern(m).0))
            .collect();
        table.intern_stack(&ids).0
    }

    /// The demo's startup: `main` calls malloc itself (its helpers inlined), so no frame is
    /// left below `main`; a helper's stack keeps its own unit.
    #[test]
    fn main_allocating_in_its_own_frame_is_main() {
        let mut table = StackTable::new();
        let own = stack(
            &mut table,
            &[
                ("malloc", "libheaptui_agent.so"),
                ("main", "/opt/demo/workload"),
                ("__libc_start_call_main", "libc.so.6"),
                ("__libc_start_main", "libc.so.6"),
                ("_start", "/opt/demo/workload"),
            ],
        );
        let helped = stack(
            &mut table,
            &[
                ("malloc", "libheaptui_agent.so"),
                ("load_config", "/opt/demo/workload"),
                ("main", "/opt/demo/workload"),
                ("__libc_start_main", "libc.so.6"),
            ],
        );
        let runtime = stack(
            &mut table,
            &[
                ("free", "libheaptui_agent.so"),
                ("_IO_cleanup", "libc.so.6"),
            ],
        );
        let main = "main (/opt/demo/workload)";
        let helper = "load_config (/opt/demo/workload)";
        for (granularity, position, expected) in [
            (Granularity::Function, Position::Outermost, [main, helper]),
            (Granularity::Function, Position::Innermost, [main, helper]),
            (Granularity::Function, Position::Inclusive, [main, helper]),
            (
                Granularity::Library,
                Position::Outermost,
                ["/opt/demo/workload"; 2],
            ),
            (
                Granularity::Library,
                Position::Innermost,
                ["/opt/demo/workload"; 2],
            ),
        ] {
            let mut units = Units::new(UnitConfig {
                granularity,
                position,
                ..UnitConfig::default()
            });
            units.alloc(&table, AllocKind::Malloc, 10, Caller { stack: own, tid: 1 });
            units.alloc(
                &table,
                AllocKind::Malloc,
                20,
                Caller {
                    stack: helped,
                    tid: 1,
                },
            );
            // The C runtime's own call, with no frame of the program, stays `?`.
            units.free_null(
                &table,
                Caller {
                    stack: runtime,
                    tid: 1,
                },
            );
            let names: Vec<(&str, i64)> = units
                .figures()
                .iter()
                .map(|f| (f.name.as_str(), f.live))
                .collect();
            let want: Vec<(&str, i64)> = if expected[0] == expected[1] {
                vec![(expected[0], 30), ("?", 0)]
            } else {
                vec![(expected[0], 10), (expected[1], 20), ("?", 0)]
            };
            assert_eq!(names, want, "{granularity:?} {position:?}");
        }
    }
}
