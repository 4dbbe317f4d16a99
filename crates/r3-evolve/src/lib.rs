//! `r3 evolve`: source rewrites on top of the compiler search. An outer loop asks a proposer
//! (a model through an OpenAI-compatible endpoint, or r3's own rules) for rewrites of a
//! kernel's code (the `__global__` function and the device functions only it calls), checks
//! each (`guard`), splices it into a private copy of the translation unit (`source`),
//! compiles that with the kernel's recorded command (`compile`), stores the kernel as a
//! variant, and has a `Judge` tune and validate it against the parent's recorded launches.
//! Variants that pass enter a MAP-Elites `archive`, parents of the next attempts.
//!
//! r3 never edits the user's source: the result is a unified diff in the store and the report.
//! Every step of every attempt is an event in `evolve/<kernel>/attempts.jsonl`; a killed run
//! resumes from it (a proposal already answered is not asked for again).
//!
//! Modules by concern: `propose` (what a proposer is asked and gives; `rules` and `llm` are
//! the proposers), `rewrite` (a proposal made into variant kernels: `guard`, `source`,
//! `compile`, `params`), `judge` (the `Judge` trait and the judges), `archive` (MAP-Elites),
//! `run` (the loop on one kernel), `each` (the loop over several) and `arm` (the loop as the
//! deadline's rewrite arm, `remix::rewrites`). The attempt log's format
//! is the store's (`r3_store::attempts`).

use r3_driver as driver;
use r3_ir as ir;
use r3_ir::lower;
use r3_kernel as kernel;
use r3_passes as passes;
use r3_passes::candidate;
use r3_ptx as ptx;
use r3_remix as remix;
use r3_replay as replay;
use r3_store as store;

pub mod alias;
pub mod archive;
pub mod arm;
pub mod compile;
pub mod each;
pub mod error;
pub mod grouping;
pub mod guard;
pub mod judge;
pub mod kernel_text;
pub mod llm;
pub mod params;
pub mod propose;
pub mod rewrite;
pub mod rules;
pub mod run;
pub mod source;
pub mod staging;
pub mod tiling;
pub mod vector;

pub use error::EvolveError;
pub use judge::Judge;
pub use propose::{Example, LaunchInfo, Proposal, ProposeError, Proposer, Request, RuleProposer};
pub use run::{evolve, Options, Summary};
