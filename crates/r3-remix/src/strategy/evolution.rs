//! Evolutionary search (steady state): tournament selection among the best candidates so far,
//! one-point crossover of pass sequences with uniform crossover of knobs, then mutation.

use super::SearchRng;
use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::space::Space;
use rand::Rng;

const POPULATION: usize = 16;
const TOURNAMENT: usize = 3;

pub struct Evolution {
    rng: SearchRng,
    hist: History,
}

impl Evolution {
    pub fn new(seed: u64) -> Evolution {
        Evolution {
            rng: super::rng(seed),
            hist: History::default(),
        }
    }
}

fn tournament<'a>(pop: &[(&'a Candidate, f64)], rng: &mut SearchRng) -> &'a Candidate {
    let mut best = rng.random_range(0..pop.len());
    for _ in 1..TOURNAMENT {
        best = best.min(rng.random_range(0..pop.len()));
    }
    pop[best].0
}

impl Strategy for Evolution {
    fn name(&self) -> &'static str {
        "evolution"
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        let ranked = self.hist.ranked();
        if self.hist.results.len() < POPULATION || ranked.len() < 2 {
            let rng = &mut self.rng;
            return self.hist.fresh(100, || space.sample(rng));
        }
        let pop: Vec<(Candidate, f64)> = ranked
            .into_iter()
            .take(POPULATION)
            .map(|(c, r)| (c.clone(), r))
            .collect();
        let rng = &mut self.rng;
        self.hist.fresh(100, || {
            let refs: Vec<(&Candidate, f64)> = pop.iter().map(|(c, r)| (c, *r)).collect();
            let a = tournament(&refs, rng);
            let mut child = if rng.random_bool(0.5) {
                let b = tournament(&refs, rng);
                space.crossover(a, b, rng)
            } else {
                a.clone()
            };
            for _ in 0..rng.random_range(1..=2) {
                child = space.mutate(&child, rng);
            }
            child
        })
    }

    fn tell(&mut self, c: &Candidate, r: Option<f64>) {
        self.hist.tell(c, r);
    }

    fn save(&self) -> serde_json::Value {
        super::Plain::save(&self.rng, 0)
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), String> {
        super::Plain::restore(&mut self.rng, state).map(drop)
    }
}
