//! Replay: run a recorded launch with any candidate's code, check its outputs, time it.
//!
//! `replay` knows nothing about search: it takes candidates and returns outcomes. The search
//! calls it through [`Evaluator`], in two phases (lower, measure) on one shared evaluator, so
//! that compiling (CPU, many threads) overlaps measuring (GPU, one batch at a time), and so
//! that candidates whose PTX is identical to one already measured are never measured twice.

pub mod determinism;
pub mod gpu;
pub mod l2;
pub mod session;
pub mod stopping;
pub mod turn;
pub mod validate;
pub mod worker;

use crate::candidate::Candidate;
use crate::lower::{CompileFailure, Lowered};
use serde::{Deserialize, Serialize};

/// Timing of one candidate, from CUDA events around each launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeStats {
    pub median_us: f64,
    pub min_us: f64,
    /// Relative spread: (p75 - p25) / median.
    pub spread: f64,
    pub samples: u32,
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
        }
    }

    /// One time known exactly (simulations and tests): no spread, one sample.
    pub fn exact(us: f64) -> TimeStats {
        TimeStats {
            median_us: us,
            min_us: us,
            spread: 0.0,
            samples: 1,
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
}

/// For people: the verb phrase and the message ("crashed: an illegal memory access …"), never
/// Rust's debug text.
impl From<CompileFailure> for Outcome {
    fn from(f: CompileFailure) -> Outcome {
        Outcome::CompileError { message: f.message }
    }
}

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

/// The GPU and driver an evaluator measures on (recorded with every trial).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub gpu: String,
    pub driver: String,
    /// Which device of that model (its UUID), where known: trials say which one measured them.
    pub id: Option<String>,
}

/// The interface the search uses. Implemented by the GPU replayer and by simulations.
///
/// Shared by reference (`Sync`): while threads lower candidates, the search measures the
/// ones already lowered, so `lower` and `measure` may run at the same time.
pub trait Evaluator: Sync {
    /// Where `measure` runs. Added for the trials database; the default says "unknown".
    fn device(&self) -> Device {
        Device {
            gpu: "unknown".into(),
            driver: "unknown".into(),
            id: None,
        }
    }

    /// How many candidates to lower at once; the default is one per core.
    fn lower_threads(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// The same evaluator with a worker of its own: a new process, so a new CUDA context.
    /// None where there is no such thing (simulations, tests): a confirmation then measures on
    /// this one.
    fn renewed(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }

    /// Compiles a candidate for a kernel (CPU only; safe to call from many threads).
    fn lower(&self, kernel: &str, candidate: &Candidate) -> Result<Lowered, Outcome>;
    /// Runs, validates and times a batch of lowered candidates of one kernel on the GPU, one
    /// outcome per candidate in order. Called from one thread at a time, while `lower` may be
    /// running on others.
    fn measure(&self, kernel: &str, batch: &[Lowered]) -> Vec<Outcome>;

    /// The traits of the kernel's -O3 code (`lower::TRAITS`) that recipes' preconditions name;
    /// by default read off the baseline's PTX. None known when it does not compile.
    fn traits(&self, kernel: &str) -> Vec<String> {
        match self.lower(kernel, &Candidate::baseline()) {
            Ok(l) => crate::lower::ptx_traits(&l.ptx)
                .into_iter()
                .map(String::from)
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}
