//! The heaptui agent: a shared object preloaded into the profiled process.
//!
//! It tracks every heap block, and on request stops the world, walks every thread's stack
//! and scans for pointers to build the heap graph (SPEC §3).

pub mod capture;
