//! Passes as data, below everything that runs them: `catalog` loads `passes/catalog.toml`
//! (the passes and parameters r3 may use, with their value grids and exclusions) and
//! `passes/presets.toml` (clang's O1/O2/O3 pipelines as LLVM 22 expands them for NVPTX);
//! `pipeline` parses and renders pipeline texts and edits them keeping their nesting; `diff`
//! expands presets, diffs a pipeline against O3 and lists the ablations of a pipeline (it with
//! one pass removed, each). No LLVM here: what LLVM makes of a pipeline is `ir`'s and `lower`'s.

use r3_kernel as kernel;

pub mod candidate;

pub mod catalog;
pub mod diff;
pub mod pipeline;
