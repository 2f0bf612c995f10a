//! Leaks and growth by allocation site (docs/reference.md §8 "Leaks"): unreachable bytes per site
//! (definitely / indirectly lost, docs/reference.md §3), and per-site live bytes across successive
//! snapshots with the sites that keep growing or dominate the heap flagged.
//!
//! Sites are matched across snapshots by their frames (a snapshot's site indices are its own).
//! This module computes from graphs and analyses it is given; it never reads files.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::attribution::Analysis;
use crate::graph::{HeapGraph, NO_SITE, ObjectIndex};
use crate::kept::Kept;

/// Default number of snapshots in a row over which a site must grow to be flagged.
pub const DEFAULT_GROWTH_RUN: usize = 3;

/// A site holding more than this share of the live bytes is flagged.
pub const DOMINANT_SHARE: f64 = 0.75;

/// Unreachable blocks of one allocation site.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteLeaks {
    /// Innermost first; empty for blocks without a site.
    pub frames: Vec<String>,
    pub definitely_lost: u64,
    pub definitely_lost_objects: u64,
    pub indirectly_lost: u64,
    pub indirectly_lost_objects: u64,
}

impl SiteLeaks {
    pub fn bytes(&self) -> u64 {
        self.definitely_lost + self.indirectly_lost
    }
}

/// Unreachable bytes by allocation site, most bytes first (ties by frames).
pub fn leaks_by_site(graph: &HeapGraph, analysis: &Analysis) -> Vec<SiteLeaks> {
    let (definitely, indirectly) = analysis.leaked();
    let mut by_site: HashMap<u32, SiteLeaks> = HashMap::new();
    let o = graph.objects();
    let mut add = |objects: &[ObjectIndex], definitely: bool| {
        for &i in objects {
            let site = o.site[i as usize];
            let row = by_site.entry(site).or_insert_with(|| SiteLeaks {
                frames: match site {
                    NO_SITE => Vec::new(),
                    s => graph.sites[s as usize].frames.clone(),
                },
                ..SiteLeaks::default()
            });
            let size = o.size[i as usize];
            if definitely {
                row.definitely_lost += size;
                row.definitely_lost_objects += 1;
            } else {
                row.indirectly_lost += size;
                row.indirectly_lost_objects += 1;
            }
        }
    };
    add(definitely, true);
    add(indirectly, false);
    let mut rows: Vec<SiteLeaks> = by_site.into_values().collect();
    rows.sort_by(|a, b| {
        b.bytes()
            .cmp(&a.bytes())
            .then_with(|| a.frames.cmp(&b.frames))
    });
    rows
}

/// Live bytes per site (keyed by frames) of one snapshot.
pub fn live_by_site(graph: &HeapGraph) -> HashMap<Vec<String>, u64> {
    let o = graph.objects();
    by_frames((0..o.len()).map(|i| (o.site[i], o.size[i])), &graph.sites)
}

/// [`live_by_site`] of a kept snapshot.
pub fn live_by_site_kept(kept: &Kept) -> HashMap<Vec<String>, u64> {
    by_frames(
        (0..kept.object_count() as u32).map(|o| (kept.site(o), kept.size(o))),
        kept.sites(),
    )
}

/// Live bytes per site's frames, from `(site index, size)` per object.
fn by_frames(
    objects: impl Iterator<Item = (u32, u64)>,
    sites: &[crate::graph::Site],
) -> HashMap<Vec<String>, u64> {
    // Per site index, the unknown site last: a dense table, as one hash per object of
    // millions was most of this function's time.
    let mut per_index: Vec<Option<u64>> = vec![None; sites.len() + 1];
    for (site, size) in objects {
        let i = if site == NO_SITE {
            sites.len()
        } else {
            site as usize
        };
        *per_index[i].get_or_insert(0) += size;
    }
    per_index
        .into_iter()
        .enumerate()
        .filter_map(|(i, bytes)| {
            let frames = match sites.get(i) {
                None => Vec::new(),
                Some(site) => site.frames.clone(),
            };
            Some((frames, bytes?))
        })
        .fold(HashMap::new(), |mut m, (frames, bytes)| {
            // Two site indices with the same frames are one site here.
            *m.entry(frames).or_default() += bytes;
            m
        })
}

/// One site's live bytes across the snapshots seen so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteGrowth {
    pub frames: Vec<String>,
    /// Live bytes at each snapshot, oldest first (0 where the site had no live block).
    pub history: Vec<u64>,
    /// Live bytes grew strictly over the last `run` snapshots.
    pub growing: bool,
    /// The site holds more than [`DOMINANT_SHARE`] of the latest snapshot's live bytes.
    pub dominant: bool,
}

/// Per-site live bytes across successive snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    run: usize,
    snapshots: usize,
    /// Site frames → index in `sites`.
    index: HashMap<Vec<String>, usize>,
    sites: Vec<SiteGrowth>,
    latest_total: u64,
}

impl Growth {
    /// `run`: number of snapshots in a row over which a site must grow to be flagged (at
    /// least 2: one increase).
    pub fn new(run: usize) -> Growth {
        Growth {
            run: run.max(2),
            snapshots: 0,
            index: HashMap::new(),
            sites: Vec::new(),
            latest_total: 0,
        }
    }

    /// Adds the next snapshot's live bytes per site.
    pub fn push(&mut self, live: impl IntoIterator<Item = (Vec<String>, u64)>) {
        self.snapshots += 1;
        let n = self.snapshots;
        self.latest_total = 0;
        for (frames, bytes) in live {
            self.latest_total += bytes;
            let i = *self.index.entry(frames.clone()).or_insert_with(|| {
                self.sites.push(SiteGrowth {
                    frames,
                    history: vec![0; n - 1],
                    ..SiteGrowth::default()
                });
                self.sites.len() - 1
            });
            let history = &mut self.sites[i].history;
            if history.len() == n {
                *history.last_mut().unwrap_or(&mut 0) += bytes;
            } else {
                history.push(bytes);
            }
        }
        let total = self.latest_total;
        for site in &mut self.sites {
            site.history.resize(n, 0);
            let h = &site.history;
            site.growing =
                h.len() >= self.run && h[h.len() - self.run..].windows(2).all(|w| w[0] < w[1]);
            let latest = *h.last().unwrap_or(&0);
            site.dominant = total > 0 && latest as f64 > DOMINANT_SHARE * total as f64;
        }
    }

    /// Adds a snapshot's graph.
    pub fn push_graph(&mut self, graph: &HeapGraph) {
        self.push(live_by_site(graph));
    }

    /// [`Growth::push_graph`] of a kept snapshot.
    pub fn push_kept(&mut self, kept: &Kept) {
        self.push(live_by_site_kept(kept));
    }

    pub fn snapshots(&self) -> usize {
        self.snapshots
    }

    /// Every site seen, in order of first appearance.
    pub fn sites(&self) -> &[SiteGrowth] {
        &self.sites
    }

    /// The flagged sites (growing or dominant), most live bytes at the latest snapshot first.
    pub fn flagged(&self) -> Vec<&SiteGrowth> {
        let mut rows: Vec<&SiteGrowth> = self
            .sites
            .iter()
            .filter(|s| s.growing || s.dominant)
            .collect();
        rows.sort_by_key(|s| std::cmp::Reverse(s.history.last().copied().unwrap_or(0)));
        rows
    }
}
