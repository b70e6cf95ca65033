//! jemalloc's size classes and its exact per-class counts: `arenas.bin.<j>.*` and
//! `arenas.lextent.<j>.size` for the classes, `stats.arenas.<all>.bins.<j>.*` and `lextents.<j>.*`
//! for the counts (after an `epoch` advance), read by MIB so that each class costs a
//! few lookups rather than a parse of its name.

use tikv_jemalloc_ctl::raw;

use super::knobs::mallctl::all_arenas;
use crate::backend::AllocatorClass;
use crate::backend::introspect::StatsError;

/// A `mallctl` name turned into a MIB once, whose component `at` (a class index) varies.
struct Indexed {
    name: &'static str,
    mib: [usize; 6],
    len: usize,
    at: usize,
}

impl Indexed {
    fn new(name: &'static str, key: &'static [u8], at: usize) -> Result<Self, StatsError> {
        let mut mib = [0usize; 6];
        let len = key.iter().filter(|&&b| b == b'.').count() + 1;
        raw::name_to_mib(key, &mut mib[..len]).map_err(|error| StatsError::Mallctl { name, error })?;
        Ok(Self { name, mib, len, at })
    }

    /// The value for class `j`.
    ///
    /// # Safety
    ///
    /// `T` is the type jemalloc documents for the key.
    unsafe fn read<T: Copy>(&mut self, j: usize) -> Result<T, StatsError> {
        self.mib[self.at] = j;
        // SAFETY: the key's type is `T` (the caller's promise) and the MIB was translated from its name.
        unsafe { raw::read_mib::<T>(&self.mib[..self.len]) }.map_err(|error| StatsError::Mallctl { name: self.name, error })
    }
}

/// Every class jemalloc has, small then large, with its counts; classes never used are included.
pub(super) fn classes() -> Result<Vec<AllocatorClass>, StatsError> {
    let read_u32 = |name: &'static str, key: &[u8]| {
        // SAFETY: `arenas.nbins` and `arenas.nlextents` are `unsigned`.
        unsafe { raw::read::<u32>(key) }.map_err(|error| StatsError::Mallctl { name, error })
    };
    let nbins = read_u32("arenas.nbins", b"arenas.nbins\0")? as usize;
    let nlextents = read_u32("arenas.nlextents", b"arenas.nlextents\0")? as usize;
    // The list first, then the snapshot: jemalloc's counts then include this list's own block.
    let mut out = Vec::with_capacity(nbins + nlextents);
    tikv_jemalloc_ctl::epoch::advance().map_err(|error| StatsError::Mallctl { name: "epoch", error })?;

    let mut size = Indexed::new("arenas.bin.<j>.size", b"arenas.bin.0.size\0", 2)?;
    let mut nregs = Indexed::new("arenas.bin.<j>.nregs", b"arenas.bin.0.nregs\0", 2)?;
    let mut requests = Indexed::new("stats.arenas.<all>.bins.<j>.nrequests", all_arenas!("stats.arenas", "bins.0.nrequests"), 4)?;
    let mut curregs = Indexed::new("stats.arenas.<all>.bins.<j>.curregs", all_arenas!("stats.arenas", "bins.0.curregs"), 4)?;
    let mut curslabs = Indexed::new("stats.arenas.<all>.bins.<j>.curslabs", all_arenas!("stats.arenas", "bins.0.curslabs"), 4)?;
    for j in 0..nbins {
        // SAFETY: each key's type as jemalloc's manual gives it: `size` and the current counts are
        // `size_t`, `nregs` is `uint32_t`, `nrequests` is `uint64_t`.
        unsafe {
            out.push(AllocatorClass {
                size: size.read::<usize>(j)? as u64,
                requests: requests.read::<u64>(j)?,
                held: curregs.read::<usize>(j)? as u64,
                slabs: Some((curslabs.read::<usize>(j)? as u64, u64::from(nregs.read::<u32>(j)?))),
            });
        }
    }

    // A large request up to the thread cache's limit counts once in the cache's requests (merged
    // into `nrequests`), and once more in `nmalloc` when the cache missed and went to the arena;
    // jemalloc reports their sum as `nrequests`. Above the limit only `nmalloc` counts it.
    let cached_up_to = thread_cache_limit()?;
    let mut size = Indexed::new("arenas.lextent.<j>.size", b"arenas.lextent.0.size\0", 2)?;
    let mut nmalloc =
        Indexed::new("stats.arenas.<all>.lextents.<j>.nmalloc", all_arenas!("stats.arenas", "lextents.0.nmalloc"), 4)?;
    let mut requests =
        Indexed::new("stats.arenas.<all>.lextents.<j>.nrequests", all_arenas!("stats.arenas", "lextents.0.nrequests"), 4)?;
    let mut current =
        Indexed::new("stats.arenas.<all>.lextents.<j>.curlextents", all_arenas!("stats.arenas", "lextents.0.curlextents"), 4)?;
    for j in 0..nlextents {
        // SAFETY: as above: `size` and `curlextents` are `size_t`, `nrequests` and `nmalloc` are
        // `uint64_t`.
        unsafe {
            let size = size.read::<usize>(j)? as u64;
            let (reported, arena) = (requests.read::<u64>(j)?, nmalloc.read::<u64>(j)?);
            out.push(AllocatorClass {
                size,
                requests: if size <= cached_up_to { reported.saturating_sub(arena) } else { arena },
                held: current.read::<usize>(j)? as u64,
                slabs: None,
            });
        }
    }
    Ok(out)
}

/// The largest size thread caches serve (`opt.tcache_max`), 0 with caches off (`opt.tcache`).
fn thread_cache_limit() -> Result<u64, StatsError> {
    // SAFETY: `opt.tcache` is a `bool`.
    let on = unsafe { raw::read::<bool>(b"opt.tcache\0") }.map_err(|error| StatsError::Mallctl { name: "opt.tcache", error })?;
    // SAFETY: `opt.tcache_max` is a `size_t`.
    let max = unsafe { raw::read::<usize>(b"opt.tcache_max\0") }
        .map_err(|error| StatsError::Mallctl { name: "opt.tcache_max", error })?;
    Ok(if on { max as u64 } else { 0 })
}
