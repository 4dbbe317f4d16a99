//! Integration tests: one target so that LLVM is linked once (see ARCHITECTURE.md).

mod catalog;
mod cli;
mod driver;
mod support;
mod tune;
