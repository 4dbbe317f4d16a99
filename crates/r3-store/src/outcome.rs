//! What became of one evaluation, as the trials database keeps it: an [`Outcome`] (valid with
//! its time and the baseline's, or the failure and its message) and the [`TimeStats`] of a
//! timing. Replay produces them; the store, the search, apply and the reports read them.

use serde::{Deserialize, Serialize};

/// Timing of one candidate, from CUDA events around each launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeStats {
    pub median_us: f64,
    pub min_us: f64,
    /// Relative spread: (p75 - p25) / median.
    pub spread: f64,
    pub samples: u32,
    /// Timing stopped early because the candidate was clearly slower than the search's best
    /// (`replay::stopping::beaten`): its median is from fewer samples than a full measurement's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raced: bool,
}

impl TimeStats {
    /// The statistics of a non-empty set of samples (µs).
    pub fn of(samples: &[f64]) -> TimeStats {
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let q = |f: f64| v[((v.len() - 1) as f64 * f).round() as usize];
        let median = q(0.5);
        TimeStats {
            median_us: median,
            min_us: v[0],
            spread: if median > 0.0 {
                (q(0.75) - q(0.25)) / median
            } else {
                0.0
            },
            samples: v.len() as u32,
            raced: false,
        }
    }

    /// [`TimeStats::of`], or None for no samples.
    pub fn of_or_none(samples: &[f64]) -> Option<TimeStats> {
        (!samples.is_empty()).then(|| TimeStats::of(samples))
    }

    /// One time known exactly (simulations and tests): no spread, one sample.
    pub fn exact(us: f64) -> TimeStats {
        TimeStats {
            median_us: us,
            min_us: us,
            spread: 0.0,
            samples: 1,
            raced: false,
        }
    }
}

/// What became of one evaluation. Every failure is a result, never a crash of r3.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Outputs matched the recording; `baseline` was timed interleaved in the same process.
    Valid {
        time: TimeStats,
        baseline: TimeStats,
    },
    /// The pipeline or code generation failed.
    CompileError { message: String },
    /// Ran, but the outputs differ from the recording (or it wrote elsewhere).
    WrongOutput { message: String },
    /// Illegal address, launch failure, or the worker died.
    Crashed { message: String },
    /// Exceeded the watchdog limit derived from the baseline.
    TimedOut { limit_ms: f64 },
    /// Timed on a prefix of the launch's blocks (replay's screen) and clearly slower there
    /// than the search's best: neither checked nor timed on the whole launch, so never a
    /// winner. `fraction`: the share of the launch's blocks that ran.
    Screened {
        time: TimeStats,
        baseline: TimeStats,
        fraction: f64,
    },
}

/// For people: the verb phrase and the message ("crashed: an illegal memory access …"), never
/// Rust's debug text.
impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.detail() {
            Some(d) => write!(f, "{}: {d}", self.in_words()),
            None => f.write_str(self.in_words()),
        }
    }
}

impl Outcome {
    /// What became of the candidate, as a verb phrase for messages ("gives wrong output").
    pub fn in_words(&self) -> &'static str {
        match self {
            Outcome::Valid { .. } => "is valid",
            Outcome::CompileError { .. } => "did not compile",
            Outcome::WrongOutput { .. } => "gives wrong output",
            Outcome::Crashed { .. } => "crashed",
            Outcome::TimedOut { .. } => "timed out",
            Outcome::Screened { .. } => "was screened out",
        }
    }

    /// The message a failure carries (the time limit, for a timeout); None when valid.
    pub fn detail(&self) -> Option<String> {
        match self {
            Outcome::Valid { .. } => None,
            Outcome::CompileError { message }
            | Outcome::WrongOutput { message }
            | Outcome::Crashed { message } => Some(message.clone()),
            Outcome::TimedOut { limit_ms } => Some(format!("no answer within {limit_ms:.0} ms")),
            Outcome::Screened { fraction, .. } => Some(format!(
                "{:.2}× the baseline's time on the first {:.1}% of the launch's blocks",
                self.screened_ratio().unwrap_or(f64::NAN),
                100.0 * fraction
            )),
        }
    }

    /// Candidate time over baseline time on the screen's prefix of the launch, for a
    /// candidate the screen dropped: what the search learns of it (it is slow), never a
    /// winner's ratio.
    pub fn screened_ratio(&self) -> Option<f64> {
        match self {
            Outcome::Screened { time, baseline, .. } => Some(time.median_us / baseline.median_us),
            _ => None,
        }
    }

    /// Candidate time over baseline time (lower is better), for valid outcomes.
    pub fn ratio(&self) -> Option<f64> {
        match self {
            Outcome::Valid { time, baseline } => Some(time.median_us / baseline.median_us),
            _ => None,
        }
    }
}
