//! The step explained on glibc, in child processes: a cache that keeps what it is given (live data,
//! by the site that grew: glibc splits no holes by class, so sites are by bytes in use), and 96 MiB
//! of 1,000 B blocks freed on a thread while the trim threshold keeps them (free pages glibc keeps:
//! reclaimable, with `malloc_trim` in the remedy), each figure within 15% of `/proc`, of what the
//! cache holds, or of what a real `malloc_trim(0)` then releases.
#![cfg(all(target_os = "linux", target_env = "gnu"))]

mod common;

use std::time::Duration;

use common::{child_only, rss_bytes, run_child};
use frag::history::{Comparison, PartMove};
use frag::report::diagnosis::{FindingKind, Part};
use frag::watch::Alert;

#[global_allocator]
static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);

const MIB: u64 = 1 << 20;

/// An entry the cache keeps.
#[inline(never)]
fn glibc_cache_keep() -> Box<[u8; 4096]> {
    std::hint::black_box(Box::new([4u8; 4096]))
}

/// `n` publisher rounds 20 ms apart; the alerts they raised.
fn rounds(publisher: &mut frag::Publisher, n: usize, alerts: &mut Vec<Alert>) {
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(20));
        alerts.extend(publisher.observe(&frag::report()));
    }
}

/// The one step alert, explained.
fn step(alerts: &[Alert]) -> &Comparison {
    let steps: Vec<&Alert> = alerts.iter().filter(|a| a.span().is_some()).collect();
    assert_eq!(steps.len(), 1, "one step: {alerts:?}");
    eprintln!("{}", steps[0]);
    steps[0].cause().expect("explained")
}

fn within(what: &str, got: i64, truth: i64) {
    let ok = (got - truth).unsigned_abs() as f64 <= 0.15 * truth.unsigned_abs() as f64;
    assert!(ok, "{what}: {} MiB, truth {} MiB", got >> 20, truth >> 20);
}

fn delta(c: &Comparison, part: Part) -> i64 {
    c.part(part).map_or(0, PartMove::delta)
}

#[test]
fn live_growth_on_glibc() {
    eprintln!("{}", run_child("child_live_growth", &[]));
}

#[test]
#[ignore = "child helper of live_growth_on_glibc"]
fn child_live_growth() {
    child_only("live_growth_on_glibc");
    frag::set_sampling(frag::Sampling::MeanBytes(64 << 10)).unwrap();
    let (mut publisher, mut alerts) = (frag::Publisher::new(), Vec::new());
    let entries = (80 * MIB / 4096) as usize;
    let mut cache = Vec::with_capacity(entries);
    rounds(&mut publisher, 8, &mut alerts);
    cache.extend((0..entries).map(|_| glibc_cache_keep()));
    rounds(&mut publisher, 6, &mut alerts);
    let c = step(&alerts);
    assert_eq!(c.cause, Some(FindingKind::LiveData), "{c}");
    let truth = (entries * 4096) as i64;
    within("live", delta(c, Part::Live), truth);
    let site = c.sites.first().expect("a site");
    assert!(site.function().is_some_and(|f| common::frame_is(f, "glibc_cache_keep")), "{:?}", site.frames);
    assert_eq!(site.pinned_bytes, None, "glibc splits no holes by class");
    within("the site's bytes in use", site.inuse_bytes.1 as i64 - site.inuse_bytes.0 as i64, truth);
    drop(cache);
}

#[test]
fn pages_kept_after_frees_on_glibc() {
    eprintln!("{}", run_child("child_kept_pages", &[]));
}

#[test]
#[ignore = "child helper of pages_kept_after_frees_on_glibc"]
fn child_kept_pages() {
    child_only("pages_kept_after_frees_on_glibc");
    // glibc would trim a heap's top on free above 128 KiB; keep everything until the trim below.
    frag::tune::glibc::set(frag::tune::glibc::Mallopt::TrimThreshold(1 << 30)).unwrap();
    frag::set_sampling(frag::Sampling::MeanBytes(64 << 10)).unwrap();
    let (mut publisher, mut alerts) = (frag::Publisher::new(), Vec::new());
    rounds(&mut publisher, 8, &mut alerts);
    let rss0 = rss_bytes();
    // On a thread of its own, so that its blocks live in a thread arena, freed newest first; the
    // thread stays until the trim (at its exit glibc hands its arena on).
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let (freed, freed_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let mut blocks: Vec<Vec<u8>> = (0..96 * 1024).map(|i| vec![i as u8 | 1; 1000]).collect();
        while let Some(b) = blocks.pop() {
            drop(b);
        }
        freed.send(()).unwrap();
        done.recv().unwrap();
    });
    freed_rx.recv().unwrap();
    let rise = rss_bytes() as i64 - rss0 as i64;
    rounds(&mut publisher, 6, &mut alerts);
    let c = step(&alerts).clone();
    // What the diagnosis says a trim releases now (the explanation's own symbolizing, after the
    // step, has freed pages of its own since), against a real one.
    let predicted = frag::report().diagnosis.expect("a diagnosis").breakdown.reclaimable_bytes as i64;
    let before = rss_bytes();
    // SAFETY: malloc_trim has no preconditions.
    unsafe { libc::malloc_trim(0) };
    let released = before as i64 - rss_bytes() as i64;
    done_tx.send(()).unwrap();
    worker.join().unwrap();
    eprintln!("rise {} MiB, malloc_trim released {} MiB", rise >> 20, released >> 20);
    assert_eq!(c.cause, Some(FindingKind::Reclaimable), "{c}");
    within("RSS", c.rss_delta(), rise);
    within("reclaimable's rise", delta(&c, Part::Reclaimable), rise);
    within("reclaimable now, against malloc_trim", predicted, released);
    assert!(c.remedy.as_deref().is_some_and(|r| r.contains("trim")), "{:?}", c.remedy);
}
