//! Tuning a program under one deadline (`r3 tune --deadline`): which kernels, what each is
//! worth to the programs that run it (the store's launch census), what a search of it is
//! expected to give (the store's history), and the GPU's [`deadline::Runner`]: each slice a
//! resumed tuning session of the kernel, its evaluator kept between slices.

use crate::deadline::{self, trial_seconds, Entrant, SliceOutcome};
use crate::kernel::TrialsKey;
use crate::replay::device::GpuInfo;
use crate::replay::gpu::GpuEvaluator;
use crate::replay::Evaluator;
use crate::rewrites::{RewriteOutcome, Rewriter};
use crate::session::{self, GpuTune, Line, Say, Searchable, SessionError, Tally};
use crate::space::Space;
use crate::store::deadline::Growth;
use crate::store::records::Recording;
use crate::store::{Store, StoreError};
use crate::tune::{self, TuneOptions};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Evaluators kept between slices (each a worker holding its recording on the GPU).
const LIVE_EVALUATORS: usize = 2;
/// A kernel this long a launch (recorded) is searched in rounds of its warm start's size.
const LONG_KERNEL_MS: f64 = 100.0;
/// Searches of at least this many trials tell what a search on this GPU reaches.
const HISTORY_TRIALS: usize = 10;
/// Searches of at least this many trials tell how far a search goes past its warm start.
const GROWTH_HISTORY_TRIALS: usize = 30;
/// With fewer such searches on the GPU, a deadline hopes for r3's own growth
/// (`deadline::R3_GROWTH`).
const GROWTH_MIN_SEARCHES: usize = 8;
/// The fitted growth is kept within these bounds (a few searches that found 50% more, or none
/// that found anything, must not make every search look endless or hopeless).
const GROWTH_FLOOR_BOUNDS: (f64, f64) = (0.01, 0.10);
const GROWTH_PER_LN_BOUNDS: (f64, f64) = (0.0, 0.15);

/// What the deadline is spent on: every recorded kernel, or one program's workloads.
#[derive(Debug, Clone, PartialEq)]
pub enum Scope {
    All,
    /// The allocation's key (a workload's `store::programs::workload_key`, or for all of an
    /// executable's workloads its `program_key`), the workloads' keys, and a name for people.
    Program {
        key: String,
        workloads: Vec<String>,
        name: String,
    },
}

impl Scope {
    pub fn key(&self) -> &str {
        match self {
            Scope::All => "all",
            Scope::Program { key, .. } => key,
        }
    }

    /// What `--program` names (`program`), or with none the whole store.
    pub fn of(store: &Store, program: Option<&str>) -> Result<Scope, String> {
        match program {
            None => Ok(Scope::All),
            Some(spec) => Scope::program(store, spec),
        }
    }

    /// `--program SPEC`: an executable (every workload of it the store has a census of, each
    /// weighed alike), or an executable and its arguments as shell words (`'./app -k 1'`: that
    /// workload alone).
    pub fn program(store: &Store, spec: &str) -> Result<Scope, String> {
        let words = shlex::split(spec).filter(|w| !w.is_empty()).ok_or_else(|| {
            format!("--program {spec:?}: not shell words (an unclosed quote?); fix: quote it as a shell would")
        })?;
        let whole = std::path::Path::new(spec).is_file();
        let (exe, args) = if whole {
            (spec.to_owned(), None)
        } else {
            (words[0].clone(), Some(words[1..].to_vec()))
        };
        let canonical = std::fs::canonicalize(&exe).map_err(|e| {
            format!("--program {exe}: {e}; fix: name the executable `r3 record` ran")
        })?;
        let path = canonical.display().to_string();
        let recorded: Vec<(String, String)> = store
            .programs()
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter_map(|p| {
                let c = p.census?;
                let same = c.path == path && args.as_ref().is_none_or(|a| *a == c.args);
                same.then(|| (p.key, c.name()))
            })
            .collect();
        let fix = format!("fix: `r3 record -- {spec}` (with this r3) first");
        match (recorded.as_slice(), args) {
            ([], _) => Err(format!(
                "{spec}: no launch census of this workload in the store; {fix}"
            )),
            ([(key, name)], Some(_)) => Ok(Scope::Program {
                key: key.clone(),
                workloads: vec![key.clone()],
                name: name.clone(),
            }),
            (many, _) => Ok(Scope::Program {
                key: crate::store::programs::program_key(&canonical),
                workloads: many.iter().map(|(k, _)| k.clone()).collect(),
                name: many
                    .iter()
                    .map(|(_, n)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }
}

/// The allocation's entrants: each kernel of `groups` (hash, its recordings) in the scope,
/// weighted by its share of the scope's programs' GPU time; and a note where the census
/// cannot weight them.
pub fn entrants(
    store: &Store,
    scope: &Scope,
    groups: &[(TrialsKey, Vec<Recording>)],
    gpu: &str,
) -> Result<(Vec<Entrant>, Option<String>), StoreError> {
    let shares = store.kernel_shares()?;
    let programs: Vec<String> = match scope {
        Scope::Program { workloads, .. } => workloads.clone(),
        Scope::All => {
            let mut keys: Vec<String> = shares
                .values()
                .flatten()
                .map(|s| s.program.clone())
                .collect();
            keys.sort();
            keys.dedup();
            keys
        }
    };
    // Each kernel's trials file, read once: its own search and the store's history.
    let searches: Vec<Search> = groups
        .iter()
        .map(|(kernel, _)| search_of(store, kernel, gpu))
        .collect();
    let prior = history_prior(&searches);
    let growth = history_growth(&searches);
    let alike = searched_shapes(store, gpu);
    let mut out = Vec::new();
    let mut unweighted = 0;
    for ((kernel, recs), search) in groups.iter().zip(&searches) {
        let mine: Vec<_> = kernel
            .kernel_hash()
            .and_then(|h| shares.get(&h))
            .into_iter()
            .flatten()
            .filter(|s| programs.contains(&s.program))
            .collect();
        if let Scope::Program { .. } = scope {
            if mine.is_empty() {
                continue;
            }
        }
        let (weight, share) = if programs.is_empty() {
            (1.0 / groups.len() as f64, 1.0)
        } else {
            let sum: f64 = mine.iter().map(|s| s.share).sum();
            let max = mine.iter().map(|s| s.share).fold(0.0, f64::max);
            (sum / programs.len() as f64, max)
        };
        unweighted += usize::from(mine.is_empty());
        let (trials, best) = (search.trials, search.best.unwrap_or(1.0));
        let ms = launch_ms(recs);
        let expected = expected_speedup(store, kernel, &alike).max(best);
        out.push(Entrant {
            kernel: kernel.clone(),
            label: session::kernel_label(store, kernel),
            weight,
            share,
            programs: mine.iter().map(|s| (s.program.clone(), s.share)).collect(),
            prior,
            growth,
            per_trial_s: trial_seconds(if ms > 0.0 { ms } else { 0.1 }, expected),
            setup_s: setup_seconds(ms),
            expected,
            trials,
            best,
            confirm_setup_s: confirm_setup_estimate(recs),
            launch_ms: ms,
            shape: crate::transfer::shape_of(store, kernel),
            // Set by the caller, which knows the GPU's bandwidth (`reuse_of`).
            reuse: None,
            rewrite: None,
        });
    }
    let note = if programs.is_empty() {
        Some("r3 tune --deadline: no program in the store has a launch census (record the programs again with this r3: `r3 record -- ./app`); every kernel is weighted the same".to_owned())
    } else if unweighted > 0 && *scope == Scope::All {
        Some(format!("r3 tune --deadline: {unweighted} kernel(s) are in no program's launch census (their programs were recorded by an older r3; record them again to weight them): they get a warm start only when nothing else is worth more"))
    } else {
        None
    };
    Ok((out, note))
}

/// The speedup searches on this GPU reached: the median of the other kernels' bests (searches
/// of at least `HISTORY_TRIALS`), or `deadline::DEFAULT_PRIOR` with fewer than three.
fn history_prior(searches: &[Search]) -> f64 {
    let mut bests: Vec<f64> = searches
        .iter()
        .filter(|s| s.trials as usize >= HISTORY_TRIALS)
        .filter_map(|s| s.best)
        .collect();
    if bests.len() < 3 {
        return deadline::DEFAULT_PRIOR;
    }
    bests.sort_by(f64::total_cmp);
    bests[bests.len() / 2].clamp(1.05, 3.0)
}

/// What searches on this GPU found after their warm start: for each search of at least
/// `GROWTH_HISTORY_TRIALS`, its best against its warm start's best, fitted ([`fit_growth`]);
/// None with fewer than `GROWTH_MIN_SEARCHES` (then r3's own fit holds).
fn history_growth(searches: &[Search]) -> Option<Growth> {
    let points: Vec<(f64, f64)> = searches
        .iter()
        .filter(|s| s.trials as usize >= GROWTH_HISTORY_TRIALS)
        .filter_map(|s| s.growth)
        .collect();
    fit_growth(&points)
}

/// One search's (ln of its warm start's best speedup, what it found past it: its best over
/// that, less one), from its trials; None without a valid trial in the warm start. A warm start
/// is taken as its usual length (`deadline::WARM_EXPECTED` trials; 65 of 67 on the H100 corpus
/// took 10 or 11), and the bests are the trials' own, unconfirmed.
fn growth_point(trials: &[crate::store::trials::TrialRecord]) -> Option<(f64, f64)> {
    let fastest = |warm_only: bool| {
        trials
            .iter()
            .filter(|t| !warm_only || t.trial < deadline::WARM_EXPECTED)
            .filter_map(|t| t.outcome.ratio())
            .filter(|r| *r > 0.0)
            .fold(f64::INFINITY, f64::min)
    };
    let (warm, all) = (fastest(true), fastest(false));
    warm.is_finite()
        .then(|| ((1.0 / warm).max(1.0).ln(), warm / all - 1.0))
}

/// The growth `floor + per_ln × x` nearest the points (x, growth) by least squares, kept within
/// `GROWTH_FLOOR_BOUNDS` and `GROWTH_PER_LN_BOUNDS`; None with fewer than `GROWTH_MIN_SEARCHES`.
pub fn fit_growth(points: &[(f64, f64)]) -> Option<Growth> {
    let points: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, g)| x.is_finite() && g.is_finite())
        .collect();
    if points.len() < GROWTH_MIN_SEARCHES {
        return None;
    }
    let n = points.len() as f64;
    let mean = |f: &dyn Fn(&(f64, f64)) -> f64| points.iter().map(f).sum::<f64>() / n;
    let (mx, mg) = (mean(&|p| p.0), mean(&|p| p.1));
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxg: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - mg)).sum();
    let slope = if sxx > 1e-12 { sxg / sxx } else { 0.0 };
    let per_ln = slope.clamp(GROWTH_PER_LN_BOUNDS.0, GROWTH_PER_LN_BOUNDS.1);
    let floor = (mg - per_ln * mx).clamp(GROWTH_FLOOR_BOUNDS.0, GROWTH_FLOOR_BOUNDS.1);
    Some(Growth {
        floor,
        per_ln,
        searches: points.len() as u32,
    })
}

/// A kernel's search on this GPU so far, from one read of its trials file.
struct Search {
    trials: u32,
    /// Its best speedup, as `Store::best_trial` picks it.
    best: Option<f64>,
    /// What it found past its warm start ([`growth_point`]).
    growth: Option<(f64, f64)>,
}

fn search_of(store: &Store, kernel: &TrialsKey, gpu: &str) -> Search {
    let trials = store.trials(kernel, gpu).unwrap_or_default();
    // A damaged confirmation file leaves the best unknown, as `best_trial` fails on it.
    let best = store
        .confirmations(&store.trials_path(kernel, gpu))
        .ok()
        .and_then(|confirmed| crate::store::winner::pick_best(&trials, &confirmed)?.ratio())
        .map(|r| 1.0 / r);
    Search {
        trials: trials.len() as u32,
        best,
        growth: growth_point(&trials),
    }
}

/// [`search_of`]'s trials and best, a kernel with no valid trial at 1x.
fn own_search(store: &Store, kernel: &TrialsKey, gpu: &str) -> (u32, f64) {
    let s = search_of(store, kernel, gpu);
    (s.trials, s.best.unwrap_or(1.0))
}

/// Valid trials a search needs before its best prices the kernels of its loop shape: as many
/// as a transfer source needs (`transfer`); a 1 s kernel's search under a 60 s deadline makes
/// about seven.
const SHAPE_EVIDENCE_TRIALS: usize = 5;

/// The searches on `gpu` in the store with enough trials to say what a kernel of their loop
/// shape may reach: (kernel, its shape, its best speedup by its own trials).
fn searched_shapes(store: &Store, gpu: &str) -> Vec<(TrialsKey, String, f64)> {
    let Ok(sets) = store.trial_sets() else {
        return Vec::new();
    };
    sets.into_iter()
        .filter_map(|(_, recs)| {
            let first = recs.first()?;
            let valid: Vec<f64> = recs.iter().filter_map(|t| t.outcome.ratio()).collect();
            if first.gpu != gpu || valid.len() < SHAPE_EVIDENCE_TRIALS {
                return None;
            }
            let best = 1.0 / valid.iter().copied().fold(f64::INFINITY, f64::min);
            let shape = crate::transfer::shape_of(store, &first.kernel)?;
            best.is_finite()
                .then(|| (first.kernel.clone(), shape, best.max(1.0)))
        })
        .collect()
}

/// The speedup a kernel's search is expected to run its candidates at: the median best of the
/// other searches of its loop shape (their winners lead its warm start, `transfer`), 1 where
/// there are none. A column walk whose twin reached 15× is priced at a fifteenth of its -O3 time
/// a candidate, not at -O3's: the twin of a 15× kernel had been left "not reached: its warm
/// start takes about 273 s" with 125 s left (H200, 2026-11-28).
fn expected_speedup(
    store: &Store,
    kernel: &TrialsKey,
    searched: &[(TrialsKey, String, f64)],
) -> f64 {
    let Some(mine) = crate::transfer::shape_of(store, kernel) else {
        return 1.0;
    };
    let mut bests: Vec<f64> = searched
        .iter()
        .filter(|(k, shape, _)| k != kernel && *shape == mine)
        .map(|(_, _, best)| *best)
        .collect();
    if bests.is_empty() {
        return 1.0;
    }
    bests.sort_by(f64::total_cmp);
    bests[bests.len() / 2]
}

/// Each kernel's [`rewrites::reuse`](crate::rewrites::reuse): its recorded launch's time
/// against the bytes that launch reads and changes, streamed at `gbs` GB/s.
fn reuse_of(groups: &[(TrialsKey, Vec<Recording>)], gbs: Option<f64>) -> Vec<(TrialsKey, f64)> {
    groups
        .iter()
        .filter_map(|(kernel, recs)| {
            let l = &recs.iter().find(|r| r.launch.in_app_ms > 0.0)?.launch;
            let bytes = l.bytes_in + l.bytes_changed;
            Some((
                kernel.clone(),
                crate::rewrites::reuse(l.in_app_ms, bytes, gbs)?,
            ))
        })
        .collect()
}

/// The kernel's recorded time a launch (ms; 0 where no recording has one).
fn launch_ms(recs: &[Recording]) -> f64 {
    recs.iter()
        .map(|r| r.launch.in_app_ms)
        .find(|t| *t > 0.0)
        .unwrap_or(0.0)
}

/// Seconds a fresh evaluator of a long kernel spends on -O3 before its candidates: the
/// baseline's check, the runs that learn which bytes are outputs (two), and its first trial,
/// the baseline timed beside itself (what one-run judging and candidates timed alone are
/// measured against). Short kernels' are within their trials' price. H200 (2026-11-29): a 1 s
/// kernel's first trial took 27 s with its L2 calibration, about eight runs of which this
/// leaves out now (`l2::needs_both`).
pub fn setup_seconds(ms: f64) -> f64 {
    use crate::replay::stopping::{tie_pairs, warmups, ONE_RUN_US};
    let t_us = ms * 1e3;
    if t_us < ONE_RUN_US {
        return 0.0;
    }
    (3.0 + 2.0 * f64::from(warmups(t_us) + tie_pairs(t_us, true))) * ms / 1e3
}

/// Seconds a confirmation spends beyond its runs: it re-measures the winner in
/// `confirm::CONTEXTS` contexts (the search's and fresh ones), each loading the kernel's
/// recording.
/// Fitted to CloverLeaf on an H100 (2026-11-26): four confirmations of kernels that reach about
/// 450 MiB each took about 29 s, where 4 trials and 2 s each had been kept back (the deadline
/// overran by 16 s of 70).
fn confirm_setup_estimate(recs: &[Recording]) -> f64 {
    const CONTEXT_S: f64 = 0.5;
    const LOAD_BYTES_PER_S: f64 = 0.5e9;
    let bytes = recs.first().map_or(0, |r| r.launch.bytes_replayed()) as f64;
    crate::confirm::CONTEXTS as f64 * (CONTEXT_S + bytes / LOAD_BYTES_PER_S)
}

/// The GPU's runner: each slice a resumed session of the kernel's search.
pub struct GpuRunner<'a> {
    store: &'a Store,
    groups: BTreeMap<TrialsKey, Vec<Recording>>,
    target: crate::lower::Codegen,
    gpu: &'a GpuInfo,
    base: TuneOptions,
    how: GpuTune,
    stop: &'a AtomicBool,
    say: Say<'a>,
    /// What the slices came to, for the command's exit status.
    pub tally: Tally,
    start: Instant,
    live: deadline::Live<(GpuEvaluator, Space)>,
    /// The trials file of the kernel this worker decided to search next, taken under the
    /// allocation's lock (`hold`) for the slice that follows.
    held: Option<(TrialsKey, crate::store::trials::TrialLog)>,
    /// What makes the rewrite arm's attempts (r3-evolve's), where rewrites are on.
    rewriter: Option<&'a mut dyn Rewriter>,
    /// Notes on the kernels, said before the allocation's table by the worker that starts it.
    intro: Vec<String>,
}

impl<'a> GpuRunner<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: &'a Store,
        groups: Vec<(TrialsKey, Vec<Recording>)>,
        driver: (i32, i32),
        gpu: &'a GpuInfo,
        base: TuneOptions,
        how: GpuTune,
        stop: &'a AtomicBool,
        say: Say<'a>,
    ) -> Self {
        GpuRunner {
            store,
            groups: groups.into_iter().collect(),
            target: session::target(driver, gpu),
            gpu,
            base,
            how,
            stop,
            say,
            tally: Tally::default(),
            start: Instant::now(),
            live: deadline::Live::new(LIVE_EVALUATORS),
            held: None,
            rewriter: None,
            intro: Vec::new(),
        }
    }

    /// The kernel's evaluator and space, made (and its L2 regime chosen) on first use, kept
    /// for the next slices; Err: why it cannot be searched.
    fn evaluator(&mut self, kernel: &TrialsKey) -> Result<usize, String> {
        if let Some(i) = self.live.touch(kernel) {
            return Ok(i);
        }
        self.live.make_room();
        let _span = crate::replay::timeline::span("tune.evaluator", || kernel.to_string());
        let recs = self.groups.get(kernel).cloned().unwrap_or_default();
        let opts = session::measure_options(self.gpu, &self.how.measure);
        let mut ev = match session::reproducing_evaluator(
            self.store,
            recs,
            &self.target,
            &opts,
            &self.gpu.name,
            self.say,
        ) {
            Searchable::Ready(ev) => *ev,
            Searchable::Irreproducible(why) => {
                self.tally.irreproducible += 1;
                return Err(crate::store::records::irreproducible_text(&why));
            }
            Searchable::Failed(e) => {
                self.tally.failed += 1;
                return Err(e);
            }
        };
        session::offer_nvcc(self.store, &mut ev, &self.how, self.say);
        let space =
            session::space_for(self.store, &ev, &self.how, self.say).map_err(|e| e.to_string())?;
        let l2 = crate::replay::timeline::span("tune.l2", || kernel.to_string());
        session::choose_l2(self.store, &mut ev, kernel, self.how.measure.l2, self.say);
        drop(l2);
        Ok(self.live.insert(kernel, (ev, space)))
    }

    fn run_slice(
        &mut self,
        kernel: &TrialsKey,
        warm: bool,
        trials: u32,
        (limit_s, ships_from): (f64, f64),
    ) -> Result<SliceOutcome, String> {
        let long = self
            .groups
            .get(kernel)
            .and_then(|r| r.first())
            .is_some_and(|r| r.launch.in_app_ms >= LONG_KERNEL_MS);
        let before = own_search(self.store, kernel, &self.gpu.trials_name()).0;
        let made = std::time::Instant::now();
        let alive = self.live.find(kernel).is_some();
        let i = self.evaluator(kernel)?;
        let setup_s = if alive {
            0.0
        } else {
            made.elapsed().as_secs_f64()
        };
        let (ev, space) = self.live.get_mut(i);
        ev.ships_from(Some(ships_from));
        let cap = session::finite_budget(self.base.budget.max(2), space);
        let opts = TuneOptions {
            kernel: kernel.to_owned(),
            // A long kernel's trials are measured one after another whatever the batch, so its
            // rounds are of one trial: the slice's limit then holds to the trial. In rounds of the
            // warm start's portfolio, a 1.07 s kernel's baseline and first round (nine trials,
            // 82 s) ran past a limit that kept 30 s for three kernels not reached yet (H200,
            // 2026-11-29); its compiles overlapped nothing worth that.
            batch: if long { 1 } else { self.base.batch },
            budget: trials.min(cap),
            // The warm start: a time limit of nothing stops the search right after it (the
            // budget stops it at the warm start's largest size first).
            time: Some(if warm {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(limit_s.max(0.0))
            }),
            // Never past the slice's limit, the warm start included: its rounds are priced
            // before they start, and a kernel dearer than priced must not take the deadline.
            // The limit counts from the slice's start, its evaluator's setup included.
            limit: Some(Duration::from_secs_f64((limit_s - setup_s).max(0.0))),
            ..self.base.clone()
        };
        let gpu = ev.device().gpu;
        let held = match self.held.take() {
            Some((k, log)) if k == *kernel => Some(log),
            _ => None,
        };
        let claim = match held {
            // Taken with the decision; a search that reached this budget is still left.
            Some(log) => match self
                .store
                .search_end(&self.store.trials_path(kernel, &gpu))
                .map_err(|e| e.to_string())?
            {
                Some(end) if end.stop == "budget" && end.budget >= opts.budget => {
                    crate::fleet::Claim::Done(end)
                }
                _ => crate::fleet::Claim::Take(log),
            },
            None => crate::fleet::claim(self.store, kernel, &gpu, opts.budget)
                .map_err(|e| e.to_string())?,
        };
        let log = match claim {
            crate::fleet::Claim::Take(log) => log,
            other => {
                let label = session::kernel_label(self.store, kernel);
                return Err(crate::fleet::left_because(&label, &other).unwrap_or_default());
            }
        };
        let (summary, _) =
            tune::tune_in_log(self.store, log, ev, space, &opts, true, self.stop, |_| {})
                .map_err(|e| session::with_causes(&e))?;
        self.tally.interrupted |= summary.stop == tune::Stop::Interrupted;
        let (n, best) = own_search(self.store, kernel, &gpu);
        let exhausted = n >= cap;
        Ok(SliceOutcome {
            trials: n,
            best: Some(best),
            done: exhausted.then(|| format!("searched to its budget of {cap} trials")),
            seconds: 0.0,
            setup_s,
            trial_s: self.trial_seconds(kernel, &gpu, before),
            beside: crate::confirm::beside_best(self.store, kernel, &gpu).ok(),
        })
    }

    /// Seconds each trial from `from` on took by its record (lowering and measuring), the
    /// baseline's first trial left out: what the slice says a trial costs.
    fn trial_seconds(&self, kernel: &TrialsKey, gpu: &str, from: u32) -> Option<f64> {
        let trials = self.store.trials(kernel, gpu).ok()?;
        let ms: Vec<f64> = trials
            .iter()
            .filter(|t| t.trial >= from.max(1))
            .map(|t| t.passes_ms + t.codegen_ms + t.measure_ms)
            .collect();
        (!ms.is_empty()).then(|| ms.iter().sum::<f64>() / ms.len() as f64 / 1e3)
    }
}

impl deadline::Runner for GpuRunner<'_> {
    fn now_s(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn slice(
        &mut self,
        kernel: &TrialsKey,
        warm: bool,
        trials: u32,
        limit_s: f64,
        ships_from: f64,
    ) -> SliceOutcome {
        let _span =
            crate::replay::timeline::span(if warm { "tune.warm" } else { "tune.search" }, || {
                kernel.to_string()
            });
        match self.run_slice(kernel, warm, trials, (limit_s, ships_from)) {
            Ok(out) => out,
            Err(why) => {
                let label = session::kernel_label(self.store, kernel);
                (self.say)(Line::Note(format!("r3 tune: {label}: {why}")));
                let (n, best) = own_search(self.store, kernel, &self.gpu.trials_name());
                SliceOutcome {
                    trials: n,
                    best: Some(best),
                    done: Some(why),
                    seconds: 0.0,
                    setup_s: 0.0,
                    trial_s: None,
                    beside: None,
                }
            }
        }
    }

    fn busy(&self, kernel: &TrialsKey) -> bool {
        self.store.search_held(kernel, &self.gpu.trials_name())
    }

    fn hold(&mut self, kernel: &TrialsKey) -> bool {
        if self.held.as_ref().is_some_and(|(k, _)| k == kernel) {
            return true;
        }
        self.held = None;
        match self.store.open_trials(kernel, &self.gpu.trials_name()) {
            Ok(log) => {
                self.held = Some((kernel.clone(), log));
                true
            }
            Err(crate::store::StoreError::Busy { .. }) => false,
            // The slice's own claim says what is wrong.
            Err(_) => true,
        }
    }

    fn alive(&self, kernel: &TrialsKey) -> bool {
        self.live.find(kernel).is_some()
    }

    fn confirm(&mut self, kernel: &TrialsKey, until_s: f64) {
        let _span = crate::replay::timeline::span("tune.confirm", || kernel.to_string());
        // A live evaluator is used where it stands, not moved to the back as a slice's is: the
        // one confirmed because it is let go must stay the one let go.
        let live = self.live.find(kernel);
        match live.map_or_else(|| self.evaluator(kernel), Ok) {
            Ok(i) => {
                let ev = &self.live.get(i).0;
                let until = self.start + Duration::from_secs_f64(until_s.max(0.0));
                session::confirm_best(self.store, ev, kernel, Some(until), self.say);
            }
            Err(why) => (self.say)(Line::Note(format!(
                "r3 tune: {kernel}: not confirmed: {why}"
            ))),
        }
    }

    fn lets_go(&self, kernel: &TrialsKey) -> Option<String> {
        self.live.lets_go(kernel).map(str::to_owned)
    }

    fn withhold(&mut self, kernel: &TrialsKey, why: &str) {
        match crate::confirm::withhold_best(self.store, kernel, &self.gpu.trials_name(), why) {
            Ok(Some(line)) => (self.say)(Line::Out(line)),
            Ok(None) => {}
            Err(e) => (self.say)(Line::Note(format!("r3 tune: {kernel}: {e}"))),
        }
    }

    fn line(&self, kernel: &TrialsKey) -> f64 {
        deadline::line_of_best(self.store, kernel, &self.gpu.trials_name())
    }

    fn say(&mut self, line: String) {
        (self.say)(Line::Note(line));
    }

    fn starts(&mut self) {
        for line in std::mem::take(&mut self.intro) {
            (self.say)(Line::Note(line));
        }
    }

    fn rewrite(
        &mut self,
        kernel: &TrialsKey,
        limit_s: f64,
        first: Option<usize>,
    ) -> RewriteOutcome {
        let _span = crate::replay::timeline::span("tune.rewrite", || kernel.to_string());
        let out = match (kernel.kernel_hash(), self.rewriter.as_deref_mut()) {
            (Some(hash), Some(r)) => r.attempt(&hash, limit_s, first),
            _ => RewriteOutcome::none("no rewriter in this run"),
        };
        // Held for the attempt (other workers see the kernel busy), not past it.
        self.held = None;
        for line in &out.said {
            (self.say)(Line::Note(line.clone()));
        }
        out
    }

    fn deepen(
        &mut self,
        kernel: &TrialsKey,
        attempt: u32,
        trials: u32,
        times: (f64, f64),
    ) -> crate::rewrites::DeepenOutcome {
        let _span = crate::replay::timeline::span("tune.deepen", || kernel.to_string());
        let out = match (kernel.kernel_hash(), self.rewriter.as_deref_mut()) {
            (Some(hash), Some(r)) => r.deepen(&hash, attempt, trials, times),
            _ => crate::rewrites::DeepenOutcome::none("no rewriter in this run"),
        };
        self.held = None;
        for line in &out.said {
            (self.say)(Line::Note(line.clone()));
        }
        out
    }
}

/// Prices the rewrite arm of each entrant that `rewriter` can rewrite (`rewrites::price`), from
/// the store's evolve history on `gpu` and each kernel's `reuse`; what to say of the others,
/// once, as the allocation starts: why they get none.
fn price_rewrites(
    store: &Store,
    entrants: &mut [Entrant],
    (gpu, reuse): (&str, &[(TrialsKey, f64)]),
    rewriter: &mut dyn Rewriter,
) -> Option<String> {
    let reuse_of = |k: &TrialsKey| reuse.iter().find(|(r, _)| r == k).map(|(_, u)| *u);
    let mut history = crate::rewrites::history(store, gpu);
    for p in &mut history {
        p.reuse = reuse_of(&TrialsKey::of_kernel(&p.kernel));
    }
    let mut cannot = Vec::new();
    for e in entrants
        .iter_mut()
        .filter(|e| e.share >= deadline::SMALL_SHARE)
    {
        let Some(hash) = e.kernel.kernel_hash() else {
            continue;
        };
        match rewriter.cannot(&hash) {
            Some(why) => cannot.push(format!("{} ({why})", e.label)),
            None => {
                let pending = crate::rewrites::pending_attempts(store, &hash, gpu);
                let costs = (e.per_trial_s, e.setup_s, e.launch_ms / 1e3);
                e.rewrite = Some(crate::rewrites::price(
                    store,
                    &hash,
                    costs,
                    &history,
                    pending,
                    reuse_of(&e.kernel),
                ));
            }
        }
    }
    if cannot.is_empty() {
        return None;
    }
    let more = cannot.len().saturating_sub(3);
    let mut named = cannot[..cannot.len().min(3)].join("; ");
    if more > 0 {
        named += &format!("; and {more} more");
    }
    Some(format!(
        "r3 tune --deadline: no source rewrites of {} kernel(s): {named}",
        cannot.len()
    ))
}

/// The recording each entrant is searched on (its group's first), the heaviest first: the
/// order the deadline's warm starts mostly take, for reading them ahead.
fn in_weight_order(entrants: &[Entrant], groups: &[(TrialsKey, Vec<Recording>)]) -> Vec<Recording> {
    let mut order: Vec<&Entrant> = entrants.iter().collect();
    order.sort_by(|a, b| b.weight.total_cmp(&a.weight));
    order
        .into_iter()
        .filter_map(|e| {
            groups
                .iter()
                .find(|(k, _)| *k == e.kernel)?
                .1
                .first()
                .cloned()
        })
        .collect()
}

/// `r3 tune --deadline` on this GPU: the kernels recorded of `program` (`--program`; None:
/// every recorded kernel in the store) under one allocation of `deadline`.
#[allow(clippy::too_many_arguments)]
pub fn tune_deadline_on_gpu<'a>(
    store: &'a Store,
    program: Option<&str>,
    driver: (i32, i32),
    gpu: &'a GpuInfo,
    base: &TuneOptions,
    how: &GpuTune,
    deadline: Duration,
    rewriter: Option<&'a mut dyn Rewriter>,
    stop: &'a AtomicBool,
    say: Say<'a>,
) -> Result<Tally, SessionError> {
    let scope = &Scope::of(store, program).map_err(SessionError::Program)?;
    let recs = store.select_recordings(&crate::store::identity::Selection {
        kernel: None,
        all: true,
        record: None,
    })?;
    let shared = crate::replay::worker::SharedSnapshots::start();
    let groups = session::by_kernel(store, recs, say)?;
    // Trials are keyed by the device as they name it, not by its CUDA name: keyed by the name,
    // no earlier search was found (every kernel priced as never searched, the store's history
    // unseen) and another worker's search never seemed held.
    let (mut entrants, note) = entrants(store, scope, &groups, &gpu.trials_name())?;
    let mut rewriter = rewriter;
    // Said by the worker that starts the allocation, not by each worker of a fleet.
    let mut intro: Vec<String> = note.into_iter().collect();
    let reuse = reuse_of(&groups, crate::replay::device::memory_gbs(gpu.ordinal));
    for e in &mut entrants {
        e.reuse = reuse.iter().find(|(k, _)| *k == e.kernel).map(|(_, u)| *u);
    }
    if let Some(r) = rewriter.as_deref_mut() {
        intro.extend(price_rewrites(
            store,
            &mut entrants,
            (&gpu.trials_name(), &reuse),
            r,
        ));
    }
    shared.read_ahead(in_weight_order(&entrants, &groups));
    if entrants.is_empty() {
        for line in intro {
            say(Line::Note(line));
        }
        say(Line::Note(format!(
            "r3 tune --deadline: no recorded kernel of {} is in its launch census; fix: `r3 record -- <program>` with this r3",
            scope.key()
        )));
        return Ok(Tally::default());
    }
    let batch = base.batch;
    let mut runner = GpuRunner::new(
        store,
        groups,
        driver,
        gpu,
        base.clone(),
        how.clone(),
        stop,
        say,
    );
    runner.rewriter = rewriter;
    runner.intro = intro;
    runner
        .live
        .weigh(entrants.iter().map(|e| (e.kernel.clone(), e.weight)));
    let ended = deadline::run(
        store,
        scope.key(),
        &gpu.name,
        deadline.as_secs_f64(),
        || entrants,
        match (&how.deadline_id, how.resume) {
            (Some(id), _) => deadline::Continue::Fleet(id),
            (None, true) => deadline::Continue::Stored,
            (None, false) => deadline::Continue::Fresh,
        },
        batch,
        &mut runner,
        stop,
    )?;
    let a = store.allocation(scope.key(), &gpu.name)?;
    let mut tally = runner.tally.clone();
    tally.interrupted |= ended.interrupted;
    if let Some(a) = a {
        tally.searched = a.arms.iter().filter(|k| k.trials > 0).count();
        (runner.say)(Line::Out(deadline::summary(&a, &ended)));
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::programs::{Census, KernelCensus};

    fn census(program: &str, kernels: &[(&str, f64)]) -> Census {
        Census {
            format: 1,
            program: program.into(),
            path: format!("/build/{program}"),
            binary: format!("{program}-binary"),
            args: Vec::new(),
            unix_s: 1.0,
            launches: kernels.len() as u64,
            unknown_launches: 0,
            kernels: kernels
                .iter()
                .map(|&(hash, ms)| KernelCensus {
                    kernel: Some(hash.into()),
                    name: format!("_Z{hash}"),
                    launches: 1,
                    estimated_ms: Some(ms),
                    timed_launches: 1,
                    scaled_launches: 0,
                    recurrence: Vec::new(),
                    recorded: Vec::new(),
                })
                .collect(),
        }
    }

    fn groups(hashes: &[&str]) -> Vec<(TrialsKey, Vec<Recording>)> {
        hashes
            .iter()
            .map(|h| (TrialsKey::from(*h), Vec::new()))
            .collect()
    }

    #[test]
    fn kernels_are_weighted_by_their_share_of_each_program() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let (none, note) = entrants(&store, &Scope::All, &groups(&["aa", "bb"]), "GPU").unwrap();
        assert!(note
            .unwrap()
            .contains("no program in the store has a launch census"));
        assert_eq!(
            none.iter().map(|e| e.weight).collect::<Vec<_>>(),
            [0.5, 0.5]
        );

        // corr: one kernel at 99.9%; saxpy: one kernel alone; cc is in no census.
        store
            .put_census(&census("corr", &[("aa", 999.0), ("bb", 1.0)]))
            .unwrap();
        store.put_census(&census("saxpy", &[("dd", 5.0)])).unwrap();
        let g = groups(&["aa", "bb", "cc", "dd"]);
        let (all, note) = entrants(&store, &Scope::All, &g, "GPU").unwrap();
        let w = |k: &str| {
            all.iter()
                .find(|e| e.kernel == k)
                .map(|e| (e.weight, e.share))
        };
        assert_eq!(w("aa"), Some((0.999 / 2.0, 0.999)));
        assert_eq!(w("bb"), Some((0.001 / 2.0, 0.001)));
        assert_eq!(w("cc"), Some((0.0, 0.0)));
        assert_eq!(w("dd"), Some((0.5, 1.0)));
        assert!(note
            .unwrap()
            .contains("1 kernel(s) are in no program's launch census"));

        // One program: its kernels only, weighted by their share of it.
        let key = store
            .programs()
            .unwrap()
            .into_iter()
            .find(|p| p.census.as_ref().is_some_and(|c| c.program == "corr"))
            .unwrap()
            .key;
        let scope = Scope::Program {
            key: key.clone(),
            workloads: vec![key],
            name: "corr".into(),
        };
        let (corr, note) = entrants(&store, &scope, &g, "GPU").unwrap();
        assert_eq!(note, None);
        let got: Vec<(&str, f64)> = corr.iter().map(|e| (e.kernel.as_str(), e.weight)).collect();
        assert_eq!(got, [("aa", 0.999), ("bb", 0.001)]);
    }

    /// A search of `n` trials on "GPU" whose trial t runs at `ratio(t)` of -O3.
    fn search(store: &Store, kernel: &TrialsKey, n: u32, ratio: impl Fn(u32) -> f64) {
        use crate::store::fixtures::{trial, valid};
        let mut log = store.open_trials(kernel, "GPU").unwrap();
        for t in 0..n {
            let c = serde_json::json!({"pipeline": format!("p{t}")});
            log.append(&trial(kernel, "GPU", t, c, valid(100.0 * ratio(t), 100.0)))
                .unwrap();
        }
    }

    #[test]
    fn the_growth_hoped_after_a_warm_start_is_fitted_to_the_stores_searches() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        // Eight searches of 40 trials: kernel i reaches 2^(i/2) in its warm start and then
        // finds 2% + 5% x ln of that more at trial 30.
        let mut names = Vec::new();
        for i in 0..8 {
            let name = format!("k{i}");
            let warm = 2f64.powf(f64::from(i) / 2.0);
            let more = 1.0 + 0.02 + 0.05 * warm.ln();
            search(&store, &TrialsKey::from(name.as_str()), 40, |t| match t {
                0 => 1.0,
                t if t < 30 => 1.0 / warm,
                _ => 1.0 / (warm * more),
            });
            names.push(name);
        }
        let g = groups(&names.iter().map(String::as_str).collect::<Vec<_>>());
        let (all, _) = entrants(&store, &Scope::All, &g, "GPU").unwrap();
        let got = all[0].growth.expect("eight searches of 40 trials");
        assert_eq!(got.searches, 8);
        assert!((got.floor - 0.02).abs() < 1e-9, "{got:?}");
        assert!((got.per_ln - 0.05).abs() < 1e-9, "{got:?}");
        assert!(all.iter().all(|e| e.growth == Some(got)));
        // A search that improves at trial 12, past a usual warm start (11 trials), grew.
        search(&store, &TrialsKey::from("late"), 40, |t| {
            if t < 12 {
                0.5
            } else {
                0.4
            }
        });
        let late = search_of(&store, &TrialsKey::from("late"), "GPU")
            .growth
            .unwrap();
        assert!(
            (late.0 - 2f64.ln()).abs() < 1e-12 && (late.1 - 0.25).abs() < 1e-12,
            "{late:?}"
        );
        // Seven such searches and one of 29 trials are too few: r3's own fit.
        search(&store, &TrialsKey::from("short"), 29, |t| {
            if t < 20 {
                0.5
            } else {
                0.4
            }
        });
        let mut seven_and_short = names[..7].to_vec();
        seven_and_short.push("short".into());
        let g = groups(
            &seven_and_short
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        assert_eq!(
            entrants(&store, &Scope::All, &g, "GPU").unwrap().0[0].growth,
            None
        );
    }

    #[test]
    fn a_fitted_growth_stays_within_its_bounds() {
        // Searches that found nothing past their warm start: the floor stays at 1%.
        let flat = fit_growth(&[(0.5, 0.0); 8]).unwrap();
        assert_eq!((flat.floor, flat.per_ln), (0.01, 0.0));
        // Growth that falls with the speedup: no negative slope.
        let falling: Vec<(f64, f64)> = (0..8)
            .map(|i| (f64::from(i), 0.1 - 0.01 * f64::from(i)))
            .collect();
        let g = fit_growth(&falling).unwrap();
        assert_eq!(g.per_ln, 0.0);
        assert!((g.floor - 0.065).abs() < 1e-9, "{g:?}");
        // One search that found 50% more among seven that found 2%: held at the bounds.
        let mut wild = vec![(1.0, 0.02); 7];
        wild.push((3.0, 0.5));
        let g = fit_growth(&wild).unwrap();
        assert!(
            g.per_ln <= 0.15 && g.floor <= 0.10 && g.floor >= 0.01,
            "{g:?}"
        );
        assert_eq!(fit_growth(&[(1.0, 0.1); 7]), None);
        // A point that is not a number (a ratio of 0) is left out, not fitted.
        let mut with_nan = vec![(1.0, 0.02); 8];
        with_nan.push((f64::INFINITY, f64::NAN));
        assert_eq!(fit_growth(&with_nan).unwrap().searches, 8);
    }

    #[test]
    fn a_trial_is_priced_at_the_pairs_its_near_tie_takes() {
        // A 1 ms kernel (under one-run judging's 10 ms): the check, three warm-up pairs and ten
        // pairs at 1%, every candidate.
        let short = trial_seconds(1.0, 1.0);
        assert!((short - (0.3 + 27.0 * 0.001)).abs() < 1e-9, "{short}");
        assert!(trial_seconds(0.1, 1.0) < 0.4);
        assert_eq!(setup_seconds(1.0), 0.0);
    }

    /// A 1.07 s kernel's trial: its checked run; for the near-ties (`FULL_TIMING_SHARE`) a
    /// warm-up and three runs of their own (2% in a long kernel's search), for new bests
    /// (`NEW_BEST_SHARE`) as many pairs beside the baseline; where a kernel of its shape reached
    /// 15×, its candidates run at that.
    /// Priced at -O3 with every candidate timed in full it was 9 runs, 9.9 s, and its twin of a
    /// 15× kernel "not reached: its warm start takes about 273 s".
    #[test]
    fn a_long_kernels_trial_is_priced_at_one_run_and_at_what_its_twin_reached() {
        use crate::deadline::{FULL_TIMING_SHARE, NEW_BEST_SHARE};
        let alone = trial_seconds(1070.0, 1.0);
        let (near, new) = (4.0 * 1.07, 4.0 * 2.0 * 1.07);
        let want = 0.3 + 1.07 + FULL_TIMING_SHARE * near + NEW_BEST_SHARE * new;
        assert!((alone - want).abs() < 1e-9, "{alone}");
        assert!(alone < 0.5 * (0.3 + 9.0 * 1.07));
        let twin = trial_seconds(1070.0, 15.0);
        assert!(twin < 0.45 * alone, "{twin} against {alone}");
        // The baseline's check, its outputs learned, and itself timed beside itself.
        assert!((setup_seconds(1070.0) - 11.0 * 1.07).abs() < 1e-9);
    }
}
