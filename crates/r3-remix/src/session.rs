//! A kernel's tuning session, as `r3 tune` and `r3 evolve`'s judge run it: the target this GPU
//! and driver give, an evaluator on a recording that reproduces, the trials file claimed, the
//! L2 regime chosen, the search, its winner confirmed and its passes ablated. The CLI says
//! what happened (`Line`); this module decides what happens.

use crate::fleet::{self, Claim};
use crate::kernel::TrialsKey;
use crate::replay::device::GpuInfo;
use crate::replay::gpu::{GpuEvaluator, MeasureOptions, Verdict};
use crate::replay::validate::Tolerance;
use crate::replay::{l2, Evaluator};
use crate::space::{Space, SpaceOptions};
use crate::tune::{self, Stop, TuneOptions};
use crate::{confirm, sim};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::candidate::Candidate;
use crate::lower::Codegen;
use crate::store::records::Recording;
use crate::store::trials::TrialLog;
use crate::store::{identity, KernelRecord, Store};

/// What a session says: `Out` is its result (the CLI's stdout), `Note` progress, warnings and
/// what was left out (stderr).
pub enum Line {
    Out(String),
    Note(String),
}

/// Where a session's lines go.
pub type Say<'a> = &'a mut dyn FnMut(Line);

/// How candidates are measured (`r3 tune`'s and `r3 evolve`'s flags).
#[derive(Debug, Clone)]
pub struct Measure {
    pub repeat: u32,
    pub l2: l2::Policy,
    pub tolerance: Option<Tolerance>,
    /// Screen a long kernel's candidates on a prefix of its launch (`replay::screen`).
    pub screen: bool,
}

/// What `r3 tune` on a GPU does beyond the search itself.
#[derive(Debug, Clone)]
pub struct GpuTune {
    pub measure: Measure,
    pub ablate: bool,
    pub resume: bool,
    pub block_size_agnostic: bool,
    pub egraph: bool,
    pub grid: bool,
    /// Offer specialization (the searched launch's values folded into constants, shipped
    /// behind a guard).
    pub specialize: bool,
    /// One worker of possibly many (`--all`, `--gpus`, a job array): a kernel another worker
    /// holds is left to it, and a kernel named alone that was not searched is not a failure.
    pub fleet: bool,
    /// The deadline allocation this worker's fleet started (`--deadline-id`), if any.
    pub deadline_id: Option<String>,
    /// Measure nvcc's code of each kernel beside -O3 (`nvcc`), where nvcc is found.
    pub nvcc: bool,
}

/// What the sessions of one command came to; the CLI turns it into an exit status.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    pub searched: usize,
    /// The searches run, as (kernel hash or key, GPU): what the CLI says ships of each.
    pub searches: Vec<(TrialsKey, String)>,
    /// Kernels not searched because no recording of theirs reproduces.
    pub irreproducible: usize,
    /// Kernels r3 failed on (an evaluator, the trials file or the search).
    pub failed: usize,
    /// Something went wrong that is not a kernel's failure (ablations).
    pub errors: usize,
    pub interrupted: bool,
}

/// The code generation target of the GPU at hand: its architecture and the newest PTX ISA its
/// driver loads.
pub fn target(driver: (i32, i32), gpu: &GpuInfo) -> Codegen {
    Codegen {
        sm: gpu.sm(),
        ptx: Some(crate::lower::ptx_for_driver(driver).into()),
        opt_level: 3,
    }
}

pub fn measure_options(gpu: &GpuInfo, how: &Measure) -> MeasureOptions {
    MeasureOptions {
        ordinal: gpu.ordinal as i32,
        max_reps: how.repeat,
        tolerance: how.tolerance,
        l2: Default::default(),
        screen: (how.screen && gpu.sms > 0).then_some(gpu.sms),
    }
}

/// How tune's lines name a kernel: its demangled name and short hash, or the key as it is (a
/// simulated landscape's own name).
pub fn kernel_label(store: &Store, key: &TrialsKey) -> String {
    key.kernel_hash()
        .and_then(|h| store.kernel(&h).ok())
        .map_or_else(|| key.to_string(), |k| k.label())
}

/// A budget no larger than a finite space.
pub fn finite_budget(budget: u32, space: &Space) -> u32 {
    space.points().map_or(budget, |p| {
        budget.min(u32::try_from(p.len()).unwrap_or(u32::MAX))
    })
}

/// What the search of a kernel may fold of the launch it replays: of its values, those that
/// recur over its programs' launches as the censuses counted them (`space::specializations`).
fn specializations_of(
    store: &Store,
    k: &KernelRecord,
    rec: &Recording,
) -> Vec<crate::candidate::Specialize> {
    specializations_saying(store, k, rec).0
}

/// [`specializations_of`], and a note naming the values left out for not recurring.
fn specializations_saying(
    store: &Store,
    k: &KernelRecord,
    rec: &Recording,
) -> (Vec<crate::candidate::Specialize>, Option<String>) {
    let foldable = crate::lower::specialize::foldable(&k.signature);
    let recurrence = store.recurrence_of(&rec.id);
    let offered = rec
        .launch
        .values()
        .map(|v| crate::space::specializations(&foldable, &v, recurrence.as_ref()))
        .unwrap_or_default();
    let left_out = crate::space::not_recurring(&foldable, recurrence.as_ref());
    let note = (!left_out.is_empty()).then(|| {
        format!(
            "r3 tune: {}: not folded, as a variant guarded on it would seldom run: {} (the census counts how often each of the recorded launch's values recurs)",
            k.label(),
            left_out.join(", ")
        )
    });
    (offered, note)
}

/// Where a kernel's search can start.
pub enum Searchable {
    Ready(Box<GpuEvaluator>),
    /// No recording of it reproduces; the last reason.
    Irreproducible(String),
    /// r3 could not tell (an evaluator or a check failed).
    Failed(String),
}

/// An evaluator against the kernel's first recording whose -O3 baseline reproduces it. A
/// recording that `r3 record` verified is used as it is; one not checked yet is replayed once
/// (in the evaluator's own worker, which keeps the checked baseline for the search), and the
/// verdict kept with it, so that it is never checked again and a recording that does not
/// reproduce is shown with its reason by `kernels`, `status` and the next `tune`.
pub fn reproducing_evaluator(
    store: &Store,
    recs: Vec<Recording>,
    target: &Codegen,
    opts: &MeasureOptions,
    gpu: &str,
    say: Say,
) -> Searchable {
    let mut last = String::new();
    for rec in recs {
        if let Some(why) = rec.irreproducible() {
            last = why.to_owned();
            continue;
        }
        let ev = match GpuEvaluator::new(store, rec.clone(), target.clone(), opts.clone()) {
            Ok(ev) => ev,
            Err(e) => return Searchable::Failed(format!("{}: {e}", rec.id)),
        };
        if rec.verification.is_some() {
            return Searchable::Ready(Box::new(ev));
        }
        let verdict = ev.check_baseline();
        if let Some(v) = verdict.verification(gpu) {
            if let Err(e) = store.set_verification(&rec, &v) {
                say(Line::Note(format!("r3: warning: {e}")));
            }
        }
        match verdict {
            Verdict::Reproduces | Verdict::NotDeterministic(_) => {
                return Searchable::Ready(Box::new(ev))
            }
            Verdict::Irreproducible(why) => last = why,
            Verdict::NotChecked(why) => return Searchable::Failed(format!("{}: {why}", rec.id)),
        }
    }
    Searchable::Irreproducible(last)
}

/// Offers nvcc's code of the evaluator's kernel to its search, where `how` asks for it: made
/// now if the store does not hold it. Its absence is said once per kernel, and its search then
/// records why as a trial that did not compile.
pub fn offer_nvcc(store: &Store, ev: &mut GpuEvaluator, how: &GpuTune, say: Say) {
    if !how.nvcc {
        return;
    }
    let _span = crate::replay::timeline::span("tune.nvcc", || ev.kernel().hash.to_string());
    let code = crate::nvcc::code(store, ev.kernel(), &ev.target().sm);
    if let Err(why) = &code {
        say(Line::Note(format!(
            "r3 tune: {}: nvcc's code is not measured: {why}",
            ev.kernel().label()
        )));
    }
    ev.offer_nvcc(code);
}

/// Sets the L2 state the search measures in, says so where it matters, and keeps the choice
/// beside the trials for `r3 report`.
pub fn choose_l2(
    store: &Store,
    ev: &mut GpuEvaluator,
    kernel: &TrialsKey,
    policy: l2::Policy,
    say: Say,
) {
    let c = ev.choose_l2(policy);
    if c.worth_showing() {
        say(Line::Note(format!("r3 tune: {kernel}: {}", c.summary())));
    }
    if let Err(e) = store.write_l2_choice(kernel, &ev.device().gpu, &c) {
        say(Line::Note(format!("r3 tune: {kernel}: {e}")));
    }
}

/// The recordings of a selection, one group per kernel (content hash), in the order their
/// kernels first appear; a recording that leads to no stored kernel is a group of its own, so
/// that its error is said once. Within a group, the recording that stands for the most of the
/// programs' time comes first (`store::records::heaviest_first`): a kernel is searched on
/// its group's first recording that reproduces.
/// Kernels compiled without optimization are left out, each with a note: every LLVM pass
/// skips `optnone` code, so a search could only time the same code again and again.
pub fn by_kernel(
    store: &Store,
    recs: Vec<Recording>,
    say: Say,
) -> Result<Vec<(TrialsKey, Vec<Recording>)>, crate::store::StoreError> {
    let index = store.index()?;
    let mut groups: Vec<(TrialsKey, Vec<Recording>)> = Vec::new();
    let mut unoptimized: Vec<String> = Vec::new();
    for r in recs {
        let key = match index.of_recording(&r) {
            identity::Resolution::Kernel(k) if k.signature.unoptimized => {
                if !unoptimized.contains(&k.label()) {
                    say(Line::Note(format!(
                        "r3 tune: {}: not searched: compiled without optimization (-O0), which \
                         no pass changes; rebuild with -O3 (with CMake: \
                         -DCMAKE_BUILD_TYPE=Release) and record again",
                        k.label()
                    )));
                    unoptimized.push(k.label());
                }
                continue;
            }
            identity::Resolution::Kernel(k) => TrialsKey::of_kernel(&k.hash),
            _ => TrialsKey::from(r.id.as_str()),
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    heaviest_first(&mut groups, &store.recorded_time());
    Ok(groups)
}

/// Each group's recordings by the time they stand for (`time`, ms), the most first.
fn heaviest_first(groups: &mut [(TrialsKey, Vec<Recording>)], time: &HashMap<String, f64>) {
    for (_, group) in groups {
        crate::store::records::heaviest_first(group, time);
    }
}

/// `r3 tune` on this GPU: one search per kernel of `recs`, each against its first recording
/// whose -O3 baseline reproduces it, then its winner confirmed and, unless asked not to, its
/// passes ablated.
#[allow(clippy::too_many_arguments)]
pub fn tune_on_gpu(
    store: &Store,
    recs: Vec<Recording>,
    driver: (i32, i32),
    gpu: &GpuInfo,
    base: &TuneOptions,
    how: &GpuTune,
    stop: &AtomicBool,
    say: Say,
) -> Result<Tally, SessionError> {
    let _shared = crate::replay::worker::SharedSnapshots::start();
    let target = target(driver, gpu);
    let mut tally = Tally::default();
    for (key, recs) in by_kernel(store, recs, say)? {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let opts = measure_options(gpu, &how.measure);
        let mut ev = match reproducing_evaluator(store, recs, &target, &opts, &gpu.name, say) {
            Searchable::Ready(ev) => *ev,
            Searchable::Irreproducible(why) => {
                say(Line::Note(format!(
                    "r3 tune: {}: not searched: {}",
                    kernel_label(store, &key),
                    crate::store::records::irreproducible_text(&why)
                )));
                tally.irreproducible += 1;
                continue;
            }
            Searchable::Failed(e) => {
                say(Line::Note(format!("r3 tune: {e}")));
                tally.failed += 1;
                continue;
            }
        };
        offer_nvcc(store, &mut ev, how, say);
        one_kernel_on_gpu(store, &mut ev, base, how, stop, &mut tally, say)?;
    }
    if tally.irreproducible > 0 {
        say(Line::Note(format!(
            "r3 tune: {} kernel(s) searched; {} not searched because no recording of theirs reproduces (re-record their programs); {} failed in r3 (errors above)",
            tally.searched, tally.irreproducible, tally.failed
        )));
    }
    Ok(tally)
}

/// Why a tuning session could not go on at all (a kernel's own failure is said, counted in
/// the `Tally`, and the next kernel goes on).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Space(#[from] crate::space::SpaceError),
    /// `--program` names no workload the store has a census of (`program::Scope::program`).
    #[error("{0}")]
    Program(String),
}

/// The space a kernel's search explores on the launch its evaluator replays; a note says where
/// variants are left out of it ([`space_options`]).
pub fn space_for(
    store: &Store,
    ev: &GpuEvaluator,
    how: &GpuTune,
    say: Say,
) -> Result<Space, crate::space::SpaceError> {
    let (k, rec) = (ev.kernel(), ev.recording());
    let offered = if how.specialize {
        let (offered, note) = specializations_saying(store, k, rec);
        if let Some(note) = note {
            say(Line::Note(note));
        }
        offered
    } else {
        Vec::new()
    };
    let run_ms = store.run_ms(&k.hash);
    let (opts, note) = space_options(&k.label(), offered, rec.launch.block, how, run_ms);
    if let Some(note) = note {
        say(Line::Note(note));
    }
    Space::builtin(opts)
}

/// The space's options for the kernel `label` searched on a launch of `block` whose values
/// offer the specializations `offered`. Specializations and block sizes ship as variants, each
/// loaded at its first launch; a kernel that runs too briefly in a program run (`run_ms`, by
/// the census) for any to save that load is searched without them, said in the note: a variant
/// that won in replay would be withheld by apply (issue 57: a one-launch convolution's variant
/// gained 3 µs in replay and cost its program 16-18 µs).
pub fn space_options(
    label: &str,
    offered: Vec<crate::candidate::Specialize>,
    block: [u32; 3],
    how: &GpuTune,
    run_ms: Option<f64>,
) -> (SpaceOptions, Option<String>) {
    let pays = crate::store::winner::variants_may_pay(run_ms);
    let block_sizes = how.block_size_agnostic && block[1] == 1 && block[2] == 1;
    let left_out = !offered.is_empty() || block_sizes;
    let note = (!pays && left_out).then(|| {
        format!(
            "r3 tune: {label}: searched without variants (specialized values, block sizes): it runs {:.3} ms in a program run, too little to repay a variant's first load ({} ms)",
            run_ms.unwrap_or(0.0),
            crate::store::winner::VARIANT_FIRST_LOAD_MS
        )
    });
    let opts = SpaceOptions {
        launch_threads: Some(block[0] * block[1] * block[2]),
        block_size_agnostic: block_sizes && pays,
        fast_math: how.measure.tolerance.is_some(),
        r3_passes: how.egraph,
        grid: how.grid,
        specialize: if pays { offered } else { Vec::new() },
        ..Default::default()
    };
    (opts, note)
}

/// The search of one kernel whose evaluator is ready, and what follows it.
fn one_kernel_on_gpu(
    store: &Store,
    ev: &mut GpuEvaluator,
    base: &TuneOptions,
    how: &GpuTune,
    stop: &AtomicBool,
    tally: &mut Tally,
    say: Say,
) -> Result<(), SessionError> {
    let space = space_for(store, ev, how, say)?;
    let opts = TuneOptions {
        kernel: TrialsKey::of_kernel(&ev.kernel().hash),
        budget: finite_budget(base.budget, &space),
        ..base.clone()
    };
    // The trials file's lock first: a second search of this kernel on this GPU stops here,
    // before it measures anything beside the first.
    let Some(log) = claim(store, &opts, &ev.device().gpu, how.fleet, tally, say) else {
        return Ok(());
    };
    choose_l2(store, ev, &opts.kernel, how.measure.l2, say);
    tally.searched += 1;
    tally
        .searches
        .push((opts.kernel.clone(), ev.device().gpu.clone()));
    match search(store, log, ev, &space, &opts, how.resume, stop, say) {
        Ok(stopped) => {
            tally.interrupted |= stopped == Stop::Interrupted;
            confirm_best(store, ev, &opts.kernel, None, say);
            if how.ablate && !stop.load(Ordering::SeqCst) {
                if let Err(e) = ablate_best(store, ev, &opts, say) {
                    say(Line::Note(format!(
                        "r3 tune: {}: ablations: {}",
                        opts.kernel,
                        with_causes(&e)
                    )));
                    tally.errors += 1;
                }
            }
        }
        Err(e) => {
            say(Line::Note(format!(
                "r3 tune: {}: {}",
                opts.kernel,
                with_causes(&e)
            )));
            tally.failed += 1;
        }
    }
    Ok(())
}

/// An error and what caused it, each after a colon (as the CLI's errors are shown).
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// The kernel's trials file, opened for this search: in a fleet, only where no other worker
/// holds it or finished it (said otherwise); a kernel named alone, always, or the error.
fn claim(
    store: &Store,
    opts: &TuneOptions,
    gpu: &str,
    in_fleet: bool,
    tally: &mut Tally,
    say: Say,
) -> Option<TrialLog> {
    let log = if in_fleet {
        match fleet::claim(store, &opts.kernel, gpu, opts.budget) {
            Ok(Claim::Take(log)) => Ok(log),
            Ok(other) => {
                let label = kernel_label(store, &opts.kernel);
                say(Line::Note(
                    fleet::left_because(&label, &other).unwrap_or_default(),
                ));
                return None;
            }
            Err(e) => Err(e),
        }
    } else {
        store.open_trials(&opts.kernel, gpu)
    };
    log.map_err(|e| {
        say(Line::Note(format!("r3 tune: {}: {e}", opts.kernel)));
        tally.failed += 1;
    })
    .ok()
}

/// One search in an open trials file, with progress said as it goes and the outcome said at
/// the end; how it stopped.
#[allow(clippy::too_many_arguments)]
pub fn search<E: Evaluator + Sync>(
    store: &Store,
    log: TrialLog,
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    resume: bool,
    stop: &AtomicBool,
    say: Say,
) -> Result<Stop, tune::TuneError> {
    let label = kernel_label(store, &opts.kernel);
    let (summary, path) = tune::tune_in_log(store, log, eval, space, opts, resume, stop, |p| {
        let best = p
            .best
            .map(|(t, r)| format!("best {} (trial {t})", crate::store::speed::faster(1.0 / r)))
            .unwrap_or_else(|| "no valid candidate yet".into());
        say(Line::Note(format!(
            "{label}: trial {}/{} · measured {} · {best} · {:.1}s",
            p.trial,
            p.budget,
            p.measured,
            p.elapsed.as_secs_f64()
        )));
    })?;
    for line in summary_lines(&label, &summary, &path, opts) {
        say(Line::Out(line));
    }
    if let Some(line) = eval.screen_summary() {
        say(Line::Out(line));
    }
    Ok(summary.stop)
}

fn summary_lines(
    label: &str,
    summary: &tune::Summary,
    path: &std::path::Path,
    opts: &TuneOptions,
) -> Vec<String> {
    let how = match summary.stop {
        Stop::Budget => "budget reached",
        Stop::Time => "time limit reached",
        Stop::Interrupted => "interrupted; continue with --resume",
    };
    let mut lines = vec![format!(
        "{label}: {} trials ({} resumed, {} measured), {how}; trials in {}",
        summary.trials,
        summary.resumed,
        summary.measured,
        path.display()
    )];
    if summary.learned_from > 0 && opts.strategy == "bo" {
        lines.push(format!(
            "learned from {} earlier searches in the store (their winners measured first; --no-transfer to start from nothing)",
            summary.learned_from
        ));
    }
    if !summary.recipes.is_empty() && opts.strategy == "bo" {
        lines.push(format!(
            "recipes measured first: {} (* the kernel's code meets its preconditions; --no-recipes to leave them out)",
            summary.recipes.join(", ")
        ));
    }
    if summary.stop == Stop::Time {
        lines.push(format!(
            "cut short by --time after {} of {} trials (the warm start of {} was measured in full)",
            summary.trials, opts.budget, summary.warm_start
        ));
    }
    if let Some(b) = &summary.best {
        lines.push(format!(
            "best: {} (trial {}): {}",
            crate::store::speed::faster(1.0 / b.ratio().unwrap_or(1.0)),
            b.trial,
            crate::passes::diff::candidate_brief(&b.candidate, 4)
        ));
    }
    lines
}

/// Re-measures the search's winner and runs it on the kernel's other recorded launches
/// (`confirm`), opening no fresh context after `until` (`confirm::confirm_best_until`), saying
/// what that gives.
pub fn confirm_best(
    store: &Store,
    ev: &GpuEvaluator,
    kernel: &TrialsKey,
    until: Option<std::time::Instant>,
    say: Say,
) {
    let launches = match kernel.kernel_hash() {
        Some(hash) => store.launches_of(&hash),
        None => Ok(Vec::new()),
    };
    let others: Vec<_> = match launches {
        Ok(all) => all
            .into_iter()
            .filter(|r| r.id != ev.recording().id)
            .map(|r| {
                let values = r.launch.values();
                (
                    r.id.clone(),
                    values,
                    ev.for_recording(r).map_err(|e| e.to_string()),
                )
            })
            .collect(),
        Err(e) => {
            say(Line::Note(format!(
                "r3 tune: {kernel}: {e}; the winner is checked on the searched launch only"
            )));
            Vec::new()
        }
    };
    match confirm::confirm_best_until(store, ev, &others, kernel, until) {
        Ok(lines) => lines.into_iter().for_each(|l| say(Line::Out(l))),
        Err(e) => say(Line::Note(format!("r3 tune: {kernel}: {e}"))),
    }
}

/// Why ablating the best failed.
#[derive(Debug, thiserror::Error)]
pub enum AblateError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Passes(#[from] crate::passes::diff::PassesError),
}

/// Measures what each pass of the best pipeline is worth: the best candidate with one pass
/// removed, each (`passes::diff::ablations`), as trials in the kernel's ablations file, where
/// `r3 report` finds them. Ablations already measured for this best are not repeated; one whose
/// PTX equals a measured trial's reuses its outcome.
pub fn ablate_best(
    store: &Store,
    ev: &GpuEvaluator,
    opts: &TuneOptions,
    say: Say,
) -> Result<(), AblateError> {
    let gpu = ev.device().gpu;
    let Some(best) = store.best_trial(&opts.kernel, &gpu)? else {
        return Ok(());
    };
    if best.candidate.is_nvcc() {
        // nvcc's code has no passes of r3's to take out.
        return Ok(());
    }
    let trials = store.trials(&opts.kernel, &gpu)?;
    let done = store.ablations(&store.trials_path(&opts.kernel, &gpu))?;
    let todo: Vec<Candidate> = crate::passes::diff::ablations(&best.candidate)?
        .into_iter()
        .map(|a| a.candidate)
        .filter(|c| !done.iter().any(|r| r.candidate == *c))
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    let known: Vec<_> = trials.iter().chain(&done).cloned().collect();
    let first = u32::try_from(known.len()).unwrap_or(u32::MAX);
    let ablation = TuneOptions {
        strategy: "ablation".into(),
        ..opts.clone()
    };
    let (recs, measured) = tune::evaluate_candidates(ev, &ablation, first, todo, &known);
    let mut log = store.open_ablations(&opts.kernel, &gpu)?;
    for r in &recs {
        log.append(r)?;
    }
    let failed = recs.iter().filter(|r| r.ptx_hash.is_none()).count();
    say(Line::Out(format!(
        "ablations: {} passes of the best pipeline removed one at a time ({measured} measured, {failed} did not compile, the rest had the PTX of a measured trial); `r3 report` shows what each is worth",
        recs.len()
    )));
    Ok(())
}

/// What `r3 evolve`'s judge searches with: the parent kernel's evaluator on its first
/// replayable recording (its L2 regime chosen), the search space and the inner search's
/// options, as `r3 tune` builds them.
pub fn judge_parts(
    store: &Store,
    k: &KernelRecord,
    driver: (i32, i32),
    gpu: &GpuInfo,
    how: &Measure,
    inner: (u32, Option<std::time::Duration>),
    say: Say,
) -> Result<(GpuEvaluator, Space, TuneOptions), String> {
    let rec = store
        .launches_of(&k.hash)
        .map_err(|e| with_causes(&e))?
        .into_iter()
        .next()
        .ok_or_else(|| {
            format!(
                "kernel {} has no replayable recording; fix: `r3 record -- <program>`",
                k.signature.demangled
            )
        })?;
    let b = rec.launch.block;
    let mut ev = GpuEvaluator::new(store, rec, target(driver, gpu), measure_options(gpu, how))
        .map_err(|e| with_causes(&e))?;
    choose_l2(store, &mut ev, &TrialsKey::of_kernel(&k.hash), how.l2, say);
    let space = Space::builtin(SpaceOptions {
        launch_threads: Some(b[0] * b[1] * b[2]),
        fast_math: how.tolerance.is_some(),
        specialize: specializations_of(store, k, ev.recording()),
        ..Default::default()
    })
    .map_err(|e| with_causes(&e))?;
    let tune = TuneOptions {
        kernel: TrialsKey::of_kernel(&k.hash),
        strategy: "bo".into(),
        seed: 0,
        budget: inner.0,
        time: inner.1,
        limit: None,
        batch: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        transfer: true,
        recipes: true,
        race: true,
    };
    Ok((ev, space, tune))
}

/// `r3 tune --simulate`: one search per landscape table, each under the kernel it names (a
/// stored kernel's hash, else the word as it is). One table is one search, as asked; several
/// are a worker's share of a fleet.
pub fn tune_simulated(
    store: &Store,
    tables: &[std::path::PathBuf],
    kernel: Option<String>,
    base: &TuneOptions,
    resume: bool,
    stop: &AtomicBool,
    say: Say,
) -> Result<Tally, SimulateError> {
    let index = store.index()?;
    let mut tally = Tally::default();
    for table in tables {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let landscape = sim::Landscape::load(table)?;
        let word = kernel.clone().unwrap_or_else(|| landscape.kernel.clone());
        let found = index.select(&word);
        let mut opts = base.clone();
        opts.kernel = match identity::distinct(&found) {
            0 => orphan_or_word(store, word, resume)?,
            1 => TrialsKey::of_kernel(&found[0].hash),
            _ => return Err(identity::ambiguous(&word, &found).into()),
        };
        let space = Space::builtin(landscape.space.clone())?;
        opts.budget = finite_budget(opts.budget, &space);
        let mut sim = sim::Simulator::new(landscape);
        let gpu = sim.device().gpu;
        let log = if tables.len() == 1 {
            store.open_trials(&opts.kernel, &gpu)?
        } else {
            match fleet::claim(store, &opts.kernel, &gpu, opts.budget)? {
                Claim::Take(log) => log,
                other => {
                    let label = kernel_label(store, &opts.kernel);
                    say(Line::Note(
                        fleet::left_because(&label, &other).unwrap_or_default(),
                    ));
                    continue;
                }
            }
        };
        tally.searched += 1;
        tally.searches.push((opts.kernel.clone(), gpu.clone()));
        let stopped = search(store, log, &mut sim, &space, &opts, resume, stop, say)?;
        tally.interrupted |= stopped == Stop::Interrupted;
    }
    Ok(tally)
}

/// Why `r3 tune --simulate` could not go on.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Landscape(#[from] sim::SimError),
    #[error(transparent)]
    Space(#[from] crate::space::SpaceError),
    #[error(transparent)]
    Tune(#[from] tune::TuneError),
}

/// Why a kernel named for `r3 tune --simulate` is refused, before anything is written.
#[derive(Debug, thiserror::Error)]
pub enum SimulatedKernelError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("`{word}` names no stored kernel (there is no store at {} yet); {}", .root.display(), landscape_fix(.word))]
    NoStore {
        word: String,
        root: std::path::PathBuf,
    },
    #[error("`{word}` names no stored kernel in {}: a simulated search under it would be a search of no kernel (trials/{}/); {}", .root.display(), crate::store::trials::slug(.word), landscape_fix(.word))]
    NoKernel {
        word: String,
        root: std::path::PathBuf,
    },
}

fn landscape_fix(word: &str) -> String {
    format!(
        "fix: name a stored kernel (`r3 kernels` lists them: a name, a hash or a prefix of one), or key the search by a name of its own: --landscape-name '{word}' in place of the kernel"
    )
}

/// A kernel named for `tune --simulate` must be one the store at `root` holds (or the prefix of
/// an orphaned search's hash, which the session continues): anything else would key a search
/// of no kernel, which `status` and the report would then show as one. A name of its own is
/// given with `--landscape-name`.
pub fn simulated_kernel_is_stored(
    root: &std::path::Path,
    word: &str,
) -> Result<(), SimulatedKernelError> {
    let Ok(st) = Store::open(root) else {
        return Err(SimulatedKernelError::NoStore {
            word: word.to_owned(),
            root: root.to_owned(),
        });
    };
    if !st.index()?.select_kernel(word)?.is_empty() {
        return Ok(());
    }
    // A source rewrite `r3 evolve` stored (its own compiler search, by hash), or a search whose
    // kernel directory is gone (which the session continues), by its hash or a prefix of it.
    let hex = word.len() >= 4 && word.bytes().all(|b| b.is_ascii_hexdigit());
    let lower = word.to_ascii_lowercase();
    let rewrite = st.variants()?.iter().any(|v| v.hash.starts_with(&lower));
    let orphan = st.orphaned_trials()?.iter().any(|(p, _)| {
        p.parent()
            .and_then(std::path::Path::file_name)
            .is_some_and(|h| h.to_string_lossy().starts_with(&lower))
    });
    if hex && (rewrite || orphan) {
        return Ok(());
    }
    // Where the word's kernel may be one whose directory is gone: those searches, named.
    if let Some(e) = st.orphaned_error(word)? {
        return Err(e.into());
    }
    Err(SimulatedKernelError::NoKernel {
        word: word.to_owned(),
        root: st.root().to_owned(),
    })
}

/// The key of a word that names no stored kernel: an orphaned search's hash (its kernel's
/// directory gone) where the word is a prefix of one, else the word as it is, unless resuming
/// with nothing of the word's own to resume while orphaned trials wait: then an error names
/// them, rather than a new search starting beside them.
fn orphan_or_word(
    store: &Store,
    word: String,
    resume: bool,
) -> Result<TrialsKey, crate::store::StoreError> {
    let orphans = store.orphaned_trials()?;
    let hashes: std::collections::BTreeSet<String> = orphans
        .iter()
        .filter_map(|(p, _)| p.parent()?.file_name()?.to_str().map(str::to_owned))
        .filter(|h| word.len() >= 4 && h.starts_with(&word.to_ascii_lowercase()))
        .collect();
    if hashes.len() == 1 {
        return Ok(hashes.into_iter().next().unwrap_or_default().into());
    }
    let word = TrialsKey::from(word);
    if resume && !store.has_trials(&word)? {
        if let Some(e) = crate::store::trials::orphaned_error_of(&word, &orphans) {
            return Err(e);
        }
    }
    Ok(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn how() -> GpuTune {
        GpuTune {
            measure: Measure {
                repeat: 1,
                l2: Default::default(),
                tolerance: None,
                screen: false,
            },
            ablate: false,
            resume: false,
            block_size_agnostic: true,
            egraph: false,
            grid: false,
            specialize: true,
            fleet: false,
            deadline_id: None,
            nvcc: false,
        }
    }

    fn recording(id: &str) -> Recording {
        let launch = r#"{"format": 1, "kernel": "k", "arch": "sm_90", "grid": [1,1,1],
            "block": [256,1,1], "shared_bytes": 0, "params": [], "args_hex": "", "va_base": 1,
            "va_size": 2, "in_app_ms": 1.0, "regions": 0, "bytes_in": 0, "bytes_changed": 0,
            "replayable": true, "not_replayable": null, "program": "/bin/x", "pid": 1,
            "unix_time": 0}"#;
        Recording {
            dir: std::path::PathBuf::from("/nonexistent"),
            id: id.into(),
            launch: serde_json::from_str(launch).unwrap(),
            verification: None,
            kernel: None,
        }
    }

    /// Recordings are named by a hash of their launch: the first by name may be a tiny
    /// warm-up. The search goes to the one the programs spend their time in.
    #[test]
    fn a_kernel_is_searched_first_on_the_recording_that_stands_for_the_most_time() {
        let ids = |g: &[(TrialsKey, Vec<Recording>)]| -> Vec<Vec<String>> {
            g.iter()
                .map(|(_, rs)| rs.iter().map(|r| r.id.clone()).collect())
                .collect()
        };
        let mut groups = vec![
            (
                TrialsKey::from("bfs"),
                ["k/15446e", "k/78bf26", "k/992a14", "k/c0ffee"]
                    .map(recording)
                    .to_vec(),
            ),
            (
                TrialsKey::from("saxpy"),
                ["s/2", "s/1"].map(recording).to_vec(),
            ),
        ];
        let time: HashMap<String, f64> =
            [("k/15446e", 0.03), ("k/78bf26", 0.05), ("k/c0ffee", 52.0)]
                .map(|(id, ms)| (id.to_owned(), ms))
                .into();
        heaviest_first(&mut groups, &time);
        assert_eq!(
            ids(&groups),
            [
                vec!["k/c0ffee", "k/78bf26", "k/15446e", "k/992a14"],
                // No census timed them: as they came.
                vec!["s/2", "s/1"],
            ]
        );
    }

    #[test]
    fn a_kernel_too_brief_to_repay_a_variants_load_is_searched_without_variants() {
        let offered = vec![crate::candidate::Specialize {
            block: Some([256, 1, 1]),
            ..Default::default()
        }];
        let options =
            |how: &GpuTune, run_ms| space_options("k", offered.clone(), [256, 1, 1], how, run_ms);
        let (long, note) = options(&how(), Some(5.0));
        assert!(!long.specialize.is_empty() && long.block_size_agnostic && note.is_none());
        let (unknown, note) = options(&how(), None);
        assert_eq!(unknown.specialize, long.specialize);
        assert!(note.is_none());
        let (brief, note) = options(&how(), Some(0.05));
        assert!(brief.specialize.is_empty() && !brief.block_size_agnostic);
        let note = note.expect("the search says why");
        assert!(
            note.contains("0.050 ms") && note.contains("first load"),
            "{note}"
        );
        // What ships as the generic code is still searched.
        assert_eq!(brief.launch_threads, long.launch_threads);
        // Nothing left out (no values to fold, no block sizes asked for): nothing to say.
        let plain = GpuTune {
            block_size_agnostic: false,
            ..how()
        };
        assert!(
            space_options("k", Vec::new(), [256, 1, 1], &plain, Some(0.05))
                .1
                .is_none()
        );
    }
}
