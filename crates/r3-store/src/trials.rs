//! The trials database: every evaluation `r3 tune` makes, one JSON object per line, in
//! `<store>/trials/<kernel>/<gpu>.jsonl` (format in docs/formats.md, "Trials database").
//!
//! Append-only and crash-safe: each record is written with one `write` and `fsync`ed before
//! the next trial is reported, so a crash loses at most the record being written; a torn last
//! line (no newline) is ignored on read and cut off before the next append.

use super::l2::Choice as L2Choice;
use super::outcome::Outcome;
use super::{io_err, read_dir_if_exists, Store, StoreError};
use crate::candidate::Candidate;
use crate::kernel::TrialsKey;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;

/// What a trial's candidate was compiled for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Target {
    /// The GPU architecture, e.g. "sm_90".
    pub sm: String,
    /// The PTX ISA as LLVM's feature, e.g. "ptx90"; None: what the IR asked for.
    pub ptx: Option<String>,
}

/// One finished trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub format: u32,
    /// 0 is the baseline; the search's trials follow in the order they were asked.
    pub trial: u32,
    pub kernel: TrialsKey,
    pub gpu: String,
    pub driver: String,
    /// The device that measured the trial (its UUID), where known; absent in simulations and
    /// in trials of earlier r3s. Several identical GPUs share one trials file per kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// What the candidate was compiled for; absent in simulations and in trials of earlier
    /// r3s (which name only the driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Target>,
    pub r3_version: String,
    pub strategy: String,
    pub seed: u64,
    /// Candidates asked per round (resume needs the same rounds).
    pub batch: u32,
    pub candidate: Candidate,
    /// None when the candidate did not compile.
    pub ptx_hash: Option<crate::kernel::PtxHash>,
    /// The trial whose measurement this one reuses (identical PTX), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_of: Option<u32>,
    pub outcome: Outcome,
    pub passes_ms: f64,
    pub codegen_ms: f64,
    /// GPU time spent on this trial (its share of its batch's measurement).
    pub measure_ms: f64,
    /// Milliseconds since the Unix epoch when the record was written.
    pub finished_unix_ms: u64,
}

impl TrialRecord {
    pub fn ratio(&self) -> Option<f64> {
        self.outcome.ratio()
    }

    /// Whether a simulation answered this trial rather than a GPU.
    pub fn simulated(&self) -> bool {
        is_simulated(&self.gpu)
    }
}

/// The GPU name under which a simulation of `gpu` records its trials (`None`: a simulation
/// of no GPU in particular, as evolve's scripted judge).
pub fn simulated_gpu(gpu: Option<&str>) -> String {
    match gpu {
        Some(g) => format!("{SIMULATED}: {g}"),
        None => SIMULATED.into(),
    }
}

/// Whether trials under this GPU name were simulated.
pub fn is_simulated(gpu: &str) -> bool {
    gpu.starts_with(SIMULATED)
}

const SIMULATED: &str = "simulated";

/// An open append-only JSON Lines file (trials, evolve attempts), for appending.
pub struct JsonLog<T> {
    path: PathBuf,
    file: std::fs::File,
    records: std::marker::PhantomData<fn(&T)>,
    /// The lease written beside a trials file while a search holds it, removed on close.
    lease: Option<PathBuf>,
}

impl<T> Drop for JsonLog<T> {
    fn drop(&mut self) {
        if let Some(lease) = &self.lease {
            let _ = std::fs::remove_file(lease);
        }
    }
}

/// An open trials file.
pub type TrialLog = JsonLog<TrialRecord>;

/// Turns a GPU or kernel name into a file name: `NVIDIA H200` → `nvidia-h200`. Whatever the
/// name, the slug is one plain path component that no reader skips: never empty, never `.` or
/// `..`, never hidden (a leading `.` gets a `_` before it).
pub fn slug(s: &str) -> String {
    let mut out = String::new();
    for ch in s.chars() {
        if ch.is_ascii_alphanumeric() || ch == '.' || ch == '_' {
            out.push(ch.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    if out.is_empty() {
        "_".to_owned()
    } else if out.starts_with('.') {
        format!("_{out}")
    } else {
        out.to_owned()
    }
}

impl Store {
    pub fn trials_path(&self, key: &TrialsKey, gpu: &str) -> PathBuf {
        self.trials_dir(key).join(format!("{}.jsonl", slug(gpu)))
    }

    fn trials_dir(&self, key: &TrialsKey) -> PathBuf {
        self.root().join("trials").join(slug(key))
    }

    /// Whether a search of this kernel on this GPU runs now (in another process, or this one).
    pub fn search_held(&self, key: &TrialsKey, gpu: &str) -> bool {
        held_by_another(&self.trials_path(key, gpu))
    }

    /// Whether any GPU has searched this kernel.
    pub fn has_trials(&self, key: &TrialsKey) -> Result<bool, StoreError> {
        Ok(!trial_files(&self.trials_dir(key))?.is_empty())
    }

    /// Every GPU's search of one kernel, as (trials file, records), the most recent first.
    pub fn searches(
        &self,
        key: &TrialsKey,
    ) -> Result<Vec<(PathBuf, Vec<TrialRecord>)>, StoreError> {
        let mut out = Vec::new();
        for p in trial_files(&self.trials_dir(key))? {
            let recs = read_trials(&p)?;
            if is_copy(&p, &recs) {
                note_copy(&p, &recs);
            } else if !recs.is_empty() {
                out.push((p, recs));
            }
        }
        out.sort_by_key(|(_, recs)| std::cmp::Reverse(recs.last().map(|r| r.finished_unix_ms)));
        Ok(out)
    }

    /// Every complete record of a kernel on a GPU, in file order (empty when none).
    pub fn trials(&self, key: &TrialsKey, gpu: &str) -> Result<Vec<TrialRecord>, StoreError> {
        read_trials(&self.trials_path(key, gpu))
    }

    /// The re-measurements of a kernel's trials (see `Confirmation`) that tune made: of the
    /// best, and of the best that apply can ship where that is another trial.
    pub fn confirmations(&self, trials_file: &Path) -> Result<Vec<Confirmation>, StoreError> {
        read_confirmations(&confirmation_path(trials_file))
    }

    /// Records the re-measurement of a trial, replacing an earlier one of the same trial and
    /// keeping those of others (atomically). What programs measured of the trial stays, unless
    /// `c` says anew.
    pub fn write_confirmation(
        &self,
        key: &TrialsKey,
        gpu: &str,
        c: &Confirmation,
    ) -> Result<(), StoreError> {
        let path = confirmation_path(&self.trials_path(key, gpu));
        let mut all = read_confirmations(&path)?;
        let mut c = c.clone();
        if let Some(old) = all.iter().find(|o| o.trial == c.trial) {
            if c.in_program.is_empty() {
                c.in_program = old.in_program.clone();
            }
        }
        all.retain(|o| o.trial != c.trial);
        all.push(c);
        let text = serde_json::to_vec_pretty(&all).expect("confirmations serialize");
        super::write_atomic(&path, &text).map_err(io_err(&path))
    }

    /// Which earlier searches a kernel's search learned from (`<gpu>.transfer.json`), if it
    /// recorded any: what `--resume` needs to ask the same candidates again.
    pub fn transfer_sources(
        &self,
        key: &TrialsKey,
        gpu: &str,
    ) -> Result<Option<TransferSources>, StoreError> {
        let path = transfer_path(&self.trials_path(key, gpu));
        read_json(&path)
    }

    /// [`Store::transfer_sources`] of the search whose trials file is `trials_file`.
    pub fn transfer_sources_at(
        &self,
        trials_file: &Path,
    ) -> Result<Option<TransferSources>, StoreError> {
        read_json(&transfer_path(trials_file))
    }

    /// How the last run of a search ended (`<gpu>.end.json`), where one was recorded.
    pub fn search_end(&self, trials_file: &Path) -> Result<Option<SearchEnd>, StoreError> {
        read_json(&end_path(trials_file))
    }

    /// Records how a run of a search ended (atomically; a later run replaces it).
    /// The L2 state the last search measured in (`<gpu>.l2.json`), where one was recorded.
    pub fn l2_choice(&self, trials_file: &Path) -> Result<Option<L2Choice>, StoreError> {
        read_json(&trials_file.with_extension("l2.json"))
    }

    pub fn write_l2_choice(
        &self,
        key: &TrialsKey,
        gpu: &str,
        choice: &L2Choice,
    ) -> Result<(), StoreError> {
        let path = self.trials_path(key, gpu).with_extension("l2.json");
        // Chosen before the search's first trial: the kernel's trials directory may not exist.
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let text = serde_json::to_vec_pretty(choice).expect("L2 choices serialize");
        super::write_atomic(&path, &text).map_err(io_err(&path))
    }

    pub fn write_search_end(
        &self,
        key: &TrialsKey,
        gpu: &str,
        end: &SearchEnd,
    ) -> Result<(), StoreError> {
        let path = end_path(&self.trials_path(key, gpu));
        let text = serde_json::to_vec_pretty(end).expect("search ends serialize");
        super::write_atomic(&path, &text).map_err(io_err(&path))
    }

    /// Records the sources a search starts with (atomically, before its first trial).
    pub fn write_transfer_sources(
        &self,
        key: &TrialsKey,
        gpu: &str,
        s: &TransferSources,
    ) -> Result<(), StoreError> {
        let path = transfer_path(&self.trials_path(key, gpu));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let text = serde_json::to_vec_pretty(s).expect("transfer sources serialize");
        super::write_atomic(&path, &text).map_err(io_err(&path))
    }

    /// Every non-empty trials file in the store, each with its records, sorted by path
    /// (kernel, then GPU): what `r3 report` reads when no kernel is named. A file that cannot
    /// be read costs only its own search: it is left out, and said once on stderr with its fix.
    pub fn trial_sets(&self) -> Result<Vec<(PathBuf, Vec<TrialRecord>)>, StoreError> {
        let mut out = Vec::new();
        for p in self.all_trial_files()? {
            match read_trials(&p) {
                Ok(recs) if is_copy(&p, &recs) => note_copy(&p, &recs),
                Ok(recs) if !recs.is_empty() => out.push((p, recs)),
                Ok(_) => {}
                Err(e) => super::warn_left_out(&e, "that search"),
            }
        }
        Ok(out)
    }

    /// Searches of kernels whose directory is gone (`kernels/<hash>` deleted) or unreadable:
    /// their trials
    /// files and how many trials each holds. Nothing else leads to these trials, so a resume
    /// that names no stored kernel must say so rather than start another search beside them.
    pub fn orphaned_trials(&self) -> Result<Vec<(PathBuf, usize)>, StoreError> {
        let mut out = Vec::new();
        for p in self.all_trial_files()? {
            let Ok(recs) = read_trials(&p) else { continue };
            let Some(first) = recs.first() else { continue };
            let gone = first
                .kernel
                .kernel_hash()
                .filter(|h| h.len() == 16)
                .is_some_and(|h| self.kernel(&h).is_err());
            if gone && !is_copy(&p, &recs) && !p.to_string_lossy().ends_with(ABLATIONS_SUFFIX) {
                out.push((p, recs.len()));
            }
        }
        Ok(out)
    }

    /// [`StoreError::Orphaned`] for a word that names no stored kernel, where the store keeps
    /// orphaned trials (`orphaned_trials`); None where it keeps none.
    pub fn orphaned_error(&self, word: &str) -> Result<Option<StoreError>, StoreError> {
        Ok(orphaned_error_of(word, &self.orphaned_trials()?))
    }

    /// Opens the trials file for appending, cutting off a torn last line, and says where the
    /// search runs (`Lease`) for as long as it is open.
    pub fn open_trials(&self, key: &TrialsKey, gpu: &str) -> Result<TrialLog, StoreError> {
        let mut log = open_log(self.trials_path(key, gpu))?;
        let lease = lease_path(&log.path);
        let bytes = serde_json::to_vec(&Lease::here(gpu)).expect("a lease serializes");
        crate::write_atomic(&lease, &bytes).map_err(io_err(&lease))?;
        log.lease = Some(lease);
        Ok(log)
    }

    /// Every search's trials file (one per kernel and GPU), sorted by path (kernel, then GPU).
    pub(super) fn all_trial_files(&self) -> Result<Vec<PathBuf>, StoreError> {
        let dir = self.root().join("trials");
        let Some(kernels) = read_dir_if_exists(&dir)? else {
            return Ok(Vec::new());
        };
        let mut paths = Vec::new();
        for k in kernels {
            let k = k.map_err(io_err(&dir))?.path();
            if k.is_dir() {
                paths.extend(trial_files(&k)?);
            }
        }
        paths.sort();
        Ok(paths)
    }

    /// Where the search holding this trials file runs, as its lease says (None: no lease, or
    /// one being replaced).
    pub fn lease(&self, trials_file: &Path) -> Option<Lease> {
        read_json(&lease_path(trials_file)).ok().flatten()
    }

    /// The ablation trials beside a trials file (`<gpu>.ablations.jsonl`: the best candidate
    /// with one pass removed, each, measured after the search), in file order.
    pub fn ablations(&self, trials_file: &Path) -> Result<Vec<TrialRecord>, StoreError> {
        read_trials(&ablations_path(trials_file))
    }

    /// Opens a kernel's ablation trials for appending (same format and guarantees as the
    /// trials file; kept apart so the search's own trials stay a replayable sequence).
    pub fn open_ablations(&self, key: &TrialsKey, gpu: &str) -> Result<TrialLog, StoreError> {
        open_log(ablations_path(&self.trials_path(key, gpu)))
    }
}

/// The trials files (one per GPU) in a kernel's directory, sorted; none when it does not exist.
fn trial_files(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let Some(entries) = read_dir_if_exists(dir)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for f in entries {
        let f = f.map_err(io_err(dir))?.path();
        let ablations = f.to_string_lossy().ends_with(ABLATIONS_SUFFIX);
        if f.extension().is_some_and(|e| e == "jsonl") && !ablations {
            out.push(f);
        }
    }
    out.sort();
    Ok(out)
}

pub(super) fn open_log<T: serde::de::DeserializeOwned>(
    path: PathBuf,
) -> Result<JsonLog<T>, StoreError> {
    let dir = path.parent().unwrap();
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io_err(&path))?;
    // One writer per file, for as long as the log is open: a second search of the kernel
    // would interleave trial numbers, and its cut of a torn line could cut the first's record.
    // The lock goes with the process, so a crash (even kill -9) leaves none behind.
    file.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => StoreError::Busy { path: path.clone() },
        std::fs::TryLockError::Error(e) => io_err(&path)(e),
    })?;
    let (_, good_len) = read_log::<T>(&path)?;
    file.set_len(good_len).map_err(io_err(&path))?;
    Ok(JsonLog {
        path,
        file,
        records: std::marker::PhantomData,
        lease: None,
    })
}

impl<T: Serialize> JsonLog<T> {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record durably (one write, then fsync).
    pub fn append(&mut self, rec: &T) -> Result<(), StoreError> {
        let line = record_line(rec);
        self.file.write_all(&line).map_err(io_err(&self.path))?;
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

/// [`StoreError::Orphaned`] for `word`, listing `orphans` (`Store::orphaned_trials`); None when
/// there are none.
pub fn orphaned_error_of(word: &str, orphans: &[(PathBuf, usize)]) -> Option<StoreError> {
    if orphans.is_empty() {
        return None;
    }
    let trials = orphans
        .iter()
        .map(|(p, n)| format!("  {} ({n} trials)", p.display()))
        .collect::<Vec<_>>()
        .join("\n");
    Some(StoreError::Orphaned {
        word: word.into(),
        trials,
    })
}

/// A record as a log line: its JSON and a newline.
fn record_line<T: Serialize>(rec: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(rec).expect("log records serialize");
    line.push(b'\n');
    line
}

impl TrialLog {
    /// The search's last checkpoint (`<gpu>.checkpoint.json`), if there is one that reads; a
    /// damaged or foreign one is as good as none, since resume can always replay the trials.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        read_json(&checkpoint_path(&self.path)).ok().flatten()
    }

    /// Replaces the checkpoint whole (temporary file, fsync, rename).
    pub fn write_checkpoint(&self, c: &Checkpoint) -> Result<(), StoreError> {
        let path = checkpoint_path(&self.path);
        let bytes = serde_json::to_vec(c).expect("checkpoints serialize");
        super::write_atomic(&path, &bytes).map_err(io_err(&path))
    }
}

/// The state of a search's strategy after the first `trials` trials of its file, so that a
/// resume tells it those trials instead of asking them all again (asking is what costs: each
/// of bo's asks fits its surrogate). Valid only for the very trials it was taken after, which
/// `digest` pins; a resume that finds it stale replays the trials from the start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub format: u32,
    pub trials: u32,
    /// [`TrialsDigest`] of those trials.
    pub digest: String,
    pub strategy: String,
    pub seed: u64,
    /// The r3 that took it: another r3's strategy may keep another state.
    pub r3_version: String,
    /// What the strategy keeps beyond its tells (its own format, opaque to the store).
    pub state: serde_json::Value,
    /// The round size of the search that took it: its rounds end where this one's do (absent
    /// in checkpoints of earlier r3s, whose rounds ended at multiples of it after the
    /// baseline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
}

/// A running blake3 of trial records as the trials file holds them (one line each).
#[derive(Clone, Default)]
pub struct TrialsDigest {
    hasher: blake3::Hasher,
    records: u32,
}

impl TrialsDigest {
    pub fn add(&mut self, rec: &TrialRecord) {
        self.hasher.update(&record_line(rec));
        self.records += 1;
    }

    pub fn of(recs: &[TrialRecord]) -> TrialsDigest {
        let mut d = TrialsDigest::default();
        recs.iter().for_each(|r| d.add(r));
        d
    }

    pub fn records(&self) -> u32 {
        self.records
    }

    pub fn hex(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }
}

/// Complete records and the length of the file up to the end of the last one.
/// The best trial, re-measured after the search in a fresh run against the baseline. The best
/// of many noisy measurements is biased low; if it does not hold up, the baseline is kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Confirmation {
    pub format: u32,
    /// The trial that was re-measured.
    pub trial: u32,
    pub outcome: Outcome,
    pub finished_unix_ms: u64,
    /// The kernel's other recorded launches, each run with the trial and checked against its
    /// own recorded outputs: a pipeline right for the searched input and wrong for another is
    /// never confirmed. Absent in files of r3s that checked the searched launch only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches: Vec<LaunchCheck>,
    /// The trial's time over -O3 on the searched launch in each fresh context it was
    /// re-measured in (`remix::confirm::CONTEXTS`; null where it was not valid there);
    /// `outcome` is the least favourable. Absent where it was measured once (simulations, r3s
    /// before contexts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_ratios: Vec<Option<f64>>,
    /// The trial's code as a whole program ran it: `r3 record --time-only` of an applied build
    /// that shipped it, against the recorded build, one per program (`store::in_program`).
    /// Absent until such a run, and in files of earlier r3s.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_program: Vec<InProgram>,
    /// Why the trial was not re-measured at all, where it was not (a near-tie whose
    /// confirmation did not fit in the deadline): `outcome` is then its search's own, and the
    /// trial does not ship (`winner::pick_best`). Absent for a trial re-measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<String>,
}

/// How much more GPU time per launch than the recorded build a kernel's tuned code may take in
/// a program and still ship, measured against the recorded build's own time-only run: what one
/// time-only run of each build tells apart from noise. Beyond it the program measured it
/// slower, whatever replay measured.
pub const PROGRAM_NOISE: f64 = 0.02;

/// The same against the recording run's census, which estimates each launch from the recorded
/// launches' in-app times. On the H100 corpus (2026-11-26, 77 kernels with one launch count in
/// both) the census was within 2% of the recorded build's time-only run for most kernels, but
/// under it by up to 12% for kernels of 50 µs a launch or more (device_calls: 217 µs, 0.88)
/// and by up to 35% for shorter ones: a margin under that would withhold real wins.
pub const CENSUS_NOISE: f64 = 0.25;

/// A kernel's shipped code measured in one program: its launches' GPU time per launch in an
/// applied build against the recorded build's, each from a time-only run (or, for the recorded
/// build where it has none, the census of its recording run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InProgram {
    /// The program's key (`programs/<key>/`) and the applied build's binary.
    pub program: String,
    pub binary: String,
    /// What the recorded build's time is.
    pub against: Against,
    /// GPU time per launch, ms.
    pub recorded_ms: f64,
    pub applied_ms: f64,
    /// The applied build's launches of the kernel.
    pub launches: u64,
    pub unix_s: f64,
}

/// The recorded build's time an applied build's is measured against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Against {
    /// The recorded build's own time-only run (`time-only`).
    TimeOnly,
    /// The estimate of its recording run (`census`).
    Census,
}

impl InProgram {
    /// The recorded build's time over the applied build's.
    pub fn speedup(&self) -> f64 {
        if self.applied_ms > 0.0 {
            self.recorded_ms / self.applied_ms
        } else {
            1.0
        }
    }

    /// Whether the program measured the tuned code slower than the recorded build, beyond what
    /// its reference tells apart ([`PROGRAM_NOISE`], [`CENSUS_NOISE`]).
    pub fn slower(&self) -> bool {
        let noise = match self.against {
            Against::Census => CENSUS_NOISE,
            Against::TimeOnly => PROGRAM_NOISE,
        };
        self.applied_ms > self.recorded_ms * (1.0 + noise)
    }

    /// Whether the program found no gain at all where replay measured `replay` (the code's
    /// speedup over -O3 there), and the two disagree by more than the noise of each (a
    /// time-only run's and a confirmation's, [`PROGRAM_NOISE`] each): the program does not run
    /// the code as replay did, and nothing it measured speaks for shipping it. oscillators'
    /// code, 1.058× in three fresh replay contexts, ran 0.995× in its program's time-only run,
    /// inside [`PROGRAM_NOISE`], and its program's own timer found it 3% slower than clang's
    /// in each of three rounds (H200, 2026-11-30): its speed depends on where its data lies.
    /// A census is too rough to judge this by.
    pub fn belies(&self, replay: f64) -> bool {
        self.against == Against::TimeOnly
            && self.speedup() < 1.0
            && replay > self.speedup() * (1.0 + 2.0 * PROGRAM_NOISE)
    }

    /// Why this measure withholds code replay measured at `replay` ([`Self::slower`] or
    /// [`Self::belies`]), if it does.
    pub fn refusal(&self, replay: Option<f64>) -> Option<Refusal> {
        if self.slower() {
            return Some(Refusal::Slower);
        }
        replay
            .filter(|r| self.belies(*r))
            .map(|replay| Refusal::NoGain { replay })
    }

    /// Whether this measure withholds code replay measured at `replay`.
    pub fn refutes(&self, replay: Option<f64>) -> bool {
        self.refusal(replay).is_some()
    }
}

/// Why a program's measure withholds a kernel's tuned code.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// The program ran it slower than the recorded build ([`InProgram::slower`]).
    Slower,
    /// The program found no gain where replay confirmed `replay` ([`InProgram::belies`]).
    NoGain { replay: f64 },
}

/// One recorded launch a confirmed trial was run on, and what it gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchCheck {
    /// The recording's id (`<kernel dir>/<launch dir>` under `records/`).
    pub recording: String,
    pub outcome: Outcome,
}

impl Confirmation {
    /// The re-measured time over baseline, or None when the trial was not valid there or on
    /// any other recorded launch.
    pub fn ratio(&self) -> Option<f64> {
        self.failed_launch()
            .is_none()
            .then(|| self.outcome.ratio())
            .flatten()
    }

    /// The first program whose measure withholds the trial's code: slower than the recorded
    /// build, or no faster where the trial's confirmation promised a gain
    /// ([`InProgram::refutes`]).
    pub fn refuted_in_program(&self) -> Option<&InProgram> {
        self.in_program
            .iter()
            .find(|p| p.refutes(self.replay_speedup()))
    }

    /// The trial's speedup over -O3 as its re-measurement found it.
    pub fn replay_speedup(&self) -> Option<f64> {
        self.outcome.ratio().filter(|r| *r > 0.0).map(|r| 1.0 / r)
    }

    /// The first other launch whose outputs the trial did not reproduce.
    pub fn failed_launch(&self) -> Option<&LaunchCheck> {
        self.launches
            .iter()
            .find(|l| !matches!(l.outcome, Outcome::Valid { .. }))
    }
}

/// The earlier searches a search learned from: each one's kernel, GPU and how many of its
/// trials (a prefix of its append-only trials file) were used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransferSources {
    pub format: u32,
    pub sources: Vec<TransferSource>,
    /// The shipped recipes the search measured first (`remix::recipes`), as chosen for this
    /// kernel; absent in files of r3s before recipes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recipes: Vec<RecipePick>,
    /// The traits of the kernel's -O3 PTX that chose them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traits: Vec<String>,
}

/// A recipe as a search used it: its name, the candidate it became in that search's space, and
/// whether the kernel met its preconditions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecipePick {
    pub name: String,
    pub candidate: Candidate,
    #[serde(default)]
    pub matched: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferSource {
    pub kernel: TrialsKey,
    pub gpu: String,
    pub trials: usize,
    /// Another kernel of the same loop shape (`ir::shape`): its best is tried early.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub similar: bool,
}

/// `<gpu>.confirm.json` beside `<gpu>.jsonl` (not `.jsonl`: it is no trials file).
fn confirmation_path(trials_file: &Path) -> PathBuf {
    trials_file.with_extension("confirm.json")
}

const ABLATIONS_SUFFIX: &str = ".ablations.jsonl";

/// `<gpu>.ablations.jsonl` beside `<gpu>.jsonl`.
fn ablations_path(trials_file: &Path) -> PathBuf {
    trials_file.with_extension(&ABLATIONS_SUFFIX[1..])
}

/// `<gpu>.transfer.json` beside `<gpu>.jsonl`.
fn transfer_path(trials_file: &Path) -> PathBuf {
    trials_file.with_extension("transfer.json")
}

/// `<gpu>.checkpoint.json` beside `<gpu>.jsonl`.
fn checkpoint_path(trials_file: &Path) -> PathBuf {
    trials_file.with_extension("checkpoint.json")
}

fn lease_path(trials_file: &Path) -> PathBuf {
    trials_file.with_extension("lease.json")
}

/// Whether another open file holds the lock on `path` (a search writing it); a file that is
/// gone or cannot be opened holds none.
pub(super) fn held_by_another(path: &Path) -> bool {
    std::fs::File::open(path)
        .map(|f| matches!(f.try_lock_shared(), Err(std::fs::TryLockError::WouldBlock)))
        .unwrap_or(false)
}

/// Where a search runs (`<gpu>.lease.json` beside its trials file, while the file is open).
/// Whether it still runs is the file's lock, which goes with the process; a killed search
/// leaves its lease behind, and then the lease means nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lease {
    pub host: String,
    pub pid: u32,
    pub started_unix_ms: u64,
    /// The GPU as the search names it (the file name is its slug).
    #[serde(default)]
    pub gpu: String,
}

impl Lease {
    fn here(gpu: &str) -> Lease {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown host".to_owned());
        Lease {
            host,
            pid: std::process::id(),
            started_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            gpu: gpu.to_owned(),
        }
    }
}

fn end_path(trials_file: &Path) -> PathBuf {
    trials_file.with_extension("end.json")
}

/// How a run of a search ended: why it stopped, after how many trials of what budget, and how
/// many trials after the baseline were its warm start (which a time limit never cuts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchEnd {
    pub format: u32,
    /// "budget", "time" (cut short by --time) or "interrupted".
    pub stop: String,
    pub trials: u32,
    pub budget: u32,
    pub warm_start: u32,
}

/// `<gpu>.confirm.json`: a list of confirmations, or the single one earlier r3s wrote.
fn read_confirmations(path: &Path) -> Result<Vec<Confirmation>, StoreError> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum File {
        Many(Vec<Confirmation>),
        One(Confirmation),
    }
    Ok(match read_json(path)? {
        Some(File::Many(v)) => v,
        Some(File::One(c)) => vec![c],
        None => Vec::new(),
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path: path.to_owned(),
                msg: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

/// Whether a file of a kernel's trials directory is a copy someone made (`g.orig.jsonl`) rather
/// than a search's own file, which is named after the GPU its records name (`trials_path`). A
/// file with no record yet cannot tell, and counts.
pub(super) fn is_copy(path: &Path, recs: &[TrialRecord]) -> bool {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let ablations = path.to_string_lossy().ends_with(ABLATIONS_SUFFIX);
    recs.first()
        .is_some_and(|r| !ablations && slug(&r.gpu) != stem)
}

/// Says once per process that a copy of a trials file is left out.
pub(super) fn note_copy(path: &Path, recs: &[TrialRecord]) {
    static SAID: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|p| p == path) {
        eprintln!(
            "r3: note: {} is left out: its trials are of {}, whose search is {}.jsonl (a copy? r3 reads only a search's own file)",
            path.display(),
            recs[0].gpu,
            slug(&recs[0].gpu)
        );
        said.push(path.to_owned());
    }
}

/// A trials (or ablations) file's complete records, each of this r3's format: a record of
/// another format (a newer r3's) is refused with its version named, never read as this one.
pub(super) fn read_trials(path: &Path) -> Result<Vec<TrialRecord>, StoreError> {
    let recs: Vec<TrialRecord> = read_log(path)?.0;
    if let Some((i, r)) = recs.iter().enumerate().find(|(_, r)| r.format != FORMAT) {
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            msg: format!(
                "record {} has trials format {}; this r3 reads format {FORMAT} (written by another r3?)",
                i + 1,
                r.format
            ),
        });
    }
    Ok(recs)
}

pub(super) fn read_log<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<(Vec<T>, u64), StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(io_err(path)(e)),
    };
    let mut out = Vec::new();
    let mut start = 0;
    let mut lineno = 0;
    while let Some(nl) = bytes[start..].iter().position(|&b| b == b'\n') {
        lineno += 1;
        let line = &bytes[start..start + nl];
        if !line.iter().all(u8::is_ascii_whitespace) {
            let rec = serde_json::from_slice(line).map_err(|e| StoreError::Corrupt {
                path: path.to_owned(),
                msg: format!("line {lineno}: {e}"),
            })?;
            out.push(rec);
        }
        start += nl + 1;
    }
    // Whatever follows the last newline is a record torn by a crash: ignored.
    Ok((out, start as u64))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_l2_choice_is_kept_before_the_first_trial_and_read_back() {
        use crate::l2::{Choice, Regime};
        let dir = tempfile::tempdir().unwrap();
        let store = super::Store::create(dir.path()).unwrap();
        let c = Choice {
            policy: "auto".into(),
            regime: Regime::Warm,
            reason: "nearer".into(),
            natural_us: Some(343.6),
            cold_us: Some(776.8),
            warm_us: Some(337.5),
        };
        store
            .write_l2_choice(&TrialsKey::from("abc"), "GPU (sm_90)", &c)
            .unwrap();
        let trials = store.trials_path(&TrialsKey::from("abc"), "GPU (sm_90)");
        assert!(!trials.exists());
        assert_eq!(store.l2_choice(&trials).unwrap(), Some(c));
        assert_eq!(
            store
                .l2_choice(&store.trials_path(&TrialsKey::from("x"), "g"))
                .unwrap(),
            None
        );
    }

    #[test]
    fn one_damaged_trials_file_costs_only_its_own_search() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::Store::create(dir.path()).unwrap();
        let line = |trial: u32, format: u32| {
            serde_json::json!({
                "format": format, "trial": trial, "kernel": "k", "gpu": "g", "driver": "d",
                "r3_version": "0", "strategy": "bo", "seed": 0, "batch": 1,
                "candidate": {"pipeline": "default<O3>"}, "ptx_hash": "h",
                "outcome": {"status": "compile_error", "message": ""},
                "passes_ms": 0.0, "codegen_ms": 0.0, "measure_ms": 0.0, "finished_unix_ms": 0
            })
            .to_string()
                + "\n"
        };
        let good = store.trials_path(&TrialsKey::from("good"), "g");
        let bad = store.trials_path(&TrialsKey::from("bad"), "g");
        let newer = store.trials_path(&TrialsKey::from("newer"), "g");
        for p in [&good, &bad, &newer] {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        }
        std::fs::write(&good, line(0, 1) + &line(1, 1)).unwrap();
        std::fs::write(&bad, line(0, 1) + "{not json\n" + &line(1, 1)).unwrap();
        std::fs::write(&newer, line(0, 99)).unwrap();
        // A backup copy beside the good search's file is no search of its own.
        std::fs::copy(&good, good.with_file_name("g.orig.jsonl")).unwrap();
        let statuses = store.search_statuses().unwrap();
        assert_eq!(statuses.len(), 3, "{statuses:?}");
        let of = |p: &std::path::Path| statuses.iter().find(|s| s.trials_file == p).unwrap();
        assert_eq!(of(&good).trials, 2);
        let crate::status::SearchState::Damaged(why) = &of(&bad).state else {
            panic!("{:?}", of(&bad).state)
        };
        assert!(why.contains("line 2") && why.contains("fix:"), "{why}");
        let crate::status::SearchState::Damaged(why) = &of(&newer).state else {
            panic!("{:?}", of(&newer).state)
        };
        assert!(
            why.contains("trials format 99") && why.contains("reads format 1"),
            "{why}"
        );
        let sets = store.trial_sets().unwrap();
        assert_eq!(sets.len(), 1, "the readable search alone");
        assert_eq!(sets[0].0, good);
        assert_eq!(
            store.searches(&TrialsKey::from("good")).unwrap().len(),
            1,
            "the copy left out"
        );
    }

    use super::*;
    use crate::kernel::KernelHash;

    /// The trials key these tests search under.
    fn the_key() -> TrialsKey {
        TrialsKey::from("k")
    }

    fn rec(i: u32) -> TrialRecord {
        TrialRecord {
            format: FORMAT,
            trial: i,
            kernel: "k".into(),
            gpu: "NVIDIA H200".into(),
            driver: "580".into(),
            device: None,
            target: None,
            r3_version: "0".into(),
            strategy: "random".into(),
            seed: 0,
            batch: 1,
            candidate: Candidate::baseline(),
            ptx_hash: Some("h".into()),
            duplicate_of: None,
            outcome: Outcome::CompileError {
                message: "x".into(),
            },
            passes_ms: 0.0,
            codegen_ms: 0.0,
            measure_ms: 0.0,
            finished_unix_ms: 0,
        }
    }

    #[test]
    fn a_second_writer_of_one_trials_file_is_refused_until_the_first_closes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut first = store.open_trials(&the_key(), "NVIDIA H200").unwrap();
        first.append(&rec(0)).unwrap();
        let Err(e) = store.open_trials(&the_key(), "NVIDIA H200") else {
            panic!("two logs of one trials file were open at once");
        };
        assert!(matches!(e, StoreError::Busy { .. }), "{e}");
        assert!(e.to_string().contains("nvidia-h200.jsonl"), "{e}");
        // Another GPU's search of the kernel is another file.
        store.open_trials(&the_key(), "NVIDIA H100").unwrap();
        first.append(&rec(1)).unwrap();
        drop(first);
        store
            .open_trials(&the_key(), "NVIDIA H200")
            .unwrap()
            .append(&rec(2))
            .unwrap();
        let trials = store.trials(&the_key(), "NVIDIA H200").unwrap();
        assert_eq!(
            trials.iter().map(|r| r.trial).collect::<Vec<_>>(),
            [0, 1, 2]
        );
    }

    #[test]
    fn status_says_which_searches_run_where_which_ended_and_which_were_killed() {
        use crate::status::SearchState;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let state_of = |gpu: &str| {
            let all = store.search_statuses().unwrap();
            let s = all.iter().find(|s| s.gpu == gpu).unwrap().clone();
            (s.state, s.trials)
        };
        let mut running = store.open_trials(&the_key(), "NVIDIA H200").unwrap();
        running.append(&rec(0)).unwrap();
        let lease = store
            .trials_path(&the_key(), "NVIDIA H200")
            .with_extension("lease.json");
        assert!(lease.exists());
        let (SearchState::Running(Some(l)), 1) = state_of("NVIDIA H200") else {
            panic!("{:?}", state_of("NVIDIA H200"))
        };
        assert_eq!(l.pid, std::process::id());
        assert!(!l.host.is_empty());
        // Closed without a word (as a killed search would be, save the lease): stopped.
        drop(running);
        assert!(!lease.exists(), "the lease goes with the open file");
        assert_eq!(state_of("NVIDIA H200"), (SearchState::Stopped, 1));
        // A lease a killed process left means nothing without the lock.
        std::fs::write(
            &lease,
            br#"{"host":"gone","pid":1,"started_unix_ms":0,"gpu":"x"}"#,
        )
        .unwrap();
        assert_eq!(state_of("NVIDIA H200"), (SearchState::Stopped, 1));
        let end = SearchEnd {
            format: 1,
            stop: "budget".into(),
            trials: 1,
            budget: 1,
            warm_start: 0,
        };
        store
            .write_search_end(&the_key(), "NVIDIA H200", &end)
            .unwrap();
        assert_eq!(state_of("NVIDIA H200"), (SearchState::Finished(end), 1));
        // Another GPU's search of the kernel is another row; one with no trial yet is listed.
        let _other = store.open_trials(&the_key(), "NVIDIA H100").unwrap();
        assert!(matches!(
            state_of("NVIDIA H100"),
            (SearchState::Running(_), 0)
        ));
        assert_eq!(store.search_statuses().unwrap().len(), 2);
    }

    #[test]
    fn torn_last_line_is_ignored_and_cut_before_appending() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let mut log = store.open_trials(&the_key(), "NVIDIA H200").unwrap();
        log.append(&rec(0)).unwrap();
        log.append(&rec(1)).unwrap();
        drop(log);
        let path = store.trials_path(&the_key(), "NVIDIA H200");
        assert!(path.ends_with("trials/k/nvidia-h200.jsonl"));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"format\":1,\"tri").unwrap();
        drop(f);
        assert_eq!(store.trials(&the_key(), "NVIDIA H200").unwrap().len(), 2);
        let mut log = store.open_trials(&the_key(), "NVIDIA H200").unwrap();
        log.append(&rec(2)).unwrap();
        let all = store.trials(&the_key(), "NVIDIA H200").unwrap();
        assert_eq!(all.iter().map(|r| r.trial).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn confirmations_accumulate_by_trial_and_old_single_ones_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let path = store.trials_path(&the_key(), "g");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let c = |trial| Confirmation {
            launches: Vec::new(),
            context_ratios: Vec::new(),
            format: 1,
            trial,
            outcome: Outcome::CompileError {
                message: "x".into(),
            },
            finished_unix_ms: 0,
            in_program: Vec::new(),
            unconfirmed: None,
        };
        // What r3 wrote before: one object.
        std::fs::write(confirmation_path(&path), serde_json::to_vec(&c(3)).unwrap()).unwrap();
        assert_eq!(store.confirmations(&path).unwrap(), [c(3)]);
        store.write_confirmation(&the_key(), "g", &c(5)).unwrap();
        store.write_confirmation(&the_key(), "g", &c(3)).unwrap();
        let got: Vec<u32> = store
            .confirmations(&path)
            .unwrap()
            .iter()
            .map(|c| c.trial)
            .collect();
        assert_eq!(got, [5, 3]);
    }

    #[test]
    fn a_damaged_middle_line_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let path = store.trials_path(&the_key(), "g");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "garbage\n").unwrap();
        let e = store.trials(&the_key(), "g").unwrap_err().to_string();
        assert!(e.contains("g.jsonl") && e.contains("line 1"), "{e}");
    }

    mod props {
        use super::*;
        use crate::records::tests::props::{apply_damage, damage};
        use proptest::prelude::*;
        use std::path::Component;

        fn log_with(n: u32) -> (tempfile::TempDir, Store, PathBuf) {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::create(dir.path()).unwrap();
            let mut log = store.open_trials(&the_key(), "NVIDIA H200").unwrap();
            for i in 0..n {
                log.append(&rec(i)).unwrap();
            }
            let path = store.trials_path(&the_key(), "NVIDIA H200");
            (dir, store, path)
        }

        /// `root/<sub>/<one plain component>…`: nothing leads out of `root/<sub>`.
        fn inside(path: &Path, root: &Path, sub: &str, depth: usize) -> bool {
            let Ok(rest) = path.strip_prefix(root.join(sub)) else {
                return false;
            };
            let comps: Vec<_> = rest.components().collect();
            comps.len() == depth
                && comps.iter().all(
                    |c| matches!(c, Component::Normal(n) if !n.to_string_lossy().starts_with('.')),
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn arbitrary_bytes_never_panic_and_errors_name_file_and_line(
                bytes in proptest::collection::vec(any::<u8>(), 0..400)
            ) {
                let (_d, store, path) = log_with(0);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
                if let Err(e) = store.trials(&the_key(), "NVIDIA H200") {
                    let e = e.to_string();
                    prop_assert!(e.contains("nvidia-h200.jsonl") && e.contains("line "), "{}", e);
                    prop_assert!(e.contains("fix:"), "{}", e);
                }
            }

            /// A crash mid-append leaves any bytes without a newline: they are not a trial, and
            /// the next append continues the numbering with no gap and no duplicate.
            #[test]
            fn a_torn_tail_is_no_trial_and_the_next_append_follows_on(
                n in 0u32..6,
                tail in proptest::collection::vec(any::<u8>().prop_filter("no newline", |b| *b != b'\n'), 0..200),
            ) {
                let (_d, store, path) = log_with(n);
                let mut f = std::fs::OpenOptions::new().append(true).create(true).open(&path).unwrap();
                f.write_all(&tail).unwrap();
                drop(f);
                prop_assert_eq!(store.trials(&the_key(), "NVIDIA H200").unwrap().len() as u32, n);
                let mut log = store.open_trials(&the_key(), "NVIDIA H200").unwrap();
                log.append(&rec(n)).unwrap();
                let got: Vec<u32> =
                    store.trials(&the_key(), "NVIDIA H200").unwrap().iter().map(|r| r.trial).collect();
                prop_assert_eq!(got, (0..=n).collect::<Vec<_>>());
            }

            #[test]
            fn a_damaged_log_never_panics_and_errors_name_file_and_line(d in damage(), d2 in damage()) {
                let (_d, store, path) = log_with(4);
                let good = std::fs::read(&path).unwrap();
                std::fs::write(&path, apply_damage(&apply_damage(&good, &d), &d2)).unwrap();
                match store.trials(&the_key(), "NVIDIA H200") {
                    Ok(recs) => prop_assert!(recs.len() <= 5),
                    Err(e) => {
                        let e = e.to_string();
                        prop_assert!(e.contains("nvidia-h200.jsonl") && e.contains("line "), "{}", e);
                    }
                }
                // Opening for append (what --resume does) either works or names the file.
                if let Err(e) = store.open_trials(&the_key(), "NVIDIA H200") {
                    prop_assert!(e.to_string().contains("nvidia-h200.jsonl"), "{}", e);
                }
            }

            #[test]
            fn no_name_makes_a_trials_path_leave_the_store(kernel in "\\PC{0,12}|[./]{1,6}", gpu in "\\PC{0,12}|[./]{1,6}") {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::create(dir.path()).unwrap();
                let path = store.trials_path(&TrialsKey::from(kernel.as_str()), &gpu);
                prop_assert!(inside(&path, dir.path(), "trials", 2), "{:?} {:?}: {}", kernel, gpu, path.display());
                for p in [
                    confirmation_path(&path),
                    ablations_path(&path),
                    transfer_path(&path),
                    end_path(&path),
                    path.with_extension("l2.json"),
                ] {
                    prop_assert!(inside(&p, dir.path(), "trials", 2), "{}", p.display());
                }
                let s = slug(&kernel);
                prop_assert!(!s.is_empty() && !s.starts_with('.') && !s.contains('/'));
                prop_assert_eq!(slug(&s), s.clone(), "slugs are fixed points");
                let kdir = store.kernel_dir(&KernelHash::from(kernel.as_str()));
                prop_assert!(inside(&kdir, dir.path(), "kernels", 1), "{}", kdir.display());
            }
        }

        #[test]
        fn dot_names_stay_inside_the_trials_directory() {
            // Before: slug("..") was "..", so a landscape naming its kernel ".." wrote its
            // trials to <store>/<gpu>.jsonl; and "" gave the trials directory itself.
            assert_eq!(slug(".."), "_..");
            assert_eq!(slug(""), "_");
            assert_eq!(slug("/"), "_");
            assert_eq!(slug("NVIDIA H200"), "nvidia-h200");
            let dir = tempfile::tempdir().unwrap();
            let store = Store::create(dir.path()).unwrap();
            assert_eq!(
                store.trials_path(&TrialsKey::from(".."), "g"),
                dir.path().join("trials/_../g.jsonl")
            );
        }
    }
}
