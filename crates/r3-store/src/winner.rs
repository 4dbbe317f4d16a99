//! Which trial is a search's best, and which one apply ships: the one rule that tune
//! (confirming), apply, export and report all read trials by.
//!
//! The best is the valid trial with the lowest time over -O3, unless its re-measurement after
//! the search (a [`Confirmation`]) did not hold up, in which case -O3 itself is the best.
//! What ships is the best among the trials a [`Policy`] allows: candidates that change the
//! block size never ship, launch bounds (`.maxntid`, which makes a launch with more threads
//! fail) only when the user opts in, and a gain below `min_speedup` is not worth a change.

use super::trials::{slug, Confirmation, TrialRecord};
use super::{Store, StoreError};
use crate::candidate::Candidate;
use std::path::PathBuf;

/// The valid trial with the lowest time over baseline (the first of equals) — unless a
/// confirmation of exactly that trial found it no faster than the baseline (or not valid), in
/// which case the baseline itself (trial 0) is the best: r3 keeps -O3 when nothing beats it.
pub fn pick_best<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
) -> Option<&'a TrialRecord> {
    let best = recs
        .iter()
        .filter(|t| t.ratio().is_some())
        .min_by(|a, b| a.ratio().unwrap().total_cmp(&b.ratio().unwrap()))?;
    match confirmation_of(confirmed, best.trial) {
        Some(c) if c.ratio().is_none_or(|r| r >= 1.0) => {
            recs.iter().find(|t| t.trial == 0 && t.ratio().is_some())
        }
        _ => Some(best),
    }
}

/// The re-measurement of one trial, if there is one.
pub fn confirmation_of(confirmed: &[Confirmation], trial: u32) -> Option<&Confirmation> {
    confirmed.iter().find(|c| c.trial == trial)
}

/// What apply may ship beyond the pipeline and codegen knobs.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Ship `.maxntid`/`.minnctapersm` too: only right if the program never launches the
    /// kernel with more threads per block than it did when recorded.
    pub launch_bounds: bool,
    /// Which GPU's trials to use when several GPUs of one arch tuned a kernel (a part of its
    /// name, e.g. "h100"); the most recent search otherwise.
    pub gpu: Option<String>,
    /// Accept simulated trials (for tests of apply itself).
    pub simulated: bool,
    /// The least speedup worth shipping (the confirmed one where there is one): a gain within
    /// replay's noise changes the code for nothing.
    pub min_speedup: f64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            launch_bounds: false,
            gpu: None,
            simulated: false,
            min_speedup: DEFAULT_MIN_SPEEDUP,
        }
    }
}

/// Replay tells apart differences of about 1% (medians within 1% at 95% confidence); twice
/// that is a gain worth a change of code.
pub const DEFAULT_MIN_SPEEDUP: f64 = 1.02;

impl Policy {
    /// The policy build systems set through the environment (`R3_APPLY_LAUNCH_BOUNDS=1`,
    /// `R3_APPLY_GPU=h100`, `R3_APPLY_SIMULATED=1`, `R3_APPLY_MIN_SPEEDUP=1.05`).
    pub fn from_env() -> Policy {
        let on = |k: &str| std::env::var_os(k).is_some_and(|v| v == "1");
        Policy {
            launch_bounds: on("R3_APPLY_LAUNCH_BOUNDS"),
            gpu: std::env::var("R3_APPLY_GPU").ok().filter(|g| !g.is_empty()),
            simulated: on("R3_APPLY_SIMULATED"),
            min_speedup: std::env::var("R3_APPLY_MIN_SPEEDUP")
                .ok()
                .and_then(|v| v.parse().ok())
                .filter(|v: &f64| v.is_finite())
                .unwrap_or(DEFAULT_MIN_SPEEDUP),
        }
    }

    /// Whether apply may ship this candidate under the policy.
    pub fn ships(&self, c: &Candidate) -> bool {
        c.block_x.is_none()
            && (self.launch_bounds || (c.max_threads.is_none() && c.min_blocks_per_sm.is_none()))
    }
}

/// The trial apply would ship from a search: `pick_best` among the trials the policy ships.
pub fn shippable_best<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
    policy: &Policy,
) -> Option<&'a TrialRecord> {
    let shippable: Vec<TrialRecord> = recs
        .iter()
        .filter(|r| policy.ships(&r.candidate))
        .cloned()
        .collect();
    let trial = pick_best(&shippable, confirmed)?.trial;
    recs.iter().find(|r| r.trial == trial)
}

/// The search of a kernel that apply and export use: the policy's GPU, else the most recent.
pub fn chosen_search(
    store: &Store,
    hash: &str,
    policy: &Policy,
) -> Result<Option<(PathBuf, Vec<TrialRecord>)>, StoreError> {
    Ok(store.searches(hash)?.into_iter().find(|(_, recs)| {
        policy
            .gpu
            .as_ref()
            .is_none_or(|want| slug(&recs[0].gpu).contains(&slug(want)))
    }))
}

impl Store {
    /// The best valid trial of a kernel on a GPU, as `winner::pick_best` decides: what report and
    /// apply use.
    pub fn best_trial(&self, kernel: &str, gpu: &str) -> Result<Option<TrialRecord>, StoreError> {
        let path = self.trials_path(kernel, gpu);
        let recs = self.trials(kernel, gpu)?;
        let confirmed = self.confirmations(&path)?;
        Ok(pick_best(&recs, &confirmed).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Outcome, TimeStats};

    #[test]
    fn a_best_that_does_not_hold_up_gives_way_to_the_baseline() {
        let ts = |us: f64| TimeStats {
            median_us: us,
            min_us: us,
            spread: 0.0,
            samples: 10,
        };
        let rec = |trial: u32, us: f64| {
            let mut r: TrialRecord = serde_json::from_value(serde_json::json!({
                "format": 1, "trial": trial, "kernel": "k", "gpu": "g", "driver": "d", "r3_version": "0",
                "strategy": "bo", "seed": 0, "batch": 1, "candidate": {"pipeline": "default<O3>"},
                "ptx_hash": "h", "outcome": {"status": "compile_error", "message": ""},
                "passes_ms": 0.0, "codegen_ms": 0.0, "measure_ms": 0.0, "finished_unix_ms": 0
            }))
            .unwrap();
            r.outcome = Outcome::Valid {
                time: ts(us),
                baseline: ts(100.0),
            };
            r
        };
        let recs = vec![rec(0, 100.0), rec(1, 90.0), rec(2, 95.0)];
        assert_eq!(pick_best(&recs, &[]).unwrap().trial, 1);
        let confirm = |trial, us| Confirmation {
            format: 1,
            trial,
            outcome: Outcome::Valid {
                time: ts(us),
                baseline: ts(100.0),
            },
            finished_unix_ms: 0,
            launches: Vec::new(),
            context_ratios: Vec::new(),
        };
        assert_eq!(pick_best(&recs, &[confirm(1, 92.0)]).unwrap().trial, 1);
        assert_eq!(pick_best(&recs, &[confirm(1, 101.0)]).unwrap().trial, 0);
        // A confirmation of another trial says nothing about this one, nor does it hide one.
        assert_eq!(
            pick_best(&recs, &[confirm(2, 90.0), confirm(1, 101.0)])
                .unwrap()
                .trial,
            0
        );
        // A confirmation of another trial says nothing about this one.
        assert_eq!(pick_best(&recs, &[confirm(2, 101.0)]).unwrap().trial, 1);
        // Faster on the searched launch, wrong on another recorded one: never the best.
        let check = |recording: &str, outcome| crate::trials::LaunchCheck {
            recording: recording.into(),
            outcome,
        };
        let mut elsewhere = confirm(1, 80.0);
        elsewhere.launches = vec![
            check("k/2", confirm(1, 85.0).outcome),
            check(
                "k/3",
                Outcome::WrongOutput {
                    message: "region 0 differs".into(),
                },
            ),
        ];
        assert_eq!(elsewhere.failed_launch().unwrap().recording, "k/3");
        assert_eq!(elsewhere.ratio(), None);
        assert_eq!(pick_best(&recs, &[elsewhere.clone()]).unwrap().trial, 0);
        elsewhere.launches.pop();
        assert_eq!(elsewhere.ratio(), Some(0.8));
        assert_eq!(pick_best(&recs, &[elsewhere]).unwrap().trial, 1);
    }
}
