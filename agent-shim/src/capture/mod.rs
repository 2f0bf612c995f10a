//! Capture: stop the world, unwind every thread frame by frame, scan for pointers, and
//! build the heap graph (SPEC §3).
//!
//! Owns everything between "a snapshot is wanted" and a [`heaptui_analysis::HeapGraph`]. It
//! never runs on a hook's path: only the agent thread captures.

pub mod build;
pub mod modules;
pub mod scan;
pub mod stop;
pub mod symbolize;
pub mod unwind;
