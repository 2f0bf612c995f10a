//! The parts of a heap capture that do not depend on where the capture runs: inside the
//! target (the agent, reading its own memory) or outside it (`heaptui` with ptrace, reading a
//! copy of the target's memory).
//!
//! A crate of its own, rather than a module of the agent or of `heaptui-analysis`: the `heaptui`
//! binary must not link the agent (its exported `malloc` would replace the binary's own), and
//! the analysis crate holds the model and the engine, not the way a process is read. Imports go
//! one way: the agent and the binary import this crate; it imports only `heaptui-analysis`
//! (for the object indices it hands out). Safe code only, like every crate but the agent.
//!
//! - [`blocks`]: the lookup from any word to the live block that contains it;
//! - [`registers`]: which registers of a stopped thread are roots (the system-call rule);
//! - [`unwind`]: a stopped thread's frames and the roots of each, over either capture's view
//!   of the address space;
//! - [`symbols`]: the function names of a module file;
//! - [`stacks`]: glibc's thread stacks, recognised by the descriptor at their top.

pub mod blocks;
pub mod files;
pub mod ranges;
pub mod registers;
pub mod stacks;
pub mod symbols;
pub mod unwind;

pub use blocks::{BlockIndex, FxHasher};
