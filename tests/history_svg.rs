//! The history's picture as a browser renders it: a child process on jemalloc steps twice under a
//! publisher driven round by round (a cache that keeps 64 MiB, then 96 MiB freed into dirty pages
//! under a long decay), serves `/debug/frag/history.svg` on a loopback port, and headless Chromium
//! loads it from there. Chromium's DOM holds both steps' labels, with the site and the part the
//! workloads know; its screenshot shows each part's colour, the step markers where the steps are,
//! and bands whose heights at the right edge stand as the history's last figures do.
#![cfg(all(feature = "jemalloc", feature = "http", feature = "serde"))]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{child_only, png, run_child, server};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

const MIB: u64 = 1 << 20;

/// An entry the cache keeps.
#[inline(never)]
fn cached_entry() -> Box<[u8; 4096]> {
    std::hint::black_box(Box::new([7u8; 4096]))
}

/// Headless Chromium with the flags this machine needs (no sandbox as root, no network at
/// start-up), its profile in `dir`, loading `url`.
fn chromium(dir: &Path, args: &[&str], url: &str) -> std::process::Output {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(args)
        .arg(url)
        .output()
        .expect("`chromium` on PATH (Debian: apt-get install chromium)");
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn a_browser_renders_the_history_with_its_steps() {
    eprintln!("{}", run_child("child_renders", &[]));
}

#[test]
#[ignore = "child helper of a_browser_renders_the_history_with_its_steps"]
fn child_renders() {
    child_only("a_browser_renders_the_history_with_its_steps");
    use frag::tune::Decay;
    use frag::tune::jemalloc::{DecayKind, set_decay};
    set_decay(DecayKind::Dirty, Decay::After(Duration::from_secs(600))).unwrap();
    frag::set_sampling(frag::Sampling::MeanBytes(64 << 10)).unwrap();
    let mut publisher = frag::Publisher::new();
    let mut rounds = |n: usize| {
        for _ in 0..n {
            std::thread::sleep(Duration::from_millis(20));
            drop(publisher.publish_once());
        }
    };
    rounds(10);
    let entries = (64 * MIB / 4096) as usize;
    let cache: Vec<_> = (0..entries).map(|_| cached_entry()).collect();
    rounds(10);
    let blocks: Vec<Vec<u8>> = (0..96 * MIB / (64 << 10)).map(|i| vec![i as u8 | 1; 64 << 10]).collect();
    drop(blocks);
    rounds(10);
    let history = frag::history();
    let labels: Vec<String> = history.steps().map(|s| s.label.to_string()).collect();
    assert_eq!(labels.len(), 2, "two steps: {labels:?}");
    assert!(labels[0].contains("live +") && labels[0].contains("cached_entry"), "{labels:?}");
    assert!(labels[1].contains("reclaimable +"), "{labels:?}");

    let addr = server::start();
    let url = format!("http://{addr}/debug/frag/history.svg");
    let (status, headers, _) = server::get(addr, "/debug/frag/history.svg");
    assert_eq!(status, 200);
    assert!(headers.iter().any(|(k, v)| k == "content-type" && v == "image/svg+xml"), "{headers:?}");

    let dir = std::env::temp_dir().join(format!("frag-svg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The document as Chromium parsed it: an SVG whose text holds both labels.
    let dom = String::from_utf8(chromium(&dir, &["--dump-dom"], &url).stdout).unwrap();
    assert!(dom.contains("<svg"), "{dom}");
    for label in &labels {
        let shown = label.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        assert!(dom.contains(&shown), "{label} not in the DOM:\n{dom}");
    }

    // The screenshot: every part with a band of its own shows its colour, the step markers stand
    // where the steps are, and the bands at the right edge stand as the last snapshot's figures.
    let shot = dir.join("shot.png");
    chromium(&dir, &["--window-size=960,480", &format!("--screenshot={}", shot.display())], &url);
    let picture = png::decode(&std::fs::read(&shot).unwrap());
    if let Some(keep) = std::env::var_os("FRAG_KEEP_SHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!((picture.width, picture.height), (960, 480));
    let (live, holes, reclaimable, outside) = ("#4e79a7", "#e15759", "#f28e2b", "#bab0ac");
    for colour in [live, reclaimable, outside] {
        assert!(picture.count(colour) > 2_000, "{colour}: {} pixels", picture.count(colour));
    }
    let step_colour = png::rgb("#6a3d9a");
    let marked: Vec<usize> =
        (0..picture.width).filter(|&x| (30..400).filter(|&y| picture.at(x, y) == step_colour).count() > 100).collect();
    let first: Vec<f64> = history.snapshots().map(|s| s.to.as_secs_f64()).collect();
    let (t0, t1) = (first[0], *first.last().unwrap());
    for step in history.steps() {
        let x = 72.0 + (step.after.as_secs_f64() - t0) / (t1 - t0) * (960.0 - 72.0 - 24.0);
        assert!(marked.iter().any(|&m| (m as f64 - x).abs() <= 3.0), "no marker near x = {x:.0}: {marked:?}");
    }
    // The bands' heights two pixels in from the plot's right edge, against the last figures.
    let column = 960 - 24 - 2;
    let height = |colour: &str| (0..picture.height).filter(|&y| picture.at(column, y) == png::rgb(colour)).count();
    let split = history.snapshots().last().unwrap().split.expect("a split");
    let ratio = height(reclaimable) as f64 / height(live) as f64;
    let truth = split.reclaimable_bytes as f64 / split.live_bytes as f64;
    assert!((ratio - truth).abs() <= 0.1 * truth + 0.05, "reclaimable/live {ratio:.2} drawn, {truth:.2} recorded");
    let _ = (holes, cache);
}
