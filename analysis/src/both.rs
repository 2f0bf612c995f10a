//! Two passes of the analysis at once, on threads the caller offers.
//!
//! Some passes of [`Analysis`](crate::Analysis) and [`Kept`](crate::Kept) need not wait for
//! each other. In order, each step on two threads: the dominator tree's depth-first search
//! beside the start-edge reach (which reads only the graph) and the caller's `beside` job
//! ([`Kept::analysed`](crate::Kept::analysed) packs the graph's own kept columns there); the
//! dominator tree's predecessor lists, filled from both ends at once; the two halves of the
//! holders' referents, which read the same finished columns; the kept columns, packing
//! different parts of the result. Only one `both` nests: [`Analysis::with_during`] runs
//! everything after the depth-first search as its first job, whose steps use `both` in turn,
//! and the caller's `during` job as its second, the waiting one (the agent's scanning child
//! sends the graph's kept columns to the agent there): three threads then, one of them
//! mostly waiting.
//! [`Both`] runs two such closures and returns both results; where the second runs is the
//! caller's business, because the engine must not make threads of its own: the agent's scan
//! child, where the largest analyses run, is a raw copy of one thread of another program and
//! cannot use `std::thread`
//! (agent-shim/src/capture/alongside.rs), so it offers a bare thread of its own making.
//!
//! The engine's `second` closures touch no thread-local storage (no `thread_local!`, no std
//! `HashMap` with its random keys, no printing) and allocate only through the global
//! allocator; they panic only when memory cannot be had or an invariant is broken. That is
//! what a bare thread needs, and what every `second` passed here must keep.
//!
//! The results never depend on the threads: each pass computes the same values on one thread
//! or two (the oracle tests run both ways).
//!
//! [`Both::pass_done`] marks where each pass ends on the calling thread, so that a caller can
//! time the passes where they run (the agent's scan child logs them); it costs nothing unless
//! the caller records something there.
//!
//! [`Analysis::with_during`]: crate::Analysis::with_during

/// Runs two closures, maybe at the same time, and returns both results.
pub trait Both {
    fn both<A, B: Send>(
        &self,
        first: impl FnOnce() -> A,
        second: impl FnOnce() -> B + Send,
    ) -> (A, B);

    /// Whether `second` runs beside `first` (on another thread) rather than after it: a pass
    /// that costs more in all when split asks before splitting. False by default.
    fn two_threads(&self) -> bool {
        false
    }

    /// The pass named `pass` has just ended on the calling thread (with its `both`, if it had
    /// one). Nothing by default; a caller timing the passes reads its clocks here.
    fn pass_done(&self, _pass: &'static str) {}
}

/// One thread: `first`, then `second`.
#[derive(Clone, Copy, Debug, Default)]
pub struct OneThread;

impl Both for OneThread {
    fn both<A, B: Send>(
        &self,
        first: impl FnOnce() -> A,
        second: impl FnOnce() -> B + Send,
    ) -> (A, B) {
        let a = first();
        (a, second())
    }
}

/// `second` on a scoped std thread while the calling thread runs `first` (for processes where
/// std threads are safe to make: the tests and the benchmarks use it).
#[derive(Clone, Copy, Debug, Default)]
pub struct ScopedThreads;

impl Both for ScopedThreads {
    fn both<A, B: Send>(
        &self,
        first: impl FnOnce() -> A,
        second: impl FnOnce() -> B + Send,
    ) -> (A, B) {
        std::thread::scope(|scope| {
            let second = scope.spawn(second);
            let a = first();
            let b = second
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (a, b)
        })
    }

    fn two_threads(&self) -> bool {
        true
    }
}
