//! Remix: the search over how a kernel is compiled and launched.
//!
//! The pass catalog and pipeline texts it edits are `crate::passes`; `grid` (passes/grid.toml) lists the pipeline variants of the finite space; `space`
//! turns them and the codegen/launch knobs into candidates (sampling, mutation,
//! crossover, features); `strategy` proposes candidates behind one ask/tell interface; `tune`
//! runs the loop against any [`crate::replay::Evaluator`] and records every trial in the store;
//! `sim` is an evaluator backed by a landscape table, for testing and comparing strategies
//! without a GPU; `transfer` gathers what earlier searches in the store (other kernels, other
//! GPUs) say, for the `bo` strategy to start from; `recipes` (passes/recipes.toml) is r3's shipped
//! prior, what every search starts from when the store knows nothing yet; `confirm` re-measures
//! a search's winner and runs it on every other recorded launch before the store believes it;
//! `nvcc` makes nvcc's build of a kernel, which every search on a GPU measures beside -O3;
//! `rewrites` prices source rewrites as the deadline's other arm, and names the `Rewriter`
//! that r3-evolve implements.

use r3_ir::lower;
use r3_ir::toolchain;
use r3_kernel as kernel;
use r3_passes as passes;
use r3_passes::candidate;
use r3_ptx as ptx;
use r3_replay as replay;
use r3_store as store;

pub mod confirm;
pub mod deadline;
pub mod dry_run;
pub mod fleet;
pub mod grid;
pub mod nvcc;
pub mod program;
pub mod recipes;
pub mod rewrites;
pub mod session;
pub mod sim;
pub mod space;
pub mod strategy;
#[cfg(test)]
mod testing;
pub mod transfer;
pub mod tune;
