//! The frames of each stopped thread of an outside capture, unwound and named as the agent
//! names them (docs/reference.md §3).
//!
//! Owns the outside view of the address space that the shared unwinder
//! (`heaptui_capture::unwind`, the agent's) walks: the stopped process's memory map, the copy of
//! its writable memory taken while it was stopped (its stacks among it), and its modules — each
//! file named in the memory map with executable code, read from disk (through
//! `/proc/PID/root`), placed at its load bias, with its `.eh_frame_hdr`/`.eh_frame` for the
//! unwinder and its symbols for the names (`heaptui_capture::symbols`, the agent's too). The
//! vDSO has no file: its image is read from the process.
//!
//! A module's name is its `DT_SONAME` when it has one, else its file name: the agent names a
//! module by the name the loader was given, which for a library found by its `DT_NEEDED` entry
//! is that soname (`libstdc++.so.6`, where the memory map shows `libstdc++.so.6.0.30`).
//!
//! Runs after the process was resumed: it reads files and the copy, never the live stacks.

use heaptui_capture::files::{MAX_MODULE_FILE, read_regular};
use std::ops::Range;

use heaptui_analysis::FrameKind;
use heaptui_capture::symbols::{self, SymbolTable};
use heaptui_capture::unwind::{EhInfo, Mapped, ModuleView, Space, Unwinder, is_system_name};
use nix::unistd::Pid;
use object::read::elf::{ElfFile64, ProgramHeader};

use super::glibc;
use super::maps::Maps;
use super::memory::{self, Image};

/// The name the agent gives the vDSO (the loader's name for it).
const VDSO_NAME: &str = "linux-vdso.so.1";

/// One module's file contents, and where the memory map placed it.
struct ModuleFile {
    /// The path in the memory map (`[vdso]` for the vDSO).
    path: String,
    name: String,
    /// The file's bytes (the vDSO's image, read from the process).
    bytes: Vec<u8>,
    /// Run-time address minus link-time address.
    bias: u64,
    /// Its executable mappings, run-time addresses.
    text: Vec<Range<u64>>,
    /// `(link-time address, file offset, file size)` of each `PT_LOAD` segment.
    loads: Vec<(u64, u64, u64)>,
    /// The run-time range of its `.eh_frame_hdr`, when it has one.
    eh_frame_hdr: Option<Range<u64>>,
    is_agent: bool,
    is_system: bool,
}

impl ModuleFile {
    /// The file bytes from run-time address `at` to the end of its `PT_LOAD` segment's file
    /// contents.
    fn bytes_from(&self, at: u64) -> Option<&[u8]> {
        let vaddr = at.wrapping_sub(self.bias);
        let &(start, offset, size) = self
            .loads
            .iter()
            .find(|&&(start, _, size)| (start..start + size).contains(&vaddr))?;
        let from = usize::try_from(offset + (vaddr - start)).ok()?;
        let to = usize::try_from(offset + size).ok()?;
        self.bytes.get(from..to)
    }
}

/// The modules of a stopped process, read from their files.
pub struct ModuleFiles {
    files: Vec<ModuleFile>,
}

impl ModuleFiles {
    /// Reads every module with executable code in `maps` (the map read while process `pid`
    /// was stopped). A module whose file cannot be read or parsed is left out: its frames end
    /// the walk (or are walked by frame pointer) and show as addresses.
    pub fn read(pid: Pid, maps: &Maps) -> ModuleFiles {
        let mut files: Vec<ModuleFile> = Vec::new();
        for m in maps.maps.iter().filter(|m| m.executable) {
            if let Some(f) = files.iter_mut().find(|f| f.path == m.path) {
                f.text.push(m.start..m.end);
                continue;
            }
            let vdso = m.path == "[vdso]";
            if !vdso && !m.path.starts_with('/') {
                continue;
            }
            // The first mapping of the file (the lowest one) places it.
            let Some(first) = maps.maps.iter().find(|f| f.path == m.path) else {
                continue;
            };
            let bytes = if vdso {
                memory::read_exact(pid, m.start, (m.end - m.start) as usize)
            } else {
                read_regular(glibc::in_target(pid, &m.path), MAX_MODULE_FILE).ok()
            };
            let Some(bytes) = bytes else { continue };
            if let Some(mut f) = module_file(&m.path, bytes, first.start, first.offset) {
                if vdso {
                    f.name = VDSO_NAME.into();
                }
                f.is_agent = glibc::is_agent(&f.name);
                f.is_system = f.is_agent || is_system_name(&f.name);
                f.text.push(m.start..m.end);
                files.push(f);
            }
        }
        ModuleFiles { files }
    }

    fn module_for_pc(&self, pc: u64) -> Option<&ModuleFile> {
        self.files
            .iter()
            .find(|f| f.text.iter().any(|r| r.contains(&pc)))
    }
}

/// Parses one module file placed at `start` for file offset `offset` (its first mapping).
fn module_file(path: &str, bytes: Vec<u8>, start: u64, offset: u64) -> Option<ModuleFile> {
    let elf = ElfFile64::<object::Endianness>::parse(&*bytes).ok()?;
    let endian = elf.endian();
    let mut loads = Vec::new();
    let mut hdr = None;
    for ph in elf.elf_program_headers() {
        match ph.p_type(endian) {
            object::elf::PT_LOAD => {
                loads.push((ph.p_vaddr(endian), ph.p_offset(endian), ph.p_filesz(endian)))
            }
            object::elf::PT_GNU_EH_FRAME => {
                hdr = Some(ph.p_vaddr(endian)..ph.p_vaddr(endian) + ph.p_memsz(endian));
            }
            _ => {}
        }
    }
    // The segment holding the first mapping's file offset: run-time = bias + link-time.
    let &(vaddr, seg_offset, _) = loads
        .iter()
        .find(|&&(_, o, size)| (o & !0xfff..o + size.max(1)).contains(&offset))?;
    let bias = start
        .wrapping_sub(offset)
        .wrapping_sub(vaddr)
        .wrapping_add(seg_offset);
    let soname = elf_soname(&elf);
    let file_name = path.rsplit('/').next().unwrap_or(path).to_string();
    Some(ModuleFile {
        path: path.to_string(),
        name: soname.unwrap_or(file_name),
        bias,
        text: Vec::new(),
        loads,
        eh_frame_hdr: hdr.map(|h| h.start.wrapping_add(bias)..h.end.wrapping_add(bias)),
        is_agent: false,
        is_system: false,
        bytes,
    })
}

/// The `DT_SONAME` of an ELF file.
fn elf_soname(elf: &ElfFile64<'_, object::Endianness>) -> Option<String> {
    use object::read::elf::{Dyn, FileHeader, SectionHeader};
    let endian = elf.endian();
    let data = elf.data();
    let sections = elf.elf_header().sections(endian, data).ok()?;
    let section = sections
        .iter()
        .find(|s| s.sh_type(endian) == object::elf::SHT_DYNAMIC)?;
    let (dynamic, link) = section.dynamic(endian, data).ok()??;
    let strings = sections.strings(endian, data, link).ok()?;
    let entry = dynamic
        .iter()
        .find(|d| d.d_tag(endian) == object::elf::DT_SONAME)?;
    let name = entry.string(endian, strings).ok()?;
    Some(String::from_utf8_lossy(name).into_owned())
}

/// The symbols of every module, read once per capture.
pub struct Names {
    tables: Vec<Option<SymbolTable>>,
}

/// The outside view of a stopped process for the unwinder (module docs).
pub struct OutsideSpace<'f> {
    files: &'f ModuleFiles,
    eh: Vec<Option<EhInfo<'f>>>,
    maps: &'f Maps,
    image: &'f Image,
    static_tls: u64,
}

impl<'f> OutsideSpace<'f> {
    pub fn new(
        files: &'f ModuleFiles,
        maps: &'f Maps,
        image: &'f Image,
        static_tls: u64,
    ) -> OutsideSpace<'f> {
        let eh = files
            .files
            .iter()
            .map(|f| {
                let hdr = f.eh_frame_hdr.clone()?;
                let hdr_bytes = f.bytes_from(hdr.start)?;
                let hdr_bytes = &hdr_bytes[..hdr_bytes.len().min((hdr.end - hdr.start) as usize)];
                let text = f.text.iter().map(|r| r.start).min().unwrap_or(0);
                EhInfo::parse(
                    hdr_bytes,
                    hdr.start,
                    text,
                    |at| f.bytes_from(at),
                    |p| image.word(p),
                )
            })
            .collect();
        OutsideSpace {
            files,
            eh,
            maps,
            image,
            static_tls,
        }
    }

    /// An unwinder over this space that folds the agent's frames away (a process run under
    /// the agent, captured from outside, shows the program's frames only, as with the agent).
    pub fn unwinder(&self) -> Unwinder<'_, OutsideSpace<'f>> {
        Unwinder::new(self)
    }

    /// The symbols of every module of process `pid` (their debug files looked up under its
    /// root directory first).
    pub fn names(&self, pid: Pid) -> Names {
        let root = format!("/proc/{pid}/root");
        Names {
            tables: self
                .files
                .files
                .iter()
                .map(|f| {
                    (!f.bytes.is_empty())
                        .then(|| symbols::module_symbols_in(&root, &f.path, &f.bytes).0)
                })
                .collect(),
        }
    }

    /// A call frame's function, module and kind, as the agent's symbolizer gives them:
    /// `exact` is false for return addresses, which are looked up one byte back.
    pub fn name(&self, names: &Names, pc: u64, exact: bool) -> (String, String, FrameKind) {
        let pc = if exact { pc } else { pc.wrapping_sub(1) };
        let Some(i) = self
            .files
            .files
            .iter()
            .position(|f| f.text.iter().any(|r| r.contains(&pc)))
        else {
            return (format!("{pc:#x}"), "?".into(), FrameKind::User);
        };
        let f = &self.files.files[i];
        let addr = pc.wrapping_sub(f.bias);
        let function = names.tables[i]
            .as_ref()
            .and_then(|t| t.find(addr))
            .map(|s| symbols::demangle(&s.name))
            .unwrap_or_else(|| format!("{}+{:#x}", f.name, addr));
        let kind = if f.is_system {
            FrameKind::System
        } else {
            FrameKind::User
        };
        (function, f.name.clone(), kind)
    }
}

impl Space for OutsideSpace<'_> {
    fn mapping(&self, addr: u64) -> Option<Mapped> {
        self.maps.find(addr).map(|m| Mapped {
            end: m.end,
            readable: m.readable,
        })
    }

    fn read_word(&self, addr: u64) -> Option<u64> {
        if !addr.is_multiple_of(8) {
            return None;
        }
        self.image.word(addr)
    }

    fn read_code(&self, at: u64, buf: &mut [u8]) -> bool {
        let Some(end) = at.checked_add(buf.len() as u64) else {
            return false;
        };
        if !self
            .maps
            .find(at)
            .is_some_and(|m| m.readable && end <= m.end)
        {
            return false;
        }
        let Some(f) = self.files.module_for_pc(at) else {
            return false;
        };
        match f.bytes_from(at).and_then(|b| b.get(..buf.len())) {
            Some(code) => {
                buf.copy_from_slice(code);
                true
            }
            None => false,
        }
    }

    fn clamp(&self, range: Range<u64>) -> Vec<Range<u64>> {
        heaptui_capture::ranges::readable_parts(
            &self.maps.maps,
            |m| (m.start..m.end, m.readable),
            range,
        )
    }

    fn module_for_pc(&self, pc: u64) -> Option<ModuleView<'_>> {
        let i = self
            .files
            .files
            .iter()
            .position(|f| f.text.iter().any(|r| r.contains(&pc)))?;
        let f = &self.files.files[i];
        Some(ModuleView {
            is_agent: f.is_agent,
            is_system: f.is_system,
            eh: self.eh[i].as_ref(),
        })
    }

    fn static_tls(&self) -> u64 {
        self.static_tls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_unwinds_from_its_own_files_with_names() {
        // This very process, as a capture from outside sees it: its map, its files, and (as
        // the copy of a stopped process) the current stack read live.
        let pid = Pid::this();
        let maps = Maps::parse(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let files = ModuleFiles::read(pid, &maps);
        let libc = files
            .files
            .iter()
            .find(|f| f.name.starts_with("libc.so"))
            .expect("libc is a module");
        assert!(libc.is_system && libc.eh_frame_hdr.is_some());
        let image = Image::default();
        let space = OutsideSpace::new(&files, &maps, &image, 0);
        let names = space.names(pid);
        let here = this_process_unwinds_from_its_own_files_with_names as *const () as u64;
        let (function, _, kind) = space.name(&names, here, true);
        assert!(
            function.ends_with("this_process_unwinds_from_its_own_files_with_names"),
            "{function}"
        );
        assert_eq!(kind, FrameKind::User);
        let (function, module, kind) =
            space.name(&names, nix::libc::getpid as *const () as u64, true);
        assert!(function.contains("getpid"), "{function}");
        assert!(module.starts_with("libc.so"), "{module}");
        assert_eq!(kind, FrameKind::System);
        // Code bytes come from the file: the same as in memory.
        let mut buf = [0u8; 16];
        assert!(space.read_code(here, &mut buf));
        assert_eq!(buf.to_vec(), memory::read_exact(pid, here, 16).unwrap());
    }
}
