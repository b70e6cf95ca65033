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
use std::process::Command;

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
type Row = (String, f64, f64);

/// Runs `go tool pprof -top -sample_index=inuse_space` on `profile` and returns its rows.
fn top(profile: &[u8], name: &str) -> Vec<Row> {
    let path = std::env::temp_dir().join(format!("frag-{name}-{}.pb.gz", std::process::id()));
    std::fs::write(&path, profile).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof", "-top", "-nodecount=1000", "-sample_index=inuse_space"])
        .arg(&path)
        .output()
        .expect("`go` on PATH (Debian: apt-get install golang-go)");
    if std::env::var_os("FRAG_KEEP_PROFILE").is_none() {
        let _ = std::fs::remove_file(&path);
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "go tool pprof failed: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{text}");
    // Rows: flat flat% sum% cum cum% name
    text.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let flat = cols.get(1)?.strip_suffix('%')?.parse().ok()?;
            let cum = cols.get(4)?.strip_suffix('%')?.parse().ok()?;
            Some((cols.get(5..)?.join(" "), flat, cum))
        })
        .collect()
}

/// Whether a `pprof` row names `function` (unqualified) or a closure in it.
fn names(row: &str, function: &str) -> bool {
    row.split("::").any(|segment| segment == function)
}

/// Each site's flat share (summed over the rows naming it) within 5 points of the truth.
fn check(rows: &[Row], truth: &[(&str, f64)]) {
    for (function, share) in truth {
        let short = function.rsplit("::").next().unwrap_or(function);
        let got: f64 = rows.iter().filter(|(n, ..)| names(n, short)).map(|(_, flat, _)| flat).sum();
        eprintln!("{function}: {got:.1}% (truth {share:.1}%)");
        assert!((got - share).abs() <= 5.0, "{function}: {got:.1}% in pprof, {share:.1}% true\n{rows:?}");
    }
}

/// Allocates the three sites and returns them with each one's true share of the live heap, in
/// percent (live bytes from frag's exact counters).
fn setup() -> (Vec<Blocks>, Vec<(&'static str, f64)>) {
    let mib = 1 << 20;
    let held = vec![pprof_site_big(512 * mib), pprof_site_pages(256 * mib), pprof_site_chunks(256 * mib)];
    let live = frag::totals().allocated_bytes as f64;
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
    assert_ne!(frag::unwinder(), frag::Unwinder::None);
    let (held, truth) = setup();
    check(&top(&frag::profile::heap_pprof(), "sym"), &truth);
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
    let rows = top(&frag::profile::heap_pprof_unsymbolized(), "raw");
    for (function, share) in &truth {
        let short = function.rsplit("::").next().unwrap();
        let cum = rows.iter().find(|(n, ..)| n == short).map_or(0.0, |r| r.2);
        eprintln!("{short}: cum {cum:.1}% (truth {share:.1}%)");
        assert!((cum - share).abs() <= 5.0, "{short}: {cum:.1}% in pprof, {share:.1}% true\n{rows:?}");
    }
    drop(held);
}
