//! The history as a picture: the resident split as stacked areas over time, live bytes as a line,
//! each marked step with its label, and the memory limit and its target when one is set. One SVG
//! document, no script, no asset from elsewhere, so that a browser renders it as served.

use core::fmt::Write as _;

use super::History;
use super::snapshot::Snapshot;
use crate::backend::heap_split::Part;
use crate::format::{Bytes, TimeOfDay};

/// The picture's size, in pixels.
const WIDTH: f64 = 960.0;
/// See [`WIDTH`].
const HEIGHT: f64 = 480.0;
/// The plot's margins: left, right, top, bottom (the bottom one holds the time axis and the legend).
const MARGIN: [f64; 4] = [72.0, 24.0, 28.0, 72.0];

/// The parts, bottom up, with their fill colours; the rest of resident memory (what no part
/// explains) is drawn above them in [`UNEXPLAINED`].
const PART_COLOURS: [(Part, &str); 7] = [
    (Part::Live, "#4e79a7"),
    (Part::Rounding, "#a0cbe8"),
    (Part::Frag, "#b07aa1"),
    (Part::Holes, "#e15759"),
    (Part::Reclaimable, "#f28e2b"),
    (Part::Metadata, "#76b7b2"),
    (Part::OutsideHeap, "#bab0ac"),
];
/// The fill of resident memory no part explains.
const UNEXPLAINED: &str = "#dcdcdc";
/// The colour of the line of live bytes.
const LIVE_LINE: &str = "#1b2f4a";
/// The colour of a step's marker and label.
const STEP_COLOUR: &str = "#6a3d9a";
/// The colour of the limit's line (its target's is dashed).
const LIMIT_COLOUR: &str = "#c00000";

/// `s` with the characters XML gives a meaning escaped.
fn escaped(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The heights a snapshot stacks: each part's bytes bottom up, then what none explains.
fn stack(s: &Snapshot) -> Option<[u64; PART_COLOURS.len() + 1]> {
    let split = s.split?;
    let mut out = [0; PART_COLOURS.len() + 1];
    for (o, (part, _)) in out.iter_mut().zip(PART_COLOURS) {
        *o = split.bytes(part);
    }
    let explained: u64 = out.iter().sum();
    out[PART_COLOURS.len()] = split.rss_bytes.saturating_sub(explained);
    Some(out)
}

/// The axis' tick for a highest figure of `v`: the power of two at or above a fifth of it (3 to 5
/// ticks, each a round figure in binary units).
fn tick(v: u64) -> u64 {
    (v / 5).max(1).next_power_of_two()
}

impl History {
    /// The history as an SVG document: the resident split of each snapshot as stacked areas over
    /// time (what no part explains on top, in grey), live bytes as a dark line, each marked step as
    /// a vertical line with its label, and the limit and its target as horizontal lines when a
    /// reclaimer keeps one. Self-contained: no script, no external asset. Served at
    /// `GET .../debug/frag/history.svg` by `profile::http` (feature `http`).
    ///
    /// ```
    /// let svg = frag::history::History::new().svg();
    /// assert!(svg.starts_with("<svg") && svg.contains("no rounds recorded yet"));
    /// ```
    #[must_use]
    pub fn svg(&self) -> String {
        let [left, right, top, bottom] = MARGIN;
        let (plot_w, plot_h) = (WIDTH - left - right, HEIGHT - top - bottom);
        let mut out = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
             viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\n\
             <rect width=\"{WIDTH}\" height=\"{HEIGHT}\" fill=\"#ffffff\"/>\n\
             <text x=\"{left}\" y=\"18\" font-size=\"13\" font-weight=\"bold\">frag: resident memory by part</text>\n"
        );
        let snaps: Vec<&Snapshot> = self.snapshots().filter(|s| s.split.is_some()).collect();
        let (Some(first), Some(last)) = (snaps.first(), snaps.last()) else {
            out += &format!("<text x=\"{left}\" y=\"{}\">no rounds recorded yet</text>\n</svg>\n", top + 40.0);
            return out;
        };
        let (t0, t1) = (first.to.as_secs_f64(), last.to.as_secs_f64().max(first.to.as_secs_f64() + 0.001));
        // Times of day to the millisecond where the history spans under a minute (a test's rounds).
        let fine = t1 - t0 < 60.0;
        let limit = last.limit;
        let highest = snaps
            .iter()
            .map(|s| s.split.map_or(0, |p| p.rss_bytes).max(s.allocated_bytes))
            .chain(limit.map(|(l, _)| l))
            .max()
            .unwrap_or(1)
            .max(1);
        let y_max = highest as f64 * 1.08;
        let x = |t: f64| left + (t - t0) / (t1 - t0) * plot_w;
        let y = |b: f64| top + plot_h - b / y_max * plot_h;

        // The axes: bytes on the left, times of day below.
        let step = tick(highest);
        let mut v = 0;
        while (v as f64) <= y_max {
            let yy = y(v as f64);
            let _ = writeln!(
                out,
                "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#eeeeee\"/>\
                 <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left + plot_w,
                left - 6.0,
                yy + 4.0,
                Bytes(v)
            );
            v += step;
        }
        // Five times evenly spaced, on the wall clock of the last snapshot.
        for i in 0..=4 {
            let t = t0 + (t1 - t0) * f64::from(i) / 4.0;
            let unix_ms = last.unix_ms.saturating_sub(((last.to.as_secs_f64() - t).max(0.0) * 1000.0) as u64);
            let anchor = match i {
                0 => "start",
                4 => "end",
                _ => "middle",
            };
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{} UTC</text>",
                x(t),
                top + plot_h + 16.0,
                TimeOfDay { unix_ms, millis: fine }
            );
        }

        // The stacked parts: each an area between the running sums below and above it.
        let stacks: Vec<(f64, [u64; PART_COLOURS.len() + 1])> =
            snaps.iter().filter_map(|s| Some((s.to.as_secs_f64(), stack(s)?))).collect();
        let colours = PART_COLOURS.iter().map(|(_, c)| *c).chain([UNEXPLAINED]);
        for (i, colour) in colours.enumerate() {
            let sum = |h: &[u64], upto: usize| h[..upto].iter().sum::<u64>() as f64;
            let mut points = String::new();
            for (t, h) in &stacks {
                let _ = write!(points, "{:.1},{:.1} ", x(*t), y(sum(h, i + 1)));
            }
            for (t, h) in stacks.iter().rev() {
                let _ = write!(points, "{:.1},{:.1} ", x(*t), y(sum(h, i)));
            }
            let _ = writeln!(out, "<polygon points=\"{}\" fill=\"{colour}\" stroke=\"none\"/>", points.trim_end());
        }

        // Live bytes as a line.
        let line: Vec<String> =
            snaps.iter().map(|s| format!("{:.1},{:.1}", x(s.to.as_secs_f64()), y(s.allocated_bytes as f64))).collect();
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{LIVE_LINE}\" stroke-width=\"2\"/>",
            line.join(" ")
        );

        // The limit and its target.
        if let Some((bytes, target)) = limit {
            for (b, dash, name) in [(bytes, "", "limit"), (target, " stroke-dasharray=\"6 4\"", "target")] {
                let yy = y(b as f64);
                let _ = writeln!(
                    out,
                    "<line x1=\"{left}\" x2=\"{}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"{LIMIT_COLOUR}\" \
                     stroke-width=\"1.5\"{dash}/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" \
                     fill=\"{LIMIT_COLOUR}\">{name} {}</text>",
                    left + plot_w,
                    left + plot_w - 4.0,
                    yy - 4.0,
                    Bytes(b)
                );
            }
        }

        // The steps, each a vertical line and its label, the labels stepping down so that
        // neighbours do not overlap.
        for (i, step) in self.steps().filter(|s| s.after.as_secs_f64() >= t0).enumerate() {
            let xx = x(step.after.as_secs_f64());
            let ly = top + 14.0 + (i % 4) as f64 * 14.0;
            let (anchor, tx) = if xx > left + plot_w / 2.0 { ("end", xx - 4.0) } else { ("start", xx + 4.0) };
            let _ = writeln!(
                out,
                "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{top}\" y2=\"{:.1}\" stroke=\"{STEP_COLOUR}\" \
                 stroke-width=\"2\" stroke-dasharray=\"4 3\"/><text class=\"step\" x=\"{tx:.1}\" y=\"{ly:.1}\" \
                 text-anchor=\"{anchor}\" fill=\"{STEP_COLOUR}\">{}</text>",
                top + plot_h,
                escaped(&step.label)
            );
        }

        // The legend.
        let mut lx = left;
        let ly = HEIGHT - 22.0;
        let names = PART_COLOURS.iter().map(|(p, c)| (p.name(), *c)).chain([("unexplained", UNEXPLAINED)]);
        for (name, colour) in names {
            let _ = writeln!(
                out,
                "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\
                 <text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
                ly - 10.0,
                lx + 16.0,
                name.replace('_', " ")
            );
            lx += 22.0 + 7.0 * name.len() as f64;
        }
        let _ = writeln!(
            out,
            "<line x1=\"{lx:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{LIVE_LINE}\" stroke-width=\"2\"/>\
             <text x=\"{:.1}\" y=\"{ly:.1}\">live (line)</text>",
            lx + 14.0,
            ly - 4.0,
            ly - 4.0,
            lx + 18.0
        );
        out += "</svg>\n";
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::snapshot::Split;
    use super::*;
    use core::time::Duration;

    const MIB: u64 = 1 << 20;

    fn round(i: u64, live: u64, limit: Option<(u64, u64)>) -> Snapshot {
        let split =
            Split { rss_bytes: (live + 30) * MIB, live_bytes: live * MIB, holes_bytes: 20 * MIB, ..Split::default() };
        Snapshot { split: Some(split), limit, ..Snapshot::bare(5 * i, split.rss_bytes, split.live_bytes) }
    }

    /// The limit and its target are drawn at their heights, a label's markup is escaped, and each
    /// part is an area.
    #[test]
    fn the_limit_its_target_and_an_escaped_label() {
        let mut h = History::new();
        for i in 0..20 {
            h.record(round(i, if i < 10 { 100 } else { 200 }, Some((400 * MIB, 360 * MIB))));
        }
        let mut c = h.compare(Duration::from_secs(45), Duration::from_secs(60)).unwrap();
        c.sites.clear();
        h.mark(&c);
        h.steps.back_mut().unwrap().label = "a <b> & c".into();
        let svg = h.svg();
        assert!(svg.contains(">limit 400.0 MiB</text>") && svg.contains(">target 360.0 MiB</text>"), "{svg}");
        assert!(svg.contains(">a &lt;b&gt; &amp; c</text>"), "{svg}");
        assert_eq!(svg.matches("<polygon").count(), PART_COLOURS.len() + 1);
        assert_eq!(svg.matches(&format!("stroke=\"{STEP_COLOUR}\"")).count(), 1);
        assert!(!svg.contains("<script"));
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick(100 * MIB), 32 * MIB);
        assert_eq!(tick(3), 1);
    }
}
