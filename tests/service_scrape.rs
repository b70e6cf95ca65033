//! The service example, scraped the way a fleet profiler scrapes it (Grafana Alloy's
//! `pyroscope.scrape` and Parca read `/debug/pprof/allocs`), twice under load: `go tool pprof
//! -diff_base` between the two scrapes shows what the requests sent in between allocated, per site.
//!
//! The truth comes from the request bodies: each carries JSON objects whose keys and string values
//! have known lengths, and serde_json allocates each key in `KeyClassifier::visit_str` and each string
//! value in `ValueVisitor::visit_str`, exactly its length (borrowed from the body, no escapes). The
//! background load sends arrays of numbers, which allocate at neither site.
//!
//! Builds the example itself (`common::example::build`) and needs `go` on `PATH`: `.ci/run` runs it with `--run-ignored only`.
#![cfg(all(feature = "serde", feature = "tokio"))]

mod common;

use common::service::Service;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Requests sent between the scrapes, and per request: objects, key and value lengths.
const REQUESTS: usize = 1200;
const OBJECTS: usize = 8;
const KEY: usize = 4000;
const VALUE: usize = 8000;
/// The service's sampling mean: 64 KiB, the least the sampled tier takes, for about 590 samples of
/// the keys' 38 MB in between (one standard error 4%; the values' 77 MB, 3%).
const MEAN_KIB: u64 = 64;

/// The service, its `/echo` requests holding their parsed bodies for `delay_ms` before they answer.
fn start(service: &std::path::Path, delay_ms: u64) -> Service {
    Service::start(service, &["--delay-ms", &delay_ms.to_string(), "--sampling-mean-kib", &MEAN_KIB.to_string()])
}

/// One request on its own connection: status code and body.
fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let answer = common::service::request(addr, method, path, body);
    (answer.status, answer.body)
}

/// A body of `OBJECTS` objects, each with one key of `KEY` bytes and one string of `VALUE` bytes.
fn measured_body(seed: usize) -> Vec<u8> {
    let objects: Vec<String> =
        (0..OBJECTS).map(|i| format!("{{\"{:0>KEY$}\":\"{}\"}}", seed * OBJECTS + i, "v".repeat(VALUE))).collect();
    format!("[{}]", objects.join(",")).into_bytes()
}

/// What the background load sends: numbers only (no key, no string).
fn background_body(seed: usize) -> Vec<u8> {
    let numbers: Vec<String> = (0..2000).map(|i| (seed * 2000 + i).to_string()).collect();
    format!("[{}]", numbers.join(",")).into_bytes()
}

/// Two scrapes of `/allocs` under load, with the measured requests between them: each site's
/// `alloc_space` in the diff within 15% of the bytes its keys or values took (3.7 standard errors
/// of the keys' estimate); `alloc_space` and `alloc_objects` never lower in the second scrape than in
/// the first, for any function.
#[test]
#[ignore = "needs go (golang-go) and builds the service example; run by .ci/run"]
fn go_tool_pprof_diffs_two_scrapes_of_the_service_under_load() {
    let service = common::example::build("service");
    let service = start(&service, 0);
    let (app, addr) = (service.app, service.debug);
    let stop = Arc::new(AtomicBool::new(false));
    let background: Vec<_> = (0..2)
        .map(|t| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut sent = 0;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(request(app, "POST", "/echo", &background_body(t * 1_000_000 + sent)).0, 200);
                    sent += 1;
                }
                sent
            })
        })
        .collect();

    let (status, first) = request(addr, "GET", "/debug/pprof/allocs?symbolize=1", b"");
    assert_eq!(status, 200);
    let measured: Vec<_> = (0..2)
        .map(|t| {
            std::thread::spawn(move || {
                for i in (t..REQUESTS).step_by(2) {
                    let (status, echoed) = request(app, "POST", "/echo", &measured_body(i));
                    assert_eq!(status, 200);
                    assert!(echoed.len() > OBJECTS * (KEY + VALUE));
                }
            })
        })
        .collect();
    for t in measured {
        t.join().unwrap();
    }
    let (status, second) = request(addr, "GET", "/debug/pprof/allocs?symbolize=1", b"");
    assert_eq!(status, 200);
    stop.store(true, Ordering::Relaxed);
    let sent: usize = background.into_iter().map(|t| t.join().unwrap()).sum();
    drop(service);
    eprintln!("{sent} background requests");
    assert!(sent > 0, "no background load");

    let diff = common::go::top(&second, Some(&first), &["-unit=B", "-sample_index=alloc_space"]);
    eprintln!("{diff}");
    let rows = common::go::rows(&diff);
    let site = |visitor: &str| -> f64 {
        let named = |r: &&common::go::Row| r.name.contains(visitor) && r.name.contains("::visit_str");
        rows.iter().filter(named).map(|r| r.cum).sum()
    };
    let truth = (REQUESTS * OBJECTS) as f64;
    for (visitor, bytes) in [("KeyClassifier", KEY), ("ValueVisitor", VALUE)] {
        let (got, truth) = (site(visitor), truth * bytes as f64);
        eprintln!("{visitor}::visit_str: {got:.0} B between the scrapes (truth {truth:.0})");
        assert!((got / truth - 1.0).abs() <= 0.15, "{visitor}: {got} B against {truth} B\n{diff}");
    }
    for index in ["alloc_space", "alloc_objects"] {
        let diff = common::go::top(&second, Some(&first), &[&format!("-sample_index={index}")]);
        let lower: Vec<_> = common::go::rows(&diff).into_iter().filter(|r| r.flat_pct < 0.0).collect();
        assert!(lower.is_empty(), "{index} fell between the scrapes: {lower:?}");
    }
}

/// `go tool pprof <args>` with `HOME` in a directory of its own (pprof saves each fetched profile
/// under `$HOME/pprof`): status and the text, stdout then stderr.
fn go_pprof(args: &[String]) -> (bool, String) {
    let home = std::env::temp_dir().join(format!("frag-pprof-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .env("HOME", &home)
        .output()
        .expect("`go` on PATH (Debian: apt-get install golang-go)");
    let _ = std::fs::remove_dir_all(&home);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The README's `go tool pprof` line, as written but for the service's port, against the service
/// example under load: `pprof` fetches the unsymbolized profile, names what it can from the binary, and asks the
/// service's `/debug/pprof/symbol` for the rest, as it does of a Go service (before the endpoint it
/// failed with a 405); its sites come out by name. With `-symbolize=remote`, every name comes from
/// the endpoint: the allocation profile names serde_json's key and value sites.
#[test]
#[ignore = "needs go (golang-go) and builds the service example; run by .ci/run"]
fn the_readmes_go_tool_pprof_line_reads_the_service() {
    let readme = include_str!("../README.md");
    let command = readme
        .split('`')
        .find(|quoted| quoted.starts_with("go tool pprof ") && quoted.contains("/debug/pprof/heap"))
        .expect("a `go tool pprof ...` line in the README");
    let service = common::example::build("service");
    // Requests stay in flight while pprof fetches the heap: each holds its parsed body (about 100 KB)
    // for 300 ms, 16 at a time, about 50 samples live at the 64 KiB mean. Once answered, the
    // service holds too little for a sample to be sure to be live (its heap between requests is about
    // 100 KB: a profile with no sample in use one time in ten).
    let service = start(&service, 300);
    let (app, addr) = (service.app, service.debug);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..16)
        .map(|t| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    assert_eq!(request(app, "POST", "/echo", &measured_body(i)).0, 200);
                    i += 16;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(2));
    let args: Vec<String> =
        command.split_whitespace().skip(3).map(|a| a.replace("127.0.0.1:6060", &addr.to_string())).collect();
    let (ok, text) = go_pprof(&args);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in load {
        l.join().unwrap();
    }
    let named = common::go::rows(&text);
    // The status as pprof words it ("server response: 405 Method Not Allowed"): a bare "405" also
    // matches a figure such as 4055.45kB.
    assert!(ok && !text.contains("405 Method Not Allowed") && !named.is_empty(), "{command}:\n{text}");
    assert!(named.iter().all(|r| !r.name.starts_with("0x")), "an unnamed address: {command}:\n{text}");
    let (status, names) = request(addr, "GET", "/debug/pprof/symbol", b"");
    assert_eq!((status, names.as_slice()), (200, b"num_symbols: 1\n".as_slice()));
    let remote: Vec<String> = ["-symbolize=remote", "-top", "-sample_index=alloc_space"]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("http://{addr}/debug/pprof/allocs")])
        .collect();
    let (ok, text) = go_pprof(&remote);
    assert!(ok && text.contains("KeyClassifier") && text.contains("visit_str"), "{remote:?}:\n{text}");
}
