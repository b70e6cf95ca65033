//! A real client reads the heap profile: `go tool pprof` (Debian's `golang-go`) on profiles of a
//! program whose call sites hold known live bytes. Each site's share of `inuse_space` must be within
//! ±5 points of the truth, under its own function name: once from the profile symbolized in process,
//! once from the unsymbolized one, which `pprof` symbolizes itself from the test binary (found by the
//! profile's mapping, checked against its build ID).
//!
//! Needs `go` on `PATH`: `.ci/run` installs it. The tests are `#[ignore]`d so that the README's test
//! command runs on a machine without Go; CI runs them with `--run-ignored only`.

mod common;

use std::hint::black_box;

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

#[inline(never)]
fn pprof_site_big(bytes: usize) -> Vec<Box<[u8]>> {
    let size = 1 << 20;
    black_box((0..bytes / size).map(|i| vec![i as u8; size].into_boxed_slice()).collect())
}

#[inline(never)]
fn pprof_site_pages(bytes: usize) -> Vec<Box<[u8]>> {
    let size = 4096;
    black_box((0..bytes / size).map(|i| vec![i as u8; size].into_boxed_slice()).collect())
}

#[inline(never)]
fn pprof_site_chunks(bytes: usize) -> Vec<Box<[u8]>> {
    let size = 64 << 10;
    black_box((0..bytes / size).map(|i| vec![i as u8; size].into_boxed_slice()).collect())
}

type Blocks = Vec<Box<[u8]>>;

/// One row of `pprof -top`: function, flat and cumulative share in percent.
use common::go::{Row, rows};
#[cfg(feature = "http")]
use common::server;

/// Runs `go tool pprof -top -sample_index=inuse_space` on `profile` and returns its rows.
fn top(profile: &[u8]) -> Vec<Row> {
    let text = common::go::top(profile, None, &["-sample_index=inuse_space"]);
    eprintln!("{text}");
    rows(&text)
}

/// Whether a `pprof` row names `function` (unqualified) or a closure in it.
fn names(row: &str, function: &str) -> bool {
    row.split("::").any(|segment| segment == function)
}

/// Each site's flat share (summed over the rows naming it) within 5 points of the truth.
fn check(rows: &[Row], truth: &[(&str, f64)]) {
    for (function, share) in truth {
        let short = function.rsplit("::").next().unwrap_or(function);
        let got: f64 = rows.iter().filter(|r| names(&r.name, short)).map(|r| r.flat_pct).sum();
        eprintln!("{function}: {got:.1}% (truth {share:.1}%)");
        assert!((got - share).abs() <= 5.0, "{function}: {got:.1}% in pprof, {share:.1}% true\n{rows:?}");
    }
}

/// Allocates the three sites and returns them with each one's true share of the live heap, in
/// percent (live bytes from frag's exact counters).
fn setup() -> (Vec<Blocks>, Vec<(&'static str, f64)>) {
    let mib = 1 << 20;
    let held = vec![pprof_site_big(512 * mib), pprof_site_pages(256 * mib), pprof_site_chunks(256 * mib)];
    let live = frag::report::totals().allocated_bytes as f64;
    let share = |v: &Vec<Box<[u8]>>| {
        (v.iter().map(|b| b.len()).sum::<usize>() + v.capacity() * size_of::<Box<[u8]>>()) as f64 / live * 100.0
    };
    let truth = vec![
        ("pprof_go::pprof_site_big", share(&held[0])),
        ("pprof_go::pprof_site_pages", share(&held[1])),
        ("pprof_go::pprof_site_chunks", share(&held[2])),
    ];
    (held, truth)
}

#[test]
#[ignore = "needs go (golang-go); run by .ci/run"]
fn go_tool_pprof_reads_the_symbolized_profile() {
    assert_ne!(frag::sites::unwinder(), frag::sites::Unwinder::None);
    let (held, truth) = setup();
    check(&top(&frag::profile::heap_pprof()), &truth);
    drop(held);
}

/// Go's bundled `pprof` symbolizes with Go's own DWARF reader, which names functions by their short
/// DWARF name (`pprof_site_big`) and sees inlined frames as their callers: so this checks each site's
/// cumulative share under its short name, which proves the addresses land in the right functions
/// (the mapping and its build ID were right). It needs full debug information (with line tables
/// only, Go's reader names the sites' frames `{closure#0}`): `.ci/run` builds it so.
#[test]
#[ignore = "needs go (golang-go); run by .ci/run"]
fn go_tool_pprof_symbolizes_the_unsymbolized_profile_from_the_binary() {
    let (held, truth) = setup();
    let rows = top(&frag::profile::heap_pprof_unsymbolized());
    for (function, share) in &truth {
        let short = function.rsplit("::").next().unwrap();
        let cum = rows.iter().find(|r| r.name == short).map_or(0.0, |r| r.cum_pct);
        eprintln!("{short}: cum {cum:.1}% (truth {share:.1}%)");
        assert!((cum - share).abs() <= 5.0, "{short}: {cum:.1}% in pprof, {share:.1}% true\n{rows:?}");
    }
    drop(held);
}

/// Allocates and frees `bytes` in blocks of `size`: allocation counts without live memory. Inlined
/// into each site, so that the site is the leaf (a call here would be a tail call, leaving no frame).
#[cfg(feature = "http")]
#[inline(always)]
fn churn(bytes: usize, size: usize) {
    for i in 0..bytes / size {
        black_box(vec![i as u8; size]);
    }
}

#[cfg(feature = "http")]
#[inline(never)]
fn pprof_churn_chunks(bytes: usize) {
    churn(bytes, 64 << 10);
}

#[cfg(feature = "http")]
#[inline(never)]
fn pprof_churn_pages(bytes: usize) {
    churn(bytes, 4 << 10);
}

#[cfg(feature = "http")]
#[inline(never)]
fn pprof_churn_before(bytes: usize) {
    churn(bytes, 16 << 10);
}

/// The sample type `go tool pprof` shows `profile` in when not told which.
#[cfg(feature = "http")]
fn default_type(profile: &[u8]) -> String {
    let text = common::go::top(profile, None, &["-nodecount=1"]);
    text.lines().find_map(|l| l.strip_prefix("Type: ")).unwrap_or_else(|| panic!("no type: {text}")).to_owned()
}

/// `go tool pprof -top -unit=B -sample_index=<index> [-diff_base=<base>] <profile>`: each site's
/// cumulative bytes (the row naming its function; the sites inline `churn`, which `pprof` shows as
/// the leaf below them).
#[cfg(feature = "http")]
fn cum_bytes(profile: &[u8], base: Option<&[u8]>, index: &str, functions: &[&str]) -> Vec<f64> {
    let text = common::go::top(profile, base, &["-unit=B", &format!("-sample_index={index}")]);
    eprintln!("{text}");
    let rows = rows(&text);
    functions.iter().map(|function| rows.iter().find(|r| names(&r.name, function)).map_or(0.0, |r| r.cum)).collect()
}

/// Go's `/debug/pprof/allocs` scraped twice across a known workload: `go tool pprof -diff_base`
/// shows what each site allocated in between (within 15%: each site has over 500 samples, so about
/// 4% is one standard error); `alloc_*` never decrease from one scrape to the next; Go's headers;
/// `?seconds=N` answers what happened within its window only; `?debug=1` is Go's text; bad queries
/// and other paths are refused.
#[cfg(feature = "http")]
#[test]
#[ignore = "needs go (golang-go); run by .ci/run"]
fn go_tool_pprof_diffs_two_scrapes_of_the_allocs_endpoint() {
    let mib = 1 << 20;
    let addr = server::start();
    pprof_churn_chunks(200 * mib);
    pprof_churn_pages(100 * mib);
    let (status, headers, first) = server::get(addr, "/debug/pprof/allocs?symbolize=1");
    assert_eq!(status, 200);
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    assert_eq!(header("content-type"), Some("application/octet-stream"));
    assert_eq!(header("content-disposition"), Some("attachment; filename=\"allocs\""));
    pprof_churn_chunks(300 * mib);
    pprof_churn_pages(600 * mib);
    let (_, _, second) = server::get(addr, "/debug/pprof/allocs?symbolize=1");

    let sites = ["pprof_churn_chunks", "pprof_churn_pages"];
    assert_eq!(default_type(&second), "alloc_space");
    let between = cum_bytes(&second, Some(&first), "alloc_space", &sites);
    for (site, (got, truth)) in sites.iter().zip(between.iter().zip([300.0 * mib as f64, 600.0 * mib as f64])) {
        eprintln!("{site}: {got:.0} B allocated between the scrapes (truth {truth:.0})");
        assert!((got / truth - 1.0).abs() <= 0.15, "{site}: {got} against {truth}");
    }
    for index in ["alloc_space", "alloc_objects"] {
        let (a, b) = (cum_bytes(&first, None, index, &sites), cum_bytes(&second, None, index, &sites));
        assert!(a.iter().zip(&b).all(|(a, b)| b >= a) && b.iter().all(|&v| v > 0.0), "{index}: {a:?} then {b:?}");
    }

    // What happened before the window is not in a delta.
    pprof_churn_before(200 * mib);
    let (status, headers, delta) = server::get(addr, "/debug/pprof/allocs?seconds=1&symbolize=1");
    assert_eq!(status, 200);
    assert!(headers.iter().any(|(k, v)| k == "content-disposition" && v.contains("allocs-delta")), "{headers:?}");
    let before = cum_bytes(&delta, None, "alloc_space", &["pprof_churn_before"])[0];
    assert!(before.abs() < 0.05 * (200 * mib) as f64, "{before} B of a workload that ended before the window");

    assert_eq!(default_type(&server::get(addr, "/debug/pprof/heap?symbolize=1").2), "inuse_space");
    let (status, headers, text) = server::get(addr, "/debug/pprof/heap?debug=1");
    let text = String::from_utf8(text).unwrap();
    assert_eq!(status, 200);
    assert!(headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/plain")));
    let first_line = text.lines().next().unwrap();
    assert!(first_line.starts_with("heap profile: ") && first_line.ends_with("@ heap_v2/1"), "{first_line}");
    assert!(text.contains("pprof_churn_pages"), "{text}");

    assert_eq!(server::get(addr, "/debug/pprof/allocs?seconds=0").0, 400);
    assert_eq!(server::get(addr, "/debug/pprof/heap?rate=1").0, 400);
    assert_eq!(server::get(addr, "/debug/pprof/profile").0, 404);
}
