//! The function names of a module file: its `.symtab` and `.dynsym` (ELF64 parsed by hand:
//! only the section and symbol tables and two notes are needed), with those of its separate
//! debug file (`/usr/lib/debug/.build-id/xx/rest.debug`, then `.gnu_debuglink`), and
//! demangled C++ (cpp_demangle) and Rust (rustc-demangle) names.
//!
//! Shared by both captures, so that a frame has one name whichever took it: the agent's
//! symbolizer (which adds lines and inline chains for the program's own code) and the capture
//! from outside.

use std::ffi::CStr;

/// A function symbol: link-time address, size, mangled name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub addr: u64,
    pub size: u64,
    pub name: String,
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
pub fn debug_file(path: &str, elf: &[u8]) -> Option<String> {
    debug_file_in("", path, elf)
}

/// [`debug_file`] for a module of a process whose root directory is `root` (`/proc/PID/root`
/// for a process seen from outside, which may live in another mount namespace: a container):
/// the debug file under that root, else under ours. `path` is the module's path as the process
/// sees it, the path returned one this process can open.
pub fn debug_file_in(root: &str, path: &str, elf: &[u8]) -> Option<String> {
    const ROOT: &str = "/usr/lib/debug";
    if let Some(id) = build_id(elf).filter(|id| id.len() > 2) {
        let rel = format!("{ROOT}/.build-id/{}/{}.debug", &id[..2], &id[2..]);
        let found = [format!("{root}{rel}"), rel]
            .into_iter()
            .find(|candidate| std::path::Path::new(candidate).is_file());
        if found.is_some() {
            return found;
        }
    }
    let link = section(elf, ".gnu_debuglink")?;
    let name = CStr::from_bytes_until_nul(link).ok()?.to_str().ok()?;
    let crc_at = (name.len() + 1).next_multiple_of(4);
    let crc = u32_at(link, crc_at)?;
    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
    [
        format!("{root}{dir}/{name}"),
        format!("{root}{dir}/.debug/{name}"),
        format!("{root}{ROOT}{dir}/{name}"),
    ]
    .into_iter()
    .filter(|candidate| *candidate != format!("{root}{path}"))
    .find(|candidate| {
        crate::files::read_regular(candidate, crate::files::MAX_MODULE_FILE)
            .is_ok_and(|bytes| crc32fast::hash(&bytes) == crc)
    })
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
    pub fn merged(self, other: SymbolTable) -> SymbolTable {
        let mut symbols = self.symbols;
        symbols.extend(other.symbols);
        SymbolTable::sorted(symbols)
    }

    /// The symbol containing the link-time address `addr`.
    pub fn find(&self, addr: u64) -> Option<&Symbol> {
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

/// The symbols of the module file at `path` whose contents are `elf`, its debug file's
/// included, and that debug file (or None: then the module's own DWARF, if any, is the one).
pub fn module_symbols(path: &str, elf: &[u8]) -> (SymbolTable, Option<String>) {
    module_symbols_in("", path, elf)
}

/// [`module_symbols`] for a module of a process whose root directory is `root`
/// ([`debug_file_in`]).
pub fn module_symbols_in(root: &str, path: &str, elf: &[u8]) -> (SymbolTable, Option<String>) {
    let debug = debug_file_in(root, path, elf);
    let own = SymbolTable::parse(elf);
    let symbols = match debug
        .as_deref()
        .map(|d| crate::files::read_regular(d, crate::files::MAX_MODULE_FILE))
    {
        Some(Ok(debug_bytes)) => own.merged(SymbolTable::parse(&debug_bytes)),
        _ => own,
    };
    (symbols, debug)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_cpp_and_plain_names_demangle() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("main"), "main");
    }
}
