//! What a candidate does to the code: recomputed from the kernel's stored module (the trials
//! database keeps only the PTX hash). IR instruction counts after each pass, the PTX
//! instruction mix, and registers and spills from ptxas when the CUDA SDK has one.

use crate::candidate::Candidate;
use crate::ir;
use crate::lower::{self, Codegen};
use crate::passes::diff::{expand, step_path};
use crate::passes::pipeline::Pipeline;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// Static statistics of one candidate's code.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CodeStats {
    /// LLVM IR instructions in the module after the pipeline (all defined functions).
    pub ir_instructions: usize,
    pub ptx_instructions: usize,
    pub ptx_bytes: usize,
    /// PTX instructions by group (`ptx::stats::opcode_group`).
    pub mix: BTreeMap<String, usize>,
    /// From `ptxas -v`; None when ptxas is unavailable (see `Code::ptxas`).
    pub registers: Option<u32>,
    pub spill_store_bytes: Option<u32>,
    pub spill_load_bytes: Option<u32>,
}

/// IR size after one pass of the best pipeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PassStep {
    pub index: usize,
    pub pass: String,
    /// None when the pass failed to run on its own (`error` says why).
    pub ir_instructions: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub use crate::lower::{ptxas_info, PtxasInfo};

/// The code statistics of one candidate of a stored kernel.
pub fn code_stats(
    bitcode: &[u8],
    what: &str,
    c: &Candidate,
    target: &Codegen,
    ptxas: Option<&Path>,
) -> Result<(CodeStats, Option<String>), String> {
    let (ptx, ir) = if c.llvm_options.is_empty() {
        let ctx = inkwell::context::Context::create();
        let module = crate::ir::load_bytes(&ctx, bitcode, what).map_err(|e| e.to_string())?;
        let mut ir = 0;
        let t = lower::lower_candidate(&module, c, target, |m| ir = ir::instruction_count(m))
            .map_err(|e| e.to_string())?;
        (t.ptx, ir)
    } else {
        lower_in_child(bitcode, what, c, target)?
    };
    let stats = crate::ptx::stats::stats(&ptx);
    let mut out = CodeStats {
        ir_instructions: ir,
        ptx_instructions: stats.instructions,
        ptx_bytes: stats.bytes,
        mix: crate::ptx::stats::mix(&ptx),
        registers: None,
        spill_store_bytes: None,
        spill_load_bytes: None,
    };
    let mut ptxas_note = None;
    if let Some(p) = ptxas {
        match ptxas_info(p, &ptx, &target.sm) {
            Ok(i) => {
                out.registers = Some(i.registers);
                out.spill_store_bytes = Some(i.spill_stores);
                out.spill_load_bytes = Some(i.spill_loads);
            }
            Err(e) => ptxas_note = Some(e),
        }
    }
    Ok((out, ptxas_note))
}

/// A candidate with LLVM options, lowered in an `r3 __lower` child: the options are
/// process-wide, and a report shows many kernels' winners.
fn lower_in_child(
    bitcode: &[u8],
    what: &str,
    c: &Candidate,
    target: &Codegen,
) -> Result<(String, usize), String> {
    let mut file = tempfile::NamedTempFile::new().map_err(|e| format!("a temporary file: {e}"))?;
    std::io::Write::write_all(&mut file, bitcode)
        .map_err(|e| format!("{}: {e}", file.path().display()))?;
    let job = crate::lower::isolated::LowerJob {
        bitcode: file.path().to_owned(),
        kernel_hash: what.into(),
        candidate: c.clone(),
        target: target.clone(),
        mutation: None,
    };
    match crate::lower::isolated::lower_isolated(&job) {
        Ok(l) => Ok((l.ptx, l.ir_instructions)),
        Err(o) => Err(o.to_string()),
    }
}

/// IR instruction counts after each pass of a pipeline, running its passes one at a time
/// (each in its own adaptors) on one module. Close to, but not exactly, the nested run: a
/// CGSCC adaptor's function passes run over all functions after each other rather than
/// interleaved per SCC, and `devirt<N>` repetition is not iterated.
pub fn ir_after_each_pass(
    bitcode: &[u8],
    what: &str,
    c: &Candidate,
    target: &Codegen,
) -> Result<(usize, Vec<PassStep>), String> {
    let pipeline = expand(&c.pipeline).map_err(|e| e.to_string())?;
    lower::use_llvm_options(&c.llvm_options).map_err(|e| e.to_string())?;
    let ctx = inkwell::context::Context::create();
    let module = crate::ir::load_bytes(&ctx, bitcode, what).map_err(|e| e.to_string())?;
    lower::apply_knobs(&module, c).map_err(|e| e.to_string())?;
    let cg = Codegen {
        opt_level: c.codegen_opt,
        ..target.clone()
    };
    // As lower_timed_with prepares the module before its pipeline.
    let tm = lower::target_machine(&cg).map_err(|e| e.to_string())?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    lower::retarget(&module, &cg);
    let before = ir::instruction_count(&module);
    let mut steps = Vec::new();
    for (i, s) in pipeline.steps.iter().enumerate() {
        let one = Pipeline {
            steps: vec![s.clone()],
        }
        .render();
        let r = crate::ir::run_pipeline(&module, &one, &tm);
        steps.push(PassStep {
            index: i,
            pass: step_path(s),
            ir_instructions: r.is_ok().then(|| ir::instruction_count(&module)),
            error: r.err().map(|e| e.to_string()),
        });
    }
    Ok((before, steps))
}
