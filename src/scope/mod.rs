//! Scopes: memory by request kind, tenant, component or task, on every sample. [`Scope`] and
//! [`ScopeExt`] (also at the crate root) are the entry points; the rest are what they return.

// The scope table (`scope_table`: names and tallies), the thread's current scope (`current`), the handle
// (`handle`) and the future that polls in one (`future`); the report reads the table through
// `read`. The sample's life (`sample_life`) calls `current_slot`, `arrived` and `departed`: the only
// parts on the sampled path.

mod current;
mod future;
mod handle;
pub(crate) mod read;
pub(crate) mod scope_table;

pub use current::Entered;
pub use future::{ScopeExt, Scoped};
pub use handle::{LiveBytes, Scope, ScopeError};

use crate::estimate::SampleSums;
use scope_table::SCOPES;
pub(crate) use scope_table::{NO_SCOPE, NONE, OTHER_SCOPES};

/// The current scope's slot, for a sample being taken (sampled path).
#[inline]
pub(crate) fn current_slot() -> u16 {
    current::slot()
}

/// A sample adding `sums` was taken in slot `id`.
pub(crate) fn arrived(id: u16, sums: SampleSums) {
    SCOPES.arrived(id, sums);
}

/// A sample of slot `id` was freed after `lifetime_ns` (sampled path): under another scope unless
/// the freeing thread's current one is `id`.
pub(crate) fn departed(id: u16, sums: SampleSums, lifetime_ns: u64) {
    SCOPES.departed(id, sums, current::slot() != id, lifetime_ns);
}
