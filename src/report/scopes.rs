//! The report's scopes section: memory by scope, estimated from the samples (`scope`).

use std::collections::HashMap;

use super::pins::Shares;
use super::sites::{LEAF_FRAMES, told_apart};
use crate::estimate::bytes_interval;
use crate::own;
use crate::sampler::{self, Sampling};
use crate::scope::read::{self, ScopeFigures};
use crate::sites::read::{self as site_read, Grouping, SiteFigures};

/// Sites listed per scope.
const TOP_SITES: usize = 3;

/// Memory by scope ([`Scope`](crate::Scope)): estimates from the sampled allocations made in each,
/// in either tier (the exact tier counts by size class and thread, not by scope).
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Scopes {
    /// The sampling the estimates come from.
    pub sampling: Sampling,
    /// Named scopes made.
    pub named: usize,
    /// Named scopes the table holds.
    pub capacity: usize,
    /// Names refused for want of room: their samples are in the scope `other`.
    pub refused_names: u64,
    /// Every scope with a sample, by bytes in use, largest first; the samples taken outside every
    /// scope are one more row (`name: None`).
    pub rows: Vec<ScopeRow>,
    /// Whether the sites' frames are names ([`Scopes::symbolize`]) rather than addresses.
    pub symbolized: bool,
}

impl Scopes {
    /// Names the frames of each scope's top sites, as [`Sites::symbolize`](crate::report::Sites::symbolize)
    /// does (with its cost, and its memory kept out of the program's).
    pub fn symbolize(&mut self) {
        let stacks: Vec<Vec<usize>> = self
            .rows
            .iter()
            .flat_map(|r| &r.top_sites)
            .map(|s| s.stack.iter().map(|&pc| pc as usize).collect())
            .collect();
        let Some(frames) = own::handed_over(|| told_apart(&stacks)) else { return };
        for (site, frames) in self.rows.iter_mut().flat_map(|r| &mut r.top_sites).zip(frames) {
            site.frames = frames;
        }
        self.symbolized = true;
    }
}

/// One of a scope's top sites.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ScopeSite {
    /// The site's stack: return addresses, leaf first.
    pub stack: Vec<u64>,
    /// The leaf frames: addresses in hex, names after [`Scopes::symbolize`].
    pub frames: Vec<String>,
    /// Estimated bytes in use that the scope allocated at this site.
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_bytes"))]
    pub inuse_bytes: u64,
}

/// One scope's memory.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct ScopeRow {
    /// The scope's name (`other` for the names refused); `None` for allocations made outside every
    /// scope.
    pub name: Option<String>,
    /// Estimated bytes in use (requested sizes), with the 95% interval below (as
    /// [`Scope::live_bytes`](crate::Scope::live_bytes) gives it).
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_bytes"))]
    pub inuse_bytes: u64,
    /// 95% interval of `inuse_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_bytes_interval"))]
    pub inuse_bytes_interval: (u64, u64),
    /// Estimated blocks in use.
    #[cfg_attr(feature = "serde", serde(rename = "est_inuse_blocks"))]
    pub inuse_blocks: u64,
    /// Estimated bytes allocated since start, with the 95% interval below.
    #[cfg_attr(feature = "serde", serde(rename = "est_alloc_bytes"))]
    pub alloc_bytes: u64,
    /// 95% interval of `alloc_bytes`.
    #[cfg_attr(feature = "serde", serde(rename = "est_alloc_bytes_interval"))]
    pub alloc_bytes_interval: (u64, u64),
    /// Sampled allocations behind the estimates.
    pub samples: u64,
    /// Whether the publisher publishes the scope under its own name ([`Scope::publish`](crate::Scope::publish)).
    pub published: bool,
    /// Estimated share of the scope's freed blocks that were freed under another scope (or none):
    /// a cache one tenant fills and another empties. `None` under 30 sampled frees.
    #[cfg_attr(feature = "serde", serde(rename = "est_freed_elsewhere_share"))]
    pub freed_elsewhere_share: Option<f64>,
    /// Sampled frees behind the share and the lifetime.
    pub free_samples: u64,
    /// Estimated median lifetime of the scope's freed blocks (power-of-two resolution); `None`
    /// under 30 sampled frees.
    #[cfg_attr(feature = "serde", serde(rename = "est_median_lifetime_ns"))]
    pub median_lifetime_ns: Option<u64>,
    /// Estimated free bytes in the allocator's slabs that the scope's live blocks keep resident, as
    /// [`SiteRow::pinned_bytes`](crate::report::SiteRow::pinned_bytes) charges them (blocks sampled without a
    /// stack are charged to no scope). `None` where the backend does not split its holes by class.
    #[cfg_attr(feature = "serde", serde(rename = "est_pinned_bytes"))]
    pub pinned_bytes: Option<u64>,
    /// The sites where the scope's bytes in use were allocated, most first (up to 3).
    pub top_sites: Vec<ScopeSite>,
}

/// The section; `None` until a scope is made. `shares`: the holes of the allocator's slabs shared
/// among sites, where it has slabs.
pub(crate) fn section(shares: Option<&Shares>) -> Option<Scopes> {
    let (named, capacity, refused_names) = read::occupancy();
    if named == 0 && refused_names == 0 {
        return None;
    }
    let none = HashMap::new();
    let mut by_scope: HashMap<u16, Vec<SiteFigures>> = HashMap::new();
    for site in site_read::snapshot(shares.map_or(&none, |s| &s.by_site), Grouping::StackAndScope) {
        by_scope.entry(site.scope).or_default().push(site);
    }
    let rows = read::snapshot()
        .iter()
        .map(|s| {
            let sites = by_scope.remove(&s.id).unwrap_or_default();
            row(s, &sites, shares.is_some())
        })
        .collect();
    Some(Scopes { sampling: sampler::sampling(), named, capacity, refused_names, rows, symbolized: false })
}

/// The row of scope `s`, whose sites (with a stack) are `sites`, largest in use first.
fn row(s: &ScopeFigures, sites: &[SiteFigures], pins_by_slab: bool) -> ScopeRow {
    let t = &s.tally;
    let (inuse_bytes, inuse_bytes_interval, _) = read::live_bytes(t);
    let alloc_bytes = t.alloc_bytes.round() as u64;
    ScopeRow {
        name: s.name.map(str::to_owned),
        inuse_bytes,
        inuse_bytes_interval,
        inuse_blocks: t.inuse_blocks.round() as u64,
        alloc_bytes,
        alloc_bytes_interval: bytes_interval(alloc_bytes, t.alloc_bytes_var, u64::MAX),
        samples: t.samples,
        published: s.published,
        freed_elsewhere_share: t.cross_share(),
        free_samples: t.free_samples,
        median_lifetime_ns: t.median_lifetime_ns(),
        pinned_bytes: pins_by_slab.then(|| sites.iter().map(|s| s.pinned_bytes).sum::<f64>().round() as u64),
        top_sites: sites
            .iter()
            .filter(|s| !s.stack.is_empty() && s.tally.inuse_bytes >= 0.5)
            .take(TOP_SITES)
            .map(|s| ScopeSite {
                stack: s.stack.iter().map(|&pc| pc as u64).collect(),
                frames: s.stack.iter().take(LEAF_FRAMES).map(|pc| format!("{pc:#x}")).collect(),
                inuse_bytes: s.tally.inuse_bytes.round() as u64,
            })
            .collect(),
    }
}
