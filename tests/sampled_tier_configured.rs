//! A sampled-tier `Tracked` configured in its `static` with a sampling that tier cannot use
//! (`EveryBlock`): the default applies, the report says why, and samples are still found at their
//! frees.

#[global_allocator]
static A: frag::Tracked<std::alloc::System> =
    frag::Tracked::with_sampling(std::alloc::System, frag::Sampling::EveryBlock);

#[test]
fn every_block_in_the_static_falls_back_to_the_default_with_a_warning() {
    let live = |o: &frag::report::Origin| o.sampled_blocks - o.sampled_frees;
    let start = frag::report().origin.expect("origin");
    let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 16 + (i * 37) % 3000]).collect();
    assert_eq!(frag::sampling(), frag::Sampling::DEFAULT);
    let report = frag::report();
    let w = report.warnings.iter().find(|w| w.kind == frag::report::WarningKind::InvalidSampling).expect("a warning");
    assert!(w.message.contains("frag::Exact"), "{}", w.message);
    let held = report.origin.expect("origin");
    drop(blocks);
    let end = frag::report().origin.expect("origin");
    let taken = held.sampled_blocks - start.sampled_blocks;
    assert!(taken > 20, "{taken} samples of ~30 MiB");
    // Every sample of the blocks is found at its free: what is still live is at most what the
    // reports themselves hold while they are taken.
    assert!(live(&end) <= live(&start) + 2, "{} live samples after, {} before", live(&end), live(&start));
}
