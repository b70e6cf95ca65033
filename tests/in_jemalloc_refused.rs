//! `frag::sample_in_jemalloc` under a `Tracked` global allocator: refused, with the reason, and
//! `Tracked`'s own sampling untouched (jemalloc's profiler would count every sample a second time).

#![cfg(feature = "jemalloc-prof")]

use frag::tune::jemalloc::JemallocConfig;

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

frag::jemalloc_conf!(JemallocConfig::new().prof(true).prof_active(false));

#[test]
fn a_tracked_global_allocator_is_refused() {
    let e = frag::sample_in_jemalloc(frag::Sampling::DEFAULT).unwrap_err();
    assert!(matches!(e, frag::InJemallocError::AlreadyTracked), "{e}");
    assert!(e.to_string().contains("bare tikv_jemallocator::Jemalloc"), "{e}");
    assert!(!frag::sampling_in_jemalloc());
    // jemalloc's profiler stays off, and Tracked's sampler keeps its mean.
    // SAFETY: `prof.active` is a `bool`.
    assert!(!unsafe { tikv_jemalloc_ctl::raw::read::<bool>(b"prof.active\0") }.unwrap());
    assert_eq!(frag::set_sampling(frag::Sampling::MeanBytes(1 << 20)), Ok(frag::Sampling::MeanBytes(1 << 20)));
    let report = frag::report();
    assert!(report.tracked.estimated && !report.tracked.sampled_in_jemalloc);
}
