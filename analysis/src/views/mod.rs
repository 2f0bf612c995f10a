//! The views around the core attribution (docs/reference.md §8): live counters with automatic
//! snapshots ([`mark_and_count`]), allocation-site units ([`units`]), leaks and growth by site
//! ([`growth`]) and block ages ([`ages`]).
//!
//! This module also holds what they share: the [`StackTable`] of symbolized allocation stacks
//! (interned strings, stacks as `(function, module)` pairs, innermost first), and the
//! [`Tracker`], which resolves the address-level events of a recording (`crate::recording`)
//! against its own table of live blocks and feeds every view, so that a replay and a live agent
//! that feeds the same events get the same figures.
//!
//! Everything here is pure computation: no clock, no file, no symbolization.

pub mod ages;
pub mod growth;
pub mod mark_and_count;
pub mod units;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::recording::{Event, RecordedCounters};
use ages::{AgedBlock, Ages, Boundary};
use mark_and_count::{MarkAndCount, SnapshotRule, Trigger};
use units::{AllocKind, Caller, OldBlock, Released, UnitConfig, Units};

/// Index of a stack in a [`StackTable`].
pub type StackId = u32;

/// Marks an event whose stack is unknown (stack capture off).
pub const NO_STACK: StackId = u32::MAX;

/// Interned strings and symbolized stacks. Ids are dense and given in order of insertion, so a
/// reader that inserts what a writer inserted, in the same order, gets the same ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackTable {
    strings: Vec<String>,
    index: HashMap<String, u32>,
    /// `(function, module)` string ids of every stack, one after the other.
    frames: Vec<(u32, u32)>,
    /// Start of each stack in `frames`, then the end.
    offsets: Vec<u32>,
    stack_index: HashMap<Vec<(u32, u32)>, StackId>,
}

impl StackTable {
    pub fn new() -> StackTable {
        StackTable {
            offsets: vec![0],
            ..StackTable::default()
        }
    }

    /// The id of `s`, adding it if new; the flag says whether it was added.
    pub fn intern(&mut self, s: &str) -> (u32, bool) {
        if let Some(&id) = self.index.get(s) {
            return (id, false);
        }
        (self.push_string(s.to_string()), true)
    }

    /// Adds a string under the next id (duplicates get their own id; `intern` finds the first).
    pub fn push_string(&mut self, s: String) -> u32 {
        let id = self.strings.len() as u32;
        self.index.entry(s.clone()).or_insert(id);
        self.strings.push(s);
        id
    }

    /// The id of a stack of string ids, adding it if new; the flag says whether it was added.
    pub fn intern_stack(&mut self, frames: &[(u32, u32)]) -> (StackId, bool) {
        if let Some(&id) = self.stack_index.get(frames) {
            return (id, false);
        }
        (self.push_stack(frames), true)
    }

    /// Adds a stack under the next id.
    pub fn push_stack(&mut self, frames: &[(u32, u32)]) -> StackId {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        let id = (self.offsets.len() - 1) as StackId;
        self.frames.extend_from_slice(frames);
        self.offsets.push(self.frames.len() as u32);
        self.stack_index.entry(frames.to_vec()).or_insert(id);
        id
    }

    /// A string by id; `?` for an unknown id.
    pub fn string(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("?", String::as_str)
    }

    pub fn strings(&self) -> usize {
        self.strings.len()
    }

    pub fn stacks(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// A stack's `(function, module)` string ids, innermost first.
    pub fn stack(&self, id: StackId) -> Option<&[(u32, u32)]> {
        let i = id as usize;
        if id == NO_STACK || i + 1 >= self.offsets.len() {
            return None;
        }
        Some(&self.frames[self.offsets[i] as usize..self.offsets[i + 1] as usize])
    }

    /// A stack as `function (module)` strings, innermost first.
    pub fn frame_names(&self, id: StackId) -> Vec<String> {
        self.stack(id)
            .unwrap_or(&[])
            .iter()
            .map(|&(f, m)| format!("{} ({})", self.string(f), self.string(m)))
            .collect()
    }
}

/// Hashes a block address with one multiplication: addresses are already well spread in their
/// middle bits, and std's SipHash was most of a replay's time. Keys come from a recording,
/// so a hostile file could only slow its own replay down.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ (v >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        // The table uses the top bits for control bytes and the low bits for the bucket:
        // fold the well-mixed high half down.
        self.0 ^ (self.0 >> 32)
    }
}

type AddressMap<V> = HashMap<u64, V, BuildHasherDefault<AddressHasher>>;

/// A live block in the tracker's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveBlock {
    pub seq: u64,
    pub size: u64,
    pub stack: StackId,
    pub tid: u32,
    /// ms since the Unix epoch from the latest clock event before the allocation; 0 if none.
    pub unix_ms: u64,
}

/// How a [`Tracker`] computes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrackerConfig {
    pub rule: SnapshotRule,
    pub units: UnitConfig,
}

/// Resolves address-level heap events and feeds every view; see the module documentation.
#[derive(Clone, Debug)]
pub struct Tracker {
    stacks: StackTable,
    blocks: AddressMap<LiveBlock>,
    counters: MarkAndCount,
    units: Units,
    /// Units computed under further configurations ([`Tracker::track_units`]).
    more_units: Vec<Units>,
    boundaries: Vec<Boundary>,
    triggers: Vec<Trigger>,
    threads: HashMap<u32, u32>,
    modules: Vec<u32>,
    clock_ms: u64,
    last_seq: u64,
    recorded: Option<RecordedCounters>,
    lost: u64,
}

impl Tracker {
    pub fn new(config: TrackerConfig) -> Tracker {
        Tracker {
            stacks: StackTable::new(),
            blocks: AddressMap::default(),
            counters: MarkAndCount::new(config.rule),
            units: Units::new(config.units),
            more_units: Vec::new(),
            boundaries: Vec::new(),
            triggers: Vec::new(),
            threads: HashMap::new(),
            modules: Vec::new(),
            clock_ms: 0,
            last_seq: 0,
            recorded: None,
            lost: 0,
        }
    }

    /// Also computes units under `config` from now on (a live agent calls it before the first
    /// event, for every configuration a client may ask for). A configuration already tracked
    /// is not added twice.
    pub fn track_units(&mut self, config: UnitConfig) {
        if self.units_for(&config).is_none() {
            let mut units = Units::new(config);
            if let Some(program) = self.units.config().program.clone() {
                units.set_default_program(&program);
            }
            self.more_units.push(units);
        }
    }

    /// The units computed under `config` (granularity, position and charge; the program is
    /// not compared), if this tracker computes them. With [`Granularity::Thread`](units::Granularity)
    /// the position does not matter.
    pub fn units_for(&self, config: &UnitConfig) -> Option<&Units> {
        let same = |c: &UnitConfig| {
            c.granularity == config.granularity
                && c.charge == config.charge
                && (c.position == config.position || c.granularity == units::Granularity::Thread)
        };
        std::iter::once(&self.units)
            .chain(&self.more_units)
            .find(|u| same(u.config()))
    }

    /// Every units aggregation this tracker feeds.
    fn all_units(&mut self) -> impl Iterator<Item = &mut Units> {
        std::iter::once(&mut self.units).chain(&mut self.more_units)
    }

    /// Applies one recorded event.
    pub fn apply(&mut self, event: &Event) {
        match event {
            Event::String(s) => {
                self.stacks.push_string(s.clone());
            }
            Event::Stack(frames) => {
                self.stacks.push_stack(frames);
            }
            Event::Module { name, .. } => {
                if self.modules.is_empty() {
                    // The first module recorded is the program (see `recording`): stacks that
                    // do not reach `main` need it to tell the program's frames from libraries'.
                    let program = self.stacks.string(*name).to_string();
                    for units in self.all_units() {
                        units.set_default_program(&program);
                    }
                }
                self.modules.push(*name);
            }
            Event::Thread { tid, name } => {
                self.threads.insert(*tid, *name);
            }
            Event::Clock { unix_ms } => self.clock_ms = *unix_ms,
            Event::Counters(c) => {
                self.clock_ms = self.clock_ms.max(c.unix_ms);
                self.recorded = Some(*c);
            }
            Event::Snapshot(b) => self.boundaries.push(*b),
            Event::Lost { events } => self.lost = self.lost.max(*events),
            &Event::Alloc {
                kind,
                seq,
                addr,
                size,
                stack,
                tid,
            } => self.alloc(kind, seq, addr, size, Caller { stack, tid }),
            &Event::Free { addr, stack, tid } => self.free(addr, Caller { stack, tid }),
            &Event::Realloc {
                seq,
                old_addr,
                new_addr,
                size,
                stack,
                tid,
            } => self.realloc(seq, old_addr, new_addr, size, Caller { stack, tid }),
        }
    }

    /// A block of `size` bytes at `addr`, allocation number `seq`.
    pub fn alloc(&mut self, kind: AllocKind, seq: u64, addr: u64, size: u64, by: Caller) {
        if let Some(old) = self.blocks.remove(&addr) {
            // The allocator handed out an address we think is live: a free was missed (e.g.
            // the recording lost events). Release the stale block from every view alike, as a
            // free by an unknown caller.
            self.counters.free(old.size);
            let released = Released {
                size: old.size,
                stack: old.stack,
                tid: old.tid,
            };
            let unknown = Caller {
                stack: NO_STACK,
                tid: 0,
            };
            for units in std::iter::once(&mut self.units).chain(&mut self.more_units) {
                units.free(&self.stacks, Some(released), unknown);
            }
        }
        self.insert(seq, addr, size, by);
        for units in std::iter::once(&mut self.units).chain(&mut self.more_units) {
            units.alloc(&self.stacks, kind, size, by);
        }
        if let Some(t) = self.counters.alloc(size) {
            self.triggers.push(t);
        }
    }

    /// `free(addr)`; `addr == 0` is `free(NULL)`.
    pub fn free(&mut self, addr: u64, by: Caller) {
        if addr == 0 {
            for units in std::iter::once(&mut self.units).chain(&mut self.more_units) {
                units.free_null(&self.stacks, by);
            }
            return;
        }
        let released = self.blocks.remove(&addr).map(|b| {
            self.counters.free(b.size);
            Released {
                size: b.size,
                stack: b.stack,
                tid: b.tid,
            }
        });
        for units in std::iter::once(&mut self.units).chain(&mut self.more_units) {
            units.free(&self.stacks, released, by);
        }
    }

    /// `realloc(old_addr, size)` returning `new_addr`; `old_addr == 0` is `realloc(NULL, n)`.
    pub fn realloc(&mut self, seq: u64, old_addr: u64, new_addr: u64, size: u64, by: Caller) {
        let old = if old_addr == 0 {
            OldBlock::Null
        } else {
            match self.blocks.remove(&old_addr) {
                Some(b) => OldBlock::Block(Released {
                    size: b.size,
                    stack: b.stack,
                    tid: b.tid,
                }),
                None => OldBlock::Unknown,
            }
        };
        for units in std::iter::once(&mut self.units).chain(&mut self.more_units) {
            units.realloc(&self.stacks, old, size, by);
        }
        let trigger = match old {
            OldBlock::Unknown => return,
            OldBlock::Null => self.counters.alloc(size),
            OldBlock::Block(b) => self.counters.realloc(b.size, size),
        };
        self.insert(seq, new_addr, size, by);
        if let Some(t) = trigger {
            self.triggers.push(t);
        }
    }

    fn insert(&mut self, seq: u64, addr: u64, size: u64, by: Caller) {
        self.last_seq = self.last_seq.max(seq);
        self.blocks.insert(
            addr,
            LiveBlock {
                seq,
                size,
                stack: by.stack,
                tid: by.tid,
                unix_ms: self.clock_ms,
            },
        );
    }

    /// Records a snapshot boundary now (after the latest allocation).
    pub fn snapshot_boundary(&mut self) -> Boundary {
        let b = Boundary {
            last_seq: self.last_seq,
            unix_ms: self.clock_ms,
        };
        self.boundaries.push(b);
        b
    }

    pub fn stacks(&self) -> &StackTable {
        &self.stacks
    }

    pub fn counters(&self) -> &MarkAndCount {
        &self.counters
    }

    pub fn units(&self) -> &Units {
        &self.units
    }

    /// The snapshots the automatic rule decided on, in order.
    pub fn triggers(&self) -> &[Trigger] {
        &self.triggers
    }

    pub fn boundaries(&self) -> &[Boundary] {
        &self.boundaries
    }

    /// The latest counters the recording itself carried (to compare with the recomputed ones).
    pub fn recorded_counters(&self) -> Option<RecordedCounters> {
        self.recorded
    }

    /// Events the recording says were lost (a running total; 0 for a complete recording).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// A thread's name, if a thread event named it.
    pub fn thread_name(&self, tid: u32) -> Option<&str> {
        self.threads.get(&tid).map(|&s| self.stacks.string(s))
    }

    /// Module names in the order they were recorded.
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        self.modules.iter().map(|&m| self.stacks.string(m))
    }

    pub fn live_blocks(&self) -> impl Iterator<Item = (u64, &LiveBlock)> {
        self.blocks.iter().map(|(&a, b)| (a, b))
    }

    /// The ages of the live blocks against the recorded boundaries, per stack id and thread,
    /// with wall-clock ages measured to the latest clock reading.
    pub fn ages(&self, oldest: usize) -> Ages {
        let blocks = self.blocks.values().map(|b| AgedBlock {
            seq: b.seq,
            size: b.size,
            site: b.stack,
            tid: b.tid,
            unix_ms: b.unix_ms,
        });
        Ages::new(blocks, &self.boundaries, self.clock_ms, oldest)
    }
}
