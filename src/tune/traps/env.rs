//! The traps in the process's environment: allocator variables the wrapped allocator does not read,
//! misspelt ones, jemalloc options it rejected or adjusted, and the kernel's THP mode.

use super::{EnvReader, Trap};
use crate::backend::Backend;
use crate::backend::registry::Registration;

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

/// The traps in an environment, for a given wrapped allocator.
pub(super) fn env_traps(wrapped: Option<Registration>, vars: &[(String, String)]) -> Vec<Trap> {
    let mut traps = Vec::new();
    let kind = wrapped.and_then(|r| r.backend);
    let backend = wrapped.map(|r| r.wrapped());
    let is_jemalloc = wraps_jemalloc(kind);
    for (name, value) in vars {
        if JEMALLOC_VARS.contains(&name.as_str()) {
            match jemalloc_var() {
                Some(reads) if is_jemalloc && reads == name => traps.extend(jemalloc_conf_traps(reads, value)),
                Some(reads) if is_jemalloc => traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: EnvReader::JemallocOtherPrefix,
                    backend,
                    hint: format!("this jemalloc (tikv-jemallocator) reads {reads}"),
                }),
                _ => traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: EnvReader::Jemalloc,
                    backend,
                    hint: "configure the wrapped allocator instead (see frag::tune)".to_owned(),
                }),
            }
        } else if let Some(option) = name.strip_prefix("MIMALLOC_") {
            if wraps_mimalloc(kind) {
                if !mimalloc_option(option) {
                    traps.push(Trap::MisspeltEnvVar { name: name.clone(), did_you_mean: None });
                }
            } else {
                traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: EnvReader::Mimalloc,
                    backend,
                    hint: "configure the wrapped allocator instead (see frag::tune)".to_owned(),
                });
            }
        } else if GLIBC_VARS.contains(&name.as_str()) || name == "GLIBC_TUNABLES" && value.contains("glibc.malloc.") {
            if kind != Some(Backend::System) {
                traps.push(Trap::IgnoredEnvVar {
                    name: name.clone(),
                    read_by: EnvReader::GlibcMalloc,
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

/// Whether the wrapped allocator is jemalloc (never in a build without it).
fn wraps_jemalloc(kind: Option<Backend>) -> bool {
    #[cfg(feature = "jemalloc")]
    return kind == Some(Backend::Jemalloc);
    #[cfg(not(feature = "jemalloc"))]
    {
        let _ = kind;
        false
    }
}

/// Whether the wrapped allocator is mimalloc (never in a build without it).
fn wraps_mimalloc(kind: Option<Backend>) -> bool {
    #[cfg(feature = "mimalloc")]
    return kind == Some(Backend::Mimalloc);
    #[cfg(not(feature = "mimalloc"))]
    {
        let _ = kind;
        false
    }
}

#[cfg(feature = "mimalloc")]
fn mimalloc_option(name: &str) -> bool {
    crate::backend::mimalloc::knobs::is_option_name(name)
}
#[cfg(not(feature = "mimalloc"))]
fn mimalloc_option(_: &str) -> bool {
    true
}

/// The variable the linked jemalloc reads, if jemalloc is compiled in.
fn jemalloc_var() -> Option<&'static str> {
    #[cfg(feature = "jemalloc")]
    return Some(crate::backend::jemalloc::knobs::conf_env_var());
    #[cfg(not(feature = "jemalloc"))]
    None
}

#[cfg(feature = "jemalloc")]
fn jemalloc_conf_traps(var: &'static str, value: &str) -> Vec<Trap> {
    use crate::backend::jemalloc::knobs::{JemallocConfig, effective};
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
pub(super) fn read_thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    thp_mode(&text).map(str::to_owned)
}

fn thp_mode(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
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
        assert!(
            matches!(&traps[0], Trap::IgnoredEnvVar { name, read_by: EnvReader::Jemalloc, .. } if name == "MALLOC_CONF")
        );
        assert!(matches!(&traps[1], Trap::IgnoredEnvVar { read_by: EnvReader::Mimalloc, .. }));
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
        assert!(traps.iter().any(|t| matches!(t, Trap::IgnoredEnvVar { read_by: EnvReader::GlibcMalloc, .. })));
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
            matches!(&traps[..], [Trap::IgnoredEnvVar { read_by: EnvReader::GlibcMalloc, hint, .. }] if hint.contains("C code"))
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
