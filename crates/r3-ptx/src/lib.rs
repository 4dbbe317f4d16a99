//! PTX text, read without LLVM: the one place r3 parses PTX. `appends` finds the lists a kernel
//! appends to with atomics (their order is the threads'). `lex` gives tokens exact to the
//! byte (the splice renames and moves by them), `module` the module's items (its one model:
//! what the splice moves, where `stats` and `cfg` find functions, their bodies and entries),
//! `stats` the instructions, their count and mix (reports, the dry run, the evolve archive),
//! `cfg` the control flow (the traits recipes'
//! preconditions name), `grid` code that runs a prefix of its grid as the whole grid (replay's
//! screen). `ptxas -v` output is not PTX and stays with lowering.

pub mod appends;
pub mod cfg;
pub mod grid;
pub mod lex;
pub mod module;
pub mod stats;
