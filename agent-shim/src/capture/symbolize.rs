//! Symbolization of frames and allocation sites: code address → function, module, kind, and
//! file:line when the module has DWARF line tables.
//!
//! Owns: reading each module's `.symtab` and `.dynsym` from its file on disk (ELF64 parsed by
//! hand: only the section and symbol tables are needed), demangling C++ (cpp_demangle) and
//! Rust (rustc-demangle) names, `dladdr` for modules without a file (the vDSO), and line
//! lookups with addr2line (one loader per module per capture).
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
        // Prefer sized, global-looking names when two symbols share an address.
        symbols.sort_by(|a, b| a.addr.cmp(&b.addr).then(b.size.cmp(&a.size)));
        symbols.dedup_by_key(|s| s.addr);
        SymbolTable { symbols }
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

/// The symbol tables read so far, by file path.
type Tables = Mutex<HashMap<String, Arc<SymbolTable>>>;

static TABLES: PerProcess<OnceLock<Tables>> = PerProcess::new(OnceLock::new());

fn tables() -> &'static Tables {
    TABLES.get_or_init(Default::default)
}

/// In a fork child that serves (`HEAPTUI_FOLLOW_FORK`): the parent's cache when its lock was
/// free at the fork (the tables are the same files, and reading them again costs each child's
/// first capture most of its time), else an empty one (the lock's holder is a thread the
/// child does not have).
pub fn renew_in_child() {
    let free = TABLES.get().is_none_or(|tables| tables.try_lock().is_ok());
    if !free {
        TABLES.renew(OnceLock::new());
    }
}

/// The symbol table of the file at `path`, read once and cached.
fn table_for(path: &str) -> Arc<SymbolTable> {
    let mut map = tables().lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = map.get(path) {
        return t.clone();
    }
    let table = Arc::new(
        std::fs::read(path)
            .map(|bytes| SymbolTable::parse(&bytes))
            .unwrap_or_default(),
    );
    map.insert(path.to_string(), table.clone());
    table
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
    memo: HashMap<u64, Symbolized>,
    /// Line-table loaders by module path (None: no file or no usable debug info).
    lines: HashMap<String, Option<addr2line::Loader>>,
}

impl<'a> Symbolizer<'a> {
    pub fn new(space: &'a AddressSpace) -> Symbolizer<'a> {
        Symbolizer {
            space,
            memo: HashMap::new(),
            lines: HashMap::new(),
        }
    }

    /// Symbolizes a code address. `exact` is false for return addresses, which are looked up
    /// one byte back so that a call at the very end of a function names that function.
    pub fn symbolize(&mut self, pc: u64, exact: bool) -> Symbolized {
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        if let Some(s) = self.memo.get(&lookup) {
            return s.clone();
        }
        let s = self.resolve(lookup);
        self.memo.insert(lookup, s.clone());
        s
    }

    /// `file:line` of a link-time address in the module at `path`.
    fn line(&mut self, path: &str, addr: u64) -> Option<String> {
        let loader = self
            .lines
            .entry(path.to_string())
            .or_insert_with(|| {
                path.starts_with('/')
                    .then(|| addr2line::Loader::new(path).ok())
                    .flatten()
            })
            .as_ref()?;
        let loc = loader.find_location(addr).ok()??;
        let file = loc.file?;
        let name = file.rsplit('/').next().unwrap_or(file);
        Some(match loc.line {
            Some(line) => format!("{name}:{line}"),
            None => name.to_string(),
        })
    }

    fn resolve(&mut self, pc: u64) -> Symbolized {
        // `space` outlives `self`: modules borrowed from it leave `self` free to update.
        let space: &'a AddressSpace = self.space;
        let Some(m) = space.module_for_pc(pc) else {
            return Symbolized {
                function: format!("{pc:#x}"),
                module: "?".into(),
                kind: FrameKind::User,
                agent: false,
                location: None,
            };
        };
        // The agent's and the system libraries' line tables are not worth their loading
        // time: their frames are labelled by module anyway.
        let location = if m.kind == FrameKind::User {
            self.line(&m.path, pc.wrapping_sub(m.bias))
        } else {
            None
        };
        let table = if m.path.starts_with('/') {
            table_for(&m.path)
        } else {
            Arc::new(SymbolTable::default())
        };
        let name = table
            .find(pc.wrapping_sub(m.bias))
            .map(|s| demangle(&s.name))
            .or_else(|| dladdr_name(pc))
            .unwrap_or_else(|| format!("{}+{:#x}", m.name, pc.wrapping_sub(m.bias)));
        Symbolized {
            function: name,
            module: m.name.clone(),
            kind: m.kind,
            agent: m.is_agent,
            location,
        }
    }
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
