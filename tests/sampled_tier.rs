//! The sampled (production) tier against what the test itself did: a thread's allocated bytes are
//! exact once it has read frag's figures itself (the sampling clock counts every byte; the worker
//! of `on_named_thread` does so before each report), and every count, free, per-class and live figure is
//! an unbiased estimate whose error stays within five standard errors computed from the same sizes
//! (a correct estimator fails that about once in a million runs; a biased one, off by a few percent,
//! fails every time).
//!
//! That holds for estimates resting on hundreds of samples, so the loops are not scaled down under
//! valgrind, or not below that: with few samples one sample of a small block (at 64 B it stands for
//! 8,192 blocks) moves the estimate by several standard errors. At a hundredth of the blocks a
//! correct estimator failed the allocation count once in 900 simulated runs.

mod common;

use common::{on_named_thread, raw_alloc, raw_free, scaled};
use std::alloc::{Layout, System};

#[global_allocator]
static A: frag::Tracked<System> = frag::Tracked::new(System);

const MEAN: f64 = (512 << 10) as f64;

/// The standard error of a Horvitz-Thompson total over blocks of `sizes`, each counting `value(s)`:
/// `sqrt(sum value(s)^2 (1 - p) / p)` with `p = 1 - exp(-s / mean)`.
fn standard_error(sizes: &[usize], value: impl Fn(usize) -> f64) -> f64 {
    sizes
        .iter()
        .map(|&s| {
            let p = -(-(s as f64) / MEAN).exp_m1();
            value(s).powi(2) * (1.0 - p) / p
        })
        .sum::<f64>()
        .sqrt()
}

fn assert_within(what: &str, estimate: f64, truth: f64, se: f64) {
    assert!(
        (estimate - truth).abs() <= 5.0 * se,
        "{what}: estimated {estimate}, truth {truth}, standard error {se:.1}"
    );
}

/// Sizes from 64 B to 16 KiB, spread log-uniformly (deterministic).
fn sizes(n: usize) -> Vec<usize> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (64usize << (x % 9)) | ((x >> 32) as usize % 64)
        })
        .collect()
}

#[test]
fn a_threads_allocated_bytes_are_exact_and_its_counts_are_unbiased() {
    // About 2,800 samples; eight seconds under valgrind.
    let n = 400_000;
    let sizes = sizes(n);
    let grown: Vec<usize> = sizes.iter().step_by(4).map(|s| s + 100).collect();
    // A reallocation hands out its whole new size.
    let allocated: u64 = sizes.iter().chain(&grown).map(|&s| s as u64).sum();
    on_named_thread(
        "sampled",
        || {
            // Every block allocated, one in four grown by 100 bytes, all freed in order.
            for (i, &s) in sizes.iter().enumerate() {
                let mut b = (raw_alloc(s), s);
                if i % 4 == 0 {
                    let layout = Layout::from_size_align(s, 8).unwrap();
                    // SAFETY: `b.0` is a live block of `s` bytes, alignment 8.
                    let p = unsafe { std::alloc::realloc(b.0 as *mut u8, layout, s + 100) };
                    assert!(!p.is_null());
                    b = (p as usize, s + 100);
                }
                raw_free(b.0, b.1);
            }
        },
        |before, after| {
            let (b, a) = (common::row(before, "sampled"), common::row(after, "sampled"));
            assert!(a.estimated && after.tracked.estimated, "the sampled tier labels its figures");
            assert_eq!(a.allocated_bytes - b.allocated_bytes, allocated, "allocated bytes are exact");
            // Allocations (plain ones: reallocations count apart) and frees.
            let plain = (a.allocations - b.allocations) as f64;
            assert_within("allocations", plain, n as f64, standard_error(&sizes, |_| 1.0));
            let reallocs = (a.reallocations - b.reallocations) as f64;
            assert_within("reallocations", reallocs, grown.len() as f64, standard_error(&grown, |_| 1.0));
            let freed = (a.freed_bytes - b.freed_bytes) as f64;
            let truth: f64 = sizes.iter().map(|&s| s as f64).sum::<f64>()
                + grown.iter().map(|&s| s as f64).sum::<f64>()
                - (grown.len() * 100) as f64;
            let mut all = sizes.clone();
            all.extend(grown.iter().map(|s| s - 100));
            assert_within("freed bytes", freed, truth, standard_error(&all, |s| s as f64));
        },
    );
}

#[test]
fn live_bytes_and_a_classs_figures_are_unbiased() {
    // A class of its own (12289..=14336 B): nothing else in the process allocates there.
    const SIZE: usize = 13_000;
    // At least 4,000 blocks: about 100 samples, and 52 MB held under valgrind.
    let n = scaled(40_000).max(4_000);
    let class = |r: &frag::Report| {
        r.size_classes.iter().find(|c| c.contains(SIZE as u64)).map_or((0, 0, 0), |c| {
            assert!(c.estimated);
            (c.allocations, c.deallocations, c.live_bytes)
        })
    };
    let before = class(&frag::report());
    let blocks: Vec<usize> = (0..n).map(|_| raw_alloc(SIZE)).collect();
    let (kept, freed) = blocks.split_at(n / 4);
    freed.iter().for_each(|&b| raw_free(b, SIZE));
    let after = class(&frag::report());
    let sizes = vec![SIZE; n];
    assert_within("class allocations", (after.0 - before.0) as f64, n as f64, standard_error(&sizes, |_| 1.0));
    let freed_sizes = vec![SIZE; freed.len()];
    assert_within(
        "class frees",
        (after.1 - before.1) as f64,
        freed.len() as f64,
        standard_error(&freed_sizes, |_| 1.0),
    );
    // Live bytes: the kept blocks, estimated from the samples among them.
    let kept_sizes = vec![SIZE; kept.len()];
    let live = after.2 as f64 - before.2 as f64;
    assert_within(
        "class live bytes",
        live,
        (kept.len() * SIZE) as f64,
        standard_error(&kept_sizes, |s| s as f64) * 1.5,
    );
    kept.iter().for_each(|&b| raw_free(b, SIZE));
}

/// With sampling off the sampled tier knows only each thread's allocated bytes: the report says so,
/// and stops saying so once sampling is on again.
#[test]
fn sampling_off_in_the_sampled_tier_is_reported() {
    let warned = || frag::report().warnings.iter().any(|w| w.kind == frag::report::WarningKind::UnsampledTier);
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    assert!(!warned());
    frag::set_sampling(frag::Sampling::Off).unwrap();
    assert!(warned(), "no warning with sampling off");
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    assert!(!warned());
}

/// The sampled tier's frees test the mark alone, so it refuses the settings that do not mark
/// (`EveryBlock`, means below 64 KiB) with a typed error and keeps the setting in force; the densest
/// marking mean is taken, and its samples are all found again at their frees.
#[test]
fn unmarked_sampling_needs_the_exact_tier() {
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    assert_eq!(frag::set_sampling(frag::Sampling::EveryBlock), Err(frag::SamplingError::NeedsExactTier { mean: 0 }));
    assert_eq!(
        frag::set_sampling(frag::Sampling::MeanBytes(32 << 10)),
        Err(frag::SamplingError::NeedsExactTier { mean: 32 << 10 })
    );
    assert_eq!(frag::sampling(), frag::Sampling::DEFAULT, "a refused setting changed the sampling");
    assert_eq!(frag::set_sampling(frag::Sampling::MeanBytes(64 << 10)), Ok(frag::Sampling::MeanBytes(64 << 10)));
    let live = |o: &frag::report::Origin| o.sampled_blocks - o.sampled_frees;
    let before = frag::report().origin.expect("origin");
    let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 16 + (i * 37) % 3000]).collect();
    drop(blocks);
    let after = frag::report().origin.expect("origin");
    frag::set_sampling(frag::Sampling::DEFAULT).unwrap();
    let sampled = after.sampled_blocks - before.sampled_blocks;
    assert!(sampled > 300, "{sampled} samples of ~30 MiB at 64 KiB");
    // Every sample is found at its free: what is still live is at most what the reports themselves
    // (and the other tests' threads of this process) hold meanwhile.
    assert!(live(&after) <= live(&before) + 3, "{} live samples after, {} before", live(&after), live(&before));
}

/// Live bytes are estimates in the sampled tier, and every place that shows them says so: the
/// breakdown's sources, the `live_data` finding, the text report's `≈`, and the JSON.
#[test]
fn live_bytes_are_labelled_estimated_everywhere() {
    let held: Vec<Vec<u8>> = (0..scaled(4096)).map(|i| vec![i as u8 | 1; 16 << 10]).collect();
    let r = frag::report();
    let d = r.diagnosis.as_ref().expect("a diagnosis on glibc");
    assert_eq!(d.breakdown.sources.live, frag::report::diagnosis::Source::Estimated);
    assert_eq!(d.breakdown.sources.rounding, frag::report::diagnosis::Source::Estimated);
    let live = d.findings.iter().find(|f| f.kind == frag::report::diagnosis::FindingKind::LiveData);
    if let Some(f) = live {
        assert!(f.estimated, "{f:?}");
    }
    let text = r.to_string();
    let resident = text.lines().find(|l| l.starts_with("resident")).expect("a resident line");
    assert!(resident.contains("live ≈"), "{resident}");
    #[cfg(feature = "serde")]
    {
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["diagnosis"]["breakdown"]["sources"]["live"], "estimated", "{}", json["diagnosis"]);
        for f in json["diagnosis"]["findings"].as_array().unwrap() {
            if f["kind"] == "live_data" {
                assert_eq!(f["estimated"], true, "{f}");
            }
        }
    }
    drop(held);
}
