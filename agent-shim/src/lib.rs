//! The heaptui agent: a shared object preloaded into the profiled process.
//!
//! It tracks every heap block, and on request stops the world, walks every thread's stack
//! and scans for pointers to build the heap graph (docs/reference.md §3).
//!
//! Layout: `exports` (every exported symbol), `hooks` (the malloc family and
//! pthread_create), `registry` (blocks, stacks, threads, counters), `alloc` (the agent's own
//! mmap-backed allocator), `own_memory` (the agent's mappings, never scanned), `config`,
//! `log`, `lifecycle` (constructor, fork, exec, exit), `sync` (the futex lock), `sys`
//! (allocation-free system calls), `capture` (stop-the-world, unwind, scan).

// The agent is a preloaded library with no Rust users: its documentation is for its
// maintainers (`cargo doc --document-private-items`), who follow links between its modules'
// private items.
#![allow(rustdoc::private_intra_doc_links)]
#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    clippy::missing_safety_doc
)]

pub mod alloc;
pub mod capture;
pub mod config;
pub mod dump;
#[cfg(not(test))]
mod exports;
// Unit tests leave the exports out (the test binary keeps libc's malloc), so the hook entry
// points look unused there.
#[cfg_attr(test, allow(dead_code))]
pub mod hooks;
pub mod lifecycle;
pub mod log;
pub mod own_memory;
pub mod policy;
pub mod record;
pub mod registry;
pub mod server;
pub mod signals;
pub mod sync;
pub mod sys;
