//! r3: Record · Remix · Replay. See ARCHITECTURE.md for the map of the crate.

pub mod apply;
pub mod candidate;
pub mod doctor;
pub mod driver;
pub mod egraph;
pub mod evolve;
pub mod gpu;
pub mod ir;
pub mod lower;
pub mod passes;
pub mod record;
pub mod remix;
pub mod replay;
pub mod report;
pub mod selftest;
pub mod store;
pub mod toolchain;
