//! Which L2 state replay measures a kernel in.
//!
//! A replay restores the launch's inputs before every timed run. With the L2 flushed first
//! ("cold") every input comes from HBM; without ("warm") the inputs the previous run read are
//! still cached, as in a program that runs the kernel on data it has just produced. Which one
//! the program sees decides what a candidate is worth: a kernel whose working set fits in L2
//! can run 2x faster warm, and a search that measures cold then optimizes memory traffic the
//! program never pays for.
//!
//! The recording runtime times the program's later launches identical to a recorded one
//! (`natural.json`: the program's own cache state). Under `--l2 auto` (the default) replay
//! times the -O3 baseline in both states and measures in the one whose time is nearer the
//! program's, when the recording ran on the same GPU model; otherwise it stays cold (the state
//! a replay can reproduce exactly, and the pessimistic one for memory-bound code).

use crate::store::l2::{Choice, Regime};

/// `--l2`: a fixed regime, or the program's (auto).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Policy {
    #[default]
    Auto,
    Fixed(Regime),
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        match s {
            "auto" => Ok(Policy::Auto),
            "cold" => Ok(Policy::Fixed(Regime::Cold)),
            "warm" => Ok(Policy::Fixed(Regime::Warm)),
            _ => Err(format!("--l2 takes auto, warm or cold, not '{s}'")),
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Policy::Auto => f.write_str("auto"),
            Policy::Fixed(r) => r.fmt(f),
        }
    }
}

/// What the program's recording says about its cache state.
#[derive(Debug, Clone, Default)]
pub struct Program<'a> {
    /// Times of the later identical launches (ms), `Recording::natural_ms`.
    pub natural_ms: &'a [f64],
    /// The GPU it ran on, when the recording names it.
    pub gpu: Option<&'a str>,
}

/// Whether `policy` times the baseline in both states before it chooses: under auto, for
/// every kernel shorter than [`STATE_IS_NOISE_US`] a launch as recorded (`launch_us`; 0 where
/// unknown) (the report shows both where they differ, whatever the program's times say).
pub fn needs_both(policy: Policy, launch_us: f64) -> bool {
    policy == Policy::Auto && launch_us < STATE_IS_NOISE_US
}

/// A launch this long (µs) or longer reads far more than L2 holds (50–60 MB on an H100 or
/// H200, a few tens of µs of its bandwidth): the state L2 starts in is within its run-to-run
/// noise, and timing the baseline in both states, about eight runs, would buy nothing (a 1 s
/// kernel's 8 s, inside a deadline).
pub const STATE_IS_NOISE_US: f64 = 10_000.0;

/// Why the regime of a launch of `launch_us` is cold without timing both states.
pub fn long_reason(launch_us: f64) -> String {
    format!(
        "a launch of {:.0} ms: the state L2 starts in is within its noise",
        launch_us / 1e3
    )
}

/// The regime to measure in. `both` holds the baseline's (cold, warm) replay times in µs when
/// [`needs_both`] asked for them.
pub fn choose(
    policy: Policy,
    program: &Program,
    replay_gpu: &str,
    both: Option<(f64, f64)>,
) -> Choice {
    let natural_us = median(program.natural_ms).map(|ms| ms * 1e3);
    let fixed = |regime: Regime, reason: String| Choice {
        policy: policy.to_string(),
        regime,
        reason,
        natural_us,
        cold_us: both.map(|b| b.0),
        warm_us: both.map(|b| b.1),
    };
    if let Policy::Fixed(r) = policy {
        return fixed(r, format!("--l2 {r}"));
    }
    let natural = match comparable(program, replay_gpu) {
        Ok(us) => us,
        Err(why) => return fixed(Regime::Cold, why),
    };
    let Some((cold, warm)) = both.filter(|(c, w)| *c > 0.0 && *w > 0.0) else {
        return fixed(
            Regime::Cold,
            "the baseline was not timed in both states".into(),
        );
    };
    let nearer_warm = (natural / warm).ln().abs() < (natural / cold).ln().abs();
    let regime = if nearer_warm {
        Regime::Warm
    } else {
        Regime::Cold
    };
    fixed(
        regime,
        format!("the program's own launches ({natural:.1} µs) are nearer the {regime} replay time"),
    )
}

/// The program's median time in µs, when it is comparable with a replay on `replay_gpu`.
fn comparable(program: &Program, replay_gpu: &str) -> Result<f64, String> {
    let Some(ms) = median(program.natural_ms) else {
        return Err("the program launched it only once with these inputs".into());
    };
    match program.gpu {
        Some(g) if g == replay_gpu => Ok(ms * 1e3),
        Some(g) => Err(format!("recorded on {g}, replayed on {replay_gpu}")),
        None => Err("the recording does not name its GPU".into()),
    }
}

fn median(v: &[f64]) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|t| t.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    (!s.is_empty()).then(|| s[s.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: &str = "NVIDIA H100 80GB HBM3";

    fn program(natural_ms: &[f64]) -> Program<'_> {
        Program {
            natural_ms,
            gpu: Some(H100),
        }
    }

    #[test]
    fn auto_follows_the_programs_own_launches() {
        // 783 µs cold, 360 µs warm; the program runs it in 355 µs: warm.
        let p = program(&[0.350, 0.355, 0.362]);
        assert!(needs_both(Policy::Auto, 355.0));
        // A launch of 10 ms or more is not timed in both states: L2 cannot tell them apart.
        assert!(!needs_both(Policy::Auto, 1.0e6));
        assert!(long_reason(1.0e6).contains("1000 ms"));
        let c = choose(Policy::Auto, &p, H100, Some((783.0, 360.0)));
        assert_eq!(c.regime, Regime::Warm, "{c:?}");
        assert_eq!(c.natural_us, Some(355.0));
        assert!(c.states_differ());
        // The program's launches find their inputs evicted: cold.
        let p = program(&[0.79, 0.80, 0.81]);
        let c = choose(Policy::Auto, &p, H100, Some((783.0, 360.0)));
        assert_eq!(c.regime, Regime::Cold, "{c:?}");
    }

    #[test]
    fn auto_stays_cold_without_comparable_program_times() {
        let once = program(&[]);
        let c = choose(Policy::Auto, &once, H100, Some((783.0, 360.0)));
        assert_eq!(c.regime, Regime::Cold);
        assert!(c.reason.contains("only once"), "{}", c.reason);
        let other = Program {
            natural_ms: &[0.3],
            gpu: Some("NVIDIA H200"),
        };
        let c = choose(Policy::Auto, &other, H100, Some((783.0, 360.0)));
        assert_eq!(c.regime, Regime::Cold);
        assert!(c.reason.contains("recorded on NVIDIA H200"), "{}", c.reason);
        let unnamed = Program {
            natural_ms: &[0.3],
            gpu: None,
        };
        assert_eq!(
            choose(Policy::Auto, &unnamed, H100, Some((783.0, 360.0))).regime,
            Regime::Cold
        );
        // Comparable program times, but the baseline could not be timed in both states.
        let c = choose(Policy::Auto, &program(&[0.355]), H100, None);
        assert_eq!(c.regime, Regime::Cold);
        assert!(c.reason.contains("not timed in both"), "{}", c.reason);
    }

    #[test]
    fn a_fixed_policy_is_kept_and_needs_no_calibration() {
        let p = program(&[0.35]);
        for (arg, regime) in [("warm", Regime::Warm), ("cold", Regime::Cold)] {
            let policy: Policy = arg.parse().unwrap();
            assert!(!needs_both(policy, 355.0));
            let c = choose(policy, &p, H100, None);
            assert_eq!(
                (c.regime, c.reason.as_str()),
                (regime, &*format!("--l2 {arg}"))
            );
        }
        assert!("hot"
            .parse::<Policy>()
            .unwrap_err()
            .contains("auto, warm or cold"));
    }

    #[test]
    fn both_states_are_shown_only_when_they_differ_by_more_than_ten_percent() {
        let c = |cold: f64, warm: f64| Choice {
            policy: "auto".into(),
            regime: Regime::Cold,
            reason: String::new(),
            natural_us: None,
            cold_us: Some(cold),
            warm_us: Some(warm),
        };
        assert!(!c(105.0, 100.0).states_differ());
        assert!(c(111.0, 100.0).states_differ());
        assert!(!c(100.0, 0.0).states_differ());
    }
}
