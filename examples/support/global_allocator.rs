//! The global allocator of the examples: `Tracked` around the backend the enabled features select
//! (jemalloc by default; `--no-default-features` for glibc, `--features mimalloc` or `snmalloc` alone).
//!
//! Built with `FRAG_BARE_ALLOCATOR=1` in the environment, the examples use the bare backend instead,
//! with nothing else changed: `scripts/instructions.py` compares the two builds of the service
//! example. The choice is a constant, so each build has only one of the two code paths.

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

/// `FRAG_BARE_ALLOCATOR` set (and not empty) at build time.
const BARE: bool = matches!(option_env!("FRAG_BARE_ALLOCATOR"), Some(v) if !v.is_empty());

static TRACKED: frag::Tracked<Backend> = frag::Tracked::new(BACKEND);

struct Global;

// SAFETY: every method forwards to one allocator, the same one for the whole life of the process
// (`BARE` is a constant), with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Global {
    #[inline(always)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { if BARE { BACKEND.alloc(layout) } else { TRACKED.alloc(layout) } }
    }

    #[inline(always)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { if BARE { BACKEND.alloc_zeroed(layout) } else { TRACKED.alloc_zeroed(layout) } }
    }

    #[inline(always)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees (the block came from the same allocator).
        unsafe { if BARE { BACKEND.dealloc(ptr, layout) } else { TRACKED.dealloc(ptr, layout) } }
    }

    #[inline(always)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees (the block came from the same allocator).
        unsafe { if BARE { BACKEND.realloc(ptr, layout, new_size) } else { TRACKED.realloc(ptr, layout, new_size) } }
    }
}

#[global_allocator]
static A: Global = Global;
