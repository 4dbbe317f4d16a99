//! The tuning loop, generic over [`Evaluator`]: the -O3 baseline first, then rounds of `batch`
//! candidates from the strategy, compiled in parallel on all cores, measured on the GPU
//! (candidates whose PTX equals one already measured are not measured again: they reuse that
//! result), each trial written to the trials database as it finishes, and the results told
//! to the strategy in trial order at the end of the round.
//!
//! Resume is exact: strategies are deterministic in their seed and the tells they get, and
//! rounds are fixed by trial index, so replaying the recorded trials through ask/tell brings
//! the strategy to the state it had; recorded trials are not evaluated again.

use super::space::Space;
use super::strategy::{self, Strategy};
use crate::candidate::Candidate;
use crate::replay::{Evaluator, Lowered, Outcome};
use crate::store::trials::{TrialLog, TrialRecord, FORMAT};
use crate::store::StoreError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub kernel: String,
    pub strategy: String,
    pub seed: u64,
    /// Trials in all, the baseline included.
    pub budget: u32,
    /// Stop after the round in which this much time has passed.
    pub time: Option<Duration>,
    /// Candidates per round (compiled in parallel, measured as one batch).
    pub batch: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Strategy(#[from] strategy::UnknownStrategy),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("kernel {kernel}: the trials recorded ({what} {recorded}) differ from this run's ({given}); fix: resume with the recorded settings, or move {path} away to start over")]
    ResumeSettings {
        kernel: String,
        what: &'static str,
        recorded: String,
        given: String,
        path: String,
    },
    #[error("kernel {kernel}: recorded trial {trial} is not what the search asks now (different r3, space or strategy version); fix: move {path} away to start over")]
    ResumeDiverged {
        kernel: String,
        trial: u32,
        path: String,
    },
    #[error("kernel {kernel}: {path} already holds {n} trials; fix: --resume to continue them, or move the file away to start over")]
    Exists {
        kernel: String,
        path: String,
        n: usize,
    },
    #[error("search space: {0}")]
    Space(String),
    #[error("kernel {kernel}: the baseline (default<O3>) failed: {outcome:?}")]
    Baseline { kernel: String, outcome: Outcome },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    Budget,
    Time,
    Interrupted,
}

#[derive(Debug, Clone)]
pub struct Progress {
    pub trial: u32,
    pub budget: u32,
    pub measured: u32,
    pub best: Option<(u32, f64)>,
    pub elapsed: Duration,
}

#[derive(Debug, Clone)]
pub struct Summary {
    pub trials: u32,
    /// Trials measured on the GPU in this session (not resumed, not duplicates).
    pub measured: u32,
    pub resumed: u32,
    pub best: Option<TrialRecord>,
    pub stop: Stop,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Lowers candidates on all cores (scoped threads), keeping their order.
fn lower_all<E: Evaluator + Sync>(
    eval: &E,
    kernel: &str,
    cands: &[Candidate],
) -> Vec<Result<Lowered, Outcome>> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(cands.len().max(1));
    let chunk = cands.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = cands
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|c| eval.lower(kernel, c))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("lowering thread panicked"))
            .collect()
    })
}

/// Runs (or resumes, when `prior` holds recorded trials) a tuning session.
pub fn tune<E: Evaluator + Sync>(
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    prior: Vec<TrialRecord>,
    mut log: Option<&mut TrialLog>,
    stop: &AtomicBool,
    mut progress: impl FnMut(&Progress),
) -> Result<Summary, TuneError> {
    let kernel = &opts.kernel;
    let path = log
        .as_ref()
        .map(|l| l.path().display().to_string())
        .unwrap_or_else(|| "(no trials file)".into());
    let batch = prior.first().map(|r| r.batch).unwrap_or(opts.batch).max(1);
    if let Some(r) = prior.first() {
        for (what, recorded, given) in [
            ("strategy", r.strategy.clone(), opts.strategy.clone()),
            ("seed", r.seed.to_string(), opts.seed.to_string()),
        ] {
            if recorded != given {
                return Err(TuneError::ResumeSettings {
                    kernel: kernel.clone(),
                    what,
                    recorded,
                    given,
                    path,
                });
            }
        }
    }
    let mut strat: Box<dyn Strategy + Send> = strategy::make(&opts.strategy, opts.seed)?;
    let device = eval.device();
    let start = Instant::now();
    let mut measured_by_hash: HashMap<String, (u32, Outcome)> = HashMap::new();
    let mut best: Option<TrialRecord> = None;
    let mut trial: u32 = 0;
    let (mut measured, mut resumed) = (0u32, 0u32);
    let stop_reason;

    loop {
        // The round: the baseline alone, then fixed rounds of `batch` trials.
        let n = if trial == 0 {
            1
        } else {
            batch.min(opts.budget.saturating_sub(trial))
        };
        if n == 0 {
            stop_reason = Stop::Budget;
            break;
        }
        let cands: Vec<Candidate> = if trial == 0 {
            vec![Candidate::baseline()]
        } else {
            (0..n).map(|_| strat.ask(space)).collect()
        };
        let mut records: Vec<Option<TrialRecord>> = vec![None; cands.len()];
        let mut todo = Vec::new();
        for (j, c) in cands.iter().enumerate() {
            let t = trial + j as u32;
            match prior.get(t as usize) {
                Some(r) if r.trial == t && r.candidate == *c => {
                    records[j] = Some(r.clone());
                    resumed += 1;
                }
                Some(_) => {
                    return Err(TuneError::ResumeDiverged {
                        kernel: kernel.clone(),
                        trial: t,
                        path,
                    })
                }
                None => todo.push(j),
            }
        }
        // Recorded results count as measured for deduplication, in trial order.
        remember_measured(&mut measured_by_hash, records.iter().flatten());

        if !todo.is_empty() {
            let to_lower: Vec<Candidate> = todo.iter().map(|&j| cands[j].clone()).collect();
            let lowered = lower_all(&*eval, kernel, &to_lower);
            // Which to measure: the first of each PTX not measured before.
            let mut batch_hashes: HashMap<String, u32> = HashMap::new();
            let mut to_measure: Vec<Lowered> = Vec::new();
            let mut plan = Vec::new(); // (j, lowered-or-error, duplicate_of)
            for (&j, l) in todo.iter().zip(lowered) {
                let t = trial + j as u32;
                match l {
                    Err(o) => plan.push((j, None, Err(o))),
                    Ok(l) => {
                        let h = l.ptx_hash.clone();
                        let dup = measured_by_hash
                            .get(&h)
                            .map(|(t, _)| *t)
                            .or_else(|| batch_hashes.get(&h).copied());
                        if dup.is_none() {
                            batch_hashes.insert(h, t);
                            to_measure.push(l.clone());
                        }
                        plan.push((j, Some(l), Ok(dup)));
                    }
                }
            }
            let m0 = Instant::now();
            let outcomes = if to_measure.is_empty() {
                Vec::new()
            } else {
                eval.measure(kernel, &to_measure)
            };
            let per = m0.elapsed().as_secs_f64() * 1e3 / to_measure.len().max(1) as f64;
            measured += to_measure.len() as u32;
            let mut by_hash: HashMap<String, Outcome> = HashMap::new();
            for (l, o) in to_measure.iter().zip(outcomes) {
                by_hash.insert(l.ptx_hash.clone(), o);
            }
            for (j, l, dup) in plan {
                let t = trial + j as u32;
                let (ptx_hash, outcome, duplicate_of, passes_ms, codegen_ms, mms) = match (l, dup) {
                    (None, Err(o)) => (None, o, None, 0.0, 0.0, 0.0),
                    (Some(l), Ok(None)) => {
                        let o = by_hash[&l.ptx_hash].clone();
                        (Some(l.ptx_hash), o, None, l.passes_ms, l.codegen_ms, per)
                    }
                    (Some(l), Ok(Some(d))) => {
                        let o = measured_by_hash
                            .get(&l.ptx_hash)
                            .map(|x| x.1.clone())
                            .unwrap_or_else(|| by_hash[&l.ptx_hash].clone());
                        (Some(l.ptx_hash), o, Some(d), l.passes_ms, l.codegen_ms, 0.0)
                    }
                    _ => unreachable!("plan entries pair a lowering with its dedup"),
                };
                let rec = TrialRecord {
                    format: FORMAT,
                    trial: t,
                    kernel: kernel.clone(),
                    gpu: device.gpu.clone(),
                    driver: device.driver.clone(),
                    r3_version: env!("CARGO_PKG_VERSION").into(),
                    strategy: opts.strategy.clone(),
                    seed: opts.seed,
                    batch,
                    candidate: cands[j].clone(),
                    ptx_hash,
                    duplicate_of,
                    outcome,
                    passes_ms,
                    codegen_ms,
                    measure_ms: mms,
                    finished_unix_ms: now_ms(),
                };
                records[j] = Some(rec);
            }
            // Written in trial order, each durably, before anything is told.
            for r in records
                .iter()
                .flatten()
                .filter(|r| r.trial as usize >= prior.len())
            {
                if let Some(log) = log.as_deref_mut() {
                    log.append(r)?;
                }
            }
            remember_measured(&mut measured_by_hash, records.iter().flatten());
        }

        for r in records.into_iter().flatten() {
            if r.trial == 0 && r.ratio().is_none() {
                return Err(TuneError::Baseline {
                    kernel: kernel.clone(),
                    outcome: r.outcome,
                });
            }
            strat.tell(&r.candidate, r.ratio());
            if r.ratio().is_some()
                && best
                    .as_ref()
                    .is_none_or(|b| r.ratio().unwrap() < b.ratio().unwrap())
            {
                best = Some(r.clone());
            }
        }
        trial += n;
        progress(&Progress {
            trial,
            budget: opts.budget,
            measured,
            best: best.as_ref().map(|b| (b.trial, b.ratio().unwrap())),
            elapsed: start.elapsed(),
        });
        if trial >= opts.budget {
            stop_reason = Stop::Budget;
            break;
        }
        if stop.load(Ordering::SeqCst) {
            stop_reason = Stop::Interrupted;
            break;
        }
        if opts.time.is_some_and(|t| start.elapsed() >= t) {
            stop_reason = Stop::Time;
            break;
        }
    }
    Ok(Summary {
        trials: trial,
        measured,
        resumed,
        best,
        stop: stop_reason,
    })
}

/// Trials until a candidate within `fraction` of the best known time was found (time ≤
/// best / fraction), running a strategy on a simulated landscape without a store.
pub fn trials_to_reach(
    landscape: &super::sim::Landscape,
    strategy: &str,
    seed: u64,
    budget: u32,
    fraction: f64,
) -> Result<Option<u32>, TuneError> {
    let target = landscape.best_known().unwrap_or(1.0) / fraction;
    let space =
        Space::builtin(landscape.space.clone()).map_err(|e| TuneError::Space(e.to_string()))?;
    let mut sim = super::sim::Simulator::new(landscape.clone());
    let opts = TuneOptions {
        kernel: landscape.kernel.clone(),
        strategy: strategy.into(),
        seed,
        budget,
        time: None,
        batch: 1,
    };
    let mut hit = None;
    tune(
        &mut sim,
        &space,
        &opts,
        Vec::new(),
        None,
        &AtomicBool::new(false),
        |p| {
            if hit.is_none() && p.best.is_some_and(|b| b.1 <= target + 1e-12) {
                hit = Some(p.trial);
            }
        },
    )?;
    Ok(hit)
}

/// Records which PTX has been measured (first trial wins), so identical PTX is measured once.
fn remember_measured<'a>(
    measured: &mut HashMap<String, (u32, Outcome)>,
    records: impl Iterator<Item = &'a TrialRecord>,
) {
    for r in records {
        if let (Some(h), None) = (&r.ptx_hash, r.duplicate_of) {
            if !matches!(r.outcome, Outcome::CompileError { .. }) {
                measured
                    .entry(h.clone())
                    .or_insert((r.trial, r.outcome.clone()));
            }
        }
    }
}

/// Tunes one kernel with its trials kept in the store: refuses to overwrite earlier trials
/// unless `resume`, in which case the search continues exactly where they stop.
pub fn tune_in_store<E: Evaluator + Sync>(
    store: &crate::store::Store,
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    resume: bool,
    stop: &AtomicBool,
    progress: impl FnMut(&Progress),
) -> Result<(Summary, std::path::PathBuf), TuneError> {
    let gpu = eval.device().gpu;
    let prior = store.trials(&opts.kernel, &gpu)?;
    let path = store.trials_path(&opts.kernel, &gpu);
    if !prior.is_empty() && !resume {
        return Err(TuneError::Exists {
            kernel: opts.kernel.clone(),
            path: path.display().to_string(),
            n: prior.len(),
        });
    }
    let mut log = store.open_trials(&opts.kernel, &gpu)?;
    let summary = tune(eval, space, opts, prior, Some(&mut log), stop, progress)?;
    Ok((summary, path))
}
