//! snmalloc: tracked usable sizes equal snmalloc's `usable_size` for every size class and for
//! over-aligned and large blocks.
#![cfg(feature = "snmalloc")]

mod common;

use std::alloc::Layout;

#[global_allocator]
static A: frag::Tracked<snmalloc_rs::SnMalloc> = frag::Tracked::new(snmalloc_rs::SnMalloc);

fn real_usable(p: *mut u8) -> usize {
    snmalloc_rs::SnMalloc.usable_size(p).unwrap_or(0)
}

#[test]
fn snmalloc_ground_truth() {
    let mut layouts = common::plain_layouts(64 << 10);
    layouts.extend(
        [100_000, (1 << 20) + 1, 5 << 20, 33 << 20, (64 << 20) + 1].map(|s| Layout::from_size_align(s, 8).unwrap()),
    );
    layouts.extend(common::aligned_layouts());
    let bad = common::usable_mismatches(&layouts, real_usable);
    assert!(
        bad.is_empty(),
        "usable size differs from snmalloc's for {} layouts: {:?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );

    let r = frag::report();
    assert_eq!(r.backend, "snmalloc");
    let s = r.allocator.expect("snmalloc statistics");
    assert!(s.mapped.unwrap() > 0);
}
