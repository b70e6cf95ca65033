//! Which sites pin the holes, measured block by block: the exact tier with every block sampled, on
//! jemalloc, where each live block's own slab is queried (`PinMethod::Slabs`). Ground truth: the
//! workload's structure and jemalloc's own bin statistics, read by the test.
//! - Site A keeps 40-byte blocks (jemalloc's 48-byte class) allocated one by one between site B's,
//!   which are all freed: A's slabs are left half empty.
//! - Site D allocates blocks of the same class densely, before B's are freed, and keeps them: its
//!   slabs are full, so it pins nothing, though it holds as many blocks of the class as A. This is
//!   what class shares cannot tell apart (they would give D half), and what slabs can.

#![cfg(feature = "jemalloc")]

mod common;

use common::pins::{blocks, pins, site_churned, site_kept};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc, frag::Exact> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

#[inline(never)]
fn site_packed() -> Box<[u8; 40]> {
    std::hint::black_box(Box::new([3u8; 40]))
}

/// jemalloc's free bytes in the slabs of its 48-byte class, and in all small classes.
fn jemalloc_holes() -> (u64, u64) {
    let all = common::pins::jemalloc_holes();
    let class48 = all.iter().find(|&&(size, _)| size == 48).map_or(0, |&(_, h)| h);
    (class48, all.iter().map(|&(_, h)| h).sum())
}

#[test]
fn each_block_is_charged_its_own_slabs_free_space() {
    // Fresh slabs, so that D's blocks fill slabs of their own.
    let filler = common::pins::fresh_slabs();
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    // 4,000 blocks a site: A's and D's 8,000 live blocks fit the side table (16,384 entries).
    let n = 4_000;
    let (mut kept, mut churned, mut packed) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        kept.push(site_kept());
        churned.push(site_churned());
    }
    // A spacer fills the rest of the last slabs A and B share (and the thread cache's regions from
    // them), so that D starts on fresh slabs.
    let spacer: Vec<Box<[u8; 40]>> = (0..1_024).map(|_| Box::new([4u8; 40])).collect();
    for _ in 0..n {
        packed.push(site_packed());
    }
    drop(churned);
    frag::tune::jemalloc::flush_thread_tcache().unwrap();

    // jemalloc's figures right after the report's, before symbolizing allocates.
    let mut report = frag::report();
    let (holes48, holes) = jemalloc_holes();
    report.sites.as_mut().expect("a sites section").symbolize();
    let sites = report.sites.as_ref().expect("a sites section");
    let pinned = sites.pinned.expect("jemalloc splits its holes");
    let (a, b, d) = (pins(&report, "site_kept"), pins(&report, "site_churned"), pins(&report, "site_packed"));
    let rows: u64 = sites.top.iter().filter_map(|r| r.pinned_bytes).sum();
    eprintln!(
        "holes: jemalloc {holes} (class 48: {holes48}), report {}; pins A {a}, B {b}, D {d}; rows {rows}, no stack {}, \
         unattributed {}",
        pinned.holes_bytes, pinned.no_stack_bytes, pinned.unattributed_bytes
    );
    // By slab (or both, if a block sampled at the default mean before `Off` is still live).
    assert!(matches!(pinned.method, frag::report::PinMethod::Slabs | frag::report::PinMethod::Both), "{report}");
    // What class shares would give A with every block seen: its part of the class's live blocks.
    let blocks = |function: &str| blocks(&report, function);
    let class_share = |x: u64| x as f64 / (blocks("site_kept") + blocks("site_packed")) as f64;
    eprintln!(
        "class shares would give A {:.0}% and D {:.0}% of the class's holes",
        100.0 * class_share(blocks("site_kept")),
        100.0 * class_share(blocks("site_packed"))
    );
    // The holes at the report's moment are jemalloc's (its bin statistics, as the report read them;
    // the test's own read, after the report's temporary blocks came and went, is close to them).
    let at_report = |size: u64| {
        report.allocator_classes.iter().filter(|c| size == 0 || c.size == size).map(|c| c.free_in_slabs()).sum::<u64>()
    };
    assert_eq!(pinned.holes_bytes, at_report(0));
    assert!(
        pinned.holes_bytes.abs_diff(holes) <= holes / 4 + (64 << 10),
        "report {} against jemalloc {holes}",
        pinned.holes_bytes
    );
    let class48 = at_report(48);
    assert!(class48.abs_diff(holes48) <= holes48 / 4, "class 48: report {class48}, jemalloc {holes48}");
    assert!(class48 >= (n as u64 * 48) * 9 / 10, "B's frees left about half of A's slabs free: {class48}");
    // The cache was flushed: A's blocks get their slabs' free space, B none.
    // The model: B's freed regions are the holes A's blocks hold open (a few slabs' worth less or
    // more: the first and last slabs are shared with blocks from before the workload, which the
    // table does not hold).
    let freed = n as u64 * 48;
    assert!(
        a.abs_diff(freed) <= freed / 10 && a <= class48,
        "A pins {a}; B freed {freed}; class 48 holes {class48}\n{report}"
    );
    assert_eq!(b, 0, "B has no live block\n{report}");
    // D's slabs are full but its last, which the thread cache's unused regions went back to.
    let slab48 = report.allocator_classes.iter().find(|c| c.size == 48).and_then(|c| c.slabs).expect("class 48").1 * 48;
    assert!(d <= slab48, "D's slabs are full but the last: {d} (a slab holds {slab48})\n{report}");
    // The parts add up to the holes, up to what changed between jemalloc's class figures and its
    // answers on the slabs, read a moment apart by the report.
    let shared = rows + pinned.other_sites_bytes + pinned.no_stack_bytes + pinned.unattributed_bytes;
    assert!(
        shared.abs_diff(pinned.holes_bytes) <= pinned.holes_bytes / 100 + sites.top.len() as u64 + 3,
        "{shared} of {}",
        pinned.holes_bytes
    );
    std::hint::black_box((kept, packed, filler, spacer));
}
