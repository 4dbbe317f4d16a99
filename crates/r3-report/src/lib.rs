//! Reports for people and scripts. Each submodule renders one view of the store.
//!
//! `r3 report` (pass-order reports) is `tuning` (the data, also the JSON document; pipeline
//! expansion, diffs and ablations are `crate::passes::diff`), `code` (code statistics recomputed
//! from the stored module), `render` (text, Markdown, HTML) and `svg` (the convergence plots);
//! `shipped` is what apply ships of a search, which every view leads with, and `speed` the one
//! way they all write a speedup.

use r3_apply as apply;
use r3_ir as ir;
use r3_ir::lower;
use r3_ir::toolchain;
use r3_kernel as kernel;
use r3_passes as passes;
use r3_passes::candidate;
use r3_ptx as ptx;
use r3_store as store;

pub mod code;
pub mod export;
pub mod gc;
pub mod kernels;
pub mod programs;
pub mod render;
pub mod replay;
pub mod rewrites;
pub mod shipped;
pub use r3_store::speed;
pub mod status;
pub mod svg;
pub mod tuning;
