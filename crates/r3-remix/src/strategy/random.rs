//! Random search: independent samples of the space.

use super::SearchRng;
use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::space::Space;

pub struct Random {
    rng: SearchRng,
    hist: History,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            rng: super::rng(seed),
            hist: History::default(),
        }
    }
}

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        let rng = &mut self.rng;
        self.hist.fresh(100, || space.sample(rng))
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
