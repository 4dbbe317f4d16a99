//! What one candidate is: everything the search may change about how a kernel is compiled and
//! launched. The search (`remix`) produces candidates, `lower` and `replay` apply them,
//! `report` shows them. A candidate is plain data: it serializes to the trials database and to
//! the per-kernel JSON the apply step reads.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A candidate configuration for one kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Candidate {
    /// IR pass pipeline in `opt -passes=` syntax (may include r3's own passes such as
    /// `r3-egraph`); the baseline is `default<O3>`.
    pub pipeline: String,
    /// NVPTX backend optimization level, 0..=3.
    #[serde(default = "default_codegen_opt")]
    pub codegen_opt: u8,
    /// `.maxntid`: the most threads per block the kernel will be launched with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<u32>,
    /// `.minnctapersm`: blocks per SM the compiler should make room for (needs `max_threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_blocks_per_sm: Option<u32>,
    /// Allow reassociation and contraction (fast-math); only with tolerance validation.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_math: bool,
    /// Block size (x) for kernels declared block-size agnostic; the grid is recomputed to keep
    /// the total number of threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_x: Option<u32>,
    /// LLVM command-line options (`unroll-max-count` → `4`) from the catalog's
    /// `[[pass.options]]`: process-wide in LLVM, so lowered in a process of its own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub llvm_options: BTreeMap<String, String>,
}

impl Candidate {
    /// The knobs besides the pipeline in words ("llc -O2", "maxntid 256", "fast-math", …),
    /// the codegen level included only when it is not clang's -O3 unless `codegen` asks.
    pub fn knob_words(&self, codegen: bool) -> Vec<String> {
        let mut k = Vec::new();
        if codegen || self.codegen_opt != 3 {
            k.push(format!("llc -O{}", self.codegen_opt));
        }
        if let Some(n) = self.max_threads {
            k.push(format!("maxntid {n}"));
        }
        if let Some(n) = self.min_blocks_per_sm {
            k.push(format!("minctasm {n}"));
        }
        if self.fast_math {
            k.push("fast-math".into());
        }
        if let Some(n) = self.block_x {
            k.push(format!("block {n}"));
        }
        k.extend(llvm_option_args(&self.llvm_options));
        k
    }
}

/// LLVM options as command-line arguments, in name order (`-unroll-max-count=4`).
pub fn llvm_option_args(options: &BTreeMap<String, String>) -> impl Iterator<Item = String> + '_ {
    options.iter().map(|(k, v)| format!("-{k}={v}"))
}

fn default_codegen_opt() -> u8 {
    3
}

impl Candidate {
    /// The kernel as `clang -O3` builds it: the reference every candidate is measured against.
    pub fn baseline() -> Candidate {
        Candidate::with_pipeline("default<O3>")
    }

    pub fn with_pipeline(pipeline: &str) -> Candidate {
        Candidate {
            pipeline: pipeline.to_owned(),
            codegen_opt: 3,
            max_threads: None,
            min_blocks_per_sm: None,
            fast_math: false,
            block_x: None,
            llvm_options: BTreeMap::new(),
        }
    }

    /// A stable short key (for caches and file names).
    pub fn key(&self) -> String {
        let json = serde_json::to_string(self).expect("candidates serialize");
        crate::kernel::short_hash(json.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_defaults() {
        let c: Candidate = serde_json::from_str(r#"{"pipeline": "default<O2>"}"#).unwrap();
        assert_eq!(c, Candidate::with_pipeline("default<O2>"));
        let full = Candidate {
            max_threads: Some(256),
            min_blocks_per_sm: Some(2),
            fast_math: true,
            ..Candidate::baseline()
        };
        let back: Candidate = serde_json::from_str(&serde_json::to_string(&full).unwrap()).unwrap();
        assert_eq!(back, full);
        assert_ne!(full.key(), Candidate::baseline().key());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(serde_json::from_str::<Candidate>(r#"{"pipeline": "x", "pipline": "y"}"#).is_err());
    }
}
