//! A countdown declared in the program's crate (`frag::declare_countdown!`), with a second
//! `Tracked` on frag's own countdown allocating on the same thread in turn: the countdown moves
//! between the two cells at each one's cold path, and the thread's allocated bytes stay exact
//! against what the test allocated, with the allocation count unbiased (within five standard
//! errors). A countdown left in both cells, or read from the one it left, loses bytes.
//!
//! The loop is not scaled down under valgrind (about a second there): five standard errors bound a
//! correct estimate only when it rests on hundreds of samples whose weights are alike. Hence also
//! blocks of 1 to 4 KiB: a sample of a 16 B block stands for 32,768 blocks, so with 16 B to 4 KiB
//! and 2,000 blocks (eight samples) a correct estimator failed 13 runs in 4,000; with 1 to 4 KiB
//! and 200,000 blocks (about 770 samples) none failed in 30,000 simulated runs.

mod common;

use common::on_named_thread;
use std::alloc::{GlobalAlloc, Layout, System};

frag::declare_countdown!(Countdown);

#[global_allocator]
static A: frag::Tracked<System, frag::Sampled, Countdown> = frag::Tracked::new(System);

/// Allocates through frag's own countdown, outside the global allocator.
static OTHER: frag::Tracked<System> = frag::Tracked::new(System);

const MEAN: f64 = (512 << 10) as f64;

#[test]
fn the_countdown_moves_between_homes_and_counts_every_byte() {
    let n = 200_000;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let sizes: Vec<usize> = (0..n).map(|_| 1024 + (common::xorshift(&mut x) % 3072) as usize).collect();
    let allocated: u64 = sizes.iter().map(|&s| s as u64).sum();
    on_named_thread(
        "two-homes",
        || {
            for (i, &s) in sizes.iter().enumerate() {
                let layout = Layout::from_size_align(s, 8).unwrap();
                // Runs of a few allocations each way, so that each fast path runs between moves.
                let other = (i / 7) % 3 == 0;
                // SAFETY: a non-zero layout; the block is freed right after by the same allocator.
                unsafe {
                    let p = if other { OTHER.alloc(layout) } else { A.alloc(layout) };
                    assert!(!p.is_null());
                    if other { OTHER.dealloc(p, layout) } else { A.dealloc(p, layout) }
                }
            }
        },
        |before, after| {
            let (b, a) = (common::row(before, "two-homes"), common::row(after, "two-homes"));
            assert_eq!(a.allocated_bytes - b.allocated_bytes, allocated, "allocated bytes are exact");
            let se = sizes
                .iter()
                .map(|&s| {
                    let p = -(-(s as f64) / MEAN).exp_m1();
                    (1.0 - p) / p
                })
                .sum::<f64>()
                .sqrt();
            let counted = (a.allocations - b.allocations) as f64;
            assert!(
                (counted - n as f64).abs() <= 5.0 * se,
                "allocations: estimated {counted}, truth {n}, standard error {se:.1}"
            );
        },
    );
}
