//! Symbolization of frames and allocation sites: code address → function, module, kind, and
//! file:line when the module has DWARF line tables; with inline frames, one code address
//! becomes the chain of inlined calls it sits in, each with its own line (docs/reference.md §3
//! "Labels").
//!
//! Owns: reading each module's `.symtab` and `.dynsym` from its file on disk (ELF64 parsed by
//! hand: only the section and symbol tables and two notes are needed), finding a module's
//! separate debug file (`/usr/lib/debug/.build-id/xx/rest.debug`, then `.gnu_debuglink`),
//! demangling C++ (cpp_demangle) and Rust (rustc-demangle) names, `dladdr` for modules without
//! a file (the vDSO), and line and inline lookups with addr2line (one loader per module per
//! capture).
//!
//! Runs only after the world has been resumed: it reads files and allocates freely. Symbol
//! tables are cached by module path for the life of the agent.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Arc, Mutex, OnceLock};

use heaptui_analysis::FrameKind;

use super::modules::AddressSpace;
use crate::sync::PerProcess;

/// A function symbol: link-time address, size, mangled name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Symbol {
    addr: u64,
    size: u64,
    name: String,
}

/// The function symbols of one ELF file, sorted by address.
#[derive(Debug, Default)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const SHT_NOBITS: u32 = 8;

/// The contents of the section named `name` of an ELF64 little-endian image.
fn section<'e>(elf: &'e [u8], name: &str) -> Option<&'e [u8]> {
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return None;
    }
    let shoff = u64_at(elf, 0x28)? as usize;
    let shentsize = u16_at(elf, 0x3a)? as usize;
    let shnum = u16_at(elf, 0x3c)? as usize;
    let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let names_at = header(u16_at(elf, 0x3e)? as usize)?;
    let names_off = u64_at(elf, names_at + 24)? as usize;
    for i in 0..shnum {
        let at = header(i)?;
        let name_off = names_off.checked_add(u32_at(elf, at)? as usize)?;
        let this = CStr::from_bytes_until_nul(elf.get(name_off..)?).ok()?;
        if this.to_bytes() == name.as_bytes() && u32_at(elf, at + 4)? != SHT_NOBITS {
            let off = u64_at(elf, at + 24)? as usize;
            let size = u64_at(elf, at + 32)? as usize;
            return elf.get(off..off.checked_add(size)?);
        }
    }
    None
}

/// The GNU build id of an ELF image, in hex.
fn build_id(elf: &[u8]) -> Option<String> {
    let note = section(elf, ".note.gnu.build-id")?;
    let name_size = u32_at(note, 0)? as usize;
    let desc_size = u32_at(note, 4)? as usize;
    let desc_at = 12 + name_size.next_multiple_of(4);
    let id = note.get(desc_at..desc_at + desc_size)?;
    (!id.is_empty()).then(|| id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Where debuggers look for the debug file of the module at `path` whose image is `elf`, in
/// their order: by build id under `/usr/lib/debug/.build-id/`, then the `.gnu_debuglink` name
/// next to the module, in its `.debug/` directory and under `/usr/lib/debug/` (a debuglink
/// file must carry the CRC-32 the link names).
fn debug_file(path: &str, elf: &[u8]) -> Option<String> {
    const ROOT: &str = "/usr/lib/debug";
    if let Some(id) = build_id(elf).filter(|id| id.len() > 2) {
        let candidate = format!("{ROOT}/.build-id/{}/{}.debug", &id[..2], &id[2..]);
        if std::path::Path::new(&candidate).is_file() {
            return Some(candidate);
        }
    }
    let link = section(elf, ".gnu_debuglink")?;
    let name = CStr::from_bytes_until_nul(link).ok()?.to_str().ok()?;
    let crc_at = (name.len() + 1).next_multiple_of(4);
    let crc = u32_at(link, crc_at)?;
    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
    [
        format!("{dir}/{name}"),
        format!("{dir}/.debug/{name}"),
        format!("{ROOT}{dir}/{name}"),
    ]
    .into_iter()
    .filter(|candidate| candidate != path)
    .find(|candidate| std::fs::read(candidate).is_ok_and(|bytes| crc32fast::hash(&bytes) == crc))
}

impl SymbolTable {
    /// Parses the function symbols of an ELF64 little-endian image; anything else gives an
    /// empty table.
    pub fn parse(elf: &[u8]) -> SymbolTable {
        let mut symbols = Vec::new();
        if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
            return SymbolTable::default();
        }
        let (Some(shoff), Some(shentsize), Some(shnum)) =
            (u64_at(elf, 0x28), u16_at(elf, 0x3a), u16_at(elf, 0x3c))
        else {
            return SymbolTable::default();
        };
        let section = |i: usize| -> Option<(u32, u64, u64, u32, u64)> {
            let at = (shoff as usize).checked_add(i.checked_mul(shentsize as usize)?)?;
            Some((
                u32_at(elf, at + 4)?,
                u64_at(elf, at + 24)?,
                u64_at(elf, at + 32)?,
                u32_at(elf, at + 40)?,
                u64_at(elf, at + 56)?,
            ))
        };
        for i in 0..shnum as usize {
            let Some((kind, offset, size, link, entsize)) = section(i) else {
                continue;
            };
            if (kind != SHT_SYMTAB && kind != SHT_DYNSYM) || entsize < 24 {
                continue;
            }
            let Some((_, str_off, str_size, _, _)) = section(link as usize) else {
                continue;
            };
            let Some(strtab) = elf.get(str_off as usize..(str_off + str_size) as usize) else {
                continue;
            };
            let count = size / entsize;
            for k in 0..count {
                let at = (offset + k * entsize) as usize;
                let (Some(name), Some(&info), Some(shndx), Some(value), Some(sz)) = (
                    u32_at(elf, at),
                    elf.get(at + 4),
                    u16_at(elf, at + 6),
                    u64_at(elf, at + 8),
                    u64_at(elf, at + 16),
                ) else {
                    break;
                };
                let t = info & 0xf;
                if (t != STT_FUNC && t != STT_GNU_IFUNC) || shndx == 0 || value == 0 {
                    continue;
                }
                let Some(bytes) = strtab.get(name as usize..) else {
                    continue;
                };
                let Ok(cname) = CStr::from_bytes_until_nul(bytes) else {
                    continue;
                };
                symbols.push(Symbol {
                    addr: value,
                    size: sz,
                    name: cname.to_string_lossy().into_owned(),
                });
            }
        }
        SymbolTable::sorted(symbols)
    }

    /// Keeps one name per address: a sized one, then the one with the fewest leading
    /// underscores, as debuggers show it (`clone3` rather than `__clone3` or
    /// `__GI___clone3`, `malloc` rather than `__libc_malloc`).
    fn sorted(mut symbols: Vec<Symbol>) -> SymbolTable {
        let underscores = |s: &Symbol| s.name.bytes().take_while(|&b| b == b'_').count();
        symbols.sort_by(|a, b| {
            a.addr
                .cmp(&b.addr)
                .then(b.size.cmp(&a.size))
                .then(underscores(a).cmp(&underscores(b)))
        });
        symbols.dedup_by_key(|s| s.addr);
        SymbolTable { symbols }
    }

    /// This table with the symbols of `other` (a module's debug file: its `.symtab` names
    /// the local functions a stripped module's `.dynsym` lacks, such as libc's
    /// `start_thread`).
    fn merged(self, other: SymbolTable) -> SymbolTable {
        let mut symbols = self.symbols;
        symbols.extend(other.symbols);
        SymbolTable::sorted(symbols)
    }

    /// The symbol containing the link-time address `addr`.
    fn find(&self, addr: u64) -> Option<&Symbol> {
        let i = self
            .symbols
            .partition_point(|s| s.addr <= addr)
            .checked_sub(1)?;
        let s = &self.symbols[i];
        let end = if s.size > 0 {
            s.addr + s.size
        } else {
            self.symbols.get(i + 1).map_or(u64::MAX, |n| n.addr)
        };
        (addr < end).then_some(s)
    }
}

/// Demangles a Rust (legacy or v0) or C++ symbol; other names are returned as they are.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return format!("{d:#}");
    }
    if name.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(name)
        && let Ok(d) = sym.demangle(&cpp_demangle::DemangleOptions::default())
    {
        return d;
    }
    name.to_string()
}

/// What is read once per module file: its symbols (with its debug file's) and where its
/// DWARF is.
#[derive(Debug, Default)]
struct ModuleFile {
    symbols: SymbolTable,
    /// The separate debug file, when there is one; else the module's own DWARF, if any.
    debug: Option<String>,
}

/// The module files read so far, by path.
type Files = Mutex<HashMap<String, Arc<ModuleFile>>>;

static FILES: PerProcess<OnceLock<Files>> = PerProcess::new(OnceLock::new());

fn files() -> &'static Files {
    FILES.get_or_init(Default::default)
}

/// In a fork child that serves (`HEAPTUI_FOLLOW_FORK`): the parent's cache when its lock was
/// free at the fork (the files are the same, and reading them again costs each child's first
/// capture most of its time), else an empty one (the lock's holder is a thread the child does
/// not have).
pub fn renew_in_child() {
    let free = FILES.get().is_none_or(|files| files.try_lock().is_ok());
    if !free {
        FILES.renew(OnceLock::new());
    }
}

/// The symbols and debug file of the module at `path`, read once and cached.
fn file_for(path: &str) -> Arc<ModuleFile> {
    let mut map = files().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = map.get(path) {
        return t.clone();
    }
    let file = Arc::new(match std::fs::read(path) {
        Ok(bytes) => {
            let debug = debug_file(path, &bytes);
            let own = SymbolTable::parse(&bytes);
            let symbols = match debug.as_deref().map(std::fs::read) {
                Some(Ok(debug_bytes)) => own.merged(SymbolTable::parse(&debug_bytes)),
                _ => own,
            };
            ModuleFile { symbols, debug }
        }
        Err(_) => ModuleFile::default(),
    });
    map.insert(path.to_string(), file.clone());
    file
}

/// A symbolized code address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbolized {
    pub function: String,
    pub module: String,
    pub kind: FrameKind,
    /// Whether the address is in the agent itself.
    pub agent: bool,
    /// `file:line` (file name only) when the module has line tables for the address.
    pub location: Option<String>,
}

/// Symbolizes addresses of one address space, memoizing each address.
pub struct Symbolizer<'a> {
    space: &'a AddressSpace,
    /// Each looked-up address's chain of frames, innermost (inlined) first.
    memo: HashMap<u64, Vec<Symbolized>>,
    /// DWARF loaders by module path (None: no file or no usable debug info).
    lines: HashMap<String, Option<addr2line::Loader>>,
}

/// One frame of an address's inline chain as DWARF gives it.
struct DwarfFrame {
    function: Option<String>,
    location: Option<String>,
}

impl<'a> Symbolizer<'a> {
    pub fn new(space: &'a AddressSpace) -> Symbolizer<'a> {
        Symbolizer {
            space,
            memo: HashMap::new(),
            lines: HashMap::new(),
        }
    }

    /// Symbolizes a code address as the function that contains it, with the line of the
    /// address in that function (for an inlined call, the line of the call). `exact` is
    /// false for return addresses, which are looked up one byte back so that a call at the
    /// very end of a function names that function.
    pub fn symbolize(&mut self, pc: u64, exact: bool) -> Symbolized {
        let chain = self.symbolize_inlined(pc, exact);
        chain.last().cloned().expect("a chain has its function")
    }

    /// Symbolizes a code address as the chain of calls it sits in: the functions inlined
    /// there, innermost first, each with its own line, then the function that contains them
    /// (what [`symbolize`](Self::symbolize) returns) with the line of the outermost inlined
    /// call. Without DWARF the chain is that function alone.
    pub fn symbolize_inlined(&mut self, pc: u64, exact: bool) -> &[Symbolized] {
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        if !self.memo.contains_key(&lookup) {
            let chain = self.resolve(lookup);
            self.memo.insert(lookup, chain);
        }
        &self.memo[&lookup]
    }

    /// The inline chain DWARF gives for a link-time address in the module at `path`,
    /// innermost first; empty without DWARF for it.
    fn dwarf_frames(&mut self, path: &str, debug: Option<&str>, addr: u64) -> Vec<DwarfFrame> {
        let loader = self.lines.entry(path.to_string()).or_insert_with(|| {
            let dwarf = debug.unwrap_or(path);
            dwarf
                .starts_with('/')
                .then(|| addr2line::Loader::new(dwarf).ok())
                .flatten()
        });
        let Some(loader) = loader.as_ref() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Ok(mut frames) = loader.find_frames(addr) {
            while let Ok(Some(frame)) = frames.next() {
                let function = frame
                    .function
                    .as_ref()
                    .and_then(|f| f.raw_name().ok())
                    .map(|name| demangle(&name));
                out.push(DwarfFrame {
                    function,
                    location: frame.location.as_ref().and_then(location_text),
                });
            }
        }
        if out.is_empty()
            && let Ok(Some(location)) = loader.find_location(addr)
        {
            out.push(DwarfFrame {
                function: None,
                location: location_text(&location),
            });
        }
        out
    }

    fn resolve(&mut self, pc: u64) -> Vec<Symbolized> {
        // `space` outlives `self`: modules borrowed from it leave `self` free to update.
        let space: &'a AddressSpace = self.space;
        let Some(m) = space.module_for_pc(pc) else {
            return vec![Symbolized {
                function: format!("{pc:#x}"),
                module: "?".into(),
                kind: FrameKind::User,
                agent: false,
                location: None,
            }];
        };
        let file = if m.path.starts_with('/') {
            file_for(&m.path)
        } else {
            Arc::new(ModuleFile::default())
        };
        let addr = pc.wrapping_sub(m.bias);
        let name = file
            .symbols
            .find(addr)
            .map(|s| demangle(&s.name))
            .or_else(|| dladdr_name(pc))
            .unwrap_or_else(|| format!("{}+{:#x}", m.name, addr));
        let frame = |function: String, location: Option<String>| Symbolized {
            function,
            module: m.name.clone(),
            kind: m.kind,
            agent: m.is_agent,
            location,
        };
        // The agent's and the system libraries' DWARF is not worth its loading time: their
        // frames are named by their symbols (a debug file's included) and not by line.
        if m.kind != FrameKind::User {
            return vec![frame(name, None)];
        }
        let mut dwarf = self.dwarf_frames(&m.path, file.debug.as_deref(), addr);
        // The outermost DWARF frame is the function that contains the address: the symbol
        // table names it (as every other frame of a thread is named), DWARF gives its line.
        let outer = dwarf
            .pop()
            .map_or(frame(name.clone(), None), |d| frame(name, d.location));
        let mut chain: Vec<Symbolized> = dwarf
            .into_iter()
            .map(|d| frame(d.function.unwrap_or_else(|| "?".into()), d.location))
            .collect();
        chain.push(outer);
        chain
    }
}

/// `file:line` (the file name only) of a DWARF location.
fn location_text(loc: &addr2line::Location<'_>) -> Option<String> {
    let file = loc.file?;
    let name = file.rsplit('/').next().unwrap_or(file);
    Some(match loc.line {
        Some(line) => format!("{name}:{line}"),
        None => name.to_string(),
    })
}

/// The dynamic symbol `dladdr` finds for `pc`, demangled.
fn dladdr_name(pc: u64) -> Option<String> {
    // SAFETY: Dl_info is plain data; dladdr fills it for any address (or returns 0).
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads loader structures; called outside the stop window.
    if unsafe { libc::dladdr(pc as *const libc::c_void, &mut info) } == 0
        || info.dli_sname.is_null()
    {
        return None;
    }
    // SAFETY: a non-null dli_sname is a NUL-terminated string in the module's string table.
    let name = unsafe { CStr::from_ptr(info.dli_sname) }.to_string_lossy();
    Some(demangle(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn a_function_with_a_name() -> u64 {
        std::hint::black_box(a_function_with_a_name as *const () as u64)
    }

    #[test]
    fn rust_cpp_and_plain_names_demangle() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
    }

    #[test]
    fn own_functions_and_libc_resolve_to_names_and_kinds() {
        let space = AddressSpace::load();
        let mut s = Symbolizer::new(&space);
        let me = s.symbolize(a_function_with_a_name() + 1, true);
        assert!(
            me.function.ends_with("a_function_with_a_name"),
            "{}",
            me.function
        );
        assert!(me.agent);
        assert_eq!(me.kind, FrameKind::System);
        let getpid = s.symbolize(libc::getpid as *const () as u64, true);
        assert_eq!(getpid.kind, FrameKind::System);
        assert!(getpid.module.starts_with("libc.so"), "{}", getpid.module);
        assert!(getpid.function.contains("getpid"), "{}", getpid.function);
    }
}
