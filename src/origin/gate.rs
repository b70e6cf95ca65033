//! Which blocks origin tracking may sample: a keyed hash of the address, so that a free can tell
//! "this block was certainly not sampled" from its pointer and size alone, reading no memory that can
//! miss the cache.
//!
//! A block is *eligible* when it is larger than [`SMALL_MAX`], or when its address hashes into the
//! eligible fraction `2^-E` of the hash space: `address × KEY ≤ LIMIT`, with an odd `KEY` drawn once
//! per process and `LIMIT = u64::MAX >> E`. Only eligible blocks are ever put in the side table, and
//! only eligible operations go to the cold path, where the per-thread countdown (`sampler`) runs; every
//! other allocation and free is counted in its shard and forwarded, with no further check.
//!
//! **Where the fast path reads them**: every shard carries its own copy of the key and the limit
//! (a [`Lane`], in the shard's hot line), so the fast path reads them next to the counters it is about
//! to write, through the one thread-local pointer it loads anyway, instead of from two statics
//! (which position-independent code reaches through the GOT: two more loads each). A thread without
//! a shard of its own points at a parked shard whose key is 0: every address hashes to 0, is
//! "eligible", and takes the cold path, which claims a shard or counts in the overflow shard. So the
//! gate test is also the "does this thread have a shard" test.
//!
//! To sample at the same rate as if every block took part, an eligible small block's charge on the
//! countdown is scaled by `2^E`, and a sample's weight by `2^E` too: over the random key every block
//! is eligible with probability `2^-E`, so the estimates stay unbiased.
//!
//! **Bias, stated**: eligibility belongs to an address, not a block, so estimates are unbiased over
//! keys but vary from process to process more than independent sampling would:
//! - An allocator that hands the same address out again and again (a LIFO free list under a tight
//!   alloc/free loop) makes all those blocks eligible, or none of them. Measured: two threads each
//!   cycling 500,000 blocks through a ring of 64 live ones (glibc) got estimated free counts from 0 to
//!   2.1 times the truth over 30 processes; with a ring of 4,096 the same work got 0.92 to 1.24.
//! - The hash is linear, and blocks of one size class often sit at evenly spaced addresses. For
//!   about 5 keys in 1,000 the spacing times the key lands near a fraction with a small denominator,
//!   and a run of 2,000 such blocks gets no eligible address at all (independent sampling at this
//!   fraction would miss all 2,000 with probability e^-31); that class then has no samples in that
//!   process and its ratio is reported as unknown, not as 0.
//!
//! Workloads with many live blocks spread over many addresses and classes, which are the ones
//! fragmentation is about, are affected least. A hash without the second tail (an xor-shift and a
//! second multiply after the first, which simulates to binomial tails) costs four more instructions
//! per operation: about 1.1% more instructions per request of the service example.
//!
//! `LIMIT` only ever grows: a free must find every block that was sampled under any earlier limit.
//! Lowering the rate after [`Sampling::EveryBlock`](crate::Sampling::EveryBlock) (E = 0) therefore
//! keeps every free on the cold path for the rest of the process: exact mode is for tests and
//! debugging.

use crate::sync::{AtomicU64, Ordering, atomics_ctor, fence};

/// Blocks above this size are always eligible: few, large, and they carry most bytes.
pub(crate) const SMALL_MAX: usize = 32 << 10;

/// log2 of the inverse eligible fraction at the default rate (one small block in 64 is eligible).
pub(crate) const MAX_SHIFT: u32 = 6;

/// The multiplier of the address hash: 0 until the first shard claim draws it (every address is
/// eligible until then, which only means those few operations take the cold path). Never changes
/// once drawn, so the shards' copies never go stale.
static KEY: AtomicU64 = AtomicU64::new(0);
/// Addresses whose hash is at most this may be sampled; only grows, and only after every shard's
/// lane was raised to it (see [`adapt`]).
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX >> MAX_SHIFT);
/// The limit shards must hold: raised first, and copied by a shard when it is claimed.
static ANNOUNCED: AtomicU64 = AtomicU64::new(u64::MAX >> MAX_SHIFT);

/// A shard's copy of the key and the limit, read by its owner on every fast-path operation.
///
/// Invariant (what makes the fast path safe to skip the side table): a claimed shard's `limit` is at
/// least every value [`LIMIT`] had when a block was sampled that this thread can free, and its `key` is
/// `KEY`. A lane that was never armed (the parked shard) has key 0 and sends everything to the cold
/// path.
#[derive(Debug)]
pub(crate) struct Lane {
    key: AtomicU64,
    limit: AtomicU64,
}

impl Lane {
    atomics_ctor! {
        pub(crate) fn new() -> Lane {
            Lane { key: AtomicU64::new(0), limit: AtomicU64::new(0) }
        }
    }

    /// Whether the fast path may take an operation on the block at `ptr`: its address is not
    /// eligible (and the lane is armed). A null pointer hashes to 0 and is never passed, so a failed
    /// allocation goes to the cold path too. A load, a multiply, a compare with a load.
    #[inline(always)]
    pub(crate) fn passes(&self, ptr: *mut u8) -> bool {
        (ptr as u64).wrapping_mul(self.key.load(Ordering::Relaxed)) > self.limit.load(Ordering::Relaxed)
    }

    /// Arms a lane for a thread that just claimed its shard, which must already count among the
    /// registry's used slots (so that a concurrent [`adapt`] either raises this lane itself or has
    /// announced its limit before the load below).
    pub(crate) fn arm(&self) {
        fence(Ordering::SeqCst);
        self.limit.fetch_max(ANNOUNCED.load(Ordering::SeqCst), Ordering::SeqCst);
        self.key.store(KEY.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Whether the block at `ptr` of `size` bytes may be (or become) a sampled block. Cold path: the
/// fast path asks its shard's [`Lane`].
#[inline]
pub(crate) fn eligible(ptr: *mut u8, size: usize) -> bool {
    size > SMALL_MAX || hash(ptr) <= LIMIT.load(Ordering::Acquire)
}

#[inline(always)]
fn hash(ptr: *mut u8) -> u64 {
    (ptr as u64).wrapping_mul(KEY.load(Ordering::Relaxed))
}

/// The current `E`: small blocks are eligible with probability `2^-E`.
pub(crate) fn shift() -> u32 {
    LIMIT.load(Ordering::Relaxed).leading_zeros()
}

/// `E` for a block of `size` bytes: 0 for large blocks, which are always eligible.
pub(crate) fn shift_for(size: usize) -> u32 {
    if size > SMALL_MAX { 0 } else { shift() }
}

/// Whether the key is drawn: before that no block may be put in the side table.
pub(crate) fn keyed() -> bool {
    KEY.load(Ordering::Relaxed) != 0
}

/// Draws the process's key, once, before the first sample can be taken (on the first shard claim).
/// Allocation-free: `getrandom` is a system call; the fallback mixes the clock with an address.
pub(crate) fn draw_key() {
    if keyed() {
        return;
    }
    let mut bytes = [0u8; 8];
    // SAFETY: `bytes` is a valid buffer of the length passed; GRND_NONBLOCK never waits.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), libc::GRND_NONBLOCK) };
    let mut key = u64::from_ne_bytes(bytes);
    if n != bytes.len() as isize {
        key = super::now_ns().rotate_left(29) ^ (&KEY as *const AtomicU64 as u64);
    }
    // Odd, so that the multiply is a bijection of the address space; mixed, so that no key is weak.
    let key = super::sampler::splitmix64(key) | 1;
    let _ = KEY.compare_exchange(0, key, Ordering::Relaxed, Ordering::Relaxed);
}

/// Adapts the eligible fraction to a sampling rate of one small block in `2^rate_log2`: the fraction
/// stays 16 times the rate or more (so that an eligible block's own sampling probability stays small
/// and Poisson-like), `2^-MAX_SHIFT` at most. Never lowers the limit (see the module docs).
///
/// In three steps, so that no thread can skip the side table for a block sampled under the new
/// limit: announce it (claims copy it from here), raise every used shard's lane, then let sampling
/// use it. A thread that frees a block sampled under the new limit learnt of that block through
/// some synchronisation with the sampling thread, which read `LIMIT` after the lanes were raised.
pub(crate) fn adapt(rate_log2: Option<u32>) {
    let e = rate_log2.map_or(MAX_SHIFT, |r| r.saturating_sub(4).min(MAX_SHIFT));
    let new = u64::MAX >> e;
    if LIMIT.load(Ordering::Acquire) >= new {
        return;
    }
    ANNOUNCED.fetch_max(new, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    for shard in crate::stats::pool::used_slots() {
        shard.hot.lane.limit.fetch_max(new, Ordering::SeqCst);
    }
    LIMIT.fetch_max(new, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a random odd key, the eligible share of many distinct aligned addresses is `2^-E`.
    #[test]
    fn eligible_fraction_matches_the_shift() {
        draw_key();
        let limit = u64::MAX >> MAX_SHIFT;
        let key = KEY.load(Ordering::Relaxed);
        let n = 1 << 20;
        let hits = (0..n).filter(|i| (0x7f00_0000_0000u64 + i * 48).wrapping_mul(key) <= limit).count();
        let expected = n as f64 / (1u64 << MAX_SHIFT) as f64;
        assert!((hits as f64 / expected - 1.0).abs() < 0.05, "{hits} of {n}, expected {expected}");
        assert!(eligible(core::ptr::null_mut::<u8>().wrapping_add(16), SMALL_MAX + 1));
    }

    /// An unarmed lane passes nothing (not even a null pointer); an armed one passes exactly the
    /// addresses that are not eligible.
    #[test]
    fn lanes_agree_with_eligibility() {
        draw_key();
        let lane = Lane::new();
        let addresses = (0..4096u64).map(|i| (0x7f00_0000_0000u64 + i * 48) as *mut u8);
        assert!(addresses.clone().all(|p| !lane.passes(p)));
        lane.arm();
        assert!(!lane.passes(core::ptr::null_mut()));
        assert!(addresses.clone().all(|p| lane.passes(p) != eligible(p, 64)));
        assert!(addresses.filter(|p| lane.passes(*p)).count() > 3000);
    }
}
