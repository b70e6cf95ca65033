//! In-process symbolization of site stacks, off the allocation path: the `backtrace` crate (gimli
//! and addr2line over the binary's own debug information), run only by `report()` and the profile.
//!
//! A symbolizer parses the debug information of every loaded object it is asked about (that is
//! `backtrace`'s cache, tens of MiB for a large binary: `docs/PERFORMANCE.md` has its measured cost).
//! The cache is released when the last symbolizer at work is done, unless [`keep_symbol_cache`]
//! keeps it for the next one. Symbolizers run as frag's own work (`own`): the cache is frag's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One function of a (possibly inlined) frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Line {
    /// Demangled, without the hash suffix.
    pub(crate) function: String,
    /// The mangled name, where the symbol table has it.
    pub(crate) system_name: String,
    pub(crate) file: String,
    pub(crate) line: u32,
}

/// The lines of each return address, innermost inlined function first; empty when unknown. While
/// one exists, the process counts as symbolizing (see [`Symbols::new`]).
pub(crate) struct Symbols {
    cache: HashMap<usize, Vec<Line>>,
    /// Whether names are looked up at all (see [`Symbols::new`]).
    names: bool,
}

/// Symbolizers at work (and any other use of `backtrace`'s cache of frag's): the process id in the
/// high half, their count in the low half. A fork waits for the count to drain ([`FORKING`]); a
/// child forked while it was non-zero all the same (a symbolizer that outlasted the wait) inherits
/// it with its parent's id: the `backtrace` lock may be held by a thread that does not exist in the
/// child, so the child never symbolizes.
static ACTIVE: AtomicU64 = AtomicU64::new(0);
/// Set by a thread about to fork, from `pthread_atfork`'s prepare handler to its parent or child
/// handler: new symbolizers wait for it to clear, and the forking thread waits (at most
/// [`FORK_WAIT`]) for those at work to finish, so that the child inherits `backtrace`'s state whole
/// and unlocked and can symbolize. A new symbolizer counts itself before it looks at this flag, and
/// the forking thread sets it before it looks at the count (both sequentially consistent), so
/// that one of the two always sees the other.
static FORKING: AtomicBool = AtomicBool::new(false);
/// Whether the fork handlers are registered (at the first symbolizer: after the backend's own, so
/// that the wait runs while a symbolizer can still allocate; see `fork`).
static FORK_HOOKED: AtomicBool = AtomicBool::new(false);
/// The longest a fork waits for a symbolizer at work: a symbolization reads debug information for
/// up to seconds; past this, the child goes without names rather than the fork waiting longer.
const FORK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Before `fork`: no new symbolizer starts, and those at work in this process finish (or
/// [`FORK_WAIT`] passes).
extern "C" fn before_fork() {
    FORKING.store(true, Ordering::SeqCst);
    let me = u64::from(std::process::id());
    let start = std::time::Instant::now();
    loop {
        let seen = ACTIVE.load(Ordering::SeqCst);
        if seen & 0xffff_ffff == 0 || seen >> 32 != me || start.elapsed() > FORK_WAIT {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// After `fork`, in the parent and in the child: symbolizers may start again.
extern "C" fn after_fork() {
    FORKING.store(false, Ordering::SeqCst);
}

/// Counts a user of `backtrace`'s cache in, unless a child forked while another thread used it
/// (`false`); waits while a thread forks.
fn count_in() -> bool {
    if !FORK_HOOKED.swap(true, Ordering::AcqRel) {
        // SAFETY: the handlers have the C ABI, touch only atomics (and sleep) and stay valid for the
        // life of the process. A failure (ENOMEM) leaves forks unguarded: a child forked while a
        // symbolizer worked then names nothing, as the count says.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    }
    let me = u64::from(std::process::id());
    loop {
        let mut seen = ACTIVE.load(Ordering::SeqCst);
        loop {
            let (pid, count) = (seen >> 32, seen & 0xffff_ffff);
            if count > 0 && pid != me {
                return false;
            }
            match ACTIVE.compare_exchange(seen, (me << 32) | (count + 1), Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
        if !FORKING.load(Ordering::SeqCst) {
            return true;
        }
        // A thread is forking: out of its way until it is done.
        ACTIVE.fetch_sub(1, Ordering::SeqCst);
        while FORKING.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Counts a user of `backtrace`'s cache out.
fn count_out() {
    ACTIVE.fetch_sub(1, Ordering::SeqCst);
}
/// Whether `backtrace`'s cache outlives the symbolizers (see [`keep_symbol_cache`]).
static KEEP: AtomicBool = AtomicBool::new(false);

/// Keeps the symbolizer's cache (the debug information it parsed) between uses (`true`), or
/// releases it whenever no symbolizer is at work (`false`, the default). Keeping it makes each later
/// `frag::report::Sites::symbolize` and symbolized profile faster, at the cost of its
/// size, which the report shows as frag's own memory (`frag::report::FragItself`);
/// `docs/PERFORMANCE.md` has both figures.
///
/// ```
/// // A service that serves symbolized profiles every few seconds.
/// frag::sites::keep_symbol_cache(true);
/// ```
pub fn keep_symbol_cache(keep: bool) {
    KEEP.store(keep, Ordering::Relaxed);
    if !keep && ACTIVE.load(Ordering::Acquire) & 0xffff_ffff == 0 && count_in() {
        crate::own::run(backtrace::clear_symbol_cache);
        count_out();
    }
}

/// Whether the cache is kept (see [`keep_symbol_cache`]).
pub(crate) fn cache_kept() -> bool {
    KEEP.load(Ordering::Relaxed)
}

impl Drop for Symbols {
    fn drop(&mut self) {
        if self.names {
            // The last symbolizer at work: the cache goes, unless it is kept, while this one still
            // counts (a fork waits for it). Another that starts meanwhile reads what it needs again
            // (`backtrace`'s lock orders the two); two that end at once both keep it, until the next.
            if ACTIVE.load(Ordering::SeqCst) & 0xffff_ffff == 1 && !KEEP.load(Ordering::Relaxed) {
                crate::own::run(backtrace::clear_symbol_cache);
            }
            count_out();
        }
    }
}

impl Symbols {
    /// A symbolizer, or `None` in a child forked while another thread of its parent was
    /// symbolizing and outlasted the fork's wait ([`FORK_WAIT`]). Waits while a thread forks.
    pub(crate) fn new() -> Option<Self> {
        count_in().then(|| Self { cache: HashMap::new(), names: true })
    }

    /// A symbolizer that names nothing (every address stays unknown).
    pub(crate) fn none() -> Self {
        Self { cache: HashMap::new(), names: false }
    }

    /// The lines of the return address `pc` (the call site just before it).
    pub(crate) fn lines(&mut self, pc: usize) -> &[Line] {
        let names = self.names;
        self.cache.entry(pc).or_insert_with(|| if names { resolve(pc) } else { Vec::new() })
    }
}

fn resolve(pc: usize) -> Vec<Line> {
    let mut lines = Vec::new();
    // `resolve` looks up `pc - 1`: inside the call instruction that `pc` returns after.
    backtrace::resolve(pc as *mut core::ffi::c_void, |sym| {
        let Some(name) = sym.name() else { return };
        lines.push(Line {
            function: format!("{name:#}"),
            system_name: name.as_str().unwrap_or_default().to_owned(),
            file: sym.filename().map(|f| f.display().to_string()).unwrap_or_default(),
            line: sym.lineno().unwrap_or(0),
        });
    });
    lines
}

/// Whether a function belongs to the allocation machinery rather than to the code that allocates:
/// frag itself, the `__rust_alloc` family, and the standard library's allocation plumbing
/// (`alloc::`, `core::alloc`, `std::alloc`). Leading frames (from the leaf) that match are trimmed,
/// so that a site's leaf is the function that asked for the memory, as in Go's heap profiles.
pub(crate) fn is_plumbing(function: &str) -> bool {
    const PREFIXES: [&str; 7] = ["__rust_", "__rdl_", "__rg_", "alloc::", "core::alloc::", "std::alloc::", "frag::"];
    let f = function.trim_start_matches('<');
    let f = f.strip_prefix("__rustc::").unwrap_or(f);
    if f.starts_with("__rust_") {
        return ["__rust_alloc", "__rust_alloc_zeroed", "__rust_realloc"].contains(&f);
    }
    // `<T as Trait>::method`: plumbing when either the type or the trait is.
    let trait_path = f.split_once(" as ").map(|(_, t)| t.trim_start_matches('<'));
    PREFIXES.iter().any(|p| f.starts_with(p) || trait_path.is_some_and(|t| t.starts_with(p)))
        // Line tables name frag's own frames briefly (`alloc<std::alloc::System,
        // frag::tracked::Exact>`, when a debug build does not inline them): the tier gives them away.
        || f.contains("frag::tracked::")
}

/// Whether a source file is the standard library's allocation plumbing: how frames are recognised
/// in builds with line tables only (`debug = "line-tables-only"`), where inlined functions carry
/// their short names (`with_capacity_in<…>`) and no path.
pub(crate) fn is_plumbing_file(file: &str) -> bool {
    ["/library/alloc/src/", "/library/core/src/alloc/", "/library/std/src/alloc.rs"].iter().any(|p| file.contains(p))
}

/// Whether a line belongs to the allocation machinery, by name or by file.
fn is_plumbing_line(line: &Line) -> bool {
    is_plumbing(&line.function) || is_plumbing_file(&line.file)
}

/// Whether a function is the allocator shim the compiler generates (`__rust_alloc`, `__rg_alloc`,
/// `__rdl_alloc` and their `zeroed` and `realloc` kin): a symbol of its own, named even where line
/// tables name everything else briefly.
fn is_shim(function: &str) -> bool {
    let f = function.strip_prefix("__rustc::").unwrap_or(function);
    let op = f.strip_prefix("__rust_").or_else(|| f.strip_prefix("__rg_")).or_else(|| f.strip_prefix("__rdl_"));
    matches!(op, Some("alloc" | "alloc_zeroed" | "realloc"))
}

/// How deep jemalloc's own frames can reach in a stack its profiler asked for (`hooked`): the hook,
/// the profiler's backtrace and sample preparation, the allocation's slow path, its entry point.
pub(crate) const JEMALLOC_DEPTH: usize = 16;

/// The prefix tikv-jemalloc-sys gives every jemalloc symbol, public and internal.
pub(crate) const JEMALLOC_PREFIX: &str = "_rjem_";

/// Whether a function is jemalloc's.
fn is_jemalloc(function: &str) -> bool {
    function.starts_with(JEMALLOC_PREFIX)
}

/// The same rule for pprof's `drop_frames` (a regular expression fully matching a function name),
/// used when the profile carries no names and `pprof` symbolizes it itself.
pub(crate) const PLUMBING_REGEX: &str = r"(__rustc::)?__rust_(alloc|alloc_zeroed|realloc)|<?([^ ]* as )?<?(__rdl_|__rg_|alloc::|core::alloc::|std::alloc::|frag::).*|.*frag::tracked::.*|.*frag::hooked::.*|_rjem_.*";

/// A site's stack as logical frames, leaf first: each return address expanded into its inlined
/// functions, leading allocation plumbing trimmed. Each frame is `(pc, index of its first kept line)`.
///
/// Where the stack shows the allocator shim (`__rust_alloc`), it and everything leafward of it are
/// the global allocator's own code, trimmed whatever their names: a `GlobalAlloc` wrapper of the
/// program's own, which a debug build with line tables only calls by its bare name (`alloc`), would
/// otherwise stop the trimming at the leaf.
pub(crate) fn trimmed(symbols: &mut Symbols, stack: &[usize]) -> Vec<(usize, usize)> {
    // (frame, line) just past the shim, or the start.
    let shim = stack
        .iter()
        .enumerate()
        .find_map(|(i, &pc)| symbols.lines(pc).iter().position(|l| is_shim(&l.function)).map(|j| (i, j + 1)));
    // A stack jemalloc's profiler asked for (`hooked`) starts inside jemalloc: its outermost frame
    // there, and everything leafward, is the allocator's.
    let jemalloc = stack
        .iter()
        .take(JEMALLOC_DEPTH)
        .enumerate()
        .filter_map(|(i, &pc)| symbols.lines(pc).iter().rposition(|l| is_jemalloc(&l.function)).map(|j| (i, j + 1)))
        .last();
    let (shim_frame, past_shim) = match (shim, jemalloc) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a.or(b).unwrap_or((0, 0)),
    };
    let mut out = Vec::with_capacity(stack.len());
    let mut trimming = true;
    for (i, &pc) in stack.iter().enumerate().skip(shim_frame) {
        let lines = symbols.lines(pc);
        let mut first = 0;
        if trimming {
            let start = if i == shim_frame { past_shim } else { 0 };
            first = start + lines[start..].iter().take_while(|l| is_plumbing_line(l)).count();
            if first == lines.len() && !lines.is_empty() {
                continue;
            }
            trimming = false;
        }
        out.push((pc, first));
    }
    // Everything was plumbing (an allocation made by frag or the standard library itself): keep the
    // stack whole rather than show nothing.
    if out.is_empty() {
        return stack.iter().map(|&pc| (pc, 0)).collect();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(function: &str, file: &str) -> Line {
        Line { function: function.into(), system_name: String::new(), file: file.into(), line: 1 }
    }

    /// Line tables only, a debug build, a `GlobalAlloc` wrapper of the program's own: the wrapper's
    /// bare `alloc` is below the shim, and trimmed with it; the standard library's frames above the
    /// shim go by their files.
    #[test]
    fn everything_leafward_of_the_shim_is_trimmed() {
        let std_alloc = "/rustc/x/library/alloc/src/alloc.rs";
        let frames = [
            (1, vec![line("alloc", "/app/src/global_allocator.rs")]),
            (2, vec![line("__rust_alloc", "/app/src/global_allocator.rs")]),
            (3, vec![line("alloc", std_alloc), line("box_new_uninit", "/rustc/x/library/alloc/src/boxed.rs")]),
            (4, vec![line("remember_session", "/app/src/main.rs")]),
            (5, vec![line("main", "/app/src/main.rs")]),
        ];
        let mut symbols = Symbols::none();
        symbols.cache.extend(frames.iter().cloned());
        assert_eq!(trimmed(&mut symbols, &[1, 2, 3, 4, 5]), [(4, 0), (5, 0)]);
        // Without the shim (inlined away), trimming goes by names and files alone, and stops at the
        // first line it does not know.
        assert_eq!(trimmed(&mut symbols, &[1, 3, 4]), [(1, 0), (3, 0), (4, 0)]);
        assert_eq!(trimmed(&mut symbols, &[3, 4]), [(4, 0)]);
        // The shim inlined into a frame with other lines: the lines after it stay.
        symbols
            .cache
            .insert(6, vec![line("alloc", "/app/a.rs"), line("__rust_alloc", "/app/a.rs"), line("f", "/app/b.rs")]);
        assert_eq!(trimmed(&mut symbols, &[6, 4]), [(6, 2), (4, 0)]);
    }

    /// A stack jemalloc's profiler asked for (`hooked`) whose leading frames were not cut: jemalloc's
    /// frames, prefixed or static, go up to its outermost prefixed one.
    #[test]
    fn jemallocs_leading_frames_are_trimmed() {
        let c = "";
        let frames = [
            (1, vec![line("prof_backtrace_impl", c)]),
            (2, vec![line("_rjem_je_prof_backtrace", c)]),
            (3, vec![line("imalloc_body", c)]),
            (4, vec![line("_rjem_je_malloc_default", c)]),
            (5, vec![line("parse_request", "/app/src/main.rs")]),
            (6, vec![line("main", "/app/src/main.rs")]),
        ];
        let mut symbols = Symbols::none();
        symbols.cache.extend(frames.iter().cloned());
        assert_eq!(trimmed(&mut symbols, &[1, 2, 3, 4, 5, 6]), [(5, 0), (6, 0)]);
        // Only among the leading frames: a jemalloc name deeper down is left alone.
        let deep: Vec<usize> = core::iter::repeat_n(5, JEMALLOC_DEPTH).chain([4, 6]).collect();
        assert_eq!(trimmed(&mut symbols, &deep).len(), deep.len());
    }

    #[test]
    fn plumbing_files_are_the_standard_librarys_allocation_code() {
        let rustc = "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860";
        assert!(is_plumbing_file(&format!("{rustc}/library/alloc/src/raw_vec/mod.rs")));
        assert!(is_plumbing_file("/home/u/.rustup/toolchains/x/lib/rustlib/src/rust/library/alloc/src/vec/mod.rs"));
        assert!(is_plumbing_file(&format!("{rustc}/library/std/src/alloc.rs")));
        assert!(!is_plumbing_file(&format!("{rustc}/library/core/src/iter/traits/iterator.rs")));
        assert!(!is_plumbing_file("/work/app/src/alloc/pool.rs"));
    }

    #[test]
    fn plumbing_is_recognised_in_both_forms() {
        let re_words = [
            "__rustc::__rust_alloc",
            "alloc::raw_vec::finish_grow",
            "<alloc::vec::Vec<T>>::push",
            "frag::x",
            "<u8 as alloc::vec::spec_from_elem::SpecFromElem>::from_elem",
            "allocate<std::alloc::System, frag::tracked::Exact>",
            "alloc<tikv_jemallocator::Jemalloc, frag::tracked::Sampled>",
        ];
        for f in re_words {
            assert!(is_plumbing(f), "{f}");
        }
        for f in [
            "myapp::handler",
            "tokio::runtime::task",
            "<myapp::Codec as tokio_util::codec::Decoder>::decode",
            "std::sys::backtrace::__rust_begin_short_backtrace",
            "__rust_begin_short_backtrace",
        ] {
            assert!(!is_plumbing(f), "{f}");
        }
    }
}
