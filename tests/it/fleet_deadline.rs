//! One deadline over a fleet (issue 62): the workers of `r3 tune --all --deadline T --gpus all`
//! share one allocation through the store. Two workers run `remix::deadline::run` at once on
//! one store, each with a runner that does what the GPU's does (`program::GpuRunner`): a slice
//! makes the kernel's evaluator where none is alive (seconds, on a GPU: a worker, a context, the
//! recording loaded), then takes the kernel's trials file by its lock (`fleet::claim`) and
//! searches; a kernel whose file another worker holds is left to it. Time is real (sleeps), so
//! that the two workers' clocks, locks and the store's allocation are the ones a fleet has.
//! The workers share the confirmations (each keeps back its part of them, not all), one with
//! nothing it may search waits for the other instead of stopping, and a winner is confirmed by
//! the worker that searched it.

use r3::remix::deadline::{self, Continue, Entrant, Runner, SliceOutcome};
use r3::remix::fleet::{self, Claim};
use r3::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GPU: &str = "Sim GPU";

/// A simulated kernel: each trial costs `cost_s`; its best after n trials (the baseline first)
/// approaches `top` as 1 - e^(-(n-1)/8).
struct Kernel {
    cost_s: f64,
    top: f64,
}

fn best_after(k: &Kernel, trials: u32) -> f64 {
    let n = f64::from(trials.saturating_sub(1));
    1.0 + (k.top - 1.0) * (1.0 - (-n / 8.0).exp())
}

/// What both workers see: the kernels, each one's trials so far (its trials file), and every
/// search and confirmation as (worker, kernel, start, end) on the fleet's clock.
struct Fleet {
    kernels: BTreeMap<String, Kernel>,
    trials: Mutex<BTreeMap<String, u32>>,
    searched: Mutex<Vec<(usize, String, f64, f64)>>,
    confirmed: Mutex<Vec<(usize, String, f64, f64)>>,
    start: Instant,
}

impl Fleet {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

/// Seconds a worker takes to make a kernel's evaluator where none of its own is alive.
const SETUP_S: f64 = 0.15;

struct Worker<'a> {
    id: usize,
    store: &'a Store,
    fleet: &'a Fleet,
    alive: BTreeSet<String>,
    batch: u32,
    held: Option<(String, r3::store::trials::TrialLog)>,
    /// Seconds a confirmation takes (the allocation prices one at about 2 s, its setup, until
    /// the first ones teach it their scale: half that at least).
    confirm_s: f64,
}

impl Worker<'_> {
    fn trials_of(&self, kernel: &r3::kernel::TrialsKey) -> u32 {
        self.fleet.trials.lock().unwrap()[kernel.as_str()]
    }

    fn outcome(
        &self,
        kernel: &r3::kernel::TrialsKey,
        done: Option<String>,
        setup_s: f64,
    ) -> SliceOutcome {
        let n = self.trials_of(kernel);
        SliceOutcome {
            trials: n,
            best: Some(best_after(&self.fleet.kernels[kernel.as_str()], n)),
            done,
            seconds: 0.0,
            setup_s,
            trial_s: None,
            beside: None,
        }
    }
}

impl Runner for Worker<'_> {
    fn now_s(&self) -> f64 {
        self.fleet.now()
    }

    fn slice(
        &mut self,
        kernel: &r3::kernel::TrialsKey,
        warm: bool,
        trials: u32,
        limit_s: f64,
        _ships_from: f64,
    ) -> SliceOutcome {
        // As the GPU's runner: the evaluator first (where none is alive), then the claim.
        let setup_s = if self.alive.insert(kernel.to_string()) {
            std::thread::sleep(Duration::from_secs_f64(SETUP_S));
            SETUP_S
        } else {
            0.0
        };
        let held = match self.held.take() {
            Some((k, log)) if *kernel == k => Some(log),
            _ => None,
        };
        let claim = match held {
            Some(log) => Claim::Take(log),
            None => fleet::claim(self.store, kernel, GPU, trials).unwrap(),
        };
        let log = match claim {
            Claim::Take(log) => log,
            other => {
                let why = fleet::left_because(kernel, &other).unwrap_or_default();
                return self.outcome(kernel, Some(why), setup_s);
            }
        };
        let k = &self.fleet.kernels[kernel.as_str()];
        let t0 = self.fleet.now();
        // Rounds of `batch` trials up to `trials`; past `limit_s`, the round in flight ends it
        // (a warm start is never cut).
        while self.trials_of(kernel) < trials && (warm || self.fleet.now() - t0 < limit_s) {
            let n = self.batch.min(trials - self.trials_of(kernel));
            std::thread::sleep(Duration::from_secs_f64(f64::from(n) * k.cost_s));
            *self
                .fleet
                .trials
                .lock()
                .unwrap()
                .get_mut(kernel.as_str())
                .unwrap() += n;
        }
        self.fleet.searched.lock().unwrap().push((
            self.id,
            kernel.to_string(),
            t0,
            self.fleet.now(),
        ));
        drop(log);
        self.outcome(kernel, None, setup_s)
    }

    fn busy(&self, kernel: &r3::kernel::TrialsKey) -> bool {
        self.store.search_held(kernel, GPU)
    }

    fn hold(&mut self, kernel: &r3::kernel::TrialsKey) -> bool {
        self.held = None;
        match self.store.open_trials(kernel, GPU) {
            Ok(log) => {
                self.held = Some((kernel.to_string(), log));
                true
            }
            Err(_) => false,
        }
    }

    fn alive(&self, kernel: &r3::kernel::TrialsKey) -> bool {
        self.alive.contains(kernel.as_str())
    }

    fn confirm(&mut self, kernel: &r3::kernel::TrialsKey, _until_s: f64) {
        let t0 = self.fleet.now();
        std::thread::sleep(Duration::from_secs_f64(self.confirm_s));
        self.fleet.confirmed.lock().unwrap().push((
            self.id,
            kernel.to_string(),
            t0,
            self.fleet.now(),
        ));
    }

    fn withhold(&mut self, _kernel: &r3::kernel::TrialsKey, _why: &str) {}

    fn say(&mut self, _line: String) {}
}

fn entrants(fleet: &Fleet, shares: &[(&str, f64)]) -> Vec<Entrant> {
    shares
        .iter()
        .map(|&(name, share)| Entrant::unpriced(name, share, fleet.kernels[name].cost_s))
        .collect()
}

/// What a fleet's run came to: each worker's end (on the fleet's clock) and why, every search
/// and confirmation, and the allocation the store keeps.
struct Run {
    ends: Vec<(f64, deadline::Ended)>,
    searched: Vec<(usize, String, f64, f64)>,
    confirmed: Vec<(usize, String, f64, f64)>,
    allocation: r3::store::deadline::Allocation,
}

/// `workers` workers under one deadline of `deadline_s` over four kernels (40%, 30%, 20% and 10%
/// of the program, 20-50 ms a trial, 1.2x to 2.1x at most), each confirmation `confirm_s`.
fn run_fleet(workers: usize, deadline_s: f64, confirm_s: f64) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let shares = [("k_a", 0.4), ("k_b", 0.3), ("k_c", 0.2), ("k_d", 0.1)];
    let fleet = Arc::new(Fleet {
        kernels: shares
            .iter()
            .enumerate()
            .map(|(i, &(name, _))| {
                let k = Kernel {
                    cost_s: 0.02 + 0.01 * i as f64,
                    top: 1.2 + 0.3 * i as f64,
                };
                (name.to_owned(), k)
            })
            .collect(),
        trials: Mutex::new(shares.iter().map(|&(n, _)| (n.to_owned(), 0)).collect()),
        searched: Mutex::new(Vec::new()),
        confirmed: Mutex::new(Vec::new()),
        start: Instant::now(),
    });
    let ends: Vec<(f64, deadline::Ended)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..workers)
            .map(|id| {
                let (fleet, store) = (&fleet, &store);
                s.spawn(move || {
                    let mut w = Worker {
                        id,
                        store,
                        fleet,
                        alive: BTreeSet::new(),
                        batch: 4,
                        held: None,
                        confirm_s,
                    };
                    let stop = AtomicBool::new(false);
                    let ended = deadline::run(
                        store,
                        "all",
                        GPU,
                        deadline_s,
                        || entrants(fleet, &shares),
                        Continue::Fleet("fleet-1"),
                        4,
                        &mut w,
                        &stop,
                    )
                    .unwrap();
                    (fleet.now(), ended)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let searched = fleet.searched.lock().unwrap().clone();
    let confirmed = fleet.confirmed.lock().unwrap().clone();
    Run {
        ends,
        searched,
        confirmed,
        allocation: store.allocation("all", GPU).unwrap().unwrap(),
    }
}

/// What holds of every fleet: each worker ends by the deadline (`late` of it past it at most),
/// no kernel is searched by two workers at once, both workers search, they continue one
/// allocation (one id, slices from both), every kernel is searched and none is given up because
/// the other worker held it, no winner is confirmed by two at once, every kernel that improved
/// is confirmed, and each confirmation is made by the worker that searched the kernel last.
fn assert_one_fleet(run: &Run, deadline_s: f64, late: f64) {
    let (searched, confirmed, a) = (&run.searched, &run.confirmed, &run.allocation);
    let story = format!("searched {searched:?}, confirmed {confirmed:?}");
    for (id, (at, ended)) in run.ends.iter().enumerate() {
        assert!(
            *at <= deadline_s * (1.0 + late),
            "worker {id} ended at {at:.2} s of {deadline_s} s ({}); {story}",
            ended.why
        );
        assert_ne!(
            ended.why,
            deadline::WAITING,
            "worker {id} waits, never stops for it"
        );
    }
    for (i, a) in searched.iter().enumerate() {
        for b in &searched[i + 1..] {
            let overlap = a.1 == b.1 && a.0 != b.0 && a.2 < b.3 && b.2 < a.3;
            assert!(
                !overlap,
                "{} searched by two workers at once: {a:?} {b:?}",
                a.1
            );
        }
    }
    let workers: BTreeSet<usize> = searched.iter().map(|s| s.0).collect();
    assert_eq!(
        workers.len(),
        run.ends.len(),
        "every worker searched: {story}"
    );
    assert_eq!(a.id.as_deref(), Some("fleet-1"));
    assert_eq!(a.slices.len(), searched.len(), "every slice a search");
    for k in &a.arms {
        assert!(k.trials > 0, "{} never searched: {:?}", k.kernel, a.slices);
        assert!(
            !k.done
                .as_deref()
                .is_some_and(|d| d.contains("another r3 searches it")),
            "{} given up because the other worker held it: {:?}",
            k.kernel,
            k.done
        );
    }
    // A winner is confirmed by one worker at a time (again only where beaten after), and every
    // kernel that improved is confirmed.
    for (i, a) in confirmed.iter().enumerate() {
        for b in &confirmed[i + 1..] {
            assert!(
                !(a.1 == b.1 && a.2 < b.3 && b.2 < a.3),
                "{} confirmed twice at once: {a:?} {b:?}",
                a.1
            );
        }
    }
    for k in a.arms.iter().filter(|k| k.best >= deadline::IMPROVED) {
        assert!(k.confirmed, "{} improved and not confirmed", k.kernel);
    }
    // On the GPU that searched it: the last search of the kernel before its confirmation is
    // the confirming worker's (both live to the end of their confirmations).
    for c in confirmed {
        let last = searched
            .iter()
            .filter(|s| s.1 == c.1 && s.3 <= c.2)
            .max_by(|x, y| x.3.total_cmp(&y.3));
        assert!(
            last.is_some_and(|s| s.0 == c.0),
            "{} confirmed by worker {} after worker {:?} searched it: {story}",
            c.1,
            c.0,
            last.map(|s| s.0)
        );
    }
}

/// Two workers under one 10 s deadline over four kernels, confirmations far cheaper than
/// priced: what holds of every fleet.
#[test]
fn two_workers_share_one_deadline_and_never_search_one_kernel_at_once() {
    let run = run_fleet(2, 10.0, 0.2);
    assert_one_fleet(&run, 10.0, 0.02);
}

/// Two workers, confirmations of 0.8 s each (priced at about 2 s before the first is made, at
/// 1 s or more after): each worker keeps back its part of the confirmations, not all of them
/// (each kept all: the two ended at 2.7 s and 3.7 s of 10), makes its own where nothing else
/// fits and decides again, and uses nine tenths of the deadline or more (9.4-9.8 s here).
#[test]
fn two_workers_use_nine_tenths_of_the_deadline() {
    let deadline_s = 10.0;
    let run = run_fleet(2, deadline_s, 0.8);
    // Its last confirmations end near the deadline: past it by no more than a confirmation may
    // run past one (a machine busy with other work delays them).
    assert_one_fleet(&run, deadline_s, deadline::CONFIRM_GRACE);
    for (id, (at, ended)) in run.ends.iter().enumerate() {
        assert!(
            *at >= 0.9 * deadline_s,
            "worker {id} ended at {at:.2} s of {deadline_s} s ({}): searched {:?}, confirmed {:?}",
            ended.why,
            run.searched,
            run.confirmed
        );
    }
}
