//! The screen: a long kernel's candidates timed first on a prefix of the recorded launch's
//! grid, and timed on the whole launch only where the prefix does not show them clearly
//! slower than the search's best.
//!
//! The prefix is the first blocks of the grid's outermost dimension that has more than one
//! block, with every read of that dimension's extent answering the full extent
//! (`ptx::grid::with_grid_extent`): the blocks that run compute exactly what they compute in
//! the whole launch, over the same code path, in the order the GPU would start them. A
//! candidate dropped there is neither checked nor timed on the whole launch
//! (`Outcome::Screened`), so it can never be a winner.
//!
//! The screen is validated as it goes ([`Judge`]): its first candidates are timed both ways,
//! and so is every [`AUDIT_EVERY`]th one after, and every candidate it lets through is timed
//! on the whole launch anyway. Where the screen's ratio to the baseline and the whole
//! launch's differ by more than [`AGREE_MAX`] (on a log scale), the screen is off for the
//! kernel from then on, and the evaluator says so. While it is on, it drops only candidates
//! slower than the best by more than the largest disagreement seen ([`Judge::margin`]).

use crate::store::outcome::TimeStats;
use serde::{Deserialize, Serialize};

/// Kernels shorter than this per launch are timed on the whole launch only: a screen saves
/// little, and a prefix of a short launch is mostly its ramp.
pub const MIN_KERNEL_US: f64 = 50_000.0;
/// What a screened launch should take.
pub const TARGET_US: f64 = 40_000.0;
/// The prefix is at least this share of the grid's dimension...
pub const MIN_FRACTION: f64 = 1.0 / 16.0;
/// ...and at most this (more saves too little to be worth a second module).
pub const MAX_FRACTION: f64 = 0.25;
/// The prefix fills the GPU this many times over at least (by the most blocks an SM can hold),
/// so that it measures full waves, not a tail.
pub const MIN_WAVES: f64 = 4.0;
/// Candidates timed both ways, their results known, before the screen decides anything...
pub const CALIBRATION: usize = 3;
/// ...one of them at least this far from the baseline (|ln whole-launch ratio|): a screen that
/// compresses differences (a prefix whose memory traffic does not shrink with it) agrees on
/// candidates near 1× and shows itself only on a real difference.
pub const CALIBRATION_SPREAD: f64 = 0.10;
/// Candidates the screen may time both ways without calibrating before it gives up.
pub const CALIBRATION_LIMIT: u32 = 12;
/// After calibration, one candidate in this many is timed both ways, dropped or not.
pub const AUDIT_EVERY: u32 = 8;
/// The largest disagreement (|ln(screen ratio / whole-launch ratio)|) the screen may show.
pub const AGREE_MAX: f64 = 0.10;
/// The least margin above the best a dropped candidate must show.
pub const MIN_MARGIN: f64 = 0.02;
/// Screen pairs at most per candidate (the stopping rule usually ends sooner).
pub const MAX_PAIRS: u32 = 10;

/// Which blocks a screened launch runs: the first `kept` of grid dimension `dim`, of the
/// recorded `extent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    pub dim: usize,
    pub kept: u32,
    pub extent: u32,
}

impl Cut {
    /// The share of the launch's blocks it runs.
    pub fn fraction(&self) -> f64 {
        f64::from(self.kept) / f64::from(self.extent.max(1))
    }

    /// The grid to launch for a launch of `full` blocks (the recorded grid, or the grid a
    /// block-size override gives: dimension x then counts other blocks than the recording's,
    /// and the same share of its threads is kept).
    pub fn grid(&self, full: [u32; 3]) -> [u32; 3] {
        let mut g = full;
        let scaled = u64::from(self.kept) * u64::from(full[self.dim]);
        g[self.dim] = scaled.div_ceil(u64::from(self.extent.max(1))).max(1) as u32;
        g
    }
}

/// The cut for a launch of `grid` blocks of `block` threads whose -O3 code takes `kernel_us`
/// on a GPU of `sms` multiprocessors; None where a screen would not pay or not be faithful.
pub fn plan(grid: [u32; 3], block: [u32; 3], kernel_us: f64, sms: u32) -> Option<Cut> {
    // NaN (nothing measured) is not long.
    if kernel_us.is_nan() || kernel_us < MIN_KERNEL_US || sms == 0 {
        return None;
    }
    let dim = (0..3).rev().find(|&d| grid[d] > 1)?;
    let threads = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    // The most blocks an SM holds (2048 threads, 32 blocks on every architecture since Volta,
    // 16 on some): an upper bound, so the waves counted are at least this many.
    let per_sm = (2048 / threads.max(1)).clamp(1, 32) as f64;
    let others: u64 = (0..3)
        .filter(|&d| d != dim)
        .map(|d| u64::from(grid[d]))
        .product();
    let least_blocks = MIN_WAVES * f64::from(sms) * per_sm;
    let fraction = (TARGET_US / kernel_us).clamp(MIN_FRACTION, MAX_FRACTION);
    let extent = grid[dim];
    let mut kept = (f64::from(extent) * fraction).ceil() as u32;
    kept = kept.max((least_blocks / others as f64).ceil() as u32);
    let cut = Cut { dim, kept, extent };
    (cut.fraction() <= MAX_FRACTION).then_some(cut)
}

/// How one candidate meets the screen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Use {
    pub cut: Cut,
    /// Drop the candidate where its screened ratio to the baseline is clearly above this;
    /// None: time it both ways whatever the screen shows (calibration, audit).
    pub drop_above: Option<f64>,
}

/// What the screen measured of one candidate: the baseline's and its own screened runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Screened {
    pub baseline: TimeStats,
    pub time: TimeStats,
}

impl Screened {
    pub fn ratio(&self) -> f64 {
        self.time.median_us / self.baseline.median_us
    }
}

/// Whether the screen may decide, and how well it has agreed with the whole launch.
#[derive(Debug, Clone, Default)]
pub struct Judge {
    /// (screened ratio, whole-launch ratio) of every candidate timed both ways.
    pub both: Vec<(f64, f64)>,
    /// Candidates given to the screen so far.
    pub asked: u32,
    /// `asked` when the screen was calibrated (None: not yet).
    pub calibrated_at: Option<u32>,
    pub dropped: u32,
    /// Why the screen is off, once it disagreed.
    pub off: Option<String>,
}

impl Judge {
    /// How the next candidate meets the screen `cut`, when the search's best ratio to the
    /// baseline is `best`; None: the whole launch only.
    /// Nothing is screened without a best: a confirmation, or a search with no valid trial yet.
    /// Until calibrated (results known, not only asked: a batch's uses are all chosen before
    /// any of its results) every candidate is timed both ways.
    pub fn next(&mut self, cut: Cut, best: Option<f64>) -> Option<Use> {
        let best = best.filter(|b| *b > 0.0)?;
        if self.off.is_some() {
            return None;
        }
        let both = match self.calibrated_at {
            None if self.asked >= CALIBRATION_LIMIT => {
                self.off = Some(format!(
                    "the screen saw no candidate {:.0}% or more from the baseline in {CALIBRATION_LIMIT} timed both ways, so it could not be calibrated: every candidate is timed on the whole launch from here",
                    100.0 * CALIBRATION_SPREAD.exp_m1()
                ));
                return None;
            }
            None => true,
            Some(at) => (self.asked - at) % AUDIT_EVERY == AUDIT_EVERY - 1,
        };
        let drop_above = (!both).then(|| best * self.margin().exp());
        self.asked += 1;
        Some(Use { cut, drop_above })
    }

    fn calibrated(&self) -> bool {
        self.both.len() >= CALIBRATION
            && self
                .both
                .iter()
                .any(|&(_, w)| w.ln().abs() >= CALIBRATION_SPREAD)
    }

    /// The margin (log scale) above the best that a drop needs: the largest disagreement seen,
    /// at least [`MIN_MARGIN`].
    pub fn margin(&self) -> f64 {
        self.both
            .iter()
            .map(|&(s, w)| (s / w).ln().abs())
            .fold(MIN_MARGIN, f64::max)
    }

    /// Takes in a candidate timed both ways: its screened ratio and its whole-launch ratio.
    /// Returns the line to say where the screen just turned off.
    pub fn agreed(&mut self, cut: Cut, screened: f64, whole: f64) -> Option<String> {
        if !(screened > 0.0 && whole > 0.0) || self.off.is_some() {
            return None;
        }
        self.both.push((screened, whole));
        if (screened / whole).ln().abs() <= AGREE_MAX {
            if self.calibrated_at.is_none() && self.calibrated() {
                self.calibrated_at = Some(self.asked);
            }
            return None;
        }
        let why = format!(
            "the screen on the first {} of {} blocks in {} read {screened:.3}× the baseline where the whole launch read {whole:.3}×: every candidate is timed on the whole launch from here",
            cut.kept,
            cut.extent,
            r3_ptx::grid::DIMS[cut.dim]
        );
        self.off = Some(why.clone());
        Some(why)
    }

    /// What the screen did, for the search's report; None where it never ran.
    pub fn summary(&self, cut: Cut) -> Option<String> {
        if self.asked == 0 {
            return None;
        }
        let worst = self
            .both
            .iter()
            .map(|&(s, w)| (s / w).ln().abs())
            .fold(0.0, f64::max);
        let verdict = match (&self.off, self.calibrated_at) {
            (Some(why), _) if why.contains("could not be calibrated") => {
                "off, never calibrated".to_owned()
            }
            (Some(_), _) => "off after a disagreement".to_owned(),
            (None, None) => "calibrating".to_owned(),
            (None, Some(_)) => format!("on, largest disagreement {:.1}%", 100.0 * worst.exp_m1()),
        };
        Some(format!(
            "screen: the first {} of {} blocks in {} ({:.1}% of the launch): {} candidates, {} dropped, {} timed both ways; {verdict}",
            cut.kept,
            cut.extent,
            r3_ptx::grid::DIMS[cut.dim],
            100.0 * cut.fraction(),
            self.asked,
            self.dropped,
            self.both.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_kernel_is_cut_in_its_outermost_dimension_and_a_short_one_not_at_all() {
        // 1 s, 65536 blocks of 256 in x: a sixteenth (the floor) is 4096 blocks, under four
        // waves of 132 SMs holding 8 blocks each (4224): 4224.
        let c = plan([65536, 1, 1], [256, 1, 1], 1e6, 132).unwrap();
        assert_eq!((c.dim, c.kept, c.extent), (0, 4224, 65536));
        let c = plan([262144, 1, 1], [256, 1, 1], 1e6, 132).unwrap();
        assert_eq!(c.kept, 16384, "a sixteenth");
        // 2-D: y is cut, x kept whole; 0.64 s: a sixteenth of 256 rows is 16, four waves 17.
        let c = plan([256, 256, 1], [16, 16, 1], 640_000.0, 132).unwrap();
        assert_eq!((c.dim, c.kept), (1, 17));
        // 100 ms: 40 ms of it would be 40%, over the quarter: a quarter.
        let c = plan([65536, 1, 1], [256, 1, 1], 100_000.0, 132).unwrap();
        assert_eq!(c.kept, 16384);
        // Too short, or too few blocks for four waves in a quarter, or one block: none.
        assert_eq!(plan([65536, 1, 1], [256, 1, 1], 20_000.0, 132), None);
        assert_eq!(plan([2048, 1, 1], [256, 1, 1], 1e6, 132), None);
        assert_eq!(plan([1, 1, 1], [1024, 1, 1], 1e6, 132), None);
        assert_eq!(plan([65536, 1, 1], [256, 1, 1], f64::NAN, 132), None);
    }

    #[test]
    fn the_prefix_keeps_its_share_of_threads_under_another_block_size() {
        let c = Cut {
            dim: 0,
            kept: 4096,
            extent: 65536,
        };
        assert_eq!(c.grid([65536, 1, 1]), [4096, 1, 1]);
        // Blocks of 512 instead of 256: half the blocks, the same threads.
        assert_eq!(c.grid([32768, 1, 1]), [2048, 1, 1]);
        let y = Cut {
            dim: 1,
            kept: 16,
            extent: 256,
        };
        assert_eq!(y.grid([128, 256, 1]), [128, 16, 1]);
    }

    fn cut() -> Cut {
        Cut {
            dim: 0,
            kept: 64,
            extent: 1024,
        }
    }

    #[test]
    fn the_screen_calibrates_on_known_results_then_decides_with_audits_and_turns_off_on_disagreement(
    ) {
        let mut j = Judge::default();
        // A batch's uses are chosen before its results: all timed both ways until calibrated.
        for _ in 0..5 {
            assert_eq!(j.next(cut(), Some(0.5)).unwrap().drop_above, None);
        }
        // Three agreeing results near 1× do not calibrate it: no real difference seen yet.
        for _ in 0..CALIBRATION {
            assert_eq!(j.agreed(cut(), 1.0, 1.0), None);
        }
        assert_eq!(j.next(cut(), Some(0.5)).unwrap().drop_above, None);
        // One far from 1×, read right (5% off): calibrated, and that is the margin.
        assert_eq!(j.agreed(cut(), 0.525, 0.5), None);
        let limit = j.next(cut(), Some(0.5)).unwrap().drop_above.unwrap();
        assert!((limit / 0.5 - 1.05).abs() < 1e-9, "{limit}");
        // No best to drop against (a confirmation): the whole launch only.
        assert_eq!(j.next(cut(), None), None);
        assert_eq!(
            Judge::default().next(cut(), None),
            None,
            "not even to calibrate"
        );
        // One in AUDIT_EVERY is timed both ways.
        let uses: Vec<_> = (0..AUDIT_EVERY * 2)
            .map(|_| j.next(cut(), Some(0.5)).unwrap().drop_above.is_none())
            .collect();
        assert_eq!(uses.iter().filter(|b| **b).count(), 2, "{uses:?}");
        // A disagreement beyond AGREE_MAX turns it off, says so once, and it stays off (an
        // H100 case, 2026-11-27: a GEMM's first rows read a 3× candidate at 0.46×, not 0.33×).
        let line = j.agreed(cut(), 0.46, 0.33).unwrap();
        assert!(
            line.contains("0.460×") && line.contains("0.330×") && line.contains("64 of 1024"),
            "{line}"
        );
        assert_eq!(j.next(cut(), Some(0.5)), None);
        assert_eq!(j.agreed(cut(), 0.5, 1.0), None);
        assert!(j
            .summary(cut())
            .unwrap()
            .contains("off after a disagreement"));
    }

    #[test]
    fn a_screen_that_never_sees_a_real_difference_gives_up_uncalibrated() {
        let mut j = Judge::default();
        for _ in 0..CALIBRATION_LIMIT {
            assert_eq!(j.next(cut(), Some(0.9)).unwrap().drop_above, None);
            j.agreed(cut(), 1.01, 1.0);
        }
        assert_eq!(j.next(cut(), Some(0.9)), None);
        assert!(j
            .off
            .as_deref()
            .unwrap()
            .contains("could not be calibrated"));
    }

    #[test]
    fn a_screen_that_agrees_within_the_limit_widens_its_margin_to_what_it_saw() {
        let mut j = Judge::default();
        assert!((j.margin() - MIN_MARGIN).abs() < 1e-12);
        assert_eq!(j.agreed(cut(), 1.08, 1.0), None);
        assert!((j.margin() - 1.08f64.ln()).abs() < 1e-12);
        assert_eq!(j.summary(cut()), None, "never asked: nothing to say");
    }
}
