//! Configuration traps, and which allocator reads which environment variable: the vocabulary the
//! backends check their own variables in (`KnownIntrospect::env_traps`) and `frag::tune::check`
//! reports. Public as `frag::tune::{Trap, EnvReader}`.

use core::fmt;

use crate::backend::list::Backend;
use crate::backend::wrapped::WrappedBackend;

/// A configuration problem found by `frag::tune::check`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trap {
    /// An allocator's environment variable is set, but that allocator is not the one `Tracked`
    /// wraps, so the Rust heap ignores it.
    IgnoredEnvVar {
        /// The variable.
        name: String,
        /// The allocator that reads it.
        read_by: EnvReader,
        /// The wrapped allocator (`None`: no `Tracked` allocator has allocated yet).
        backend: Option<WrappedBackend>,
        /// What to do instead.
        hint: String,
    },
    /// A variable that looks like an allocator setting but is not one (a missing trailing `_`, an
    /// unknown mimalloc option): nothing reads it.
    MisspeltEnvVar {
        /// The variable.
        name: String,
        /// The name that would work, if there is one.
        did_you_mean: Option<String>,
    },
    /// A pair in jemalloc's options variable that jemalloc rejects (it prints a line to stderr and
    /// goes on without it).
    InvalidJemallocConf {
        /// The variable.
        var: &'static str,
        /// What is wrong.
        problem: String,
        /// What to change.
        fix: String,
    },
    /// jemalloc accepted an option but uses another value (it rounds and clips without saying so).
    JemallocAdjusted {
        /// The option.
        key: &'static str,
        /// The value asked for.
        asked: String,
        /// The value in force.
        used: String,
    },
    /// Transparent huge pages are set to `always`: the kernel backs heap ranges with 2 MiB pages,
    /// which fragmentation keeps from being returned, and `khugepaged` adds latency.
    ThpAlways,
}

impl Trap {
    /// What to do about it: the variable, value or setting that works.
    #[must_use]
    pub fn remedy(&self) -> String {
        match self {
            Self::IgnoredEnvVar { hint, .. } => hint.clone(),
            Self::MisspeltEnvVar { name, did_you_mean: Some(right) } => format!("rename {name} to {right}"),
            Self::MisspeltEnvVar { name, did_you_mean: None } => format!("remove {name}, or spell a real option"),
            Self::InvalidJemallocConf { fix, .. } => fix.clone(),
            Self::JemallocAdjusted { key, used, .. } => {
                format!("ask for a value jemalloc keeps ({key} is {used} in force), or accept it")
            }
            Self::ThpAlways => "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled".to_owned(),
        }
    }
}

impl fmt::Display for Trap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IgnoredEnvVar { name, read_by, backend, hint } => {
                let backend = match backend {
                    Some(WrappedBackend::Known(Backend::System)) => "glibc",
                    Some(b) => b.name(),
                    None => "no Tracked allocator",
                };
                write!(f, "{name} is set but is read by {read_by}, and the Rust heap uses {backend}: {hint}")
            }
            Self::MisspeltEnvVar { name, did_you_mean: Some(right) } => {
                write!(f, "{name} is set but nothing reads it: did you mean {right}?")
            }
            Self::MisspeltEnvVar { name, did_you_mean: None } => {
                write!(f, "{name} is set but is not an option of the allocator: it is ignored")
            }
            Self::InvalidJemallocConf { var, problem, .. } => {
                write!(f, "{var}: {problem}; jemalloc ignores this pair and goes on")
            }
            Self::JemallocAdjusted { key, asked, used } => {
                write!(f, "jemalloc option {key}: asked for {asked} but jemalloc uses {used}")
            }
            Self::ThpAlways => f.write_str(
                "transparent huge pages are set to `always`: fragmented heaps keep whole 2 MiB pages resident; \
                 `madvise` is the usual advice (/sys/kernel/mm/transparent_hugepage/enabled)",
            ),
        }
    }
}

/// The allocator an environment variable configures ([`Trap::IgnoredEnvVar`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EnvReader {
    /// jemalloc: `MALLOC_CONF` or `_RJEM_MALLOC_CONF`.
    Jemalloc,
    /// A jemalloc built with another symbol prefix than the linked one, which reads the other
    /// variable of the two.
    JemallocOtherPrefix,
    /// mimalloc: `MIMALLOC_*`.
    Mimalloc,
    /// glibc's malloc: `MALLOC_*_`, `GLIBC_TUNABLES=glibc.malloc.*`.
    GlibcMalloc,
}

impl fmt::Display for EnvReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Jemalloc => "jemalloc",
            Self::JemallocOtherPrefix => "jemalloc builds with another symbol prefix",
            Self::Mimalloc => "mimalloc",
            Self::GlibcMalloc => "glibc malloc",
        })
    }
}

impl EnvReader {
    /// The allocator that reads variable `name` (set to `value`), compiled in or not; `None` for a
    /// variable no allocator reads.
    #[must_use]
    pub(crate) fn of(name: &str, value: &str) -> Option<Self> {
        if JEMALLOC_VARS.contains(&name) {
            Some(Self::Jemalloc)
        } else if name.starts_with("MIMALLOC_") {
            Some(Self::Mimalloc)
        } else if GLIBC_VARS.contains(&name) || name == "GLIBC_TUNABLES" && value.contains("glibc.malloc.") {
            Some(Self::GlibcMalloc)
        } else {
            None
        }
    }

    /// What to do about a variable of this allocator when another one is wrapped.
    pub(crate) fn hint_when_ignored(self) -> &'static str {
        match self {
            Self::GlibcMalloc => "it still applies to C code that calls malloc directly",
            _ => "configure the wrapped allocator instead (see frag::tune)",
        }
    }
}

/// The variables jemalloc reads its options from: tikv-jemallocator's prefixed build reads the first,
/// an unprefixed one the second.
pub(crate) const JEMALLOC_VARS: [&str; 2] = ["_RJEM_MALLOC_CONF", "MALLOC_CONF"];

/// glibc's malloc environment variables (the thresholds really end in `_`).
pub(crate) const GLIBC_VARS: &[&str] = &[
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_PERTURB_",
    "MALLOC_CHECK_",
];
