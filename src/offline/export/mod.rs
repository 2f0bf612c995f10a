//! The export formats of `heaptui report --format` that other tools read: CSV of the thread
//! ranking ([`csv`]), collapsed stacks for flame graphs ([`collapsed`]) and a gzipped pprof
//! profile ([`pprof`]). (`json` is the report JSON of `report.rs`.)
//!
//! Each export is a pure function from a snapshot (and, for CSV, the report built from it) to
//! bytes written on the given writer. None analyses anything itself: live bytes by allocation
//! stack are summed from the graph's objects, rankings come from the report.

pub mod collapsed;
pub mod csv;
pub mod pprof;

use std::collections::HashMap;

use heaptui_analysis::{HeapGraph, NO_SITE, SiteIndex};

/// Live blocks and bytes of one allocation site.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SiteTotals {
    pub objects: u64,
    pub bytes: u64,
}

/// Objects and bytes per site index (`NO_SITE` for blocks without a stack), in site order with
/// the unknown site last, so that exports are deterministic.
pub(crate) fn totals_by_site(graph: &HeapGraph) -> Vec<(SiteIndex, SiteTotals)> {
    let o = graph.objects();
    let mut per_site = vec![SiteTotals::default(); graph.sites.len()];
    let mut unknown = SiteTotals::default();
    for i in 0..o.len() {
        let t = match o.site[i] {
            NO_SITE => &mut unknown,
            s => &mut per_site[s as usize],
        };
        t.objects += 1;
        t.bytes += o.size[i];
    }
    let mut rows: Vec<(SiteIndex, SiteTotals)> = per_site
        .into_iter()
        .enumerate()
        .filter(|(_, t)| t.objects > 0)
        .map(|(s, t)| (s as SiteIndex, t))
        .collect();
    if unknown.objects > 0 {
        rows.push((NO_SITE, unknown));
    }
    rows
}

/// The frames of a site, innermost first; `[unknown]` for a block without a stack.
pub(crate) fn site_frames(graph: &HeapGraph, site: SiteIndex) -> Vec<&str> {
    let frames: Vec<&str> = match site {
        NO_SITE => Vec::new(),
        s => graph.sites[s as usize]
            .frames
            .iter()
            .map(String::as_str)
            .collect(),
    };
    if frames.is_empty() {
        vec![UNKNOWN_FRAME]
    } else {
        frames
    }
}

pub(crate) const UNKNOWN_FRAME: &str = "[unknown]";

/// Groups values by key, keeping the keys' first-appearance order.
pub(crate) fn merge_in_order<K: std::hash::Hash + Eq + Clone>(
    rows: impl IntoIterator<Item = (K, SiteTotals)>,
) -> Vec<(K, SiteTotals)> {
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut out: Vec<(K, SiteTotals)> = Vec::new();
    for (k, t) in rows {
        match index.get(&k) {
            Some(&i) => {
                out[i].1.objects += t.objects;
                out[i].1.bytes += t.bytes;
            }
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, t));
            }
        }
    }
    out
}
