//! Reading a `malloc_conf` string (e.g. the `_RJEM_MALLOC_CONF` value) the way jemalloc does, with
//! typed errors where jemalloc only prints a line to stderr and goes on.

use core::fmt;
use core::str::FromStr;

use super::conf::{JemallocConfig, MetadataThp, PercpuArena, Thp};
use crate::backend::tuning::Decay;

/// What is wrong with a `malloc_conf` string.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfError {
    /// A comma-separated item is not `key:value`.
    Syntax {
        /// The item as written.
        pair: String,
    },
    /// jemalloc has no option of this name (it would print "Invalid conf pair" and ignore it).
    UnknownKey {
        /// The key as written.
        key: String,
        /// A known option with a similar name.
        did_you_mean: Option<&'static str>,
    },
    /// jemalloc knows the option but not this value (it would ignore the pair, or clip it).
    InvalidValue {
        /// The option.
        key: String,
        /// The value as written.
        value: String,
        /// What jemalloc accepts.
        expected: &'static str,
    },
    /// A valid jemalloc option that [`JemallocConfig`] does not model (profiling, debugging and
    /// experimental options). Not an error for jemalloc.
    Unmodelled {
        /// The option.
        key: String,
    },
}

impl ConfError {
    /// Whether jemalloc itself would reject or change this pair; `false` only for
    /// [`Unmodelled`](Self::Unmodelled).
    #[must_use]
    pub fn is_invalid_for_jemalloc(&self) -> bool {
        !matches!(self, Self::Unmodelled { .. })
    }

    /// What to change in the variable `var` that holds the pair.
    #[must_use]
    pub fn fix(&self, var: &str) -> String {
        match self {
            Self::Syntax { pair } => format!("write {pair:?} as key:value in {var}, or remove it"),
            Self::UnknownKey { key, did_you_mean: Some(k) } => format!("rename {key:?} to {k:?} in {var}"),
            Self::UnknownKey { key, did_you_mean: None } => format!("remove {key:?} from {var}"),
            Self::InvalidValue { key, expected, .. } => format!("give {key} {expected} in {var}"),
            Self::Unmodelled { key } => format!("nothing: jemalloc reads {key} (frag does not model it)"),
        }
    }
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax { pair } => write!(f, "{pair:?} is not a key:value pair"),
            Self::UnknownKey { key, did_you_mean: Some(k) } => {
                write!(f, "unknown jemalloc option {key:?} (did you mean {k:?}?)")
            }
            Self::UnknownKey { key, did_you_mean: None } => write!(f, "unknown jemalloc option {key:?}"),
            Self::InvalidValue { key, value, expected } => {
                write!(f, "invalid value {value:?} for jemalloc option {key}: expected {expected}")
            }
            Self::Unmodelled { key } => {
                write!(f, "jemalloc option {key:?} is valid but not modelled by JemallocConfig")
            }
        }
    }
}

impl std::error::Error for ConfError {}

/// Every option the bundled jemalloc parses (tikv-jemalloc-sys 0.7, jemalloc 5.3 series), for telling
/// an unmodelled option from a typo.
const JEMALLOC_KEYS: &[&str] = &[
    "abort",
    "abort_conf",
    "background_thread",
    "bin_shards",
    "cache_oblivious",
    "calloc_madvise_threshold",
    "confirm_conf",
    "debug_double_free_max_scan",
    "dirty_decay_ms",
    "disable_large_size_classes",
    "dss",
    "experimental_hpa_enforce_hugify",
    "experimental_hpa_max_purge_nhp",
    "experimental_hpa_start_huge_if_thp_always",
    "experimental_infallible_new",
    "experimental_tcache_gc",
    "hpa",
    "hpa_dirty_mult",
    "hpa_hugification_threshold",
    "hpa_hugification_threshold_ratio",
    "hpa_hugify_delay_ms",
    "hpa_hugify_sync",
    "hpa_min_purge_delay_ms",
    "hpa_min_purge_interval_ms",
    "hpa_purge_threshold",
    "hpa_purge_threshold_ratio",
    "hpa_sec_batch_fill_extra",
    "hpa_sec_max_alloc",
    "hpa_sec_max_bytes",
    "hpa_sec_nshards",
    "hpa_slab_max_alloc",
    "huge_arena_pac_thp",
    "junk",
    "lg_extent_max_active_fit",
    "lg_prof_interval",
    "lg_prof_sample",
    "lg_san_uaf_align",
    "lg_tcache_flush_large_div",
    "lg_tcache_flush_small_div",
    "lg_tcache_max",
    "lg_tcache_nslots_mul",
    "log",
    "max_background_threads",
    "metadata_thp",
    "mutex_max_spin",
    "muzzy_decay_ms",
    "narenas",
    "narenas_ratio",
    "oversize_threshold",
    "percpu_arena",
    "process_madvise_max_batch",
    "prof",
    "prof_accum",
    "prof_active",
    "prof_bt_max",
    "prof_final",
    "prof_gdump",
    "prof_leak",
    "prof_leak_error",
    "prof_log",
    "prof_pid_namespace",
    "prof_prefix",
    "prof_recent_alloc_max",
    "prof_stats",
    "prof_sys_thread_name",
    "prof_thread_active_init",
    "prof_time_resolution",
    "prof_unbias",
    "retain",
    "san_guard_large",
    "san_guard_small",
    "slab_sizes",
    "stats_interval",
    "stats_interval_opts",
    "stats_print",
    "stats_print_opts",
    "tcache",
    "tcache_gc_delay_bytes",
    "tcache_gc_incr_bytes",
    "tcache_max",
    "tcache_ncached_max",
    "tcache_nslots_large",
    "tcache_nslots_small_max",
    "tcache_nslots_small_min",
    "thp",
    "trust_madvise",
    "utrace",
    "xmalloc",
    "zero",
    "zero_realloc",
];

const BOOL: &str = "true or false";
const DECAY: &str = "-1 (never), 0 (immediately) or a number of milliseconds";
const COUNT: &str = "a positive integer";
const BYTES: &str = "a number of bytes";

/// Reads a number the way jemalloc's `strtoumax(.., 0)` does: `0x` hexadecimal, a leading `0` octal.
fn unsigned(s: &str) -> Option<u64> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else if s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

fn signed(s: &str) -> Option<i64> {
    match s.strip_prefix('-') {
        Some(rest) => unsigned(rest).and_then(|v| i64::try_from(v).ok()).map(|v| -v),
        None => unsigned(s).and_then(|v| i64::try_from(v).ok()),
    }
}

fn did_you_mean(key: &str) -> Option<&'static str> {
    let key = key.to_ascii_lowercase();
    JEMALLOC_KEYS
        .iter()
        .map(|k| (distance(&key, k), *k))
        .filter(|(d, k)| *d <= 2 || k.starts_with(key.as_str()) && key.len() >= 4)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance, for suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (prev + usize::from(ca != cb)).min(row[j] + 1).min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

impl JemallocConfig {
    /// Parses `s`, collecting every problem instead of stopping at the first: the modelled options
    /// that were valid, and one [`ConfError`] per pair that was not (including
    /// [`ConfError::Unmodelled`] for valid options this type does not hold). Later pairs override
    /// earlier ones, as in jemalloc.
    #[must_use]
    pub fn parse_lenient(s: &str) -> (Self, Vec<ConfError>) {
        let mut conf = Self::new();
        let mut errors = Vec::new();
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once(':') else {
                errors.push(ConfError::Syntax { pair: pair.to_owned() });
                continue;
            };
            if let Err(e) = conf.set(key, value) {
                errors.push(e);
            }
        }
        (conf, errors)
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), ConfError> {
        let bad = |expected| ConfError::InvalidValue { key: key.to_owned(), value: value.to_owned(), expected };
        let boolean = || match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad(BOOL)),
        };
        let decay = || signed(value).and_then(Decay::from_millis).ok_or_else(|| bad(DECAY));
        let bytes = || unsigned(value).and_then(|v| usize::try_from(v).ok()).ok_or_else(|| bad(BYTES));
        match key {
            "background_thread" => self.background_thread = Some(boolean()?),
            "max_background_threads" => {
                self.max_background_threads = Some(
                    unsigned(value)
                        .and_then(|v| usize::try_from(v).ok())
                        .filter(|v| *v > 0)
                        .ok_or_else(|| bad(COUNT))?,
                );
            }
            "dirty_decay_ms" => self.dirty_decay = Some(decay()?),
            "muzzy_decay_ms" => self.muzzy_decay = Some(decay()?),
            "tcache" => self.tcache = Some(boolean()?),
            "tcache_max" => self.tcache_max = Some(bytes()?),
            "narenas" if value == "default" => self.narenas = None,
            "narenas" => {
                self.narenas = Some(
                    unsigned(value)
                        .and_then(|v| u32::try_from(v).ok())
                        .filter(|v| *v > 0)
                        .ok_or_else(|| bad("a positive integer or \"default\""))?,
                );
            }
            "retain" => self.retain = Some(boolean()?),
            "oversize_threshold" => self.oversize_threshold = Some(bytes()?),
            "percpu_arena" => {
                self.percpu_arena = Some(PercpuArena::parse(value).ok_or_else(|| bad(PercpuArena::EXPECTED))?)
            }
            "thp" => self.thp = Some(Thp::parse(value).ok_or_else(|| bad(Thp::EXPECTED))?),
            "metadata_thp" => {
                self.metadata_thp = Some(MetadataThp::parse(value).ok_or_else(|| bad(MetadataThp::EXPECTED))?)
            }
            "abort_conf" => self.abort_conf = Some(boolean()?),
            "prof" => self.prof = Some(boolean()?),
            "prof_active" => self.prof_active = Some(boolean()?),
            k if JEMALLOC_KEYS.contains(&k) => return Err(ConfError::Unmodelled { key: k.to_owned() }),
            k => return Err(ConfError::UnknownKey { key: k.to_owned(), did_you_mean: did_you_mean(k) }),
        }
        Ok(())
    }
}

impl FromStr for JemallocConfig {
    type Err = ConfError;

    /// Parses a `malloc_conf` string strictly: the first problem, including an option this type
    /// does not model, is an error. See [`JemallocConfig::parse_lenient`] for all of them at once.
    fn from_str(s: &str) -> Result<Self, ConfError> {
        let (conf, mut errors) = Self::parse_lenient(s);
        if errors.is_empty() { Ok(conf) } else { Err(errors.swap_remove(0)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn numbers_read_like_strtoumax_base_zero() {
        assert_eq!(unsigned("1000"), Some(1000));
        assert_eq!(unsigned("0x1000"), Some(4096));
        assert_eq!(unsigned("010"), Some(8), "a leading zero is octal in jemalloc");
        assert_eq!(unsigned("0"), Some(0));
        assert_eq!(unsigned("1k"), None);
        assert_eq!(signed("-1"), Some(-1));
        assert_eq!(unsigned(""), None);
    }

    #[test]
    fn every_error_kind() {
        let (conf, errors) = JemallocConfig::parse_lenient(
            "dirty_decay:1000,tcache_max:big,prof_accum:true,nonsense,muzzy_decay_ms:-2,narenas:0,thp:sometimes,retain:true",
        );
        assert_eq!(conf, JemallocConfig::new().retain(true));
        assert_eq!(
            errors,
            vec![
                ConfError::UnknownKey { key: "dirty_decay".into(), did_you_mean: Some("dirty_decay_ms") },
                ConfError::InvalidValue { key: "tcache_max".into(), value: "big".into(), expected: BYTES },
                ConfError::Unmodelled { key: "prof_accum".into() },
                ConfError::Syntax { pair: "nonsense".into() },
                ConfError::InvalidValue { key: "muzzy_decay_ms".into(), value: "-2".into(), expected: DECAY },
                ConfError::InvalidValue {
                    key: "narenas".into(),
                    value: "0".into(),
                    expected: "a positive integer or \"default\""
                },
                ConfError::InvalidValue { key: "thp".into(), value: "sometimes".into(), expected: Thp::EXPECTED },
            ]
        );
        assert!(!errors[2].is_invalid_for_jemalloc());
        assert!(errors.iter().filter(|e| e.is_invalid_for_jemalloc()).count() == 6);
    }

    #[test]
    fn later_pairs_win_and_default_arenas_is_unset() {
        let conf: JemallocConfig = "dirty_decay_ms:0,narenas:8,dirty_decay_ms:5000,narenas:default".parse().unwrap();
        assert_eq!(conf, JemallocConfig::new().dirty_decay(Decay::After(Duration::from_secs(5))));
    }

    #[test]
    fn every_modelled_option_round_trips() {
        let conf = JemallocConfig::new()
            .background_thread(true)
            .max_background_threads(2)
            .dirty_decay(Decay::Disabled)
            .muzzy_decay(Decay::After(Duration::from_millis(250)))
            .tcache(false)
            .tcache_max(4096)
            .narenas(4)
            .retain(false)
            .oversize_threshold(8 << 20)
            .percpu_arena(PercpuArena::PhyCpu)
            .thp(Thp::Never)
            .metadata_thp(MetadataThp::Auto)
            .abort_conf(true)
            .prof(true)
            .prof_active(false);
        let text = conf.to_string();
        assert_eq!(
            text,
            "background_thread:true,max_background_threads:2,dirty_decay_ms:-1,muzzy_decay_ms:250,tcache:false,\
             tcache_max:4096,narenas:4,retain:false,oversize_threshold:8388608,percpu_arena:phycpu,thp:never,\
             metadata_thp:auto,abort_conf:true,prof:true,prof_active:false"
        );
        assert_eq!(text.parse::<JemallocConfig>(), Ok(conf));
        assert_eq!(JemallocConfig::new().to_string(), "");
        assert_eq!("".parse::<JemallocConfig>(), Ok(JemallocConfig::new()));
    }

    #[test]
    fn render_refuses_what_jemalloc_would_not_take() {
        assert!(JemallocConfig::new().narenas(0).render().is_err());
        #[cfg(target_arch = "x86_64")]
        assert!(JemallocConfig::new().tcache_max(65536).render().is_err());
        assert!(JemallocConfig::new().tcache_max(32768).render().is_ok());
        assert!(JemallocConfig::new().max_background_threads(0).render().is_err());
        assert!(JemallocConfig::new().dirty_decay(Decay::After(Duration::from_micros(10))).render().is_err());
        assert!(JemallocConfig::new().dirty_decay(Decay::After(Duration::ZERO)).render().is_err());
        let rendered = JemallocConfig::new().dirty_decay(Decay::Immediate).render().unwrap();
        assert_eq!(rendered.into_nul_terminated()[rendered.as_str().len()], 0);
    }
}
