//! The deadline's rewrite arm: source rewrites (`r3 evolve`) of a kernel as one more way to
//! spend the deadline's time, beside more compiler trials. An attempt is priced by what the
//! store's own attempt logs say rewrites of kernels like it found on this GPU (r3's stated prior
//! where they say too little), and by what this allocation's attempts found since: each attempt
//! that finds nothing lowers the chance of the next. The attempts themselves are made by a
//! [`Rewriter`]: r3-evolve's (its proposer, guard, compile and judge), which depends on this
//! crate; a test's is scripted.

use crate::kernel::{KernelHash, TrialsKey};
use crate::store::attempts::{builds_to_judge, coordinate_builds, fold, Attempt};
use crate::store::deadline::{
    median, Allocation, Arm, Kept, RewriteArm, RuleTally, Slice, Tally, IMPROVED, STALE_TRIALS,
};
use crate::store::Store;
use std::collections::BTreeMap;

/// A rewrite counts as found where it runs this much faster than the original's best
/// compiler-only build (replay tells 1% apart; a rewrite changes the user's code, so it must
/// clear more than a compiler knob).
pub const FOUND: f64 = 1.05;

/// The chance an attempt finds a rewrite, where the store's history says too little: r3's
/// prior, not a measurement of this store. On an H100 (2026-11-24, bench/RESULTS.md, "Source
/// rewrites with the rule proposer") 83 rewrites of 30 corpus kernels were measured and 11
/// kernels had one 1.05x or faster: at least 11 finds in 83 attempts, 13%.
pub const PRIOR_P: f64 = 0.12;

/// What a rewrite found brings over the kernel's best compiler-only build, where the history
/// has none: a prior. The 11 finds of that run ran 2.6x to 10.7x over the tuned build (median
/// 3.7x), and the tiling template's 2.6x to 9.3x on the H100 (2026-11-26); the prior is the
/// least of them. At 1.3x, kept under every find, no attempt ever outbid a warm start or a
/// search slice in the corpus under 300 s (H200, 2026-11-29, run R): a prior under what was
/// ever measured keeps the arm from the kernels where it pays, and the chance already falls
/// with each attempt that finds nothing.
pub const PRIOR_GAIN: f64 = 2.6;

/// What a template's find brings over the kernel's best compiler-only build, where the history
/// holds too few templates judged: r3's prior. The templates that found on an H200 (runs Y3
/// and Y4 and two_mm alone, 2026-11-30) brought gemm_naive 2.42x, two_mm_tmp 6.86x, two_mm_d
/// 7.28x and syrk 8.82x, median 7.1x, where the rules' edits found 1.36x and 1.42x there
/// (trmm, oscillators). Priced at the rules' [`PRIOR_GAIN`], syrk's 36-build
/// template was worth less a second than a plain rule's attempt on a kernel twice as slow as
/// streaming its data, and 62 kernels' plain attempts took the 246 s the arm had while syrk,
/// two_mm and kendall_tau got none (run Y5, H200, 2026-11-30).
pub const PRIOR_KNOBS_GAIN: f64 = 7.0;

/// The chance an attempt with knobs (the tiling template's knob search) finds a rewrite, where
/// the store's history holds too few of them: r3's prior. Of the seven judged on an H100 and
/// an H200 (bench/RESULTS.md, 2026-11-26 and 2026-11-30), six found 1.18x to 9.3x; five of
/// those were the matrix products the template is made for, and the one judged on a
/// matrix-vector kernel, where it is offered too, ran 0.61x. Kept at half.
pub const PRIOR_KNOBS_P: f64 = 0.5;

/// The chance a template's knob search finds a rewrite of a kernel far above streaming its data
/// once ([`REUSE_BOUND`]), where the history says too little: every one judged on a matrix
/// product found (1.18x to 9.3x on an H100 and an H200 by 2026-11-30; syrk 9.03x, gemm_naive
/// 2.42x and trmm 1.36x again in run Y3): r3's prior, kept under that. With a whole tile's
/// loads in flight (2026-12-01, H200) templates found on 9 of the 11 kernels judged on this
/// side as tuned (row walks, a dense layer, Gram-Schmidt's update, the matrix products) and
/// missed on cov_kernel and gs_norm.
pub const PRIOR_KNOBS_P_REUSE: f64 = 0.75;

/// The same chance for a kernel near streaming its data once. Before a tile's loads were all in
/// flight, none found on this side (one on a matrix-vector kernel ran 0.61x; gemv_t, bicg_q and
/// gemver_w took 15 attempts in run Y3 and found nothing), and the prior was a tenth. With them,
/// each kernel's first attempt with knobs in runs Y10 to Y16 (H200, 2026-12-01 and 12-02;
/// `scripts/rewrite-repeats` over their logs, each kernel on its side as the arm read it) found
/// on 5 of the 7 kernels judged on this side (25 of 32 attempts: gemv_n 2.8x, transpose_naive's
/// staged store 4x, mvt_x1, atax_ax, gesummv; atax_aty and kmeans_assign missed), and on 8 of
/// the 11 on the other. At a tenth, gemv_n's (2.6x in Y14) and mvt_x1's (1.56x) went
/// unjudged in Y16. Kept at half, under the other side's: the earlier misses were here, and
/// a find near streaming is worth less ([`gain_of`] holds it to the root of the reuse left).
pub const PRIOR_KNOBS_P_STREAM: f64 = 0.5;

/// A kernel whose launch takes this many times what streaming its recorded bytes once at the
/// GPU's peak bandwidth would works on each byte many times (a matrix product of n works on
/// each n times), where a kernel bound by its memory traffic sits near 1. Scattered 4-byte
/// reads, one to a 32-byte sector, make 8x the traffic: 32 keeps clear of them. It does not
/// keep clear of every walk down a matrix's columns: on an H200 (run Y4, 2026-11-30) the
/// matrix products ran 133x to 8081x (36-build templates found 2.4x on gemm_naive and 8.8x on
/// syrk, none on covariance; trmm's rewrites 1.36x), the matrix-vector kernels 1.6x to 5.2x
/// where their reads are coalesced and 40x to 112x where each thread walks a column (their
/// 15 attempts, templates among them, found nothing). A bound
/// above them would cost a small matrix product its template; one below costs a few seconds
/// an attempt on short kernels, and the chance of each falls with what it finds.
pub const REUSE_BOUND: f64 = 32.0;

/// A launch's fixed cost (µs), left out of its time before it is set against streaming: a
/// short kernel is not far above streaming for its launch alone.
pub const LAUNCH_US: f64 = 3.0;

/// A launch of `launch_ms` over the time streaming `bytes` once at `gbs` GB/s takes (its
/// launch's fixed cost left out); None where either is unknown.
pub fn reuse(launch_ms: f64, bytes: u64, gbs: Option<f64>) -> Option<f64> {
    let gbs = gbs.filter(|g| *g > 0.0)?;
    if launch_ms <= 0.0 || bytes == 0 {
        return None;
    }
    let stream_us = bytes as f64 / (gbs * 1e9) * 1e6;
    Some((launch_ms * 1e3 - LAUNCH_US).max(0.0) / stream_us)
}

/// Whether a kernel of `reuse` works on each byte many times ([`REUSE_BOUND`]); None where
/// unknown.
fn reuses(reuse: Option<f64>) -> Option<bool> {
    reuse.map(|r| r >= REUSE_BOUND)
}

/// The side of the bound `r`'s kernel is on as tuned so far: its reuse at -O3 over its speedup
/// since. A walk down a matrix's columns is far above streaming at -O3 and near it once the
/// compiler search has reordered its loops (bicg_q 48x at -O3, 2.27x since; gemver_w 49x, 2.9x;
/// atax_aty 106x, 4.2x), where a matrix product stays far above it (gemm_naive 133x, 1.1x;
/// two_mm_d 8081x, 2.7x): at -O3 alone the walks took their templates first, which ran 0.18x
/// to 0.85x (H200, 2026-11-30, `scripts/bench-deadline profile 170s`).
pub fn side(r: &RewriteArm) -> Option<bool> {
    reuses(r.reuse.map(|u| u / r.now.max(1.0)))
}

/// Attempts the price counts as, against this allocation's own: after four attempts that found
/// nothing, the chance is half what it was priced at.
pub const PRIOR_WEIGHT: f64 = 4.0;

/// Attempts judged on this GPU the history needs before it replaces the prior.
pub const MIN_HISTORY: usize = 4;

/// Seconds a rewrite's compile takes before its judge measures it (its translation unit with
/// the recorded command, one device compile and one host compile): a price until measured.
pub const COMPILE_S: f64 = 4.0;

/// Compiler trials the judge searches each variant with under a deadline (`r3 evolve`'s own
/// default is 16): enough for -O3 and the store's transferred winners.
pub const INNER_TRIALS: u32 = 8;

/// What the judge's confirmation of an attempt's best costs, in the kernel's trials: it opens
/// a worker of its own for each step (the other recorded launches, other inputs, the duel
/// against the original's best), each loading the recording and learning its outputs again.
/// An attempt on a 0.5 s kernel priced without it ran 42 s, 8 s past a 90 s deadline (H200,
/// 2026-11-29): about its search's time again.
pub const JUDGE_TRIALS: u32 = 4;

/// What one rewrite slice came to.
#[derive(Debug, Clone, PartialEq)]
pub struct RewriteOutcome {
    /// New attempts made (repairs included).
    pub attempts: u32,
    /// Of them, those valid and faster than the kernel's best compiler-only build by [`FOUND`].
    pub found: u32,
    /// Of `attempts` and `found`, the attempts with knobs (priced apart: `RewriteArm::knobs_p`).
    pub knobs: (u32, u32),
    /// The best valid rewrite's speedup over that build, of every attempt on this GPU (1:
    /// none).
    pub best: f64,
    /// Why the kernel gets no more attempts (its proposer has nothing more, its source is
    /// gone), if so.
    pub done: Option<String>,
    pub seconds: f64,
    /// The slice's own limit ended an attempt partway (not the run's Ctrl-C or deadline): the
    /// builds it judged keep their trials, and the next slice resumes it.
    pub cut: bool,
    /// The builds of each attempt left to judge after the slice, where the rewriter read them
    /// again (a template's child falls from its every knob combination to one once its parent
    /// is judged); None: the allocation's own list less the attempts judged.
    pub pending: Option<Vec<u32>>,
    /// The rule of each attempt of `pending`, where it is given.
    pub pending_rules: Option<Vec<String>>,
    /// Each new attempt (refused or not compiled too): its rule, whether it has knobs, and
    /// whether it found.
    pub rules: Vec<Tried>,
    /// What the attempt said on its way (its proposal, compile and verdict), for tune's
    /// progress.
    pub said: Vec<String>,
    /// The attempt whose rewrite `best` is, the trials its judge's compiler search of it has
    /// had, and its build's best over its own -O3 ([`Kept::own`]): what a deepening continues
    /// ([`DeepenOutcome`]). None where no rewrite is valid.
    pub kept: Option<(u32, u32, f64)>,
}

/// What a deepening came to: a further compiler search of a kernel's kept rewrite, on the
/// kernel's recorded launch, by the judge that found it, whose best is checked again on every
/// recorded launch and on other inputs, and timed against the original's best build, before
/// it replaces the rewrite's verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct DeepenOutcome {
    /// The rewrite's compiler trials in all, after it.
    pub trials: u32,
    /// Its build's best over its own -O3 after it ([`Kept::own`]).
    pub own: f64,
    /// The kept rewrite's speedup over the kernel's best compiler-only build as it is now: its
    /// new verdict's where the deeper search found a faster build that held, else its old one's
    /// (1: the rewrite is gone).
    pub best: f64,
    pub seconds: f64,
    /// Its time limit ended it partway: the trials it made stay, the next deepening resumes.
    pub cut: bool,
    /// Why the rewrite is searched no further, if so.
    pub done: Option<String>,
    /// What it said on its way, for tune's progress.
    pub said: Vec<String>,
}

impl DeepenOutcome {
    /// A deepening that searched nothing, for `why`.
    pub fn none(why: impl Into<String>) -> DeepenOutcome {
        DeepenOutcome {
            trials: 0,
            own: 1.0,
            best: 1.0,
            seconds: 0.0,
            cut: false,
            done: Some(why.into()),
            said: Vec::new(),
        }
    }
}

/// One attempt a rewrite slice made, as the arm tallies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tried {
    /// Its proposer's label ("rules: restrict").
    pub rule: String,
    /// A template's knob search (its builds more than one).
    pub knobs: bool,
    /// It beat the best rewrite judged before it by [`FOUND`].
    pub found: bool,
}

impl RewriteOutcome {
    /// An outcome of no attempt, for `why`.
    pub fn none(why: impl Into<String>) -> RewriteOutcome {
        RewriteOutcome {
            attempts: 0,
            found: 0,
            knobs: (0, 0),
            best: 1.0,
            done: Some(why.into()),
            seconds: 0.0,
            cut: false,
            pending: None,
            pending_rules: None,
            rules: Vec::new(),
            said: Vec::new(),
            kept: None,
        }
    }
}

/// What makes rewrite attempts for the deadline.
pub trait Rewriter {
    /// Why `kernel` cannot be rewritten here (its source is not on this machine); None where
    /// it can.
    fn cannot(&mut self, kernel: &KernelHash) -> Option<String>;
    /// One attempt on `kernel` (and its repairs), judged on every recorded launch of the
    /// kernel, ending within about `limit_s` seconds (a judge cut short records no verdict).
    /// `first`: the attempt compiled and waiting for its judge (an index into
    /// [`pending_attempts`]) to judge alone in this slice; None: the rewriter's own order.
    fn attempt(
        &mut self,
        kernel: &KernelHash,
        limit_s: f64,
        first: Option<usize>,
    ) -> RewriteOutcome;
    /// Searches the rewrite of `kernel`'s attempt `attempt` further, to `trials` compiler
    /// trials in all, its search within about `search_s` seconds and the whole within
    /// `limit_s` ([`DeepenOutcome`]); a rewriter without a GPU judge searches nothing.
    fn deepen(
        &mut self,
        _kernel: &KernelHash,
        _attempt: u32,
        _trials: u32,
        (_search_s, _limit_s): (f64, f64),
    ) -> DeepenOutcome {
        DeepenOutcome::none("this rewriter has no compiler search of its rewrites")
    }
}

/// One attempt of the store's history: the loop shape of its kernel, what it found (None:
/// refused, failed to compile or judged wrong), and the builds it compiled (a template's knob
/// values each one; 0 where it was refused or did not compile).
#[derive(Debug, Clone, PartialEq)]
pub struct Past {
    pub kernel: KernelHash,
    pub shape: Option<String>,
    pub speedup: Option<f64>,
    pub builds: u32,
    /// Its kernel's [`reuse`], where known (the store's recordings say it; `price`'s caller
    /// fills it in).
    pub reuse: Option<f64>,
}

/// Every attempt of the store's evolve logs that came to an outcome on `gpu`: judged there, or
/// refused or not compiled (which happen on any GPU).
pub fn history(store: &Store, gpu: &str) -> Vec<Past> {
    let Ok(kernels) = store.evolved() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for kernel in kernels {
        let Ok(events) = store.attempts(&kernel) else {
            continue;
        };
        let shape = crate::transfer::shape_of(store, &TrialsKey::of_kernel(&kernel));
        let attempts = fold(&events).1;
        for a in &attempts {
            let Some(speedup) = outcome(a, gpu) else {
                continue;
            };
            let builds = match &a.compiled {
                None => 0,
                Some(_) => judged_builds(a, &attempts, gpu),
            };
            out.push(Past {
                kernel: kernel.clone(),
                shape: shape.clone(),
                speedup,
                builds,
                reuse: None,
            });
        }
    }
    out
}

/// What attempt `a` came to on `gpu`: None where nothing yet (compiled, not judged there);
/// its speedup where judged valid there; Some(None) where judged wrong, refused or not
/// compiled (which happen on any GPU).
fn outcome(a: &Attempt, gpu: &str) -> Option<Option<f64>> {
    match a.verdict(Some(gpu)) {
        Some(v) => Some(v.speedup()),
        None if a.refused.is_some() || a.diagnostics.is_some() => Some(None),
        None => None,
    }
}

/// The rewrite arm of `kernel` as an allocation starts: its price, from the history of kernels
/// of its loop shape and its side of [`REUSE_BOUND`] (`reuse`, where known) where that has
/// [`MIN_HISTORY`] attempts, else of every kernel, else r3's prior; its attempts priced as
/// searches are, by what they are expected to cost ([`attempt_seconds`]), until one is
/// measured; its best the best of its own earlier attempts.
pub fn price(
    store: &Store,
    kernel: &KernelHash,
    (trial_s, setup_s, run_s): (f64, f64, f64),
    history: &[Past],
    pending: Pending,
    reuse: Option<f64>,
) -> RewriteArm {
    let shape = crate::transfer::shape_of(store, &TrialsKey::of_kernel(kernel));
    // One loop shape holds matrix products and matrix-vector kernels alike (gemm_naive's and
    // gemv's are one): the reuse tells them apart where both are known. Kernels on its side
    // of the bound, whatever their shape, come next (syrk's shape is not gemm's).
    let same_side = |p: &Past| match (reuses(p.reuse), reuses(reuse)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let alike: Vec<&Past> = history
        .iter()
        .filter(|p| shape.is_some() && p.shape == shape && same_side(p))
        .collect();
    let side: Vec<&Past> = history
        .iter()
        .filter(|p| reuses(reuse).is_some() && reuses(p.reuse) == reuses(reuse))
        .collect();
    let (pool, from) = if alike.len() >= MIN_HISTORY {
        (alike, "kernels of its loop shape")
    } else if side.len() >= MIN_HISTORY {
        (side, "kernels as far from streaming their data")
    } else {
        (history.iter().collect(), "this store's kernels")
    };
    // The chance of attempts without knobs and what their finds bring, from theirs alone
    // (`knobs_chance` and `knobs_gain` price the others).
    let plain: Vec<&Past> = pool.iter().copied().filter(|p| p.builds <= 1).collect();
    let found = finds(&plain);
    let found_plain = found.len();
    let (p, gain, from) = if plain.len() >= MIN_HISTORY {
        let gain = median(found).map_or(PRIOR_GAIN, |m| m.clamp(FOUND, 4.0));
        (
            (found_plain as f64 / plain.len() as f64).clamp(0.02, 0.9),
            gain,
            format!(
                "{found_plain} of {} attempts without knobs on {from} found {}+ on this GPU",
                plain.len(),
                FOUND
            ),
        )
    } else {
        (
            PRIOR_P,
            PRIOR_GAIN,
            "r3's prior (too few attempts in this store)".to_owned(),
        )
    };
    let (knobs_p, knobs_prior) = knobs_chance(&pool, reuse);
    let knobs_gain = knobs_gain(&pool);
    let own = history
        .iter()
        .filter(|p| p.kernel == *kernel)
        .filter_map(|p| p.speedup)
        .fold(1.0, f64::max);
    let mut arm = RewriteArm {
        p,
        gain,
        attempt_s: attempt_seconds(builds_expected(&pool), (trial_s, setup_s, run_s)),
        from,
        attempts: 0,
        found: 0,
        best: own,
        base: None,
        spent_s: 0.0,
        done: None,
        pending: pending.builds,
        setup_s,
        trial_s,
        run_s,
        knobs_p: Some(knobs_p),
        knobs_attempts: 0,
        knobs_found: 0,
        reuse,
        next: 0,
        others: Tally::default(),
        knobs_prior,
        now: 1.0,
        knobs_gain: Some(knobs_gain),
        pending_rules: pending.rules,
        rules: BTreeMap::new(),
        rules_everywhere: BTreeMap::new(),
        tried: pending.tried,
        kept: None,
    };
    choose_next(&mut arm);
    arm
}

/// The speedups of `pool`'s attempts that found a rewrite ([`FOUND`] or more).
fn finds(pool: &[&Past]) -> Vec<f64> {
    pool.iter()
        .filter_map(|p| p.speedup)
        .filter(|s| *s >= FOUND)
        .collect()
}

/// The chance an attempt with knobs finds a rewrite: the share of `pool`'s attempts with knobs
/// that found one, where it holds [`MIN_HISTORY`] of them, else r3's prior for the kernel's
/// side of [`REUSE_BOUND`] ([`PRIOR_KNOBS_P`] where its `reuse` is unknown).
fn knobs_chance(pool: &[&Past], reuse: Option<f64>) -> (f64, bool) {
    let with: Vec<&Past> = pool.iter().copied().filter(|p| p.builds > 1).collect();
    if with.len() < MIN_HISTORY {
        return (knobs_prior(reuses(reuse)), true);
    }
    let p = (finds(&with).len() as f64 / with.len() as f64).clamp(0.02, 0.9);
    (p, false)
}

/// What a find with knobs brings: the median of `pool`'s finds with knobs, where it holds
/// [`MIN_HISTORY`] attempts with knobs, else r3's prior ([`PRIOR_KNOBS_GAIN`]).
fn knobs_gain(pool: &[&Past]) -> f64 {
    let with: Vec<&Past> = pool.iter().copied().filter(|p| p.builds > 1).collect();
    if with.len() < MIN_HISTORY {
        return PRIOR_KNOBS_GAIN;
    }
    median(finds(&with)).map_or(PRIOR_KNOBS_GAIN, |m| m.max(FOUND))
}

/// r3's prior chance of a template on a kernel on `side` of the reuse bound.
fn knobs_prior(side: Option<bool>) -> f64 {
    match side {
        Some(true) => PRIOR_KNOBS_P_REUSE,
        Some(false) => PRIOR_KNOBS_P_STREAM,
        None => PRIOR_KNOBS_P,
    }
}

/// What a kernel's attempt log says for one GPU ([`pending_attempts`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pending {
    /// The builds of each attempt compiled and not judged on the GPU yet, in the order a judge
    /// takes them (the attempts' order): a template's knob search judges one build for each of
    /// its knobs' value combinations. Priced at the mean of the attempts judged before, a
    /// template's 36 builds after two plain rewrites were given 20 s slices, and none ended
    /// (H200, 2026-11-29).
    pub builds: Vec<u32>,
    /// The rule of each (its proposer's label: "rules: restrict").
    pub rules: Vec<String>,
    /// The attempts judged on the GPU already, and their finds, by rule: a rule that missed on
    /// the kernel is priced low for its next attempt there ([`repeat_lift`]).
    pub tried: BTreeMap<String, RuleTally>,
}

/// The attempts on `kernel` waiting for their judge on `gpu`, and those judged there already.
pub fn pending_attempts(store: &Store, kernel: &KernelHash, gpu: &str) -> Pending {
    let Ok(events) = store.attempts(kernel) else {
        return Pending::default();
    };
    let attempts = fold(&events).1;
    let (builds, rules) = attempts
        .iter()
        .filter(|a| a.compiled.is_some() && a.verdict(Some(gpu)).is_none())
        .map(|a| (judged_builds(a, &attempts, gpu), a.label.clone()))
        .unzip();
    Pending {
        builds,
        rules,
        tried: tried_rules(&attempts, gpu),
    }
}

/// The attempts of `attempts` that came to an outcome on `gpu` (judged there, or refused or
/// not compiled, as [`history`] counts them), by rule: a find beats every attempt judged before
/// it by [`FOUND`] (and the original's best compiler-only build), each at its speedup as judged.
fn tried_rules(attempts: &[Attempt], gpu: &str) -> BTreeMap<String, RuleTally> {
    let mut tried: BTreeMap<String, RuleTally> = BTreeMap::new();
    let mut best = 1.0_f64;
    for a in attempts {
        let Some(speedup) = outcome(a, gpu).map(|s| s.unwrap_or(0.0)) else {
            continue;
        };
        let t = tried.entry(a.label.clone()).or_default();
        t.attempts += 1;
        t.found += u32::from(speedup >= FOUND * best);
        best = best.max(speedup);
    }
    tried
}

/// The builds the deadline's judge measures of attempt `a` (of `attempts`) on `gpu`: those it
/// judges ([`builds_to_judge`]), a template's many searched one knob at a time
/// ([`coordinate_builds`]).
fn judged_builds(a: &Attempt, attempts: &[Attempt], gpu: &str) -> u32 {
    let values: Vec<_> = builds_to_judge(a, attempts, gpu)
        .iter()
        .map(|b| &b.values)
        .collect();
    coordinate_builds(&values).max(1) as u32
}

/// The builds an attempt is expected to compile and judge: the mean of the compiled attempts
/// in `pool` (a template's knob search judges several builds, the rules proposer's one), 1
/// where none compiled.
pub fn builds_expected(pool: &[&Past]) -> f64 {
    let compiled: Vec<u32> = pool.iter().map(|p| p.builds).filter(|&b| b > 0).collect();
    if compiled.is_empty() {
        return 1.0;
    }
    f64::from(compiled.iter().sum::<u32>()) / compiled.len() as f64
}

/// Seconds a build's evaluator takes in the judge beyond its trials: its -O3 lowered (0.27-0.36
/// s a build in the 36-build templates of run Y4, H200, 2026-11-30) and checked on the
/// recording, on a worker that kept the recording's session (`replay::worker`) and with the
/// outputs the first build learned (`GpuEvaluator::take_outputs`): not the evaluator a search
/// opens (`setup_s`: the recording read, the outputs learned, L2 calibrated), which priced
/// two_mm's templates at 7.3 s a build, and kept them behind plain rewrites.
pub fn build_setup_s(run_s: f64) -> f64 {
    LOWER_S + JUDGE_BUILD_RUNS * run_s
}

/// Seconds a build's -O3 takes to lower, as measured (above).
pub const LOWER_S: f64 = 0.35;

/// Runs of the kernel a build's evaluator makes before its trials: its -O3 checked against
/// the recording, with the outputs the first build learned. two_mm_d's 36 builds took 0.43 s
/// each for it, under one 0.57 s run (H200, 2026-11-30, `scripts/bench-deadline profile 240s
/// two_mm`).
pub const JUDGE_BUILD_RUNS: f64 = 1.0;

/// Seconds an attempt of `builds` builds is expected to take, from what a trial, a search's
/// evaluator and one run of the kernel cost (`costs`): a compile and a judge's evaluator for
/// each build ([`build_setup_s`]), the judge's trials, and the confirmation of its best
/// (another evaluator and [`JUDGE_TRIALS`]). The judge halves over a template's builds (`r3-evolve`'s `halving`):
/// every build runs at least one trial, so an attempt runs [`INNER_TRIALS`] or one per build,
/// whichever is more. On a long kernel a build's first trial races the best build before it
/// (`replay::stopping::beaten_elsewhere`): only those that may beat it, about
/// [`timed_builds`], take a trial in full; the others settle on their checked run, which
/// [`build_setup_s`] prices already. Priced at one more run each, two_mm_d's 36-build template
/// came to 81 s against the 60 s it took (H200, 2026-11-30).
pub fn attempt_seconds(builds: f64, (trial_s, setup_s, run_s): (f64, f64, f64)) -> f64 {
    let builds = builds.max(1.0);
    let long = run_s * 1e6 >= crate::replay::stopping::ONE_RUN_US;
    let timed = if long { timed_builds(builds) } else { builds };
    let first_round = timed * trial_s;
    let more = (f64::from(INNER_TRIALS) - builds).max(0.0) * trial_s;
    let search = setup_s + builds * (COMPILE_S + build_setup_s(run_s)) + first_round + more;
    search + setup_s + f64::from(JUDGE_TRIALS) * trial_s
}

/// Of `builds` builds judged one after the other, how many are expected to be timed in full
/// where each races the best before it: in a random order, the k-th is the best so far with
/// chance 1/k (a harmonic sum, 4.2 of 36), and one more for a near-tie with the best.
pub fn timed_builds(builds: f64) -> f64 {
    let n = builds.max(1.0).round() as u32;
    let records: f64 = (1..=n).map(|k| 1.0 / f64::from(k)).sum();
    (records + 1.0).min(builds.max(1.0))
}

/// Seconds an attempt compiled already (here, ahead of the GPU: `r3 evolve --no-measure`)
/// of `builds` builds is expected to take: [`attempt_seconds`] without the compiles.
pub fn compiled_attempt_seconds(builds: f64, costs: (f64, f64, f64)) -> f64 {
    attempt_seconds(builds, costs) - builds.max(1.0) * COMPILE_S
}

/// What a trial, a search's evaluator and one run of `r`'s kernel cost ([`attempt_seconds`]).
fn costs_of(r: &RewriteArm) -> (f64, f64, f64) {
    (r.trial_s, r.setup_s, r.run_s)
}

/// Whether attempt `i` of `pending` has knobs (a template's builds).
fn has_knobs(r: &RewriteArm, i: usize) -> bool {
    r.pending.get(i).is_some_and(|&builds| builds > 1)
}

/// The chance the next attempt ([`RewriteArm::next`]) finds a rewrite.
pub fn chance(r: &RewriteArm) -> f64 {
    chance_at(r, r.next)
}

/// The chance attempt `i` of `pending` finds a rewrite: its kind's ([`chance_of`]), and for an
/// attempt without knobs, that times how its rule has done against all rules in this
/// allocation ([`rule_lift`]).
fn chance_at(r: &RewriteArm, i: usize) -> f64 {
    let knobs = has_knobs(r, i);
    let kind = chance_of(r, knobs);
    let Some(rule) = r.pending_rules.get(i) else {
        return kind;
    };
    let lift = if knobs { 1.0 } else { rule_lift(r, rule) };
    let chance = (kind * lift * repeat_lift(r, rule)).min(1.0);
    if found_here(r, rule) {
        chance.min(REPEAT_AFTER_FIND_CHANCE)
    } else {
        chance
    }
}

/// What an attempt of a rule that has missed on its kernel is priced at, against its first:
/// another parent does not make a rule fit a kernel it did not fit. In runs Y5, Y7, Y9 and the
/// row-walk run of 2026-12-01 (H200), 81 attempts repeated a rule that had missed on their
/// kernel (a template on `restrict`'s rewrite after the template alone, `unroll-4` on a
/// template after `unroll-4` alone) and none found, where 23 of the 138 first attempts of a
/// rule on a kernel did; in Y9 they were 46 of its 121 attempts. A rule that found keeps its
/// chance (4 of its 17 repeats found again), and is hoped to refine its find
/// ([`REPEAT_AFTER_FIND_GAIN`]).
pub const REPEAT_AFTER_MISS: f64 = 0.1;

/// [`REPEAT_AFTER_MISS`] where `rule` has been judged on `r`'s kernel and never found there,
/// else 1.
pub fn repeat_lift(r: &RewriteArm, rule: &str) -> f64 {
    if missed_here(r, rule) {
        REPEAT_AFTER_MISS
    } else {
        1.0
    }
}

/// Whether `rule` has found on `r`'s kernel.
fn found_here(r: &RewriteArm, rule: &str) -> bool {
    r.tried.get(rule).is_some_and(|t| t.found > 0)
}

/// Whether `rule` has been tried on `r`'s kernel and never found there.
fn missed_here(r: &RewriteArm, rule: &str) -> bool {
    r.tried
        .get(rule)
        .is_some_and(|t| t.attempts > 0 && t.found == 0)
}

/// Each plain rule's chance of finding on its first attempt on a kernel, against the plain
/// rules' prior ([`PRIOR_P`]), before an allocation has judged any of it: what the rules did on
/// an H200 in runs Y3 to Y12 (2026-11-30 to 2026-12-02, the corpus under `r3 tune --deadline`;
/// `scripts/rewrite-repeats` over their logs). The register accumulator found on 10 of its 54
/// first attempts on a kernel (19%; on 3 of the 15 kernels it was judged on), `restrict` on 8
/// of 73 (11%; 2 of 17), `unroll-4` on 9 of 110 (8%; 2 of 29). Priced alike at 12%, Y12 judged
/// only `restrict` on oscillators (its accumulator had found 1.33x in Y11) and nothing on trmm
/// (1.21x in Y11), nor kt_concordance's accumulator (1.69x in Y9). Run Y13 priced them at 1.9,
/// 0.85 and 0.75 (a tally by slice); the lifts are now the script's. Rules not listed, and a
/// model's proposals, keep 1.
pub const RULE_PRIOR_LIFT: &[(&str, f64)] = &[
    ("rules: register-accumulator", 1.55),
    ("rules: restrict", 0.9),
    ("rules: unroll-4", 0.7),
];

/// `rule`'s lift in [`RULE_PRIOR_LIFT`], 1 where it is not listed.
pub fn prior_lift(rule: &str) -> f64 {
    RULE_PRIOR_LIFT
        .iter()
        .find(|(name, _)| *name == rule)
        .map_or(1.0, |(_, lift)| *lift)
}

/// How much likelier an attempt of `rule` is to find than an attempt of any rule without knobs,
/// by this allocation's attempts on every kernel (`RewriteArm::rules_everywhere`): the rule's
/// rate, counted from [`PRIOR_WEIGHT`] attempts at the rate of all rules times the rule's own
/// prior lift ([`RULE_PRIOR_LIFT`]), over that rate. In run Y8 (H200, 2026-11-30) the register
/// accumulator found on 7 of its 14 attempts judged and `restrict` on 1 of 12, where every
/// attempt was priced alike and each kernel's came in the order the rules proposed them,
/// `restrict` first. The rule's prior lift where nothing has been judged.
pub fn rule_lift(r: &RewriteArm, rule: &str) -> f64 {
    let all = r
        .rules_everywhere
        .values()
        .fold((0u32, 0u32), |(n, f), t| (n + t.attempts, f + t.found));
    let w = PRIOR_WEIGHT;
    let rate_all = (f64::from(all.1) + w * r.p) / (f64::from(all.0) + w);
    let mine = r.rules_everywhere.get(rule).copied().unwrap_or_default();
    let prior = rate_all * prior_lift(rule);
    let rate = (f64::from(mine.found) + w * prior) / (f64::from(mine.attempts) + w);
    if rate_all > 0.0 {
        rate / rate_all
    } else {
        1.0
    }
}

/// What the next attempt's find is hoped to bring ([`gain_at`]).
pub fn gain(r: &RewriteArm) -> f64 {
    gain_at(r, r.next)
}

/// What attempt `i` of `pending` is hoped to bring where it finds: its kind's ([`gain_of`]), at
/// most [`REPEAT_AFTER_FIND_GAIN`] where its rule has found on the kernel already.
fn gain_at(r: &RewriteArm, i: usize) -> f64 {
    let kind = gain_of(r, has_knobs(r, i));
    let found_before = r
        .pending_rules
        .get(i)
        .is_some_and(|rule| found_here(r, rule));
    if found_before {
        kind.min(REPEAT_AFTER_FIND_GAIN)
    } else {
        kind
    }
}

/// What an attempt of a rule that has found on its kernel is hoped to bring over the best
/// found there: the same rule on another parent refines its find. In runs Y5, Y7, Y9 and the
/// row-walk run of 2026-12-01 (H200, `scripts/rewrite-repeats`), 4 of 17 such repeats found,
/// 1.06x to 1.19x over that best, where the template's repeat after its 1.5x on bicg_q was
/// hoped to bring 5x (its kind's 7x held to the kernel's headroom).
pub const REPEAT_AFTER_FIND_GAIN: f64 = 1.2;

/// The most an attempt of a rule that has found on its kernel is given to find again. In runs
/// Y5, Y7, Y9, the row-walk run of 2026-12-01 and Y10 (H200, `scripts/rewrite-repeats`), 4 of
/// 20 such repeats found; priced at the kernel's own chance after its find, gesummv's two
/// repeats in Y10 went at 45% each (17 s, none found) in the deadline's last 70 s, where
/// kendall_tau's first rule attempt (1.69x in Y9) then no longer fitted.
pub const REPEAT_AFTER_FIND_CHANCE: f64 = 0.2;

/// What a find with `knobs` or without is hoped to bring: its kind's price, held to the square
/// root of what is left of the kernel's reuse ([`reuse`] over its speedup so far). No rewrite
/// makes a kernel faster than streaming its data once, and none measured came near: every find
/// on an H200 (runs Y3 to Y5, 2026-11-30) brought under the square root of its kernel's
/// headroom (syrk 8.8x of 25x, gemm_naive 2.4x of 11x, oscillators 1.42x of 42x), where a
/// plain attempt on a kernel twice as slow as streaming was hoped to bring 2x, and outbid
/// syrk's template.
fn gain_of(r: &RewriteArm, knobs: bool) -> f64 {
    let kind = match r.knobs_gain {
        Some(g) if knobs => g,
        _ => r.gain,
    };
    match r.reuse {
        Some(reuse) => kind.min((reuse / r.now.max(1.0)).max(1.0).sqrt()),
        None => kind,
    }
}

/// Of the time the kernel takes now, the share attempt `i` of `pending` saves where it finds,
/// weighted by its chance ([`chance_at`]): what [`choose_next`] sets against its price.
fn expected_saving(r: &RewriteArm, i: usize) -> f64 {
    chance_at(r, i) * (1.0 - 1.0 / gain_at(r, i))
}

/// The chance an attempt with `knobs` or without finds a rewrite: the price, counted as
/// [`PRIOR_WEIGHT`] attempts, with this allocation's attempts and finds of that kind on the
/// kernel, and at [`OTHERS_WEIGHT`] each those on the other kernels on its side of the reuse
/// bound ([`pool_others`]), where the arm prices the kinds apart.
fn chance_of(r: &RewriteArm, knobs: bool) -> f64 {
    let own = r.tally();
    let (p, (attempts, found), (others_attempts, others_found)) = match r.knobs_p {
        Some(_) if knobs && r.knobs_prior => {
            (knobs_prior(side(r)), own.of(true), r.others.of(true))
        }
        Some(p) if knobs => (p, own.of(true), r.others.of(true)),
        Some(_) => (r.p, own.of(false), r.others.of(false)),
        None => (
            r.p,
            (r.attempts, r.found),
            (r.others.attempts, r.others.found),
        ),
    };
    let w = OTHERS_WEIGHT;
    (p * PRIOR_WEIGHT + f64::from(found) + w * f64::from(others_found))
        / (PRIOR_WEIGHT + f64::from(attempts) + w * f64::from(others_attempts))
}

/// What one attempt on another kernel on the same side of the reuse bound counts for, against
/// one on the kernel itself: in run Y4 (H200, 2026-11-30) six column-walk kernels took 15
/// attempts that found nothing, each priced at the prior until its own failures, while two_mm's
/// template waited.
pub const OTHERS_WEIGHT: f64 = 0.5;

/// Each rewrite arm's tally of this allocation's attempts and finds on the other kernels on its
/// side of the reuse bound ([`REUSE_BOUND`]; kernels whose reuse is unknown pool together).
pub fn pool_others(a: &mut Allocation) {
    let mut everywhere: BTreeMap<String, RuleTally> = BTreeMap::new();
    for r in a.arms.iter().filter_map(|k| k.rewrite.as_ref()) {
        for (rule, t) in &r.rules {
            let sum = everywhere.entry(rule.clone()).or_default();
            sum.attempts += t.attempts;
            sum.found += t.found;
        }
    }
    for r in a.arms.iter_mut().filter_map(|k| k.rewrite.as_mut()) {
        r.rules_everywhere.clone_from(&everywhere);
    }
    let counts: Vec<(Option<bool>, Tally)> = a
        .arms
        .iter()
        .filter_map(|k| k.rewrite.as_ref())
        .map(|r| (side(r), r.tally()))
        .collect();
    for (i, r) in a
        .arms
        .iter_mut()
        .filter_map(|k| k.rewrite.as_mut())
        .enumerate()
    {
        let mine = side(r);
        let mut others = Tally::default();
        for (j, (s, t)) in counts.iter().enumerate() {
            if j != i && *s == mine {
                others.attempts += t.attempts;
                others.found += t.found;
                others.knobs_attempts += t.knobs_attempts;
                others.knobs_found += t.knobs_found;
            }
        }
        r.others = others;
    }
}

/// Of the attempts waiting for their judge, the one worth most a second (the chance of its kind
/// over its price at its own builds) is judged next, and priced: two_mm's plain rule rewrites,
/// compiled first, kept its 36-build templates behind them, and the arm, pricing the first
/// alone at the prior of a plain rewrite, never reached them (H200, 2026-11-30). Ties go to the
/// first. Nothing where none waits: a new attempt keeps its price.
pub fn choose_next(r: &mut RewriteArm) {
    let mut best: Option<(usize, f64)> = None;
    for (i, &builds) in r.pending.iter().enumerate() {
        let value = expected_saving(r, i) / attempt_price(r, builds);
        if best.is_none_or(|(_, v)| value > v) {
            best = Some((i, value));
        }
    }
    r.next = best.map_or(0, |(i, _)| i);
    if let Some(&builds) = r.pending.get(r.next) {
        r.attempt_s = attempt_price(r, builds);
    }
}

/// Seconds an attempt compiled already of `builds` builds on `r`'s kernel is expected to take:
/// [`compiled_attempt_seconds`], but that an attempt without knobs on a long kernel races the
/// kernel's best build (`judge::GpuJudge::racing_plain_rewrites`): its search goes past its
/// first trial only where that one run is not clearly slower, priced at twice the chance of a
/// find (those near the best go on too, and are rarely finds), at most 1.
pub fn attempt_price(r: &RewriteArm, builds: u32) -> f64 {
    let full = compiled_attempt_seconds(f64::from(builds), costs_of(r));
    let long = r.run_s * 1e6 >= crate::replay::stopping::ONE_RUN_US;
    if builds > 1 || !long {
        return full;
    }
    let goes_on = (2.0 * chance_of(r, false)).min(1.0);
    full - (1.0 - goes_on) * f64::from(INNER_TRIALS - 1) * r.trial_s
}

/// [`choose_next`] again where the chances moved, but not for an attempt a slice cut short,
/// which the next slice resumes, priced at no less than that slice.
pub fn choose_again(r: &mut RewriteArm) {
    let at_builds = r
        .pending
        .get(r.next)
        .is_some_and(|&b| r.attempt_s <= compiled_attempt_seconds(f64::from(b), costs_of(r)));
    if at_builds {
        choose_next(r);
    }
}

/// The kernel's speedup with its best rewrite: the compiler's best, times the rewrite's over
/// the original's best compiler-only build.
pub fn effective(k: &Arm) -> f64 {
    k.effective()
}

/// The whole-program gain the next attempt on `k` is expected to bring (a fraction of the
/// programs' time): its weight, what a rewrite found saves at its current speedup, and the
/// chance of one. Nothing before its compiler search has plateaued ([`plateaued`]), where the
/// warm start measured no trial (its recordings do not reproduce: no judge could check a
/// rewrite either), or once its arm is done.
pub fn potential(k: &Arm) -> f64 {
    if plateaued(k) {
        worth(k)
    } else {
        0.0
    }
}

/// [`potential`], whether or not the compiler search has plateaued.
fn worth(k: &Arm) -> f64 {
    let Some(r) = k
        .rewrite
        .as_ref()
        .filter(|r| r.done.is_none() && k.trials > 0)
    else {
        return 0.0;
    };
    log_saving(k, effective(k), gain(r)) * chance(r)
}

/// What the log of the programs' geomean gains where `k`, at speedup `now`, runs `g` times
/// faster: each program's time shrinks by `k`'s share of it now, f, times 1 - 1/g, and its log
/// speedup grows by -ln(1 - f (1 - 1/g)), over the programs counted. The first-order saving
/// (f (1 - 1/g), what a compiler slice's small hope is priced at) undervalues a rewrite's big
/// find on a kernel that is most of its program: a template's 7x on two_mm_d (0.89 of it)
/// is worth 1.9 times its first order, and the 2.6x hoped of a plain rule on kt_concordance
/// (all of kendall_tau) 1.5 times; the geomean counts the log.
fn log_saving(k: &Arm, now: f64, g: f64) -> f64 {
    let first_order = k.worth_weight() * (1.0 / now - 1.0 / (now * g));
    let mut shares: Vec<f64> = k.programs.iter().map(|(_, s)| *s).collect();
    if shares.is_empty() {
        shares.push(k.share);
    }
    let total: f64 = shares.iter().sum();
    if !(k.weight > 0.0 && total > 0.0 && now > 0.0 && g > 1.0) {
        return first_order;
    }
    // `weight` is the shares' sum over the programs counted (`program::entrants`), and
    // `worth_weight` over it the mean of 1 / each program's time now (`Allocation::reweigh`).
    let programs = total / k.weight;
    let over_now = k.worth_weight() / k.weight;
    let log_gain = |share: f64| {
        let f = (share * over_now / now).min(1.0);
        -(1.0 - (f * (1.0 - 1.0 / g)).min(MOST_SAVED)).ln()
    };
    shares.into_iter().map(log_gain).sum::<f64>() / programs
}

/// The most of a program's time one find is counted to save: a bound on the log where a
/// kernel is all of its program and its hoped gain large.
const MOST_SAVED: f64 = 0.99;

/// Whether `k`'s compiler search has plateaued: done, or [`STALE_TRIALS`] trials past its last
/// 1% improvement. A rewrite is judged against the kernel's best compiler-only build and
/// ships only where it beats the best there is: one judged before the search had run found
/// trmm 1.36x over a 2.16x warm start, and the other arm's search of 6.4 s reached 3.31x
/// (H200, 2026-11-30).
pub fn plateaued(k: &Arm) -> bool {
    k.warm
        && (k.done.is_some() || f64::from(k.trials.saturating_sub(k.improved_at)) >= STALE_TRIALS)
}

/// An attempt on `k`: what it is worth per second, and the seconds it may take (twice its
/// price, never past `left`); None where it does not fit in `left`, or `k` is a kernel under
/// `min_share` of every program. Before its compiler search has plateaued, only where the
/// attempt is worth more a second than the kernel's next compiler slice (`compiler`, its
/// worth a second; None: none fits): a long kernel's trials are dear, so its search may
/// never run 16 stale trials inside a deadline. two_mm's 0.57 s kernel, 89% of its program,
/// had 11 trials at 262 s of 600 and no more, and its tiling templates were never offered
/// (H200, 2026-11-30).
pub fn offer(k: &Arm, left: f64, min_share: f64, compiler: Option<f64>) -> Option<(f64, f64)> {
    let r = k.rewrite.as_ref()?;
    let worth = worth(k);
    if worth <= 0.0 || k.share < min_share || r.attempt_s > left {
        return None;
    }
    let value = worth / r.attempt_s;
    if !plateaued(k) && (!k.warm || compiler.is_some_and(|c| c >= value)) {
        return None;
    }
    Some((value, (2.0 * r.attempt_s).min(left)))
}

/// Takes a rewrite slice's outcome into the allocation.
pub fn record(a: &mut Allocation, kernel: &TrialsKey, out: &RewriteOutcome) {
    let at_s = a.elapsed_s;
    let Some(k) = a.arms.iter_mut().find(|k| k.kernel == *kernel) else {
        return;
    };
    let Some(r) = k.rewrite.as_mut() else {
        return;
    };
    let before = r.attempts;
    r.attempts += out.attempts;
    r.found += out.found;
    r.knobs_attempts += out.knobs.0;
    r.knobs_found += out.knobs.1;
    // The attempt was judged against the original's best compiler-only build now; the rewrite
    // kept is the fastest, each at its own speed.
    if keep_if_faster(k.best, r, out.best) {
        r.kept = out.kept.map(|(attempt, trials, own)| Kept {
            attempt,
            trials,
            improved_at: trials,
            own,
            done: None,
        });
    }
    r.now = r.beside(k.best);
    r.spent_s += out.seconds;
    match &out.pending {
        Some(left) => {
            r.pending.clone_from(left);
            r.pending_rules = out.pending_rules.clone().unwrap_or_default();
        }
        None => {
            let from = r.next.min(r.pending.len());
            let judged = (out.attempts as usize).min(r.pending.len() - from);
            r.pending.drain(from..from + judged);
            if r.pending_rules.len() >= from + judged {
                r.pending_rules.drain(from..from + judged);
            }
        }
    }
    for t in &out.rules {
        tally_rule(r, t);
    }
    if r.pending.is_empty() && out.attempts > 0 && out.seconds > 0.0 {
        r.attempt_s = out.seconds / f64::from(out.attempts);
    }
    if out.cut && r.next < r.pending.len() {
        // The attempt cut short is judged on by the next slice.
        let builds = f64::from(r.pending[r.next]);
        r.attempt_s = compiled_attempt_seconds(builds, costs_of(r));
    } else {
        choose_next(r);
    }
    if out.cut {
        // The slice was too short for the attempt it ended in. Priced again at its build
        // count, the next slice would end it again at the same point: templates of 3-36
        // builds were cut two and three times in 10-26 s slices (H200, 2026-11-30). Priced at
        // no less than this slice, the next (twice the price) is at least twice as long.
        r.attempt_s = r.attempt_s.max(out.seconds);
    }
    if out.done.is_some() {
        r.done.clone_from(&out.done);
    } else if out.attempts == 0 && !out.cut {
        // Asked for an attempt and given none: asking again would give none again.
        r.done = Some("its attempt made no progress".into());
    }
    let after = r.attempts;
    k.spent_s += out.seconds;
    push_slice(a, kernel, (before, after), (out.seconds, at_s), true);
    pool_others(a);
    // The other arms' next attempts, chosen again at the chances the pool now gives; not one
    // a slice cut short, which the next slice resumes (priced at no less than that slice).
    for k in a.arms.iter_mut() {
        match k.rewrite.as_mut() {
            Some(r) if k.kernel != *kernel => choose_again(r),
            // Its own rules' tallies are in the pool now.
            Some(r) if !out.cut => choose_next(r),
            _ => {}
        }
    }
    a.reweigh();
}

/// Keeps a rewrite of `speedup` over the original's best compiler-only build now (`best` over
/// -O3) where it runs faster than the one `r` keeps, each at its own speed; whether it did.
fn keep_if_faster(best: f64, r: &mut RewriteArm, speedup: f64) -> bool {
    let kept = r.base.unwrap_or(best) * r.best.max(1.0);
    let faster = best * speedup > kept;
    if faster {
        r.best = speedup;
        r.base = Some(best);
    }
    faster
}

/// Takes a deepening's outcome into the allocation: the rewrite's trials, its new speed where
/// it found one, and its slice.
pub fn record_deepen(a: &mut Allocation, kernel: &TrialsKey, out: &DeepenOutcome) {
    let at_s = a.elapsed_s;
    let Some(k) = a.arms.iter_mut().find(|k| k.kernel == *kernel) else {
        return;
    };
    let best = k.best;
    let Some(r) = k.rewrite.as_mut() else {
        return;
    };
    let before_speed = r.beside(best);
    keep_if_faster(best, r, out.best);
    let improved = r.beside(best) >= before_speed * IMPROVED;
    r.now = r.beside(best);
    r.spent_s += out.seconds;
    let Some(kept) = r.kept.as_mut() else {
        return;
    };
    let before = kept.trials;
    kept.trials = kept.trials.max(out.trials);
    kept.own = kept.own.max(out.own);
    if improved {
        kept.improved_at = kept.trials;
    }
    if out.done.is_some() {
        kept.done.clone_from(&out.done);
    } else if kept.trials <= before && !out.cut {
        // Asked for trials and given none: asking again would give none again.
        kept.done = Some("its search made no progress".into());
    }
    let after = kept.trials;
    k.spent_s += out.seconds;
    push_slice(a, kernel, (before, after), (out.seconds, at_s), false);
    a.reweigh();
}

/// The rewrite arm's slice of `kernel` into `a`'s slices: its attempts (`rewrite`), or its
/// kept rewrite's trials (a deepening), before and after; its seconds and when it ended.
fn push_slice(
    a: &mut Allocation,
    kernel: &TrialsKey,
    (trials_before, trials_after): (u32, u32),
    (seconds, at_s): (f64, f64),
    rewrite: bool,
) {
    let best_after = a
        .arms
        .iter()
        .find(|k| k.kernel == *kernel)
        .map_or(1.0, effective);
    a.slices.push(Slice {
        kernel: kernel.clone(),
        trials_before,
        trials_after,
        seconds,
        best_after,
        at_s,
        warm: false,
        rewrite,
        deepen: !rewrite,
        decided: None,
    });
}

/// A deepening in words, for tune's progress, with the allocation's `predicted` program
/// speedup after it.
pub fn deepen_line(
    a: &Allocation,
    kernel: &TrialsKey,
    out: &DeepenOutcome,
    predicted: f64,
) -> String {
    let Some((k, r)) = a
        .arms
        .iter()
        .find(|k| k.kernel == *kernel)
        .and_then(|k| Some((k, k.rewrite.as_ref()?)))
    else {
        return format!("r3 tune --deadline: {kernel}: its rewrite searched further");
    };
    let mut line = format!(
        "r3 tune --deadline: {:.0}/{:.0} s: {}: its rewrite's compiler search to {} trials in {:.1} s, best rewrite {}; predicted program speedup {}",
        a.elapsed_s,
        a.deadline_s,
        k.label,
        r.kept.as_ref().map_or(out.trials, |d| d.trials),
        out.seconds,
        crate::store::speed::times(r.best),
        crate::store::speed::times(predicted)
    );
    if let Some(why) = &out.done {
        line += &format!(" (searched no further: {why})");
    }
    line
}

/// Takes attempt `t` into `r`'s tallies: every attempt into `tried`; one without knobs into
/// `rules` too (what prices its rule against the others on every kernel), unless its rule had
/// missed on the kernel: such repeats are priced apart ([`repeat_lift`]), and counting their
/// misses would price the rule's first attempts on other kernels down with them.
fn tally_rule(r: &mut RewriteArm, t: &Tried) {
    let repeat = missed_here(r, &t.rule);
    let tried = r.tried.entry(t.rule.clone()).or_default();
    tried.attempts += 1;
    tried.found += u32::from(t.found);
    if !t.knobs && !repeat {
        let plain = r.rules.entry(t.rule.clone()).or_default();
        plain.attempts += 1;
        plain.found += u32::from(t.found);
    }
}

/// A rewrite slice in words, for tune's progress, with the allocation's `predicted` program
/// speedup after it.
pub fn line(a: &Allocation, kernel: &TrialsKey, out: &RewriteOutcome, predicted: f64) -> String {
    let Some(k) = a.arms.iter().find(|k| k.kernel == *kernel) else {
        return format!("r3 tune --deadline: {kernel}: rewrite attempt");
    };
    let r = k.rewrite.as_ref();
    let mut line = format!(
        "r3 tune --deadline: {:.0}/{:.0} s: {}: rewrite attempt ({} in all, {} found) in {:.1} s, best rewrite {}, chance of the next {:.0}%; predicted program speedup {}",
        a.elapsed_s,
        a.deadline_s,
        k.label,
        r.map_or(0, |r| r.attempts),
        r.map_or(0, |r| r.found),
        out.seconds,
        crate::store::speed::times(r.map_or(1.0, |r| r.best)),
        100.0 * r.map_or(0.0, chance),
        crate::store::speed::times(predicted)
    );
    if let Some(u) = r.and_then(|r| r.reuse) {
        line += &format!("; it takes {u:.0}x the time streaming its data once would");
    }
    if let Some(why) = &out.done {
        line += &format!(" (its rewrites done: {why})");
    }
    line
}

/// What the allocation's table says of the rewrite arm: how it is priced, or that it is off.
pub fn table_line(a: &Allocation) -> Option<String> {
    let priced: Vec<&RewriteArm> = a.arms.iter().filter_map(|k| k.rewrite.as_ref()).collect();
    let r = priced.first()?;
    Some(format!(
        "source rewrites (r3 evolve's {}) are tried on {} kernel(s) once warm, where they are worth more a second than more trials: an attempt finds {}+ with chance {:.0}% ({:.0}% with knobs) and brings {} ({} with knobs; {}), at most the square root of what is left above streaming its data once{}; a rule that missed on a kernel is tried there again at {:.0}% of that chance, one that found is hoped to bring at most {} more, at a chance of at most {:.0}%; --no-rewrites turns them off",
        std::env::var("R3_LLM_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .map_or("rules proposer", |_| "model"),
        priced.len(),
        FOUND,
        100.0 * r.p,
        100.0 * r.knobs_p.unwrap_or(r.p),
        crate::store::speed::times(r.gain),
        crate::store::speed::times(r.knobs_gain.unwrap_or(r.gain)),
        r.from,
        prior_lift_words(),
        100.0 * REPEAT_AFTER_MISS,
        crate::store::speed::times(REPEAT_AFTER_FIND_GAIN),
        100.0 * REPEAT_AFTER_FIND_CHANCE,
    ) + &reuse_words(&priced))
}

/// The rules priced apart before any is judged ([`RULE_PRIOR_LIFT`]), in words.
fn prior_lift_words() -> String {
    let each: Vec<String> = RULE_PRIOR_LIFT
        .iter()
        .map(|(rule, lift)| {
            let name = rule.strip_prefix("rules: ").unwrap_or(rule);
            format!("{name} {:.0}%", 100.0 * lift)
        })
        .collect();
    format!(
        "; a rule's first attempts at its own share of that chance, by what it found on an H200 ({})",
        each.join(", ")
    )
}

/// How many of the priced kernels are far above streaming their data once and how many near
/// it, where the GPU's bandwidth is known: templates are priced apart on each side.
fn reuse_words(priced: &[&RewriteArm]) -> String {
    let known: Vec<bool> = priced.iter().filter_map(|r| side(r)).collect();
    if known.is_empty() {
        return String::new();
    }
    let far = known.iter().filter(|&&f| f).count();
    format!(
        "; {far} of them take {REUSE_BOUND:.0}x or more the time streaming their data once would (templates priced at {:.0}% where the store has too few), {} less ({:.0}%)",
        100.0 * PRIOR_KNOBS_P_REUSE,
        known.len() - far,
        100.0 * PRIOR_KNOBS_P_STREAM
    )
}

/// The kernels whose best rewrite the summary names: each found rewrite, and how it reaches the
/// program (it is not in the source).
pub fn summary_lines(a: &Allocation) -> Vec<String> {
    a.arms
        .iter()
        .filter_map(|k| Some((k, k.rewrite.as_ref().filter(|r| r.best >= FOUND)?)))
        .map(|(k, r)| {
            let searched = r.kept.as_ref().map_or(String::new(), |d| {
                format!(", its compiler search {} trials", d.trials)
            });
            format!(
                "  rewrite found: {} runs {} its best compiler-only build ({} attempt(s) here{searched}); it ships with R3_APPLY_REWRITES=1, or adopt its diff (`r3 report`)",
                k.label,
                crate::store::speed::times(r.best),
                r.attempts
            )
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `price` at a trial of 0.5 s and a setup of 2 s, with nothing pending.
    fn price_with(
        store: &Store,
        kernel: &KernelHash,
        history: &[Past],
        reuse: Option<f64>,
    ) -> RewriteArm {
        price(
            store,
            kernel,
            (0.5, 2.0, 0.0),
            history,
            Default::default(),
            reuse,
        )
    }

    pub(crate) fn priced() -> RewriteArm {
        RewriteArm {
            p: PRIOR_P,
            gain: PRIOR_GAIN,
            attempt_s: 10.0,
            from: "r3's prior".into(),
            attempts: 0,
            found: 0,
            best: 1.0,
            base: None,
            spent_s: 0.0,
            done: None,
            pending: Vec::new(),
            setup_s: 0.0,
            trial_s: 0.0,
            run_s: 0.0,
            knobs_p: None,
            knobs_attempts: 0,
            knobs_found: 0,
            reuse: None,
            next: 0,
            others: Tally::default(),
            knobs_prior: false,
            knobs_gain: None,
            now: 1.0,
            pending_rules: Vec::new(),
            rules: BTreeMap::new(),
            rules_everywhere: BTreeMap::new(),
            tried: BTreeMap::new(),
            kept: None,
        }
    }

    /// A kernel at half its program, its search plateaued at 1.1x (no 1% gain in its last 16
    /// trials), its rewrites priced.
    fn warm_arm() -> Arm {
        Arm {
            kernel: "k".into(),
            label: "k".into(),
            weight: 0.5,
            share: 0.5,
            programs: Vec::new(),
            geo_weight: None,
            prior: 1.25,
            best: 1.1,
            trials: 28,
            improved_at: 12,
            spent_s: 12.0,
            per_trial_s: 1.0,
            setup_s: 0.0,
            expected: 1.0,
            shape: None,
            reuse: None,
            confirm_setup_s: 0.0,
            launch_ms: 0.0,
            beside: None,
            warm: true,
            done: None,
            searcher: None,
            confirmed: false,
            growth: None,
            rewrite: Some(priced()),
        }
    }

    /// A rewrite judged here runs at its own speed, built as it was judged: a search of the
    /// original moves the kernel only past it, and is worth nothing while hoped to stay under
    /// it (two_mm's 7.3x over its 2.68x compiler best, run Y10, H200).
    #[test]
    fn a_rewrite_found_here_keeps_its_speed_and_leaves_the_originals_search_nothing() {
        let mut a = Allocation {
            arms: vec![Arm {
                best: 2.68,
                ..warm_arm()
            }],
            ..crate::deadline::start("p", "g", 600.0, Vec::new())
        };
        assert!(crate::deadline::potential(&a.arms[0]) > 0.0, "no find yet");
        let found = |best: f64| RewriteOutcome {
            attempts: 1,
            found: 1,
            best,
            seconds: 20.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &found(7.3));
        let rewrite = 2.68 * 7.3;
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(a.arms[0].effective(), rewrite));
        assert_eq!(crate::deadline::potential(&a.arms[0]), 0.0);
        // The original's search finds 3x later: the rewrite still runs, at its own speed.
        a.arms[0].best = 3.0;
        assert!(close(a.arms[0].effective(), rewrite));
        // A find judged against that better build counts only where it runs faster still.
        record(&mut a, &"k".into(), &found(6.0));
        assert!(close(a.arms[0].effective(), rewrite), "18 under 19.6");
        record(&mut a, &"k".into(), &found(7.0));
        assert!(close(a.arms[0].effective(), 21.0));
        assert_eq!(a.arms[0].rewrite.as_ref().unwrap().base, Some(3.0));
        // A compiler best past every rewrite is what runs.
        a.arms[0].best = 25.0;
        assert_eq!(a.arms[0].effective(), 25.0);
    }

    /// The rewrite kept is the attempt a find names, searched as far as its judge searched it;
    /// a deepening moves its trials, its speed where it finds faster, and ends it where it
    /// makes no progress. A slower find keeps the attempt kept before.
    #[test]
    fn the_kept_rewrite_is_the_fastest_find_and_a_deepening_moves_it() {
        let mut a = Allocation {
            arms: vec![Arm {
                best: 2.0,
                ..warm_arm()
            }],
            ..crate::deadline::start("p", "g", 600.0, Vec::new())
        };
        let found = |best: f64, attempt: u32| RewriteOutcome {
            attempts: 1,
            found: 1,
            best,
            seconds: 2.0,
            kept: Some((attempt, 8, 1.0)),
            ..RewriteOutcome::none("")
        };
        let kept = |a: &Allocation| a.arms[0].rewrite.as_ref().unwrap().kept.clone().unwrap();
        record(&mut a, &"k".into(), &found(1.2, 3));
        assert_eq!((kept(&a).attempt, kept(&a).trials), (3, 8));
        record(&mut a, &"k".into(), &found(1.1, 3));
        record(&mut a, &"k".into(), &found(1.15, 4));
        assert_eq!(kept(&a).attempt, 3, "a slower find keeps the faster");
        let deepened = |trials: u32, best: f64| DeepenOutcome {
            trials,
            own: 1.0,
            best,
            seconds: 5.0,
            cut: false,
            done: None,
            said: Vec::new(),
        };
        record_deepen(&mut a, &"k".into(), &deepened(32, 1.5));
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(a.arms[0].effective(), 3.0));
        assert_eq!((kept(&a).trials, kept(&a).improved_at), (32, 32));
        let last = a.slices.last().unwrap();
        assert!(last.deepen && !last.rewrite && !last.warm);
        assert_eq!((last.trials_before, last.trials_after), (8, 32));
        // Nothing faster: its trials move, its last improvement stays.
        record_deepen(&mut a, &"k".into(), &deepened(56, 1.5));
        assert_eq!((kept(&a).trials, kept(&a).improved_at), (56, 32));
        assert!(kept(&a).done.is_none());
        // Asked for trials and given none: no more.
        record_deepen(&mut a, &"k".into(), &deepened(56, 1.5));
        assert!(kept(&a).done.is_some());
        assert!(close(a.arms[0].effective(), 3.0));
    }

    #[test]
    fn a_kernel_gets_rewrite_attempts_once_its_compiler_search_has_plateaued() {
        let mut k = warm_arm();
        assert!(potential(&k) > 0.0);
        // Still improving: its search first (a rewrite is judged against its best so far).
        k.improved_at = k.trials - 4;
        assert_eq!(potential(&k), 0.0);
        assert!(offer(&k, 600.0, 0.0, Some(1.0)).is_none());
        // Unless the attempt is worth more a second than the kernel's next compiler slice (a
        // long kernel's dear trials), or no compiler slice fits.
        let value = offer(&k, 600.0, 0.0, None).unwrap().0;
        assert!(value > 0.0);
        assert!(offer(&k, 600.0, 0.0, Some(value / 2.0)).is_some());
        assert!(offer(&k, 600.0, 0.0, Some(value)).is_none());
        // Its search is done (its trial budget reached): plateaued whatever its last trials.
        k.done = Some("100 trials".into());
        assert!(potential(&k) > 0.0);
        // Before its warm start, never.
        k.warm = false;
        assert_eq!(potential(&k), 0.0);
    }

    #[test]
    fn each_attempt_that_finds_nothing_lowers_the_chance_of_the_next() {
        let mut r = priced();
        let first = chance(&r);
        assert_eq!(first, PRIOR_P);
        r.attempts = 4;
        assert!((chance(&r) - PRIOR_P / 2.0).abs() < 1e-12);
        r.found = 1;
        assert!(chance(&r) > first);
        let mut k = warm_arm();
        let fresh = potential(&k);
        assert!(fresh > 0.0);
        k.rewrite.as_mut().unwrap().attempts = 8;
        assert!(potential(&k) < fresh / 2.0);
        // Nothing before the warm start, or after one that measured nothing, or once done,
        // or where it does not fit, or for a kernel under the share that matters.
        k.warm = false;
        assert_eq!(potential(&k), 0.0);
        k.warm = true;
        k.trials = 0;
        assert_eq!(potential(&k), 0.0);
        k.trials = 28;
        assert!(
            offer(&k, 5.0, 0.01, None).is_none(),
            "an attempt of 10 s in 5 s"
        );
        assert!(
            offer(&k, 60.0, 0.6, None).is_none(),
            "a kernel at 50% where 60% matters"
        );
        let (_, limit_s) = offer(&k, 60.0, 0.01, None).unwrap();
        assert_eq!(limit_s, 20.0, "twice its price");
        assert_eq!(
            offer(&k, 15.0, 0.01, None).unwrap().1,
            15.0,
            "never past the time left"
        );
        k.rewrite.as_mut().unwrap().done = Some("no source".into());
        assert!(offer(&k, 60.0, 0.01, None).is_none());
    }

    fn past(kernel: &str, shape: Option<&str>, speedup: Option<f64>) -> Past {
        Past {
            kernel: kernel.into(),
            shape: shape.map(str::to_owned),
            speedup,
            builds: u32::from(speedup.is_some()),
            reuse: None,
        }
    }

    /// A template's knob search judges several builds, each compiled and given an evaluator
    /// and at least one trial: its attempts cost that, and the history says how many builds
    /// an attempt on kernels like it had.
    #[test]
    fn an_attempt_is_priced_by_the_builds_attempts_like_it_judged() {
        // Its confirmation: another evaluator and JUDGE_TRIALS of the kernel's trials.
        let judge = 2.0 + f64::from(JUDGE_TRIALS) * 0.5;
        // The search's evaluator, then each build's compile and judge's evaluator.
        assert_eq!(
            attempt_seconds(1.0, (0.5, 2.0, 0.0)),
            2.0 + COMPILE_S + LOWER_S + f64::from(INNER_TRIALS) * 0.5 + judge
        );
        // Twelve builds: twelve compiles and evaluators, and one trial each at least.
        assert_eq!(
            attempt_seconds(12.0, (0.5, 2.0, 0.0)),
            2.0 + 12.0 * (COMPILE_S + LOWER_S) + 12.0 * 0.5 + judge
        );
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let me: KernelHash = "00112233aabbccdd".into();
        let templated = |speedup, builds| Past {
            builds,
            ..past("aa", None, speedup)
        };
        // Refused attempts and failed compiles say nothing of builds.
        let history = [
            templated(Some(3.0), 8),
            templated(None, 4),
            templated(None, 0),
            templated(Some(1.0), 1),
        ];
        let r = price_with(&store, &me, &history, None);
        let pool: Vec<&Past> = history.iter().collect();
        assert_eq!(builds_expected(&pool), 13.0 / 3.0);
        assert_eq!(r.attempt_s, attempt_seconds(13.0 / 3.0, (0.5, 2.0, 0.0)));
        assert_eq!(builds_expected(&[]), 1.0);
    }

    /// The next attempt is priced at its own builds where it is compiled and waits for its
    /// judge: a template of 36 builds after two plain rewrites costs the 8 evaluators its knob
    /// search measures, not the mean of what was judged before; once it is judged, the next is
    /// priced at its own.
    #[test]
    fn a_compiled_attempt_waiting_for_its_judge_is_priced_at_its_own_builds() {
        use crate::store::attempts::{Build, Event, What};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let hash: KernelHash = "00112233aabbccdd".into();
        let mut log = store.open_attempts(&hash).unwrap();
        let compiled = |attempt, builds: usize| Event {
            format: 1,
            attempt,
            unix_ms: 0,
            what: What::Compiled {
                variant: "0000000000000001".into(),
                diff: String::new(),
                cell: String::new(),
                // The tiling template's grid: 4 depths, 3 groupings along x and along y.
                builds: (0..builds)
                    .map(|i| Build {
                        values: [
                            ("R3_TK", 8 << (i / 9)),
                            ("R3_RX", i / 3 % 3),
                            ("R3_RY", i % 3),
                        ]
                        .map(|(k, v)| (k.to_owned(), v as i64))
                        .into(),
                        variant: "0000000000000001".into(),
                        diff: String::new(),
                    })
                    .collect(),
            },
        };
        for e in [compiled(1, 0), compiled(2, 36), compiled(3, 0)] {
            log.append(&e).unwrap();
        }
        drop(log);
        // The deadline's judge searches the template's 36 one knob at a time: 8 builds.
        let pending = pending_attempts(&store, &hash, "H200");
        assert_eq!(pending.builds, [1, 8, 1]);
        let r = price(&store, &hash, (0.4, 1.0, 0.0), &[], pending, None);
        // The template is worth more a second (50% of 6/7 of the kernel's time in 9.6 s,
        // against a plain rewrite's 12% of 0.62 in 7.15 s): it is judged first, priced at its
        // own builds.
        let template = compiled_attempt_seconds(8.0, (0.4, 1.0, 0.0));
        let plain = compiled_attempt_seconds(1.0, (0.4, 1.0, 0.0));
        assert!((template - 9.6).abs() < 1e-9, "{template}");
        assert!((plain - 7.15).abs() < 1e-9, "{plain}");
        assert_eq!((r.next, r.attempt_s), (1, template));
        // Where templates find less (the history says so), a plain rewrite goes first.
        let mut fewer = r.clone();
        (fewer.knobs_p, fewer.knobs_prior) = (Some(0.1), false);
        choose_next(&mut fewer);
        assert_eq!((fewer.next, fewer.attempt_s), (0, plain));
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        a.arms.push(Arm {
            rewrite: Some(r),
            ..warm_arm()
        });
        let judged_template = RewriteOutcome {
            attempts: 1,
            knobs: (1, 0),
            done: None,
            seconds: 30.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &judged_template);
        let r = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!(r.pending, [1, 1]);
        assert_eq!(
            (r.next, r.attempt_s),
            (0, plain),
            "then the next, at its own"
        );
    }

    /// On a long kernel each build races the best build before it: a template's 36 builds of a
    /// 0.57 s kernel cost each its evaluator, and a trial in full only for the few that may be
    /// the best (a harmonic sum and a near-tie); the others settle on the checked run their
    /// evaluator makes. A short kernel's are priced as before, and so is a single build.
    #[test]
    fn a_long_kernels_builds_are_priced_as_the_race_settles_them() {
        assert_eq!(timed_builds(1.0), 1.0);
        assert_eq!(timed_builds(2.0), 2.0);
        let h36: f64 = (1..=36).map(|k| 1.0 / f64::from(k)).sum();
        assert!((timed_builds(36.0) - (h36 + 1.0)).abs() < 1e-12);
        let judge = 1.5 + f64::from(JUDGE_TRIALS) * 2.4;
        let evaluators = |run_s| 1.5 + 36.0 * (COMPILE_S + build_setup_s(run_s));
        let long = attempt_seconds(36.0, (2.4, 1.5, 0.57));
        let timed = timed_builds(36.0);
        let expected = evaluators(0.57) + timed * 2.4 + judge;
        assert!((long - expected).abs() < 1e-9, "{long} vs {expected}");
        let short = attempt_seconds(36.0, (2.4, 1.5, 0.005));
        assert!((short - (evaluators(0.005) + 36.0 * 2.4 + judge)).abs() < 1e-9);
        assert!(long < short - 10.0, "{long} vs {short}");
        // A single build: its own runs before its trials are all a long kernel adds.
        let one = attempt_seconds(1.0, (2.4, 1.5, 0.57)) - attempt_seconds(1.0, (2.4, 1.5, 0.0));
        assert!((one - JUDGE_BUILD_RUNS * 0.57).abs() < 1e-9, "{one}");
    }

    fn tally(attempts: u32, found: u32) -> RuleTally {
        RuleTally { attempts, found }
    }

    fn plain(rule: &str, found: bool) -> Tried {
        Tried {
            rule: rule.into(),
            knobs: false,
            found,
        }
    }

    /// A rule that has found more often than the rest, on any kernel of the allocation, is
    /// tried first on the next kernel; one that has found less, later. With nothing judged,
    /// each rule is priced at its own prior lift, and rules alike there go in the order the
    /// proposer made them.
    #[test]
    fn the_rule_that_found_more_often_is_tried_first() {
        let mut r = priced();
        (r.trial_s, r.setup_s, r.pending) = (0.5, 2.0, vec![1, 1]);
        r.pending_rules = vec!["rules: restrict".into(), "rules: vector-loads".into()];
        choose_next(&mut r);
        assert_eq!(
            r.next, 1,
            "restrict found less often than the rules' prior on an H200"
        );
        r.pending_rules = vec![
            "rules: unroll-constant".into(),
            "rules: vector-loads".into(),
        ];
        choose_next(&mut r);
        assert_eq!(r.next, 0, "alike: the proposer's order");
        r.pending_rules = vec![
            "rules: restrict".into(),
            "rules: register-accumulator".into(),
        ];
        assert_eq!(
            rule_lift(&r, "rules: restrict"),
            prior_lift("rules: restrict")
        );
        r.rules_everywhere = [
            ("rules: restrict".to_owned(), tally(12, 1)),
            ("rules: register-accumulator".to_owned(), tally(14, 7)),
        ]
        .into();
        let w = PRIOR_WEIGHT;
        let all = (8.0 + w * PRIOR_P) / (26.0 + w);
        let lift = |rule: &str, n: f64, f: f64| (f + w * all * prior_lift(rule)) / (n + w) / all;
        let acc = lift("rules: register-accumulator", 14.0, 7.0);
        assert!((rule_lift(&r, "rules: register-accumulator") - acc).abs() < 1e-12);
        assert!(rule_lift(&r, "rules: restrict") < 0.5);
        assert!(rule_lift(&r, "rules: register-accumulator") > 1.5);
        assert_eq!(
            rule_lift(&r, "rules: unroll-4"),
            prior_lift("rules: unroll-4"),
            "a rule not judged yet: its prior lift"
        );
        choose_next(&mut r);
        assert_eq!(r.next, 1);
        let kind = chance_of(&r, false);
        assert!((chance(&r) - kind * acc).abs() < 1e-12);
        // A template is priced by its kind alone.
        r.pending = vec![1, 36];
        r.knobs_p = Some(0.5);
        assert_eq!(chance_at(&r, 1), chance_of(&r, true));
    }

    /// Before anything is judged, the register accumulator's first attempt on a kernel goes
    /// before `restrict`'s and `unroll-4`'s, as on an H200 it found about twice as often; the
    /// table line says so. A model's proposals and rules not measured keep the plain prior.
    #[test]
    fn each_rule_starts_at_its_own_measured_chance() {
        let mut r = priced();
        (r.trial_s, r.setup_s, r.pending) = (0.5, 2.0, vec![1, 1, 1]);
        r.pending_rules = vec![
            "rules: restrict".into(),
            "rules: unroll-4".into(),
            "rules: register-accumulator".into(),
        ];
        choose_next(&mut r);
        assert_eq!(r.next, 2);
        let plain = chance_of(&r, false);
        assert!((chance(&r) - plain * 1.55).abs() < 1e-12, "{}", chance(&r));
        assert!(chance_at(&r, 0) < plain && chance_at(&r, 1) < chance_at(&r, 0));
        assert_eq!(prior_lift("llm: gpt (repair of #2)"), 1.0);
        assert_eq!(prior_lift("rules: vector-loads"), 1.0);
        // Every listed rule is one the proposer has, by its label.
        for (rule, lift) in RULE_PRIOR_LIFT {
            assert!(rule.starts_with("rules: ") && *lift > 0.0, "{rule}");
        }
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        a.arms.push(Arm {
            rewrite: Some(r),
            ..warm_arm()
        });
        let line = table_line(&a).unwrap();
        assert!(
            line.contains("(register-accumulator 155%, restrict 90%, unroll-4 70%)"),
            "{line}"
        );
    }

    /// A rule that missed on a kernel is priced at a tenth for its next attempt there, template
    /// or not: the kernel's other rules go first. Its repeats are tallied on the kernel but not
    /// in the rule's rate. A rule that found keeps its chance, and its next attempt is hoped to
    /// refine the find, not to bring its kind's gain again.
    #[test]
    fn a_rule_that_missed_on_its_kernel_is_tried_there_again_last() {
        let tiling = "rules: shared-tiling";
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        let mut r = priced();
        (r.trial_s, r.setup_s, r.pending) = (0.5, 2.0, vec![12, 12, 1]);
        r.knobs_p = Some(PRIOR_KNOBS_P_REUSE);
        r.pending_rules = [tiling, tiling, "rules: restrict"]
            .map(String::from)
            .to_vec();
        choose_next(&mut r);
        assert_eq!(r.next, 0, "the template first");
        a.arms.push(Arm {
            rewrite: Some(r),
            ..warm_arm()
        });
        let missed = RewriteOutcome {
            attempts: 1,
            knobs: (1, 0),
            done: None,
            seconds: 9.0,
            rules: vec![Tried {
                rule: tiling.into(),
                knobs: true,
                found: false,
            }],
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &missed);
        let r = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!(r.tried[tiling], tally(1, 0));
        assert!(r.rules.is_empty(), "a template is not in the rules' rates");
        assert_eq!(r.pending_rules, [tiling, "rules: restrict"]);
        assert_eq!(repeat_lift(r, tiling), REPEAT_AFTER_MISS);
        assert!((chance_at(r, 0) - chance_of(r, true) * REPEAT_AFTER_MISS).abs() < 1e-12);
        assert_eq!(r.next, 1, "restrict goes before the template's repeat");
        // A plain rule's repeat after a miss: on the kernel's tally, not in the rule's rate.
        let mut r = priced();
        for _ in 0..2 {
            tally_rule(&mut r, &plain("rules: restrict", false));
        }
        assert_eq!(r.tried["rules: restrict"], tally(2, 0));
        assert_eq!(r.rules["rules: restrict"], tally(1, 0));
        // A rule that found keeps its chance, its next attempt tallied in its rate ...
        let mut r = priced();
        r.pending_rules = vec!["rules: restrict".into()];
        r.pending = vec![1];
        tally_rule(&mut r, &plain("rules: restrict", true));
        assert_eq!(repeat_lift(&r, "rules: restrict"), 1.0);
        // ... at the chance of its kind held to what repeats after a find have found, hoped to
        // refine its find, not to bring its kind's gain.
        assert_eq!(gain_of(&r, false), PRIOR_GAIN);
        assert_eq!(gain(&r), REPEAT_AFTER_FIND_GAIN);
        (r.attempts, r.found) = (2, 1);
        assert!(
            chance_of(&r, false) > REPEAT_AFTER_FIND_CHANCE,
            "one find in two raises its kind's: {}",
            chance_of(&r, false)
        );
        assert_eq!(chance(&r), REPEAT_AFTER_FIND_CHANCE);
        r.pending_rules = vec!["rules: unroll-4".into()];
        assert_eq!(gain(&r), PRIOR_GAIN, "a rule not tried");
        r.pending_rules = vec!["rules: restrict".into()];
        tally_rule(&mut r, &plain("rules: restrict", false));
        assert_eq!(r.rules["rules: restrict"], tally(2, 1));
        assert_eq!(repeat_lift(&r, "rules: unroll-4"), 1.0, "a rule not tried");
    }

    /// The allocation table's rewrite line says how repeats of a rule on a kernel are priced.
    #[test]
    fn the_table_says_how_a_rules_repeats_are_priced() {
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        assert_eq!(table_line(&a), None, "no arm priced");
        a.arms.push(Arm {
            rewrite: Some(priced()),
            ..warm_arm()
        });
        let line = table_line(&a).unwrap();
        let times = crate::store::speed::times(REPEAT_AFTER_FIND_GAIN);
        assert!(
            line.contains(
                "a rule that missed on a kernel is tried there again at 10% of that chance"
            ) && line.contains(&format!(
                "hoped to bring at most {times} more, at a chance of at most 20%"
            )),
            "{line}"
        );
    }

    /// The kernel's attempt log gives what was judged on this GPU by rule, a find beating every
    /// attempt judged before it by FOUND; refusals count as misses, other GPUs' verdicts not
    /// at all.
    #[test]
    fn the_log_says_which_rules_missed_on_the_kernel() {
        use crate::store::fixtures::{judged_rule, valid_verdict};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let kernel = "00112233aabbccdd";
        for (attempt, label, gpu, speedup) in [
            (1, "rules: shared-tiling", "H200", Some(1.5)),
            (2, "rules: shared-tiling", "H200", Some(1.52)),
            (3, "rules: restrict", "H200", Some(0.9)),
            (4, "rules: unroll-4", "H200", None),
            (5, "rules: register-accumulator", "H100", Some(2.0)),
        ] {
            judged_rule(
                &store,
                kernel,
                (attempt, label),
                gpu,
                speedup.map(valid_verdict),
            );
        }
        let tried = pending_attempts(&store, &kernel.into(), "H200").tried;
        assert_eq!(
            tried,
            [
                ("rules: shared-tiling".to_owned(), tally(2, 1)),
                ("rules: restrict".to_owned(), tally(1, 0)),
                ("rules: unroll-4".to_owned(), tally(1, 0)),
            ]
            .into()
        );
    }

    /// Each attempt's rule and whether it found go into its kernel's tally and, summed over
    /// every kernel, into each arm's pool; the rules of the attempts left follow the builds.
    #[test]
    fn an_attempts_rule_is_tallied_for_every_kernel() {
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        let k_rules = [
            "rules: register-accumulator",
            "rules: unroll-4",
            "rules: restrict",
        ];
        let j_rules = [
            "rules: restrict",
            "rules: unroll-4",
            "rules: register-accumulator",
        ];
        for (name, rules) in [("k", k_rules), ("j", j_rules)] {
            let mut r = priced();
            (r.trial_s, r.setup_s, r.pending) = (0.5, 2.0, vec![1, 1, 1]);
            r.pending_rules = rules.map(String::from).to_vec();
            a.arms.push(Arm {
                kernel: name.into(),
                rewrite: Some(r),
                ..warm_arm()
            });
        }
        let judged = RewriteOutcome {
            attempts: 1,
            found: 1,
            done: None,
            seconds: 3.0,
            rules: vec![plain("rules: register-accumulator", true)],
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &judged);
        let (k, j) = (
            a.arms[0].rewrite.as_ref().unwrap(),
            a.arms[1].rewrite.as_ref().unwrap(),
        );
        assert_eq!(k.rules["rules: register-accumulator"], tally(1, 1));
        assert!(j.rules.is_empty());
        assert_eq!(
            j.rules_everywhere["rules: register-accumulator"],
            tally(1, 1)
        );
        assert_eq!(k.pending_rules, ["rules: unroll-4", "rules: restrict"]);
        assert_eq!(
            j.next, 2,
            "the register accumulator found: the other kernel's goes first"
        );
        let again = RewriteOutcome {
            rules: vec![plain("rules: unroll-4", false)],
            found: 0,
            pending: Some(vec![1]),
            pending_rules: Some(vec!["rules: register-accumulator".into()]),
            ..judged
        };
        record(&mut a, &"k".into(), &again);
        let k = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!((k.pending.len(), k.pending_rules.len()), (1, 1));
        assert_eq!(k.rules_everywhere.len(), 2);
    }

    /// A plain attempt on a long kernel races the kernel's best build: its trials past the
    /// first are paid only where its -O3 is not clearly slower, priced at twice the chance of a
    /// find. kt_concordance's (1.06 s a run, 3.5 s a trial) came to 67 s at full price.
    #[test]
    fn a_plain_attempt_on_a_long_kernel_is_priced_at_its_race_with_the_best_build() {
        let mut r = priced();
        (r.trial_s, r.setup_s, r.run_s) = (3.49, 11.7, 1.06);
        let costs = costs_of(&r);
        let full = compiled_attempt_seconds(1.0, costs);
        let p = chance_of(&r, false);
        let raced = full - (1.0 - 2.0 * p) * f64::from(INNER_TRIALS - 1) * 3.49;
        assert!(
            (attempt_price(&r, 1) - raced).abs() < 1e-9,
            "{}",
            attempt_price(&r, 1)
        );
        assert!(
            attempt_price(&r, 1) < full - 15.0,
            "{} vs {full}",
            attempt_price(&r, 1)
        );
        // A template's builds race each other already; a short kernel's plain attempt does not.
        assert_eq!(attempt_price(&r, 36), compiled_attempt_seconds(36.0, costs));
        r.run_s = 0.005;
        let short = compiled_attempt_seconds(1.0, costs_of(&r));
        assert_eq!(attempt_price(&r, 1), short);
        // Where most attempts find, most go on: priced in full.
        (r.run_s, r.p, r.attempts, r.found) = (1.06, 0.6, 4, 3);
        assert_eq!(
            attempt_price(&r, 1),
            compiled_attempt_seconds(1.0, costs_of(&r))
        );
        // The arm takes that price for its next plain attempt.
        (r.p, r.attempts, r.found, r.pending) = (PRIOR_P, 0, 0, vec![1]);
        choose_next(&mut r);
        assert_eq!(r.attempt_s, raced);
    }

    #[test]
    fn an_attempt_its_slice_cut_short_is_priced_at_that_slice_or_more_and_stays_open() {
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        let mut r = priced();
        r.pending = vec![36];
        r.attempt_s = 5.0;
        a.arms.push(Arm {
            rewrite: Some(r),
            ..warm_arm()
        });
        let cut = RewriteOutcome {
            done: None,
            seconds: 10.0,
            cut: true,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &cut);
        let r = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!(r.done, None);
        assert_eq!(r.pending, [36]);
        assert!(r.attempt_s >= 10.0, "{}", r.attempt_s);
        let (_, slice_s) = offer(&a.arms[0], 600.0, 0.0, None).unwrap();
        assert!(slice_s >= 20.0, "{slice_s}");
        // A slice that made nothing and was not cut would make nothing again.
        let nothing = RewriteOutcome {
            done: None,
            seconds: 1.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &nothing);
        let r = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!(r.done.as_deref(), Some("its attempt made no progress"));
    }

    #[test]
    fn attempts_with_knobs_are_priced_apart_from_those_without() {
        let mut r = priced();
        (r.attempts, r.found) = (2, 0);
        r.knobs_p = Some(PRIOR_KNOBS_P);
        // Two rules that found nothing leave the template's chance where it was.
        r.pending = vec![36, 1];
        assert_eq!(chance(&r), PRIOR_KNOBS_P);
        r.pending = vec![1];
        assert!((chance(&r) - PRIOR_P * 4.0 / 6.0).abs() < 1e-12);
        // A template that found counts for templates, and not for the rules.
        (r.attempts, r.found, r.knobs_attempts, r.knobs_found) = (3, 1, 1, 1);
        assert!((chance(&r) - PRIOR_P * 4.0 / 6.0).abs() < 1e-12);
        r.pending = vec![36];
        assert!((chance(&r) - (PRIOR_KNOBS_P * 4.0 + 1.0) / 5.0).abs() < 1e-12);
        // Files of earlier r3s price every attempt alike.
        r.knobs_p = None;
        assert!((chance(&r) - (PRIOR_P * 4.0 + 1.0) / 7.0).abs() < 1e-12);
        // The history's attempts with knobs, where it holds enough of them.
        let with = |s| Past {
            builds: 36,
            ..past("aa", None, s)
        };
        let pool = [
            with(Some(3.0)),
            with(Some(2.0)),
            with(Some(1.5)),
            with(None),
        ];
        let refs: Vec<&Past> = pool.iter().collect();
        assert_eq!(knobs_chance(&refs, None), (0.75, false));
        assert_eq!(knobs_chance(&refs[..3], None), (PRIOR_KNOBS_P, true));
        // Each kind's chance from its own attempts: four rules (one found), four templates.
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut history = vec![past("aa", None, Some(2.0))];
        history.extend((0..3).map(|_| past("aa", None, None)));
        history.extend(pool);
        let r = price(
            &store,
            &"00112233aabbccdd".into(),
            (0.5, 2.0, 0.0),
            &history,
            Default::default(),
            None,
        );
        assert_eq!((r.p, r.knobs_p), (0.25, Some(0.75)));
    }

    #[test]
    fn the_builds_left_as_the_rewriter_reads_them_again_price_the_next_attempt() {
        let mut a = crate::deadline::start("p", "GPU", 600.0, Vec::new());
        let mut r = priced();
        (r.trial_s, r.setup_s) = (0.4, 1.0);
        r.pending = vec![36, 36];
        a.arms.push(Arm {
            rewrite: Some(r),
            ..warm_arm()
        });
        // The template judged; its child, read again, is one build at the knobs it won with.
        let judged = RewriteOutcome {
            attempts: 1,
            done: None,
            seconds: 20.0,
            pending: Some(vec![1]),
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &judged);
        let r = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!(r.pending, [1]);
        assert_eq!(r.attempt_s, compiled_attempt_seconds(1.0, (0.4, 1.0, 0.0)));
    }

    /// What an attempt finds on one kernel prices the next on the others on its side of the
    /// reuse bound, at half an attempt of their own; a kernel on the other side is not moved.
    #[test]
    fn an_attempt_prices_the_next_on_kernels_on_its_side_of_the_bound_at_half_weight() {
        let arm = |name: &str, reuse: f64| Arm {
            kernel: name.into(),
            rewrite: Some(RewriteArm {
                reuse: Some(reuse),
                knobs_p: Some(PRIOR_KNOBS_P_REUSE),
                ..tests::priced()
            }),
            ..warm_arm()
        };
        let mut a = Allocation {
            arms: vec![arm("syrk", 500.0), arm("gemm", 600.0), arm("gemv", 2.0)],
            ..crate::deadline::start("p", "g", 600.0, Vec::new())
        };
        let nothing = RewriteOutcome {
            attempts: 1,
            done: None,
            seconds: 5.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"syrk".into(), &nothing);
        let chance_of_arm = |a: &Allocation, i: usize| chance(a.arms[i].rewrite.as_ref().unwrap());
        let p = PRIOR_P * PRIOR_WEIGHT;
        assert!((chance_of_arm(&a, 0) - p / (PRIOR_WEIGHT + 1.0)).abs() < 1e-12);
        assert!((chance_of_arm(&a, 1) - p / (PRIOR_WEIGHT + OTHERS_WEIGHT)).abs() < 1e-12);
        assert_eq!(chance_of_arm(&a, 2), PRIOR_P, "the other side");
        // A template that finds on one raises the chance of the next template on the other.
        let found = RewriteOutcome {
            attempts: 1,
            found: 1,
            knobs: (1, 1),
            best: 3.0,
            done: None,
            seconds: 20.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"syrk".into(), &found);
        let r = a.arms[1].rewrite.as_ref().unwrap();
        let knobs = chance_of(r, true);
        let want =
            (PRIOR_KNOBS_P_REUSE * PRIOR_WEIGHT + OTHERS_WEIGHT) / (PRIOR_WEIGHT + OTHERS_WEIGHT);
        assert!((knobs - want).abs() < 1e-12, "{knobs} against {want}");
        assert_eq!(
            r.others.of(false),
            (1, 0),
            "its plain attempts: one, no find"
        );
    }

    #[test]
    fn reuse_is_a_launchs_time_over_streaming_its_bytes_once_without_its_launch_cost() {
        // 48 MB at 4800 GB/s stream in 10 us: a 1.003 ms launch is 100 times that.
        let r = reuse(1.003, 48_000_000, Some(4800.0)).unwrap();
        assert!((r - 100.0).abs() < 1e-9, "{r}");
        // A launch no longer than its fixed cost is not above streaming at all.
        assert_eq!(reuse(0.002, 48_000_000, Some(4800.0)), Some(0.0));
        assert_eq!(reuse(1.0, 48_000_000, None), None, "no bandwidth");
        assert_eq!(reuse(1.0, 0, Some(4800.0)), None, "no bytes");
        assert_eq!(reuse(0.0, 1, Some(4800.0)), None, "no time");
    }

    /// A template's chance where the history says too little follows the kernel's side of the
    /// bound: matrix products found with every template judged, matrix-vector kernels with none.
    #[test]
    fn a_templates_prior_chance_follows_how_far_the_kernel_is_from_streaming_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let me: KernelHash = "00112233aabbccdd".into();
        let knobs = |reuse| price_with(&store, &me, &[], reuse).knobs_p.unwrap();
        assert_eq!(knobs(Some(900.0)), PRIOR_KNOBS_P_REUSE);
        assert_eq!(knobs(Some(3.0)), PRIOR_KNOBS_P_STREAM);
        assert_eq!(knobs(None), PRIOR_KNOBS_P);
    }

    /// Attempts on kernels on its side of the bound price a kernel before the whole store's:
    /// four on matrix-vector kernels that found nothing say little of a matrix product.
    #[test]
    fn the_history_of_kernels_as_far_from_streaming_prices_a_kernel_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let me: KernelHash = "00112233aabbccdd".into();
        let at = |kernel: &str, reuse: f64, speedup| Past {
            reuse: Some(reuse),
            ..past(kernel, None, speedup)
        };
        let mut history: Vec<Past> = (0..4).map(|_| at("gemv", 2.0, Some(1.0))).collect();
        history.extend((0..4).map(|i| at("gemm", 400.0, Some(if i < 3 { 3.0 } else { 1.0 }))));
        let product = price_with(&store, &me, &history, Some(900.0));
        assert_eq!((product.p, product.gain), (0.75, 3.0), "{}", product.from);
        assert!(
            product.from.contains("as far from streaming"),
            "{}",
            product.from
        );
        let matvec = price_with(&store, &me, &history, Some(1.5));
        assert_eq!(matvec.p, 0.02, "{}", matvec.from);
        let unknown = price_with(&store, &me, &history, None);
        assert_eq!(unknown.p, 3.0 / 8.0, "{}", unknown.from);
    }

    /// A find is counted by what it adds to the log of the programs' geomean: a kernel that is
    /// all of its program, made 7x faster, adds ln 7 over the programs counted, where the first
    /// order counted 6/7; half of a program, 7x, adds -ln(1 - 3/7). A small gain is counted as
    /// the first order counts it, nearly; a kernel in two programs adds each one's.
    #[test]
    fn a_find_is_worth_what_it_adds_to_the_log_of_the_programs_geomean() {
        let programs = 50.0;
        let arm = |shares: &[f64]| Arm {
            weight: shares.iter().sum::<f64>() / programs,
            share: shares.iter().copied().fold(0.0, f64::max),
            programs: shares.iter().map(|s| (format!("p{s}"), *s)).collect(),
            geo_weight: None,
            ..warm_arm()
        };
        let whole = arm(&[1.0]);
        assert!((log_saving(&whole, 1.0, 7.0) - 7f64.ln() / programs).abs() < 1e-12);
        let first_order = whole.weight * (1.0 - 1.0 / 7.0);
        assert!(log_saving(&whole, 1.0, 7.0) > 2.0 * first_order);
        let half = arm(&[0.5]);
        let expect = -(1.0 - 0.5 * 6.0 / 7.0f64).ln() / programs;
        assert!((log_saving(&half, 1.0, 7.0) - expect).abs() < 1e-12);
        let small = log_saving(&whole, 1.0, 1.02) / (whole.weight * (1.0 - 1.0 / 1.02));
        assert!((1.0..1.02).contains(&small), "{small}");
        let two = arm(&[1.0, 0.5]);
        let both = -(1.0 - 6.0 / 7.0f64).ln() + expect * programs;
        assert!((log_saving(&two, 1.0, 7.0) - both / programs).abs() < 1e-12);
        // At 2x already, the kernel is a third of a program now at 0.75 of its time (geo_weight
        // says so): 7x more saves 6/7 of that third.
        let mut at_two = arm(&[0.5]);
        at_two.geo_weight = Some(at_two.weight / 0.75);
        let f = 0.5 / 2.0 / 0.75;
        let expect = -(1.0 - f * 6.0 / 7.0f64).ln() / programs;
        assert!((log_saving(&at_two, 2.0, 7.0) - expect).abs() < 1e-12);
    }

    /// No rewrite makes a kernel faster than streaming its data once, and none measured came
    /// near: what one may bring is held to the square root of what is left of its reuse, and a
    /// kernel already at the bound is offered none.
    #[test]
    fn a_rewrite_is_hoped_to_bring_no_more_than_the_root_of_its_headroom() {
        let mut k = warm_arm();
        k.rewrite.as_mut().unwrap().now = 1.1;
        let free = worth(&k);
        k.rewrite.as_mut().unwrap().reuse = Some(1.1 * 1.5);
        let held = worth(&k);
        let expect = log_saving(&k, 1.1, 1.5f64.sqrt()) * PRIOR_P;
        assert!((held - expect).abs() < 1e-12, "{held} against {expect}");
        assert!(held < free);
        k.rewrite.as_mut().unwrap().reuse = Some(2000.0);
        assert_eq!(worth(&k), free, "far from the bound, the price's gain");
        k.rewrite.as_mut().unwrap().reuse = Some(1.05);
        assert_eq!(worth(&k), 0.0);
        assert!(offer(&k, 600.0, 0.01, None).is_none());
    }

    /// A template's find is priced at what templates bring, a rule's at what rules bring, each
    /// held to the kernel's headroom: far above streaming, syrk's 36 builds go before its two
    /// plain rewrites; twice as slow as streaming, a plain rewrite is hoped to bring only
    /// the square root of 2.
    #[test]
    fn templates_and_rules_are_priced_at_what_each_kind_brings() {
        let mut r = tests::priced();
        (r.trial_s, r.setup_s, r.run_s) = (0.43, 0.0, 0.0047);
        (r.pending, r.knobs_p) = (vec![1, 1, 36, 36], Some(PRIOR_KNOBS_P_REUSE));
        (r.knobs_gain, r.knobs_prior) = (Some(PRIOR_KNOBS_GAIN), true);
        (r.reuse, r.now) = (Some(667.0), 1.07);
        choose_next(&mut r);
        assert_eq!(r.next, 2, "syrk's template, at {} s", r.attempt_s);
        assert_eq!(gain(&r), PRIOR_KNOBS_GAIN);
        r.reuse = Some(2.0 * 1.07);
        choose_next(&mut r);
        assert_eq!(
            r.next, 0,
            "near the bound a template's tiles save nothing more"
        );
        assert!((gain(&r) - 2f64.sqrt()).abs() < 1e-12, "{}", gain(&r));
        // An earlier r3's file, with no gain of its own for templates, prices both alike.
        r.knobs_gain = None;
        assert_eq!(gain_of(&r, true), gain_of(&r, false));
    }

    /// The history prices what a template brings from its templates' finds alone.
    #[test]
    fn what_a_template_brings_comes_from_the_templates_judged_before() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let me: KernelHash = "00112233aabbccdd".into();
        let template = |speedup| Past {
            builds: 36,
            ..past("gemm", None, speedup)
        };
        let few: Vec<Past> = (0..3).map(|_| template(Some(9.0))).collect();
        let r = price_with(&store, &me, &few, None);
        assert_eq!(r.knobs_gain, Some(PRIOR_KNOBS_GAIN));
        let mut history: Vec<Past> = [Some(3.0), Some(5.0), Some(9.0), None]
            .into_iter()
            .map(template)
            .collect();
        history.extend((0..4).map(|_| past("rule", None, Some(1.2))));
        let r = price_with(&store, &me, &history, None);
        assert_eq!(r.knobs_gain, Some(5.0), "the median of 3x, 5x and 9x");
        assert_eq!(r.gain, 1.2, "the rules' finds price the rules");
    }

    /// The attempt judged next is the one worth most a second of those waiting, priced at its
    /// own builds; once judged it leaves the list and the next is chosen again.
    #[test]
    fn the_attempt_worth_most_a_second_is_judged_next_and_the_rest_wait_their_turn() {
        let mut r = tests::priced();
        (r.trial_s, r.setup_s, r.run_s) = (2.5, 3.4, 0.57);
        (r.pending, r.knobs_p) = (vec![1, 1, 36, 1], Some(PRIOR_KNOBS_P_REUSE));
        choose_next(&mut r);
        let costs = (2.5, 3.4, 0.57);
        assert_eq!(r.next, 2, "the template: 0.75 in {} s", r.attempt_s);
        assert_eq!(r.attempt_s, compiled_attempt_seconds(36.0, costs));
        assert_eq!(chance(&r), PRIOR_KNOBS_P_REUSE);
        let mut a = Allocation {
            arms: vec![Arm {
                kernel: "k".into(),
                rewrite: Some(r),
                ..warm_arm()
            }],
            ..crate::deadline::start("p", "g", 600.0, Vec::new())
        };
        let judged = RewriteOutcome {
            attempts: 1,
            knobs: (1, 0),
            done: None,
            seconds: 150.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a, &"k".into(), &judged);
        let r = a.arms[0].rewrite.as_ref().unwrap();
        assert_eq!(r.pending, [1, 1, 1], "the template judged");
        assert_eq!((r.next, r.knobs_attempts), (0, 1));
        assert_eq!(r.attempt_s, attempt_price(r, 1), "raced: a 0.57 s kernel");
        // Cut short, it stays next and is priced at no less than the slice.
        let mut a2 = a.clone();
        a2.arms[0].rewrite.as_mut().unwrap().next = 2;
        let cut = RewriteOutcome {
            attempts: 0,
            cut: true,
            done: None,
            seconds: 60.0,
            ..RewriteOutcome::none("")
        };
        record(&mut a2, &"k".into(), &cut);
        let r = a2.arms[0].rewrite.as_ref().unwrap();
        assert_eq!((r.next, r.pending.len()), (2, 3));
        assert_eq!(r.attempt_s, 60.0);
    }

    #[test]
    fn the_price_is_the_historys_where_it_has_enough_and_the_stated_prior_otherwise() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let me: KernelHash = "00112233aabbccdd".into();
        let few = [past("aa", None, Some(2.0))];
        let r = price_with(&store, &me, &few, None);
        assert_eq!((r.p, r.gain), (PRIOR_P, PRIOR_GAIN));
        assert!(r.from.contains("prior"), "{}", r.from);
        assert_eq!(r.attempt_s, attempt_seconds(1.0, (0.5, 2.0, 0.0)));
        let history = [
            past("aa", None, Some(2.0)),
            past("aa", None, None),
            past("bb", None, Some(1.5)),
            past("bb", None, Some(1.01)),
            past("00112233aabbccdd", None, Some(1.2)),
            past("cc", None, None),
            past("cc", None, None),
            past("cc", None, None),
        ];
        let r = price_with(&store, &me, &history, None);
        // Three of eight found 1.05x or more: 1.2, 1.5 and 2.0, whose median is 1.5.
        assert_eq!((r.p, r.gain), (3.0 / 8.0, 1.5));
        assert!(r.from.contains("3 of 8 attempts"), "{}", r.from);
        // Its own earlier best counts in its arm from the start.
        assert_eq!(r.best, 1.2);
    }

    #[test]
    fn the_history_is_every_attempt_that_came_to_an_outcome_on_this_gpu() {
        use crate::store::attempts::{Event, Verdict, What};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let hash: KernelHash = "00112233aabbccdd".into();
        let mut log = store.open_attempts(&hash).unwrap();
        let event = |attempt, what| Event {
            format: 1,
            attempt,
            unix_ms: 0,
            what,
        };
        let valid = |speedup| Verdict::Valid {
            speedup,
            time_us: 1.0,
            reference_us: speedup,
            pipeline: "-O3".into(),
            candidate: None,
            trials: 1,
            simulated: false,
            values: Default::default(),
            reference_speedup: None,
            checked: Vec::new(),
        };
        for e in [
            event(
                1,
                What::Refused {
                    reason: "reads out of bounds".into(),
                },
            ),
            event(
                2,
                What::Judged {
                    gpu: "H200".into(),
                    verdict: valid(1.5),
                },
            ),
            event(
                3,
                What::Judged {
                    gpu: "H100".into(),
                    verdict: valid(2.0),
                },
            ),
            event(
                4,
                What::CompileFailed {
                    diagnostics: "error".into(),
                },
            ),
            event(
                5,
                What::Judged {
                    gpu: "H200".into(),
                    verdict: Verdict::Failed {
                        why: "wrong output".into(),
                        message: String::new(),
                    },
                },
            ),
        ] {
            log.append(&e).unwrap();
        }
        drop(log);
        let h = history(&store, "H200");
        let speedups: Vec<Option<f64>> = h.iter().map(|p| p.speedup).collect();
        // Attempt 3 was judged on another GPU only.
        assert_eq!(speedups, [None, Some(1.5), None, None]);
        assert!(h.iter().all(|p| p.kernel == hash));
    }
}
