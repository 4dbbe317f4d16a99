//! Judges of variants: on the GPU (an inner search per variant against the parent's recorded
//! launch, validated on every recorded launch, then timed interleaved against the original's
//! best compiler-only configuration), or a scripted simulation for tests and dry runs.

use crate::candidate::Candidate;
use crate::kernel::TrialsKey;
use crate::lower::Lowered;
use crate::params;
use crate::remix::space::Space;
use crate::remix::tune::{self, TuneError, TuneOptions};
use crate::replay::gpu::GpuEvaluator;
use crate::replay::Evaluator;
use crate::store::attempts::{self, Verdict};
use crate::store::outcome::Outcome;
use crate::store::records::Recording;
use crate::store::{KernelRecord, Store};
use serde::Deserialize;
use std::sync::atomic::AtomicBool;

/// Measures variants: tunes each against the parent kernel's recorded launch and compares it
/// with the original's best compiler-only configuration.
pub trait Judge {
    /// The GPU (or "simulated") verdicts are kept under.
    fn gpu(&self) -> String;
    /// The original kernel's best compiler-only configuration, in words.
    fn reference(&self) -> String;
    fn judge(&mut self, store: &Store, variant: &KernelRecord, code: &str) -> Verdict;
    /// The builds of a rewrite with knobs (each with its values, variant and code as
    /// compiled): the verdict of the best, with its values. By default each build is judged
    /// in full.
    fn judge_builds(&mut self, store: &Store, builds: &[BuildToJudge]) -> Verdict {
        each_in_full(self, store, builds)
    }
    /// Whether `judge_builds` searches a template's `builds` builds one knob at a time
    /// (`coordinate`) instead of judging every one.
    fn one_knob_at_a_time(&self, _builds: usize) -> bool {
        false
    }
}

/// A candidate in a few words: its pipeline as edits of O3 (the first few), then the knobs
/// that differ from clang's: "O3 -instcombine x3 +loop-versioning-licm; llc -O2, maxntid 256".
pub fn describe(c: &Candidate) -> String {
    use crate::passes::diff::{self as passes, DiffOp};
    let short = |step: &str| {
        let last = step.rsplit('/').next().unwrap_or(step);
        last.split('<').next().unwrap_or(last).to_owned()
    };
    let pipeline = match (passes::expand(&c.pipeline), passes::expand("default<O3>")) {
        (Ok(p), Ok(o3)) => {
            let mut edits: Vec<String> = Vec::new();
            for op in passes::diff(&o3, &p) {
                let e = match op {
                    DiffOp::Same { .. } => continue,
                    DiffOp::Removed { step } => format!("-{}", short(&step)),
                    DiffOp::Added { step } => format!("+{}", short(&step)),
                    DiffOp::Changed { to, .. } => format!("~{}", short(&to)),
                };
                match edits
                    .iter_mut()
                    .find(|x| x.split(" x").next() == Some(e.as_str()))
                {
                    Some(x) => {
                        let n: u32 = x
                            .split(" x")
                            .nth(1)
                            .and_then(|n| n.parse().ok())
                            .unwrap_or(1);
                        *x = format!("{e} x{}", n + 1);
                    }
                    None => edits.push(e),
                }
            }
            let more = edits.len().saturating_sub(4);
            edits.truncate(4);
            if more > 0 {
                edits.push(format!("and {more} more"));
            }
            std::iter::once("O3".to_owned())
                .chain(edits)
                .collect::<Vec<_>>()
                .join(" ")
        }
        _ => "a custom pipeline".into(),
    };
    let knobs = c.knob_words(false);
    if knobs.is_empty() {
        pipeline
    } else {
        format!("{pipeline}; {}", knobs.join(", "))
    }
}

/// A scripted judge (`r3 evolve --simulate FILE`): the first rule whose `contains` occurs in
/// the variant's code decides; no rule, `default_speedup`. Verdicts say they are simulated.
#[derive(Debug, Clone, Deserialize)]
pub struct SimJudge {
    #[serde(default = "one")]
    pub default_speedup: f64,
    #[serde(default)]
    pub rules: Vec<SimRule>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct SimRule {
    pub contains: String,
    #[serde(default)]
    pub speedup: Option<f64>,
    /// A failure instead ("wrong output", "crashed"), with `message`.
    #[serde(default)]
    pub fails: Option<String>,
    #[serde(default)]
    pub message: String,
}

fn one() -> f64 {
    1.0
}

impl Judge for SimJudge {
    fn gpu(&self) -> String {
        crate::store::trials::simulated_gpu(None)
    }

    fn reference(&self) -> String {
        "O3 (simulated)".into()
    }

    fn judge(&mut self, _: &Store, _: &KernelRecord, code: &str) -> Verdict {
        let rule = self.rules.iter().find(|r| code.contains(&r.contains));
        if let Some(why) = rule.and_then(|r| r.fails.clone()) {
            return Verdict::Failed {
                why,
                message: rule.map(|r| r.message.clone()).unwrap_or_default(),
            };
        }
        let speedup = rule.and_then(|r| r.speedup).unwrap_or(self.default_speedup);
        Verdict::Valid {
            speedup,
            time_us: 100.0 / speedup,
            reference_us: 100.0,
            pipeline: "O3".into(),
            candidate: None,
            trials: 1,
            simulated: true,
            values: Default::default(),
            // Nothing measured its reference: shipped over the kernel's best as it is then.
            reference_speedup: None,
            checked: Vec::new(),
        }
    }
}

/// One build of a rewrite with knobs, as a judge measures it.
#[derive(Debug, Clone)]
pub struct BuildToJudge {
    pub values: params::Values,
    pub record: KernelRecord,
    /// The rewrite's code with this build's `#define`s in front.
    pub code: String,
}

/// Judges every build in full and keeps the fastest valid one (with its values); none valid:
/// the first build's failure.
pub fn each_in_full<J: Judge + ?Sized>(
    j: &mut J,
    store: &Store,
    builds: &[BuildToJudge],
) -> Verdict {
    let mut best: Option<Verdict> = None;
    let mut first_failure = None;
    for b in builds {
        match j.judge(store, &b.record, &b.code) {
            v @ Verdict::Valid { .. } => {
                if best.as_ref().and_then(Verdict::speedup) < v.speedup() {
                    best = Some(won_with(v, &b.values));
                }
            }
            failed => {
                first_failure.get_or_insert_with(|| with_values(failed, &b.values));
            }
        }
    }
    best.or(first_failure).unwrap_or(Verdict::Failed {
        why: "was not measured".into(),
        message: "the rewrite has no builds".into(),
    })
}

/// A valid verdict with the values of the build that gave it.
pub(crate) fn won_with(mut v: Verdict, won: &params::Values) -> Verdict {
    if let Verdict::Valid { values, .. } = &mut v {
        values.clone_from(won);
    }
    v
}

fn with_values(v: Verdict, values: &params::Values) -> Verdict {
    match v {
        Verdict::Failed { why, message } => Verdict::Failed {
            why,
            message: format!("{} (built with {})", message, params::words(values)),
        },
        v => v,
    }
}

/// The GPU judge of one kernel's variants.
pub struct GpuJudge<'a> {
    parent: GpuEvaluator,
    /// The original kernel's best configuration on this GPU (or -O3), lowered from its module.
    reference: Lowered,
    reference_words: String,
    /// The reference's speedup over the original's -O3 (its best trial's, or 1 where it is
    /// -O3): what a verdict's speedup is a speedup over.
    reference_speedup: f64,
    /// Why the reference is -O3 and not the kernel's best build, where it had to be.
    fallback: Option<String>,
    /// A template's many builds searched one knob at a time (`coordinate`), as the deadline
    /// prices them; else all judged (`halving`).
    knob_search: bool,
    /// The reference's time on the searched launch (µs a run), as its search measured it: what
    /// a rewrite without knobs races under a deadline (`racing_plain_rewrites`).
    reference_us: Option<f64>,
    race_plain: bool,
    /// The parent's other recorded launches: a variant must reproduce each.
    others: Vec<Recording>,
    space: Space,
    tune: TuneOptions,
    stop: &'a AtomicBool,
    /// The recording's outputs as the last evaluator learned them: the next build's takes
    /// them (`GpuEvaluator::take_outputs`).
    learned: Option<crate::replay::gpu::LearnedOutputs>,
}

impl<'a> GpuJudge<'a> {
    /// `parent` measures the original kernel on its recorded launch; `tune` is the inner
    /// search's options (its kernel is replaced by each variant's hash).
    pub fn new(
        store: &Store,
        mut parent: GpuEvaluator,
        space: Space,
        tune: TuneOptions,
        stop: &'a AtomicBool,
    ) -> Result<GpuJudge<'a>, String> {
        let hash = parent.kernel().hash.clone();
        let gpu = parent.device().gpu;
        let best = store
            .best_trial(&TrialsKey::of_kernel(&hash), &gpu)
            .map_err(|e| e.to_string())?;
        // Where nvcc's code is the kernel's best, the reference is that code: judged against
        // -O3 instead, conv_once's unroll counted as 1.08x a find while it ran 0.68x of what
        // ships (H200, run Y6, 2026-11-30).
        if best.as_ref().is_some_and(|t| t.candidate.is_nvcc()) {
            let sm = parent.target().sm.clone();
            parent.offer_nvcc(crate::remix::nvcc::code(store, parent.kernel(), &sm));
        }
        let mut fallback = None;
        let (reference, reference_speedup) = match &best {
            Some(t) => match parent.lower(&t.candidate) {
                Ok(l) => (Ok(l), t.ratio().map_or(1.0, |r| 1.0 / r)),
                Err(o) => {
                    fallback = Some(format!(
                        "its best build ({}) cannot be made here ({}): its rewrites are judged \
                         against the original at -O3, and counted over its best by that \
                         reference's recorded speedup",
                        describe(&t.candidate),
                        o.in_words()
                    ));
                    (parent.lower(&Candidate::baseline()), 1.0)
                }
            },
            None => (parent.lower(&Candidate::baseline()), 1.0),
        };
        let reference =
            reference.map_err(|o| format!("the original kernel does not lower: {o}"))?;
        let others = store
            .launches_of(&hash)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|r| r.id != parent.recording().id && r.usable())
            .collect();
        Ok(GpuJudge {
            learned: parent.outputs_learned(),
            reference_words: describe(&reference.candidate),
            reference_speedup,
            reference_us: best
                .as_ref()
                .and_then(time_of)
                .filter(|_| fallback.is_none()),
            fallback,
            knob_search: false,
            race_plain: false,
            parent,
            reference,
            others,
            space,
            tune,
            stop,
        })
    }

    /// This judge with a template's many builds searched one knob at a time (the deadline's
    /// rewrite arm), not all judged.
    pub fn searching_knobs_one_at_a_time(mut self) -> Self {
        self.knob_search = true;
        self
    }

    /// This judge with each rewrite without knobs racing the kernel's best build (the deadline's
    /// rewrite arm): its -O3 runs first, alone, and where that one checked run is clearly
    /// slower than the reference on a long kernel (`replay::stopping::beaten_elsewhere`), its
    /// search ends there and only its confirmation follows. kt_concordance's plain attempts
    /// were priced at 67 s each, 8 inner trials of 3.5 s among them, and none was judged in
    /// 600 s (H200, 2026-11-30).
    pub fn racing_plain_rewrites(mut self) -> Self {
        self.race_plain = true;
        self
    }

    /// Why this judge's reference is the original at -O3 and not the kernel's best build,
    /// where that could not be made on this machine.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    fn failed(o: &Outcome, context: &str) -> Verdict {
        Verdict::Failed {
            why: o.in_words().into(),
            message: format!("{context}{}", o.detail().unwrap_or_default()),
        }
    }
}

impl Judge for GpuJudge<'_> {
    fn gpu(&self) -> String {
        self.parent.device().gpu
    }

    fn reference(&self) -> String {
        self.reference_words.clone()
    }

    fn judge(&mut self, store: &Store, variant: &KernelRecord, _code: &str) -> Verdict {
        let budget = self.tune.budget;
        let beat = self.reference_us.filter(|_| self.race_plain);
        match self.search(store, variant, (budget, self.tune.time), beat) {
            Ok(found) => self.confirm(found),
            Err(v) => *v,
        }
    }

    fn one_knob_at_a_time(&self, builds: usize) -> bool {
        self.knob_search && builds >= attempts::COORDINATE_FROM
    }

    /// Successive halving over the builds (`halving`), or under a deadline over
    /// `COORDINATE_FROM` builds or more, a search of one knob at a time (`coordinate`) from the
    /// values that won on other kernels: each step an inner search of one build on the GPU.
    fn judge_builds(&mut self, store: &Store, builds: &[BuildToJudge]) -> Verdict {
        let (budget, time) = (self.tune.budget, self.tune.time);
        let start = self
            .one_knob_at_a_time(builds.len())
            .then(|| start_of(store, &self.gpu(), builds));
        let this = std::cell::RefCell::new(self);
        let search = |b: &BuildToJudge, trials, time, beat| {
            let mut j = this.borrow_mut();
            if let Some(v) = j.stopped() {
                return Err(Box::new(v));
            }
            j.search(store, &b.record, (trials, time), beat)
                .map(|f| (f.time_us, f))
        };
        let confirm = |_: &BuildToJudge, found| this.borrow_mut().confirm(found);
        match start {
            Some(start) => coordinate(builds, start, budget, time, search, confirm),
            None => halving(builds, budget, time, search, confirm),
        }
    }
}

/// Where a search of one knob at a time starts: the build at the values that won most often
/// on other kernels for the same knobs on `gpu`, else at each knob's middle value (a tile
/// neither the shallowest nor the deepest), else the first build.
fn start_of(store: &Store, gpu: &str, builds: &[BuildToJudge]) -> usize {
    let knobs: std::collections::BTreeSet<&str> = builds
        .iter()
        .flat_map(|b| b.values.keys().map(String::as_str))
        .collect();
    let at = |v: &params::Values| builds.iter().position(|b| b.values == *v);
    if let Some(i) = attempts::values_won_elsewhere(store, gpu, &knobs)
        .iter()
        .find_map(at)
    {
        return i;
    }
    let middle: params::Values = knobs
        .iter()
        .map(|k| {
            let taken: std::collections::BTreeSet<i64> = builds
                .iter()
                .filter_map(|b| b.values.get(*k).copied())
                .collect();
            let v: Vec<i64> = taken.into_iter().collect();
            ((*k).to_owned(), v[v.len() / 2])
        })
        .collect();
    at(&middle).unwrap_or(0)
}

/// Successive halving over a rewrite's builds: each build's inner search (`search`, with a
/// trial budget and time limit) gets a small share of the budget, the fastest
/// `HALVING_KEEP` get the rest, and the fastest of those that `confirm` accepts (every
/// recorded launch, the duel against the original) wins, with its values. A build that
/// fails is dropped and the others go on; none left: the first failure. Where the first
/// round is one trial a build (its -O3), each build's is given the best time of the builds
/// before it to beat (`search`'s last argument; a long kernel's build clearly slower settles on
/// one run); the finalists race nothing.
pub fn halving<T>(
    builds: &[BuildToJudge],
    budget: u32,
    time: Option<std::time::Duration>,
    mut search: impl SearchBuild<T>,
    confirm: impl FnMut(&BuildToJudge, T) -> Verdict,
) -> Verdict {
    let n = builds.len().max(1) as u32;
    let mut round = FirstRound::new(builds, budget, n, time);
    for i in 0..builds.len() {
        round.measure(i, &mut search);
    }
    round.finish(&mut search, confirm)
}

/// A template's knobs searched one at a time (`coordinate_builds`): from `start`, each knob's
/// other values with the rest held, then the next knob from the fastest build so far; a second
/// pass where the first moved. Builds measured get their first share racing the best before
/// them, the fastest go on as in [`halving`], and the first that `confirm` accepts wins.
pub fn coordinate<T>(
    builds: &[BuildToJudge],
    start: usize,
    budget: u32,
    time: Option<std::time::Duration>,
    mut search: impl SearchBuild<T>,
    confirm: impl FnMut(&BuildToJudge, T) -> Verdict,
) -> Verdict {
    let all: Vec<&params::Values> = builds.iter().map(|b| &b.values).collect();
    let planned = crate::store::attempts::coordinate_builds(&all).max(1) as u32;
    let mut round = FirstRound::new(builds, budget, planned, time);
    let knobs: std::collections::BTreeSet<&String> = all.iter().flat_map(|v| v.keys()).collect();
    let mut at = start.min(builds.len().saturating_sub(1));
    round.measure(at, &mut search);
    for _pass in 0..2 {
        let from = at;
        for knob in &knobs {
            let along = |b: &BuildToJudge| {
                b.values
                    .iter()
                    .all(|(k, v)| k == *knob || builds[at].values.get(k) == Some(v))
            };
            for i in (0..builds.len()).filter(|&i| along(&builds[i])) {
                round.measure(i, &mut search);
            }
            at = round.fastest().unwrap_or(at);
        }
        if at == from {
            break;
        }
    }
    round.finish(&mut search, confirm)
}

/// The first round of a judge over a rewrite's builds: each build measured gets the first share
/// of the budget (`planned` builds to measure), racing the best time before it where that share
/// is one trial.
struct FirstRound<'b, T> {
    builds: &'b [BuildToJudge],
    budget: u32,
    first: u32,
    time: Option<std::time::Duration>,
    planned: u32,
    ranked: Vec<(f64, usize)>,
    failures: Vec<Verdict>,
    found: Vec<Option<T>>,
    measured: Vec<bool>,
}

/// One build's inner search for a judge over builds: the build, its trial budget and time
/// limit, and the best time before it to race (µs); its time (µs) and what it found.
pub trait SearchBuild<T>:
    FnMut(
    &BuildToJudge,
    u32,
    Option<std::time::Duration>,
    Option<f64>,
) -> Result<(f64, T), Box<Verdict>>
{
}

impl<T, F> SearchBuild<T> for F where
    F: FnMut(
        &BuildToJudge,
        u32,
        Option<std::time::Duration>,
        Option<f64>,
    ) -> Result<(f64, T), Box<Verdict>>
{
}

type Search<'s, T> = dyn SearchBuild<T> + 's;

impl<'b, T> FirstRound<'b, T> {
    fn new(
        builds: &'b [BuildToJudge],
        budget: u32,
        planned: u32,
        time: Option<std::time::Duration>,
    ) -> Self {
        let budget = budget.max(planned);
        FirstRound {
            builds,
            budget,
            first: (budget / (2 * planned)).max(1),
            time,
            planned,
            ranked: Vec::new(),
            failures: Vec::new(),
            found: builds.iter().map(|_| None).collect(),
            measured: vec![false; builds.len()],
        }
    }

    fn share(&self, k: u32) -> Option<std::time::Duration> {
        self.time.map(|t| t / (2 * k))
    }

    /// Build `i`'s first share, once.
    fn measure(&mut self, i: usize, search: &mut Search<'_, T>) {
        if std::mem::replace(&mut self.measured[i], true) {
            return;
        }
        // Raced only where every build's first share is its -O3 alone: -O3 against -O3, not
        // against a build its search has tuned past that.
        let beat = self
            .ranked
            .iter()
            .map(|r| r.0)
            .reduce(f64::min)
            .filter(|_| self.first == 1);
        let b = &self.builds[i];
        match search(b, self.first, self.share(self.planned), beat) {
            Ok((t, f)) => {
                self.ranked.push((t, i));
                self.found[i] = Some(f);
            }
            Err(v) => self.failures.push(with_values(*v, &b.values)),
        }
    }

    /// The fastest build measured so far.
    fn fastest(&self) -> Option<usize> {
        self.ranked
            .iter()
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|r| r.1)
    }

    /// The fastest `HALVING_KEEP` searched further with the rest of the budget, then confirmed
    /// in order of speed: the first that holds wins, with its values; none: the first failure.
    fn finish(
        mut self,
        search: &mut Search<'_, T>,
        mut confirm: impl FnMut(&BuildToJudge, T) -> Verdict,
    ) -> Verdict {
        let measured = self.measured.iter().filter(|m| **m).count() as u32;
        let mut ranked = std::mem::take(&mut self.ranked);
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        ranked.truncate(HALVING_KEEP);
        let keep = ranked.len().max(1) as u32;
        let more = self.first + self.budget.saturating_sub(self.first * measured) / keep;
        let mut finalists = Vec::new();
        for (t, i) in ranked {
            let b = &self.builds[i];
            if more <= self.first {
                finalists.push((t, i));
                continue;
            }
            match search(b, more, self.share(keep), None) {
                Ok((t2, f)) => {
                    self.found[i] = Some(f);
                    finalists.push((t.min(t2), i));
                }
                Err(v) => self.failures.push(with_values(*v, &b.values)),
            }
        }
        finalists.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, i) in finalists {
            let b = &self.builds[i];
            let Some(f) = self.found[i].take() else {
                continue;
            };
            match confirm(b, f) {
                v @ Verdict::Valid { .. } => return won_with(v, &b.values),
                v => self.failures.push(with_values(v, &b.values)),
            }
        }
        self.failures.into_iter().next().unwrap_or(Verdict::Failed {
            why: "was not measured".into(),
            message: "the rewrite has no builds".into(),
        })
    }
}

/// A trial's time on its launch (µs a run), where it was valid.
fn time_of(t: &crate::store::trials::TrialRecord) -> Option<f64> {
    match &t.outcome {
        Outcome::Valid { time, .. } if time.median_us > 0.0 => Some(time.median_us),
        _ => None,
    }
}

/// Whether a search's best is a trial settled on its one checked run (`raced`): a build's -O3
/// clearly slower than the best build before it.
fn settled_by_its_first_run(summary: &tune::Summary) -> bool {
    summary
        .best
        .as_ref()
        .is_some_and(|b| matches!(&b.outcome, Outcome::Valid { time, .. } if time.raced))
}

/// How many builds of a rewrite with knobs get the rest of the budget after every build had
/// its first share.
pub const HALVING_KEEP: usize = 3;

/// A variant's inner search result: its evaluator, best configuration and time.
struct Found {
    ev: GpuEvaluator,
    best: crate::store::trials::TrialRecord,
    trials: u32,
    time_us: f64,
}

impl GpuJudge<'_> {
    /// The variant's inner search on the parent's recorded launch, with `budget` trials in
    /// all (resumed where an earlier call searched it). With `beat` (the best time of the
    /// builds judged before it, µs) its first trial, its -O3, goes first alone: where one run
    /// settles it as clearly slower (`GpuEvaluator::beat`), its search ends there.
    fn search(
        &mut self,
        store: &Store,
        variant: &KernelRecord,
        (budget, time): (u32, Option<std::time::Duration>),
        beat: Option<f64>,
    ) -> Result<Found, Box<Verdict>> {
        let rec = self.parent.recording().clone();
        let target = self.parent.target().clone();
        let mut ev = GpuEvaluator::of_kernel(
            store,
            rec,
            variant.clone(),
            target,
            self.parent.measure_options().clone(),
        )
        .map_err(|e| {
            Box::new(Verdict::Failed {
                why: "did not compile".into(),
                message: e.to_string(),
            })
        })?;
        ev.beat(beat);
        if let Some(l) = &self.learned {
            ev.take_outputs(l);
        }
        let opts = |budget| TuneOptions {
            kernel: TrialsKey::of_kernel(&variant.hash),
            budget,
            time,
            ..self.tune.clone()
        };
        let mut summary = self.tuned(
            store,
            &mut ev,
            &opts(if beat.is_some() { 1 } else { budget }),
        )?;
        if budget > 1 && beat.is_some() && !settled_by_its_first_run(&summary) {
            ev.beat(None);
            summary = self.tuned(store, &mut ev, &opts(budget))?;
        }
        let Some(best) = summary.best else {
            return Err(Box::new(Verdict::Failed {
                why: "has no valid configuration".into(),
                message: format!("{} trials", summary.trials),
            }));
        };
        let time_us = match &best.outcome {
            Outcome::Valid { time, .. } => time.median_us,
            _ => f64::INFINITY,
        };
        // Its confirmation lowers on it and measures on evaluators of their own: the next
        // build's search may take its worker.
        ev.let_worker_go();
        self.learned = ev.outputs_learned().or(self.learned.take());
        Ok(Found {
            ev,
            best,
            trials: summary.trials,
            time_us,
        })
    }

    /// The variant's search under `opts` on `ev` (resumed where an earlier call searched it).
    fn tuned(
        &self,
        store: &Store,
        ev: &mut GpuEvaluator,
        opts: &TuneOptions,
    ) -> Result<tune::Summary, Box<Verdict>> {
        match tune::tune_in_store(store, ev, &self.space, opts, true, self.stop, |_| {}) {
            Ok((s, _)) => Ok(s),
            Err(TuneError::Baseline { outcome, .. }) => Err(Box::new(Self::failed(
                &outcome,
                "its -O3 build on the recorded launch: ",
            ))),
            Err(e) => Err(Box::new(Verdict::Failed {
                why: "was not searched".into(),
                message: e.to_string(),
            })),
        }
    }

    /// Where the run was stopped (Ctrl-C, or a deadline's limit on the attempt): the verdict of
    /// a rewrite not measured to the end, which the caller does not record (`--resume`, or the
    /// deadline's next attempt, judges it again). Each step of a confirmation opens a worker
    /// of its own: a deadline's rewrite attempt went on through two of them after its limit,
    /// 8 s past a 90 s deadline (H200, 2026-11-29).
    fn stopped(&self) -> Option<Verdict> {
        self.stop
            .load(std::sync::atomic::Ordering::SeqCst)
            .then(|| Verdict::Failed {
                why: "was not measured".into(),
                message: "interrupted".into(),
            })
    }

    /// The recorded launches a rewrite is checked on: the searched one and every other.
    fn checked(&self) -> Vec<crate::store::attempts::Checked> {
        std::iter::once(self.parent.recording())
            .chain(&self.others)
            .filter_map(|r| r.launch.values())
            .map(|v| crate::store::attempts::Checked::of(&v))
            .collect()
    }

    /// The best configuration checked on every other recorded launch, then timed interleaved
    /// against the original's best compiler-only build.
    fn confirm(&mut self, found: Found) -> Verdict {
        let Found {
            ev, best, trials, ..
        } = found;
        let lowered = match ev.lower(&best.candidate) {
            Ok(l) => l,
            Err(o) => return Self::failed(&o, "lowering its best configuration again: "),
        };
        for other in &self.others {
            if let Some(v) = self.stopped() {
                return v;
            }
            let check = match ev.for_recording(other.clone()) {
                Ok(e) => e.measure(std::slice::from_ref(&lowered)),
                Err(e) => {
                    return Verdict::Failed {
                        why: "was not checked".into(),
                        message: format!("recorded launch {}: {e}", other.id),
                    }
                }
            };
            if let Some(o) = check
                .first()
                .filter(|o| !matches!(o, Outcome::Valid { .. }))
            {
                return Self::failed(o, &format!("recorded launch {}: ", other.id));
            }
        }
        // Reproducing every recording is not enough: code with the recorded output baked in
        // does. It must also give what the original gives on other inputs.
        if let Some(v) = self.stopped() {
            return v;
        }
        let fresh = ev
            .with_baseline(self.reference.clone())
            .check_fresh(&lowered, crate::replay::fresh::SEED);
        if let Some(v) = on_fresh_inputs(fresh) {
            return v;
        }
        if let Some(v) = self.stopped() {
            return v;
        }
        let duel = ev.with_baseline(self.reference.clone());
        match duel.measure(std::slice::from_ref(&lowered)).first() {
            Some(Outcome::Valid { time, baseline }) => Verdict::Valid {
                speedup: baseline.median_us / time.median_us,
                time_us: time.median_us,
                reference_us: baseline.median_us,
                pipeline: describe(&best.candidate),
                candidate: Some(best.candidate.clone()),
                trials,
                simulated: false,
                values: Default::default(),
                reference_speedup: Some(self.reference_speedup),
                checked: self.checked(),
            },
            Some(o) => Self::failed(o, "against the original: "),
            None => Verdict::Failed {
                why: "was not measured".into(),
                message: String::new(),
            },
        }
    }
}

/// What the differential check on other inputs than the recorded ones (`replay::fresh`) makes
/// of a rewrite: its failure where it gives another result than the original's build, else
/// nothing (a check that could not run is said, and held against no rewrite).
fn on_fresh_inputs(fresh: crate::replay::gpu::Fresh) -> Option<Verdict> {
    use crate::replay::gpu::Fresh;
    match fresh {
        Fresh::Differs(message) => Some(Verdict::Failed {
            why: "is wrong on other inputs".into(),
            message,
        }),
        Fresh::NotChecked(why) => {
            eprintln!(
                "r3: note: a rewrite was not checked on other inputs than the recorded ones: {why}"
            );
            None
        }
        Fresh::Same => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_wrong_on_other_inputs_fails_and_an_unchecked_one_does_not() {
        use crate::replay::gpu::Fresh;
        let v = on_fresh_inputs(Fresh::Differs(
            "on other inputs than the recorded ones …".into(),
        ));
        assert!(
            matches!(&v, Some(Verdict::Failed { why, message }) if why == "is wrong on other inputs" && message.contains("recorded ones")),
            "{v:?}"
        );
        assert!(on_fresh_inputs(Fresh::Same).is_none());
        assert!(on_fresh_inputs(Fresh::NotChecked("no worker".into())).is_none());
    }

    /// Under a deadline a rewrite without knobs races the time its kernel's best build took in
    /// its search; a best that is no valid time leaves nothing to race.
    #[test]
    fn a_plain_rewrite_races_the_time_the_kernels_best_build_took() {
        use crate::store::fixtures;
        let c = serde_json::to_value(Candidate::baseline()).unwrap();
        let best = fixtures::trial("k", "H200", 3, c.clone(), fixtures::valid(800.0, 1000.0));
        assert_eq!(time_of(&best), Some(800.0));
        let failed = fixtures::trial("k", "H200", 4, c, Outcome::Crashed { message: "".into() });
        assert_eq!(time_of(&failed), None);
    }

    fn build(tk: i64) -> BuildToJudge {
        let record = KernelRecord {
            format: 1,
            hash: format!("{tk:016x}").into(),
            signature: crate::kernel::KernelSignature {
                name: "k".into(),
                demangled: "k".into(),
                arch: "sm_90".into(),
                params: Vec::new(),
                source: None,
                unoptimized: false,
            },
            compile: crate::store::CompileCommand {
                cwd: "/".into(),
                args: Vec::new(),
                env: Default::default(),
                clang: "clang".into(),
                clang_version: String::new(),
            },
            r3_version: "0".into(),
            variant_of: None,
        };
        BuildToJudge {
            values: [("R3_TK".to_string(), tk)].into(),
            record,
            code: String::new(),
        }
    }

    fn valid(speedup: f64) -> Verdict {
        Verdict::Valid {
            speedup,
            time_us: 1.0,
            reference_us: speedup,
            pipeline: "O3".into(),
            candidate: None,
            trials: 1,
            simulated: true,
            values: Default::default(),
            reference_speedup: None,
            checked: Vec::new(),
        }
    }

    #[test]
    fn halving_searches_every_build_then_the_fastest_few_and_keeps_the_first_that_holds() {
        // Time per build on a simulated landscape: 32 is fastest but fails its confirmation
        // (wrong on another recorded launch), 64 does not compile.
        let time = |tk: i64| match tk {
            8 => 40.0,
            16 => 20.0,
            32 => 10.0,
            _ => 30.0,
        };
        let builds: Vec<BuildToJudge> = [8, 16, 32, 64].map(build).into();
        let mut asked: Vec<(i64, u32, Option<f64>)> = Vec::new();
        let verdict = halving(
            &builds,
            20,
            None,
            |b, trials, _, beat| {
                let tk = b.values["R3_TK"];
                asked.push((tk, trials, beat));
                if tk == 64 {
                    return Err(Box::new(Verdict::Failed {
                        why: "did not compile".into(),
                        message: "ptxas".into(),
                    }));
                }
                Ok((time(tk), tk))
            },
            |_, tk| {
                if tk == 32 {
                    Verdict::Failed {
                        why: "gives wrong output".into(),
                        message: "launch 2".into(),
                    }
                } else {
                    valid(100.0 / time(tk))
                }
            },
        );
        // Budget 20 over 4 builds: 2 trials each first, then the 3 fastest of those that ran
        // go on to 2 + (20 - 8) / 3 = 6. A first share of two trials races nothing: it may be
        // tuned past its -O3.
        assert_eq!(
            asked,
            vec![
                (8, 2, None),
                (16, 2, None),
                (32, 2, None),
                (64, 2, None),
                (32, 6, None),
                (16, 6, None),
                (8, 6, None)
            ]
        );
        // Budget 4 over 4 builds: one trial each, its -O3, racing the best -O3 before it.
        asked.clear();
        halving(
            &builds,
            4,
            None,
            |b, trials, _, beat| {
                let tk = b.values["R3_TK"];
                asked.push((tk, trials, beat));
                Ok((time(tk), tk))
            },
            |_, tk| valid(100.0 / time(tk)),
        );
        assert_eq!(
            asked,
            vec![
                (8, 1, None),
                (16, 1, Some(40.0)),
                (32, 1, Some(20.0)),
                (64, 1, Some(10.0))
            ]
        );
        match verdict {
            Verdict::Valid {
                values, speedup, ..
            } => {
                assert_eq!(values["R3_TK"], 16);
                assert_eq!(speedup, 5.0);
            }
            v => panic!("{v:?}"),
        }
    }

    /// The tiling template's grid: depth 8 to 64, groups of 1, 2 or 4 blocks along x and y.
    fn grid() -> Vec<BuildToJudge> {
        let mut out = Vec::new();
        for tk in [8, 16, 32, 64] {
            for rx in [1, 2, 4] {
                for ry in [1, 2, 4] {
                    let mut b = build(tk);
                    b.values.insert("R3_RX".into(), rx);
                    b.values.insert("R3_RY".into(), ry);
                    out.push(b);
                }
            }
        }
        out
    }

    /// From the middle of the grid, each knob in turn (RX, RY, TK by name) moves to its fastest
    /// value; the second pass, from the new best, measures only what the first did not, and
    /// a pass that moves nothing ends the search: 10 of 36 builds, the best among them wins.
    #[test]
    fn a_knob_at_a_time_search_moves_to_the_fastest_value_of_each_knob_in_turn() {
        let builds = grid();
        let time = |v: &params::Values| {
            let (tk, rx, ry) = (v["R3_TK"], v["R3_RX"], v["R3_RY"]);
            100.0 - 10.0 * f64::from(tk == 16) - 5.0 * f64::from(rx == 4) - 3.0 * f64::from(ry == 1)
        };
        let start = builds
            .iter()
            .position(|b| {
                b.values["R3_TK"] == 32 && b.values["R3_RX"] == 2 && b.values["R3_RY"] == 2
            })
            .unwrap();
        let mut asked: Vec<(i64, i64, i64)> = Vec::new();
        let verdict = coordinate(
            &builds,
            start,
            8,
            None,
            |b, trials, _, _| {
                assert_eq!(trials, 1);
                asked.push((b.values["R3_TK"], b.values["R3_RX"], b.values["R3_RY"]));
                Ok((time(&b.values), b.values.clone()))
            },
            |_, v| valid(100.0 / time(&v)),
        );
        assert_eq!(
            asked,
            vec![
                (32, 2, 2),
                (32, 1, 2),
                (32, 4, 2),
                (32, 4, 1),
                (32, 4, 4),
                (8, 4, 1),
                (16, 4, 1),
                (64, 4, 1),
                // Second pass from (16, 4, 1): its other groupings, then nothing moves.
                (16, 1, 1),
                (16, 2, 1),
                (16, 4, 2),
                (16, 4, 4),
            ]
        );
        match verdict {
            Verdict::Valid { values, .. } => {
                assert_eq!(
                    (values["R3_TK"], values["R3_RX"], values["R3_RY"]),
                    (16, 4, 1)
                );
            }
            v => panic!("{v:?}"),
        }
    }

    /// With nothing won elsewhere the search starts at each knob's middle value, and at the
    /// values another kernel's template won with where the store has them.
    #[test]
    fn a_knob_search_starts_where_the_same_knobs_won_elsewhere_else_in_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let builds = grid();
        let at = |i: usize| {
            let v = &builds[i].values;
            (v["R3_TK"], v["R3_RX"], v["R3_RY"])
        };
        assert_eq!(at(start_of(&store, "H200", &builds)), (32, 2, 2));
        let mut won = valid(3.0);
        if let Verdict::Valid { values, .. } = &mut won {
            values.clone_from(&builds[4].values);
        }
        crate::store::fixtures::judged_attempt(&store, "00000000000000e1", 1, "H200", won);
        assert_eq!(at(start_of(&store, "H200", &builds)), at(4));
        assert_eq!(at(start_of(&store, "H100", &builds)), (32, 2, 2));
    }

    /// A build that fails is passed over: the search goes on from the fastest that ran.
    #[test]
    fn a_knob_at_a_time_search_goes_on_past_builds_that_fail() {
        let builds = grid();
        let v = coordinate(
            &builds,
            0,
            8,
            None,
            |b, _, _, _| {
                if b.values["R3_RX"] == 1 && b.values["R3_TK"] != 8 {
                    return Err(Box::new(Verdict::Failed {
                        why: "did not compile".into(),
                        message: "ptxas".into(),
                    }));
                }
                let (tk, rx) = (b.values["R3_TK"], b.values["R3_RX"]);
                Ok((100.0 / tk as f64 - rx as f64, tk))
            },
            |_, tk| valid(tk as f64),
        );
        // From (8, 1, 1): groups of 4 along x are faster; from there the deeper tiles, which
        // fail ungrouped, compile, and 64 is the fastest.
        match v {
            Verdict::Valid { values, .. } => {
                assert_eq!((values["R3_TK"], values["R3_RX"]), (64, 4));
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn halving_with_no_build_that_holds_gives_the_first_failure_with_its_values() {
        let builds: Vec<BuildToJudge> = [8, 16].map(build).into();
        let v = halving(
            &builds,
            1,
            None,
            |_, _, _, _| {
                Err::<(f64, ()), _>(Box::new(Verdict::Failed {
                    why: "crashed".into(),
                    message: "illegal address".into(),
                }))
            },
            |_, _| unreachable!(),
        );
        assert_eq!(
            v,
            Verdict::Failed {
                why: "crashed".into(),
                message: "illegal address (built with R3_TK=8)".into()
            }
        );
    }

    #[test]
    fn candidates_are_described_as_edits_of_o3_and_knobs() {
        assert_eq!(describe(&Candidate::baseline()), "O3");
        let mut c = Candidate::baseline();
        c.codegen_opt = 2;
        c.max_threads = Some(256);
        assert_eq!(describe(&c), "O3; llc -O2, maxntid 256");
    }
}
