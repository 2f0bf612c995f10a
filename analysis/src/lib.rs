//! heaptui's analysis engine: the heap-graph model, the exact attribution of every byte to
//! threads and frames (docs/reference.md §3), and the snapshot files that carry a graph offline
//! (docs/reference.md §4).
//!
//! Pure safe Rust; the only I/O is reading and writing snapshot files.

pub mod attribution;
pub mod both;
pub mod dominators;
pub mod figures;
pub mod graph;
mod groups;
pub mod kept;
pub mod labels;
pub mod leaks;
pub mod packed;
pub mod recording;
pub mod snapshot;
pub mod synthetic;
pub mod views;

pub use attribution::{Analysis, UnknownThread};
pub use both::{Both, OneThread, ScopedThreads};
pub use figures::*;
pub use graph::*;
pub use kept::Kept;
