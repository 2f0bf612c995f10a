//! Where glibc keeps its malloc state in a target process, and whether heaptui knows its layout.
//!
//! Owns finding, before the stop: the target's libc (from its memory map), its version, the
//! run-time addresses of `main_arena` and `mp_`, and the thread-pointer offset of each thread's
//! `tcache` pointer. These are static (file-local) symbols, so they come from glibc's debug
//! symbols (`libc6-dbg` on Debian, found by build id under `/usr/lib/debug/.build-id/`), or from
//! libc's own symbol table when it was not stripped. The `tcache` offset comes from the GOT
//! entry libc's own initial-exec TLS accesses use (its `R_X86_64_TPOFF64` relocation whose
//! addend is `tcache`'s offset in libc's TLS block): the loader wrote there exactly the offset
//! it chose, so nothing about the loader's TLS layout is guessed.
//!
//! The structure layouts ([`Layout`]) are those of glibc's `malloc/malloc.c` and
//! `malloc/arena.c` for x86-64 from 2.35 (when `heap_info` and `malloc_par` gained their huge
//! page fields) to 2.41; they were checked against the debug information of the glibc the test
//! suite runs on (Debian 12's 2.36) and against the sources of the other releases. Any other
//! version, or symbols whose sizes do not match the layout, is refused: guessing a layout would
//! report a wrong heap.
//!
//! Run on a real process: 2.36 by the tests, and 2.41 by hand (2026-11-28): Debian 13's `libc6`
//! and `libc6-dbg` 2.41-12+deb13u5 (from the Debian archive with `apt-get download`, a private
//! `sources.list` naming trixie), unpacked with `dpkg-deb -x` into a directory, the `arenas`
//! test program run with that glibc's own loader (`ld-linux-x86-64.so.2 --library-path …`) in a
//! mount namespace whose `/usr/lib/debug` is the unpacked one (`unshare -m` and a bind mount):
//! the test `the_blocks_of_several_arenas_…`'s checks held (every live block with its usable
//! size, no freed one, no warning) and every thread unwound through 2.41's libc with names. Not
//! part of the suite: it needs a download. 2.35 and 2.37 to 2.40 have been run on no process.
//!
//! Reads files and the target's read-only memory; never its writable memory (that is the
//! stop's), never writes.

use heaptui_capture::files::{MAX_MODULE_FILE, read_regular};
use std::path::PathBuf;

use nix::unistd::Pid;
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget, SymbolKind};

use super::maps::Maps;
use super::memory;

/// Byte offsets of the malloc structures heaptui reads (x86-64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `struct malloc_state`: the arena.
    pub arena_size: u64,
    pub arena_mutex: u64,
    pub arena_flags: u64,
    pub arena_fastbins: u64,
    pub fastbins: u64,
    pub arena_top: u64,
    pub arena_next: u64,
    /// `heap_info`, at the start of each heap of a non-main arena.
    pub heap_info_size: u64,
    pub heap_ar_ptr: u64,
    pub heap_prev: u64,
    pub heap_size: u64,
    /// The largest heap of a non-main arena, which is also the alignment of every heap.
    pub heap_max: u64,
    /// `struct malloc_par`, the global parameters `mp_`.
    pub par_size: u64,
    pub par_hp_pagesize: u64,
    pub par_n_mmaps: u64,
    pub par_mmapped_mem: u64,
    pub par_sbrk_base: u64,
    /// `tcache_perthread_struct`: `uint16_t counts[bins]`, then `tcache_entry *entries[bins]`.
    pub tcache_bins: u64,
    pub tcache_entries: u64,
    pub tcache_size: u64,
}

/// glibc 2.35 to 2.41 on x86-64 (module docs).
pub const LAYOUT_2_35: Layout = Layout {
    arena_size: 2200,
    arena_mutex: 0,
    arena_flags: 4,
    arena_fastbins: 16,
    fastbins: 10,
    arena_top: 96,
    arena_next: 2160,
    heap_info_size: 48,
    heap_ar_ptr: 0,
    heap_prev: 8,
    heap_size: 16,
    heap_max: 64 << 20,
    par_size: 136,
    par_hp_pagesize: 48,
    par_n_mmaps: 60,
    par_mmapped_mem: 80,
    par_sbrk_base: 96,
    tcache_bins: 64,
    tcache_entries: 128,
    tcache_size: 640,
};

/// The glibc minor versions (2.x) whose layout is [`LAYOUT_2_35`].
pub const KNOWN_VERSIONS: std::ops::RangeInclusive<u32> = 35..=41;

/// The malloc state of one target process, located before the stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glibc {
    /// `(2, minor)`.
    pub version: (u32, u32),
    pub layout: Layout,
    /// Run-time address of `main_arena`.
    pub main_arena: u64,
    /// Run-time address of `mp_`.
    pub mp: u64,
    /// Offset of each thread's `tcache` pointer from its thread pointer (`fs_base`).
    pub tcache_tpoff: i64,
    /// libc's path in the target.
    pub path: String,
    /// How far below the thread pointer each thread's static TLS reaches ([`static_tls`]).
    pub static_tls: u64,
}

/// Why glibc's malloc state cannot be located.
#[derive(Debug, PartialEq, Eq)]
pub enum GlibcError {
    /// The process has no `libc.so.6` mapped (statically linked, or not glibc).
    NoLibc,
    /// A module replaces malloc: `(module, why)`.
    OtherAllocator(String, String),
    /// libc's file could not be read.
    Unreadable(String, String),
    /// No symbols for the static variables of malloc: the libc path and its build id.
    NoSymbols(String, String),
    /// A glibc version whose layout heaptui does not know.
    UnknownVersion(String),
    /// A symbol or relocation is missing or has an unexpected size: what.
    UnknownLayout(String),
}

impl std::fmt::Display for GlibcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GlibcError::NoLibc => f.write_str(
                "it has no glibc libc.so.6 loaded (a static or non-glibc program): only glibc's \
                 malloc can be read from outside — start it with LD_PRELOAD=$(heaptui agent-path)",
            ),
            GlibcError::OtherAllocator(module, why) => write!(
                f,
                "its malloc is not glibc's ({module} {why}): only glibc's heap can be walked from \
                 outside — start it with LD_PRELOAD=$(heaptui agent-path)"
            ),
            GlibcError::Unreadable(path, e) => write!(f, "cannot read its libc {path}: {e}"),
            GlibcError::NoSymbols(path, id) => write!(
                f,
                "glibc's debug symbols for {path} (build id {id}) are not installed; they say \
                 where malloc keeps its state — install libc6-dbg (Debian, Ubuntu) or \
                 glibc-debuginfo (Fedora), or start the program with LD_PRELOAD=$(heaptui \
                 agent-path)"
            ),
            GlibcError::UnknownVersion(v) => write!(
                f,
                "its glibc is version {v}, whose malloc layout heaptui does not know (it knows \
                 2.{}..=2.{}); start it with LD_PRELOAD=$(heaptui agent-path)",
                KNOWN_VERSIONS.start(),
                KNOWN_VERSIONS.end()
            ),
            GlibcError::UnknownLayout(what) => write!(
                f,
                "its glibc does not have the malloc layout heaptui knows ({what}); start it with \
                 LD_PRELOAD=$(heaptui agent-path)"
            ),
        }
    }
}

impl std::error::Error for GlibcError {}

/// Allocators that replace glibc's malloc, by a piece of their library or symbol names.
const OTHER_ALLOCATORS: [&str; 7] = [
    "jemalloc", "tcmalloc", "mimalloc", "hoard", "rpmalloc", "snmalloc", "scudo",
];

/// Symbol prefixes of allocators linked into a program (Rust's `#[global_allocator]` crates,
/// statically linked C allocators).
const ALLOCATOR_SYMBOLS: [&str; 6] = [
    "_rjem_",
    "je_malloc",
    "mi_malloc",
    "tc_malloc",
    "rpmalloc",
    "sn_malloc",
];

/// The path of a file as the target sees it (its root may differ from ours: a container).
pub(super) fn in_target(pid: Pid, path: &str) -> PathBuf {
    let theirs = PathBuf::from(format!("/proc/{pid}/root{path}"));
    if theirs.exists() {
        theirs
    } else {
        PathBuf::from(path)
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Whether a module basename is glibc's libc.
fn is_libc(name: &str) -> bool {
    name == "libc.so.6" || (name.starts_with("libc-2.") && name.ends_with(".so"))
}

/// Whether a module basename is heaptui's own agent, whose `malloc` forwards to glibc's.
pub fn is_agent(name: &str) -> bool {
    name.starts_with("libheaptui_agent") || name.starts_with("heaptui-agent")
}

/// Refuses processes whose malloc is not glibc's: a known allocator library is loaded, or a
/// module other than libc, the loader and heaptui's agent defines `malloc`, or a module has
/// the symbols of a statically linked allocator.
pub fn check_allocator(pid: Pid, maps: &Maps) -> Result<(), GlibcError> {
    let mut seen: Vec<&str> = Vec::new();
    for m in &maps.maps {
        if m.inode == 0 || !m.path.starts_with('/') || seen.contains(&m.path.as_str()) {
            continue;
        }
        seen.push(&m.path);
        let name = basename(&m.path);
        if let Some(a) = OTHER_ALLOCATORS.iter().find(|a| name.contains(*a)) {
            return Err(GlibcError::OtherAllocator(
                m.path.clone(),
                format!("is {a}, loaded in the process"),
            ));
        }
        if is_libc(name) || name.starts_with("ld-linux") || is_agent(name) {
            continue;
        }
        let Ok(data) = read_regular(in_target(pid, &m.path), MAX_MODULE_FILE) else {
            continue;
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if sym.is_undefined() || sym.kind() != SymbolKind::Text {
                continue;
            }
            let Ok(sym_name) = sym.name() else { continue };
            if (sym_name == "malloc" && sym.is_global())
                || ALLOCATOR_SYMBOLS.iter().any(|p| sym_name.starts_with(p))
            {
                return Err(GlibcError::OtherAllocator(
                    m.path.clone(),
                    format!("defines {sym_name}"),
                ));
            }
        }
    }
    Ok(())
}

/// The debug file of a module with this build id, under the target's root or ours.
fn debug_file(pid: Pid, build_id: &[u8]) -> Option<PathBuf> {
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    if hex.len() < 3 {
        return None;
    }
    let rel = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    [in_target(pid, &rel), PathBuf::from(&rel)]
        .into_iter()
        .find(|p| p.exists())
}

/// A static symbol of libc: its value and size.
#[derive(Clone, Copy, Debug)]
struct Sym {
    value: u64,
    size: u64,
}

/// Looks the symbols malloc needs up in a symbol table (libc's own, or its debug file's).
fn find_symbols(file: &object::File<'_>) -> [Option<Sym>; 4] {
    let mut out = [None; 4];
    for sym in file.symbols() {
        let slot = match sym.name() {
            Ok("main_arena") if sym.kind() == SymbolKind::Data => 0,
            Ok("mp_") if sym.kind() == SymbolKind::Data => 1,
            Ok("tcache") if sym.kind() == SymbolKind::Tls => 2,
            Ok("__libc_version") => 3,
            _ => continue,
        };
        out[slot] = Some(Sym {
            value: sym.address(),
            size: sym.size(),
        });
    }
    out
}

/// Locates glibc's malloc state in process `pid` (see the module docs).
pub fn locate(pid: Pid, maps: &Maps) -> Result<Glibc, GlibcError> {
    // A static program defines malloc in its executable: it is refused as one without
    // libc.so.6, which is what it is, not as one with another allocator.
    let libc = maps
        .maps
        .iter()
        .find(|m| is_libc(basename(&m.path)) && m.offset == 0)
        .ok_or(GlibcError::NoLibc)?;
    check_allocator(pid, maps)?;
    let path = libc.path.clone();
    let bias = libc.start;
    let unreadable =
        |e: &dyn std::fmt::Display| GlibcError::Unreadable(path.clone(), e.to_string());
    let data = read_regular(in_target(pid, &path), MAX_MODULE_FILE).map_err(|e| unreadable(&e))?;
    let file = object::File::parse(&*data).map_err(|e| unreadable(&e))?;
    let build_id = file.build_id().ok().flatten().unwrap_or_default().to_vec();
    let id_hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let mut syms = find_symbols(&file);
    if syms[0].is_none() {
        let debug = debug_file(pid, &build_id)
            .ok_or_else(|| GlibcError::NoSymbols(path.clone(), id_hex.clone()))?;
        let debug_data = read_regular(&debug, MAX_MODULE_FILE).map_err(|e| unreadable(&e))?;
        let debug_file = object::File::parse(&*debug_data).map_err(|e| unreadable(&e))?;
        syms = find_symbols(&debug_file);
    }
    let [Some(main_arena), Some(mp), Some(tcache), version] = syms else {
        return Err(GlibcError::NoSymbols(path, id_hex));
    };
    let version = version
        .and_then(|v| file_bytes(&file, v.value, v.size))
        .map(|b| {
            String::from_utf8_lossy(b)
                .trim_end_matches('\0')
                .to_string()
        })
        .ok_or_else(|| GlibcError::UnknownLayout("no __libc_version".into()))?;
    let minor =
        parse_version(&version).ok_or_else(|| GlibcError::UnknownVersion(version.clone()))?;
    if !KNOWN_VERSIONS.contains(&minor) {
        return Err(GlibcError::UnknownVersion(version));
    }
    let layout = LAYOUT_2_35;
    if main_arena.size != layout.arena_size || mp.size != layout.par_size || tcache.size != 8 {
        return Err(GlibcError::UnknownLayout(format!(
            "main_arena is {} bytes, mp_ {}, tcache {}; expected {}, {} and 8",
            main_arena.size, mp.size, tcache.size, layout.arena_size, layout.par_size
        )));
    }
    let got = tpoff_slot(&file, tcache.value)
        .ok_or_else(|| GlibcError::UnknownLayout("no initial-exec TLS slot for tcache".into()))?;
    let tpoff = memory::read_exact(pid, bias + got, 8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default()))
        .ok_or_else(|| unreadable(&"its GOT cannot be read"))?;
    Ok(Glibc {
        version: (2, minor),
        layout,
        main_arena: bias + main_arena.value,
        mp: bias + mp.value,
        tcache_tpoff: tpoff,
        path,
        static_tls: static_tls(pid, maps),
    })
}

/// glibc's `TLS_STATIC_SURPLUS` (`elf/dl-tls.c`): the static TLS it reserves beyond the
/// modules loaded at start, for modules with initial-exec TLS loaded later.
const TLS_STATIC_SURPLUS: u64 = 1664;

/// How far below the thread pointer a thread's static TLS reaches: the `PT_TLS` blocks of the
/// loaded modules, each rounded to its alignment, plus glibc's surplus — the extent the agent
/// gives a thread's `<thread>` pseudo-frame too (docs/reference.md §3), so that the memory
/// below it (often another thread's stack) is not taken for this thread's.
pub fn static_tls(pid: Pid, maps: &Maps) -> u64 {
    let mut seen: Vec<&str> = Vec::new();
    let mut total = TLS_STATIC_SURPLUS;
    for m in &maps.maps {
        if m.inode == 0 || m.offset != 0 || !m.path.starts_with('/') || seen.contains(&&*m.path) {
            continue;
        }
        seen.push(&m.path);
        let Ok(data) = read_regular(in_target(pid, &m.path), MAX_MODULE_FILE) else {
            continue;
        };
        let Ok(elf) = ElfFile64::<object::Endianness>::parse(&*data) else {
            continue;
        };
        let endian = elf.endian();
        for ph in elf.elf_program_headers() {
            if ph.p_type(endian) == object::elf::PT_TLS {
                let align = ph.p_align(endian).max(1);
                total += ph.p_memsz(endian).div_ceil(align) * align;
            }
        }
    }
    total
}

/// The file bytes at link-time address `addr`.
fn file_bytes<'a>(file: &object::File<'a>, addr: u64, size: u64) -> Option<&'a [u8]> {
    file.sections()
        .find_map(|s| s.data_range(addr, size).ok().flatten())
}

/// The link-time address of the GOT slot that holds the thread-pointer offset of libc's TLS
/// variable at `tls_offset` (its `R_X86_64_TPOFF64` relocation without a symbol).
fn tpoff_slot(file: &object::File<'_>, tls_offset: u64) -> Option<u64> {
    file.dynamic_relocations()?.find_map(|(at, r)| {
        let object::RelocationFlags::Elf { r_type } = r.flags() else {
            return None;
        };
        (r_type == object::elf::R_X86_64_TPOFF64
            && matches!(r.target(), RelocationTarget::Absolute)
            && r.addend() as u64 == tls_offset)
            .then_some(at)
    })
}

/// The minor version of a glibc version string (`"2.36"` → 36).
fn parse_version(v: &str) -> Option<u32> {
    let rest = v.strip_prefix("2.")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse() {
        assert_eq!(parse_version("2.36"), Some(36));
        assert_eq!(parse_version("2.41.9000"), Some(41));
        assert_eq!(parse_version("3.0"), None);
    }

    #[test]
    fn this_process_has_a_glibc_heaptui_knows() {
        // The test binary runs on the very glibc the capture is validated on.
        let me = Pid::this();
        let maps = Maps::parse(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let g = locate(me, &maps).expect("glibc with its debug symbols (libc6-dbg)");
        assert!(KNOWN_VERSIONS.contains(&g.version.1));
        let libc = maps.maps.iter().find(|m| m.path == g.path).unwrap();
        assert!(g.main_arena > libc.start && g.mp > libc.start);
        // The tcache pointer lies in this thread's static TLS, below the thread pointer.
        assert!(
            g.tcache_tpoff < 0 && g.tcache_tpoff > -65536,
            "{}",
            g.tcache_tpoff
        );
    }
}
