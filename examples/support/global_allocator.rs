//! The global allocator of the examples: `Tracked` around the backend the enabled features select
//! (jemalloc by default; `--no-default-features` for glibc, `--features mimalloc` or `snmalloc` alone).

#[cfg(feature = "jemalloc")]
#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

#[cfg(all(not(feature = "jemalloc"), feature = "mimalloc"))]
#[global_allocator]
static A: frag::Tracked<mimalloc::MiMalloc> = frag::Tracked::new(mimalloc::MiMalloc);

#[cfg(all(not(feature = "jemalloc"), not(feature = "mimalloc"), feature = "snmalloc"))]
#[global_allocator]
static A: frag::Tracked<snmalloc_rs::SnMalloc> = frag::Tracked::new(snmalloc_rs::SnMalloc);

#[cfg(not(any(feature = "jemalloc", feature = "mimalloc", feature = "snmalloc")))]
#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
