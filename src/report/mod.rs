//! Reports for people and scripts. Each submodule renders one view of the store.

pub mod kernels;
pub mod records;
pub mod replay;
