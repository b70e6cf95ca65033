//! Sampling inside jemalloc: the global allocator stays bare `tikv_jemallocator::Jemalloc`, and
//! jemalloc's own heap profiler decides which allocations are sampled. Its experimental hooks
//! (jemalloc 5.3: `experimental.hooks.prof_backtrace`, `prof_sample`, `prof_sample_free`) hand each
//! sample and each sampled free to `frag`, which walks the stack itself (`sites::unwind`, lock-free,
//! in place of libgcc's unwinder) and feeds the same side table, origin tallies, sites and counters
//! as `Tracked`'s sampler (`hooks`).
//!
//! Nothing is wrapped, so the allocation path is jemalloc's own: its sampler's countdown, which a
//! build with `--enable-prof` runs anyway. No block is marked or moved, so nothing is perturbed
//! either. `docs/PERFORMANCE.md` has the cost.

mod entry;
mod error;
mod hooks;

pub use error::InJemallocError;

use crate::backend::Backend;
use crate::backend::registry::{self, Registration};
use crate::sampler::{self, Sampling};

/// The largest `lg_prof_sample` this accepts: a mean of 2^62 bytes.
const MAX_LG: u32 = 62;

/// Samples inside jemalloc from now on: installs `frag`'s hooks in jemalloc's heap profiler, sets its
/// sampling mean, and turns it on. The global allocator must be the bare `tikv_jemallocator::Jemalloc`
/// (not a [`Tracked`](crate::tracked::Tracked)), jemalloc built with its profiler (feature `jemalloc-prof`)
/// and started with `prof:true`. Returns the sampling in effect: jemalloc's mean is a power of two,
/// the nearest to the one asked for.
///
/// Everything `frag` estimates from samples works as under `Tracked<Jemalloc>`'s sampled tier
/// (sizes, origin, sites, pins, profiles, the diagnosis), from the samples jemalloc takes; the
/// allocation path is jemalloc's alone, which costs less than any wrapper (`docs/PERFORMANCE.md`).
/// What only a wrapper sees differs: a thread's allocated bytes are jemalloc's `thread.allocated`
/// (usable bytes, brought up to date at each of the thread's samples), not the requested bytes a
/// `Tracked` counts. Stacks come from the unwind tables (the frame-pointer walk of a build with
/// `-C force-frame-pointers=yes` stops at jemalloc's own frames, which keep no frame pointers).
///
/// jemalloc reports a reallocation as a free and an allocation, so the report counts it as such
/// (its `reallocations` stay 0). Calling this again changes the mean (with `prof.reset`, which also
/// clears jemalloc's own profile counts; blocks sampled before keep their weight);
/// [`Sampling::Off`] turns jemalloc's profiler off.
///
/// jemalloc draws each thread's distance to its next sample when it takes one, so a thread that
/// ran before the change takes its first sample after one distance drawn at the old mean (at
/// jemalloc's default, 512 KiB on average), the new mean from then on. For the mean from a thread's
/// first byte, start the process with it too (`_RJEM_MALLOC_CONF=...,lg_prof_sample:16` for 64 KiB).
///
/// # Errors
///
/// [`InJemallocError`]: no profiler built in or turned on, a global allocator that is not the bare
/// jemalloc, a mean below 4096 bytes, or a failed `mallctl`.
///
/// # Example
///
/// ```no_run
/// // Cargo.toml: frag-alloc = { version = "0.1", features = ["jemalloc-prof"] }
/// // Start the process with _RJEM_MALLOC_CONF=prof:true,prof_active:false
/// #[global_allocator]
/// static A: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
///
/// fn main() {
///     frag::sample_in_jemalloc(frag::Sampling::DEFAULT).expect("jemalloc's profiler");
///     let v: Vec<Vec<u8>> = (0..1000).map(|_| vec![0; 4096]).collect();
///     println!("{}", frag::report());
///     drop(v);
/// }
/// ```
pub fn sample_in_jemalloc(sampling: Sampling) -> Result<Sampling, InJemallocError> {
    let read_bool = |name: &'static str, key: &[u8]| {
        // SAFETY: `key` is a NUL-terminated mallctl name whose value is a `bool`.
        unsafe { tikv_jemalloc_ctl::raw::read::<bool>(key) }.map_err(|error| InJemallocError::Mallctl { name, error })
    };
    if !read_bool("config.prof", b"config.prof\0")? {
        return Err(InJemallocError::NotBuiltWithProfiling);
    }
    if !read_bool("opt.prof", b"opt.prof\0")? {
        return Err(InJemallocError::ProfilingOff);
    }
    let mean = sampling.mean().map_err(InJemallocError::Sampling)?;
    if !jemalloc_is_global()? {
        return Err(InJemallocError::NotTheGlobalAllocator);
    }
    let registration =
        Registration { backend: Some(Backend::Jemalloc), type_name: "tikv_jemallocator::Jemalloc", introspect: None };
    if !registry::register(registration) && !hooks::installed() {
        return Err(InJemallocError::AlreadyTracked);
    }
    crate::stats::set_sampled(true);
    if mean == sampler::OFF {
        set_active(false)?;
        sampler::set_reported_mean(mean);
        return Ok(Sampling::Off);
    }
    let lg = lg_of(mean);
    entry::load();
    hooks::install()?;
    // The mean first (`prof.reset` also forgets jemalloc's own counts), then sampling on.
    // SAFETY: `prof.reset` takes a `size_t`.
    unsafe { tikv_jemalloc_ctl::raw::write::<usize>(b"prof.reset\0", lg as usize) }
        .map_err(|error| InJemallocError::Mallctl { name: "prof.reset", error })?;
    let effective = if lg == 0 { 0 } else { 1u64 << lg };
    sampler::set_reported_mean(effective);
    set_active(true)?;
    Ok(Sampling::from_mean(effective))
}

/// Whether the global allocator is jemalloc: a block allocated through it counts in jemalloc's bytes
/// of the calling thread.
fn jemalloc_is_global() -> Result<bool, InJemallocError> {
    let allocated = || {
        tikv_jemalloc_ctl::thread::allocatedp::read()
            .map(|p| p.get())
            .map_err(|error| InJemallocError::Mallctl { name: "thread.allocatedp", error })
    };
    const SIZE: usize = 64 << 10;
    let before = allocated()?;
    let block = std::hint::black_box(vec![0u8; SIZE]);
    let after = allocated()?;
    drop(block);
    Ok(after.wrapping_sub(before) >= SIZE as u64)
}

/// jemalloc's `lg_prof_sample` for `mean` (0: every block): the nearest power of two.
fn lg_of(mean: u64) -> u32 {
    if mean == 0 {
        return 0;
    }
    let below = 63 - mean.leading_zeros();
    // Nearest on a log scale: above when `mean` is past `2^below * sqrt(2)`.
    let up = (mean as f64) > (1u64 << below) as f64 * core::f64::consts::SQRT_2;
    (below + u32::from(up)).min(MAX_LG)
}

fn set_active(on: bool) -> Result<(), InJemallocError> {
    // SAFETY: `prof.active` takes a `bool`.
    unsafe { tikv_jemalloc_ctl::raw::write::<bool>(b"prof.active\0", on) }
        .map_err(|error| InJemallocError::Mallctl { name: "prof.active", error })
}

/// Whether samples come from jemalloc's hooks (see [`sample_in_jemalloc`]).
#[must_use]
pub fn sampling_in_jemalloc() -> bool {
    hooks::installed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiler_that_is_not_there_or_not_on_is_named() {
        // The unit tests' jemalloc is linked but not the global allocator, and never started with
        // `prof:true`.
        let e = sample_in_jemalloc(Sampling::DEFAULT).unwrap_err();
        if cfg!(feature = "jemalloc-prof") {
            assert!(matches!(e, InJemallocError::ProfilingOff), "{e}");
            assert!(e.to_string().contains("_RJEM_MALLOC_CONF=prof:true,prof_active:false"), "{e}");
        } else {
            assert!(matches!(e, InJemallocError::NotBuiltWithProfiling), "{e}");
            assert!(e.to_string().contains("jemalloc-prof"), "{e}");
        }
        assert!(!sampling_in_jemalloc());
    }

    #[test]
    fn means_round_to_the_nearest_power_of_two() {
        assert_eq!(lg_of(0), 0);
        assert_eq!(lg_of(512 << 10), 19);
        assert_eq!(lg_of(700 << 10), 19);
        assert_eq!(lg_of(800 << 10), 20);
        assert_eq!(lg_of(4096), 12);
        assert_eq!(lg_of(u64::MAX - 1), MAX_LG);
    }
}
