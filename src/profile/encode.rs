//! Building a `profile.proto` from the sites' figures: the sample types, the string table, the
//! mappings, functions and locations (symbolized in process, or addresses for the profiler to name),
//! and gzip. Shared by [`heap_pprof`](super::heap_pprof) and Go's endpoints (`go`).

use std::collections::HashMap;
use std::io::Write;

use super::mappings;
use super::proto;
use crate::sampler::{Sampling, sampling};
use crate::scope;
use crate::sites::read::{Grouping, SiteFigures, snapshot};
use crate::sites::symbols::{PLUMBING_REGEX, Symbols, trimmed};

/// Every site's figures now, one per stack and scope, with its pinned bytes where the allocator
/// splits its holes by class (`pinned`: whether it does).
pub(super) fn sites_now() -> Pinned {
    let pins = crate::report::pinned_by_site();
    Pinned { split: pins.is_some(), sites: snapshot(&pins.unwrap_or_default(), Grouping::StackAndScope) }
}

/// The sites' figures, and whether their `pinned_bytes` mean anything (the allocator split its holes
/// by class): only then does a profile carry `pinned_space`.
pub(super) struct Pinned {
    pub(super) split: bool,
    pub(super) sites: Vec<SiteFigures>,
}

pub(super) fn gzip(p: &proto::Profile) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(p);
    let mut gz = flate2::write::GzEncoder::new(Vec::with_capacity(raw.len() / 3), flate2::Compression::default());
    // Writing to a `Vec` cannot fail.
    let _ = gz.write_all(&raw);
    gz.finish().unwrap_or_default()
}

/// Interned strings: index 0 is "", as the format requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Self { table: vec![String::new()], index: HashMap::from([(String::new(), 0)]) }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// The label that names a sample's scope (`go tool pprof -tagfocus=scope=tenant-42`); samples taken
/// outside every scope have none.
const SCOPE_LABEL: &str = "scope";

/// How a profile is built from the sites' figures.
pub(super) struct Options {
    pub(super) symbolize: bool,
    /// The sample type `pprof` shows unless told otherwise.
    pub(super) default_sample_type: &'static str,
    /// For a delta profile: how long it spans.
    pub(super) duration_nanos: i64,
}

impl Options {
    pub(super) fn heap(symbolize: bool) -> Self {
        Self { symbolize, default_sample_type: "inuse_space", duration_nanos: 0 }
    }
}

pub(super) fn build(all: &Pinned, options: &Options) -> proto::Profile {
    let sites = &all.sites;
    let symbolize = options.symbolize;
    // In a child forked mid-symbolization, the profile goes out unsymbolized (with `drop_frames`).
    let symbols = if symbolize { Symbols::new() } else { None };
    let symbolize = symbols.is_some();
    let mut symbols = symbols.unwrap_or_else(Symbols::none);
    let mut strings = Strings::new();
    let vt = |s: &mut Strings, t: &str, u: &str| proto::ValueType { r#type: s.id(t), unit: s.id(u) };
    let mut sample_type = vec![
        vt(&mut strings, "alloc_objects", "count"),
        vt(&mut strings, "alloc_space", "bytes"),
        vt(&mut strings, "inuse_objects", "count"),
        vt(&mut strings, "inuse_space", "bytes"),
    ];
    if all.split {
        sample_type.push(vt(&mut strings, "pinned_space", "bytes"));
    }
    let period_type = Some(vt(&mut strings, "space", "bytes"));
    let period = match sampling() {
        Sampling::MeanBytes(m) => m as i64,
        _ => 1,
    };

    // `Serving::redacted`: no tenant names, nothing that names the build.
    let redacted = super::serving::serving().redacted;
    let maps = mappings::executable();
    let mapping: Vec<proto::Mapping> = maps
        .iter()
        .enumerate()
        .map(|(i, m)| proto::Mapping {
            id: i as u64 + 1,
            memory_start: m.start,
            memory_limit: m.limit,
            file_offset: m.file_offset,
            filename: strings.id(&m.file),
            build_id: if redacted { 0 } else { strings.id(&m.build_id) },
            has_functions: symbolize,
            has_filenames: symbolize,
            has_line_numbers: symbolize,
            has_inline_frames: symbolize,
        })
        .collect();
    let mapping_of = |pc: usize| {
        let pc = pc as u64;
        maps.iter().position(|m| m.start <= pc && pc < m.limit).map_or(0, |i| i as u64 + 1)
    };

    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_ids: HashMap<(i64, i64, i64), u64> = HashMap::new();
    let mut locations: Vec<proto::Location> = Vec::new();
    let mut location_ids: HashMap<(usize, usize), u64> = HashMap::new();
    let mut samples = Vec::with_capacity(sites.len());

    for site in sites {
        let frames = frames(&mut symbols, symbolize, &site.stack);
        let mut ids = Vec::with_capacity(frames.len().max(1));
        for (pc, first) in frames {
            let next_id = locations.len() as u64 + 1;
            let id = *location_ids.entry((pc, first)).or_insert(next_id);
            if id == next_id {
                let line = if symbolize {
                    let lines = symbols.lines(pc).get(first..).unwrap_or(&[]).to_vec();
                    lines
                        .iter()
                        .map(|l| {
                            let key = (strings.id(&l.function), strings.id(&l.system_name), strings.id(&l.file));
                            let next_fn = functions.len() as u64 + 1;
                            let function_id = *function_ids.entry(key).or_insert(next_fn);
                            if function_id == next_fn {
                                functions.push(proto::Function {
                                    id: function_id,
                                    name: key.0,
                                    system_name: key.1,
                                    filename: key.2,
                                    start_line: 0,
                                });
                            }
                            proto::Line { function_id, line: i64::from(l.line), column: 0 }
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                // The call instruction the return address follows: what a symbolizer should look up.
                let address = pc.saturating_sub(1) as u64;
                locations.push(proto::Location { id, mapping_id: mapping_of(pc), address, line, is_folded: false });
            }
            ids.push(id);
        }
        if ids.is_empty() {
            ids.push(no_stack_location(&mut strings, &mut functions, &mut locations));
        }
        let label = match scope::read::name(site.scope).filter(|_| !redacted) {
            Some(name) => {
                vec![proto::Label { key: strings.id(SCOPE_LABEL), str: strings.id(name), num: 0, num_unit: 0 }]
            }
            None => Vec::new(),
        };
        samples.push(proto::Sample { location_id: ids, value: values(site, all.split), label });
    }

    let comment = vec![
        strings.id("frag heap profile: every value is an estimate from sampled allocations, weighted by the inverse sampling probability"),
        strings.id(&format!("sampling: {:?}; unwinder: {}", sampling(), crate::sites::unwinder())),
    ];
    let drop_frames = if symbolize { 0 } else { strings.id(PLUMBING_REGEX) };
    let default_sample_type = strings.id(options.default_sample_type);
    let time_nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
    proto::Profile {
        sample_type,
        sample: samples,
        mapping,
        location: locations,
        function: functions,
        string_table: strings.table,
        drop_frames,
        keep_frames: 0,
        time_nanos,
        duration_nanos: options.duration_nanos,
        period_type,
        period,
        comment,
        default_sample_type,
    }
}

/// A site's frames as profiles show them, `(return address, first inlined line to show)`: trimmed of
/// the allocation machinery when symbolized, every return address as it is otherwise.
pub(super) fn frames(symbols: &mut Symbols, symbolize: bool, stack: &[usize]) -> Vec<(usize, usize)> {
    if symbolize && !stack.is_empty() { trimmed(symbols, stack) } else { stack.iter().map(|&pc| (pc, 0)).collect() }
}

/// `[alloc_objects, alloc_space, inuse_objects, inuse_space]`, then `pinned_space` when `pinned`,
/// rounded.
fn values(site: &SiteFigures, pinned: bool) -> Vec<i64> {
    [
        site.tally.alloc_blocks,
        site.tally.alloc_bytes,
        site.tally.inuse_blocks,
        site.tally.inuse_bytes,
        site.pinned_bytes,
    ]
    .iter()
    .take(if pinned { 5 } else { 4 })
    .map(|v| v.round() as i64)
    .collect()
}

/// A location standing for samples without a stack, named for why.
fn no_stack_location(
    strings: &mut Strings,
    functions: &mut Vec<proto::Function>,
    locations: &mut Vec<proto::Location>,
) -> u64 {
    let name = if crate::sites::unwinder() == crate::sites::Unwinder::None {
        "[no stack: no unwinder on this target]"
    } else {
        "[no stack: site table full, a stack of the program's own, or before the unwind tables]"
    };
    let function_id = functions.len() as u64 + 1;
    let name = strings.id(name);
    functions.push(proto::Function { id: function_id, name, system_name: name, filename: 0, start_line: 0 });
    let id = locations.len() as u64 + 1;
    locations.push(proto::Location {
        id,
        mapping_id: 0,
        address: 0,
        line: vec![proto::Line { function_id, line: 0, column: 0 }],
        is_folded: false,
    });
    id
}
