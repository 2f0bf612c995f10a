//! The event ring between the hooks and the recording's writer thread: a bounded
//! multi-producer, single-consumer queue of fixed-size slots in one anonymous mapping
//! (D. Vyukov's bounded queue: a per-slot sequence word says whose turn the slot is).
//!
//! A producer claims the next position with one compare-and-swap on the head, fills the slot
//! and publishes it with a release store; the claim is the event's place in the recording,
//! so events are recorded in the order they were claimed, across all threads. When the
//! consumer is a whole ring behind, the producer waits for it, yielding its CPU (the writer
//! shares the CPUs with the program's threads: on two cores, four allocating threads outran
//! it and lost up to 6% of a stress run's events before they waited), for at most
//! [`FULL_WAIT_NS`]; then it gives up and counts the event as lost, and until the consumer
//! takes an event again, later producers give up at once ([`STALLED`]): a stuck writer or a
//! claim never published costs the program one bounded wait, not one per call. A hook never
//! allocates and never takes a lock here.
//!
//! The consumer (the writer, serialized by its own lock) reads slots in order and stops at
//! the first one not yet published; a slot claimed by a thread that is then stopped (a
//! capture) simply waits. A claim abandoned for good (a signal handler that `longjmp`s out
//! of a hook between claim and publish) would stall the queue, which then fills and loses
//! every later event: the loss is counted and visible, never silent.
//!
//! The mapping is reserved with MAP_NORESERVE and never initialised: each slot's sequence
//! word is stored relative to the slot's index, so the zero page already means "free for
//! the first lap".

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use crate::sync::CacheLine;
use crate::sys;

/// Slots in the ring (a power of two): 2^17 × 64 B = 8 MiB of address space, touched as
/// the ring goes round.
pub const CAPACITY: u64 = 1 << 17;
const MASK: u64 = CAPACITY - 1;

/// One event as the hooks hand it over: plain numbers, no pointers into the hook's frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Raw {
    /// `kind`: 0 malloc, 1 calloc, 2 memalign family (the recording's codes).
    Alloc {
        kind: u8,
        seq: u64,
        addr: u64,
        size: u64,
        stack: u32,
        tid: u32,
    },
    /// `addr == 0` is `free(NULL)`.
    Free { addr: u64, stack: u32, tid: u32 },
    /// `old == 0` is `realloc(NULL, n)`.
    Realloc {
        seq: u64,
        old: u64,
        new: u64,
        size: u64,
        stack: u32,
        tid: u32,
    },
    /// A snapshot was taken after allocation `last_seq`.
    Boundary { last_seq: u64, unix_ms: u64 },
    /// A claimed slot that turned out to carry nothing (a failed realloc).
    Nothing,
}

#[repr(C, align(64))]
struct Slot {
    /// `turn - index`: the slot is free for position `p` when `turn == p`, holds position
    /// `p`'s event when `turn == p + 1`.
    turn: AtomicU64,
    tag: u32,
    tid: u32,
    stack: u32,
    kind: u32,
    a: u64,
    b: u64,
    c: u64,
    d: u64,
}

const TAG_NOTHING: u32 = 0;
const TAG_ALLOC: u32 = 1;
const TAG_FREE: u32 = 2;
const TAG_REALLOC: u32 = 3;
const TAG_BOUNDARY: u32 = 4;

static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
static HEAD: CacheLine<AtomicU64> = CacheLine(AtomicU64::new(0));
static LOST: CacheLine<AtomicU64> = CacheLine(AtomicU64::new(0));
/// Set when a producer waited [`FULL_WAIT_NS`] for a full ring in vain; cleared when the
/// consumer takes an event. While set, producers lose events without waiting.
static STALLED: CacheLine<AtomicBool> = CacheLine(AtomicBool::new(false));
/// How long a producer waits for room in a full ring before it counts its event as lost.
pub const FULL_WAIT_NS: u64 = 20_000_000;

/// CLOCK_MONOTONIC in nanoseconds (no allocation, no lock).
fn now_ns() -> u64 {
    sys::clock_ns(libc::CLOCK_MONOTONIC).unwrap_or(0) as u64
}

/// Maps the ring; false when the kernel refuses (recording stays off).
pub fn init() -> bool {
    if !SLOTS.load(Ordering::Acquire).is_null() {
        return true;
    }
    let len = CAPACITY as usize * std::mem::size_of::<Slot>();
    match sys::map_anon(len, true) {
        Some(p) => {
            SLOTS.store(p.cast(), Ordering::Release);
            true
        }
        None => false,
    }
}

fn slot(pos: u64) -> Option<&'static Slot> {
    let base = SLOTS.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    // SAFETY: `base` is the start of a mapping of CAPACITY slots that is never unmapped, and
    // `pos & MASK` is below CAPACITY; slots are only accessed through atomics and the
    // turn protocol (a slot's plain fields are written only by the producer that claimed it
    // and read only by the consumer after the release store that publishes them).
    Some(unsafe { &*base.add((pos & MASK) as usize) })
}

/// A claimed position: publish an event into it, or drop it to publish [`Raw::Nothing`].
pub struct Claim {
    pos: u64,
    slot: &'static Slot,
    done: bool,
}

/// Claims the next position; `None` when the ring is full (the event is counted as lost) or
/// not mapped.
#[inline]
pub fn claim() -> Option<Claim> {
    claim_within(FULL_WAIT_NS)
}

/// [`claim`], waiting at most `bound_ns` for room in a full ring.
#[inline]
fn claim_within(bound_ns: u64) -> Option<Claim> {
    let mut pos = HEAD.0.load(Ordering::Relaxed);
    let mut waiting_since = 0;
    loop {
        let slot = slot(pos)?;
        let turn = slot.turn.load(Ordering::Acquire).wrapping_add(pos & MASK);
        let lag = turn.wrapping_sub(pos) as i64;
        if lag == 0 {
            match HEAD
                .0
                .compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(Claim {
                        pos,
                        slot,
                        done: false,
                    });
                }
                Err(now) => pos = now,
            }
        } else if lag < 0 {
            // The consumer has not freed this slot since the last lap: full.
            if !STALLED.0.load(Ordering::Relaxed) {
                if waiting_since == 0 {
                    waiting_since = now_ns();
                }
                if now_ns() - waiting_since < bound_ns {
                    // SAFETY: sched_yield has no arguments and cannot fail.
                    unsafe { libc::sched_yield() };
                    pos = HEAD.0.load(Ordering::Relaxed);
                    continue;
                }
                STALLED.0.store(true, Ordering::Relaxed);
            }
            LOST.0.fetch_add(1, Ordering::Relaxed);
            return None;
        } else {
            pos = HEAD.0.load(Ordering::Relaxed);
        }
    }
}

/// Claims a position and publishes `raw` in it; false when it was lost.
#[inline]
pub fn push(raw: Raw) -> bool {
    match claim() {
        Some(c) => {
            c.publish(raw);
            true
        }
        None => false,
    }
}

impl Claim {
    /// Fills the slot and hands it to the consumer.
    #[inline]
    pub fn publish(mut self, raw: Raw) {
        self.fill(raw);
    }

    fn fill(&mut self, raw: Raw) {
        let s = self.slot as *const Slot as *mut Slot;
        let (tag, tid, stack, kind, a, b, c, d) = match raw {
            Raw::Alloc {
                kind,
                seq,
                addr,
                size,
                stack,
                tid,
            } => (TAG_ALLOC, tid, stack, kind as u32, seq, addr, size, 0),
            Raw::Free { addr, stack, tid } => (TAG_FREE, tid, stack, 0, 0, addr, 0, 0),
            Raw::Realloc {
                seq,
                old,
                new,
                size,
                stack,
                tid,
            } => (TAG_REALLOC, tid, stack, 0, seq, old, new, size),
            Raw::Boundary { last_seq, unix_ms } => (TAG_BOUNDARY, 0, 0, 0, last_seq, unix_ms, 0, 0),
            Raw::Nothing => (TAG_NOTHING, 0, 0, 0, 0, 0, 0, 0),
        };
        // SAFETY: this thread claimed the slot (the CAS on HEAD moved past `pos`), so no other
        // producer writes it and the consumer does not read it until the release store below.
        unsafe {
            (*s).tag = tag;
            (*s).tid = tid;
            (*s).stack = stack;
            (*s).kind = kind;
            (*s).a = a;
            (*s).b = b;
            (*s).c = c;
            (*s).d = d;
        }
        self.slot.turn.store(
            (self.pos + 1).wrapping_sub(self.pos & MASK),
            Ordering::Release,
        );
        self.done = true;
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.done {
            self.fill(Raw::Nothing);
        }
    }
}

/// Takes the event at `*tail` if it has been published, and moves `tail` on. The caller is
/// the only consumer (the writer's lock).
pub fn pop(tail: &mut u64) -> Option<Raw> {
    let pos = *tail;
    let slot = slot(pos)?;
    let turn = slot.turn.load(Ordering::Acquire).wrapping_add(pos & MASK);
    if turn != pos + 1 {
        return None;
    }
    let raw = match slot.tag {
        TAG_ALLOC => Raw::Alloc {
            kind: slot.kind as u8,
            seq: slot.a,
            addr: slot.b,
            size: slot.c,
            stack: slot.stack,
            tid: slot.tid,
        },
        TAG_FREE => Raw::Free {
            addr: slot.b,
            stack: slot.stack,
            tid: slot.tid,
        },
        TAG_REALLOC => Raw::Realloc {
            seq: slot.a,
            old: slot.b,
            new: slot.c,
            size: slot.d,
            stack: slot.stack,
            tid: slot.tid,
        },
        TAG_BOUNDARY => Raw::Boundary {
            last_seq: slot.a,
            unix_ms: slot.b,
        },
        _ => Raw::Nothing,
    };
    // Free for the producer one lap later.
    slot.turn
        .store((pos + CAPACITY).wrapping_sub(pos & MASK), Ordering::Release);
    *tail = pos + 1;
    if STALLED.0.load(Ordering::Relaxed) {
        STALLED.0.store(false, Ordering::Relaxed);
    }
    Some(raw)
}

/// Events lost so far because the ring was full.
pub fn lost() -> u64 {
    LOST.0.load(Ordering::Relaxed)
}

/// Positions claimed so far (the consumer is done when its tail reaches this).
pub fn head() -> u64 {
    HEAD.0.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test for the whole ring: it is a process-wide singleton.
    #[test]
    fn many_producers_one_consumer_in_claim_order_and_a_full_ring_loses_events() {
        assert!(init());
        let mut tail = head();
        assert_eq!(pop(&mut tail), None);
        // Four producers, each pushing frees of its own increasing addresses, while one
        // consumer drains: every thread's events come out in its own order, none twice.
        let per_thread = 3 * CAPACITY;
        let producers: Vec<_> = (0..4u32)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut pushed = 0;
                    let mut i = 0u64;
                    while pushed < per_thread {
                        if push(Raw::Free {
                            addr: i,
                            stack: 0,
                            tid: t,
                        }) {
                            pushed += 1;
                            i += 1;
                        } else {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u64; 4];
        let mut seen = 0;
        while seen < 4 * per_thread {
            match pop(&mut tail) {
                Some(Raw::Free { addr, tid, .. }) => {
                    assert_eq!(addr, next[tid as usize], "thread {tid} out of order");
                    next[tid as usize] += 1;
                    seen += 1;
                }
                Some(other) => panic!("unexpected {other:?}"),
                None => std::thread::yield_now(),
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(next, [per_thread; 4]);
        // Nothing consumed: the ring takes CAPACITY events, then the first producer that
        // finds it full waits its bound in vain, and those after it lose theirs at once.
        let lost_before = lost();
        for i in 0..CAPACITY {
            assert!(push(Raw::Boundary {
                last_seq: i,
                unix_ms: 0,
            }));
        }
        let started = now_ns();
        for i in 0..5 {
            assert!(!push(Raw::Boundary {
                last_seq: CAPACITY + i,
                unix_ms: 0,
            }));
        }
        assert!(now_ns() - started >= FULL_WAIT_NS);
        assert_eq!(lost() - lost_before, 5);
        assert!(STALLED.0.load(Ordering::Relaxed));
        // The consumer takes one: no longer stalled, and a producer waiting for room gets
        // it when the consumer takes the next one.
        assert_eq!(
            pop(&mut tail),
            Some(Raw::Boundary {
                last_seq: 0,
                unix_ms: 0
            })
        );
        assert!(!STALLED.0.load(Ordering::Relaxed));
        assert!(push(Raw::Boundary {
            last_seq: CAPACITY,
            unix_ms: 0,
        }));
        // (A bound of its own, so a slow machine cannot make it give up first.)
        let waiter = std::thread::spawn(|| match claim_within(60_000_000_000) {
            Some(c) => {
                c.publish(Raw::Boundary {
                    last_seq: CAPACITY + 1,
                    unix_ms: 0,
                });
                true
            }
            None => false,
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(
            pop(&mut tail),
            Some(Raw::Boundary {
                last_seq: 1,
                unix_ms: 0
            })
        );
        assert!(
            waiter.join().unwrap(),
            "the waiting producer got the freed slot"
        );
        assert_eq!(lost() - lost_before, 5);
        // A claim dropped unpublished comes out as Nothing, in its place.
        for i in 2..CAPACITY + 2 {
            assert_eq!(
                pop(&mut tail),
                Some(Raw::Boundary {
                    last_seq: i,
                    unix_ms: 0
                })
            );
        }
        drop(claim().unwrap());
        assert!(push(Raw::Alloc {
            kind: 2,
            seq: 9,
            addr: 0x1000,
            size: 24,
            stack: 7,
            tid: 3
        }));
        assert_eq!(pop(&mut tail), Some(Raw::Nothing));
        assert_eq!(
            pop(&mut tail),
            Some(Raw::Alloc {
                kind: 2,
                seq: 9,
                addr: 0x1000,
                size: 24,
                stack: 7,
                tid: 3
            })
        );
        assert_eq!(pop(&mut tail), None);
    }
}
