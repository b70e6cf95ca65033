//! jemalloc's options variable: what it rejects and what it silently adjusts, checked against the
//! options in force.

use super::knobs::{JemallocConfig, conf_env_var, effective};
use crate::backend::Backend;
use crate::backend::tuning::{EnvReader, Trap};
use crate::backend::wrapped::WrappedBackend;

/// The traps in jemalloc's options variable `name` (set to `value`); `None` for a variable jemalloc
/// does not read.
pub(super) fn env_traps(name: &str, value: &str) -> Option<Vec<Trap>> {
    if EnvReader::of(name, value) != Some(EnvReader::Jemalloc) {
        return None;
    }
    let reads = conf_env_var();
    if name != reads {
        return Some(vec![Trap::IgnoredEnvVar {
            name: name.to_owned(),
            read_by: EnvReader::JemallocOtherPrefix,
            backend: Some(WrappedBackend::Known(Backend::Jemalloc)),
            hint: format!("this jemalloc (tikv-jemallocator) reads {reads}"),
        }]);
    }
    Some(conf_traps(reads, value))
}

/// What jemalloc rejects in `value`, and the options it uses with another value than asked.
fn conf_traps(var: &'static str, value: &str) -> Vec<Trap> {
    let (asked, errors) = JemallocConfig::parse_lenient(value);
    let mut traps: Vec<Trap> = errors
        .iter()
        .filter(|e| e.is_invalid_for_jemalloc())
        .map(|e| Trap::InvalidJemallocConf { var, problem: e.to_string(), fix: e.fix(var) })
        .collect();
    // A pair jemalloc rejects only when built without its profiler, which it tells in words of its own
    // ("Invalid conf pair") that do not say why.
    if asked.prof == Some(true) && !built_with_profiler() {
        traps.push(Trap::InvalidJemallocConf {
            var,
            problem: "prof:true, but this jemalloc was built without its profiler".to_owned(),
            fix: format!(
                "enable frag-alloc's feature `jemalloc-prof` (frag-alloc = {{ version = \"0.1\", features = \
                 [\"jemalloc-prof\"] }}), or take prof out of {var}"
            ),
        });
    }
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
            abort_conf => "abort_conf",
            prof => "prof",
            prof_active => "prof_active"
        );
    }
    traps
}

/// Whether this jemalloc was built with its profiler (`config.prof`; `false` where it cannot be read).
fn built_with_profiler() -> bool {
    // SAFETY: `config.prof` is a NUL-terminated mallctl name whose value is a `bool`.
    unsafe { tikv_jemalloc_ctl::raw::read::<bool>(b"config.prof\0") }.unwrap_or(false)
}
