//! Symbolization of frames and allocation sites: code address → function, module, kind, and
//! file:line when the module has DWARF line tables; with inline frames, one code address
//! becomes the chain of inlined calls it sits in, each with its own line (docs/reference.md §3
//! "Labels").
//!
//! Owns: each module's symbols read once from its file on disk (`heaptui_capture::symbols`,
//! which the capture from outside names its frames with too), `dladdr` for modules without a
//! file (the vDSO), and line and inline lookups with addr2line (one loader per module per
//! capture).
//!
//! Runs only after the world has been resumed: it reads files and allocates freely. Symbol
//! tables are cached by module path for the life of the agent.

use std::collections::HashMap;
use std::ffi::CStr;
use std::sync::{Arc, Mutex, OnceLock};

use heaptui_analysis::FrameKind;
use heaptui_capture::symbols::{self, SymbolTable, demangle};

use super::modules::AddressSpace;
use crate::sync::PerProcess;

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
            let (symbols, debug) = symbols::module_symbols(path, &bytes);
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
