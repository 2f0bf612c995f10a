//! Where an agent's token file lives and what it is called (docs/reference.md §6). The agent writes
//! it and a local client finds it from the address alone, so both ends compute the path here, once.
//!
//! Directory: `$XDG_RUNTIME_DIR/heaptui/` when `XDG_RUNTIME_DIR` is an absolute path, else
//! `/tmp/heaptui-$UID/`. File: `tcp-<port>.token`, or `unix-<escaped absolute socket
//! path>.token` (bytes other than `[A-Za-z0-9._-]` as `%XX`; paths whose escaped name would
//! pass 200 bytes are named by a hash, since file names stop at 255). Pure path arithmetic:
//! creating, securing and reading the files is each end's business.

use std::path::{Path, PathBuf};

/// The directory of this user's token files, given `$XDG_RUNTIME_DIR` and the real uid.
pub fn directory(xdg_runtime_dir: Option<&Path>, uid: u32) -> PathBuf {
    match xdg_runtime_dir {
        Some(dir) if dir.is_absolute() => dir.join("heaptui"),
        _ => PathBuf::from(format!("/tmp/heaptui-{uid}")),
    }
}

/// The token file's name for an agent listening on a TCP port.
pub fn tcp_file_name(port: u16) -> String {
    format!("tcp-{port}.token")
}

/// The token file's name for an agent listening on a Unix socket.
pub fn unix_file_name(socket: &Path) -> String {
    let path = std::path::absolute(socket).unwrap_or_else(|_| socket.to_path_buf());
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut name = String::from("unix-");
    for &b in bytes {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => name.push(b as char),
            _ => name.push_str(&format!("%{b:02X}")),
        }
    }
    if name.len() > 200 {
        name = format!("unix-{:016x}", fnv1a(bytes));
    }
    name + ".token"
}

/// 64-bit FNV-1a: a stable name for a long path, not a security measure.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_follows_xdg_runtime_dir_only_when_absolute() {
        assert_eq!(
            directory(Some(Path::new("/run/user/1000")), 1000),
            Path::new("/run/user/1000/heaptui")
        );
        assert_eq!(
            directory(Some(Path::new("relative")), 1000),
            Path::new("/tmp/heaptui-1000")
        );
        assert_eq!(directory(None, 0), Path::new("/tmp/heaptui-0"));
    }

    #[test]
    fn names_are_escaped_and_long_paths_hashed() {
        assert_eq!(tcp_file_name(8000), "tcp-8000.token");
        assert_eq!(
            unix_file_name(Path::new("/run/user/1000/app sock")),
            "unix-%2Frun%2Fuser%2F1000%2Fapp%20sock.token"
        );
        let long = format!("/{}", "x".repeat(300));
        let name = unix_file_name(Path::new(&long));
        assert!(name.starts_with("unix-") && name.ends_with(".token"));
        assert_eq!(name.len(), "unix-".len() + 16 + ".token".len());
    }
}
