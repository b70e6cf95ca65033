//! An allocation-heavy loop as real code writes it: 65,536 live blocks in a `Vec<Box<[u8]>>`; each
//! step frees one at random and allocates one of 16 B–1 KiB in its place, through the global
//! allocator (`support/global_allocator.rs`: `Tracked`'s sampled tier by default, the bare backend
//! with `FRAG_BARE_ALLOCATOR=1` at build time, the exact tier with `=exact`, a forwarding wrapper
//! with `=forward`). The allocator's inlined fast path is compiled into this loop, as into any
//! caller's: `scripts/instructions.py` counts its instructions per step, caller included.
//!
//! `cargo run --release --example churn -- <steps>` (default 20 million).

#[path = "support/global_allocator.rs"]
mod global_allocator;

use std::mem::MaybeUninit;

const LIVE: usize = 1 << 16;

/// A xorshift step: the loop's random numbers, cheap and the same in every build.
#[inline(always)]
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// A block of `len` bytes (at least 1) whose first byte is `first`: allocated, one byte written,
/// as a buffer about to be filled is.
#[inline(always)]
fn block(len: usize, first: u8) -> Box<[MaybeUninit<u8>]> {
    let mut b = Box::new_uninit_slice(len);
    b[0].write(first);
    b
}

/// The loop: `steps` frees and allocations over `LIVE` live blocks. Returns a checksum of the first
/// bytes, so that nothing is optimised away.
#[inline(never)]
fn churn(steps: u64) -> u64 {
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let size = |rng: &mut u64| 16 + (next(rng) % 1009) as usize;
    let mut live: Vec<Box<[MaybeUninit<u8>]>> = (0..LIVE).map(|i| block(size(&mut rng), i as u8)).collect();
    let mut sum = 0u64;
    for step in 0..steps {
        let i = (next(&mut rng) as usize) % LIVE;
        let s = size(&mut rng);
        // SAFETY: every block's first byte was written (`block`).
        sum = sum.wrapping_add(unsafe { live[i][0].assume_init() } as u64);
        // The old block is freed as the new one takes its slot.
        live[i] = block(s, step as u8);
    }
    sum
}

fn main() {
    global_allocator::start().expect("the chosen allocator");
    let steps = std::env::args().nth(1).map_or(20_000_000, |s| s.parse().expect("steps: a number"));
    println!("{}", churn(steps));
}
