//! The deadline's rewrite arm (`remix::rewrites`): attempts on one kernel by this crate's loop,
//! one new attempt (and its repairs) a slice, each judged within the time the allocation gives
//! it. The loop is `r3 evolve`'s own, resumed on the kernel's attempt log, so a rewrite passes
//! the same guard, compile and judge whichever way it was asked for, and an attempt cut short
//! by the deadline is judged again by the next slice or `r3 evolve --resume`.

use crate::each::Judging;
use crate::judge::{GpuJudge, Judge};
use crate::kernel::KernelHash;
use crate::propose::Proposer;
use crate::remix::rewrites::{
    pending_attempts, DeepenOutcome, RewriteOutcome, Rewriter, Tried, FOUND, INNER_TRIALS,
};
use crate::remix::session::{self, Line};
use crate::run::{evolve, Options};
use crate::store::attempts::{builds_to_judge, fold, Attempt, Event, Verdict, What, FORMAT};
use crate::store::{KernelRecord, Store};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Repair rounds an attempt gets under a deadline (`r3 evolve`'s default is 2).
pub const REPAIRS: u32 = 1;

/// r3-evolve's rewriter for the deadline.
pub struct EvolveRewriter<'a> {
    store: &'a Store,
    proposer: Box<dyn Proposer + 'a>,
    judging: Judging,
    stop: &'a AtomicBool,
    compile_timeout: Duration,
}

impl<'a> EvolveRewriter<'a> {
    /// Attempts proposed by `proposer` and judged by `judging` (on the GPU: each variant's own
    /// inner search of [`INNER_TRIALS`], within the attempt's time); `stop` is the run's
    /// Ctrl-C.
    pub fn new(
        store: &'a Store,
        proposer: Box<dyn Proposer + 'a>,
        judging: Judging,
        stop: &'a AtomicBool,
        compile_timeout: Duration,
    ) -> Self {
        EvolveRewriter {
            store,
            proposer,
            judging,
            stop,
            compile_timeout,
        }
    }

    /// One slice's run of the loop (one new attempt where `propose`, else the rewrites compiled
    /// elsewhere judged, or the `only` one of them), `local` stopping it at its time limit;
    /// what it said into `said`.
    fn run(
        &mut self,
        k: &KernelRecord,
        (propose, only): (bool, Option<usize>),
        local: &AtomicBool,
        limit: Duration,
        said: &mut Vec<String>,
    ) -> Result<crate::run::Summary, String> {
        let before = fold(&self.store.attempts(&k.hash).map_err(|e| e.to_string())?).1;
        let opts = Options {
            budget: before.len() as u32 + u32::from(propose),
            repairs: REPAIRS,
            seed: 0,
            resume: true,
            compile_timeout: self.compile_timeout,
            propose,
            only,
        };
        let mut gpu_judge = match &self.judging {
            Judging::Gpu {
                driver,
                gpu,
                measure,
                ..
            } => {
                // The judge's inner search gets what the compile leaves of the attempt's time.
                let inner = limit
                    .saturating_sub(Duration::from_secs_f64(crate::remix::rewrites::COMPILE_S));
                let mut note = |l: Line| said.push(line_text(l));
                let (ev, space, tune) = session::judge_parts(
                    self.store,
                    k,
                    *driver,
                    gpu,
                    measure,
                    (INNER_TRIALS, Some(inner)),
                    &mut note,
                )?;
                let judge = GpuJudge::new(self.store, ev, space, tune, local)?
                    .searching_knobs_one_at_a_time()
                    .racing_plain_rewrites();
                if let Some(why) = judge.fallback() {
                    said.push(format!("r3 tune --deadline: {}: {why}", k.label()));
                }
                Some(judge)
            }
            _ => None,
        };
        let judge: Option<&mut dyn Judge> = match (&mut self.judging, &mut gpu_judge) {
            (Judging::Script(s), _) => Some(s),
            (_, Some(j)) => Some(j),
            _ => None,
        };
        let label = k.label();
        let progress = |l: &str| said.push(format!("r3 tune --deadline: {label}: {l}"));
        evolve(
            self.store,
            k,
            self.proposer.as_mut(),
            judge,
            &opts,
            local,
            progress,
        )
        .map_err(|e| e.to_string())
    }
}

fn line_text(l: Line) -> String {
    match l {
        Line::Out(s) | Line::Note(s) => s,
    }
}

impl EvolveRewriter<'_> {
    /// Why new rewrites of `k` cannot be proposed and compiled here, if they cannot: they are
    /// compiled by the clang that compiled the kernel, from its source (a GPU machine may have
    /// the recordings and neither).
    fn cannot_propose(&self, k: &KernelRecord) -> Option<String> {
        let clang = &k.compile.clang;
        if clang.is_absolute() && !clang.is_file() {
            return Some(format!(
                "the clang that compiled it ({}) is not on this machine",
                clang.display()
            ));
        }
        match crate::compile::Compiler::for_kernel(k, self.compile_timeout) {
            Ok(c) if c.source().is_file() => None,
            Ok(c) => Some(format!(
                "its source {} is not on this machine",
                c.source().display()
            )),
            Err(e) => Some(e.to_string()),
        }
    }

    /// The GPU (or "simulated") the judge keeps its verdicts under; None where nothing judges.
    fn judge_gpu(&self) -> Option<String> {
        match &self.judging {
            Judging::Gpu { gpu, .. } => Some(gpu.trials_name()),
            Judging::Script(_) => Some(crate::store::trials::simulated_gpu(None)),
            Judging::Not => None,
        }
    }
}

/// Rewrites of the kernel compiled (by `r3 evolve --no-measure` elsewhere) and not judged on
/// `gpu` yet.
fn unjudged(attempts: &[Attempt], gpu: &str) -> usize {
    attempts
        .iter()
        .filter(|a| a.compiled.is_some() && a.verdict(Some(gpu)).is_none())
        .count()
}

impl Rewriter for EvolveRewriter<'_> {
    /// None where new rewrites can be proposed here, or where rewrites compiled elsewhere wait
    /// to be judged (the arm then measures those alone).
    fn cannot(&mut self, kernel: &KernelHash) -> Option<String> {
        let k = match self.store.kernel(kernel) {
            Ok(k) => k,
            Err(e) => return Some(e.to_string()),
        };
        let why = self.cannot_propose(&k)?;
        let waiting = self
            .judge_gpu()
            .is_some_and(|gpu| unjudged(&attempts(self.store, kernel), &gpu) > 0);
        (!waiting).then_some(why)
    }

    fn attempt(
        &mut self,
        kernel: &KernelHash,
        limit_s: f64,
        first: Option<usize>,
    ) -> RewriteOutcome {
        let k = match self.store.kernel(kernel) {
            Ok(k) => k,
            Err(e) => return RewriteOutcome::none(e.to_string()),
        };
        let propose = self.cannot_propose(&k).is_none();
        let gpu = self.judge_gpu().unwrap_or_default();
        // What each attempt had before: a new attempt, or one judged here for the first time,
        // is what this slice made.
        let before: Vec<(u32, bool)> = attempts(self.store, kernel)
            .iter()
            .map(|a| (a.id, a.verdict(Some(&gpu)).is_some()))
            .collect();
        let limit = Duration::from_secs_f64(limit_s.max(0.0));
        let local = AtomicBool::new(false);
        let mut said = Vec::new();
        let stop = self.stop;
        let result = within(limit, stop, &local, || {
            self.run(&k, (propose, first), &local, limit, &mut said)
        });
        let summary = match result {
            Ok(summary) => summary,
            Err(why) => {
                let mut out = RewriteOutcome::none(why);
                out.said = said;
                return out;
            }
        };
        let after = attempts(self.store, kernel);
        let made: Vec<&Attempt> = after
            .iter()
            .filter(|a| !before.contains(&(a.id, true)))
            .filter(|a| !before.iter().any(|b| b.0 == a.id) || a.verdict(Some(&gpu)).is_some())
            .collect();
        // Over the kernel's best compiler-only build as it is now, whatever each was judged
        // against: the arm multiplies it into the kernel's speedup.
        let own_best = best_over_o3(self.store, kernel, &gpu);
        let speedup = |a: &Attempt| a.verdict(Some(&gpu)).and_then(|v| v.speedup_over(own_best));
        let best = after.iter().filter_map(speedup).fold(1.0, f64::max);
        let kept = after
            .iter()
            .filter_map(|a| Some((speedup(a)?, a)))
            .max_by(|x, y| x.0.total_cmp(&y.0))
            .and_then(|(_, a)| match a.verdict(Some(&gpu)) {
                // A scripted verdict had no search to take further.
                Some(Verdict::Valid {
                    trials,
                    simulated: false,
                    ..
                }) => Some((a.id, *trials, build_own_best(self.store, a, &gpu))),
                _ => None,
            });
        // A find beats the best rewrite judged before this slice by FOUND, not the original's
        // best compiler-only build alone: a template's children, judged at the knobs it won
        // with, ran at its 2.4x and counted as five more finds (H200, run Y4, 2026-11-30).
        let judged_before: Vec<Attempt> = after
            .iter()
            .filter(|a| before.contains(&(a.id, true)))
            .cloned()
            .collect();
        let bar = FOUND * judged_before.iter().filter_map(speedup).fold(1.0, f64::max);
        let cut = local.load(Ordering::SeqCst);
        let done = match summary.stop.as_str() {
            _ if !propose && unjudged(&after, &gpu) == 0 => Some(format!(
                "every rewrite compiled for it is judged ({}, so none is proposed here)",
                self.cannot_propose(&k).unwrap_or_default()
            )),
            _ if made.is_empty() && !cut => Some(summary.stop.clone()),
            "budget" | "interrupted" => None,
            why => Some(why.to_owned()),
        };
        let pending = pending_attempts(self.store, kernel, &gpu);
        RewriteOutcome {
            attempts: made.len() as u32,
            found: made
                .iter()
                .filter(|a| speedup(a).is_some_and(|s| s >= bar))
                .count() as u32,
            // As the arm prices them (`pending_attempts`): a template's child judged at its
            // parent's knobs is one build, a rule's edit.
            knobs: {
                let with: Vec<&&Attempt> = made
                    .iter()
                    .filter(|a| builds_to_judge(a, &after, &gpu).len() > 1)
                    .collect();
                let found = with.iter().filter(|a| speedup(a).is_some_and(|s| s >= bar));
                (with.len() as u32, found.count() as u32)
            },
            best,
            done,
            seconds: 0.0,
            cut: cut && !stop.load(Ordering::SeqCst),
            rules: made
                .iter()
                .map(|a| Tried {
                    rule: a.label.clone(),
                    knobs: builds_to_judge(a, &after, &gpu).len() > 1,
                    found: speedup(a).is_some_and(|s| s >= bar),
                })
                .collect(),
            pending: Some(pending.builds),
            pending_rules: Some(pending.rules),
            said,
            kept,
        }
    }

    fn deepen(
        &mut self,
        kernel: &KernelHash,
        attempt: u32,
        trials: u32,
        (search_s, limit_s): (f64, f64),
    ) -> DeepenOutcome {
        let mut said = Vec::new();
        let limit = Duration::from_secs_f64(limit_s.max(0.0));
        let local = AtomicBool::new(false);
        let stop = self.stop;
        let search = Duration::from_secs_f64(search_s.max(0.0));
        let result = within(limit, stop, &local, || {
            self.deepen_judged(kernel, attempt, (trials, search), &local, &mut said)
        });
        let cut = local.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst);
        let mut out = result.map_or_else(DeepenOutcome::none, |o| DeepenOutcome { cut, ..o });
        out.said = said;
        out
    }
}

impl EvolveRewriter<'_> {
    /// [`Rewriter::deepen`]'s work: the judge of `kernel` searches the build of `attempt` that
    /// won to `trials` compiler trials in all (its trials resumed) within `search` and confirms
    /// its best; where that holds and runs faster than the attempt's verdict said, it is the
    /// attempt's verdict from now on ([`deeper_verdict`]). What came of it: the trials its
    /// search has in all, its build's best over its own -O3, the attempt's speedup over the
    /// kernel's best compiler-only build now, and why it is searched no further where its
    /// deeper best failed its confirmation: that best stays the search's, and each deepening
    /// after would confirm it again.
    fn deepen_judged(
        &mut self,
        kernel: &KernelHash,
        attempt: u32,
        (trials, search): (u32, Duration),
        local: &AtomicBool,
        said: &mut Vec<String>,
    ) -> Result<DeepenOutcome, String> {
        let Judging::Gpu {
            driver,
            gpu,
            measure,
            ..
        } = &self.judging
        else {
            return Err("only a GPU judge searches a rewrite further".into());
        };
        let k = self.store.kernel(kernel).map_err(|e| e.to_string())?;
        let name = gpu.trials_name();
        let found = attempts(self.store, kernel)
            .into_iter()
            .find(|a| a.id == attempt)
            .ok_or_else(|| format!("attempt {attempt} is not in its log"))?;
        let old = found
            .verdict(Some(&name))
            .filter(|v| v.speedup().is_some())
            .cloned()
            .ok_or_else(|| format!("attempt {attempt} has no valid verdict on {name}"))?;
        let (variant, _) = found
            .shipped_build(Some(&name))
            .ok_or_else(|| format!("attempt {attempt} was not compiled"))?;
        let variant = self.store.kernel(&variant).map_err(|e| e.to_string())?;
        let mut note = |l: Line| said.push(line_text(l));
        let (ev, space, tune) = session::judge_parts(
            self.store,
            &k,
            *driver,
            gpu,
            measure,
            (trials, Some(search)),
            &mut note,
        )?;
        let mut judge = GpuJudge::new(self.store, ev, space, tune, local)?;
        let new = judge.judge(self.store, &variant, &found.rewrite);
        let own_best = best_over_o3(self.store, kernel, &name);
        let before = old.speedup_over(own_best).unwrap_or(1.0);
        let outcome = |best: f64, done: Option<String>| DeepenOutcome {
            trials: trials_of(self.store, &variant.hash, &name),
            own: best_over_o3(self.store, &variant.hash, &name),
            best,
            done,
            ..DeepenOutcome::none("")
        };
        if local.load(Ordering::SeqCst) {
            return Ok(outcome(before, None));
        }
        if let Verdict::Failed { why, message } = &new {
            said.push(format!(
                "r3 tune --deadline: {}: attempt {attempt}'s deeper best {why}: {message}; its verdict stands",
                k.label()
            ));
            return Ok(outcome(before, Some(format!("its deeper best {why}"))));
        }
        let kept = match deeper_verdict(&old, new, own_best) {
            Some(v) => {
                let at = v.speedup_over(own_best).unwrap_or(1.0);
                said.push(format!(
                    "r3 tune --deadline: {}: attempt {attempt} searched further: {} its verdict's {}",
                    k.label(),
                    crate::store::speed::times(at),
                    crate::store::speed::times(before)
                ));
                self.store
                    .open_attempts(kernel)
                    .and_then(|mut log| {
                        log.append(&Event {
                            format: FORMAT,
                            attempt,
                            unix_ms: crate::run::now_ms(),
                            what: What::Judged {
                                gpu: name.clone(),
                                verdict: v,
                            },
                        })
                    })
                    .map_err(|e| e.to_string())?;
                at
            }
            None => before,
        };
        Ok(outcome(kept, None))
    }
}

/// The verdict a further search of a rewrite leaves it with: `new` where it is valid and runs
/// faster over -O3 than `old` did (each over the reference it was judged against, `own_best`
/// the kernel's best compiler-only build now), with the build `old` won with; None where `old`
/// stands. A deeper search's best is confirmed on every recorded launch as the first was, and
/// one that fails there, or is slower, leaves the rewrite as it was judged.
pub fn deeper_verdict(old: &Verdict, new: Verdict, own_best: f64) -> Option<Verdict> {
    let faster = match (old.speedup_over(own_best), new.speedup_over(own_best)) {
        (Some(o), Some(n)) => n > o,
        _ => false,
    };
    match old {
        Verdict::Valid { values, .. } if faster => Some(crate::judge::won_with(new, values)),
        Verdict::Valid { .. } | Verdict::Failed { .. } => None,
    }
}

/// The kernel's best compiler-only speedup over -O3 on `gpu` (1 where none).
fn best_over_o3(store: &Store, kernel: &KernelHash, gpu: &str) -> f64 {
    store
        .best_trial(&crate::kernel::TrialsKey::of_kernel(kernel), gpu)
        .ok()
        .flatten()
        .and_then(|t| t.ratio())
        .map_or(1.0, |r| 1.0 / r)
}

/// The best over its own -O3 of the build of `a` that ships on `gpu`, as its search on the
/// kernel's recorded launch found (1 where it has none).
fn build_own_best(store: &Store, a: &Attempt, gpu: &str) -> f64 {
    a.shipped_build(Some(gpu))
        .map_or(1.0, |(variant, _)| best_over_o3(store, &variant, gpu))
}

/// The trials a kernel's (or a rewrite's) search has on `gpu`.
fn trials_of(store: &Store, kernel: &KernelHash, gpu: &str) -> u32 {
    store
        .trials(&crate::kernel::TrialsKey::of_kernel(kernel), gpu)
        .map_or(0, |t| t.len() as u32)
}

/// Runs `work` with `local` set once `limit` has passed or the run's Ctrl-C (`stop`) came:
/// the flag the loop and its judge stop at.
fn within<T>(
    limit: Duration,
    stop: &AtomicBool,
    local: &AtomicBool,
    work: impl FnOnce() -> T,
) -> T {
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let end = Instant::now() + limit;
            while !finished.load(Ordering::SeqCst) {
                if stop.load(Ordering::SeqCst) || Instant::now() >= end {
                    local.store(true, Ordering::SeqCst);
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = work();
        finished.store(true, Ordering::SeqCst);
        r
    })
}

/// The kernel's attempts, as its log holds them now.
fn attempts(store: &Store, kernel: &KernelHash) -> Vec<Attempt> {
    store
        .attempts(kernel)
        .map(|events| fold(&events).1)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(speedup: f64, reference_speedup: f64, values: &[(&str, i64)]) -> Verdict {
        Verdict::Valid {
            speedup,
            time_us: 100.0 / speedup,
            reference_us: 100.0,
            pipeline: "O3".into(),
            candidate: None,
            trials: 8,
            simulated: false,
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            reference_speedup: Some(reference_speedup),
            checked: Vec::new(),
        }
    }

    /// A deeper search's verdict replaces the rewrite's only where it holds and runs faster
    /// over -O3, each over the reference it was judged against; it keeps the build the first
    /// verdict won with.
    #[test]
    fn a_deeper_search_replaces_a_verdict_only_where_it_holds_and_runs_faster() {
        let old = valid(1.2, 2.0, &[("TILE", 32)]);
        let new = deeper_verdict(&old, valid(1.5, 2.0, &[]), 2.0).unwrap();
        assert_eq!(new.speedup(), Some(1.5));
        let Verdict::Valid { values, .. } = &new else {
            panic!("{new:?}")
        };
        assert_eq!(values.get("TILE"), Some(&32));
        assert!(deeper_verdict(&old, valid(1.1, 2.0, &[]), 2.0).is_none());
        // Judged against a faster reference (the kernel's search went on): 1.1 x 2.5 over -O3
        // beats 1.2 x 2.0.
        assert!(deeper_verdict(&old, valid(1.1, 2.5, &[]), 2.5).is_some());
        assert!(deeper_verdict(&old, valid(0.9, 2.5, &[]), 2.5).is_none());
        let failed = Verdict::Failed {
            why: "wrong output".into(),
            message: "recorded launch 2".into(),
        };
        assert!(deeper_verdict(&old, failed, 2.0).is_none());
    }
}
