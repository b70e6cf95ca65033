//! The system allocator. On glibc: usable sizes from glibc's chunk rule and `malloc_usable_size`,
//! statistics from `mallinfo2` and `malloc_info`, `malloc_trim` and `mallopt` (`knobs`). Elsewhere: no
//! usable sizes and no statistics, only counters and the process view.

use core::alloc::Layout;

use super::AllocatorStats;
use super::known::KnownAllocator;
use super::introspect::{KnownIntrospect, Remedy, StatsError};
use super::tuning::actions::Knobs;
use super::tuning::{Decay, EnvReader, Method, Released, ThreadMethod, Trap, TuneError, unsupported};
use super::list::Backend;
use super::heap_split::{HeapSplit, NotSplit, Source};
use super::usable::{Rule, Usable};
use crate::stats::snapshot::ClassUsable;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub mod knobs;
#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
mod malloc_info;

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
mod glibc {
    use core::alloc::Layout;

    use crate::backend::AllocatorStats;
    use crate::backend::introspect::StatsError;
    use crate::backend::usable::{MIN_ALIGN, Rule, Usable, is_plain};

    pub(crate) const USABLE_SOURCE: &str = "glibc: per block, chunk-size rule up to 32 KiB (checked against \
        malloc_usable_size in the tests; a block carved from a larger free chunk may be up to 24 bytes bigger), \
        malloc_usable_size above and when over-aligned";

    /// Largest request accounted with the chunk rule; glibc's mmap threshold starts at 128 KiB and only
    /// grows, so every such request is served from a heap chunk.
    const RULE_MAX: usize = 32 << 10;

    /// glibc's request-to-chunk rule on 64-bit targets: 8 bytes of header, 16-byte steps, 32-byte
    /// minimum; the usable part of an in-use chunk is its size minus the header.
    ///
    /// Not `malloc_usable_size` on every block: that is a call through the PLT per allocation and per
    /// free, which alone would exceed the overhead budget for small blocks. The rule is what glibc does
    /// for every request below the mmap threshold (128 KiB by default, never lowered by glibc itself).
    #[inline(always)]
    const fn chunk_rule(size: usize) -> usize {
        let chunk = (size + 8 + 15) & !15;
        if chunk < 32 { 24 } else { chunk - 8 }
    }

    /// `chunk_rule` of every size up to `RULE_MAX`, indexed by `(size + 7) / 8`: within each 8-byte
    /// step the rule gives one value (glibc's 16-byte steps start 8 bytes above a multiple of 16, so
    /// they never split an 8-byte step). Built and checked at compile time.
    static USABLE_BY_STEP: [u16; RULE_MAX / 8 + 1] = {
        let mut t = [0u16; RULE_MAX / 8 + 1];
        let mut i = 1;
        while i <= RULE_MAX / 8 {
            let u = chunk_rule(i * 8);
            assert!(chunk_rule(i * 8 - 7) == u && u <= u16::MAX as usize);
            t[i] = u as u16;
            i += 1;
        }
        t
    };

    /// The fast path's rule (see `usable::fast`): requests of at most 32 KiB with at most 16-byte
    /// alignment, which glibc serves with plain `malloc` (`memalign` falls back to it up to 16), get
    /// their usable size from a table.
    #[inline(always)]
    pub(crate) fn fast(layout: Layout) -> Option<Rule> {
        if layout.align() > MIN_ALIGN {
            return None;
        }
        USABLE_BY_STEP.get(layout.size().wrapping_add(7) >> 3).map(|&u| Rule::Recorded(usize::from(u)))
    }

    #[inline(always)]
    pub(crate) fn usable(ptr: *mut u8, layout: Layout) -> Usable {
        if is_plain(layout, RULE_MAX) {
            Usable::Recorded(chunk_rule(layout.size()))
        } else {
            // SAFETY: `ptr` is a live block from glibc's malloc family (the caller guarantees it).
            Usable::Recorded(unsafe { libc::malloc_usable_size(ptr.cast()) })
        }
    }

    #[repr(C)]
    #[derive(Default)]
    struct Mallinfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }

    /// Whether `malloc` is glibc's own: `false` when another allocator interposes it (`LD_PRELOAD`ed
    /// tcmalloc or jemalloc, valgrind's replacement), whose blocks glibc's statistics know nothing
    /// of, and whose presence leaves glibc's arenas half set up (`mallinfo2` then reads through a
    /// null arena under valgrind).
    fn malloc_is_glibcs() -> bool {
        // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names is always safe to call.
        let (malloc, own) = unsafe {
            (
                libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()),
                libc::dlsym(libc::RTLD_DEFAULT, c"__libc_malloc".as_ptr()),
            )
        };
        // A glibc without `__libc_malloc` exported cannot be checked: trust it. Valgrind redirects
        // calls to glibc's own `malloc` rather than the symbol, so it is told by its preloaded objects
        // in `LD_PRELOAD` (it sets the variable for the program it runs).
        let valgrind = std::env::var_os("LD_PRELOAD").is_some_and(|v| v.to_string_lossy().contains("vgpreload"));
        (own.is_null() || malloc == own) && !valgrind
    }

    /// `mallinfo2` (glibc 2.33+) looked up at run time, so the binary still loads on older glibc, where
    /// the legacy `mallinfo` (with `int` fields that wrap at 2 GiB) is used instead.
    ///
    /// # Errors
    ///
    /// When `malloc` is not glibc's (another allocator interposes it): glibc's figures would describe
    /// an allocator nobody uses.
    pub(crate) fn stats() -> Result<Option<AllocatorStats>, StatsError> {
        if !malloc_is_glibcs() {
            return Err(StatsError::MallocInterposed);
        }
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name is always safe to call.
        let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
        let m = if sym.is_null() {
            // SAFETY: mallinfo takes no arguments and returns a plain struct.
            #[allow(deprecated)]
            let m = unsafe { libc::mallinfo() };
            let u = |v: libc::c_int| v as u32 as usize;
            Mallinfo2 {
                arena: u(m.arena),
                hblkhd: u(m.hblkhd),
                uordblks: u(m.uordblks),
                fordblks: u(m.fordblks),
                keepcost: u(m.keepcost),
                ..Mallinfo2::default()
            }
        } else {
            // SAFETY: the symbol is glibc's `struct mallinfo2 mallinfo2(void)`, whose layout
            // `Mallinfo2` reproduces (ten `size_t` fields).
            let f: extern "C" fn() -> Mallinfo2 = unsafe { core::mem::transmute(sym) };
            f()
        };
        let free = super::malloc_info::free_space();
        Ok(Some(AllocatorStats {
            allocated: Some((m.uordblks + m.hblkhd) as u64),
            free: Some(m.fordblks as u64),
            arena: Some(m.arena as u64),
            mmap: Some(m.hblkhd as u64),
            top_releasable: Some(m.keepcost as u64),
            free_whole_pages: free.map(|f| f.whole_pages),
            thread_arena_tops: free.map(|f| f.thread_tops),
            ..AllocatorStats::default()
        }))
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64"))]
pub(crate) use glibc::{USABLE_SOURCE, fast, stats, usable};

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
mod other {
    use core::alloc::Layout;

    use crate::backend::AllocatorStats;
    use crate::backend::introspect::StatsError;
    use crate::backend::usable::{Rule, Usable, is_plain};

    pub(crate) const USABLE_SOURCE: &str =
        "not available for this system allocator: usable bytes equal requested bytes";

    #[inline(always)]
    pub(crate) fn usable(_: *mut u8, _: Layout) -> Usable {
        Usable::Requested
    }

    /// Nothing to record: usable bytes are reported as requested bytes.
    #[inline(always)]
    pub(crate) fn fast(layout: Layout) -> Option<Rule> {
        is_plain(layout, crate::stats::class::TABLE_MAX).then_some(Rule::Uniform)
    }

    pub(crate) fn stats() -> Result<Option<AllocatorStats>, StatsError> {
        Ok(None)
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", target_pointer_width = "64")))]
pub(crate) use other::{USABLE_SOURCE, fast, stats, usable};

impl KnownAllocator for std::alloc::System {
    const BACKEND: Backend = Backend::System;

    const VALUE: Self = std::alloc::System;

    #[inline(always)]
    fn fast(layout: Layout) -> Option<Rule> {
        fast(layout)
    }

    #[inline(always)]
    fn usable(ptr: *mut u8, layout: Layout) -> Usable {
        usable(ptr, layout)
    }

    fn class_usable(_: usize) -> ClassUsable {
        // glibc's 16-byte chunk steps do not line up with our classes: every block records its own.
        if cfg!(all(target_os = "linux", target_env = "gnu")) { ClassUsable::Recorded } else { ClassUsable::Requested }
    }
}

impl KnownIntrospect for std::alloc::System {
    const USABLE_SOURCE: &'static str = USABLE_SOURCE;

    fn stats() -> Result<Option<AllocatorStats>, StatsError> {
        stats()
    }

    fn split_heap(a: &AllocatorStats, usable: u64, anon: Option<u64>) -> Option<HeapSplit> {
        let (Some(in_use), Some(free), Some(arena), Some(mmap), Some(top)) =
            (a.allocated, a.free, a.arena, a.mmap, a.top_releasable)
        else {
            return Some(HeapSplit::nothing(NotSplit::NoStatistics(Backend::System)));
        };
        // What malloc_trim(0) releases: the main heap's top and the whole pages inside free chunks of
        // every arena. Free chunks keep counting pages an earlier trim returned, so no more is taken
        // as resident than anonymous memory beyond the chunks in use and the thread arenas' tops
        // (which malloc_trim leaves alone).
        let pages = a.free_whole_pages.unwrap_or(0);
        let kept = in_use + a.thread_arena_tops.unwrap_or(0);
        let resident_free = anon.map_or(u64::MAX, |anon| anon.saturating_sub(kept));
        let reclaimable = (top + pages).min(free).min(resident_free);
        Some(HeapSplit {
            holes: (free - reclaimable, Source::Estimated),
            reclaimable: (reclaimable, Source::Estimated),
            metadata: (in_use.saturating_sub(usable), Source::Estimated),
            // Address space, resident or not: no more of it is resident than all anonymous memory.
            accounted: Some(((arena + mmap).min(anon.unwrap_or(u64::MAX)), Source::Estimated)),
            not_split: if a.free_whole_pages.is_some() { Vec::new() } else { vec![NotSplit::GlibcMallocInfo] },
        })
    }

    fn remedy(topic: Remedy) -> Option<&'static str> {
        Some(match topic {
            Remedy::Holes => {
                "glibc's per-thread arenas fragment most: jemalloc or mimalloc usually keep far fewer holes, \
                 or cap arenas with frag::tune::glibc::set(Mallopt::ArenaMax(..)); each thread's cache \
                 (tcache: up to 7 blocks of every size up to 1 KiB) also splits free chunks that a trim \
                 cannot return, and nothing but the thread's exit empties it: \
                 GLIBC_TUNABLES=glibc.malloc.tcache_count=0 turns the caches off"
            }
            Remedy::Reclaimable => {
                "glibc returns the top of its heap only above M_TRIM_THRESHOLD: frag::tune::glibc::trim() \
                 (malloc_trim) releases it now, frag::tune::glibc::set(Mallopt::TrimThreshold(..)) lowers the \
                 threshold"
            }
            Remedy::CrossThread => "glibc returns such blocks to the allocating thread's arena under a lock",
            Remedy::Metadata => {
                "on glibc this bucket also holds chunk headers (8 B per block) and blocks malloc'd by C code \
                 outside Rust: many tiny blocks make it large"
            }
        })
    }

    fn effective_config() -> String {
        "glibc defaults unless changed with mallopt or MALLOC_*_ variables".to_owned()
    }

    fn env_traps(name: &str, value: &str) -> Option<Vec<Trap>> {
        (EnvReader::of(name, value) == Some(EnvReader::GlibcMalloc)).then(Vec::new)
    }
}

impl Knobs for std::alloc::System {
    const RECLAIMS: bool = cfg!(all(target_os = "linux", target_env = "gnu"));

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn release_free_memory() -> Result<Released, TuneError> {
        knobs::trim()
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn reclaim(keep: u64, _: &mut dyn FnMut() -> bool) -> Result<Method, TuneError> {
        knobs::trim_keeping(keep)
    }

    fn release_thread() -> Result<ThreadMethod, TuneError> {
        Err(unsupported(
            Self::BACKEND,
            "release_thread",
            "glibc has no call that empties a thread's cache (tcache) before the thread exits; \
             GLIBC_TUNABLES=glibc.malloc.tcache_count=0 turns the caches off",
        ))
    }

    fn set_purge_delay(_: Decay) -> Result<(), TuneError> {
        Err(unsupported(
            Backend::System,
            "purge delay",
            "glibc returns memory by trimming the top of its heap: see tune::glibc::Mallopt::TrimThreshold",
        ))
    }
}
