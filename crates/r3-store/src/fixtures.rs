//! Records built by hand, for the tests of every crate that reads the store (and simulations):
//! one definition of a valid trial, a timing and a confirmation, so that a field added to the
//! records changes one place.

use crate::outcome::{Outcome, TimeStats};
use crate::trials::{Confirmation, TrialRecord};

/// Ten samples of exactly `us`.
pub fn samples(us: f64) -> TimeStats {
    TimeStats {
        median_us: us,
        min_us: us,
        spread: 0.0,
        samples: 10,
        raced: false,
    }
}

/// A valid outcome: `us` against the baseline's `baseline_us`, ten samples each.
pub fn valid(us: f64, baseline_us: f64) -> Outcome {
    Outcome::Valid {
        time: samples(us),
        baseline: samples(baseline_us),
    }
}

/// Trial `trial` of `kernel` on `gpu`: `candidate` (as JSON) with `outcome`; its code's hash is
/// `h<trial>`, the driver CUDA 13.0, the strategy bo in batches of one, seed and times zero.
pub fn trial(
    kernel: &str,
    gpu: &str,
    trial: u32,
    candidate: serde_json::Value,
    outcome: Outcome,
) -> TrialRecord {
    let mut r: TrialRecord = serde_json::from_value(serde_json::json!({
        "format": 1, "trial": trial, "kernel": kernel, "gpu": gpu, "driver": "CUDA 13.0",
        "r3_version": "0", "strategy": "bo", "seed": 0, "batch": 1, "candidate": candidate,
        "ptx_hash": format!("h{trial}"), "outcome": {"status": "compile_error", "message": ""},
        "passes_ms": 0.0, "codegen_ms": 0.0, "measure_ms": 0.0, "finished_unix_ms": 0
    }))
    .expect("a hand-built trial record parses");
    r.outcome = outcome;
    r
}

/// A re-measurement of `trial` with `outcome`, on the searched launch alone.
pub fn confirmation(trial: u32, outcome: Outcome) -> Confirmation {
    Confirmation {
        format: 1,
        trial,
        outcome,
        finished_unix_ms: 0,
        launches: Vec::new(),
        context_ratios: Vec::new(),
        in_program: Vec::new(),
        unconfirmed: None,
    }
}

/// A judge's valid verdict on a rewrite: `speedup` over the reference it was judged against
/// (10 µs against 10 × `speedup`), measured with `candidate`, that reference itself
/// `reference_speedup` over -O3.
pub fn judged_valid(
    speedup: f64,
    candidate: crate::candidate::Candidate,
    reference_speedup: f64,
) -> crate::attempts::Verdict {
    crate::attempts::Verdict::Valid {
        speedup,
        time_us: 10.0,
        reference_us: 10.0 * speedup,
        pipeline: "-O3".into(),
        candidate: Some(candidate),
        trials: 1,
        simulated: false,
        values: Default::default(),
        reference_speedup: Some(reference_speedup),
        checked: Vec::new(),
    }
}

/// A valid verdict of `speedup` over its reference, with no knob values.
pub fn valid_verdict(speedup: f64) -> crate::attempts::Verdict {
    crate::attempts::Verdict::Valid {
        speedup,
        time_us: 1.0,
        reference_us: speedup,
        pipeline: "O3".into(),
        candidate: None,
        trials: 8,
        simulated: false,
        values: crate::attempts::Values::new(),
        reference_speedup: None,
        checked: Vec::new(),
    }
}

/// Attempt `attempt` of `kernel`'s log in `store`: a rules template proposed, then `verdict`
/// on `gpu`.
pub fn judged_attempt(
    store: &crate::Store,
    kernel: &str,
    attempt: u32,
    gpu: &str,
    verdict: crate::attempts::Verdict,
) {
    judged_rule(
        store,
        kernel,
        (attempt, "shared-tiling"),
        gpu,
        Some(verdict),
    );
}

/// Attempt `attempt` of `kernel`'s log in `store`: `label` proposed by the rules, then
/// `verdict` on `gpu`, or, where None, refused.
pub fn judged_rule(
    store: &crate::Store,
    kernel: &str,
    (attempt, label): (u32, &str),
    gpu: &str,
    verdict: Option<crate::attempts::Verdict>,
) {
    use crate::attempts::{Event, What};
    let mut log = store.open_attempts(&kernel.into()).unwrap();
    let event = |what| Event {
        format: 1,
        attempt,
        unix_ms: 0,
        what,
    };
    let proposed = What::Proposed {
        parent: None,
        proposer: "rules".into(),
        label: label.into(),
        repair_of: None,
        prompt_sha: None,
        answer: None,
        tokens: 0,
        rewrite: String::new(),
        requires: Vec::new(),
    };
    log.append(&event(proposed)).unwrap();
    let outcome = match verdict {
        Some(verdict) => What::Judged {
            gpu: gpu.into(),
            verdict,
        },
        None => What::Refused {
            reason: "made up".into(),
        },
    };
    log.append(&event(outcome)).unwrap();
}
