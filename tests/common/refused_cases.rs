// A backend that refuses on demand, on every path a sampled block takes: `include!`d by
// `tests/refused_exact.rs` (the exact tier, every block sampled) and `tests/refused_sampled.rs` (the
// sampled tier at a 64 KiB mean, where a block of megabytes is always sampled), after their global
// allocator, so that each refusal is met on a sampled path, deterministically, in both tiers.

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc, realloc};
use std::hint::black_box;

// `black_box` on every result: an allocation whose result is only compared with null may be
// removed by the optimiser, which assumes it succeeds.

/// The size refused: a few megabytes, sampled in either tier.
const REFUSED: usize = 5_000_777;

/// `System`, refusing [`REFUSED`] bytes.
pub type Refusing = common::Refusing<REFUSED>;

/// Every refusal in turn, at a site of its own: `alloc`, `alloc_zeroed`, both over-aligned, and
/// `realloc` of a small block, of a large one and of an over-aligned one (the first two may grow
/// in place, the last moves); each old block stays whole and is kept. Returns the blocks that were
/// served, with their layouts.
#[inline(never)]
fn refused_here() -> Vec<(*mut u8, Layout)> {
    let mut served = Vec::new();
    for align in [8, 4096] {
        let big = Layout::from_size_align(REFUSED, align).unwrap();
        // SAFETY: non-zero sizes; a null result is checked, never used.
        unsafe {
            assert!(black_box(alloc(big)).is_null(), "alloc, align {align}");
            assert!(black_box(alloc_zeroed(big)).is_null(), "alloc_zeroed, align {align}");
        }
    }
    for (size, align) in [(64, 8), (2 << 20, 8), (2 << 20, 4096)] {
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: a fresh block of `layout`, written and read inside its size, reallocated once
        // (refused: the old block stays ours) and freed with its own layout.
        unsafe {
            let p = alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(0x5a, size);
            assert!(black_box(realloc(p, layout, REFUSED)).is_null(), "realloc of {size} B aligned to {align}");
            assert_eq!((*p, *p.add(size - 1)), (0x5a, 0x5a), "the old block changed");
            served.push((p, layout));
        }
    }
    served
}

/// The site rows of `refused_here`: (bytes in use, bytes allocated, samples).
fn at_refused_here(report: &frag::Report) -> (u64, u64, u64) {
    let sites = report.sites.as_ref().expect("a sites section");
    sites
        .top
        .iter()
        .filter(|r| r.frames.first().is_some_and(|f| common::frame_is(f, "refused_here")))
        .fold((0, 0, 0), |(u, a, s), r| (u + r.inuse_bytes, a + r.alloc_bytes, s + r.samples))
}

/// Null on every sampled path, and nothing of the refused blocks anywhere: their site holds the
/// blocks that were served and nothing more, in use and allocated (a refused block counted or kept
/// in the side table would add 5 MB), and a refusal leaves the next block as likely to be sampled
/// as ever (in "every block" mode, sampled: a clock that counted the refused bytes back on its
/// countdown skipped the next 5 MB).
#[test]
fn refusals_on_sampled_paths_return_null_and_count_nothing() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    let served = refused_here();
    let bytes: u64 = served.iter().map(|(_, l)| l.size() as u64).sum();
    let report = common::symbolized_report();
    let (inuse, allocated, samples) = at_refused_here(&report);
    assert!(samples > 0, "the served blocks were sampled:\n{report}");
    if report.tracked.estimated {
        // The two blocks of 2 MiB are sampled for certain at a 64 KiB mean; the small one seldom.
        let large = bytes - 64;
        for (what, figure) in [("in use", inuse), ("allocated", allocated)] {
            assert!(figure == large || figure == bytes, "{what} at the site: {figure} B of {bytes} served\n{report}");
        }
    } else {
        assert_eq!((inuse, allocated), (bytes, bytes), "{report}");
    }
    for (p, layout) in served {
        // SAFETY: each block came from `alloc` with `layout` and is freed once.
        unsafe { dealloc(p, layout) };
    }
}
