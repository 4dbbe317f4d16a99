//! Which bytes of a recording are pure outputs, and poisoning them before a checked run.
//!
//! The check compares what a run leaves with the recorded post-launch state. A byte that the
//! launch writes with the value it already held (an output buffer that still holds the answer
//! of an earlier run, as in a program that runs a reference kernel into the same buffer first,
//! or zeros written over zeros) is equal before and after: a candidate that never writes it
//! passes. Such stale output hides a partial write, or no write at all.
//!
//! So the bytes the original code writes whatever they held are learned once per recording:
//! each region that may be an output (one the launch changed, or one a non-const pointer
//! argument points into) is filled with two patterns in turn and the original code is run;
//! the bytes it leaves equal to the recording under both are bytes it overwrites without
//! reading. Every later checked run starts with those bytes set to [`POISON`] (a NaN as f32
//! and f64, 0xff as bytes), so code that leaves any of them unwritten fails, and the message
//! says so ([`explain`]). A region whose other bytes or whose neighbours change with the
//! pattern is read by the code (an input, or an in-out buffer such as `y` in `y = a*x + y`)
//! and is never poisoned.

use crate::store::records::{LaunchRecord, RegionData, RegionKind, Snapshot};
use std::ops::Range;

/// What a checked run finds in output bytes it did not write: all ones, a quiet NaN as f32, f64
/// and f16, -1 as a signed integer.
pub const POISON: u8 = 0xff;

/// The second pattern of the learning runs: a byte whose words are ordinary finite floats, so
/// that code which reads the region (`max(y, x)`, `y + x`, `y == 0 ? …`) gives another result
/// with one pattern or the other.
pub const SECOND: u8 = 0x5a;

/// At most this many regions are tried as outputs (each costs two runs of the original code).
pub const MAX_CANDIDATES: usize = 16;

/// A region whose output bytes are more scattered than this many ranges (every other word of a
/// strided layout) is not poisoned: its mask travels with every job, and would outweigh it.
pub const MAX_RANGES: usize = 4096;

/// One parameter of a kernel as its demangled name spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamType {
    pub pointer: bool,
    /// A pointer to const (`float const*`): what it points to is read only.
    pub to_const: bool,
    /// The pointee without qualifiers (`float`, `double`, `int`, `S`), for pointers.
    pub pointee: String,
}

/// The parameter types of a demangled kernel name (`axpy(int, float const*, float*)`); None
/// where the name holds no parameter list (an `extern "C"` kernel's plain name).
pub fn param_types(demangled: &str) -> Option<Vec<ParamType>> {
    let s = demangled.trim_end();
    if !s.ends_with(')') {
        return None;
    }
    let bytes = s.as_bytes();
    let mut depth = 0i32;
    let mut open = None;
    for i in (0..bytes.len()).rev() {
        match bytes[i] {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    open = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = &s[open? + 1..s.len() - 1];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '<' | '(' | '[' => depth += 1,
            '>' | ')' | ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let parts: Vec<&str> = parts.into_iter().map(str::trim).collect();
    if parts == [""] || parts == ["void"] {
        return Some(Vec::new());
    }
    Some(parts.into_iter().map(param_type).collect())
}

fn param_type(p: &str) -> ParamType {
    let Some(star) = p.rfind('*') else {
        return ParamType {
            pointer: false,
            to_const: false,
            pointee: p.to_owned(),
        };
    };
    let head = &p[..star];
    // Only one level of pointer is a plain buffer; `float**` points to pointers.
    let words: Vec<&str> = head
        .split(|c: char| c.is_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    let to_const = words.contains(&"const");
    let pointee = words
        .iter()
        .filter(|w| !matches!(**w, "const" | "volatile" | "__restrict__" | "__restrict"))
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    ParamType {
        pointer: true,
        to_const,
        pointee,
    }
}

/// The region each pointer argument of the launch points into, by parameter (None for
/// non-pointers, null pointers and pointers into no recorded allocation).
pub fn pointed_regions(
    launch: &LaunchRecord,
    prologue: &Snapshot,
    types: &[ParamType],
) -> Vec<Option<usize>> {
    let Ok(args) = launch.args() else {
        return vec![None; types.len()];
    };
    types
        .iter()
        .zip(&launch.params)
        .map(|(t, slot)| {
            if !t.pointer || slot.size != 8 {
                return None;
            }
            let at = slot.offset as usize;
            let ptr = u64::from_le_bytes(args.get(at..at + 8)?.try_into().ok()?);
            prologue.regions.iter().position(|r| {
                r.kind == RegionKind::Allocation && r.addr <= ptr && ptr < r.addr + r.size
            })
        })
        .collect()
}

/// Which bytes of which regions are poisoned: (region, byte ranges), as learned
/// ([`learned`]) and as jobs carry them.
pub type Masks = Vec<(usize, Vec<Range<usize>>)>;

/// Floating-point pointees: buffers whose words are not indices. The learning runs fill a
/// region with patterns, which as an index (-1, 0x5a5a5a5a) would send the original code out
/// of bounds; a float buffer that the launch did not change is tried, an integer one only where
/// the launch changed it.
fn is_float(pointee: &str) -> bool {
    matches!(
        pointee,
        "float" | "double" | "__half" | "half" | "__nv_bfloat16" | "float2" | "float4" | "double2"
    )
}

/// The allocations worth trying as outputs: those the launch changed, then the float buffers
/// a pointer argument not known to point to const points into, at most [`MAX_CANDIDATES`].
pub fn candidates(launch: &LaunchRecord, prologue: &Snapshot, written: &[usize]) -> Vec<usize> {
    let demangled = crate::kernel::demangle(&launch.kernel);
    let types = param_types(&demangled)
        .filter(|t| t.len() == launch.params.len())
        .unwrap_or_default();
    let pointed = pointed_regions(launch, prologue, &types);
    let mut out: Vec<usize> = written
        .iter()
        .copied()
        .filter(|&i| prologue.regions[i].kind == RegionKind::Allocation)
        .collect();
    for (t, r) in types.iter().zip(pointed) {
        if let Some(r) = r.filter(|_| !t.to_const && is_float(&t.pointee)) {
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out.retain(|&i| prologue.regions[i].size > 0);
    out.truncate(MAX_CANDIDATES);
    out
}

/// The bytes of one region that the code overwrote without reading them, from its two learning
/// runs (the region filled with [`POISON`], then with [`SECOND`], everything else as recorded):
/// ranges of bytes left equal to the recording both times. None when the code read the region:
/// a byte that is neither the recorded value nor the pattern it started with, or a byte written
/// in one run and not in the other.
pub fn learned(want: &[u8], first: &[u8], second: &[u8]) -> Option<Vec<Range<usize>>> {
    if want.len() != first.len() || want.len() != second.len() {
        return None;
    }
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, ((&w, &a), &b)) in want.iter().zip(first).zip(second).enumerate() {
        let written = a == w && b == w;
        let untouched = a == POISON && b == SECOND;
        if written {
            match out.last_mut() {
                Some(r) if r.end == i => r.end = i + 1,
                _ => out.push(i..i + 1),
            }
        } else if !untouched {
            return None;
        }
    }
    Some(out)
}

/// A region's bytes as a checked run starts from: the prologue with `mask` set to [`POISON`].
pub fn poisoned(prologue: &[u8], mask: &[Range<usize>]) -> Vec<u8> {
    let mut out = prologue.to_vec();
    for r in mask {
        out[r.clone()].fill(POISON);
    }
    out
}

/// Most separate copies a timed run makes to restore one region's bytes that are not outputs;
/// where they are more scattered, the whole region is copied in one.
pub const MAX_RESTORE_COPIES: usize = 16;

/// The bytes of a written region of `size` bytes that a timed run restores: all but its output
/// bytes (`mask`). Output bytes are overwritten whatever they hold, as in the program, where
/// they hold the previous launch's results; copying them back from a pristine image would only
/// bring that image and the region through the L2 before the run: trmm's -O3, 8 MiB out beside
/// 24 MiB in, ran 8% slower in warm replay than in its program, and its speedup read 9% high
/// (H100, 2026-11-27; docs/measurement.md).
pub fn kept_between_runs(size: usize, mask: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut covered: Vec<Range<usize>> = mask
        .iter()
        .map(|r| r.start.min(size)..r.end.min(size))
        .filter(|r| !r.is_empty())
        .collect();
    covered.sort_by_key(|r| r.start);
    let mut out = Vec::new();
    let mut at = 0;
    for r in covered {
        if r.start > at {
            out.push(at..r.start);
        }
        at = at.max(r.end);
    }
    if at < size {
        out.push(at..size);
    }
    if out.len() > MAX_RESTORE_COPIES {
        out = std::iter::once(0..size).collect();
    }
    out
}

/// Bytes a mask covers.
pub fn bytes(mask: &[Range<usize>]) -> usize {
    mask.iter().map(|r| r.len()).sum()
}

/// Why a checked run that started from poisoned outputs failed, where the reason is that it
/// left some of them unwritten: the first region with poisoned bytes still holding [`POISON`]
/// where the recording holds something else. None where the failure is another one.
pub fn explain(
    expected: &Snapshot,
    observed: &Snapshot,
    masks: &[(usize, Vec<Range<usize>>)],
) -> Option<String> {
    for (i, mask) in masks {
        let (Some(e), Some(o)) = (expected.regions.get(*i), observed.regions.get(*i)) else {
            continue;
        };
        let (RegionData::Full(want), RegionData::Full(got)) = (&e.data, &o.data) else {
            continue;
        };
        let left: Vec<usize> = mask
            .iter()
            .flat_map(|r| r.clone())
            .filter(|&b| got.get(b) == Some(&POISON) && want.get(b) != Some(&POISON))
            .collect();
        let (Some(first), Some(last)) = (left.first(), left.last()) else {
            continue;
        };
        return Some(format!(
            "{}: {} of its {} output bytes left unwritten (bytes {first} to {last}): they were poisoned (0x{POISON:02x}) before the run, and the original launch writes them whatever they hold; this code leaves them as an earlier run left them (stale output)",
            crate::validate::describe(e),
            left.len(),
            bytes(mask),
        ));
    }
    None
}

#[cfg(test)]
// A mask of one range is what most outputs are.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::store::records::{ParamSlot, Region};

    #[test]
    fn parameter_types_come_from_the_demangled_name() {
        let t = param_types("axpy(int, float, float const*, double*, S const* const*)").unwrap();
        assert_eq!(t.len(), 5);
        assert!(!t[0].pointer && t[0].pointee == "int");
        assert!(t[2].pointer && t[2].to_const && t[2].pointee == "float");
        assert!(t[3].pointer && !t[3].to_const && t[3].pointee == "double");
        // A pointer to pointers: its pointee is a (const) pointer, never a float buffer.
        assert!(t[4].pointer && t[4].to_const && t[4].pointee == "S const*");
        let t = param_types("void ns::k<float, 2>(std::pair<int, int>, const float*)").unwrap();
        assert_eq!(t.len(), 2, "commas inside template arguments do not split");
        assert!(t[1].to_const && t[1].pointee == "float");
        assert_eq!(param_types("k()"), Some(vec![]));
        assert_eq!(param_types("extern_c_kernel"), None);
    }

    fn region(addr: u64, bytes: Vec<u8>) -> Region {
        Region::allocation(addr, bytes)
    }

    fn launch(kernel: &str, ptrs: &[u64]) -> LaunchRecord {
        let args: Vec<u8> = ptrs.iter().flat_map(|p| p.to_le_bytes()).collect();
        let params = (0..ptrs.len())
            .map(|i| ParamSlot {
                offset: 8 * i as u64,
                size: 8,
            })
            .collect();
        LaunchRecord {
            regions: 3,
            ..LaunchRecord::by_hand(kernel, params, &args)
        }
    }

    #[test]
    fn outputs_are_tried_where_the_launch_wrote_or_may_write() {
        // _Z4axpyPKfS0_Pf: axpy(float const*, float const*, float*)
        let pro = Snapshot {
            regions: vec![
                region(0x1000, vec![0; 16]),
                region(0x2000, vec![0; 16]),
                region(0x3000, vec![0; 16]),
            ],
        };
        let l = launch("_Z4axpyPKfS0_Pf", &[0x1000, 0x2000, 0x3004]);
        // Nothing changed (the output already held the answer): the non-const one is tried.
        assert_eq!(candidates(&l, &pro, &[]), [2]);
        // A region the launch changed is tried first, whatever points into it.
        assert_eq!(candidates(&l, &pro, &[0]), [0, 2]);
        // Without types (extern "C"), only what the launch changed.
        let c = launch("axpy", &[0x1000, 0x2000, 0x3004]);
        assert_eq!(candidates(&c, &pro, &[]), Vec::<usize>::new());
        assert_eq!(candidates(&c, &pro, &[1]), [1]);
        // _Z4linkPiPf: link(int*, float*): an unchanged int buffer may hold indices the code
        // follows (the patterns would send it out of bounds): not tried; the float one is.
        let ints = launch("_Z4linkPiPf", &[0x1000, 0x2000]);
        assert_eq!(candidates(&ints, &pro, &[]), [1]);
    }

    #[test]
    fn bytes_overwritten_under_both_patterns_are_outputs() {
        let want = vec![1u8, 2, 3, 4, 9, 9];
        // The code wrote bytes 0..4 and left 4..6 as it found them.
        let first = vec![1, 2, 3, 4, POISON, POISON];
        let second = vec![1, 2, 3, 4, SECOND, SECOND];
        assert_eq!(learned(&want, &first, &second), Some(vec![0..4]));
        // Something derived from the pattern: the code reads the region (y = y + x).
        let read = vec![1, 2, 3, 7, POISON, POISON];
        assert_eq!(learned(&want, &read, &second), None);
        // max(y, x) with a NaN y gives x, the recorded value; with the second pattern it does
        // not: two patterns tell it from an output.
        let max_second = vec![1, 2, 3, SECOND, SECOND, SECOND];
        assert_eq!(learned(&want, &first, &max_second), None);
        // A recorded byte equal to the poison is still an output where the code wrote it.
        let want = vec![POISON, 5];
        assert_eq!(learned(&want, &[POISON, 5], &[POISON, 5]), Some(vec![0..2]));
    }

    #[test]
    fn a_run_that_leaves_poisoned_bytes_is_told_as_stale_output() {
        let image = poisoned(&[0, 0, 0, 0, 0, 0, 0, 0], &[0..8]);
        assert_eq!(image, [POISON; 8]);
        let expected = Snapshot {
            regions: vec![region(0x3000, vec![1, 2, 3, 4, 5, 6, 7, 8])],
        };
        // Half the output written, half left as poisoned.
        let observed = Snapshot {
            regions: vec![region(
                0x3000,
                vec![1, 2, 3, 4, POISON, POISON, POISON, POISON],
            )],
        };
        let why = explain(&expected, &observed, &[(0, vec![0..8])]).unwrap();
        assert!(
            why.contains("4 of its 8 output bytes left unwritten (bytes 4 to 7)"),
            "{why}"
        );
        assert!(why.contains("stale output"), "{why}");
        // Wrong values, no poison left: another failure, told by the comparison itself.
        let wrong = Snapshot {
            regions: vec![region(0x3000, vec![9; 8])],
        };
        assert_eq!(explain(&expected, &wrong, &[(0, vec![0..8])]), None);
    }

    #[test]
    fn a_timed_run_restores_all_but_the_output_bytes() {
        // A pure output: nothing to restore.
        assert_eq!(kept_between_runs(8, &[0..8]), Vec::<Range<usize>>::new());
        // No outputs learned: the whole region.
        assert_eq!(kept_between_runs(8, &[]), [0..8]);
        // Outputs in the middle, out of order and overlapping: the rest, merged.
        assert_eq!(kept_between_runs(10, &[5..7, 2..4, 3..5]), [0..2, 7..10]);
        // A mask past the end (not the region's) is cut to it.
        assert_eq!(kept_between_runs(4, &[2..9]), [0..2]);
        // Too scattered (every other byte): one copy of the whole region.
        let strided: Vec<Range<usize>> = (0..40).map(|i| 2 * i..2 * i + 1).collect();
        assert_eq!(kept_between_runs(80, &strided), [0..80]);
    }
}
