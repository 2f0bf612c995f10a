//! Reads over many objects at once, for the queries that touch millions of them: a page of a
//! group's members sorted by a column, an object's referrers. The per-object accessors
//! ([`Kept::size`], [`Kept::all_edges`], …) cost a call, a width multiply and a run search per
//! value; these read a column in one loop specialised to its width
//! ([`crate::packed::Packed::gather`], [`crate::packed::Packed::for_each_equal`]), which is
//! what keeps a drill into a 5M-member group within its 100 ms (BENCHMARKS.md, issue 14).

use super::Kept;
use crate::graph::ObjectIndex;

/// A per-object column, for [`Kept::gather`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectColumn {
    Id,
    Addr,
    Size,
    Seq,
    /// The site index, or [`crate::graph::NO_SITE`].
    Site,
    /// The allocating thread's id.
    Thread,
}

impl Kept {
    /// Appends `column`'s value for each of `objects` to `out`, in the order given: what the
    /// column's accessor ([`Kept::size`], [`Kept::site`], …) returns for each.
    pub fn gather(&self, column: ObjectColumn, objects: &[ObjectIndex], out: &mut Vec<u64>) {
        let from = out.len();
        match column {
            ObjectColumn::Id => match &self.ids {
                Some(ids) => ids.gather(objects, out),
                None => self.seqs.gather(objects, out),
            },
            ObjectColumn::Addr => self.addrs.gather(objects, out),
            ObjectColumn::Size => self.sizes.gather(objects, out),
            ObjectColumn::Seq => self.seqs.gather(objects, out),
            ObjectColumn::Site => {
                self.site.gather(objects, out);
                // Stored as site + 1, 0 for none.
                for v in &mut out[from..] {
                    *v = u64::from((*v as u32).wrapping_sub(1));
                }
            }
            ObjectColumn::Thread => {
                self.thread.gather(objects, out);
                for v in &mut out[from..] {
                    *v = u64::from(*v as u32);
                }
            }
        }
    }

    /// The objects that refer to `target`, ascending, each once: one pass over the targets
    /// of all references comparing stored bytes, then a binary search of the offsets per
    /// reference found.
    pub fn holders_of(&self, target: ObjectIndex) -> Vec<ObjectIndex> {
        let mut holders: Vec<ObjectIndex> = Vec::new();
        self.edges
            .for_each_reference_to(u64::from(target), |holder, _| {
                let holder = holder as ObjectIndex;
                if holders.last() != Some(&holder) {
                    holders.push(holder);
                }
            });
        holders
    }

    /// The objects in holder slot `slot`, ascending: one pass over the slot column.
    pub(super) fn slot_members_bulk(&self, slot: u32) -> Vec<ObjectIndex> {
        let mut members = Vec::new();
        self.slots
            .for_each_equal(u64::from(slot), |o| members.push(o as ObjectIndex));
        members
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::Analysis;
    use crate::graph::HeapGraph;
    use crate::synthetic::{SyntheticConfig, generate};

    /// Every bulk read agrees with the per-object accessors, on a graph with sites, threads,
    /// shared objects and references.
    fn agrees(graph: &HeapGraph) {
        let kept = Kept::new(graph, &Analysis::new(graph));
        let n = kept.object_count() as ObjectIndex;
        let all: Vec<ObjectIndex> = (0..n).rev().collect();
        let accessors: [(ObjectColumn, &dyn Fn(ObjectIndex) -> u64); 6] = [
            (ObjectColumn::Id, &|o| kept.id(o)),
            (ObjectColumn::Addr, &|o| kept.addr(o)),
            (ObjectColumn::Size, &|o| kept.size(o)),
            (ObjectColumn::Seq, &|o| kept.seq(o)),
            (ObjectColumn::Site, &|o| u64::from(kept.site(o))),
            (ObjectColumn::Thread, &|o| u64::from(kept.thread(o))),
        ];
        for (column, accessor) in accessors {
            let mut got = vec![7];
            kept.gather(column, &all, &mut got);
            let expected: Vec<u64> = std::iter::once(7)
                .chain(all.iter().map(|&o| accessor(o)))
                .collect();
            assert_eq!(got, expected, "{column:?}");
        }
        for target in 0..n {
            let mut expected: Vec<ObjectIndex> = kept
                .all_edges()
                .filter(|&(_, to)| to == target)
                .map(|(holder, _)| holder)
                .collect();
            expected.dedup();
            assert_eq!(kept.holders_of(target), expected, "holders of {target}");
        }
    }

    #[test]
    fn bulk_reads_agree_with_the_accessors() {
        for (objects, threads, frames, seed) in [(0, 0, 0, 1), (300, 3, 4, 2), (3_000, 6, 5, 3)] {
            agrees(&generate(
                &SyntheticConfig::new(objects, threads, frames).seed(seed),
            ));
        }
    }
}
