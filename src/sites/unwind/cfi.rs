//! Building a module's [`Rows`] from its call-frame information (`.eh_frame`), off the allocation
//! path.
//!
//! gimli parses the entries and evaluates each FDE's CFI program into its table of rows; each row is
//! reduced to the walker's [`Rule`] shape (x86-64 register numbers: `rsp` 7, `rbp` 6, the return
//! address 16). Anything outside that shape becomes [`Rule::UNKNOWN`]. Malformed input ends the
//! FDE or the section it is in, never the process: this module is fed arbitrary bytes by its tests.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, CommonInformationEntry, EhFrame, EhFrameHdr, EhFrameOffset, EndianSlice,
    NativeEndian, PartialFrameDescriptionEntry, Register, RegisterRule, UnwindContext, UnwindContextStorage,
    UnwindSection, UnwindTableRow,
};

use super::rows::{Bp, Cfa, Rows, Rule, Span};

const RSP: Register = Register(7);
const RBP: Register = Register(6);
const RA: Register = Register(16);

/// `DW_OP_breg6` (rbp + SLEB128 offset) and `DW_OP_deref`.
const DW_OP_BREG6: u8 = 0x76;
const DW_OP_DEREF: u8 = 0x06;

/// Bytes mapped at an address.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mapped<'a> {
    pub(crate) addr: usize,
    pub(crate) bytes: &'a [u8],
}

/// What went wrong with a module's tables as a whole (single FDEs that fail are left out silently:
/// their addresses get no rule).
#[derive(Debug)]
pub(crate) enum BuildError {
    /// `.eh_frame_hdr` is malformed.
    Header(#[allow(dead_code)] gimli::Error),
    /// `.eh_frame_hdr` points at `.eh_frame` indirectly, or outside the mapped memory given.
    Unreachable,
}

/// The rows of the module whose `.eh_frame_hdr` is `hdr`; `eh_frame_at(addr)` gives the mapped
/// bytes from `addr` (where the header says `.eh_frame` is) to the end of their segment. The FDEs are
/// taken in the order of the header's search table, which is sorted by address, so the rows come out
/// sorted; without a table, in the order of the section.
pub(crate) fn build<'a>(
    hdr: Mapped<'a>,
    eh_frame_at: impl FnOnce(usize) -> Option<Mapped<'a>>,
) -> Result<(Rows, Stats), BuildError> {
    let hdr_bases = BaseAddresses::default().set_eh_frame_hdr(hdr.addr as u64);
    let parsed = EhFrameHdr::new(hdr.bytes, NativeEndian).parse(&hdr_bases, 8).map_err(BuildError::Header)?;
    let addr = parsed.eh_frame_ptr().direct().map_err(|_| BuildError::Unreachable)?;
    let eh_frame = usize::try_from(addr).ok().and_then(eh_frame_at).ok_or(BuildError::Unreachable)?;
    let Some(table) = parsed.table() else { return Ok(build_eh_frame(eh_frame)) };
    let mut builder = Builder::new(eh_frame);
    let (section, bases) = (builder.section, builder.bases.clone());
    let mut entries = table.iter(&hdr_bases);
    loop {
        match entries.next() {
            Ok(Some((_, fde))) => {
                let offset =
                    fde.direct().ok().and_then(|a| usize::try_from(a).ok()).and_then(|a| a.checked_sub(eh_frame.addr));
                match offset.map(|o| section.partial_fde_from_offset(&bases, EhFrameOffset(o))) {
                    Some(Ok(partial)) => builder.fde(&partial),
                    _ => builder.stats.failed += 1,
                }
            }
            Ok(None) => break,
            Err(_) => {
                builder.stats.failed += 1;
                break;
            }
        }
    }
    Ok(builder.finish())
}

/// What a build saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// FDEs turned into rows.
    pub(crate) fdes: usize,
    /// FDEs (or the rest of the section) that failed to parse or evaluate.
    pub(crate) failed: usize,
    /// Rows whose rule the walker cannot apply.
    pub(crate) unknown: usize,
}

/// gimli's evaluation state with room for 16 register rules per row (an x86-64 frame saves at most
/// the 6 callee-saved registers and the return address) rather than its default 192: each row is
/// copied as the CFI program runs, and the smaller rows make the build several times faster. A
/// program that sets more rules fails its FDE.
struct Compact;

impl<T: gimli::ReaderOffset> UnwindContextStorage<T> for Compact {
    type Rules = [(Register, RegisterRule<T>); 16];
    type Stack = Box<[UnwindTableRow<T, Self>; 4]>;
}

type Slice<'a> = EndianSlice<'a, NativeEndian>;

/// One section's build in progress.
struct Builder<'a> {
    section: EhFrame<Slice<'a>>,
    bases: BaseAddresses,
    ctx: Box<UnwindContext<usize, Compact>>,
    /// The CIEs seen, by offset (a module has a handful).
    cies: Vec<(usize, CommonInformationEntry<Slice<'a>>)>,
    spans: Vec<Span>,
    stats: Stats,
}

impl<'a> Builder<'a> {
    fn new(eh_frame: Mapped<'a>) -> Self {
        let mut section = EhFrame::new(eh_frame.bytes, NativeEndian);
        section.set_address_size(8);
        Self {
            section,
            bases: BaseAddresses::default().set_eh_frame(eh_frame.addr as u64),
            ctx: Box::new(UnwindContext::new_in()),
            cies: Vec::new(),
            spans: Vec::new(),
            stats: Stats::default(),
        }
    }

    /// Adds the rows of one FDE (none if it fails to parse or evaluate).
    fn fde(&mut self, partial: &PartialFrameDescriptionEntry<'_, EhFrame<Slice<'a>>, Slice<'a>>) {
        let cies = &mut self.cies;
        let fde = partial.parse(|s, b, offset| {
            if let Some((_, cie)) = cies.iter().find(|(o, _)| *o == offset.0) {
                return Ok(cie.clone());
            }
            let cie = s.cie_from_offset(b, offset)?;
            cies.push((offset.0, cie.clone()));
            Ok(cie)
        });
        let Ok(fde) = fde else {
            self.stats.failed += 1;
            return;
        };
        if fde.is_signal_trampoline() {
            return; // a signal frame: no rows, the walk stops there
        }
        let Ok(mut table) = fde.rows(&self.section, &self.bases, &mut self.ctx) else {
            self.stats.failed += 1;
            return;
        };
        let before = self.spans.len();
        let ok = loop {
            match table.next_row() {
                Ok(Some(row)) => {
                    let (Ok(start), Ok(end)) =
                        (usize::try_from(row.start_address()), usize::try_from(row.end_address()))
                    else {
                        break false;
                    };
                    let rule = rule_of(&self.section, row.cfa(), row.register(RBP), row.register(RA));
                    self.stats.unknown += usize::from(rule.cfa == Cfa::Unknown);
                    self.spans.push(Span { start, end, rule });
                }
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        if ok {
            self.stats.fdes += 1;
        } else {
            self.spans.truncate(before);
            self.stats.failed += 1;
        }
    }

    fn finish(self) -> (Rows, Stats) {
        (Rows::from_spans(self.spans), self.stats)
    }
}

/// The rows of the `.eh_frame` section in `eh_frame` (which may run on past the section's
/// terminator: parsing stops there), in the order of the section.
pub(crate) fn build_eh_frame(eh_frame: Mapped<'_>) -> (Rows, Stats) {
    let mut builder = Builder::new(eh_frame);
    let section = builder.section;
    let bases = builder.bases.clone();
    let mut entries = section.entries(&bases);
    loop {
        match entries.next() {
            Ok(Some(CieOrFde::Fde(partial))) => builder.fde(&partial),
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(None) => break,
            Err(_) => {
                // The iterator stops at an entry it cannot frame.
                builder.stats.failed += 1;
                break;
            }
        }
    }
    builder.finish()
}

type Offset = usize;

/// One row's rule in the walker's shape.
fn rule_of(
    section: &EhFrame<Slice<'_>>,
    cfa: &CfaRule<Offset>,
    bp: RegisterRule<Offset>,
    ra: RegisterRule<Offset>,
) -> Rule {
    match ra {
        RegisterRule::Offset(-8) => {}
        RegisterRule::Undefined => return Rule::END,
        _ => return Rule::UNKNOWN,
    }
    let (cfa, cfa_offset) = match cfa {
        CfaRule::RegisterAndOffset { register: RSP, offset } => (Cfa::Sp, *offset),
        CfaRule::RegisterAndOffset { register: RBP, offset } => (Cfa::Bp, *offset),
        CfaRule::RegisterAndOffset { .. } => return Rule::UNKNOWN,
        CfaRule::Expression(e) => match e.get(section).ok().and_then(|e| deref_bp(e.0.slice())) {
            Some(offset) => (Cfa::DerefBp, offset),
            None => return Rule::UNKNOWN,
        },
    };
    let Ok(cfa_offset) = i32::try_from(cfa_offset) else { return Rule::UNKNOWN };
    let (bp, bp_offset) = match bp {
        // No rule for a callee-saved register: the System V ABI's default, unchanged.
        RegisterRule::Undefined | RegisterRule::SameValue => (Bp::Same, 0),
        RegisterRule::Offset(o) => match i16::try_from(o) {
            Ok(o) => (Bp::Saved, o),
            Err(_) => (Bp::Lost, 0),
        },
        _ => (Bp::Lost, 0),
    };
    Rule { cfa_offset, bp_offset, cfa, bp }
}

/// The offset `N` of the expression `DW_OP_breg6 N; DW_OP_deref`, the only CFA expression the walker
/// applies.
fn deref_bp(expr: &[u8]) -> Option<i64> {
    let (&op, mut rest) = expr.split_first()?;
    if op != DW_OP_BREG6 {
        return None;
    }
    let mut value: i64 = 0;
    let mut shift = 0u32;
    loop {
        let (&byte, tail) = rest.split_first()?;
        rest = tail;
        if shift >= 63 {
            return None;
        }
        value |= i64::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            if shift < 64 && byte & 0x40 != 0 {
                value |= -1i64 << shift;
            }
            break;
        }
    }
    (rest == [DW_OP_DEREF]).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_realigning_prologue_expression_is_recognised() {
        assert_eq!(deref_bp(&[DW_OP_BREG6, 0x78, DW_OP_DEREF]), Some(-8));
        assert_eq!(deref_bp(&[DW_OP_BREG6, 0x10, DW_OP_DEREF]), Some(16));
        assert_eq!(deref_bp(&[DW_OP_BREG6, 0x78]), None);
        assert_eq!(deref_bp(&[0x77, 0x78, DW_OP_DEREF]), None);
        assert_eq!(deref_bp(&[DW_OP_BREG6, 0x78, DW_OP_DEREF, DW_OP_DEREF]), None);
    }

    /// This test binary's own `.eh_frame`: every function the test calls has a rule.
    #[test]
    fn this_binary_has_rows_for_its_own_code() {
        let tables = super::super::modules::scan_for_test();
        let here = this_binary_has_rows_for_its_own_code as *const () as usize;
        let rule = tables.rule(here);
        assert!(matches!(rule.cfa, Cfa::Sp | Cfa::Bp), "{rule:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Arbitrary bytes as `.eh_frame`: the builder returns, never panics, and its rows look up.
        #[test]
        fn arbitrary_eh_frame_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            addr in 0usize..(1 << 47),
            probes in proptest::collection::vec(any::<usize>(), 8),
        ) {
            let (rows, _) = build_eh_frame(Mapped { addr, bytes: &bytes });
            for p in probes {
                let _ = rows.rule(p);
            }
        }

        /// Plausible entries with arbitrary contents (a CIE then FDEs with valid lengths and CIE
        /// pointers, random programs): reach the CFI evaluator rather than fail at framing.
        #[test]
        fn framed_entries_with_arbitrary_programs_never_panic(
            cie_program in proptest::collection::vec(any::<u8>(), 0..24),
            fdes in proptest::collection::vec((any::<u32>(), 1u32..5000, proptest::collection::vec(any::<u8>(), 0..40)), 1..12),
        ) {
            let mut bytes = Vec::new();
            // CIE: length, id 0, version 1, augmentation "zR", code align 1, data align -8, RA 16,
            // augmentation data length 1, FDE encoding pcrel|sdata4.
            let mut cie = vec![0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b];
            cie.extend_from_slice(&cie_program);
            bytes.extend_from_slice(&(cie.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&cie);
            for (start, len, program) in fdes {
                let at = bytes.len();
                let mut fde = Vec::new();
                fde.extend_from_slice(&((at + 4) as u32).to_le_bytes()); // back to the CIE
                fde.extend_from_slice(&start.to_le_bytes());
                fde.extend_from_slice(&len.to_le_bytes());
                fde.push(0); // augmentation data length
                fde.extend_from_slice(&program);
                bytes.extend_from_slice(&(fde.len() as u32).to_le_bytes());
                bytes.extend_from_slice(&fde);
            }
            bytes.extend_from_slice(&[0; 4]);
            let (rows, stats) = build_eh_frame(Mapped { addr: 0x1000, bytes: &bytes });
            prop_assert!(stats.fdes + stats.failed >= 1);
            let (lo, hi) = rows.range();
            for pc in [lo, hi, lo.wrapping_add(hi) / 2] {
                let _ = rows.rule(pc);
            }
        }
    }
}
