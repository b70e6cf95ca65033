//! The report itself: everything `frag` knows about the heap at one moment, as built by `collect`,
//! with its JSON form.

use super::diagnosis::Diagnosis;
use super::figures::{FragItself, HeapCounts, ShardPool, SizeClassRow, ThreadRow};
use super::origin::Origin;
use super::ratio::Fragmentation;
use super::scopes::Scopes;
use super::sites::Sites;
use super::warn::Warning;
use crate::backend::{AllocatorStats, UsableSource, WrappedBackend};
use crate::process::ProcessStats;

/// Everything `frag` knows about the heap at one moment. Build one with [`report()`](crate::report()).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Report {
    /// The wrapped allocator; `None` when no `Tracked` allocator is installed (or none has allocated
    /// yet). Serialises as its name: `"jemalloc"`, `"system"`, a custom allocator's name (its `Introspect`), or a type name.
    pub backend: Option<WrappedBackend>,
    /// How `usable_bytes` figures were obtained for this backend; `None` without a `Tracked`
    /// allocator.
    pub usable_source: Option<UsableSource>,
    /// Totals over every thread.
    pub tracked: HeapCounts,
    /// The allocator's own figures, where it has any.
    pub allocator: Option<AllocatorStats>,
    /// The allocator's own size classes that hold or have served a block, with its own counts
    /// (jemalloc; empty on other backends): see [`AllocatorClass`](crate::backend::AllocatorClass) for what
    /// they include.
    pub allocator_classes: Vec<crate::backend::AllocatorClass>,
    /// The kernel's view of the process.
    pub process: ProcessStats,
    /// How much resident memory is not live data.
    pub fragmentation: Fragmentation,
    /// One row per thread with its own shard, then the `retired` and `overflow` aggregates.
    pub threads: Vec<ThreadRow>,
    /// One row per size class that has seen a block.
    pub size_classes: Vec<SizeClassRow>,
    /// Cross-thread frees, estimated from sampled blocks; `None` while sampling is off and nothing
    /// was sampled.
    pub origin: Option<Origin>,
    /// Allocation sites holding the most bytes in use, estimated from sampled stacks; `None` while
    /// site sampling is off and nothing was sampled.
    pub sites: Option<Sites>,
    /// Memory by scope ([`Scope`](crate::Scope)), estimated from the samples; `None` until a scope
    /// is made.
    pub scopes: Option<Scopes>,
    /// Occupancy of the per-thread shard pool.
    pub shards: ShardPool,
    /// Where resident memory goes and what it means: `None` without a process RSS (no `/proc`).
    pub diagnosis: Option<Diagnosis>,
    /// Things the reader should know to interpret the figures.
    pub warnings: Vec<Warning>,
    /// frag's own memory, kept out of every figure above.
    pub frag_itself: FragItself,
}

impl Report {
    /// Resident bytes as the watch and the history read them: the allocator's own figure where it
    /// has one (jemalloc's `resident`), else the process's RSS; `None` with neither.
    pub(crate) fn resident_bytes(&self) -> Option<u64> {
        self.allocator.and_then(|a| a.resident).or(self.process.rss_bytes)
    }

    /// The report as pretty-printed JSON (the `Serialize` form).
    #[cfg(feature = "serde")]
    #[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Needs the `serde` feature (`frag-alloc = { version = "…", features = ["serde"] }`): without
    /// it, a call does not compile, and rustc's error names the feature.
    #[cfg(not(feature = "serde"))]
    #[must_use]
    pub fn to_json(&self) -> String
    where
        for<'a> &'a Report: needs_serde::SerdeFeature,
    {
        "{\"error\":\"frag-alloc was built without its serde feature\"}".to_owned()
    }
}

/// The bound that makes `Report::to_json` name the missing feature when it is off.
#[cfg(not(feature = "serde"))]
#[doc(hidden)]
pub mod needs_serde {
    /// Implemented by nothing: the `serde` feature provides the real `to_json` instead.
    #[diagnostic::on_unimplemented(
        message = "`Report::to_json` needs the `serde` feature of frag-alloc",
        label = "enable it: frag-alloc = {{ features = [\"serde\"] }}"
    )]
    pub trait SerdeFeature {}
}
