//! After a search: the winner measured once more against the baseline, and run on every other
//! recorded launch of the kernel, whose outputs it must reproduce too. The best of many noisy
//! measurements is biased low, and a pipeline can be right for the input the search replayed
//! and wrong for another (a loop count, an alias, a block size the launch bounds forbid); in
//! either case the store keeps -O3 (`store::trials::pick_best`).

use crate::apply::plan::{shippable_best, Policy};
use crate::replay::{Evaluator, Outcome};
use crate::store::trials::{Confirmation, LaunchCheck, TrialRecord};
use crate::store::{Store, StoreError};

/// An evaluator of another recorded launch of the same kernel, or why there is none.
pub type OtherLaunch<E> = (String, Result<E, String>);

/// Confirms the best trial of `kernel` (and the trial apply would ship, where that is another)
/// and writes each confirmation beside the trials. Returns what to tell the user, one line each.
pub fn confirm_best<E: Evaluator>(
    store: &Store,
    searched: &E,
    others: &[OtherLaunch<E>],
    kernel: &str,
) -> Result<Vec<String>, StoreError> {
    let gpu = searched.device().gpu;
    let Some(best) = store.best_trial(kernel, &gpu)? else {
        return Ok(Vec::new());
    };
    if best.trial == 0 {
        return Ok(Vec::new());
    }
    let mut lines = Vec::new();
    let Some(c) = confirm_trial(store, searched, others, kernel, &best)? else {
        return Ok(lines);
    };
    lines.push(describe(&c, "confirmed"));
    let path = store.trials_path(kernel, &gpu);
    let (recs, confirmed) = (store.trials(kernel, &gpu)?, store.confirmations(&path)?);
    let Some(ships) = shippable_best(&recs, &confirmed, &Policy::from_env()) else {
        return Ok(lines);
    };
    if ships.trial != 0 && ships.trial != best.trial {
        if let Some(c) = confirm_trial(store, searched, others, kernel, ships)? {
            lines.push(describe(
                &c,
                "for apply (the best without launch bounds or block size)",
            ));
        }
    }
    Ok(lines)
}

/// Measures one trial's candidate again against the baseline on the searched launch, runs it
/// on every other one, and records the result. None when it no longer lowers.
pub fn confirm_trial<E: Evaluator>(
    store: &Store,
    searched: &E,
    others: &[OtherLaunch<E>],
    kernel: &str,
    trial: &TrialRecord,
) -> Result<Option<Confirmation>, StoreError> {
    let Ok(lowered) = searched.lower(kernel, &trial.candidate) else {
        return Ok(None);
    };
    let Some(outcome) = searched
        .measure(kernel, std::slice::from_ref(&lowered))
        .pop()
    else {
        return Ok(None);
    };
    // No need to run the others where the searched launch already refutes the trial.
    let launches = match outcome.ratio() {
        Some(r) if r < 1.0 => others
            .iter()
            .map(|(recording, ev)| LaunchCheck {
                recording: recording.clone(),
                outcome: match ev {
                    Ok(ev) => ev
                        .measure(kernel, std::slice::from_ref(&lowered))
                        .pop()
                        .unwrap_or(Outcome::Crashed {
                            message: "the worker returned no outcome".into(),
                        }),
                    Err(why) => Outcome::Crashed {
                        message: why.clone(),
                    },
                },
            })
            .collect(),
        _ => Vec::new(),
    };
    let confirmation = Confirmation {
        format: 1,
        trial: trial.trial,
        outcome,
        finished_unix_ms: now_ms(),
        launches,
    };
    store.write_confirmation(kernel, &searched.device().gpu, &confirmation)?;
    Ok(Some(confirmation))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One line: the re-measured speedup and the launches it held on, or why it was not confirmed.
pub fn describe(c: &Confirmation, what: &str) -> String {
    let of_o3 = |o: &Outcome| {
        o.ratio()
            .map_or_else(|| o.in_words().to_owned(), |r| format!("{r:.4}x of -O3"))
    };
    let launches = if c.launches.is_empty() {
        "the searched launch (the only one recorded)".to_owned()
    } else {
        format!("{} recorded launches", c.launches.len() + 1)
    };
    if let Some(bad) = c.failed_launch() {
        return format!(
            "not {what}: trial {} {} on recorded launch {} (fix nothing: r3 keeps -O3 for this kernel); {}",
            c.trial,
            bad.outcome.in_words(),
            bad.recording,
            bad.outcome.detail().unwrap_or_default()
        );
    }
    match (&c.outcome, c.ratio()) {
        (Outcome::Valid { time, baseline }, Some(r)) if r < 1.0 => format!(
            "{what}: {r:.4}x of -O3 (trial {} re-measured: {:.2} us vs {:.2} us, {} samples), outputs right on {launches}{}",
            c.trial,
            time.median_us,
            baseline.median_us,
            time.samples,
            other_ratios(c)
        ),
        _ => format!(
            "not {what}: trial {} re-measured as {}; the -O3 baseline is kept",
            c.trial,
            of_o3(&c.outcome)
        ),
    }
}

/// ` (others: 0.61x, 0.70x of -O3)`: what the trial gives on the other launches.
fn other_ratios(c: &Confirmation) -> String {
    let rs: Vec<String> = c
        .launches
        .iter()
        .filter_map(|l| l.outcome.ratio())
        .map(|r| format!("{r:.2}x"))
        .collect();
    if rs.is_empty() {
        String::new()
    } else {
        format!(" (there: {} of -O3)", rs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::Candidate;
    use crate::replay::{Lowered, TimeStats};

    /// A launch where each candidate's time over -O3 is fixed, and where the candidates whose
    /// pipeline is in `wrong` give wrong output.
    struct Launch {
        ratio: f64,
        wrong: Vec<&'static str>,
    }

    impl Evaluator for Launch {
        fn device(&self) -> crate::replay::Device {
            crate::replay::Device {
                gpu: "GPU (sm_90)".into(),
                driver: "CUDA 13.0".into(),
                id: None,
            }
        }
        fn lower(&self, _: &str, c: &Candidate) -> Result<Lowered, Outcome> {
            Ok(Lowered {
                candidate: c.clone(),
                ptx: String::new(),
                ptx_hash: c.pipeline.clone(),
                stats: Default::default(),
                passes_ms: 0.0,
                codegen_ms: 0.0,
                ir_instructions: 0,
            })
        }
        fn measure(&self, _: &str, batch: &[Lowered]) -> Vec<Outcome> {
            let ts = |us| TimeStats {
                median_us: us,
                min_us: us,
                spread: 0.0,
                samples: 5,
            };
            batch
                .iter()
                .map(
                    |l| match self.wrong.contains(&l.candidate.pipeline.as_str()) {
                        true => Outcome::WrongOutput {
                            message: "region 1 differs at byte 64".into(),
                        },
                        false => Outcome::Valid {
                            time: ts(100.0 * self.ratio),
                            baseline: ts(100.0),
                        },
                    },
                )
                .collect()
        }
    }

    fn searched_store(best: &str) -> (tempfile::TempDir, Store, TrialRecord) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut log = store.open_trials("k", "GPU (sm_90)").unwrap();
        let mut best_rec = None;
        for (trial, pipeline, ratio) in [(0, "default<O3>", 1.0), (1, best, 0.5)] {
            let mut r: TrialRecord = serde_json::from_value(serde_json::json!({
                "format": 1, "trial": trial, "kernel": "k", "gpu": "GPU (sm_90)",
                "driver": "CUDA 13.0", "r3_version": "0", "strategy": "bo", "seed": 0,
                "batch": 1, "candidate": {"pipeline": pipeline}, "ptx_hash": pipeline,
                "outcome": {"status": "compile_error", "message": ""},
                "passes_ms": 0.0, "codegen_ms": 0.0, "measure_ms": 0.0, "finished_unix_ms": 0
            }))
            .unwrap();
            let ts = |us| TimeStats {
                median_us: us,
                min_us: us,
                spread: 0.0,
                samples: 5,
            };
            r.outcome = Outcome::Valid {
                time: ts(100.0 * ratio),
                baseline: ts(100.0),
            };
            log.append(&r).unwrap();
            best_rec = Some(r);
        }
        (dir, store, best_rec.unwrap())
    }

    #[test]
    fn a_winner_wrong_on_another_recorded_launch_is_not_confirmed_and_o3_is_kept() {
        let (_dir, store, _) = searched_store("function(licm)");
        let searched = Launch {
            ratio: 0.6,
            wrong: vec![],
        };
        let others = vec![
            (
                "k/2".to_owned(),
                Ok(Launch {
                    ratio: 0.7,
                    wrong: vec![],
                }),
            ),
            (
                "k/3".to_owned(),
                Ok(Launch {
                    ratio: 0.7,
                    wrong: vec!["function(licm)"],
                }),
            ),
        ];
        let lines = confirm_best(&store, &searched, &others, "k").unwrap();
        assert!(
            lines[0]
                .starts_with("not confirmed: trial 1 gives wrong output on recorded launch k/3"),
            "{lines:?}"
        );
        assert!(lines[0].contains("region 1 differs"), "{lines:?}");
        assert_eq!(
            store.best_trial("k", "GPU (sm_90)").unwrap().unwrap().trial,
            0
        );
    }

    #[test]
    fn a_winner_right_on_every_launch_is_confirmed_and_says_where() {
        let (_dir, store, _) = searched_store("function(licm)");
        let searched = Launch {
            ratio: 0.6,
            wrong: vec![],
        };
        let others = vec![(
            "k/2".to_owned(),
            Ok(Launch {
                ratio: 0.7,
                wrong: vec![],
            }),
        )];
        let lines = confirm_best(&store, &searched, &others, "k").unwrap();
        assert!(
            lines[0].starts_with("confirmed: 0.6000x of -O3"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("outputs right on 2 recorded launches (there: 0.70x of -O3)"),
            "{lines:?}"
        );
        let path = store.trials_path("k", "GPU (sm_90)");
        let c = store.confirmations(&path).unwrap();
        assert_eq!(c[0].launches.len(), 1);
        assert_eq!(
            store.best_trial("k", "GPU (sm_90)").unwrap().unwrap().trial,
            1
        );
    }

    #[test]
    fn a_launch_that_cannot_be_replayed_refuses_the_winner_naming_it() {
        let (_dir, store, _) = searched_store("function(licm)");
        let searched = Launch {
            ratio: 0.6,
            wrong: vec![],
        };
        let others: Vec<OtherLaunch<Launch>> =
            vec![("k/9".to_owned(), Err("prologue.bin: damaged".to_owned()))];
        let lines = confirm_best(&store, &searched, &others, "k").unwrap();
        assert!(
            lines[0].contains("crashed on recorded launch k/9"),
            "{lines:?}"
        );
        assert!(lines[0].contains("prologue.bin: damaged"), "{lines:?}");
        assert_eq!(
            store.best_trial("k", "GPU (sm_90)").unwrap().unwrap().trial,
            0
        );
    }
}
