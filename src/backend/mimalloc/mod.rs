//! mimalloc: `mi_usable_size` for usable sizes, `mi_process_info` for commit figures, its options and
//! `mi_collect` (`knobs`).
//!
//! `mi_process_info`'s `current_rss` is not read: on Linux mimalloc estimates it from its own commit
//! figure, which is not the process's resident set. The report's process view reads `/proc` instead.

use core::alloc::Layout;

use super::AllocatorStats;
use super::known::KnownAllocator;
use super::introspect::{KnownIntrospect, Remedy, StatsError};
use super::tuning::actions::Knobs;
use super::tuning::{Decay, Method, Released, ThreadMethod, Trap, TuneError};
use super::list::Backend;
use super::heap_split::{HeapSplit, NotSplit, Source};
use super::usable::{Rule, SMALL_MAX, Usable, is_plain};

pub mod knobs;

const USABLE_SOURCE: &str = "exact: mi_usable_size per block (mimalloc's aligned entry point \
    over-allocates when a page's free list is empty, so usable size is not a function of the request)";

#[inline]
fn usable_at(ptr: *mut u8) -> usize {
    // SAFETY: called with a live block mimalloc handed out (the caller guarantees it).
    unsafe { libmimalloc_sys::mi_usable_size(ptr.cast()) }
}

fn stats() -> AllocatorStats {
    let (mut commit, mut peak_commit) = (0usize, 0usize);
    let null = core::ptr::null_mut();
    // SAFETY: every out-parameter is either null (not wanted) or a valid `usize` to write.
    unsafe { libmimalloc_sys::mi_process_info(null, null, null, null, null, &mut commit, &mut peak_commit, null) };
    AllocatorStats {
        committed: Some(commit as u64),
        peak_committed: Some(peak_commit as u64),
        ..AllocatorStats::default()
    }
}

impl KnownAllocator for ::mimalloc::MiMalloc {
    const BACKEND: Backend = Backend::Mimalloc;

    const VALUE: Self = ::mimalloc::MiMalloc;

    #[inline(always)]
    fn fast(layout: Layout) -> Option<Rule> {
        is_plain(layout, SMALL_MAX).then_some(Rule::PerBlock(layout.align()))
    }

    #[inline(always)]
    fn usable(ptr: *mut u8, _: Layout) -> Usable {
        Usable::Explicit(usable_at(ptr))
    }

    /// `mi_collect(true)` on the calling thread: its heap collected, the blocks other threads freed
    /// into its pages included, and what is free purged.
    fn assist() -> bool {
        // SAFETY: mi_collect has no preconditions.
        unsafe { libmimalloc_sys::mi_collect(true) };
        true
    }
}

impl KnownIntrospect for ::mimalloc::MiMalloc {
    const USABLE_SOURCE: &'static str = USABLE_SOURCE;

    fn stats() -> Result<Option<AllocatorStats>, StatsError> {
        Ok(Some(stats()))
    }

    fn split_heap(a: &AllocatorStats, usable: u64, anon: Option<u64>) -> Option<HeapSplit> {
        let Some(committed) = a.committed else {
            return Some(HeapSplit::nothing(NotSplit::NoStatistics(Backend::Mimalloc)));
        };
        // mimalloc's commit figure is address space, not resident memory: mimalloc 3 on Linux
        // purges free pages with MADV_DONTNEED and does not lower it (989 MiB committed against
        // 275 MiB of RSS, measured after a live set's drop: it stays at the peak). All of its memory
        // is anonymous, so no more of it is resident than the process's anonymous RSS.
        let resident = committed.min(anon.unwrap_or(u64::MAX));
        Some(HeapSplit {
            holes: (resident.saturating_sub(usable), Source::Estimated),
            reclaimable: (0, Source::NotSplit),
            metadata: (0, Source::NotSplit),
            accounted: Some((resident, if resident < committed { Source::Estimated } else { Source::Measured })),
            not_split: vec![NotSplit::MimallocCommitted],
        })
    }

    fn remedy(topic: Remedy) -> Option<&'static str> {
        (topic == Remedy::Reclaimable).then_some(
            "frag::tune::mimalloc::collect(true) releases it now; a shorter purge delay \
             (frag::tune::set_purge_delay) releases it sooner",
        )
    }

    fn effective_config() -> String {
        knobs::current().map_or_else(|e| e.to_string(), |o| format!("{o:?}"))
    }

    /// `MIMALLOC_<option>`: an option name the linked mimalloc does not know is misspelt.
    fn env_traps(name: &str, _: &str) -> Option<Vec<Trap>> {
        let option = name.strip_prefix("MIMALLOC_")?;
        Some(if knobs::is_option_name(option) {
            Vec::new()
        } else {
            vec![Trap::MisspeltEnvVar { name: name.to_owned(), did_you_mean: None }]
        })
    }
}

impl Knobs for ::mimalloc::MiMalloc {
    const RECLAIMS: bool = true;

    fn release_free_memory() -> Result<Released, TuneError> {
        knobs::collect(true)
    }

    /// mimalloc has nothing to keep by: `mi_collect` returns what it can.
    fn reclaim(_: u64, _: &mut dyn FnMut() -> bool) -> Result<Method, TuneError> {
        knobs::collect_now().map(|()| Method::Collect)
    }

    /// On the thread itself, `mi_collect(true)` reaches what it alone can: the blocks other
    /// threads freed into its pages, and its pages that became free.
    fn release_thread() -> Result<ThreadMethod, TuneError> {
        knobs::collect_now().map(|()| ThreadMethod::Collect)
    }

    fn set_purge_delay(decay: Decay) -> Result<(), TuneError> {
        knobs::set(knobs::MimallocOption::PurgeDelay(decay)).map(drop)
    }

    fn purge_delay() -> Result<Decay, TuneError> {
        knobs::current()?
            .into_iter()
            .find_map(|o| match o {
                knobs::MimallocOption::PurgeDelay(d) => Some(d),
                _ => None,
            })
            .ok_or_else(|| crate::backend::tuning::unsupported(Backend::Mimalloc, "purge delay", "not in the linked mimalloc"))
    }

    /// A millisecond, the shortest mimalloc takes at run time (its default is 10 ms).
    const PRESSURE_DECAY: Option<Decay> = Some(Decay::After(core::time::Duration::from_millis(1)));
}
