//! The loaded modules and the process's memory map, read before every stop.
//!
//! Owns: the list of loaded ELF modules (from `dl_iterate_phdr`) with what the capture needs
//! of each — load bias, executable ranges, writable data minus RELRO (the globals root), TLS
//! sizes and the in-memory `.eh_frame_hdr`/`.eh_frame` — and a copy of `/proc/self/maps`, so
//! that every range the capture reads can be clamped to mapped, readable memory.
//!
//! Must never be built while the world is stopped: `dl_iterate_phdr` takes the loader lock
//! and reading `/proc` allocates. Built before the stop, it is then only read.

use std::ffi::CStr;
use std::ops::Range;

use heaptui_analysis::FrameKind;
use heaptui_capture::unwind::{self, EhInfo, Mapped, ModuleView, Space, is_system_name};

const PT_LOAD: u32 = 1;
const PT_TLS: u32 = 7;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const PF_X: u32 = 1;
const PF_W: u32 = 2;

/// A memory slice of a loaded module, valid as long as the module stays loaded (the module
/// list is rebuilt before every capture, outside the stop window).
pub type Bytes = unwind::Bytes<'static>;

/// One loaded ELF object.
pub struct Module {
    /// Path as the loader knows it (the executable's own path for the main program).
    pub path: String,
    /// Last path component, what frames show as their module.
    pub name: String,
    /// Load bias: run-time address minus link-time address.
    pub bias: u64,
    /// Executable PT_LOAD segments, run-time addresses.
    pub text: Vec<Range<u64>>,
    /// Writable PT_LOAD segments minus PT_GNU_RELRO: this module's share of the globals root.
    pub writable: Vec<Range<u64>>,
    /// PT_TLS memory size and alignment (0 when the module has no TLS).
    pub tls_size: u64,
    pub tls_align: u64,
    /// Run-time address range of the module's `.eh_frame_hdr`, when it has one.
    pub eh_frame_hdr: Option<Range<u64>>,
    pub kind: FrameKind,
    /// Whether this is the agent itself (its data is never a root: it holds no target pointers
    /// that matter, only bookkeeping).
    pub is_agent: bool,
    /// The unwind tables, parsed in place from the mapped `.eh_frame_hdr`.
    pub eh: Option<EhInfo<'static>>,
}

impl Module {
    pub fn contains_text(&self, pc: u64) -> bool {
        self.text.iter().any(|r| r.contains(&pc))
    }
}

/// One line of `/proc/self/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
    /// `MAP_SHARED` (`s` in the permissions): its pages are shared with other mappings.
    pub shared: bool,
    pub path: String,
}

/// Everything the capture knows about the address space, fixed before the stop.
pub struct AddressSpace {
    pub modules: Vec<Module>,
    /// Sorted by start, non-overlapping (as the kernel prints them).
    pub maps: Vec<Mapping>,
    /// Sum of every module's PT_TLS size (each rounded to its alignment) plus glibc's static
    /// TLS surplus: how far below the thread pointer static TLS may reach.
    pub static_tls: u64,
}

/// glibc reserves this much static TLS beyond the initial modules' needs (for dlopen'ed
/// modules with initial-exec TLS); `TLS_STATIC_SURPLUS` in `dl-tls.c`.
const TLS_STATIC_SURPLUS: u64 = 1664;

/// Subtracts `hole` from every range of `ranges`.
fn subtract(ranges: &[Range<u64>], hole: &Range<u64>) -> Vec<Range<u64>> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges {
        if hole.end <= r.start || hole.start >= r.end {
            out.push(r.clone());
            continue;
        }
        if r.start < hole.start {
            out.push(r.start..hole.start);
        }
        if hole.end < r.end {
            out.push(hole.end..r.end);
        }
    }
    out
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Parses `/proc/self/maps` text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut maps = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
            continue;
        };
        // offset, dev, inode, then the optional path (which may contain spaces).
        let path = fields.nth(3).map(|first| {
            let at = line.find(first).unwrap_or(line.len());
            line[at..].to_string()
        });
        let perms = perms.as_bytes();
        maps.push(Mapping {
            start,
            end,
            readable: perms.first() == Some(&b'r'),
            writable: perms.get(1) == Some(&b'w'),
            shared: perms.get(3) == Some(&b's'),
            path: path.unwrap_or_default(),
        });
    }
    maps.sort_by_key(|m| m.start);
    maps
}

struct Collect {
    modules: Vec<Module>,
    agent_pc: u64,
    exe: String,
}

unsafe extern "C" fn phdr_callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the `Collect` passed by `AddressSpace::load`, exclusively ours for
    // the duration of dl_iterate_phdr; `info` is valid for this call (loader contract).
    let (collect, info) = unsafe { (&mut *(data as *mut Collect), &*info) };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the loader guarantees `dlpi_phdr` points at `dlpi_phnum` headers.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let path = if info.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null dlpi_name is a NUL-terminated string owned by the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        collect
            .modules
            .push(module_from_phdrs(info.dlpi_addr, path, phdrs, collect));
    }));
    let _ = result;
    0
}

fn module_from_phdrs(bias: u64, path: String, phdrs: &[libc::Elf64_Phdr], c: &Collect) -> Module {
    let mut text = Vec::new();
    let mut writable = Vec::new();
    let mut relro = Vec::new();
    let mut tls_size = 0;
    let mut tls_align = 1;
    let mut eh_frame_hdr = None;
    for ph in phdrs {
        let start = bias.wrapping_add(ph.p_vaddr);
        let range = start..start + ph.p_memsz;
        match ph.p_type {
            PT_LOAD if ph.p_flags & PF_X != 0 => text.push(range),
            PT_LOAD if ph.p_flags & PF_W != 0 => writable.push(range),
            PT_GNU_RELRO => relro.push(range),
            PT_TLS => {
                tls_size = ph.p_memsz;
                tls_align = ph.p_align.max(1);
            }
            PT_GNU_EH_FRAME => eh_frame_hdr = Some(range),
            _ => {}
        }
    }
    for hole in &relro {
        // RELRO is made read-only after relocation and holds no heap pointers the program
        // can change; it rounds to whole pages in the loader, so do the same here.
        let page = 4096;
        let hole = hole.start & !(page - 1)..(hole.end + page - 1) & !(page - 1);
        writable = subtract(&writable, &hole);
    }
    let is_main = path.is_empty() && !text.is_empty() && c.modules.is_empty();
    let path = if is_main { c.exe.clone() } else { path };
    let name = basename(&path).to_string();
    let is_agent = text.iter().any(|r| r.contains(&c.agent_pc));
    let kind = if is_agent || is_system_name(&name) {
        FrameKind::System
    } else {
        FrameKind::User
    };
    Module {
        path,
        name,
        bias,
        text,
        writable,
        tls_size,
        tls_align,
        eh_frame_hdr,
        kind,
        is_agent,
        eh: None,
    }
}

impl AddressSpace {
    /// Reads the module list and the memory map. Allocates and takes the loader lock: call
    /// it before stopping the world, never while stopped.
    pub fn load() -> AddressSpace {
        let maps = std::fs::read_to_string("/proc/self/maps")
            .map(|t| parse_maps(&t))
            .unwrap_or_default();
        let exe = std::fs::read_link("/proc/self/exe")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut collect = Collect {
            modules: Vec::new(),
            agent_pc: AddressSpace::load as *const () as u64,
            exe,
        };
        // SAFETY: the callback only touches `collect` through the pointer we pass and the
        // `info` the loader gives it; it never unwinds (catch_unwind).
        unsafe {
            libc::dl_iterate_phdr(
                Some(phdr_callback),
                &mut collect as *mut Collect as *mut libc::c_void,
            );
        }
        let mut space = AddressSpace {
            modules: collect.modules,
            maps,
            static_tls: 0,
        };
        space.static_tls = space
            .modules
            .iter()
            .map(|m| m.tls_size.div_ceil(m.tls_align) * m.tls_align)
            .sum::<u64>()
            + TLS_STATIC_SURPLUS;
        for i in 0..space.modules.len() {
            let eh = space.modules[i]
                .eh_frame_hdr
                .clone()
                .and_then(|hdr| space.parse_eh(&space.modules[i], hdr));
            space.modules[i].eh = eh;
        }
        space
    }

    /// The mapping containing `addr`.
    pub fn mapping(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.end <= addr);
        self.maps.get(i).filter(|m| m.start <= addr)
    }

    /// Whether the 8 bytes at `addr` are mapped and readable.
    pub fn readable_word(&self, addr: u64) -> bool {
        addr.is_multiple_of(8) && self.mapping(addr).is_some_and(|m| m.readable)
    }

    /// Reads the word at `addr` when it is mapped and readable.
    pub fn read_word(&self, addr: u64) -> Option<u64> {
        if !self.readable_word(addr) {
            return None;
        }
        // SAFETY: the address is 8-aligned and lies in a readable mapping of this process
        // (and an aligned word never straddles two pages).
        Some(unsafe { std::ptr::read_volatile(addr as *const u64) })
    }

    /// The parts of `range` that lie in readable mappings, as 8-aligned ranges.
    pub fn clamp(&self, range: Range<u64>) -> Vec<Range<u64>> {
        clamp_to(&self.maps, range)
    }

    /// The module whose executable segments contain `pc`.
    pub fn module_for_pc(&self, pc: u64) -> Option<&Module> {
        self.modules.iter().find(|m| m.contains_text(pc))
    }

    /// Index of the module whose executable segments contain `pc`.
    pub fn module_index(&self, pc: u64) -> Option<usize> {
        self.modules.iter().position(|m| m.contains_text(pc))
    }

    /// The globals root: writable data of every module but the agent, clamped to readable
    /// memory. Each range says whether it is libc's (whose malloc state points at chunk
    /// headers, see `scan::Collector::allocator_word`).
    pub fn globals(&self) -> Vec<(Range<u64>, bool)> {
        let mut out = Vec::new();
        for m in self.modules.iter().filter(|m| !m.is_agent) {
            let libc = m.name.starts_with("libc.so");
            for r in &m.writable {
                out.extend(self.clamp(r.clone()).into_iter().map(|r| (r, libc)));
            }
        }
        out
    }

    /// A `'static` slice over mapped memory `[start, end)`, clamped to the readable mapping
    /// containing `start`.
    fn slice_in_mapping(&self, start: u64, end: Option<u64>) -> Option<&'static [u8]> {
        let m = self.mapping(start).filter(|m| m.readable)?;
        let end = end.unwrap_or(m.end).min(m.end);
        if end <= start {
            return None;
        }
        // SAFETY: `[start, end)` lies inside one readable mapping of a loaded module, which
        // stays mapped until the module is unloaded; the module list is rebuilt before each
        // capture, so the slice is never used after a dlclose of its module is observed.
        Some(unsafe { std::slice::from_raw_parts(start as *const u8, (end - start) as usize) })
    }

    fn parse_eh(&self, m: &Module, hdr: Range<u64>) -> Option<EhInfo<'static>> {
        let hdr_bytes = self.slice_in_mapping(hdr.start, Some(hdr.end))?;
        let text_start = m.text.first().map_or(0, |r| r.start);
        EhInfo::parse(
            hdr_bytes,
            hdr.start,
            text_start,
            |at| self.slice_in_mapping(at, None),
            |p| self.read_word(p),
        )
    }
}

/// The unwinder's view: this process's own memory, checked against the map read before the
/// stop, and the tables the loader mapped.
impl Space for AddressSpace {
    fn mapping(&self, addr: u64) -> Option<Mapped> {
        AddressSpace::mapping(self, addr).map(|m| Mapped {
            end: m.end,
            readable: m.readable,
        })
    }

    fn read_word(&self, addr: u64) -> Option<u64> {
        AddressSpace::read_word(self, addr)
    }

    fn read_code(&self, at: u64, buf: &mut [u8]) -> bool {
        let m = AddressSpace::mapping(self, at);
        let Some(end) = at.checked_add(buf.len() as u64) else {
            return false;
        };
        if !m.is_some_and(|m| m.readable && end <= m.end) || self.module_for_pc(at).is_none() {
            return false;
        }
        // SAFETY: the bytes lie inside one readable mapping of a loaded module's text.
        let code = unsafe { std::slice::from_raw_parts(at as *const u8, buf.len()) };
        buf.copy_from_slice(code);
        true
    }

    fn clamp(&self, range: Range<u64>) -> Vec<Range<u64>> {
        AddressSpace::clamp(self, range)
    }

    fn module_for_pc(&self, pc: u64) -> Option<ModuleView<'_>> {
        AddressSpace::module_for_pc(self, pc).map(|m| ModuleView {
            is_agent: m.is_agent,
            is_system: m.kind == FrameKind::System,
            eh: m.eh.as_ref(),
        })
    }

    fn static_tls(&self) -> u64 {
        self.static_tls
    }
}

/// The parts of `range` that lie in readable mappings of `maps` (sorted), as 8-aligned ranges.
pub fn clamp_to(maps: &[Mapping], range: Range<u64>) -> Vec<Range<u64>> {
    heaptui_capture::ranges::readable_parts(maps, |m| (m.start..m.end, m.readable), range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_parsed_with_paths_and_permissions() {
        let text = "\
7f0000000000-7f0000001000 r-xp 00000000 08:01 42   /usr/lib/libc.so.6
7f0000002000-7f0000003000 ---p 00000000 00:00 0
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[0].path, "/usr/lib/libc.so.6");
        assert!(maps[0].readable && !maps[0].writable);
        assert!(!maps[1].readable);
        assert_eq!(maps[1].path, "");
        assert_eq!(maps[2].path, "[stack]");
        assert!(maps[2].writable);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn subtracting_relro_splits_writable_ranges() {
        assert_eq!(subtract(&[0..100], &(20..30)), vec![0..20, 30..100]);
        assert_eq!(subtract(&[0..100], &(0..30)), vec![30..100]);
        assert_eq!(subtract(&[0..100], &(200..300)), vec![0..100]);
        assert_eq!(subtract(&[0..100], &(0..100)), Vec::<Range<u64>>::new());
    }

    #[test]
    fn the_live_address_space_has_modules_tables_and_globals() {
        let space = AddressSpace::load();
        let here = AddressSpace::load as *const () as u64;
        let me = space.module_for_pc(here).expect("this code is in a module");
        assert!(me.is_agent);
        assert_eq!(me.kind, FrameKind::System);
        assert!(me.eh.is_some(), "{} has unwind tables", me.name);
        let libc = space
            .modules
            .iter()
            .find(|m| m.name.starts_with("libc.so"))
            .expect("libc is loaded");
        assert_eq!(libc.kind, FrameKind::System);
        assert!(!libc.writable.is_empty());
        // A global of this test binary is inside the globals root (agent excluded: the test
        // binary is itself the agent here, so check libc's data instead).
        let globals = space.globals();
        assert!(
            globals
                .iter()
                .any(|(g, is_libc)| *is_libc && libc.writable.iter().any(|w| w.contains(&g.start)))
        );
        // The current stack is mapped and readable.
        let local = 0u64;
        let addr = &local as *const u64 as u64;
        assert!(space.readable_word(addr));
        assert_eq!(space.clamp(addr..addr + 8), vec![addr..addr + 8]);
    }
}
