//! mimalloc: tracked usable sizes equal `mi_usable_size` for every size class and for over-aligned
//! and huge blocks.
#![cfg(feature = "mimalloc")]

mod common;

#[global_allocator]
static A: frag::Tracked<mimalloc::MiMalloc, frag::Exact> = frag::Tracked::new(mimalloc::MiMalloc);

fn real_usable(p: *mut u8) -> usize {
    // SAFETY: `p` is a live mimalloc block.
    unsafe { libmimalloc_sys::mi_usable_size(p.cast()) }
}

#[test]
fn mimalloc_ground_truth() {
    common::assert_usable_exact(
        "mimalloc",
        &[100_000, (512 << 10) - 1, 512 << 10, (512 << 10) + 1, 524_346, (1 << 20) - 1, 1 << 20, 5 << 20, 33 << 20],
        real_usable,
    );

    let r = frag::report();
    assert_eq!(r.backend, Some(frag::backend::WrappedBackend::Known(frag::backend::Backend::Mimalloc)));
    let m = r.allocator.expect("mimalloc statistics");
    assert!(m.committed.unwrap() > 0 && m.peak_committed.unwrap() >= m.committed.unwrap());
}
