//! Integration tests: one target so that LLVM is linked once (see ARCHITECTURE.md).

mod apply;
mod build_faults;
mod build_tools;
mod catalog;
mod census;
mod cli;
mod cli_values;
mod cmake;
mod corpus;
mod dispatch;
mod driver;
mod egraph;
mod evolve;
mod filetests;
mod identity;
mod recipes;
mod record_runtime;
mod redteam;
mod replay;
mod report;
mod rules_cpu;
mod safety;
mod support;
mod templates;
mod tune;
mod unit_statics;
