//! The human form of a report: a compact table to paste into an incident channel.

use core::fmt::{self, Display, Formatter};

use super::document::Report;
use super::figures::{FragItself, HeapCounts, RowKind, ShardPool, SizeClassRow, ThreadRow};
use super::origin::Origin;
use super::pins::PinMethod;
use super::ratio::Fragmentation;
use super::scopes::Scopes;
use super::sites::Sites;
use super::warn::{Warning, WarningKind};
use crate::backend::AllocatorStats;
use crate::estimate::MIN_SAMPLES_SHARE;
use crate::format::{Approx, Bytes, ClassRange, ESTIMATED, Nanos, Percent, TOO_FEW};
use crate::process::ProcessStats;
use crate::report::diagnosis::{Diagnosis, FindingKind, Part, Severity, Source};
use crate::sampler::Sampling;
use crate::sites::Unwinder;

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |b| Bytes(b).to_string())
}

fn opt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"))
}

fn opt_percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |r| Percent(r, 1).to_string())
}

/// The breakdown on one line (`≈` marks estimated buckets), then the findings.
fn write_diagnosis(f: &mut Formatter<'_>, d: &Diagnosis) -> fmt::Result {
    let b = &d.breakdown;
    let parts: Vec<String> = Part::ALL
        .into_iter()
        .filter(|p| b.source(*p) != Source::NotSplit)
        .map(|p| {
            let estimated = b.source(p) == Source::Estimated;
            format!("{} {}", p.name().replace('_', " "), Approx(Bytes(b.bytes(p)), estimated))
        })
        .collect();
    let unexplained = Bytes(b.unexplained_bytes.unsigned_abs());
    let sign = if b.unexplained_bytes < 0 { "-" } else { "" };
    writeln!(f, "resident   {} = {}, unexplained {sign}{unexplained}", Bytes(b.rss_bytes), parts.join(" + "))?;
    for n in &b.not_split {
        writeln!(f, "           (not split: {n})")?;
    }
    for x in &d.findings {
        let severity = match x.severity {
            Severity::Warn => "WARN",
            Severity::Info => "info",
        };
        if x.kind == FindingKind::ConfigTrap {
            // A configuration trap has no bytes of its own.
            writeln!(f, "{severity:<10} {}: {}", x.kind.name(), x.summary)?;
        } else {
            writeln!(f, "{severity:<10} {} {}: {}", x.kind.name(), Approx(Bytes(x.bytes), x.estimated), x.summary)?;
        }
        writeln!(f, "           -> {}", x.remedy)?;
    }
    Ok(())
}

/// frag's own memory, on a line of its own.
fn write_frag_itself(f: &mut Formatter<'_>, m: &FragItself) -> fmt::Result {
    let e = if m.estimated { ESTIMATED } else { "" };
    let cache = if m.symbol_cache_kept { "kept (frag::sites::keep_symbol_cache)" } else { "released after use" };
    writeln!(
        f,
        "frag itself live {e}{}, usable {e}{}, {} allocated since start; not in the figures above (symbol cache {cache})",
        Bytes(m.live_bytes),
        Bytes(m.usable_bytes),
        Bytes(m.allocated_total_bytes),
    )
}

fn write_sites(f: &mut Formatter<'_>, s: &Sites) -> fmt::Result {
    let sampling = sampling_text(s.sampling);
    writeln!(
        f,
        "\nsites      sampling {sampling}: {} samples, {} sites of {} the table holds ({:.0}%), {} stacks dropped",
        s.samples,
        s.sites,
        s.site_capacity,
        s.sites as f64 * 100.0 / s.site_capacity.max(1) as f64,
        s.dropped_stacks
    )?;
    match (&s.unwind_tables, s.unwinder) {
        (Some(t), _) => writeln!(
            f,
            "           stacks: unwind tables, {} modules, {} rows, {}, last built in {:.1} ms",
            t.modules,
            t.rows,
            Bytes(t.bytes as u64),
            t.last_build_ms
        )?,
        (None, Unwinder::UnwindTables) => writeln!(f, "           stacks: none (unwind tables not built)")?,
        (None, Unwinder::None) => writeln!(f, "           stacks: none on this target")?,
        (None, u) => writeln!(f, "           stacks: {u}")?,
    }
    if s.switched_stacks > 0 || s.unproven_stacks > 0 {
        writeln!(
            f,
            "           {} samples on stacks the program switched to ({ESTIMATED}{} allocated), {} not walked (stack memory unproven)",
            s.switched_stacks,
            Bytes(s.switched_stacks_bytes),
            s.unproven_stacks
        )?;
    }
    if s.no_stack_inuse_bytes > 0 {
        writeln!(f, "           in use without a stack {ESTIMATED}{}", Bytes(s.no_stack_inuse_bytes))?;
    }
    match &s.pinned {
        Some(p) => writeln!(
            f,
            "           holes in the allocator's slabs {}: pinned by the sites below ({ESTIMATED}pins, {}), \
             {ESTIMATED}{} by other sites, {ESTIMATED}{} without a stack, {} given to no site",
            Bytes(p.holes_bytes),
            match p.method {
                PinMethod::Slabs => "each block's part of its own slab's free space",
                PinMethod::ClassShares => "each class's free space by the sites' live blocks in it",
                PinMethod::Both => "each block's part of its slab, blocks with no slab known by class",
            },
            Bytes(p.other_sites_bytes),
            Bytes(p.no_stack_bytes),
            Bytes(p.unattributed_bytes)
        )?,
        None => writeln!(f, "           pins: not split (the allocator gives no free space by size class)")?,
    }
    if s.top.is_empty() {
        return Ok(());
    }
    if !s.symbolized {
        writeln!(
            f,
            "           frames are addresses: Sites::symbolize() names them (it reads the program's debug \
             information once and keeps it), or read frag::profile::heap_pprof() with pprof"
        )?;
    }
    writeln!(
        f,
        "  {:>11} {:>5} {:>10} {:>10} {:>8} {:>7} {:>9}  row leaf frames",
        &format!("{ESTIMATED}in use"),
        "95%",
        &format!("{ESTIMATED}blocks"),
        &format!("{ESTIMATED}pins"),
        "samples",
        &format!("{ESTIMATED}cross"),
        &format!("{ESTIMATED}median")
    )?;
    for (i, r) in s.top.iter().enumerate() {
        let few = |v: Option<String>| or_too_few(v, r.free_samples);
        writeln!(
            f,
            "  {:>11} {:>5} {:>10} {:>10} {:>8} {:>7} {:>9}  #{:<2} {}",
            Bytes(r.inuse_bytes),
            plus_minus(r.inuse_bytes, Some(r.inuse_bytes_interval)),
            r.inuse_blocks,
            r.pinned_bytes.map_or_else(|| "-".to_owned(), |b| Bytes(b).to_string()),
            r.samples,
            few(r.cross_thread_share.map(|c| Percent(c, 0).to_string())),
            few(r.median_lifetime_ns.map(|ns| Nanos(ns).to_string())),
            i + 1,
            r.frames.first().map_or("?", String::as_str)
        )?;
        for frame in r.frames.iter().skip(1) {
            writeln!(f, "  {:>67}      {frame}", "")?;
        }
    }
    Ok(())
}

fn write_scopes(f: &mut Formatter<'_>, s: &Scopes) -> fmt::Result {
    writeln!(
        f,
        "\nscopes     sampling {}: {} named of {} the table holds, {} names refused; estimates from the samples",
        sampling_text(s.sampling),
        s.named,
        s.capacity,
        s.refused_names
    )?;
    writeln!(
        f,
        "  {:>11} {:>5} {:>11} {:>10} {:>8} {:>10} {:>9}  scope, then its top sites",
        &format!("{ESTIMATED}in use"),
        "95%",
        &format!("{ESTIMATED}allocated"),
        &format!("{ESTIMATED}pins"),
        "samples",
        &format!("{ESTIMATED}elsewhere"),
        &format!("{ESTIMATED}median")
    )?;
    for r in &s.rows {
        let few = |v: Option<String>| or_too_few(v, r.free_samples);
        writeln!(
            f,
            "  {:>11} {:>5} {:>11} {:>10} {:>8} {:>10} {:>9}  {}",
            Bytes(r.inuse_bytes),
            plus_minus(r.inuse_bytes, Some(r.inuse_bytes_interval)),
            Bytes(r.alloc_bytes),
            r.pinned_bytes.map_or_else(|| "-".to_owned(), |b| Bytes(b).to_string()),
            r.samples,
            few(r.freed_elsewhere_share.map(|c| Percent(c, 0).to_string())),
            few(r.median_lifetime_ns.map(|ns| Nanos(ns).to_string())),
            r.name.as_deref().unwrap_or("(no scope)")
        )?;
        for site in &r.top_sites {
            let leaf = site.frames.first().map_or("?", String::as_str);
            writeln!(f, "  {:>11} {:>70}  {leaf}", Bytes(site.inuse_bytes), "")?;
        }
    }
    Ok(())
}

/// A figure from sampled frees, or why there is none: too few frees (`free_samples` of them), or none.
fn or_too_few(figure: Option<String>, free_samples: u64) -> String {
    figure.unwrap_or_else(|| if free_samples > 0 { TOO_FEW.to_owned() } else { "-".to_owned() })
}

/// The half-width of a 95% interval around `estimate`, as a share of it: "±8%" ("-" for none).
fn plus_minus(estimate: u64, interval: Option<(u64, u64)>) -> String {
    match interval {
        Some((lo, hi)) if estimate > 0 => {
            format!("±{}", Percent((hi - lo) as f64 / 2.0 / estimate as f64, 0))
        }
        _ => "-".to_owned(),
    }
}

/// The sampling in words: "1 per 512 KiB allocated", "every block", "off now".
fn sampling_text(s: Sampling) -> String {
    match s {
        Sampling::MeanBytes(m) => format!("1 per {} allocated", Bytes(m)),
        Sampling::EveryBlock => "every block".to_owned(),
        _ => "off now".to_owned(),
    }
}

fn write_origin(f: &mut Formatter<'_>, o: &Origin) -> fmt::Result {
    let rate = sampling_text(o.sampling);
    writeln!(
        f,
        "\norigin     sampling {rate}: {} sampled, {} freed, {} dropped",
        o.sampled_blocks, o.sampled_frees, o.dropped_samples
    )?;
    if o.too_few_samples {
        writeln!(
            f,
            "           cross-thread frees: too few samples to tell ({} sampled frees, fewer than {})",
            o.sampled_frees, MIN_SAMPLES_SHARE
        )?;
        return Ok(());
    }
    let interval =
        o.ratio_interval.map_or_else(String::new, |(lo, hi)| format!(" (95% {}-{})", Percent(lo, 1), Percent(hi, 1)));
    let exact = if o.frees_exact { ", of an exact count of frees" } else { "" };
    let count = |n: u64, i: Option<(u64, u64)>| match i {
        Some((lo, hi)) if (lo, hi) != (n, n) => format!("{ESTIMATED}{n} (95% {lo}-{hi})"),
        _ => format!("{ESTIMATED}{n}"),
    };
    let all = if o.frees_exact { o.frees.to_string() } else { count(o.frees, o.frees_interval) };
    writeln!(
        f,
        "           cross-thread frees {} of {} = {}{interval}; bytes {ESTIMATED}{} ({}) = {} (estimates from {} sampled frees{exact})",
        count(o.cross_thread_frees, o.cross_thread_frees_interval),
        all,
        opt_percent(o.cross_thread_free_ratio),
        Bytes(o.cross_thread_bytes),
        plus_minus(o.cross_thread_bytes, o.cross_thread_bytes_interval),
        opt_percent(o.cross_thread_byte_ratio),
        o.sampled_frees
    )?;
    if !o.pairs.is_empty() {
        writeln!(
            f,
            "  {:<30}    {:<30} {:>12} {:>5} {:>11} {:>5}",
            "allocated by",
            "freed by",
            &format!("{ESTIMATED}frees"),
            "95%",
            &format!("{ESTIMATED}bytes"),
            "95%"
        )?;
        for p in &o.pairs {
            let who = |tid: u64, name: &Option<String>| format!("{tid} {}", name.as_deref().unwrap_or("?"));
            writeln!(
                f,
                "  {:<30} -> {:<30} {:>12} {:>5} {:>11} {:>5}",
                who(p.alloc_tid, &p.alloc_thread),
                who(p.free_tid, &p.free_thread),
                p.frees,
                plus_minus(p.frees, p.frees_interval),
                Bytes(p.bytes),
                plus_minus(p.bytes, p.bytes_interval)
            )?;
        }
    }
    let lived: Vec<String> = o
        .lifetimes
        .iter()
        .filter(|l| l.local_frees + l.cross_thread_frees > 0)
        .map(|l| {
            let bound = l.below_ns.map_or_else(|| "longer".to_owned(), |b| format!("<{}", Nanos(b)));
            format!("{bound}: {}/{}", l.local_frees, l.cross_thread_frees)
        })
        .collect();
    if !lived.is_empty() {
        writeln!(f, "  lifetimes ({ESTIMATED}local/{ESTIMATED}cross frees): {}", lived.join(", "))?;
    }
    Ok(())
}

fn row_label(r: &ThreadRow) -> String {
    match r.kind {
        RowKind::Thread => {
            let name = r.name.as_deref().unwrap_or("?");
            let state = if r.alive { "" } else { " (exited)" };
            format!("{} {name}{state}", r.tid.unwrap_or(0))
        }
        RowKind::Retired => "(exited, slot reused)".to_owned(),
        RowKind::Overflow => "(beyond the slots)".to_owned(),
    }
}

/// Rows of the allocator's own classes shown in the text report (all are in the JSON form).
const ALLOCATOR_CLASS_ROWS: usize = 12;

/// The allocator's own classes that hold the most bytes, with its exact counts.
fn write_allocator_classes(f: &mut Formatter<'_>, classes: &[crate::backend::AllocatorClass]) -> fmt::Result {
    if classes.is_empty() {
        return Ok(());
    }
    writeln!(
        f,
        "allocator  its own classes, its own counts (requests lag thread caches; held includes blocks they park)"
    )?;
    writeln!(
        f,
        "  {:>12} {:>12} {:>10} {:>11} {:>18}",
        "block size", "requests", "held", "held bytes", "free in its slabs"
    )?;
    let mut rows: Vec<&crate::backend::AllocatorClass> = classes.iter().collect();
    rows.sort_by_key(|c| core::cmp::Reverse(c.held.saturating_mul(c.size)));
    for c in rows.iter().take(ALLOCATOR_CLASS_ROWS) {
        let free = if c.slabs.is_some() { Bytes(c.free_in_slabs()).to_string() } else { "-".to_owned() };
        writeln!(
            f,
            "  {:>12} {:>12} {:>10} {:>11} {:>18}",
            Bytes(c.size),
            c.requests,
            c.held,
            Bytes(c.held * c.size),
            free
        )?;
    }
    if rows.len() > ALLOCATOR_CLASS_ROWS {
        writeln!(f, "  ... {} more classes in the JSON form", rows.len() - ALLOCATOR_CLASS_ROWS)?;
    }
    let sum = |f: fn(&crate::backend::AllocatorClass) -> u64| classes.iter().map(f).fold(0u64, u64::saturating_add);
    writeln!(
        f,
        "  {:>12} {:>12} {:>10} {:>11} {:>18}",
        "all",
        sum(|c| c.requests),
        sum(|c| c.held),
        Bytes(sum(|c| c.held.saturating_mul(c.size))),
        Bytes(sum(crate::backend::AllocatorClass::free_in_slabs))
    )?;
    Ok(())
}

/// The program's figures: live bytes and blocks, the counts, and their intervals in the sampled tier.
fn write_tracked(f: &mut Formatter<'_>, t: &HeapCounts, internal_bytes: u64) -> fmt::Result {
    let e = if t.estimated { ESTIMATED } else { "" };
    writeln!(
        f,
        "tracked    live {e}{} in {e}{} blocks, usable {e}{} (internal {e}{}), peak {e}{}",
        Bytes(t.allocated_bytes),
        t.live_blocks,
        Bytes(t.usable_bytes),
        Bytes(internal_bytes),
        Bytes(t.peak_allocated_bytes)
    )?;
    writeln!(
        f,
        "           {e}{} allocations, {e}{} deallocations, {e}{} reallocations{}",
        t.allocations,
        t.deallocations,
        t.reallocations,
        match (t.estimated, t.sampled_in_jemalloc) {
            (true, true) => " (sampled inside jemalloc: estimates from its samples)",
            (true, false) => " (sampled tier: estimates from the samples)",
            (false, _) => "",
        }
    )?;
    if let (Some(a), Some(d), Some(l)) = (t.allocations_interval, t.deallocations_interval, t.live_blocks_interval) {
        // Tiny blocks are rarely sampled: the upper ends include what unseen ones could be.
        writeln!(
            f,
            "           95%: allocations {}-{}, deallocations {}-{}, live blocks {}-{} (upper ends bound the \
             tiny blocks no sample saw)",
            a.0, a.1, d.0, d.1, l.0, l.1
        )?;
    }
    Ok(())
}

/// The allocator's own figures, those it has.
fn write_allocator(f: &mut Formatter<'_>, a: &AllocatorStats) -> fmt::Result {
    let fields = [
        ("allocated", a.allocated),
        ("active", a.active),
        ("metadata", a.metadata),
        ("resident", a.resident),
        ("mapped", a.mapped),
        ("retained", a.retained),
        ("dirty", a.dirty),
        ("top releasable", a.top_releasable),
        ("free whole pages", a.free_whole_pages),
        ("thread arena tops", a.thread_arena_tops),
        ("free", a.free),
        ("arena", a.arena),
        ("mmap", a.mmap),
        ("committed", a.committed),
        ("peak committed", a.peak_committed),
        ("peak mapped", a.peak_mapped),
    ];
    let parts: Vec<String> = fields.iter().filter_map(|(n, v)| v.map(|v| format!("{n} {}", Bytes(v)))).collect();
    writeln!(f, "allocator  {}", parts.join(", "))?;
    Ok(())
}

/// The kernel's view, the cgroup, and the fragmentation ratios.
fn write_process(f: &mut Formatter<'_>, p: &ProcessStats, fr: &Fragmentation) -> fmt::Result {
    writeln!(
        f,
        "process    rss {}, pss {}, anon {}",
        opt_bytes(p.rss_bytes),
        opt_bytes(p.pss_bytes),
        opt_bytes(p.anon_bytes)
    )?;
    if let Some(c) = &p.cgroup {
        let limit = c.max_bytes.map_or_else(|| "no limit".to_owned(), |m| format!("limit {}", Bytes(m)));
        writeln!(
            f,
            "cgroup {}  {} charged ({limit}), anon {}, file {}",
            c.version,
            Bytes(c.current_bytes),
            opt_bytes(c.anon_bytes),
            opt_bytes(c.file_bytes)
        )?;
    }
    writeln!(
        f,
        "frag ratio {} ({}), process ratio {}",
        opt_ratio(fr.ratio),
        fr.ratio_inputs,
        opt_ratio(fr.process_ratio)
    )?;
    Ok(())
}

/// One row per thread with its own shard, then the aggregates that hold anything.
fn write_threads(f: &mut Formatter<'_>, threads: &[ThreadRow], shards: &ShardPool) -> fmt::Result {
    writeln!(
        f,
        "\nthreads ({} running, tracked individually, of {} at most; elsewhere {ESTIMATED} its blocks freed by others, \
         remote {ESTIMATED} others' blocks it freed, both estimated)",
        shards.live, shards.capacity
    )?;
    writeln!(
        f,
        "  {:<32} {:>12} {:>12} {:>9} {:>11} {:>11} {:>10} {:>10}",
        "thread",
        "allocs",
        "frees",
        "reallocs",
        "allocated",
        "freed",
        &format!("{ESTIMATED}elsewhere"),
        &format!("{ESTIMATED}remote")
    )?;
    for r in threads {
        if r.kind != RowKind::Thread && r.allocations == 0 && r.deallocations == 0 {
            continue;
        }
        let e = |v: &dyn Display| Approx(v.to_string(), r.estimated);
        writeln!(
            f,
            "  {:<32} {:>12} {:>12} {:>9} {:>11} {:>11} {:>10} {:>10}",
            row_label(r),
            e(&r.allocations),
            e(&r.deallocations),
            e(&r.reallocations),
            Bytes(r.allocated_bytes),
            e(&Bytes(r.freed_bytes)),
            r.freed_elsewhere,
            if r.free_samples < MIN_SAMPLES_SHARE && r.remote_frees > 0 {
                TOO_FEW.to_owned()
            } else {
                r.remote_frees.to_string()
            }
        )?;
    }
    Ok(())
}

/// One row per size class that has seen a block.
fn write_size_classes(f: &mut Formatter<'_>, classes: &[SizeClassRow]) -> fmt::Result {
    writeln!(
        f,
        "\nsize classes (live; {ESTIMATED}xthread: estimated share of frees on another thread, \"{TOO_FEW}\" below \
         {MIN_SAMPLES_SHARE} samples)"
    )?;
    writeln!(
        f,
        "  {:>21} {:>12} {:>12} {:>10} {:>11} {:>11} {:>11} {:>7}",
        "request size",
        "allocs",
        "frees",
        "live",
        "live bytes",
        "usable",
        "internal",
        &format!("{ESTIMATED}xthread")
    )?;
    for c in classes {
        let range = ClassRange { min: c.min_size, max: c.max_size, unit: false };
        let e = |v: &dyn Display| Approx(v.to_string(), c.estimated);
        writeln!(
            f,
            "  {:>21} {:>12} {:>12} {:>10} {:>11} {:>11} {:>11} {:>7}",
            range,
            e(&c.allocations),
            e(&c.deallocations),
            e(&c.live_blocks),
            e(&Bytes(c.live_bytes)),
            e(&Bytes(c.usable_bytes)),
            e(&Bytes(c.internal_bytes)),
            match (c.cross_thread_ratio, c.cross_thread_samples) {
                (None, 1..) => TOO_FEW.to_owned(), // sampled, but too few to tell
                (r, _) => opt_percent(r),
            }
        )?;
    }
    Ok(())
}

impl Display for Report {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let t = &self.tracked;
        match self.backend {
            Some(b) => writeln!(f, "frag report: backend {b}")?,
            None => writeln!(f, "frag report: no Tracked allocator is installed")?,
        }
        if let Some(d) = &self.diagnosis {
            write_diagnosis(f, d)?;
        }
        write_tracked(f, t, self.fragmentation.internal_bytes)?;
        write_frag_itself(f, &self.frag_itself)?;
        if let Some(a) = &self.allocator {
            write_allocator(f, a)?;
        }
        write_process(f, &self.process, &self.fragmentation)?;
        write_threads(f, &self.threads, &self.shards)?;
        write_size_classes(f, &self.size_classes)?;
        write_allocator_classes(f, &self.allocator_classes)?;
        if let Some(o) = &self.origin {
            write_origin(f, o)?;
        }
        if let Some(s) = &self.sites {
            write_sites(f, s)?;
        }
        if let Some(s) = &self.scopes {
            write_scopes(f, s)?;
        }
        if let Some(source) = self.usable_source {
            writeln!(f, "\nusable sizes: {source}")?;
        }
        // A configuration trap is a finding of the diagnosis already, with its remedy.
        let in_findings = |w: &&Warning| w.kind == WarningKind::ConfigTrap && self.diagnosis.is_some();
        for w in self.warnings.iter().filter(|w| !in_findings(w)) {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}
