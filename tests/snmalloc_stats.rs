//! snmalloc: tracked usable sizes equal snmalloc's `usable_size` for every size class and for
//! over-aligned and large blocks.
#![cfg(feature = "snmalloc")]

mod common;

#[global_allocator]
static A: frag::Tracked<snmalloc_rs::SnMalloc, frag::Exact> = frag::Tracked::new(snmalloc_rs::SnMalloc);

fn real_usable(p: *mut u8) -> usize {
    snmalloc_rs::SnMalloc.usable_size(p).unwrap_or(0)
}

#[test]
fn snmalloc_ground_truth() {
    common::assert_usable_exact("snmalloc", &[100_000, (1 << 20) + 1, 5 << 20, 33 << 20, (64 << 20) + 1], real_usable);

    let r = frag::report();
    assert_eq!(r.backend, Some(frag::backend::WrappedBackend::Known(frag::backend::Backend::Snmalloc)));
    let s = r.allocator.expect("snmalloc statistics");
    assert!(s.mapped.unwrap() > 0);
}
