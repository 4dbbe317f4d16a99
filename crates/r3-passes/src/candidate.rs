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
    /// Values folded into the code as constants before the pipeline runs: the code is right
    /// only for launches with those values, so it ships behind a guard that checks them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub specialize: Option<Specialize>,
    /// Which compiler made the code: r3's LLVM from the kernel's module (every field above
    /// applies), or nvcc from the kernel's source, as `nvcc -O3` builds it (the fields above
    /// are the baseline's and mean nothing).
    #[serde(default, skip_serializing_if = "Compiler::is_llvm")]
    pub compiler: Compiler,
}

/// The compiler of a candidate's code.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Compiler {
    /// r3's LLVM, from the kernel's captured module: the search's candidates.
    #[default]
    Llvm,
    /// NVIDIA's nvcc, from the kernel's translation unit, at `-O3` for the GPU measured: one
    /// more candidate, so that what ships is never slower than nvcc's own code.
    Nvcc,
}

impl Compiler {
    pub fn is_llvm(&self) -> bool {
        *self == Compiler::Llvm
    }
}

/// What a specialized candidate folds: scalar arguments and launch dimensions of one recorded
/// launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Specialize {
    /// Scalar parameters and their values, in parameter order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<FoldedArg>,
    /// `blockDim` (x, y, z) as a constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block: Option<[u32; 3]>,
    /// `gridDim` (x, y, z) as a constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<[u32; 3]>,
}

/// One scalar parameter folded to the value a launch passed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoldedArg {
    /// Parameter index (as in the kernel's signature and the launch's parameter list).
    pub index: u32,
    /// The parameter's bytes as the launch passed them (little-endian), in hex.
    pub hex: String,
}

impl FoldedArg {
    /// The parameter's bytes; None for text that is not whole bytes of hex.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        let h = self.hex.as_bytes();
        if !h.len().is_multiple_of(2) || !h.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
        Some(
            h.chunks(2)
                .map(|p| (digit(p[0]) << 4) | digit(p[1]))
                .collect(),
        )
    }

    pub fn of_bytes(index: u32, bytes: &[u8]) -> FoldedArg {
        FoldedArg {
            index,
            hex: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }
}

/// What a launch passes that a guard can check: its shape and each parameter's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchValues {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Vec<u8>>,
}

impl Specialize {
    /// Whether a launch passes exactly the folded values.
    pub fn holds_for(&self, l: &LaunchValues) -> bool {
        self.block.is_none_or(|b| b == l.block)
            && self.grid.is_none_or(|g| g == l.grid)
            && self.args.iter().all(|a| {
                let at = usize::try_from(a.index).ok();
                match (a.bytes(), at.and_then(|i| l.args.get(i))) {
                    (Some(want), Some(got)) => want == *got,
                    _ => false,
                }
            })
    }

    /// In words, for reports: `n=1024 block=256,1,1` given the parameters' names.
    pub fn words(&self, param_name: impl Fn(u32) -> String) -> String {
        let mut w: Vec<String> = self
            .args
            .iter()
            .map(|a| format!("{}=0x{}", param_name(a.index), a.hex))
            .collect();
        let dims = |d: [u32; 3]| format!("{},{},{}", d[0], d[1], d[2]);
        if let Some(b) = self.block {
            w.push(format!("block={}", dims(b)));
        }
        if let Some(g) = self.grid {
            w.push(format!("grid={}", dims(g)));
        }
        w.join(" ")
    }
}

impl Candidate {
    /// The knobs besides the pipeline in words ("llc -O2", "maxntid 256", "fast-math", …),
    /// the codegen level included only when it is not clang's -O3 unless `codegen` asks.
    pub fn knob_words(&self, codegen: bool) -> Vec<String> {
        let mut k = Vec::new();
        if self.is_nvcc() {
            return vec!["nvcc -O3".into()];
        }
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
        if let Some(s) = &self.specialize {
            k.push(format!("specialize {}", s.words(|i| format!("arg{i}"))));
        }
        k
    }

    /// Whether code built from this candidate is right, and launchable, for a launch: its
    /// block has no more threads than `.maxntid` and it passes every folded value. Code for
    /// which this is false must never run that launch; apply's guard checks the same at launch
    /// time.
    ///
    /// A candidate with another block size runs a launch with that block (and the grid that
    /// keeps the number of threads, as replay runs it), only a launch of one-dimensional blocks.
    pub fn admits(&self, l: &LaunchValues) -> bool {
        let threads = match self.block_x {
            Some(_) if l.block[1] != 1 || l.block[2] != 1 => return false,
            Some(bx) => u64::from(bx),
            None => u64::from(l.block[0]) * u64::from(l.block[1]) * u64::from(l.block[2]),
        };
        self.max_threads.is_none_or(|n| threads <= u64::from(n))
            && self.specialize.as_ref().is_none_or(|s| s.holds_for(l))
    }

    /// Whether the code needs a guard at launch: launch bounds, folded values or another
    /// block size.
    pub fn guarded(&self) -> bool {
        self.max_threads.is_some() || self.specialize.is_some() || self.block_x.is_some()
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
            specialize: None,
            compiler: Compiler::Llvm,
        }
    }

    /// The kernel as `nvcc -O3` builds it from its source.
    pub fn nvcc() -> Candidate {
        Candidate {
            compiler: Compiler::Nvcc,
            ..Candidate::baseline()
        }
    }

    /// Whether nvcc made the code (no pipeline, no knobs).
    pub fn is_nvcc(&self) -> bool {
        self.compiler == Compiler::Nvcc
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
    fn a_guard_admits_a_launch_by_its_threads_its_values_and_for_a_new_block_its_shape() {
        let launch = |block: [u32; 3], n: i32| LaunchValues {
            grid: [8, 1, 1],
            block,
            args: vec![vec![0; 8], n.to_le_bytes().to_vec()],
        };
        let bounds = Candidate {
            max_threads: Some(256),
            ..Candidate::baseline()
        };
        assert!(bounds.admits(&launch([256, 1, 1], 1)));
        assert!(!bounds.admits(&launch([32, 16, 1], 1)), "512 threads");
        let spec = Candidate {
            specialize: Some(Specialize {
                args: vec![FoldedArg::of_bytes(1, &7i32.to_le_bytes())],
                ..Default::default()
            }),
            ..bounds.clone()
        };
        assert!(spec.admits(&launch([128, 1, 1], 7)) && !spec.admits(&launch([128, 1, 1], 8)));
        // Relaunched with 128-thread blocks: any 1-D block, bounds checked on the new one.
        let block = Candidate {
            block_x: Some(128),
            max_threads: Some(128),
            ..Candidate::baseline()
        };
        assert!(block.admits(&launch([1024, 1, 1], 0)));
        assert!(!block.admits(&launch([16, 16, 1], 0)));
        assert!(block.guarded() && spec.guarded() && !Candidate::baseline().guarded());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(serde_json::from_str::<Candidate>(r#"{"pipeline": "x", "pipline": "y"}"#).is_err());
    }
}
