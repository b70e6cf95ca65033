//! Configuration traps: settings that look applied but are not (an environment variable the wrapped
//! allocator never reads, a misspelt one, a jemalloc option it rejected or silently adjusted) and
//! system settings known to hurt fragmented heaps. What each trap is lives here; how the environment
//! is read, in `env`; the once-per-text log warning, in `warned`.

mod env;
mod warned;

use core::fmt;

use crate::backend::registry::registered;
use crate::backend::{Backend, WrappedBackend};

/// A configuration problem found by [`check`].
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

/// Finds configuration traps for the wrapped allocator: allocator environment variables it ignores
/// or that are misspelt, jemalloc options it rejected or adjusted, and transparent huge pages set
/// to `always`.
///
/// `frag::report()` checks once, the first time it runs, includes what it found in its
/// warnings and findings from then on, and emits each as a `tracing` warning; this function looks
/// again every time it is called.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<std::alloc::System> = frag::Tracked::new(std::alloc::System);
/// for trap in frag::tune::check() {
///     eprintln!("allocator configuration: {trap}");
/// }
/// ```
#[must_use]
pub fn check() -> Vec<Trap> {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
        .collect();
    let mut traps = env::env_traps(registered(), &vars);
    if env::read_thp_mode().as_deref() == Some("always") {
        traps.push(Trap::ThpAlways);
    }
    traps
}

/// The process's traps, checked once (by the first `report()`, outside the allocator and under its
/// reentrancy guard) and kept: the allocators read their environment and the kernel's THP mode at
/// start-up, and later reports stay pure reads (no environment lock, no `/sys` read, no log event).
/// [`check`] looks again.
pub(crate) fn checked() -> &'static [Trap] {
    static CHECKED: std::sync::OnceLock<Vec<Trap>> = std::sync::OnceLock::new();
    CHECKED.get_or_init(check_and_warn)
}

/// [`check`], emitting each trap not seen before as a `tracing` warning.
fn check_and_warn() -> Vec<Trap> {
    let traps = check();
    for trap in &traps {
        let text = trap.to_string();
        if warned::first_time(&text) {
            tracing::warn!(target: "frag", trap = ?trap, "allocator configuration: {text}");
        }
    }
    traps
}
