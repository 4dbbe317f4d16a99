//! Lowering device IR to PTX with LLVM's NVPTX backend.

use crate::candidate::Candidate;
use crate::{self as ir, IrError, NVPTX_TRIPLE};
use inkwell::module::Module;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::OptimizationLevel;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Once;

pub mod isolated;
pub mod specialize;

/// A candidate compiled for one kernel: what the GPU will run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Lowered {
    pub candidate: Candidate,
    /// Hash of the PTX text: equal hashes mean equal code, measured once.
    pub ptx_hash: crate::kernel::PtxHash,
    pub ptx: String,
    pub stats: crate::ptx::stats::PtxStats,
    /// Wall time of the IR passes and of code generation.
    pub passes_ms: f64,
    pub codegen_ms: f64,
    /// IR instructions after the candidate's passes (0 where not computed).
    #[serde(default)]
    pub ir_instructions: usize,
}

/// Why a candidate did not lower: LLVM's own message, or the crash or hang of the child that
/// lowered it (replay records it as `Outcome::CompileError`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("did not compile: {message}")]
pub struct CompileFailure {
    pub message: String,
}

/// What the backend is asked to produce.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Codegen {
    /// GPU architecture, e.g. "sm_90".
    pub sm: String,
    /// PTX ISA version as LLVM's feature, e.g. "ptx80"; None keeps what the IR asks for.
    pub ptx: Option<String>,
    /// Backend optimization level 0..=3 (llc -O).
    pub opt_level: u8,
}

impl Default for Codegen {
    fn default() -> Self {
        Codegen {
            sm: "sm_90".into(),
            ptx: None,
            opt_level: 3,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LowerError {
    #[error("LLVM has no NVPTX target: {0}")]
    NoTarget(String),
    #[error("cannot create an NVPTX target machine for {sm} (features '{features}'); fix: an sm_XX that LLVM 22 knows, e.g. sm_90")]
    TargetMachine { sm: String, features: String },
    #[error("NVPTX code generation failed: {0}")]
    Codegen(String),
    #[error("codegen opt level {0} is out of range; fix: use 0, 1, 2 or 3")]
    OptLevel(u8),
    #[error("`{sm}` is not a GPU architecture LLVM's NVPTX backend knows; fix: one of {known} (an H100 or H200 is sm_90)")]
    UnknownSm { sm: String, known: String },
    #[error(transparent)]
    Ir(#[from] IrError),
    #[error(transparent)]
    Catalog(#[from] crate::passes::catalog::CatalogError),
    #[error(
        "LLVM options are process-wide and this process already runs with {set}; a candidate \
         with {wanted} needs a process of its own (r3 lowers each such candidate in `r3 __lower`)"
    )]
    OptionsInUse { set: String, wanted: String },
    #[error(transparent)]
    Specialize(#[from] specialize::SpecializeError),
}

include!(concat!(env!("OUT_DIR"), "/nvptx_cpus.rs"));

/// Checks a GPU architecture name (`sm_90`, `sm_90a`) against the processors of the NVPTX
/// backend linked in (`NVPTX_CPUS`, listed by its `llc` when r3 was built; by the name's form
/// where that list is empty): LLVM itself would take `banana` and write `.target banana`.
pub fn check_sm(sm: &str) -> Result<(), LowerError> {
    let formed = sm.strip_prefix("sm_").is_some_and(|v| {
        v.starts_with(|c: char| c.is_ascii_digit()) && v.chars().all(|c| c.is_ascii_alphanumeric())
    });
    let known = if NVPTX_CPUS.is_empty() {
        formed
    } else {
        NVPTX_CPUS.contains(&sm)
    };
    if known {
        return Ok(());
    }
    let list = if NVPTX_CPUS.is_empty() {
        "sm_NN or sm_NNa".to_owned()
    } else {
        NVPTX_CPUS.join(", ")
    };
    Err(LowerError::UnknownSm {
        sm: sm.to_owned(),
        known: list,
    })
}

/// The LLVM command-line options this process runs with: set once, by the first candidate
/// that has any, since LLVM can parse its options only once per process (a second parse of an
/// option is an error that ends the process).
static LLVM_OPTIONS: std::sync::Mutex<Option<BTreeMap<String, String>>> =
    std::sync::Mutex::new(None);

fn describe_options(o: &BTreeMap<String, String>) -> String {
    if o.is_empty() {
        return "LLVM's defaults".into();
    }
    crate::candidate::llvm_option_args(o)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Makes LLVM run with a candidate's options (`Candidate::llvm_options`), checked against the
/// catalog first. The first candidate with options sets them for the rest of the process;
/// afterwards only candidates with exactly those options lower here, and any other is an
/// error rather than code built with the wrong options.
pub fn use_llvm_options(wanted: &BTreeMap<String, String>) -> Result<(), LowerError> {
    let mut set = LLVM_OPTIONS.lock().unwrap_or_else(|p| p.into_inner());
    match set.as_ref() {
        Some(s) if s == wanted => return Ok(()),
        None if wanted.is_empty() => return Ok(()),
        Some(s) => {
            return Err(LowerError::OptionsInUse {
                set: describe_options(s),
                wanted: describe_options(wanted),
            })
        }
        None => {}
    }
    let args = crate::passes::catalog::Catalog::builtin()?.llvm_args(wanted)?;
    let argv: Vec<std::ffi::CString> = std::iter::once("r3".to_owned())
        .chain(args)
        .map(|a| std::ffi::CString::new(a).expect("checked options have no NUL"))
        .collect();
    let ptrs: Vec<*const std::ffi::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    // SAFETY: `ptrs` points into `argv`, alive for the call; every name and value was checked
    // against the catalog, so LLVM knows each option (it exits the process on one it does not).
    unsafe {
        llvm_sys::support::LLVMParseCommandLineOptions(
            ptrs.len() as i32,
            ptrs.as_ptr(),
            c"r3".as_ptr(),
        );
    }
    *set = Some(wanted.clone());
    Ok(())
}

fn init_nvptx() {
    static INIT: Once = Once::new();
    INIT.call_once(|| Target::initialize_nvptx(&InitializationConfig::default()));
}

fn opt_level(level: u8) -> Result<OptimizationLevel, LowerError> {
    Ok(match level {
        0 => OptimizationLevel::None,
        1 => OptimizationLevel::Less,
        2 => OptimizationLevel::Default,
        3 => OptimizationLevel::Aggressive,
        n => return Err(LowerError::OptLevel(n)),
    })
}

/// An NVPTX target machine for the given codegen settings.
pub fn target_machine(cg: &Codegen) -> Result<TargetMachine, LowerError> {
    init_nvptx();
    let triple = TargetTriple::create(NVPTX_TRIPLE);
    let target = Target::from_triple(&triple).map_err(|e| LowerError::NoTarget(e.to_string()))?;
    let features = cg
        .ptx
        .as_deref()
        .map(|p| format!("+{p}"))
        .unwrap_or_default();
    target
        .create_target_machine(
            &triple,
            &cg.sm,
            &features,
            opt_level(cg.opt_level)?,
            RelocMode::Default,
            CodeModel::Default,
        )
        .ok_or_else(|| LowerError::TargetMachine {
            sm: cg.sm.clone(),
            features,
        })
}

/// Forces the module's per-function target attributes to the requested GPU, so a module
/// recorded for one architecture can be lowered for another.
pub fn retarget(module: &Module, cg: &Codegen) {
    let ctx = module.get_context();
    for f in module.get_functions() {
        use inkwell::attributes::AttributeLoc;
        f.remove_string_attribute(AttributeLoc::Function, "target-cpu");
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("target-cpu", &cg.sm),
        );
        if let Some(ptx) = &cg.ptx {
            f.remove_string_attribute(AttributeLoc::Function, "target-features");
            let feats = format!("+{ptx},+{}", cg.sm);
            f.add_attribute(
                AttributeLoc::Function,
                ctx.create_string_attribute("target-features", &feats),
            );
        }
    }
}

/// Runs `pipeline` over the module, then lowers it to PTX text.
/// `r3 ptx`: the PTX of a device IR file (text or bitcode) after `pipeline`, for `cg`.
pub fn ptx_of_file(path: &Path, pipeline: &str, cg: &Codegen) -> Result<String, LowerError> {
    let ctx = inkwell::context::Context::create();
    let module = ir::load_file(&ctx, path)?;
    ir::check_device_ir(&module, &path.display().to_string())?;
    to_ptx(&module, pipeline, cg)
}

/// The PTX of device IR held in memory (text or bitcode; `name` names it in errors) after
/// `pipeline`, for `cg`: `r3 selftest`'s built-in kernel.
pub fn ptx_of_bytes(
    bytes: &[u8],
    name: &str,
    pipeline: &str,
    cg: &Codegen,
) -> Result<String, LowerError> {
    let ctx = inkwell::context::Context::create();
    let module = ir::load_bytes(&ctx, bytes, name)?;
    to_ptx(&module, pipeline, cg)
}

pub fn to_ptx(module: &Module, pipeline: &str, cg: &Codegen) -> Result<String, LowerError> {
    Ok(lower_timed(module, pipeline, cg)?.ptx)
}

/// PTX and where the time went.
pub struct Timed {
    pub ptx: String,
    pub passes_ms: f64,
    pub codegen_ms: f64,
}

pub fn lower_timed(module: &Module, pipeline: &str, cg: &Codegen) -> Result<Timed, LowerError> {
    lower_timed_with(module, pipeline, cg, |_| ())
}

/// As `lower_timed`, with `after_passes` run on the IR between the pipeline and codegen.
pub fn lower_timed_with(
    module: &Module,
    pipeline: &str,
    cg: &Codegen,
    after_passes: impl FnOnce(&Module),
) -> Result<Timed, LowerError> {
    let tm = target_machine(cg)?;
    module.set_triple(&tm.get_triple());
    module.set_data_layout(&tm.get_target_data().get_data_layout());
    retarget(module, cg);
    let t = std::time::Instant::now();
    ir::run_pipeline(module, pipeline, &tm)?;
    let passes_ms = t.elapsed().as_secs_f64() * 1e3;
    after_passes(module);
    ir::verify(module, "module before code generation")?;
    let t = std::time::Instant::now();
    let buf = tm
        .write_to_memory_buffer(module, FileType::Assembly)
        .map_err(|e| LowerError::Codegen(e.to_string()))?;
    let codegen_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(Timed {
        ptx: String::from_utf8_lossy(buf.as_slice()).into_owned(),
        passes_ms,
        codegen_ms,
    })
}

/// A candidate's code for one kernel module: its knobs applied, its pipeline run, lowered.
pub fn lower_candidate(
    module: &Module,
    c: &Candidate,
    target: &Codegen,
    after_passes: impl FnOnce(&Module),
) -> Result<Timed, LowerError> {
    use_llvm_options(&c.llvm_options)?;
    apply_knobs(module, c)?;
    let cg = Codegen {
        opt_level: c.codegen_opt,
        ..target.clone()
    };
    lower_timed_with(module, &c.pipeline, &cg, after_passes)
}

/// Launch bounds and fast-math, as clang would have set them from the source, and the
/// candidate's folded values.
pub fn apply_knobs(module: &Module, c: &Candidate) -> Result<(), LowerError> {
    if let Some(s) = &c.specialize {
        specialize::fold(module, s)?;
    }
    use inkwell::attributes::AttributeLoc;
    let ctx = module.get_context();
    for f in module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0)
    {
        let set = |k: &str, v: &str| {
            f.remove_string_attribute(AttributeLoc::Function, k);
            f.add_attribute(AttributeLoc::Function, ctx.create_string_attribute(k, v));
        };
        if f.get_call_conventions() == ir::PTX_KERNEL_CC {
            if let Some(n) = c.max_threads {
                set("nvvm.maxntid", &n.to_string());
            }
            if let Some(n) = c.min_blocks_per_sm {
                set("nvvm.minctasm", &n.to_string());
            }
        }
        if c.fast_math {
            for k in [
                "unsafe-fp-math",
                "no-infs-fp-math",
                "no-nans-fp-math",
                "no-signed-zeros-fp-math",
                "approx-func-fp-math",
            ] {
                set(k, "true");
            }
            flag_fast_math(f);
        }
    }
    Ok(())
}

/// Sets every fast-math flag on each instruction of `f` that can carry them. LLVM 22 reads fast
/// math from the instructions (as clang 22's -ffast-math writes it), not from the function
/// attributes above, which it ignores: with those alone the knob left the PTX unchanged
/// (tests/filetests/knobs/fast_math.ll).
fn flag_fast_math(f: inkwell::values::FunctionValue) {
    use inkwell::values::AsValueRef;
    use llvm_sys::core::{
        LLVMCanValueUseFastMathFlags, LLVMGetFastMathFlags, LLVMSetFastMathFlags,
    };
    for bb in f.get_basic_blocks() {
        for inst in bb.get_instructions() {
            let v = inst.as_value_ref();
            // SAFETY: `v` is a live instruction of this module; the flags are set only where
            // LLVM says the instruction can carry them.
            unsafe {
                if LLVMCanValueUseFastMathFlags(v) != 0 {
                    LLVMSetFastMathFlags(v, LLVMGetFastMathFlags(v) | llvm_sys::LLVMFastMathAll);
                }
            }
        }
    }
}

/// The newest PTX ISA a CUDA driver of version (major, minor) loads, as LLVM's feature name.
/// From NVIDIA's PTX ISA release notes (PTX x.y ships with CUDA 12.y / 13.0 → 9.0).
pub fn ptx_for_driver(driver: (i32, i32)) -> &'static str {
    match driver {
        (m, _) if m >= 13 => "ptx90",
        (12, n) if n >= 9 => "ptx88",
        (12, 8) => "ptx87",
        (12, 7) => "ptx86",
        (12, 5) | (12, 6) => "ptx85",
        (12, 4) => "ptx84",
        (12, 3) => "ptx83",
        (12, 2) => "ptx82",
        (12, 1) => "ptx81",
        (12, _) => "ptx80",
        (11, 8) => "ptx78",
        _ => "ptx70",
    }
}

/// Registers and spills as `ptxas -v` reports them for the PTX's (first) entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtxasInfo {
    pub registers: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
}

/// Runs `ptxas -v` on a PTX text. Err says why not (no ptxas, it failed).
pub fn ptxas_info(ptxas: &Path, ptx: &str, sm: &str) -> Result<PtxasInfo, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let src = dir.path().join("k.ptx");
    std::fs::write(&src, ptx).map_err(|e| e.to_string())?;
    let out = std::process::Command::new(ptxas)
        .arg(format!("-arch={sm}"))
        .arg("-v")
        .arg(&src)
        .arg("-o")
        .arg(dir.path().join("k.cubin"))
        .output()
        .map_err(|e| format!("{}: {e}", ptxas.display()))?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!(
            "ptxas failed: {}",
            text.lines().next().unwrap_or("").trim()
        ));
    }
    let num_before = |line: &str, what: &str| -> Option<u32> {
        let at = line.find(what)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut info = None;
    let mut spills = (0, 0);
    for line in text.lines() {
        if let (Some(s), Some(l)) = (
            num_before(line, "bytes spill stores"),
            num_before(line, "bytes spill loads"),
        ) {
            spills = (s, l);
        }
        if let Some(r) = num_before(line, "registers") {
            if info.is_none() {
                info = Some(PtxasInfo {
                    registers: r,
                    spill_stores: spills.0,
                    spill_loads: spills.1,
                });
            }
        }
    }
    info.ok_or_else(|| "ptxas -v printed no register count".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_architectures_the_nvptx_backend_knows_are_taken() {
        assert!(NVPTX_CPUS.len() > 20, "the list from llc: {NVPTX_CPUS:?}");
        for sm in ["sm_90", "sm_90a", "sm_80", "sm_100f"] {
            check_sm(sm).unwrap();
        }
        for bad in ["banana", "sm_1", "", "sm_", "90", "sm_90 ", "SM_90"] {
            let err = check_sm(bad).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{bad}`")) && err.contains("sm_90"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn driver_versions_map_to_ptx() {
        assert_eq!(ptx_for_driver((13, 0)), "ptx90");
        assert_eq!(ptx_for_driver((12, 9)), "ptx88");
        assert_eq!(ptx_for_driver((12, 4)), "ptx84");
        assert_eq!(ptx_for_driver((11, 2)), "ptx70");
    }

    #[test]
    fn bad_opt_level_is_refused() {
        let cg = Codegen {
            opt_level: 7,
            ..Default::default()
        };
        assert!(matches!(target_machine(&cg), Err(LowerError::OptLevel(7))));
    }
}
