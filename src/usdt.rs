//! The OpenTelemetry memory probes: the USDT provider `otel_memory` that the OpenTelemetry eBPF
//! profiler (design-docs/00003-memory-profiling) and bpftrace attach to, fired at every sample of
//! the program's (`sample_life`).
//!
//! - `otel_memory:alloc(user, size, weighted_bytes)`: a block was sampled; `user` is the address
//!   handed to the program, `size` the bytes it asked for, `weighted_bytes` the bytes the sample
//!   stands for ([`weighted_bytes`]).
//! - `otel_memory:free(ptr)`: a sampled block is being freed, or reallocated away (a reallocation
//!   that moves or resizes a sampled block fires `free` for the old block and, if the new block is
//!   sampled, `alloc` for it).
//!
//! The probes come from the `probe` crate (`probe_lazy!`): a SystemTap SDT v3 note in
//! `.note.stapsdt`, a `nop` at the probe site, and a 16-bit semaphore in `.probes` that the kernel
//! raises while a tracer is attached. Without the `usdt` feature, or off Linux, they compile to
//! nothing. `probe` is `no_std`, has no dependencies and emits inline assembly only; the other
//! candidate, Oxide's `usdt`, generates its providers with procedural macros (serde among its
//! dependencies) and has emitted SDT notes on Linux only since 0.6.
//!
//! Safe anywhere a sample is taken, the allocation path and its reentrancy guard included: a probe
//! reads its semaphore (a volatile load) and, only when it is raised, puts its arguments in
//! registers and runs the `nop`, where an attached tracer's uprobe traps into the kernel. No call,
//! no allocation, no lock, no panic. A tracer that attaches or detaches in between only changes
//! whether that one `nop` is reached or trapped: the semaphore gates work, never correctness.

/// The bytes a sample of `size` bytes weighing `weight` (the inverse of its sampling probability)
/// stands for: `size × weight`, rounded. At a mean of `R` bytes, `weight = 1 / (1 − exp(−size / R))`,
/// so this is the contract's `S / p`; summed over the live samples it is frag's own estimate of live
/// bytes (docs/SAMPLING.md, "Fleet profilers"). Float to integer casts saturate: no panic.
#[cfg_attr(not(feature = "usdt"), allow(dead_code, reason = "the probes are compiled out"))]
pub(crate) fn weighted_bytes(size: u64, weight: f64) -> u64 {
    libm::round(size as f64 * weight) as u64
}

/// Fires `otel_memory:alloc` for the sampled block at `user` of `size` bytes weighing `weight`,
/// if a tracer is attached.
#[inline(always)]
pub(crate) fn alloc(user: *const u8, size: u64, weight: f64) {
    #[cfg(feature = "usdt")]
    let _ = probe::probe_lazy!(otel_memory, alloc, user as usize, size, weighted_bytes(size, weight));
    #[cfg(not(feature = "usdt"))]
    let _ = (user, size, weight);
}

/// Fires `otel_memory:free` for the sampled block at `ptr`, if a tracer is attached. Called while
/// the block is still the caller's, so that its address cannot have been handed to another sample
/// (whose `alloc` a tracer would otherwise see before this `free`).
#[inline(always)]
pub(crate) fn free(ptr: *const u8) {
    #[cfg(feature = "usdt")]
    let _ = probe::probe_lazy!(otel_memory, free, ptr as usize);
    #[cfg(not(feature = "usdt"))]
    let _ = ptr;
}

#[cfg(test)]
mod tests {
    use super::weighted_bytes;

    /// The contract's `S / p` for random-interval sampling over bytes, computed independently.
    #[test]
    fn weighted_bytes_is_size_over_the_inclusion_probability() {
        let mean = 512.0 * 1024.0;
        for size in [1u64, 16, 1000, 64 << 10, 4 << 20] {
            let p = 1.0 - (-(size as f64) / mean).exp();
            let w = weighted_bytes(size, 1.0 / p);
            assert!((w as f64 - size as f64 / p).abs() <= 0.5 + 1e-9 * w as f64, "{size}: {w}");
        }
        assert_eq!(weighted_bytes(1000, 1.0), 1000, "every block sampled: the block itself");
        assert_eq!(weighted_bytes(u64::MAX, f64::INFINITY), u64::MAX, "saturates");
    }
}
