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
    /// PTX instructions by group (see [`opcode_group`]).
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

/// The group a PTX opcode (`ld.global.nc.f32`, `fma.rn.f32`, …) is counted in.
pub fn opcode_group(op: &str) -> &'static str {
    let base = op.split('.').next().unwrap_or(op);
    let space = |s: &str| op.split('.').any(|p| p == s);
    match base {
        "ld" | "ldu" if space("global") => "ld.global",
        "st" if space("global") => "st.global",
        "ld" if space("shared") => "ld.shared",
        "st" if space("shared") => "st.shared",
        "ld" | "st" if space("local") => "ld/st.local",
        "ld" if space("param") => "ld.param",
        "ld" | "ldu" | "st" | "cp" | "prefetch" => "ld/st.other",
        "atom" | "red" => "atomic",
        "fma" | "mad" => "fma/mad",
        "add" | "sub" | "mul" | "div" | "rem" | "neg" | "abs" | "min" | "max" | "copysign" => {
            "arith"
        }
        "and" | "or" | "xor" | "not" | "shl" | "shr" | "bfe" | "bfi" | "popc" | "clz" | "brev"
        | "prmt" | "shf" | "lop3" | "cnot" => "logic",
        "setp" | "selp" | "set" | "slct" => "compare/select",
        "cvt" | "cvta" => "convert",
        "mov" => "move",
        "bra" | "ret" | "exit" | "call" | "brx" => "control",
        "bar" | "barrier" | "membar" | "fence" => "sync",
        "sqrt" | "rsqrt" | "rcp" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => "special",
        _ => "other",
    }
}

/// PTX instructions by group (same counting rule as [`lower::ptx_stats`]).
pub fn ptx_mix(ptx: &str) -> BTreeMap<String, usize> {
    let mut mix = BTreeMap::new();
    let mut depth = 0i32;
    for line in ptx.lines().map(str::trim) {
        depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
        let is_decl = line.starts_with('.') || line.starts_with("//") || line.is_empty();
        if depth > 0 && line.ends_with(';') && !is_decl {
            let mut words = line.split_whitespace();
            let mut op = words.next().unwrap_or("");
            if op.starts_with('@') {
                op = words.next().unwrap_or("");
            }
            let op = op.trim_end_matches(';');
            *mix.entry(opcode_group(op).to_owned()).or_insert(0) += 1;
        }
    }
    mix
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
    let stats = lower::ptx_stats(&ptx);
    let mut out = CodeStats {
        ir_instructions: ir,
        ptx_instructions: stats.instructions,
        ptx_bytes: stats.bytes,
        mix: ptx_mix(&ptx),
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
        kernel_hash: what.to_owned(),
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
    lower::apply_knobs(&module, c);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_group() {
        assert_eq!(opcode_group("ld.global.nc.f32"), "ld.global");
        assert_eq!(opcode_group("st.shared.v4.f32"), "st.shared");
        assert_eq!(opcode_group("ld.param.u64"), "ld.param");
        assert_eq!(opcode_group("st.local.u32"), "ld/st.local");
        assert_eq!(opcode_group("fma.rn.f32"), "fma/mad");
        assert_eq!(opcode_group("setp.ge.s32"), "compare/select");
        assert_eq!(opcode_group("bra.uni"), "control");
        let ptx = ".visible .entry k(\n.param .u64 k_p0\n)\n{\n.reg .b32 %r<4>;\nld.param.u64 %rd1, [k_p0];\n@%p1 bra $L__BB0_2;\nfma.rn.f32 %f3, %f1, %f2, %f3;\n$L__BB0_2:\nret;\n}\n";
        let mix = ptx_mix(ptx);
        assert_eq!(mix["ld.param"], 1);
        assert_eq!(mix["control"], 2);
        assert_eq!(mix["fma/mad"], 1);
        assert_eq!(
            mix.values().sum::<usize>(),
            lower::ptx_stats(ptx).instructions
        );
    }
}
