//! Reading files whose paths a process under inspection controls.
//!
//! Module files, their debug files and `.gnu_debuglink` candidates are named by the target
//! (its memory map, its ELF sections, its root directory seen through `/proc/PID/root`). A
//! target may put a FIFO there, or a link to `/dev/zero`: `std::fs::read` would block for
//! ever or read until memory runs out. [`read_regular`] opens without blocking, and reads
//! only a regular file of a bounded size.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest module or debug file read (a debug libc is tens of MB; a large C++ service's
/// debug file can reach a few GB).
pub const MAX_MODULE_FILE: u64 = 4 << 30;

/// The bytes of `path` when it is a regular file of at most `max` bytes; an error otherwise,
/// without blocking on a FIFO or a device.
pub fn read_regular(path: impl AsRef<Path>, max: u64) -> io::Result<Vec<u8>> {
    let path = path.as_ref();
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting for one.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    // The checks are made on the file opened, so the path cannot be swapped in between.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.len() > max {
        return Err(io::Error::other(format!(
            "{} is larger than {max} bytes",
            path.display()
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // `take`: a file that grows while read is still read to the bound only.
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_device_and_a_file_too_large_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("heaptui-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(read_regular(&fifo, MAX_MODULE_FILE).is_err());
        assert!(read_regular("/dev/zero", MAX_MODULE_FILE).is_err());
        let file = dir.join("file");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_regular(&file, 10).unwrap(), b"0123456789");
        assert!(read_regular(&file, 9).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
