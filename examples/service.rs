//! A JSON service with `frag` wired in the way a production service would have it: the reproduction
//! of reference 003 (an axum service whose RSS climbs in steps under JSON bodies and concurrency).
//!
//! - `POST /echo` on the application's port (`--port`): parses the JSON body, sleeps `--delay-ms`,
//!   serialises it back;
//! - on a listener of its own, loopback by default (`--debug-addr`, default `127.0.0.1:6060`), never
//!   the application's: `GET /debug/frag`, the `frag::report()` as JSON; `GET /debug/frag/text`, the
//!   table; `GET /debug/pprof/heap` and `GET /debug/pprof/allocs`, Go's memory profiles by allocation
//!   site (`frag::profile::http::serve`: `go tool pprof -top http://127.0.0.1:6060/debug/pprof/heap`;
//!   `?seconds=N` for a delta, `?debug=1` for text, `?symbolize=1` for names resolved in process),
//!   and `/debug/pprof/symbol`, where `go tool pprof` asks the names of an unsymbolized profile.
//!   Profiles carry the binary's addresses in memory, its build ID and the tenants' scope names:
//!   the README's "Serving the endpoints safely";
//! - Prometheus metrics on `http://127.0.0.1:<metrics-port>/metrics` (metrics-exporter-prometheus),
//!   published by a `frag::Publisher` thread every `--interval-ms`, with stair-step alerts as
//!   `tracing` warnings on stderr.
//!
//! Serve: `cargo run --release --example service -- --port 3000 --debug-addr 127.0.0.1:6060 --metrics-port 9000`
//! Drive itself: `cargo run --release --example service -- --load 20000 --concurrency 64`
//! (binds free loopback ports, sends the requests, saves the heap profile taken half-way through to
//! `target/service-heap.pb.gz`, prints the report and the `frag_` scrape, exits).
//! Other backends: `--no-default-features` (glibc), `--no-default-features --features mimalloc`.
//! `--no-stacks` turns stack capture off (`frag::sites::set_stacks(false)`); `--sampling-mean-kib N` samples
//! one allocation per N KiB on average (`frag::set_sampling`; default 512, at least 64 in this tier).
//! `--scoped` runs each `/echo` request in the scope of one of three tenants (`frag::Scope`, by the
//! body's length): the report then splits the memory by tenant, and heap profiles label it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "support/global_allocator.rs"]
mod global_allocator;

#[derive(Clone, Debug)]
struct Options {
    port: u16,
    debug_addr: SocketAddr,
    metrics_port: u16,
    delay: Duration,
    interval: Duration,
    load: Option<usize>,
    concurrency: usize,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        port: 3000,
        debug_addr: SocketAddr::from(([127, 0, 0, 1], 6060)),
        metrics_port: 9000,
        delay: Duration::from_millis(5),
        interval: Duration::from_secs(5),
        load: None,
        concurrency: 64,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        let number = |v: &String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--port" => o.port = number(value()?)? as u16,
            "--debug-addr" => {
                let v = value()?;
                o.debug_addr =
                    v.parse().map_err(|e| format!("{flag} {v}: {e} (an address and port: 127.0.0.1:6060)"))?;
            }
            "--metrics-port" => o.metrics_port = number(value()?)? as u16,
            "--delay-ms" => o.delay = Duration::from_millis(number(value()?)?),
            "--interval-ms" => o.interval = Duration::from_millis(number(value()?)?),
            "--load" => {
                o.load = Some(number(value()?)? as usize);
                o.interval = o.interval.min(Duration::from_secs(1));
            }
            "--concurrency" => o.concurrency = (number(value()?)? as usize).max(1),
            // Sampled allocations without their stacks: what the unwinder costs, measured on the
            // same build (`scripts/instructions.py`).
            "--no-stacks" => frag::sites::set_stacks(false),
            "--scoped" => {
                let tenants =
                    ["tenant-a", "tenant-b", "tenant-c"].map(|t| frag::Scope::new(t).map_err(|e| e.to_string()));
                let [a, b, c] = tenants;
                let _ = TENANTS.set([a?, b?, c?]);
            }
            "--sampling-mean-kib" => {
                let mean = frag::Sampling::MeanBytes(number(value()?)?.saturating_mul(1024));
                frag::set_sampling(mean).map_err(|e| format!("{flag}: {e}"))?;
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

async fn echo(State(delay): State<Duration>, body: axum::body::Bytes) -> impl IntoResponse {
    let value: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return (axum::http::StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    tokio::time::sleep(delay).await;
    ([(header::CONTENT_TYPE, "application/json")], serde_json::to_vec(&value).unwrap_or_default()).into_response()
}

/// The tenants' scopes, with `--scoped`.
static TENANTS: std::sync::OnceLock<[frag::Scope; 3]> = std::sync::OnceLock::new();

/// `/echo` in the scope of one of three tenants (`--scoped`), by the body's length.
async fn scoped_echo(delay: State<Duration>, body: axum::body::Bytes) -> axum::response::Response {
    use frag::ScopeExt;
    let Some(tenants) = TENANTS.get() else { return echo(delay, body).await.into_response() };
    let tenant = tenants[body.len() % 3];
    echo(delay, body).in_scope(tenant).await.into_response()
}

/// A report with its allocation sites named (reading the debug information once, on first use).
fn named_report() -> frag::Report {
    let mut report = frag::report();
    if let Some(sites) = report.sites.as_mut() {
        sites.symbolize();
    }
    report
}

async fn debug_json() -> impl IntoResponse {
    let report = tokio::task::spawn_blocking(named_report).await.expect("report task");
    ([(header::CONTENT_TYPE, "application/json")], report.to_json())
}

async fn debug_text() -> String {
    tokio::task::spawn_blocking(|| named_report().to_string()).await.expect("report task")
}

/// Go's `/debug/pprof/heap`, `/debug/pprof/allocs` and `/debug/pprof/symbol`: a delta profile's
/// wait holds no thread and ends when the client goes; symbolizing and building run on blocking
/// threads, within `frag::profile::Serving`'s limits.
async fn debug_pprof(request: axum::extract::Request) -> axum::response::Response {
    frag::profile::http::serve(request).await.map(axum::body::Body::from)
}

/// The application: what the service is for.
fn app(delay: Duration) -> Router {
    Router::new().route("/echo", if TENANTS.get().is_some() { post(scoped_echo) } else { post(echo) }).with_state(delay)
}

/// What only the service's operators reach, on a listener of its own.
fn debug() -> Router {
    Router::new()
        .route("/debug/frag", get(debug_json))
        .route("/debug/frag/text", get(debug_text))
        .route("/debug/pprof/{profile}", get(debug_pprof).post(debug_pprof))
}

/// A JSON body of roughly `size` bytes: an array of records with strings and numbers.
fn body(size: usize, seed: u64) -> Vec<u8> {
    let records = (size / 96).max(1);
    let items: Vec<serde_json::Value> = (0..records)
        .map(|i| {
            serde_json::json!({
                "id": seed * 1000 + i as u64,
                "name": format!("item-{seed}-{i}"),
                "tags": ["alpha", "beta", "gamma"],
                "price": (i as f64) * 1.25,
            })
        })
        .collect();
    serde_json::to_vec(&items).expect("json")
}

/// One HTTP/1.1 request over a fresh connection; returns the status line and body.
async fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> std::io::Result<(String, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").map_or(response.len(), |p| p + 4);
    let status = String::from_utf8_lossy(&response[..split]).lines().next().unwrap_or_default().to_owned();
    Ok((status, response[split..].to_vec()))
}

async fn load(
    addr: SocketAddr,
    debug: SocketAddr,
    metrics: SocketAddr,
    total: usize,
    concurrency: usize,
    interval: Duration,
) {
    // Body sizes of reference 003: mostly small, some tens of KiB, a few hundreds.
    const SIZES: [usize; 8] = [512, 1 << 10, 2 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 256 << 10];
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut failures = 0usize;
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= total {
                        return failures;
                    }
                    let size = SIZES[(i * 7 + i / 3) % SIZES.len()];
                    match request(addr, "POST", "/echo", &body(size, i as u64)).await {
                        Ok((status, _)) if status.contains(" 200 ") => {}
                        _ => failures += 1,
                    }
                }
            })
        })
        .collect();
    // The heap profile half-way through the load, while requests are in flight.
    let midway = {
        let next = Arc::clone(&next);
        tokio::spawn(async move {
            while next.load(std::sync::atomic::Ordering::Relaxed) < total / 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            request(debug, "GET", "/debug/pprof/heap?symbolize=1", b"").await.map(|(_, profile)| profile)
        })
    };
    let mut failures = 0;
    for w in workers {
        failures += w.await.expect("load worker");
    }
    let profile = midway.await.expect("profile task").expect("/debug/pprof/heap");
    let elapsed = start.elapsed();
    println!(
        "{total} requests, concurrency {concurrency}: {:.1} s, {:.0} req/s, {failures} failed\n",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );

    let saved = "target/service-heap.pb.gz";
    match std::fs::write(saved, &profile) {
        Ok(()) => {
            println!("GET /debug/pprof/heap (half-way): {} bytes, saved: go tool pprof -top {saved}\n", profile.len())
        }
        Err(e) => println!("GET /debug/pprof/heap (half-way): {} bytes, not saved to {saved}: {e}\n", profile.len()),
    }
    let (_, text) = request(debug, "GET", "/debug/frag/text", b"").await.expect("/debug/frag/text");
    println!("GET /debug/frag/text\n{}", String::from_utf8_lossy(&text));
    // Let the publisher thread run a round after the load, then scrape.
    tokio::time::sleep(interval + Duration::from_millis(200)).await;
    let (_, scrape) = request(metrics, "GET", "/metrics", b"").await.expect("/metrics");
    println!("GET /metrics (frag_ series without size classes):");
    for line in String::from_utf8_lossy(&scrape).lines() {
        if line.starts_with("frag_") && !line.starts_with("frag_size_class") {
            println!("  {line}");
        }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let o = options()?;
    global_allocator::start()?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let bind = |port: u16| SocketAddr::from(([127, 0, 0, 1], if o.load.is_some() { 0 } else { port }));
        // The exporter needs a known address: for a load run, take a free port first.
        let metrics_addr =
            if o.load.is_some() { std::net::TcpListener::bind(bind(0))?.local_addr()? } else { bind(o.metrics_port) };
        metrics_exporter_prometheus::PrometheusBuilder::new().with_http_listener(metrics_addr).install()?;
        let _publisher =
            frag::Publisher::new().interval(o.interval).label("service", "echo").per_thread(true).spawn()?;

        let listener = TcpListener::bind(bind(o.port)).await?;
        let addr = listener.local_addr()?;
        let debug_addr = if o.load.is_some() { bind(0) } else { o.debug_addr };
        if !debug_addr.ip().is_loopback() {
            tracing::warn!(
                %debug_addr,
                "the debug endpoints answer beyond this host: profiles carry the binary's addresses in \
                 memory, its build ID and the scopes' names"
            );
        }
        let debug_listener = TcpListener::bind(debug_addr).await?;
        let debug_addr = debug_listener.local_addr()?;
        eprintln!("serving on http://{addr} (debug on http://{debug_addr}, metrics on http://{metrics_addr}/metrics)");
        let server = tokio::spawn(async move { axum::serve(listener, app(o.delay)).await });
        let debug_server = tokio::spawn(async move { axum::serve(debug_listener, debug()).await });
        match o.load {
            Some(n) => load(addr, debug_addr, metrics_addr, n, o.concurrency, o.interval).await,
            None => tokio::select! {
                served = server => served??,
                served = debug_server => served??,
            },
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
