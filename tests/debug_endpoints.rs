//! The service example's debug listener under the attacks its endpoints invite: a storm of long
//! delta profiles whose clients leave, and a flood of `/debug/pprof/symbol` requests of 60,000
//! addresses. The truth is the service's own process (`/proc`: threads, resident memory, CPU time)
//! and what a plain HTTP client gets back.
//!
//! Builds the example itself (`common::example::build`), in the test's profile: `.ci/run` runs it in
//! its release step, as a service is built (`--run-ignored only`).
#![cfg(all(feature = "serde", feature = "tokio"))]

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::service::{Service, request, send};

/// `/echo` latencies of `n` requests one after another, sorted (a 1 KiB body; the service's
/// `--delay-ms 0`).
fn echo_latencies(app: SocketAddr, n: usize) -> Vec<Duration> {
    let body = format!("[{}]", vec!["12345678"; 110].join(",")).into_bytes();
    let mut took: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            assert_eq!(request(app, "POST", "/echo", &body).status, 200);
            start.elapsed()
        })
        .collect();
    took.sort();
    took
}

/// The 99th percentile of sorted latencies.
fn p99(sorted: &[Duration]) -> Duration {
    sorted[(sorted.len() * 99).div_ceil(100) - 1]
}

/// 64 concurrent `?seconds=30` delta profiles: one waits (the default limit), the other 63 are
/// refused at once with 429 and a `Retry-After` within the wait; the service gains no thread for
/// them. The 63 keep coming back (each every 100 ms): `/echo`'s p99 over 200 requests within 2x of
/// the p99 without them, resident memory and threads as before. Then they stop, and the waiting
/// client drops: within a second its place is free (a new delta is let in).
#[test]
#[ignore = "builds the service example; run by .ci/run in its release step"]
fn a_storm_of_delta_profiles_is_bounded_and_leaves_with_its_clients() {
    let exe = common::example::build("service");
    let service = Service::start(&exe, &["--delay-ms", "0"]);
    let (app, debug) = (service.app, service.debug);
    // Warm: the first requests start tokio's workers and fault the heap in.
    echo_latencies(app, 50);
    let (rss_before, threads_before) = service.rss_and_threads();

    // 64 at once: every connection open, every request sent, before any answer is read.
    let storm: Vec<_> = (0..64).map(|_| send(debug, "GET", "/debug/pprof/allocs?seconds=30", b"")).collect();
    for s in &storm {
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    }
    let mut waiting = Vec::new();
    let mut refused = 0;
    for s in storm {
        let probe = s.try_clone().unwrap();
        let mut byte = [0u8; 1];
        // Whether an answer came within 3 s: the refusals come at once, the wait for 30 s.
        match probe.peek(&mut byte) {
            Ok(n) if n > 0 => {
                let a = common::service::answer(s);
                assert_eq!(a.status, 429, "{}", a.text());
                let retry: u64 = a.header("retry-after").expect("Retry-After").parse().unwrap();
                assert!((1..=30).contains(&retry), "Retry-After {retry}");
                assert!(a.text().contains("frag::profile::Serving::delta_waits"), "{}", a.text());
                refused += 1;
            }
            _ => waiting.push(s),
        }
    }
    assert_eq!((waiting.len(), refused), (1, 63), "waits let in, refusals");
    let (_, threads_storm) = service.rss_and_threads();
    // A snapshot's blocking thread, kept by tokio for a while after it: one more at most.
    assert!(threads_storm <= threads_before + 1, "threads {threads_before} -> {threads_storm} during the storm");

    // The clients come back: 63 of them, each every 100 ms, while /echo is measured.
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let (storming, ended) = (std::sync::Arc::new(AtomicBool::new(false)), std::sync::Arc::new(AtomicBool::new(false)));
    let hammer: Vec<_> = (0..63)
        .map(|_| {
            let (storming, ended) = (std::sync::Arc::clone(&storming), std::sync::Arc::clone(&ended));
            std::thread::spawn(move || {
                let mut refusals = 0;
                while !ended.load(Relaxed) {
                    if storming.load(Relaxed) {
                        let a = request(debug, "GET", "/debug/pprof/allocs?seconds=30", b"");
                        assert_eq!(a.status, 429, "{}", a.text());
                        refusals += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    } else {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                refusals
            })
        })
        .collect();
    // Best of five pairs (without, with): the machine's own load moves both.
    let mut ratios = Vec::new();
    for _ in 0..5 {
        storming.store(false, Relaxed);
        std::thread::sleep(Duration::from_millis(150));
        let quiet = p99(&echo_latencies(app, 200));
        storming.store(true, Relaxed);
        let stormy = p99(&echo_latencies(app, 200));
        ratios.push(stormy.as_secs_f64() / quiet.as_secs_f64());
        eprintln!("/echo p99: {quiet:?} without the storm, {stormy:?} during it");
        if ratios.last() <= Some(&2.0) {
            break;
        }
    }
    let (rss_storm, threads_hammered) = service.rss_and_threads();
    ended.store(true, Relaxed);
    let refusals: usize = hammer.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(ratios.iter().any(|&r| r <= 2.0), "/echo p99 during the storm / without it: {ratios:?}");
    assert!(threads_hammered <= threads_before + 1, "threads {threads_before} -> {threads_hammered}");
    assert!(rss_storm <= rss_before + 16 * 1024, "resident {rss_before} KiB -> {rss_storm} KiB");

    // 32 clients drop at once, the waiting one among them: its place is free within a second.
    drop(waiting);
    let dropped = Instant::now();
    let admitted = loop {
        let a = request(debug, "GET", "/debug/pprof/allocs?seconds=1", b"");
        if a.status == 200 {
            break dropped.elapsed();
        }
        assert_eq!(a.status, 429, "{}", a.text());
        assert!(dropped.elapsed() < Duration::from_secs(10), "the dropped wait kept its place");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Its 1 s wait included: the place was free within `admitted - 1 s`.
    let freed = admitted.saturating_sub(Duration::from_secs(1));
    eprintln!("{refusals} refusals while /echo was measured; a new delta let in {freed:?} after the drop");
    assert!(freed <= Duration::from_secs(1), "a delta let in {freed:?} after the waiting client left");
    let (rss_after, threads_after) = service.rss_and_threads();
    eprintln!(
        "threads {threads_before} -> {threads_storm} (storm) -> {threads_after}; resident {rss_before} -> \
         {rss_storm} -> {rss_after} KiB"
    );
}

/// The allocator's allocated bytes, from the service's report (`/debug/frag`, jemalloc's
/// `stats.allocated` or the backend's count).
fn allocated(debug: SocketAddr) -> u64 {
    let a = request(debug, "GET", "/debug/frag", b"");
    assert_eq!(a.status, 200, "{}", a.text());
    let report: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    report["allocator"]["allocated"]
        .as_u64()
        .unwrap_or_else(|| panic!("no allocator.allocated: {}", report["allocator"]))
}

/// `n` addresses spread over the service's code (its executable's mapped text), joined by `+`, as
/// `go tool pprof` sends them.
fn addresses_in_code(pid: u32, n: usize) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let (start, end) = maps
        .lines()
        .filter(|l| l.ends_with(&*exe.to_string_lossy()) && l.split_whitespace().nth(1) == Some("r-xp"))
        .map(|l| {
            let (a, b) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
            (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap())
        })
        .next()
        .expect("the executable's code mapping");
    let step = (end - start) / n as u64;
    (0..n as u64).map(|i| format!("{:#x}", start + i * step + 1)).collect::<Vec<_>>().join("+")
}

/// 200 `/debug/pprof/symbol` requests of 60,000 addresses, 8 clients at once: one symbolizes at a
/// time, the others wait their bound (`Serving::symbolizer_wait`, 2 s) and get 503 with a
/// `Retry-After`; the service's CPU time stays within one core for the flood's wall time (plus
/// what reading and writing the requests costs), and its resident memory within 128 MiB of where it
/// started (the debug information read once per turn, and one answer's 6 MB); after it, the
/// allocator's own count of allocated bytes within 16 MiB of where it was (the symbolizer's memory
/// released; jemalloc keeps the pages a while). A request over the limit (70,000 addresses) is 413,
/// naming the limit.
#[test]
#[ignore = "builds the service example; run by .ci/run in its release step"]
fn a_flood_of_symbol_requests_is_bounded() {
    let exe = common::example::build("service");
    let service = Service::start(&exe, &["--delay-ms", "0"]);
    let debug = service.debug;
    let body = std::sync::Arc::new(addresses_in_code(service.pid(), 60_000));
    let first = request(debug, "POST", "/debug/pprof/symbol", body.as_bytes());
    assert_eq!(first.status, 200, "{}", first.text());
    let named = first.text().lines().count() - 1;
    assert!(named > 50_000, "{named} of 60,000 addresses named");
    let allocated_before = allocated(debug);
    let (rss_before, _) = service.rss_and_threads();
    let (cpu_before, start) = (service.cpu_seconds(), Instant::now());

    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(rss_before));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (peak, done, pid) = (std::sync::Arc::clone(&peak), std::sync::Arc::clone(&done), service.pid());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    let rss = status
                        .lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()));
                    peak.fetch_max(rss.unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let body = std::sync::Arc::clone(&body);
            std::thread::spawn(move || {
                let (mut ok, mut busy) = (0, 0);
                for _ in 0..25 {
                    let a = request(debug, "POST", "/debug/pprof/symbol", body.as_bytes());
                    match a.status {
                        200 => ok += 1,
                        503 => {
                            assert_eq!(a.header("retry-after"), Some("1"));
                            assert!(a.text().contains("symbolizer is busy"), "{}", a.text());
                            busy += 1;
                        }
                        other => panic!("{other}: {}", a.text()),
                    }
                }
                (ok, busy)
            })
        })
        .collect();
    let (ok, busy) = clients.into_iter().map(|c| c.join().unwrap()).fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    let (cpu, wall) = (service.cpu_seconds() - cpu_before, start.elapsed().as_secs_f64());
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().unwrap();
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(300));
    let (rss_after, _) = service.rss_and_threads();
    let allocated_after = allocated(debug);
    eprintln!(
        "200 requests of 60,000 addresses: {ok} answered, {busy} refused (503) in {wall:.1} s; CPU {cpu:.1} s \
         ({:.2} cores); resident {rss_before} KiB before, peak {peak}, after {rss_after}; allocated \
         {allocated_before} B before, {allocated_after} B after",
        cpu / wall
    );
    assert_eq!(ok + busy, 200);
    assert!(ok >= 8, "{ok} answered");
    assert!(cpu <= wall * 1.5 + 1.0, "CPU {cpu:.1} s in {wall:.1} s: more than one symbolizer at a time?");
    assert!(peak <= rss_before + 128 * 1024, "resident {rss_before} -> peak {peak} KiB");
    assert!(
        allocated_after <= allocated_before + (16 << 20),
        "allocated {allocated_before} -> {allocated_after} B after the flood"
    );

    let over = addresses_in_code(service.pid(), 70_000);
    let refused = request(debug, "POST", "/debug/pprof/symbol", over.as_bytes());
    assert_eq!(refused.status, 413, "{}", refused.text());
    assert!(refused.text().contains("at most 65536 addresses"), "{}", refused.text());
    assert_eq!(refused.header("x-go-pprof"), Some("1"));
}

/// A Go server with `net/http/pprof` (Debian's Go, its write timeout 61 s: the service example's
/// limit of 60 s in Go's terms), built and started on a free loopback port: its address.
fn go_pprof_server(dir: &std::path::Path) -> (common::service::Killed, SocketAddr) {
    std::fs::write(
        dir.join("main.go"),
        r#"package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"time"
)

func main() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(l.Addr().String())
	os.Stdout.Sync()
	srv := &http.Server{WriteTimeout: 61 * time.Second}
	srv.Serve(l)
}
"#,
    )
    .unwrap();
    let exe = dir.join("pprof-server");
    let built = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&exe)
        .arg("main.go")
        .current_dir(dir)
        .env("GO111MODULE", "off")
        .status()
        .expect("`go` on PATH (Debian: apt-get install golang-go)");
    assert!(built.success(), "go build");
    let mut child = std::process::Command::new(&exe).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    (common::service::Killed(child), line.trim().parse().unwrap())
}

/// The refusals where the endpoints follow Go, asked of Go's own `net/http/pprof` and of the
/// service example alike: the same status, the same words where Go's are cited (a bad `seconds`,
/// `seconds` with `debug`), the same headers on a refusal (`X-Go-Pprof`, text, no file name), and
/// the same check first when two fail; over the limit, both 400 (Go names its write timeout, frag
/// its own limit). And `go tool pprof -seconds 3600` prints the service's reason, as it does a Go
/// server's.
#[test]
#[ignore = "needs go (golang-go) and builds the service example; run by .ci/run"]
fn refusals_are_gos() {
    let dir = std::env::temp_dir().join(format!("frag-go-pprof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_go, go) = go_pprof_server(&dir);
    let exe = common::example::build("service");
    let service = Service::start(&exe, &[]);
    let ours = service.debug;
    for (path, same_words) in [
        ("/debug/pprof/heap?seconds=1&debug=1", true),
        ("/debug/pprof/allocs?seconds=0", true),
        ("/debug/pprof/allocs?seconds=-5", true),
        ("/debug/pprof/allocs?seconds=abc", true),
        ("/debug/pprof/heap?seconds=61", false),
        ("/debug/pprof/heap?seconds=3600&debug=1", false),
        ("/debug/pprof/symbol", true),
    ] {
        let (g, f) = (request(go, "GET", path, b""), request(ours, "GET", path, b""));
        assert_eq!(f.status, g.status, "{path}: Go {} {:?}, frag {} {:?}", g.status, g.text(), f.status, f.text());
        if same_words {
            assert_eq!(f.text(), g.text(), "{path}");
        } else {
            assert!(g.text().starts_with("profile duration exceeds server's WriteTimeout"), "{path}: {}", g.text());
            assert!(f.text().starts_with("profile duration exceeds server's limit"), "{path}: {}", f.text());
        }
        if g.status != 200 {
            for name in ["content-type", "x-go-pprof", "x-content-type-options"] {
                assert_eq!(f.header(name), g.header(name), "{path}: {name}");
            }
            assert_eq!((f.header("content-disposition"), g.header("content-disposition")), (None, None), "{path}");
        }
    }
    for path in ["/debug/pprof/heap", "/debug/pprof/allocs?debug=1"] {
        let (g, f) = (request(go, "GET", path, b""), request(ours, "GET", path, b""));
        assert_eq!((f.status, f.header("content-type")), (g.status, g.header("content-type")), "{path}");
        assert_eq!(f.header("content-disposition"), g.header("content-disposition"), "{path}");
    }
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new("go")
        .args(["tool", "pprof", "-top", "-seconds", "3600", &format!("http://{ours}/debug/pprof/heap")])
        .env("HOME", &home)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("400 Bad Request - profile duration exceeds server's limit: seconds=3600"), "{text}");
}
