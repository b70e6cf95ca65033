//! jemalloc's own counts of its size classes (`frag::report::allocator_classes`) against the exact tier's
//! counts of the same blocks: two independent counts of one workload, sizes from 1 B to 64 KiB.
//! jemalloc's requests lag behind while thread caches hold them, and its held blocks include what
//! those caches park; once the thread flushes its cache, both equal the exact tier's figures.

#![cfg(feature = "jemalloc")]

mod common;

use common::{raw_alloc, raw_free};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc, frag::Exact> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// jemalloc's usable size for a request of `size` bytes at `raw_alloc`'s alignment.
fn jemalloc_class(size: usize) -> u64 {
    // SAFETY: nallocx has no preconditions for a non-zero size and allocates nothing.
    (unsafe { tikv_jemalloc_sys::nallocx(size, 0) }) as u64
}

/// Both counts at one moment: jemalloc's list first (it allocates, then reads), then the exact
/// tier's (allocation-free), so both include the list.
struct Counts {
    jemalloc: Vec<frag::backend::AllocatorClass>,
    classes: [frag::report::SizeClassRow; frag::report::NUM_CLASSES],
    totals: frag::report::HeapCounts,
}

fn counts() -> Counts {
    let jemalloc = frag::report::allocator_classes();
    Counts { jemalloc, classes: frag::report::size_classes(), totals: frag::report::totals() }
}

/// `(requests, held)` changes per jemalloc class size.
fn jemalloc_delta(a: &Counts, b: &Counts) -> std::collections::BTreeMap<u64, (i64, i64)> {
    let mut out = std::collections::BTreeMap::new();
    for (x, y) in a.jemalloc.iter().zip(&b.jemalloc) {
        assert_eq!(x.size, y.size, "the same class list");
        let d = (y.requests as i64 - x.requests as i64, y.held as i64 - x.held as i64);
        if d != (0, 0) {
            out.insert(x.size, d);
        }
    }
    out
}

/// `(allocations, live blocks)` changes of the exact tier, grouped by the jemalloc class its size
/// classes fall in (up to 32 KiB each of ours lies in one of jemalloc's), and the rest above.
fn exact_delta(a: &Counts, b: &Counts) -> (std::collections::BTreeMap<u64, (i64, i64)>, (i64, i64)) {
    let (mut out, mut above) = (std::collections::BTreeMap::new(), (0, 0));
    for (x, y) in a.classes.iter().zip(&b.classes) {
        let d = (y.allocations as i64 - x.allocations as i64, y.live_blocks as i64 - x.live_blocks as i64);
        if d == (0, 0) {
            continue;
        }
        match y.max_size.filter(|&m| m <= 32 << 10) {
            Some(max) => {
                let class = jemalloc_class(max as usize);
                assert_eq!(
                    class,
                    jemalloc_class(y.min_size.max(1) as usize),
                    "class {}..={max} in one of jemalloc's",
                    y.min_size
                );
                let e = out.entry(class).or_insert((0, 0));
                *e = (e.0 + d.0, e.1 + d.1);
            }
            None => above = (above.0 + d.0, above.1 + d.1),
        }
    }
    (out, above)
}

/// The workload: `n` blocks of 1 B to 64 KiB (log-uniform); one in three kept, the rest freed at
/// once. Returns the kept blocks.
fn workload(n: usize) -> Vec<(usize, usize)> {
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    let mut kept = Vec::with_capacity(n / 3 + 1);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = (16.0 * ((x >> 11) as f64 / (1u64 << 53) as f64)).exp2() as usize;
        let b = raw_alloc(size);
        if i % 3 == 0 {
            kept.push((b, size));
        } else {
            raw_free(b, size);
        }
    }
    kept
}

#[test]
fn jemalloc_counts_equal_the_exact_tier_once_the_cache_is_flushed() {
    // Sampled blocks move to page-aligned copies in another jemalloc class: count natural blocks only.
    frag::set_sampling(frag::Sampling::Off).unwrap();
    // The counts are the process's, and jemalloc's lag for any other thread that allocates
    // meanwhile; this thread's own waiting is flushed with its cache.
    common::others_asleep();
    frag::tune::jemalloc::flush_thread_tcache().unwrap();
    let before = counts();
    let kept = workload(common::scaled(60_000));
    let lagging = counts();
    frag::tune::jemalloc::flush_thread_tcache().unwrap();
    let after = counts();

    let t = |c: &Counts| (c.totals.allocations as i64, c.totals.live_blocks as i64);
    let exact = (t(&after).0 - t(&before).0, t(&after).1 - t(&before).1);
    let sum = |d: &std::collections::BTreeMap<u64, (i64, i64)>| d.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    let (jemalloc, jemalloc_lagging) = (jemalloc_delta(&before, &after), jemalloc_delta(&before, &lagging));
    eprintln!(
        "exact tier: {exact:?} (allocations, live); jemalloc flushed {:?}, before the flush {:?}",
        sum(&jemalloc),
        sum(&jemalloc_lagging)
    );
    // Before the flush: requests lag (never ahead), held blocks include the parked ones (never below).
    let exact_lagging = (t(&lagging).0 - t(&before).0, t(&lagging).1 - t(&before).1);
    assert!(sum(&jemalloc_lagging).0 <= exact_lagging.0, "{:?} against {exact_lagging:?}", sum(&jemalloc_lagging));
    assert!(sum(&jemalloc_lagging).1 >= exact_lagging.1, "{:?} against {exact_lagging:?}", sum(&jemalloc_lagging));
    // After it, equal: in all, and class by class.
    assert_eq!(sum(&jemalloc), exact, "jemalloc's requests and held blocks against the exact tier's");
    let (ours, above) = exact_delta(&before, &after);
    let mut theirs_above = (0, 0);
    for (&size, &d) in &jemalloc {
        if size <= 32 << 10 {
            assert_eq!(ours.get(&size).copied().unwrap_or_default(), d, "jemalloc class {size} B");
        } else {
            theirs_above = (theirs_above.0 + d.0, theirs_above.1 + d.1);
        }
    }
    assert_eq!(above, theirs_above, "above 32 KiB");
    assert!(ours.len() >= 40, "the workload spans jemalloc's classes: {}", ours.len());
    kept.into_iter().for_each(|(b, s)| raw_free(b, s));
}
