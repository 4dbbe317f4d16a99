//! Device LLVM IR: loading, verifying and running pass pipelines (LLVM's new pass manager).

use r3_kernel as kernel;
use r3_passes as passes;
use r3_passes::candidate;
use r3_ptx as ptx;

pub mod egraph;
pub mod lower;
pub mod nvcc;
pub mod shape;
pub mod toolchain;

use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::TargetMachine;
use std::path::{Path, PathBuf};

pub const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";

#[derive(Debug, thiserror::Error)]
pub enum IrError {
    #[error("{path}: cannot read: {msg}; fix: check the path and its permissions")]
    Read { path: PathBuf, msg: String },
    #[error("{what}: not valid LLVM IR or bitcode: {msg}; fix: give a .ll or .bc that LLVM 22 reads, e.g. from `clang++ -x cuda --cuda-device-only -emit-llvm -S file.cu`")]
    Parse { what: String, msg: String },
    #[error("{what}: {why}; fix: give device IR, e.g. from `clang++ -x cuda --cuda-device-only -emit-llvm -S file.cu`, or a kernel `r3 kernels` lists")]
    NotDevice { what: String, why: String },
    #[error("{what}: fails the LLVM verifier: {msg}; fix: the IR must verify before passes run on it (`opt -passes=verify` shows where)")]
    Verify { what: String, msg: String },
    /// The message shows a long pipeline as its edits of -O3 (`passes::diff::brief`): a
    /// candidate's whole text is 5 KB.
    #[error("{}; fix: `r3 passes` lists the passes and presets it knows", rejected(.pipeline, .msg))]
    Pipeline { pipeline: String, msg: String },
    #[error(transparent)]
    Egraph(#[from] crate::egraph::EgraphError),
}

/// Edits of -O3 a message shows of a long pipeline, at most.
const BRIEF_EDITS: usize = 6;

/// "pipeline 'text' rejected by LLVM: msg" for a short pipeline; for a long one, LLVM's
/// message first, then the pipeline as its edits of -O3.
fn rejected(pipeline: &str, msg: &str) -> String {
    let shown = passes::diff::brief(pipeline, BRIEF_EDITS);
    if shown.starts_with('\'') {
        format!("pipeline {shown} rejected by LLVM: {msg}")
    } else {
        format!("pipeline rejected by LLVM: {msg}; the pipeline: {shown}")
    }
}

/// Parses textual IR or bitcode from a file.
pub fn load_file<'c>(ctx: &'c Context, path: &Path) -> Result<Module<'c>, IrError> {
    let buf = MemoryBuffer::create_from_file(path).map_err(|e| IrError::Read {
        path: path.to_owned(),
        msg: e.to_string(),
    })?;
    parse(ctx, buf, &path.display().to_string())
}

/// Parses textual IR or bitcode held in memory; `name` appears in errors.
pub fn load_bytes<'c>(ctx: &'c Context, bytes: &[u8], name: &str) -> Result<Module<'c>, IrError> {
    let buf = MemoryBuffer::create_from_memory_range_copy(bytes, name);
    parse(ctx, buf, name)
}

fn parse<'c>(ctx: &'c Context, buf: MemoryBuffer, what: &str) -> Result<Module<'c>, IrError> {
    let module = ctx.create_module_from_ir(buf).map_err(|e| IrError::Parse {
        what: what.to_owned(),
        msg: printable(&e.to_string()),
    })?;
    verify(&module, what)?;
    Ok(module)
}

/// LLVM's message about a file it cannot parse quotes the offending line; of a binary file,
/// that is raw bytes for the terminal. Control characters become `?`, and the message stops
/// after 300 characters.
fn printable(msg: &str) -> String {
    let clean: String = msg
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() || c == char::REPLACEMENT_CHARACTER => '?',
            c => c,
        })
        .collect();
    match clean.char_indices().nth(300) {
        Some((at, _)) => format!("{} …", &clean[..at]),
        None => clean,
    }
}

/// A module a user handed r3 as device code (`r3 ptx`, `r3 egraph`): with at least one
/// function defined, and for NVPTX where it names a target (hand-written IR often names none,
/// and is lowered for NVPTX as it is). LLVM would lower an empty module, or one for another
/// target, to PTX without a word.
pub fn check_device_ir(module: &Module, what: &str) -> Result<(), IrError> {
    let triple = module.get_triple();
    let triple = triple.as_str().to_string_lossy();
    let why = if !triple.is_empty() && !triple.starts_with("nvptx") {
        Some(format!("is IR for {triple}, not for NVPTX"))
    } else if module.get_functions().all(|f| f.count_basic_blocks() == 0) {
        Some("defines no function".to_owned())
    } else {
        None
    };
    match why {
        Some(why) => Err(IrError::NotDevice {
            what: what.to_owned(),
            why,
        }),
        None => Ok(()),
    }
}

/// Instructions in a module's function bodies.
pub fn instruction_count(m: &Module) -> usize {
    m.get_functions()
        .flat_map(|f| f.get_basic_blocks())
        .map(|bb| bb.get_instructions().count())
        .sum()
}

pub fn verify(module: &Module, what: &str) -> Result<(), IrError> {
    module.verify().map_err(|e| IrError::Verify {
        what: what.to_owned(),
        msg: e.to_string(),
    })
}

/// Runs an `opt -passes=` pipeline text over the module. The target machine matters: it
/// registers NVPTX's own passes (e.g. NVVMReflect) in the default pipelines.
///
/// r3's own pass `r3-egraph` (or `r3-egraph<iters=N;nodes=N;time-ms=N>`) may appear as a
/// top-level element, e.g. `default<O3>,r3-egraph,function(instcombine)`: LLVM runs the text
/// before it, then the e-graph rewriter, then the rest. It cannot be nested in an adaptor.
pub fn run_pipeline(module: &Module, pipeline: &str, tm: &TargetMachine) -> Result<(), IrError> {
    use crate::egraph::{run_on_module, split_pipeline, PipelineStep};
    for step in split_pipeline(pipeline)? {
        match step {
            PipelineStep::Llvm(text) => run_llvm_pipeline(module, &text, tm)?,
            PipelineStep::Egraph(opts) => {
                run_on_module(module, &opts)?;
                verify(module, &format!("module after r3-egraph in '{pipeline}'"))?;
            }
        }
    }
    Ok(())
}

fn run_llvm_pipeline(module: &Module, pipeline: &str, tm: &TargetMachine) -> Result<(), IrError> {
    if pipeline.trim().is_empty() {
        return Ok(());
    }
    let opts = PassBuilderOptions::create();
    opts.set_verify_each(false);
    module
        .run_passes(pipeline, tm, opts)
        .map_err(|e| IrError::Pipeline {
            pipeline: pipeline.to_owned(),
            msg: e.to_string(),
        })?;
    let shown = match passes::diff::brief(pipeline, BRIEF_EDITS) {
        quoted if quoted.starts_with('\'') => quoted,
        edits => format!("of {edits}"),
    };
    verify(module, &format!("module after pipeline {shown}"))
}

/// LLVM's `ptx_kernel` calling convention number (CallingConv::PTX_Kernel).
pub const PTX_KERNEL_CC: u32 = 71;

pub mod extract;
pub mod mutate;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 36, item 7: about 3% of dry-run candidates were -O3 with loop-vectorize given an
    /// empty parameter, and each rejection printed the whole 5 KB pipeline. The message is
    /// LLVM's, then the pipeline as its edits of -O3.
    #[test]
    fn a_rejected_pipeline_is_shown_as_its_edits_of_o3() {
        let ctx = Context::create();
        let ir = "target triple = \"nvptx64-nvidia-cuda\"\n\
                  define void @k(ptr %p) {\n  store i32 1, ptr %p\n  ret void\n}\n";
        let m = load_bytes(&ctx, ir.as_bytes(), "k.ll").unwrap();
        let tm = lower::target_machine(&lower::Codegen::default()).unwrap();
        let o3 = passes::diff::expand("default<O3>").unwrap().render();
        let good = "loop-vectorize<no-interleave-forced-only;no-vectorize-forced-only;>";
        let bad = "loop-vectorize<no-interleave-forced-only;;vectorize-forced-only>";
        assert_eq!(o3.matches(good).count(), 1);
        let text = o3.replace(good, bad);
        let err = run_pipeline(&m, &text, &tm).unwrap_err().to_string();
        assert!(text.len() > 2000 && err.len() < 400, "{err}");
        assert!(
            err.starts_with("pipeline rejected by LLVM: invalid LoopVectorize parameter ''"),
            "{err}"
        );
        assert!(
            err.contains("passes, differing from -O3 in: ~") && err.contains(&format!("{bad} at ")),
            "{err}"
        );
        assert!(!err.contains("instcombine"), "{err}");

        // A short pipeline is quoted whole, as it was written.
        let err = run_pipeline(&m, "function(no-such-pass)", &tm)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("pipeline 'function(no-such-pass)' rejected by LLVM: "),
            "{err}"
        );
    }
}
