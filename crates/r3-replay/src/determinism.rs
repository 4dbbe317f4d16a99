//! Determinism: a candidate must give the same bytes on every run where the original does.
//!
//! A check compares one run with the recording, under the user's tolerance. A data race whose
//! effect stays inside the tolerance, or an uninitialised read that happens to hit the right
//! bytes, passes it. But the original code reproduced the recording bit for bit (the baseline
//! check is exact) and, when its timed runs keep doing so, the kernel is deterministic; so a
//! candidate whose own runs differ from its checked run is wrong, whatever the tolerance says.
//!
//! Every run of a timing is compared on the device with its code's checked run (no host sync,
//! no copy back), where that costs the timing nothing: see [`compare_after`].
//!
//! Some originals are not deterministic by design: a histogram, a scatter-add or a reduction
//! with float atomics (`atomicAdd(&norm[i], w)`) sums in the order its threads arrive, so its
//! last bits vary from run to run, and the -O3 baseline cannot reproduce the recording to the
//! bit. Where its own runs differ, the kernel is validated instead against what the baseline
//! itself does ([`learn`]): an elementwise tolerance per output allocation, learned from
//! [`RUNS`] runs of it and the recording, [`MARGIN`] times the spread they show and never below
//! the type's precision ([`FLOOR_EPS`]); or the user's `--tolerance`. A candidate outside it is
//! wrong output as before: one that drops the atomics, writes zeros or leaves part of the grid
//! undone moves its values far beyond the last bits that the order changes.

use crate::store::l2::Regime;
use crate::store::records::{RegionData, Snapshot};
use crate::validate::{describe, Dtype, Held, Tolerance, Word};
use serde::{Deserialize, Serialize};

/// Whether a run's outputs are compared with its reference right after it. In the cold regime
/// always: the L2 flush before the next run erases what the comparison read. In the warm
/// regime the next timed sample must find what the previous run left, so only where no sample
/// follows (during warm-up, and after the last run).
pub fn compare_after(l2: Regime, next_is_sample: bool) -> bool {
    l2 == Regime::Cold || !next_is_sample
}

/// The verdict on a candidate, given where the baseline's and the candidate's runs first
/// differed from their checked runs (None: never). Only a kernel whose original is
/// deterministic can demand it of a candidate.
pub fn verdict(baseline: Option<&str>, candidate: Option<&str>) -> Result<(), String> {
    match (baseline, candidate) {
        (None, Some(at)) => Err(format!(
            "not deterministic: {at}, while every run of the original gave the same bytes \
             (a data race, or a read of memory nothing wrote)"
        )),
        _ => Ok(()),
    }
}

/// Why the original's own runs differ, where its code has float atomics.
pub const FLOAT_ATOMICS: &str = "float atomics: outputs depend on order";
/// Why, where its code reads a clock of the GPU's (`clock()`, `clock64()`, `%globaltimer`):
/// a kernel that spins for a number of cycles and stores what it measured (simpleHyperQ's
/// kernels do) writes a different value on each run, however often two replays agree.
pub const READS_CLOCK: &str = "it reads the GPU's clock: outputs may depend on time";
/// Why, otherwise.
pub const RUNS_DIFFER: &str =
    "its own runs differ (a data race, or results that depend on the order its threads run in)";

/// Runs of the baseline a tolerance is learned from (the recording is one sample more).
pub const RUNS: usize = 8;
/// How far a candidate may go from the recording, in multiples of the largest spread the
/// baseline's runs showed: a few runs see less than the whole spread of the orders, and a
/// candidate's own order is one more.
pub const MARGIN: f64 = 4.0;
/// The least relative tolerance learned, in units of the type's epsilon.
pub const FLOOR_EPS: f64 = 4.0;
/// The most relative spread a tolerance is learned for: beyond it the runs differ by more than
/// the order of a sum explains, and only the user can say what is close enough.
pub const MAX_SPREAD: f64 = 1e-3;

/// The float types of the atomic and reduction instructions in `ptx` (`atom.global.add.f32`,
/// `red.shared.add.f64`, `atom.add.noftz.bf16`, ...), predicated or not: (any f32 or narrower,
/// any f64).
pub fn float_atomics(ptx: &str) -> (bool, bool) {
    let (mut narrow, mut wide) = (false, false);
    for line in ptx.lines() {
        let op = crate::ptx::stats::opcode(line);
        if !(op.starts_with("atom.") || op.starts_with("red.")) {
            continue;
        }
        for part in op.split('.') {
            match part {
                "f32" | "f16" | "f16x2" | "bf16" | "bf16x2" => narrow = true,
                "f64" => wide = true,
                _ => {}
            }
        }
    }
    (narrow, wide)
}

/// Whether `ptx` reads one of the GPU's clocks (the special registers `%clock`, `%clock_hi`,
/// `%clock64`, `%globaltimer`, `%globaltimer_lo`, `%globaltimer_hi`).
pub fn reads_clock(ptx: &str) -> bool {
    ptx.lines().any(|line| {
        let code = line.split("//").next().unwrap_or("");
        code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '%'))
            .any(|w| {
                matches!(
                    w,
                    "%clock"
                        | "%clock_hi"
                        | "%clock64"
                        | "%globaltimer"
                        | "%globaltimer_lo"
                        | "%globaltimer_hi"
                )
            })
    })
}

/// Why the original's runs differ, in the words the verdict and the report use.
pub fn reason(ptx: &str) -> &'static str {
    if reads_clock(ptx) {
        return READS_CLOCK;
    }
    match float_atomics(ptx) {
        (false, false) => RUNS_DIFFER,
        _ => FLOAT_ATOMICS,
    }
}

/// The element type a learned tolerance is tried in first: the one type of the code's float
/// atomics, where it has one.
pub fn type_hint(ptx: &str) -> Option<Dtype> {
    match float_atomics(ptx) {
        (true, false) => Some(Dtype::F32),
        (false, true) => Some(Dtype::F64),
        _ => None,
    }
}

/// The most of a region's words whose values the original's runs may leave different, where
/// they are not times, for a range to be learned for each: an order of atomics changes a few
/// results (a last writer, a compare-and-swap's winner); a race that changes most of an
/// output is for the user to judge (`--tolerance`).
pub const MAX_WORD_SHARE: f64 = 0.5;

/// How one region (by index in the recording) is held, as learned from the baseline's runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learned {
    pub region: usize,
    /// Floats within a tolerance; None where the region is held by `words`.
    pub tolerance: Option<Tolerance>,
    /// The largest difference between two of the runs at one element, relative to the
    /// element's magnitude (or the region's mean magnitude, where larger); 0 for words.
    pub spread: f64,
    /// Integers (or times) that the runs leave different, each held to the range of values
    /// they showed, widened by [`MARGIN`] times its width, or free where they are times:
    /// every other byte of the region exact.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub words: Vec<Word>,
}

impl Learned {
    /// How a check holds the region.
    pub fn held(&self) -> Held {
        match self.tolerance {
            Some(t) if self.words.is_empty() => Held::Floats(t),
            _ => Held::Words(self.words.clone()),
        }
    }

    /// How a candidate is held, in words.
    pub fn text(&self) -> String {
        if let Some(t) = self.tolerance.filter(|_| self.words.is_empty()) {
            return tolerance_text(&t);
        }
        let free = self.words.iter().filter(|w| w.is_free()).count();
        let ranged = self.words.len() - free;
        let mut parts = Vec::new();
        if free > 0 {
            parts.push(format!("{free} word(s) of times not compared"));
        }
        if ranged > 0 {
            parts.push(format!(
                "{ranged} word(s) within {MARGIN}× the range its runs left there"
            ));
        }
        format!("{}, every other byte exact", parts.join(", "))
    }
}

/// How a kernel whose original is not deterministic is validated (the verdict on its
/// recording, and the note every search of it gives).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Why the original's runs differ ([`FLOAT_ATOMICS`], [`RUNS_DIFFER`]).
    pub reason: String,
    /// The tolerances learned per output allocation (with the region's name), or none where
    /// the user's tolerance holds.
    pub learned: Vec<(String, Learned)>,
    /// The user's tolerance, where one was given: every candidate is held to it.
    pub user: Option<Tolerance>,
    /// Runs of the baseline the tolerances were learned from.
    pub runs: usize,
}

impl Decision {
    /// The decision in words: why, and what candidates are held to.
    pub fn text(&self) -> String {
        let how = match &self.user {
            Some(t) => format!("candidates are held to the tolerance given ({})", tolerance_text(t)),
            // Its first run differed and every later one gave the recording's bytes: a kernel
            // that spins on the clock runs long on its first launch in a context (simpleHyperQ,
            // H200, 2026-11-30).
            None if self.learned.is_empty() => format!(
                "{} later runs of the -O3 baseline reproduced the recording, and candidates are held to it exactly",
                self.runs
            ),
            None => format!(
                "candidates are held to {}× the spread of {} runs of the -O3 baseline and the recording, per output allocation: {}",
                MARGIN,
                self.runs,
                self.learned
                    .iter()
                    .map(|(name, l)| format!("{name} {}", l.text()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        format!("not deterministic ({}); {how}", self.reason)
    }
}

/// A tolerance as `--tolerance` takes it.
pub fn tolerance_text(t: &Tolerance) -> String {
    let ty = match t.dtype {
        Dtype::F32 => "f32",
        Dtype::F64 => "f64",
    };
    let mut parts = vec![format!("rel={:.2e}", t.rel), format!("abs={:.2e}", t.abs)];
    if t.ulp > 0 {
        parts.push(format!("ulp={}", t.ulp));
    }
    format!("{ty}:{}", parts.join(","))
}

/// The bytes of region `i` after a run: the run's where it read them back, else the expected
/// ones (a read-back leaves out the regions equal to the recording).
fn bytes_of<'a>(run: &'a Snapshot, expected: &'a Snapshot, i: usize) -> Option<&'a [u8]> {
    let full = |s: &'a Snapshot| match s.regions.get(i).map(|r| &r.data) {
        Some(RegionData::Full(b)) => Some(b.as_slice()),
        _ => None,
    };
    full(run).or_else(|| full(expected))
}

/// Learns how to hold each region in which the baseline's `runs` (read back from the recorded
/// inputs) and the recording's `expected` bytes differ. Floats: the largest spread of an
/// element relative to its magnitude (or the region's mean magnitude, where larger), times
/// [`MARGIN`], at least [`FLOOR_EPS`] epsilons; in the element type `hint` names, else the
/// first of f32 and f64 in which every element that varies is a normal float. Where no
/// tolerance fits, 4-byte words ([`words`]): where the code reads a clock (`clock`), the words
/// that vary hold times and are not compared; else, where they hold integers, each is held to
/// the range its runs showed. Err, in words,
/// where neither tells the runs apart: they differ where the recorded launch wrote nothing, or
/// in floats by more than [`MAX_SPREAD`] and in more than [`MAX_WORD_SHARE`] of the words.
pub fn learn(
    expected: &Snapshot,
    runs: &[Snapshot],
    written: &[usize],
    hint: Option<Dtype>,
    clock: bool,
) -> Result<Vec<Learned>, String> {
    let mut out = Vec::new();
    for (i, region) in expected.regions.iter().enumerate() {
        let Some(want) = bytes_of(expected, expected, i) else {
            continue;
        };
        let samples: Vec<&[u8]> = std::iter::once(want)
            .chain(runs.iter().filter_map(|r| bytes_of(r, expected, i)))
            .collect();
        if samples.iter().all(|b| *b == want) {
            continue;
        }
        let what = describe(region);
        if !written.contains(&i) {
            return Err(format!(
                "{what} differs from run to run, where the recorded launch left it unchanged"
            ));
        }
        // Floats first, also in a kernel that reads the clock: its sums keep their tolerance,
        // and only what no tolerance fits is taken for times.
        let learned = as_floats(i, &samples, hint).or_else(|floats| {
            if !clock && !integers_vary(&samples) {
                return Err(floats);
            }
            words(&samples, clock)
                .map(|w| as_words(i, w))
                .map_err(|ints| format!("{floats}; as words, {ints}"))
        });
        out.push(learned.map_err(|why| format!("{what}: {why}"))?);
    }
    Ok(out)
}

/// Whether a 4-byte word that varies between `samples` holds, in one of them, what no computed
/// f32 is (a subnormal or NaN: a small integer, a negative one): the region holds integers, to
/// be held word by word. Floats that vary by more than a tolerance is learned for are the
/// user's to judge.
fn integers_vary(samples: &[&[u8]]) -> bool {
    let len = samples.iter().map(|b| b.len()).min().unwrap_or(0);
    (0..len / 4).any(|k| {
        let word = |b: &[u8]| -> [u8; 4] { b[k * 4..k * 4 + 4].try_into().expect("4 bytes") };
        let first = word(samples[0]);
        samples.iter().any(|b| word(b) != first)
            && samples
                .iter()
                .any(|b| !plain(f64::from(f32::from_le_bytes(word(b))), Dtype::F32))
    })
}

fn as_words(region: usize, words: Vec<Word>) -> Learned {
    Learned {
        region,
        tolerance: None,
        spread: 0.0,
        words,
    }
}

/// A float tolerance for region `region` from its `samples`, or why its elements are not floats
/// that vary a little.
fn as_floats(region: usize, samples: &[&[u8]], hint: Option<Dtype>) -> Result<Learned, String> {
    let types = match hint {
        Some(t) => vec![t],
        None => vec![Dtype::F32, Dtype::F64],
    };
    let mut first_err = None;
    for dtype in types {
        match spread(samples, dtype) {
            Ok((spread, scale)) => {
                let eps = match dtype {
                    Dtype::F32 => f32::EPSILON as f64,
                    Dtype::F64 => f64::EPSILON,
                };
                let rel = (MARGIN * spread).max(FLOOR_EPS * eps);
                return Ok(Learned {
                    region,
                    tolerance: Some(Tolerance {
                        dtype,
                        rel,
                        abs: rel * scale,
                        ulp: 0,
                    }),
                    spread,
                    words: Vec::new(),
                });
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Err(first_err.unwrap_or_else(|| "no element type fits".into()))
}

/// The 4-byte words in which `samples` (the recording's bytes, then each run's) differ, each
/// with the values it may hold: any, for `times`; else the range the samples showed, read as
/// i32 or u32 (whichever is narrower), widened by [`MARGIN`] times its width on each side. Err
/// where the region is not whole words, or more than [`MAX_WORD_SHARE`] of them vary (of
/// times too, where the runs agree with each other: a recording that differs from all of them
/// in most words is more likely wrong than late).
pub fn words(samples: &[&[u8]], times: bool) -> Result<Vec<Word>, String> {
    let len = samples[0].len();
    if !len.is_multiple_of(4) || samples.iter().any(|b| b.len() != len) {
        return Err("not a whole number of 4-byte words".into());
    }
    let mut out = Vec::new();
    for at in (0..len).step_by(4) {
        let values: Vec<[u8; 4]> = samples
            .iter()
            .map(|b| b[at..at + 4].try_into().expect("a 4-byte word"))
            .collect();
        if values.iter().all(|v| *v == values[0]) {
            continue;
        }
        out.push(if times {
            Word::free(at)
        } else {
            ranged(at, &values)
        });
    }
    let share = out.len() as f64 / (len / 4).max(1) as f64;
    let runs_agree = samples[1..].windows(2).all(|w| w[0] == w[1]);
    if (!times || runs_agree) && share > MAX_WORD_SHARE {
        return Err(format!(
            "{} of its {} words differ from run to run, more than an order of atomics explains; give a tolerance (--tolerance)",
            out.len(),
            len / 4
        ));
    }
    Ok(out)
}

/// Word `at` held to the range of `values`, widened by [`MARGIN`] times its width each side.
fn ranged(at: usize, values: &[[u8; 4]]) -> Word {
    let range = |signed: bool| {
        let read = |b: &[u8; 4]| {
            if signed {
                i64::from(i32::from_le_bytes(*b))
            } else {
                i64::from(u32::from_le_bytes(*b))
            }
        };
        let lo = values.iter().map(read).min().unwrap_or(0);
        let hi = values.iter().map(read).max().unwrap_or(0);
        (lo, hi)
    };
    let ((ulo, uhi), (slo, shi)) = (range(false), range(true));
    let signed = shi - slo < uhi - ulo;
    let (lo, hi) = if signed { (slo, shi) } else { (ulo, uhi) };
    let widen = (MARGIN * (hi - lo) as f64) as i64;
    let (min, max) = if signed {
        (i64::from(i32::MIN), i64::from(i32::MAX))
    } else {
        (0, i64::from(u32::MAX))
    };
    Word {
        at,
        lo: (lo - widen).max(min),
        hi: (hi + widen).min(max),
        signed,
    }
}

/// The floats of `bytes` as f64 (`dtype`'s size each); None where the length is not a whole
/// number of them.
fn floats(bytes: &[u8], dtype: Dtype) -> Option<Vec<f64>> {
    let size = match dtype {
        Dtype::F32 => 4,
        Dtype::F64 => 8,
    };
    if !bytes.len().is_multiple_of(size) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(size)
            .map(|c| match dtype {
                Dtype::F32 => f32::from_le_bytes(c.try_into().unwrap()) as f64,
                Dtype::F64 => f64::from_le_bytes(c.try_into().unwrap()),
            })
            .collect(),
    )
}

/// Whether `x` of `dtype` is zero or normal (a subnormal is what an integer beside floats
/// reads as, and the tolerance check refuses one).
fn plain(x: f64, dtype: Dtype) -> bool {
    let min = match dtype {
        Dtype::F32 => f32::MIN_POSITIVE as f64,
        Dtype::F64 => f64::MIN_POSITIVE,
    };
    x == 0.0 || (x.is_finite() && x.abs() >= min)
}

/// (the largest relative spread of an element over the samples, the region's scale: the mean
/// magnitude of its elements in the first sample), or why the samples are not floats of
/// `dtype` that vary a little.
fn spread(samples: &[&[u8]], dtype: Dtype) -> Result<(f64, f64), String> {
    let name = match dtype {
        Dtype::F32 => "f32",
        Dtype::F64 => "f64",
    };
    let runs: Vec<Vec<f64>> = samples
        .iter()
        .map(|b| floats(b, dtype))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("not a whole number of {name} values"))?;
    let first = &runs[0];
    let finite: Vec<f64> = first.iter().copied().filter(|x| x.is_finite()).collect();
    let min = match dtype {
        Dtype::F32 => f32::MIN_POSITIVE as f64,
        Dtype::F64 => f64::MIN_POSITIVE,
    };
    let scale = (finite.iter().map(|x| x.abs()).sum::<f64>() / finite.len().max(1) as f64).max(min);
    let mut worst: f64 = 0.0;
    for (k, x) in first.iter().enumerate() {
        let values = runs.iter().map(|r| r[k]);
        if values.clone().all(|v| v.to_bits() == x.to_bits()) {
            continue;
        }
        if values.clone().any(|v| !plain(v, dtype)) {
            return Err(format!(
                "element {k} varies from run to run and is not a normal {name} in every run (an integer, a pointer, or NaN)"
            ));
        }
        let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        worst = worst.max((hi - lo) / x.abs().max(scale));
    }
    if worst > MAX_SPREAD {
        return Err(format!(
            "its runs differ by up to {worst:.1e} of the values' magnitude as {name}, more than the order of a sum explains (a tolerance is learned up to {MAX_SPREAD:e})"
        ));
    }
    Ok((worst, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_that_varies_is_wrong_only_where_the_original_does_not() {
        let at = Some("allocation 0x7000 word 12 differs from the checked run in run 3");
        let err = verdict(None, at).unwrap_err();
        assert!(
            err.starts_with("not deterministic: allocation 0x7000 word 12"),
            "{err}"
        );
        assert_eq!(verdict(None, None), Ok(()));
        assert_eq!(
            verdict(at, at),
            Ok(()),
            "a racy original cannot demand determinism"
        );
        assert_eq!(verdict(at, None), Ok(()));
    }

    use crate::store::records::{Region, RegionData, Snapshot};
    use crate::validate::compare_by_region;

    /// A scatter-add with float atomics, as `atomicAdd(&out[bin[j]], w[j])` over a grid:
    /// contributions of both signs into 64 bins, summed in f32 in the order given.
    struct ScatterAdd {
        bins: Vec<usize>,
        weights: Vec<f32>,
    }

    /// A small deterministic generator (xorshift64*), so that every run of the test is alike.
    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    const BINS: usize = 64;

    impl ScatterAdd {
        fn new(n: usize) -> ScatterAdd {
            let mut r = rng(7);
            let bins = (0..n).map(|_| (r() % BINS as u64) as usize).collect();
            let weights = (0..n)
                .map(|_| ((r() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 0.9)
                .collect();
            ScatterAdd { bins, weights }
        }

        /// The output when the contributions `order` names arrive in that order.
        fn run(&self, order: &[usize]) -> Vec<f32> {
            let mut out = vec![0f32; BINS];
            for &j in order {
                out[self.bins[j]] += self.weights[j];
            }
            out
        }

        /// The threads' arrival order of one run: blocks of 256 in a shuffled order, each
        /// block's threads in an order of their own.
        fn order(&self, seed: u64) -> Vec<usize> {
            let mut r = rng(seed);
            let n = self.bins.len();
            let mut blocks: Vec<usize> = (0..n.div_ceil(256)).collect();
            shuffle(&mut blocks, &mut r);
            let mut order = Vec::with_capacity(n);
            for b in blocks {
                let mut threads: Vec<usize> = (b * 256..((b + 1) * 256).min(n)).collect();
                shuffle(&mut threads, &mut r);
                order.extend(threads);
            }
            order
        }

        /// The red team's kernel that drops the atomics: a plain `out[b] += w`, where the 32
        /// threads of a warp that hit one bin all read it before any writes it, and the last
        /// write wins.
        fn racy(&self, order: &[usize]) -> Vec<f32> {
            let mut out = vec![0f32; BINS];
            for warp in order.chunks(32) {
                let read = out.clone();
                for &j in warp {
                    out[self.bins[j]] = read[self.bins[j]] + self.weights[j];
                }
            }
            out
        }
    }

    fn shuffle(v: &mut [usize], r: &mut impl FnMut() -> u64) {
        for i in (1..v.len()).rev() {
            v.swap(i, (r() % (i as u64 + 1)) as usize);
        }
    }

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// The recording's state after the launch: the bins (written), the weights (read).
    fn state(out: &[f32], k: &ScatterAdd) -> Snapshot {
        Snapshot {
            regions: vec![
                Region::allocation(0x7000_0000, f32s(out)),
                Region::allocation(0x7010_0000, f32s(&k.weights)),
            ],
        }
    }

    /// A run as the session reads it back: the regions that differ from `expected` in full,
    /// the others unchanged.
    fn read_back(expected: &Snapshot, run: &Snapshot) -> Snapshot {
        Snapshot {
            regions: expected
                .regions
                .iter()
                .zip(&run.regions)
                .map(|(e, r)| Region {
                    data: if e.data == r.data {
                        RegionData::Unchanged
                    } else {
                        r.data.clone()
                    },
                    ..r.clone()
                })
                .collect(),
        }
    }

    const PTX: &str = "\tld.global.f32 %f1, [%rd4];\n\t@%p1 red.global.add.f32 [%rd6], %f1;\n";

    /// What `r3 record` and every search learn for the kernel: the recording, and RUNS runs of
    /// the baseline in other orders.
    fn learned(k: &ScatterAdd) -> (Snapshot, Vec<Learned>) {
        let expected = state(&k.run(&k.order(1)), k);
        let runs: Vec<Snapshot> = (0..RUNS as u64)
            .map(|i| read_back(&expected, &state(&k.run(&k.order(100 + i)), k)))
            .collect();
        let learned = learn(&expected, &runs, &[0], type_hint(PTX), false).unwrap();
        (expected, learned)
    }

    fn check(
        expected: &Snapshot,
        learned: &[Learned],
        out: &[f32],
        k: &ScatterAdd,
    ) -> Result<(), String> {
        let got = state(out, k);
        compare_by_region(expected, &got, &[0], &[], |i| {
            learned.iter().find(|l| l.region == i).map(|l| l.held())
        })
    }

    #[test]
    fn float_atomics_are_named_and_give_the_type() {
        assert_eq!(reason(PTX), FLOAT_ATOMICS);
        assert_eq!(type_hint(PTX), Some(Dtype::F32));
        let f64_ptx = "  atom.global.add.f64 %fd2, [%rd1], %fd1;";
        assert_eq!(type_hint(f64_ptx), Some(Dtype::F64));
        assert_eq!(type_hint(&format!("{PTX}{f64_ptx}")), None);
        assert_eq!(
            float_atomics("  atom.global.add.noftz.bf16x2 %r1, [%rd1], %r2;"),
            (true, false)
        );
        let ints = "  atom.global.add.u32 %r1, [%rd1], 1;\n  st.global.f32 [%rd2], %f1;";
        assert_eq!(reason(ints), RUNS_DIFFER);
        assert_eq!(float_atomics(ints), (false, false));
    }

    #[test]
    fn a_kernel_that_reads_the_clock_is_named_whatever_else_it_does() {
        let spin =
            "  mov.u32 %r1, %clock;\n  mov.u64 %rd2, %clock64;\n  st.global.u64 [%rd1], %rd3;";
        assert!(reads_clock(spin));
        assert_eq!(reason(spin), READS_CLOCK);
        assert_eq!(
            reason(&format!("{PTX}\n  mov.u64 %rd9, %globaltimer;")),
            READS_CLOCK
        );
        // Names that only contain the word, and comments, are no clock.
        let not = "  mov.u32 %r_clock, 1; // %clock64 in a comment\n  .reg .b32 %clockwise;";
        assert!(!reads_clock(not));
        assert_eq!(reason(not), RUNS_DIFFER);
    }

    #[test]
    fn a_scatter_add_with_float_atomics_is_validated_within_its_own_spread() {
        let k = ScatterAdd::new(20_000);
        let (expected, learned) = learned(&k);
        assert_eq!(learned.len(), 1, "{learned:?}");
        let l = learned[0].clone();
        assert_eq!((l.region, l.tolerance.unwrap().dtype), (0, Dtype::F32));
        assert!(
            l.spread > 0.0 && l.tolerance.unwrap().rel >= FLOOR_EPS * f32::EPSILON as f64,
            "{l:?}"
        );
        assert!(
            l.tolerance.unwrap().rel < 1e-3,
            "a tolerance of the last bits: {l:?}"
        );
        for seed in 1000..1020 {
            let other = k.run(&k.order(seed));
            // The exact check (all r3 had before) refuses the original's own other runs ...
            assert!(
                compare_by_region(&expected, &state(&other, &k), &[0], &[], |_| None).is_err(),
                "order {seed} gives other last bits"
            );
            // ... which are within the spread learned.
            check(&expected, &learned, &other, &k).unwrap_or_else(|e| panic!("order {seed}: {e}"));
        }
    }

    #[test]
    fn red_team_candidates_of_a_float_atomic_kernel_stay_invalid() {
        let k = ScatterAdd::new(20_000);
        let (expected, learned) = learned(&k);
        let order = k.order(2000);
        let half: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&j| j < k.bins.len() / 2)
            .collect();
        for (what, out) in [
            ("drops the atomics", k.racy(&order)),
            ("writes zeros", vec![0f32; BINS]),
            ("skips half the grid", k.run(&half)),
        ] {
            let e = check(&expected, &learned, &out, &k).unwrap_err();
            assert!(e.contains("outside tolerance"), "{what}: {e}");
        }
        // The weights (an input) must not move at all.
        let mut got = state(&k.run(&order), &k);
        if let RegionData::Full(w) = &mut got.regions[1].data {
            w[0] ^= 1;
        }
        assert!(compare_by_region(&expected, &got, &[0], &[], |i| {
            learned.iter().find(|l| l.region == i).map(|l| l.held())
        })
        .is_err());
    }

    #[test]
    fn what_no_tolerance_can_tell_apart_is_refused_with_the_reason() {
        let k = ScatterAdd::new(4096);
        let expected = state(&k.run(&k.order(1)), &k);
        let other = read_back(&expected, &state(&k.run(&k.order(2)), &k));
        // A region the recorded launch left unchanged that varies.
        let e = learn(
            &expected,
            std::slice::from_ref(&other),
            &[],
            Some(Dtype::F32),
            false,
        )
        .unwrap_err();
        assert!(e.contains("left it unchanged"), "{e}");
        // Words that vary and are not floats: list indices appended with atomics.
        let ints = |v: &[u32]| Snapshot {
            regions: vec![Region::allocation(
                0x7000_0000,
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )],
        };
        let (a, b) = (ints(&[3, 7, 9, 0]), ints(&[7, 9, 3, 0]));
        let e = learn(&a, &[b], &[0], None, false).unwrap_err();
        assert!(e.contains("not a normal"), "{e}");
        assert!(e.contains("as words, 3 of its 4 words differ"), "{e}");
        // Floats that differ by far more than the order of a sum.
        let (a, b) = (state(&[1.0, 2.0], &k), state(&[1.0, 2.5], &k));
        let e = learn(&a, &[read_back(&a, &b)], &[0], Some(Dtype::F32), false).unwrap_err();
        assert!(e.contains("more than the order of a sum"), "{e}");
        // Runs that all agree with the recording: nothing to learn.
        assert_eq!(
            learn(
                &expected,
                std::slice::from_ref(&expected),
                &[0],
                None,
                false
            )
            .unwrap(),
            []
        );
    }

    #[test]
    fn doubles_are_learned_as_doubles() {
        let sums: Vec<f64> = (1..=64).map(|i| (i as f64).sqrt() * 1e3).collect();
        let bumped: Vec<f64> = sums
            .iter()
            .map(|x| f64::from_bits(x.to_bits() + 3))
            .collect();
        let f64s = |v: &[f64]| Snapshot {
            regions: vec![Region::allocation(
                0x7000_0000,
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )],
        };
        let learned = learn(&f64s(&sums), &[f64s(&bumped)], &[0], None, false).unwrap();
        assert_eq!(
            learned[0].tolerance.unwrap().dtype,
            Dtype::F64,
            "{learned:?}"
        );
        assert!(learned[0].tolerance.unwrap().rel < 1e-12, "{learned:?}");
    }

    #[test]
    fn the_decision_says_why_and_what_candidates_are_held_to() {
        let k = ScatterAdd::new(4096);
        let (_, learned) = learned(&k);
        let d = Decision {
            reason: FLOAT_ATOMICS.into(),
            learned: learned
                .iter()
                .map(|l| ("allocation 0x70000000".into(), l.clone()))
                .collect(),
            user: None,
            runs: RUNS,
        };
        let text = d.text();
        assert!(
            text.starts_with("not deterministic (float atomics: outputs depend on order); candidates are held to 4× the spread of 8 runs")
                && text.contains("allocation 0x70000000 f32:rel="),
            "{text}"
        );
        let user = Decision {
            user: Some("f32:rel=1e-5".parse().unwrap()),
            learned: Vec::new(),
            ..d
        };
        assert!(
            user.text()
                .contains("the tolerance given (f32:rel=1.00e-5,abs=0.00e0)"),
            "{}",
            user.text()
        );
        let exact = Decision {
            reason: READS_CLOCK.into(),
            user: None,
            ..user
        };
        assert!(
            exact.text().ends_with(
                "8 later runs of the -O3 baseline reproduced the recording, and candidates are held to it exactly"
            ),
            "{}",
            exact.text()
        );
    }

    #[test]
    fn comparisons_never_sit_before_a_warm_sample() {
        assert!(compare_after(Regime::Cold, true));
        assert!(compare_after(Regime::Cold, false));
        assert!(!compare_after(Regime::Warm, true));
        assert!(compare_after(Regime::Warm, false));
    }

    /// The words of one allocation, as a snapshot.
    fn words_state(v: &[u32]) -> Snapshot {
        Snapshot {
            regions: vec![Region::allocation(
                0x7000_0000,
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )],
        }
    }

    fn check_words(expected: &Snapshot, learned: &[Learned], got: &[u32]) -> Result<(), String> {
        compare_by_region(expected, &words_state(got), &[0], &[], |i| {
            learned.iter().find(|l| l.region == i).map(|l| l.held())
        })
    }

    /// simpleAtomicIntrinsics' shape: eleven counters updated by atomics from every thread,
    /// of which the exchange's (the last writer's id) and the compare-and-swap's depend on the
    /// order the threads run in; the others (sums, min, max, and, or) do not.
    #[test]
    fn integer_results_of_atomics_are_held_to_the_range_their_runs_showed() {
        let run =
            |exch: u32, cas: u32| words_state(&[2560, exch, 255, 0, 17, 137, cas, 7, 0xffff, 0, 0]);
        let expected = run(251, 12);
        let runs: Vec<Snapshot> = [(247, 9), (255, 14), (249, 11)]
            .iter()
            .map(|&(e, c)| read_back(&expected, &run(e, c)))
            .collect();
        let learned = learn(&expected, &runs, &[0], None, false).unwrap();
        assert_eq!(learned.len(), 1);
        assert_eq!(
            learned[0].words.iter().map(|w| w.at).collect::<Vec<_>>(),
            [4, 24]
        );
        assert!(
            learned[0].text().contains("2 word(s) within"),
            "{}",
            learned[0].text()
        );
        // Another order of the same threads: valid.
        assert_eq!(
            check_words(
                &expected,
                &learned,
                &[2560, 253, 255, 0, 17, 137, 10, 7, 0xffff, 0, 0]
            ),
            Ok(())
        );
        // What stays put must still match to the bit: a sum off by one is wrong.
        let e = check_words(
            &expected,
            &learned,
            &[2561, 251, 255, 0, 17, 137, 12, 7, 0xffff, 0, 0],
        )
        .unwrap_err();
        assert!(e.contains("differs at byte 0"), "{e}");
        // Zeros where the last writer's id goes, and an id from another grid: wrong.
        for bad in [0, 100_000] {
            let e = check_words(
                &expected,
                &learned,
                &[2560, bad, 255, 0, 17, 137, 12, 7, 0xffff, 0, 0],
            )
            .unwrap_err();
            assert!(
                e.contains("outside what the original's own runs leave there"),
                "{e}"
            );
        }
        // Signed values held as signed: -3..2 is narrow as i32, the whole range as u32.
        let signed = |v: i32| words_state(&[v as u32, 5]);
        let learned = learn(
            &signed(-3),
            &[read_back(&signed(-3), &signed(2))],
            &[0],
            None,
            false,
        )
        .unwrap();
        assert!(learned[0].words[0].signed, "{learned:?}");
        assert_eq!(
            check_words(&signed(-3), &learned, &[(-1i32) as u32, 5]),
            Ok(())
        );
        assert!(check_words(&signed(-3), &learned, &[1 << 30, 5]).is_err());
    }

    /// The clock sample's shape: each block stores the clock as it starts and as it ends, and
    /// a checksum of its work beside them. The times are not compared; the work is, exactly.
    #[test]
    fn times_a_kernel_stores_are_not_compared_and_everything_else_is_exactly() {
        let run = |t0: u32, sum: u32| words_state(&[t0, t0 + 900, sum, t0 + 40, t0 + 990, sum]);
        let expected = run(1_000_000, 77);
        let runs: Vec<Snapshot> = (1..4)
            .map(|i| read_back(&expected, &run(1_000_000 + i * 50_000, 77)))
            .collect();
        let learned = learn(&expected, &runs, &[0], None, true).unwrap();
        assert!(learned[0].words.iter().all(|w| w.is_free()));
        assert_eq!(learned[0].words.len(), 4);
        assert!(
            learned[0]
                .text()
                .starts_with("4 word(s) of times not compared"),
            "{}",
            learned[0].text()
        );
        // A later run, at any time: valid.
        assert_eq!(
            check_words(&expected, &learned, &[7, 9, 77, 11, 13, 77]),
            Ok(())
        );
        // Its work done wrong, or not done: wrong.
        assert!(check_words(&expected, &learned, &[7, 9, 78, 11, 13, 77]).is_err());
        assert!(check_words(&expected, &learned, &[7, 9, 0, 11, 13, 0]).is_err());
        // Sums by float atomics in a kernel that also reads the clock keep their tolerance.
        let k = ScatterAdd::new(4096);
        let sums = state(&k.run(&k.order(1)), &k);
        let other = read_back(&sums, &state(&k.run(&k.order(2)), &k));
        let floats = learn(&sums, &[other], &[0], Some(Dtype::F32), true).unwrap();
        assert!(
            floats[0].tolerance.is_some() && floats[0].words.is_empty(),
            "{floats:?}"
        );
        // Where its replays agree with each other and differ from the recording in most
        // words, the recording is more likely wrong than late: refused.
        let other = read_back(&expected, &words_state(&[1, 2, 3, 4, 5, 77]));
        let e = learn(&expected, &[other.clone(), other], &[0], None, true).unwrap_err();
        assert!(e.contains("5 of its 6 words differ"), "{e}");
    }
}
