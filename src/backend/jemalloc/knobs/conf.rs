//! jemalloc's start-up options as a typed, `const` builder that renders the `malloc_conf` string.

use core::fmt;

use crate::backend::tuning::Decay;

/// How jemalloc assigns threads to arenas (`percpu_arena`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PercpuArena {
    /// Round-robin assignment of threads to arenas (jemalloc's default).
    Disabled,
    /// One arena per CPU; a thread uses the arena of the CPU it runs on.
    PerCpu,
    /// One arena per physical CPU (hyper-threads share).
    PhyCpu,
}

/// jemalloc's use of transparent huge pages for application memory (`thp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Thp {
    /// Leave the system setting alone.
    Default,
    /// `madvise(MADV_HUGEPAGE)` every extent.
    Always,
    /// `madvise(MADV_NOHUGEPAGE)` every extent.
    Never,
}

/// jemalloc's use of transparent huge pages for its own metadata (`metadata_thp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetadataThp {
    /// Never.
    Disabled,
    /// Once metadata grows large enough.
    Auto,
    /// Always.
    Always,
}

macro_rules! string_enum {
    ($ty:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        impl $ty {
            /// The option value as jemalloc spells it.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self { $(Self::$variant => $text),+ }
            }

            pub(crate) fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some(Self::$variant),)+ _ => None }
            }

            pub(crate) const EXPECTED: &'static str = concat!($($text, " "),+);
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(PercpuArena { Disabled => "disabled", PerCpu => "percpu", PhyCpu => "phycpu" });
string_enum!(Thp { Default => "default", Always => "always", Never => "never" });
string_enum!(MetadataThp { Disabled => "disabled", Auto => "auto", Always => "always" });

/// jemalloc start-up options (`malloc_conf`), typed.
///
/// Build one with `const` methods, then either emit it as the `malloc_conf` symbol with
/// [`jemalloc_conf!`](crate::jemalloc_conf) (checked at compile time), or render it for the
/// `_RJEM_MALLOC_CONF` environment variable with [`Display`](fmt::Display). Parsing an existing
/// string ([`str::parse`]) gives typed errors for unknown keys and bad values.
///
/// Every field is `None` unless set, and only set fields are rendered: jemalloc keeps its defaults
/// for the rest.
///
/// ```
/// use std::time::Duration;
/// use frag::tune::Decay;
/// use frag::tune::jemalloc::JemallocConfig;
///
/// let conf = JemallocConfig::new()
///     .background_thread(true)
///     .dirty_decay(Decay::After(Duration::from_secs(1)))
///     .muzzy_decay(Decay::Immediate)
///     .tcache_max(16 << 10);
/// assert_eq!(
///     conf.to_string(),
///     "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,tcache_max:16384"
/// );
/// assert_eq!(conf.to_string().parse::<JemallocConfig>(), Ok(conf));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct JemallocConfig {
    /// `background_thread`: purge from dedicated threads instead of application threads.
    pub background_thread: Option<bool>,
    /// `max_background_threads`.
    pub max_background_threads: Option<usize>,
    /// `dirty_decay_ms`: how long freed pages stay dirty (resident) before `MADV_FREE`/`DONTNEED`.
    pub dirty_decay: Option<Decay>,
    /// `muzzy_decay_ms`: how long lazily-freed pages stay before being fully released.
    pub muzzy_decay: Option<Decay>,
    /// `tcache`: per-thread caches on or off.
    pub tcache: Option<bool>,
    /// `tcache_max`: largest size class the thread cache holds, in bytes. jemalloc clips it to 8
    /// pages (32 KiB on 4 KiB pages) without saying so, so on x86-64 a larger value is rejected by
    /// [`render`](Self::render) (a compile error in [`jemalloc_conf!`](crate::jemalloc_conf)); each
    /// thread cache rounds it up to a size class (5000 becomes 5120); [`effective`](fn@super::effective)
    /// shows both.
    pub tcache_max: Option<usize>,
    /// `narenas`: number of arenas (jemalloc's default is 4 per CPU).
    pub narenas: Option<u32>,
    /// `retain`: keep unused virtual memory mapped (returned to the OS with `MADV_DONTNEED`)
    /// instead of unmapping it.
    pub retain: Option<bool>,
    /// `oversize_threshold`: requests at least this large go to a dedicated arena.
    pub oversize_threshold: Option<usize>,
    /// `percpu_arena`.
    pub percpu_arena: Option<PercpuArena>,
    /// `thp`.
    pub thp: Option<Thp>,
    /// `metadata_thp`.
    pub metadata_thp: Option<MetadataThp>,
    /// `abort_conf`: abort at start-up on an invalid option instead of printing a warning and going on.
    pub abort_conf: Option<bool>,
    /// `prof`: jemalloc's heap profiler, which only start-up can turn on, and only in a jemalloc
    /// built with it: `true` needs frag-alloc's feature `jemalloc-prof`
    /// ([`render_for_start_up`](Self::render_for_start_up) refuses it otherwise, so `jemalloc_conf!`
    /// fails the build). `frag::sample_in_jemalloc`
    /// needs it.
    pub prof: Option<bool>,
    /// `prof_active`: whether the profiler samples from the start. `false` beside `prof: true` leaves
    /// sampling off until `frag::sample_in_jemalloc` turns it on.
    pub prof_active: Option<bool>,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)+) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub const fn $name(mut self, value: $ty) -> Self {
                self.$name = Some(value);
                self
            }
        )+
    };
}

/// Why `prof: true` is refused in a build without jemalloc's profiler.
pub(crate) const PROF_REFUSED: &str = "prof(true): this jemalloc has no profiler; enable frag-alloc's feature \
                                       `jemalloc-prof` (frag-alloc = { version = \"0.1\", features = [\"jemalloc-prof\"] })";

impl JemallocConfig {
    /// No options set: jemalloc's defaults.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            background_thread: None,
            max_background_threads: None,
            dirty_decay: None,
            muzzy_decay: None,
            tcache: None,
            tcache_max: None,
            narenas: None,
            retain: None,
            oversize_threshold: None,
            percpu_arena: None,
            thp: None,
            metadata_thp: None,
            abort_conf: None,
            prof: None,
            prof_active: None,
        }
    }

    setters! {
        /// Sets `background_thread`.
        background_thread: bool;
        /// Sets `max_background_threads` (at least 1).
        max_background_threads: usize;
        /// Sets `dirty_decay_ms`.
        dirty_decay: Decay;
        /// Sets `muzzy_decay_ms`.
        muzzy_decay: Decay;
        /// Sets `tcache`.
        tcache: bool;
        /// Sets `tcache_max` in bytes (see the field for jemalloc's rounding and clipping).
        tcache_max: usize;
        /// Sets `narenas` (at least 1).
        narenas: u32;
        /// Sets `retain`.
        retain: bool;
        /// Sets `oversize_threshold` in bytes.
        oversize_threshold: usize;
        /// Sets `percpu_arena`.
        percpu_arena: PercpuArena;
        /// Sets `thp`.
        thp: Thp;
        /// Sets `metadata_thp`.
        metadata_thp: MetadataThp;
        /// Sets `abort_conf`.
        abort_conf: bool;
        /// Sets `prof`.
        prof: bool;
        /// Sets `prof_active`.
        prof_active: bool;
    }

    /// [`render`](Self::render), refusing also what this build's jemalloc cannot start with:
    /// `prof: true` without its profiler (frag-alloc's feature `jemalloc-prof`), which jemalloc would
    /// only reject at start-up with "Invalid conf pair". What [`jemalloc_conf!`](crate::jemalloc_conf)
    /// emits.
    ///
    /// # Errors
    ///
    /// As [`render`](Self::render), and `prof(true)` in a build without the profiler.
    pub const fn render_for_start_up(&self) -> Result<ConfBytes, &'static str> {
        if matches!(self.prof, Some(true)) && !cfg!(feature = "jemalloc-prof") {
            return Err(PROF_REFUSED);
        }
        self.render()
    }

    /// Renders the `malloc_conf` string with a trailing NUL, in a fixed buffer, at compile time if
    /// need be. Used by [`jemalloc_conf!`](crate::jemalloc_conf); the error says which value is out
    /// of range.
    ///
    /// # Errors
    ///
    /// A value jemalloc would reject or silently change.
    pub const fn render(&self) -> Result<ConfBytes, &'static str> {
        let mut out = ConfBytes { bytes: [0; CONF_CAPACITY], len: 0 };
        if let Some(v) = self.background_thread {
            out = out.key("background_thread").boolean(v);
        }
        if let Some(v) = self.max_background_threads {
            if v == 0 {
                return Err("max_background_threads: 1 or more");
            }
            out = out.key("max_background_threads").unsigned(v as u64);
        }
        if let Some(d) = self.dirty_decay {
            match d.as_millis() {
                Some(ms) => out = out.key("dirty_decay_ms").signed(ms),
                None => return Err(DIRTY_DECAY_REFUSED),
            }
        }
        if let Some(d) = self.muzzy_decay {
            match d.as_millis() {
                Some(ms) => out = out.key("muzzy_decay_ms").signed(ms),
                None => return Err(MUZZY_DECAY_REFUSED),
            }
        }
        if let Some(v) = self.tcache {
            out = out.key("tcache").boolean(v);
        }
        if let Some(v) = self.tcache_max {
            if let Some(limit) = TCACHE_MAX_LIMIT {
                if v > limit {
                    return Err(TCACHE_MAX_REFUSED);
                }
            }
            out = out.key("tcache_max").unsigned(v as u64);
        }
        if let Some(v) = self.narenas {
            if v == 0 {
                return Err("narenas: 1 to u32::MAX");
            }
            out = out.key("narenas").unsigned(v as u64);
        }
        if let Some(v) = self.retain {
            out = out.key("retain").boolean(v);
        }
        if let Some(v) = self.oversize_threshold {
            out = out.key("oversize_threshold").unsigned(v as u64);
        }
        if let Some(v) = self.percpu_arena {
            out = out.key("percpu_arena").text(v.as_str());
        }
        if let Some(v) = self.thp {
            out = out.key("thp").text(v.as_str());
        }
        if let Some(v) = self.metadata_thp {
            out = out.key("metadata_thp").text(v.as_str());
        }
        if let Some(v) = self.abort_conf {
            out = out.key("abort_conf").boolean(v);
        }
        if let Some(v) = self.prof {
            out = out.key("prof").boolean(v);
        }
        if let Some(v) = self.prof_active {
            out = out.key("prof_active").boolean(v);
        }
        Ok(out)
    }
}

impl fmt::Display for JemallocConfig {
    /// The `malloc_conf` string, as for `_RJEM_MALLOC_CONF`. Values that [`render`](Self::render)
    /// rejects are written as jemalloc would read them (and [`str::parse`] rejects them again).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.render() {
            Ok(bytes) => f.write_str(bytes.as_str()),
            Err(e) => write!(f, "<invalid: {e}>"),
        }
    }
}

/// `render`'s refusals of a decay, naming the accepted range (as the run-time calls do).
const DIRTY_DECAY_REFUSED: &str = concat!("dirty_decay: ", crate::backend::tuning::decay_range!());
const MUZZY_DECAY_REFUSED: &str = concat!("muzzy_decay: ", crate::backend::tuning::decay_range!());
/// `render`'s refusal of a thread-cache limit jemalloc would clip.
const TCACHE_MAX_REFUSED: &str = concat!("tcache_max: ", super::controls::tcache_max_range!());

/// The largest `tcache_max` jemalloc keeps, where it is known at compile time: 8 pages
/// (`TCACHE_MAXCLASS_LIMIT`), and x86-64 jemalloc builds use 4 KiB pages. Elsewhere (page sizes vary
/// by build) a clipped value is reported at run time as a `frag::tune::Trap` instead.
const TCACHE_MAX_LIMIT: Option<usize> = if cfg!(target_arch = "x86_64") { Some(32 << 10) } else { None };

/// The size of a rendered [`ConfBytes`] buffer: room for every option at its longest.
pub const CONF_CAPACITY: usize = 512;

/// A rendered `malloc_conf` string: NUL-terminated bytes in a fixed buffer, so it can be built in a
/// `const` and pointed to by the `malloc_conf` symbol.
#[derive(Clone, Copy, Debug)]
pub struct ConfBytes {
    bytes: [u8; CONF_CAPACITY],
    len: usize,
}

impl ConfBytes {
    /// The string without its NUL.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever pushed.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }

    /// The NUL-terminated buffer (the NUL is at `as_str().len()`), for the `malloc_conf` symbol.
    #[must_use]
    pub const fn into_nul_terminated(self) -> [u8; CONF_CAPACITY] {
        self.bytes
    }

    const fn push(mut self, b: u8) -> Self {
        // The last byte always stays NUL: the longest rendering is far below the capacity.
        if self.len < CONF_CAPACITY - 1 {
            self.bytes[self.len] = b;
            self.len += 1;
        }
        self
    }

    const fn text(mut self, s: &str) -> Self {
        let s = s.as_bytes();
        let mut i = 0;
        while i < s.len() {
            self = self.push(s[i]);
            i += 1;
        }
        self
    }

    const fn key(self, k: &str) -> Self {
        let this = if self.len > 0 { self.push(b',') } else { self };
        this.text(k).push(b':')
    }

    const fn boolean(self, v: bool) -> Self {
        self.text(if v { "true" } else { "false" })
    }

    const fn unsigned(mut self, mut v: u64) -> Self {
        let mut digits = [0u8; 20];
        let mut n = 0;
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        while n > 0 {
            n -= 1;
            self = self.push(digits[n]);
        }
        self
    }

    const fn signed(self, v: i64) -> Self {
        if v < 0 { self.push(b'-').unsigned(v.unsigned_abs()) } else { self.unsigned(v as u64) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `prof(true)` is emitted for start-up only where jemalloc has its profiler (frag-alloc's
    /// `jemalloc-prof`); it renders as text, and `prof(false)` is emitted, always.
    #[test]
    fn prof_needs_the_profiler() {
        assert_eq!(JemallocConfig::new().prof(true).render().map(|c| c.as_str().to_owned()).as_deref(), Ok("prof:true"));
        let on = JemallocConfig::new().prof(true).render_for_start_up().map(|c| c.as_str().to_owned());
        if cfg!(feature = "jemalloc-prof") {
            assert_eq!(on.as_deref(), Ok("prof:true"));
        } else {
            assert_eq!(on, Err(PROF_REFUSED));
            assert!(PROF_REFUSED.contains("jemalloc-prof"));
        }
        let off = JemallocConfig::new().prof(false).render_for_start_up().map(|c| c.as_str().to_owned());
        assert_eq!(off.as_deref(), Ok("prof:false"));
    }
}
