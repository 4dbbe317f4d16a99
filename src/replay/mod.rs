//! Replay: run a recorded launch with any candidate's code, check its outputs, time it.
//!
//! `replay` knows nothing about search: it takes candidates and returns outcomes. The search
//! calls it through [`Evaluator`], in two phases so that compiling (CPU, many threads) overlaps
//! measuring (GPU, one at a time), and so that candidates whose PTX is identical to one already
//! measured are never measured twice.

use crate::candidate::Candidate;
use crate::lower::PtxStats;
use serde::{Deserialize, Serialize};

/// A candidate compiled for one kernel: what the GPU will run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Lowered {
    pub candidate: Candidate,
    /// Hash of the PTX text: equal hashes mean equal code, measured once.
    pub ptx_hash: String,
    pub ptx: String,
    pub stats: PtxStats,
    /// Wall time of the IR passes and of code generation.
    pub passes_ms: f64,
    pub codegen_ms: f64,
}

/// Timing of one candidate, from CUDA events around each launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeStats {
    pub median_us: f64,
    pub min_us: f64,
    /// Relative spread: (p75 - p25) / median.
    pub spread: f64,
    pub samples: u32,
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

impl Outcome {
    /// Candidate time over baseline time (lower is better), for valid outcomes.
    pub fn ratio(&self) -> Option<f64> {
        match self {
            Outcome::Valid { time, baseline } => Some(time.median_us / baseline.median_us),
            _ => None,
        }
    }
}

/// The interface the search uses. Implemented by the GPU replayer and by simulations.
pub trait Evaluator {
    /// Compiles a candidate for a kernel (CPU only; safe to call from many threads).
    fn lower(&self, kernel: &str, candidate: &Candidate) -> Result<Lowered, Outcome>;
    /// Runs, validates and times a batch of lowered candidates of one kernel on the GPU.
    fn measure(&mut self, kernel: &str, batch: &[Lowered]) -> Vec<Outcome>;
}
