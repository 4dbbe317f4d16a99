//! Checking a replay's results against the recording. Exact by default: every byte of every
//! region must equal the recorded post-launch state, so a candidate that writes anywhere the
//! original did not, or leaves out a write, fails. A tolerance relaxes only the regions the
//! original wrote, and only for the element type it names. A region the baseline itself fills
//! in another order than the recording (a kernel appending to a list with atomics: the order
//! varies from run to run) is compared as a multiset of its elements (`Unordered`): the same
//! elements, each as often, in any order; everything else about it stays exact.

use crate::store::records::{RegionData, Snapshot};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F64,
}

/// Allowed difference for floating-point outputs: |a-b| <= abs + rel*|b|, or within `ulp`
/// units in the last place. NaN must meet NaN.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub dtype: Dtype,
    #[serde(default)]
    pub rel: f64,
    #[serde(default)]
    pub abs: f64,
    #[serde(default)]
    pub ulp: u64,
}

impl std::str::FromStr for Tolerance {
    type Err = String;
    /// `f32:rel=1e-5,abs=1e-6,ulp=4`
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (dtype, rest) = s.split_once(':').unwrap_or((s, ""));
        let dtype = match dtype {
            "f32" => Dtype::F32,
            "f64" => Dtype::F64,
            d => {
                return Err(format!(
                    "tolerance type '{d}': use f32 or f64, e.g. f32:rel=1e-5"
                ))
            }
        };
        let mut t = Tolerance {
            dtype,
            rel: 0.0,
            abs: 0.0,
            ulp: 0,
        };
        for kv in rest.split(',').filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or(format!(
                "tolerance '{kv}': expected key=value, e.g. f32:rel=1e-5"
            ))?;
            let bad = |e: &dyn std::fmt::Display| {
                format!("tolerance '{kv}': {e}; e.g. f32:rel=1e-5,abs=1e-6,ulp=4")
            };
            // A negative or NaN bound would accept nothing (NaN) or read as a typo; infinity
            // would accept anything: a tolerance is a finite number of 0 or more.
            let bound = |v: &str| match v.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                Ok(_) => Err(bad(&"a finite number of 0 or more")),
                Err(e) => Err(bad(&e)),
            };
            match k {
                "rel" => t.rel = bound(v)?,
                "abs" => t.abs = bound(v)?,
                "ulp" => t.ulp = v.parse().map_err(|e| bad(&e))?,
                _ => {
                    return Err(format!(
                        "tolerance key '{k}': known keys are rel, abs, ulp, e.g. f32:rel=1e-5"
                    ))
                }
            }
        }
        Ok(t)
    }
}

/// A region whose elements the launch writes in an order that varies from run to run: compared
/// as a multiset of `width`-byte elements (see [`same_elements`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unordered {
    pub region: usize,
    pub width: usize,
}

/// Element widths tried for an unordered region, widest first: the widest in which the
/// baseline's bytes are a permutation of the recording's is the strictest check it passes.
const WIDTHS: [usize; 3] = [16, 8, 4];

/// Whether `got` holds the elements of `want` (`width` bytes each, aligned to the region), each
/// as often, in any order. Only the span from the first to the last differing element is
/// reordered; the bytes around it are equal by construction.
pub fn same_elements(want: &[u8], got: &[u8], width: usize) -> bool {
    if want.len() != got.len() {
        return false;
    }
    let Some(first) = want.iter().zip(got).position(|(a, b)| a != b) else {
        return true;
    };
    let last = want
        .iter()
        .zip(got)
        .rposition(|(a, b)| a != b)
        .unwrap_or(first);
    let (lo, hi) = (first / width * width, (last / width + 1) * width);
    if hi > want.len() {
        return false; // a partial element at the end: not a list of such elements
    }
    let (want, got) = (&want[lo..hi], &got[lo..hi]);
    // A hash table of 2^24 slots filled with atomics differs from the recording almost
    // everywhere: sorting its 16 M elements as byte slices took about 3 s a check on the GPU
    // machine (a warm start of 80 s, 2026-11-29). As integers, both sides at once, it is a
    // fraction of that, and a sum of the elements' hashes refuses most wrong outputs unsorted.
    match width {
        4 => same_keys(want, got, |c| u32::from_le_bytes(c.try_into().unwrap())),
        8 => same_keys(want, got, |c| u64::from_le_bytes(c.try_into().unwrap())),
        16 => same_keys(want, got, |c| u128::from_le_bytes(c.try_into().unwrap())),
        _ => sorted_elements(want, width) == sorted_elements(got, width),
    }
}

/// The multiset comparison of [`same_elements`] on elements read as integers of `width` bytes:
/// an order-free fingerprint first (different fingerprints prove different multisets), then
/// both sides sorted, each on its own thread, and compared exactly.
fn same_keys<K>(want: &[u8], got: &[u8], key: fn(&[u8]) -> K) -> bool
where
    K: Ord + Copy + Send + Into<u128>,
{
    let width = std::mem::size_of::<K>();
    let fingerprint = |bytes: &[u8]| {
        bytes
            .chunks_exact(width)
            .fold(0u64, |sum, c| sum.wrapping_add(mix(key(c).into())))
    };
    if fingerprint(want) != fingerprint(got) {
        return false;
    }
    let sorted = |bytes: &[u8]| {
        let mut v: Vec<K> = bytes.chunks_exact(width).map(key).collect();
        v.sort_unstable();
        v
    };
    std::thread::scope(|s| {
        let theirs = s.spawn(|| sorted(want));
        let ours = sorted(got);
        theirs.join().is_ok_and(|theirs| theirs == ours)
    })
}

/// An element's 64-bit hash for the order-free fingerprint (a sum of hashes): the splitmix64
/// finalizer on each half, so that elements differing in any bit hash apart.
fn mix(x: u128) -> u64 {
    fn finalize(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    finalize(x as u64 ^ finalize((x >> 64) as u64).rotate_left(17))
}

fn sorted_elements(bytes: &[u8], width: usize) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = bytes.chunks_exact(width).collect();
    v.sort_unstable();
    v
}

/// When every region in which `observed` differs from `expected` is one the launch writes and
/// holds the same elements in another order, those regions with the widest such element width;
/// otherwise None (the difference is not a matter of order).
pub fn permuted(
    expected: &Snapshot,
    observed: &Snapshot,
    written: &[usize],
) -> Option<Vec<Unordered>> {
    let mut out = Vec::new();
    for (i, (e, o)) in expected.regions.iter().zip(&observed.regions).enumerate() {
        let (RegionData::Full(want), RegionData::Full(got)) = (&e.data, &o.data) else {
            continue;
        };
        if want == got {
            continue;
        }
        if !written.contains(&i) || !e.name.is_empty() {
            return None;
        }
        let width = WIDTHS.into_iter().find(|&w| same_elements(want, got, w))?;
        out.push(Unordered { region: i, width });
    }
    (!out.is_empty()).then_some(out)
}

/// The regions a launch appends to with atomics (`appends`, found in its code; the order of
/// such a list is the threads'), by the pointer each such parameter holds in `values`: the
/// allocation among `regions` that holds it, where the launch writes it (`written`).
pub fn appended(
    appends: &[crate::ptx::appends::Append],
    values: &crate::candidate::LaunchValues,
    regions: &[crate::store::records::Region],
    written: &[usize],
) -> Vec<Unordered> {
    let mut out: Vec<Unordered> = Vec::new();
    for a in appends {
        let Some(bytes) = values.args.get(a.param) else {
            continue;
        };
        let Ok(word) = <[u8; 8]>::try_from(bytes.as_slice()) else {
            continue;
        };
        let at = u64::from_le_bytes(word);
        let holds = |(i, r): &(usize, &crate::store::records::Region)| {
            r.name.is_empty() && written.contains(i) && at >= r.addr && at - r.addr < r.size
        };
        let Some((region, _)) = regions.iter().enumerate().find(holds) else {
            continue;
        };
        match out.iter_mut().find(|u| u.region == region) {
            Some(u) => u.width = u.width.min(a.width),
            None => out.push(Unordered {
                region,
                width: a.width,
            }),
        }
    }
    out
}

/// How messages name a region: `allocation 0x…` or `variable NAME`.
pub fn describe(e: &crate::store::records::Region) -> String {
    if e.name.is_empty() {
        format!("allocation {:#x}", e.addr)
    } else {
        format!("variable {}", e.name)
    }
}

/// A 4-byte word of an output that the original's own runs leave different, and the values a
/// run may leave there (`determinism::learn`): all of them where the word holds a time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Word {
    /// Its byte offset in the region.
    pub at: usize,
    pub lo: i64,
    pub hi: i64,
    /// Whether its values are read as i32 (else u32).
    pub signed: bool,
}

impl Word {
    /// A word whose every value is allowed.
    pub fn free(at: usize) -> Word {
        Word {
            at,
            lo: i64::MIN,
            hi: i64::MAX,
            signed: false,
        }
    }

    pub fn is_free(&self) -> bool {
        self.lo == i64::MIN && self.hi == i64::MAX
    }

    /// Whether `bytes` is a value this word may hold.
    pub fn holds(&self, bytes: [u8; 4]) -> bool {
        let v = if self.signed {
            i64::from(i32::from_le_bytes(bytes))
        } else {
            i64::from(u32::from_le_bytes(bytes))
        };
        (self.lo..=self.hi).contains(&v)
    }
}

/// How a region that need not match its recording to the bit is held: floats within a
/// tolerance, or every byte exact but the words the original's runs leave different, each
/// within the values it may hold.
#[derive(Debug, Clone, PartialEq)]
pub enum Held {
    Floats(Tolerance),
    Words(Vec<Word>),
}

/// Ok, or a message naming the first region and offset that differ.
pub fn compare(
    expected: &Snapshot,
    observed: &Snapshot,
    written: &[usize],
    unordered: &[Unordered],
    tol: Option<&Tolerance>,
) -> Result<(), String> {
    compare_by_region(expected, observed, written, unordered, |_| {
        tol.copied().map(Held::Floats)
    })
}

/// [`compare`], each region held its own way (`tol(i)`; None: exact): as a kernel that is not
/// deterministic learned per output allocation (`determinism::learn`).
pub fn compare_by_region(
    expected: &Snapshot,
    observed: &Snapshot,
    written: &[usize],
    unordered: &[Unordered],
    tol: impl Fn(usize) -> Option<Held>,
) -> Result<(), String> {
    for (i, (e, o)) in expected.regions.iter().zip(&observed.regions).enumerate() {
        let (RegionData::Full(want), RegionData::Full(got)) = (&e.data, &o.data) else {
            continue;
        };
        if want == got {
            continue;
        }
        let what = describe(e);
        if let Some(u) = unordered.iter().find(|u| u.region == i) {
            if same_elements(want, got, u.width) {
                continue;
            }
            return Err(format!(
                "{what}: other elements than the recording's (compared in any order, as {}-byte elements: the baseline writes them in an order that varies)",
                u.width
            ));
        }
        let first = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(0);
        match tol(i) {
            Some(Held::Floats(t)) if written.contains(&i) => {
                within(&t, want, got)
                    .map_err(|at| format!("{what}: byte {at} outside tolerance"))?;
                if let Some(why) = narrowed(&t, want, got) {
                    return Err(format!("{what}: {why}"));
                }
            }
            Some(Held::Words(words)) if written.contains(&i) => {
                words_within(&words, want, got).map_err(|at| {
                    format!(
                        "{what}: differs at byte {at}, outside what the original's own runs leave there"
                    )
                })?;
            }
            _ if !written.contains(&i) => {
                return Err(format!(
                    // Unchanged is not untouched: a launch that writes the values a region
                    // already held (stale output of an earlier run) shows no change either.
                    "{what}: differs at byte {first}, which the original launch left unchanged (left alone, or wrote with the value it held)"
                ));
            }
            _ => return Err(format!("{what}: differs at byte {first} (exact check)")),
        }
    }
    Ok(())
}

/// Ok where `got` is `want` but in `words` (sorted by offset), each holding a value it may;
/// else the first byte that differs elsewhere.
fn words_within(words: &[Word], want: &[u8], got: &[u8]) -> Result<(), usize> {
    if want.len() != got.len() {
        return Err(want.len().min(got.len()));
    }
    for (k, (a, b)) in want.chunks(4).zip(got.chunks(4)).enumerate() {
        if a == b {
            continue;
        }
        let at = k * 4;
        let word = words
            .binary_search_by_key(&at, |w| w.at)
            .ok()
            .map(|i| words[i]);
        match (word, <[u8; 4]>::try_from(b)) {
            (Some(w), Ok(bytes)) if w.holds(bytes) => {}
            _ => return Err(at + a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0)),
        }
    }
    Ok(())
}

fn within(t: &Tolerance, want: &[u8], got: &[u8]) -> Result<(), usize> {
    let size = match t.dtype {
        Dtype::F32 => 4,
        Dtype::F64 => 8,
    };
    for (k, (a, b)) in want.chunks(size).zip(got.chunks(size)).enumerate() {
        if a == b {
            continue;
        }
        if a.len() < size {
            return Err(k * size);
        }
        // A tolerance is for floats, but a region is bytes: an integer written beside floats
        // (a label, a count, an index below 2^23 as f32, 2^52 as f64) reads as a subnormal,
        // where every small integer is within a few ULPs or `abs` of any other. Computed floats
        // are practically never subnormal, so such words must match exactly.
        let (x, y, ulps, subnormal) = match t.dtype {
            Dtype::F32 => {
                let (x, y) = (
                    f32::from_le_bytes(a.try_into().unwrap()),
                    f32::from_le_bytes(b.try_into().unwrap()),
                );
                (
                    x as f64,
                    y as f64,
                    ulp_distance(x.to_bits() as i64, y.to_bits() as i64, 32),
                    x.is_subnormal() || y.is_subnormal(),
                )
            }
            Dtype::F64 => {
                let (x, y) = (
                    f64::from_le_bytes(a.try_into().unwrap()),
                    f64::from_le_bytes(b.try_into().unwrap()),
                );
                (
                    x,
                    y,
                    ulp_distance(x.to_bits() as i64, y.to_bits() as i64, 64),
                    x.is_subnormal() || y.is_subnormal(),
                )
            }
        };
        if subnormal {
            return Err(k * size);
        }
        let ok =
            (x.is_nan() && y.is_nan()) || (y - x).abs() <= t.abs + t.rel * x.abs() || ulps <= t.ulp;
        if !ok {
            return Err(k * size);
        }
    }
    Ok(())
}

/// Values that differ from the recording, at least this many, of which at least half are of
/// a narrower type than the tolerance's, make a candidate "computed in lower precision".
const NARROW_MIN: usize = 8;

/// Whether the values a candidate left within the tolerance are of a narrower type than the
/// tolerance's where the recording's are not: an f64 result that is exactly an f32 (the code
/// computed in float, or cut the mantissa, and widened the result), an f32 result that is
/// exactly a half or a bfloat16. A result computed in the tolerance's own type is such a value
/// by chance only (about 2^-29 for an f64, 2^-13 for an f32), so half of the differing values
/// is no accident; a loose tolerance is there for reordered arithmetic, not for another type.
/// Why, in words, or None.
pub fn narrowed(t: &Tolerance, want: &[u8], got: &[u8]) -> Option<String> {
    let (mut differ, mut narrow) = (0usize, 0usize);
    let (size, narrower) = match t.dtype {
        Dtype::F32 => (4, "a half or bfloat16 (16-bit float)"),
        Dtype::F64 => (8, "an f32"),
    };
    for (a, b) in want.chunks_exact(size).zip(got.chunks_exact(size)) {
        if a == b {
            continue;
        }
        let (was, now) = match t.dtype {
            Dtype::F32 => {
                let (x, y) = (
                    f32::from_le_bytes(a.try_into().unwrap()),
                    f32::from_le_bytes(b.try_into().unwrap()),
                );
                if !(x.is_normal() && y.is_normal()) {
                    continue;
                }
                (fits_16bit(x), fits_16bit(y))
            }
            Dtype::F64 => {
                let (x, y) = (
                    f64::from_le_bytes(a.try_into().unwrap()),
                    f64::from_le_bytes(b.try_into().unwrap()),
                );
                if !(x.is_normal() && y.is_normal()) {
                    continue;
                }
                (fits_f32(x), fits_f32(y))
            }
        };
        differ += 1;
        narrow += usize::from(now && !was);
    }
    (narrow >= NARROW_MIN && 2 * narrow >= differ).then(|| {
        format!(
            "{narrow} of the {differ} values that differ from the recording are exactly {narrower} where the recording's are not: the code computes in lower precision than the {} the tolerance is for (a tolerance relaxes rounding, not the type)",
            match t.dtype {
                Dtype::F32 => "f32",
                Dtype::F64 => "f64",
            }
        )
    })
}

/// Whether an f64 is exactly an f32 (a normal one).
fn fits_f32(x: f64) -> bool {
    let y = x as f32;
    y.is_normal() && y as f64 == x
}

/// Whether an f32 is exactly a bfloat16 (its low 16 bits zero) or a normal IEEE half (low 13
/// mantissa bits zero, exponent within the half's).
fn fits_16bit(x: f32) -> bool {
    let bits = x.to_bits();
    let exp = ((bits >> 23) & 0xff) as i32 - 127;
    bits & 0xffff == 0 || (bits & 0x1fff == 0 && (-14..=15).contains(&exp))
}

/// Distance in representable values between two floats given by their bit patterns.
fn ulp_distance(a: i64, b: i64, bits: u32) -> u64 {
    let ordered = |v: i64| {
        let sign = 1i64 << (bits - 1);
        if v & sign != 0 {
            -(v & (sign - 1))
        } else {
            v
        }
    };
    ordered(a).abs_diff(ordered(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::Region;

    /// bfs_step's launch: the frontier it reads, the distances, the list it appends to and
    /// its length. The list is found by the pointer its parameter holds, anywhere inside the
    /// allocation; a parameter that points nowhere recorded, or into a region the launch does
    /// not write, or is not a pointer, names nothing.
    #[test]
    fn a_list_appended_to_is_the_written_allocation_its_parameter_points_into() {
        use crate::ptx::appends::Append;
        let regions = [
            Region::allocation(0x1000, vec![0; 64]),
            Region::allocation(0x2000, vec![0; 64]),
            Region::allocation(0x3000, vec![0; 64]),
            Region::allocation(0x4000, vec![0; 8]),
        ];
        let written = [1, 2, 3];
        let ptr = |p: u64| p.to_le_bytes().to_vec();
        let values = crate::candidate::LaunchValues {
            grid: [1, 1, 1],
            block: [256, 1, 1],
            args: vec![
                7u32.to_le_bytes().to_vec(),
                ptr(0x1000),
                ptr(0x3010),
                ptr(0x4000),
                ptr(0x9000),
            ],
        };
        let append = |param, width| Append { param, width };
        assert_eq!(
            appended(&[append(2, 8), append(2, 4)], &values, &regions, &written),
            [Unordered {
                region: 2,
                width: 4
            }]
        );
        let names_nothing = [append(0, 4), append(1, 4), append(4, 4), append(9, 4)];
        assert_eq!(appended(&names_nothing, &values, &regions, &written), []);
    }

    fn snap(regions: Vec<Vec<u8>>) -> Snapshot {
        Snapshot {
            regions: regions
                .into_iter()
                .enumerate()
                .map(|(i, b)| Region::allocation(0x1000 * i as u64, b))
                .collect(),
        }
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn exact_by_default() {
        let want = snap(vec![f32s(&[1.0, 2.0]), vec![0; 8]]);
        assert!(compare(&want, &want.clone(), &[0], &[], None).is_ok());
        let off = snap(vec![f32s(&[1.0, 2.000001]), vec![0; 8]]);
        assert!(compare(&want, &off, &[0], &[], None)
            .unwrap_err()
            .contains("exact"));
    }

    #[test]
    fn writing_elsewhere_fails_even_with_tolerance() {
        let want = snap(vec![f32s(&[1.0]), vec![0; 8]]);
        let stray = snap(vec![f32s(&[1.0]), vec![0, 0, 0, 1, 0, 0, 0, 0]]);
        let t: Tolerance = "f32:rel=1".parse().unwrap();
        assert!(compare(&want, &stray, &[0], &[], Some(&t))
            .unwrap_err()
            .contains("left alone"));
    }

    #[test]
    fn tolerance_relative_and_ulp() {
        let want = snap(vec![f32s(&[1.0, 100.0, f32::NAN])]);
        let near = snap(vec![f32s(&[1.0000001, 100.00001, f32::NAN])]);
        assert!(compare(
            &want,
            &near,
            &[0],
            &[],
            Some(&"f32:rel=1e-6".parse().unwrap())
        )
        .is_ok());
        assert!(compare(&want, &near, &[0], &[], Some(&"f32:ulp=1".parse().unwrap())).is_ok());
        let far = snap(vec![f32s(&[1.01, 100.0, f32::NAN])]);
        assert!(compare(
            &want,
            &far,
            &[0],
            &[],
            Some(&"f32:rel=1e-6,ulp=4".parse().unwrap())
        )
        .is_err());
        assert_eq!(
            ulp_distance(0.0f32.to_bits() as i64, (-0.0f32).to_bits() as i64, 32),
            0
        );
        assert_eq!(
            ulp_distance(
                f32::MIN_POSITIVE.to_bits() as i64,
                (-f32::MIN_POSITIVE).to_bits() as i64,
                32
            ),
            2 * f32::MIN_POSITIVE.to_bits() as u64
        );
    }

    #[test]
    fn integers_beside_floats_are_never_relaxed() {
        // Labels 3 and 4 are one ULP apart as f32 bit patterns, and both far below `abs`.
        let ints = |v: &[u32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let want = snap(vec![ints(&[0, 3, 7])]);
        let got = snap(vec![ints(&[0, 4, 7])]);
        let loose: Tolerance = "f32:rel=1e-3,abs=1e-6,ulp=4".parse().unwrap();
        assert!(compare(&want, &got, &[0], &[], Some(&loose)).is_err());
        let wide = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let t64: Tolerance = "f64:rel=1e-3,ulp=4".parse().unwrap();
        let (a, b) = (snap(vec![wide(&[5, 9])]), snap(vec![wide(&[5, 10])]));
        assert!(compare(&a, &b, &[0], &[], Some(&t64)).is_err());
        // Floats near each other still pass.
        let (x, y) = (
            snap(vec![f32s(&[1.0, 2.0])]),
            snap(vec![f32s(&[1.0, 2.000001])]),
        );
        assert!(compare(&x, &y, &[0], &[], Some(&loose)).is_ok());
    }

    fn u32s(v: &[u32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_list_appended_in_another_order_is_the_same_elements() {
        // A frontier of 4-byte vertex ids after a count, appended with atomics.
        let want = snap(vec![u32s(&[3, 10, 11, 12, 0, 0]), u32s(&[7])]);
        let got = snap(vec![u32s(&[3, 12, 10, 11, 0, 0]), u32s(&[7])]);
        let unordered = permuted(&want, &got, &[0, 1]).unwrap();
        assert_eq!(
            unordered,
            [Unordered {
                region: 0,
                width: 4
            }]
        );
        assert!(compare(&want, &got, &[0, 1], &unordered, None).is_ok());
        assert!(
            compare(&want, &got, &[0, 1], &[], None).is_err(),
            "exact otherwise"
        );
        // A candidate that loses one element, or repeats another, is refused.
        for bad in [
            [3, 12, 10, 10, 0, 0],
            [3, 12, 10, 0, 0, 0],
            [3, 12, 10, 11, 1, 0],
        ] {
            let got = snap(vec![u32s(&bad), u32s(&[7])]);
            let e = compare(&want, &got, &[0, 1], &unordered, None).unwrap_err();
            assert!(e.contains("other elements"), "{bad:?}: {e}");
        }
        // The count beside it stays exact: it is not the unordered region.
        let got = snap(vec![u32s(&[3, 12, 10, 11, 0, 0]), u32s(&[8])]);
        assert!(compare(&want, &got, &[0, 1], &unordered, None).is_err());
    }

    #[test]
    fn pairs_moved_together_are_checked_as_pairs() {
        // (key, value) pairs of 8 bytes: a permutation of pairs is 8 wide, so a candidate that
        // swaps values between keys (the same 4-byte words) is refused.
        let want = snap(vec![u32s(&[1, 100, 2, 200, 3, 300])]);
        let got = snap(vec![u32s(&[3, 300, 1, 100, 2, 200])]);
        let unordered = permuted(&want, &got, &[0]).unwrap();
        assert_eq!(unordered[0].width, 8);
        let swapped = snap(vec![u32s(&[3, 100, 1, 300, 2, 200])]);
        assert!(compare(&want, &swapped, &[0], &unordered, None).is_err());
    }

    #[test]
    fn what_is_not_a_permutation_is_not_relaxed() {
        let want = snap(vec![u32s(&[1, 2, 3, 4]), u32s(&[9])]);
        // Another value: not a reordering.
        assert!(permuted(&want, &snap(vec![u32s(&[1, 2, 3, 5]), u32s(&[9])]), &[0, 1]).is_none());
        // Nothing differs: nothing to relax.
        assert!(permuted(&want, &want.clone(), &[0, 1]).is_none());
        // A permutation in a region the launch does not write: never relaxed.
        let moved = snap(vec![u32s(&[2, 1, 3, 4]), u32s(&[9])]);
        assert!(permuted(&want, &moved, &[1]).is_none());
        assert!(permuted(&want, &moved, &[0, 1]).is_some());
        // Bytes moved within an element are not a permutation of elements of 4 or more.
        let bytes = snap(vec![vec![1, 2, 3, 4, 5, 6, 7, 8]]);
        assert!(permuted(&bytes, &snap(vec![vec![2, 1, 3, 4, 5, 6, 7, 8]]), &[0]).is_none());
    }

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_double_result_computed_in_float_fails_a_loose_tolerance() {
        // Results of a double computation, not f32 values.
        let exact: Vec<f64> = (1..=32)
            .map(|i| 1.0 + i as f64 * 1e-3 + (i as f64).sqrt())
            .collect();
        let want = snap(vec![f64s(&exact)]);
        let loose: Tolerance = "f64:rel=1e-6".parse().unwrap();
        // Computed in float and widened: within 1e-6, but every value an f32.
        let in_float: Vec<f64> = exact.iter().map(|x| *x as f32 as f64).collect();
        let got = snap(vec![f64s(&in_float)]);
        assert!(within(&loose, &f64s(&exact), &f64s(&in_float)).is_ok());
        let e = compare(&want, &got, &[0], &[], Some(&loose)).unwrap_err();
        assert!(
            e.contains("exactly an f32") && e.contains("lower precision"),
            "{e}"
        );
        // Reordered double arithmetic: a few ULPs off, no f32 among them.
        let reordered: Vec<f64> = exact
            .iter()
            .map(|x| f64::from_bits(x.to_bits() + 3))
            .collect();
        assert!(compare(
            &want,
            &snap(vec![f64s(&reordered)]),
            &[0],
            &[],
            Some(&loose)
        )
        .is_ok());
        // A few f32-looking values among many differing ones are chance, not a type.
        let mut mixed = reordered.clone();
        for v in mixed.iter_mut().take(4) {
            *v = *v as f32 as f64;
        }
        assert!(compare(&want, &snap(vec![f64s(&mixed)]), &[0], &[], Some(&loose)).is_ok());
        // Where the original's results are f32 values themselves, nothing is said.
        let floats = snap(vec![f64s(&in_float)]);
        let near: Vec<f64> = in_float
            .iter()
            .map(|x| (*x as f32 * 1.0000001) as f64)
            .collect();
        assert!(compare(&floats, &snap(vec![f64s(&near)]), &[0], &[], Some(&loose)).is_ok());
    }

    #[test]
    fn a_float_result_computed_in_half_fails_a_loose_tolerance() {
        let exact: Vec<f32> = (1..=32).map(|i| 1.0 + (i as f32).sqrt() * 0.01).collect();
        let in_bf16: Vec<f32> = exact
            .iter()
            .map(|x| f32::from_bits(x.to_bits() & 0xffff_0000))
            .collect();
        let loose: Tolerance = "f32:rel=1e-2".parse().unwrap();
        let e = compare(
            &snap(vec![f32s(&exact)]),
            &snap(vec![f32s(&in_bf16)]),
            &[0],
            &[],
            Some(&loose),
        )
        .unwrap_err();
        assert!(e.contains("half or bfloat16"), "{e}");
        assert!(fits_16bit(1.5) && fits_16bit(65504.0) && !fits_16bit(1.0 + f32::EPSILON));
    }

    #[test]
    fn tolerance_syntax_errors_are_explained() {
        assert!("f16:rel=1"
            .parse::<Tolerance>()
            .unwrap_err()
            .contains("f32 or f64"));
        assert!("f32:rell=1"
            .parse::<Tolerance>()
            .unwrap_err()
            .contains("known keys"));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            #[test]
            fn any_text_parses_or_says_what_is_wrong(s in "\\PC{0,30}|(f32|f64|f16)?:?([a-z]{0,4}=?[-+0-9.eEinfa]{0,8},?){0,4}") {
                match s.parse::<Tolerance>() {
                    Ok(t) => {
                        prop_assert!(t.rel.is_finite() && t.rel >= 0.0);
                        prop_assert!(t.abs.is_finite() && t.abs >= 0.0);
                    }
                    Err(e) => prop_assert!(e.contains("e.g. f32:rel="), "{}", e),
                }
            }

            #[test]
            fn written_tolerances_read_back(
                f64_type in any::<bool>(),
                rel in 0.0f64..1e3,
                abs in 0.0f64..1e-3,
                ulp in any::<u64>(),
            ) {
                let text = format!(
                    "{}:rel={rel:e},abs={abs},ulp={ulp}",
                    if f64_type { "f64" } else { "f32" }
                );
                let t: Tolerance = text.parse().unwrap();
                let dtype = if f64_type { Dtype::F64 } else { Dtype::F32 };
                prop_assert_eq!(t, Tolerance { dtype, rel, abs, ulp });
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// The integer comparison agrees with sorting the elements as byte slices, on
            /// permutations and on permutations with one byte changed.
            #[test]
            fn same_elements_agrees_with_sorting_slices(
                width in prop::sample::select(vec![4usize, 8, 16, 12]),
                words in prop::collection::vec(0u8..4, 0..96),
                order in any::<u64>(),
                change in any::<Option<(usize, u8)>>(),
            ) {
                let n = words.len() / width * width;
                let want = &words[..n];
                let mut elements: Vec<&[u8]> = want.chunks_exact(width).collect();
                let mut rng = order;
                for i in (1..elements.len()).rev() {
                    rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    elements.swap(i, (rng >> 33) as usize % (i + 1));
                }
                let mut got: Vec<u8> = elements.concat();
                if let Some((at, to)) = change.filter(|_| n > 0) {
                    got[at % n] = to;
                }
                let reference = {
                    let mut a: Vec<&[u8]> = want.chunks_exact(width).collect();
                    let mut b: Vec<&[u8]> = got.chunks_exact(width).collect();
                    a.sort_unstable();
                    b.sort_unstable();
                    a == b
                };
                prop_assert_eq!(same_elements(want, &got, width), reference);
            }
        }

        #[test]
        fn negative_nan_and_infinite_bounds_are_refused() {
            for s in ["f32:rel=-1", "f32:abs=NaN", "f64:rel=inf", "f32:abs=-0.5"] {
                let e = s.parse::<Tolerance>().unwrap_err();
                assert!(e.contains("finite number of 0 or more"), "{s}: {e}");
            }
            assert!("f32:rel=0,abs=0".parse::<Tolerance>().is_ok());
        }
    }
}
