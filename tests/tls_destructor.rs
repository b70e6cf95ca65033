//! Allocations made while a thread is torn down: in a Rust thread-local's destructor (counted in the
//! thread's own shard) and in a pthread key destructor that runs after frag released the shard
//! (counted in the overflow shard). No panic, no abort, nothing lost.

mod common;

use std::alloc::System;
use std::cell::RefCell;

use common::{Counting, assert_conserved, quiescent_totals};

#[global_allocator]
// Unsampled: `Counting` counts the bytes it serves, and a sampled small block's mark is 8 bytes larger
// than its request (`src/sampler/mark.rs`), so byte-exact conservation holds only without samples.
static A: frag::Tracked<Counting<System>, frag::Exact> =
    frag::Tracked::with_sampling(Counting(System), frag::Sampling::Off);

struct Late(RefCell<Vec<String>>);

impl Drop for Late {
    fn drop(&mut self) {
        let mut v = self.0.borrow_mut();
        for i in 0..50 {
            v.push(format!("allocated during thread teardown {i}"));
        }
        std::hint::black_box(&*v);
    }
}

std::thread_local! {
    static LATE: Late = const { Late(RefCell::new(Vec::new())) };
}

unsafe extern "C" fn key_destructor(_: *mut libc::c_void) {
    std::hint::black_box(Box::new([0u8; 48]));
}

#[test]
fn allocations_during_teardown_are_counted() {
    // frag's key exists (main has allocated), so this key is created after it and its destructor runs
    // after frag's: those allocations find the shard released.
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: valid out-pointer; the destructor has the right ABI.
    assert_eq!(unsafe { libc::pthread_key_create(&mut key, Some(key_destructor)) }, 0);

    let overflow_before =
        frag::report().threads.iter().find(|t| t.kind == frag::report::RowKind::Overflow).unwrap().allocations;
    let (before, _) = quiescent_totals();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                LATE.try_with(|l| l.0.borrow_mut().push("x".repeat(10))).expect("thread-local alive");
                // SAFETY: `key` is a live key; any non-null value makes its destructor run.
                unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<libc::c_void>()) };
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (after, _) = quiescent_totals();
    assert!(after.allocations - before.allocations >= 4 * 51, "teardown allocations reached the backend");
    assert_conserved();
    let overflow_after =
        frag::report().threads.iter().find(|t| t.kind == frag::report::RowKind::Overflow).unwrap().allocations;
    assert!(overflow_after - overflow_before >= 4, "key-destructor allocations land in the overflow shard");
}
