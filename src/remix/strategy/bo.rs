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

use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::remix::space::{Features, Space};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
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
const NOISE: f64 = 1e-3;
const XI: f64 = 0.01;
/// Pass-distance caching pays where few pipelines recur (a grid); a free search has
/// thousands, each seen a few times.
const CACHE_PIPELINES: usize = 512;

/// Group 0: the pass sequence; then one group per knob (`Features::knobs`).
const GROUPS: usize = 6;
type Dist = [f64; GROUPS];

#[derive(Debug, Clone, Copy)]
struct Hyper {
    pass: f64,
    knob: f64,
    additive: f64,
}

/// A candidate as the kernel sees it: its interned pipeline and its knob values.
#[derive(Clone)]
struct Point {
    pipe: usize,
    knobs: Vec<String>,
}

#[derive(Default)]
struct Distances {
    pipes: HashMap<String, usize>,
    feats: Vec<Features>,
    pass: HashMap<(usize, usize), f64>,
}

impl Distances {
    fn point(&mut self, c: &Candidate) -> Point {
        let f = Space::features(c);
        let next = self.feats.len();
        let pipe = *self.pipes.entry(c.pipeline.clone()).or_insert(next);
        if pipe == next {
            self.feats.push(Features {
                passes: f.passes,
                knobs: Vec::new(),
            });
        }
        Point {
            pipe,
            knobs: f.knobs,
        }
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
    let scaled: Vec<f64> = (0..GROUPS)
        .map(|g| d[g] / if g == 0 { h.pass } else { h.knob })
        .collect();
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

pub struct Bo {
    rng: StdRng,
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
        }
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
        for (i, c) in pool.iter().enumerate() {
            let p = self.dists.point(c);
            let ks = DVector::from_iterator(
                n,
                (0..n).map(|j| {
                    let d = self.dists.between(&p, &self.told[j]);
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
        let c = pool.swap_remove(best_ei.1);
        self.hist.mark(&c);
        c
    }

    fn random(&mut self, space: &Space) -> Candidate {
        let rng = &mut self.rng;
        self.hist.fresh(100, || space.sample(rng))
    }

    /// Where expected improvement is maximized: every unseen point of a small finite space;
    /// otherwise edits of the best candidates (1 to 3 edits) and random samples.
    fn pool(&mut self, space: &Space) -> Vec<Candidate> {
        if let Some(points) = space.points().filter(|p| p.len() <= EXHAUSTIVE_POOL) {
            return points
                .iter()
                .filter(|c| !self.hist.seen(c))
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
        for _ in 0..POOL_RANDOM {
            pool.push(space.sample(&mut self.rng));
        }
        pool.retain(|c| !self.hist.seen(c));
        pool.sort_by_key(Candidate::key);
        pool.dedup();
        pool
    }

    /// The next candidate of the initial design not seen yet.
    fn next_initial(&mut self, space: &Space) -> Candidate {
        let rng = &mut self.rng;
        let design = self
            .initial
            .get_or_insert_with(|| space.design(INITIAL, rng));
        while let Some(c) = (!design.is_empty()).then(|| design.remove(0)) {
            if !self.hist.seen(&c) {
                self.hist.mark(&c);
                return c;
            }
        }
        self.random(space)
    }
}

impl Strategy for Bo {
    fn name(&self) -> &'static str {
        "bo"
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        if self.hist.results.len() < INITIAL {
            return self.next_initial(space);
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
}
