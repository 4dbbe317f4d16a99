//! `r3 tune --dry-run`: the compile half of a search, without a GPU. Candidates from the search
//! space are run through their pipelines and lowered to PTX, which ptxas (when the CUDA SDK has
//! it) must accept. Nothing is timed: that needs a GPU.

use super::space::Space;
use crate::candidate::Candidate;
use crate::lower::{self, Codegen};
use rand::SeedableRng;
use serde::Serialize;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct DryRun {
    /// The kernel's label (its demangled name), for the table.
    pub kernel: String,
    pub candidates: usize,
    pub compiled: usize,
    /// Candidates whose pipeline or codegen failed, with the first message.
    pub compile_errors: Vec<String>,
    pub distinct_ptx: usize,
    /// Checked by ptxas: (accepted, rejected); None without ptxas.
    pub ptxas: Option<(usize, usize)>,
    pub ptxas_errors: Vec<String>,
    /// PTX instructions: baseline, fewest, most.
    pub instructions: (usize, usize, usize),
    /// Registers by ptxas: fewest, most.
    pub registers: Option<(u32, u32)>,
    pub median_compile_ms: f64,
    /// Compiled without optimization (-O0): every candidate gives the baseline's code.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unoptimized: bool,
    /// nvcc's build of the kernel, the search's one candidate not LLVM's: made (and kept in the
    /// store) and checked by ptxas, or why not; None where not asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvcc: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("no stored kernel matches; see `r3 kernels`")]
    NoKernel,
}

/// The stored kernels a dry run compiles: every kernel of the current builds (`word` None; an
/// old version ships nothing), or every build of the one kernel `word` names.
pub fn kernels<'a>(
    index: &'a crate::store::identity::Index,
    word: Option<&str>,
) -> Result<Vec<&'a crate::store::KernelRecord>, DryRunError> {
    let kernels = match word {
        None => index.current(),
        Some(word) => index.select_kernel(word)?,
    };
    if kernels.is_empty() {
        return Err(DryRunError::NoKernel);
    }
    Ok(kernels)
}

/// The dry run of each stored kernel, for the architecture it was compiled for, with ptxas
/// where the CUDA SDK has one; `done` hears of each kernel as it finishes.
#[allow(clippy::too_many_arguments)]
pub fn dry_run_kernels(
    store: &crate::store::Store,
    kernels: &[&crate::store::KernelRecord],
    space: &Space,
    n: usize,
    seed: u64,
    nvcc: bool,
    mut done: impl FnMut(&DryRun),
) -> Vec<DryRun> {
    let ptxas = crate::toolchain::find_cuda(None)
        .ok()
        .map(|c| c.path.join("bin/ptxas"))
        .filter(|p| p.exists());
    let mut rows = Vec::new();
    for k in kernels {
        let target = Codegen {
            sm: k.signature.arch.clone(),
            ptx: None,
            opt_level: 3,
        };
        let bitcode = store.kernel_dir(&k.hash).join("module.bc");
        let mut row = dry_run(&bitcode, &k.hash, &target, space, n, seed, ptxas.as_deref());
        row.kernel = k.signature.demangled.clone();
        row.unoptimized = k.signature.unoptimized;
        if nvcc {
            row.nvcc = Some(nvcc_checked(store, k, ptxas.as_deref()));
        }
        done(&row);
        rows.push(row);
    }
    rows
}

/// nvcc's code of `k` for its architecture, made as a search makes it, in words: its size and
/// ptxas's registers, or why there is none (or why ptxas refused it).
fn nvcc_checked(
    store: &crate::store::Store,
    k: &crate::store::KernelRecord,
    ptxas: Option<&Path>,
) -> String {
    let ptx = match crate::nvcc::code(store, k, &k.signature.arch) {
        Ok(ptx) => ptx,
        Err(why) => return format!("not built: {why}"),
    };
    let n = crate::ptx::stats::stats(&ptx).instructions;
    match ptxas.map(|p| lower::ptxas_info(p, &ptx, &k.signature.arch)) {
        Some(Ok(info)) => format!("{n} PTX instructions, {} registers", info.registers),
        Some(Err(e)) => format!("{n} PTX instructions; ptxas refused it: {e}"),
        None => format!("{n} PTX instructions"),
    }
}

/// Whether a dry run found something wrong: a kernel of which nothing compiled, or PTX that
/// ptxas rejected.
pub fn any_failed(rows: &[DryRun]) -> bool {
    rows.iter()
        .any(|r| r.ptxas.is_some_and(|(_, rejected)| rejected > 0) || r.compiled == 0)
}

/// The baseline and `n - 1` candidates of the space (seeded), lowered and checked.
pub fn dry_run(
    bitcode: &Path,
    kernel: &crate::kernel::KernelHash,
    target: &Codegen,
    space: &Space,
    n: usize,
    seed: u64,
    ptxas: Option<&Path>,
) -> DryRun {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let start = space.start();
    let mut cands = vec![Candidate::baseline()];
    while cands.len() < n.max(1) {
        let c = if cands.len() % 2 == 0 {
            space.sample(&mut rng)
        } else {
            space.mutate(&start, &mut rng)
        };
        cands.push(c);
    }
    let results = lower_parallel(bitcode, kernel, target, &cands);
    let mut ptx_seen = std::collections::HashSet::new();
    let mut out = DryRun {
        kernel: kernel.to_string(),
        candidates: cands.len(),
        compiled: 0,
        compile_errors: Vec::new(),
        distinct_ptx: 0,
        ptxas: ptxas.map(|_| (0, 0)),
        ptxas_errors: Vec::new(),
        instructions: (0, usize::MAX, 0),
        registers: None,
        median_compile_ms: 0.0,
        unoptimized: false,
        nvcc: None,
    };
    let mut times = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        let (ptx, ms) = match r {
            Ok(t) => t,
            Err(e) => {
                out.compile_errors.push(e);
                continue;
            }
        };
        out.compiled += 1;
        times.push(ms);
        let n = crate::ptx::stats::stats(&ptx).instructions;
        if i == 0 {
            out.instructions.0 = n;
        }
        out.instructions.1 = out.instructions.1.min(n);
        out.instructions.2 = out.instructions.2.max(n);
        if !ptx_seen.insert(blake3::hash(ptx.as_bytes())) {
            continue;
        }
        if let (Some(p), Some((ok, bad))) = (ptxas, out.ptxas.as_mut()) {
            match lower::ptxas_info(p, &ptx, &target.sm) {
                Ok(info) => {
                    *ok += 1;
                    let (lo, hi) = out.registers.unwrap_or((u32::MAX, 0));
                    out.registers = Some((lo.min(info.registers), hi.max(info.registers)));
                }
                Err(e) => {
                    *bad += 1;
                    out.ptxas_errors.push(e);
                }
            }
        }
    }
    out.distinct_ptx = ptx_seen.len();
    if out.instructions.1 == usize::MAX {
        out.instructions.1 = 0;
    }
    times.sort_by(f64::total_cmp);
    out.median_compile_ms = times.get(times.len() / 2).copied().unwrap_or(0.0);
    out
}

type Lowered = Result<(String, f64), String>;

fn lower_parallel(
    bitcode: &Path,
    kernel: &crate::kernel::KernelHash,
    target: &Codegen,
    cands: &[Candidate],
) -> Vec<Lowered> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(cands.len())
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut slots: Vec<Option<Lowered>> = vec![None; cands.len()];
    let done = std::sync::Mutex::new(&mut slots);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = cands.get(i) else { break };
                let r = lower_one(bitcode, kernel, target, c);
                done.lock().unwrap()[i] = Some(r);
            });
        }
    });
    slots
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not lowered".into())))
        .collect()
}

/// In a child process, as the search does: a pass order that crashes LLVM is a compile error.
fn lower_one(
    bitcode: &Path,
    kernel: &crate::kernel::KernelHash,
    target: &Codegen,
    c: &Candidate,
) -> Lowered {
    let job = crate::lower::isolated::LowerJob {
        bitcode: bitcode.to_owned(),
        kernel_hash: kernel.clone(),
        candidate: c.clone(),
        target: target.clone(),
        mutation: None,
    };
    match crate::lower::isolated::lower_isolated(&job) {
        Ok(l) => Ok((l.ptx, l.passes_ms + l.codegen_ms)),
        Err(f) => Err(f.message),
    }
}

pub fn render(rows: &[DryRun]) -> String {
    let mut out = format!(
        "{:<44} {:>5} {:>8} {:>8} {:>10} {:>16} {:>9} {:>8}\n",
        "kernel", "cands", "compiled", "distinct", "ptxas ok", "PTX instr (O3)", "regs", "ms each"
    );
    for r in rows {
        let name: String = r.kernel.chars().take(44).collect();
        let ptxas = r
            .ptxas
            .map(|(ok, bad)| format!("{ok}/{}", ok + bad))
            .unwrap_or_else(|| "no ptxas".into());
        let regs = r
            .registers
            .map(|(a, b)| format!("{a}-{b}"))
            .unwrap_or_else(|| "-".into());
        let instr = format!(
            "{}-{} ({})",
            r.instructions.1, r.instructions.2, r.instructions.0
        );
        out += &format!(
            "{name:<44} {:>5} {:>8} {:>8} {:>10} {:>16} {:>9} {:>8.1}\n",
            r.candidates, r.compiled, r.distinct_ptx, ptxas, instr, regs, r.median_compile_ms
        );
        if r.unoptimized {
            out += "    compiled without optimization (-O0): no pass changes it, so r3 does not tune it; rebuild with -O3\n";
        }
        for e in r.compile_errors.iter().chain(&r.ptxas_errors).take(2) {
            out += &format!("    {}\n", e.lines().next().unwrap_or(""));
        }
        if let Some(n) = &r.nvcc {
            out += &format!("    nvcc -O3: {}\n", n.lines().next().unwrap_or(""));
        }
    }
    out
}
