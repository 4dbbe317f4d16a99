//! Judges of variants: on the GPU (an inner search per variant against the parent's recorded
//! launch, validated on every recorded launch, then timed interleaved against the original's
//! best compiler-only configuration), or a scripted simulation for tests and dry runs.

use super::{Judge, Verdict};
use crate::candidate::Candidate;
use crate::lower::Lowered;
use crate::remix::space::Space;
use crate::remix::tune::{self, TuneError, TuneOptions};
use crate::replay::gpu::GpuEvaluator;
use crate::replay::Evaluator;
use crate::store::outcome::Outcome;
use crate::store::records::Recording;
use crate::store::{KernelRecord, Store};
use serde::Deserialize;
use std::sync::atomic::AtomicBool;

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
        }
    }
}

/// The GPU judge of one kernel's variants.
pub struct GpuJudge<'a> {
    parent: GpuEvaluator,
    /// The original kernel's best configuration on this GPU (or -O3), lowered from its module.
    reference: Lowered,
    reference_words: String,
    /// The parent's other recorded launches: a variant must reproduce each.
    others: Vec<Recording>,
    space: Space,
    tune: TuneOptions,
    stop: &'a AtomicBool,
}

impl<'a> GpuJudge<'a> {
    /// `parent` measures the original kernel on its recorded launch; `tune` is the inner
    /// search's options (its kernel is replaced by each variant's hash).
    pub fn new(
        store: &Store,
        parent: GpuEvaluator,
        space: Space,
        tune: TuneOptions,
        stop: &'a AtomicBool,
    ) -> Result<GpuJudge<'a>, String> {
        let hash = parent.kernel().hash.clone();
        let gpu = parent.device().gpu;
        let best = store
            .best_trial(&hash, &gpu)
            .map_err(|e| e.to_string())?
            .map_or_else(Candidate::baseline, |t| t.candidate);
        let reference = parent
            .lower(&hash, &best)
            .or_else(|_| parent.lower(&hash, &Candidate::baseline()))
            .map_err(|o| format!("the original kernel does not lower: {o}"))?;
        let others = store
            .launches_of(&hash)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|r| r.id != parent.recording().id && r.usable())
            .collect();
        Ok(GpuJudge {
            reference_words: describe(&reference.candidate),
            parent,
            reference,
            others,
            space,
            tune,
            stop,
        })
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
        let rec = self.parent.recording().clone();
        let target = self.parent.target().clone();
        let mut ev = match GpuEvaluator::of_kernel(
            store,
            rec,
            variant.clone(),
            target,
            self.parent.measure_options().clone(),
        ) {
            Ok(ev) => ev,
            Err(e) => {
                return Verdict::Failed {
                    why: "did not compile".into(),
                    message: e.to_string(),
                }
            }
        };
        let opts = TuneOptions {
            kernel: variant.hash.to_string(),
            ..self.tune.clone()
        };
        let summary = match tune::tune_in_store(
            store,
            &mut ev,
            &self.space,
            &opts,
            true,
            self.stop,
            |_| {},
        ) {
            Ok((s, _)) => s,
            Err(TuneError::Baseline { outcome, .. }) => {
                return Self::failed(&outcome, "its -O3 build on the recorded launch: ")
            }
            Err(e) => {
                return Verdict::Failed {
                    why: "was not searched".into(),
                    message: e.to_string(),
                }
            }
        };
        let Some(best) = summary.best else {
            return Verdict::Failed {
                why: "has no valid configuration".into(),
                message: format!("{} trials", summary.trials),
            };
        };
        let lowered = match ev.lower(&variant.hash, &best.candidate) {
            Ok(l) => l,
            Err(o) => return Self::failed(&o, "lowering its best configuration again: "),
        };
        for other in &self.others {
            let check = match ev.for_recording(other.clone()) {
                Ok(e) => e.measure(&variant.hash, std::slice::from_ref(&lowered)),
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
        let duel = ev.with_baseline(self.reference.clone());
        match duel
            .measure(&variant.hash, std::slice::from_ref(&lowered))
            .first()
        {
            Some(Outcome::Valid { time, baseline }) => Verdict::Valid {
                speedup: baseline.median_us / time.median_us,
                time_us: time.median_us,
                reference_us: baseline.median_us,
                pipeline: describe(&best.candidate),
                candidate: Some(best.candidate.clone()),
                trials: summary.trials,
                simulated: false,
            },
            Some(o) => Self::failed(o, "against the original: "),
            None => Verdict::Failed {
                why: "was not measured".into(),
                message: String::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_described_as_edits_of_o3_and_knobs() {
        assert_eq!(describe(&Candidate::baseline()), "O3");
        let mut c = Candidate::baseline();
        c.codegen_opt = 2;
        c.max_threads = Some(256);
        assert_eq!(describe(&c), "O3; llc -O2, maxntid 256");
    }
}
