//! Determinism: a candidate must give the same bytes on every run where the original does.
//!
//! A check compares one run with the recording, under the user's tolerance. A data race whose
//! effect stays inside the tolerance, or an uninitialised read that happens to hit the right
//! bytes, passes it. But the original code reproduced the recording bit for bit (the baseline
//! check is exact) and, when its timed runs keep doing so, the kernel is deterministic; so a
//! candidate whose own runs differ from its checked run is wrong, whatever the tolerance says.
//!
//! Every run of a timing is compared on the device with its code's checked run (no host sync,
//! no copy back), where that costs the timing nothing: see [`compare_after`].

use crate::store::l2::Regime;

/// Whether a run's outputs are compared with its reference right after it. In the cold regime
/// always: the L2 flush before the next run erases what the comparison read. In the warm
/// regime the next timed sample must find what the previous run left, so only where no sample
/// follows (during warm-up, and after the last run).
pub fn compare_after(l2: Regime, next_is_sample: bool) -> bool {
    l2 == Regime::Cold || !next_is_sample
}

/// The verdict on a candidate, given where the baseline's and the candidate's runs first
/// differed from their checked runs (None: never). Only a kernel whose original is
/// deterministic can demand it of a candidate.
pub fn verdict(baseline: Option<&str>, candidate: Option<&str>) -> Result<(), String> {
    match (baseline, candidate) {
        (None, Some(at)) => Err(format!(
            "not deterministic: {at}, while every run of the original gave the same bytes \
             (a data race, or a read of memory nothing wrote)"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_that_varies_is_wrong_only_where_the_original_does_not() {
        let at = Some("allocation 0x7000 word 12 differs from the checked run in run 3");
        let err = verdict(None, at).unwrap_err();
        assert!(
            err.starts_with("not deterministic: allocation 0x7000 word 12"),
            "{err}"
        );
        assert_eq!(verdict(None, None), Ok(()));
        assert_eq!(
            verdict(at, at),
            Ok(()),
            "a racy original cannot demand determinism"
        );
        assert_eq!(verdict(at, None), Ok(()));
    }

    #[test]
    fn comparisons_never_sit_before_a_warm_sample() {
        assert!(compare_after(Regime::Cold, true));
        assert!(compare_after(Regime::Cold, false));
        assert!(!compare_after(Regime::Warm, true));
        assert!(compare_after(Regime::Warm, false));
    }
}
