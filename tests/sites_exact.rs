//! Allocation sites in "every block" mode against the truth the test itself knows: each site
//! function allocates a known number of blocks of known sizes, so its bytes and blocks in use are
//! exact, and a site whose blocks were all freed holds nothing.

mod common;

use common::symbolized_report;

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

sites!(site_alpha, site_beta, site_gamma);

/// A vector grown by pushes (reallocations) and then shrunk: one block, whose site is where it was
/// first allocated.
#[inline(never)]
fn site_grown(n: usize, keep: usize) -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..n as u64 {
        v.push(i);
    }
    v.truncate(keep);
    v.shrink_to_fit();
    std::hint::black_box(v)
}

/// The report's rows whose leaf frame is `function`, summed: (bytes, blocks) in use.
fn in_use(report: &frag::Report, function: &str) -> (u64, u64) {
    let sites = report.sites.as_ref().expect("a sites section");
    sites
        .top
        .iter()
        .filter(|r| r.frames.first().is_some_and(|f| common::frame_is(f, function)))
        .fold((0, 0), |(b, n), r| (b + r.inuse_bytes, n + r.inuse_blocks))
}

#[test]
fn every_block_mode_is_exact_per_site() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None, "no stacks on this target");
    frag::set_sampling(frag::Sampling::EveryBlock).unwrap();
    let (na, sa) = (2_000, 1_000);
    let (nb, sb) = (600, 3_000);
    let (a, _) = site_alpha(na * sa, sa);
    let (b, _) = site_beta(nb * sb, sb);
    drop(site_gamma(300 * 5_000, 5_000));
    let grown = site_grown(100_000, 1_000);
    let report = symbolized_report();
    let ptr = size_of::<Box<[u8]>>();
    assert_eq!(in_use(&report, "site_alpha"), ((na * sa + na * ptr) as u64, na as u64 + 1), "{report}");
    assert_eq!(in_use(&report, "site_beta"), ((nb * sb + nb * ptr) as u64, nb as u64 + 1), "{report}");
    assert_eq!(in_use(&report, "site_gamma"), (0, 0), "{report}");
    assert_eq!(in_use(&report, "site_grown"), ((grown.capacity() * 8) as u64, 1), "{report}");
    drop((a, b, grown));
}

/// The unwinder is the one the build asked for: the unwind tables in a plain x86-64 Linux build, the
/// frame-pointer walk where CI builds with `-C force-frame-pointers=yes` (and says so with
/// `FRAG_EXPECT_UNWINDER`), so that each CI job tests the walk it means to.
#[test]
fn the_unwinder_is_the_one_the_build_asked_for() {
    let default = if cfg!(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64")) {
        "unwind tables"
    } else {
        "none"
    };
    let expected = std::env::var("FRAG_EXPECT_UNWINDER").unwrap_or_else(|_| default.to_owned());
    assert_eq!(frag::sites::unwinder().name(), expected);
}
