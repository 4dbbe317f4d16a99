//! Simulation: an [`Evaluator`] whose objective is a landscape table instead of a GPU, to test
//! and compare strategies (as Kernel Tuner's cache simulation does).
//!
//! A landscape (JSON, documented in docs/formats.md, "Landscape tables") holds recorded
//! entries (candidate → PTX hash and outcome, as `r3 tune` measured them) and/or a synthetic
//! model. A candidate is answered by its exact entry, else by the model, else by the nearest
//! recorded entry (surrogate distance), which makes a recorded table a piecewise-constant
//! landscape over the whole space.

use super::space::{Space, SpaceOptions};
use crate::candidate::Candidate;
use crate::kernel::PtxHash;
use crate::lower::Lowered;
use crate::passes::catalog::Catalog;
use crate::passes::pipeline::Pipeline;
use crate::ptx::stats::PtxStats;
use crate::replay::{Device, Evaluator};
use crate::store::outcome::{Outcome, TimeStats};
use rand::seq::IndexedRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "{path}: cannot read the landscape table: {msg}; fix: check the path given to --simulate"
    )]
    Read { path: PathBuf, msg: String },
    #[error("{path}: not a landscape table (format {FORMAT}): {msg}; fix: give a table from scripts/trials-to-landscape, or one of bench/landscapes/")]
    Parse { path: PathBuf, msg: String },
    #[error("{path}: the landscape has neither entries nor a model; fix: give it `entries` (measured candidates) or a `model`, as scripts/trials-to-landscape writes")]
    Empty { path: PathBuf },
}

/// One recorded evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub candidate: Candidate,
    pub ptx_hash: crate::kernel::PtxHash,
    pub outcome: Outcome,
}

/// A synthetic objective: log-time effects of features of a candidate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Model {
    /// The preset the pass counts are compared with.
    pub preset: String,
    /// Effect when a pass occurs a different number of times than in the preset.
    pub pass_change: BTreeMap<String, f64>,
    /// Effect when a parameter token (e.g. `full-unroll-max=256`) occurs anywhere.
    pub tokens: BTreeMap<String, f64>,
    /// Extra effect when both passes are changed.
    pub pairs: Vec<(String, String, f64)>,
    /// Effect of knob values, keyed as the surrogate's knob features (`cg=0`, `maxntid=Some(256)`).
    pub knobs: BTreeMap<String, f64>,
    /// Passes whose presence (count above the preset's) breaks the kernel: outcome status.
    pub fail: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Landscape {
    pub format: u32,
    /// The kernel it was measured on, as a word (`r3 tune --simulate` resolves it, else keys
    /// the search by it).
    pub kernel: String,
    pub gpu: String,
    /// True for generated landscapes; false for ones recorded on a GPU.
    pub synthetic: bool,
    /// Median time of the -O3 baseline.
    pub baseline_us: f64,
    /// The space the landscape was recorded or generated over.
    pub space: SpaceOptions,
    #[serde(default)]
    pub entries: Vec<Entry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
    /// Best known time over baseline, when known (the optimum of a synthetic model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_ratio: Option<f64>,
    /// The kernel's traits (`ptx::cfg::TRAITS`), which choose the recipes a search tries first;
    /// absent: none known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traits: Vec<String>,
}

impl Landscape {
    pub fn load(path: &Path) -> Result<Landscape, SimError> {
        let bytes = std::fs::read(path).map_err(|e| SimError::Read {
            path: path.to_owned(),
            msg: e.to_string(),
        })?;
        let l: Landscape = serde_json::from_slice(&bytes).map_err(|e| SimError::Parse {
            path: path.to_owned(),
            msg: e.to_string(),
        })?;
        if l.format != FORMAT {
            return Err(SimError::Parse {
                path: path.to_owned(),
                msg: format!("format {}", l.format),
            });
        }
        if l.entries.is_empty() && l.model.is_none() {
            return Err(SimError::Empty {
                path: path.to_owned(),
            });
        }
        if let Some(what) = l.non_positive_time() {
            return Err(SimError::Parse {
                path: path.to_owned(),
                msg: format!(
                    "{what}: every time must be a positive number of µs (fix the table, or record it again with scripts/gpu-landscapes)"
                ),
            });
        }
        Ok(l)
    }

    /// The first time in the table that is not a positive number (a speedup of it would be
    /// NaN, infinite or negative).
    fn non_positive_time(&self) -> Option<String> {
        let bad = |t: f64| !(t.is_finite() && t > 0.0);
        if bad(self.baseline_us) {
            return Some(format!("baseline_us is {}", self.baseline_us));
        }
        self.entries
            .iter()
            .enumerate()
            .find_map(|(i, e)| match &e.outcome {
                Outcome::Valid { time, baseline }
                    if bad(time.median_us) || bad(baseline.median_us) =>
                {
                    Some(format!(
                        "entry {i}: median times {} and {} µs (candidate, baseline)",
                        time.median_us, baseline.median_us
                    ))
                }
                _ => None,
            })
    }

    /// The best ratio known: the model's optimum, else the best recorded entry.
    pub fn best_known(&self) -> Option<f64> {
        let rec = self
            .entries
            .iter()
            .filter_map(|e| e.outcome.ratio())
            .fold(None, |a: Option<f64>, r| Some(a.map_or(r, |a| a.min(r))));
        match (self.best_ratio, rec) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The simulated PTX of a candidate: a hash of what makes its time (its signature).
fn hash(s: &str) -> PtxHash {
    PtxHash::of_ptx(s)
}

fn counts(pipeline: &str) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let p = Pipeline::parse(pipeline).unwrap_or_default();
    let mut names = BTreeMap::new();
    let mut tokens = BTreeMap::new();
    for s in &p.steps {
        *names.entry(s.name.clone()).or_insert(0) += 1;
        for t in &s.params {
            *tokens.entry(t.clone()).or_insert(0) += 1;
        }
    }
    (names, tokens)
}

impl Model {
    /// Log time effect, the features that made it (the simulated "PTX"), or a failure.
    fn eval(
        &self,
        c: &Candidate,
        preset: &BTreeMap<String, usize>,
    ) -> Result<(f64, PtxHash), Outcome> {
        let (names, tokens) = counts(&c.pipeline);
        let n = |p: &str| names.get(p).copied().unwrap_or(0);
        let changed = |p: &str| n(p) != preset.get(p).copied().unwrap_or(0);
        for (p, status) in &self.fail {
            if n(p) > preset.get(p).copied().unwrap_or(0) {
                let message = format!("simulated failure: {p}");
                return Err(match status.as_str() {
                    "compile_error" => Outcome::CompileError { message },
                    "crashed" => Outcome::Crashed { message },
                    _ => Outcome::WrongOutput { message },
                });
            }
        }
        let mut sig = Vec::new();
        let mut log = 0.0;
        for (p, w) in &self.pass_change {
            if changed(p) {
                log += w;
                sig.push(format!("~{p}"));
            }
        }
        for (t, w) in &self.tokens {
            if tokens.contains_key(t) {
                log += w;
                sig.push(t.clone());
            }
        }
        for (a, b, w) in &self.pairs {
            if changed(a) && changed(b) {
                log += w;
            }
        }
        for k in Space::features(c).knobs {
            if let Some(w) = self.knobs.get(&k).filter(|w| **w != 0.0) {
                log += w;
                sig.push(k);
            }
        }
        Ok((log, hash(&sig.join(","))))
    }

    /// The lowest log effect reachable: every helpful effect, no harmful one.
    fn optimum(&self) -> f64 {
        let helpful = |w: &f64| w.min(0.0);
        let mut by_knob: BTreeMap<&str, f64> = BTreeMap::new();
        for (k, w) in &self.knobs {
            let name = k.split('=').next().unwrap_or("");
            let e = by_knob.entry(name).or_insert(0.0);
            *e = e.min(*w);
        }
        self.pass_change.values().map(helpful).sum::<f64>()
            + self.tokens.values().map(helpful).sum::<f64>()
            + self.pairs.iter().map(|p| helpful(&p.2)).sum::<f64>()
            + by_knob.values().sum::<f64>()
    }
}

/// The simulator: an evaluator over a landscape. Counts what it was asked to measure.
pub struct Simulator {
    pub landscape: Landscape,
    exact: HashMap<Candidate, usize>,
    preset_counts: BTreeMap<String, usize>,
    feats: Vec<super::space::Features>,
    /// Candidates measured (not lowered only), for tests; behind a lock since `measure` takes
    /// `&self`.
    measured: std::sync::Mutex<Vec<Candidate>>,
}

impl Simulator {
    pub fn new(landscape: Landscape) -> Simulator {
        let exact = landscape
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.candidate.clone(), i))
            .collect();
        let preset = landscape
            .model
            .as_ref()
            .map(|m| m.preset.clone())
            .unwrap_or_else(|| "O3".into());
        let preset_counts = Catalog::builtin()
            .ok()
            .and_then(|c| c.preset(&preset).ok().map(|p| counts(&p.pipeline).0))
            .unwrap_or_default();
        let feats = landscape
            .entries
            .iter()
            .map(|e| Space::features(&e.candidate))
            .collect();
        Simulator {
            landscape,
            exact,
            preset_counts,
            feats,
            measured: Default::default(),
        }
    }

    /// The candidates measured so far, in the order they were measured.
    pub fn measured(&self) -> Vec<Candidate> {
        self.measured
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn lookup(&self, c: &Candidate) -> Result<(PtxHash, Outcome), Outcome> {
        let base = self.landscape.baseline_us;
        if *c == Candidate::baseline() {
            return Ok(("baseline".into(), valid(base, base)));
        }
        if let Some(&i) = self.exact.get(c) {
            let e = &self.landscape.entries[i];
            return Ok((e.ptx_hash.clone(), e.outcome.clone()));
        }
        if let Some(m) = &self.landscape.model {
            let (log, sig) = m.eval(c, &self.preset_counts)?;
            let sig = if sig == hash("") {
                "baseline".into()
            } else {
                sig
            };
            return Ok((sig, valid(base * log.exp(), base)));
        }
        let f = Space::features(c);
        let i = (0..self.feats.len())
            .min_by(|&a, &b| {
                let d = |i: usize| {
                    self.feats[i].pass_distance(&f) + 4.0 * self.feats[i].knob_distance(&f)
                };
                d(a).total_cmp(&d(b))
            })
            .expect("landscape has entries");
        let e = &self.landscape.entries[i];
        Ok((e.ptx_hash.clone(), e.outcome.clone()))
    }
}

fn valid(us: f64, base: f64) -> Outcome {
    Outcome::Valid {
        time: TimeStats::exact(us),
        baseline: TimeStats::exact(base),
    }
}

impl Evaluator for Simulator {
    fn lower(&self, candidate: &Candidate) -> Result<Lowered, Outcome> {
        let ptx_hash = match self.lookup(candidate) {
            Ok((_, o @ Outcome::CompileError { .. })) | Err(o @ Outcome::CompileError { .. }) => {
                return Err(o)
            }
            Ok((h, _)) => h,
            Err(_) => hash(&format!("failing {}", candidate.key())),
        };
        Ok(Lowered {
            candidate: candidate.clone(),
            ptx: format!("// simulated PTX {ptx_hash}\n"),
            ptx_hash,
            stats: PtxStats::default(),
            passes_ms: 0.0,
            codegen_ms: 0.0,
            ir_instructions: 0,
        })
    }

    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
        // `R3_SIM_MEASURE_MS`: each candidate takes that long, as a GPU's measurement would, so
        // that a simulated fleet's workers spend their time as a real fleet's do, mostly waiting
        // for the GPU, and the store's share of it shows (scripts/bench-fleet-sim).
        if let Some(ms) = std::env::var("R3_SIM_MEASURE_MS")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|ms| *ms > 0.0 && ms.is_finite())
        {
            std::thread::sleep(std::time::Duration::from_secs_f64(
                ms * batch.len() as f64 / 1e3,
            ));
        }
        let mut measured = self.measured.lock().unwrap_or_else(|p| p.into_inner());
        batch
            .iter()
            .map(|l| {
                measured.push(l.candidate.clone());
                match self.lookup(&l.candidate) {
                    Ok((_, o)) | Err(o) => o,
                }
            })
            .collect()
    }

    fn traits(&self) -> Vec<String> {
        self.landscape.traits.clone()
    }

    fn device(&self) -> Device {
        Device {
            gpu: crate::store::trials::simulated_gpu(Some(&self.landscape.gpu)),
            driver: "none".into(),
            id: None,
            target: None,
        }
    }
}

/// Landscape families for tests and the strategy benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Sparse pass effects (a few passes and parameters matter, most are neutral), a failing
    /// pass, and codegen/launch knobs.
    Sparse,
    /// Only the codegen/launch knobs help; some passes hurt, one breaks the kernel.
    Knobs,
}

/// A synthetic landscape, deterministic in `seed`.
pub fn synthetic(family: Family, seed: u64) -> Landscape {
    let mut rng = super::strategy::rng(seed ^ 0x5eed_1a4d);
    let cat = Catalog::builtin().expect("builtin catalog");
    let space = SpaceOptions {
        launch_threads: Some(256),
        block_size_agnostic: true,
        ..SpaceOptions::default()
    };
    let offered: Vec<&str> = cat.searchable(false).map(|p| p.name.as_str()).collect();
    let pick = |rng: &mut super::strategy::SearchRng, taken: &mut Vec<String>| loop {
        let p = offered.choose(rng).unwrap().to_string();
        if !taken.contains(&p) {
            taken.push(p.clone());
            return p;
        }
    };
    let mut m = Model {
        preset: "O3".into(),
        ..Model::default()
    };
    let mut taken = Vec::new();
    let scale = 1.0;
    let (good, bad) = if family == Family::Sparse {
        (3, 6)
    } else {
        (0, 4)
    };
    for _ in 0..good {
        let p = pick(&mut rng, &mut taken);
        m.pass_change
            .insert(p, -scale * rng.random_range(0.03..0.08));
    }
    for _ in 0..bad {
        let p = pick(&mut rng, &mut taken);
        m.pass_change.insert(p, scale * rng.random_range(0.02..0.2));
    }
    if family == Family::Sparse {
        let a = m.pass_change.keys().next().cloned().unwrap();
        let b = m.pass_change.keys().nth(1).cloned().unwrap();
        m.pairs.push((a, b, -scale * 0.02));
        let unroll = cat.pass("loop-unroll").unwrap();
        let fm = unroll
            .params
            .iter()
            .find(|p| p.name == "full-unroll-max")
            .unwrap();
        let tok = fm.token(fm.values.choose(&mut rng).unwrap());
        m.tokens.insert(tok, -scale * rng.random_range(0.02..0.06));
    }
    let f = pick(&mut rng, &mut taken);
    m.fail.insert(f, "wrong_output".into());
    let k: f64 = 1.0;
    for (cg, w) in [
        (0, 0.4),
        (1, 0.1),
        (2, rng.random_range(-0.03..0.02)),
        (3, 0.0),
    ] {
        m.knobs.insert(format!("cg={cg}"), w * k.min(1.5));
    }
    m.knobs.insert("maxntid=Some(256)".into(), -0.02 * k);
    m.knobs.insert("maxntid=Some(1024)".into(), 0.01 * k);
    for mb in [1, 2, 4, 8] {
        m.knobs.insert(
            format!("minctasm=Some({mb})"),
            k * rng.random_range(-0.03..0.03),
        );
    }
    let best_block = *[64u32, 128, 256, 512].choose(&mut rng).unwrap();
    for bx in super::space::BLOCK_SIZES {
        let w = if *bx == best_block {
            -0.03
        } else {
            0.02 * ((*bx as f64 / best_block as f64).log2().abs())
        };
        m.knobs.insert(format!("block=Some({bx})"), k * w);
    }
    let best_ratio = Some(m.optimum().exp());
    Landscape {
        format: FORMAT,
        kernel: format!(
            "synthetic-{}-{seed}",
            if family == Family::Sparse {
                "sparse"
            } else {
                "knobs"
            }
        ),
        gpu: "synthetic".into(),
        synthetic: true,
        baseline_us: 100.0,
        space,
        entries: Vec::new(),
        model: Some(m),
        best_ratio,
        traits: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_landscapes_are_deterministic_and_reach_their_optimum_below_baseline() {
        let a = synthetic(Family::Sparse, 3);
        assert_eq!(a, synthetic(Family::Sparse, 3));
        assert_ne!(a, synthetic(Family::Sparse, 4));
        assert!(a.best_known().unwrap() < 0.95);
        let json = serde_json::to_string(&a).unwrap();
        let back: Landscape = serde_json::from_str(&json).unwrap();
        assert_eq!(back, a);
        let sim = Simulator::new(a);
        let (h, o) = sim.lookup(&Candidate::baseline()).unwrap();
        assert_eq!((h.as_str(), o.ratio()), ("baseline", Some(1.0)));
        let space = Space::builtin(SpaceOptions::default()).unwrap();
        let (h2, o2) = sim.lookup(&space.start()).unwrap();
        assert_eq!(
            (h2.as_str(), o2.ratio()),
            ("baseline", Some(1.0)),
            "O3 text = default<O3>"
        );
    }

    #[test]
    fn a_table_with_a_time_that_is_not_positive_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let good = synthetic(Family::Sparse, 3);
        std::fs::write(&path, serde_json::to_string(&good).unwrap()).unwrap();
        Landscape::load(&path).unwrap();
        for t in [0.0, -24.4, f64::NAN] {
            let mut bad = good.clone();
            bad.baseline_us = t;
            // JSON has no NaN: serde writes null, which is not a number either.
            std::fs::write(&path, serde_json::to_string(&bad).unwrap()).unwrap();
            let err = Landscape::load(&path).unwrap_err().to_string();
            assert!(
                err.contains("t.json") && (err.contains("positive") || err.contains("null")),
                "{t}: {err}"
            );
        }
        let mut entry = good.clone();
        entry.entries.push(Entry {
            candidate: Candidate::baseline(),
            ptx_hash: "h".into(),
            outcome: Outcome::Valid {
                time: TimeStats::exact(0.0),
                baseline: TimeStats::exact(10.0),
            },
        });
        std::fs::write(&path, serde_json::to_string(&entry).unwrap()).unwrap();
        let err = Landscape::load(&path).unwrap_err().to_string();
        assert!(err.contains("entry 0") && err.contains("positive"), "{err}");
    }
}
