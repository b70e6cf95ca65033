//! The flight recorder against independent counts: what the history holds, counted by the allocator
//! itself (`Counting`), is what it says it holds and stays under its stated bound over 30,000
//! rounds on a controlled clock; a publisher's rounds are recorded as frag's own memory, not the
//! program's; a snapshot keeps the report's own figures; the endpoint serves it as JSON.

mod common;

use std::time::Duration;

use common::{Counting, truth};
use frag::history::{History, MAX_SNAPSHOTS, Snapshot};
use frag::{Sampling, Scope};

#[global_allocator]
static A: frag::Tracked<Counting<std::alloc::System>, frag::Exact> = frag::Tracked::new(Counting(std::alloc::System));

/// Blocks from 16 sites of their own (a function each) and 10 scopes with long names, kept live.
fn program_data() -> Vec<Vec<u8>> {
    macro_rules! sites {
        ($($f:ident),*) => {{
            $(
                #[inline(never)]
                fn $f(n: usize) -> Vec<u8> {
                    std::hint::black_box(vec![7u8; n])
                }
            )*
            vec![$($f as fn(usize) -> Vec<u8>),*]
        }};
    }
    let sites = sites!(s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15);
    let mut kept = Vec::new();
    for (i, site) in sites.iter().enumerate() {
        let name = format!("tenant-{i:02}-with-a-name-long-enough-to-be-cut-in-the-history");
        let scope = Scope::new(&name).expect("a scope");
        let _in = scope.enter();
        for j in 0..20 {
            kept.push(site(1_000 + 100 * i + j));
        }
    }
    kept
}

/// 30,000 rounds of real reports of a program with more sites and scopes than a snapshot keeps,
/// recorded at 5 s intervals on the test's own clock: the bytes the allocator holds for the
/// history, a step marked every 97 rounds included (`Counting`, read while nothing else allocates),
/// are exactly what it says it holds, and never more than its stated bound; the newest snapshot keeps the report's figures.
#[test]
fn thirty_thousand_rounds_stay_under_the_stated_bound() {
    frag::set_sampling(Sampling::EveryBlock).expect("the exact tier samples every block");
    let _data = program_data();
    let reports: Vec<_> = (0..4).map(|_| frag::report()).collect();
    let sites = reports[0].sites.as_ref().expect("sites");
    assert!(sites.top.len() >= 10, "{} sites listed", sites.top.len());
    assert!(reports[0].scopes.as_ref().expect("scopes").rows.len() >= 10);
    let mut history = Box::new(History::new());
    let before = truth().live_bytes;
    let mut highest = 0u64;
    for i in 0..30_000u64 {
        let at = Duration::from_secs(5 * i);
        history.record(Snapshot::of(&reports[i as usize % 4], at, i).expect("a resident figure"));
        if i % 97 == 96 {
            // A step marked now and then: the marks are held, and bounded, too.
            let compared = history.compare(at.saturating_sub(Duration::from_secs(300)), at).expect("a comparison");
            history.mark(&compared);
        }
        if i % 500 == 499 || i < 2_000 && i % 50 == 0 {
            let held = truth().live_bytes - before;
            assert_eq!(held, history.heap_bytes() as u64, "after {} rounds", i + 1);
            highest = highest.max(held);
        }
    }
    eprintln!("{} snapshots in {} KiB (bound {} KiB)", history.len(), highest >> 10, History::MAX_BYTES >> 10);
    assert!(highest <= History::MAX_BYTES as u64, "{highest} bytes over the bound {}", History::MAX_BYTES);
    assert!(history.len() <= MAX_SNAPSHOTS);
    assert_eq!(history.steps().count(), frag::history::STEPS);
    let rounds: u64 = history.snapshots().map(|s| u64::from(s.rounds)).sum();
    assert_eq!(rounds, 30_000, "every round is in some snapshot");

    let newest = history.snapshots().last().expect("a snapshot");
    let report = &reports[29_999 % 4];
    let b = &report.diagnosis.as_ref().expect("a diagnosis").breakdown;
    let split = newest.split.expect("a split");
    assert_eq!((split.live_bytes, split.holes_bytes), (b.live_bytes, b.holes_bytes));
    let top = &report.sites.as_ref().expect("sites").top;
    assert_eq!(newest.sites.len(), top.len().min(frag::history::SITES));
    for (mark, row) in newest.sites.iter().zip(top) {
        assert_eq!(mark.inuse_bytes, row.inuse_bytes);
    }
    let keys: std::collections::BTreeSet<u64> = newest.sites.iter().map(|m| m.key).collect();
    assert_eq!(keys.len(), newest.sites.len(), "one key per stack");
    assert_eq!(newest.scopes.len(), frag::history::SCOPES);
    let tenants: Vec<_> =
        newest.scopes.iter().filter_map(|s| s.name.as_deref()).filter(|n| n.starts_with("tenant-")).collect();
    assert!(tenants.len() >= frag::history::SCOPES - 1, "{:?}", newest.scopes);
    assert!(tenants.iter().all(|n| n.len() == frag::history::SCOPE_NAME), "{tenants:?}");
}

/// A publisher's rounds go into the process's history, whose memory is frag's own: the program's
/// live bytes do not move over 300 rounds, frag's own grow by what the history holds.
#[test]
fn a_publishers_rounds_are_recorded_as_frags_own_memory() {
    let mut publisher = frag::Publisher::new();
    drop(publisher.publish_once());
    let (program, own) = (frag::report::totals().allocated_bytes, frag::report::own_totals().allocated_bytes);
    for _ in 0..300 {
        drop(publisher.publish_once());
    }
    let (program_after, own_after) =
        (frag::report::totals().allocated_bytes, frag::report::own_totals().allocated_bytes);
    // The copy is the program's: taken after the reading.
    let history = frag::history();
    assert_eq!(history.snapshots().map(|s| s.rounds).sum::<u32>(), 301);
    let held = history.heap_bytes() as u64;
    assert!(
        program_after.abs_diff(program) < held / 4,
        "the program's live bytes moved by {} bytes; the history holds {held}",
        program_after as i64 - program as i64
    );
    assert!(own_after >= own + held * 3 / 4, "frag's own grew by {} bytes; the history holds {held}", own_after - own);
}

/// `GET /debug/frag/history` answers the process's history as JSON, one entry per round, with the
/// resident bytes the kernel counts.
#[cfg(all(feature = "http", feature = "serde"))]
#[test]
fn the_endpoint_serves_the_history_as_json() {
    let mut publisher = frag::Publisher::new();
    for _ in 0..3 {
        drop(publisher.publish_once());
    }
    let request = http::Request::get("/debug/frag/history").body(()).unwrap();
    let response = frag::profile::http::handle(&request);
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let json: serde_json::Value = serde_json::from_slice(response.body()).expect("JSON");
    let snapshots = json["snapshots"].as_array().expect("snapshots");
    assert_eq!(snapshots.len(), 3);
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    let rss = pages * 4096;
    let last = snapshots[2]["rss_bytes"].as_u64().expect("rss_bytes");
    assert!(last.abs_diff(rss) < rss / 5, "{last} against {rss} in /proc/self/statm");
    assert!(snapshots[0]["to_ms"].as_u64() <= snapshots[2]["to_ms"].as_u64());
    assert!(json["steps"].as_array().is_some_and(Vec::is_empty), "no step yet: {}", json["steps"]);
    let post = frag::profile::http::handle(&http::Request::post("/debug/frag/history").body(()).unwrap());
    assert_eq!(post.status(), 405);
    let svg = frag::profile::http::handle(&http::Request::get("/debug/frag/history.svg").body(()).unwrap());
    assert_eq!(
        (svg.status(), &svg.headers()["content-type"]),
        (http::StatusCode::OK, &"image/svg+xml".parse().unwrap())
    );
    assert!(svg.body().starts_with(b"<svg") && svg.body().ends_with(b"</svg>\n"));
    let post = frag::profile::http::handle(&http::Request::post("/debug/frag/history.svg").body(()).unwrap());
    assert_eq!(post.status(), 405);
}

/// Children forked while other threads record rounds and copy the history without pause (each
/// holds the history's lock for most of its time) read and record it themselves, and exit: the
/// lock is held across the fork by the forking thread (`fork::Lock`), so no child finds it taken
/// by a thread it does not have. With a plain mutex, children hang.
#[test]
fn children_forked_while_the_history_is_in_use_read_it_and_exit() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let mut publisher = frag::Publisher::new();
    for _ in 0..200 {
        drop(publisher.publish_once());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let users: Vec<_> = (0..2)
        .map(|i| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut publisher = frag::Publisher::new();
                while !stop.load(Relaxed) {
                    if i == 0 {
                        drop(publisher.publish_once());
                    }
                    std::hint::black_box(frag::history().len());
                }
            })
        })
        .collect();
    let mut hung = Vec::new();
    for round in 0..common::scaled(100) {
        if hung.len() >= 3 {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
        // SAFETY: the child only reads and records the history, then leaves with `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let rounds = || frag::history().snapshots().map(|s| s.rounds).sum::<u32>();
            let before = rounds();
            drop(frag::Publisher::new().publish_once());
            let ok = rounds() == before + 1;
            // SAFETY: leaves the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let start = std::time::Instant::now();
        let mut status = 0;
        loop {
            // SAFETY: `pid` is our child; `status` is a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "round {round}: status {status:#x}");
                break;
            }
            if start.elapsed() > Duration::from_secs(20) {
                // SAFETY: `pid` is our child, still running.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                hung.push(round);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    stop.store(true, Relaxed);
    users.into_iter().for_each(|u| u.join().unwrap());
    assert!(hung.is_empty(), "children that hung on the history's lock: rounds {hung:?}");
}
