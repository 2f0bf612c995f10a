//! The snapshot the export tests run `heaptui report --format …` on.

use std::path::PathBuf;

/// A snapshot with three sites (one frame holding a `;`), a block without a site, and two
/// threads, one whose name needs CSV quoting.
pub const SNAPSHOT: &str = r#"{
  "format": "heaptui-snapshot", "version": 1,
  "process": {"pid": 42, "command": "./server"},
  "sites": [
    {"id": 1, "frames": ["alloc_buf (server.c:42)", "handle", "main"]},
    {"id": 2, "frames": ["make_node", "handle", "main"]},
    {"id": 3, "frames": ["weird;name", "main"]}
  ],
  "objects": [
    {"id": 1, "addr": 4096, "size": 100, "site": 1, "thread": 7, "seq": 1, "refs": [2]},
    {"id": 2, "addr": 8192, "size": 28, "site": 1, "thread": 7, "seq": 2, "refs": []},
    {"id": 3, "addr": 12288, "size": 64, "site": 2, "thread": 8, "seq": 3, "refs": []},
    {"id": 4, "addr": 16384, "size": 8, "site": 3, "thread": 8, "seq": 4, "refs": []},
    {"id": 5, "addr": 20480, "size": 16, "thread": 8, "seq": 5, "refs": []}
  ],
  "threads": [
    {"tid": 7, "name": "worker, \"one\"", "frames": [
      {"function": "handle", "module": "server", "kind": "user", "refs": [1]},
      {"function": "main", "module": "server", "kind": "user", "refs": [3]}]},
    {"tid": 8, "name": "idle", "frames": [
      {"function": "epoll_wait", "module": "libc.so.6", "kind": "system", "refs": [3]},
      {"function": "loop", "module": "server", "kind": "user", "refs": []}]}
  ],
  "globals": {"refs": []}
}"#;

pub fn snapshot_file(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("heaptui-export-{}-{name}.json", std::process::id()));
    std::fs::write(&path, SNAPSHOT).unwrap();
    path
}
