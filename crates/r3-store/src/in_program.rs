//! What a whole program says of the tuned code it ran. Replay times a kernel alone, on its
//! recorded inputs; a program runs it between its other kernels, and the two can disagree (a
//! launch-bounds variant measured 1.18× in replay ran 0.58× in its program, H100,
//! 2026-11-26). A time-only run (`r3 record --time-only`) of an applied build states which
//! tuned code each kernel ships (its dispatch tables' [`ShippedKernel`]s) and how long each
//! kernel's launches took; against the recorded build's time for the same kernel (its own
//! time-only run where there is one, else its recording run's census), that is the code's
//! measure in the program ([`InProgram`]). The measure is kept with each shipped trial's
//! confirmation, and a trial a program measured slower ships no more (`winner::pick_best`):
//! the program is what the user runs.

use super::programs::{Program, ShippedKernel, Timing};
use super::trials::{Against, InProgram, Refusal, TrialRecord};
use super::winner::{chosen_search, Policy};
use super::{Store, StoreError};
use crate::kernel::{KernelHash, TrialsKey};

/// One shipped kernel of an applied build, measured in its program.
#[derive(Debug, Clone, PartialEq)]
pub struct Measure {
    pub shipped: ShippedKernel,
    pub in_program: InProgram,
}

/// What became of one measure in the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Kept {
    /// Kept with these trials' confirmations.
    Trials(Vec<u32>),
    /// The search apply builds from has no confirmed trial of that code (a search without
    /// confirmation, or one that has moved on since the build): not kept.
    NoConfirmedTrial,
    /// No search of the kernel on any GPU apply builds for.
    NoSearch,
}

/// A measure and what the store made of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub measure: Measure,
    pub kept: Kept,
    /// Why the next build withholds the kernel's tuned code because of this measure, if it
    /// does: a trial it was kept with is refuted by it (`Confirmation::refuted_in_program`).
    pub withheld: Option<Refusal>,
}

/// Each shipped kernel of `applied` that ran, per launch, against the recorded build's time for
/// the same kernel: the recorded build is the binary of the program's census, timed by its own
/// time-only run where it has one, else by the census. Nothing when the program has no census
/// or `applied` is the recorded build itself.
pub fn measures(program: &Program, applied: &Timing) -> Vec<Measure> {
    let Some(census) = &program.census else {
        return Vec::new();
    };
    if census.binary == applied.binary {
        return Vec::new();
    }
    let recorded_run = program
        .timings
        .iter()
        .rev()
        .find(|t| t.binary == census.binary);
    let mut out = Vec::new();
    for shipped in shipped_here(program, applied) {
        let Some((applied_ms, launches)) = timed(applied, &shipped.name) else {
            continue;
        };
        let recorded = match recorded_run {
            Some(run) => timed(run, &shipped.name).map(|r| (Against::TimeOnly, r)),
            None => estimated(program, &shipped.kernel).map(|r| (Against::Census, r)),
        };
        let Some((against, (recorded_ms, recorded_launches))) = recorded else {
            continue;
        };
        out.push(Measure {
            in_program: InProgram {
                program: program.key.clone(),
                binary: applied.binary.clone(),
                against,
                recorded_ms: recorded_ms / recorded_launches as f64,
                applied_ms: applied_ms / launches as f64,
                launches,
                unix_s: applied.unix_s,
            },
            shipped,
        });
    }
    out
}

/// The shipped kernels of `applied` that ran in this program: of a kernel shipped for several
/// architectures, the one whose content hash the census knows (else the only one).
fn shipped_here(program: &Program, applied: &Timing) -> Vec<ShippedKernel> {
    let in_census = |s: &ShippedKernel| {
        program
            .census
            .iter()
            .flat_map(|c| &c.kernels)
            .any(|k| k.kernel.as_deref() == Some(s.kernel.as_str()))
    };
    let mut out: Vec<ShippedKernel> = Vec::new();
    for s in &applied.shipped {
        let same_name: Vec<&ShippedKernel> = applied
            .shipped
            .iter()
            .filter(|o| o.name == s.name)
            .collect();
        let pick = same_name.len() == 1 || in_census(s);
        if pick && !out.iter().any(|o| o.name == s.name) {
            out.push(s.clone());
        }
    }
    out
}

/// A kernel's summed GPU time and launches in a time-only run, by mangled name.
fn timed(run: &Timing, name: &str) -> Option<(f64, u64)> {
    let k = run.kernels.iter().find(|k| k.name == name)?;
    (k.launches > 0 && k.ms > 0.0).then_some((k.ms, k.launches))
}

/// A census launch shorter than this is too short to judge tuned code by (`CENSUS_NOISE`).
pub const CENSUS_MIN_MS: f64 = 0.05;

/// A kernel's estimated GPU time and launches in the program's census, by content hash: only
/// where every launch's time is a recorded launch's (none scaled from another shape, which
/// can be off by far more than a kernel's tuning) and a launch takes at least
/// [`CENSUS_MIN_MS`].
fn estimated(program: &Program, kernel: &KernelHash) -> Option<(f64, u64)> {
    let census = program.census.as_ref()?;
    let (mut ms, mut launches) = (0.0, 0);
    for k in census
        .kernels
        .iter()
        .filter(|k| k.kernel.as_deref() == Some(kernel))
    {
        if k.scaled_launches > 0 {
            return None;
        }
        ms += k.estimated_ms?;
        launches += k.launches;
    }
    (launches > 0 && ms >= CENSUS_MIN_MS * launches as f64).then_some((ms, launches))
}

impl Store {
    /// Keeps what a time-only run of an applied build measured of each kernel's tuned code: with
    /// the confirmation of every trial of the search apply builds from whose PTX the build
    /// ships. Where a measure is slower than the recorded build, that code ships no more (the
    /// caller brings the winners stamp up to date, `apply::plan::refresh_winners_stamp`, so
    /// that the next build recompiles).
    pub fn judge_in_program(&self, applied: &Timing) -> Result<Vec<Judged>, StoreError> {
        if applied.shipped.is_empty() {
            return Ok(Vec::new());
        }
        let Some(program) = self.program(&applied.path, &applied.args) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for measure in measures(&program, applied) {
            let (kept, withheld) = self.keep_measure(&measure)?;
            out.push(Judged {
                measure,
                kept,
                withheld,
            });
        }
        Ok(out)
    }

    /// Keeps `m` with each confirmed trial whose code the build ships; also why it withholds
    /// the first of them it withholds.
    fn keep_measure(&self, m: &Measure) -> Result<(Kept, Option<Refusal>), StoreError> {
        let key = TrialsKey::of_kernel(&m.shipped.kernel);
        let Some((path, recs)) = chosen_search(self, &key, &Policy::from_env())? else {
            return Ok((Kept::NoSearch, None));
        };
        let confirmed = self.confirmations(&path)?;
        let (mut trials, mut withheld) = (Vec::new(), None);
        for t in recs.iter().filter(|t| ships(t, &m.shipped)) {
            let Some(c) = confirmed.iter().find(|c| c.trial == t.trial) else {
                continue;
            };
            let mut c = c.clone();
            c.in_program.retain(|p| p.program != m.in_program.program);
            c.in_program.push(m.in_program.clone());
            self.write_confirmation(&key, &t.gpu, &c)?;
            withheld = withheld.or(m.in_program.refusal(c.replay_speedup()));
            trials.push(t.trial);
        }
        let kept = if trials.is_empty() {
            Kept::NoConfirmedTrial
        } else {
            Kept::Trials(trials)
        };
        Ok((kept, withheld))
    }
}

/// Whether the build ships this trial's code: a tuned trial whose measured PTX it names.
fn ships(t: &TrialRecord, shipped: &ShippedKernel) -> bool {
    t.trial != 0
        && t.ptx_hash
            .as_ref()
            .is_some_and(|h| shipped.ptx.iter().any(|p| p == h.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::programs::{Census, KernelCensus, KernelTiming};
    use crate::winner::pick_best;
    use crate::winner::tests::{confirmed as confirmation, timed};

    const PATH: &str = "/w/app";

    /// Trial `trial` of kernel `kh` whose PTX hashes to `ptx`, at `us` against -O3's 100.
    fn trial(trial: u32, ptx: &str, us: f64) -> TrialRecord {
        let mut t = timed(trial, serde_json::json!({"pipeline": "default<O2>"}), us);
        t.kernel = "kh".into();
        t.ptx_hash = Some(ptx.into());
        t
    }

    fn census(binary: &str, estimated_ms: f64) -> Census {
        Census {
            format: 1,
            program: "./app".into(),
            path: PATH.into(),
            binary: binary.into(),
            args: Vec::new(),
            unix_s: 1.0,
            launches: 10,
            unknown_launches: 0,
            kernels: vec![KernelCensus {
                kernel: Some("kh".into()),
                name: "_Z1kv".into(),
                launches: 10,
                estimated_ms: Some(estimated_ms),
                timed_launches: 10,
                scaled_launches: 0,
                recurrence: Vec::new(),
                recorded: Vec::new(),
            }],
        }
    }

    fn timing(binary: &str, ms: f64, shipped: &[&str]) -> Timing {
        Timing {
            format: 1,
            program: "./app".into(),
            path: PATH.into(),
            binary: binary.into(),
            args: Vec::new(),
            unix_s: 2.0,
            total_ms: ms,
            launches: 10,
            kernels: vec![KernelTiming {
                name: "_Z1kv".into(),
                launches: 10,
                ms,
            }],
            shipped: shipped
                .iter()
                .map(|l| ShippedKernel::parse(l).unwrap())
                .collect(),
        }
    }

    /// A store where kernel kh's search found trial 1 (PTX p1) twice as fast as -O3 and
    /// confirmed it, and the recorded build (binary `rec`) took 10 ms over 10 launches.
    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut log = store.open_trials(&TrialsKey::from("kh"), "g").unwrap();
        for t in [
            trial(0, "p0", 100.0),
            trial(1, "p1", 50.0),
            trial(2, "p2", 80.0),
        ] {
            log.append(&t).unwrap();
        }
        drop(log);
        store
            .write_confirmation(&TrialsKey::from("kh"), "g", &confirmation(1, 52.0))
            .unwrap();
        store.put_census(&census("rec", 10.0)).unwrap();
        (dir, store)
    }

    fn best(store: &Store) -> u32 {
        let path = store.trials_path(&TrialsKey::from("kh"), "g");
        let recs = store.trials(&TrialsKey::from("kh"), "g").unwrap();
        pick_best(&recs, &store.confirmations(&path).unwrap())
            .unwrap()
            .trial
    }

    #[test]
    fn shipped_lines_read_back_and_anything_else_is_refused() {
        let s = ShippedKernel::parse("s _Z1kv sm_90 kh p1,p2").unwrap();
        assert_eq!((s.name.as_str(), s.ptx.len()), ("_Z1kv", 2));
        assert_eq!(ShippedKernel::parse(&s.line()[2..]), Some(s.clone()));
        assert_eq!(ShippedKernel::parse(&s.line()), Some(s));
        for bad in [
            "v _Z1kv sm_90 kh p1",
            "s _Z1kv 90 kh p1",
            "s _Z1kv sm_90 kh",
            "s k sm_90 kh p1,",
        ] {
            assert_eq!(ShippedKernel::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_tuned_kernel_the_program_measured_slower_ships_no_more() {
        let (_dir, store) = store();
        assert_eq!(best(&store), 1);
        // The applied build ran the kernel at 1.4 ms a launch against the census's 1.0.
        let judged = store
            .judge_in_program(&timing("app1", 14.0, &["_Z1kv sm_90 kh p1"]))
            .unwrap();
        assert_eq!(judged.len(), 1);
        let m = &judged[0].measure.in_program;
        assert_eq!(
            (m.against, m.recorded_ms, m.applied_ms),
            (Against::Census, 1.0, 1.4)
        );
        assert_eq!(judged[0].kept, Kept::Trials(vec![1]));
        assert_eq!(judged[0].withheld, Some(Refusal::Slower));
        assert_eq!(best(&store), 0, "-O3 ships again");
        // Re-confirming the trial in replay keeps what the program said.
        store
            .write_confirmation(&TrialsKey::from("kh"), "g", &confirmation(1, 50.0))
            .unwrap();
        assert_eq!(best(&store), 0);
    }

    #[test]
    fn the_recorded_builds_own_time_only_run_is_the_reference_and_noise_is_not_a_loss() {
        let (_dir, store) = store();
        // Trial 1 confirmed at 1.02× over -O3.
        store
            .write_confirmation(&TrialsKey::from("kh"), "g", &confirmation(1, 98.0))
            .unwrap();
        // The census says 1.0 ms a launch; the recorded build's own time-only run says 1.3.
        store.put_timing(&timing("rec", 13.0, &[])).unwrap();
        let judged = store
            .judge_in_program(&timing("app1", 13.2, &["_Z1kv sm_90 kh p1"]))
            .unwrap();
        let m = &judged[0].measure.in_program;
        assert_eq!(m.against, Against::TimeOnly);
        assert!(!m.slower(), "1.5% slower is within one run's noise");
        assert_eq!(judged[0].withheld, None);
        assert_eq!(best(&store), 1, "the tuned code still ships");
        // A later run of the same program that measures it slower replaces the earlier one.
        store
            .judge_in_program(&timing("app1", 14.0, &["_Z1kv sm_90 kh p1"]))
            .unwrap();
        let c = store
            .confirmations(&store.trials_path(&TrialsKey::from("kh"), "g"))
            .unwrap();
        assert_eq!(c[0].in_program.len(), 1);
        assert_eq!(best(&store), 0);
    }

    /// oscillators (H200, 2026-11-30): replay's 1.058× ran 0.995× in the program's time-only
    /// run, and 3% slower than clang's build by the program's own timer.
    #[test]
    fn code_the_program_found_no_gain_in_where_replay_found_a_clear_one_ships_no_more() {
        let (_dir, store) = store();
        store
            .write_confirmation(&TrialsKey::from("kh"), "g", &confirmation(1, 94.5))
            .unwrap();
        store.put_timing(&timing("rec", 13.0, &[])).unwrap();
        let measured = |ms: f64, s: f64| {
            let mut t = timing("app1", ms, &["_Z1kv sm_90 kh p1"]);
            t.unix_s += s;
            store.judge_in_program(&t).unwrap().remove(0)
        };
        // A smaller gain than replay's is still a gain: it ships.
        let j = measured(12.8, 1.0);
        assert!(j.withheld.is_none() && !j.measure.in_program.slower());
        assert_eq!(best(&store), 1);
        // No gain at all, inside one run's noise, against replay's 1.058×: withheld.
        let j = measured(13.07, 2.0);
        assert!(
            !j.measure.in_program.slower(),
            "0.995× is within one run's noise"
        );
        assert!(
            matches!(j.withheld, Some(Refusal::NoGain { replay }) if (replay - 1.0582).abs() < 1e-3),
            "{:?}",
            j.withheld
        );
        assert_eq!(best(&store), 0, "-O3 ships again");
        // The census is too rough for that: only a clear loss against it counts.
        let mut census_only = j.measure.in_program.clone();
        census_only.against = Against::Census;
        assert!(!census_only.refutes(Some(1.058)));
        assert!(j.measure.in_program.refutes(Some(1.058)));
        assert!(
            !j.measure.in_program.refutes(Some(1.03)),
            "within both noises"
        );
    }

    #[test]
    fn against_the_census_only_a_clear_loss_of_a_long_enough_recorded_launch_counts() {
        let (_dir, store) = store();
        let applied = |ms: f64| timing("app1", ms, &["_Z1kv sm_90 kh p1"]);
        // 20% slower than the census: within what the census misjudges (CENSUS_NOISE).
        let judged = store.judge_in_program(&applied(12.0)).unwrap();
        assert_eq!(judged[0].measure.in_program.against, Against::Census);
        assert_eq!(judged[0].withheld, None);
        assert_eq!(best(&store), 1);
        // A launch the census scaled from another shape: no reference at all.
        let mut scaled = census("rec", 10.0);
        scaled.kernels[0].scaled_launches = 3;
        store.put_census(&scaled).unwrap();
        assert!(store.judge_in_program(&applied(30.0)).unwrap().is_empty());
        // Launches of 20 µs: too short for the census to judge.
        store.put_census(&census("rec", 0.2)).unwrap();
        assert!(store.judge_in_program(&applied(3.0)).unwrap().is_empty());
        assert_eq!(best(&store), 1);
    }

    #[test]
    fn code_the_search_has_no_confirmed_trial_of_is_measured_but_not_kept() {
        let (_dir, store) = store();
        // Trial 2 was never confirmed; p9 is no trial's code; kx was never searched.
        for (shipped, kept) in [
            ("_Z1kv sm_90 kh p2", Kept::NoConfirmedTrial),
            ("_Z1kv sm_90 kh p9", Kept::NoConfirmedTrial),
            ("_Z1kv sm_90 kx p1", Kept::NoSearch),
        ] {
            let mut t = timing("app1", 14.0, &[shipped]);
            if shipped.contains("kx") {
                store.put_census(&census_of("kx")).unwrap();
            }
            t.unix_s += 1.0;
            let judged = store.judge_in_program(&t).unwrap();
            assert_eq!(judged.len(), 1, "{shipped}");
            assert_eq!(judged[0].kept, kept, "{shipped}");
            assert_eq!(judged[0].withheld, None);
        }
        assert_eq!(best(&store), 1);
    }

    fn census_of(kernel: &str) -> Census {
        let mut c = census("rec", 10.0);
        c.kernels[0].kernel = Some(kernel.into());
        c
    }

    #[test]
    fn nothing_is_measured_without_a_recorded_build_to_measure_against() {
        let (_dir, store) = store();
        // The recorded build itself, timed: no tuned code to judge.
        assert!(store
            .judge_in_program(&timing("rec", 14.0, &["_Z1kv sm_90 kh p1"]))
            .unwrap()
            .is_empty());
        // A build without apply's table.
        assert!(store
            .judge_in_program(&timing("app1", 14.0, &[]))
            .unwrap()
            .is_empty());
        // Another program.
        let mut other = timing("app1", 14.0, &["_Z1kv sm_90 kh p1"]);
        other.path = "/w/other".into();
        assert!(store.judge_in_program(&other).unwrap().is_empty());
        assert_eq!(best(&store), 1);
    }

    #[test]
    fn of_a_kernel_shipped_for_two_architectures_the_one_the_census_knows_is_measured() {
        let (_dir, store) = store();
        let judged = store
            .judge_in_program(&timing(
                "app1",
                14.0,
                &["_Z1kv sm_80 k80 q1", "_Z1kv sm_90 kh p1"],
            ))
            .unwrap();
        assert_eq!(judged.len(), 1);
        assert_eq!(judged[0].measure.shipped.arch, "sm_90");
    }
}
