//! What ships of one search, and how fast it runs the searched launch: the number the report,
//! its summary and the programs' predictions lead with. The rule is `store::winner::shipment`,
//! the one `r3 apply` and `r3 export` build from (`apply::plan`), under the apply policy of the
//! environment, so that the report never promises more than a build gets.
//!
//! Per search rather than through `apply::plan::Source::plan`: a plan picks one search per
//! kernel (`R3_APPLY_GPU`, else the newest), while the report shows every GPU's.

use crate::candidate::LaunchValues;
use crate::store::trials::{Confirmation, TrialRecord};
use crate::store::winner::{self, Policy, Shipment};

/// What apply ships of a search: `winner::shipment`, except that a simulation's trials ship
/// only where the policy asks for them (`R3_APPLY_SIMULATED=1`), as apply's plan keeps them.
pub fn shipment<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
    policy: &Policy,
) -> Shipment<'a> {
    // Every trial of a search is simulated or none is: the GPU names the simulation.
    if recs.first().is_some_and(|r| r.simulated()) && !policy.simulated {
        return Shipment::default();
    }
    winner::shipment(recs, confirmed, policy)
}

/// What the searched launch runs once applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OnSearched {
    /// The shipped trial it runs: the generic code or a variant whose guard admits it; None:
    /// clang's code.
    pub trial: Option<u32>,
    /// Its speedup over -O3 there (the confirmed one where re-measured, as apply judged it);
    /// 1 for clang's code.
    pub speedup: f64,
}

/// The fastest shipped trial the searched launch takes. Every trial was measured on the
/// searched launch, which its guard therefore admits; with the recording at hand, the guard
/// is checked as the runtime checks it.
pub fn on_searched(
    ship: &Shipment,
    confirmed: &[Confirmation],
    searched: Option<&LaunchValues>,
) -> OnSearched {
    let taken = |t: &&TrialRecord| searched.is_none_or(|v| t.candidate.admits(v));
    ship.trials()
        .filter(taken)
        .filter_map(|t| Some((t.trial, winner::gain(t, confirmed)?)))
        .filter(|(_, s)| *s > 1.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(
            OnSearched {
                trial: None,
                speedup: 1.0,
            },
            |(trial, speedup)| OnSearched {
                trial: Some(trial),
                speedup,
            },
        )
}

/// The geometric mean of speedups; None for none.
pub fn geomean(speedups: impl IntoIterator<Item = f64>) -> Option<f64> {
    let (mut sum, mut n) = (0.0, 0usize);
    for s in speedups {
        sum += s.ln();
        n += 1;
    }
    (n > 0).then(|| (sum / n as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures;

    fn timed(trial: u32, gpu: &str, c: serde_json::Value, us: f64) -> TrialRecord {
        let mut r = fixtures::trial("k", gpu, trial, c, fixtures::valid(us, 100.0));
        r.ptx_hash = Some("h".into());
        r
    }

    fn confirm(trial: u32, us: f64) -> Confirmation {
        fixtures::confirmation(trial, fixtures::valid(us, 100.0))
    }

    #[test]
    fn what_ships_is_what_apply_ships_at_its_confirmed_speed() {
        use serde_json::json;
        let o3 = json!({"pipeline": "default<O3>"});
        let plain = json!({"pipeline": "default<O1>"});
        let recs = vec![
            timed(0, "NVIDIA H100", o3.clone(), 100.0),
            timed(1, "NVIDIA H100", plain.clone(), 50.0),
        ];
        let policy = Policy::default();
        // Re-measured slower than the search saw it: it ships at the confirmed speed.
        let c = [confirm(1, 80.0)];
        let on = on_searched(&shipment(&recs, &c, &policy), &c, None);
        assert_eq!(on.trial, Some(1));
        assert!((on.speedup - 1.25).abs() < 1e-12, "{on:?}");
        // Under R3_APPLY_MIN_SPEEDUP nothing ships: clang's code, 1.
        let strict = Policy {
            min_speedup: 1.5,
            ..Policy::default()
        };
        let on = on_searched(&shipment(&recs, &c, &strict), &c, None);
        assert_eq!((on.trial, on.speedup), (None, 1.0));
        // A simulation ships nothing unless the policy asks for simulated trials.
        let sim = vec![
            timed(0, "simulated: NVIDIA H100", o3, 100.0),
            timed(1, "simulated: NVIDIA H100", plain, 50.0),
        ];
        assert_eq!(shipment(&sim, &[], &policy), Shipment::default());
        let tests = Policy {
            simulated: true,
            ..Policy::default()
        };
        assert_eq!(
            on_searched(&shipment(&sim, &[], &tests), &[], None).speedup,
            2.0
        );
    }

    #[test]
    fn geomean_of_speedups() {
        assert_eq!(geomean([]), None);
        assert!((geomean([2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
    }
}
