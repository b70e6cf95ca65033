//! `realloc` grow/shrink and `alloc_zeroed` are counted exactly; a backend returning null is passed
//! through and nothing is counted. The backend here is unknown to frag (reported by type name).

mod common;

use std::alloc::{Layout, alloc, alloc_zeroed, dealloc, realloc};

use common::{on_named_thread, row_delta};

/// System, except that it refuses one magic size (allocation failure on demand).
type Refusing = common::Refusing<REFUSED>;

const REFUSED: usize = 777_777;

#[global_allocator]
static A: frag::Tracked<Refusing, frag::Exact> = frag::Tracked::new(common::Refusing);

#[test]
fn realloc_grow_shrink_and_zeroed_are_counted() {
    let delta = on_named_thread(
        "realloc",
        // SAFETY: each block is reallocated and freed with the layout it has; the zeroed block is
        // read within its size.
        || unsafe {
            let l = Layout::from_size_align(100, 8).unwrap();
            let p = alloc(l);
            let p = realloc(p, l, 5000); // grow
            let p = realloc(p, Layout::from_size_align(5000, 8).unwrap(), 50); // shrink
            dealloc(p, Layout::from_size_align(50, 8).unwrap());

            let z = Layout::from_size_align(4096, 64).unwrap();
            let q = alloc_zeroed(z);
            assert!(std::slice::from_raw_parts(q, 4096).iter().all(|b| *b == 0));
            dealloc(q, z);
        },
        |before, after| row_delta(before, after, "realloc"),
    );
    // [allocations, deallocations, reallocations, allocated bytes, freed bytes]
    assert_eq!(delta, [2, 2, 2, 100 + 5000 + 50 + 4096, 100 + 5000 + 50 + 4096]);
}

#[test]
fn null_results_pass_through_uncounted() {
    let delta = on_named_thread(
        "refused",
        // SAFETY: null results are only compared; each block served is freed with its layout.
        || unsafe {
            let big = Layout::from_size_align(REFUSED, 8).unwrap();
            assert!(alloc(big).is_null());
            assert!(alloc_zeroed(big).is_null());
            let l = Layout::from_size_align(64, 8).unwrap();
            let p = alloc(l);
            p.write_bytes(7, 64);
            assert!(realloc(p, l, REFUSED).is_null());
            // The old block is untouched and still ours.
            assert_eq!(*p.add(63), 7);
            dealloc(p, l);
        },
        |before, after| row_delta(before, after, "refused"),
    );
    assert_eq!(delta, [1, 1, 0, 64, 64]);
}

#[test]
fn unknown_backend_is_named_and_counted() {
    let v = vec![0u8; 1000];
    let r = frag::report();
    let name = r.backend.map(frag::backend::WrappedBackend::name);
    assert!(matches!(r.backend, Some(frag::backend::WrappedBackend::Other(n)) if n.contains("Refusing")), "{name:?}");
    assert_eq!(r.usable_source, Some(frag::backend::UsableSource::Requested));
    assert!(r.allocator.is_none());
    // Without usable sizes, usable equals requested.
    assert_eq!(r.tracked.usable_bytes, r.tracked.allocated_bytes);
    assert!(r.tracked.live_blocks > 0);
    drop(v);
}
