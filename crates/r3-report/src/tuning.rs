//! `r3 report`: what tuning found, per kernel and GPU, from the trials database.
//!
//! [`build`] reads the store into a [`Report`], which is also the JSON document
//! (`docs/report-schema.md`, `schema_version` [`SCHEMA_VERSION`]); `render` turns it into
//! text, Markdown or one self-contained HTML file. Nothing here runs on a GPU: pass importance
//! comes from ablation trials already in the database ([`crate::passes::diff::ablations`] makes
//! them), and code statistics are recomputed on the CPU for the baseline and the best
//! candidate only.

use super::code::{self, CodeStats, PassStep};
use crate::candidate::Candidate;
use crate::kernel::{KernelHash, PtxHash, TrialsKey};
use crate::lower::Codegen;
use crate::passes::diff::{self as passes, DiffOp};
use crate::store::identity::UsableLaunches;
use crate::store::outcome::{Outcome, TimeStats};
use crate::store::trials::{slug, TrialRecord};
use crate::store::{identity, KernelRecord, Store, StoreError};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The JSON report's schema version; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no trials in store {store}; fix: run `r3 tune` first")]
    NoTrials { store: PathBuf },
    #[error("kernel '{kernel}': no trials in store {store}; kernels with trials: {known}; fix: name one of these, or `r3 tune {kernel}` first")]
    NoMatch {
        kernel: String,
        store: PathBuf,
        known: String,
    },
    #[error("kernel {kernel} ({path}): best pipeline: {msg}; fix: resume the search with this r3 (`r3 tune {kernel} --resume`), or move the file away")]
    Pipeline {
        kernel: String,
        path: PathBuf,
        msg: String,
    },
}

/// What to report on.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Kernel names, mangled or demangled, or hashes (prefixes); empty: every kernel with trials.
    pub kernels: Vec<String>,
    /// `ptxas` for registers and spills; None: shown as unavailable.
    pub ptxas: Option<PathBuf>,
    /// Recompute code statistics (lowering the stored module); off, they are "not computed".
    pub code: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema_version: u32,
    pub r3_version: String,
    pub store: String,
    pub summary: Summary,
    /// Whole programs: predicted (and, where timed, measured) speedups over their launch
    /// census (absent when no program has one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<super::programs::ProgramReport>,
    pub kernels: Vec<KernelReport>,
    /// Source rewrites `r3 evolve` measured or stored (absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rewrites: Vec<super::rewrites::RewriteReport>,
}

/// Measured searches only: a simulation's speedups are a landscape table's, not a GPU's, so
/// they are summarized apart (`simulated`) and never averaged with measured ones.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Kernel × GPU pairs reported.
    pub kernels: usize,
    /// Pairs with a valid best trial (the geometric means are over these).
    pub tuned: usize,
    /// Of each tuned pair's best trial (what the search found).
    pub geomean_speedup: Option<f64>,
    /// Tuned pairs whose searched launch runs a winner once applied (the rest keep clang's code).
    pub shipped: usize,
    /// Of what ships (`ApplyReport::shipped_speedup`, 1 where clang's code is kept): what
    /// `r3 apply` and `r3 export` build with, under the same policy.
    pub geomean_shipped: Option<f64>,
    pub total_trials: usize,
    /// Sum of the pairs' `tuning_s`.
    pub total_tuning_s: f64,
    /// One row per pair, fastest best speedup first (pairs without one last).
    pub rows: Vec<SummaryRow>,
    /// The simulated searches, summarized alike (absent when there are none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulated: Option<Box<Summary>>,
    /// Against nvcc's code, over the pairs whose search measured it (absent where none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vs_nvcc: Option<VsNvcc>,
}

/// What ships against nvcc -O3, over the tuned pairs whose nvcc build ran right.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VsNvcc {
    pub kernels: usize,
    /// Geometric mean of what ships over nvcc's code.
    pub geomean_shipped: f64,
    /// Pairs where nvcc's code beat clang -O3's by more than 2% (`NVCC_FASTER`).
    pub nvcc_faster: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub kernel: String,
    pub name: String,
    pub gpu: String,
    /// The best trial's.
    pub speedup: Option<f64>,
    /// What ships (`ApplyReport::shipped_speedup`).
    pub shipped_speedup: f64,
    pub shipped_trial: Option<u32>,
    pub baseline_us: Option<f64>,
    pub best_us: Option<f64>,
    pub trials: usize,
    pub tuning_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct KernelReport {
    /// The kernel as the trials name it.
    pub kernel: TrialsKey,
    /// Demangled name when the kernel is in the store, else `kernel`.
    pub name: String,
    /// The stored kernel's hash, when found.
    pub hash: Option<String>,
    /// No current build contains the kernel (an old version: its source was edited since).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub old: bool,
    pub gpu: String,
    /// A simulation answered the trials (`r3 tune --simulate`), not a GPU: the GPU name says
    /// so (`simulated: …`), and the summary keeps it apart.
    pub simulated: bool,
    pub driver: String,
    pub trials_file: String,
    pub strategy: String,
    pub seed: u64,
    pub trials: usize,
    /// Wall time from the first trial's start to the last trial's end.
    pub tuning_s: f64,
    /// Sums over trials: compiling (passes and codegen) and measuring on the GPU.
    pub compile_s: f64,
    pub measure_s: f64,
    pub outcomes: Outcomes,
    /// clang -O3, timed interleaved with the best candidate (the best's reference).
    pub baseline: Option<TimeStats>,
    pub best: Option<Best>,
    /// nvcc's code, the second baseline: absent where the search did not measure it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvcc: Option<NvccBaseline>,
    pub pipeline: Option<PipelineReport>,
    pub importance: Importance,
    pub convergence: Vec<ConvergencePoint>,
    pub top: Vec<TopConfig>,
    pub code: CodeReport,
    /// What `--r3-apply` would build with from these trials.
    pub apply: ApplyReport,
    /// How the search started and ended, where the store recorded it.
    pub search: SearchNote,
}

/// A search's warm start (the shipped recipes and the store's earlier searches it measured
/// first) and how its last run ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SearchNote {
    /// Recipes measured right after the baseline (names; `*`: the kernel met its
    /// preconditions).
    pub recipes: Vec<String>,
    /// The kernel's -O3 traits that chose them.
    pub traits: Vec<String>,
    /// Earlier searches in the store it learned from.
    pub learned_from: usize,
    /// "budget", "time" (cut short by --time) or "interrupted"; None when not recorded.
    pub stop: Option<String>,
    /// The budget of the last run, where recorded.
    pub budget: Option<u32>,
    /// The L2 state it measured in and why (`--l2`), where recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l2: Option<crate::store::l2::Choice>,
}

/// What apply ships from a kernel's trials (`apply::plan`, the policy in the environment).
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    /// The trial apply builds with as the generic code; None when it keeps clang's code.
    pub trial: Option<u32>,
    pub speedup: Option<f64>,
    /// The shipped trial the searched launch runs (the generic code, or a variant whose guard
    /// admits it); None: clang's code.
    pub shipped_trial: Option<u32>,
    /// Its speedup there (the confirmed one where re-measured); 1 where clang's code is kept.
    pub shipped_speedup: f64,
    /// Why, in words: the best, another trial (and why not the best), or -O3.
    pub note: String,
    /// The other recorded launches whose outputs the shipped trial reproduced when it was
    /// confirmed (the searched launch aside); empty where there were none, or none checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub validated_on: Vec<String>,
    /// Variants shipped beside it, each taken at launches its guard admits, in the order the
    /// runtime tries them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<VariantReport>,
}

/// A variant apply ships, and which of the kernel's recorded launches would run it.
#[derive(Debug, Clone, Serialize)]
pub struct VariantReport {
    pub trial: u32,
    pub speedup: Option<f64>,
    /// The guard in words: `threads <= 256`, folded values (`arg2=0x00040000 block=256,1,1`).
    pub guard: String,
    /// Recorded launches (that replay) whose values the guard admits, of all of them.
    pub launches_taken: usize,
    pub launches_recorded: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Outcomes {
    pub valid: usize,
    pub wrong_output: usize,
    pub crashed: usize,
    pub timed_out: usize,
    pub compile_error: usize,
    /// Timed on a prefix of the launch and dropped there as clearly slower (replay's screen).
    #[serde(skip_serializing_if = "is_zero")]
    pub screened: usize,
    /// Trials whose PTX equalled an earlier one (outcome reused, not measured again).
    pub duplicates: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Best {
    pub trial: u32,
    pub candidate: Candidate,
    pub time: TimeStats,
    /// Candidate median over baseline median (lower is better).
    pub ratio: f64,
    /// Baseline median over candidate median (higher is better).
    pub speedup: f64,
}

/// nvcc's build of the kernel as the search measured it (`Candidate::nvcc`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NvccBaseline {
    pub trial: u32,
    /// nvcc's code over clang -O3's time (higher: nvcc is faster); None where it did not run
    /// right.
    pub speedup: Option<f64>,
    /// What ships over nvcc's code: how much faster than nvcc -O3 the program runs the kernel.
    pub shipped_over_nvcc: Option<f64>,
    /// Why nvcc's code has no speed: it did not compile (nvcc's or r3's reason), or its
    /// outputs were wrong.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

/// nvcc's code counts as faster than clang's where it is this much faster: closer is noise.
pub const NVCC_FASTER: f64 = 1.02;

impl NvccBaseline {
    /// Whether nvcc's code beat clang -O3's by more than noise.
    pub fn nvcc_faster(&self) -> bool {
        self.speedup.is_some_and(|s| s > NVCC_FASTER)
    }
}

/// The nvcc baseline of a search's trials, what ships being `shipped` times as fast as -O3:
/// nvcc's trial's confirmed speed where it was re-measured (as `shipped` is), else its
/// search's. Against its search's figure, nvcc's own code confirmed at 1.228x read as shipping
/// 0.974x of nvcc's (device_calls, H200, 2026-11-30).
pub fn nvcc_baseline(
    recs: &[TrialRecord],
    confirmed: &[crate::store::trials::Confirmation],
    shipped: f64,
) -> Option<NvccBaseline> {
    let r = recs.iter().find(|r| r.candidate.is_nvcc())?;
    let again = crate::store::winner::confirmation_of(confirmed, r.trial).and_then(|c| c.ratio());
    let speedup = again.or_else(|| r.ratio()).map(|x| 1.0 / x);
    let why_not = match &r.outcome {
        Outcome::CompileError { message } => {
            Some(message.strip_prefix("nvcc: ").unwrap_or(message).to_owned())
        }
        Outcome::Valid { .. } => None,
        other => Some(other.to_string()),
    };
    Some(NvccBaseline {
        trial: r.trial,
        speedup,
        shipped_over_nvcc: speedup.map(|s| shipped / s),
        why_not,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct PipelineReport {
    /// The best pipeline in `opt -passes=` syntax, as recorded.
    pub text: String,
    /// Passes in O3 and in the best pipeline (`default<On>` expanded).
    pub o3_passes: usize,
    pub best_passes: usize,
    pub removed: usize,
    pub added: usize,
    pub changed: usize,
    /// Edit script from the O3 pipeline to the best one.
    pub diff: Vec<DiffOp>,
    /// The same as people read it (`passes::diff::Edit`): a switched parameter, a moved pass,
    /// one edit each.
    pub edits: Vec<passes::Edit>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Importance {
    /// `measured` (every ablation found), `partial`, `not_measured`, or `unavailable`.
    pub status: String,
    /// Ablations found in the trials / passes in the best pipeline.
    pub measured: usize,
    pub total: usize,
    /// Measured ablations, most important first: removing the pass breaks the kernel, then
    /// by slowdown.
    pub passes: Vec<PassImportance>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PassImportance {
    pub index: usize,
    pub pass: String,
    pub trial: u32,
    /// The ablation trial's outcome status (`valid`, `wrong_output`, …).
    pub outcome: String,
    /// Without the pass: time over baseline (valid only).
    pub ratio: Option<f64>,
    /// Without the pass: time over the best's time (> 1: the pass helps).
    pub slowdown: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConvergencePoint {
    pub trial: u32,
    /// Seconds since tuning started, at the end of this trial.
    pub elapsed_s: f64,
    /// This trial's speedup (valid trials only).
    pub speedup: Option<f64>,
    /// Best speedup so far.
    pub best_speedup: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopConfig {
    pub rank: usize,
    pub trial: u32,
    pub speedup: f64,
    pub time: TimeStats,
    /// Changes against O3: "-removed +added ~changed" passes.
    pub vs_o3: String,
    pub candidate: Candidate,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CodeReport {
    /// Why statistics are missing (kernel not in the store, lowering failed, not computed).
    pub unavailable: Option<String>,
    pub sm: Option<String>,
    /// Why registers and spills are missing, if they are.
    pub ptxas_unavailable: Option<String>,
    pub baseline: Option<CodeStats>,
    pub best: Option<CodeStats>,
    /// Errors met computing part of the statistics (that part is missing).
    pub errors: Vec<String>,
    /// IR instructions before the best pipeline, then after each of its passes.
    pub ir_before: Option<usize>,
    pub ir_after_each_pass: Vec<PassStep>,
}

fn status(o: &Outcome) -> &'static str {
    match o {
        Outcome::Valid { .. } => "valid",
        Outcome::CompileError { .. } => "compile_error",
        Outcome::WrongOutput { .. } => "wrong_output",
        Outcome::Crashed { .. } => "crashed",
        Outcome::TimedOut { .. } => "timed_out",
        Outcome::Screened { .. } => "screened",
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Whether a selector names this kernel: one of the stored kernels `named` it names
/// (`identity::Index::select`: the current builds' first); trials of no stored kernel
/// (simulations) are named by their key.
fn matches(sel: &str, named: &[&KernelRecord], key: &str, stored: Option<&KernelRecord>) -> bool {
    sel == key
        || slug(sel) == slug(key)
        || stored.is_some_and(|k| named.iter().any(|n| n.hash == k.hash))
}

/// The stored kernel a trials key (its content hash) names.
fn find_kernel<'a>(key: &str, kernels: &'a [KernelRecord]) -> Option<&'a KernelRecord> {
    kernels.iter().find(|k| k.hash == key)
}

/// Reads the store into a report.
pub fn build(store: &Store, opts: &ReportOptions) -> Result<Report, ReportError> {
    // A variant's trials are its rewrite's inner search: reported with the rewrite.
    let variants: Vec<KernelHash> = store.variants()?.into_iter().map(|v| v.hash).collect();
    let mut sets = store.trial_sets()?;
    sets.retain(|(_, recs)| !variants.iter().any(|v| *v == recs[0].kernel));
    let rewrites = super::rewrites::build(store, &opts.kernels)?;
    if sets.is_empty() && rewrites.is_empty() {
        return Err(ReportError::NoTrials {
            store: store.root().to_owned(),
        });
    }
    let index = store.index()?;
    let stored = index.kernels();
    let selected: Vec<Vec<&KernelRecord>> = opts.kernels.iter().map(|s| index.select(s)).collect();
    let mut chosen = Vec::new();
    for (path, recs) in &sets {
        let key = &recs[0].kernel;
        let k = find_kernel(key, stored);
        let named = |(s, n): (&String, &Vec<&KernelRecord>)| matches(s, n, key, k);
        if opts.kernels.is_empty() || opts.kernels.iter().zip(&selected).any(named) {
            chosen.push((path, recs, k));
        }
    }
    for (sel, sel_named) in opts.kernels.iter().zip(&selected) {
        let named: Vec<&KernelRecord> = chosen
            .iter()
            .filter(|(_, recs, k)| matches(sel, sel_named, &recs[0].kernel, *k))
            .filter_map(|(_, _, k)| *k)
            .collect();
        if identity::distinct(&named) > 1 {
            return Err(index.ambiguity(sel, &named).into());
        }
        let rewritten = rewrites
            .iter()
            .any(|r| r.kernel == *sel || sel_named.iter().any(|k| k.hash == r.kernel));
        if !rewritten
            && !chosen
                .iter()
                .any(|(_, recs, k)| matches(sel, sel_named, &recs[0].kernel, *k))
        {
            if let Some(e) = sel_named.is_empty().then(|| index.only_old(sel)).flatten() {
                return Err(e.into());
            }
            let mut known: Vec<String> = sets
                .iter()
                .map(|(_, r)| match find_kernel(&r[0].kernel, stored) {
                    Some(k) => k.label(),
                    None => r[0].kernel.to_string(),
                })
                .collect();
            known.dedup();
            return Err(ReportError::NoMatch {
                kernel: sel.clone(),
                store: store.root().to_owned(),
                known: known.join(", "),
            });
        }
    }
    // A search whose files beside the trials are damaged is left out with its fix, and the
    // report goes on; only when nothing is left is that the error.
    let mut kernels = Vec::new();
    let mut damaged = None;
    let read = ReadOnce::of(store);
    for (path, recs, k) in chosen {
        match kernel_report(store, &read, path, recs, k, opts) {
            Ok(mut r) => {
                r.old = k.is_some_and(|k| index.is_old(k));
                kernels.push(r)
            }
            Err(e) => {
                crate::store::warn_left_out(&e, "that search");
                damaged.get_or_insert(e);
            }
        }
    }
    if let Some(e) = damaged.filter(|_| kernels.is_empty() && rewrites.is_empty()) {
        return Err(e);
    }
    Ok(Report {
        schema_version: SCHEMA_VERSION,
        r3_version: env!("CARGO_PKG_VERSION").into(),
        store: store.root().display().to_string(),
        summary: summarize(&kernels),
        programs: programs_for(store, &kernels, !opts.kernels.is_empty()),
        kernels,
        rewrites,
    })
}

/// The programs with tuned kernels; where the report names kernels, those among whose largest
/// kernels one of them is. A damaged program file is said and left out.
fn programs_for(
    store: &Store,
    kernels: &[KernelReport],
    named: bool,
) -> Vec<super::programs::ProgramReport> {
    let reported: std::collections::BTreeSet<(&str, &str)> = kernels
        .iter()
        .filter_map(|k| Some((k.gpu.as_str(), k.hash.as_deref()?)))
        .collect();
    match super::programs::build(store) {
        Ok(mut all) => {
            all.retain(|p| {
                !named
                    || p.top
                        .iter()
                        .filter_map(|k| k.hash.as_deref())
                        .any(|h| reported.contains(&(p.gpu.as_str(), h)))
            });
            all
        }
        Err(e) => {
            crate::store::warn_left_out(&e, "the programs' predicted speedups");
            Vec::new()
        }
    }
}

/// The measured searches' summary, with the simulated ones' beside it.
fn summarize(kernels: &[KernelReport]) -> Summary {
    let (simulated, measured): (Vec<&KernelReport>, Vec<&KernelReport>) =
        kernels.iter().partition(|k| k.simulated);
    Summary {
        simulated: (!simulated.is_empty()).then(|| Box::new(summarize_part(&simulated))),
        ..summarize_part(&measured)
    }
}

fn summarize_part(kernels: &[&KernelReport]) -> Summary {
    use super::shipped::geomean;
    let tuned: Vec<&KernelReport> = kernels
        .iter()
        .copied()
        .filter(|k| k.best.is_some())
        .collect();
    let mut rows: Vec<SummaryRow> = kernels
        .iter()
        .map(|k| SummaryRow {
            kernel: k.kernel.to_string(),
            name: k.name.clone(),
            gpu: k.gpu.clone(),
            speedup: k.best.as_ref().map(|b| b.speedup),
            shipped_speedup: k.apply.shipped_speedup,
            shipped_trial: k.apply.shipped_trial,
            baseline_us: k.baseline.as_ref().map(|b| b.median_us),
            best_us: k.best.as_ref().map(|b| b.time.median_us),
            trials: k.trials,
            tuning_s: k.tuning_s,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.speedup
            .unwrap_or(f64::NEG_INFINITY)
            .total_cmp(&a.speedup.unwrap_or(f64::NEG_INFINITY))
    });
    Summary {
        kernels: kernels.len(),
        tuned: tuned.len(),
        geomean_speedup: geomean(tuned.iter().filter_map(|k| Some(k.best.as_ref()?.speedup))),
        shipped: tuned
            .iter()
            .filter(|k| k.apply.shipped_trial.is_some())
            .count(),
        geomean_shipped: geomean(tuned.iter().map(|k| k.apply.shipped_speedup)),
        total_trials: kernels.iter().map(|k| k.trials).sum(),
        total_tuning_s: kernels.iter().map(|k| k.tuning_s).sum(),
        rows,
        simulated: None,
        vs_nvcc: vs_nvcc(&tuned),
    }
}

fn vs_nvcc(tuned: &[&KernelReport]) -> Option<VsNvcc> {
    let measured: Vec<&NvccBaseline> = tuned
        .iter()
        .filter_map(|k| k.nvcc.as_ref())
        .filter(|n| n.shipped_over_nvcc.is_some())
        .collect();
    Some(VsNvcc {
        kernels: measured.len(),
        geomean_shipped: super::shipped::geomean(
            measured.iter().filter_map(|n| n.shipped_over_nvcc),
        )?,
        nvcc_faster: measured.iter().filter(|n| n.nvcc_faster()).count(),
    })
}

/// The best trial, as `Store::best_trial` picks it (lowest ratio, unless its confirmation
/// failed), and its baseline.
fn best_of(
    recs: &[TrialRecord],
    confirmed: &[crate::store::trials::Confirmation],
) -> (Option<Best>, Option<TimeStats>) {
    let best_rec = crate::store::winner::pick_best(recs, confirmed);
    match best_rec.map(|r| (r, &r.outcome)) {
        Some((r, Outcome::Valid { time, baseline })) => {
            let ratio = time.median_us / baseline.median_us;
            (
                Some(Best {
                    trial: r.trial,
                    candidate: r.candidate.clone(),
                    time: time.clone(),
                    ratio,
                    speedup: 1.0 / ratio,
                }),
                Some(baseline.clone()),
            )
        }
        _ => (None, None),
    }
}

/// The kernel's recorded launches, the first one searched.
fn launches_of(read: &ReadOnce, stored: Option<&KernelRecord>) -> Launches {
    let recorded = stored.map_or(&[][..], |k| read.launches.of(&k.hash));
    Launches {
        all: recorded.iter().filter_map(|r| r.launch.values()).collect(),
        searched: recorded.first().and_then(|r| r.launch.values()),
    }
}

/// What a command that goes over many searches reads of the store once, not once a search:
/// every kernel's usable recordings and its share of each program's time. `r3 report` on run
/// Y23's store (118 kernels, 54 programs) had read every census 81 times over, through each
/// kernel's `Store::run_ms`.
pub struct ReadOnce {
    launches: UsableLaunches,
    shares: std::collections::BTreeMap<KernelHash, Vec<crate::store::programs::Share>>,
}

impl ReadOnce {
    /// A store whose recordings or censuses cannot be read gives none (each search's launches,
    /// or its kernel's time in its programs, unknown).
    pub fn of(store: &Store) -> ReadOnce {
        ReadOnce {
            launches: (store.usable_launches().unwrap_or_default())
                .heaviest_first(&store.recorded_time()),
            shares: store.kernel_shares().unwrap_or_default(),
        }
    }

    /// Each kernel's share of each program's time (`Store::kernel_shares`).
    pub fn shares(
        &self,
    ) -> &std::collections::BTreeMap<KernelHash, Vec<crate::store::programs::Share>> {
        &self.shares
    }

    /// Milliseconds kernel `hash` runs in the program that runs it longest (`Store::run_ms`).
    fn run_ms(&self, hash: &KernelHash) -> Option<f64> {
        crate::store::programs::longest_run_ms(&self.shares, hash)
    }
}

/// What apply ships of one search (kernel `hash` on `gpu`), and why, as the report's Apply
/// line says it: for `r3 status`'s reason and `r3 tune`'s last line. `read`: what is read
/// once for all the searches a command shows.
pub fn apply_of_search(
    store: &Store,
    read: &ReadOnce,
    key: &TrialsKey,
    gpu: &str,
) -> Result<ApplyReport, StoreError> {
    let recs = store.trials(key, gpu)?;
    if recs.is_empty() {
        return Ok(keeps_clang("keeps clang's code: no trial yet".into()));
    }
    let confirmed = store.confirmations(&store.trials_path(key, gpu))?;
    let stored = key.kernel_hash().and_then(|h| store.kernel(&h).ok());
    let (best, _) = best_of(&recs, &confirmed);
    Ok(apply_report(
        &recs,
        &confirmed,
        best.as_ref(),
        &launches_of(read, stored.as_ref()),
        stored.as_ref(),
        key.kernel_hash().and_then(|h| read.run_ms(&h)),
    ))
}

/// A kernel's recorded launches (values, in `Store::launches_of` order) and the searched one
/// among them: the first usable recording, as the search took it.
struct Launches {
    all: Vec<crate::candidate::LaunchValues>,
    searched: Option<crate::candidate::LaunchValues>,
}

/// What apply would ship, and why that and not the best where they differ.
fn apply_report(
    recs: &[TrialRecord],
    confirmed: &[crate::store::trials::Confirmation],
    best: Option<&Best>,
    launches: &Launches,
    stored: Option<&crate::store::KernelRecord>,
    run_ms: Option<f64>,
) -> ApplyReport {
    use crate::store::winner::Policy;
    let policy = match stored {
        Some(k) => Policy::from_env().for_record(k),
        None => Policy::from_env(),
    }
    .with_run_ms(run_ms);
    let ship = super::shipped::shipment(recs, confirmed, &policy);
    let all = &launches.all;
    let variants: Vec<VariantReport> = ship
        .variants
        .iter()
        .map(|t| VariantReport {
            trial: t.trial,
            speedup: crate::store::winner::gain(t, confirmed),
            guard: guard_words(&t.candidate),
            launches_taken: all.iter().filter(|l| t.candidate.admits(l)).count(),
            launches_recorded: all.len(),
        })
        .collect();
    let mut report = apply_generic(recs, confirmed, best, &policy, ship.generic);
    if let Some(b) = best.filter(|b| variants.iter().any(|v| v.trial == b.trial)) {
        report.note = match report.trial {
            Some(t) => format!(
                "applies trial {t} where every launch may run it, and the best (trial {}) behind its guard",
                b.trial
            ),
            None => format!(
                "ships the best (trial {}) behind its guard; other launches keep clang's code",
                b.trial
            ),
        };
    }
    let on = super::shipped::on_searched(&ship, confirmed, launches.searched.as_ref());
    report.shipped_trial = on.trial;
    report.shipped_speedup = on.speedup;
    report.variants = variants;
    report
}

/// A guard in words.
fn guard_words(c: &Candidate) -> String {
    let mut w = Vec::new();
    if let Some(b) = c.block_x {
        w.push(format!("1-D blocks, relaunched with {b} threads"));
    }
    if let Some(n) = c.max_threads {
        w.push(format!("threads <= {n}"));
    }
    if let Some(s) = &c.specialize {
        w.push(s.words(|i| format!("arg{i}")));
    }
    w.join(", ")
}

/// Why apply does not ship the best as the generic code.
fn why_not_best(c: &Candidate, policy: &crate::store::winner::Policy) -> String {
    if policy.ships_guarded(c) {
        // It would ship as a variant (the caller names the best when it does): it does not
        // beat what ships by enough, or its program runs it too briefly to pay for its load.
        return match policy.run_ms {
            Some(ms) => format!(
                "needs a guard, and as a variant does not save the program that runs the kernel longest ({ms:.3} ms a run) more than its first load costs ({:.0} µs), or is not faster than the code that ships by R3_APPLY_MIN_SPEEDUP",
                crate::store::winner::VARIANT_FIRST_LOAD_MS * 1e3
            ),
            None => "needs a guard, and as a variant is not faster than the code that ships by R3_APPLY_MIN_SPEEDUP".into(),
        };
    }
    if c.block_x.is_some() && policy.dispatch {
        "changes the block size, which this build withholds (R3_APPLY_BLOCK_SIZE)"
    } else if c.specialize.is_some() || c.block_x.is_some() {
        "folds launch values or changes the block size, which ship only as a variant behind a guard (R3_APPLY_DISPATCH=0 is set)"
    } else {
        "sets launch bounds, which ship as a variant behind a guard, or unguarded with R3_APPLY_LAUNCH_BOUNDS=1 (R3_APPLY_DISPATCH=0 is set)"
    }
    .into()
}

/// An ApplyReport that keeps clang's code, for this reason.
fn keeps_clang(note: String) -> ApplyReport {
    ApplyReport {
        trial: None,
        speedup: None,
        shipped_trial: None,
        shipped_speedup: 1.0,
        note,
        validated_on: Vec::new(),
        variants: Vec::new(),
    }
}

/// The generic code apply ships (`shipped`, as `shipped::shipment` decided it), and why that
/// and not the best where they differ.
fn apply_generic(
    recs: &[TrialRecord],
    confirmed: &[crate::store::trials::Confirmation],
    best: Option<&Best>,
    policy: &crate::store::winner::Policy,
    shipped: Option<&TrialRecord>,
) -> ApplyReport {
    use crate::store::winner::{gain, shippable_best};
    if recs[0].simulated() && !policy.simulated {
        return keeps_clang("keeps clang's code: simulated trials are never shipped (R3_APPLY_SIMULATED=1 is for tests)".into());
    }
    let speedup = shipped.and_then(|t| gain(t, confirmed));
    // Nothing ships, yet a trial every launch may run beats -O3: by less than is worth a change.
    let small = shippable_best(recs, confirmed, policy)
        .filter(|t| shipped.is_none() && t.trial != 0)
        .and_then(|t| Some((t.trial, gain(t, confirmed)?)))
        .filter(|(_, s)| *s > 1.0);
    if let Some((trial, s)) = small {
        return keeps_clang(format!(
            "keeps clang's code: the best trial it can ship (trial {trial}, {}) is under the {} worth a change of code (R3_APPLY_MIN_SPEEDUP)",
            crate::speed::times(s),
            crate::speed::times(policy.min_speedup)
        ));
    }
    let note = match (shipped, best) {
        (Some(t), Some(b)) if t.trial == b.trial => format!("applies the best (trial {})", t.trial),
        (Some(t), Some(b)) => format!(
            "applies trial {} ({}): the best (trial {}) {}",
            t.trial,
            crate::speed::times(speedup.unwrap_or(1.0)),
            b.trial,
            why_not_best(&b.candidate, policy)
        ),
        (None, Some(b)) if b.trial != 0 && !policy.ships(&b.candidate) => format!(
            "keeps clang's code: the best (trial {}) {}, and no trial apply ships beats -O3",
            b.trial,
            why_not_best(&b.candidate, policy)
        ),
        _ => fastest_not_kept(recs, confirmed)
            .unwrap_or_else(|| "keeps clang's code: nothing beats -O3".into()),
    };
    let validated_on = shipped
        .and_then(|t| crate::store::winner::confirmation_of(confirmed, t.trial))
        .map(|c| c.launches.iter().map(|l| l.recording.clone()).collect())
        .unwrap_or_default();
    ApplyReport {
        trial: shipped.map(|t| t.trial),
        speedup,
        validated_on,
        note,
        ..keeps_clang(String::new())
    }
}

/// Why the fastest trial is not kept, where its confirmation says: another recorded launch
/// refuted it, or a program that shipped it measured it slower than the recorded build
/// (`store::in_program`).
fn fastest_not_kept(
    recs: &[TrialRecord],
    confirmed: &[crate::store::trials::Confirmation],
) -> Option<String> {
    let fastest = crate::store::winner::pick_best(recs, &[])?;
    let c = crate::store::winner::confirmation_of(confirmed, fastest.trial)?;
    let t = fastest.trial;
    if let Some(bad) = c.failed_launch() {
        return Some(format!(
            "keeps clang's code: the fastest trial ({t}) {} on recorded launch {}",
            bad.outcome.in_words(),
            bad.recording
        ));
    }
    let p = c.refuted_in_program()?;
    let reference = match p.against {
        crate::store::trials::Against::Census => "the recorded run's census",
        crate::store::trials::Against::TimeOnly => "the recorded build's",
    };
    Some(format!(
        "keeps clang's code: the fastest trial ({t}) ran {} in program {} (r3 record --time-only: {:.4} ms per launch against {reference} {:.4})",
        crate::speed::times(p.speedup()),
        p.program,
        p.applied_ms,
        p.recorded_ms,
    ))
}

fn kernel_report(
    store: &Store,
    read: &ReadOnce,
    path: &Path,
    recs: &[TrialRecord],
    stored: Option<&KernelRecord>,
    opts: &ReportOptions,
) -> Result<KernelReport, ReportError> {
    let first = &recs[0];
    let confirmed = &store.confirmations(path)?;
    let own_ms = |r: &TrialRecord| r.passes_ms + r.codegen_ms + r.measure_ms;
    let start_ms = recs
        .iter()
        .map(|r| r.finished_unix_ms as f64 - own_ms(r))
        .fold(f64::INFINITY, f64::min);
    let end_ms = recs
        .iter()
        .map(|r| r.finished_unix_ms as f64)
        .fold(f64::NEG_INFINITY, f64::max);

    let mut outcomes = Outcomes::default();
    for r in recs {
        match &r.outcome {
            Outcome::Valid { .. } => outcomes.valid += 1,
            Outcome::CompileError { .. } => outcomes.compile_error += 1,
            Outcome::WrongOutput { .. } => outcomes.wrong_output += 1,
            Outcome::Crashed { .. } => outcomes.crashed += 1,
            Outcome::TimedOut { .. } => outcomes.timed_out += 1,
            Outcome::Screened { .. } => outcomes.screened += 1,
        }
        outcomes.duplicates += r.duplicate_of.is_some() as usize;
    }

    let (best, baseline) = best_of(recs, confirmed);
    let apply = apply_report(
        recs,
        confirmed,
        best.as_ref(),
        &launches_of(read, stored),
        stored,
        first.kernel.kernel_hash().and_then(|h| read.run_ms(&h)),
    );
    let search = search_note(store, path)?;
    let name = stored
        .map(|k| k.signature.demangled.clone())
        .unwrap_or_else(|| first.kernel.to_string());
    let pipeline_err = |msg: String| ReportError::Pipeline {
        kernel: name.clone(),
        path: path.to_owned(),
        msg,
    };
    let o3 = passes::expand("default<O3>").map_err(|e| pipeline_err(e.to_string()))?;
    let vs_o3 = |c: &Candidate| -> String {
        match passes::expand(&c.pipeline) {
            Ok(p) => {
                let (r, a, ch) = passes::diff_counts(&passes::diff(&o3, &p));
                if (r, a, ch) == (0, 0, 0) {
                    "= O3".into()
                } else {
                    format!("-{r} +{a} ~{ch}")
                }
            }
            Err(_) => "unparsed".into(),
        }
    };

    let nvcc = nvcc_baseline(recs, confirmed, apply.shipped_speedup);
    let pipeline = match &best {
        Some(b) if !b.candidate.is_nvcc() => {
            let p =
                passes::expand(&b.candidate.pipeline).map_err(|e| pipeline_err(e.to_string()))?;
            let diff = passes::diff(&o3, &p);
            let edits = passes::edits(&o3, &p);
            let (removed, added, changed) = passes::diff_counts(&diff);
            Some(PipelineReport {
                text: b.candidate.pipeline.clone(),
                o3_passes: o3.steps.len(),
                best_passes: p.steps.len(),
                removed,
                added,
                changed,
                diff,
                edits,
            })
        }
        _ => None,
    };

    let importance = match &best {
        Some(b) if b.candidate.is_nvcc() => Importance {
            status: "unavailable".into(),
            measured: 0,
            total: 0,
            passes: Vec::new(),
        },
        None => Importance {
            status: "unavailable".into(),
            measured: 0,
            total: 0,
            passes: Vec::new(),
        },
        Some(b) => {
            let mut all = recs.to_vec();
            all.extend(store.ablations(path)?);
            importance(b, &all).map_err(|e| pipeline_err(e.to_string()))?
        }
    };

    let mut convergence = Vec::new();
    let mut best_so_far: Option<f64> = None;
    for r in recs {
        let s = r.ratio().map(|x| 1.0 / x);
        if let Some(s) = s {
            best_so_far = Some(best_so_far.map_or(s, |b: f64| b.max(s)));
        }
        convergence.push(ConvergencePoint {
            trial: r.trial,
            elapsed_s: (r.finished_unix_ms as f64 - start_ms) / 1e3,
            speedup: s,
            best_speedup: best_so_far,
        });
    }

    // By the code measured; a trial without PTX (simulated) by its candidate.
    let mut by_code: HashMap<PtxHash, &TrialRecord> = HashMap::new();
    for r in recs
        .iter()
        .filter(|r| r.ratio().is_some() && r.duplicate_of.is_none())
    {
        let key = r
            .ptx_hash
            .clone()
            .unwrap_or_else(|| r.candidate.key().into());
        let e = by_code.entry(key).or_insert(r);
        if r.ratio().unwrap() < e.ratio().unwrap() {
            *e = r;
        }
    }
    let mut distinct: Vec<&TrialRecord> = by_code.into_values().collect();
    distinct.sort_by(|a, b| {
        a.ratio()
            .unwrap()
            .total_cmp(&b.ratio().unwrap())
            .then(a.trial.cmp(&b.trial))
    });
    let top = distinct
        .iter()
        .take(5)
        .enumerate()
        .filter_map(|(i, r)| match &r.outcome {
            Outcome::Valid { time, baseline } => Some(TopConfig {
                rank: i + 1,
                trial: r.trial,
                speedup: baseline.median_us / time.median_us,
                time: time.clone(),
                vs_o3: vs_o3(&r.candidate),
                candidate: r.candidate.clone(),
            }),
            _ => None,
        })
        .collect();

    let code = code_report(store, stored, best.as_ref(), opts);

    Ok(KernelReport {
        kernel: first.kernel.clone(),
        name,
        hash: stored.map(|k| k.hash.to_string()),
        old: false,
        gpu: first.gpu.clone(),
        simulated: first.simulated(),
        driver: first.driver.clone(),
        trials_file: path.display().to_string(),
        strategy: first.strategy.clone(),
        seed: first.seed,
        trials: recs.len(),
        tuning_s: ((end_ms - start_ms) / 1e3).max(0.0),
        compile_s: recs.iter().map(|r| r.passes_ms + r.codegen_ms).sum::<f64>() / 1e3,
        measure_s: recs.iter().map(|r| r.measure_ms).sum::<f64>() / 1e3,
        outcomes,
        baseline,
        best,
        nvcc,
        pipeline,
        importance,
        convergence,
        top,
        code,
        apply,
        search,
    })
}

fn search_note(store: &Store, path: &Path) -> Result<SearchNote, ReportError> {
    let mut note = SearchNote::default();
    if let Some(t) = store.transfer_sources_at(path)? {
        note.recipes = t
            .recipes
            .iter()
            .map(|r| format!("{}{}", r.name, if r.matched { "*" } else { "" }))
            .collect();
        note.traits = t.traits;
        note.learned_from = t.sources.len();
    }
    if let Some(e) = store.search_end(path)? {
        note.stop = Some(e.stop);
        note.budget = Some(e.budget);
    }
    note.l2 = store.l2_choice(path)?;
    Ok(note)
}

fn importance(best: &Best, recs: &[TrialRecord]) -> Result<Importance, passes::PassesError> {
    let abl = passes::ablations(&best.candidate)?;
    let mut found = Vec::new();
    for a in &abl {
        // The latest measurement of this exact candidate.
        if let Some(r) = recs.iter().rev().find(|r| r.candidate == a.candidate) {
            let ratio = r.ratio();
            found.push(PassImportance {
                index: a.index,
                pass: a.pass.clone(),
                trial: r.trial,
                outcome: status(&r.outcome).into(),
                ratio,
                slowdown: ratio.map(|x| x / best.ratio),
            });
        }
    }
    // Breaking the kernel first, then by slowdown, then pipeline order.
    found.sort_by(|a, b| {
        let key = |p: &PassImportance| p.slowdown.unwrap_or(f64::INFINITY);
        key(b).total_cmp(&key(a)).then(a.index.cmp(&b.index))
    });
    let status = match found.len() {
        0 => "not_measured",
        n if n == abl.len() => "measured",
        _ => "partial",
    };
    Ok(Importance {
        status: status.into(),
        measured: found.len(),
        total: abl.len(),
        passes: found,
    })
}

fn code_report(
    store: &Store,
    stored: Option<&KernelRecord>,
    best: Option<&Best>,
    opts: &ReportOptions,
) -> CodeReport {
    let mut out = CodeReport::default();
    let Some(k) = stored else {
        out.unavailable = Some("the kernel is not in the store".into());
        return out;
    };
    if !opts.code {
        out.unavailable = Some("not computed".into());
        return out;
    }
    let bitcode = match store.kernel_bitcode(&k.hash) {
        Ok(b) => b,
        Err(e) => {
            out.unavailable = Some(e.to_string());
            return out;
        }
    };
    let target = Codegen {
        sm: k.signature.arch.clone(),
        ptx: None,
        opt_level: 3,
    };
    out.sm = Some(target.sm.clone());
    if opts.ptxas.is_none() {
        out.ptxas_unavailable = Some("no CUDA SDK with ptxas found".into());
    }
    let what = &k.signature.name;
    let ptxas = opts.ptxas.as_deref();
    let mut ptxas_note = None;
    match code::code_stats(&bitcode, what, &Candidate::baseline(), &target, ptxas) {
        Ok((s, note)) => {
            out.baseline = Some(s);
            ptxas_note = ptxas_note.or(note);
        }
        Err(e) => out.errors.push(format!("baseline: {e}")),
    }
    if let Some(b) = best {
        match code::code_stats(&bitcode, what, &b.candidate, &target, ptxas) {
            Ok((s, note)) => {
                out.best = Some(s);
                ptxas_note = ptxas_note.or(note);
            }
            Err(e) => out.errors.push(format!("best: {e}")),
        }
        match code::ir_after_each_pass(&bitcode, what, &b.candidate, &target) {
            Ok((before, steps)) => {
                out.ir_before = Some(before);
                out.ir_after_each_pass = steps;
            }
            Err(e) => out.errors.push(format!("IR after each pass: {e}")),
        }
    }
    if out.ptxas_unavailable.is_none() {
        out.ptxas_unavailable = ptxas_note;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures;

    fn trial(t: u32, nvcc: bool, outcome: Outcome) -> TrialRecord {
        let c = if nvcc {
            serde_json::json!({"pipeline": "default<O3>", "compiler": "nvcc"})
        } else {
            serde_json::json!({"pipeline": "default<O3>"})
        };
        fixtures::trial("0123456789abcdef", "GPU", t, c, outcome)
    }

    /// The second baseline: nvcc's trial's speed over -O3's, and what ships over nvcc's; or
    /// why it has none, in nvcc's or r3's words; nothing where no trial measured it.
    #[test]
    fn nvcc_baseline_is_nvccs_trial_against_clang_and_what_ships_against_it() {
        let base = trial(0, false, fixtures::valid(10.0, 10.0));
        let faster = trial(1, true, fixtures::valid(8.0, 10.0));
        let n = nvcc_baseline(&[base.clone(), faster.clone()], &[], 1.6).unwrap();
        assert_eq!(n.trial, 1);
        assert!((n.speedup.unwrap() - 1.25).abs() < 1e-9);
        assert!((n.shipped_over_nvcc.unwrap() - 1.28).abs() < 1e-9);
        assert_eq!(n.why_not, None);
        let failed = trial(
            1,
            true,
            Outcome::CompileError {
                message: "nvcc: its source /x.cu is gone".into(),
            },
        );
        let n = nvcc_baseline(&[base.clone(), failed], &[], 1.0).unwrap();
        assert_eq!(n.speedup, None);
        assert_eq!(n.why_not.as_deref(), Some("its source /x.cu is gone"));
        assert_eq!(nvcc_baseline(std::slice::from_ref(&base), &[], 1.0), None);
        // Re-measured, nvcc's code counts at its confirmed speed, as what ships does.
        let again = fixtures::confirmation(1, fixtures::valid(8.2, 10.0));
        let n = nvcc_baseline(&[base, faster], &[again], 10.0 / 8.2).unwrap();
        assert!((n.shipped_over_nvcc.unwrap() - 1.0).abs() < 1e-9, "{n:?}");
    }
}
