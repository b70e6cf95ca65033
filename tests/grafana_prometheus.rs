//! The Grafana dashboard against a real Prometheus server: a service-like workload on jemalloc (bursts
//! with cross-thread frees, long-lived blocks among them, quiet spells), the `Publisher` with
//! per-thread series and the reclaimer exporting through `metrics-exporter-prometheus`, Prometheus
//! scraping it every second. Every panel's expression of `dashboards/grafana.json`, and the
//! `instance` variable's query, must return data (a finite value) through Prometheus's query API,
//! with `$instance` and `$__rate_interval` substituted as Grafana does.
//!
//! Needs `prometheus` on `PATH` (Debian's `prometheus` package): `.ci/run` installs it. The test is
//! `#[ignore]`d so that the README's test command runs on a machine without it; CI runs it with
//! `--run-ignored only`.
#![cfg(all(feature = "jemalloc", feature = "serde"))]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[global_allocator]
static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);

/// Prometheus's scrape interval here. Grafana's `$__rate_interval` is at least four of them.
const SCRAPE: Duration = Duration::from_secs(1);
const RATE_INTERVAL: &str = "8s";
/// How long the panels may take to fill: a loaded CI machine gets time, not a verdict on speed.
const DEADLINE: Duration = Duration::from_secs(240);

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// A plain HTTP/1.1 GET; the body, if the status is 200.
fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    let out = String::from_utf8(out).ok()?;
    let (head, body) = out.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    // Prometheus answers small queries in one piece; a chunked answer is joined here.
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut joined = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            if n == 0 {
                break;
            }
            joined.push_str(tail.get(..n)?);
            rest = tail.get(n + 2..)?;
        }
        return Some(joined);
    }
    Some(body.to_owned())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The panels' expressions, as Grafana sends them with "All" instances selected.
fn panel_expressions() -> Vec<(String, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/dashboards/grafana.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let expr = expr.replace("$instance", ".*").replace("$__rate_interval", RATE_INTERVAL);
            out.push((panel["title"].as_str().unwrap().to_owned(), expr));
        }
    }
    out
}

/// The instant query's finite values, or `None` if Prometheus did not answer.
fn query(prometheus: SocketAddr, expr: &str) -> Option<Vec<f64>> {
    let body = get(prometheus, &format!("/api/v1/query?query={}", percent_encode(expr)))?;
    let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
    assert_eq!(answer["status"], "success", "{expr}: {body}");
    let values = answer["data"]["result"]
        .as_array()?
        .iter()
        .filter_map(|series| series["value"][1].as_str()?.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .collect();
    Some(values)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_prometheus(target: SocketAddr, dir: &std::path::Path) -> (Server, SocketAddr) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: {s}s\n  scrape_timeout: {s}s\nscrape_configs:\n  - job_name: frag\n    \
             static_configs:\n      - targets: ['{target}']\n",
            s = SCRAPE.as_secs()
        ),
    )
    .unwrap();
    let listen = free_port();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
        .arg(format!("--web.listen-address={listen}"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
        .spawn()
        .expect("`prometheus` on PATH (Debian: apt-get install prometheus)");
    (Server(child), listen)
}

/// Bursts of mixed sizes, half of each freed by a consumer thread, one block in 64 kept for ten
/// bursts (holes in the slabs), then a quiet spell for the reclaimer.
fn workload(stop: &'static AtomicBool) -> std::thread::JoinHandle<()> {
    let (send, recv) = mpsc::channel::<Vec<Vec<u8>>>();
    std::thread::Builder::new().name("consumer".into()).spawn(move || recv.iter().for_each(drop)).unwrap();
    std::thread::Builder::new()
        .name("producer".into())
        .spawn(move || {
            let mut kept: std::collections::VecDeque<Vec<Vec<u8>>> = std::collections::VecDeque::new();
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let blocks: Vec<Vec<u8>> =
                    (0..40_000).map(|i| vec![round as u8; [24, 100, 400, 1500, 6000][i % 5] + i % 7]).collect();
                let (mut mine, theirs): (Vec<_>, Vec<_>) =
                    blocks.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
                let _ = send.send(theirs.into_iter().map(|(_, b)| b).collect());
                kept.push_back(mine.iter_mut().step_by(32).map(|(_, b)| std::mem::take(b)).collect());
                if kept.len() > 10 {
                    kept.pop_front();
                }
                drop(mine);
                round += 1;
                std::thread::sleep(Duration::from_millis(600));
            }
        })
        .unwrap()
}

#[test]
#[ignore = "needs a Prometheus server on PATH; CI installs Debian's prometheus and runs it"]
fn every_dashboard_panel_returns_data_from_a_real_prometheus() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let exporter = free_port();
    metrics_exporter_prometheus::PrometheusBuilder::new().with_http_listener(exporter).install().unwrap();
    let dir = std::env::temp_dir().join(format!("frag-grafana-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let producer = workload(&STOP);
    let publisher = frag::Publisher::new().per_thread(true).interval(Duration::from_millis(500)).spawn().unwrap();
    let reclaimer = frag::reclaim::Reclaimer::new()
        .poll(Duration::from_millis(100))
        .quiet(Duration::from_millis(200))
        .threshold(0, 0.0)
        .min_interval(Duration::ZERO)
        .refault_window(Duration::from_millis(300))
        .cpu_share(0.5)
        .max_cpu_share(0.5)
        // Far above the workload: the limit's series are published, the quiet rules act.
        .limit(frag::reclaim::MemoryLimit::Bytes(4 << 30))
        .spawn()
        .unwrap();
    let (server, prometheus) = start_prometheus(exporter, &dir);

    let expressions = panel_expressions();
    assert!(expressions.len() >= 20, "{}", expressions.len());
    let instances = format!("/api/v1/label/instance/values?{}", percent_encode("match[]") + "=frag_allocations_total");
    let start = Instant::now();
    let missing = loop {
        std::thread::sleep(SCRAPE);
        let mut missing: Vec<String> = expressions
            .iter()
            .filter(|(_, expr)| query(prometheus, expr).is_none_or(|values| values.is_empty()))
            .map(|(title, expr)| format!("{title}: {expr}"))
            .collect();
        let instance = get(prometheus, &instances)
            .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|v| v["data"].as_array().map(|a| a.iter().any(|i| i == &exporter.to_string())));
        if instance != Some(true) {
            missing.push("variable instance: label_values(frag_allocations_total, instance)".into());
        }
        if missing.is_empty() || start.elapsed() > DEADLINE {
            break missing;
        }
    };
    STOP.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    reclaimer.stop();
    publisher.stop();
    drop(server);
    let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        missing.is_empty(),
        "no data after {:?} for:\n  {}\nPrometheus's log:\n{}",
        start.elapsed(),
        missing.join("\n  "),
        log.lines().skip(log.lines().count().saturating_sub(20)).collect::<Vec<_>>().join("\n")
    );
}
