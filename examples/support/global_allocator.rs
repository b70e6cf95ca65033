//! The global allocator of the examples: `Tracked` around the backend the enabled features select
//! (jemalloc by default; `--no-default-features` for glibc, `--features mimalloc` or `snmalloc` alone).
//!
//! The default is `Tracked`'s production tier (sampled). Built with `FRAG_BARE_ALLOCATOR=1` in the
//! environment, the examples use the bare backend instead, with nothing else changed:
//! `scripts/instructions.py` compares the builds of the service example. `FRAG_BARE_ALLOCATOR=exact`
//! builds `Tracked`'s exact tier; `=forward`, `=count`, `=count-inline`, `=sample-only` or
//! `=count-sample` one of the floor wrappers of `floor.rs` (what any wrapper, any exact per-class
//! counter, any marking sampler, and the two together cost). `=in-jemalloc` (with the features
//! `jemalloc-prof`) leaves the backend bare and samples inside jemalloc (`frag::sample_in_jemalloc`,
//! started by [`start`]). The choice is a constant, so each build has only one code path.

use std::alloc::{GlobalAlloc, Layout};

#[cfg(feature = "jemalloc")]
type Backend = tikv_jemallocator::Jemalloc;
#[cfg(feature = "jemalloc")]
const BACKEND: Backend = tikv_jemallocator::Jemalloc;

#[cfg(all(not(feature = "jemalloc"), feature = "mimalloc"))]
type Backend = mimalloc::MiMalloc;
#[cfg(all(not(feature = "jemalloc"), feature = "mimalloc"))]
const BACKEND: Backend = mimalloc::MiMalloc;

#[cfg(all(not(feature = "jemalloc"), not(feature = "mimalloc"), feature = "snmalloc"))]
type Backend = snmalloc_rs::SnMalloc;
#[cfg(all(not(feature = "jemalloc"), not(feature = "mimalloc"), feature = "snmalloc"))]
const BACKEND: Backend = snmalloc_rs::SnMalloc;

#[cfg(not(any(feature = "jemalloc", feature = "mimalloc", feature = "snmalloc")))]
type Backend = std::alloc::System;
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc", feature = "snmalloc")))]
const BACKEND: Backend = std::alloc::System;

#[path = "floor.rs"]
mod floor;

/// Which allocator the build uses, from `FRAG_BARE_ALLOCATOR` at build time.
#[derive(PartialEq, Eq)]
enum Choice {
    Tracked,
    Exact,
    Bare,
    Forward,
    Count,
    CountInline,
    SampleOnly,
    CountSample,
    InJemalloc,
}

const fn eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

const CHOICE: Choice = match option_env!("FRAG_BARE_ALLOCATOR") {
    None => Choice::Tracked,
    Some(v) if v.is_empty() => Choice::Tracked,
    Some(v) if eq(v, "exact") => Choice::Exact,
    Some(v) if eq(v, "forward") => Choice::Forward,
    Some(v) if eq(v, "count") => Choice::Count,
    Some(v) if eq(v, "count-inline") => Choice::CountInline,
    Some(v) if eq(v, "sample-only") => Choice::SampleOnly,
    Some(v) if eq(v, "count-sample") => Choice::CountSample,
    Some(v) if eq(v, "in-jemalloc") => Choice::InJemalloc,
    Some(_) => Choice::Bare,
};

// The countdown in this crate: one instruction less on every allocation (`frag::declare_countdown!`).
frag::declare_countdown!(Countdown);

static TRACKED: frag::Tracked<Backend, frag::Sampled, Countdown> = frag::Tracked::new(BACKEND);
static EXACT: frag::Tracked<Backend, frag::Exact, Countdown> = frag::Tracked::new(BACKEND);
static FORWARD: floor::Forward<Backend> = floor::Forward(BACKEND);
static COUNT: floor::Count<Backend> = floor::Count(BACKEND);
static COUNT_INLINE: floor::CountInline<Backend> = floor::CountInline(BACKEND);
static SAMPLE_ONLY: floor::SampleOnly<Backend> = floor::SampleOnly(BACKEND);
static COUNT_SAMPLE: floor::CountInline<floor::SampleOnly<Backend>> = floor::CountInline(floor::SampleOnly(BACKEND));

/// Calls `$method` on the chosen allocator.
macro_rules! chosen {
    ($method:ident($($arg:expr),*)) => {
        match CHOICE {
            Choice::Tracked => TRACKED.$method($($arg),*),
            Choice::Exact => EXACT.$method($($arg),*),
            Choice::Bare | Choice::InJemalloc => BACKEND.$method($($arg),*),
            Choice::Forward => FORWARD.$method($($arg),*),
            Choice::Count => COUNT.$method($($arg),*),
            Choice::CountInline => COUNT_INLINE.$method($($arg),*),
            Choice::SampleOnly => SAMPLE_ONLY.$method($($arg),*),
            Choice::CountSample => COUNT_SAMPLE.$method($($arg),*),
        }
    };
}

struct Global;

// SAFETY: every method forwards to one allocator, the same one for the whole life of the process
// (`CHOICE` is a constant), with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Global {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { chosen!(alloc(layout)) }
    }

    #[inline(always)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { chosen!(alloc_zeroed(layout)) }
    }

    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees (the block came from the same allocator).
        unsafe { chosen!(dealloc(ptr, layout)) }
    }

    #[inline(always)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees (the block came from the same allocator).
        unsafe { chosen!(realloc(ptr, layout, new_size)) }
    }
}

#[global_allocator]
static A: Global = Global;

// jemalloc's profiler, on at start-up but not sampling, for `start` to hand to frag.
#[cfg(feature = "jemalloc-prof")]
frag::jemalloc_conf!(if matches!(CHOICE, Choice::InJemalloc) {
    frag::tune::jemalloc::JemallocConfig::new().prof(true).prof_active(false)
} else {
    frag::tune::jemalloc::JemallocConfig::new()
});

/// Starts sampling inside jemalloc, at the mean `frag::sampling()` says, when the build chose it
/// (`FRAG_BARE_ALLOCATOR=in-jemalloc`); nothing otherwise.
#[allow(dead_code)]
pub fn start() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "jemalloc-prof")]
    if matches!(CHOICE, Choice::InJemalloc) {
        frag::sample_in_jemalloc(frag::sampling())?;
        return Ok(());
    }
    if matches!(CHOICE, Choice::InJemalloc) {
        return Err("FRAG_BARE_ALLOCATOR=in-jemalloc needs the feature jemalloc-prof".into());
    }
    Ok(())
}
