//! The human form of a report: a compact table to paste into an incident channel.

use core::fmt::{self, Display, Formatter};

use super::{Origin, Report, RowKind, Sites, ThreadRow};
use crate::estimate::MIN_SAMPLES_SHARE;
use crate::report::diagnosis::{Diagnosis, Part, Severity, Source};
use crate::sampler::Sampling;

/// Bytes with a binary unit, e.g. `12.3 MiB`.
pub(crate) struct Bytes(pub(crate) u64);

impl Display for Bytes {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut v = self.0 as f64;
        let mut unit = 0;
        while v >= 1024.0 && unit < UNITS.len() - 1 {
            v /= 1024.0;
            unit += 1;
        }
        let s = if unit == 0 { format!("{} B", self.0) } else { format!("{v:.1} {}", UNITS[unit]) };
        f.pad(&s)
    }
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), |b| Bytes(b).to_string())
}

fn opt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"))
}

fn opt_percent(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |r| format!("{:.1}%", r * 100.0))
}

/// A lifetime bound in nanoseconds, in the largest unit that keeps it whole.
fn duration(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{} s", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{} ms", n / 1_000_000),
        n if n >= 1_000 => format!("{} us", n / 1_000),
        n => format!("{n} ns"),
    }
}

/// The breakdown on one line (`~` marks estimated buckets), then the findings.
fn write_diagnosis(f: &mut Formatter<'_>, d: &Diagnosis) -> fmt::Result {
    let b = &d.breakdown;
    let parts: Vec<String> =
        [Part::Live, Part::Rounding, Part::Holes, Part::Reclaimable, Part::Metadata, Part::OutsideHeap]
            .into_iter()
            .filter(|p| b.source(*p) != Source::NotSplit)
            .map(|p| {
                let mark = if b.source(p) == Source::Estimated { "~" } else { "" };
                format!("{} {mark}{}", p.name().replace('_', " "), Bytes(b.bytes(p)))
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
        let approx = if x.estimated { "~" } else { "" };
        writeln!(f, "{severity:<10} {} {approx}{}: {}", x.kind.name(), Bytes(x.bytes), x.summary)?;
        writeln!(f, "           -> {}", x.remedy)?;
    }
    Ok(())
}

fn write_sites(f: &mut Formatter<'_>, s: &Sites) -> fmt::Result {
    let sampling = sampling_text(s.sampling);
    let stacks = if s.frame_pointers { "" } else { " (no stacks: built without frame pointers)" };
    writeln!(
        f,
        "\nsites      sampling {sampling}: {} samples, {} sites, {} stacks dropped{stacks}",
        s.samples, s.sites, s.dropped_stacks
    )?;
    if s.no_stack_inuse_bytes > 0 {
        writeln!(f, "           in use without a stack ≈{}", Bytes(s.no_stack_inuse_bytes))?;
    }
    if s.top.is_empty() {
        return Ok(());
    }
    writeln!(
        f,
        "  {:>11} {:>5} {:>10} {:>8} {:>7} {:>9}  leaf frames",
        "≈in use", "95%", "≈blocks", "samples", "≈cross", "≈median"
    )?;
    for r in &s.top {
        let few =
            |v: Option<String>| v.unwrap_or_else(|| if r.free_samples > 0 { "few".to_owned() } else { "-".to_owned() });
        writeln!(
            f,
            "  {:>11} {:>5} {:>10} {:>8} {:>7} {:>9}  {}",
            Bytes(r.inuse_bytes),
            plus_minus(r.inuse_bytes, Some(r.inuse_bytes_interval)),
            r.inuse_blocks,
            r.samples,
            few(r.cross_thread_share.map(|c| format!("{:.0}%", c * 100.0))),
            few(r.median_lifetime_ns.map(duration)),
            r.frames.first().map_or("?", String::as_str)
        )?;
        for frame in r.frames.iter().skip(1) {
            writeln!(f, "  {:>56}  {frame}", "")?;
        }
    }
    Ok(())
}

/// The half-width of a 95% interval around `estimate`, as a share of it: "±8%" ("-" for none).
fn plus_minus(estimate: u64, interval: Option<(u64, u64)>) -> String {
    match interval {
        Some((lo, hi)) if estimate > 0 => {
            format!("±{:.0}%", (hi - lo) as f64 / 2.0 / estimate as f64 * 100.0)
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
        o.ratio_interval.map_or_else(String::new, |(lo, hi)| format!(" (95% {:.1}-{:.1}%)", lo * 100.0, hi * 100.0));
    let clamped = if o.clamped { ", lowered to the exact count" } else { "" };
    let count = |n: u64, i: Option<(u64, u64)>| match i {
        Some((lo, hi)) if (lo, hi) != (n, n) => format!("≈{n} (95% {lo}-{hi})"),
        _ => format!("≈{n}"),
    };
    writeln!(
        f,
        "           cross-thread frees {} of {} = {}{interval}; bytes ≈{} ({}) = {} (estimates from {} sampled frees{clamped})",
        count(o.cross_thread_frees, o.cross_thread_frees_interval),
        count(o.frees, o.frees_interval),
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
            "allocated by", "freed by", "≈frees", "95%", "≈bytes", "95%"
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
            let bound = l.below_ns.map_or_else(|| "longer".to_owned(), |b| format!("<{}", duration(b)));
            format!("{bound}: {}/{}", l.local_frees, l.cross_thread_frees)
        })
        .collect();
    if !lived.is_empty() {
        writeln!(f, "  lifetimes (≈local/≈cross frees): {}", lived.join(", "))?;
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
        let e = if t.estimated { "≈" } else { "" };
        writeln!(
            f,
            "tracked    live {e}{} in {e}{} blocks, usable {e}{} (internal {e}{}), peak {e}{}",
            Bytes(t.allocated_bytes),
            t.live_blocks,
            Bytes(t.usable_bytes),
            Bytes(self.fragmentation.internal_bytes),
            Bytes(t.peak_allocated_bytes)
        )?;
        writeln!(
            f,
            "           {e}{} allocations, {e}{} deallocations, {e}{} reallocations{}",
            t.allocations,
            t.deallocations,
            t.reallocations,
            if t.estimated { " (sampled tier: estimates from the samples)" } else { "" }
        )?;
        if let Some(a) = &self.allocator {
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
            let parts: Vec<String> =
                fields.iter().filter_map(|(n, v)| v.map(|v| format!("{n} {}", Bytes(v)))).collect();
            writeln!(f, "allocator  {}", parts.join(", "))?;
        }
        let p = &self.process;
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
                "cgroup v{}  {} charged ({limit}), anon {}, file {}",
                c.version,
                Bytes(c.current_bytes),
                opt_bytes(c.anon_bytes),
                opt_bytes(c.file_bytes)
            )?;
        }
        let fr = &self.fragmentation;
        writeln!(
            f,
            "frag ratio {} ({}), process ratio {}",
            opt_ratio(fr.ratio),
            fr.ratio_inputs,
            opt_ratio(fr.process_ratio)
        )?;

        writeln!(
            f,
            "\nthreads ({} running, tracked individually, of {} at most; elsewhere ≈ its blocks freed by others, \
             remote ≈ others' blocks it freed, both estimated)",
            self.shards.live, self.shards.capacity
        )?;
        writeln!(
            f,
            "  {:<32} {:>12} {:>12} {:>9} {:>11} {:>11} {:>10} {:>10}",
            "thread", "allocs", "frees", "reallocs", "allocated", "freed", "≈elsewhere", "≈remote"
        )?;
        for r in &self.threads {
            if r.kind != RowKind::Thread && r.allocations == 0 && r.deallocations == 0 {
                continue;
            }
            let e = if r.estimated { "≈" } else { "" };
            writeln!(
                f,
                "  {:<32} {:>12} {:>12} {:>9} {:>11} {:>11} {:>10} {:>10}",
                row_label(r),
                format!("{e}{}", r.allocations),
                format!("{e}{}", r.deallocations),
                format!("{e}{}", r.reallocations),
                Bytes(r.allocated_bytes),
                format!("{e}{}", Bytes(r.freed_bytes)),
                r.freed_elsewhere,
                if r.free_samples < MIN_SAMPLES_SHARE && r.remote_frees > 0 {
                    "few".to_owned()
                } else {
                    r.remote_frees.to_string()
                }
            )?;
        }

        writeln!(
            f,
            "\nsize classes (live; ≈xthread: estimated share of frees on another thread, \"few\" below \
             {MIN_SAMPLES_SHARE} samples)"
        )?;
        writeln!(
            f,
            "  {:>21} {:>12} {:>12} {:>10} {:>11} {:>11} {:>11} {:>7}",
            "request size", "allocs", "frees", "live", "live bytes", "usable", "internal", "≈xthread"
        )?;
        for c in &self.size_classes {
            let range = match c.max_size {
                Some(max) => format!("{}..={}", c.min_size, max),
                None => format!("> {}", c.min_size.saturating_sub(1)),
            };
            let e = if c.estimated { "≈" } else { "" };
            writeln!(
                f,
                "  {:>21} {:>12} {:>12} {:>10} {:>11} {:>11} {:>11} {:>7}",
                range,
                format!("{e}{}", c.allocations),
                format!("{e}{}", c.deallocations),
                format!("{e}{}", c.live_blocks),
                format!("{e}{}", Bytes(c.live_bytes)),
                format!("{e}{}", Bytes(c.usable_bytes)),
                format!("{e}{}", Bytes(c.internal_bytes)),
                match (c.cross_thread_ratio, c.cross_thread_samples) {
                    (None, 1..) => "few".to_owned(), // sampled, but too few to tell
                    (r, _) => opt_percent(r),
                }
            )?;
        }
        if let Some(o) = &self.origin {
            write_origin(f, o)?;
        }
        if let Some(s) = &self.sites {
            write_sites(f, s)?;
        }
        writeln!(f, "\nusable sizes: {}", self.usable_source)?;
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Bytes;

    #[test]
    fn bytes() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(5 << 30).to_string(), "5.0 GiB");
    }
}
