//! Replay: run a recorded launch with any candidate's code, check its outputs, time it.
//!
//! `replay` knows nothing about search: it takes candidates and returns outcomes. The search
//! calls it through [`Evaluator`], in two phases (lower, measure) on one shared evaluator, so
//! that compiling (CPU, many threads) overlaps measuring (GPU, one batch at a time), and so
//! that candidates whose PTX is identical to one already measured are never measured twice.

use r3_ir as ir;
use r3_ir::lower;
#[cfg(test)]
use r3_ir::toolchain;
use r3_kernel as kernel;
use r3_passes::candidate;
use r3_ptx as ptx;
use r3_store as store;

mod ahead;
mod assemble;
pub mod device;

pub mod determinism;
pub mod fresh;
pub mod gpu;
pub mod l2;
pub mod outputs;
pub mod screen;
pub mod selftest;
pub mod session;
mod shared;
pub mod stopping;
pub mod turn;
pub mod validate;
pub mod worker;

/// Spans of where a search's time goes (`R3_TIMELINE`), for the crates above replay.
pub use r3_process::timeline;

use crate::candidate::Candidate;
use crate::lower::{CompileFailure, Lowered};
use crate::store::outcome::Outcome;
use serde::{Deserialize, Serialize};

/// What a trial keeps of a candidate that did not compile.
pub fn compile_error(f: CompileFailure) -> Outcome {
    Outcome::CompileError { message: f.message }
}

/// nvcc's code as a lowered candidate, its PTX as nvcc wrote it; where there is none, a compile
/// error that says why (`code`: None where nothing offered it).
pub fn nvcc_lowered(
    candidate: &Candidate,
    code: Option<&Result<String, String>>,
) -> Result<Lowered, Outcome> {
    let failed = |why: &str| Outcome::CompileError {
        message: format!("nvcc: {why}"),
    };
    match code {
        Some(Ok(ptx)) => Ok(Lowered {
            candidate: candidate.clone(),
            ptx_hash: kernel::PtxHash::of_ptx(ptx),
            stats: ptx::stats::stats(ptx),
            ptx: ptx.clone(),
            passes_ms: 0.0,
            codegen_ms: 0.0,
            ir_instructions: 0,
        }),
        Some(Err(why)) => Err(failed(why)),
        None => Err(failed("its code is not offered to this search")),
    }
}

/// The GPU and driver an evaluator measures on (recorded with every trial).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub gpu: String,
    pub driver: String,
    /// Which device of that model (its UUID), where known: trials say which one measured them.
    pub id: Option<String>,
    /// What candidates are compiled for here; None for simulations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<crate::store::trials::Target>,
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
            target: None,
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

    /// How many of its [`renewed`](Evaluator::renewed) evaluators may be opened at the same
    /// time (their recordings loaded side by side on the GPU, their measurements taking turns):
    /// 1, one after the other, by default.
    fn contexts_at_once(&self) -> usize {
        1
    }

    /// Whether the search measures nvcc's code of the kernel (`Candidate::nvcc`) beside its
    /// own candidates. No by default.
    fn offers_nvcc(&self) -> bool {
        false
    }

    /// Compiles a candidate for a kernel (CPU only; safe to call from many threads).
    fn lower(&self, candidate: &Candidate) -> Result<Lowered, Outcome>;
    /// Runs, validates and times a batch of lowered candidates of one kernel on the GPU, one
    /// outcome per candidate in order. Called from one thread at a time, while `lower` may be
    /// running on others.
    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome>;

    /// The search's best ratio to the baseline so far, for the next `measure`: a candidate
    /// clearly slower than it may be timed no further (`stopping::beaten`; its stats say
    /// `raced`). None: every candidate is timed in full. Ignored by default.
    fn race_against(&self, _best_ratio: Option<f64>) {}

    /// The least speedup over -O3 a winner of the next `measure`s could still ship at (a
    /// deadline's, where a near-tie's confirmation no longer fits: a clear winner's): a long
    /// kernel's new best under it is not timed again beside the baseline. None: apply's own
    /// line (`winner::Policy::min_speedup`). Ignored by default.
    fn ships_from(&self, _speedup: Option<f64>) {}

    /// A confirmation's shipping line (a speedup over -O3) for the next `measure`s: a long
    /// kernel's candidate is timed until its speedup is known to lie on one side of it
    /// (`stopping::sided`), not to 1%. None: to full precision. Ignored by default.
    fn decide_at(&self, _speedup: Option<f64>) {}

    /// What the screen did (`screen`): its prefix, its drops and its agreement with the whole
    /// launch; None where the kernel was not screened. None by default.
    fn screen_summary(&self) -> Option<String> {
        None
    }

    /// The traits of the kernel's -O3 code (`ptx::cfg::TRAITS`) that recipes' preconditions name;
    /// by default read off the baseline's PTX. None known when it does not compile.
    fn traits(&self) -> Vec<String> {
        match self.lower(&Candidate::baseline()) {
            Ok(l) => crate::ptx::cfg::traits(&l.ptx)
                .into_iter()
                .map(String::from)
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}
