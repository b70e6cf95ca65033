//! `Tracked` over a bump arena of the user's own (a "MemArena": blocks are carved one after another
//! from one reserved region and never freed one by one; only a reset frees them all), with a
//! `Introspect`. Ground truth: the arena's own counters, and RSS from `/proc`, which a free must not
//! lower. The report must show the freed bytes as holes the arena keeps.

mod common;

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Address space reserved at the first allocation (pages become resident only when touched).
const REGION: usize = 4 << 30;

struct Bump;

static BASE: AtomicPtr<u8> = AtomicPtr::new(core::ptr::null_mut());
/// Bytes carved so far (the bump offset).
static OFFSET: AtomicUsize = AtomicUsize::new(0);
/// Live blocks and their requested bytes, counted by the arena itself.
static LIVE_BLOCKS: AtomicU64 = AtomicU64::new(0);
static LIVE_BYTES: AtomicU64 = AtomicU64::new(0);

fn base() -> *mut u8 {
    let b = BASE.load(Relaxed);
    if !b.is_null() {
        return b;
    }
    // SAFETY: an anonymous private reservation with valid arguments.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            REGION,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return core::ptr::null_mut();
    }
    match BASE.compare_exchange(core::ptr::null_mut(), p.cast(), Relaxed, Relaxed) {
        Ok(_) => p.cast(),
        Err(winner) => {
            // SAFETY: our own reservation, which lost the race and is unused.
            unsafe { libc::munmap(p, REGION) };
            winner
        }
    }
}

// SAFETY: blocks are disjoint ranges of the region, aligned as asked, never handed out twice;
// `dealloc` only counts.
unsafe impl GlobalAlloc for Bump {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = base();
        if base.is_null() {
            return core::ptr::null_mut();
        }
        let mut offset = OFFSET.load(Relaxed);
        loop {
            let start = (base as usize + offset).next_multiple_of(layout.align()) - base as usize;
            let end = start + layout.size();
            if end > REGION {
                return core::ptr::null_mut();
            }
            match OFFSET.compare_exchange_weak(offset, end, Relaxed, Relaxed) {
                Ok(_) => {
                    LIVE_BLOCKS.fetch_add(1, Relaxed);
                    LIVE_BYTES.fetch_add(layout.size() as u64, Relaxed);
                    // SAFETY: `start + size` is within the reserved region.
                    return unsafe { base.add(start) };
                }
                Err(now) => offset = now,
            }
        }
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, layout: Layout) {
        LIVE_BLOCKS.fetch_sub(1, Relaxed);
        LIVE_BYTES.fetch_sub(layout.size() as u64, Relaxed);
    }
}

struct BumpProbe;

impl frag::Introspect for BumpProbe {
    fn name(&self) -> &'static str {
        "bump-arena"
    }

    fn usable_size(&self, _ptr: *mut u8, layout: Layout) -> Option<usize> {
        Some(layout.size())
    }

    fn stats(&self) -> Option<frag::backend::AllocatorStats> {
        let mut s = frag::backend::AllocatorStats::default();
        s.allocated = Some(LIVE_BYTES.load(Relaxed));
        // Every carved byte stays in use by the arena until a reset: all of it is "active".
        s.active = Some(OFFSET.load(Relaxed) as u64);
        s.metadata = Some(0);
        Some(s)
    }
}

#[global_allocator]
// Unsampled: the arena counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`).
static A: frag::Tracked<Bump, frag::Exact> =
    frag::Tracked::with_introspect_and_sampling(Bump, &BumpProbe, frag::Sampling::Off);

const MIB: u64 = 1 << 20;

#[test]
fn frees_keep_their_memory_and_the_report_says_where() {
    // Exact counts against the arena's own, read while nothing else allocated.
    let (blocks, bytes, t) = loop {
        let before = (LIVE_BLOCKS.load(Relaxed), LIVE_BYTES.load(Relaxed), OFFSET.load(Relaxed));
        // Everything `Tracked` counted: the program's and frag's own (its unwind tables, built
        // before `main`).
        let t = common::all_totals();
        if (LIVE_BLOCKS.load(Relaxed), LIVE_BYTES.load(Relaxed), OFFSET.load(Relaxed)) == before {
            break (before.0, before.1, t);
        }
    };
    assert_eq!((t.live_blocks, t.allocated_bytes, t.usable_bytes), (blocks, bytes, bytes));

    let held: Vec<Vec<u8>> = (0..1024).map(|i| vec![i as u8 | 1; 64 << 10]).collect(); // 64 MiB
    let before = frag::report();
    let rss = common::rss_bytes();
    drop(held);
    let rss_fell = rss.saturating_sub(common::rss_bytes());
    let after = frag::report();
    let freed = before.tracked.allocated_bytes - after.tracked.allocated_bytes;
    assert!(freed >= 64 * MIB);
    // Ground truth: the arena returned nothing.
    assert!(common::under_memcheck() || rss_fell < MIB, "RSS fell by {rss_fell} on frees the arena keeps");

    // The report puts the freed bytes in holes (the `Introspect`'s `active` minus live usable bytes) and
    // says so with a warning.
    let holes = |r: &frag::Report| r.diagnosis.as_ref().expect("diagnosis").breakdown.holes_bytes;
    let grew = holes(&after) - holes(&before);
    assert!(grew.abs_diff(freed) <= MIB, "holes grew {grew}, freed {freed}");
    let d = after.diagnosis.as_ref().unwrap();
    let f = d.findings.iter().find(|f| f.kind == frag::report::diagnosis::FindingKind::Holes).expect("a holes finding");
    assert_eq!(f.severity, frag::report::diagnosis::Severity::Warn, "{after}");
    assert_eq!(d.breakdown.source(frag::report::diagnosis::Part::Holes), frag::report::diagnosis::Source::Measured);
}
