//! Bayesian optimization, the default strategy: a Gaussian process over candidates, and
//! expected improvement maximized over a pool of edits of the best candidates and random
//! samples (in a small finite space: over every unseen point).
//!
//! The kernel compares candidates by group: the pass sequence (exponential in the L1 distance of
//! pass, parameter and adjacent-pair counts) and each knob (exponential in its 0/1 mismatch).
//! It mixes an additive part (the mean of the groups' kernels: what one group does carries over
//! to other settings of the rest, the common case for compiler flags) and a product part (their
//! interactions); the length scales and the mix are chosen by marginal likelihood.
//!
//! The objective is log(time / baseline); failures count as clearly worse than the worst valid
//! result, so the surrogate learns to avoid them. The first candidates come from the space's
//! spread-out design (every value of every coordinate early, in a finite space).
//!
//! With a [`Transfer`] (earlier searches of other kernels, or of this kernel on other GPUs, and
//! r3's shipped recipes), its warm start comes first (`Transfer::warm_start`): at most eight
//! configurations — the recipes whose preconditions the kernel meets, at most five that were
//! near the best in the store's searches, the general recipes — a bet that costs at most
//! eight trials when the kernel is like none of them. The warm start's best is then measured
//! with launch bounds of its block, at each block size where the kernel allows another (at
//! most six trials). The search then goes on exactly as without one. (Also letting the
//! earlier searches' surrogates steer expected improvement, weighted by how well they rank
//! this kernel's trials (RGPE), gained nothing on the recorded grid landscapes once the
//! spread-out design follows the portfolio, and lost trials on partly unrelated synthetic
//! ones; see bench/RESULTS.md.)

use super::SearchRng;
use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::space::{Features, Space};
use crate::transfer::Transfer;
use nalgebra::{DMatrix, DVector};
use rand::Rng;
use statrs::distribution::{Continuous, ContinuousCDF, Normal};
use std::collections::HashMap;

const INITIAL: usize = 10;
const POOL_EDITS: usize = 48;
const POOL_TOP: usize = 5;
const POOL_RANDOM: usize = 32;
/// Finite spaces up to this size are scored whole instead of through a pool.
const EXHAUSTIVE_POOL: usize = 4096;
const LENGTHS_PASS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0];
const LENGTHS_KNOB: &[f64] = &[0.5, 1.0, 2.0, 4.0];
const ADDITIVE: &[f64] = &[0.0, 0.5, 0.9];
const REFIT_EVERY: usize = 10;
/// Candidates measured first from a transfer's portfolio, at most.
const PORTFOLIO: usize = 5;
const NOISE: f64 = 1e-3;
const XI: f64 = 0.01;
/// Pass-distance caching pays where few pipelines recur (a grid); a free search has
/// thousands, each seen a few times.
const CACHE_PIPELINES: usize = 512;

/// Group 0: the pass sequence; then one group per knob (`Features::knobs`).
const GROUPS: usize = 6;
type Dist = [f64; GROUPS];

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Hyper {
    pass: f64,
    knob: f64,
    additive: f64,
}

/// A candidate as the kernel sees it: its interned pass features and its knob values.
#[derive(Clone)]
struct Point {
    pipe: usize,
    knobs: Vec<String>,
}

/// The surrogate's distances, cached. A cache, not state: every distance is a function of the
/// two candidates alone, whatever was interned first, so a restored search that never built
/// the pools of the one it continues sees the same numbers (`Strategy::save` keeps none of
/// this).
#[derive(Default)]
struct Distances {
    /// Interned by pipeline and then LLVM options, which count among the pass features (an
    /// option tunes a pass): by pipeline alone, the options first seen with a pipeline stood
    /// for every candidate of it, and a pool's candidate seen first on the search but never on
    /// its resume made the two differ.
    pipes: HashMap<String, HashMap<Options, usize>>,
    feats: Vec<Features>,
    pass: HashMap<(usize, usize), f64>,
}

type Options = std::collections::BTreeMap<String, String>;

impl Distances {
    /// The point of a candidate; the pass features of a pipeline and options are computed once
    /// (parsing a pipeline is the costly part, and a pool meets the same ones again and again).
    fn point(&mut self, c: &Candidate) -> Point {
        let knobs = Space::knob_features(c);
        let known = self.pipes.get(&c.pipeline);
        if let Some(&pipe) = known.and_then(|o| o.get(&c.llvm_options)) {
            return Point { pipe, knobs };
        }
        let pipe = self.feats.len();
        let options = self.pipes.entry(c.pipeline.clone()).or_default();
        options.insert(c.llvm_options.clone(), pipe);
        self.feats.push(Features {
            passes: Space::features(c).passes,
            knobs: Vec::new(),
        });
        Point { pipe, knobs }
    }

    fn between(&mut self, a: &Point, b: &Point) -> Dist {
        let key = (a.pipe.min(b.pipe), a.pipe.max(b.pipe));
        let pass = match self.pass.get(&key) {
            Some(&d) => d,
            None => {
                let d = self.feats[a.pipe].pass_distance(&self.feats[b.pipe]);
                if self.feats.len() <= CACHE_PIPELINES {
                    self.pass.insert(key, d);
                }
                d
            }
        };
        let mut d = [0.0; GROUPS];
        d[0] = pass;
        for (i, (x, y)) in a.knobs.iter().zip(&b.knobs).enumerate().take(GROUPS - 1) {
            d[i + 1] = f64::from(u8::from(x != y));
        }
        d
    }
}

fn kernel(d: &Dist, h: Hyper, active: &[bool; GROUPS]) -> f64 {
    let scaled: [f64; GROUPS] =
        std::array::from_fn(|g| d[g] / if g == 0 { h.pass } else { h.knob });
    let product = (-scaled.iter().sum::<f64>()).exp();
    if h.additive == 0.0 {
        return product;
    }
    let n = active.iter().filter(|a| **a).count().max(1) as f64;
    let additive = (0..GROUPS)
        .filter(|&g| active[g])
        .map(|g| (-scaled[g]).exp())
        .sum::<f64>()
        / n;
    h.additive * additive + (1.0 - h.additive) * product
}

/// What [`Bo`] keeps beyond its tells (see `Strategy::save`).
#[derive(serde::Serialize, serde::Deserialize)]
struct BoState {
    /// The random stream's word position, in decimal.
    rng: String,
    initial: Option<Vec<Candidate>>,
    portfolio: usize,
    swept: bool,
    /// The launch sweep's length (absent in checkpoints of earlier r3s: none counted).
    #[serde(default)]
    sweep: usize,
    queued: Vec<Candidate>,
    hyper: Hyper,
    fitted_at: usize,
}

pub struct Bo {
    rng: SearchRng,
    hist: History,
    initial: Option<Vec<Candidate>>,
    dists: Distances,
    told: Vec<Point>,
    /// Distances between told candidates (lower triangle, grown per tell).
    dist: Vec<Vec<Dist>>,
    /// Groups in which told candidates differ; the others say nothing yet.
    active: [bool; GROUPS],
    hyper: Hyper,
    fitted_at: usize,
    transfer: Option<Transfer>,
    portfolio: usize,
    /// A small finite space's points with their surrogate points (computed once).
    finite: Option<Vec<(Candidate, Point)>>,
    /// Whether the launch sweep of the warm start's best was queued (once per search), and how
    /// many candidates it queued.
    swept: bool,
    sweep: usize,
    /// Candidates asked before anything else: the launch sweep.
    queued: std::collections::VecDeque<Candidate>,
}

impl Bo {
    pub fn new(seed: u64) -> Bo {
        Bo {
            rng: super::rng(seed),
            hist: History::default(),
            initial: None,
            dists: Distances::default(),
            told: Vec::new(),
            dist: Vec::new(),
            active: [false; GROUPS],
            hyper: Hyper {
                pass: 4.0,
                knob: 1.0,
                additive: 0.5,
            },
            fitted_at: 0,
            transfer: None,
            portfolio: 0,
            finite: None,
            swept: false,
            sweep: 0,
            queued: Default::default(),
        }
    }

    /// Bayesian optimization that measures a transfer's portfolio first (see the module text).
    pub fn with_transfer(seed: u64, transfer: Transfer) -> Bo {
        let mut bo = Bo::new(seed);
        if !transfer.is_empty() {
            bo.transfer = Some(transfer);
        }
        bo
    }

    /// Targets: log ratios, failures set above the worst, standardized.
    fn targets(&self) -> Option<(DVector<f64>, f64)> {
        let logs: Vec<Option<f64>> = self
            .hist
            .results
            .iter()
            .map(|(_, r)| r.map(|r| r.max(1e-9).ln()))
            .collect();
        let valid: Vec<f64> = logs.iter().flatten().copied().collect();
        if valid.is_empty() {
            return None;
        }
        let worst = valid.iter().copied().fold(f64::MIN, f64::max);
        let best = valid.iter().copied().fold(f64::MAX, f64::min);
        let fail = worst + 0.5 * (worst - best).max(0.1);
        let y: Vec<f64> = logs.iter().map(|l| l.unwrap_or(fail)).collect();
        let n = y.len() as f64;
        let mean = y.iter().sum::<f64>() / n;
        let sd = (y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n)
            .sqrt()
            .max(1e-9);
        let ys = DVector::from_iterator(y.len(), y.iter().map(|v| (v - mean) / sd));
        Some((ys, (best - mean) / sd))
    }

    fn gram(&self, h: Hyper) -> DMatrix<f64> {
        let n = self.told.len();
        let mut k = DMatrix::zeros(n, n);
        for i in 0..n {
            for j in 0..=i {
                let v = kernel(&self.dist[i][j], h, &self.active);
                k[(i, j)] = v;
                k[(j, i)] = v;
            }
            k[(i, i)] += NOISE;
        }
        k
    }

    /// Picks the hyperparameters with the highest marginal likelihood (on a grid).
    fn fit(&mut self, y: &DVector<f64>) {
        let mut best = (f64::MIN, self.hyper);
        for &pass in LENGTHS_PASS {
            for &knob in LENGTHS_KNOB {
                for &additive in ADDITIVE {
                    let h = Hyper {
                        pass,
                        knob,
                        additive,
                    };
                    let Some(ch) = self.gram(h).cholesky() else {
                        continue;
                    };
                    let alpha = ch.solve(y);
                    let logdet: f64 = ch.l().diagonal().iter().map(|d| d.ln()).sum::<f64>() * 2.0;
                    let ll = -0.5 * y.dot(&alpha) - 0.5 * logdet;
                    if ll > best.0 {
                        best = (ll, h);
                    }
                }
            }
        }
        self.hyper = best.1;
    }

    fn propose(&mut self, space: &Space) -> Candidate {
        let Some((y, best)) = self.targets() else {
            return self.random(space);
        };
        let n = y.len();
        if n >= self.fitted_at + REFIT_EVERY || self.fitted_at == 0 {
            self.fit(&y);
            self.fitted_at = n;
        }
        let Some(ch) = self.gram(self.hyper).cholesky() else {
            return self.random(space);
        };
        let alpha = ch.solve(&y);
        let mut pool = self.pool(space);
        if pool.is_empty() {
            return self.random(space);
        }
        let normal = Normal::standard();
        let mut best_ei = (f64::MIN, 0);
        for (i, (_, p)) in pool.iter().enumerate() {
            let ks = DVector::from_iterator(
                n,
                (0..n).map(|j| {
                    let d = self.dists.between(p, &self.told[j]);
                    kernel(&d, self.hyper, &self.active)
                }),
            );
            let mu = ks.dot(&alpha);
            let v = ch
                .l()
                .solve_lower_triangular(&ks)
                .unwrap_or_else(|| ks.clone());
            let var = (1.0 + NOISE - v.norm_squared()).max(1e-12);
            let sd = var.sqrt();
            let imp = best - mu - XI;
            let z = imp / sd;
            let ei = imp * normal.cdf(z) + sd * normal.pdf(z);
            if ei > best_ei.0 {
                best_ei = (ei, i);
            }
        }
        let (c, _) = pool.swap_remove(best_ei.1);
        self.hist.mark(&c);
        c
    }

    fn random(&mut self, space: &Space) -> Candidate {
        let rng = &mut self.rng;
        self.hist.fresh(100, || space.sample(rng))
    }

    /// Where expected improvement is maximized, with each candidate's point: every unseen
    /// point of a small finite space (their points computed once); otherwise edits of the best
    /// candidates (1 to 3 edits) and random samples.
    fn pool(&mut self, space: &Space) -> Vec<(Candidate, Point)> {
        if let Some(points) = space.points().filter(|p| p.len() <= EXHAUSTIVE_POOL) {
            if self.finite.is_none() {
                let all = points.iter().map(|c| (c.clone(), self.dists.point(c)));
                self.finite = Some(all.collect());
            }
            let finite = self.finite.as_ref().unwrap();
            return finite
                .iter()
                .filter(|(c, _)| !self.hist.seen(c))
                .cloned()
                .collect();
        }
        let mut pool = Vec::new();
        let top: Vec<Candidate> = self
            .hist
            .ranked()
            .iter()
            .take(POOL_TOP)
            .map(|(c, _)| (*c).clone())
            .collect();
        for (i, c) in top.iter().enumerate() {
            for _ in 0..POOL_EDITS / (i + 1) {
                let mut x = c.clone();
                for _ in 0..self.rng.random_range(1..=3) {
                    x = space.mutate(&x, &mut self.rng);
                }
                pool.push(x);
            }
        }
        // The surrogate is additive over passes and knobs, so it predicts a pass win and a
        // knob win found in different trials to hold together; without the recombinations in
        // the pool, edits reach that combination only by luck (seen on the GPU: versioned
        // LICM from a recipe, block size 32 from the search, 3x only together).
        for a in &top {
            for b in top.iter().filter(|b| *b != a) {
                pool.extend(space.recombine(a, b));
            }
        }
        for _ in 0..POOL_RANDOM {
            pool.push(space.sample(&mut self.rng));
        }
        pool.retain(|c| !self.hist.seen(c));
        // Cached: a key is a JSON rendering and a hash, and a sort asks for it n log n times.
        pool.sort_by_cached_key(Candidate::key);
        pool.dedup();
        pool.into_iter()
            .map(|c| {
                let p = self.dists.point(&c);
                (c, p)
            })
            .collect()
    }

    /// How many candidates the transfer's portfolio put in front of the design.
    fn portfolio_len(&mut self, space: &Space) -> usize {
        self.design(space);
        self.portfolio
    }

    /// The initial design: a transfer's portfolio, then the space's spread-out design.
    fn design(&mut self, space: &Space) -> &mut Vec<Candidate> {
        if self.initial.is_none() {
            let mut design = match &self.transfer {
                Some(t) => t.warm_start(PORTFOLIO),
                None => Vec::new(),
            };
            self.portfolio = design.len();
            design.extend(space.design(INITIAL, &mut self.rng));
            self.initial = Some(design);
        }
        self.initial.as_mut().unwrap()
    }

    /// Once the baseline and the warm start are told: the warm start's best (the baseline
    /// when none beat it) at each block size with launch bounds of that block
    /// (`Space::launch_sweep`). A pass win from a recipe and a launch win are often worth most
    /// together, and the surrogate reached that combination only after 50-90 trials (measured
    /// on the GPU: versioned LICM 3.7x, with 32 threads and `.maxntid 32` 10.4x); the design's
    /// random points, which set block sizes of their own, must not take the warm start's place.
    fn queue_launch_sweep(&mut self, space: &Space) {
        if self.swept || self.portfolio_len(space) == 0 {
            return;
        }
        let told = 1 + self.portfolio;
        if self.hist.results.len() < told {
            return;
        }
        self.swept = true;
        let best = self.hist.results[..told]
            .iter()
            .filter_map(|(c, r)| r.map(|r| (c, r)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((best, _)) = best {
            let unseen = space.launch_sweep(best).into_iter();
            self.queued = unseen.filter(|c| !self.hist.seen(c)).collect();
            self.sweep = self.queued.len();
        }
    }

    /// The next candidate of the initial design not seen yet; None once it is used up.
    fn next_initial(&mut self, space: &Space) -> Option<Candidate> {
        self.design(space);
        let design = self.initial.as_mut().unwrap();
        while !design.is_empty() {
            let c = design.remove(0);
            if !self.hist.seen(&c) {
                self.hist.mark(&c);
                return Some(c);
            }
        }
        None
    }
}

impl Strategy for Bo {
    fn name(&self) -> &'static str {
        "bo"
    }

    /// The portfolio, and once it is told, the launch sweep of its best: the sweep is where a
    /// recipe's pass win meets a launch win, so a search stopped by time (or a deadline's warm
    /// start) must not end before it.
    fn warm_start_len(&mut self, space: &Space) -> usize {
        self.queue_launch_sweep(space);
        self.portfolio_len(space) + self.sweep
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        self.queue_launch_sweep(space);
        while let Some(c) = self.queued.pop_front() {
            if !self.hist.seen(&c) {
                self.hist.mark(&c);
                return c;
            }
        }
        if self.hist.results.len() < INITIAL + self.portfolio_len(space) {
            return match self.next_initial(space) {
                Some(c) => c,
                None => self.random(space),
            };
        }
        self.propose(space)
    }

    fn tell(&mut self, c: &Candidate, r: Option<f64>) {
        self.hist.tell(c, r);
        let p = self.dists.point(c);
        let row: Vec<Dist> = self
            .told
            .iter()
            .chain(std::iter::once(&p))
            .map(|o| self.dists.between(&p, o))
            .collect();
        for d in &row {
            for (g, active) in self.active.iter_mut().enumerate() {
                *active |= d[g] > 0.0;
            }
        }
        self.dist.push(row);
        self.told.push(p);
    }

    /// The rest follows from the tells: the surrogate's points and distances, the history.
    fn save(&self) -> serde_json::Value {
        let state = BoState {
            rng: super::stream_position(&self.rng),
            initial: self.initial.clone(),
            portfolio: self.portfolio,
            swept: self.swept,
            sweep: self.sweep,
            queued: self.queued.iter().cloned().collect(),
            hyper: self.hyper,
            fitted_at: self.fitted_at,
        };
        serde_json::to_value(state).expect("bo states serialize")
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), String> {
        let s: BoState = serde_json::from_value(state).map_err(|e| e.to_string())?;
        super::set_stream_position(&mut self.rng, &s.rng)?;
        self.initial = s.initial;
        self.portfolio = s.portfolio;
        self.swept = s.swept;
        self.sweep = s.sweep;
        self.queued = s.queued.into();
        self.hyper = s.hyper;
        self.fitted_at = s.fitted_at;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transfer::Source;

    fn asks(mut bo: Bo, space: &Space, n: usize) -> Vec<Candidate> {
        bo.tell(&Candidate::baseline(), Some(1.0));
        (0..n)
            .map(|i| {
                let c = bo.ask(space);
                bo.tell(&c, Some(1.0 - i as f64 / 100.0));
                c
            })
            .collect()
    }

    /// Candidates of one pipeline that differ in an LLVM option are apart by it, whichever
    /// of them the cache met first: on a resume it meets them in another order than the
    /// search did.
    #[test]
    fn a_distance_is_of_the_two_candidates_whatever_was_seen_first() {
        let unroll = |v: &str| Candidate {
            llvm_options: [("unroll-max-count".to_string(), v.to_string())].into(),
            ..Candidate::baseline()
        };
        let (two, four, none) = (unroll("2"), unroll("4"), Candidate::baseline());
        let exact =
            |a: &Candidate, b: &Candidate| Space::features(a).pass_distance(&Space::features(b));
        assert!(exact(&two, &four) > 0.0);
        for first in [&two, &four, &none] {
            let mut d = Distances::default();
            d.point(first);
            let points = [&two, &four, &none].map(|c| d.point(c));
            for (i, a) in [&two, &four, &none].into_iter().enumerate() {
                for (j, b) in [&two, &four, &none].into_iter().enumerate() {
                    let got = d.between(&points[i], &points[j])[0];
                    assert_eq!(got, exact(a, b), "{i} to {j}, {first:?} first");
                }
            }
        }
    }

    #[test]
    fn a_transfer_portfolio_comes_first_then_the_search_as_without() {
        let space = Space::test_grid();
        // An earlier search in which codegen level 0 won by far.
        let trials: Vec<(Candidate, Option<f64>)> = space.points().unwrap()[..60]
            .iter()
            .map(|c| (c.clone(), Some(if c.codegen_opt == 0 { 0.5 } else { 1.0 })))
            .collect();
        let src = Source::new("earlier", &trials, &space).unwrap();
        let portfolio = Transfer {
            sources: vec![src.clone()],
            ..Default::default()
        }
        .portfolio(PORTFOLIO);
        assert_eq!(portfolio.len(), 1);
        assert_eq!(portfolio[0].codegen_opt, 0);
        let warm = asks(
            Bo::with_transfer(
                3,
                Transfer {
                    sources: vec![src],
                    ..Default::default()
                },
            ),
            &space,
            14,
        );
        assert_eq!(warm[0], portfolio[0]);
        // Then the spread-out design of the search without a transfer (nine points: the
        // baseline is the tenth of the initial trials).
        let cold = asks(Bo::new(3), &space, 10);
        assert!(warm[1..10] == cold[..9]);
        let empty = asks(Bo::with_transfer(3, Transfer::default()), &space, 14);
        assert_eq!(empty, asks(Bo::new(3), &space, 14));
    }

    fn recipe_transfer(recipes: &[Candidate]) -> Transfer {
        let pick = |c: &Candidate| crate::store::trials::RecipePick {
            name: "r".into(),
            candidate: c.clone(),
            matched: false,
        };
        Transfer {
            recipes: recipes.iter().map(pick).collect(),
            ..Default::default()
        }
    }

    /// Restored in the middle of the launch sweep, with the design half used, a fresh bo told
    /// the same trials asks what the first would have asked next.
    #[test]
    fn a_restored_bo_asks_what_the_saved_one_would_have() {
        let space = Space::builtin(crate::space::SpaceOptions {
            launch_threads: Some(256),
            block_size_agnostic: true,
            ..Default::default()
        })
        .unwrap();
        let o1 = Candidate {
            codegen_opt: 1,
            ..Candidate::baseline()
        };
        let make = || {
            let mut bo = Bo::with_transfer(5, recipe_transfer(std::slice::from_ref(&o1)));
            bo.warm_start_len(&space);
            bo
        };
        let mut first = make();
        let mut told = vec![(Candidate::baseline(), Some(1.0))];
        first.tell(&Candidate::baseline(), Some(1.0));
        for i in 0..5 {
            let c = first.ask(&space);
            let r = Some(0.9 - i as f64 / 50.0);
            first.tell(&c, r);
            told.push((c, r));
        }
        assert!(!first.queued.is_empty(), "saved before the sweep was done");
        let mut second = make();
        second.restore(first.save()).unwrap();
        for (c, r) in &told {
            second.tell(c, *r);
        }
        for i in 0..24 {
            let (a, b) = (first.ask(&space), second.ask(&space));
            assert_eq!(a, b, "ask {i} after the restore");
            let r = Some(0.8 + (i % 7) as f64 / 40.0);
            first.tell(&a, r);
            second.tell(&b, r);
        }
        assert!(second.restore(serde_json::json!({"rng": "x"})).is_err());
    }

    #[test]
    fn the_warm_starts_best_is_measured_at_each_block_size_with_its_bounds() {
        let opts = |agnostic| crate::space::SpaceOptions {
            launch_threads: Some(256),
            block_size_agnostic: agnostic,
            ..Default::default()
        };
        let space = Space::builtin(opts(true)).unwrap();
        let o0 = Candidate {
            codegen_opt: 0,
            ..Candidate::baseline()
        };
        let o1 = Candidate {
            codegen_opt: 1,
            ..Candidate::baseline()
        };
        let mut bo = Bo::with_transfer(3, recipe_transfer(&[o0.clone(), o1.clone()]));
        bo.tell(&Candidate::baseline(), Some(1.0));
        // A round asks past the warm start before anything is told (the design's first point).
        let round: Vec<Candidate> = (0..3).map(|_| bo.ask(&space)).collect();
        assert_eq!(round[..2], [o0.clone(), o1.clone()]);
        bo.tell(&round[0], Some(0.9));
        bo.tell(&round[1], Some(0.5));
        // The design's point does better, but the sweep is of the warm start's best, o1.
        bo.tell(&round[2], Some(0.1));
        let mut next = || {
            let c = bo.ask(&space);
            bo.tell(&c, Some(0.8));
            c
        };
        let sweep: Vec<Candidate> = (0..7).map(|_| next()).collect();
        let sizes: Vec<Option<u32>> = sweep.iter().map(|c| c.block_x).collect();
        assert_eq!(sizes[..6], [32, 64, 128, 256, 512, 1024].map(Some));
        for c in &sweep[..6] {
            assert_eq!(c.max_threads, c.block_x, "{c:?}");
            assert_eq!(c.min_blocks_per_sm, None);
            let knobs_off = Candidate {
                block_x: None,
                max_threads: None,
                ..c.clone()
            };
            assert_eq!(knobs_off, o1);
        }
        // Then its own block (the recorded 256 threads) with two blocks an SM.
        let own = &sweep[6];
        assert_eq!(
            (own.block_x, own.max_threads, own.min_blocks_per_sm),
            (None, Some(256), Some(2))
        );
        // Once: then the spread-out design.
        let after: Vec<Candidate> = (0..8).map(|_| next()).collect();
        assert!(after.iter().all(|c| !sweep.contains(c)));
        // A kernel whose block size must stay: its own block as bounds, alone and with two
        // blocks an SM.
        let fixed = Space::builtin(opts(false)).unwrap();
        let bounded = fixed.launch_sweep(&o1);
        let bounds: Vec<_> = bounded
            .iter()
            .map(|c| (c.block_x, c.max_threads, c.min_blocks_per_sm))
            .collect();
        assert_eq!(
            bounds,
            [(None, Some(256), None), (None, Some(256), Some(2))]
        );
        assert_eq!(fixed.launch_sweep(&bounded[0]), bounded[1..]);
        // A grid's landscapes were measured without the sweep.
        assert!(Space::test_grid().launch_sweep(&o1).is_empty());
    }
}
