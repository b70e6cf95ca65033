//! The traps in the process's environment: allocator variables the wrapped allocator does not read,
//! misspelt ones, what the wrapped allocator finds in its own (jemalloc options it rejected or
//! adjusted, unknown mimalloc options), and the kernel's THP mode.

use crate::backend::introspect::KnownIntrospect;
use crate::backend::list::with_backend;
use crate::backend::registry::Registration;
use crate::backend::tuning::GLIBC_VARS;
use crate::backend::tuning::{EnvReader, Trap};

/// The traps in an environment, for a given wrapped allocator.
pub(super) fn env_traps(wrapped: Option<Registration>, vars: &[(String, String)]) -> Vec<Trap> {
    let mut traps = Vec::new();
    let kind = wrapped.and_then(|r| r.backend);
    let backend = wrapped.map(|r| r.wrapped());
    for (name, value) in vars {
        if let Some(own) = kind.and_then(|b| with_backend!(b, A => A::env_traps(name, value))) {
            traps.extend(own);
        } else if let Some(read_by) = EnvReader::of(name, value) {
            let hint = read_by.hint_when_ignored().to_owned();
            traps.push(Trap::IgnoredEnvVar { name: name.clone(), read_by, backend, hint });
        } else if let Some(right) = GLIBC_VARS.iter().find(|v| v.strip_suffix('_') == Some(name.as_str())) {
            traps.push(Trap::MisspeltEnvVar { name: name.clone(), did_you_mean: Some((*right).to_owned()) });
        }
    }
    traps
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
    use crate::backend::Backend;

    fn known(backend: Backend) -> Registration {
        Registration { backend: Some(backend), type_name: "", introspect: None }
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
            Some(Registration { backend: None, type_name: "custom", introspect: None }),
            &env(&[("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")]),
        );
        assert!(
            matches!(&traps[..], [Trap::IgnoredEnvVar { read_by: EnvReader::GlibcMalloc, hint, .. }] if hint.contains("C code"))
        );
        assert!(
            env_traps(
                Some(Registration { backend: None, type_name: "custom", introspect: None }),
                &env(&[("GLIBC_TUNABLES", "glibc.rtld.x=1")])
            )
            .is_empty()
        );
    }
}
