//! What the unit tests' made-up evaluators share: a device, code named by its pipeline, and
//! exact timings.

use crate::candidate::Candidate;
use crate::lower::Lowered;
use crate::store::outcome::TimeStats;

/// The one device the tests' evaluators measure on.
pub fn device() -> crate::replay::Device {
    crate::replay::Device {
        gpu: "GPU (sm_90)".into(),
        driver: "CUDA 13.0".into(),
        id: None,
        target: None,
    }
}

/// `c` lowered to no code, its PTX hash its pipeline's text: equal pipelines are equal code.
pub fn lowered_by_pipeline(c: &Candidate) -> Lowered {
    Lowered {
        candidate: c.clone(),
        ptx: String::new(),
        ptx_hash: c.pipeline.as_str().into(),
        stats: Default::default(),
        passes_ms: 0.0,
        codegen_ms: 0.0,
        ir_instructions: 0,
    }
}

/// `samples` runs of exactly `us`.
pub fn exact(us: f64, samples: u32) -> TimeStats {
    TimeStats {
        median_us: us,
        min_us: us,
        spread: 0.0,
        samples,
        raced: false,
    }
}
