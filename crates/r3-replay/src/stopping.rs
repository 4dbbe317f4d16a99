//! When a timing knows enough: the stopping rule of [`super::session::Session::time`], pure so
//! that it is tested on simulated timings.
//!
//! Candidates are timed interleaved with the baseline (A B A B …). A measurement stops when
//! - every median is known within 1% at 95% confidence (McGill et al.'s notch: median ±
//!   1.57 IQR / √n), or
//! - the candidate's ratio to the baseline is *decided*: known to within a tenth of its distance
//!   from 1 on a log scale. A 2× difference on a long kernel is clear after one pair, while a
//!   1–2% difference still needs the 1% precision. Below ten samples a series' interquartile
//!   range is not trusted: its uncertainty is its range or [`FEW_SAMPLES_FLOOR`], over √n.
//!
//! and never before [`min_pairs`], which asks for about [`MIN_SAMPLED_US`] of kernel time per
//! series (at most ten samples): short kernels are sampled ten times, a 1 s kernel once. Warm-up
//! follows the same idea ([`warmups`]): one round for a kernel of 10 ms or more, three else.
//!
//! A search's near-tie on a long kernel settles at [`LONG_TIE`] instead of 1%
//! ([`tie_precision`]): ten pairs of a 1 s kernel cost 21 s a candidate, and a search under a
//! deadline learns more from three candidates known within 2% than from one known within 1%.
//! A confirmation does not race: it times what ships at 1%, but a long kernel's only until its
//! ratio is known on one side of the shipping line ([`sided`]), all a confirmation decides.
//!
//! Racing ([`beaten`]): where the search already has a best, a candidate whose ratio to the
//! baseline is, at 95% confidence, above the best's is stopped there. It cannot win, and a
//! 1 s kernel's loser then costs one pair instead of ten. Its time is kept as measured, with
//! [`TimeStats::raced`] set: fewer samples, never a winner's.

use crate::store::outcome::TimeStats;

/// Kernel time per series, at least, before a measurement may stop.
pub const MIN_SAMPLED_US: f64 = 20_000.0;
/// The fewest samples any measurement takes at most (the old fixed minimum).
pub const MAX_MIN_PAIRS: u32 = 10;
/// Relative spread assumed for a series of fewer than ten samples (at least).
pub const FEW_SAMPLES_FLOOR: f64 = 0.03;
/// A warm-up round this long (per launch) is enough.
pub const LONG_KERNEL_US: f64 = 10_000.0;
/// The precision every median is asked for, but in a long kernel's search.
pub const TIE: f64 = 0.01;
/// The precision a search asks of a near-tie on a kernel of [`LONG_SEARCH_US`] or more a launch.
pub const LONG_TIE: f64 = 0.02;
/// Kernels this long a launch or more are searched at [`LONG_TIE`].
pub const LONG_SEARCH_US: f64 = 100_000.0;
/// A candidate's ratio to the baseline is decided once known within 1/DECIDED of its logarithm.
const DECIDED: f64 = 10.0;

/// What ends a timing besides [`enough`]: `max_reps` pairs; with `race` (the search's best
/// ratio to the baseline) a candidate clearly slower than it ([`beaten`]); with `line` (a
/// confirmation's shipping line, a ratio) a long kernel's ratio known to lie on one side of it
/// ([`sided`]); with `beat_us` (a time measured in other sessions of the same launch) a
/// session's own -O3, as a search's first trial, clearly slower than it ([`beaten_elsewhere`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Until {
    pub max_reps: u32,
    pub race: Option<f64>,
    pub line: Option<f64>,
    pub beat_us: Option<f64>,
}

impl Until {
    /// At most `max_reps` pairs, with neither a race nor a line.
    pub fn reps(max_reps: u32) -> Until {
        Until {
            max_reps,
            race: None,
            line: None,
            beat_us: None,
        }
    }

    /// The same, racing `race`.
    pub fn racing(self, race: Option<f64>) -> Until {
        Until { race, ..self }
    }
}

/// Pairs to take before stopping, for a kernel of `t_us`.
pub fn min_pairs(t_us: f64) -> u32 {
    if t_us.is_nan() || t_us <= 0.0 {
        return MAX_MIN_PAIRS;
    }
    ((MIN_SAMPLED_US / t_us).ceil() as u32).clamp(1, MAX_MIN_PAIRS)
}

/// Warm-up rounds, given the first warm-up launch's time.
pub fn warmups(first_us: f64) -> u32 {
    if first_us >= LONG_KERNEL_US {
        1
    } else {
        3
    }
}

/// The precision a measurement asks of a median before a near-tie stops it: [`TIE`], or
/// [`LONG_TIE`] in a search (`searching`: the candidate races against a best) of a kernel of
/// `t_us` from [`LONG_SEARCH_US`] on.
pub fn tie_precision(t_us: f64, searching: bool) -> f64 {
    if searching && t_us >= LONG_SEARCH_US {
        LONG_TIE
    } else {
        TIE
    }
}

/// Pairs a near-tie takes before it settles, at best (the spread under [`FEW_SAMPLES_FLOOR`]):
/// what a search's candidate of a kernel of `t_us` costs when nothing cuts it short.
pub fn tie_pairs(t_us: f64, searching: bool) -> u32 {
    let p = tie_precision(t_us, searching);
    let floor = (FEW_SAMPLES_FLOOR / p).powi(2).floor() as u32 + 1;
    min_pairs(t_us).max(floor.min(MAX_MIN_PAIRS))
}

/// Pairs a candidate at `ratio` to the baseline takes before it stops, at best (the spread
/// under [`FEW_SAMPLES_FLOOR`]): those that know the ratio within a tenth of its logarithm
/// ([`enough`]'s decided ratio: one pair at 3×), at most a near-tie's ([`tie_pairs`]).
pub fn pairs_at(t_us: f64, ratio: f64, searching: bool) -> u32 {
    let tie = tie_pairs(t_us, searching);
    let log = ratio.ln().abs();
    if !(log.is_finite() && log > 0.0) {
        return tie;
    }
    // Both series at the floor's uncertainty, FEW_SAMPLES_FLOOR / √n each (relative_uncertainty).
    let decided = (DECIDED * std::f64::consts::SQRT_2 * FEW_SAMPLES_FLOOR / log)
        .powi(2)
        .ceil();
    min_pairs(t_us).max((decided as u32).min(tie))
}

/// Whether the series (the baseline first, interleaved, equally long) know enough; `searching`
/// as for [`tie_precision`].
pub fn enough(series: &[Vec<f64>], searching: bool) -> bool {
    let Some(base) = series.first().filter(|s| !s.is_empty()) else {
        return false;
    };
    let t = TimeStats::of(base).median_us;
    if (base.len() as u32) < min_pairs(t) {
        return false;
    }
    let p = tie_precision(t, searching);
    if series.iter().all(|s| settled(s, p)) {
        return true;
    }
    series.len() == 2 && decided(&series[0], &series[1])
}

/// Whether a candidate timed against the baseline (`base`, `cand`: interleaved, equally long)
/// is clearly slower than the search's best, whose ratio to the baseline is `best_ratio`: the
/// lower end of its ratio's 95% interval lies above the best's. Never before [`min_pairs`].
pub fn beaten(base: &[f64], cand: &[f64], best_ratio: f64) -> bool {
    let (a, b) = (TimeStats::of_or_none(base), TimeStats::of_or_none(cand));
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    if !(a.median_us > 0.0 && b.median_us > 0.0 && best_ratio > 0.0)
        || (base.len() as u32) < min_pairs(a.median_us)
    {
        return false;
    }
    let u = relative_uncertainty(base).hypot(relative_uncertainty(cand));
    (b.median_us / a.median_us / best_ratio).ln() > u
}

/// A search's race before its first trial is measured: on, with nothing to beat yet, so that
/// the first trial's ratio (-O3's, timed beside itself) sets it for the candidates after it.
/// Without it the candidate measured next to the first trial (nvcc's code) raced nothing and was
/// timed to 1%: ten pairs, 24 s of a 1 s kernel's 48 s warm start (H200, 2026-11-29). Finite,
/// as it crosses the worker's JSON lines.
pub const NO_BEST_YET: f64 = f64::MAX;

/// Whether a measurement of a long kernel (the baseline `base` of [`LONG_KERNEL_US`] or more a
/// run; `cand` interleaved) has decided which side of `line` its ratio to the baseline lies on:
/// `line` being the ratio at which a code ships (1/1.02 for apply's 1.02×), its 95% interval
/// lies wholly above or below it. A confirmation asks only that: timed to 1% instead, a 1 s
/// kernel's 1.045× took ten pairs a context, three contexts, two codes: 155 s, more than its
/// deadline had left (H200, 2026-11-29; four pairs decide it). Never before [`min_pairs`].
pub fn sided(base: &[f64], cand: &[f64], line: f64) -> bool {
    let (Some(a), Some(b)) = (TimeStats::of_or_none(base), TimeStats::of_or_none(cand)) else {
        return false;
    };
    if !(a.median_us >= LONG_KERNEL_US && b.median_us > 0.0 && line > 0.0)
        || base.len() != cand.len()
        || (base.len() as u32) < min_pairs(a.median_us)
    {
        return false;
    }
    let u = relative_uncertainty(base).hypot(relative_uncertainty(cand));
    (b.median_us / a.median_us / line).ln().abs() > u
}

/// Pairs a timing of a kernel of `t_us` at `ratio` to the baseline takes before [`sided`]
/// decides it against `line` (or at a speedup, against a line that is one), at best (the
/// spread under [`FEW_SAMPLES_FLOOR`]); at most [`pairs_at`]'s, which it stops at anyway. A
/// short kernel's is [`pairs_at`]'s.
pub fn pairs_to_decide(t_us: f64, ratio: f64, line: f64) -> u32 {
    let full = pairs_at(t_us, ratio, false);
    let gap = (ratio / line).ln().abs();
    if t_us < LONG_KERNEL_US || !(gap.is_finite() && gap > 0.0) {
        return full;
    }
    // Both series at the floor: FEW_SAMPLES_FLOOR / √n each, so √2·floor/√n < gap.
    let n = (std::f64::consts::SQRT_2 * FEW_SAMPLES_FLOOR / gap)
        .powi(2)
        .floor()
        + 1.0;
    min_pairs(t_us).max((n as u32).min(full))
}

/// Kernels this long a launch or more have a raced candidate judged on its checked run alone
/// ([`one_run_beaten`]).
pub const ONE_RUN_US: f64 = LONG_KERNEL_US;
/// One run must be this much slower than the best, at least, to settle a candidate: the check
/// run follows a module load and a restore, and comes without a warm-up.
pub const ONE_RUN_MARGIN: f64 = 0.05;
/// How many of the baseline's spreads one run must be slower than the best by, at least.
pub const ONE_RUN_SPREADS: f64 = 4.0;

/// Whether one run of a candidate (its checked run, `cand_us`) settles it as slower than the
/// search's best (`best_ratio` to the baseline), given the baseline as this session timed it:
/// on a kernel of [`ONE_RUN_US`] or more, a run slower than the best by more than
/// [`ONE_RUN_MARGIN`] and [`ONE_RUN_SPREADS`] of the baseline's run-to-run spread. A 1 s
/// kernel's losing candidate then costs its one run, not a warm-up and a pair with the
/// baseline (about five runs); near-ties and winners are timed in full as before.
pub fn one_run_beaten(base: &TimeStats, cand_us: f64, best_ratio: f64) -> bool {
    let best_us = base.median_us * best_ratio;
    if !(base.median_us >= ONE_RUN_US && best_us > 0.0 && cand_us.is_finite()) {
        return false;
    }
    let margin = (ONE_RUN_SPREADS * base.spread).max(ONE_RUN_MARGIN);
    cand_us > best_us * (1.0 + margin)
}

/// Whether one run of a session's own -O3 (its checked run, `us`) settles it as slower than the
/// best time measured in other sessions of the same launch (`beat_us`): a rewrite's build
/// whose -O3 runs slower than the best build judged before it by more than [`ONE_RUN_MARGIN`],
/// on a kernel of [`ONE_RUN_US`] or more. Each of a template's builds is a session of its own,
/// its first trial its -O3 timed alone: four runs or more of a 0.57 s kernel for each of 36
/// builds, where most are slower than the best by far (two_mm_d, H200, 2026-11-30).
pub fn beaten_elsewhere(us: f64, beat_us: Option<f64>) -> bool {
    let Some(best) = beat_us.filter(|b| *b > 0.0 && b.is_finite()) else {
        return false;
    };
    us.is_finite() && us >= ONE_RUN_US && us > best * (1.0 + ONE_RUN_MARGIN)
}

/// The race for the next candidate of a batch, after one measured `measured` (its ratio to
/// the baseline where valid): a faster valid ratio than the search's best, measured in the same
/// process against the same baseline, is the best now. A whole warm start is one batch, raced
/// until now against -O3 alone, so on a long kernel every candidate near 1× was timed to 1%
/// after the batch had found 3× (two_mm_d, H100, 2026-11-27: 21 s a trial). No race stays no
/// race (`--no-race`, confirmations).
pub fn tightened(race: Option<f64>, measured: Option<f64>) -> Option<f64> {
    match (race, measured) {
        (Some(best), Some(r)) if r > 0.0 && r < best => Some(r),
        (race, _) => race,
    }
}

/// True when the median of `s` is known within `precision` at 95% confidence. Below ten samples
/// the spread is taken as at least [`FEW_SAMPLES_FLOOR`], so 1% takes ten samples and 2% three.
pub fn settled(s: &[f64], precision: f64) -> bool {
    !s.is_empty() && relative_uncertainty(s) < precision
}

/// The candidate's ratio to the baseline is known to within 1/[`DECIDED`] of |ln ratio|.
fn decided(base: &[f64], cand: &[f64]) -> bool {
    let (a, b) = (TimeStats::of(base).median_us, TimeStats::of(cand).median_us);
    if !(a > 0.0 && b > 0.0) {
        return false;
    }
    let u = relative_uncertainty(base).hypot(relative_uncertainty(cand));
    u <= (b / a).ln().abs() / DECIDED
}

/// Half-width of the median's 95% interval, relative to the median. Below ten samples the
/// interquartile range is not trusted: their range (relative) or [`FEW_SAMPLES_FLOOR`],
/// whichever is larger, over √n.
fn relative_uncertainty(s: &[f64]) -> f64 {
    let t = TimeStats::of(s);
    let root_n = (s.len() as f64).sqrt();
    if s.len() < MAX_MIN_PAIRS as usize {
        let (lo, hi) = s
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        return ((hi - lo) / t.median_us).max(FEW_SAMPLES_FLOOR) / root_n;
    }
    1.57 * t.spread / root_n
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Interleaved samples of a baseline of `t` µs and a candidate `ratio` times as long,
    /// each with relative noise `noise`, until `enough` (or 50 pairs): the pairs taken.
    fn pairs_needed(t: f64, ratio: f64, noise: f64, seed: u64) -> u32 {
        pairs_needed_by(t, ratio, noise, seed, false)
    }

    /// [`pairs_needed`], in a search (`searching`) or not.
    fn pairs_needed_by(t: f64, ratio: f64, noise: f64, seed: u64, searching: bool) -> u32 {
        pairs_until(t, ratio, noise, seed, |s| enough(s, searching))
    }

    /// Interleaved samples as [`pairs_needed`], until `done` says so (or 50 pairs).
    fn pairs_until(
        t: f64,
        ratio: f64,
        noise: f64,
        seed: u64,
        done: impl Fn(&[Vec<f64>]) -> bool,
    ) -> u32 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut s = vec![Vec::new(), Vec::new()];
        for n in 1..=50 {
            for (i, mean) in [t, t * ratio].into_iter().enumerate() {
                s[i].push(mean * (1.0 + noise * rng.random_range(-1.0..1.0)));
            }
            if done(&s) {
                return n;
            }
        }
        50
    }

    fn base(median_us: f64, spread: f64) -> TimeStats {
        TimeStats {
            median_us,
            min_us: median_us,
            spread,
            samples: 3,
            raced: false,
        }
    }

    /// A long kernel's clearly slower candidate is settled by its one checked run; a near-tie,
    /// one within the baseline's own spread, a faster one, or any candidate of a short kernel
    /// (whose first run says little) is not.
    #[test]
    fn one_run_settles_only_a_long_kernels_clear_loser() {
        // The best runs at half the baseline's 1 s: 500 ms.
        let b = base(1e6, 0.004);
        assert!(one_run_beaten(&b, 560e3, 0.5), "12% slower than the best");
        assert!(!one_run_beaten(&b, 520e3, 0.5), "4%: within the margin");
        assert!(!one_run_beaten(&b, 400e3, 0.5), "faster than the best");
        // A noisy kernel (5% spread) needs 20% before one run says anything.
        let noisy = base(1e6, 0.05);
        assert!(!one_run_beaten(&noisy, 590e3, 0.5));
        assert!(one_run_beaten(&noisy, 610e3, 0.5));
        // A 2 ms kernel's first run is no judge: it is timed in full.
        assert!(!one_run_beaten(&base(2e3, 0.004), 4e3, 0.5));
        // Nonsense in, no verdict.
        assert!(!one_run_beaten(&b, f64::NAN, 0.5));
        assert!(!one_run_beaten(&b, 900e3, 0.0));
    }

    /// A build's -O3 is settled against the best build judged before it on its one checked run
    /// only where it is a long kernel's and clearly slower; a near-tie, a faster build, a short
    /// kernel's, or no best yet: timed in full.
    #[test]
    fn one_run_settles_a_build_clearly_slower_than_the_best_build_before_it() {
        let best = Some(200e3);
        assert!(beaten_elsewhere(570e3, best), "2.85x the best build");
        assert!(beaten_elsewhere(211e3, best), "5.5% slower");
        assert!(!beaten_elsewhere(209e3, best), "4.5%: within the margin");
        assert!(!beaten_elsewhere(150e3, best), "faster: a new best");
        assert!(
            !beaten_elsewhere(570e3, None),
            "the first build: nothing to beat"
        );
        assert!(
            !beaten_elsewhere(8e3, Some(2e3)),
            "an 8 ms kernel's run is no judge"
        );
        assert!(!beaten_elsewhere(f64::NAN, best));
        assert!(!beaten_elsewhere(570e3, Some(0.0)));
        assert!(!beaten_elsewhere(570e3, Some(f64::INFINITY)));
    }

    /// What prices a confirmation ahead of it is what the measurement takes: the pairs at each
    /// ratio, on a kernel of 1 s and one of 6 ms, with little noise.
    #[test]
    fn pairs_at_a_ratio_are_the_pairs_a_measurement_takes() {
        for t in [1e6, 6_000.0] {
            for ratio in [3.0, 1.5, 1.2, 1.044, 0.8] {
                let want = pairs_needed(t, ratio, 0.0005, 7);
                assert_eq!(pairs_at(t, ratio, false), want, "{t} µs at {ratio}x");
            }
        }
        // A clear winner on a long kernel: one pair; a near-tie: ten.
        assert_eq!(pairs_at(650_000.0, 3.08, false), 1);
        assert_eq!(pairs_at(1_070_000.0, 1.044, false), 10);
    }

    #[test]
    fn one_pair_decides_a_large_difference_on_a_long_kernel() {
        // A 1 s kernel, 2x slower or faster, 1% noise: one interleaved pair.
        assert_eq!(pairs_needed(1e6, 2.0, 0.01, 1), 1);
        assert_eq!(pairs_needed(1e6, 0.5, 0.01, 2), 1);
        // 5% apart is not clear from one pair; it takes the usual precision.
        assert!(pairs_needed(1e6, 1.05, 0.01, 3) > 1);
    }

    #[test]
    fn short_kernels_keep_ten_samples_and_small_differences_keep_one_percent() {
        // 50 us: at least ten pairs however large the difference.
        assert_eq!(pairs_needed(50.0, 2.0, 0.002, 4), 10);
        // A 1.5% difference with 2% noise is never "decided" early: it runs until settled.
        let s = pairs_needed(5_000.0, 1.015, 0.02, 5);
        assert!(s >= 10, "{s}");
    }

    #[test]
    fn a_batch_races_against_the_best_it_has_measured_so_far() {
        // Against -O3 (1.0), then a valid 3x: the next candidates race against 0.33.
        assert_eq!(tightened(Some(1.0), Some(0.33)), Some(0.33));
        // A slower or failed one changes nothing.
        assert_eq!(tightened(Some(0.33), Some(0.9)), Some(0.33));
        assert_eq!(tightened(Some(0.33), None), Some(0.33));
        assert_eq!(tightened(Some(0.33), Some(0.0)), Some(0.33));
        // No race (`--no-race`, a confirmation) is never started by a result.
        assert_eq!(tightened(None, Some(0.5)), None);
        // A 1 s kernel's near-1x candidate is then decided after one pair, not timed to 1%.
        let (base, cand) = (vec![1e6], vec![0.97e6]);
        assert!(!beaten(&base, &cand, 1.0));
        assert!(beaten(
            &base,
            &cand,
            tightened(Some(1.0), Some(0.33)).unwrap()
        ));
    }

    #[test]
    fn racing_drops_a_clearly_slower_candidate_after_one_pair() {
        // A 1 s kernel; the best so far runs at 0.80 of the baseline.
        let base = [1e6];
        assert!(
            beaten(&base, &[0.9e6], 0.80),
            "12% slower than the best: out"
        );
        assert!(
            !beaten(&base, &[0.82e6], 0.80),
            "2.5% is within one pair's doubt"
        );
        assert!(
            !beaten(&base, &[0.7e6], 0.80),
            "faster than the best: timed on"
        );
        // A short kernel is never raced before its ten samples, however slow.
        assert!(!beaten(&[50.0; 3], &[100.0; 3], 0.8));
        assert!(beaten(&[50.0; 10], &[100.0; 10], 0.8));
        // Nothing to race against, or nothing measured: no decision.
        assert!(!beaten(&base, &[0.9e6], 0.0));
        assert!(!beaten(&[], &[], 0.8));
    }

    /// Interleaved samples as [`pairs_needed`], until `enough` or `sided` against `line`.
    fn pairs_to_side(t: f64, ratio: f64, noise: f64, seed: u64, line: f64) -> u32 {
        pairs_until(t, ratio, noise, seed, |s| {
            enough(s, false) || sided(&s[0], &s[1], line)
        })
    }

    /// A long kernel's confirmation stops once its ratio is on one side of the shipping line:
    /// a 1 s kernel at 1.045x (ratio 0.957) against apply's 1.02x in four pairs, not ten; one at
    /// 0.95x as soon as it is clearly under the line. Near the line it keeps the full
    /// precision, and a short kernel keeps its ten samples.
    #[test]
    fn a_confirmation_stops_once_its_ratio_is_on_one_side_of_the_line() {
        let line = 1.0 / 1.02;
        assert_eq!(pairs_to_side(1.07e6, 1.0 / 1.045, 0.002, 9, line), 4);
        assert_eq!(pairs_to_decide(1.07e6, 1.0 / 1.045, line), 4);
        assert!(pairs_to_side(1.07e6, 1.0 / 0.95, 0.002, 10, line) <= 2);
        assert_eq!(pairs_to_side(1.07e6, 1.0 / 1.021, 0.002, 11, line), 10);
        assert_eq!(pairs_to_side(50.0, 1.0 / 1.3, 0.002, 12, line), 10);
        assert_eq!(
            pairs_to_decide(50.0, 1.0 / 1.3, line),
            pairs_at(50.0, 1.0 / 1.3, false)
        );
        // With the noise of a long kernel's runs (1%), it stops on the right side, every time.
        for seed in 0..50 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let (mut base, mut cand) = (Vec::new(), Vec::new());
            while !sided(&base, &cand, line) && !enough(&[base.clone(), cand.clone()], false) {
                base.push(1e6 * (1.0 + 0.01 * rng.random_range(-1.0..1.0)));
                cand.push(0.95e6 * (1.0 + 0.01 * rng.random_range(-1.0..1.0)));
            }
            let ratio = TimeStats::of(&cand).median_us / TimeStats::of(&base).median_us;
            assert!(
                ratio < line,
                "seed {seed}: {ratio} after {} pairs",
                base.len()
            );
        }
    }

    #[test]
    fn minimum_pairs_and_warmups_follow_kernel_time() {
        assert_eq!(min_pairs(1e6), 1);
        assert_eq!(min_pairs(5_000.0), 4);
        assert_eq!(min_pairs(100.0), 10);
        assert_eq!(min_pairs(0.0), 10);
        assert_eq!(warmups(1e6), 1);
        assert_eq!(warmups(100.0), 3);
    }

    #[test]
    fn few_noisy_samples_decide_nothing() {
        // Three samples spread over 40%: their range stands, no decision at 1.25x.
        let base = vec![1e6, 1.4e6, 1.2e6];
        let cand = vec![1.3e6, 1.6e6, 1.5e6];
        assert!(!enough(&[base, cand], true));
    }

    #[test]
    fn a_long_kernels_search_settles_near_ties_at_two_percent() {
        // A 1 s kernel, a candidate 0.5% from the baseline, 0.2% noise: a search's measurement
        // settles after three pairs; a confirmation (no race) keeps ten.
        assert_eq!(pairs_needed_by(1e6, 1.005, 0.002, 6, true), 3);
        assert_eq!(pairs_needed_by(1e6, 1.005, 0.002, 6, false), 10);
        // Noisier than the floor: the precision holds, it takes more pairs.
        assert!(pairs_needed_by(1e6, 1.005, 0.06, 7, true) > 3);
        // A 50 ms kernel's search keeps 1%.
        assert_eq!(pairs_needed_by(5e4, 1.005, 0.002, 8, true), 10);
        // What the deadline prices a trial at follows the same rule.
        assert_eq!(tie_pairs(1e6, true), 3);
        assert_eq!(tie_pairs(1e6, false), 10);
        assert_eq!(tie_pairs(5e4, true), 10);
        assert_eq!(tie_pairs(50.0, true), 10);
        assert_eq!(tie_precision(1e6, true), LONG_TIE);
    }
}
