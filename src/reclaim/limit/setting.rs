//! What a user or operator sets ([`MemoryLimit`], `FRAG_MEMORY_LIMIT`), and the bytes it comes to on
//! this machine.

use core::fmt;
use core::str::FromStr;

use crate::format::Bytes;
use crate::process;

/// The environment variable a default [`Reclaimer`](crate::reclaim::Reclaimer) reads its limit from.
pub const ENV_VAR: &str = "FRAG_MEMORY_LIMIT";

/// The accepted forms, in words: every refusal names them.
const FORMS: &str = "a size in bytes with an optional unit B, KiB, MiB, GiB or TiB, as GOMEMLIMIT takes it \
                     (\"536870912\", \"512MiB\", \"2GiB\"); a percentage of the memory cgroup's limit, above 0 and \
                     at most 100 (\"90%\"); \"cgroup\" for all of it; or \"off\"";

/// A soft memory limit for the [`Reclaimer`](crate::reclaim::Reclaimer): the resident bytes it keeps the
/// process under while it can, by returning free memory faster and more often as RSS nears it.
///
/// Parsed from text in the form Go's `GOMEMLIMIT` takes, plus a share of the memory cgroup's limit:
///
/// ```
/// use frag::reclaim::MemoryLimit;
///
/// assert_eq!("512MiB".parse::<MemoryLimit>()?, MemoryLimit::Bytes(512 << 20));
/// assert_eq!("2GiB".parse::<MemoryLimit>()?, MemoryLimit::Bytes(2 << 30));
/// assert_eq!("90%".parse::<MemoryLimit>()?, MemoryLimit::Cgroup { percent: 90.0 });
/// assert_eq!("cgroup".parse::<MemoryLimit>()?, MemoryLimit::cgroup());
/// assert!("512M".parse::<MemoryLimit>().is_err()); // GOMEMLIMIT's units only
/// # Ok::<(), frag::reclaim::LimitError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum MemoryLimit {
    /// This many bytes of RSS.
    Bytes(u64),
    /// This percentage (above 0, at most 100) of the limit of the process's memory cgroup: v2's
    /// `memory.high`, else `memory.max`; v1's `memory.limit_in_bytes`. The least of the process's
    /// own cgroup and its ancestors', read again every [`CGROUP_REREAD`](Self::CGROUP_REREAD), so a
    /// limit resized at run time is followed.
    Cgroup {
        /// The percentage of the cgroup's limit.
        percent: f64,
    },
}

impl MemoryLimit {
    /// How often a [`Cgroup`](Self::Cgroup) limit is read again while the reclaimer runs.
    pub const CGROUP_REREAD: core::time::Duration = core::time::Duration::from_secs(30);

    /// All of the memory cgroup's limit.
    #[must_use]
    pub const fn cgroup() -> Self {
        Self::Cgroup { percent: 100.0 }
    }

    /// The limit `FRAG_MEMORY_LIMIT` sets: `Ok(None)` when it is unset, empty or `off`.
    ///
    /// # Errors
    ///
    /// [`LimitError::Invalid`] for a value in none of the accepted forms, or of zero bytes.
    pub fn from_env() -> Result<Option<Self>, LimitError> {
        match std::env::var(ENV_VAR) {
            Ok(v) if v.trim().is_empty() || v.trim() == "off" => Ok(None),
            Ok(v) => v.parse().map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(v)) => {
                Err(LimitError::Invalid { value: v.to_string_lossy().into_owned(), reason: "not text" })
            }
        }
    }

    /// The limit in bytes on this machine, now.
    ///
    /// # Errors
    ///
    /// [`LimitError::NoCgroupLimit`] for a cgroup share where no memory cgroup limit applies;
    /// [`LimitError::AbovePhysical`] for a limit above the machine's memory, which could never be
    /// reached (a unit mistaken, most likely).
    pub fn resolve(&self) -> Result<u64, LimitError> {
        self.resolve_under("")
    }

    /// [`resolve`](Self::resolve), with `/proc` and `/sys` read under `root` (tests lay them out).
    pub(crate) fn resolve_under(&self, root: &str) -> Result<u64, LimitError> {
        let bytes = match *self {
            Self::Bytes(b) => b,
            Self::Cgroup { percent } => {
                let limit = process::cgroup_limit_under(root)
                    .map_err(|file| LimitError::Unreadable { file })?
                    .ok_or(LimitError::NoCgroupLimit)?;
                (limit.bytes as f64 * percent / 100.0) as u64
            }
        };
        if let Some(physical) = process::physical_memory_under(root).filter(|&p| bytes > p) {
            return Err(LimitError::AbovePhysical { bytes, physical });
        }
        if bytes == 0 {
            return Err(LimitError::Invalid { value: self.to_string(), reason: "a limit of zero bytes" });
        }
        Ok(bytes)
    }
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Bytes(b) => write!(f, "{b} B ({})", Bytes(b)),
            Self::Cgroup { percent } => write!(f, "{percent}% of the memory cgroup's limit"),
        }
    }
}

impl FromStr for MemoryLimit {
    type Err = LimitError;

    fn from_str(s: &str) -> Result<Self, LimitError> {
        let invalid = |reason| LimitError::Invalid { value: s.to_owned(), reason };
        let t = s.trim();
        if t == "cgroup" {
            return Ok(Self::cgroup());
        }
        if let Some(p) = t.strip_suffix('%') {
            let percent: f64 = p.trim().parse().map_err(|_| invalid("not a percentage"))?;
            return if percent > 0.0 && percent <= 100.0 {
                Ok(Self::Cgroup { percent })
            } else {
                Err(invalid("a percentage outside (0, 100]"))
            };
        }
        let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        let (number, unit) = t.split_at(digits);
        if number.is_empty() {
            return Err(invalid("no number"));
        }
        let shift = match unit {
            "" | "B" => 0,
            "KiB" => 10,
            "MiB" => 20,
            "GiB" => 30,
            "TiB" => 40,
            _ => return Err(invalid("an unknown unit")),
        };
        let n: u64 = number.parse().map_err(|_| invalid("too large"))?;
        let bytes = n.checked_mul(1 << shift).ok_or_else(|| invalid("too large"))?;
        if bytes == 0 {
            return Err(invalid("a limit of zero bytes"));
        }
        Ok(Self::Bytes(bytes))
    }
}

/// Why a memory limit was refused.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LimitError {
    /// The text is in none of the accepted forms, or sets zero bytes.
    Invalid {
        /// The text given.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A share of the memory cgroup's limit was asked for, and no memory cgroup limit applies to
    /// this process (no cgroup, or `max` all the way up).
    NoCgroupLimit,
    /// A memory cgroup file could not be read as a limit: it holds something other than a number of
    /// bytes or `max` (garbage, `-1`, an overflowing number), or the process's own cgroup's file is
    /// missing. A running [`Reclaimer`](crate::reclaim::Reclaimer) keeps the last limit it read meanwhile.
    Unreadable {
        /// The file, path and all.
        file: String,
    },
    /// The limit is above the machine's physical memory: RSS could never reach it.
    AbovePhysical {
        /// The limit.
        bytes: u64,
        /// The machine's memory (`MemTotal`).
        physical: u64,
    },
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid { value, reason } => write!(f, "memory limit {value:?}: {reason}; expected {FORMS}"),
            Self::NoCgroupLimit => f.write_str(
                "memory limit: a share of the memory cgroup's limit was asked for, but no memory cgroup limit \
                 applies to this process; give a size in bytes instead",
            ),
            Self::Unreadable { file } => {
                write!(f, "memory limit: {file} could not be read as a limit (neither a number of bytes nor \"max\")")
            }
            Self::AbovePhysical { bytes, physical } => write!(
                f,
                "memory limit of {} is above this machine's memory ({}): it could never be reached",
                Bytes(*bytes),
                Bytes(*physical)
            ),
        }
    }
}

impl std::error::Error for LimitError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reclaim::limit::layout::{GIB, Root, v2_app};

    #[test]
    fn the_go_forms_and_the_cgroup_share_parse() {
        for (text, bytes) in [("1", 1), ("1048576", 1 << 20), ("1B", 1), ("64KiB", 64 << 10), ("512MiB", 512 << 20)] {
            assert_eq!(text.parse::<MemoryLimit>(), Ok(MemoryLimit::Bytes(bytes)), "{text}");
        }
        assert_eq!(" 2GiB ".parse(), Ok(MemoryLimit::Bytes(2 << 30)));
        assert_eq!("1TiB".parse(), Ok(MemoryLimit::Bytes(1 << 40)));
        assert_eq!("90%".parse(), Ok(MemoryLimit::Cgroup { percent: 90.0 }));
        assert_eq!("12.5%".parse(), Ok(MemoryLimit::Cgroup { percent: 12.5 }));
        assert_eq!("cgroup".parse(), Ok(MemoryLimit::cgroup()));
    }

    #[test]
    fn bad_text_is_refused_with_the_accepted_forms() {
        for text in
            ["", "garbage", "512M", "512mib", "1.5GiB", "-1", "0", "0MiB", "0%", "101%", "x%", "GiB", "99999999999TiB"]
        {
            let e = text.parse::<MemoryLimit>().expect_err(text);
            assert!(matches!(e, LimitError::Invalid { .. }), "{text}: {e:?}");
            let message = e.to_string();
            assert!(message.contains("512MiB") && message.contains("90%") && message.contains("off"), "{message}");
        }
    }

    #[test]
    fn cgroup_v2_high_then_max_and_the_least_of_the_ancestors() {
        let r = Root::new("v2");
        r.write("proc/self/cgroup", "0::/kubepods/pod1/app\n");
        let own = "sys/fs/cgroup/kubepods/pod1/app";
        r.member(own);
        r.write(&format!("{own}/memory.current"), "123\n");
        r.write(&format!("{own}/memory.max"), "max\n");
        r.write(&format!("{own}/memory.high"), "max\n");
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::NoCgroupLimit), "max everywhere");
        r.write(&format!("{own}/memory.max"), &format!("{}\n", 4 * GIB));
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Ok(4 * GIB));
        r.write(&format!("{own}/memory.high"), &format!("{}\n", 3 * GIB));
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Ok(3 * GIB), "memory.high first");
        assert_eq!(MemoryLimit::Cgroup { percent: 50.0 }.resolve_under(r.path()), Ok(3 * GIB / 2));
        // The pod's limit covers its containers.
        r.write("sys/fs/cgroup/kubepods/pod1/memory.max", &format!("{}\n", 2 * GIB));
        let limit = process::cgroup_limit_under(r.path()).unwrap().unwrap();
        assert_eq!(limit.bytes, 2 * GIB);
        assert!(limit.file.ends_with("kubepods/pod1/memory.max"), "{}", limit.file);
        // Above the machine's 15.6 GiB: refused.
        r.write("sys/fs/cgroup/kubepods/pod1/memory.max", &format!("{}\n", 64 * GIB));
        r.write(&format!("{own}/memory.high"), "max\n");
        r.write(&format!("{own}/memory.max"), &format!("{}\n", 32 * GIB));
        assert!(matches!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::AbovePhysical { .. })));
    }

    #[test]
    fn cgroup_v1_limit_in_bytes_and_its_unlimited_value() {
        let r = Root::new("v1");
        r.write("proc/self/cgroup", "4:memory:/docker/abc\n1:cpu:/\n0::/\n");
        let own = "sys/fs/cgroup/memory/docker/abc";
        r.member(own);
        r.write(&format!("{own}/memory.limit_in_bytes"), "9223372036854771712\n");
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::NoCgroupLimit));
        r.write(&format!("{own}/memory.limit_in_bytes"), &format!("{}\n", GIB));
        assert_eq!(MemoryLimit::Cgroup { percent: 90.0 }.resolve_under(r.path()), Ok((GIB as f64 * 0.9) as u64));
    }

    #[test]
    fn missing_files_mean_no_cgroup_limit_and_bytes_need_none() {
        let r = Root::new("none");
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::NoCgroupLimit));
        r.write("proc/self/cgroup", "0::/app\n");
        // The v2 directory lacks the memory controller, and this process is not its member.
        r.write("sys/fs/cgroup/app/memory.max", "1000000\n");
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::NoCgroupLimit));
        assert_eq!(MemoryLimit::Bytes(GIB).resolve_under(r.path()), Ok(GIB));
        assert!(matches!(
            MemoryLimit::Bytes(1 << 40).resolve_under(r.path()),
            Err(LimitError::AbovePhysical { physical: 16_777_216_000, .. })
        ));
    }

    /// Garbage, `-1`, an overflowing number and a missing file are bad reads, named by their file;
    /// `max` and v1's largest value are no limit.
    #[test]
    fn bad_files_are_unreadable_not_unlimited() {
        let r = Root::new("bad");
        for junk in [&b"garbage\n"[..], b"-1\n", b"99999999999999999999999\n", b"", b"12 34", b"\xff\xfe"] {
            v2_app(&r, junk);
            let read = MemoryLimit::cgroup().resolve_under(r.path());
            assert!(
                matches!(&read, Err(LimitError::Unreadable { file }) if file.ends_with("app/memory.max")),
                "{junk:?}: {read:?}"
            );
        }
        v2_app(&r, b"max\n");
        assert_eq!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::NoCgroupLimit));
        std::fs::remove_file(r.0.join("sys/fs/cgroup/app/memory.max")).unwrap();
        assert!(matches!(MemoryLimit::cgroup().resolve_under(r.path()), Err(LimitError::Unreadable { .. })));
    }
}
