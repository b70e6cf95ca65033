//! `Report`: a snapshot of the counters, the allocator's own figures and the process view.
//!
//! Field names are part of the API: tooling reads the JSON form (`serde` feature).

pub(crate) mod collect;
mod counters;
pub mod diagnosis;
mod display;
mod document;
mod figures;
mod origin;
mod pins;
mod ratio;
mod scopes;
pub(crate) mod sites;
mod warn;

pub use crate::stats::class::NUM_CLASSES;
pub use collect::allocator_classes;
pub(crate) use collect::breakdown;
pub(crate) use collect::pinned_by_site;
pub(crate) use counters::allocated_bytes_total;
pub use counters::{own_totals, size_classes, totals};
pub use pins::PinMethod;
pub use ratio::RatioInputs;
pub use scopes::{ScopeRow, ScopeSite, Scopes};
pub use sites::{PinnedHoles, SiteRow, Sites};
pub use warn::{Warning, WarningKind};

pub use document::Report;
#[cfg(not(feature = "serde"))]
pub use document::needs_serde;
pub use figures::{FragItself, HeapCounts, RowKind, ShardPool, SizeClassRow, ThreadRow};
pub use origin::{LifetimeRow, Origin, OriginPair};
pub use ratio::Fragmentation;
