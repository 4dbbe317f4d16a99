//! Bayesian optimization, the default strategy: a Gaussian process over candidates with a
//! Hamming-type kernel (exponential in the L1 distance of pass/parameter/adjacent-pair counts,
//! and in the Hamming distance of the knobs, with separate length scales chosen by marginal
//! likelihood), and expected improvement maximized over a pool of edits of the best candidates
//! and of random samples (over every unseen point, in a small finite space). The objective is log(time / baseline); failures count as clearly
//! worse than the worst valid result, so the surrogate learns to avoid them.

use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::remix::space::{Features, Space};
use nalgebra::{DMatrix, DVector};
use rand::rngs::StdRng;
use rand::Rng;
use statrs::distribution::{Continuous, ContinuousCDF, Normal};

const INITIAL: usize = 10;
const POOL_EDITS: usize = 48;
const POOL_TOP: usize = 5;
const POOL_RANDOM: usize = 32;
/// Finite spaces up to this size are scored whole instead of through a pool.
const EXHAUSTIVE_POOL: usize = 4096;
const LENGTHS_PASS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0];
const LENGTHS_KNOB: &[f64] = &[0.5, 1.0, 2.0, 4.0];
const NOISE: f64 = 1e-3;
const XI: f64 = 0.01;

pub struct Bo {
    rng: StdRng,
    hist: History,
    feats: Vec<Features>,
    /// Pass and knob distances between told candidates (lower triangle, grown per tell).
    dist: Vec<Vec<(f64, f64)>>,
    lengths: (f64, f64),
    fitted_at: usize,
}

impl Bo {
    pub fn new(seed: u64) -> Bo {
        Bo {
            rng: super::rng(seed),
            hist: History::default(),
            feats: Vec::new(),
            dist: Vec::new(),
            lengths: (4.0, 1.0),
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

    fn kernel(a: &Features, b: &Features, (lp, lk): (f64, f64)) -> f64 {
        (-a.pass_distance(b) / lp - a.knob_distance(b) / lk).exp()
    }

    fn gram(&self, l: (f64, f64)) -> DMatrix<f64> {
        let n = self.feats.len();
        let mut k = DMatrix::zeros(n, n);
        for i in 0..n {
            for j in 0..=i {
                let (dp, dk) = self.dist[i][j];
                let v = (-dp / l.0 - dk / l.1).exp();
                k[(i, j)] = v;
                k[(j, i)] = v;
            }
            k[(i, i)] += NOISE;
        }
        k
    }

    /// Picks the length scales with the highest marginal likelihood (on a grid).
    fn fit(&mut self, y: &DVector<f64>) {
        let mut best = (f64::MIN, self.lengths);
        for &lp in LENGTHS_PASS {
            for &lk in LENGTHS_KNOB {
                let Some(ch) = self.gram((lp, lk)).cholesky() else {
                    continue;
                };
                let alpha = ch.solve(y);
                let logdet: f64 = ch.l().diagonal().iter().map(|d| d.ln()).sum::<f64>() * 2.0;
                let ll = -0.5 * y.dot(&alpha) - 0.5 * logdet;
                if ll > best.0 {
                    best = (ll, (lp, lk));
                }
            }
        }
        self.lengths = best.1;
    }

    fn propose(&mut self, space: &Space) -> Candidate {
        let Some((y, best)) = self.targets() else {
            let rng = &mut self.rng;
            return self.hist.fresh(100, || space.sample(rng));
        };
        let n = y.len();
        if n >= self.fitted_at + 10 || self.fitted_at == 0 {
            self.fit(&y);
            self.fitted_at = n;
        }
        let Some(ch) = self.gram(self.lengths).cholesky() else {
            let rng = &mut self.rng;
            return self.hist.fresh(100, || space.sample(rng));
        };
        let alpha = ch.solve(&y);

        let mut pool = self.pool(space);
        if pool.is_empty() {
            let rng = &mut self.rng;
            return self.hist.fresh(100, || space.sample(rng));
        }

        let normal = Normal::standard();
        let mut best_ei = (f64::MIN, 0);
        for (i, c) in pool.iter().enumerate() {
            let f = Space::features(c);
            let ks = DVector::from_iterator(
                n,
                self.feats.iter().map(|o| Self::kernel(&f, o, self.lengths)),
            );
            let mu = ks.dot(&alpha);
            let v = ch.solve(&ks);
            let var = (1.0 + NOISE - ks.dot(&v)).max(1e-12);
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
        pool.dedup();
        pool
    }
}

impl Strategy for Bo {
    fn name(&self) -> &'static str {
        "bo"
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        if self.hist.results.len() < INITIAL {
            let rng = &mut self.rng;
            return self.hist.fresh(100, || space.sample(rng));
        }
        self.propose(space)
    }

    fn tell(&mut self, c: &Candidate, r: Option<f64>) {
        self.hist.tell(c, r);
        let f = Space::features(c);
        let row = self
            .feats
            .iter()
            .chain(std::iter::once(&f))
            .map(|o| (f.pass_distance(o), f.knob_distance(o)))
            .collect();
        self.dist.push(row);
        self.feats.push(f);
    }
}
