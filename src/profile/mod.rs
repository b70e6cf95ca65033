//! Heap profiles in pprof's format, from the sampled allocation sites (see
//! [`Sampling`](crate::Sampling)): what `go tool pprof`, Pyroscope, Parca or Grafana read.
//!
//! [`heap_pprof`] returns a gzip-compressed `profile.proto` with Go's heap-profile sample types:
//! `alloc_objects/count`, `alloc_space/bytes`, `inuse_objects/count` and `inuse_space/bytes` (the
//! default), every value an estimate weighted by the inverse sampling probability (the profile's
//! comments say so, with the sampling mean). Where the allocator splits its free space by size class
//! (jemalloc), a fifth type follows them, `pinned_space/bytes`: the free bytes in slabs that each
//! site's live blocks keep resident (see [`SiteRow::pinned_bytes`](crate::report::SiteRow::pinned_bytes));
//! `go tool pprof -sample_index=pinned_space` shows which code pins the pages. Its stacks are
//! symbolized in process; mappings carry the loaded objects' paths and GNU build IDs, so [`heap_pprof_unsymbolized`] (no names, no debug
//! information read) can be symbolized offline against the same binaries.
//!
//! A site's leading frames that belong to the allocation machinery (frag, `__rust_alloc`, the
//! standard library's `alloc::` plumbing) are trimmed, so that the leaf of each stack is the function
//! that asked for the memory, as in Go's heap profiles; an unsymbolized profile asks `pprof` to do the
//! same with its `drop_frames` pattern.

mod admit;
mod encode;
mod go;
#[cfg(feature = "http")]
pub mod http;
mod mappings;
mod proto;
mod serving;

pub use go::{Endpoint, GoAnswer, GoQuery, GoQueryError, go_answer, go_answer_to_query, symbol_answer};
pub use serving::{Serving, ServingError, serving, set_serving};

use encode::{Options, build, gzip, sites_now};

use crate::own;

/// The live heap as a gzip-compressed pprof profile, symbolized in process.
///
/// Serve it as `GET /debug/pprof/heap` (the Go convention) and read it with
/// `go tool pprof -top http://host/debug/pprof/heap`. Reads the debug information of the loaded
/// objects (its cost is in `docs/PERFORMANCE.md`; see [`keep_symbol_cache`](crate::sites::keep_symbol_cache));
/// use [`heap_pprof_unsymbolized`] to avoid that and symbolize elsewhere.
///
/// # Example
///
/// ```no_run
/// #[global_allocator]
/// static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
///
/// std::fs::write("heap.pb.gz", frag::profile::heap_pprof())?;
/// // go tool pprof -top -sample_index=inuse_space heap.pb.gz
/// # Ok::<(), std::io::Error>(())
/// ```
#[must_use]
pub fn heap_pprof() -> Vec<u8> {
    own::handed_over(|| gzip(&build(&sites_now(), &Options::heap(true))))
}

/// [`heap_pprof`] without names: addresses and mappings (with build IDs) only, for `pprof` to
/// symbolize against the binaries. Cheap: reads no debug information.
#[must_use]
pub fn heap_pprof_unsymbolized() -> Vec<u8> {
    own::handed_over(|| gzip(&build(&sites_now(), &Options::heap(false))))
}
