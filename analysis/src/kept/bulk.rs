//! Reads over many objects at once, for the queries that touch millions of them: a page of a
//! group's members sorted by a column, an object's referrers. The per-object accessors
//! ([`Kept::size`], [`Kept::all_edges`], …) cost a call, a width multiply and a run search per
//! value; these read a column in one loop specialised to its width
//! ([`crate::packed::Packed::gather`], [`crate::packed::Packed::for_each_equal`]), which is
//! what keeps a drill into a 5M-member group within its 100 ms (BENCHMARKS.md, issue 14).

use super::Kept;
use crate::figures::GroupId;
use crate::graph::ObjectIndex;
use crate::packed::Packed;

/// Turns a column's stored values into what its accessor returns.
fn stored_to_value(column: ObjectColumn, values: &mut [u64]) {
    match column {
        // Stored as site + 1, 0 for none.
        ObjectColumn::Site => {
            for v in values {
                *v = u64::from((*v as u32).wrapping_sub(1));
            }
        }
        ObjectColumn::Thread => {
            for v in values {
                *v = u64::from(*v as u32);
            }
        }
        _ => {}
    }
}

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
        self.packed(column).gather(objects, out);
        stored_to_value(column, &mut out[from..]);
    }

    /// Appends `column`'s value for objects `range` to `out`, in order.
    pub fn decode_range(
        &self,
        column: ObjectColumn,
        range: std::ops::Range<usize>,
        out: &mut Vec<u64>,
    ) {
        let from = out.len();
        self.packed(column).decode_range(range, out);
        stored_to_value(column, &mut out[from..]);
    }

    /// Calls `each(members, values)` for the members of group `id` (none for an unknown id),
    /// ascending, a chunk of objects at a time: `values` holds `column`'s value for each
    /// member (as [`Kept::gather`] gives it), nothing without a column. One pass over the
    /// slot column and one over `column`'s, a chunk at a time, with no list of every member
    /// (20 MB at 5M members, page faults and copies as it grows).
    pub fn for_each_member_chunk(
        &self,
        id: GroupId,
        column: Option<ObjectColumn>,
        mut each: impl FnMut(&[ObjectIndex], &[u64]),
    ) {
        const CHUNK: usize = 4096;
        let Some(g) = self.groups.index(id) else {
            return;
        };
        let slot = u64::from(self.frames() + g);
        let mut slots = Vec::with_capacity(CHUNK);
        let mut members = Vec::with_capacity(CHUNK);
        let mut block = Vec::with_capacity(CHUNK);
        let mut values = Vec::with_capacity(CHUNK);
        for start in (0..self.objects).step_by(CHUNK) {
            let end = (start + CHUNK).min(self.objects);
            slots.clear();
            self.slots.decode_range(start..end, &mut slots);
            members.clear();
            members.extend(
                slots
                    .iter()
                    .enumerate()
                    .filter(|&(_, &s)| s == slot)
                    .map(|(k, _)| (start + k) as ObjectIndex),
            );
            if members.is_empty() {
                continue;
            }
            values.clear();
            match column {
                None => each(&members, &[]),
                // A chunk of members only: read the whole chunk's values at once.
                Some(column) if members.len() == end - start => {
                    self.decode_range(column, start..end, &mut values);
                    each(&members, &values);
                }
                Some(column) if members.len() * 4 >= end - start => {
                    block.clear();
                    self.decode_range(column, start..end, &mut block);
                    values.extend(members.iter().map(|&o| block[o as usize - start]));
                    each(&members, &values);
                }
                Some(column) => {
                    self.gather(column, &members, &mut values);
                    each(&members, &values);
                }
            }
        }
    }

    fn packed(&self, column: ObjectColumn) -> &Packed {
        match column {
            ObjectColumn::Id => self.ids.as_ref().unwrap_or(&self.seqs),
            ObjectColumn::Addr => &self.addrs,
            ObjectColumn::Size => &self.sizes,
            ObjectColumn::Seq => &self.seqs,
            ObjectColumn::Site => &self.site,
            ObjectColumn::Thread => &self.thread,
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

    /// The objects allocated at `site` (or of unknown site, for [`crate::graph::NO_SITE`]),
    /// ascending: one pass over the site column's bytes.
    pub fn site_members(&self, site: u32) -> Vec<ObjectIndex> {
        let mut members = Vec::new();
        // Stored as site + 1, 0 for none.
        self.site
            .for_each_equal(u64::from(site.wrapping_add(1)), |o| {
                members.push(o as ObjectIndex)
            });
        members
    }

    /// The objects in holder slot `slot`, ascending: one pass over the slot column.
    pub(super) fn slot_members(&self, slot: u32) -> Vec<ObjectIndex> {
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
        for g in kept.groups().iter() {
            for (column, accessor) in accessors {
                let (mut members, mut values) = (Vec::new(), Vec::new());
                kept.for_each_member_chunk(g.id, Some(column), |m, v| {
                    assert_eq!(m.len(), v.len());
                    members.extend_from_slice(m);
                    values.extend_from_slice(v);
                });
                assert_eq!(members, kept.members(g.id), "{:?}", g.id);
                let expected: Vec<u64> = members.iter().map(|&o| accessor(o)).collect();
                assert_eq!(values, expected, "{:?} {column:?}", g.id);
            }
        }
        for site in (0..kept.sites().len() as u32 + 1).chain([crate::graph::NO_SITE]) {
            let expected: Vec<ObjectIndex> = (0..n).filter(|&o| kept.site(o) == site).collect();
            assert_eq!(kept.site_members(site), expected, "site {site}");
        }
        for target in (0..n).step_by(37) {
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
        for (objects, threads, frames, seed) in [(0, 0, 0, 1), (300, 3, 4, 2), (10_000, 6, 5, 3)] {
            agrees(&generate(
                &SyntheticConfig::new(objects, threads, frames).seed(seed),
            ));
        }
    }
}
