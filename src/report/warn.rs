//! What the reader should know to interpret a report: the [`Warning`]s, and the sentence of each.

use core::fmt;

use super::origin::Origin;
use super::scopes::Scopes;
use super::sites::Sites;
use crate::backend::Backend;
use crate::backend::introspect::StatsError;
use crate::backend::registry::registered;
use crate::backend::select::{self, EnvStatus, SELECT_ENV};
use crate::format::Bytes;
use crate::sampler::{self, Sampling};
use crate::sites::Unwinder;
use crate::stats::pool::POOL_SIZE;
use crate::tune::Trap;

/// Something the reader should know to interpret a report: what is missing from it, or why a figure
/// is not shown. Configuration traps appear here and as
/// [`FindingKind::ConfigTrap`](crate::report::diagnosis::FindingKind::ConfigTrap) findings.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Warning {
    /// What the warning is about.
    pub kind: WarningKind,
    /// One sentence with the figures and what to do.
    pub message: String,
}

impl Warning {
    pub(crate) fn new(kind: WarningKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The kinds of [`Warning`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
#[non_exhaustive]
pub enum WarningKind {
    /// No `Tracked` allocator has allocated: every count is zero.
    NotInstalled,
    /// The allocator's own statistics could not be read (or were skipped on a re-entered report).
    AllocatorStats,
    /// `FRAG_ALLOCATOR` named no backend of this build and [`Select`](crate::Select) fell back.
    SelectFallback,
    /// Too little live data for a fragmentation ratio to mean anything.
    SmallHeap,
    /// More threads than per-thread shards: some are counted together.
    PoolFull,
    /// Origin samples were lost because the side table was full.
    DroppedSamples,
    /// A configuration trap ([`tune::Trap`](crate::tune::Trap)).
    ConfigTrap,
    /// The `Tracked` was configured with an invalid sampling rate and uses the default.
    InvalidSampling,
    /// Allocation sites are sampled but have no stacks: this target has no unwinder
    /// ([`Unwinder::None`]), the unwind tables are not built, or the
    /// system refused the call that proves stack memory readable before a walk reads it.
    NoStacks,
    /// Stacks were lost because the site table was full.
    DroppedSites,
    /// Scope names were refused because the scope table was full: their samples are in `other`.
    ScopesFull,
    /// The sampled tier runs with sampling off: only a thread's allocated bytes are known; counts,
    /// frees, per-class and live figures are not estimated.
    UnsampledTier,
}

pub(super) fn not_installed() -> Warning {
    Warning::new(
        WarningKind::NotInstalled,
        "no Tracked allocator is installed (or it has not allocated yet): install frag::Tracked with \
         #[global_allocator]",
    )
}

pub(super) fn allocator_stats(e: &StatsError) -> Warning {
    Warning::new(WarningKind::AllocatorStats, format!("allocator statistics unavailable: {e}"))
}

pub(super) fn reentered() -> Warning {
    Warning::new(WarningKind::AllocatorStats, "report() re-entered (from a Introspect?): allocator statistics skipped")
}

/// When `FRAG_ALLOCATOR` named no backend of this build and `Select` fell back.
pub(super) fn select_fallback() -> Option<Warning> {
    let status = select::env_status()?;
    let value = std::env::var(SELECT_ENV).unwrap_or_default();
    let used = registered().map_or("the default", |r| r.wrapped().name());
    let message = match status {
        EnvStatus::Fine => return None,
        EnvStatus::Unknown => {
            let built: Vec<&str> = Backend::ALL.iter().map(|b| b.name()).collect();
            format!("{SELECT_ENV}={value:?} names no allocator of this build ({}): using {used}", built.join(", "))
        }
        EnvStatus::NotCompiled => {
            format!("{SELECT_ENV}={value:?}: that allocator's feature is not compiled into this build: using {used}")
        }
    };
    Some(Warning::new(WarningKind::SelectFallback, message))
}

/// When there is too little live data for a ratio (see `ratio::MEANINGFUL_LIVE_BYTES`).
pub(super) fn small_heap(usable_bytes: u64) -> Option<Warning> {
    let floor = super::ratio::MEANINGFUL_LIVE_BYTES;
    (usable_bytes < floor).then(|| {
        Warning::new(
            WarningKind::SmallHeap,
            format!(
                "less than {} live: fragmentation ratios are not shown (they would measure the allocator's fixed \
                 overhead)",
                Bytes(floor)
            ),
        )
    })
}

pub(super) fn pool_full(unslotted_threads: u64) -> Option<Warning> {
    (unslotted_threads > 0).then(|| {
        Warning::new(
            WarningKind::PoolFull,
            format!(
                "{unslotted_threads} threads found all {POOL_SIZE} per-thread counter slots taken and are counted \
                 together in the overflow row"
            ),
        )
    })
}

pub(super) fn dropped_samples(o: &Origin) -> Option<Warning> {
    (o.dropped_samples > 0).then(|| {
        Warning::new(
            WarningKind::DroppedSamples,
            format!(
                "{} origin samples dropped: the side table was full (raise the mean with frag::set_sampling)",
                o.dropped_samples
            ),
        )
    })
}

pub(super) fn config_trap(trap: &Trap) -> Warning {
    Warning::new(WarningKind::ConfigTrap, trap.to_string())
}

/// The sampled tier with sampling off, and a `Tracked` configured with an invalid sampling.
pub(super) fn sampling() -> Vec<Warning> {
    let mut out = Vec::new();
    if crate::stats::sampled() && sampler::sampling() == Sampling::Off {
        out.push(Warning::new(
            WarningKind::UnsampledTier,
            "the sampled tier runs with sampling off: counts, frees, per-class and live figures are not \
             estimated (only each thread's allocated bytes are known); turn sampling on with frag::set_sampling, \
             or count every call with Tracked<_, frag::Exact>",
        ));
    }
    if let Some(e) = sampler::configured_error() {
        out.push(Warning::new(
            WarningKind::InvalidSampling,
            format!("Tracked configured with an invalid sampling ({e}): the default is used"),
        ));
    }
    out
}

/// The share of the site table in use from which the report warns before stacks are dropped.
const SITES_NEARLY_FULL: f64 = 0.9;

/// Sites without stacks, and stacks lost to a full table.
/// When names found the scope table full.
pub(super) fn scopes(s: &Scopes) -> Option<Warning> {
    (s.refused_names > 0).then(|| {
        Warning::new(
            WarningKind::ScopesFull,
            format!(
                "{} scope names found the table full ({} named scopes) and share the scope `other`: scopes are \
                 for bounded sets (tenants, endpoints, components), not one name per request",
                s.refused_names, s.capacity
            ),
        )
    })
}

pub(super) fn sites(s: &Sites) -> Vec<Warning> {
    let mut out = Vec::new();
    if s.samples > 0 {
        let why = match (s.unwinder, &s.unwind_tables) {
            (Unwinder::None, _) => Some(
                "allocation sites have no stacks: this target has no unwind tables frag can walk (build with \
                 RUSTFLAGS=\"-C force-frame-pointers=yes\" for the frame-pointer walk)",
            ),
            (Unwinder::UnwindTables, None) => Some("allocation sites have no stacks: the unwind tables are not built"),
            _ => None,
        };
        if let Some(why) = why {
            out.push(Warning::new(WarningKind::NoStacks, why));
        }
    }
    if s.unproven_stacks > 0 {
        out.push(Warning::new(
            WarningKind::NoStacks,
            format!(
                "{} sampled allocations have no stack: the system refused process_vm_readv, with which frag \
                 asks which stack memory is readable before a walk reads it (a seccomp filter?); allow it \
                 for stacks (docs/RELIABILITY.md lists the calls frag makes)",
                s.unproven_stacks
            ),
        ));
    }
    let used = s.sites as f64 / s.site_capacity.max(1) as f64;
    let remedy = "each distinct stack keeps its site for the life of the process, and rarer stacks are met \
                  less often at a larger mean: raise it with frag::set_sampling (e.g. Sampling::MeanBytes(4 << 20))";
    if s.dropped_stacks > 0 {
        out.push(Warning::new(
            WarningKind::DroppedSites,
            format!(
                "{} sampled stacks found the site table full ({} of {} sites used) and count as \"no stack\": {remedy}",
                s.dropped_stacks, s.sites, s.site_capacity
            ),
        ));
    } else if used >= SITES_NEARLY_FULL {
        out.push(Warning::new(
            WarningKind::DroppedSites,
            format!(
                "the site table is {:.0}% full ({} of {} sites): new stacks will soon count as \"no stack\"; {remedy}",
                used * 100.0,
                s.sites,
                s.site_capacity
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::Sampling;

    fn sites(used: usize, dropped: u64) -> Sites {
        Sites {
            sampling: Sampling::DEFAULT,
            unwinder: Unwinder::UnwindTables,
            unwind_tables: None,
            samples: 0,
            sites: used,
            site_capacity: 4096,
            dropped_stacks: dropped,
            switched_stacks: 0,
            switched_stacks_bytes: 0,
            unproven_stacks: 0,
            no_stack_inuse_bytes: 0,
            top: Vec::new(),
            pinned: None,
            symbolized: false,
        }
    }

    /// The report says how full the site table is before it drops stacks, and what to do.
    #[test]
    fn a_nearly_full_site_table_is_warned_before_it_drops() {
        assert!(super::sites(&sites(3000, 0)).is_empty());
        let nearly = super::sites(&sites(3700, 0));
        assert_eq!(nearly.len(), 1);
        assert!(nearly[0].message.contains("90% full (3700 of 4096 sites)"), "{}", nearly[0].message);
        assert!(nearly[0].message.contains("frag::set_sampling"), "{}", nearly[0].message);
        let full = super::sites(&sites(4000, 12));
        assert!(
            full[0].message.starts_with("12 sampled stacks found the site table full (4000 of 4096"),
            "{}",
            full[0].message
        );
    }
}
