//! End to end: a Prometheus exporter on a loopback port, a `Publisher` round, a real HTTP scrape;
//! the series must be present, described, and equal the published report (the `/debug/frag` JSON).

#![cfg(feature = "serde")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

#[global_allocator]
static A: frag::Tracked<std::alloc::System, frag::Exact> = frag::Tracked::new(std::alloc::System);

fn scrape(addr: SocketAddr) -> String {
    // The listener starts on the exporter's own thread: retry briefly.
    for _ in 0..200 {
        if let Ok(mut s) = TcpStream::connect(addr) {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            if out.starts_with("HTTP/1.1 200") {
                return out;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("no scrape from {addr}");
}

fn value(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in scrape"))
        .parse()
        .unwrap()
}

#[test]
fn scrape_matches_the_published_report() {
    let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    metrics_exporter_prometheus::PrometheusBuilder::new().with_http_listener(addr).install().unwrap();

    let keep: Vec<Vec<u8>> = (0..500).map(|_| vec![7u8; 3000]).collect();
    let mut publisher = frag::Publisher::new().label("job", "test");
    let report = frag::report();
    publisher.observe(&report);
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let text = scrape(addr);

    for (series, path) in [
        ("frag_allocations_total{job=\"test\"}", "/tracked/allocations"),
        ("frag_deallocations_total{job=\"test\"}", "/tracked/deallocations"),
        ("frag_tracked_allocated_bytes{job=\"test\"}", "/tracked/allocated_bytes"),
        ("frag_tracked_live_blocks{job=\"test\"}", "/tracked/live_blocks"),
        ("frag_process_rss_bytes{job=\"test\"}", "/process/rss_bytes"),
        ("frag_allocator_allocated_bytes{job=\"test\"}", "/allocator/allocated"),
    ] {
        let published = value(&text, series);
        let reported = json.pointer(path).and_then(serde_json::Value::as_f64).unwrap();
        assert_eq!(published, reported, "{series} vs {path}");
    }
    // 3000 B blocks: class (2560, 3072].
    let class = report.size_classes.iter().find(|c| c.max_size == Some(3072)).unwrap();
    assert!(class.live_blocks >= 500);
    let live = value(&text, "frag_size_class_live_bytes{job=\"test\",class=\"3072\"}");
    assert_eq!(live, class.live_bytes as f64);
    assert!(text.contains("# TYPE frag_allocations_total counter"), "{text}");
    assert!(text.contains("# TYPE frag_process_rss_bytes gauge"));
    assert!(text.contains("# HELP frag_process_rss_bytes Resident set size of the process"));
    drop(keep);
}
