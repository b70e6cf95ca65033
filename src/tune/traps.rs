//! Configuration traps: settings that look applied but are not (an environment variable the wrapped
//! allocator never reads, a misspelt one, a jemalloc option it rejected or silently adjusted) and
//! system settings known to hurt fragmented heaps.

use core::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::backend::registry::{Registration, registered};

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
        read_by: &'static str,
        /// The wrapped allocator.
        backend: &'static str,
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

const JEMALLOC_VARS: [&str; 2] = ["_RJEM_MALLOC_CONF", "MALLOC_CONF"];

/// glibc's malloc environment variables (the thresholds really end in `_`).
const GLIBC_VARS: &[&str] = &[
    "MALLOC_ARENA_MAX",
    "MALLOC_ARENA_TEST",
    "MALLOC_TRIM_THRESHOLD_",
    "MALLOC_TOP_PAD_",
    "MALLOC_MMAP_THRESHOLD_",
    "MALLOC_MMAP_MAX_",
    "MALLOC_PERTURB_",
    "MALLOC_CHECK_",
];

/// Finds configuration traps for the wrapped allocator: allocator environment variables it ignores
/// or that are misspelt, jemalloc options it rejected or adjusted, and transparent huge pages set
/// to `always`.
///
/// [`report()`](crate::report) checks once, the first time it runs, includes what it found in its
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
    let mut traps = env_traps(registered(), &vars);
    if read_thp_mode().as_deref() == Some("always") {
        traps.push(Trap::ThpAlways);
    }
    traps
}

/// The traps in an environment, for a given wrapped allocator.
pub(crate) fn env_traps(wrapped: Option<Registration>, vars: &[(String, String)]) -> Vec<Trap> {
    let mut traps = Vec::new();
    let kind = wrapped.map(|r| r.backend);
    let backend = match wrapped {
        Some(r) if r.backend == Some(Backend::System) => "glibc",
        Some(r) => r.wrapped().name(),
        None => "no Tracked allocator",
    };
    let is_jemalloc = jemalloc_var().is_some() && is_backend(kind, "jemalloc");
    for (name, value) in vars {
        if JEMALLOC_VARS.contains(&name.as_str()) {
            match jemalloc_var() {
                Some(reads) if is_jemalloc && reads == name => traps.extend(jemalloc_conf_traps(reads, value)),
                Some(reads) if is_jemalloc => traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: "jemalloc builds with another symbol prefix",
                    backend,
                    hint: format!("this jemalloc (tikv-jemallocator) reads {reads}"),
                }),
                _ => traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: "jemalloc",
                    backend,
                    hint: "configure the wrapped allocator instead (see frag::tune)".to_owned(),
                }),
            }
        } else if let Some(option) = name.strip_prefix("MIMALLOC_") {
            if is_backend(kind, "mimalloc") {
                if !mimalloc_option(option) {
                    traps.push(Trap::MisspeltEnvVar { name: name.clone(), did_you_mean: None });
                }
            } else {
                traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: "mimalloc",
                    backend,
                    hint: "configure the wrapped allocator instead (see frag::tune)".to_owned(),
                });
            }
        } else if GLIBC_VARS.contains(&name.as_str()) || name == "GLIBC_TUNABLES" && value.contains("glibc.malloc.") {
            if kind != Some(Some(Backend::System)) {
                traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: "glibc malloc",
                    backend,
                    hint: "it still applies to C code that calls malloc directly".to_owned(),
                });
            }
        } else if let Some(right) = GLIBC_VARS.iter().find(|v| v.strip_suffix('_') == Some(name.as_str())) {
            traps.push(Trap::MisspeltEnvVar { name: name.clone(), did_you_mean: Some((*right).to_owned()) });
        }
    }
    traps
}

/// Whether `kind` is the backend named `name` (matched by name: the variant exists only when its
/// feature is on).
fn is_backend(kind: Option<Option<Backend>>, name: &str) -> bool {
    matches!(kind, Some(Some(b)) if b.name() == name)
}

#[cfg(feature = "mimalloc")]
fn mimalloc_option(name: &str) -> bool {
    super::mimalloc::is_option_name(name)
}
#[cfg(not(feature = "mimalloc"))]
fn mimalloc_option(_: &str) -> bool {
    true
}

/// The variable the linked jemalloc reads, if jemalloc is compiled in.
fn jemalloc_var() -> Option<&'static str> {
    #[cfg(feature = "jemalloc")]
    return Some(super::jemalloc::conf_env_var());
    #[cfg(not(feature = "jemalloc"))]
    None
}

#[cfg(feature = "jemalloc")]
fn jemalloc_conf_traps(var: &'static str, value: &str) -> Vec<Trap> {
    use super::jemalloc::{JemallocConfig, effective};
    let (asked, errors) = JemallocConfig::parse_lenient(value);
    let mut traps: Vec<Trap> = errors
        .iter()
        .filter(|e| e.is_invalid_for_jemalloc())
        .map(|e| Trap::InvalidJemallocConf { var, problem: e.to_string(), fix: e.fix(var) })
        .collect();
    if let Ok(used) = effective() {
        let used = used.opt;
        macro_rules! compare {
            ($($field:ident => $key:literal),+) => {$(
                if let (Some(a), Some(u)) = (asked.$field, used.$field) {
                    if a != u {
                        traps.push(Trap::JemallocAdjusted { key: $key, asked: a.to_string(), used: u.to_string() });
                    }
                }
            )+};
        }
        compare!(
            background_thread => "background_thread",
            max_background_threads => "max_background_threads",
            dirty_decay => "dirty_decay_ms",
            muzzy_decay => "muzzy_decay_ms",
            tcache => "tcache",
            tcache_max => "tcache_max",
            narenas => "narenas",
            retain => "retain",
            oversize_threshold => "oversize_threshold",
            percpu_arena => "percpu_arena",
            thp => "thp",
            metadata_thp => "metadata_thp",
            abort_conf => "abort_conf"
        );
    }
    traps
}
#[cfg(not(feature = "jemalloc"))]
fn jemalloc_conf_traps(_: &'static str, _: &str) -> Vec<Trap> {
    Vec::new()
}

/// The bracketed mode of `/sys/kernel/mm/transparent_hugepage/enabled` (`always`, `madvise`, `never`).
fn read_thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    thp_mode(&text).map(str::to_owned)
}

fn thp_mode(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

/// Traps already emitted as `tracing` warnings, by a hash of their text. Lock-free on purpose: a
/// process that forks while another thread is in here would leave a held lock to its child, whose
/// next report would wait for it forever.
static WARNED: [AtomicU64; WARNED_CAPACITY] = [const { AtomicU64::new(0) }; WARNED_CAPACITY];
const WARNED_CAPACITY: usize = 64;

/// Whether `text` is seen here for the first time (always `true` once `WARNED` is full: repeated
/// warnings are better than silence).
fn first_time(text: &str) -> bool {
    // FNV-1a, with the low bit set so that no text hashes to the empty marker 0.
    let hash =
        text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)) | 1;
    for slot in &WARNED {
        match slot.compare_exchange(0, hash, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(seen) if seen == hash => return false,
            Err(_) => {}
        }
    }
    true
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
        if first_time(&text) {
            tracing::warn!(target: "frag", trap = ?trap, "allocator configuration: {text}");
        }
    }
    traps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(backend: Backend) -> Registration {
        Registration { backend: Some(backend), type_name: "", probe: None }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn each_text_is_new_once() {
        assert!(first_time("a trap seen by this test only"));
        assert!(!first_time("a trap seen by this test only"));
        assert!(first_time("another trap seen by this test only"));
    }

    #[test]
    fn thp_mode_is_the_bracketed_word() {
        assert_eq!(thp_mode("always [madvise] never\n"), Some("madvise"));
        assert_eq!(thp_mode("[always] madvise never\n"), Some("always"));
        assert_eq!(thp_mode("garbage"), None);
    }

    #[test]
    fn variables_of_other_allocators_are_ignored() {
        let traps = env_traps(
            Some(known(Backend::System)),
            &env(&[("MALLOC_CONF", "x"), ("MIMALLOC_PURGE_DELAY", "0"), ("MALLOC_ARENA_MAX", "2"), ("PATH", "/")]),
        );
        assert_eq!(traps.len(), 2, "{traps:?}");
        assert!(matches!(&traps[0], Trap::IgnoredEnvVar { name, read_by: "jemalloc", .. } if name == "MALLOC_CONF"));
        assert!(matches!(&traps[1], Trap::IgnoredEnvVar { read_by: "mimalloc", .. }));
    }

    /// Under mimalloc its own variables are read, and an unknown option name is called out.
    #[cfg(feature = "mimalloc")]
    #[test]
    fn mimalloc_variables_are_checked_under_mimalloc() {
        let traps = env_traps(
            Some(known(Backend::Mimalloc)),
            &env(&[("MIMALLOC_PURGE_DELAY", "0"), ("MIMALLOC_PURGE_DELAYY", "0"), ("MALLOC_ARENA_MAX", "2")]),
        );
        assert_eq!(traps.len(), 2, "{traps:?}");
        assert!(traps.contains(&Trap::MisspeltEnvVar { name: "MIMALLOC_PURGE_DELAYY".to_owned(), did_you_mean: None }));
        assert!(traps.iter().any(|t| matches!(t, Trap::IgnoredEnvVar { read_by: "glibc malloc", .. })));
    }

    #[test]
    fn glibc_variables_need_their_trailing_underscore() {
        let traps =
            env_traps(Some(known(Backend::System)), &env(&[("MALLOC_TRIM_THRESHOLD", "0"), ("MALLOC_TOP_PAD_", "0")]));
        assert_eq!(
            traps,
            vec![Trap::MisspeltEnvVar {
                name: "MALLOC_TRIM_THRESHOLD".to_owned(),
                did_you_mean: Some("MALLOC_TRIM_THRESHOLD_".to_owned())
            }]
        );
    }

    #[test]
    fn glibc_variables_under_another_allocator_only_reach_c_code() {
        let traps = env_traps(
            Some(Registration { backend: None, type_name: "custom", probe: None }),
            &env(&[("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")]),
        );
        assert!(
            matches!(&traps[..], [Trap::IgnoredEnvVar { read_by: "glibc malloc", hint, .. }] if hint.contains("C code"))
        );
        assert!(
            env_traps(
                Some(Registration { backend: None, type_name: "custom", probe: None }),
                &env(&[("GLIBC_TUNABLES", "glibc.rtld.x=1")])
            )
            .is_empty()
        );
    }
}
