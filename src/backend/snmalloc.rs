//! snmalloc: `sn_rust_usable_size` for usable sizes, `memory_stats` for reserved address space.

use core::alloc::Layout;

use super::AllocatorStats;
use super::known::KnownAllocator;
use super::introspect::{KnownIntrospect, StatsError};
use super::tuning::actions::Knobs;
use super::list::Backend;
use super::usable::{Rule, SMALL_MAX, Usable, is_plain};
use crate::stats::class::{NUM_CLASSES, class_of};
use crate::stats::snapshot::ClassUsable;
use crate::sync::{AtomicU64, Ordering};

const USABLE_SOURCE: &str =
    "exact: snmalloc usable_size, learnt once per size class (classes are uniform), per block when over-aligned";

/// snmalloc's classes (4 per power of two from 16 B, powers of two for large blocks) are uniform within
/// ours up to here.
const UNIFORM_MAX: usize = 64 << 20;

/// Usable size per class, learnt from the first block seen in it (snmalloc has no size-only query).
static CLASS_USABLE: [AtomicU64; NUM_CLASSES] = [const { AtomicU64::new(0) }; NUM_CLASSES];

/// Records the usable size of `ptr`'s class the first time a block of that class is seen: one load
/// and a predictable branch afterwards.
#[inline(always)]
fn learn_class(ptr: *mut u8, size: usize) {
    if let Some(slot) = CLASS_USABLE.get(class_of(size)) {
        if slot.load(Ordering::Relaxed) == 0 {
            slot.store(usable_at(ptr) as u64, Ordering::Relaxed);
        }
    }
}

/// The usable size learnt for class `class`, if a block of it was ever seen.
fn class_usable(class: usize) -> Option<u64> {
    CLASS_USABLE.get(class).map(|s| s.load(Ordering::Relaxed)).filter(|v| *v != 0)
}

#[inline]
fn usable_at(ptr: *mut u8) -> usize {
    snmalloc_rs::SnMalloc.usable_size(ptr).unwrap_or(0)
}

fn stats() -> AllocatorStats {
    let s = snmalloc_rs::SnMalloc::memory_stats();
    AllocatorStats {
        mapped: Some(s.current_memory_usage as u64),
        peak_mapped: Some(s.peak_memory_usage as u64),
        ..AllocatorStats::default()
    }
}

/// snmalloc has no run-time knobs: every tuning hook keeps its "unsupported" default.
impl KnownAllocator for snmalloc_rs::SnMalloc {
    const BACKEND: Backend = Backend::Snmalloc;

    const VALUE: Self = snmalloc_rs::SnMalloc;

    #[inline(always)]
    fn fast(layout: Layout) -> Option<Rule> {
        is_plain(layout, SMALL_MAX).then_some(Rule::PerBlock(layout.align()))
    }

    #[inline(always)]
    fn usable(ptr: *mut u8, layout: Layout) -> Usable {
        if is_plain(layout, UNIFORM_MAX) {
            learn_class(ptr, layout.size());
            Usable::Uniform
        } else {
            Usable::Explicit(usable_at(ptr))
        }
    }

    fn class_usable(class: usize) -> ClassUsable {
        class_usable(class).map_or(ClassUsable::Requested, ClassUsable::Uniform)
    }
}

impl KnownIntrospect for snmalloc_rs::SnMalloc {
    const USABLE_SOURCE: &'static str = USABLE_SOURCE;

    fn stats() -> Result<Option<AllocatorStats>, StatsError> {
        Ok(Some(stats()))
    }
}

/// Nothing to release or delay: snmalloc returns memory on its own schedule.
impl Knobs for snmalloc_rs::SnMalloc {}
