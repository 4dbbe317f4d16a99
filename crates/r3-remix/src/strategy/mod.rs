//! Search strategies behind one ask/tell interface. Every strategy is deterministic for a
//! given seed and sequence of tells, which is what makes `--resume` exact: the tune loop
//! replays the recorded trials through ask/tell before it evaluates anything new. Replaying
//! asks costs what the search cost (bo fits its surrogate at each), so after each round the
//! loop also keeps a checkpoint: what the strategy holds beyond its tells (`save`), which
//! `restore` puts back into a fresh strategy of the same seed before the recorded trials are
//! told to it, none asked again.

use super::space::Space;
use crate::candidate::Candidate;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;

/// The strategies' random stream: the same numbers as rand's `StdRng` for a seed (ChaCha12
/// seeded by `seed_from_u64`), with a position a checkpoint can keep.
pub type SearchRng = rand_chacha::ChaCha12Rng;

pub mod bo;
pub mod evolution;
pub mod exhaustive;
pub mod local;
pub mod random;

pub trait Strategy {
    fn name(&self) -> &'static str;
    /// The next candidate to evaluate; never one asked or told before.
    fn ask(&mut self, space: &Space) -> Candidate;
    /// The objective of an evaluated candidate: time over baseline time (lower is better),
    /// or None when it failed (compile error, wrong output, crash, timeout).
    fn tell(&mut self, candidate: &Candidate, ratio: Option<f64>);
    /// How many of the first candidates (after the baseline) are a warm start: what earlier
    /// searches and the shipped recipes say to measure first (and what follows from them once
    /// told: it may grow then). A time limit never stops a search before they are measured,
    /// and a round never runs past their end.
    fn warm_start_len(&mut self, _space: &Space) -> usize {
        0
    }
    /// What the strategy holds beyond the results told to it, between rounds (when every
    /// candidate asked has been told).
    fn save(&self) -> serde_json::Value;
    /// Puts back what `save` gave, into a strategy made with the same seed (and transfer) that
    /// has not yet been asked anything past the warm-start count; the recorded trials are told
    /// to it next. Err, with the strategy unchanged, when the state is not one of its own.
    fn restore(&mut self, state: serde_json::Value) -> Result<(), String>;
}

/// The state of a strategy whose only state beyond its tells is its random stream (and, for
/// some, a counter).
#[derive(Serialize, Deserialize)]
pub(crate) struct Plain {
    /// The stream's word position (`SearchRng::get_word_pos`), in decimal: a 68-bit number,
    /// beyond what a JSON number holds exactly.
    pub rng: String,
    #[serde(default)]
    pub next: usize,
}

impl Plain {
    pub fn save(rng: &SearchRng, next: usize) -> serde_json::Value {
        let p = Plain {
            rng: stream_position(rng),
            next,
        };
        serde_json::to_value(p).expect("plain states serialize")
    }

    /// Puts the stream back where `save` found it; the state, for what else it holds.
    pub fn restore(rng: &mut SearchRng, state: serde_json::Value) -> Result<Plain, String> {
        let p: Plain = serde_json::from_value(state).map_err(|e| e.to_string())?;
        set_stream_position(rng, &p.rng)?;
        Ok(p)
    }
}

/// Where a random stream is, as states keep it: its word position in decimal (a 68-bit
/// number, beyond what a JSON number holds exactly).
pub(crate) fn stream_position(rng: &SearchRng) -> String {
    rng.get_word_pos().to_string()
}

/// Puts a stream back at a position `stream_position` gave; unchanged on error.
pub(crate) fn set_stream_position(rng: &mut SearchRng, at: &str) -> Result<(), String> {
    let at = at.parse().map_err(|_| format!("rng position {at:?}"))?;
    rng.set_word_pos(at);
    Ok(())
}

pub const NAMES: &[&str] = &["bo", "random", "local", "evolution", "exhaustive"];

#[derive(Debug, thiserror::Error)]
#[error("unknown strategy '{0}'; fix: --strategy bo, random, local, evolution or exhaustive")]
pub struct UnknownStrategy(pub String);

pub fn make(name: &str, seed: u64) -> Result<Box<dyn Strategy + Send>, UnknownStrategy> {
    make_with(name, seed, None)
}

/// A strategy that may learn from earlier searches; only `bo` uses a transfer, the others
/// are the same with or without one.
pub fn make_with(
    name: &str,
    seed: u64,
    transfer: Option<&crate::transfer::Transfer>,
) -> Result<Box<dyn Strategy + Send>, UnknownStrategy> {
    Ok(match name {
        "bo" => match transfer {
            Some(t) => Box::new(bo::Bo::with_transfer(seed, t.clone())),
            None => Box::new(bo::Bo::new(seed)),
        },
        "random" => Box::new(random::Random::new(seed)),
        "local" => Box::new(local::Local::new(seed)),
        "evolution" | "evo" => Box::new(evolution::Evolution::new(seed)),
        "exhaustive" => Box::new(exhaustive::Exhaustive::new(seed)),
        other => return Err(UnknownStrategy(other.into())),
    })
}

pub(crate) fn rng(seed: u64) -> SearchRng {
    use rand::SeedableRng;
    SearchRng::seed_from_u64(seed)
}

/// What every strategy keeps: the candidates seen (asked or told) and the results.
#[derive(Debug, Default, Clone)]
pub struct History {
    seen: HashSet<Candidate>,
    pub results: Vec<(Candidate, Option<f64>)>,
}

impl History {
    pub fn seen(&self, c: &Candidate) -> bool {
        self.seen.contains(c)
    }

    pub fn mark(&mut self, c: &Candidate) {
        self.seen.insert(c.clone());
    }

    pub fn tell(&mut self, c: &Candidate, r: Option<f64>) {
        self.mark(c);
        self.results.push((c.clone(), r));
    }

    /// Valid results, best first (ties keep the order they were told in).
    pub fn ranked(&self) -> Vec<(&Candidate, f64)> {
        let mut v: Vec<(&Candidate, f64)> = self
            .results
            .iter()
            .filter_map(|(c, r)| r.map(|r| (c, r)))
            .collect();
        v.sort_by(|a, b| a.1.total_cmp(&b.1));
        v
    }

    /// The first of `tries` proposals not seen before (the last one if all were); marks it.
    pub fn fresh(&mut self, tries: usize, mut propose: impl FnMut() -> Candidate) -> Candidate {
        let mut c = propose();
        for _ in 1..tries {
            if !self.seen(&c) {
                break;
            }
            c = propose();
        }
        self.mark(&c);
        c
    }
}
