//! `deadline/<gpu>/<scope>.json`: where a `r3 tune --deadline` allocation stands, so that a
//! resume, or another worker of a fleet, continues it exactly. The decisions are
//! `remix::deadline`'s; this module only keeps the state, whole (temp file, rename), and the
//! lock that makes read-decide-write one step across processes.

use super::{io_err, read_json, trials::slug, write_atomic, Store, StoreError};
use crate::kernel::TrialsKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub const FORMAT: u32 = 1;

/// One allocation: a deadline spent over the kernels of a scope (the whole store, or one
/// program) on one GPU model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Allocation {
    pub format: u32,
    /// `all`, or the program's key (`programs/<key>`).
    pub scope: String,
    pub gpu: String,
    pub deadline_s: f64,
    /// Wall time this allocation has used, over every run and worker (a fleet's workers run
    /// at once: the largest of their clocks).
    pub elapsed_s: f64,
    pub arms: Vec<Arm>,
    /// Every slice, in the order they were decided.
    pub slices: Vec<Slice>,
    /// Why it ended, once it has ("deadline", "settled", "nothing left").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// Which fleet started it (`r3 tune --gpus` or `--emit-sbatch` without `--resume`): its
    /// workers continue this allocation, a fleet started later starts its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Seconds the confirmations made so far took beyond their kernel's runs, and what that
    /// setup was expected to take, over the confirmations whose setup was most of their price:
    /// the setup of the rest is priced at their ratio.
    #[serde(default)]
    pub confirm_spent_s: f64,
    #[serde(default)]
    pub confirm_expected_s: f64,
}

/// The (upper) median of what an allocation measured (its kernels' setups, trials, bests, a
/// rewrite arm's finds); None where there is nothing.
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

/// Trials without a 1% improvement over which a search's potential decays by e, and past
/// which its search has plateaued (the deadline's rewrite arm waits for that).
pub const STALE_TRIALS: f64 = 16.0;
/// An improvement this large counts (a search that finds only less is going stale).
pub const IMPROVED: f64 = 1.01;

/// One kernel of the allocation: what is known of it, and what it has had.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arm {
    pub kernel: TrialsKey,
    pub label: String,
    /// Its weight in the objective: its share of each program's GPU time, averaged over the
    /// scope's programs.
    pub weight: f64,
    /// Its largest share of any one program (kernels under `remix::deadline::SMALL_SHARE` get
    /// their baseline and warm start only).
    pub share: f64,
    /// Its share of each program of the scope it runs in (the program's key, its share of the
    /// program's GPU time). Empty where unknown (earlier r3s' files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<(String, f64)>,
    /// Its weight in the geomean of the programs' speedups: `weight`, each program's part of
    /// it over that program's time with every arm's best so far (`Allocation::reweigh`).
    /// A kernel whose program the search made 2.7x faster counts 2.7 times its weight. None:
    /// `weight` (no programs known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo_weight: Option<f64>,
    /// The speedup expected of a search (history, recipes).
    pub prior: f64,
    /// Best speedup over -O3 so far (1 before any).
    pub best: f64,
    pub trials: u32,
    /// Trials count at the last improvement of `best` by 1% or more.
    pub improved_at: u32,
    pub spent_s: f64,
    /// Seconds per trial, as measured (the kernel's recorded time until then), without the
    /// setup of its evaluator.
    pub per_trial_s: f64,
    /// Seconds its evaluator took to make, as last measured (a worker, its context, its
    /// recording loaded): paid again by a slice that finds it let go. Estimated until measured
    /// (a long kernel's baseline runs); 0 in allocations of earlier r3s.
    #[serde(default)]
    pub setup_s: f64,
    /// The speedup its candidates were expected to run at when it was priced: the best of the
    /// searches of kernels of its loop shape (1 where none, and in earlier r3s' allocations).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub expected: f64,
    /// Its loop shape: the kernels of one shape price each other's warm starts by what their
    /// searches reached (None where unknown, and in earlier r3s' allocations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    /// Its recorded launch's time over the time streaming its data once would take
    /// (`remix::rewrites::reuse`): the kernels of one decade of it price each other's warm
    /// starts where no shape does (None where unknown, and in earlier r3s' allocations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<f64>,
    /// Seconds a confirmation of its winner costs beyond its runs (its fresh contexts each
    /// load the recording again), estimated from the recording's size.
    #[serde(default)]
    pub confirm_setup_s: f64,
    /// The recorded launch's time (ms), which a confirmation's runs take at full precision;
    /// 0 where unknown (an allocation of an earlier r3).
    #[serde(default)]
    pub launch_ms: f64,
    /// The speedups over -O3 of the other builds its confirmation measures beside its best
    /// (what apply would ship with it: the code every launch may run, variants behind their
    /// guards), each timed until it is known on one side of the shipping line; None until a
    /// slice has said (priced as `remix::deadline::CONFIRMED_CODES` at the best's speedup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside: Option<Vec<f64>>,
    /// Its baseline and warm start are measured.
    #[serde(default)]
    pub warm: bool,
    /// Why it gets no more slices, once it does not (a failure, a finished space).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
    /// The worker that searches it now, or searched it last (`AllocationWorker::id`): its
    /// evaluator is alive there, and its winner is that worker's to confirm while it lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub searcher: Option<String>,
    /// The best is confirmed on every recorded launch.
    #[serde(default)]
    pub confirmed: bool,
    /// What its search is hoped to find after the warm start, fitted to the store's searches on
    /// this GPU; None: r3's own fit (`remix::deadline::R3_GROWTH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth: Option<Growth>,
    /// Its rewrite arm: source rewrites (`r3 evolve`) tried on it within the deadline; None
    /// where none can be (`--no-rewrites`, no source to rewrite, an allocation of an earlier r3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<RewriteArm>,
}

/// What is known of source rewrites of one kernel: their price (`remix::rewrites::price`), and
/// what the attempts made under this allocation came to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RewriteArm {
    /// The chance that an attempt finds a valid rewrite faster than the kernel's best
    /// compiler-only build (`remix::rewrites::FOUND`), before this allocation's attempts.
    pub p: f64,
    /// What a rewrite found brings over that build (a speedup).
    pub gain: f64,
    /// Seconds an attempt takes: priced, then as measured.
    pub attempt_s: f64,
    /// Where the price comes from: the store's evolve history, or r3's stated prior.
    pub from: String,
    /// Attempts made under this allocation, and those of them that found a faster rewrite.
    pub attempts: u32,
    pub found: u32,
    /// The best valid rewrite's speedup over the original's best compiler-only build, this
    /// allocation's or earlier (1: none).
    pub best: f64,
    /// The original's best compiler-only speedup over -O3 that `best` was judged against, where
    /// it was judged in this allocation (None: an earlier one's, or none). The rewrite ships as
    /// it was built then, so its own speedup over -O3 is `base × best` whatever the compiler
    /// search of the original finds later: counted as `best ×` the compiler's best, two_mm's,
    /// syrk's and gemm_naive's searches of their originals looked worth up to 1% of the
    /// geomean each once their rewrites had found 7-9x, and took the last 36 s of run Y10's
    /// deadline (H200, 2026-12-01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<f64>,
    pub spent_s: f64,
    /// Why it gets no more attempts (the proposer has nothing more, no source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
    /// The builds of each attempt compiled and not judged on this GPU yet, in the order they
    /// are judged (`remix::rewrites::pending_attempts`): the next attempt is priced at its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<u32>,
    /// What a build's evaluator and a trial of the kernel cost, as priced: the next pending
    /// attempt's price is made of them (`remix::rewrites::attempt_seconds`).
    #[serde(default)]
    pub setup_s: f64,
    #[serde(default)]
    pub trial_s: f64,
    /// One run of the kernel's recorded launch (0 where unknown): a long kernel's build whose
    /// -O3 is clearly slower than the best build before it costs about that
    /// (`remix::rewrites::attempt_seconds`).
    #[serde(default)]
    pub run_s: f64,
    /// Attempts with knobs (a template's knob search) priced apart: a template restructures
    /// the kernel's loops where a rule edits a line, and they find at different rates. Their
    /// chance before this allocation's attempts (None, in files of earlier r3s: as `p`),
    /// and of `attempts` and `found`, those with knobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs_p: Option<f64>,
    #[serde(default)]
    pub knobs_attempts: u32,
    #[serde(default)]
    pub knobs_found: u32,
    /// The kernel's recorded time over the time streaming its recorded bytes once would take
    /// at the GPU's peak bandwidth (`remix::rewrites::reuse`): near 1, memory traffic bounds it
    /// and no rewrite can cut that; far above, it works on each byte many times, as matrix
    /// products do, and tiling pays. None where unknown (earlier r3s' files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<f64>,
    /// The attempt of `pending` judged next (an index): the one worth most a second
    /// (`remix::rewrites::choose_next`), which `attempt_s` prices.
    #[serde(default)]
    pub next: usize,
    /// This allocation's attempts and finds on the other kernels on the same side of the reuse
    /// bound: they price this kernel's next attempt too (`remix::rewrites::pool_others`).
    #[serde(default, skip_serializing_if = "Tally::is_empty")]
    pub others: Tally,
    /// `knobs_p` is r3's prior for the kernel's side of the reuse bound, read again as its
    /// speedup moves it (`remix::rewrites::side`); false: the history's, kept.
    #[serde(default)]
    pub knobs_prior: bool,
    /// The kernel's speedup over -O3 with its best rewrite, as last known: what is left of its
    /// `reuse` is that over this.
    #[serde(default = "one")]
    pub now: f64,
    /// What a find with knobs brings, priced apart from `gain` as `knobs_p` is from `p`: a
    /// template restructures the kernel's loops and finds several times what a rule's edit
    /// does. None (earlier r3s' files): as `gain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knobs_gain: Option<f64>,
    /// The rule (its proposer's label: "rules: restrict") of each attempt of `pending`, in the
    /// same order; empty in earlier r3s' files (every attempt priced alike).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_rules: Vec<String>,
    /// This allocation's attempts without knobs on this kernel, and their finds, by rule; an
    /// attempt of a rule that had missed on this kernel is not counted (`tried` prices it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules: BTreeMap<String, RuleTally>,
    /// Every attempt judged on this kernel, with knobs or without, and its finds, by rule:
    /// the store's earlier ones and this allocation's (`remix::rewrites::repeat_lift`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tried: BTreeMap<String, RuleTally>,
    /// The same, summed over every kernel of the allocation (`remix::rewrites::pool_others`):
    /// what prices each rule's next attempt against the others'.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rules_everywhere: BTreeMap<String, RuleTally>,
    /// The attempt whose rewrite `best` is, where this allocation judged it, and how far its
    /// judge's compiler search of it has gone: a deepening searches it further
    /// (`remix::deadline::deepen_offer`). None: no rewrite found in this allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

/// The compiler search of the rewrite a kernel's arm keeps: its attempt, its trials so far,
/// and where it last improved, as a kernel's own search is tracked (`Arm::trials`,
/// `Arm::improved_at`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    /// The attempt's id in the kernel's attempt log.
    pub attempt: u32,
    pub trials: u32,
    pub improved_at: u32,
    /// Its build's best over that build's own -O3, as its search found (1: its -O3 is its best,
    /// as for a template's build judged on one trial): what is left for a compiler search of it
    /// is priced by what the kernel's own search reached over its -O3.
    #[serde(default = "one")]
    pub own: f64,
    /// Why it is searched no further (its space finished, its judge failed), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
}

/// One rule's attempts and finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RuleTally {
    pub attempts: u32,
    pub found: u32,
}

/// Rewrite attempts and finds, those with knobs among them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub attempts: u32,
    pub found: u32,
    pub knobs_attempts: u32,
    pub knobs_found: u32,
}

impl Arm {
    /// Its speedup with its best rewrite: the faster of the compiler's best and the rewrite.
    pub fn effective(&self) -> f64 {
        self.effective_at(self.best)
    }

    /// [`Arm::effective`] were the compiler's best `best`: a rewrite judged in this allocation
    /// keeps its own speed (see [`RewriteArm::base`]); one judged earlier is taken as the
    /// compiler's best times its speedup over that build.
    pub fn effective_at(&self, best: f64) -> f64 {
        self.rewrite.as_ref().map_or(best, |r| r.beside(best))
    }

    /// The weight its time saved has in the objective: the geomean of the programs' speedups
    /// where its programs are known ([`Allocation::reweigh`]), else the mean of their times.
    pub fn worth_weight(&self) -> f64 {
        self.geo_weight.unwrap_or(self.weight)
    }
}

impl Allocation {
    /// Each arm's weight in the geomean of the programs' speedups, with every arm's best so
    /// far (its best rewrite's included). A program's log speedup moves by a kernel's time
    /// saved over the program's time now, where its mean time moves by the time saved alone:
    /// two_mm's kernel, its program at 2.7x, counted 0.37 of a program at 1.0x, and its
    /// templates, which found 19x on the H100, were never offered (H200, 2026-11-30). The
    /// geomean is what the programs are judged by (bench/RESULTS.md).
    pub fn reweigh(&mut self) {
        let time = self.program_times();
        for k in &mut self.arms {
            let total: f64 = k.programs.iter().map(|(_, s)| s).sum();
            k.geo_weight = (total > 0.0).then(|| {
                let over_now: f64 = k
                    .programs
                    .iter()
                    .map(|(p, s)| s / time.get(p).copied().unwrap_or(1.0).max(1e-3))
                    .sum();
                k.weight * over_now / total
            });
        }
    }
}

impl Allocation {
    /// Each program its arms run in, and its time with every arm's best so far over its time
    /// at -O3.
    pub fn program_times(&self) -> std::collections::BTreeMap<String, f64> {
        let mut time = std::collections::BTreeMap::new();
        for k in &self.arms {
            let saved = 1.0 - 1.0 / k.effective();
            for (p, share) in &k.programs {
                *time.entry(p.clone()).or_insert(1.0) -= share * saved;
            }
        }
        time
    }
}

impl RewriteArm {
    /// The kernel's speedup over -O3 with this rewrite, its original's compiler-only best at
    /// `best` (see [`RewriteArm::base`]).
    pub fn beside(&self, best: f64) -> f64 {
        match self.base {
            Some(base) => best.max(base * self.best.max(1.0)),
            None => best * self.best.max(1.0),
        }
    }

    /// This allocation's attempts and finds on its kernel.
    pub fn tally(&self) -> Tally {
        Tally {
            attempts: self.attempts,
            found: self.found,
            knobs_attempts: self.knobs_attempts,
            knobs_found: self.knobs_found,
        }
    }
}

impl Tally {
    pub fn is_empty(&self) -> bool {
        *self == Tally::default()
    }

    /// (attempts, finds) of one kind: with knobs, or without.
    pub fn of(&self, knobs: bool) -> (u32, u32) {
        if knobs {
            (self.knobs_attempts, self.knobs_found)
        } else {
            (
                self.attempts.saturating_sub(self.knobs_attempts),
                self.found.saturating_sub(self.knobs_found),
            )
        }
    }
}

/// What a search is hoped to find after its warm start, by the speedup `s` that reached:
/// `floor + per_ln × ln s` more.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Growth {
    pub floor: f64,
    pub per_ln: f64,
    /// The searches it was fitted to.
    pub searches: u32,
}

/// One slice of a kernel's search: trials before and after, its time, the best it left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    pub kernel: TrialsKey,
    pub trials_before: u32,
    pub trials_after: u32,
    pub seconds: f64,
    pub best_after: f64,
    /// The allocation's clock when the slice ended.
    pub at_s: f64,
    /// Baseline and warm start (`true`), or a search slice.
    pub warm: bool,
    /// Source rewrite attempts (`trials_*` count attempts), not a search slice.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rewrite: bool,
    /// A search of the kernel's kept rewrite (`trials_*` count its trials), not of the kernel.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deepen: bool,
    /// The time the decision to run the slice had, for reading a run back (`r3 __deadline-at`);
    /// None in allocations written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<Decided>,
}

/// The time a decision had when it was made: what was left of the deadline after the
/// confirmations kept back, and of that what the least warm starts of the kernels not reached
/// yet were owed; and the rewrite attempt worth the most a second that did not go, if any.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decided {
    pub left_s: f64,
    pub reserve_s: f64,
    pub owed_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_over: Option<PassedOver>,
}

/// A rewrite attempt a decision passed over: its kernel, what it was worth a second (a
/// fraction of the programs' time) and the seconds it was priced at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassedOver {
    pub kernel: TrialsKey,
    pub value: f64,
    pub seconds: f64,
}

/// The allocation's lock, held while a worker reads, decides and writes; released on drop.
pub struct AllocationLock {
    _file: std::fs::File,
}

/// A worker of an allocation, counted among its live workers ([`Store::allocation_workers`])
/// while this lives: a file of its own beside the allocation (`<scope>.workers/<id>`), locked.
/// The lock goes with the process, so a worker killed or crashed stops counting at once (its
/// file is removed by the next count); dropped, the file is removed.
pub struct AllocationWorker {
    id: String,
    path: PathBuf,
    _file: std::fs::File,
}

impl AllocationWorker {
    /// Its name among the allocation's workers: host, process and a number of its own.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for AllocationWorker {
    fn drop(&mut self) {
        // Removed while still locked, so no count sees it unlocked and takes it for a crash.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Store {
    fn allocation_path(&self, scope: &str, gpu: &str) -> PathBuf {
        self.root()
            .join("deadline")
            .join(slug(gpu))
            .join(format!("{}.json", slug(scope)))
    }

    fn workers_dir(&self, scope: &str, gpu: &str) -> PathBuf {
        self.allocation_path(scope, gpu).with_extension("workers")
    }

    /// Joins the allocation of `scope` on `gpu` as one of its workers, until the worker is
    /// dropped (or its process ends).
    pub fn join_allocation(&self, scope: &str, gpu: &str) -> Result<AllocationWorker, StoreError> {
        static JOINED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = self.workers_dir(scope, gpu);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = JOINED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = slug(&format!("{host}-{}-{n}-{nanos:08x}", std::process::id()));
        // Locked under a hidden name and renamed into place locked: a count never sees the file
        // of a worker that is joining unlocked.
        let tmp = tempfile::Builder::new()
            .prefix(".join-")
            .tempfile_in(&dir)
            .map_err(io_err(&dir))?;
        tmp.as_file().lock().map_err(io_err(tmp.path()))?;
        let path = dir.join(&id);
        let file = tmp.persist(&path).map_err(|e| io_err(&path)(e.error))?;
        Ok(AllocationWorker {
            id,
            path,
            _file: file,
        })
    }

    /// The live workers of the allocation of `scope` on `gpu` (their ids, sorted), `me`
    /// among them where given (a worker's own file is not probed: on a filesystem whose locks
    /// are the process's, opening it again would count it free). A worker whose file is no
    /// longer locked ended without leaving (killed, crashed): its file is removed.
    pub fn allocation_workers(
        &self,
        scope: &str,
        gpu: &str,
        me: Option<&str>,
    ) -> Result<Vec<String>, StoreError> {
        let dir = self.workers_dir(scope, gpu);
        let mut out: Vec<String> = me.map(str::to_owned).into_iter().collect();
        let Some(entries) = super::read_dir_if_exists(&dir)? else {
            return Ok(out);
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || Some(name.as_str()) == me {
                continue;
            }
            let Ok(file) = std::fs::File::open(entry.path()) else {
                continue; // gone: that worker left
            };
            match file.try_lock() {
                Err(std::fs::TryLockError::WouldBlock) => out.push(name),
                Ok(()) => {
                    let _ = std::fs::remove_file(entry.path());
                }
                // Cannot tell: not counted (a reserve kept whole is the safe side).
                Err(_) => {}
            }
        }
        out.sort();
        Ok(out)
    }

    /// Waits for the allocation's lock (another worker holds it only while it decides).
    pub fn lock_allocation(&self, scope: &str, gpu: &str) -> Result<AllocationLock, StoreError> {
        let path = self.allocation_path(scope, gpu).with_extension("lock");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path))?;
        file.lock().map_err(io_err(&path))?;
        Ok(AllocationLock { _file: file })
    }

    /// The scope's allocation on this GPU, if one was started.
    pub fn allocation(&self, scope: &str, gpu: &str) -> Result<Option<Allocation>, StoreError> {
        let path = self.allocation_path(scope, gpu);
        if !path.exists() {
            return Ok(None);
        }
        let a: Allocation = read_json(&path)?;
        if a.format != FORMAT {
            return Err(StoreError::Corrupt {
                path,
                msg: format!(
                    "allocation format {}, this r3 reads {FORMAT}; fix: start the deadline again (without --resume)",
                    a.format
                ),
            });
        }
        Ok(Some(a))
    }

    /// Keeps the allocation, whole.
    pub fn put_allocation(&self, a: &Allocation) -> Result<(), StoreError> {
        let path = self.allocation_path(&a.scope, &a.gpu);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let bytes = serde_json::to_vec_pretty(a).expect("an allocation serializes");
        write_atomic(&path, &bytes).map_err(io_err(&path))
    }
}

fn one() -> f64 {
    1.0
}

fn is_one(x: &f64) -> bool {
    *x == 1.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_is_kept_whole_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        assert_eq!(store.allocation("all", "NVIDIA H100").unwrap(), None);
        let a = Allocation {
            format: FORMAT,
            scope: "all".into(),
            gpu: "NVIDIA H100".into(),
            deadline_s: 600.0,
            elapsed_s: 12.5,
            arms: vec![Arm {
                kernel: "0123456789abcdef".into(),
                label: "k".into(),
                weight: 0.5,
                share: 0.99,
                programs: vec![("prog-0123".into(), 0.99)],
                geo_weight: Some(0.5),
                prior: 1.25,
                best: 1.5,
                trials: 9,
                improved_at: 4,
                spent_s: 12.0,
                setup_s: 0.0,
                expected: 1.0,
                shape: Some("for1(for2)".into()),
                reuse: None,
                per_trial_s: 1.25,
                confirm_setup_s: 3.0,
                launch_ms: 1070.0,
                beside: None,
                warm: true,
                done: None,
                searcher: None,
                confirmed: false,
                growth: Some(Growth {
                    floor: 0.02,
                    per_ln: 0.05,
                    searches: 9,
                }),
                rewrite: Some(RewriteArm {
                    p: 0.15,
                    gain: 1.3,
                    attempt_s: 20.0,
                    from: "prior".into(),
                    attempts: 2,
                    found: 1,
                    best: 1.4,
                    base: Some(1.1),
                    spent_s: 41.0,
                    done: None,
                    pending: vec![36],
                    setup_s: 1.0,
                    trial_s: 0.5,
                    run_s: 0.0,
                    knobs_p: Some(0.5),
                    knobs_attempts: 1,
                    knobs_found: 1,
                    reuse: Some(180.0),
                    next: 0,
                    others: Tally {
                        attempts: 3,
                        found: 1,
                        knobs_attempts: 1,
                        knobs_found: 1,
                    },
                    knobs_prior: true,
                    knobs_gain: None,
                    now: 1.4,
                    pending_rules: vec!["rules: shared-tiling".into()],
                    rules: [(
                        "rules: restrict".into(),
                        RuleTally {
                            attempts: 1,
                            found: 0,
                        },
                    )]
                    .into(),
                    rules_everywhere: [(
                        "rules: restrict".into(),
                        RuleTally {
                            attempts: 3,
                            found: 1,
                        },
                    )]
                    .into(),
                    tried: [(
                        "rules: restrict".into(),
                        RuleTally {
                            attempts: 1,
                            found: 0,
                        },
                    )]
                    .into(),
                    kept: Some(Kept {
                        attempt: 2,
                        trials: 32,
                        improved_at: 20,
                        own: 1.4,
                        done: None,
                    }),
                }),
            }],
            slices: vec![Slice {
                kernel: "0123456789abcdef".into(),
                trials_before: 0,
                trials_after: 2,
                seconds: 41.0,
                best_after: 1.4,
                at_s: 50.0,
                warm: false,
                rewrite: true,
                deepen: false,
                decided: Some(Decided {
                    left_s: 300.0,
                    reserve_s: 20.0,
                    owed_s: 40.0,
                    passed_over: None,
                }),
            }],
            ended: None,
            id: Some("5e1f".into()),
            confirm_spent_s: 14.0,
            confirm_expected_s: 7.0,
        };
        let _lock = store.lock_allocation("all", "NVIDIA H100").unwrap();
        store.put_allocation(&a).unwrap();
        assert_eq!(store.allocation("all", "NVIDIA H100").unwrap(), Some(a));
        let path = store.allocation_path("all", "NVIDIA H100");
        std::fs::write(&path, "{\"format\": 1, \"scope\"").unwrap();
        let err = store
            .allocation("all", "NVIDIA H100")
            .unwrap_err()
            .to_string();
        assert!(err.contains("all.json"), "{err}");
    }

    /// Workers count while they live: one dropped stops counting and its file goes; one that
    /// ended without leaving (its file no longer locked: killed, crashed) is found out by the
    /// next count and its file removed; a worker's own file is never probed.
    #[test]
    fn an_allocation_counts_its_live_workers_and_forgets_a_crashed_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let (scope, gpu) = ("all", "NVIDIA H200");
        assert!(store
            .allocation_workers(scope, gpu, None)
            .unwrap()
            .is_empty());
        let a = store.join_allocation(scope, gpu).unwrap();
        let b = store.join_allocation(scope, gpu).unwrap();
        assert_ne!(a.id(), b.id());
        let mut both = vec![a.id().to_owned(), b.id().to_owned()];
        both.sort();
        assert_eq!(store.allocation_workers(scope, gpu, None).unwrap(), both);
        assert_eq!(
            store.allocation_workers(scope, gpu, Some(a.id())).unwrap(),
            both
        );
        let crashed = store.workers_dir(scope, gpu).join("node7-4242-0-00000000");
        std::fs::write(&crashed, "").unwrap();
        assert_eq!(store.allocation_workers(scope, gpu, None).unwrap(), both);
        assert!(!crashed.exists());
        let b_file = store.workers_dir(scope, gpu).join(b.id());
        drop(b);
        assert!(!b_file.exists());
        assert_eq!(
            store.allocation_workers(scope, gpu, None).unwrap(),
            [a.id().to_owned()]
        );
    }
}
