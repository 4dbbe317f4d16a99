//! Exhaustive search of a finite space (`--space grid`), point by point in the space's order:
//! how the recorded landscapes are measured. In the free space, which has no end, it samples.

use super::SearchRng;
use super::{History, Strategy};
use crate::candidate::Candidate;
use crate::space::Space;

pub struct Exhaustive {
    rng: SearchRng,
    hist: History,
    next: usize,
}

impl Exhaustive {
    pub fn new(seed: u64) -> Exhaustive {
        Exhaustive {
            rng: super::rng(seed),
            hist: History::default(),
            next: 0,
        }
    }
}

impl Strategy for Exhaustive {
    fn name(&self) -> &'static str {
        "exhaustive"
    }

    fn ask(&mut self, space: &Space) -> Candidate {
        if let Some(points) = space.points() {
            while let Some(c) = points.get(self.next) {
                self.next += 1;
                if !self.hist.seen(c) {
                    self.hist.mark(c);
                    return c.clone();
                }
            }
        }
        let rng = &mut self.rng;
        self.hist.fresh(100, || space.sample(rng))
    }

    fn tell(&mut self, c: &Candidate, r: Option<f64>) {
        self.hist.tell(c, r);
    }

    fn save(&self) -> serde_json::Value {
        super::Plain::save(&self.rng, self.next)
    }

    fn restore(&mut self, state: serde_json::Value) -> Result<(), String> {
        self.next = super::Plain::restore(&mut self.rng, state)?.next;
        Ok(())
    }
}
