//! After a search: the winner measured once more against the baseline, and run on every other
//! recorded launch of the kernel, whose outputs it must reproduce too. The best of many noisy
//! measurements is biased low, and a pipeline can be right for the input the search replayed
//! and wrong for another (a loop count, an alias, a block size the launch bounds forbid); in
//! either case the store keeps -O3 (`store::winner::pick_best`).
//!
//! The re-measurement runs in fresh workers, each a new process, CUDA context and placement of
//! the recorded data in physical memory, never in the search's own: a candidate's time can
//! depend on where its data lies, and the search's worker is the one in which it looked best.
//! The least favourable of them is kept.

use crate::candidate::LaunchValues;
use crate::kernel::TrialsKey;
use crate::lower::Lowered;
use crate::replay::Evaluator;
use crate::store::outcome::Outcome;
use crate::store::trials::{Confirmation, LaunchCheck, TrialRecord};
use crate::store::winner::{self, Policy};
use crate::store::{Store, StoreError};
use std::time::Instant;

/// Another recorded launch of the same kernel: its recording, what it passed (for guards; None
/// when unreadable), and an evaluator of it or why there is none.
pub type OtherLaunch<E> = (String, Option<LaunchValues>, Result<E, String>);

/// Fresh contexts the winner is re-measured in. Each worker maps the recording onto physical
/// memory of its own, and some code is fast at one placement of its data and slow at another:
/// on an H100 (2026-11-25, bench/RESULTS.md) oscillators at codegen level 0 ran at 0.94x of
/// -O3 in four processes of six and at 1.13-1.16x in two, at 1.04-1.21x on eight placements in
/// one process, and ran 2-10% slower than -O3 in its program after its search's worker had found it
/// 1.06x faster. -O3 itself moved by 1.5% over those placements.
pub const CONTEXTS: usize = 3;
/// A confirmation ends after its first fresh context where that context settles what ships:
/// the candidate this much faster than -O3 there, or more…
pub const DECISIVE: f64 = 1.3;
/// …and that context within this fraction of what its search measured (its placement did not
/// move it). The oscillators above moved 6–21% with placement, all of them under 1.3×: the
/// three contexts are kept for every candidate near the shipping threshold, and for any whose
/// fresh context disagrees with its search. A 1 s kernel at 15× had paid for three contexts of
/// two codes, about 40 s of a 300 s deadline, to learn nothing a fourth of that did not.
pub const AGREE: f64 = 0.10;

/// A search's speedup from which its winner is expected to be confirmed in one context: the
/// first context's [`DECISIVE`], with room for it to measure [`AGREE`] less.
pub fn clear_winner() -> f64 {
    DECISIVE * (1.0 + AGREE)
}

/// Contexts a confirmation of a candidate at `speedup` is expected to take (for its price).
pub fn contexts_expected(speedup: f64) -> usize {
    if speedup >= clear_winner() {
        1
    } else {
        CONTEXTS
    }
}

/// Whether the first fresh context's outcome settles the confirmation, given what the search
/// measured (`searched`, a time ratio to -O3).
pub fn settled_in_one_context(first: &Outcome, searched: Option<f64>) -> bool {
    match (first.ratio(), searched) {
        (Some(r), Some(s)) if r > 0.0 && s > 0.0 => {
            1.0 / r >= DECISIVE && (r / s - 1.0).abs() <= AGREE
        }
        _ => false,
    }
}

/// Confirms the best trial of `kernel` (and each other trial apply would ship: the generic code
/// and the variants) and writes each confirmation beside the trials. Returns what to tell the
/// user, one line each. The trials that would ship if the best holds up are re-measured in the
/// same fresh contexts as the best, each context opened once for all of them: opening one (its
/// process, CUDA context and recording) is most of what a short kernel's confirmation costs.
pub fn confirm_best<E: Evaluator>(
    store: &Store,
    searched: &E,
    others: &[OtherLaunch<E>],
    kernel: &TrialsKey,
) -> Result<Vec<String>, StoreError> {
    confirm_best_until(store, searched, others, kernel, None)
}

/// [`confirm_best`], opening no fresh context after `until`: a confirmation that needs one more
/// then is not made, and its trial is withheld from apply, unconfirmed
/// (`Confirmation::unconfirmed`). A deadline's confirmations end by its grace and one context:
/// kt_concordance's near-tie, priced as a clear winner's one context, took three of 17-19 s each
/// after the deadline (H200, run Y22, 2026-12-03).
pub fn confirm_best_until<E: Evaluator>(
    store: &Store,
    searched: &E,
    others: &[OtherLaunch<E>],
    kernel: &TrialsKey,
    until: Option<Instant>,
) -> Result<Vec<String>, StoreError> {
    let gpu = searched.device().gpu;
    let Some((best, recs)) = best_over_o3(store, kernel, &gpu)? else {
        return Ok(Vec::new());
    };
    let path = store.trials_path(kernel, &gpu);
    let together = shipped_with(&recs, &store.confirmations(&path)?, &best);
    let mut measured = measure_together(searched, kernel, &best, &together, until);
    let mut lines = Vec::new();
    let Some(c) = confirm_trial_with(store, searched, others, kernel, &best, &mut measured, until)?
    else {
        return Ok(lines);
    };
    lines.push(describe(&c, "confirmed"));
    // Each confirmation can change what ships (one that does not hold up gives way), so the
    // shipment is read again after each, until every trial in it is confirmed (each at most
    // once here, whatever the file says).
    let mut tried = std::collections::HashSet::from([best.trial]);
    loop {
        let confirmed = store.confirmations(&path)?;
        let ships = winner::shipment(&recs, &confirmed, &any_build());
        let Some(next) = ships.trials().find(|t| {
            winner::confirmation_of(&confirmed, t.trial).is_none() && !tried.contains(&t.trial)
        }) else {
            return Ok(lines);
        };
        tried.insert(next.trial);
        let what = if ships.generic.is_some_and(|g| g.trial == next.trial) {
            "for apply (the best that every launch may run)"
        } else {
            "for apply (a variant, behind its guard)"
        };
        match confirm_trial_with(store, searched, others, kernel, next, &mut measured, until)? {
            Some(c) => lines.push(describe(&c, what)),
            None => return Ok(lines),
        }
    }
}

/// The speedups over -O3 of the trials apply would ship beside `kernel`'s best on `gpu` were
/// the best confirmed as its search measured it, not confirmed yet: the other codes
/// [`confirm_best`] measures with it (none where the best is -O3's).
pub fn beside_best(store: &Store, kernel: &TrialsKey, gpu: &str) -> Result<Vec<f64>, StoreError> {
    let Some((best, recs)) = best_over_o3(store, kernel, gpu)? else {
        return Ok(Vec::new());
    };
    let path = store.trials_path(kernel, gpu);
    let together = shipped_with(&recs, &store.confirmations(&path)?, &best);
    Ok(together
        .iter()
        .filter_map(|t| t.outcome.ratio())
        .filter(|r| *r > 0.0)
        .map(|r| 1.0 / r)
        .collect())
}

/// `kernel`'s best trial on `gpu` and all its trials, where the best is not -O3's (nothing to
/// confirm there).
fn best_over_o3(
    store: &Store,
    kernel: &TrialsKey,
    gpu: &str,
) -> Result<Option<(TrialRecord, Vec<TrialRecord>)>, StoreError> {
    match store.best_trial(kernel, gpu)? {
        Some(best) if best.trial != 0 => Ok(Some((best, store.trials(kernel, gpu)?))),
        _ => Ok(None),
    }
}

/// Whatever could ship: a build may withhold block sizes, but decides after the search.
fn any_build() -> Policy {
    Policy {
        block_size: winner::BlockSizeOptIn::All,
        ..Policy::from_env()
    }
}

/// The trials other than `best` that would ship beside it were it confirmed as its search
/// measured it: the ones worth re-measuring in its fresh contexts.
fn shipped_with<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
    best: &TrialRecord,
) -> Vec<&'a TrialRecord> {
    let mut assumed = confirmed.to_vec();
    assumed.push(Confirmation {
        format: 1,
        trial: best.trial,
        outcome: best.outcome.clone(),
        finished_unix_ms: 0,
        launches: Vec::new(),
        context_ratios: Vec::new(),
        in_program: Vec::new(),
        unconfirmed: None,
    });
    winner::shipment(recs, &assumed, &any_build())
        .trials()
        .filter(|t| t.trial != best.trial && winner::confirmation_of(confirmed, t.trial).is_none())
        .collect()
}

/// Each trial's code and its outcomes in the fresh contexts it was re-measured in, by trial.
type Measured = std::collections::HashMap<u32, (Lowered, Contexts)>;

/// The outcomes of candidates re-measured in fresh contexts: one per code, per context; whether
/// the contexts were fresh; and why they stopped short of what a confirmation needs, if so.
#[derive(Debug, Clone, Default)]
struct Contexts {
    outcomes: Vec<Vec<Outcome>>,
    fresh: bool,
    cut: Option<String>,
}

/// `best` and `together` lowered and re-measured in the same fresh contexts (one context settles
/// them only where it settles each, by its search's ratio); a trial that no longer lowers is
/// left out.
fn measure_together<E: Evaluator>(
    searched: &E,
    kernel: &TrialsKey,
    best: &TrialRecord,
    together: &[&TrialRecord],
    until: Option<Instant>,
) -> Measured {
    let lowered: Vec<(u32, Option<f64>, Lowered)> = std::iter::once(best)
        .chain(together.iter().copied())
        .filter_map(|t| {
            let l = searched.lower(&t.candidate).ok()?;
            Some((t.trial, t.outcome.ratio(), l))
        })
        .collect();
    if lowered.first().is_none_or(|(t, _, _)| *t != best.trial) {
        return Measured::new();
    }
    let codes: Vec<Lowered> = lowered.iter().map(|(_, _, l)| l.clone()).collect();
    let ratios: Vec<Option<f64>> = lowered.iter().map(|(_, r, _)| *r).collect();
    let line = std::iter::once(best)
        .chain(together.iter().copied())
        .map(|t| shipping_line(&t.candidate))
        .fold(f64::INFINITY, f64::min);
    let all = measure_in_fresh_contexts(searched, kernel, &codes, &ratios, line, until);
    lowered
        .into_iter()
        .enumerate()
        .map(|(i, (trial, _, l))| {
            let outcomes = all
                .outcomes
                .iter()
                .filter_map(|c| c.get(i).cloned())
                .map(|o| vec![o])
                .collect();
            (
                trial,
                (
                    l,
                    Contexts {
                        outcomes,
                        ..all.clone()
                    },
                ),
            )
        })
        .collect()
}

/// Withholds `kernel`'s best on `gpu` from apply without re-measuring it, for `why` (a
/// near-tie whose confirmation did not fit in the deadline): its confirmation file says so
/// (`Confirmation::unconfirmed`), and -O3 ships for the kernel, or nvcc's code where that is
/// faster. The line to tell the user; None where its best is -O3 already.
pub fn withhold_best(
    store: &Store,
    kernel: &TrialsKey,
    gpu: &str,
    why: &str,
) -> Result<Option<String>, StoreError> {
    let Some(best) = store.best_trial(kernel, gpu)? else {
        return Ok(None);
    };
    if best.trial == 0 {
        return Ok(None);
    }
    withhold_trial(store, kernel, gpu, &best, why)?;
    let searched = best
        .outcome
        .ratio()
        .map_or_else(String::new, |r| format!(" ({} in its search)", times(r)));
    // Where nvcc's code is faster than -O3, it is the pick now (`winner::pick_best`).
    let ships = match store.best_trial(kernel, gpu)? {
        Some(t) if t.candidate.is_nvcc() => {
            format!("nvcc's code (trial {}) is its pick now", t.trial)
        }
        _ => "-O3 ships for it".to_owned(),
    };
    Ok(Some(format!(
        "not confirmed: trial {}{searched}: {why}; {ships}",
        best.trial
    )))
}

/// Withholds `trial` of `kernel` on `gpu` from apply, unconfirmed, for `why`: its confirmation
/// file says so (`Confirmation::unconfirmed`). The confirmation written.
fn withhold_trial(
    store: &Store,
    kernel: &TrialsKey,
    gpu: &str,
    trial: &TrialRecord,
    why: &str,
) -> Result<Confirmation, StoreError> {
    let c = Confirmation {
        format: 1,
        trial: trial.trial,
        outcome: trial.outcome.clone(),
        finished_unix_ms: now_ms(),
        launches: Vec::new(),
        context_ratios: Vec::new(),
        in_program: Vec::new(),
        unconfirmed: Some(why.to_owned()),
    };
    store.write_confirmation(kernel, gpu, &c)?;
    Ok(c)
}

/// Measures one trial's candidate again against the baseline on the searched launch, runs it
/// on every other one, and records the result. None when it no longer lowers.
pub fn confirm_trial<E: Evaluator>(
    store: &Store,
    searched: &E,
    others: &[OtherLaunch<E>],
    kernel: &TrialsKey,
    trial: &TrialRecord,
) -> Result<Option<Confirmation>, StoreError> {
    confirm_trial_with(
        store,
        searched,
        others,
        kernel,
        trial,
        &mut Measured::new(),
        None,
    )
}

/// [`confirm_trial`], with the outcomes of its fresh contexts taken from `measured` where it
/// was re-measured there already (beside the best: [`measure_together`]).
fn confirm_trial_with<E: Evaluator>(
    store: &Store,
    searched: &E,
    others: &[OtherLaunch<E>],
    kernel: &TrialsKey,
    trial: &TrialRecord,
    measured: &mut Measured,
    until: Option<Instant>,
) -> Result<Option<Confirmation>, StoreError> {
    let (lowered, contexts) = match measured.remove(&trial.trial) {
        Some(m) if !m.1.outcomes.is_empty() || m.1.cut.is_some() => m,
        _ => {
            let Ok(lowered) = searched.lower(&trial.candidate) else {
                return Ok(None);
            };
            let contexts = measure_in_fresh_contexts(
                searched,
                kernel,
                std::slice::from_ref(&lowered),
                &[trial.outcome.ratio()],
                shipping_line(&trial.candidate),
                until,
            );
            (lowered, contexts)
        }
    };
    if let Some(why) = contexts.cut {
        return withhold_trial(store, kernel, &searched.device().gpu, trial, &why).map(Some);
    }
    let fresh = contexts.fresh;
    let outcomes: Vec<Outcome> = contexts
        .outcomes
        .into_iter()
        .filter_map(|mut c| c.pop())
        .collect();
    let context_ratios = if fresh {
        outcomes.iter().map(Outcome::ratio).collect()
    } else {
        Vec::new()
    };
    let Some(outcome) = least_favourable(outcomes) else {
        return Ok(None);
    };
    // No need to run the others where the searched launch already refutes the trial, nor
    // those its guard turns away (they run other code).
    let launches = match outcome.ratio() {
        Some(r) if r < 1.0 => others
            .iter()
            .filter(|(_, values, _)| {
                !trial.candidate.guarded()
                    || values.as_ref().is_some_and(|v| trial.candidate.admits(v))
            })
            .map(|(recording, _, ev)| LaunchCheck {
                recording: recording.clone(),
                outcome: match ev {
                    Ok(ev) => ev.measure(std::slice::from_ref(&lowered)).pop().unwrap_or(
                        Outcome::Crashed {
                            message: "the worker returned no outcome".into(),
                        },
                    ),
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
        context_ratios,
        in_program: Vec::new(),
        unconfirmed: None,
    };
    store.write_confirmation(kernel, &searched.device().gpu, &confirmation)?;
    Ok(Some(confirmation))
}

/// The candidates (`codes`, whose searches measured them at `searched_ratios`) measured
/// against the baseline in `CONTEXTS` fresh workers: one outcome per code, per context. Where
/// the evaluator lets them open at once ([`Evaluator::contexts_at_once`]: a short kernel's, whose
/// confirmation is mostly the opening), they do, and their measurements take turns on the GPU;
/// otherwise one after the other (each worker ends before the next starts), ending after the
/// first where that one settles every code ([`settled_in_one_context`]: a clear winner's
/// near-tie companion still gets its three). On `searched` itself where it has no fresh ones to
/// give (simulations). With whether they were fresh.
fn measure_in_fresh_contexts<E: Evaluator>(
    searched: &E,
    kernel: &TrialsKey,
    codes: &[Lowered],
    searched_ratios: &[Option<f64>],
    line: f64,
    until: Option<Instant>,
) -> Contexts {
    let once = |ev: &E| {
        let _span = crate::replay::timeline::span("confirm.context", || kernel.to_string());
        ev.measure(codes)
    };
    // Each context times a long kernel's codes until they are known to be on one side of the
    // line apply ships them from (`line`, the lowest of theirs), not to 1%: that is all a
    // confirmation decides.
    let renewed = || searched.renewed().inspect(|e| e.decide_at(Some(line)));
    let ran_out = |opened: usize| {
        until.is_some_and(|u| Instant::now() >= u).then(|| {
            format!(
                "the deadline's time ran out after {opened} of up to {CONTEXTS} fresh contexts of its confirmation (fix: a longer --deadline)"
            )
        })
    };
    if let Some(why) = ran_out(0) {
        return Contexts {
            outcomes: Vec::new(),
            fresh: true,
            cut: Some(why),
        };
    }
    if searched.contexts_at_once() >= CONTEXTS {
        let fresh: Vec<E> = (0..CONTEXTS).map_while(|_| renewed()).collect();
        if fresh.len() == CONTEXTS {
            let _turns = crate::replay::worker::Siblings::start();
            let contexts = std::thread::scope(|s| {
                let running: Vec<_> = fresh.iter().map(|ev| s.spawn(|| once(ev))).collect();
                running
                    .into_iter()
                    .map(|h| h.join().unwrap_or_default())
                    .collect()
            });
            return Contexts {
                outcomes: contexts,
                fresh: true,
                cut: None,
            };
        }
    }
    let mut contexts = Vec::new();
    for _ in 0..CONTEXTS {
        if let Some(why) = ran_out(contexts.len()) {
            return Contexts {
                outcomes: contexts,
                fresh: true,
                cut: Some(why),
            };
        }
        match renewed() {
            Some(fresh) => contexts.push(once(&fresh)),
            None => {
                return Contexts {
                    outcomes: vec![once(searched)],
                    fresh: false,
                    cut: None,
                }
            }
        }
        let settled = contexts[0].len() == searched_ratios.len()
            && contexts[0]
                .iter()
                .zip(searched_ratios)
                .all(|(o, r)| settled_in_one_context(o, *r));
        if contexts.len() == 1 && settled {
            break;
        }
    }
    Contexts {
        outcomes: contexts,
        fresh: true,
        cut: None,
    }
}

/// What `candidate` must gain over -O3 to ship (`winner::line_of`, at `R3_APPLY_MIN_SPEEDUP`).
fn shipping_line(candidate: &crate::candidate::Candidate) -> f64 {
    winner::line_of(candidate, crate::store::winner::min_speedup_from_env())
}

/// The outcome to judge a trial by: one that is not valid (wrong, crashed, timed out) if any
/// context gave one, else the slowest against its baseline.
fn least_favourable(outcomes: Vec<Outcome>) -> Option<Outcome> {
    outcomes
        .into_iter()
        .max_by(|a, b| match (a.ratio(), b.ratio()) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, None) => std::cmp::Ordering::Equal,
        })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A time ratio (candidate over -O3, as trials store it) as r3 writes every speedup.
fn times(ratio: f64) -> String {
    crate::store::speed::times(1.0 / ratio)
}

/// A time ratio in a sentence: `1.234× faster than -O3`, or `0.810× (slower than -O3)`.
fn faster(ratio: f64) -> String {
    crate::store::speed::faster(1.0 / ratio)
}

/// One line: the re-measured speedup and the launches it held on, or why it was not confirmed.
pub fn describe(c: &Confirmation, what: &str) -> String {
    let of_o3 = |o: &Outcome| o.ratio().map_or_else(|| o.in_words().to_owned(), faster);
    let launches = if c.launches.is_empty() {
        "the searched launch (the only one recorded)".to_owned()
    } else {
        format!("{} recorded launches", c.launches.len() + 1)
    };
    if let Some(why) = &c.unconfirmed {
        return format!("not {what}: trial {}: {why}", c.trial);
    }
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
            "{what}: {} (trial {} re-measured{}: {:.2} us vs {:.2} us, {} samples), outputs right on {launches}{}",
            faster(r),
            c.trial,
            in_contexts(c),
            time.median_us,
            baseline.median_us,
            time.samples,
            other_ratios(c)
        ),
        _ => format!(
            "not {what}: trial {} re-measured{} as {}; the -O3 baseline is kept",
            c.trial,
            in_contexts(c),
            of_o3(&c.outcome)
        ),
    }
}

/// ` in 3 fresh contexts (1.064×, 1.064×, 0.862×; the slowest counts)`, where there were
/// several.
fn in_contexts(c: &Confirmation) -> String {
    if c.context_ratios.len() < 2 {
        return String::new();
    }
    let rs: Vec<String> = c
        .context_ratios
        .iter()
        .map(|r| r.map_or_else(|| "not valid".to_owned(), times))
        .collect();
    format!(
        " in {} fresh contexts ({}; the slowest counts)",
        c.context_ratios.len(),
        rs.join(", ")
    )
}

/// ` (there: 1.639×, 1.429×)`: the trial's speedup on the other launches.
fn other_ratios(c: &Confirmation) -> String {
    let rs: Vec<String> = c
        .launches
        .iter()
        .filter_map(|l| l.outcome.ratio())
        .map(times)
        .collect();
    if rs.is_empty() {
        String::new()
    } else {
        format!(" (there: {})", rs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::Candidate;
    use crate::lower::Lowered;
    use crate::store::fixtures;
    use crate::store::outcome::TimeStats;

    /// The trials key these tests search under.
    fn the_key() -> TrialsKey {
        TrialsKey::from("k")
    }

    /// A launch where each candidate's time over -O3 is fixed, and where the candidates whose
    /// pipeline is in `wrong` give wrong output.
    struct Launch {
        ratio: f64,
        wrong: Vec<&'static str>,
    }

    /// The searched launch, measured at `searched` in the search's context and at each of
    /// `fresh` in the fresh contexts it gives, one after the other.
    #[derive(Default)]
    struct Contexts {
        searched: f64,
        fresh: std::sync::Mutex<Vec<f64>>,
        /// The shipping line this context was told to decide at (`decide_at`).
        line: std::sync::Mutex<Option<f64>>,
        /// The line each measure was made under, in every context renewed from this one.
        measured_at: std::sync::Arc<std::sync::Mutex<Vec<Option<f64>>>>,
    }

    impl Evaluator for Contexts {
        fn device(&self) -> crate::replay::Device {
            Launch::new(1.0).device()
        }
        fn renewed(&self) -> Option<Self> {
            let mut fresh = self.fresh.lock().unwrap();
            (!fresh.is_empty()).then(|| Contexts {
                searched: fresh.remove(0),
                measured_at: self.measured_at.clone(),
                ..Default::default()
            })
        }
        fn decide_at(&self, speedup: Option<f64>) {
            *self.line.lock().unwrap() = speedup;
        }
        fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
            Launch::new(1.0).lower(c)
        }
        /// A negative ratio: the candidate crashes in that context.
        fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
            let line = *self.line.lock().unwrap();
            self.measured_at.lock().unwrap().push(line);
            if self.searched < 0.0 {
                let crashed = Outcome::Crashed {
                    message: "illegal address".into(),
                };
                return vec![crashed; batch.len()];
            }
            Launch::new(self.searched).measure(batch)
        }
    }

    impl Launch {
        fn new(ratio: f64) -> Launch {
            Launch {
                ratio,
                wrong: vec![],
            }
        }
    }

    impl Evaluator for Launch {
        fn device(&self) -> crate::replay::Device {
            crate::testing::device()
        }
        fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
            Ok(crate::testing::lowered_by_pipeline(c))
        }
        fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
            let ts = |us| crate::testing::exact(us, 5);
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
        searched_store_with(serde_json::json!({ "pipeline": best }))
    }

    fn searched_store_with(best: serde_json::Value) -> (tempfile::TempDir, Store, TrialRecord) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut log = store.open_trials(&the_key(), "GPU (sm_90)").unwrap();
        let mut best_rec = None;
        let o3 = serde_json::json!({ "pipeline": "default<O3>" });
        for (trial, candidate, ratio) in [(0, o3, 1.0), (1, best, 0.5)] {
            let pipeline = candidate["pipeline"].as_str().map(|p| p.into());
            let outcome = fixtures::valid(100.0 * ratio, 100.0);
            let mut r = fixtures::trial("k", "GPU (sm_90)", trial, candidate, outcome);
            r.ptx_hash = pipeline;
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
                None,
                Ok(Launch {
                    ratio: 0.7,
                    wrong: vec![],
                }),
            ),
            (
                "k/3".to_owned(),
                None,
                Ok(Launch {
                    ratio: 0.7,
                    wrong: vec!["function(licm)"],
                }),
            ),
        ];
        let lines = confirm_best(&store, &searched, &others, &the_key()).unwrap();
        assert!(
            lines[0]
                .starts_with("not confirmed: trial 1 gives wrong output on recorded launch k/3"),
            "{lines:?}"
        );
        assert!(lines[0].contains("region 1 differs"), "{lines:?}");
        assert_eq!(
            store
                .best_trial(&the_key(), "GPU (sm_90)")
                .unwrap()
                .unwrap()
                .trial,
            0
        );
    }

    #[test]
    fn a_specialized_winner_is_checked_only_on_the_launches_its_guard_admits() {
        let n = |v: u32| FoldedArgBytes(v.to_le_bytes().to_vec());
        let (_dir, store, _) = searched_store_with(serde_json::json!({
            "pipeline": "function(licm)",
            "specialize": {"args": [{"index": 0, "hex": "05000000"}]}
        }));
        let searched = Launch::new(0.6);
        let wrong = |values: Option<LaunchValues>| {
            let ev = Launch {
                ratio: 0.7,
                wrong: vec!["function(licm)"],
            };
            ("k/x".to_owned(), values, Ok(ev))
        };
        // Another n: the guard sends that launch to the generic code, so it does not count.
        let lines =
            confirm_best(&store, &searched, &[wrong(Some(n(7).launch()))], &the_key()).unwrap();
        assert!(lines[0].starts_with("confirmed"), "{lines:?}");
        assert_eq!(
            store
                .best_trial(&the_key(), "GPU (sm_90)")
                .unwrap()
                .unwrap()
                .trial,
            1
        );
        // The same n: the variant would run it, and it is wrong there.
        let (_dir, store, _) = searched_store_with(serde_json::json!({
            "pipeline": "function(licm)",
            "specialize": {"args": [{"index": 0, "hex": "05000000"}]}
        }));
        let lines =
            confirm_best(&store, &searched, &[wrong(Some(n(5).launch()))], &the_key()).unwrap();
        assert!(lines[0].starts_with("not confirmed"), "{lines:?}");
        // A launch whose values are unknown cannot be admitted either.
        let (_dir, store, _) = searched_store_with(serde_json::json!({
            "pipeline": "function(licm)",
            "specialize": {"args": [{"index": 0, "hex": "05000000"}]}
        }));
        let lines = confirm_best(&store, &searched, &[wrong(None)], &the_key()).unwrap();
        assert!(lines[0].starts_with("confirmed"), "{lines:?}");
    }

    /// Fresh contexts that count how often they are opened, each measuring every code at
    /// its own ratio (by pipeline), and that may be opened `at_once`.
    struct Counted {
        ratios: Vec<(&'static str, f64)>,
        opened: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        at_once: usize,
    }

    impl Evaluator for Counted {
        fn device(&self) -> crate::replay::Device {
            crate::testing::device()
        }
        fn renewed(&self) -> Option<Self> {
            self.opened
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Some(Counted {
                ratios: self.ratios.clone(),
                opened: self.opened.clone(),
                at_once: self.at_once,
            })
        }
        fn contexts_at_once(&self) -> usize {
            self.at_once
        }
        fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
            Ok(crate::testing::lowered_by_pipeline(c))
        }
        /// Each code as a [`Launch`] at its pipeline's ratio.
        fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
            batch
                .iter()
                .flat_map(|l| {
                    let (_, r) = self
                        .ratios
                        .iter()
                        .find(|(p, _)| *p == l.candidate.pipeline)
                        .unwrap();
                    Launch::new(*r).measure(std::slice::from_ref(l))
                })
                .collect()
        }
    }

    /// A search whose best (trial 1, 2×) is a variant for n = 5, and whose best generic code
    /// (trial 2) is 1.25×: what ships is both.
    fn variant_and_generic_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut log = store.open_trials(&the_key(), "GPU (sm_90)").unwrap();
        let specialized = serde_json::json!({
            "pipeline": "function(licm)",
            "specialize": {"args": [{"index": 0, "hex": "05000000"}]}
        });
        let generic = serde_json::json!({ "pipeline": "function(gvn)" });
        let o3 = serde_json::json!({ "pipeline": "default<O3>" });
        for (trial, candidate, ratio) in [(0, o3, 1.0), (1, specialized, 0.5), (2, generic, 0.8)] {
            let pipeline = candidate["pipeline"].as_str().map(|p| p.into());
            let mut r = fixtures::trial(
                "k",
                "GPU (sm_90)",
                trial,
                candidate,
                fixtures::valid(100.0 * ratio, 100.0),
            );
            r.ptx_hash = pipeline;
            log.append(&r).unwrap();
        }
        (dir, store)
    }

    /// Contexts opened `at_once` that measure both codes of [`variant_and_generic_store`]
    /// faster than -O3 (0.8 and 0.85 of its time), and the count of those opened.
    fn both_faster(at_once: usize) -> (Counted, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ev = Counted {
            ratios: vec![("function(licm)", 0.8), ("function(gvn)", 0.85)],
            opened: opened.clone(),
            at_once,
        };
        (ev, opened)
    }

    #[test]
    fn what_ships_beside_the_best_is_confirmed_in_the_best_s_fresh_contexts() {
        for at_once in [1, 4] {
            let (_dir, store) = variant_and_generic_store();
            let (ev, opened) = both_faster(at_once);
            let lines = confirm_best(&store, &ev, &[], &the_key()).unwrap();
            assert_eq!(lines.len(), 2, "{lines:?}");
            assert!(lines[0].starts_with("confirmed"), "{lines:?}");
            assert!(lines[1].starts_with("for apply"), "{lines:?}");
            let path = store.trials_path(&the_key(), "GPU (sm_90)");
            let confirmed = store.confirmations(&path).unwrap();
            assert_eq!(confirmed.len(), 2);
            for c in &confirmed {
                assert_eq!(c.context_ratios.len(), CONTEXTS, "{c:?}");
            }
            // Both codes in the same contexts: each opened once, not once per code.
            assert_eq!(
                opened.load(std::sync::atomic::Ordering::SeqCst),
                CONTEXTS,
                "at once: {at_once}"
            );
        }
    }

    /// A confirmation asked for after its deadline's time ran out opens no fresh context: its
    /// best is withheld from apply, unconfirmed, with the reason, and what ships is what would
    /// without it. With time left it is made as any is.
    #[test]
    fn a_confirmation_opens_no_fresh_context_once_its_time_has_run_out() {
        let run = |until: Instant, at_once: usize| {
            let (_dir, store) = variant_and_generic_store();
            let (ev, opened) = both_faster(at_once);
            let lines = confirm_best_until(&store, &ev, &[], &the_key(), Some(until)).unwrap();
            let path = store.trials_path(&the_key(), "GPU (sm_90)");
            let confirmed = store.confirmations(&path).unwrap();
            let n = opened.load(std::sync::atomic::Ordering::SeqCst);
            (lines, confirmed, n)
        };
        for at_once in [1, CONTEXTS] {
            let (lines, confirmed, opened) = run(Instant::now(), at_once);
            assert_eq!(opened, 0);
            assert!(
                lines[0].starts_with(
                    "not confirmed: trial 1: the deadline's time ran out after 0 of up to 3 fresh contexts"
                ),
                "{lines:?}"
            );
            let best = confirmed.iter().find(|c| c.trial == 1).unwrap();
            assert!(best.unconfirmed.is_some(), "{best:?}");
            assert!(
                confirmed.iter().all(|c| c.unconfirmed.is_some()),
                "{confirmed:?}"
            );
            let later = Instant::now() + std::time::Duration::from_secs(3600);
            let (lines, confirmed, opened) = run(later, at_once);
            assert_eq!(opened, CONTEXTS);
            assert!(lines[0].starts_with("confirmed"), "{lines:?}");
            assert!(
                confirmed.iter().all(|c| c.unconfirmed.is_none()),
                "{confirmed:?}"
            );
        }
    }

    /// What the deadline prices a confirmation by: the other codes it measures, at the
    /// speedups their searches measured, and nothing once they are confirmed.
    #[test]
    fn the_codes_beside_the_best_are_those_its_confirmation_measures() {
        let (_dir, store) = variant_and_generic_store();
        let beside = beside_best(&store, &the_key(), "GPU (sm_90)").unwrap();
        assert_eq!(beside.len(), 1, "{beside:?}");
        assert!((beside[0] - 1.25).abs() < 1e-9, "{beside:?}");
        let ev = Counted {
            ratios: vec![("function(licm)", 0.5), ("function(gvn)", 0.8)],
            opened: std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            at_once: 1,
        };
        confirm_best(&store, &ev, &[], &the_key()).unwrap();
        let after = beside_best(&store, &the_key(), "GPU (sm_90)").unwrap();
        assert!(after.is_empty(), "{after:?}");
    }

    #[test]
    fn a_clear_winner_s_near_tie_companion_still_gets_three_contexts() {
        let (_dir, store) = variant_and_generic_store();
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        // The variant holds its 2× in its first context; the generic, at 1.25× in its search,
        // is near the threshold.
        let ev = Counted {
            ratios: vec![("function(licm)", 0.5), ("function(gvn)", 0.8)],
            opened: opened.clone(),
            at_once: 1,
        };
        confirm_best(&store, &ev, &[], &the_key()).unwrap();
        let confirmed = store
            .confirmations(&store.trials_path(&the_key(), "GPU (sm_90)"))
            .unwrap();
        let generic = confirmed.iter().find(|c| c.trial == 2).unwrap();
        assert_eq!(generic.context_ratios.len(), CONTEXTS);
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), CONTEXTS);
    }

    #[test]
    fn contexts_opened_at_once_are_all_measured_even_for_a_clear_winner() {
        let (_dir, store, _) = searched_store("function(licm)");
        let opened = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ev = Counted {
            ratios: vec![("function(licm)", 0.5)],
            opened: opened.clone(),
            at_once: 4,
        };
        confirm_best(&store, &ev, &[], &the_key()).unwrap();
        let path = store.trials_path(&the_key(), "GPU (sm_90)");
        let c = store.confirmations(&path).unwrap();
        // Opened side by side, a clear winner's three contexts cost about one; one after the
        // other, the first would have settled it.
        assert_eq!(c[0].context_ratios, [Some(0.5); CONTEXTS]);
        let ev = Counted { at_once: 1, ..ev };
        let (_dir, store, _) = searched_store("function(licm)");
        confirm_best(&store, &ev, &[], &the_key()).unwrap();
        let c = store
            .confirmations(&store.trials_path(&the_key(), "GPU (sm_90)"))
            .unwrap();
        assert_eq!(c[0].context_ratios, [Some(0.5)]);
    }

    /// One launch passing these bytes as its only argument.
    struct FoldedArgBytes(Vec<u8>);

    impl FoldedArgBytes {
        fn launch(self) -> LaunchValues {
            LaunchValues {
                grid: [1, 1, 1],
                block: [32, 1, 1],
                args: vec![self.0],
            }
        }
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
            None,
            Ok(Launch {
                ratio: 0.7,
                wrong: vec![],
            }),
        )];
        let lines = confirm_best(&store, &searched, &others, &the_key()).unwrap();
        assert!(
            lines[0].starts_with("confirmed: 1.667× faster than -O3"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("outputs right on 2 recorded launches (there: 1.429×)"),
            "{lines:?}"
        );
        let path = store.trials_path(&the_key(), "GPU (sm_90)");
        let c = store.confirmations(&path).unwrap();
        assert_eq!(c[0].launches.len(), 1);
        assert_eq!(
            store
                .best_trial(&the_key(), "GPU (sm_90)")
                .unwrap()
                .unwrap()
                .trial,
            1
        );
    }

    /// A clear winner whose first fresh context agrees with its search is confirmed there:
    /// the other two contexts (here, ones that would refute it) are never started. A winner
    /// near the shipping threshold, or one whose fresh context disagrees with its search,
    /// still takes all three.
    #[test]
    fn one_fresh_context_confirms_a_clear_winner_and_three_a_near_one() {
        let confirm = |searched: f64, fresh: &[f64]| {
            let (_dir, store, _) = searched_store("function(licm)");
            let ev = Contexts {
                searched,
                fresh: std::sync::Mutex::new(fresh.to_vec()),
                ..Default::default()
            };
            confirm_best(&store, &ev, &[], &the_key()).unwrap();
            let path = store.trials_path(&the_key(), "GPU (sm_90)");
            store.confirmations(&path).unwrap()
        };
        // The search measured its winner at 0.5 of -O3's time (2×).
        let c = confirm(0.5, &[0.52, 2.0, 2.0]);
        assert_eq!(c[0].context_ratios, [Some(0.52)]);
        assert_eq!(c[0].ratio(), Some(0.52));
        // 1.25× in its fresh context: near the threshold, all three; the slowest refutes it.
        let c = confirm(0.5, &[0.8, 0.8, 1.1]);
        assert_eq!(c[0].context_ratios.len(), CONTEXTS);
        assert_eq!(c[0].ratio(), Some(1.1));
        // 3× in the fresh context against 2× in the search: placement moved it, all three.
        let c = confirm(0.5, &[0.33, 0.33, 0.4]);
        assert_eq!(c[0].context_ratios.len(), CONTEXTS);
        assert_eq!(contexts_expected(15.0), 1);
        assert_eq!(contexts_expected(1.2), CONTEXTS);
    }

    /// Every fresh context is told the line apply ships from, so that a long kernel's codes
    /// are timed until known on one side of it (`stopping::sided`), not to 1%.
    #[test]
    fn each_fresh_context_decides_at_the_shipping_line() {
        let (_dir, store, _) = searched_store("function(licm)");
        let ev = Contexts {
            searched: 0.8,
            fresh: std::sync::Mutex::new(vec![0.8, 0.81, 0.82]),
            ..Default::default()
        };
        confirm_best(&store, &ev, &[], &the_key()).unwrap();
        let line = crate::store::winner::min_speedup_from_env().max(1.0);
        assert_eq!(*ev.measured_at.lock().unwrap(), [Some(line); CONTEXTS]);
    }

    #[test]
    fn a_winner_is_judged_by_its_slowest_fresh_context_never_by_the_search_s() {
        let confirm = |searched: f64, fresh: &[f64]| {
            let (_dir, store, _) = searched_store("function(licm)");
            let ev = Contexts {
                searched,
                fresh: std::sync::Mutex::new(fresh.to_vec()),
                ..Default::default()
            };
            let lines = confirm_best(&store, &ev, &[], &the_key()).unwrap();
            let best = store
                .best_trial(&the_key(), "GPU (sm_90)")
                .unwrap()
                .unwrap()
                .trial;
            let path = store.trials_path(&the_key(), "GPU (sm_90)");
            (lines, best, store.confirmations(&path).unwrap())
        };
        // Fast in the search's context and in two fresh contexts, slow in the third: -O3 stays.
        let (lines, best, c) = confirm(0.5, &[0.75, 0.75, 1.25]);
        assert_eq!(best, 0, "{lines:?}");
        assert_eq!(c[0].context_ratios, [Some(0.75), Some(0.75), Some(1.25)]);
        assert_eq!(c[0].ratio(), Some(1.25));
        assert!(
            lines[0].starts_with("not confirmed: trial 1 re-measured in 3 fresh contexts (1.333×, 1.333×, 0.800×; the slowest counts) as 0.800× (slower than -O3)"),
            "{lines:?}"
        );
        // Slow in the search's context but fast in every fresh one: confirmed at the slowest.
        // (The first fresh context disagrees with the search's 0.5, so all three are run.)
        let (lines, best, c) = confirm(1.5, &[0.625, 0.5, 0.5]);
        assert_eq!(best, 1, "{lines:?}");
        assert_eq!(c[0].ratio(), Some(0.625));
        assert!(
            lines[0].starts_with(
                "confirmed: 1.600× faster than -O3 (trial 1 re-measured in 3 fresh contexts"
            ),
            "{lines:?}"
        );
        // A crash in one context refuses it, whatever the others gave.
        let (lines, best, _) = confirm(0.5, &[0.75, -1.0, 0.75]);
        assert_eq!(best, 0, "{lines:?}");
        assert!(
            lines[0].starts_with("not confirmed: trial 1 re-measured in 3 fresh contexts (1.333×, not valid, 1.333×; the slowest counts) as crashed"),
            "{lines:?}"
        );
        // As many fresh contexts as CONTEXTS, no more.
        let (_, _, c) = confirm(0.5, &[0.625, 0.625, 0.5, 2.0]);
        assert_eq!(c[0].context_ratios.len(), CONTEXTS);
    }

    #[test]
    fn an_outcome_that_is_not_valid_in_any_context_outweighs_every_time() {
        let ts = |us| TimeStats {
            median_us: us,
            min_us: us,
            spread: 0.0,
            samples: 5,
            raced: false,
        };
        let valid = |r: f64| Outcome::Valid {
            time: ts(100.0 * r),
            baseline: ts(100.0),
        };
        let crashed = Outcome::Crashed {
            message: "illegal address".into(),
        };
        let worst = least_favourable(vec![valid(0.5), crashed.clone(), valid(2.0)]);
        assert_eq!(worst, Some(crashed));
        assert_eq!(
            least_favourable(vec![valid(0.5), valid(0.9)]),
            Some(valid(0.9))
        );
        assert_eq!(least_favourable(Vec::new()), None);
    }

    #[test]
    fn a_launch_that_cannot_be_replayed_refuses_the_winner_naming_it() {
        let (_dir, store, _) = searched_store("function(licm)");
        let searched = Launch {
            ratio: 0.6,
            wrong: vec![],
        };
        let others: Vec<OtherLaunch<Launch>> = vec![(
            "k/9".to_owned(),
            None,
            Err("prologue.bin: damaged".to_owned()),
        )];
        let lines = confirm_best(&store, &searched, &others, &the_key()).unwrap();
        assert!(
            lines[0].contains("crashed on recorded launch k/9"),
            "{lines:?}"
        );
        assert!(lines[0].contains("prologue.bin: damaged"), "{lines:?}");
        assert_eq!(
            store
                .best_trial(&the_key(), "GPU (sm_90)")
                .unwrap()
                .unwrap()
                .trial,
            0
        );
    }
}
