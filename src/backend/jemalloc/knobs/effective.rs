//! What jemalloc is actually using, read back: start-up options and the run-time state.

use super::conf::{JemallocConfig, MetadataThp, PercpuArena, Thp};
use super::mallctl::{self, Key};
use super::controls::{DecayKind, THREAD_TCACHE_ENABLED, THREAD_TCACHE_MAX, conf_env_var, decay_from, require};
use crate::backend::tuning::{Decay, TuneError};

/// One arena's purge delays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArenaDecay {
    /// The arena index.
    pub index: usize,
    /// `arena.<i>.dirty_decay_ms`.
    pub dirty: Decay,
    /// `arena.<i>.muzzy_decay_ms`.
    pub muzzy: Decay,
}

/// jemalloc's configuration as it is in force, from [`effective`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Effective {
    /// jemalloc's version string.
    pub version: &'static str,
    /// The environment variable this jemalloc reads (see [`conf_env_var`]).
    pub conf_env_var: &'static str,
    /// The start-up options (`opt.*`) as jemalloc resolved them from every source; every field is
    /// `Some`. Compare with what you configured: jemalloc clips and rounds some values silently.
    pub opt: JemallocConfig,
    /// Whether background threads run now.
    pub background_thread: bool,
    /// Their maximum now.
    pub max_background_threads: usize,
    /// Arena slots (`arenas.narenas`), initialised or not.
    pub narenas: u32,
    /// Dirty decay given to arenas created from now on (`arenas.dirty_decay_ms`).
    pub default_dirty_decay: Decay,
    /// Muzzy decay given to arenas created from now on (`arenas.muzzy_decay_ms`).
    pub default_muzzy_decay: Decay,
    /// Each initialised arena's own delays.
    pub arenas: Vec<ArenaDecay>,
    /// Whether the calling thread's cache is enabled.
    pub thread_tcache_enabled: bool,
    /// The calling thread's cache limit in bytes.
    pub thread_tcache_max: usize,
}

fn opt_decay(key: &'static [u8], knob: &str) -> Result<Decay, TuneError> {
    decay_from(knob, Key::<isize>::new(key).read()?)
}

fn read_opts() -> Result<JemallocConfig, TuneError> {
    use tikv_jemalloc_ctl::opt;
    let text = |key: &'static [u8]| Key::<*const core::ffi::c_char>::new(key).read_str();
    Ok(JemallocConfig {
        background_thread: Some(mallctl::typed("opt.background_thread", opt::background_thread::read())?),
        max_background_threads: Some(Key::<usize>::new(b"opt.max_background_threads\0").read()?),
        dirty_decay: Some(opt_decay(b"opt.dirty_decay_ms\0", "opt.dirty_decay_ms")?),
        muzzy_decay: Some(opt_decay(b"opt.muzzy_decay_ms\0", "opt.muzzy_decay_ms")?),
        tcache: Some(mallctl::typed("opt.tcache", opt::tcache::read())?),
        tcache_max: Some(mallctl::typed("opt.tcache_max", opt::tcache_max::read())?),
        narenas: Some(mallctl::typed("opt.narenas", opt::narenas::read())?),
        retain: Some(Key::<bool>::new(b"opt.retain\0").read()?),
        oversize_threshold: Some(Key::<usize>::new(b"opt.oversize_threshold\0").read()?),
        percpu_arena: PercpuArena::parse(text(b"opt.percpu_arena\0")?),
        thp: Thp::parse(text(b"opt.thp\0")?),
        metadata_thp: MetadataThp::parse(text(b"opt.metadata_thp\0")?),
        abort_conf: Some(Key::<bool>::new(b"opt.abort_conf\0").read()?),
        // Absent from a jemalloc built without its profiler.
        prof: Key::<bool>::new(b"opt.prof\0").read().ok(),
        prof_active: Key::<bool>::new(b"opt.prof_active\0").read().ok(),
    })
}

/// Reads back what jemalloc is using: every modelled `opt.*`, background threads, the decay of each
/// initialised arena and of future ones, and the calling thread's cache.
///
/// # Errors
///
/// [`TuneError::WrongBackend`] unless jemalloc is wrapped, or a `mallctl` failure.
///
/// # Example
///
/// ```no_run
/// # #[global_allocator]
/// # static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
/// let used = frag::tune::jemalloc::effective()?;
/// println!("jemalloc {} reads {}; options in force: {}", used.version, used.conf_env_var, used.opt);
/// for a in &used.arenas {
///     println!("arena {}: dirty {} muzzy {}", a.index, a.dirty, a.muzzy);
/// }
/// # Ok::<(), frag::tune::TuneError>(())
/// ```
pub fn effective() -> Result<Effective, TuneError> {
    require()?;
    let (narenas, initialised) = mallctl::arenas()?;
    let (dirty, muzzy) = (DecayKind::Dirty.arena_key()?, DecayKind::Muzzy.arena_key()?);
    let mut arenas = Vec::with_capacity(initialised.len());
    for index in initialised {
        arenas.push(ArenaDecay {
            index,
            dirty: decay_from("arena.<i>.dirty_decay_ms", dirty.read(index)?)?,
            muzzy: decay_from("arena.<i>.muzzy_decay_ms", muzzy.read(index)?)?,
        });
    }
    Ok(Effective {
        // tikv-jemalloc-ctl keeps the C string's NUL in the `str`.
        version: mallctl::typed("version", tikv_jemalloc_ctl::version::read())?.trim_end_matches('\0'),
        conf_env_var: conf_env_var(),
        opt: read_opts()?,
        background_thread: mallctl::typed("background_thread", tikv_jemalloc_ctl::background_thread::read())?,
        max_background_threads: mallctl::typed(
            "max_background_threads",
            tikv_jemalloc_ctl::max_background_threads::read(),
        )?,
        narenas,
        default_dirty_decay: decay_from("arenas.dirty_decay_ms", DecayKind::Dirty.defaults_key().read()?)?,
        default_muzzy_decay: decay_from("arenas.muzzy_decay_ms", DecayKind::Muzzy.defaults_key().read()?)?,
        arenas,
        thread_tcache_enabled: THREAD_TCACHE_ENABLED.read()?,
        thread_tcache_max: THREAD_TCACHE_MAX.read()?,
    })
}
