//! The tuning loop, generic over [`Evaluator`]: the -O3 baseline first, then rounds of `batch`
//! candidates from the strategy. Within a round, compiling and measuring overlap: threads on
//! all cores lower the candidates in trial order and hand each over as it finishes, and this
//! thread measures whatever has arrived whenever the GPU is free (waiting only when nothing
//! is ready), while the rest are still compiling. Candidates whose PTX equals one already
//! measured (earlier, resumed, or in the same round) are not measured again: they reuse that
//! result, and within a round the lowest trial index counts as the measured one whatever
//! order the compiles finish in. After the round its trials are written to the trials
//! database in trial order, each durably, and then told to the strategy in trial order.
//!
//! Resume is exact: strategies are deterministic in their seed and the tells they get, and
//! rounds are fixed by trial index, so replaying the recorded trials through ask/tell brings
//! the strategy to the state it had; recorded trials are not evaluated again. After each full
//! round the strategy's state is checkpointed beside the trials (`Strategy::save`), pinned to
//! them by a digest; a resume restores it and tells the trials it covers without asking them
//! again, so its cost is what came after the checkpoint (a partly recorded round), not the
//! whole search. A checkpoint that is missing, stale or of another r3 means a full replay.

use super::space::Space;
use super::strategy::{self, Strategy};
use super::transfer::{Transfer, TransferError};
use crate::candidate::Candidate;
use crate::kernel::TrialsKey;
use crate::lower::Lowered;
use crate::replay::{Device, Evaluator};
use crate::store::outcome::Outcome;
use crate::store::trials::{
    Checkpoint, RecipePick, SearchEnd, TransferSources, TrialLog, TrialRecord, TrialsDigest, FORMAT,
};
use crate::store::StoreError;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub kernel: TrialsKey,
    pub strategy: String,
    pub seed: u64,
    /// Trials in all, the baseline included.
    pub budget: u32,
    /// Stop after the round in which this much time has passed.
    pub time: Option<Duration>,
    /// A hard limit, the warm start's rounds included (`time` waits for the warm start): no
    /// round starts where the round before it says it would end past the limit, and none once
    /// it has passed. The baseline and the first round of candidates always run. A deadline's
    /// slice of a kernel whose trials cost twenty times their price (a 128 MiB hash table
    /// checked in any order) had run 80 s past a slice planned at 38 s.
    pub limit: Option<Duration>,
    /// Candidates per round (compiled in parallel; measured as they are ready and the GPU is
    /// free).
    pub batch: u32,
    /// Learn from earlier searches in the store (other kernels on this GPU, this kernel on
    /// other GPUs); `tune_in_store` records which, so that `--resume` uses the same.
    pub transfer: bool,
    /// Start from r3's shipped recipes (`passes/recipes.toml`), those whose preconditions the
    /// kernel meets first; recorded with the transfer sources.
    pub recipes: bool,
    /// Race candidates against the best so far: one clearly slower is timed no further
    /// (`replay::stopping::beaten`), which makes a long kernel's losers cheap.
    pub race: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Strategy(#[from] strategy::UnknownStrategy),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("kernel {kernel}: the trials recorded ({what} {recorded}) differ from this run's ({given}); fix: resume with the recorded settings, or move {path} away to start over")]
    ResumeSettings {
        kernel: TrialsKey,
        what: &'static str,
        recorded: String,
        given: String,
        path: String,
    },
    #[error("{path}: record {line} holds trial {found} where trial {expected} belongs ({what}): the file was edited, or two files joined; fix: keep its first {keep} line(s) (`head -n {keep}`), and --resume measures the rest again")]
    ResumeNumbering {
        path: String,
        line: usize,
        found: u32,
        expected: u32,
        what: &'static str,
        keep: usize,
    },
    #[error("kernel {kernel}: recorded trial {trial} is not what the search asks now (another r3, search space or strategy version, or a changed search it learned from); fix: move {path} away to start over")]
    ResumeDiverged {
        kernel: TrialsKey,
        trial: u32,
        path: String,
    },
    #[error("kernel {kernel}: {path} already holds {n} trials; fix: --resume to continue them, or move the file away to start over")]
    Exists {
        kernel: TrialsKey,
        path: String,
        n: usize,
    },
    #[error("search space: {0}")]
    Space(String),
    #[error(transparent)]
    Transfer(#[from] TransferError),
    #[error("kernel {kernel}: the baseline (default<O3>) {outcome}; fix: `r3 replay {kernel}` shows the -O3 code against the recording; record the program again if it no longer reproduces")]
    Baseline { kernel: TrialsKey, outcome: Outcome },
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
    /// Of the resumed trials, those a checkpoint covered (told, not asked again).
    pub from_checkpoint: u32,
    pub best: Option<TrialRecord>,
    pub stop: Stop,
    /// Earlier searches the strategy learned from (see `transfer`).
    pub learned_from: usize,
    /// The recipes measured first (names, in order; matched ones marked `*`).
    pub recipes: Vec<String>,
    /// Trials after the baseline that were the warm start (recipes and the store's winners),
    /// which a time limit never cuts.
    pub warm_start: u32,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs (or resumes, when `prior` holds recorded trials) a tuning session.
pub fn tune<E: Evaluator>(
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    prior: Vec<TrialRecord>,
    log: Option<&mut TrialLog>,
    stop: &AtomicBool,
    progress: impl FnMut(&Progress),
) -> Result<Summary, TuneError> {
    tune_from(eval, space, opts, None, prior, log, stop, progress)
}

/// [`tune`], learning from earlier searches (`transfer`) when the strategy can.
#[allow(clippy::too_many_arguments)]
pub fn tune_from<E: Evaluator>(
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    transfer: Option<&Transfer>,
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
    check_resume_settings(&prior, opts, &path)?;
    let batch = prior.first().map(|r| r.batch).unwrap_or(opts.batch).max(1);
    let mut strat: Box<dyn Strategy + Send> =
        strategy::make_with(&opts.strategy, opts.seed, transfer)?;
    let device = eval.device();
    let start = Instant::now();
    let mut measured_by_hash: HashMap<String, (u32, Outcome)> = HashMap::new();
    let mut best: Option<TrialRecord> = None;
    // The trials a checkpoint covers are told, not asked again; the rest are replayed.
    let mut digest = restore_checkpoint(&mut *strat, opts, &prior, log.as_deref(), batch);
    let trial = digest.records();
    let restored = &prior[..trial as usize];
    remember_measured(&mut measured_by_hash, restored.iter());
    tell_round(&mut *strat, restored.to_vec(), &mut best, kernel)?;
    // nvcc's code is measured beside the baseline, as trial 1, where the evaluator offers it;
    // a search that began otherwise goes on as it began.
    let nvcc = match prior.get(1) {
        Some(r) => r.candidate.is_nvcc(),
        None => eval.offers_nvcc(),
    };
    let extra = u32::from(nvcc);
    // After the restore: a restored warm start is the one the search had, whatever became of
    // what it learned from since. It grows once its first part is told (bo's launch sweep).
    let mut warm_start = strat.warm_start_len(space) as u32 + extra;
    let from_checkpoint = trial;
    let mut trial = trial;
    let (mut measured, mut resumed) = (0u32, trial);

    // The wall time and size of the last round of candidates: what the next is expected to take.
    let mut last_round: Option<(Duration, u32)> = None;
    let stop_reason = loop {
        // The round: the baseline alone, then rounds of `batch` trials, none past the end of
        // the warm start (so that what follows from it is asked next, and a time limit stops
        // right after it).
        let full = if trial == 0 {
            1 + extra
        } else if trial <= warm_start {
            batch.min(warm_start + 1 - trial)
        } else {
            batch
        };
        let n = full.min(opts.budget.saturating_sub(trial));
        if n == 0 {
            break Stop::Budget;
        }
        if past_limit(opts.limit, start.elapsed(), last_round, n) {
            break Stop::Time;
        }
        let round_start = Instant::now();
        let cands: Vec<Candidate> = if trial == 0 {
            let mut first = vec![Candidate::baseline(), Candidate::nvcc()];
            first.truncate(n as usize);
            first
        } else {
            (0..n).map(|_| strat.ask(space)).collect()
        };
        let mut records =
            recorded(&prior, trial, &cands).map_err(|t| TuneError::ResumeDiverged {
                kernel: kernel.clone(),
                trial: t,
                path: path.clone(),
            })?;
        resumed += records.len() as u32;
        // Recorded results count as measured for deduplication, in trial order.
        remember_measured(&mut measured_by_hash, records.iter());

        let todo: Vec<(u32, Candidate)> = (trial..).zip(cands).skip(records.len()).collect();
        if !todo.is_empty() {
            let race = opts.race.then(|| {
                best.as_ref()
                    .and_then(|b| b.ratio())
                    .unwrap_or(crate::replay::stopping::NO_BEST_YET)
            });
            eval.race_against(race);
            let (done, m) = evaluate_round(&*eval, kernel, &todo, &measured_by_hash, race);
            measured += m;
            for ((t, c), e) in todo.into_iter().zip(done) {
                records.push(record(opts, &device, batch, t, c, e));
            }
            // Written in trial order, each durably, before anything is told.
            for r in records.iter().filter(|r| r.trial as usize >= prior.len()) {
                if let Some(log) = log.as_deref_mut() {
                    log.append(r)?;
                }
            }
            remember_measured(&mut measured_by_hash, records.iter());
        }

        records.iter().for_each(|r| digest.add(r));
        tell_round(&mut *strat, records, &mut best, kernel)?;
        if trial > 0 {
            last_round = Some((round_start.elapsed(), n));
        }
        trial += n;
        // Rounds are fixed by the round size and the warm start, so a checkpoint is taken only
        // where a round of its full size ended: a round that the budget cut short would be
        // asked whole by a resume with a larger budget, and the strategy after it differs.
        if n == full {
            if let Some(log) = log.as_deref() {
                save_checkpoint(log, &*strat, opts, &digest, batch);
            }
        }
        progress(&Progress {
            trial,
            budget: opts.budget,
            measured,
            best: best.as_ref().map(|b| (b.trial, b.ratio().unwrap())),
            elapsed: start.elapsed(),
        });
        // What the round told may lengthen the warm start (bo's launch sweep).
        warm_start = strat.warm_start_len(space) as u32 + extra;
        if let Some(s) = stop_after_round(trial, opts, stop, start, warm_start) {
            break s;
        }
    };
    Ok(Summary {
        trials: trial,
        measured,
        resumed,
        from_checkpoint,
        best,
        stop: stop_reason,
        learned_from: transfer.map_or(0, |t| t.sources.len()),
        recipes: transfer.map_or_else(Vec::new, |t| {
            t.recipes
                .iter()
                .map(|r| format!("{}{}", r.name, if r.matched { "*" } else { "" }))
                .collect()
        }),
        warm_start,
    })
}

/// On resume, the strategy and seed must be the recorded ones.
fn check_resume_settings(
    prior: &[TrialRecord],
    opts: &TuneOptions,
    path: &str,
) -> Result<(), TuneError> {
    // Trials are numbered 0, 1, 2, … in file order; anything else is the file's, not r3's.
    if let Some((i, r)) = prior.iter().enumerate().find(|(i, r)| r.trial != *i as u32) {
        return Err(TuneError::ResumeNumbering {
            path: path.into(),
            line: i + 1,
            found: r.trial,
            expected: i as u32,
            what: if r.trial < i as u32 {
                "a repeat of an earlier trial"
            } else {
                "the trials between are missing"
            },
            keep: i,
        });
    }
    let Some(r) = prior.first() else {
        return Ok(());
    };
    for (what, recorded, given) in [
        ("strategy", r.strategy.clone(), opts.strategy.clone()),
        ("seed", r.seed.to_string(), opts.seed.to_string()),
    ] {
        if recorded != given {
            return Err(TuneError::ResumeSettings {
                kernel: opts.kernel.clone(),
                what,
                recorded,
                given,
                path: path.into(),
            });
        }
    }
    Ok(())
}

/// The recorded trials the log's checkpoint covers (their digest, which counts them), with
/// the strategy brought to the state it had after them; none (nothing restored) when there is
/// no checkpoint or it is not of exactly these trials, this strategy and seed, this r3, and a
/// round's end within the budget.
fn restore_checkpoint(
    strat: &mut dyn Strategy,
    opts: &TuneOptions,
    prior: &[TrialRecord],
    log: Option<&TrialLog>,
    batch: u32,
) -> TrialsDigest {
    let Some(c) = log.and_then(TrialLog::checkpoint) else {
        return TrialsDigest::default();
    };
    let n = c.trials as usize;
    // Rounds end where the search that took it ended them only with the same round size.
    let same_rounds = match c.batch {
        Some(b) => b == batch,
        None => n >= 1 && (n - 1).is_multiple_of(batch as usize),
    };
    let fits = c.format == FORMAT
        && c.strategy == opts.strategy
        && c.seed == opts.seed
        && c.r3_version == env!("CARGO_PKG_VERSION")
        && n >= 1
        && same_rounds
        && n <= prior.len()
        && c.trials <= opts.budget;
    if !fits {
        return TrialsDigest::default();
    }
    let digest = TrialsDigest::of(&prior[..n]);
    if digest.hex() == c.digest && strat.restore(c.state).is_ok() {
        digest
    } else {
        TrialsDigest::default()
    }
}

/// Keeps the strategy's state after the trials `digest` has seen. Best effort: a resume
/// without it replays the trials, so a failed write costs time, never trials.
fn save_checkpoint(
    log: &TrialLog,
    strat: &dyn Strategy,
    opts: &TuneOptions,
    digest: &TrialsDigest,
    batch: u32,
) {
    let c = Checkpoint {
        format: FORMAT,
        trials: digest.records(),
        digest: digest.hex(),
        strategy: opts.strategy.clone(),
        seed: opts.seed,
        r3_version: env!("CARGO_PKG_VERSION").into(),
        state: strat.save(),
        batch: Some(batch),
    };
    let _ = log.write_checkpoint(&c);
}

/// The trials of the round starting at `first` that are already recorded (on resume, a prefix
/// of the round), each checked against what the search asks now; Err names the first that
/// differs.
fn recorded(
    prior: &[TrialRecord],
    first: u32,
    cands: &[Candidate],
) -> Result<Vec<TrialRecord>, u32> {
    let from = prior.get(first as usize..).unwrap_or(&[]);
    cands
        .iter()
        .zip(from)
        .zip(first..)
        .map(|((c, r), t)| {
            if r.trial == t && r.candidate == *c {
                Ok(r.clone())
            } else {
                Err(t)
            }
        })
        .collect()
}

/// Tells the strategy a round's results in trial order and keeps the best; the baseline must
/// be valid.
fn tell_round(
    strat: &mut dyn Strategy,
    records: Vec<TrialRecord>,
    best: &mut Option<TrialRecord>,
    kernel: &TrialsKey,
) -> Result<(), TuneError> {
    for r in records {
        if r.trial == 0 && r.ratio().is_none() {
            return Err(TuneError::Baseline {
                kernel: kernel.clone(),
                outcome: r.outcome,
            });
        }
        // A candidate the screen dropped is known to be slow: its ratio on the prefix is
        // what the strategy learns of it (it never becomes the best: that takes a valid ratio).
        // nvcc's code is no point of the strategy's space: it asked for none, and is told none,
        // so its search goes as it would without it.
        if !r.candidate.is_nvcc() {
            strat.tell(&r.candidate, r.ratio().or(r.outcome.screened_ratio()));
        }
        if r.ratio().is_some()
            && best
                .as_ref()
                .is_none_or(|b| r.ratio().unwrap() < b.ratio().unwrap())
        {
            *best = Some(r);
        }
    }
    Ok(())
}

/// Why to stop after the round that ended at `trial`, if at all. The time limit applies once
/// the baseline and the `warm_start` trials after it are measured.
fn stop_after_round(
    trial: u32,
    opts: &TuneOptions,
    stop: &AtomicBool,
    start: Instant,
    warm_start: u32,
) -> Option<Stop> {
    if trial >= opts.budget {
        Some(Stop::Budget)
    } else if stop.load(Ordering::SeqCst) {
        Some(Stop::Interrupted)
    } else if trial > warm_start && opts.time.is_some_and(|t| start.elapsed() >= t) {
        Some(Stop::Time)
    } else {
        None
    }
}

/// Whether a round of `n` candidates must not start under the hard `limit`: the limit has
/// passed, or the last round of candidates, scaled to `n`, says this one would end past it.
/// Never before the first round of candidates (`last_round` None).
fn past_limit(
    limit: Option<Duration>,
    elapsed: Duration,
    last_round: Option<(Duration, u32)>,
    n: u32,
) -> bool {
    let (Some(limit), Some((took, size))) = (limit, last_round) else {
        return false;
    };
    let expected = took.mul_f64(f64::from(n) / f64::from(size.max(1)));
    elapsed >= limit || elapsed + expected > limit
}

/// One new trial of a round, evaluated: its lowering (or compile error), its outcome, the
/// trial whose measurement it reuses, and its share of the measure call it was in.
struct Evaluated {
    lowered: Result<Lowered, Outcome>,
    outcome: Outcome,
    duplicate_of: Option<u32>,
    measure_ms: f64,
}

fn record(
    opts: &TuneOptions,
    device: &Device,
    batch: u32,
    trial: u32,
    candidate: Candidate,
    e: Evaluated,
) -> TrialRecord {
    let (ptx_hash, passes_ms, codegen_ms) = match e.lowered {
        Ok(l) => (Some(l.ptx_hash), l.passes_ms, l.codegen_ms),
        Err(_) => (None, 0.0, 0.0),
    };
    TrialRecord {
        format: FORMAT,
        trial,
        kernel: opts.kernel.clone(),
        gpu: device.gpu.clone(),
        driver: device.driver.clone(),
        device: device.id.clone(),
        target: device.target.clone(),
        r3_version: env!("CARGO_PKG_VERSION").into(),
        strategy: opts.strategy.clone(),
        seed: opts.seed,
        batch,
        candidate,
        ptx_hash,
        duplicate_of: e.duplicate_of,
        outcome: e.outcome,
        passes_ms,
        codegen_ms,
        measure_ms: e.measure_ms,
        finished_unix_ms: now_ms(),
    }
}

type Arrival = (usize, Result<Lowered, Outcome>);

/// Evaluates a round's new trials (`todo`: trial index and candidate, in trial order), `known`
/// being the PTX measured before the round. Threads take the candidates in order and send
/// each lowering as it finishes; meanwhile this thread measures what has arrived. Returns the
/// trials in trial order, and how many candidates were measured.
fn evaluate_round<E: Evaluator>(
    eval: &E,
    kernel: &TrialsKey,
    todo: &[(u32, Candidate)],
    known: &HashMap<String, (u32, Outcome)>,
    race: Option<f64>,
) -> (Vec<Evaluated>, u32) {
    let threads = eval.lower_threads().min(todo.len()).max(1);
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<Arrival>();
    let mut stream = Stream {
        known,
        lowered: (0..todo.len()).map(|_| None).collect(),
        ready: Vec::new(),
        taken: HashSet::new(),
        measured: HashMap::new(),
        race,
    };
    // A panic in a lowering thread closes its channel end; the scope re-raises it.
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, next) = (tx.clone(), &next);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((_, c)) = todo.get(i) else { break };
                if tx.send((i, eval.lower(c))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        stream.run(eval, kernel, &rx);
    });
    stream.settle(todo)
}

/// A round's lowerings as they arrive, and what has been measured of them.
struct Stream<'a> {
    known: &'a HashMap<String, (u32, Outcome)>,
    lowered: Vec<Option<Result<Lowered, Outcome>>>,
    /// Arrived, of a PTX neither measured before nor taken in this round, by index in the round.
    ready: Vec<(usize, Lowered)>,
    /// PTX measured or waiting to be in this round.
    taken: HashSet<String>,
    /// The outcome of each PTX measured in this round, and its measure call's ms per candidate.
    measured: HashMap<String, (Outcome, f64)>,
    /// The race the round's measure calls run (None: none), tightened by each call's results:
    /// a round is several calls where lowering overlaps measuring, and a 6x best found by the
    /// first had left the round's later candidates of a 1 s kernel racing -O3 (H200,
    /// 2026-11-29: 7 s each instead of their one run).
    race: Option<f64>,
}

impl Stream<'_> {
    /// Takes lowerings as they arrive; whenever some are ready, measures them all in one call
    /// while the other lowerings go on. Waits only when nothing is ready to measure.
    fn run<E: Evaluator>(&mut self, eval: &E, kernel: &TrialsKey, rx: &mpsc::Receiver<Arrival>) {
        while let Ok(first) = rx.recv() {
            self.accept(first);
            for more in rx.try_iter() {
                self.accept(more);
            }
            let batch = self.in_order();
            if !batch.is_empty() {
                self.measure(eval, kernel, batch);
            }
        }
        let rest = self.in_order();
        if !rest.is_empty() {
            self.measure(eval, kernel, rest);
        }
    }

    /// The ready candidates that come before any still being lowered, in the round's order: a
    /// round is measured in the order its candidates were asked (a warm start's transferred and
    /// recipe candidates first), so the race is set by them. Measured as they arrived, a 1 s
    /// kernel's first recipe (6x) was lowered last and its five near-ties of -O3 before it were
    /// timed in full (H200, 2026-11-29). Lowering runs ahead in the round's order, so the wait
    /// is for at most the candidates lowered at once.
    fn in_order(&mut self) -> Vec<Lowered> {
        let frontier = self
            .lowered
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.lowered.len());
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.ready)
            .into_iter()
            .partition(|(i, _)| *i < frontier);
        self.ready = later;
        let mut now = now;
        now.sort_by_key(|(i, _)| *i);
        now.into_iter().map(|(_, l)| l).collect()
    }

    fn accept(&mut self, (i, lowered): Arrival) {
        if let Ok(l) = &lowered {
            let key = measure_key(&l.ptx_hash, &l.candidate);
            if !self.known.contains_key(&key) && self.taken.insert(key) {
                self.ready.push((i, l.clone()));
            }
        }
        self.lowered[i] = Some(lowered);
    }

    fn measure<E: Evaluator>(&mut self, eval: &E, kernel: &TrialsKey, batch: Vec<Lowered>) {
        let m0 = Instant::now();
        let span =
            crate::replay::timeline::span("tune.measure", || format!("{kernel} x{}", batch.len()));
        let outcomes = eval.measure(&batch);
        drop(span);
        let per = m0.elapsed().as_secs_f64() * 1e3 / batch.len() as f64;
        let tightened = outcomes.iter().fold(self.race, |race, o| {
            crate::replay::stopping::tightened(race, o.ratio())
        });
        if tightened != self.race {
            self.race = tightened;
            eval.race_against(tightened);
        }
        for (l, o) in batch.into_iter().zip(outcomes) {
            self.measured
                .insert(measure_key(&l.ptx_hash, &l.candidate), (o, per));
        }
    }

    /// The round's trials in trial order. Of the trials with one new PTX, the lowest-numbered
    /// is the measured one and the others are its duplicates, whatever order they arrived in.
    fn settle(self, todo: &[(u32, Candidate)]) -> (Vec<Evaluated>, u32) {
        let mut first: HashMap<String, u32> = HashMap::new();
        let done = todo
            .iter()
            .zip(self.lowered)
            .map(|(&(t, _), l)| {
                let l = l.expect("every candidate of the round was lowered");
                let (outcome, duplicate_of, measure_ms) = match &l {
                    Err(o) => (o.clone(), None, 0.0),
                    Ok(l) => {
                        let key = measure_key(&l.ptx_hash, &l.candidate);
                        match self.known.get(&key) {
                            Some((d, o)) => (o.clone(), Some(*d), 0.0),
                            None => {
                                let (o, per) = self.measured[&key].clone();
                                match first.get(&key) {
                                    Some(&d) => (o, Some(d), 0.0),
                                    None => {
                                        first.insert(key, t);
                                        (o, None, per)
                                    }
                                }
                            }
                        }
                    }
                };
                Evaluated {
                    lowered: l,
                    outcome,
                    duplicate_of,
                    measure_ms,
                }
            })
            .collect();
        (done, self.measured.len() as u32)
    }
}

/// Evaluates candidates outside the search (the ablations of the best, say) as trials
/// numbered from `first`, compiled in parallel and measured as they are ready; a candidate
/// whose PTX and launch equal a trial in `known` (or an earlier one here) reuses that outcome.
/// Returns the records, in order, and how many candidates were measured.
pub fn evaluate_candidates<E: Evaluator>(
    eval: &E,
    opts: &TuneOptions,
    first: u32,
    candidates: Vec<Candidate>,
    known: &[TrialRecord],
) -> (Vec<TrialRecord>, u32) {
    let mut measured_by_hash = HashMap::new();
    remember_measured(&mut measured_by_hash, known.iter());
    let todo: Vec<(u32, Candidate)> = (first..).zip(candidates).collect();
    let (done, measured) = evaluate_round(eval, &opts.kernel, &todo, &measured_by_hash, None);
    let device = eval.device();
    let recs = todo
        .into_iter()
        .zip(done)
        .map(|((t, c), e)| record(opts, &device, opts.batch, t, c, e))
        .collect();
    (recs, measured)
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
    Ok(simulated_search(landscape, strategy, seed, budget, fraction, None)?.reached_at)
}

/// What a simulated search of a landscape came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimulatedSearch {
    /// The trial that first came within the fraction of the best known time.
    pub reached_at: Option<u32>,
    /// The best ratio to -O3 at the end of the budget (lower is faster).
    pub best: Option<f64>,
}

/// A strategy's search of a simulated landscape without a store: when it reached `fraction`
/// of the best known time and what it had at the end of the budget.
pub fn simulated_search(
    landscape: &super::sim::Landscape,
    strategy: &str,
    seed: u64,
    budget: u32,
    fraction: f64,
    transfer: Option<&Transfer>,
) -> Result<SimulatedSearch, TuneError> {
    let target = landscape.best_known().unwrap_or(1.0) / fraction;
    let space =
        Space::builtin(landscape.space.clone()).map_err(|e| TuneError::Space(e.to_string()))?;
    let mut sim = super::sim::Simulator::new(landscape.clone());
    let opts = TuneOptions {
        kernel: landscape.kernel.as_str().into(),
        strategy: strategy.into(),
        seed,
        budget,
        time: None,
        limit: None,
        batch: 1,
        transfer: transfer.is_some(),
        recipes: transfer.is_some_and(|t| !t.recipes.is_empty()),
        race: true,
    };
    let mut out = SimulatedSearch {
        reached_at: None,
        best: None,
    };
    tune_from(
        &mut sim,
        &space,
        &opts,
        transfer,
        Vec::new(),
        None,
        &AtomicBool::new(false),
        |p| {
            if out.reached_at.is_none() && p.best.is_some_and(|b| b.1 <= target + 1e-12) {
                out.reached_at = Some(p.trial);
            }
            if let Some(b) = p.best {
                out.best = Some(b.1);
            }
        },
    )?;
    Ok(out)
}

/// What makes two trials the same measurement: the PTX, and the block size it is launched
/// with (a block-size candidate changes the launch, not the code).
fn measure_key(ptx_hash: &str, c: &Candidate) -> String {
    match c.block_x {
        Some(b) => format!("{ptx_hash}/block={b}"),
        None => ptx_hash.to_owned(),
    }
}

/// Records which PTX and launch have been measured (first trial wins), so each is measured
/// once.
fn remember_measured<'a>(
    measured: &mut HashMap<String, (u32, Outcome)>,
    records: impl Iterator<Item = &'a TrialRecord>,
) {
    for r in records {
        if let (Some(h), None) = (&r.ptx_hash, r.duplicate_of) {
            if !matches!(r.outcome, Outcome::CompileError { .. }) {
                measured
                    .entry(measure_key(h, &r.candidate))
                    .or_insert((r.trial, r.outcome.clone()));
            }
        }
    }
}

/// Tunes one kernel with its trials kept in the store: refuses to overwrite earlier trials
/// unless `resume`, in which case the search continues exactly where they stop. Takes the
/// trials file's lock first of all, so that a second search of the kernel on this GPU stops
/// before it measures anything.
pub fn tune_in_store<E: Evaluator>(
    store: &crate::store::Store,
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    resume: bool,
    stop: &AtomicBool,
    progress: impl FnMut(&Progress),
) -> Result<(Summary, std::path::PathBuf), TuneError> {
    let log = store.open_trials(&opts.kernel, &eval.device().gpu)?;
    tune_in_log(store, log, eval, space, opts, resume, stop, progress)
}

/// [`tune_in_store`] with the trials file already open (`Store::open_trials`, which holds its
/// lock), for callers that measure before the search (the L2 choice) and must not do so beside
/// another search of the kernel.
#[allow(clippy::too_many_arguments)]
pub fn tune_in_log<E: Evaluator>(
    store: &crate::store::Store,
    mut log: TrialLog,
    eval: &mut E,
    space: &Space,
    opts: &TuneOptions,
    resume: bool,
    stop: &AtomicBool,
    progress: impl FnMut(&Progress),
) -> Result<(Summary, std::path::PathBuf), TuneError> {
    let gpu = eval.device().gpu;
    let path = store.trials_path(&opts.kernel, &gpu);
    assert_eq!(
        log.path(),
        path,
        "the log is the kernel's trials file on this GPU"
    );
    let prior = store.trials(&opts.kernel, &gpu)?;
    if !prior.is_empty() && !resume {
        return Err(TuneError::Exists {
            kernel: opts.kernel.clone(),
            path: path.display().to_string(),
            n: prior.len(),
        });
    }
    let transfer = transfer_for(store, &*eval, space, opts, &gpu, !prior.is_empty())?;
    let summary = tune_from(
        eval,
        space,
        opts,
        Some(&transfer),
        prior,
        Some(&mut log),
        stop,
        progress,
    )?;
    let end = SearchEnd {
        format: FORMAT,
        stop: match summary.stop {
            Stop::Budget => "budget",
            Stop::Time => "time",
            Stop::Interrupted => "interrupted",
        }
        .into(),
        trials: summary.trials,
        budget: opts.budget,
        warm_start: summary.warm_start,
    };
    store.write_search_end(&opts.kernel, &gpu, &end)?;
    Ok((summary, path))
}

/// What a search learns from: on a fresh start, the earlier searches `Transfer::choose` picks
/// (none without `opts.transfer`) and the recipes for the kernel's traits (none without
/// `opts.recipes`), recorded before the first trial; on resume, what was recorded (none for
/// trials made before transfers were recorded).
fn transfer_for<E: Evaluator>(
    store: &crate::store::Store,
    eval: &E,
    space: &Space,
    opts: &TuneOptions,
    gpu: &str,
    resuming: bool,
) -> Result<Transfer, TuneError> {
    let refs = if resuming {
        store
            .transfer_sources(&opts.kernel, gpu)?
            .unwrap_or_default()
    } else {
        let mut refs = if opts.transfer {
            Transfer::choose(store, &opts.kernel, gpu)?
        } else {
            TransferSources {
                format: FORMAT,
                ..Default::default()
            }
        };
        if opts.recipes {
            (refs.recipes, refs.traits) = recipes_for(eval, space)?;
        }
        store.write_transfer_sources(&opts.kernel, gpu, &refs)?;
        refs
    };
    Ok(Transfer::load(store, &refs, space, &opts.kernel)?)
}

/// The shipped recipes for a kernel, chosen by the traits of its -O3 code, as points of
/// `space`; and those traits.
pub fn recipes_for<E: Evaluator>(
    eval: &E,
    space: &Space,
) -> Result<(Vec<RecipePick>, Vec<String>), TuneError> {
    let recipes =
        super::recipes::builtin(&space.catalog).map_err(|e| TuneError::Space(e.to_string()))?;
    let traits = eval.traits();
    Ok((super::recipes::pick(&recipes, space, &traits), traits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::Lowered;
    use std::sync::Mutex;

    /// Each candidate's time over -O3 is its pipeline's length over 100 (so "x" * 20 is 0.2);
    /// every race the round sets is logged.
    struct Races {
        log: Mutex<Vec<Option<f64>>>,
    }

    impl Evaluator for Races {
        fn device(&self) -> crate::replay::Device {
            crate::testing::device()
        }
        fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
            Ok(crate::testing::lowered_by_pipeline(c))
        }
        fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
            let ts = |us| crate::testing::exact(us, 3);
            batch
                .iter()
                .map(|l| Outcome::Valid {
                    time: ts(l.candidate.pipeline.as_str().len() as f64),
                    baseline: ts(100.0),
                })
                .collect()
        }
        fn race_against(&self, best: Option<f64>) {
            self.log.lock().unwrap().push(best);
        }
    }

    /// A round measured in several calls (lowering overlaps measuring) races its later calls
    /// against the best its earlier ones found, not against the best it began with.
    #[test]
    fn a_rounds_later_measure_calls_race_the_best_its_earlier_ones_found() {
        let eval = Races {
            log: Mutex::new(Vec::new()),
        };
        let mut stream = Stream {
            known: &HashMap::new(),
            lowered: Vec::new(),
            ready: Vec::new(),
            taken: HashSet::new(),
            measured: HashMap::new(),
            race: Some(1.0),
        };
        let lowered = |n: usize| {
            let c = Candidate {
                pipeline: "x".repeat(n).as_str().into(),
                ..Candidate::baseline()
            };
            eval.lower(&c).unwrap()
        };
        stream.measure(&eval, &TrialsKey::from("k"), vec![lowered(20)]);
        stream.measure(&eval, &TrialsKey::from("k"), vec![lowered(90), lowered(15)]);
        stream.measure(&eval, &TrialsKey::from("k"), vec![lowered(50)]);
        assert_eq!(*eval.log.lock().unwrap(), [Some(0.2), Some(0.15)]);
        assert_eq!(stream.race, Some(0.15));
    }

    /// Candidates lowered out of order are measured in the round's order: none before an
    /// earlier one still being lowered.
    #[test]
    fn a_round_is_measured_in_the_order_it_was_asked() {
        let eval = Races {
            log: Mutex::new(Vec::new()),
        };
        let known = HashMap::new();
        let mut stream = Stream {
            known: &known,
            lowered: (0..3).map(|_| None).collect(),
            ready: Vec::new(),
            taken: HashSet::new(),
            measured: HashMap::new(),
            race: None,
        };
        let arrival = |i: usize, n: usize| {
            let c = Candidate {
                pipeline: "x".repeat(n).as_str().into(),
                ..Candidate::baseline()
            };
            (i, eval.lower(&c))
        };
        stream.accept(arrival(2, 30));
        stream.accept(arrival(1, 20));
        assert!(
            stream.in_order().is_empty(),
            "candidate 0 is still being lowered"
        );
        stream.accept(arrival(0, 10));
        let batch = stream.in_order();
        let lengths: Vec<usize> = batch
            .iter()
            .map(|l| l.candidate.pipeline.as_str().len())
            .collect();
        assert_eq!(lengths, [10, 20, 30]);
        assert!(stream.ready.is_empty());
    }

    /// Races, with nvcc's code offered: `Ok(us)` runs in that time, `Err` did not compile.
    /// Like the worker, a measure call tightens its race candidate by candidate; `nvcc_raced`
    /// logs the race nvcc's code was measured under.
    #[derive(Default)]
    struct WithNvcc {
        nvcc: Option<Result<f64, String>>,
        race: Mutex<Option<f64>>,
        nvcc_raced: Mutex<Vec<Option<f64>>>,
    }

    impl WithNvcc {
        fn new(nvcc: Option<Result<f64, String>>) -> Self {
            WithNvcc {
                nvcc,
                ..Default::default()
            }
        }
    }

    impl Evaluator for WithNvcc {
        fn device(&self) -> crate::replay::Device {
            crate::testing::device()
        }
        fn offers_nvcc(&self) -> bool {
            self.nvcc.is_some()
        }
        fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
            if !c.is_nvcc() {
                return Ok(crate::testing::lowered_by_pipeline(c));
            }
            let code = self
                .nvcc
                .as_ref()
                .map(|n| n.as_ref().map(|_| "nvcc".to_owned()));
            let code = code.map(|c| c.map_err(String::clone));
            crate::replay::nvcc_lowered(c, code.as_ref())
        }
        fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
            let ts = |us| crate::testing::exact(us, 3);
            let mut race = self.race.lock().unwrap();
            batch
                .iter()
                .map(|l| {
                    let nvcc = l.candidate.is_nvcc();
                    if nvcc {
                        self.nvcc_raced.lock().unwrap().push(*race);
                    }
                    let us = match (&self.nvcc, nvcc) {
                        (Some(Ok(us)), true) => *us,
                        _ => 50.0 + (l.candidate.pipeline.as_str().len() % 40) as f64,
                    };
                    let o = Outcome::Valid {
                        time: ts(us),
                        baseline: ts(100.0),
                    };
                    *race = crate::replay::stopping::tightened(*race, o.ratio());
                    o
                })
                .collect()
        }
        fn race_against(&self, best: Option<f64>) {
            *self.race.lock().unwrap() = best;
        }
    }

    /// With racing on, nvcc's code, measured right after the first trial (-O3), races the
    /// first trial's ratio: it is searched, at a search's precision. It had raced nothing, and
    /// was timed to 1% (ten pairs) on a 1 s kernel.
    #[test]
    fn nvcc_code_races_the_first_trial() {
        let mut eval = WithNvcc::new(Some(Ok(80.0)));
        let (trials, _) = search(&mut eval, 2, true);
        let first = trials[0].outcome.ratio();
        assert!(first.is_some() && trials[1].candidate.is_nvcc());
        assert_eq!(*eval.nvcc_raced.lock().unwrap(), [first]);
    }

    /// `eval`'s search of kernel "k" to `budget` trials, racing or not, on a fresh store: its
    /// trials and its best.
    fn search(
        eval: &mut WithNvcc,
        budget: u32,
        race: bool,
    ) -> (Vec<TrialRecord>, Option<TrialRecord>) {
        let space = Space::builtin(Default::default()).unwrap();
        let opts = TuneOptions {
            kernel: TrialsKey::from("k"),
            strategy: "bo".into(),
            seed: 3,
            budget,
            time: None,
            limit: None,
            batch: 4,
            transfer: false,
            recipes: false,
            race,
        };
        let stop = AtomicBool::new(false);
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::create(dir.path()).unwrap();
        let gpu = eval.device().gpu;
        let log = store.open_trials(&opts.kernel, &gpu).unwrap();
        let (s, _) = tune_in_log(&store, log, eval, &space, &opts, false, &stop, |_| {}).unwrap();
        (store.trials(&opts.kernel, &gpu).unwrap(), s.best)
    }

    fn searched(nvcc: Option<Result<f64, String>>) -> (Vec<Candidate>, Option<TrialRecord>) {
        let (trials, best) = search(&mut WithNvcc::new(nvcc), 24, false);
        (trials.into_iter().map(|r| r.candidate).collect(), best)
    }

    /// nvcc's code is trial 1, measured beside the baseline; the strategy is never told of it,
    /// so the search asks what it asks without it, whether nvcc's code ran, won or did not
    /// compile.
    #[test]
    fn nvcc_code_is_one_more_trial_that_leaves_the_search_as_it_was() {
        let (plain, _) = searched(None);
        let (failed, best_failed) = searched(Some(Err("nvcc could not compile k.cu".into())));
        let (won, best_won) = searched(Some(Ok(10.0)));
        assert!(plain.iter().all(|c| !c.is_nvcc()));
        for run in [&failed, &won] {
            assert!(run[1].is_nvcc(), "{:?}", run[1]);
            let others: Vec<&Candidate> = run.iter().filter(|c| !c.is_nvcc()).collect();
            let same = plain.iter().zip(&others).all(|(a, b)| a == *b);
            assert!(same && others.len() + 1 == run.len(), "the search changed");
        }
        assert!(!best_failed.unwrap().candidate.is_nvcc());
        assert!(best_won.unwrap().candidate.is_nvcc());
    }

    /// A search begun without nvcc's code resumes without it, and one begun with it resumes with
    /// it where nothing offers it now: the trials recorded decide, and nothing diverges.
    #[test]
    fn a_resumed_search_keeps_to_how_it_began_with_or_without_nvcc() {
        let space = Space::builtin(Default::default()).unwrap();
        let opts = |budget| TuneOptions {
            kernel: TrialsKey::from("k"),
            strategy: "bo".into(),
            seed: 3,
            budget,
            time: None,
            limit: None,
            batch: 4,
            transfer: false,
            recipes: false,
            race: false,
        };
        for (first, then) in [(None, Some(Ok(10.0))), (Some(Ok(10.0)), None)] {
            let dir = tempfile::tempdir().unwrap();
            let store = crate::store::Store::create(dir.path()).unwrap();
            let stop = AtomicBool::new(false);
            let began_with = first.is_some();
            for (nvcc, budget, resume) in [(first, 9, false), (then, 21, true)] {
                let mut eval = WithNvcc::new(nvcc);
                let log = store
                    .open_trials(&TrialsKey::from("k"), "GPU (sm_90)")
                    .unwrap();
                let o = opts(budget);
                tune_in_log(&store, log, &mut eval, &space, &o, resume, &stop, |_| {}).unwrap();
            }
            let trials = store.trials(&TrialsKey::from("k"), "GPU (sm_90)").unwrap();
            assert_eq!(trials.len(), 21);
            let nvcc: Vec<u32> = trials
                .iter()
                .filter(|r| r.candidate.is_nvcc())
                .map(|r| r.trial)
                .collect();
            assert_eq!(nvcc, if began_with { vec![1] } else { vec![] });
        }
    }
}
