//! The target's memory map, `/proc/PID/maps`, as the outside capture needs it: every mapping
//! with its permissions, file offset, inode and name.
//!
//! Owns parsing the text and answering "which mapping holds this address". It reads nothing
//! itself: the caller reads the file (before the stop to plan, again while stopped to be exact).

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub readable: bool,
    pub writable: bool,
    pub executable: bool,
    /// Offset of the mapping in its file (0 for anonymous memory).
    pub offset: u64,
    /// Inode of the mapped file, 0 for anonymous memory and pseudo-files like `[heap]`.
    pub inode: u64,
    /// The file path, a pseudo-name (`[heap]`, `[stack]`, `[vdso]`, `[anon:NAME]`), or empty.
    pub path: String,
}

impl Mapping {
    /// Anonymous memory: no file behind it (named anonymous mappings included).
    pub fn is_anonymous(&self) -> bool {
        self.inode == 0 && (self.path.is_empty() || self.path.starts_with("[anon:"))
    }

    /// Kernel-provided pages that are not the program's memory (`[vvar]`, `[vsyscall]`…);
    /// reading some of them faults in the kernel.
    pub fn is_kernel_special(&self) -> bool {
        matches!(
            self.path.as_str(),
            "[vvar]" | "[vvar_vclock]" | "[vsyscall]" | "[uprobes]"
        )
    }
}

/// The whole map, sorted by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Maps {
    pub maps: Vec<Mapping>,
}

impl Maps {
    /// Parses the text of `/proc/PID/maps`; lines that do not parse are skipped.
    pub fn parse(text: &str) -> Maps {
        let mut maps: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
        maps.sort_by_key(|m| m.start);
        Maps { maps }
    }

    /// The mapping containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let i = self.maps.partition_point(|m| m.end <= addr);
        self.maps.get(i).filter(|m| m.start <= addr)
    }
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut fields = line.split_ascii_whitespace();
    let (range, perms, offset, _dev, inode) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let (a, b) = range.split_once('-')?;
    let start = u64::from_str_radix(a, 16).ok()?;
    let end = u64::from_str_radix(b, 16).ok()?;
    let offset = u64::from_str_radix(offset, 16).ok()?;
    let inode = inode.parse().ok()?;
    // The path is the rest of the line after the inode, and may contain spaces.
    let path = fields
        .next()
        .and_then(|first| line.find(first).map(|at| line[at..].trim_end().to_string()))
        .unwrap_or_default();
    let perms = perms.as_bytes();
    Some(Mapping {
        start,
        end,
        readable: perms.first() == Some(&b'r'),
        writable: perms.get(1) == Some(&b'w'),
        executable: perms.get(2) == Some(&b'x'),
        offset,
        inode,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_with_paths_offsets_and_permissions() {
        let maps = Maps::parse(
            "\
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
7f0000000000-7f0000001000 r-xp 00026000 08:01 42   /usr/lib/my lib.so
7f0000002000-7f0000003000 ---p 00000000 00:00 0
not a line
",
        );
        assert_eq!(maps.maps.len(), 3);
        let lib = &maps.maps[0];
        assert_eq!(lib.path, "/usr/lib/my lib.so");
        assert_eq!((lib.offset, lib.inode), (0x26000, 42));
        assert!(lib.readable && lib.executable && !lib.writable && !lib.is_anonymous());
        assert!(!maps.maps[1].readable && maps.maps[1].is_anonymous());
        assert_eq!(maps.maps[2].path, "[stack]");
        assert_eq!(maps.find(0x7f00_0000_0fff).unwrap().inode, 42);
        assert!(maps.find(0x7f00_0000_1000).is_none());
    }
}
