//! Whole programs: what tuning gives a program, not a kernel. Each program's predicted speedup
//! is Amdahl's over its launch census (`r3 record`: each kernel's share of the program's GPU
//! time), with each kernel at the speedup that ships and at its best; the measured one is
//! `r3 record --time-only` of the recorded build against the newest other build at the same
//! path (the applied one), the same counter on both.

use crate::kernel::{KernelHash, TrialsKey};
use crate::store::identity::Resolution;
use crate::store::programs::{Program, Timing};
use crate::store::winner::{self, Policy};
use crate::store::{Store, StoreError};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Largest kernels shown per program.
const TOP: usize = 5;

#[derive(Debug, Clone, Serialize)]
pub struct ProgramReport {
    /// Its directory under `programs/`.
    pub key: String,
    pub name: String,
    pub gpu: String,
    /// Kernels in its census with a time, and of those, with trials on this GPU.
    pub kernels: usize,
    pub tuned: usize,
    /// Of the program's GPU time, the share of the kernels with trials on this GPU.
    pub tuned_share: f64,
    /// Amdahl over the census: every kernel at what ships, and at its best.
    pub predicted_shipped: f64,
    pub predicted_best: f64,
    /// `r3 record --time-only` of the recorded build against the applied one, where both ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
    /// The largest kernels, largest first.
    pub top: Vec<ProgramKernel>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProgramKernel {
    pub name: String,
    pub hash: Option<String>,
    pub share: f64,
    pub launches: u64,
    pub shipped: f64,
    pub best: f64,
    /// Of its launches, the share its recordings stand for (`KernelCensus::recorded_share`):
    /// what replay measured its speedup on; None where not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_share: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    /// GPU time of the recorded build's time-only run, and of the other build's, ms.
    pub recorded_ms: f64,
    pub applied_ms: f64,
    pub speedup: f64,
    /// The other build's binary (short hash).
    pub applied_binary: String,
}

/// A kernel's speedup over -O3 on one GPU: what ships (generic code, or a variant that the
/// searched launch takes) and the best; and where a program measured the fastest trial slower
/// than the recorded build (so it is withheld: `store::in_program`), its speedup there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speedups {
    pub shipped: f64,
    /// `shipped` in a program run: less a variant's first load ([`net_of_first_load`]).
    pub in_run: f64,
    pub best: f64,
    pub withheld: Option<f64>,
}

/// The predicted speedup of a program whose kernels take `share` of its time each and run
/// `speedup` times faster (the rest of its time unchanged).
pub fn predict(parts: impl IntoIterator<Item = (f64, f64)>) -> f64 {
    let (mut known, mut after) = (0.0, 0.0);
    for (share, speedup) in parts {
        known += share;
        after += share / speedup.max(1e-9);
    }
    let after = after + (1.0 - known).max(0.0);
    if after > 0.0 {
        1.0 / after
    } else {
        1.0
    }
}

/// Every kernel's speedups, by GPU and content hash.
pub fn speedups(store: &Store) -> Result<BTreeMap<(String, TrialsKey), Speedups>, StoreError> {
    let stored: BTreeMap<KernelHash, crate::store::KernelRecord> = store
        .kernels()?
        .into_iter()
        .map(|k| (k.hash.clone(), k))
        .collect();
    // Each kernel's searched launch: its first usable recording (as `Store::launches_of` lists
    // them), all resolved in one pass over the recordings.
    let index = store.index()?;
    let mut searched: BTreeMap<KernelHash, Option<crate::candidate::LaunchValues>> =
        BTreeMap::new();
    for r in store.recordings(None)?.into_iter().filter(|r| r.usable()) {
        if let Resolution::Kernel(k) = index.of_recording(&r) {
            searched
                .entry(k.hash.clone())
                .or_insert_with(|| r.launch.values());
        }
    }
    let mut out = BTreeMap::new();
    // Read once: each search's policy needs its kernel's time in a program run.
    let shares = store.kernel_shares().unwrap_or_default();
    for (path, recs) in store.trial_sets()? {
        let (kernel, gpu) = (recs[0].kernel.clone(), recs[0].gpu.clone());
        let confirmed = store.confirmations(&path).unwrap_or_default();
        let best = winner::pick_best(&recs, &confirmed)
            .and_then(|t| winner::gain(t, &confirmed))
            .unwrap_or(1.0);
        let hash = kernel.kernel_hash();
        let policy = match hash.as_ref().and_then(|h| stored.get(h)) {
            Some(k) => Policy::from_env().for_record(k),
            None => Policy::from_env(),
        }
        .with_run_ms(
            hash.as_ref()
                .and_then(|h| crate::store::programs::longest_run_ms(&shares, h)),
        );
        let searched = hash
            .as_ref()
            .and_then(|h| searched.get(h).cloned().flatten());
        let ship = super::shipped::shipment(&recs, &confirmed, &policy);
        let on = super::shipped::on_searched(&ship, &confirmed, searched.as_ref());
        let by_variant = on
            .trial
            .is_some_and(|n| ship.variants.iter().any(|v| v.trial == n));
        let (shipped, in_run) = (
            on.speedup,
            net_of_first_load(on.speedup, by_variant, policy.run_ms),
        );
        let (shipped, in_run) = match hash
            .as_ref()
            .and_then(|h| stored.get(h))
            .and_then(|k| with_rewrite(store, k, &policy, best))
        {
            // Behind a guard it runs only the launches that pass it; the rest run the
            // kernel's own code.
            Some((r, share)) if r > shipped && share != Some(0.0) => {
                let in_program = blended(share.unwrap_or(1.0), r, shipped);
                (r, net_of_first_load(in_program, true, policy.run_ms))
            }
            _ => (shipped, in_run),
        };
        // The code a program measured slower: a confirmed trial's, whichever trial is the
        // fastest now (a faster one may never have been confirmed, so never shipped).
        let withheld = confirmed
            .iter()
            .find_map(|c| c.refuted_in_program())
            .map(|p| p.speedup());
        out.insert(
            (gpu, kernel),
            Speedups {
                shipped,
                in_run,
                best: best.max(1.0),
                withheld,
            },
        );
    }
    Ok(out)
}

/// A kernel's speedup over -O3 with its best source rewrite, where `policy` ships rewrites
/// (`R3_APPLY_REWRITES=1`) and the rewrite beats its best compiler-only build (`own_best`) by
/// the least speedup worth shipping: the gain apply ships with it (`plan::with_rewrite`), so
/// that a program's predicted time is that of the build it makes.
/// With it, the share of the kernel's time the rewrite runs (`plan::rewrite_share`: none where
/// apply withholds it; None where not known, taken as all).
fn with_rewrite(
    store: &Store,
    k: &crate::store::KernelRecord,
    policy: &Policy,
    own_best: f64,
) -> Option<(f64, Option<f64>)> {
    if !policy.rewrites {
        return None;
    }
    crate::store::attempts::shippable_rewrite(store, &k.hash, policy.simulated)
        .filter(|r| r.beats(own_best, policy.min_speedup))
        .map(|r| {
            let share = crate::apply::plan::rewrite_share(store, k, &r);
            (r.over_o3(own_best), share)
        })
}

/// A kernel's speedup where `share` of its time runs at `part` and the rest at `rest`.
pub fn blended(share: f64, part: f64, rest: f64) -> f64 {
    let share = share.clamp(0.0, 1.0);
    1.0 / (share / part.max(1e-9) + (1.0 - share) / rest.max(1e-9))
}

/// A kernel's speedup in a program run: `speedup` on its launches, less what a variant's first
/// load adds to the run (`winner::VARIANT_FIRST_LOAD_MS`) where a variant (`by_variant`) runs
/// them and the census knows the kernel's time in a run (`run_ms`, at -O3). A win in replay is
/// a loss where the program's first launch pays for it.
pub fn net_of_first_load(speedup: f64, by_variant: bool, run_ms: Option<f64>) -> f64 {
    match run_ms.filter(|ms| by_variant && *ms > 0.0) {
        Some(ms) => ms / (ms / speedup + crate::store::winner::VARIANT_FIRST_LOAD_MS),
        None => speedup,
    }
}

/// One report per program with a census and GPU its kernels were tuned on.
pub fn build(store: &Store) -> Result<Vec<ProgramReport>, StoreError> {
    build_with(store, &speedups(store)?)
}

/// `build`, with every kernel's `speedups` already read (they take a pass over every trials
/// file and recording).
pub fn build_with(
    store: &Store,
    speedups: &BTreeMap<(String, TrialsKey), Speedups>,
) -> Result<Vec<ProgramReport>, StoreError> {
    let gpus: BTreeSet<String> = speedups.keys().map(|(g, _)| g.clone()).collect();
    let mut out = Vec::new();
    for p in store.programs()? {
        for gpu in &gpus {
            if let Some(r) = program_on(&p, gpu, speedups) {
                out.push(r);
            }
        }
    }
    Ok(out)
}

fn program_on(
    p: &Program,
    gpu: &str,
    speedups: &BTreeMap<(String, TrialsKey), Speedups>,
) -> Option<ProgramReport> {
    let c = p.census.as_ref()?;
    let total = c.total_ms();
    if total <= 0.0 {
        return None;
    }
    let mut kernels: Vec<ProgramKernel> = c
        .kernels
        .iter()
        .filter_map(|k| {
            let ms = k.estimated_ms?;
            let s = k
                .kernel
                .as_ref()
                .and_then(|h| speedups.get(&(gpu.to_owned(), h.as_str().into())));
            Some(ProgramKernel {
                name: crate::kernel::demangle(&k.name),
                hash: k.kernel.clone().filter(|_| s.is_some()),
                share: ms / total,
                launches: k.launches,
                shipped: s.map_or(1.0, |s| s.in_run),
                best: s.map_or(1.0, |s| s.best),
                recorded_share: k.recorded_share(),
            })
        })
        .collect();
    let tuned: Vec<&ProgramKernel> = kernels.iter().filter(|k| k.hash.is_some()).collect();
    if tuned.is_empty() {
        return None;
    }
    let tuned_share = tuned.iter().map(|k| k.share).sum();
    let tuned_n = tuned.len();
    kernels.sort_by(|a, b| b.share.total_cmp(&a.share));
    Some(ProgramReport {
        key: p.key.clone(),
        name: c.name(),
        gpu: gpu.to_owned(),
        kernels: kernels.len(),
        tuned: tuned_n,
        tuned_share,
        predicted_shipped: predict(kernels.iter().map(|k| (k.share, k.shipped))),
        predicted_best: predict(kernels.iter().map(|k| (k.share, k.best))),
        measured: measured(&c.binary, &p.timings),
        top: kernels.into_iter().take(TOP).collect(),
    })
}

/// The recorded build's time-only run against the newest run of another build.
pub fn measured(recorded_binary: &str, timings: &[Timing]) -> Option<Measured> {
    let newest = |same: bool| {
        timings
            .iter()
            .filter(|t| (t.binary == recorded_binary) == same && t.total_ms > 0.0)
            .max_by(|a, b| a.unix_s.total_cmp(&b.unix_s))
    };
    let (before, after) = (newest(true)?, newest(false)?);
    Some(Measured {
        recorded_ms: before.total_ms,
        applied_ms: after.total_ms,
        speedup: before.total_ms / after.total_ms,
        applied_binary: after.binary.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variants_first_load_counts_in_the_kernels_time_in_a_run() {
        // 1 ms at 2x by a variant: 0.5 ms, and its first load, 0.061 ms.
        let s = net_of_first_load(2.0, true, Some(1.0));
        assert!((s - 1.0 / 0.561).abs() < 1e-12, "{s}");
        // The generic code loads with the module, as clang's does; a time not known, nothing.
        assert_eq!(net_of_first_load(2.0, false, Some(1.0)), 2.0);
        assert_eq!(net_of_first_load(2.0, true, None), 2.0);
        // A variant that saves less than its load is a loss in the program.
        assert!(net_of_first_load(1.5, true, Some(0.1)) < 1.0);
    }

    #[test]
    fn a_rewrite_counts_in_what_ships_where_asked_and_it_beats_the_kernels_best_now() {
        use crate::store::attempts::{Event, What};
        use crate::store::fixtures;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let (original, variant): (KernelHash, KernelHash) =
            ("00112233aabbccdd".into(), "aabbccdd00112233".into());
        let gpu = "NVIDIA H200";
        let c = crate::candidate::Candidate::baseline();
        let value = serde_json::to_value(&c).unwrap();
        let mut t = fixtures::trial(variant.as_str(), gpu, 0, value, fixtures::valid(10.0, 10.0));
        t.ptx_hash = Some("0123".into());
        let key = TrialsKey::of_kernel(&variant);
        store.open_trials(&key, gpu).unwrap().append(&t).unwrap();
        let mut log = store.open_attempts(&original).unwrap();
        let compiled = What::Compiled {
            variant: variant.clone(),
            diff: String::new(),
            cell: String::new(),
            builds: Vec::new(),
        };
        let judged = What::Judged {
            gpu: gpu.into(),
            verdict: fixtures::judged_valid(1.5, c, 2.0),
        };
        for what in [compiled, judged] {
            let e = Event {
                format: 1,
                attempt: 1,
                unix_ms: 0,
                what,
            };
            log.append(&e).unwrap();
        }
        drop(log);
        let asked = Policy {
            rewrites: true,
            ..Policy::default()
        };
        let original: crate::store::KernelRecord = serde_json::from_value(serde_json::json!({
            "format": 1, "hash": original.as_str(), "name": "_Z1kiPf",
            "demangled": "k(int, float*)", "arch": "sm_90", "params": [],
            "compile": {"cwd": "/", "args": ["r3-clang++", "k.cu"], "env": {},
                        "clang": "clang", "clang_version": ""},
            "r3_version": "0"
        }))
        .unwrap();
        // It runs nowhere here: its judge named no launch, and none is recorded.
        fn with_rewrite(
            store: &Store,
            k: &crate::store::KernelRecord,
            policy: &Policy,
            best: f64,
        ) -> Option<f64> {
            super::with_rewrite(store, k, policy, best).map(|(r, share)| {
                assert_eq!(share, Some(0.0));
                r
            })
        }
        assert_eq!(with_rewrite(&store, &original, &asked, 2.0), Some(3.0));
        // Judged against a 2x build (1.5x over it: 3x over -O3), shipped over a 2.5x one.
        assert_eq!(with_rewrite(&store, &original, &asked, 2.5), Some(3.0));
        // A search after the judge found 3.1x: the rewrite's 3x does not ship over it.
        assert_eq!(with_rewrite(&store, &original, &asked, 3.1), None);
        assert_eq!(
            with_rewrite(&store, &original, &Policy::default(), 2.0),
            None
        );
        let higher = Policy {
            min_speedup: 1.6,
            ..asked
        };
        assert_eq!(with_rewrite(&store, &original, &higher, 2.0), None);
    }

    #[test]
    fn a_kernel_part_faster_is_faster_by_the_part_of_its_time() {
        assert!((blended(0.25, 2.0, 1.0) - 1.0 / 0.875).abs() < 1e-12);
        assert_eq!(blended(1.0, 2.0, 1.2), 2.0);
        assert_eq!(blended(0.0, 2.0, 1.2), 1.2);
    }

    #[test]
    fn amdahl_over_the_census() {
        // 99.6% of the time at 2x, the rest at 15x: the program runs 1.99x.
        let p = predict([(0.996, 2.0), (0.004, 15.0)]);
        assert!((p - 1.0 / (0.498 + 0.004 / 15.0)).abs() < 1e-12, "{p}");
        // The small kernels' 15x alone leaves the program where it was.
        let q = predict([(0.996, 1.0), (0.004, 15.0)]);
        assert!(q < 1.004, "{q}");
        // Time the census does not know stays as it was.
        assert!((predict([(0.5, 2.0)]) - 1.0 / 0.75).abs() < 1e-12);
        assert_eq!(predict([]), 1.0);
    }

    fn timing(binary: &str, unix_s: f64, total_ms: f64) -> Timing {
        Timing {
            format: 1,
            program: "./app".into(),
            path: "/b/app".into(),
            binary: binary.into(),
            args: Vec::new(),
            unix_s,
            total_ms,
            launches: 3,
            kernels: Vec::new(),
            shipped: Vec::new(),
        }
    }

    #[test]
    fn measured_is_the_recorded_build_against_the_newest_other() {
        let t = [
            timing("rec", 10.0, 1000.0),
            timing("old", 20.0, 800.0),
            timing("new", 30.0, 500.0),
        ];
        let m = measured("rec", &t).unwrap();
        assert_eq!((m.recorded_ms, m.applied_ms), (1000.0, 500.0));
        assert_eq!(m.speedup, 2.0);
        assert_eq!(m.applied_binary, "new");
        assert_eq!(measured("rec", &t[..1]), None, "no other build timed");
        assert_eq!(
            measured("gone", &t[1..]),
            None,
            "the recorded build not timed"
        );
    }
}
