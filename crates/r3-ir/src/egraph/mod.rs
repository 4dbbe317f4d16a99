//! An IR-level e-graph rewriter (egg) over LLVM's pure scalar arithmetic.
//!
//! - `lang`: the language (types and flags explicit in the nodes) and the constant-folding
//!   analysis.
//! - `rules`: every rewrite rule, with why it is sound.
//! - `cost`: the sm_90 cost model used by extraction.
//! - `convert`: IR → e-graph → IR, one basic block at a time; memory operations, calls, phis and
//!   control flow are an untouched skeleton.
//!
//! Invariants: the rewriter never moves, adds or removes a memory operation, call or
//! terminator; every function it changes passes the LLVM verifier (checked, or an error naming
//! the function); each block's e-graph is bounded (iterations, nodes, time); a block is only
//! replaced when the cost model says it got cheaper; what is rewritten depends on the IR and
//! the iteration and node limits only, never on the clock (a block that reaches the time limit,
//! a safety net, is left as it is), so a build lowers a winner to the PTX the search measured.
//!
//! Used as the pipeline element `r3-egraph` / `r3-egraph<iters=N;nodes=N;time-ms=N>` (see
//! `ir::run_pipeline`), and by `r3 egraph`.

pub mod convert;
pub mod cost;
pub mod lang;
pub mod rules;

use inkwell::module::Module;
use inkwell::values::{AsValueRef, FunctionValue};
use llvm_sys::analysis::{LLVMVerifierFailureAction, LLVMVerifyFunction, LLVMVerifyModule};
use llvm_sys::core::*;
use llvm_sys::target::LLVMGetModuleDataLayout;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Bounds of the rewriter, per basic block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgraphOptions {
    /// Equality-saturation iterations.
    pub iters: usize,
    /// E-graph nodes.
    pub nodes: usize,
    /// Wall time per block, milliseconds: a compile-time safety net (a block that reaches it is
    /// left as it is), not a bound that shapes results.
    pub time_ms: u64,
}

impl Default for EgraphOptions {
    fn default() -> Self {
        EgraphOptions {
            iters: 8,
            nodes: 20_000,
            time_ms: 2000,
        }
    }
}

impl EgraphOptions {
    /// Parses the text between the brackets of `r3-egraph<…>`: `key=value` pairs separated by
    /// `;` (keys: iters, nodes, time-ms). Empty text gives the defaults.
    pub fn parse(text: &str) -> Result<EgraphOptions, EgraphError> {
        let mut o = EgraphOptions::default();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || EgraphError::Options {
                text: text.to_owned(),
                msg: format!("'{part}': expected iters=N, nodes=N or time-ms=N"),
            };
            let (k, v) = part.split_once('=').ok_or_else(bad)?;
            let n: u64 = v.trim().parse().map_err(|_| bad())?;
            if n == 0 {
                return Err(bad());
            }
            match k.trim() {
                "iters" => o.iters = n as usize,
                "nodes" => o.nodes = n as usize,
                "time-ms" => o.time_ms = n,
                _ => return Err(bad()),
            }
        }
        Ok(o)
    }

    fn limits(&self) -> convert::Limits {
        convert::Limits {
            iters: self.iters,
            nodes: self.nodes,
            time: Duration::from_millis(self.time_ms),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EgraphError {
    #[error("r3-egraph options '{text}': {msg}; fix: write them as iters=N;nodes=N;time-ms=N (any of the three), e.g. r3-egraph<iters=4;time-ms=200>")]
    Options { text: String, msg: String },
    #[error("r3-egraph: function {function} fails the LLVM verifier after rewriting: {msg}")]
    Verify { function: String, msg: String },
    #[error("r3-egraph: module has no data layout; fix: give IR that clang wrote for NVPTX (it always sets `target datalayout`)")]
    NoDataLayout,
}

/// What the rewriter did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EgraphStats {
    pub functions: usize,
    pub functions_changed: usize,
    pub blocks: usize,
    pub blocks_rewritten: usize,
    /// Blocks skipped because building or extracting their e-graph failed (no change made).
    pub blocks_failed: usize,
    /// Pure instructions seen / in the rewritten blocks before / emitted in their place.
    pub pure_instructions: usize,
    pub rewritten_before: usize,
    pub rewritten_after: usize,
    /// Model cost of the rewritten blocks' pure code, before and after.
    pub cost_before: f64,
    pub cost_after: f64,
    /// Largest e-graph (nodes) and total saturation iterations.
    pub max_nodes: usize,
    pub iterations: usize,
    /// Why saturation stopped, per block.
    pub stop_reasons: BTreeMap<String, usize>,
    /// Times each rule fired (matches applied), summed over blocks.
    pub rules: BTreeMap<String, usize>,
    pub time_ms: f64,
}

impl EgraphStats {
    fn add(&mut self, o: &EgraphStats) {
        self.functions += o.functions;
        self.functions_changed += o.functions_changed;
        self.blocks += o.blocks;
        self.blocks_rewritten += o.blocks_rewritten;
        self.blocks_failed += o.blocks_failed;
        self.pure_instructions += o.pure_instructions;
        self.rewritten_before += o.rewritten_before;
        self.rewritten_after += o.rewritten_after;
        self.cost_before += o.cost_before;
        self.cost_after += o.cost_after;
        self.max_nodes = self.max_nodes.max(o.max_nodes);
        self.iterations += o.iterations;
        for (k, v) in &o.stop_reasons {
            *self.stop_reasons.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.rules {
            *self.rules.entry(k.clone()).or_default() += v;
        }
        self.time_ms += o.time_ms;
    }

    /// A short human-readable summary.
    pub fn render(&self) -> String {
        let mut s = format!(
            "r3-egraph: {} of {} blocks rewritten in {} of {} functions; pure instructions {} -> {} \
             in rewritten blocks (cost {:.1} -> {:.1}); max {} nodes, {} iterations, {:.1} ms\n",
            self.blocks_rewritten,
            self.blocks,
            self.functions_changed,
            self.functions,
            self.rewritten_before,
            self.rewritten_after,
            self.cost_before,
            self.cost_after,
            self.max_nodes,
            self.iterations,
            self.time_ms
        );
        if self.blocks_failed > 0 {
            s += &format!(
                "  {} blocks skipped after an internal failure\n",
                self.blocks_failed
            );
        }
        let left: Vec<String> = self
            .stop_reasons
            .iter()
            .filter(|(k, _)| LEFT_AS_THEY_WERE.contains(&k.as_str()))
            .map(|(k, v)| format!(" {k}={v}"))
            .collect();
        if !left.is_empty() {
            s += &format!("  blocks a limit left as they were:{}\n", left.concat());
        }
        let mut rules: Vec<_> = self.rules.iter().filter(|(_, n)| **n > 0).collect();
        rules.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        if !rules.is_empty() {
            s += "  rules fired:";
            for (k, v) in rules {
                s += &format!(" {k}={v}");
            }
            s += "\n";
        }
        s
    }
}

/// Stop reasons under which a block is left as it was, whatever saturation found.
const LEFT_AS_THEY_WERE: [&str; 4] = [
    "BlockTooLarge",
    "ExtractionTimeLimit",
    "ExtractionWorkLimit",
    "TimeLimit",
];

/// Rewrites every function with a body.
pub fn run_on_module(module: &Module, opts: &EgraphOptions) -> Result<EgraphStats, EgraphError> {
    let mut stats = EgraphStats::default();
    for f in module.get_functions() {
        if f.count_basic_blocks() == 0 {
            continue;
        }
        stats.add(&run_on_function(module, f, opts)?);
    }
    Ok(stats)
}

/// Rewrites one function of `module`, block by block.
pub fn run_on_function(
    module: &Module,
    f: FunctionValue,
    opts: &EgraphOptions,
) -> Result<EgraphStats, EgraphError> {
    let start = Instant::now();
    let mut stats = EgraphStats {
        functions: 1,
        ..Default::default()
    };
    let name = f.get_name().to_string_lossy().into_owned();
    // SAFETY: module and function are live for the call; all LLVM objects touched belong to
    // them, and each block is rewritten to completion before the next is read.
    unsafe {
        let td = LLVMGetModuleDataLayout(module.as_mut_ptr());
        if td.is_null() {
            return Err(EgraphError::NoDataLayout);
        }
        let limits = opts.limits();
        for bb in f.get_basic_block_iter() {
            let block = bb.as_mut_ptr();
            stats.blocks += 1;
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                convert::rewrite_block(block, td, limits)
            }));
            let o = match outcome {
                Ok(o) => o,
                Err(_) => {
                    stats.blocks_failed += 1;
                    continue;
                }
            };
            stats.pure_instructions += o.pure;
            stats.max_nodes = stats.max_nodes.max(o.nodes);
            stats.iterations += o.iterations;
            if let Some(r) = &o.stop {
                let key = r.split(['(', ' ']).next().unwrap_or(r).to_owned();
                *stats.stop_reasons.entry(key).or_default() += 1;
            }
            for (k, v) in &o.applied {
                *stats.rules.entry(k.clone()).or_default() += v;
            }
            if o.rewritten {
                stats.blocks_rewritten += 1;
                stats.rewritten_before += o.pure;
                stats.rewritten_after += o.emitted;
                stats.cost_before += o.cost_before;
                stats.cost_after += o.cost_after;
            }
        }
        if stats.blocks_rewritten > 0 {
            stats.functions_changed = 1;
            let broken = LLVMVerifyFunction(
                f.as_value_ref(),
                LLVMVerifierFailureAction::LLVMReturnStatusAction,
            ) != 0;
            if broken {
                let mut msg = std::ptr::null_mut();
                LLVMVerifyModule(
                    module.as_mut_ptr(),
                    LLVMVerifierFailureAction::LLVMReturnStatusAction,
                    &mut msg,
                );
                let text = if msg.is_null() {
                    String::new()
                } else {
                    let t = std::ffi::CStr::from_ptr(msg).to_string_lossy().into_owned();
                    LLVMDisposeMessage(msg);
                    t
                };
                return Err(EgraphError::Verify {
                    function: name,
                    msg: text.trim().to_owned(),
                });
            }
        }
    }
    stats.time_ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(stats)
}

/// One function's text before and after, for functions the rewriter changed.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionChange {
    pub name: String,
    pub instructions_before: usize,
    pub instructions_after: usize,
    pub before: String,
    pub after: String,
    pub stats: EgraphStats,
}

/// The module `r3 egraph` shows a rewrite of.
pub enum Input<'a> {
    /// Device IR as text or bitcode.
    File(&'a std::path::Path),
    /// A stored kernel's bitcode, and its name.
    Bitcode(&'a [u8], &'a str),
}

/// Why `r3 egraph` could not show a rewrite.
#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    #[error(transparent)]
    Ir(#[from] crate::IrError),
    #[error(transparent)]
    Lower(#[from] crate::lower::LowerError),
    #[error(transparent)]
    Egraph(#[from] EgraphError),
}

/// `r3 egraph`: the module after `pipeline_before`, rewritten with `options` (the element's
/// own syntax) and verified; what changed, function by function. `what` names the input in
/// errors.
pub fn show(
    input: Input,
    pipeline_before: &str,
    options: &str,
    what: &str,
) -> Result<(EgraphStats, Vec<FunctionChange>), ShowError> {
    let ctx = inkwell::context::Context::create();
    let module = match input {
        Input::File(path) => {
            let module = crate::load_file(&ctx, path)?;
            crate::check_device_ir(&module, what)?;
            module
        }
        Input::Bitcode(bytes, name) => crate::load_bytes(&ctx, bytes, name)?,
    };
    let opts = EgraphOptions::parse(options)?;
    let tm = crate::lower::target_machine(&crate::lower::Codegen::default())?;
    crate::run_pipeline(&module, pipeline_before, &tm)?;
    let (stats, changes) = run_with_report(&module, &opts)?;
    crate::verify(&module, &format!("{what} after r3-egraph"))?;
    Ok((stats, changes))
}

/// Like `run_on_module`, also returning the before/after text of each changed function.
pub fn run_with_report(
    module: &Module,
    opts: &EgraphOptions,
) -> Result<(EgraphStats, Vec<FunctionChange>), EgraphError> {
    let mut stats = EgraphStats::default();
    let mut changes = Vec::new();
    for f in module.get_functions() {
        if f.count_basic_blocks() == 0 {
            continue;
        }
        // SAFETY: printing a live function.
        let before = unsafe { convert::print_value(f.as_value_ref()) };
        let instructions_before = instruction_count(f);
        let s = run_on_function(module, f, opts)?;
        if s.functions_changed > 0 {
            changes.push(FunctionChange {
                name: f.get_name().to_string_lossy().into_owned(),
                instructions_before,
                instructions_after: instruction_count(f),
                before,
                // SAFETY: as above.
                after: unsafe { convert::print_value(f.as_value_ref()) },
                stats: s.clone(),
            });
        }
        stats.add(&s);
    }
    Ok((stats, changes))
}

/// Instructions in a function.
pub fn instruction_count(f: FunctionValue) -> usize {
    f.get_basic_block_iter()
        .map(|b| b.get_instructions().count())
        .sum()
}

// ---- pipelines ---------------------------------------------------------------------------

/// One element of a pipeline text split at `r3-egraph`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PipelineStep {
    /// LLVM pipeline text (for the new pass manager).
    Llvm(String),
    Egraph(EgraphOptions),
}

/// Splits a pipeline at its top-level `r3-egraph` / `r3-egraph<…>` elements. Elements nested in
/// an adaptor (`function(…)`) are left to LLVM, which rejects them as unknown passes.
pub fn split_pipeline(text: &str) -> Result<Vec<PipelineStep>, EgraphError> {
    let mut elements = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                elements.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    elements.push(&text[start..]);
    let mut steps = Vec::new();
    let mut llvm: Vec<&str> = Vec::new();
    for e in elements {
        let t = e.trim();
        let opts = if t == "r3-egraph" {
            Some(EgraphOptions::default())
        } else if let Some(inner) = t
            .strip_prefix("r3-egraph<")
            .and_then(|r| r.strip_suffix('>'))
        {
            Some(EgraphOptions::parse(inner)?)
        } else {
            None
        };
        match opts {
            Some(o) => {
                if !llvm.is_empty() {
                    steps.push(PipelineStep::Llvm(llvm.join(",")));
                    llvm.clear();
                }
                steps.push(PipelineStep::Egraph(o));
            }
            None if t.is_empty() => {}
            None => llvm.push(t),
        }
    }
    if !llvm.is_empty() {
        steps.push(PipelineStep::Llvm(llvm.join(",")));
    }
    Ok(steps)
}

/// The e-graph as a search dimension: what a search may append to a pipeline. The first
/// choice is "off"; each other choice runs the rewriter with a cleanup (early CSE, which merges
/// values recomputed in later blocks; see bench/RESULTS.md for why not instcombine).
pub const SEARCH_CHOICES: [&str; 3] = [
    "",
    "r3-egraph,function(early-cse<>)",
    "r3-egraph<iters=16;nodes=50000>,function(early-cse<>)",
];

/// `pipeline` with the e-graph choice `choice` (an index into `SEARCH_CHOICES`) appended.
pub fn with_choice(pipeline: &str, choice: usize) -> String {
    match SEARCH_CHOICES.get(choice).copied().unwrap_or("") {
        "" => pipeline.to_owned(),
        c if pipeline.trim().is_empty() => c.to_owned(),
        c => format!("{pipeline},{c}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse() {
        assert_eq!(EgraphOptions::parse("").unwrap(), EgraphOptions::default());
        let o = EgraphOptions::parse("iters=3; nodes=100;time-ms=5").unwrap();
        assert_eq!((o.iters, o.nodes, o.time_ms), (3, 100, 5));
        assert!(EgraphOptions::parse("iters=x").is_err());
        assert!(EgraphOptions::parse("speed=3").is_err());
        assert!(EgraphOptions::parse("iters=0").is_err());
    }

    #[test]
    fn pipelines_split_at_top_level_egraph() {
        let s = split_pipeline("default<O3>,r3-egraph<iters=2>,function(instcombine)").unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], PipelineStep::Llvm("default<O3>".into()));
        assert!(matches!(&s[1], PipelineStep::Egraph(o) if o.iters == 2));
        assert_eq!(s[2], PipelineStep::Llvm("function(instcombine)".into()));
        assert_eq!(
            split_pipeline("default<O3>").unwrap(),
            vec![PipelineStep::Llvm("default<O3>".into())]
        );
        assert_eq!(split_pipeline("r3-egraph").unwrap().len(), 1);
        assert!(split_pipeline("r3-egraph<bogus>").is_err());
        assert_eq!(with_choice("default<O3>", 0), "default<O3>");
        assert!(with_choice("default<O3>", 1).starts_with("default<O3>,r3-egraph"));
    }
}
