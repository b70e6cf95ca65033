//! No unwinder (AArch64 without frame pointers, systems other than Linux with glibc): sampled
//! blocks are followed without a stack, and their site is "no stack".
//!
//! Exports what every unwinder exports: [`ColdFrame`], [`capture`], [`repeats`], [`refresh`], [`summary`].

use super::frames::Frames;
use super::summary::UnwindTables;
use super::trace::Trace;

/// Where a walk would start: nothing to record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColdFrame;

impl ColdFrame {
    /// Nothing to read.
    #[inline(always)]
    pub(crate) fn here() -> Self {
        Self
    }
}

/// No frames.
pub(crate) fn capture(entry: ColdFrame, out: &mut Frames, trace: Option<&Trace>) -> usize {
    let _ = (entry, out, trace);
    0
}

/// No walk to repeat.
pub(crate) fn repeats(entry: ColdFrame, trace: &Trace) -> bool {
    let _ = (entry, trace);
    false
}

/// Nothing to build.
pub(crate) fn refresh() {}

/// No tables with this unwinder.
pub(crate) fn summary() -> Option<UnwindTables> {
    None
}
