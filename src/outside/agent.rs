//! heaptui's own agent, when it is loaded in a process captured from outside.
//!
//! The commands never capture such a process from outside (they ask its agent); the tests do,
//! to compare both captures of one process. For the two to agree, the outside capture leaves
//! out what the agent's own capture leaves out (docs/reference.md §3: the agent's frames,
//! threads and memory are never roots):
//! - the agent's threads (named `heaptui-…`), their stacks and TLS;
//! - the agent's module data (its writable segments whole: the `.bss` beyond the file is an
//!   anonymous mapping of its own in the memory map), and the mappings the agent made for itself, which it lists in a
//!   table of its own (`own_memory::SLOTS`, `HIGH`): that table is read from the copy, its
//!   address from the agent's symbol table.
//!
//! Reads the agent's file and the copy; never the live process.

use heaptui_capture::files::{MAX_MODULE_FILE, read_regular};
use std::ops::Range;

use nix::unistd::Pid;
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSymbol};

use super::glibc;
use super::maps::Maps;
use super::memory::Image;

/// The name prefix of every thread the agent starts.
const THREAD_PREFIX: &str = "heaptui-";

/// Whether a thread is one of the agent's, by its name.
pub fn is_agent_thread(name: &str) -> bool {
    name.starts_with(THREAD_PREFIX)
}

/// Where the agent is loaded and where its table of mappings lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Agent {
    /// The agent module's writable data.
    pub data: Vec<Range<u64>>,
    /// Run-time addresses of `own_memory::SLOTS` and `own_memory::HIGH`.
    slots: u64,
    high: u64,
}

/// The agent loaded in process `pid`, if any, and if its table can be found.
pub fn locate(pid: Pid, maps: &Maps) -> Option<Agent> {
    let first = maps
        .maps
        .iter()
        .find(|m| m.offset == 0 && glibc::is_agent(m.path.rsplit('/').next().unwrap_or(&m.path)))?;
    let data_of_file = read_regular(glibc::in_target(pid, &first.path), MAX_MODULE_FILE).ok()?;
    // One parse serves the symbols and the segments.
    let elf = ElfFile64::<object::Endianness>::parse(&*data_of_file).ok()?;
    let endian = elf.endian();
    let loads = || {
        elf.elf_program_headers()
            .iter()
            .filter(move |ph| ph.p_type(endian) == object::elf::PT_LOAD)
    };
    // Where the file's addresses land: its first mapping (file offset 0) holds its first
    // loadable segment.
    let base = loads()
        .next()
        .map(|ph| first.start.wrapping_sub(ph.p_vaddr(endian) & !0xfff))?;
    let find = |what: &str| {
        elf.symbols()
            .find(|s| s.name().is_ok_and(|n| n.contains(what)))
            .map(|s| base.wrapping_add(s.address()))
    };
    // Rust's mangled names: `heaptui_agent::own_memory::SLOTS` and `…::HIGH`.
    let slots = find("10own_memory5SLOTS")?;
    let high = find("10own_memory4HIGH")?;
    // Its writable segments, `.bss` included: the mappings, and the segments' whole extent.
    let mut data: Vec<Range<u64>> = maps
        .maps
        .iter()
        .filter(|m| m.path == first.path && m.writable)
        .map(|m| m.start..m.end)
        .collect();
    for ph in loads().filter(|ph| ph.p_flags(endian).contains(object::elf::PF_W)) {
        let start = base.wrapping_add(ph.p_vaddr(endian)) & !0xfff;
        let end = base
            .wrapping_add(ph.p_vaddr(endian) + ph.p_memsz(endian))
            .next_multiple_of(0x1000);
        data.push(start..end);
    }
    Some(Agent { data, slots, high })
}

impl Agent {
    /// The agent's memory as the copy shows it: its module data and every mapping its table
    /// records.
    pub fn memory(&self, image: &Image) -> Vec<Range<u64>> {
        let mut out = self.data.clone();
        let high = image.word(self.high).unwrap_or(0).min(1 << 20);
        for i in 0..high {
            // A slot is two words, `start` and `end`; 0 and 1 mark a free or claimed slot.
            let at = self.slots + 16 * i;
            let (Some(a), Some(b)) = (image.word(at), image.word(at + 8)) else {
                break;
            };
            if a > 1 && b > 1 && a != b {
                out.push(a.min(b)..a.max(b));
            }
        }
        out
    }
}
