//! Reports for people and scripts. Each submodule renders one view of the store.
//!
//! `r3 report` (pass-order reports) is `tuning` (the data, also the JSON document; pipeline
//! expansion, diffs and ablations are `crate::passes::diff`), `code` (code statistics recomputed
//! from the stored module), `render` (text, Markdown, HTML) and `svg` (the convergence plots).

pub mod code;
pub mod export;
pub mod kernels;
pub mod records;
pub mod render;
pub mod replay;
pub mod rewrites;
pub mod status;
pub mod svg;
pub mod tuning;
