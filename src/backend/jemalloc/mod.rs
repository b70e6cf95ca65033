//! jemalloc (tikv-jemallocator): `nallocx` for usable sizes, `stats.*` after an `epoch` advance, and
//! its run-time and start-up configuration (`knobs`).

use core::alloc::Layout;
use crate::sync::{AtomicUsize, Ordering};

use tikv_jemalloc_ctl::{epoch, stats};

use super::AllocatorStats;
use super::known::KnownAllocator;
use super::introspect::{KnownIntrospect, Remedy, StatsError};
use super::tuning::actions::Knobs;
use super::tuning::{Decay, Method, Released, ThreadMethod, Trap, TuneError};
use super::list::Backend;
use super::heap_split::{HeapSplit, NotSplit, Source};
use super::usable::{MIN_ALIGN, Rule, SMALL_MAX, Usable, is_plain};
use crate::stats::snapshot::ClassUsable;

mod classes;
mod env;
mod slabs;
pub mod knobs;

use knobs::mallctl::all_arenas;


const USABLE_SOURCE: &str = "exact: jemalloc nallocx, once per size class up to 32 KiB (classes are \
    uniform there), per block above (page-granular) and when over-aligned";

/// jemalloc's small classes (8/16/32/48/64, then 4 per power of two) are uniform within ours up to
/// here. Above, the bundled jemalloc 5.3.1 rounds large requests to whole pages (33,000 B -> 36 KiB),
/// which splits our classes, so those blocks are accounted one by one.
const UNIFORM_MAX: usize = 32 << 10;

/// The usable size of every default-aligned request of at most `size` bytes in its class.
fn class_usable(size: usize) -> usize {
    usable(Layout::from_size_align(size, 1).unwrap_or(Layout::new::<u8>()))
}

/// The flags tikv-jemallocator passes for `layout` (it asks for alignment only when the size class
/// would not provide it).
fn flags(layout: Layout) -> libc::c_int {
    if layout.align() <= MIN_ALIGN && layout.align() <= layout.size() {
        0
    } else {
        layout.align().trailing_zeros() as libc::c_int
    }
}

/// The usable size jemalloc gives a request of `layout`, without allocating.
#[inline]
fn usable(layout: Layout) -> usize {
    // SAFETY: nallocx has no preconditions beyond a non-zero size; for size 0 it returns 0 or the
    // smallest class, which is harmless here. It allocates nothing and takes no locks.
    let n = unsafe { tikv_jemalloc_sys::nallocx(layout.size(), flags(layout)) };
    if n == 0 { layout.size() } else { n }
}

/// jemalloc's smallest large class (`SC_LARGE_MINCLASS`, four pages), read once: `usize::MAX` while
/// unknown or unreadable, so that nothing counts as large.
static LARGE_MIN: AtomicUsize = AtomicUsize::new(0);

/// [`LARGE_MIN`], reading it the first time. jemalloc's answer for a byte aligned to more than any
/// page is its smallest large class (`sz_sa2u`); `nallocx` allocates nothing and takes no locks.
#[inline]
fn large_min() -> usize {
    match LARGE_MIN.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: nallocx has no preconditions beyond a non-zero size; 2 MiB is a valid alignment.
            let n = unsafe { tikv_jemalloc_sys::nallocx(1, tikv_jemalloc_sys::MALLOCX_LG_ALIGN(21)) };
            let n = if n == 0 { usize::MAX } else { n };
            LARGE_MIN.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

/// Bytes in the dirty and muzzy pages of all arenas.
fn unused_pages() -> Result<u64, StatsError> {
    let read = |name: &'static str, key: &[u8]| {
        // SAFETY: `key` is a NUL-terminated mallctl name whose value is a `size_t`.
        unsafe { tikv_jemalloc_ctl::raw::read::<usize>(key) }.map_err(|error| StatsError::Mallctl { name, error })
    };
    let page = read("arenas.page", b"arenas.page\0")?;
    let dirty = read("stats.arenas.<all>.pdirty", all_arenas!("stats.arenas", "pdirty"))?;
    let muzzy = read("stats.arenas.<all>.pmuzzy", all_arenas!("stats.arenas", "pmuzzy"))?;
    Ok(((dirty + muzzy) * page) as u64)
}

fn stats() -> Result<AllocatorStats, StatsError> {
    let read = |r: Result<usize, tikv_jemalloc_ctl::Error>, name: &'static str| {
        r.map(|v| Some(v as u64)).map_err(|error| StatsError::Mallctl { name, error })
    };
    read(epoch::advance().map(|_| 0), "epoch")?;
    Ok(AllocatorStats {
        allocated: read(stats::allocated::read(), "stats.allocated")?,
        active: read(stats::active::read(), "stats.active")?,
        metadata: read(stats::metadata::read(), "stats.metadata")?,
        resident: read(stats::resident::read(), "stats.resident")?,
        mapped: read(stats::mapped::read(), "stats.mapped")?,
        retained: read(stats::retained::read(), "stats.retained")?,
        dirty: Some(unused_pages()?),
        thread_cache: read(
            // SAFETY: `stats.arenas.<i>.tcache_bytes` is a `size_t`.
            unsafe { tikv_jemalloc_ctl::raw::read::<usize>(all_arenas!("stats.arenas", "tcache_bytes")) },
            "stats.arenas.<all>.tcache_bytes",
        )?,
        ..AllocatorStats::default()
    })
}

impl KnownAllocator for tikv_jemallocator::Jemalloc {
    const BACKEND: Backend = Backend::Jemalloc;

    const VALUE: Self = tikv_jemallocator::Jemalloc;

    const TWIN_MAX: usize = 4096;

    /// The 4 KiB class, a small class: its slabs start on page boundaries and are cut into whole
    /// 4 KiB regions, so every block starts on a 4 KiB boundary, and goes through the thread cache. A
    /// request aligned to 4 KiB of the same size class goes through `arena_palloc` instead, and its
    /// free through `sdallocx`'s slow path: about 450 instructions more a sample of a small request.
    /// Where samples are sparse the class's cache is mostly empty when one comes (its GC flushed it),
    /// and the `malloc` refills it from the arena: about 470 instructions in the churn example.
    const PAGE_CLASS: usize = 4096;

    /// A block of a large class (16 KiB and up with 4 KiB pages) lives in an extent of its own, which
    /// starts on a page boundary: jemalloc hands the block out a random number of cache lines into
    /// it (`opt.cache_oblivious`, on by default), and makes the extent one page larger to leave room
    /// for that (`sz_large_pad`), or on the boundary itself when that option is off. So the bytes
    /// from the 4 KiB boundary below the block up to it belong to the block's extent and nobody
    /// else's. An aligned request of a large class is never served from the thread's cache
    /// (`arena_palloc`): about 3,000 instructions a sample on the 32 KiB pair, which the head saves.
    #[inline]
    fn owns_its_head(layout: Layout) -> bool {
        is_plain(layout, usize::MAX) && layout.size() >= large_min()
    }

    #[inline(always)]
    fn fast(layout: Layout) -> Option<Rule> {
        is_plain(layout, SMALL_MAX).then_some(Rule::Uniform)
    }

    #[inline(always)]
    fn usable(_: *mut u8, layout: Layout) -> Usable {
        if is_plain(layout, UNIFORM_MAX) { Usable::Uniform } else { Usable::Explicit(usable(layout)) }
    }

    fn class_usable(class: usize) -> ClassUsable {
        let largest = crate::stats::class::upper_bound(class).filter(|&l| l <= UNIFORM_MAX);
        largest.map_or(ClassUsable::Requested, |l| ClassUsable::Uniform(class_usable(l) as u64))
    }

    /// `thread.tcache.flush`: the thread's cached blocks back in their arena, where the reclaimer's
    /// purge reaches the pages they free. Not `thread.idle`, which also purges the arena on the
    /// allocating thread (12 ms per call measured under the limit tests' load, where the flush takes
    /// tens of microseconds). Called between allocations, never inside one; a raw `mallctl`, so that
    /// no error is built.
    fn assist() -> bool {
        // SAFETY: `thread.tcache.flush` takes and returns nothing; the name is NUL-terminated.
        unsafe {
            tikv_jemalloc_sys::mallctl(
                c"thread.tcache.flush".as_ptr(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
                0,
            ) == 0
        }
    }
}

impl KnownIntrospect for tikv_jemallocator::Jemalloc {
    const USABLE_SOURCE: &'static str = USABLE_SOURCE;

    fn stats() -> Result<Option<AllocatorStats>, StatsError> {
        stats().map(Some)
    }

    fn classes() -> Result<Vec<crate::backend::AllocatorClass>, StatsError> {
        classes::classes()
    }

    fn slab_use(ptrs: &[usize], out: &mut [crate::backend::SlabUse]) -> Result<bool, StatsError> {
        slabs::slab_use(ptrs, out).map(|()| true)
    }

    fn split_heap(a: &AllocatorStats, usable: u64, anon: Option<u64>) -> Option<HeapSplit> {
        let (Some(active), Some(metadata), Some(resident), Some(dirty)) = (a.active, a.metadata, a.resident, a.dirty)
        else {
            return Some(HeapSplit::nothing(NotSplit::NoStatistics(Backend::Jemalloc)));
        };
        // jemalloc's `resident` is an upper bound: it counts pages never touched (or already given
        // back) as resident. All of its memory is anonymous, so whatever it counts above the
        // process's anonymous RSS is certainly not resident; it sits mostly in dirty extents, whose
        // resident part is what a purge releases.
        let over = anon.map_or(0, |a| resident.saturating_sub(a));
        let capped = if over > 0 { Source::Estimated } else { Source::Measured };
        Some(HeapSplit {
            holes: (active.saturating_sub(usable), Source::Measured),
            reclaimable: (dirty.saturating_sub(over), capped),
            metadata: (metadata, Source::Measured),
            accounted: Some((resident - over, capped)),
            not_split: Vec::new(),
        })
    }

    fn remedy(topic: Remedy) -> Option<&'static str> {
        match topic {
            Remedy::Holes => Some(
                "blocks parked in thread caches count here too: workers calling frag::reclaim::idle as they go \
                 idle (with the reclaimer running) flush them, or set a lower tcache_max",
            ),
            Remedy::Reclaimable => Some(
                "jemalloc keeps dirty pages until they decay: frag::tune::jemalloc::purge_all() releases them \
                 now; shorten the decay with frag::tune::jemalloc::set_decay or enable background threads \
                 (frag::tune::jemalloc::set_background_threads(true))",
            ),
            Remedy::CrossThread => Some(
                "large messages freed by a consumer thread refill its thread cache and fault pages back in: \
                 try a lower tcache_max (jemalloc_conf!), whose effect depends on the message pattern",
            ),
            Remedy::Metadata => None,
        }
    }

    fn effective_config() -> String {
        knobs::effective().map_or_else(|e| e.to_string(), |e| e.opt.to_string())
    }

    fn env_traps(name: &str, value: &str) -> Option<Vec<Trap>> {
        env::env_traps(name, value)
    }
}

impl Knobs for tikv_jemallocator::Jemalloc {
    const RECLAIMS: bool = true;

    fn release_free_memory() -> Result<Released, TuneError> {
        knobs::release_free_memory()
    }

    fn reclaim(keep: u64, more: &mut dyn FnMut() -> bool) -> Result<Method, TuneError> {
        knobs::reclaim(keep, more)
    }

    fn release_thread() -> Result<ThreadMethod, TuneError> {
        knobs::thread_idle().map(|()| ThreadMethod::Idle)
    }

    fn set_purge_delay(decay: Decay) -> Result<(), TuneError> {
        knobs::set_decay(knobs::DecayKind::Dirty, decay).map(drop)
    }

    fn purge_delay() -> Result<Decay, TuneError> {
        knobs::decay(knobs::DecayKind::Dirty)
    }

    /// A second: freed pages go back within about a second of going unused, purged a little at a
    /// time on the allocation path (immediate purging would call `madvise` at every free page).
    const PRESSURE_DECAY: Option<Decay> = Some(Decay::After(core::time::Duration::from_secs(1)));
}
