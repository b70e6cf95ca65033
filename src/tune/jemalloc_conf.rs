//! `jemalloc_conf!`: jemalloc's start-up configuration, emitted from a typed `JemallocConfig` (the
//! public `tune::jemalloc` paths it expands to are the ones a user's crate sees).

/// Emits jemalloc's `malloc_conf` symbol from a [`JemallocConfig`](crate::tune::jemalloc::JemallocConfig), checked at
/// compile time.
///
/// jemalloc reads this symbol once, before `main`, and gives it the lowest precedence: the
/// `_RJEM_MALLOC_CONF` environment variable still overrides it. The macro emits the symbol under
/// both the prefixed name tikv-jemallocator uses by default (`_rjem_malloc_conf`) and the
/// unprefixed one (for its `unprefixed_malloc_on_supported_platforms` feature), as a thin pointer to
/// a NUL-terminated string, with the `unsafe(export_name)` attribute edition 2024 requires. Use it
/// once, in the binary crate.
///
/// An out-of-range value (zero arenas, a fractional-millisecond decay) fails the build, and so does
/// `prof(true)` without frag-alloc's feature `jemalloc-prof` (jemalloc would only say "Invalid conf
/// pair" at start-up, and `frag::sample_in_jemalloc` would fail):
///
#[cfg_attr(feature = "jemalloc-prof", doc = "```no_run")]
#[cfg_attr(not(feature = "jemalloc-prof"), doc = "```compile_fail")]
/// // Cargo.toml: frag-alloc = { version = "0.1", features = ["jemalloc-prof"] }
/// use frag::tune::jemalloc::JemallocConfig;
///
/// frag::jemalloc_conf!(JemallocConfig::new().prof(true).prof_active(false));
/// # fn main() {}
/// ```
///
/// ```no_run
/// use std::time::Duration;
/// use frag::tune::Decay;
/// use frag::tune::jemalloc::JemallocConfig;
///
/// frag::jemalloc_conf!(
///     JemallocConfig::new()
///         .background_thread(true)
///         .dirty_decay(Decay::After(Duration::from_secs(1)))
///         .muzzy_decay(Decay::Immediate)
/// );
///
/// #[global_allocator]
/// static A: frag::Tracked<tikv_jemallocator::Jemalloc> = frag::Tracked::new(tikv_jemallocator::Jemalloc);
///
/// fn main() {
///     let used = frag::tune::jemalloc::effective().unwrap();
///     assert_eq!(used.opt.background_thread, Some(true));
/// }
/// ```
#[macro_export]
macro_rules! jemalloc_conf {
    ($config:expr $(,)?) => {
        const _: () = {
            const BYTES: [u8; $crate::tune::jemalloc::CONF_CAPACITY] =
                match $crate::tune::jemalloc::JemallocConfig::render_for_start_up(&$config) {
                    ::core::result::Result::Ok(conf) => conf.into_nul_terminated(),
                    ::core::result::Result::Err(why) => ::core::panic!("{}", why),
                };
            // jemalloc declares `extern const char *malloc_conf`: one pointer to a C string. A
            // reference to a byte array is exactly that (a thin pointer), and it is `Sync`.
            #[used]
            #[unsafe(export_name = "_rjem_malloc_conf")]
            static PREFIXED: &[u8; $crate::tune::jemalloc::CONF_CAPACITY] = &BYTES;
            #[used]
            #[unsafe(export_name = "malloc_conf")]
            static UNPREFIXED: &[u8; $crate::tune::jemalloc::CONF_CAPACITY] = &BYTES;
        };
    };
}
