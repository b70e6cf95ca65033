//! The report's scopes section: memory by scope, estimated from the samples (`scope`).

use crate::estimate::bytes_interval;
use crate::sampler::{self, Sampling};
use crate::scope::read::{self, ScopeFigures};

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
}

/// The section; `None` until a scope is made.
pub(crate) fn section() -> Option<Scopes> {
    let (named, capacity, refused_names) = read::occupancy();
    if named == 0 && refused_names == 0 {
        return None;
    }
    Some(Scopes {
        sampling: sampler::sampling(),
        named,
        capacity,
        refused_names,
        rows: read::snapshot().iter().map(row).collect(),
    })
}

fn row(s: &ScopeFigures) -> ScopeRow {
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
    }
}
