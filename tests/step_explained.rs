//! The step explained, on jemalloc: four workloads whose cause the test knows, each in a child
//! process, each raising one step under a publisher driven round by round; the alert's cause
//! against the truth the workload knows and jemalloc's own statistics read by name:
//! - a burst of long-lived 7 KiB blocks among short-lived ones of the same class: holes, in the
//!   7 KiB class, pinned by the one site that keeps its blocks;
//! - the same blocks handed from a producer thread to a consumer that frees them: the holes are in
//!   the producer's slabs and most frees cross threads during the step, none before;
//! - a cache that keeps what it is given: live data explains the step, by the site and the scope
//!   that grew;
//! - 96 MiB freed in large blocks under a 10-minute decay: dirty pages jemalloc keeps, reclaimable,
//!   and the remedy names the decay.
//!
//! Each figure within 15% of its truth. The same checks against the wrong rounds (both on the new
//! plateau) fail: the explanation is of the step, not of whatever the history holds.
#![cfg(feature = "jemalloc")]

mod common;

use std::time::Duration;

use common::pins::{hand_purge_releases, jemalloc_holes};
use common::{child_only, rss_bytes, run_child};
use frag::history::{Comparison, PartMove};
use frag::report::diagnosis::{FindingKind, Part};
use frag::watch::Alert;

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

const MIB: u64 = 1 << 20;
/// The request size of the holes workloads' blocks: jemalloc's 7 KiB class, 4 regions a slab
/// (large blocks, so that a sampling mean of 64 KiB samples one in ten and the kept site's 5,000
/// blocks give its estimates about 500 samples, 4.5% of standard error).
const SMALL: usize = 7_000;
/// The class.
const CLASS: u64 = 7 << 10;
/// One kept block in this many (one per slab).
const PER_SLAB: usize = 4;
/// Blocks of the holes workloads: 5,000 kept, 105 MiB of holes.
const BLOCKS: usize = 20_000;

/// A long-lived block of the site that pins.
#[inline(never)]
fn burst_kept() -> Box<[u8; SMALL]> {
    std::hint::black_box(Box::new([1u8; SMALL]))
}

/// A short-lived block of the same class.
#[inline(never)]
fn burst_churned() -> Box<[u8; SMALL]> {
    std::hint::black_box(Box::new([2u8; SMALL]))
}

/// A block the producer hands over.
#[inline(never)]
fn handed_out() -> Box<[u8; SMALL]> {
    std::hint::black_box(Box::new([3u8; SMALL]))
}

/// An entry the cache keeps.
#[inline(never)]
fn cache_keep() -> Box<[u8; 4096]> {
    std::hint::black_box(Box::new([4u8; 4096]))
}

/// Turns the calling thread's jemalloc cache on or off: off, each allocation takes the next free
/// region of its class's current slab, so that one block in [`PER_SLAB`] is one block per slab.
fn thread_cache(on: bool) {
    // SAFETY: `thread.tcache.enabled` is a `bool`, written as one.
    unsafe { tikv_jemalloc_ctl::raw::write(b"thread.tcache.enabled\0", on) }.unwrap();
}

/// A publisher driven round by round, and what the rounds raised.
struct Rounds {
    publisher: frag::Publisher,
    alerts: Vec<Alert>,
}

impl Rounds {
    fn new() -> Self {
        frag::set_sampling(frag::Sampling::MeanBytes(64 << 10)).unwrap();
        // The symbolizer's caches and the unwind tables before the workload.
        let mut report = frag::report();
        if let Some(sites) = report.sites.as_mut() {
            sites.symbolize();
        }
        // ...and the pages they leave dirty given back, so that the workload starts on a clean heap.
        hand_purge_releases();
        Self { publisher: frag::Publisher::new(), alerts: Vec::new() }
    }

    /// `n` rounds, `between` run before each.
    fn run(&mut self, n: usize, mut between: impl FnMut()) {
        for _ in 0..n {
            between();
            std::thread::sleep(Duration::from_millis(20));
            self.alerts.extend(self.publisher.observe(&frag::report()));
        }
    }

    /// The one step alert the rounds raised, with its cause.
    fn step(&self) -> &Alert {
        let steps: Vec<&Alert> = self.alerts.iter().filter(|a| a.span().is_some()).collect();
        assert_eq!(steps.len(), 1, "one step: {:?}", self.alerts);
        let step = steps[0];
        assert!(step.cause().is_some(), "explained: {step:?}");
        eprintln!("{step}");
        step
    }
}

/// `got` within 15% of `truth`.
fn within(what: &str, got: i64, truth: i64) -> Result<(), String> {
    let ok = (got - truth).unsigned_abs() as f64 <= 0.15 * truth.unsigned_abs() as f64;
    if ok { Ok(()) } else { Err(format!("{what}: {} MiB, truth {} MiB", got >> 20, truth >> 20)) }
}

fn delta(c: &Comparison, part: Part) -> i64 {
    c.part(part).map_or(0, PartMove::delta)
}

/// The truth a holes workload knows: the resident rise by `/proc`, the holes' rise by jemalloc's
/// statistics.
struct HolesTruth {
    rss: i64,
    holes: i64,
}

fn check_holes(c: &Comparison, t: &HolesTruth, cause: FindingKind, site: &str) -> Result<(), String> {
    if c.cause != Some(cause) {
        return Err(format!("cause {:?}, not {cause:?}", c.cause));
    }
    if c.parts.first().map(|p| p.part) != Some(Part::Holes) {
        return Err(format!("largest move {:?}, not holes", c.parts.first()));
    }
    within("RSS", c.rss_delta(), t.rss)?;
    within("holes", delta(c, Part::Holes), t.holes)?;
    let span = c.hole_classes.ok_or("no class span")?;
    if (span.min_size, span.max_size) != (CLASS, CLASS) {
        return Err(format!("classes {span:?}, not the 7 KiB class"));
    }
    let first = c.sites.first().ok_or("no site")?;
    if !first.function().is_some_and(|f| common::frame_is(f, site)) {
        return Err(format!("site {:?}, not {site}", first.frames));
    }
    let (b, a) = first.pinned_bytes.ok_or("no pins")?;
    within("pinned by the site", a as i64 - b as i64, t.holes)
}

/// The step, taken between `before` and `after` instead of the alert's own moments.
fn compared(alert: &Alert, before: Duration, after: Duration) -> Comparison {
    let mut c = frag::history().compare(before, after).expect("a comparison");
    c.explain(&frag::report());
    assert!(alert.span().is_some());
    c
}

/// The alert's cause passes `check`; the comparison of two rounds of the new plateau does not.
fn passes_only_on_the_step(alert: &Alert, check: impl Fn(&Comparison) -> Result<(), String>) {
    let cause = alert.cause().expect("a cause");
    check(cause).unwrap_or_else(|e| panic!("{e}\n{alert}"));
    let (_, at) = alert.span().unwrap();
    let wrong = compared(alert, at, at + Duration::from_secs(3600));
    assert!(check(&wrong).is_err(), "the wrong rounds pass too: {wrong}");
}

#[test]
fn holes_pinned_by_one_site() {
    eprintln!("{}", run_child("child_holes", &[]));
}

#[test]
#[ignore = "child helper of holes_pinned_by_one_site"]
fn child_holes() {
    child_only("holes_pinned_by_one_site");
    let mut rounds = Rounds::new();
    rounds.run(8, || {});
    let (rss0, holes0) = (rss_bytes(), jemalloc_holes().iter().map(|h| h.1).sum::<u64>());
    let mut kept = Vec::with_capacity(BLOCKS / PER_SLAB);
    let mut churned = Vec::with_capacity(BLOCKS);
    thread_cache(false);
    for i in 0..BLOCKS {
        if i % PER_SLAB == 0 { kept.push(burst_kept()) } else { churned.push(burst_churned()) }
    }
    drop(churned);
    thread_cache(true);
    let truth = HolesTruth {
        rss: rss_bytes() as i64 - rss0 as i64,
        holes: jemalloc_holes().iter().map(|h| h.1).sum::<u64>() as i64 - holes0 as i64,
    };
    let ((), log) = common::capture_tracing(|| rounds.run(6, || {}));
    let step = rounds.step();
    assert!(matches!(step, Alert::StairStep { .. }), "{step:?}");
    passes_only_on_the_step(step, |c| check_holes(c, &truth, FindingKind::Holes, "burst_kept"));
    // The warning carries the cause, and the next report has it as a finding.
    let warning = log.lines().find(|l| l.contains("stepped up")).expect("a warning");
    assert!(
        warning.contains("WARN") && warning.contains("cause=\"holes\"") && warning.contains("burst_kept"),
        "{warning}"
    );
    let report = frag::report();
    let findings = &report.diagnosis.as_ref().expect("a diagnosis").findings;
    let found = findings.iter().find(|f| f.kind == FindingKind::Step).expect("a step finding");
    assert!(found.summary.contains("burst_kept") && found.remedy.contains("pin"), "{found:?}");
    within("the finding's bytes", found.bytes as i64, truth.rss).unwrap();
    drop(kept);
}

#[test]
fn cross_thread_hand_off() {
    eprintln!("{}", run_child("child_cross_thread", &[]));
}

#[test]
#[ignore = "child helper of cross_thread_hand_off"]
fn child_cross_thread() {
    child_only("cross_thread_hand_off");
    let mut rounds = Rounds::new();
    // Before: frees on the allocating thread only.
    rounds.run(10, || drop((0..400).map(|_| burst_churned()).collect::<Vec<_>>()));
    let (rss0, holes0) = (rss_bytes(), jemalloc_holes().iter().map(|h| h.1).sum::<u64>());
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Box<[u8; SMALL]>>>(4);
    // The consumer takes every block before freeing three in four: freed as they came, they would
    // be the producer's next blocks, and the kept ones would fill their slabs.
    let consumer = std::thread::spawn(move || {
        let received: Vec<Box<[u8; SMALL]>> = rx.into_iter().flatten().collect();
        let kept: Vec<_> =
            received.into_iter().enumerate().filter(|(i, _)| i % PER_SLAB == 0).map(|(_, b)| b).collect();
        frag::tune::jemalloc::flush_thread_tcache().unwrap();
        kept
    });
    let producer = std::thread::spawn(move || {
        thread_cache(false);
        for _ in 0..BLOCKS / 200 {
            tx.send((0..200).map(|_| handed_out()).collect()).unwrap();
        }
    });
    producer.join().unwrap();
    let kept = consumer.join().unwrap();
    let truth = HolesTruth {
        rss: rss_bytes() as i64 - rss0 as i64,
        holes: jemalloc_holes().iter().map(|h| h.1).sum::<u64>() as i64 - holes0 as i64,
    };
    rounds.run(6, || {});
    let step = rounds.step();
    passes_only_on_the_step(step, |c| {
        check_holes(c, &truth, FindingKind::CrossThread, "handed_out")?;
        let share = c.cross_thread.ok_or("no cross-thread share")?;
        // The hand-off's frees, every one across threads, are nearly all the frees of the step.
        if share.during < 0.85 || share.before.is_none_or(|b| b > 0.05) {
            let counts: Vec<_> =
                frag::history().snapshots().map(|s| (s.to, s.freed_bytes, s.cross_thread_bytes)).collect();
            return Err(format!("cross-thread share {share:?}: {counts:?}"));
        }
        Ok(())
    });
    drop(kept);
}

#[test]
fn live_growth_of_a_cache() {
    eprintln!("{}", run_child("child_live_growth", &[]));
}

#[test]
#[ignore = "child helper of live_growth_of_a_cache"]
fn child_live_growth() {
    child_only("live_growth_of_a_cache");
    let mut rounds = Rounds::new();
    let entries = 80 * MIB as usize / 4096;
    let mut cache = Vec::with_capacity(entries);
    rounds.run(8, || {});
    let scope = frag::Scope::new("cache").unwrap();
    {
        let _in = scope.enter();
        cache.extend((0..entries).map(|_| cache_keep()));
    }
    let truth = (entries * 4096) as i64;
    rounds.run(6, || {});
    let step = rounds.step();
    assert!(matches!(step, Alert::LiveGrowth { .. }), "{step:?}");
    passes_only_on_the_step(step, |c| {
        if c.cause != Some(FindingKind::LiveData) {
            return Err(format!("cause {:?}", c.cause));
        }
        within("live", delta(c, Part::Live), truth)?;
        let first = c.sites.first().ok_or("no site")?;
        if !first.function().is_some_and(|f| common::frame_is(f, "cache_keep")) {
            return Err(format!("site {:?}", first.frames));
        }
        within("the site's bytes in use", first.inuse_bytes.1 as i64 - first.inuse_bytes.0 as i64, truth)?;
        let scope = c.scopes.first().ok_or("no scope")?;
        if scope.name.as_deref() != Some("cache") {
            return Err(format!("scope {scope:?}"));
        }
        within("the scope's bytes in use", scope.inuse_bytes.1 as i64 - scope.inuse_bytes.0 as i64, truth)
    });
    drop(cache);
}

#[test]
fn dirty_pages_kept_by_decay() {
    eprintln!("{}", run_child("child_decay", &[]));
}

#[test]
#[ignore = "child helper of dirty_pages_kept_by_decay"]
fn child_decay() {
    child_only("dirty_pages_kept_by_decay");
    use frag::tune::Decay;
    use frag::tune::jemalloc::{DecayKind, set_decay};
    set_decay(DecayKind::Dirty, Decay::After(Duration::from_secs(600))).unwrap();
    let mut rounds = Rounds::new();
    rounds.run(8, || {});
    let rss0 = rss_bytes();
    let freed = 96 * MIB;
    // The truth: what the burst left resident, by `/proc` (about what it freed; less where it
    // reused pages already dirty).
    let blocks: Vec<Vec<u8>> = (0..freed / (64 << 10)).map(|i| vec![i as u8 | 1; 64 << 10]).collect();
    drop(blocks);
    let rise = rss_bytes() as i64 - rss0 as i64;
    rounds.run(6, || {});
    let step = rounds.step().clone();
    // What the diagnosis says a purge releases now (the explanation's own symbolizing, after the
    // step, may have left dirty pages of its own since), against a purge by hand.
    let predicted = frag::report().diagnosis.expect("a diagnosis").breakdown.reclaimable_bytes as i64;
    let released = hand_purge_releases() as i64;
    eprintln!("released by a purge: {} MiB, predicted {} MiB", released >> 20, predicted >> 20);
    within("reclaimable now, against a purge", predicted, released).unwrap();
    passes_only_on_the_step(&step, |c| {
        if c.cause != Some(FindingKind::Reclaimable) {
            return Err(format!("cause {:?}", c.cause));
        }
        within("RSS", c.rss_delta(), rise)?;
        within("reclaimable's rise", delta(c, Part::Reclaimable), rise)?;
        match &c.remedy {
            Some(r) if r.contains("decay") => Ok(()),
            r => Err(format!("remedy {r:?} names no decay")),
        }
    });
}
