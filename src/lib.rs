//! r3: Record · Remix · Replay. The crates below this one are the stages of the data path
//! (ARCHITECTURE.md has the map); this crate parses and prints: the command line (`args`),
//! `doctor`'s report and `selftest`'s table. It names each stage once, so the CLI and the
//! integration tests say `r3::store`, `r3::remix`, … whichever crate holds it.

pub mod args;
pub mod doctor;
pub mod selftest;
pub mod shell;

pub use r3_apply as apply;
pub use r3_driver as driver;
pub use r3_evolve as evolve;
pub use r3_ir as ir;
pub use r3_ir::{egraph, lower, toolchain};
pub use r3_kernel as kernel;
pub use r3_passes as passes;
pub use r3_passes::candidate;
pub use r3_ptx as ptx;
pub use r3_record as record;
pub use r3_remix as remix;
pub use r3_replay as replay;
pub use r3_replay::device;
pub use r3_report as report;
pub use r3_store as store;
