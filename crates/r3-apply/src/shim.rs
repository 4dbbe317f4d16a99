//! The apply step inside clang's device compile. With apply on, the driver passes
//! `--ptxas-path=` a link named `ptxas` to r3, so clang hands r3 the PTX it produced for one
//! architecture. r3 finds that compile's kernels (in the IR its capture plugin wrote, by content
//! hash), lowers each kernel that has a winner exactly as the search did, checks that the PTX
//! is the one that was measured, splices it over clang's code for that kernel, and runs the
//! real ptxas. Every other kernel keeps clang's PTX, byte for byte.
//!
//! Whatever goes wrong here, the real ptxas runs on clang's own PTX: apply can cost a kernel its
//! tuning, never the build. What happened to each kernel goes into `applied-*.json` in the
//! apply directory, for the driver's one line about it.

use super::dispatch;
use super::plan::{Source, Winner};
use super::splice::{self, Tuned};
use crate::ir::extract;
use crate::kernel::{KernelModule, PtxHash, SourceLoc};
use crate::lower::isolated::{lower_isolated, LowerJob};
use crate::lower::Codegen;
use crate::store::programs::ShippedKernel;
use crate::store::winner::Policy;
use crate::store::{KernelRecord, Store};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory with the compile's captured IR, where the shim reports too.
pub const DIR_ENV: &str = "R3_APPLY_DIR";
/// `store:<dir>` or `file:<winners.json>`.
pub const FROM_ENV: &str = "R3_APPLY_FROM";
/// The ptxas clang would have run.
pub const PTXAS_ENV: &str = "R3_REAL_PTXAS";
/// Set (by the driver, before the compile): work out each architecture's dispatch table from
/// the captured IR and write it as `predicted-<arch>.txt` in the apply directory, then exit;
/// the compile that follows includes it and reuses what was lowered for it.
pub const PREDICT_ENV: &str = "R3_APPLY_PREDICT";
/// The first part of the name of the table the driver includes, per architecture.
pub const PREDICTED: &str = "predicted-";
/// The first part of the name of the table a ptxas run built, per architecture: what the
/// shim wrote after assembling (empty where it shipped no tuned code).
pub const BUILT: &str = "dispatch-";

/// What became of one kernel of the compile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelOutcome {
    pub demangled: String,
    pub hash: crate::kernel::KernelHash,
    pub arch: String,
    pub status: Status,
    /// The winner's measured speedup, where one was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The guarded variants added beside the generic entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<AppliedVariant>,
    /// Entries of the plan that `check` refused, each `<entry>: <why>`: not built.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

/// A variant in the build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedVariant {
    pub entry: String,
    pub guard: crate::winners::Guard,
    pub speedup: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The winner's PTX is in the build.
    Applied,
    /// No winner: clang's code, as without r3.
    NotTuned,
    /// Another version of this kernel was tuned; this one (edited since) keeps clang's code.
    Changed,
    /// The winner did not lower to the PTX that was measured (another r3 or LLVM): clang's code.
    PtxDiffers,
    /// The winner names no measured PTX (a winners file without `ptx_hash`, not a simulated
    /// trial): nothing to check the lowered code against, so clang's code.
    Unverified,
    /// Lowering the winner, splicing or assembling failed: clang's code.
    Failed,
    /// Every entry of the kernel's plan was refused (`check`: a guard that disagrees with its
    /// candidate, a generic entry that folds values, ...): clang's code.
    Refused,
    /// The source holds a winner for this kernel that the policy does not build (a simulated
    /// one without `R3_APPLY_SIMULATED=1`): clang's code.
    Withheld,
}

/// Runs as `ptxas ARGS`; returns the real ptxas's exit status.
pub fn main(args: Vec<OsString>) -> i32 {
    if std::env::var_os(PREDICT_ENV).is_some() {
        return match std::env::var_os(DIR_ENV).map(PathBuf::from) {
            Some(dir) => match predict(&dir) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("r3: the dispatch table could not be worked out: {e}");
                    1
                }
            },
            None => {
                eprintln!("r3: error: {PREDICT_ENV} without {DIR_ENV}");
                1
            }
        };
    }
    let Some(real) = std::env::var_os(PTXAS_ENV) else {
        eprintln!("r3: error: called as ptxas without {PTXAS_ENV}: r3-clang++ sets it when it applies tuned kernels");
        return 1;
    };
    let real = PathBuf::from(real);
    let dir = std::env::var_os(DIR_ENV).map(PathBuf::from);
    let arch = gpu_name(&args).unwrap_or_default();
    let input = input_of(&args).and_then(|p| {
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok((p, text))
    });
    let (input, original) = match input {
        Ok(found) => found,
        Err(why) => {
            // Clang's code, with the reason in the build's note rather than nothing at all.
            if let Some(d) = &dir {
                report(
                    d,
                    &arch,
                    &[failed_all(&arch, format!("apply skipped: {why}"))],
                );
            }
            return run(&real, &args);
        }
    };
    let Rewritten {
        text,
        mut outcomes,
        rows,
        shipped,
    } = match dir.as_deref().map(|d| rewrite(&original, &arch, d)) {
        Some(Ok(r)) => r,
        Some(Err(e)) => Rewritten::unchanged(vec![failed_all(&arch, e)]),
        None => Rewritten::unchanged(Vec::new()),
    };
    let mut code = match &text {
        Some(t) if std::fs::write(&input, t).is_ok() => run_quiet(&real, &args),
        _ => run(&real, &args),
    };
    if text.is_some() && code != 0 {
        // The real ptxas rejected the spliced PTX: put clang's back and assemble that.
        let _ = std::fs::write(&input, &original);
        for o in outcomes.iter_mut().filter(|o| o.status == Status::Applied) {
            o.status = Status::Failed;
            o.detail = Some("ptxas rejected the spliced PTX".into());
            o.variants.clear();
        }
        code = run(&real, &args);
    }
    if let Some(d) = dir {
        let applied = text.is_some() && outcomes.iter().any(|o| o.status == Status::Applied);
        // The table this run built, empty where it shipped clang's code: the driver holds it
        // against the one the host side included. (Where it cannot be written, the driver
        // has nothing to hold the included one against, and goes by it.)
        let _ = if applied && code == 0 {
            dispatch::write_part(&d, &arch, &rows, &shipped)
        } else {
            dispatch::write_part(&d, &arch, &[], &[])
        };
        report(&d, &arch, &outcomes);
    }
    code
}

/// What the shim makes of one compile: the spliced PTX (None when nothing is tuned), each
/// kernel's outcome, and the dispatch table's rows for the variants in it and lines for the
/// tuned code of each kernel.
struct Rewritten {
    text: Option<String>,
    outcomes: Vec<KernelOutcome>,
    rows: Vec<dispatch::Row>,
    shipped: Vec<ShippedKernel>,
}

impl Rewritten {
    /// Clang's PTX as it is.
    fn unchanged(outcomes: Vec<KernelOutcome>) -> Rewritten {
        Rewritten {
            text: None,
            outcomes,
            rows: Vec::new(),
            shipped: Vec::new(),
        }
    }
}

/// One kernel's code to splice: the generic entry's replacement or a variant.
struct Lowered {
    kernel: String,
    ptx: String,
    /// The hash of `ptx`: the measured PTX's.
    ptx_hash: PtxHash,
    tag: String,
    variant: Option<String>,
}

/// Before the compile: each architecture's dispatch table, as the ptxas runs of the compile
/// will build it from the same IR and winners, written as `predicted-<arch>.txt` into `dir`
/// (the lowered code stays there for those runs).
fn predict(dir: &Path) -> Result<(), String> {
    let source = source_from_env()?;
    let policy = Policy::from_env();
    let all = captured_kernels(dir, "")?;
    let archs: std::collections::BTreeSet<String> =
        all.iter().map(|k| k.signature.arch.clone()).collect();
    for arch in archs {
        let kernels: Vec<&KernelModule> = all.iter().filter(|k| k.signature.arch == arch).collect();
        let planned = plan_and_lower(&kernels, &source, &policy, &arch, dir)?;
        let lines = match planned.lowered.is_empty() {
            true => String::new(),
            false => dispatch::part_lines(&planned.rows, &planned.shipped),
        };
        let path = dir.join(format!("{PREDICTED}{arch}.txt"));
        crate::store::write_atomic(&path, lines.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Each kernel's plan lowered: the outcomes, the code to splice, the table's rows and its
/// lines for the tuned code of each kernel.
struct Planned {
    outcomes: Vec<KernelOutcome>,
    lowered: Vec<Lowered>,
    rows: Vec<dispatch::Row>,
    shipped: Vec<ShippedKernel>,
}

/// The PTX with every tuned kernel spliced in and its variants added, and each kernel's
/// outcome.
fn rewrite(ptx: &str, arch: &str, dir: &Path) -> Result<Rewritten, String> {
    let source = source_from_env()?;
    let policy = Policy::from_env();
    let kernels = captured_kernels(dir, arch)?;
    let Planned {
        mut outcomes,
        lowered,
        rows,
        shipped,
    } = plan_and_lower(
        &kernels.iter().collect::<Vec<_>>(),
        &source,
        &policy,
        arch,
        dir,
    )?;
    if lowered.is_empty() {
        return Ok(Rewritten::unchanged(outcomes));
    }
    let tuned: Vec<Tuned> = lowered
        .iter()
        .map(|l| Tuned {
            kernel: &l.kernel,
            ptx: &l.ptx,
            tag: &l.tag,
            variant: l.variant.as_deref(),
        })
        .collect();
    match splice::splice(ptx, &tuned) {
        Ok(text) => Ok(Rewritten {
            text: Some(text),
            outcomes,
            rows,
            shipped,
        }),
        Err(e) => {
            for o in outcomes.iter_mut().filter(|o| o.status == Status::Applied) {
                o.status = Status::Failed;
                o.detail = Some(e.to_string());
                o.variants.clear();
            }
            Ok(Rewritten::unchanged(outcomes))
        }
    }
}

/// Each of `kernels` (one architecture's) planned from `source` and its winners lowered.
fn plan_and_lower(
    kernels: &[&KernelModule],
    source: &Source,
    policy: &Policy,
    arch: &str,
    dir: &Path,
) -> Result<Planned, String> {
    let mut known = None; // the store's kernels, read only if a kernel has no winner
    let mut outcomes = Vec::new();
    let mut lowered = Vec::new();
    let mut rows = Vec::new();
    let mut shipped = Vec::new();
    for &km in kernels {
        let record = as_record(km);
        let mut o = KernelOutcome {
            demangled: km.signature.demangled.clone(),
            hash: km.hash.clone(),
            arch: arch.to_owned(),
            status: Status::NotTuned,
            speedup: None,
            gpu: None,
            detail: None,
            variants: Vec::new(),
            refused: Vec::new(),
        };
        let plan = source.plan(&record, policy).map_err(|e| e.to_string())?;
        o.refused = plan
            .refused
            .iter()
            .map(|r| format!("{}: {}", r.entry, r.why))
            .collect();
        if plan.is_empty() && o.refused.is_empty() && !plan.withheld.is_empty() {
            o.status = Status::Withheld;
            o.detail = Some(plan.withheld.join("; "));
            outcomes.push(o);
            continue;
        }
        if plan.is_empty() && !o.refused.is_empty() {
            o.status = Status::Refused;
            o.detail = Some(std::mem::take(&mut o.refused).join("; "));
            outcomes.push(o);
            continue;
        }
        if plan.is_empty() {
            let others = known.get_or_insert_with(|| match source {
                Source::Store(s) => s.kernels().unwrap_or_default(),
                Source::File(_) => Vec::new(),
            });
            if source.tuned_before(&record, others) {
                o.status = Status::Changed;
            }
            outcomes.push(o);
            continue;
        }
        let (code, kernel_rows) = lower_plan(km, &plan, arch, dir, &mut o);
        shipped.extend(shipped_kernel(km, arch, &code));
        lowered.extend(code);
        rows.extend(kernel_rows);
        outcomes.push(o);
    }
    Ok(Planned {
        outcomes,
        lowered,
        rows,
        shipped,
    })
}

/// The table's statement of a kernel's tuned code: the PTX hash of each piece lowered (None
/// when nothing was).
fn shipped_kernel(km: &KernelModule, arch: &str, code: &[Lowered]) -> Option<ShippedKernel> {
    if code.is_empty() {
        return None;
    }
    let ptx = code
        .iter()
        .map(|l| l.ptx_hash.as_str().to_owned())
        .collect();
    Some(ShippedKernel {
        name: km.signature.name.clone(),
        arch: arch.to_owned(),
        kernel: km.hash.clone(),
        ptx,
    })
}

/// One kernel's plan lowered as the search lowered it: the generic code's replacement and each
/// variant that gives its measured PTX (one that does not is left out; the others and the
/// generic code do not depend on it), with the table's rows; `o` says what became of them.
fn lower_plan(
    km: &KernelModule,
    plan: &crate::plan::Planned,
    arch: &str,
    dir: &Path,
    o: &mut KernelOutcome,
) -> (Vec<Lowered>, Vec<dispatch::Row>) {
    let name = &km.signature.name;
    let tag = km.hash[..8].to_owned();
    let (mut lowered, mut rows) = (Vec::new(), Vec::new());
    if let Some(w) = &plan.generic {
        match lower_winner(km, w, dir) {
            Ok((text, ptx_hash)) => {
                o.status = Status::Applied;
                o.speedup = Some(w.confirmed_speedup.unwrap_or(w.speedup));
                o.gpu = Some(w.gpu.clone());
                o.detail = w.rewrite.as_ref().map(|r| {
                    format!(
                        "source rewrite {} of `r3 evolve`, not in your source: `r3 report` shows its diff to adopt",
                        r.attempt
                    )
                });
                lowered.push(Lowered {
                    kernel: name.clone(),
                    ptx: text,
                    ptx_hash,
                    tag: tag.clone(),
                    variant: None,
                });
            }
            Err((status, why)) => (o.status, o.detail) = (status, Some(why)),
        }
    }
    for (n, v) in plan.variants.iter().enumerate() {
        let (text, ptx_hash) = match lower_winner(km, &v.winner, dir) {
            Ok(lowered) => lowered,
            Err((status, why)) => {
                if o.status == Status::NotTuned {
                    (o.status, o.detail) = (status, Some(why));
                }
                continue;
            }
        };
        let entry = dispatch::entry_name(name, &tag, n + 1);
        rows.push(dispatch::Row {
            kernel: name.clone(),
            arch: arch.to_owned(),
            entry: entry.clone(),
            guard: v.guard.clone(),
        });
        if let Some(r) = &v.winner.rewrite {
            o.detail = Some(format!(
                "source rewrite {} of `r3 evolve`, not in your source, behind a guard of the launches it was checked on: `r3 report` shows its diff to adopt",
                r.attempt
            ));
        }
        o.variants.push(AppliedVariant {
            entry: entry.clone(),
            guard: v.guard.clone(),
            speedup: v.winner.confirmed_speedup.unwrap_or(v.winner.speedup),
        });
        lowered.push(Lowered {
            kernel: name.clone(),
            ptx: text,
            ptx_hash,
            tag: format!("{tag}v{}", n + 1),
            variant: Some(entry),
        });
    }
    if !o.variants.is_empty() && o.status == Status::NotTuned {
        // Clang's code stays the generic entry; the variants are r3's.
        o.status = Status::Applied;
        o.gpu = plan.variants.first().map(|v| v.winner.gpu.clone());
    }
    (lowered, rows)
}

fn source_from_env() -> Result<Source, String> {
    let from = std::env::var(FROM_ENV).map_err(|_| format!("{FROM_ENV} is not set"))?;
    match from.split_once(':') {
        Some(("store", dir)) => Store::open(Path::new(dir))
            .map(Source::Store)
            .map_err(|e| e.to_string()),
        Some(("file", f)) => Source::file(Path::new(f)).map_err(|e| e.to_string()),
        _ => Err(format!(
            "{FROM_ENV}={from}: expected store:DIR or file:PATH"
        )),
    }
}

/// The kernels of this compile for `arch` (every architecture's for ""), split from the
/// captured IR as the store has them.
fn captured_kernels(dir: &Path, arch: &str) -> Result<Vec<KernelModule>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "bc"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let ctx = inkwell::context::Context::create();
        let module = crate::ir::load_file(&ctx, &f).map_err(|e| e.to_string())?;
        let mut kernels =
            extract::split(&module, &f.display().to_string()).map_err(|e| e.to_string())?;
        // Without debug info the split knows no source file; the module names it (relative
        // to clang's working directory, which is ours), and `tuned_before` compares files.
        let named = PathBuf::from(module.get_source_file_name().to_string_lossy().as_ref());
        let file = std::fs::canonicalize(&named)
            .unwrap_or(named)
            .display()
            .to_string();
        for k in kernels.iter_mut().filter(|k| k.signature.source.is_none()) {
            k.signature.source = Some(SourceLoc {
                file: file.clone(),
                line: 0,
            });
        }
        out.extend(
            kernels
                .into_iter()
                .filter(|k| arch.is_empty() || k.signature.arch == arch),
        );
    }
    // A compile may run the pipeline twice (-save-temps): the same module is captured twice.
    let mut seen = std::collections::HashSet::new();
    out.retain(|k| seen.insert(k.hash.clone()));
    Ok(out)
}

fn as_record(km: &KernelModule) -> KernelRecord {
    KernelRecord {
        format: crate::store::FORMAT,
        hash: km.hash.clone(),
        signature: km.signature.clone(),
        compile: crate::store::CompileCommand {
            cwd: PathBuf::new(),
            args: Vec::new(),
            env: Default::default(),
            clang: PathBuf::new(),
            clang_version: String::new(),
        },
        r3_version: env!("CARGO_PKG_VERSION").into(),
        variant_of: None,
    }
}

/// The winner's PTX, lowered in a child process as the search lowered it (or as the driver's
/// look ahead lowered it for this compile), and its hash, only if it is the PTX that was
/// measured.
fn lower_winner(
    km: &KernelModule,
    w: &Winner,
    dir: &Path,
) -> Result<(String, PtxHash), (Status, String)> {
    let failed = |m: String| (Status::Failed, m);
    // Carried code (nvcc's, a rewrite's) is part of what is lowered.
    let carried = w.code.as_deref().map(PtxHash::of_ptx);
    let job_key = serde_json::json!([km.hash, w.candidate, w.arch, w.ptx_isa, carried]).to_string();
    let cached = dir.join(format!(
        "lowered-{}.json",
        crate::kernel::short_hash(job_key.as_bytes())
    ));
    let lowered = match std::fs::read(&cached)
        .ok()
        .and_then(|b| serde_json::from_slice::<(String, PtxHash)>(&b).ok())
    {
        Some(done) => done,
        None => {
            let done = lower_winner_now(km, w, dir).map_err(failed)?;
            // Kept for the compile's ptxas runs, after the driver worked out the table.
            if let Ok(b) = serde_json::to_vec(&done) {
                let _ = crate::store::write_atomic(&cached, &b);
            }
            done
        }
    };
    let (ptx, ptx_hash) = lowered;
    match &w.ptx_hash {
        Some(h) if *h != ptx_hash => Err((
            Status::PtxDiffers,
            format!(
                "measured PTX {h}, lowered now {ptx_hash} (tuned by r3 {})",
                w.r3_version
            ),
        )),
        Some(_) => Ok((ptx, ptx_hash)),
        // Simulated trials measured nothing; they reach here only under R3_APPLY_SIMULATED=1.
        None if w.simulated => Ok((ptx, ptx_hash)),
        None => Err((
            Status::Unverified,
            "the winner names no measured PTX (ptx_hash)".into(),
        )),
    }
}

/// The winner lowered in a child process: its PTX and that PTX's hash.
fn lower_winner_now(
    km: &KernelModule,
    w: &Winner,
    dir: &Path,
) -> Result<(String, PtxHash), String> {
    if w.candidate.is_nvcc() || w.rewrite.is_some() {
        // Not lowered from this kernel: nvcc's code, or a rewrite's, as carried; shipped only
        // where its hash is the measured one.
        let code = w.code.as_ref().ok_or("the winner's code is missing")?;
        return Ok((code.clone(), PtxHash::of_ptx(code)));
    }
    let bitcode = dir.join(format!("winner-{}.bitcode", km.hash));
    std::fs::write(&bitcode, &km.bitcode).map_err(|e| e.to_string())?;
    let job = LowerJob {
        bitcode,
        kernel_hash: km.hash.clone(),
        candidate: w.candidate.clone(),
        target: Codegen {
            sm: w.arch.clone(),
            ptx: w.ptx_isa.clone(),
            opt_level: 3,
        },
        mutation: None,
    };
    let lowered = lower_isolated(&job).map_err(|o| o.to_string())?;
    Ok((lowered.ptx, lowered.ptx_hash))
}

fn failed_all(arch: &str, why: String) -> KernelOutcome {
    KernelOutcome {
        demangled: "(all kernels)".into(),
        hash: Default::default(),
        arch: arch.to_owned(),
        status: Status::Failed,
        speedup: None,
        gpu: None,
        detail: Some(why),
        variants: Vec::new(),
        refused: Vec::new(),
    }
}

fn report(dir: &Path, arch: &str, outcomes: &[KernelOutcome]) {
    let path = dir.join(format!("applied-{arch}-{}.json", std::process::id()));
    let text = serde_json::to_vec(outcomes).expect("outcomes serialize");
    let _ = crate::store::write_atomic(&path, &text);
}

/// The outcomes the shim wrote into `dir` during one compile.
pub fn outcomes_in(dir: &Path) -> Vec<KernelOutcome> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("applied-"))
        })
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| std::fs::read(f).ok())
        .filter_map(|b| serde_json::from_slice::<Vec<KernelOutcome>>(&b).ok())
        .flatten()
        .collect()
}

/// ptxas's options whose value may follow as the next argument (`--opt VALUE`); the others
/// take none, or theirs joined (`--opt=VALUE`, `-O3`, `-m64`).
const PTXAS_VALUE_OPTIONS: &[&str] = &[
    "-o",
    "--output-file",
    "-arch",
    "--gpu-name",
    "-maxrregcount",
    "--maxrregcount",
    "-e",
    "--entry",
    "-dlcm",
    "--def-load-cache",
    "-dscm",
    "--def-store-cache",
    "-optf",
    "--options-file",
    "-fmad",
    "--fmad",
    "-split-compile",
    "--split-compile",
    "-allow-expensive-optimizations",
    "--allow-expensive-optimizations",
    "-pic",
    "--position-independent-code",
    "-ewp",
    "--extensible-whole-program",
];

/// ptxas's operands: the arguments that are neither options nor an option's value.
fn operands(args: &[OsString]) -> Vec<&OsString> {
    let mut out = Vec::new();
    let mut value_next = false;
    for a in args {
        let text = a.to_string_lossy();
        if std::mem::take(&mut value_next) {
            continue;
        }
        if text.starts_with('-') {
            value_next = PTXAS_VALUE_OPTIONS.contains(&text.as_ref());
            continue;
        }
        out.push(a);
    }
    out
}

/// The PTX input, found among ptxas's operands whatever options clang or the user
/// (`-Xcuda-ptxas`) put around it; Err says why there is none to rewrite.
fn input_of(args: &[OsString]) -> Result<PathBuf, String> {
    let ptx: Vec<&OsString> = operands(args)
        .into_iter()
        .filter(|a| {
            Path::new(a)
                .extension()
                .is_some_and(|x| x == "s" || x == "ptx")
        })
        .collect();
    match ptx.as_slice() {
        [one] => Ok(PathBuf::from(one)),
        [] => Err("ptxas was given no PTX file (.s or .ptx) r3 could find".into()),
        many => Err(format!(
            "ptxas was given {} PTX files, and r3 rewrites one",
            many.len()
        )),
    }
}

/// The architecture ptxas assembles for (`--gpu-name sm_90`, `-arch=sm_90`, ...).
fn gpu_name(args: &[OsString]) -> Option<String> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    args.iter().enumerate().rev().find_map(|(i, a)| {
        for flag in ["--gpu-name", "-arch"] {
            if a == flag {
                return args.get(i + 1).cloned();
            }
            if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v.to_owned());
            }
        }
        None
    })
}

fn run(ptxas: &Path, args: &[OsString]) -> i32 {
    match Command::new(ptxas).args(args).status() {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("r3: error: cannot run {}: {e}", ptxas.display());
            1
        }
    }
}

/// ptxas's diagnostics less those about r3's variants (a `.minnctapersm` it ignores, say): the
/// build's output stays what clang's code gives.
fn without_variant_lines(stderr: &[u8]) -> Vec<u8> {
    stderr
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| !line.windows(5).any(|w| w == b"__r3_"))
        .flatten()
        .copied()
        .collect()
}

/// Runs ptxas on the spliced PTX, keeping its diagnostics to itself: if it fails, clang's PTX is
/// assembled instead and only that run's output counts.
fn run_quiet(ptxas: &Path, args: &[OsString]) -> i32 {
    match Command::new(ptxas).args(args).output() {
        Ok(out) if out.status.success() => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&out.stdout);
            let _ = std::io::stderr().write_all(&without_variant_lines(&out.stderr));
            0
        }
        Ok(out) => out.status.code().unwrap_or(1).max(1),
        Err(_) => 1,
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::PathBuf;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_ptx_input_is_found_whatever_options_surround_it() {
        let clang = "-m64 -O3 --gpu-name sm_90 --output-file /t/a-sm_90.cubin /t/a-sm_90.s";
        let input = |extra: &str| super::input_of(&args(&format!("{clang} {extra}")));
        let want = Ok(PathBuf::from("/t/a-sm_90.s"));
        assert_eq!(input(""), want);
        // -Xcuda-ptxas options come after the input; -fgpu-rdc adds -c.
        assert_eq!(input("--maxrregcount=64"), want);
        assert_eq!(input("--maxrregcount 64"), want);
        assert_eq!(input("-v"), want);
        assert_eq!(input("-c"), want);
        assert_eq!(input("--fmad false -dlcm ca"), want);
        // An output named like PTX is not the input.
        let out_s = super::input_of(&args("--gpu-name sm_90 -o /t/x.s /t/in.ptx"));
        assert_eq!(out_s, Ok(PathBuf::from("/t/in.ptx")));
        assert!(super::input_of(&args("--gpu-name sm_90 -o /t/x.cubin"))
            .unwrap_err()
            .contains("no PTX file"));
        assert!(super::input_of(&args("/t/a.s /t/b.s"))
            .unwrap_err()
            .contains("2 PTX files"));
    }

    #[test]
    fn the_architecture_is_read_in_each_form_ptxas_takes() {
        let gpu = |line: &str| super::gpu_name(&args(line));
        assert_eq!(gpu("--gpu-name sm_90 x.s").as_deref(), Some("sm_90"));
        assert_eq!(gpu("--gpu-name=sm_80 x.s").as_deref(), Some("sm_80"));
        assert_eq!(gpu("-arch sm_86 x.s").as_deref(), Some("sm_86"));
        assert_eq!(gpu("-arch=sm_75 x.s").as_deref(), Some("sm_75"));
        assert_eq!(gpu("x.s"), None);
    }

    #[test]
    fn ptxas_lines_about_variants_are_left_out_and_the_others_kept() {
        let err = b"ptxas warning : Value of threads per SM for entry _Z1kv__r3_01234567_v1 is out of range\nptxas warning : something of clang's\n";
        assert_eq!(
            super::without_variant_lines(err),
            b"ptxas warning : something of clang's\n"
        );
    }
}
