//! Go's `/debug/pprof/heap` and `/debug/pprof/allocs`, independent of any HTTP stack: the query
//! parameters Go's `net/http/pprof` takes, and the answer it gives (status, content type, file name,
//! body). `profile::http` (feature `http`) puts it on the `http` crate's types.

use core::fmt;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::admit::{Slot, Turn};
use super::encode::{Options, Pinned, build, frames, gzip, sites_now};
use super::serving::serving;
use crate::own;
use crate::sampler::{Sampling, sampling};
use crate::sites::read::SiteFigures;
use crate::sites::symbols::Symbols;
use crate::stats::clock::now_ns;

/// Which of Go's two memory profiles a scrape asks for. Both carry the same four sample types; they
/// differ in the one `pprof` shows by default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Endpoint {
    /// `/debug/pprof/heap`: `inuse_space` by default (what is live now).
    Heap,
    /// `/debug/pprof/allocs`: `alloc_space` by default (everything allocated since the process
    /// started), what Grafana Alloy's `pyroscope.scrape` and Parca scrape for memory.
    Allocs,
}

impl Endpoint {
    /// The endpoint a path ends in (`.../heap` or `.../allocs`), if any.
    #[must_use]
    pub fn from_path(path: &str) -> Option<Self> {
        match path.trim_end_matches('/').rsplit('/').next()? {
            "heap" => Some(Self::Heap),
            "allocs" => Some(Self::Allocs),
            _ => None,
        }
    }

    /// `heap` or `allocs`: the file name Go gives the profile.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Heap => "heap",
            Self::Allocs => "allocs",
        }
    }

    fn default_sample_type(self) -> &'static str {
        match self {
            Self::Heap => "inuse_space",
            Self::Allocs => "alloc_space",
        }
    }
}

/// A scrape's query parameters, as Go's handlers take them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GoQuery {
    /// `seconds=N`: a delta profile, the difference of two snapshots `N` seconds apart (the handler
    /// waits that long): a positive integer, at most
    /// [`Serving::max_seconds`](super::serving::Serving::max_seconds), and never with `debug` (Go's
    /// rules).
    pub seconds: Option<u64>,
    /// `debug=1`: Go's legacy text format instead of a gzip-compressed `profile.proto`.
    pub debug: bool,
    /// `symbolize=1` or `0`: names in the profile, read from the loaded objects' debug information
    /// in process (27–34 MiB while it reads, `docs/PERFORMANCE.md`). By default a protobuf profile is
    /// unsymbolized (addresses, mappings and build IDs, for the profiler to symbolize) and the text
    /// is symbolized.
    pub symbolize: Option<bool>,
}

impl GoQuery {
    /// Parses a query string (`seconds=30&debug=1`, without the `?`). `gc` is accepted and ignored,
    /// as there is no collector to run; any other parameter is refused.
    ///
    /// # Errors
    ///
    /// [`GoQueryError`], naming the parameter and what it accepts.
    ///
    /// # Example
    ///
    /// ```
    /// let q = frag::profile::GoQuery::parse("seconds=30&debug=1").unwrap();
    /// assert_eq!((q.seconds, q.debug), (Some(30), true));
    /// assert!(frag::profile::GoQuery::parse("seconds=0").is_err());
    /// assert!(frag::profile::GoQuery::parse("seconds=3600").is_ok()); // refused when answered, over the limit
    /// ```
    pub fn parse(query: &str) -> Result<Self, GoQueryError> {
        let mut q = Self::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = || GoQueryError { parameter: key.to_owned(), value: value.to_owned() };
            match key {
                "seconds" => {
                    q.seconds = Some(value.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(bad)?);
                }
                "debug" => q.debug = parse_flag(value).ok_or_else(bad)?,
                "symbolize" => q.symbolize = Some(parse_flag(value).ok_or_else(bad)?),
                "gc" => {}
                _ => return Err(bad()),
            }
        }
        Ok(q)
    }
}

fn parse_flag(value: &str) -> Option<bool> {
    match value {
        "0" | "false" => Some(false),
        "1" | "true" | "" => Some(true),
        _ => None,
    }
}

/// A query parameter that is unknown or out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GoQueryError {
    /// The parameter's name.
    pub parameter: String,
    /// The value given.
    pub value: String,
}

impl fmt::Display for GoQueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (p, v) = (&self.parameter, &self.value);
        match p.as_str() {
            // Go's words (`net/http/pprof`).
            "seconds" => f.write_str(r#"invalid value for "seconds" - must be a positive integer"#),
            "debug" | "symbolize" => write!(f, "{p}={v}: expected 0 or 1"),
            _ => write!(f, "unknown parameter {p:?}: expected seconds, debug, symbolize or gc"),
        }
    }
}

impl std::error::Error for GoQueryError {}

/// What a Go memory-profile endpoint answers.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GoAnswer {
    /// HTTP status: 200; 400 for a bad query or one over a limit
    /// ([`Serving`](super::serving::Serving)); 413 for a `/debug/pprof/symbol` request with more
    /// addresses than [`Serving::symbol_addresses`](super::serving::Serving::symbol_addresses); 429
    /// when [`Serving::delta_waits`](super::serving::Serving::delta_waits) delta profiles wait
    /// already; 503 when the symbolizer stayed busy for
    /// [`Serving::symbolizer_wait`](super::serving::Serving::symbolizer_wait). Every refusal's body
    /// says what was wrong and what is accepted.
    pub status: u16,
    /// `application/octet-stream` for a profile, `text/plain; charset=utf-8` for text.
    pub content_type: &'static str,
    /// For a profile, Go's `Content-Disposition`: `attachment; filename="heap"` (`allocs`, and
    /// `-delta` after it for a delta).
    pub content_disposition: Option<String>,
    /// For a 429 or a 503: whole seconds after which a retry may be let in (`Retry-After`).
    pub retry_after: Option<u64>,
    /// The gzip-compressed `profile.proto`, the text, or the error.
    pub body: Vec<u8>,
}

impl GoAnswer {
    fn ok(content_type: &'static str, content_disposition: Option<String>, body: Vec<u8>) -> Self {
        Self { status: 200, content_type, content_disposition, retry_after: None, body }
    }

    /// A refusal: `status`, and `why` as the text.
    pub(super) fn refusal(status: u16, why: &str) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            content_disposition: None,
            retry_after: None,
            body: format!("{why}\n").into_bytes(),
        }
    }

    fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

/// Answers a scrape of `endpoint` as Go does, within the [`Serving`](super::serving::Serving)
/// limits. Blocks for `query.seconds` if set, and while it reads debug information to symbolize:
/// call it from a blocking thread (`tokio::task::spawn_blocking`), or use `http::serve` (feature
/// `tokio`), which waits without a thread and stops when the caller goes.
///
/// The profile has Go's four sample types in Go's order (`alloc_objects/count`,
/// `alloc_space/bytes`, `inuse_objects/count`, `inuse_space/bytes`), `period_type space/bytes` and
/// `period` the sampling mean. `alloc_*` are cumulative since the process started (since the first
/// sample), so they never decrease from one scrape to the next; `inuse_*` are what is live now.
/// Every value is an estimate, weighted by the inverse sampling probability.
///
/// # Example
///
/// ```no_run
/// use frag::profile::{Endpoint, GoQuery};
///
/// let answer = frag::profile::go_answer(Endpoint::Allocs, &GoQuery::default());
/// assert_eq!(answer.status, 200);
/// std::fs::write("allocs.pb.gz", answer.body)?;
/// // go tool pprof -top allocs.pb.gz   (alloc_space by default)
/// # Ok::<(), std::io::Error>(())
/// ```
#[must_use]
pub fn go_answer(endpoint: Endpoint, query: &GoQuery) -> GoAnswer {
    own::handed_over(|| {
        let plan = match Plan::new(endpoint, query, now_ns()) {
            Ok(plan) => plan,
            Err(refusal) => return refusal,
        };
        let before = plan.before();
        if let Some(end) = plan.end() {
            std::thread::sleep(Duration::from_nanos(end.saturating_sub(now_ns())));
        }
        let turn = if plan.symbolize {
            match Turn::take_within(serving().symbolizer_wait) {
                Some(turn) => Some(turn),
                None => return busy(),
            }
        } else {
            None
        };
        plan.answer(before, turn.as_ref())
    })
}

/// A scrape let in: what it asks, its place among the delta waits, and whether it needs the
/// symbolizer. The steps between are the caller's: the first snapshot ([`Plan::before`]), the wait
/// to [`Plan::end`], the symbolizer's turn, then [`Plan::answer`].
pub(super) struct Plan {
    endpoint: Endpoint,
    query: GoQuery,
    slot: Option<Slot>,
    /// Whether the answer has names, read in process: it needs the symbolizer's turn.
    pub(super) symbolize: bool,
}

impl Plan {
    /// Lets `query` in, or refuses it, in Go's order: a delta profile over the limit, then one with
    /// `debug` (400), then one that finds every delta wait taken (429). `now`: monotonic
    /// nanoseconds.
    pub(super) fn new(endpoint: Endpoint, query: &GoQuery, now: u64) -> Result<Self, GoAnswer> {
        let limits = serving();
        let symbolize = if query.debug { query.symbolize.unwrap_or(true) } else { query.symbolize.unwrap_or(false) };
        let mut plan = Self { endpoint, query: query.clone(), slot: None, symbolize };
        let Some(seconds) = query.seconds else { return Ok(plan) };
        if limits.delta_waits == 0 {
            return Err(GoAnswer::refusal(
                400,
                r#""seconds" parameter is not supported: delta profiles are off here (frag::profile::Serving::delta_waits is 0)"#,
            ));
        }
        if seconds > limits.max_seconds {
            let why = format!(
                "profile duration exceeds server's limit: seconds={seconds}, at most {} accepted \
                 (frag::profile::Serving::max_seconds)",
                limits.max_seconds
            );
            return Err(GoAnswer::refusal(400, &why));
        }
        if query.debug {
            // Go's words (`net/http/pprof`).
            return Err(GoAnswer::refusal(400, "seconds and debug params are incompatible"));
        }
        match Slot::take(now, Duration::from_secs(seconds), limits.delta_waits) {
            Ok(slot) => plan.slot = Some(slot),
            Err(retry) => {
                let why = format!(
                    "delta profiles waiting already: {} at a time (frag::profile::Serving::delta_waits); \
                     retry in {retry} s, or ask without seconds",
                    limits.delta_waits
                );
                return Err(GoAnswer::refusal(429, &why).retry_after(retry));
            }
        }
        Ok(plan)
    }

    /// When a delta profile's wait ends (monotonic nanoseconds); `None` for a profile of now.
    pub(super) fn end(&self) -> Option<u64> {
        self.slot.as_ref().map(Slot::end)
    }

    /// A delta profile's first snapshot.
    pub(super) fn before(&self) -> Option<Pinned> {
        self.slot.as_ref().map(|_| sites_now())
    }

    /// The answer, from the snapshot `before` a delta's wait and the sites now; named where
    /// [`Plan::symbolize`] and the caller holds the symbolizer's `turn`. Built as frag's own work
    /// and handed over.
    // Never inlined: `scripts/instructions.py` leaves the service example's profiles out of its counts
    // by this function's name.
    #[inline(never)]
    pub(super) fn answer(self, before: Option<Pinned>, turn: Option<&Turn>) -> GoAnswer {
        own::handed_over(|| self.build(before, turn.is_some()))
    }

    fn build(self, before: Option<Pinned>, symbolize: bool) -> GoAnswer {
        let (endpoint, query) = (self.endpoint, &self.query);
        let (all, duration) = match (before, query.seconds) {
            (Some(before), Some(s)) => {
                let after = sites_now();
                let split = before.split && after.split;
                (Pinned { split, sites: delta(before.sites, after.sites) }, Duration::from_secs(s))
            }
            _ => (sites_now(), Duration::ZERO),
        };
        // The slot is held to here: the profile's build is part of the wait's cost.
        drop(self.slot);
        let sites = &all.sites;
        if query.debug {
            return GoAnswer::ok("text/plain; charset=utf-8", None, text(endpoint, sites, symbolize).into_bytes());
        }
        let options = Options {
            symbolize,
            default_sample_type: endpoint.default_sample_type(),
            duration_nanos: duration.as_nanos() as i64,
        };
        let suffix = if query.seconds.is_some() { "-delta" } else { "" };
        let disposition = format!("attachment; filename=\"{}{suffix}\"", endpoint.name());
        GoAnswer::ok("application/octet-stream", Some(disposition), gzip(&build(&all, &options)))
    }
}

/// 503: the symbolizer stayed busy for the whole
/// [`Serving::symbolizer_wait`](super::serving::Serving::symbolizer_wait).
pub(super) fn busy() -> GoAnswer {
    let why = format!(
        "the symbolizer is busy with another request (one at a time; waited {:?}, \
         frag::profile::Serving::symbolizer_wait): retry, or ask for a profile without names (symbolize=0)",
        serving().symbolizer_wait
    );
    GoAnswer::refusal(503, &why).retry_after(1)
}

/// [`go_answer`] for a raw query string (without the `?`): a bad query gets status 400 and the
/// reason ([`GoQueryError`]) as text. For an HTTP stack not built on the `http` crate.
#[must_use]
pub fn go_answer_to_query(endpoint: Endpoint, query: &str) -> GoAnswer {
    match GoQuery::parse(query) {
        Ok(q) => go_answer(endpoint, &q),
        Err(error) => GoAnswer::refusal(400, &error.to_string()),
    }
}

/// Answers Go's `/debug/pprof/symbol` as `net/http/pprof` does: `addresses` is the request's body
/// (`POST`, as `pprof` sends it) or its raw query (`GET`), numbers (`0x…` or decimal) joined by `+`.
/// The text starts with `num_symbols: 1` (a `pprof` asks only whether names are to be had) and names
/// each address it finds, one per line: `0x4a0b2c _ZN…E`. An address is what this crate's
/// profiles put in a location, the call instruction a return address follows; its name is the
/// innermost function there (inlined ones included, where the binary has line tables), mangled
/// where the symbol table has it, as `pprof` expects of a binary's names. Reads debug
/// information in process, as `?symbolize=1` does: call it from a blocking thread.
///
/// Within the [`Serving`](super::serving::Serving) limits: more than
/// [`Serving::symbol_addresses`](super::serving::Serving::symbol_addresses) addresses are refused
/// (413), and a request waits at most
/// [`Serving::symbolizer_wait`](super::serving::Serving::symbolizer_wait) for another's turn at the
/// symbolizer (503 after it).
///
/// ```
/// let answer = frag::profile::symbol_answer(b"");
/// assert_eq!(answer.body, b"num_symbols: 1\n");
/// ```
#[must_use]
pub fn symbol_answer(addresses: &[u8]) -> GoAnswer {
    own::handed_over(|| {
        if let Some(answer) = without_names(addresses) {
            return answer;
        }
        match Turn::take_within(serving().symbolizer_wait) {
            Some(turn) => names(addresses, &turn),
            None => busy(),
        }
    })
}

/// The answer to a `/debug/pprof/symbol` request that needs no symbolizer: 413 over the limits, or
/// `num_symbols` alone when it names nothing; `None` when it needs names.
pub(super) fn without_names(addresses: &[u8]) -> Option<GoAnswer> {
    let count = address_count(addresses);
    match symbol_check(addresses.len(), count) {
        Err(refusal) => Some(refusal),
        Ok(()) if count == 0 => Some(num_symbols()),
        Ok(()) => None,
    }
}

/// The words of a `/debug/pprof/symbol` request (what it asks to name, addresses or not).
fn address_count(addresses: &[u8]) -> usize {
    addresses.split(|&b| b == b'+').filter(|w| !w.trim_ascii().is_empty()).count()
}

/// The most bytes an address takes in a `/debug/pprof/symbol` request: 20 decimal digits and its
/// `+` (`0x` and 16 hexadecimal digits take less), with room for spaces.
pub(super) const ADDRESS_BYTES: usize = 24;

/// 413 for a `/debug/pprof/symbol` request of `bytes` (when read whole) or `count` addresses over
/// [`Serving::symbol_addresses`](super::serving::Serving::symbol_addresses).
fn symbol_check(bytes: usize, count: usize) -> Result<(), GoAnswer> {
    let cap = serving().symbol_addresses;
    if count > cap {
        return Err(too_long(&format!("{count} addresses")));
    }
    if bytes > cap.saturating_mul(ADDRESS_BYTES) {
        return Err(too_long(&format!("a body of {bytes} bytes")));
    }
    Ok(())
}

/// 413 for a `/debug/pprof/symbol` request of `what`, with the limits.
pub(super) fn too_long(what: &str) -> GoAnswer {
    let cap = serving().symbol_addresses;
    let why = format!(
        "{what}: at most {cap} addresses ({} bytes) in one request (frag::profile::Serving::symbol_addresses); \
         send them in parts",
        cap.saturating_mul(ADDRESS_BYTES)
    );
    GoAnswer::refusal(413, &why)
}

/// The answer to a `/debug/pprof/symbol` request that names nothing: names are to be had.
fn num_symbols() -> GoAnswer {
    GoAnswer::ok("text/plain; charset=utf-8", None, b"num_symbols: 1\n".to_vec())
}

/// The names of `addresses`, in the symbolizer's turn.
pub(super) fn names(addresses: &[u8], _turn: &Turn) -> GoAnswer {
    let mut body = String::from("num_symbols: 1\n");
    let mut symbols = Symbols::new().unwrap_or_else(Symbols::none);
    for word in addresses.split(|&b| b == b'+') {
        let word = core::str::from_utf8(word).unwrap_or_default().trim();
        let parsed = match word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => word.parse(),
        };
        let Some(address) = parsed.ok().filter(|&a| a != 0).and_then(|a| usize::try_from(a).ok()) else { continue };
        if let Some(line) = symbols.lines(address.saturating_add(1)).first() {
            // The mangled name where there is one, as a symbol table gives it: `pprof` demangles it
            // as it does a binary's (it would take the `<...>` of a demangled one for C++ templates).
            let name = if line.system_name.is_empty() { &line.function } else { &line.system_name };
            let _ = writeln!(body, "{address:#x} {name}");
        }
    }
    GoAnswer::ok("text/plain; charset=utf-8", None, body.into_bytes())
}

/// `after − before`, site by site (by stack and scope), every value: what happened in between, as Go's delta
/// profiles give it (`inuse_*` may be negative where more was freed than allocated).
fn delta(before: Vec<SiteFigures>, after: Vec<SiteFigures>) -> Vec<SiteFigures> {
    let mut base: HashMap<(Vec<usize>, u16), SiteFigures> =
        before.into_iter().map(|s| ((s.stack.clone(), s.scope), s)).collect();
    let mut out: Vec<SiteFigures> = after
        .into_iter()
        .map(|mut s| {
            if let Some(b) = base.remove(&(s.stack.clone(), s.scope)) {
                s.tally.alloc_blocks -= b.tally.alloc_blocks;
                s.tally.alloc_bytes -= b.tally.alloc_bytes;
                s.tally.inuse_blocks -= b.tally.inuse_blocks;
                s.tally.inuse_bytes -= b.tally.inuse_bytes;
                s.pinned_bytes -= b.pinned_bytes;
            }
            s
        })
        .collect();
    // A site seen before and not after (its tallies are never removed, so only if it merged into
    // another stack's): it freed what it held.
    out.extend(base.into_values().map(|b| {
        let mut s =
            SiteFigures { stack: b.stack, scope: b.scope, pinned_bytes: -b.pinned_bytes, ..SiteFigures::default() };
        (s.tally.inuse_blocks, s.tally.inuse_bytes) = (-b.tally.inuse_blocks, -b.tally.inuse_bytes);
        s
    }));
    out
}

/// Go's legacy text format (`debug=1`): a header with the totals, then one record per site, largest
/// in use first, `inuse_objects: inuse_bytes [alloc_objects: alloc_bytes] @ addresses`, each address
/// followed by a `#` line with its function and place when symbolized. The header's `heap_v2/1` says
/// that the values need no scaling: they are estimates already weighted by the inverse sampling
/// probability (a comment line says so, with the mean).
fn text(endpoint: Endpoint, sites: &[SiteFigures], symbolize: bool) -> String {
    let symbols = if symbolize { Symbols::new() } else { None };
    let mut symbols = symbols.unwrap_or_else(Symbols::none);
    let r = |v: f64| v.round() as i64;
    let sum = |f: fn(&SiteFigures) -> f64| r(sites.iter().map(f).sum());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "heap profile: {}: {} [{}: {}] @ heap_v2/1",
        sum(|s| s.tally.inuse_blocks),
        sum(|s| s.tally.inuse_bytes),
        sum(|s| s.tally.alloc_blocks),
        sum(|s| s.tally.alloc_bytes)
    );
    let mean = match sampling() {
        Sampling::MeanBytes(m) => format!("a sampling mean of {m} bytes"),
        other => format!("sampling {other:?}"),
    };
    let _ = writeln!(
        out,
        "# frag {}: every value is an estimate from {mean}, already weighted by the inverse sampling probability",
        endpoint.name()
    );
    let mut order: Vec<&SiteFigures> = sites.iter().collect();
    order.sort_by(|a, b| b.tally.inuse_bytes.total_cmp(&a.tally.inuse_bytes));
    for site in order {
        let frames = frames(&mut symbols, symbolize, &site.stack);
        let addresses: Vec<String> = frames.iter().map(|(pc, _)| format!("{:#x}", pc.saturating_sub(1))).collect();
        let _ = writeln!(
            out,
            "{}: {} [{}: {}] @ {}",
            r(site.tally.inuse_blocks),
            r(site.tally.inuse_bytes),
            r(site.tally.alloc_blocks),
            r(site.tally.alloc_bytes),
            if addresses.is_empty() { "[no stack]".to_owned() } else { addresses.join(" ") }
        );
        if symbolize {
            for &(pc, first) in &frames {
                for line in symbols.lines(pc).get(first..).unwrap_or(&[]) {
                    let _ =
                        writeln!(out, "#\t{:#x}\t{}\t{}:{}", pc.saturating_sub(1), line.function, line.file, line.line);
                }
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_parsed_as_go_takes_them_and_refused_with_what_is_accepted() {
        assert_eq!(GoQuery::parse("").unwrap(), GoQuery::default());
        let q = GoQuery::parse("gc=1&seconds=3600&debug=0&symbolize=1").unwrap();
        assert_eq!((q.seconds, q.debug, q.symbolize), (Some(3600), false, Some(true)));
        for (query, says) in [
            ("seconds=0", "must be a positive integer"),
            ("seconds=-1", "must be a positive integer"),
            ("seconds=1.5", "must be a positive integer"),
            ("debug=2", "0 or 1"),
            ("symbolize=yes", "0 or 1"),
            ("rate=1", "expected seconds, debug, symbolize or gc"),
        ] {
            let e = GoQuery::parse(query).unwrap_err();
            assert!(e.to_string().contains(says), "{query}: {e}");
        }
    }

    #[test]
    fn endpoints_by_path() {
        assert_eq!(Endpoint::from_path("/debug/pprof/heap"), Some(Endpoint::Heap));
        assert_eq!(Endpoint::from_path("/debug/pprof/allocs/"), Some(Endpoint::Allocs));
        assert_eq!(Endpoint::from_path("/debug/pprof/profile"), None);
    }

    /// The delta against a model: site by site, every value after minus before; a site only in
    /// the first gives back what it held.
    #[test]
    fn a_delta_subtracts_site_by_site() {
        let site = |stack: &[usize], v: f64| {
            let mut s = SiteFigures { stack: stack.to_vec(), ..SiteFigures::default() };
            (s.tally.alloc_blocks, s.tally.alloc_bytes, s.tally.inuse_blocks, s.tally.inuse_bytes) =
                (v, 10.0 * v, v / 2.0, 5.0 * v);
            s
        };
        let d = delta(vec![site(&[1], 4.0), site(&[2], 2.0)], vec![site(&[1], 10.0), site(&[3], 1.0)]);
        let by: HashMap<Vec<usize>, &SiteFigures> = d.iter().map(|s| (s.stack.clone(), s)).collect();
        assert_eq!((by[&vec![1]].tally.alloc_bytes, by[&vec![1]].tally.inuse_bytes), (60.0, 30.0));
        assert_eq!(by[&vec![3]].tally.alloc_blocks, 1.0);
        assert_eq!((by[&vec![2]].tally.alloc_bytes, by[&vec![2]].tally.inuse_bytes), (0.0, -10.0));
    }
}
