//! Integration tests: one target so that LLVM is linked once (see ARCHITECTURE.md).

mod cli;
mod driver;
mod egraph;
mod support;
