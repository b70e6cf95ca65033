//! How the crate writes figures for people: bytes, size-class ranges, estimates, shares and
//! durations. The text report, the diagnosis's findings, the report's warnings and the publisher's log
//! events all write through here, so a figure reads the same wherever it appears.
//!
//! Leaf module. Each writer is a small `Display` value, so it can go into `format!`, `write!` or a
//! padded table cell (`{:>10}`) without an intermediate `String`.

use core::fmt::{self, Display, Formatter};

/// The mark in front of an estimated figure.
pub(crate) const ESTIMATED: &str = "≈";

/// What stands in for an estimate with too few samples behind it (see `estimate`'s
/// `MIN_SAMPLES_*` rules).
pub(crate) const TOO_FEW: &str = "few";

/// A byte count in binary units with one decimal: `512 B`, `1.5 KiB`, `3.0 MiB`.
#[derive(Clone, Copy, Debug)]
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

/// A size class's request sizes: `64..=80 B`, `8 B` for a class of one size, `> 32768 B` for the last,
/// open class. `unit: false` leaves out the ` B` (a table column says it once).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClassRange {
    /// The smallest request size in the class.
    pub(crate) min: u64,
    /// The largest, or `None` for the open last class.
    pub(crate) max: Option<u64>,
    /// Whether to write the unit.
    pub(crate) unit: bool,
}

impl Display for ClassRange {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let unit = if self.unit { " B" } else { "" };
        let s = match self.max {
            Some(max) if max == self.min => format!("{max}{unit}"),
            Some(max) => format!("{}..={max}{unit}", self.min),
            None => format!("> {}{unit}", self.min.saturating_sub(1)),
        };
        f.pad(&s)
    }
}

/// A figure with the estimate mark in front when `estimated`: `≈1.5 KiB`, `1.5 KiB`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Approx<T>(pub(crate) T, pub(crate) bool);

impl<T: Display> Display for Approx<T> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = if self.1 { format!("{ESTIMATED}{}", self.0) } else { self.0.to_string() };
        f.pad(&s)
    }
}

/// A share as a percentage with `decimals` decimals: `Percent(0.257, 1)` is `25.7%`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Percent(pub(crate) f64, pub(crate) usize);

impl Display for Percent {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.pad(&format!("{:.*}%", self.1, self.0 * 100.0))
    }
}

/// A duration in nanoseconds, in whole units of the largest unit it reaches (truncated): `3 ms`,
/// `92 us`, `2 s`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Nanos(pub(crate) u64);

impl Display for Nanos {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = match self.0 {
            n if n >= 1_000_000_000 => format!("{} s", n / 1_000_000_000),
            n if n >= 1_000_000 => format!("{} ms", n / 1_000_000),
            n if n >= 1_000 => format!("{} us", n / 1_000),
            n => format!("{n} ns"),
        };
        f.pad(&s)
    }
}

/// A longer duration, rounded to its largest unit: `45 s`, `3 min`, `2 h`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span(pub(crate) core::time::Duration);

impl Display for Span {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs_f64();
        let s = match secs {
            s if s >= 5400.0 => format!("{} h", (s / 3600.0).round()),
            s if s >= 90.0 => format!("{} min", (s / 60.0).round()),
            s => format!("{} s", s.round()),
        };
        f.pad(&s)
    }
}

/// A signed byte count, as [`Bytes`] with its sign: `+33.0 MiB`, `-2.0 MiB`, `+512 B`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SignedBytes(pub(crate) i64);

impl Display for SignedBytes {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { '-' } else { '+' };
        f.pad(&format!("{sign}{}", Bytes(self.0.unsigned_abs())))
    }
}

/// A wall-clock time of day, UTC, from milliseconds since the Unix epoch: `14:03:10`, or with the
/// milliseconds when `millis` (`14:03:10.250`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeOfDay {
    pub(crate) unix_ms: u64,
    pub(crate) millis: bool,
}

impl Display for TimeOfDay {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let s = (self.unix_ms / 1000) % 86_400;
        let hms = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
        f.pad(&if self.millis { format!("{hms}.{:03}", self.unix_ms % 1000) } else { hms })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day_and_signed_bytes() {
        let at = 1_700_000_000_000 + 3_600_000 + 250;
        assert_eq!(TimeOfDay { unix_ms: at, millis: false }.to_string(), "23:13:20");
        assert_eq!(TimeOfDay { unix_ms: at, millis: true }.to_string(), "23:13:20.250");
        assert_eq!(SignedBytes(-(3 << 20)).to_string(), "-3.0 MiB");
        assert_eq!(SignedBytes(512).to_string(), "+512 B");
    }

    #[test]
    fn each_writer_reads_as_documented() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(5 << 30).to_string(), "5.0 GiB");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(3 << 20).to_string(), "3.0 MiB");
        assert_eq!(format!("{:>9}", Bytes(1536)), "  1.5 KiB");
        let range = |min, max, unit| ClassRange { min, max, unit }.to_string();
        assert_eq!(range(65, Some(80), true), "65..=80 B");
        assert_eq!(range(8, Some(8), true), "8 B");
        assert_eq!(range(32769, None, false), "> 32768");
        assert_eq!(Approx(Bytes(1536), true).to_string(), "≈1.5 KiB");
        assert_eq!(Approx(7, false).to_string(), "7");
        assert_eq!(Percent(0.257, 1).to_string(), "25.7%");
        assert_eq!(Percent(0.257, 0).to_string(), "26%");
        assert_eq!(Nanos(3_000_000).to_string(), "3 ms");
        assert_eq!(Nanos(92_681).to_string(), "92 us");
        assert_eq!(Nanos(2_000_000_000).to_string(), "2 s");
        assert_eq!(Nanos(999).to_string(), "999 ns");
        let span = |s| Span(core::time::Duration::from_secs(s)).to_string();
        assert_eq!((span(45), span(200), span(7200)), ("45 s".into(), "3 min".into(), "2 h".into()));
    }
}
