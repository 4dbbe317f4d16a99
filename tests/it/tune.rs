//! The tuning loop on simulated landscapes: exact resume, no PTX measured twice, compiling
//! overlapping measuring, strategies reaching the optimum, and `r3 tune` on the command line.

use crate::support::*;
use r3::candidate::Candidate;
use r3::kernel::TrialsKey;
use r3::lower::Lowered;
use r3::remix::sim::{synthetic, Family, Simulator};
use r3::remix::space::Space;
use r3::remix::tune::{trials_to_reach, tune, Summary, TuneOptions};
use r3::replay::Evaluator;
use r3::store::outcome::{Outcome, TimeStats};
use r3::store::trials::TrialRecord;
use r3::store::Store;
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

fn opts(strategy: &str, budget: u32) -> TuneOptions {
    TuneOptions {
        kernel: "k".into(),
        strategy: strategy.into(),
        seed: 7,
        budget,
        time: None,
        limit: None,
        batch: 4,
        transfer: false,
        recipes: false,
        race: false,
    }
}

/// Runs into a store; returns the trials file's records.
fn run(store: &Store, strategy: &str, budget: u32, resume: bool) -> Vec<TrialRecord> {
    run_summarized(store, strategy, budget, resume).0
}

/// [`run`], with the search's summary.
fn run_summarized(
    store: &Store,
    strategy: &str,
    budget: u32,
    resume: bool,
) -> (Vec<TrialRecord>, Summary) {
    let l = synthetic(Family::Sparse, 1);
    let space = Space::builtin(l.space.clone()).unwrap();
    let mut sim = Simulator::new(l);
    let gpu = "simulated: synthetic";
    let prior = if resume {
        store.trials(&the_key(), gpu).unwrap()
    } else {
        Vec::new()
    };
    let mut log = store.open_trials(&the_key(), gpu).unwrap();
    let never = AtomicBool::new(false);
    let summary = tune(
        &mut sim,
        &space,
        &opts(strategy, budget),
        prior,
        Some(&mut log),
        &never,
        |_| {},
    )
    .unwrap();
    (store.trials(&the_key(), gpu).unwrap(), summary)
}

type Essence = (
    u32,
    String,
    Option<r3::kernel::PtxHash>,
    Option<u32>,
    String,
);

/// What must be identical between runs (not timestamps or timings).
fn essence(r: &[TrialRecord]) -> Vec<Essence> {
    r.iter()
        .map(|t| {
            (
                t.trial,
                serde_json::to_string(&t.candidate).unwrap(),
                t.ptx_hash.clone(),
                t.duplicate_of,
                serde_json::to_string(&t.outcome).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_stopped_tune_resumes_with_no_lost_or_repeated_trial() {
    for strategy in ["bo", "random", "evolution", "local"] {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let (sa, sb) = (
            Store::create(a.path()).unwrap(),
            Store::create(b.path()).unwrap(),
        );
        let whole = run(&sa, strategy, 31, false);
        assert_eq!(whole.len(), 31);
        // Stopped after 14 trials (mid-round), with a torn record left by the "kill".
        let first = run(&sb, strategy, 14, false);
        assert_eq!(first.len(), 14);
        let path = sb.trials_path(&the_key(), "simulated: synthetic");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"format\":1,\"trial\":14,\"kern");
        std::fs::write(&path, bytes).unwrap();
        let resumed = run(&sb, strategy, 31, true);
        assert_eq!(essence(&resumed), essence(&whole), "{strategy}");
    }
}

/// A resume restores the strategy from the checkpoint of the last full round and asks only
/// what came after it; the search goes on exactly as the uninterrupted one did, for every
/// strategy, wherever it stopped. A checkpoint that is not of the file's trials (an edited
/// record, a cut file) is passed over for a full replay, with the same result.
#[test]
fn a_resume_starts_from_the_checkpoint_and_goes_on_as_the_whole_search() {
    let gpu = "simulated: synthetic";
    for strategy in ["bo", "random", "evolution", "local", "exhaustive"] {
        let a = tempfile::tempdir().unwrap();
        let sa = Store::create(a.path()).unwrap();
        let whole = run(&sa, strategy, 31, false);
        // Rounds of 4 after the baseline end at trials 1, 5, 9, 13, 17, 21, ...
        for (stopped_at, checkpoint) in [(1, 1), (4, 1), (13, 13), (19, 17), (21, 21)] {
            let b = tempfile::tempdir().unwrap();
            let sb = Store::create(b.path()).unwrap();
            run(&sb, strategy, stopped_at, false);
            let (resumed, s) = run_summarized(&sb, strategy, 31, true);
            let at = format!("{strategy}, stopped at {stopped_at}");
            assert_eq!(essence(&resumed), essence(&whole), "{at}");
            assert_eq!(s.from_checkpoint, checkpoint, "{at}");
            assert_eq!(s.resumed, stopped_at, "{at}");
            // Finished: the checkpoint covers the whole budget but its short last round.
            let (again, s) = run_summarized(&sb, strategy, 31, true);
            assert_eq!(essence(&again), essence(&whole), "{at}");
            assert_eq!(s.from_checkpoint, 29, "{at}");
        }
        // An edited record: the digest no longer matches, so everything is replayed.
        let path = sa.trials_path(&the_key(), gpu);
        let text = std::fs::read_to_string(&path).unwrap();
        let edited = text.replacen("\"finished_unix_ms\":", "\"finished_unix_ms\":1", 1);
        std::fs::write(&path, edited).unwrap();
        let (again, s) = run_summarized(&sa, strategy, 31, true);
        assert_eq!(essence(&again), essence(&whole), "{strategy}");
        assert_eq!(
            s.from_checkpoint, 0,
            "{strategy}: a stale checkpoint was used"
        );
        // Cut to fewer trials than the checkpoint covers (`head -n 10`): replayed, then the
        // search measures the rest again.
        let keep: String = text.split_inclusive('\n').take(10).collect();
        std::fs::write(&path, keep).unwrap();
        let (again, s) = run_summarized(&sa, strategy, 31, true);
        assert_eq!(essence(&again), essence(&whole), "{strategy}");
        assert_eq!((s.resumed, s.from_checkpoint), (10, 0), "{strategy}");
    }
}

/// Tunes kernel "k" on a simulator into `store` (GPU "sim").
fn tune_sim(store: &Store, sim: &mut Simulator, o: &TuneOptions) -> Summary {
    let space = Space::builtin(sim.landscape.space.clone()).unwrap();
    let mut log = store.open_trials(&the_key(), "sim").unwrap();
    let never = AtomicBool::new(false);
    tune(sim, &space, o, Vec::new(), Some(&mut log), &never, |_| {}).unwrap()
}

#[test]
fn identical_ptx_is_measured_once() {
    let l = synthetic(Family::Knobs, 2);
    let mut sim = Simulator::new(l);
    let mut o = opts("random", 120);
    o.batch = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let s = tune_sim(&store, &mut sim, &o);
    let recs = store.trials(&the_key(), "sim").unwrap();
    let mut hashes: Vec<&str> = recs
        .iter()
        .filter(|r| r.duplicate_of.is_none())
        .filter_map(|r| r.ptx_hash.as_deref())
        .collect();
    let n = hashes.len();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), n, "a PTX hash was measured twice");
    assert_eq!(sim.measured().len() as u32, s.measured);
    assert!(
        recs.iter().any(|r| r.duplicate_of.is_some()),
        "no duplicate was met"
    );
    for r in recs.iter().filter(|r| r.duplicate_of.is_some()) {
        let orig = &recs[r.duplicate_of.unwrap() as usize];
        assert_eq!((&orig.ptx_hash, &orig.outcome), (&r.ptx_hash, &r.outcome));
    }
    let best = store.best_trial(&the_key(), "sim").unwrap().unwrap();
    assert!(best.ratio().unwrap() < 1.0);
}

/// A simulated landscape whose every measure call takes `each` of wall time.
struct Slow {
    sim: Simulator,
    each: Duration,
}

impl Evaluator for Slow {
    fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
        self.sim.lower(c)
    }

    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
        std::thread::sleep(self.each * batch.len() as u32);
        self.sim.measure(batch)
    }
}

#[test]
fn a_hard_limit_stops_before_a_round_that_would_pass_it() {
    // Trials of 40 ms under a limit of 100 ms: the baseline and the first round always run;
    // after that no round starts that the last one says would end past the limit. (`time`
    // stops after the round that passes it, and never inside a warm start: the deadline's
    // slices need the limit.)
    let each = Duration::from_millis(40);
    let sim = Simulator::new(synthetic(Family::Knobs, 2));
    let space = Space::builtin(sim.landscape.space.clone()).unwrap();
    let mut slow = Slow { sim, each };
    let mut o = opts("bo", 30);
    o.batch = 1;
    let never = AtomicBool::new(false);
    let whole = tune(&mut slow, &space, &o, Vec::new(), None, &never, |_| {}).unwrap();
    o.limit = Some(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let cut = tune(&mut slow, &space, &o, Vec::new(), None, &never, |_| {}).unwrap();
    let took = started.elapsed();
    assert_eq!(whole.trials, 30, "{whole:?}");
    // A slower machine only makes each round dearer, so fewer rounds fit: at least the
    // baseline and one candidate, at most what 100 ms holds after the baseline's 40.
    assert!(
        (2..=3).contains(&cut.trials),
        "{} trials in {took:?}",
        cut.trials
    );
    assert_eq!(cut.stop, r3::remix::tune::Stop::Time);
}

/// `c` lowered to a PTX text of its own whose hash is `h`.
fn lowered_as(c: &Candidate, h: &str) -> Lowered {
    Lowered {
        candidate: c.clone(),
        ptx: format!("// {h}\n"),
        ptx_hash: h.into(),
        stats: Default::default(),
        passes_ms: 0.0,
        codegen_ms: 0.0,
        ir_instructions: 0,
    }
}

/// Every candidate compiles to the same PTX; the time depends on the block size alone.
#[derive(Default)]
struct OneCode {
    measured: Mutex<Vec<Option<u32>>>,
}

impl Evaluator for OneCode {
    fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
        Ok(Lowered {
            candidate: c.clone(),
            ptx: "// one code\n".into(),
            ptx_hash: "one".into(),
            stats: Default::default(),
            passes_ms: 0.0,
            codegen_ms: 0.0,
            ir_instructions: 0,
        })
    }

    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
        let mut m = self.measured.lock().unwrap();
        batch
            .iter()
            .map(|l| {
                m.push(l.candidate.block_x);
                Outcome::Valid {
                    time: TimeStats::exact(100.0 + f64::from(l.candidate.block_x.unwrap_or(0))),
                    baseline: TimeStats::exact(100.0),
                }
            })
            .collect()
    }
}

#[test]
fn the_same_ptx_at_another_block_size_is_measured_again() {
    let space = Space::builtin(r3::remix::space::SpaceOptions {
        block_size_agnostic: true,
        launch_threads: Some(256),
        ..Default::default()
    })
    .unwrap();
    let mut ev = OneCode::default();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let mut log = store.open_trials(&the_key(), "one").unwrap();
    let never = AtomicBool::new(false);
    tune(
        &mut ev,
        &space,
        &opts("random", 40),
        Vec::new(),
        Some(&mut log),
        &never,
        |_| {},
    )
    .unwrap();
    let recs = store.trials(&the_key(), "one").unwrap();
    let mut measured = ev.measured.into_inner().unwrap();
    let n = measured.len();
    measured.sort();
    measured.dedup();
    assert_eq!(measured.len(), n, "a block size was measured twice");
    let blocks: std::collections::HashSet<Option<u32>> =
        recs.iter().map(|r| r.candidate.block_x).collect();
    assert_eq!(
        n,
        blocks.len(),
        "each block size of the trials measured once"
    );
    assert!(n > 2, "the search tried several block sizes: {blocks:?}");
    for r in recs.iter().filter(|r| r.duplicate_of.is_some()) {
        let orig = &recs[r.duplicate_of.unwrap() as usize];
        assert_eq!(orig.candidate.block_x, r.candidate.block_x);
        assert_eq!(orig.outcome, r.outcome);
    }
}

/// An evaluator that stages one round of 4 (trials 1-4, after the baseline) through
/// channels, not timing: trial `t` lowers to the PTX `hash_of(t)`, the lowerings of the trials
/// in `blocked` wait until the round's first measure call has begun (or, with `after`, until
/// that trial is lowered), and up to 4 lowerings run at once. A lowering that waits 5 s in
/// vain gives up and is noted, so that an implementation that measures only after compiling
/// fails instead of hanging.
struct Staged {
    trial_of: HashMap<Candidate, u32>,
    hash_of: fn(u32) -> String,
    after: Option<u32>,
    blocked: Vec<u32>,
    state: Mutex<StagedState>,
    changed: Condvar,
}

#[derive(Default)]
struct StagedState {
    /// The trials of each measure call, in call order (the baseline's first).
    calls: Vec<Vec<u32>>,
    /// Trials whose lowering waited for a measure call in vain.
    gave_up: Vec<u32>,
    /// Trials lowered, in the order they finished.
    lowered: Vec<u32>,
}

impl Staged {
    fn new(space: &Space, hash_of: fn(u32) -> String, blocked: &[u32]) -> Staged {
        // The round's candidates, asked as tune asks them: after the baseline's tell.
        let mut s = r3::remix::strategy::make("random", 7).unwrap();
        s.tell(&Candidate::baseline(), Some(1.0));
        let trial_of = (1..=4).map(|t| (s.ask(space), t)).collect();
        Staged {
            trial_of,
            hash_of,
            after: None,
            blocked: blocked.to_vec(),
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    fn trial(&self, c: &Candidate) -> u32 {
        if *c == Candidate::baseline() {
            return 0;
        }
        *self.trial_of.get(c).expect("a candidate of round 1")
    }

    /// Runs baseline and one round of 4 into a fresh store; returns its records.
    fn tune(&mut self, space: &Space) -> (Vec<TrialRecord>, Summary) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut log = store.open_trials(&the_key(), "staged").unwrap();
        let o = opts("random", 5);
        let never = AtomicBool::new(false);
        let s = tune(self, space, &o, Vec::new(), Some(&mut log), &never, |_| {}).unwrap();
        (store.trials(&the_key(), "staged").unwrap(), s)
    }
}

impl Evaluator for Staged {
    fn lower_threads(&self) -> usize {
        4
    }

    fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
        let t = self.trial(c);
        if self.blocked.contains(&t) {
            let st = self.state.lock().unwrap();
            let after = self.after;
            let (mut st, waited) = self
                .changed
                .wait_timeout_while(st, Duration::from_secs(5), |s| match after {
                    Some(a) => !s.lowered.contains(&a),
                    None => s.calls.len() < 2,
                })
                .unwrap();
            if waited.timed_out() {
                st.gave_up.push(t);
            }
        }
        self.state.lock().unwrap().lowered.push(t);
        self.changed.notify_all();
        Ok(lowered_as(c, &(self.hash_of)(t)))
    }

    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
        let mut st = self.state.lock().unwrap();
        st.calls
            .push(batch.iter().map(|l| self.trial(&l.candidate)).collect());
        self.changed.notify_all();
        batch
            .iter()
            .map(|l| Outcome::Valid {
                time: TimeStats::exact(100.0 - l.ptx_hash.len() as f64),
                baseline: TimeStats::exact(100.0),
            })
            .collect()
    }
}

/// A space whose candidates all launch with the recorded block size, so that equal PTX means
/// the same measurement.
fn staged_space() -> Space {
    Space::builtin(r3::remix::space::SpaceOptions {
        block_size_agnostic: false,
        ..synthetic(Family::Sparse, 1).space
    })
    .unwrap()
}

#[test]
fn the_gpu_measures_while_the_rest_of_the_round_compiles() {
    let space = staged_space();
    // The round's last lowering finishes only once a measure call of the round has begun.
    let mut ev = Staged::new(&space, |t| format!("ptx{t}"), &[4]);
    let (recs, summary) = ev.tune(&space);
    let st = ev.state.into_inner().unwrap();
    assert!(
        st.gave_up.is_empty(),
        "trial 4 was compiled only after measuring: no overlap"
    );
    assert_eq!(st.calls[0], [0], "the baseline is measured alone");
    assert!(!st.calls[1].contains(&4), "{:?}", st.calls);
    let mut all: Vec<u32> = st.calls.concat();
    all.sort();
    assert_eq!(all, [0, 1, 2, 3, 4], "each measured once: {:?}", st.calls);
    let trials: Vec<u32> = recs.iter().map(|r| r.trial).collect();
    assert_eq!(trials, [0, 1, 2, 3, 4], "recorded in trial order");
    assert!(recs.iter().all(|r| r.duplicate_of.is_none()));
    assert_eq!(summary.measured, 5);
}

#[test]
fn of_identical_ptx_the_lowest_trial_is_the_measured_one_whatever_finishes_first() {
    let space = staged_space();
    // Trials 1 and 3 lower to A, 2 and 4 to B; trial 4 finishes first, then 1, 2 and 3. A
    // round is measured in its order (`Stream::in_order`), so B is measured as trial 4's PTX
    // once 1 to 3 have arrived, and counts as trial 2's.
    let hash_of = |t: u32| match t {
        0 => "baseline".to_string(),
        t if t % 2 == 1 => "A".into(),
        _ => "BB".into(),
    };
    let mut ev = Staged {
        after: Some(4),
        ..Staged::new(&space, hash_of, &[1, 2, 3])
    };
    let (recs, summary) = ev.tune(&space);
    let st = ev.state.into_inner().unwrap();
    assert!(st.gave_up.is_empty(), "{:?}", st.gave_up);
    assert_eq!(st.lowered[1], 4, "trial 4 lowered first: {:?}", st.lowered);
    let round: Vec<u32> = st.calls[1..].concat();
    assert_eq!(round.len(), 2, "A and B measured once each: {:?}", st.calls);
    assert!(round.contains(&1) || round.contains(&3), "{:?}", st.calls);
    let dups: Vec<Option<u32>> = recs.iter().map(|r| r.duplicate_of).collect();
    assert_eq!(dups, [None, None, None, Some(1), Some(2)]);
    for (dup, orig) in [(3, 1), (4, 2)] {
        assert_eq!(recs[dup].measure_ms, 0.0, "a duplicate takes no GPU time");
        assert_eq!(
            (&recs[dup].ptx_hash, &recs[dup].outcome),
            (&recs[orig].ptx_hash, &recs[orig].outcome)
        );
    }
    assert_ne!(recs[1].outcome, recs[2].outcome);
    assert_eq!(summary.measured, 3);
}

#[test]
fn strategies_find_the_optimum_of_synthetic_landscapes() {
    // Knob-dominated landscapes: bo and evolution reach 98% of the optimum within 200 trials
    // in most runs; random and local search at least get within 10%.
    for (strategy, fraction, min_hits) in [
        ("bo", 0.98, 2),
        ("evolution", 0.98, 2),
        ("random", 0.90, 3),
        ("local", 0.90, 3),
    ] {
        let hits = (0..3)
            .filter(|&s| {
                trials_to_reach(&synthetic(Family::Knobs, s), strategy, s, 200, fraction)
                    .unwrap()
                    .is_some()
            })
            .count();
        assert!(
            hits >= min_hits,
            "{strategy}: reached {fraction} of the optimum in {hits}/3 landscapes"
        );
    }
}

/// The first trials file of the store under `home`, and a handle that holds its lock as a
/// running search's would.
fn hold_trials_file(home: &std::path::Path) -> (std::path::PathBuf, std::fs::File) {
    let trials = crate::support::walk(&home.join("store/trials"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let held = std::fs::File::open(&trials).unwrap();
    held.try_lock().unwrap();
    (trials, held)
}

/// A synthetic landscape written as a table for `--simulate`; its path.
fn knobs_table(dir: &std::path::Path) -> String {
    let table = dir.join("land.json");
    std::fs::write(
        &table,
        serde_json::to_string(&synthetic(Family::Knobs, 0)).unwrap(),
    )
    .unwrap();
    table.to_string_lossy().into_owned()
}

#[test]
fn tune_without_a_gpu_says_so_and_simulate_runs() {
    let home = tempfile::tempdir().unwrap();
    if r3::device::driver_present() {
        skip(
            "no-gpu",
            "this machine has a GPU: what tune says without one not checked",
        );
    } else {
        let out = r3(&["tune", "saxpy_kernel"], home.path());
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("no GPU") && stderr(&out).contains("--simulate"),
            "{}",
            stderr(&out)
        );
    }

    let t = &knobs_table(home.path());
    let out = r3(
        &["tune", "--simulate", t, "--budget", "12", "--batch", "4"],
        home.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("12 trials (0 resumed"),
        "{}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("trial 12/12"), "{}", stderr(&out));
    // Again without --resume: refused, naming the file; with --resume: continues.
    let again = r3(
        &["tune", "--simulate", t, "--budget", "20", "--batch", "4"],
        home.path(),
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("--resume"), "{}", stderr(&again));
    // While another r3 writes the file (its lock held here), a second search stops with that,
    // not with advice to --resume (which would be refused too), with or without --resume.
    let (_, held) = hold_trials_file(home.path());
    for resume in [false, true] {
        let mut args = vec!["tune", "--simulate", t, "--budget", "20"];
        if resume {
            args.push("--resume");
        }
        let busy = r3(&args, home.path());
        assert_eq!(busy.status.code(), Some(1));
        let err = stderr(&busy);
        assert!(err.contains("is being written by another r3"), "{err}");
        assert!(!err.contains("already holds"), "{err}");
    }
    drop(held);
    let more = r3(
        &[
            "tune",
            "--simulate",
            t,
            "--budget",
            "20",
            "--batch",
            "4",
            "--resume",
        ],
        home.path(),
    );
    assert!(more.status.success(), "{}", stderr(&more));
    assert!(
        stdout(&more).contains("20 trials (12 resumed"),
        "{}",
        stdout(&more)
    );
}

#[test]
fn dry_run_lowers_candidates_in_child_processes_and_survives_their_crashes() {
    let home = tempfile::tempdir().unwrap();
    let store = repo().join("llvm-ir-corpus/store");
    let s = store.to_str().unwrap();
    let ok = r3(
        &[
            "tune",
            "--dry-run",
            "saxpy_kernel",
            "--budget",
            "6",
            // The repository's store stays as it is: no nvcc code kept in it.
            "--no-nvcc",
            "--r3-store",
            s,
        ],
        home.path(),
    );
    assert!(ok.status.success(), "{}", stderr(&ok));
    let line = stdout(&ok)
        .lines()
        .find(|l| l.starts_with("saxpy_kernel"))
        .unwrap()
        .to_owned();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert!(cols.contains(&"6"), "6 candidates compiled: {line}");
    // Every lowering child dies as a crashing pass would: r3 reports it and goes on.
    let crashed = std::process::Command::new(r3_bin())
        .args([
            "tune",
            "--dry-run",
            "saxpy_kernel",
            "--budget",
            "3",
            "--no-nvcc",
            "--r3-store",
            s,
        ])
        .env("R3_TEST_CRASH_LOWER", "1")
        .output()
        .unwrap();
    assert_eq!(crashed.status.code(), Some(1), "{}", stderr(&crashed));
    assert!(
        stdout(&crashed).contains("LLVM crashed (signal 6)"),
        "{}",
        stdout(&crashed)
    );
}

/// Tunes `kernel` on a synthetic landscape through the store (as `r3 tune` does), learning
/// from the store's other searches when `transfer`; returns the kernel's trials.
fn tune_stored(
    store: &Store,
    kernel: &str,
    strategy: &str,
    budget: u32,
    transfer: bool,
    resume: bool,
) -> Result<Vec<TrialRecord>, r3::remix::tune::TuneError> {
    let l = synthetic(Family::Knobs, 1);
    let space = Space::builtin(l.space.clone()).unwrap();
    let mut sim = Simulator::new(l);
    let o = TuneOptions {
        kernel: kernel.into(),
        transfer,
        ..opts(strategy, budget)
    };
    let never = AtomicBool::new(false);
    r3::remix::tune::tune_in_store(store, &mut sim, &space, &o, resume, &never, |_| {})?;
    Ok(store
        .trials(&TrialsKey::from(kernel), "simulated: synthetic")
        .unwrap())
}

#[test]
fn bo_learns_from_an_earlier_search_and_resumes_with_what_it_learned_from() {
    let gpu = "simulated: synthetic";
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (sa, sb) = (
        Store::create(a.path()).unwrap(),
        Store::create(b.path()).unwrap(),
    );
    for s in [&sa, &sb] {
        tune_stored(s, "earlier", "random", 40, false, false).unwrap();
    }
    let cold = {
        let c = tempfile::tempdir().unwrap();
        let sc = Store::create(c.path()).unwrap();
        tune_stored(&sc, "k", "bo", 31, true, false).unwrap()
    };
    let whole = tune_stored(&sa, "k", "bo", 31, true, false).unwrap();
    let refs = sa.transfer_sources(&the_key(), gpu).unwrap().unwrap();
    assert_eq!(refs.sources.len(), 1);
    assert_eq!(
        (refs.sources[0].kernel.as_str(), refs.sources[0].trials),
        ("earlier", 40)
    );
    assert_ne!(
        essence(&whole),
        essence(&cold),
        "the earlier search changed nothing"
    );

    // Stopped at 14; another search lands in the store before the resume, which must still
    // learn from exactly what the first part did.
    tune_stored(&sb, "k", "bo", 14, true, false).unwrap();
    tune_stored(&sb, "later", "random", 40, false, false).unwrap();
    let resumed = tune_stored(&sb, "k", "bo", 31, true, true).unwrap();
    assert_eq!(essence(&resumed), essence(&whole));

    // A source that lost trials since costs what the search learned from it, not the search:
    // the resume restores its checkpoint, which holds the warm start, and goes on.
    let path = sb.trials_path(&TrialsKey::from("earlier"), gpu);
    let text = std::fs::read_to_string(&path).unwrap();
    let cut: String = text.lines().take(20).map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, cut).unwrap();
    let longer = tune_stored(&sb, "k", "bo", 40, true, true).unwrap();
    assert_eq!(longer.len(), 40);
    assert_eq!(essence(&longer[..31]), essence(&whole));
    // Without the checkpoint the replay cannot be the search it was: an error names the file
    // and the likely cause.
    let k = sb.trials_path(&the_key(), gpu);
    std::fs::remove_file(k.with_extension("checkpoint.json")).unwrap();
    let err = tune_stored(&sb, "k", "bo", 44, true, true)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&k.display().to_string()) && err.contains("a changed search it learned from"),
        "{err}"
    );
}

#[test]
fn no_transfer_means_the_cold_search() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::create(d.path()).unwrap();
    tune_stored(&s, "earlier", "random", 40, false, false).unwrap();
    let off = tune_stored(&s, "k", "bo", 20, false, false).unwrap();
    let e = tempfile::tempdir().unwrap();
    let alone = tune_stored(
        &Store::create(e.path()).unwrap(),
        "k",
        "bo",
        20,
        true,
        false,
    )
    .unwrap();
    assert_eq!(essence(&off), essence(&alone));
    let refs = s
        .transfer_sources(&the_key(), "simulated: synthetic")
        .unwrap()
        .unwrap();
    assert!(refs.sources.is_empty());
}

#[test]
fn candidates_outside_the_search_reuse_measured_ptx() {
    let mut sim = Simulator::new(synthetic(Family::Knobs, 2));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let o = opts("random", 12);
    tune_sim(&store, &mut sim, &o);
    let known = store.trials(&the_key(), "sim").unwrap();
    let before = sim.measured().len();
    // Two trials already measured, and one new candidate asked twice.
    let fresh = Candidate {
        codegen_opt: 1,
        ..Candidate::with_pipeline("default<O1>")
    };
    let cands = vec![
        known[3].candidate.clone(),
        fresh.clone(),
        known[5].candidate.clone(),
        fresh,
    ];
    let (recs, measured) = r3::remix::tune::evaluate_candidates(&sim, &o, 12, cands, &known);
    assert_eq!(
        recs.iter().map(|r| r.trial).collect::<Vec<_>>(),
        [12, 13, 14, 15]
    );
    assert_eq!(measured, 1, "only the new candidate is measured");
    assert_eq!(sim.measured().len(), before + 1);
    assert_eq!(recs[0].outcome, known[3].outcome);
    assert_eq!(recs[2].outcome, known[5].outcome);
    assert_eq!(recs[3].duplicate_of, Some(13));
}

#[test]
fn status_says_where_each_search_stands() {
    let home = tempfile::tempdir().unwrap();
    let t = &knobs_table(home.path());
    let out = r3(&["tune", "--simulate", t, "--budget", "12"], home.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let status = |json: bool| {
        let out = r3(
            if json {
                &["status", "--json"]
            } else {
                &["status"]
            },
            home.path(),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let text = status(false);
    assert!(text.contains("done (12 of budget 12)"), "{text}");
    assert!(
        text.contains("1 search(es): 0 running, 1 finished, 0 stopped"),
        "{text}"
    );
    // Its trials file locked by another process: running.
    let (trials, held) = hold_trials_file(home.path());
    let text = status(false);
    assert!(text.contains("running (where: no lease)"), "{text}");
    drop(held);
    // Killed mid-run: no end written, no lock held: stopped, and --resume is the way on.
    std::fs::remove_file(trials.with_extension("end.json")).unwrap();
    let text = status(false);
    assert!(
        text.contains("stopped without finishing (killed?): --resume continues it"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    let s = &json["searches"][0];
    assert_eq!(
        (s["state"].as_str(), s["trials"].as_u64()),
        (Some("stopped"), Some(12))
    );
    assert!(s["best"].as_f64().is_some(), "{s}");
    // Simulated trials never ship (R3_APPLY_SIMULATED is not set): apply keeps clang's code,
    // and status says so beside the best.
    assert_eq!(s["shipped"].as_f64(), Some(1.0), "{s}");
}

/// Every search of a store, as (kernel, gpu) -> its trials' essence.
fn searches_of(store: &std::path::Path) -> std::collections::BTreeMap<String, Vec<Essence>> {
    let store = Store::open(store).unwrap();
    store
        .search_statuses()
        .unwrap()
        .into_iter()
        .map(|s| {
            let trials = store.trials(&s.kernel, &s.gpu).unwrap();
            (format!("{} on {}", s.kernel, s.gpu), essence(&trials))
        })
        .collect()
}

#[test]
fn workers_sharing_a_store_search_each_kernel_once_and_a_killed_ones_work_is_resumed() {
    let home = tempfile::tempdir().unwrap();
    let mut tables = Vec::new();
    for i in 0..6 {
        let mut land = serde_json::to_value(synthetic(Family::Knobs, i)).unwrap();
        land["kernel"] = format!("kernel_{i}").into();
        let path = home.path().join(format!("k{i}.json"));
        std::fs::write(&path, land.to_string()).unwrap();
        tables.push(path.to_string_lossy().into_owned());
    }
    let tune_args = |store: &str, budget: &str| {
        let mut a: Vec<String> = [
            "--r3-store",
            store,
            "tune",
            "--budget",
            budget,
            "--batch",
            "2",
        ]
        .map(String::from)
        .to_vec();
        a.extend(["--no-transfer".into(), "--resume".into()]);
        for t in &tables {
            a.extend(["--simulate".into(), t.clone()]);
        }
        a
    };
    let worker = |store: &str, budget: &str| {
        std::process::Command::new(r3_bin())
            .args(tune_args(store, budget))
            .env("HOME", home.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let wait_all = |children: Vec<std::process::Child>| {
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
        }
    };
    let path = |name: &str| home.path().join(name).to_string_lossy().into_owned();
    // One worker alone: the reference.
    wait_all(vec![worker(&path("alone"), "30")]);
    let alone = searches_of(&home.path().join("alone"));
    assert_eq!(alone.len(), 6);
    assert!(alone.values().all(|t| t.len() == 30));
    // Three at once on one store: each search is one worker's, none lost or repeated.
    wait_all((0..3).map(|_| worker(&path("three"), "30")).collect());
    assert_eq!(searches_of(&home.path().join("three")), alone);
    // A fleet killed after 12 trials of every search (trials written, no end record), then
    // two workers submitted again: the searches continue to what one worker alone found.
    wait_all(vec![worker(&path("killed"), "12")]);
    for end in crate::support::walk(&home.path().join("killed/trials")) {
        if end.to_string_lossy().ends_with(".end.json") {
            std::fs::remove_file(end).unwrap();
        }
    }
    let status = r3(&["--r3-store", &path("killed"), "status"], home.path());
    assert!(
        stdout(&status).contains("6 search(es): 0 running, 0 finished, 6 stopped"),
        "{}",
        stdout(&status)
    );
    wait_all((0..2).map(|_| worker(&path("killed"), "30")).collect());
    assert_eq!(searches_of(&home.path().join("killed")), alone);
    // A worker started after all is done passes every search over and measures nothing.
    let late = worker(&path("killed"), "30").wait_with_output().unwrap();
    assert!(late.status.success());
    assert_eq!(
        stderr(&late).matches("passed over").count(),
        6,
        "{}",
        stderr(&late)
    );
}

/// Issue 32: a store is shared by a team: what one user's tune wrote (trials, end, transfer
/// and unit files), another user reads with `status` and `report`. Run where the test runs as
/// root and can drop to user `nobody` (setpriv); CI does.
#[test]
fn a_store_written_by_one_user_is_read_by_another() {
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| stdout(&o).trim() == "0");
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if root.ok() != Some(true) || !setpriv {
        return skip(
            "another-user",
            "needs root and setpriv to run r3 as user nobody",
        );
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let t = &knobs_table(home.path());
    let out = r3(&["tune", "--simulate", t, "--budget", "12"], home.path());
    assert!(out.status.success(), "{}", stderr(&out));
    for cmd in ["status", "report"] {
        let out = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(r3_bin())
            .arg(cmd)
            .env("R3_STORE", home.path().join("store"))
            .env("HOME", home.path())
            .env_remove("R3_CUDA_PATH")
            .output()
            .unwrap();
        assert!(
            out.status.success() && !stderr(&out).contains("Permission denied"),
            "{cmd} as nobody: {}",
            stderr(&out)
        );
    }
}

/// Issue 32: a trials file whose numbers skip or repeat (edited, or two files joined) is
/// explained as such, with the lines to keep, not blamed on another r3; keeping them resumes.
#[test]
fn a_gap_or_a_repeat_in_trial_numbers_is_explained_and_keeping_the_lines_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    run(&store, "random", 10, false);
    let gpu = "simulated: synthetic";
    let path = store.trials_path(&the_key(), gpu);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let l = synthetic(Family::Sparse, 1);
    let space = Space::builtin(l.space.clone()).unwrap();
    for (edited, what) in [
        (
            [&lines[..5], &lines[6..]].concat(),
            "the trials between are missing",
        ),
        (
            [&lines[..5], &lines[3..4], &lines[5..]].concat(),
            "a repeat of an earlier trial",
        ),
    ] {
        std::fs::write(&path, edited.join("\n") + "\n").unwrap();
        let mut log = store.open_trials(&the_key(), gpu).unwrap();
        let err = tune(
            &mut Simulator::new(l.clone()),
            &space,
            &opts("random", 10),
            store.trials(&the_key(), gpu).unwrap(),
            Some(&mut log),
            &AtomicBool::new(false),
            |_| {},
        )
        .unwrap_err()
        .to_string();
        drop(log);
        assert!(
            err.contains("record 6") && err.contains(what) && err.contains("head -n 5"),
            "{err}"
        );
        assert!(!err.contains("different r3"), "{err}");
    }
    // As the fix says: the first 5 lines, then --resume.
    std::fs::write(&path, lines[..5].join("\n") + "\n").unwrap();
    assert_eq!(run(&store, "random", 10, true).len(), 10);
}

/// The trials of a kernel whose directory was deleted are not left behind: a resume by name
/// refuses and names them (never a new search under another key beside them), and their hash
/// resumes them.
#[test]
fn a_resume_whose_kernel_directory_is_gone_names_the_orphaned_trials() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = saxpy_store(d);
    let table = landscape(d);
    let tune = |args: &[&str]| {
        let mut all = vec!["tune", "--simulate", table.to_str().unwrap()];
        all.extend_from_slice(&["--no-ablate", "--r3-store", store.to_str().unwrap()]);
        all.extend_from_slice(args);
        r3(&all, d)
    };
    let first = tune(&["saxpy", "--budget", "6"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let searches = |store: &std::path::Path| walk(&store.join("trials")).len();
    let files = searches(&store);
    let hash = std::fs::read_dir(store.join("kernels"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| !n.starts_with('.'))
        .unwrap();
    std::fs::remove_dir_all(store.join("kernels").join(&hash)).unwrap();

    let refused = tune(&["saxpy", "--budget", "10", "--resume"]);
    let e = stderr(&refused);
    assert!(!refused.status.success(), "{e}");
    assert!(
        e.contains(&format!("trials/{hash}/")) && e.contains("(6 trials)"),
        "{e}"
    );
    assert!(
        e.contains("fix: rebuild the program with r3-clang++"),
        "{e}"
    );
    assert_eq!(searches(&store), files, "nothing new was written");

    let resumed = tune(&[&hash[..8], "--budget", "10", "--resume"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert!(
        stdout(&resumed).contains("10 trials (6 resumed"),
        "{}",
        stdout(&resumed)
    );
}

#[test]
fn a_deadline_asks_for_what_to_spend_it_on_and_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    r3::store::Store::create(&store).unwrap();
    let s = store.to_str().unwrap();
    let fails_with = |args: &[&str], words: &str| {
        let mut all = vec!["tune", "--r3-store", s];
        all.extend(args);
        let out = r3(&all, dir.path());
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(words), "{args:?}: {}", stderr(&out));
    };
    let scope = "add --program EXE or --all";
    fails_with(&["--deadline", "10m"], scope);
    fails_with(&["--deadline", "10m", "--all", "--program", "./app"], scope);
    fails_with(&["--deadline", "10m", "saxpy"], scope);
    fails_with(&["--program", "./app"], "add --deadline");
    fails_with(&["--all", "--deadline", "soon"], "--deadline soon");
    let table = landscape(dir.path());
    let t = table.to_str().unwrap();
    fails_with(
        &["--all", "--deadline", "1m", "--simulate", t],
        "leave out --simulate",
    );
    if r3::device::driver_present() {
        skip(
            "no-gpu",
            "this machine has a GPU: what a deadline says without one not checked",
        );
    } else {
        fails_with(&["--all", "--deadline", "1m"], "no GPU on this machine");
    }
}

/// A job array for a deadline: every task continues the allocation its submission started
/// (`--deadline-id`), submitting the same script again continues it, and a script emitted
/// later starts its own; with `--resume`, the workers continue whatever is stored.
#[test]
fn a_job_array_for_a_deadline_names_the_allocation_its_tasks_share() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    r3::store::Store::create(&store).unwrap();
    let s = store.to_str().unwrap();
    let exec_line = |extra: &[&str]| {
        let mut args = vec!["tune", "--r3-store", s, "--all", "--deadline", "10m"];
        args.extend(extra);
        args.extend(["--emit-sbatch", "4"]);
        let out = r3(&args, dir.path());
        assert!(out.status.success(), "{}", stderr(&out));
        let script = stdout(&out);
        let line = script.lines().find(|l| l.starts_with("exec ")).unwrap();
        line.to_owned()
    };
    let id_of = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let at = words
            .iter()
            .position(|w| *w == "--deadline-id")
            .expect(line);
        words[at + 1].to_owned()
    };
    let first = exec_line(&[]);
    assert!(first.ends_with("--resume"), "{first}");
    let (a, b) = (id_of(&first), id_of(&exec_line(&[])));
    assert_eq!(a.len(), 16, "{first}");
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()), "{first}");
    assert_ne!(a, b, "two submissions, two allocations");
    let resumed = exec_line(&["--resume"]);
    assert!(!resumed.contains("--deadline-id"), "{resumed}");
}

/// Every other code is dropped by a screen whose prefix timed it (implausibly) ten times
/// faster than -O3; the rest run 10% faster on the whole launch.
#[derive(Default)]
struct Screening {
    told: Mutex<u32>,
}

impl Evaluator for Screening {
    fn lower(&self, c: &Candidate) -> Result<Lowered, Outcome> {
        let h = r3::kernel::short_hash(serde_json::to_string(c).unwrap().as_bytes());
        Ok(lowered_as(c, &h))
    }

    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
        batch
            .iter()
            .map(|l| {
                let dropped =
                    l.candidate != Candidate::baseline() && l.ptx_hash.as_bytes()[0] % 2 == 0;
                if dropped {
                    *self.told.lock().unwrap() += 1;
                    return Outcome::Screened {
                        time: TimeStats::exact(10.0),
                        baseline: TimeStats::exact(100.0),
                        fraction: 0.0625,
                    };
                }
                let us = if l.candidate == Candidate::baseline() {
                    100.0
                } else {
                    90.0
                };
                Outcome::Valid {
                    time: TimeStats::exact(us),
                    baseline: TimeStats::exact(100.0),
                }
            })
            .collect()
    }
}

#[test]
fn a_candidate_the_screen_dropped_is_kept_as_such_and_never_becomes_the_best() {
    let space = staged_space();
    let mut ev = Screening::default();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    // The evaluator names no GPU: its trials are "unknown"'s.
    let mut log = store.open_trials(&the_key(), "unknown").unwrap();
    let never = AtomicBool::new(false);
    let s = tune(
        &mut ev,
        &space,
        &opts("bo", 24),
        Vec::new(),
        Some(&mut log),
        &never,
        |_| {},
    )
    .unwrap();
    let recs = store.trials(&the_key(), "unknown").unwrap();
    let screened = recs
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Screened { .. }))
        .count();
    assert!(
        screened > 0 && *ev.told.lock().unwrap() > 0,
        "no candidate was screened"
    );
    // The search's best and the store's are valid on the whole launch, at 0.9.
    assert_eq!(s.best.as_ref().and_then(|b| b.ratio()), Some(0.9));
    let best = store.best_trial(&the_key(), "unknown").unwrap().unwrap();
    assert_eq!(best.ratio(), Some(0.9));
    // The report counts them apart.
    let report = r3::report::tuning::build(&store, &Default::default()).unwrap();
    assert_eq!(report.kernels[0].outcomes.screened, screened);
}

/// bo resumed from its checkpoint goes on exactly as the search that was never stopped, on
/// recorded landscapes at the budget where it once drifted (issue 56). Stops at 28 and 64 fall
/// inside a round, as a kill between a round's trials does: the resume restores the round
/// before and asks this one again. 54 ends a round.
#[test]
fn bo_resumed_on_recorded_landscapes_asks_every_trial_the_whole_search_did() {
    for table in [
        "_z17gemm_naive_kernelipkfs0_pf.json",
        "_z13gemv_t_kerneliipkfs0_pf.json",
    ] {
        let path = repo().join("bench/landscapes").join(table);
        let landscape = r3::remix::sim::Landscape::load(&path).unwrap();
        let whole = bo_on_landscape(&landscape, &[150]);
        for stop in [28, 54, 64] {
            let resumed = bo_on_landscape(&landscape, &[stop, 150]);
            assert_eq!(resumed.len(), 150, "{table}, stopped at {stop}");
            let first = (0..150).find(|&i| essence(&resumed[i..=i]) != essence(&whole[i..=i]));
            assert_eq!(
                first, None,
                "{table}, stopped at {stop}: first differing trial"
            );
        }
    }
}

/// `r3 tune --simulate TABLE --batch 4` in a fresh store, run to each budget in turn (each
/// after the first a resume from the checkpoint); the trials.
fn bo_on_landscape(landscape: &r3::remix::sim::Landscape, budgets: &[u32]) -> Vec<TrialRecord> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let space = Space::builtin(landscape.space.clone()).unwrap();
    let never = AtomicBool::new(false);
    for (i, &budget) in budgets.iter().enumerate() {
        let mut sim = Simulator::new(landscape.clone());
        let o = TuneOptions {
            seed: 0,
            transfer: true,
            recipes: true,
            race: true,
            ..opts("bo", budget)
        };
        let tuned =
            r3::remix::tune::tune_in_store(&store, &mut sim, &space, &o, i > 0, &never, |_| {});
        let (s, _) = tuned.unwrap_or_else(|e| panic!("budget {budget}: {e}"));
        assert!(
            i == 0 || s.from_checkpoint > 0,
            "resumed without the checkpoint"
        );
    }
    let gpu = Simulator::new(landscape.clone()).device().gpu;
    store.trials(&the_key(), &gpu).unwrap()
}

/// The trials key these tests search under.
fn the_key() -> TrialsKey {
    TrialsKey::from("k")
}
