//! The tuning loop on simulated landscapes: exact resume, no PTX measured twice, strategies
//! reaching the optimum, and `r3 tune` on the command line.

use crate::support::*;
use r3::remix::sim::{synthetic, Family, Simulator};
use r3::remix::space::Space;
use r3::remix::tune::{trials_to_reach, tune, TuneOptions};
use r3::store::trials::TrialRecord;
use r3::store::Store;
use std::sync::atomic::AtomicBool;

fn opts(strategy: &str, budget: u32) -> TuneOptions {
    TuneOptions {
        kernel: "k".into(),
        strategy: strategy.into(),
        seed: 7,
        budget,
        time: None,
        batch: 4,
    }
}

/// Runs into a store; returns the trials file's records.
fn run(store: &Store, strategy: &str, budget: u32, resume: bool) -> Vec<TrialRecord> {
    let l = synthetic(Family::Sparse, 1);
    let space = Space::builtin(l.space.clone()).unwrap();
    let mut sim = Simulator::new(l);
    let gpu = "simulated: synthetic";
    let prior = if resume {
        store.trials("k", gpu).unwrap()
    } else {
        Vec::new()
    };
    let mut log = store.open_trials("k", gpu).unwrap();
    let never = AtomicBool::new(false);
    tune(
        &mut sim,
        &space,
        &opts(strategy, budget),
        prior,
        Some(&mut log),
        &never,
        |_| {},
    )
    .unwrap();
    store.trials("k", gpu).unwrap()
}

type Essence = (u32, String, Option<String>, Option<u32>, String);

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
        let path = sb.trials_path("k", "simulated: synthetic");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"format\":1,\"trial\":14,\"kern");
        std::fs::write(&path, bytes).unwrap();
        let resumed = run(&sb, strategy, 31, true);
        assert_eq!(essence(&resumed), essence(&whole), "{strategy}");
    }
}

#[test]
fn identical_ptx_is_measured_once() {
    let l = synthetic(Family::Knobs, 2);
    let space = Space::builtin(l.space.clone()).unwrap();
    let mut sim = Simulator::new(l);
    let mut o = opts("random", 120);
    o.batch = 8;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let mut log = store.open_trials("k", "sim").unwrap();
    let s = tune(
        &mut sim,
        &space,
        &o,
        Vec::new(),
        Some(&mut log),
        &AtomicBool::new(false),
        |_| {},
    )
    .unwrap();
    let recs = store.trials("k", "sim").unwrap();
    let mut hashes: Vec<&str> = recs
        .iter()
        .filter(|r| r.duplicate_of.is_none())
        .filter_map(|r| r.ptx_hash.as_deref())
        .collect();
    let n = hashes.len();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), n, "a PTX hash was measured twice");
    assert_eq!(sim.measured.len() as u32, s.measured);
    assert!(
        recs.iter().any(|r| r.duplicate_of.is_some()),
        "no duplicate was met"
    );
    for r in recs.iter().filter(|r| r.duplicate_of.is_some()) {
        let orig = &recs[r.duplicate_of.unwrap() as usize];
        assert_eq!((&orig.ptx_hash, &orig.outcome), (&r.ptx_hash, &r.outcome));
    }
    let best = store.best_trial("k", "sim").unwrap().unwrap();
    assert!(best.ratio().unwrap() < 1.0);
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

#[test]
fn tune_without_a_gpu_says_so_and_simulate_runs() {
    let home = tempfile::tempdir().unwrap();
    if !r3::gpu::driver_present() {
        let out = r3(&["tune", "saxpy_kernel"], home.path());
        assert_eq!(out.status.code(), Some(1));
        assert!(
            stderr(&out).contains("no GPU") && stderr(&out).contains("--simulate"),
            "{}",
            stderr(&out)
        );
    }

    let table = home.path().join("land.json");
    std::fs::write(
        &table,
        serde_json::to_string(&synthetic(Family::Knobs, 0)).unwrap(),
    )
    .unwrap();
    let t = table.to_str().unwrap();
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
