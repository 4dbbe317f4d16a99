//! The deadline's rewrite arm (`remix::rewrites`): attempts on one kernel by this crate's loop,
//! one new attempt (and its repairs) a slice, each judged within the time the allocation gives
//! it. The loop is `r3 evolve`'s own, resumed on the kernel's attempt log, so a rewrite passes
//! the same guard, compile and judge whichever way it was asked for, and an attempt cut short
//! by the deadline is judged again by the next slice or `r3 evolve --resume`.

use crate::each::Judging;
use crate::judge::{GpuJudge, Judge};
use crate::kernel::KernelHash;
use crate::propose::Proposer;
use crate::remix::rewrites::{RewriteOutcome, Rewriter, FOUND, INNER_TRIALS};
use crate::remix::session::{self, Line};
use crate::run::{evolve, Options};
use crate::store::attempts::{best_of, fold, Attempt};
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

    /// One attempt's run of the loop, `local` stopping it at its time limit; what it said.
    fn run(
        &mut self,
        k: &KernelRecord,
        local: &AtomicBool,
        limit: Duration,
        said: &mut Vec<String>,
    ) -> Result<(crate::run::Summary, String), String> {
        let before = fold(&self.store.attempts(&k.hash).map_err(|e| e.to_string())?).1;
        let opts = Options {
            budget: before.len() as u32 + 1,
            repairs: REPAIRS,
            seed: 0,
            resume: true,
            compile_timeout: self.compile_timeout,
            propose: true,
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
                Some(GpuJudge::new(self.store, ev, space, tune, local)?)
            }
            _ => None,
        };
        let judge: Option<&mut dyn Judge> = match (&mut self.judging, &mut gpu_judge) {
            (Judging::Script(s), _) => Some(s),
            (_, Some(j)) => Some(j),
            _ => None,
        };
        let gpu = judge.as_ref().map_or_else(String::new, |j| j.gpu());
        let label = k.label();
        let progress = |l: &str| said.push(format!("r3 tune --deadline: {label}: {l}"));
        let summary = evolve(
            self.store,
            k,
            self.proposer.as_mut(),
            judge,
            &opts,
            local,
            progress,
        )
        .map_err(|e| e.to_string())?;
        Ok((summary, gpu))
    }
}

fn line_text(l: Line) -> String {
    match l {
        Line::Out(s) | Line::Note(s) => s,
    }
}

impl Rewriter for EvolveRewriter<'_> {
    fn cannot(&mut self, kernel: &KernelHash) -> Option<String> {
        let k = match self.store.kernel(kernel) {
            Ok(k) => k,
            Err(e) => return Some(e.to_string()),
        };
        match crate::compile::Compiler::for_kernel(&k, self.compile_timeout) {
            Ok(c) if c.source().is_file() => None,
            Ok(c) => Some(format!(
                "its source {} is not on this machine",
                c.source().display()
            )),
            Err(e) => Some(e.to_string()),
        }
    }

    fn attempt(&mut self, kernel: &KernelHash, limit_s: f64) -> RewriteOutcome {
        let k = match self.store.kernel(kernel) {
            Ok(k) => k,
            Err(e) => return RewriteOutcome::none(e.to_string()),
        };
        let before: Vec<u32> = attempts(self.store, kernel).iter().map(|a| a.id).collect();
        let limit = Duration::from_secs_f64(limit_s.max(0.0));
        let local = AtomicBool::new(false);
        let finished = AtomicBool::new(false);
        let mut said = Vec::new();
        let stop = self.stop;
        let result = std::thread::scope(|s| {
            // The attempt's time limit, and the run's Ctrl-C, stop the loop and its judge.
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
            let r = self.run(&k, &local, limit, &mut said);
            finished.store(true, Ordering::SeqCst);
            r
        });
        let (summary, gpu) = match result {
            Ok(x) => x,
            Err(why) => {
                let mut out = RewriteOutcome::none(why);
                out.said = said;
                return out;
            }
        };
        let after = attempts(self.store, kernel);
        let new: Vec<&Attempt> = after.iter().filter(|a| !before.contains(&a.id)).collect();
        let speedup = |a: &Attempt| a.verdict(Some(&gpu)).and_then(|v| v.speedup());
        let best = best_of(&after, Some(&gpu))
            .and_then(speedup)
            .unwrap_or(1.0)
            .max(1.0);
        let done = match summary.stop.as_str() {
            _ if new.is_empty() && !local.load(Ordering::SeqCst) => Some(summary.stop.clone()),
            "budget" | "interrupted" => None,
            why => Some(why.to_owned()),
        };
        RewriteOutcome {
            attempts: new.len() as u32,
            found: new
                .iter()
                .filter(|a| speedup(a).is_some_and(|s| s >= FOUND))
                .count() as u32,
            best,
            done,
            seconds: 0.0,
            said,
        }
    }
}

/// The kernel's attempts, as its log holds them now.
fn attempts(store: &Store, kernel: &KernelHash) -> Vec<Attempt> {
    store
        .attempts(kernel)
        .map(|events| fold(&events).1)
        .unwrap_or_default()
}
