//! The reference experiments on every backend compiled in, in one command: each workload runs in a
//! child process per backend (this binary again, with `FRAG_ALLOCATOR` set, so `frag::Select` picks
//! the allocator), every figure comes from the child's own `frag::report()` and `getrusage`, and the
//! parent prints comparison tables and writes `results.json`, `results.csv` and two SVG timelines per
//! backend (the server pattern; the bursts without and with the reclaimer) under `target/shootout/`.
//!
//! ```sh
//! cargo run --release --all-features --example shootout            # about 260 s on 2 cores
//! cargo run --release --all-features --example shootout -- --quick # about three minutes
//! cargo run --release --all-features --example shootout -- --no-sampling # no sampled (marked) blocks
//! ```
//!
//! The children run `Tracked`'s exact tier. `--no-sampling` turns its sampler off before the workload,
//! so that no block carries the sampler's mark (a sampled small block is allocated 4 KiB-aligned) and
//! the side table stays empty: comparing its figures with a default run's, against their run-to-run
//! spread, shows what sampling does to fragmentation.
//!
//! Workloads: (1) 10,000 blocks alternating 64 B / 4 KiB, small ones freed, then all; (2) the
//! async-server pattern (timeline pictured); (3) four threads with 5,000 live blocks each; (4)
//! thread-per-core against work-stealing freeing (5 runs each, median); (5) channel messages of 8 B to 32 KiB, with
//! jemalloc's `tcache_max` at 16384 and 4096 too; (6) jemalloc's dirty-decay sweep; (7) glibc's
//! heap pinned by its top block, then trimmed; (8) the server pattern in bursts with idle gaps, without
//! and with the reclaimer (timelines pictured); (9) what a released page costs when it is touched
//! again; (10) four workers handing blocks to each other in bursts, without and with the reclaimer,
//! and with its hook for idle threads; (11) four workers that never pause, whose live set drops,
//! without and with a memory limit: throughput, RSS and what the reclaimer and the workers' assists
//! cost.

#[path = "../support/measure.rs"]
mod measure;
mod output;
mod workloads;

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use frag::Select;
use frag::backend::Backend;
use serde_json::{Value, json};
use workloads::Scale;

// The exact tier: live bytes and classes counted, not estimated, so that every ratio is exact and
// `--no-sampling` keeps them.
#[global_allocator]
static A: frag::Tracked<Select, frag::Exact> = frag::Tracked::new(Select::new());

/// The flag that turns the sampler off in the children.
const NO_SAMPLING: &str = "--no-sampling";

/// One child run: a workload with a variant on a backend.
#[derive(Clone)]
pub struct Plan {
    pub workload: &'static str,
    pub variant: String,
    pub backend: Backend,
}

/// Runs of the cross-thread workload per backend and variant (alternating): its peak RSS depends on
/// how four threads are scheduled on the machine's cores, and varies by up to 1.6x between runs.
const CROSS_RUNS: usize = 5;

fn plans(quick: bool) -> Vec<Plan> {
    let mut v = Vec::new();
    let mut add = |workload: &'static str, variant: &str, backend: Backend| {
        v.push(Plan { workload, variant: variant.to_owned(), backend });
    };
    for &b in Backend::ALL {
        add("alternating", "", b);
        add("server", "", b);
        add("threads", "", b);
        for _ in 0..if quick { 1 } else { CROSS_RUNS } {
            add("cross", "thread-per-core", b);
            add("cross", "work-stealing", b);
        }
        add("channel", "", b);
        add("bursts", "without", b);
        add("bursts", "with reclaimer", b);
        for variant in ["without", "with reclaimer", "with reclaimer and idle hook"] {
            add("handoff", variant, b);
        }
        for variant in ["without", "with limit"] {
            add("limit", variant, b);
        }
    }
    #[cfg(feature = "jemalloc")]
    {
        add("channel", "tcache_max=16384", Backend::Jemalloc);
        add("channel", "tcache_max=4096", Backend::Jemalloc);
        for ms in ["0", "1000", "10000"] {
            add("decay", ms, Backend::Jemalloc);
        }
    }
    add("brk", "", Backend::System);
    add("refault", "", Backend::System);
    v
}

/// `target/shootout`, next to this binary's own `target/<profile>/examples/`.
fn out_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let target = exe.ancestors().nth(3).map_or_else(|| PathBuf::from("target"), PathBuf::from);
    target.join("shootout")
}

fn child(args: &[String]) -> i32 {
    let (Some(workload), Some(variant)) = (args.first(), args.get(1)) else {
        eprintln!("usage: shootout --child WORKLOAD VARIANT [--quick] [--no-sampling]");
        return 2;
    };
    let scale = Scale { quick: args.iter().any(|a| a == "--quick") };
    if args.iter().any(|a| a == NO_SAMPLING) {
        if let Err(e) = frag::set_sampling(frag::Sampling::Off) {
            eprintln!("shootout: turning sampling off: {e}");
            return 2;
        }
    }
    let Some(outcome) = workloads::run(workload, variant, scale) else {
        eprintln!("shootout: unknown workload {workload}");
        return 2;
    };
    let report = frag::report();
    let rows: Vec<Value> =
        outcome.rows.iter().map(|r| json!({ "case": r.case, "figures": workloads::figures(r) })).collect();
    let line = json!({
        "backend": report.backend,
        "warnings": report.warnings,
        "rows": rows,
        "timeline": outcome.timeline,
    });
    println!("{line}");
    0
}

fn run_child(plan: &Plan, quick: bool, no_sampling: bool) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    cmd.args(["--child", plan.workload, &plan.variant]).env(Select::ENV, plan.backend.name());
    if quick {
        cmd.arg("--quick");
    }
    if no_sampling {
        cmd.arg(NO_SAMPLING);
    }
    let start = Instant::now();
    let out = cmd.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{}\n{}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let mut v: Value = serde_json::from_str(last).map_err(|e| format!("{e}: {last}"))?;
    if v["backend"] != plan.backend.name() {
        return Err(format!("asked for {}, the child ran on {}", plan.backend, v["backend"]));
    }
    v["workload"] = json!(plan.workload);
    v["variant"] = json!(plan.variant);
    v["seconds"] = json!(start.elapsed().as_secs_f64());
    Ok(v)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        std::process::exit(child(&args[i + 1..]));
    }
    if let Some(unknown) = args.iter().find(|a| !["--quick", NO_SAMPLING].contains(&a.as_str())) {
        eprintln!("shootout: unknown argument {unknown:?} (known: --quick, {NO_SAMPLING})");
        std::process::exit(2);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let no_sampling = args.iter().any(|a| a == NO_SAMPLING);
    let start = Instant::now();
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for plan in plans(quick) {
        eprint!("{:<12} {:<9} {:<17}", plan.workload, plan.backend.name(), plan.variant);
        match run_child(&plan, quick, no_sampling) {
            Ok(v) => {
                eprintln!(" {:5.1} s", v["seconds"].as_f64().unwrap_or(0.0));
                runs.push(v);
            }
            Err(e) => {
                eprintln!(" FAILED");
                failures.push(format!("{} on {} ({}): {e}", plan.workload, plan.backend, plan.variant));
            }
        }
    }
    let dir = out_dir();
    match output::write_all(&dir, &runs, quick, start.elapsed().as_secs_f64()) {
        Ok(files) => {
            output::print_tables(&runs);
            println!("\nwrote {}", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "));
        }
        Err(e) => failures.push(format!("writing {}: {e}", dir.display())),
    }
    println!("total {:.0} s", start.elapsed().as_secs_f64());
    if !failures.is_empty() {
        eprintln!("\n{}", failures.join("\n"));
        std::process::exit(1);
    }
}
