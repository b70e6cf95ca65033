//! What the parent makes of the children's results: tables on stdout, `results.json`,
//! `results.csv`, and an SVG timeline (process RSS against live tracked bytes) per backend.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::{Value, json};

/// Workloads in the order the tables show them, with a line on what each shows.
const WORKLOADS: [(&str, &str); 11] = [
    ("alternating", "10,000 blocks alternating 64 B / 4 KiB: freeing the small ones returns nothing"),
    ("server", "async-server pattern: 2-5 buffers of 128 B-16 KiB per iteration, 30% long-lived"),
    ("threads", "4 threads, 5,000 live blocks of 128 B-8 KiB each, replaced at random"),
    ("cross", "the same work freed locally (thread-per-core) or by the next thread (work-stealing)"),
    ("channel", "messages through a bounded channel between two threads"),
    ("decay", "jemalloc dirty_decay_ms (variant) on a burst of the server pattern"),
    ("brk", "glibc: blocks freed below a live top block, then release_free_memory (malloc_trim)"),
    (
        "bursts",
        "the server pattern in bursts, everything dropped, light activity in the gaps; with and without the reclaimer",
    ),
    (
        "handoff",
        "4 workers, bursts of blocks half freed by another worker, 1% kept; without and with the reclaimer, and with the idle hook",
    ),
    ("refault", "190 MiB touched, returned with MADV_DONTNEED, touched again: the cost of reusing released memory"),
    (
        "limit",
        "4 workers that never pause, live set about 770 MiB then 150 MiB (48 MiB of it long-lived small blocks); the reclaimer without and with a 320 MiB limit",
    ),
];

fn rows(run: &Value) -> impl Iterator<Item = &Value> {
    run["rows"].as_array().into_iter().flatten()
}

fn fmt(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.is_nan() => "-".to_owned(),
        Some(x) if x.abs() >= 1e5 => format!("{x:.0}"),
        Some(x) if x.abs() >= 100.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.2}"),
        None => "-".to_owned(),
    }
}

/// One markdown table per workload: a row per (backend, variant, case), a column per figure.
pub fn print_tables(runs: &[Value]) {
    for (workload, what) in WORKLOADS {
        let runs: Vec<&Value> = runs.iter().filter(|r| r["workload"] == workload).collect();
        if runs.is_empty() {
            continue;
        }
        let mut columns: Vec<String> = Vec::new();
        for row in runs.iter().flat_map(|r| rows(r)) {
            for key in row["figures"].as_object().into_iter().flat_map(|o| o.keys()) {
                if !columns.contains(key) {
                    columns.push(key.clone());
                }
            }
        }
        println!("\n### {workload}: {what}\n");
        println!("| backend | variant | case | {} |", columns.join(" | "));
        println!("|---|---|---|{}", "---|".repeat(columns.len()));
        for run in &runs {
            for row in rows(run) {
                let cells: Vec<String> = columns.iter().map(|c| fmt(&row["figures"][c])).collect();
                println!(
                    "| {} | {} | {} | {} |",
                    run["backend"].as_str().unwrap_or("?"),
                    run["variant"].as_str().unwrap_or(""),
                    row["case"].as_str().unwrap_or(""),
                    cells.join(" | ")
                );
            }
        }
        if workload == "cross" {
            print_cross_ratios(&runs);
        }
    }
}

/// Work-stealing over thread-per-core peak RSS, per backend: the ratio of the medians over the runs,
/// and the range of the ratios of runs made back to back.
fn print_cross_ratios(runs: &[&Value]) {
    let peaks = |backend: &str, variant: &str| -> Vec<f64> {
        runs.iter()
            .filter(|r| r["backend"] == backend && r["variant"] == variant)
            .filter_map(|r| rows(r).next()?["figures"]["peak_rss_mib"].as_f64())
            .collect()
    };
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let mut backends: Vec<&str> = runs.iter().filter_map(|r| r["backend"].as_str()).collect();
    backends.dedup();
    let parts: Vec<String> = backends
        .iter()
        .filter_map(|b| {
            let (local, stolen) = (peaks(b, "thread-per-core"), peaks(b, "work-stealing"));
            let ratio = median(&stolen)? / median(&local)?;
            let pairs: Vec<f64> = local.iter().zip(&stolen).map(|(l, s)| s / l).collect();
            Some(if pairs.len() > 1 {
                let lo = pairs.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = pairs.iter().copied().fold(0.0, f64::max);
                format!("{b} {ratio:.2}x ({lo:.2}-{hi:.2} over {} runs)", pairs.len())
            } else {
                format!("{b} {ratio:.2}x")
            })
        })
        .collect();
    println!("\npeak RSS, work-stealing / thread-per-core (medians): {}", parts.join(", "));
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':']));
    let memory = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_owned()));
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil((secs / 86_400) as i64);
    json!({
        "date": format!("{y:04}-{m:02}-{d:02}"),
        "cpu": model,
        "cores": std::thread::available_parallelism().map_or(0, usize::from),
        "memory": memory,
    })
}

fn csv(runs: &[Value]) -> String {
    let mut out = String::from("workload,backend,variant,case,figure,value\n");
    for run in runs {
        for row in rows(run) {
            for (figure, value) in row["figures"].as_object().into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "{},{},{},\"{}\",{},{}",
                    run["workload"].as_str().unwrap_or(""),
                    run["backend"].as_str().unwrap_or(""),
                    run["variant"].as_str().unwrap_or(""),
                    row["case"].as_str().unwrap_or("").replace('"', "\"\""),
                    figure,
                    value.as_f64().map_or(String::new(), |v| if v.is_nan() { String::new() } else { v.to_string() })
                );
            }
        }
    }
    out
}

/// One line of a timeline: its label, colour and (seconds, MiB) points.
type Line = (&'static str, RGBColor, Vec<(f64, f64)>);

/// A timeline chart of `lines` (MiB over seconds), legend upper right.
fn timeline(path: &Path, caption: &str, lines: Vec<Line>) -> Result<(), Box<dyn std::error::Error>> {
    let all = || lines.iter().flat_map(|l| l.2.iter());
    let x_max = all().map(|p| p.0).fold(0.1, f64::max);
    let y_max = all().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart.configure_mesh().x_desc("seconds").y_desc("MiB").draw()?;
    for (label, color, points) in lines {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    root.present()?;
    Ok(())
}

const RED: RGBColor = RGBColor(200, 40, 40);
const GREEN: RGBColor = RGBColor(40, 150, 60);
const BLUE: RGBColor = RGBColor(40, 90, 200);

type Points = Vec<(f64, f64, f64)>;

fn points(run: &Value) -> Points {
    run["timeline"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?, p[2].as_f64()?)))
        .collect()
}

fn rss(points: &Points) -> Vec<(f64, f64)> {
    points.iter().map(|p| (p.0, p.1)).collect()
}

fn live(points: &Points) -> Vec<(f64, f64)> {
    points.iter().map(|p| (p.0, p.2)).collect()
}

/// Process RSS and live tracked bytes over the server workload: the stair-step or the sawtooth.
fn timeline_svg(path: &Path, backend: &str, points: &Points) -> Result<(), Box<dyn std::error::Error>> {
    let caption = format!("server pattern on {backend}: process RSS vs live data");
    timeline(path, &caption, vec![("process RSS", RED, rss(points)), ("tracked live bytes", BLUE, live(points))])
}

/// The bursts with and without the reclaimer on one backend: both runs' RSS and the live bytes.
fn bursts_svg(path: &Path, backend: &str, without: &Points, with: &Points) -> Result<(), Box<dyn std::error::Error>> {
    let caption = format!("bursts on {backend}: process RSS without and with the reclaimer");
    timeline(
        path,
        &caption,
        vec![
            ("RSS without reclaimer", RED, rss(without)),
            ("RSS with reclaimer", GREEN, rss(with)),
            ("tracked live bytes", BLUE, live(with)),
        ],
    )
}

/// Writes every output file; returns their paths.
pub fn write_all(
    dir: &Path,
    runs: &[Value],
    quick: bool,
    seconds: f64,
) -> Result<Vec<PathBuf>, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    let json_path = dir.join("results.json");
    let doc = json!({ "machine": machine(), "quick": quick, "seconds": seconds, "runs": runs });
    std::fs::write(&json_path, serde_json::to_string_pretty(&doc)?)?;
    files.push(json_path);
    let csv_path = dir.join("results.csv");
    std::fs::write(&csv_path, csv(runs))?;
    files.push(csv_path);
    for run in runs.iter().filter(|r| r["workload"] == "server") {
        let backend = run["backend"].as_str().unwrap_or("unknown");
        let points = points(run);
        let path = dir.join(format!("timeline-{backend}.svg"));
        timeline_svg(&path, backend, &points)?;
        files.push(path);
    }
    let bursts = |backend: &Value, variant: &str| {
        runs.iter().find(|r| r["workload"] == "bursts" && r["backend"] == *backend && r["variant"] == variant)
    };
    for run in runs.iter().filter(|r| r["workload"] == "bursts" && r["variant"] == "without") {
        let Some(with) = bursts(&run["backend"], "with reclaimer") else { continue };
        let backend = run["backend"].as_str().unwrap_or("unknown");
        let path = dir.join(format!("bursts-{backend}.svg"));
        bursts_svg(&path, backend, &points(run), &points(with))?;
        files.push(path);
    }
    Ok(files)
}
