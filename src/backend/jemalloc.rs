//! jemalloc (tikv-jemallocator): `nallocx` for usable sizes, `stats.*` after an `epoch` advance.

use core::alloc::Layout;

use tikv_jemalloc_ctl::{epoch, stats};

use super::AllocatorStats;
use super::usable::MIN_ALIGN;

pub(crate) const USABLE_SOURCE: &str = "exact: jemalloc nallocx, once per size class up to 32 KiB (classes are \
    uniform there), per block above (page-granular) and when over-aligned";

/// jemalloc's small classes (8/16/32/48/64, then 4 per power of two) are uniform within ours up to
/// here. Above, the bundled jemalloc 5.3.1 rounds large requests to whole pages (33,000 B -> 36 KiB),
/// which splits our classes, so those blocks are accounted one by one.
pub(crate) const UNIFORM_MAX: usize = 32 << 10;

/// The usable size of every default-aligned request of at most `size` bytes in its class.
pub(crate) fn class_usable(size: usize) -> usize {
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
pub(crate) fn usable(layout: Layout) -> usize {
    // SAFETY: nallocx has no preconditions beyond a non-zero size; for size 0 it returns 0 or the
    // smallest class, which is harmless here. It allocates nothing and takes no locks.
    let n = unsafe { tikv_jemalloc_sys::nallocx(layout.size(), flags(layout)) };
    if n == 0 { layout.size() } else { n }
}

/// Bytes in the dirty and muzzy pages of all arenas (`MALLCTL_ARENAS_ALL` is 4096).
fn unused_pages() -> Result<u64, tikv_jemalloc_ctl::Error> {
    // SAFETY: each name is a NUL-terminated mallctl name whose value is a `size_t`.
    let (page, dirty, muzzy) = unsafe {
        (
            tikv_jemalloc_ctl::raw::read::<usize>(b"arenas.page\0")?,
            tikv_jemalloc_ctl::raw::read::<usize>(b"stats.arenas.4096.pdirty\0")?,
            tikv_jemalloc_ctl::raw::read::<usize>(b"stats.arenas.4096.pmuzzy\0")?,
        )
    };
    Ok(((dirty + muzzy) * page) as u64)
}

pub(crate) fn stats() -> Result<AllocatorStats, String> {
    let err = |what: &str, e: tikv_jemalloc_ctl::Error| format!("jemalloc {what}: {e}");
    epoch::advance().map_err(|e| err("epoch", e))?;
    let read =
        |r: Result<usize, tikv_jemalloc_ctl::Error>, what: &str| r.map(|v| Some(v as u64)).map_err(|e| err(what, e));
    Ok(AllocatorStats {
        allocated: read(stats::allocated::read(), "stats.allocated")?,
        active: read(stats::active::read(), "stats.active")?,
        metadata: read(stats::metadata::read(), "stats.metadata")?,
        resident: read(stats::resident::read(), "stats.resident")?,
        mapped: read(stats::mapped::read(), "stats.mapped")?,
        retained: read(stats::retained::read(), "stats.retained")?,
        dirty: Some(unused_pages().map_err(|e| err("stats.arenas.<all>.pdirty/pmuzzy", e))?),
        ..AllocatorStats::default()
    })
}
