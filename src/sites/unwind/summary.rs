//! What the unwind tables hold, as the report shows it.

/// What the unwind tables hold, as the report shows it (an allocation-site concern: see
/// [`unwinder`](crate::sites::unwinder)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct UnwindTables {
    /// Modules (the executable and its libraries) with rows.
    pub modules: usize,
    /// Rows, each an address range and its rule.
    pub rows: usize,
    /// Bytes the rows and their indexes take (in mappings of their own, outside the heap frag
    /// measures).
    pub bytes: usize,
    /// Rows with a rule the walker cannot apply (a stack ends there).
    pub unknown_rows: usize,
    /// Call-frame entries that failed to parse (their code has no rows).
    pub failed_entries: usize,
    /// How long the last refresh took to build, in milliseconds (modules already built are reused).
    pub last_build_ms: f64,
}
