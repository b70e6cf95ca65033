//! The answer to "where do my resident bytes go, is it fragmentation, and what do I change": a
//! [`Breakdown`] of RSS into buckets that add up to it, and [`Finding`]s drawn from it, largest
//! first, each with a remedy for the wrapped backend. Built by [`report()`](fn@crate::report) from
//! figures it has already read; nothing here reads the process or the allocator itself.
//!
//! Thresholds, the evidence per backend and the known blind spots: `docs/DIAGNOSIS.md`.

mod breakdown;
mod findings;
mod kinds;
mod limit;
mod step;
mod thresholds;

pub use crate::backend::heap_split::{NotSplit, Part, Source};
pub use breakdown::{Breakdown, Sources};
pub use kinds::{Finding, FindingKind, Severity};
pub use step::STEP_FINDING_FOR;
pub use thresholds::MIN_BYTES;

pub(crate) use breakdown::split;
pub(crate) use findings::{Evidence, find, remedy};
pub(crate) use limit::{in_force as limit_in_force, set_in_force as set_limit_in_force};
pub(crate) use step::{recent as recent_step, set_last as set_last_step};

/// Where resident memory goes, and what it means.
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// let report = frag::report();
/// if let Some(d) = &report.diagnosis {
///     for f in d.findings.iter().filter(|f| f.severity == frag::report::diagnosis::Severity::Warn) {
///         eprintln!("{}: {} -> {}", f.kind.name(), f.summary, f.remedy);
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Diagnosis {
    /// RSS split into buckets that sum to it.
    pub breakdown: Breakdown,
    /// What the breakdown means, largest effect first; configuration traps last.
    pub findings: Vec<Finding>,
}
