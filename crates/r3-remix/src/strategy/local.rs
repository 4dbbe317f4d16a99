//! Local search: hill climbing from the best candidate so far, by one to a few random edits;
//! the longer it goes without improving, the further it steps.

use super::SearchRng;
use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::space::Space;
use rand::Rng;

pub struct Local {
    rng: SearchRng,
    hist: History,
    best: Option<f64>,
    stagnant: usize,
}

impl Local {
    pub fn new(seed: u64) -> Local {
        Local {
            rng: super::rng(seed),
            hist: History::default(),
            best: None,
            stagnant: 0,
        }
    }
}

impl Strategy for Local {
    fn name(&self) -> &'static str {
        "local"
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        let center = self
            .hist
            .ranked()
            .first()
            .map(|(c, _)| (*c).clone())
            .unwrap_or_else(|| space.start());
        let steps = 1 + (self.stagnant / 15).min(4);
        let rng = &mut self.rng;
        self.hist.fresh(100, || {
            let mut c = center.clone();
            for _ in 0..rng.random_range(1..=steps) {
                c = space.mutate(&c, rng);
            }
            c
        })
    }

    fn tell(&mut self, c: &Candidate, r: Option<f64>) {
        self.hist.tell(c, r);
        match (r, self.best) {
            (Some(r), Some(b)) if r >= b => self.stagnant += 1,
            (Some(r), _) => {
                self.best = Some(r);
                self.stagnant = 0;
            }
            (None, _) => self.stagnant += 1,
        }
    }

    /// `best` and `stagnant` follow from the tells.
    fn save(&self) -> serde_json::Value {
        super::Plain::save(&self.rng, 0)
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), String> {
        super::Plain::restore(&mut self.rng, state).map(drop)
    }
}
