//! Where jemalloc's code is, so that a stack its profiler asks for starts at the code that called
//! the allocator rather than inside jemalloc: the address ranges of the executable's functions whose
//! names tikv-jemalloc-sys prefixes `_rjem_` (every jemalloc symbol, public and internal), read once
//! from the executable's symbol table when sampling inside jemalloc starts, and kept in a fixed
//! array that the sample hook searches without a lock.
//!
//! A stack's leading frames up to the outermost one in those ranges (among the first
//! [`JEMALLOC_DEPTH`]) are jemalloc's: the hook, the profiler's backtrace and sample preparation,
//! the allocation's slow path and its entry point. Where the table cannot be read (a stripped
//! binary, an unprefixed jemalloc) nothing is cut here, and symbolization still trims those frames
//! by name (`sites::symbols`).

use crate::sites::symbols::{JEMALLOC_DEPTH, JEMALLOC_PREFIX};
use crate::sync::{AtomicBool, AtomicUsize, Ordering};

/// Most ranges kept: jemalloc 5.3 has about 1,100 prefixed functions.
const CAPACITY: usize = 4096;

static STARTS: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
static ENDS: [AtomicUsize; CAPACITY] = [const { AtomicUsize::new(0) }; CAPACITY];
/// Ranges filled, published with `Release` once they are sorted.
static LEN: AtomicUsize = AtomicUsize::new(0);
static LOADED: AtomicBool = AtomicBool::new(false);

/// Reads jemalloc's ranges from `/proc/self/exe`, once. Allocates and reads a file: never on the
/// allocation path. Returns how many ranges are known.
pub(super) fn load() -> usize {
    if LOADED.swap(true, Ordering::AcqRel) {
        return LEN.load(Ordering::Acquire);
    }
    let mut ranges = read().unwrap_or_default();
    ranges.sort_unstable();
    ranges.truncate(CAPACITY);
    for (i, &(start, end)) in ranges.iter().enumerate() {
        STARTS[i].store(start, Ordering::Relaxed);
        ENDS[i].store(end, Ordering::Relaxed);
    }
    LEN.store(ranges.len(), Ordering::Release);
    ranges.len()
}

/// The `_rjem_` functions of the executable, as run-time address ranges.
fn read() -> Option<Vec<(usize, usize)>> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let file = std::fs::File::open("/proc/self/exe").ok()?;
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    let mut ranges = Vec::new();
    let mut malloc_at = None;
    for sym in elf.symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.kind() != SymbolKind::Text || !name.starts_with(JEMALLOC_PREFIX) || sym.size() == 0 {
            continue;
        }
        if name == "_rjem_malloc" {
            malloc_at = Some(sym.address());
        }
        ranges.push((sym.address(), sym.address().saturating_add(sym.size())));
    }
    // The load bias, from a function whose run-time address is known (0 for a fixed-address binary).
    let runtime = tikv_jemalloc_sys::malloc as *const () as usize as u64;
    let bias = runtime.wrapping_sub(malloc_at?);
    Some(ranges.into_iter().map(|(s, e)| (s.wrapping_add(bias) as usize, e.wrapping_add(bias) as usize)).collect())
}

/// Whether `pc` lies in one of jemalloc's functions. Lock-free, allocation-free.
fn inside(pc: usize) -> bool {
    let len = LEN.load(Ordering::Acquire).min(CAPACITY);
    // The last range starting at or before `pc`.
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if STARTS.get(mid).is_some_and(|s| s.load(Ordering::Relaxed) <= pc) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo.checked_sub(1).and_then(|i| ENDS.get(i)).is_some_and(|e| pc < e.load(Ordering::Relaxed))
}

/// How many of `stack`'s leading frames (return addresses, leaf first) are jemalloc's: up to the
/// outermost among the first [`JEMALLOC_DEPTH`] whose call lies in jemalloc's code.
pub(super) fn leading(stack: &[usize]) -> usize {
    // A return address follows its call: the call itself is one byte before.
    stack.iter().take(JEMALLOC_DEPTH).rposition(|&pc| inside(pc.wrapping_sub(1))).map_or(0, |i| i + 1)
}
