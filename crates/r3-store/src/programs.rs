//! Programs: what each program binary launched over its last `r3 record` run, per kernel (its
//! census), and what `r3 record --time-only` runs measured of it (its timings), under
//! `programs/<key>/` (`census.json`, `timings/<binary>.json`; see docs/formats.md). A program is
//! its executable's path ([`program_key`]); a binary, the hash of the executable's bytes.
//!
//! The recording runtime counts every launch while it records (r3rt.c: the census in
//! R3_RECORD_STATS): per kernel, the launches identical to each recorded one and the others with
//! their threads. A kernel's GPU time over the run is estimated from its recordings' times:
//! each recorded launch's time for every launch identical to it, and for the others a fixed cost
//! per launch plus a cost per thread, fitted to the kernel's recorded launches ([`estimate`]).

use super::identity::Resolution;
use super::records::Recording;
use super::{
    read_dir_if_exists, read_json, to_json, warn_left_out, write_atomic, Store, StoreError,
};
use crate::kernel::{short_hash, KernelHash};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The format of `census.json` and `timings/<binary>.json` this r3 writes.
pub const FORMAT: u32 = 1;

/// One program binary's census: what its last `r3 record` run launched, per kernel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Census {
    pub format: u32,
    /// The program as the user ran it (argv[0] as given).
    pub program: String,
    /// Canonical path of the executable.
    pub path: String,
    /// `short_hash` of the executable's bytes.
    pub binary: String,
    /// The arguments it ran with: with the executable, the workload this census is of (absent
    /// when none, and in files of earlier r3s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// When it was taken (seconds since the Unix epoch).
    pub unix_s: f64,
    /// Every launch seen, unknown kernels included.
    pub launches: u64,
    /// Launches of kernels the runtime had no registration for.
    pub unknown_launches: u64,
    /// Most estimated time first; kernels without an estimate last.
    pub kernels: Vec<KernelCensus>,
}

/// One kernel's launches in a census, and its estimated GPU time over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelCensus {
    /// Content hash of the stored kernel, where resolved (as its recordings resolve, else
    /// through its fatbinary or a name that is unique).
    #[serde(default)]
    pub kernel: Option<String>,
    /// Mangled name.
    pub name: String,
    pub launches: u64,
    /// The kernel's GPU time over the run (ms); None when no launch of it has a time.
    #[serde(default)]
    pub estimated_ms: Option<f64>,
    /// Launches whose time is a recording's (identical to a recorded launch) or their own
    /// (timed between events while recording).
    pub timed_launches: u64,
    /// Launches estimated from the kernel's timed launches (a fixed cost and a cost per
    /// thread): only those whose events failed, since 2026-11-27.
    pub scaled_launches: u64,
    /// For each of its recordings in this run (by id, `<kernel dir>/<launch dir>`), how often its
    /// values recurred.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recurrence: Vec<(String, Recurrence)>,
    /// Each of its recordings in this run, the launches identical to it and the time of one:
    /// how much of the kernel's time a variant guarded on a recording's values is sure to run
    /// ([`Store::admitted_share`]). Empty in censuses of an r3 before 2026-12-03.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded: Vec<RecordedTime>,
}

impl KernelCensus {
    /// Of the kernel's launches over the run, the share its recordings stand for: those
    /// identical to a recorded launch, by time, or where more, those of a recorded launch's grid
    /// and block, by count (summed over its recordings, at most all). None where the census
    /// kept neither (an r3 before 2026-12-03) or the kernel has no time. bfs_step's four recorded
    /// launches, its first four levels, were 1.1% of its time and shared their shapes with 1 to 4
    /// of its 35 launches each, and its 1.48x in replay came to 1.16x in the program;
    /// gramschmidt's gs_update, recorded on 4 of its 1559 launches, all of one shape, ran 3.13x
    /// in replay and 3.12x in the program (H200, run Y22, 2026-12-03).
    pub fn recorded_share(&self) -> Option<f64> {
        let total = self.estimated_ms.filter(|ms| *ms > 0.0)?;
        let timed: Vec<f64> = self
            .recorded
            .iter()
            .filter_map(|r| Some(r.identical as f64 * r.ms?))
            .collect();
        let by_time = (!timed.is_empty()).then(|| timed.iter().sum::<f64>() / total);
        let by_shape = (!self.recurrence.is_empty()).then(|| {
            self.recurrence
                .iter()
                .map(|(_, r)| r.dims_same as f64 / r.compared.max(1) as f64)
                .sum::<f64>()
        });
        let share = match (by_time, by_shape) {
            (Some(t), Some(s)) => t.max(s),
            (one, other) => one.or(other)?,
        };
        Some(share.min(1.0))
    }
}

/// A recording's launches in a census: itself and those identical to it (same grid, block,
/// shared size and argument bytes), and one's time (ms), where known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedTime {
    pub id: String,
    pub identical: u64,
    pub ms: Option<f64>,
}

/// A `r3 record --time-only` run: measured GPU time per kernel, no recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub format: u32,
    pub program: String,
    pub path: String,
    pub binary: String,
    /// The arguments it ran with (see `Census::args`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    pub unix_s: f64,
    /// Sum of every timed launch's GPU time (CUDA events around each launch), ms.
    pub total_ms: f64,
    pub launches: u64,
    pub kernels: Vec<KernelTiming>,
    /// The tuned code the binary ships, as its dispatch tables state it (applied builds; empty
    /// for a build without r3's apply, and in files of earlier r3s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shipped: Vec<ShippedKernel>,
}

/// One kernel's tuned code in an applied build (the dispatch table's `s` line,
/// `apply::dispatch`): its mangled name, architecture and content hash, and the PTX hash of
/// each piece of tuned code it ships (the generic code's, then each variant's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShippedKernel {
    pub name: String,
    pub arch: String,
    pub kernel: KernelHash,
    pub ptx: Vec<String>,
}

impl ShippedKernel {
    /// Its table line: `s <name> <arch> <kernel hash> <ptx hash>,...`.
    pub fn line(&self) -> String {
        format!(
            "s {} {} {} {}",
            self.name,
            self.arch,
            self.kernel,
            self.ptx.join(",")
        )
    }

    /// A table line, with or without its leading `s ` (the runtime passes on the rest); None
    /// for anything else.
    pub fn parse(line: &str) -> Option<ShippedKernel> {
        let body = line.strip_prefix("s ").unwrap_or(line);
        let f: Vec<&str> = body.split(' ').collect();
        let [name, arch, kernel, ptx] = f[..] else {
            return None;
        };
        let ptx: Vec<String> = ptx.split(',').map(str::to_owned).collect();
        let ok = !name.is_empty()
            && arch.starts_with("sm_")
            && !kernel.is_empty()
            && ptx.iter().all(|p| !p.is_empty());
        ok.then(|| ShippedKernel {
            name: name.into(),
            arch: arch.into(),
            kernel: kernel.into(),
            ptx,
        })
    }
}

/// One kernel's launches in a time-only run and their summed GPU time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelTiming {
    /// Mangled name; `(unknown)` for launches of kernels with no registration.
    pub name: String,
    pub launches: u64,
    pub ms: f64,
}

/// A program known to the store: its key (directory under `programs/`), its census and its
/// timings (oldest first).
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub key: String,
    pub census: Option<Census>,
    pub timings: Vec<Timing>,
}

/// One kernel's share of one program's estimated GPU time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Share {
    /// The program's key.
    pub program: String,
    /// The program's name for people (its file name).
    pub name: String,
    /// Of the census' known time, 0 to 1.
    pub share: f64,
    pub estimated_ms: f64,
    pub launches: u64,
}

/// What the recording runtime counted of one kernel's launches over a run (R3_RECORD_STATS:
/// `census`, written by r3rt.c's `write_census`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchCounts {
    /// Mangled name.
    pub name: String,
    /// The fatbinary it was registered from ("" when unknown).
    #[serde(default)]
    pub fatbin: String,
    /// Its directory under `records/` (`records::kernel_key`).
    pub key: String,
    pub launches: u64,
    /// Per recorded launch (its directory under `records/<key>/`), the launches identical to
    /// it, itself included.
    #[serde(default)]
    pub recorded: Vec<RecordedCount>,
    /// The other launches (not recorded, nor identical to a recorded one), and their threads
    /// (grid × block) in all.
    #[serde(default)]
    pub other_launches: u64,
    #[serde(default)]
    pub other_threads: f64,
    /// Of the other launches, those the runtime timed between two events (as a time-only run
    /// times a launch), their threads and their GPU time summed, ms. An r3 before 2026-11-27
    /// timed none.
    #[serde(default)]
    pub other_timed: u64,
    #[serde(default)]
    pub other_timed_threads: f64,
    #[serde(default)]
    pub other_timed_ms: f64,
}

impl LaunchCounts {
    pub fn others(&self) -> OtherLaunches {
        OtherLaunches {
            launches: self.other_launches,
            threads: self.other_threads,
            timed: self.other_timed,
            timed_threads: self.other_timed_threads,
            timed_ms: self.other_timed_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedCount {
    pub launch: String,
    pub count: u64,
    /// How often its values recur (r3rt.c's `struct recur`; none from an r3 before
    /// 2026-12-03).
    #[serde(flatten)]
    pub recurrence: Option<Recurrence>,
}

/// Of a kernel's launches from a recorded one on (itself included) that the runtime compared
/// with it, those with its grid and block, and those with each of its first parameters' bytes:
/// the launches a variant guarded on those values would run for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recurrence {
    pub compared: u64,
    pub dims_same: u64,
    pub args_same: Vec<u64>,
}

impl Recurrence {
    /// The share of the compared launches that have every value of the recorded launch that
    /// `args` (parameter indices) and, with `dims`, its grid and block name; at least, where
    /// several are named (the counts are kept value by value). None where a parameter was not
    /// counted.
    pub fn share(&self, args: &[u32], dims: bool) -> Option<f64> {
        let n = self.compared.max(1) as f64;
        let mut missing = if dims {
            1.0 - self.dims_same as f64 / n
        } else {
            0.0
        };
        for &i in args {
            missing += 1.0 - *self.args_same.get(i as usize)? as f64 / n;
        }
        Some((1.0 - missing).max(0.0))
    }

    /// Two runs' counts of one recorded launch, summed.
    pub fn add(&self, other: &Recurrence) -> Recurrence {
        let n = self.args_same.len().min(other.args_same.len());
        Recurrence {
            compared: self.compared + other.compared,
            dims_same: self.dims_same + other.dims_same,
            args_same: (0..n)
                .map(|i| self.args_same[i] + other.args_same[i])
                .collect(),
        }
    }
}

/// A program binary as `r3 record` ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgramBinary {
    /// As the user gave it (argv[0]).
    pub program: String,
    /// The executable's canonical path.
    pub path: String,
    /// `short_hash` of its bytes.
    pub binary: String,
    /// The arguments it ran with: a program run with other arguments is another workload.
    pub args: Vec<String>,
}

impl ProgramBinary {
    /// `program` as given, run from the executable at `exe`.
    pub fn of(program: &str, exe: &Path) -> std::io::Result<ProgramBinary> {
        let path = std::fs::canonicalize(exe)?;
        let bytes = std::fs::read(&path)?;
        Ok(ProgramBinary {
            program: program.to_owned(),
            path: path.display().to_string(),
            binary: short_hash(&bytes),
            args: Vec::new(),
        })
    }

    /// The same binary run with `args`.
    pub fn with_args(self, args: &[String]) -> ProgramBinary {
        ProgramBinary {
            args: args.to_vec(),
            ..self
        }
    }
}

/// A share of a program's GPU time in words: `12.3%`, or `<0.1%` for what rounds to nothing
/// (the allocation and `r3 status` print shares the same way).
pub fn share_words(share: f64) -> String {
    if share >= 0.001 {
        format!("{:.1}%", 100.0 * share)
    } else {
        "<0.1%".into()
    }
}

/// The directory of a program under `programs/`: its executable's file name and the short
/// hash of its canonical path (`<basename>-<hash>`, the name slugged), so the same executable
/// has the same key from any working directory, and two of one name in two builds have two.
pub fn program_key(path: &Path) -> String {
    workload_key(path, &[])
}

/// The directory of a workload, an executable run with these arguments: the program's key
/// without arguments (so a store of earlier r3s reads as it was), else the hash covers the
/// arguments too, so that `app -k 0` and `app -k 1` keep a census each.
pub fn workload_key(path: &Path, args: &[String]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let base = canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut base = super::trials::slug(&base);
    base.truncate(48);
    let mut identity = canonical.as_os_str().as_bytes().to_vec();
    for a in args {
        // NUL cannot occur in an argument: the joined form names one argument list.
        identity.push(0);
        identity.extend_from_slice(a.as_bytes());
    }
    format!("{base}-{}", short_hash(&identity))
}

/// A workload's name for people: the program's file name and its arguments.
pub fn workload_name(program: &str, args: &[String]) -> String {
    let mut name = display_name(program);
    for a in args {
        name.push(' ');
        let plain = !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_=.,/:+@%".contains(&b));
        if plain {
            name.push_str(a);
        } else {
            name.push_str(&format!("'{}'", a.replace('\'', "'\\''")));
        }
    }
    name
}

impl Census {
    /// The estimated GPU time of every kernel that has one, ms.
    pub fn total_ms(&self) -> f64 {
        self.kernels.iter().filter_map(|k| k.estimated_ms).sum()
    }

    /// The share (0 to 1) of the known time that the kernel with this content hash takes;
    /// None where it has no estimate here (or nothing has).
    pub fn share_of(&self, kernel_hash: &KernelHash) -> Option<f64> {
        let total = self.total_ms();
        let mine: Vec<f64> = self
            .kernels
            .iter()
            .filter(|k| k.kernel.as_deref() == Some(kernel_hash))
            .filter_map(|k| k.estimated_ms)
            .collect();
        (total > 0.0 && !mine.is_empty()).then(|| mine.iter().sum::<f64>() / total)
    }

    /// The workload's name for people: the file name it was run by, and its arguments.
    pub fn name(&self) -> String {
        workload_name(&self.program, &self.args)
    }
}

fn display_name(program: &str) -> String {
    Path::new(program)
        .file_name()
        .map_or_else(|| program.to_owned(), |n| n.to_string_lossy().into_owned())
}

/// One recorded launch of a kernel as estimation sees it: the run's launches identical to it
/// (itself included), its time (None: not replayable, or untimed) and its threads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordedLaunch {
    pub count: u64,
    pub ms: Option<f64>,
    pub threads: f64,
}

/// A kernel's launches over a run that are neither recorded nor identical to a recorded one:
/// their count and threads (grid × block) in all, and of those, the ones timed, their threads
/// and their GPU time (ms).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OtherLaunches {
    pub launches: u64,
    pub threads: f64,
    pub timed: u64,
    pub timed_threads: f64,
    pub timed_ms: f64,
}

impl OtherLaunches {
    /// `launches` of `threads` in all, none timed.
    pub fn untimed(launches: u64, threads: f64) -> OtherLaunches {
        OtherLaunches {
            launches,
            threads,
            ..OtherLaunches::default()
        }
    }

    /// The timed ones as one average launch, (threads, ms); None where none was timed.
    fn timed_point(&self) -> Option<(f64, f64)> {
        let n = self.timed as f64;
        (self.timed > 0 && self.timed_ms.is_finite() && self.timed_ms >= 0.0)
            .then_some((self.timed_threads / n, self.timed_ms / n))
    }
}

/// A kernel's estimated GPU time over a run and how its launches were counted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub ms: Option<f64>,
    pub timed_launches: u64,
    pub scaled_launches: u64,
}

/// A kernel's time over a run: each timed recorded launch's time times the launches identical
/// to it, plus the other launches' measured time, plus the untimed others at the kernel's
/// [`launch_cost`] (each timed recording counted once, the timed others as one launch of their
/// mean). A recording without a time counts toward neither; with nothing timed, the time is
/// unknown.
pub fn estimate(recorded: &[RecordedLaunch], others: OtherLaunches) -> Estimate {
    estimate_on(recorded, others, None)
}

/// [`estimate`] on a GPU that holds `resident` threads at once (SMs × threads an SM holds):
/// a launch of fewer threads than that takes about as long as one of that many (one wave: the
/// GPU is not full either way), so each launch counts as at least `resident` threads. The
/// untimed other launches are known only by their count and threads in all, so they count as
/// `max(threads, count × resident)`: exact where they are all on the same side of one wave.
pub fn estimate_on(
    recorded: &[RecordedLaunch],
    others: OtherLaunches,
    resident: Option<f64>,
) -> Estimate {
    let wave = resident.filter(|r| *r > 0.0).unwrap_or(0.0);
    let timed: Vec<(u64, f64, f64)> = recorded
        .iter()
        .filter_map(|r| {
            r.ms.filter(|ms| ms.is_finite() && *ms > 0.0)
                .map(|ms| (r.count, ms, r.threads.max(wave)))
        })
        .collect();
    let timed_other = others.timed_point();
    if timed.is_empty() && timed_other.is_none() {
        return Estimate {
            ms: None,
            timed_launches: 0,
            scaled_launches: 0,
        };
    }
    let (other_timed, other_timed_threads, measured) = match timed_other {
        Some(_) => (others.timed, others.timed_threads, others.timed_ms),
        None => (0, 0.0, 0.0),
    };
    let known: f64 = timed.iter().map(|(n, ms, _)| *n as f64 * ms).sum::<f64>() + measured;
    let untimed = others.launches.saturating_sub(other_timed);
    let untimed_threads = (others.threads - other_timed_threads)
        .max(0.0)
        .max(untimed as f64 * wave);
    let points: Vec<(f64, f64)> = timed
        .iter()
        .map(|&(_, ms, th)| (th, ms))
        .chain(timed_other.map(|(th, ms)| (th.max(wave), ms)))
        .collect();
    let cost = launch_cost(&points).filter(|_| untimed > 0);
    let scaled = cost.map_or(0.0, |(fixed, per_thread)| {
        untimed as f64 * fixed + untimed_threads * per_thread
    });
    Estimate {
        ms: Some(known + scaled),
        timed_launches: timed.iter().map(|(n, _, _)| n).sum::<u64>() + other_timed,
        scaled_launches: if cost.is_some() { untimed } else { 0 },
    }
}

/// A launch's time as a fixed cost plus a cost per thread (ms, ms per thread), from recorded
/// launches' (threads, ms): a least-squares line where they differ in threads, else the time
/// per thread (a fixed cost of nothing). A line that gives either part below zero falls back to
/// whichever part alone the points support: the time per thread where the time grows with the
/// threads, else the mean time. None without threads to go by.
///
/// A small launch is mostly fixed cost (launch, first memory latencies): scaled by threads alone
/// from the kernel's larger recorded launches, small unrecorded ones came to a fraction of their
/// time, and scaled from a small recorded one, large ones to a multiple.
pub fn launch_cost(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    let (threads, ms) = points
        .iter()
        .fold((0.0, 0.0), |(t, m), (th, x)| (t + th, m + x));
    if threads <= 0.0 {
        return None;
    }
    let proportional = Some((0.0, ms / threads));
    let (t_mean, m_mean) = (threads / n, ms / n);
    let spread: f64 = points.iter().map(|(t, _)| (t - t_mean).powi(2)).sum();
    if spread <= (1e-9 * t_mean).powi(2) * n {
        return proportional;
    }
    let slope = points
        .iter()
        .map(|(t, m)| (t - t_mean) * (m - m_mean))
        .sum::<f64>()
        / spread;
    let fixed = m_mean - slope * t_mean;
    if slope < 0.0 {
        Some((m_mean, 0.0))
    } else if fixed < 0.0 {
        proportional
    } else {
        Some((fixed, slope))
    }
}

/// A recording's time in the program: the median of the program's later identical launches
/// (`natural.json`) where there are some, else its in-app time; None where it is not
/// replayable or has no time.
pub fn recorded_ms(rec: &Recording) -> Option<f64> {
    if rec.launch.not_replayable.is_some() {
        return None;
    }
    let mut natural = rec.natural_ms().unwrap_or_default();
    natural.sort_by(f64::total_cmp);
    let median = match natural.len() {
        0 => None,
        n if n % 2 == 1 => Some(natural[n / 2]),
        n => Some((natural[n / 2 - 1] + natural[n / 2]) / 2.0),
    };
    median
        .or(Some(rec.launch.in_app_ms))
        .filter(|ms| ms.is_finite() && *ms > 0.0)
}

/// A recorded launch's threads (grid × block).
pub fn recorded_threads(rec: &Recording) -> f64 {
    let l = &rec.launch;
    l.grid
        .iter()
        .chain(&l.block)
        .map(|d| f64::from(*d))
        .product()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Milliseconds kernel `hash` runs in one run of the program that runs it longest, from
/// [`Store::kernel_shares`] read once for many kernels.
pub fn longest_run_ms(shares: &BTreeMap<KernelHash, Vec<Share>>, hash: &KernelHash) -> Option<f64> {
    shares
        .get(hash)?
        .iter()
        .map(|s| s.estimated_ms)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
}

/// Of kernel `hash`'s time in the census among `censuses` that runs it longest, the share in
/// launches a guard `admits`, at least: for each of its recordings (among `recordings`, by id)
/// that the guard admits, the launches identical to it, or, where more, those that pass its
/// grid, block and each parameter of `folded` ([`Recurrence::share`]), each at the
/// recording's time. None where that census kept no recording's count and time.
///
/// Why: a variant guarded on one recorded launch's values runs only the launches that pass
/// them. mlp_forward's dense layer, recorded once, shipped its template behind the first of
/// three layers' values; the program ran 1.50x against 1.96x predicted (H200, Y16/Y17).
pub fn admitted_share(
    censuses: &[&Census],
    hash: &KernelHash,
    recordings: &[Recording],
    admits: &dyn Fn(&crate::candidate::LaunchValues) -> bool,
    folded: &[u32],
) -> Option<f64> {
    let (total, mine) = censuses
        .iter()
        .map(|c| {
            let mine: Vec<&KernelCensus> = c
                .kernels
                .iter()
                .filter(|k| k.kernel.as_deref() == Some(hash.as_str()))
                .collect();
            (
                mine.iter().filter_map(|k| k.estimated_ms).sum::<f64>(),
                mine,
            )
        })
        .filter(|(ms, mine)| *ms > 0.0 && mine.iter().any(|k| !k.recorded.is_empty()))
        .max_by(|a, b| a.0.total_cmp(&b.0))?;
    let recurrence: HashMap<&str, &Recurrence> = mine
        .iter()
        .flat_map(|k| &k.recurrence)
        .map(|(id, r)| (id.as_str(), r))
        .collect();
    let (mut identical_ms, mut recurring_ms) = (0.0, 0.0f64);
    for r in mine.iter().flat_map(|k| &k.recorded) {
        let Some(ms) = r.ms else { continue };
        let passes = recordings
            .iter()
            .find(|rec| rec.id == r.id)
            .and_then(|rec| rec.launch.values())
            .is_some_and(|v| admits(&v));
        if !passes {
            continue;
        }
        identical_ms += r.identical as f64 * ms;
        if let Some(rec) = recurrence.get(r.id.as_str()) {
            let share = rec.share(folded, true).unwrap_or(0.0);
            recurring_ms = recurring_ms.max(share * rec.compared as f64 * ms);
        }
    }
    Some((identical_ms.max(recurring_ms) / total).min(1.0))
}

impl Store {
    fn program_dir(&self, path: &str, args: &[String]) -> PathBuf {
        self.root()
            .join("programs")
            .join(workload_key(Path::new(path), args))
    }

    /// The census of a run of `program` from what the runtime counted, each kernel's time
    /// estimated from its recordings in this store (not stored: see `put_census`).
    /// `resident`: the threads the GPU it ran on holds at once, where known (`estimate_on`).
    pub fn census(
        &self,
        program: &ProgramBinary,
        counts: &[LaunchCounts],
        unknown_launches: u64,
        resident: Option<f64>,
    ) -> Result<Census, StoreError> {
        let recordings = self.recordings(None)?;
        let by_id: HashMap<&str, &Recording> =
            recordings.iter().map(|r| (r.id.as_str(), r)).collect();
        let index = self.index()?;
        let mut kernels = Vec::new();
        for c in counts {
            let recs: Vec<Option<&Recording>> = c
                .recorded
                .iter()
                .map(|r| {
                    by_id
                        .get(format!("{}/{}", c.key, r.launch).as_str())
                        .copied()
                })
                .collect();
            let launches: Vec<RecordedLaunch> = c
                .recorded
                .iter()
                .zip(&recs)
                .map(|(r, rec)| RecordedLaunch {
                    count: r.count,
                    ms: rec.and_then(recorded_ms),
                    threads: rec.map_or(0.0, recorded_threads),
                })
                .collect();
            let e = estimate_on(&launches, c.others(), resident);
            let arch = recs.iter().flatten().next().map(|r| r.launch.arch.clone());
            let resolved = recs
                .iter()
                .flatten()
                .map(|r| index.of_recording(r))
                .find(|r| matches!(r, Resolution::Kernel(_)))
                .unwrap_or_else(|| {
                    let fatbin = Some(c.fatbin.as_str()).filter(|f| !f.is_empty());
                    index.of_kernel(fatbin, &c.name, arch.as_deref().unwrap_or(""))
                });
            kernels.push(KernelCensus {
                kernel: match resolved {
                    Resolution::Kernel(k) => Some(k.hash.to_string()),
                    _ => None,
                },
                name: c.name.clone(),
                launches: c.launches,
                estimated_ms: e.ms,
                timed_launches: e.timed_launches,
                scaled_launches: e.scaled_launches,
                recurrence: c
                    .recorded
                    .iter()
                    .filter_map(|r| {
                        Some((format!("{}/{}", c.key, r.launch), r.recurrence.clone()?))
                    })
                    .collect(),
                recorded: c
                    .recorded
                    .iter()
                    .zip(&launches)
                    .map(|(r, l)| RecordedTime {
                        id: format!("{}/{}", c.key, r.launch),
                        identical: r.count,
                        ms: l.ms,
                    })
                    .collect(),
            });
        }
        kernels.sort_by(|a, b| {
            let ms = |k: &KernelCensus| k.estimated_ms.unwrap_or(-1.0);
            ms(b).total_cmp(&ms(a)).then_with(|| a.name.cmp(&b.name))
        });
        Ok(Census {
            format: FORMAT,
            program: program.program.clone(),
            path: program.path.clone(),
            binary: program.binary.clone(),
            args: program.args.clone(),
            unix_s: unix_now(),
            launches: counts.iter().map(|c| c.launches).sum::<u64>() + unknown_launches,
            unknown_launches,
            kernels,
        })
    }

    /// Keeps a workload's census (`programs/<key>/census.json`, written whole): the newest run
    /// of any binary at that path with the same arguments replaces the one before; a run with
    /// other arguments is another workload and leaves this one's census as it is.
    pub fn put_census(&self, c: &Census) -> Result<(), StoreError> {
        let path = self.program_dir(&c.path, &c.args).join("census.json");
        write_file(&path, &to_json(c))
    }

    /// Keeps a time-only run (`programs/<key>/timings/<binary>.json`, written whole): one per
    /// binary, the newest run of the same binary replacing the one before.
    pub fn put_timing(&self, t: &Timing) -> Result<(), StoreError> {
        let name = super::trials::slug(&t.binary);
        let path = self
            .program_dir(&t.path, &t.args)
            .join("timings")
            .join(format!("{name}.json"));
        write_file(&path, &to_json(t))
    }

    /// Every program with a census or a timing, by key. A damaged file is left out (with one
    /// warning that names it and the fix), never the whole listing; an unreadable `programs/`
    /// leaves out every program, never fails the command that reads it.
    pub fn programs(&self) -> Result<Vec<Program>, StoreError> {
        let root = self.root().join("programs");
        let entries = match read_dir_if_exists(&root) {
            Ok(Some(entries)) => entries,
            Ok(None) => return Ok(Vec::new()),
            Err(e) => {
                warn_left_out(&e, "every program's census and timings");
                return Ok(Vec::new());
            }
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        Ok(dirs.iter().filter_map(|d| read_program(d)).collect())
    }

    /// The workload run from the executable at `path` with `args` (by its key), where the store
    /// has a census or a timing of it; damaged files are said and left out, as
    /// [`Store::programs`] does.
    pub fn program(&self, path: &str, args: &[String]) -> Option<Program> {
        read_program(&self.program_dir(path, args))
    }

    /// Each kernel's share of each program's estimated time, by the kernel's content hash,
    /// the largest share first: what a kernel is worth to the programs that run it.
    /// Milliseconds kernel `hash` runs in one run of the program that runs it longest, by the
    /// launch census; None where no census counts it (or none can be read: a hint, as the
    /// shares are). What a variant must save more than its first load costs
    /// (`winner::pays_its_load`).
    pub fn run_ms(&self, hash: &KernelHash) -> Option<f64> {
        longest_run_ms(&self.kernel_shares().ok()?, hash)
    }

    /// The GPU time (ms) each recording (`<kernel dir>/<launch dir>`) stands for in the
    /// programs' censuses: the launches identical to it times one's time, summed over the
    /// programs that ran it. A recording no census timed is absent (a census of an r3 before
    /// 2026-12-03, or none kept); a damaged census is said and left out, as
    /// [`Store::programs`] does.
    pub fn recorded_time(&self) -> HashMap<String, f64> {
        let mut out: HashMap<String, f64> = HashMap::new();
        let programs = self.programs().unwrap_or_default();
        let recorded = programs
            .iter()
            .filter_map(|p| p.census.as_ref())
            .flat_map(|c| &c.kernels)
            .flat_map(|k| &k.recorded);
        for r in recorded {
            if let Some(ms) = r.ms.filter(|ms| ms.is_finite() && *ms >= 0.0) {
                *out.entry(r.id.clone()).or_default() += ms * r.identical as f64;
            }
        }
        out
    }

    /// How often the values of the recording `id` (`<kernel dir>/<launch dir>`) recurred,
    /// summed over the censuses that counted it; None where none did (a census of an r3 before
    /// 2026-12-03, or none kept).
    pub fn recurrence_of(&self, id: &str) -> Option<Recurrence> {
        self.programs()
            .ok()?
            .iter()
            .filter_map(|p| p.census.as_ref())
            .flat_map(|c| &c.kernels)
            .flat_map(|k| &k.recurrence)
            .filter(|(of, _)| of == id)
            .map(|(_, r)| r.clone())
            .reduce(|x, y| x.add(&y))
    }

    /// Of kernel `hash`'s time in the program run that runs it longest, the share that a
    /// variant whose guard `admits` a launch runs at least ([`admitted_share`]); None where no
    /// census counted the kernel's recordings one by one (an r3 before 2026-12-03).
    pub fn admitted_share(
        &self,
        hash: &KernelHash,
        recordings: &[Recording],
        admits: &dyn Fn(&crate::candidate::LaunchValues) -> bool,
        folded: &[u32],
    ) -> Option<f64> {
        let programs = self.programs().ok()?;
        let censuses: Vec<&Census> = programs.iter().filter_map(|p| p.census.as_ref()).collect();
        admitted_share(&censuses, hash, recordings, admits, folded)
    }

    pub fn kernel_shares(&self) -> Result<BTreeMap<KernelHash, Vec<Share>>, StoreError> {
        let mut out: BTreeMap<KernelHash, Vec<Share>> = BTreeMap::new();
        for p in self.programs()? {
            let Some(c) = &p.census else { continue };
            let total = c.total_ms();
            if total <= 0.0 {
                continue;
            }
            let mut mine: BTreeMap<&str, (f64, u64)> = BTreeMap::new();
            for k in &c.kernels {
                if let (Some(h), Some(ms)) = (k.kernel.as_deref(), k.estimated_ms) {
                    let e = mine.entry(h).or_default();
                    e.0 += ms;
                    e.1 += k.launches;
                }
            }
            for (h, (ms, launches)) in mine {
                out.entry(h.into()).or_default().push(Share {
                    program: p.key.clone(),
                    name: c.name(),
                    share: ms / total,
                    estimated_ms: ms,
                    launches,
                });
            }
        }
        for shares in out.values_mut() {
            shares.sort_by(|a, b| {
                b.share
                    .total_cmp(&a.share)
                    .then_with(|| a.program.cmp(&b.program))
            });
        }
        Ok(out)
    }
}

/// One program's directory under `programs/`: None where it holds neither a census nor a
/// timing (or is missing).
fn read_program(dir: &Path) -> Option<Program> {
    let census_path = dir.join("census.json");
    let census = census_path
        .exists()
        .then(|| read_or_warn::<Census>(&census_path, "that program's census"))
        .flatten();
    let mut timings = Vec::new();
    let tdir = dir.join("timings");
    match read_dir_if_exists(&tdir) {
        Ok(Some(entries)) => {
            let mut files: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            timings.extend(
                files
                    .iter()
                    .filter_map(|f| read_or_warn::<Timing>(f, "that timing")),
            );
        }
        Ok(None) => {}
        Err(e) => warn_left_out(&e, "that program's timings"),
    }
    timings.sort_by(|a, b| a.unix_s.total_cmp(&b.unix_s));
    if census.is_none() && timings.is_empty() {
        return None;
    }
    let key = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(Program {
        key,
        census,
        timings,
    })
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(path);
    std::fs::create_dir_all(dir).map_err(super::io_err(dir))?;
    write_atomic(path, bytes).map_err(super::io_err(path))
}

/// A program's file, where it reads; a damaged one is said once and left out.
fn read_or_warn<T: for<'de> Deserialize<'de>>(path: &Path, what: &str) -> Option<T> {
    match read_json(path) {
        Ok(v) => Some(v),
        Err(e) => {
            warn_left_out(&e, what);
            None
        }
    }
}

#[cfg(test)]
mod tests {

    /// Of a kernel's launches, the share its recordings stand for: identical ones by time, or
    /// where more, those of a recorded shape by count.
    #[test]
    fn a_kernels_recorded_share_is_what_its_recordings_stand_for() {
        let census = |recorded: Vec<RecordedTime>, estimated_ms: Option<f64>| KernelCensus {
            kernel: Some("k".into()),
            name: "k".into(),
            launches: 35,
            estimated_ms,
            timed_launches: 35,
            scaled_launches: 0,
            recurrence: Vec::new(),
            recorded,
        };
        let rec = |identical: u64, ms: Option<f64>| RecordedTime {
            id: "r".into(),
            identical,
            ms,
        };
        let bfs = census(
            vec![
                rec(1, Some(0.0297)),
                rec(1, Some(0.0449)),
                rec(1, Some(0.0437)),
                rec(1, Some(0.0497)),
            ],
            Some(15.16),
        );
        let share = bfs.recorded_share().unwrap();
        assert!((share - 0.168 / 15.16).abs() < 1e-3, "{share}");
        // Its recorded launches' shapes, each shared by a few of its launches.
        let shapes = |same: &[u64]| -> Vec<(String, Recurrence)> {
            same.iter()
                .map(|&d| {
                    let r = Recurrence {
                        compared: 35,
                        dims_same: d,
                        args_same: Vec::new(),
                    };
                    ("r".to_owned(), r)
                })
                .collect()
        };
        let bfs = KernelCensus {
            recurrence: shapes(&[4, 3, 2, 1]),
            ..bfs
        };
        let share = bfs.recorded_share().unwrap();
        assert!((share - 10.0 / 35.0).abs() < 1e-9, "{share}");
        // A time-step loop: every launch of the recorded launch's shape.
        let loop_kernel = KernelCensus {
            recurrence: shapes(&[35]),
            ..bfs
        };
        assert_eq!(loop_kernel.recorded_share(), Some(1.0));
        assert_eq!(
            census(vec![rec(10, Some(3.0))], Some(15.0)).recorded_share(),
            Some(1.0)
        );
        assert_eq!(
            census(vec![rec(1, None)], Some(15.0)).recorded_share(),
            None
        );
        assert_eq!(census(Vec::new(), Some(15.0)).recorded_share(), None);
        assert_eq!(census(vec![rec(1, Some(1.0))], None).recorded_share(), None);
    }

    use super::*;

    #[test]
    fn shares_read_as_percentages_and_what_rounds_to_nothing_says_so() {
        assert_eq!(share_words(0.123), "12.3%");
        assert_eq!(share_words(1.0), "100.0%");
        assert_eq!(share_words(0.001), "0.1%");
        assert_eq!(share_words(0.0004), "<0.1%");
        assert_eq!(share_words(0.0), "<0.1%");
    }

    fn kernel(hash: Option<&str>, name: &str, ms: Option<f64>, launches: u64) -> KernelCensus {
        KernelCensus {
            kernel: hash.map(str::to_owned),
            name: name.into(),
            launches,
            estimated_ms: ms,
            timed_launches: launches,
            scaled_launches: 0,
            recurrence: Vec::new(),
            recorded: Vec::new(),
        }
    }

    fn census(path: &str, kernels: Vec<KernelCensus>) -> Census {
        Census {
            format: FORMAT,
            program: "./build/app".into(),
            path: path.into(),
            binary: "0123456789abcdef".into(),
            args: Vec::new(),
            unix_s: 1000.5,
            launches: kernels.iter().map(|k| k.launches).sum(),
            unknown_launches: 0,
            kernels,
        }
    }

    fn timing(path: &str, binary: &str, unix_s: f64) -> Timing {
        Timing {
            format: FORMAT,
            program: "app".into(),
            path: path.into(),
            binary: binary.into(),
            args: Vec::new(),
            unix_s,
            total_ms: 12.5,
            launches: 3,
            kernels: vec![KernelTiming {
                name: "_Z4bigv".into(),
                launches: 3,
                ms: 12.5,
            }],
            shipped: Vec::new(),
        }
    }

    #[test]
    fn estimates_count_recorded_times_and_scale_the_rest_by_threads() {
        let recorded = [
            RecordedLaunch {
                count: 10,
                ms: Some(2.0),
                threads: 1000.0,
            },
            RecordedLaunch {
                count: 3,
                ms: Some(6.0),
                threads: 2000.0,
            },
            // Not replayable, or untimed: counts toward neither.
            RecordedLaunch {
                count: 7,
                ms: None,
                threads: 500.0,
            },
        ];
        let e = estimate(&recorded, OtherLaunches::untimed(4, 6000.0));
        // 10 × 2 + 3 × 6 = 38; (2 + 6) ms over 3000 threads for 6000 threads: 16.
        assert_eq!(e.ms, Some(54.0));
        assert_eq!((e.timed_launches, e.scaled_launches), (13, 4));
        // No other launches: nothing scaled.
        assert_eq!(
            estimate(&recorded[..1], OtherLaunches::default()).ms,
            Some(20.0)
        );
        // A kernel without a timed recording: unknown, whatever its other launches.
        let none = estimate(&recorded[2..], OtherLaunches::untimed(40, 1e6));
        assert_eq!(
            (none.ms, none.timed_launches, none.scaled_launches),
            (None, 0, 0)
        );
        assert_eq!(estimate(&[], OtherLaunches::untimed(5, 100.0)).ms, None);
    }

    /// mlp_dense's shape on an H100 (2026-11-27): the layers' launches differ in the work each
    /// thread does (the input width is a loop bound), so scaled by threads from the recorded
    /// launch the census was 1.9× off. Timed by events, the others count at their time.
    #[test]
    fn other_launches_timed_by_events_count_at_their_time() {
        let recorded = [RecordedLaunch {
            count: 1,
            ms: Some(1.0),
            threads: 1000.0,
        }];
        // Three others of the same threads, each doing four times the work per thread.
        let others = OtherLaunches {
            launches: 3,
            threads: 3000.0,
            timed: 3,
            timed_threads: 3000.0,
            timed_ms: 12.0,
        };
        let e = estimate(&recorded, others);
        assert_eq!(e.ms, Some(13.0));
        assert_eq!((e.timed_launches, e.scaled_launches), (4, 0));
        // Untimed, they were scaled to 3 ms.
        let scaled = estimate(&recorded, OtherLaunches::untimed(3, 3000.0));
        assert_eq!(scaled.ms, Some(4.0));
        // Two timed, one not (the events failed): the untimed one on the line through the
        // recorded launch and the timed ones' mean (1000 threads, 4 ms): the mean time.
        let partly = OtherLaunches {
            timed: 2,
            timed_threads: 2000.0,
            timed_ms: 8.0,
            ..others
        };
        let e = estimate(&recorded, partly);
        assert_eq!(e.ms, Some(1.0 + 8.0 + 2.5));
        assert_eq!((e.timed_launches, e.scaled_launches), (3, 1));
        // A kernel with no timed recording (not replayable) is known by its timed others.
        let unreplayable = [RecordedLaunch {
            ms: None,
            ..recorded[0]
        }];
        let e = estimate(&unreplayable, others);
        assert_eq!((e.ms, e.timed_launches), (Some(12.0), 3));
    }

    /// bfs_step on an H100 (2026-11-26): one small recorded launch of 0.69 ms, 34 others of
    /// more threads each but under one wave, 24.2 ms in all measured; scaled by threads the
    /// census said 7.9 s.
    #[test]
    fn launches_under_one_wave_each_cost_a_wave() {
        let recorded = [RecordedLaunch {
            count: 1,
            ms: Some(0.69),
            threads: 256.0,
        }];
        let resident = 132.0 * 2048.0;
        let (n, threads) = (34, 34.0 * 200_000.0);
        let by_threads = estimate(&recorded, OtherLaunches::untimed(n, threads))
            .ms
            .unwrap();
        assert!(by_threads > 500.0, "{by_threads}");
        let waves = estimate_on(
            &recorded,
            OtherLaunches::untimed(n, threads),
            Some(resident),
        )
        .ms
        .unwrap();
        assert!((waves - 35.0 * 0.69).abs() < 1e-9, "{waves}");
        // Launches of ten waves each cost ten times the one-wave launch.
        let big = estimate_on(
            &recorded,
            OtherLaunches::untimed(n, n as f64 * 10.0 * resident),
            Some(resident),
        );
        assert!(
            (big.ms.unwrap() - (0.69 + 34.0 * 6.9)).abs() < 1e-6,
            "{big:?}"
        );
        // A recorded launch of several waves is scaled as before.
        let large = [RecordedLaunch {
            threads: 4.0 * resident,
            ..recorded[0]
        }];
        assert_eq!(
            estimate_on(
                &large,
                OtherLaunches::untimed(2, 8.0 * resident),
                Some(resident)
            )
            .ms,
            estimate(&large, OtherLaunches::untimed(2, 8.0 * resident)).ms
        );
    }

    /// A kernel recorded at a one-block launch and at a large one, whose other launches are
    /// small: each costs the fixed part plus its threads' part.
    #[test]
    fn a_small_and_a_large_recorded_launch_give_a_fixed_cost_and_a_cost_per_thread() {
        let recorded = [
            RecordedLaunch {
                count: 1,
                ms: Some(0.034),
                threads: 256.0,
            },
            RecordedLaunch {
                count: 1,
                ms: Some(0.290),
                threads: 256.0 * 1025.0,
            },
        ];
        // 35 launches of 2048 threads each.
        let e = estimate(&recorded, OtherLaunches::untimed(35, 35.0 * 2048.0));
        let per_thread = 0.256 / (256.0 * 1024.0);
        let fixed = 0.034 - 256.0 * per_thread;
        let want = 0.324 + 35.0 * fixed + 35.0 * 2048.0 * per_thread;
        assert!((e.ms.unwrap() - want).abs() < 1e-9, "{e:?} {want}");
        // By threads alone (as before), the 35 launches came to a fourteenth of that.
        let others = e.ms.unwrap() - 0.324;
        let alone = 35.0 * 2048.0 * 0.324 / (256.0 * 1026.0);
        assert!(
            others > 14.0 * alone && others < 15.0 * alone,
            "{others} {alone}"
        );
    }

    #[test]
    fn a_launch_cost_never_has_a_part_below_zero() {
        // Time that shrinks with threads (noise): the mean time per launch.
        assert_eq!(launch_cost(&[(100.0, 3.0), (200.0, 1.0)]), Some((2.0, 0.0)));
        // A line through below zero: the time per thread.
        assert_eq!(
            launch_cost(&[(100.0, 1.0), (200.0, 5.0)]),
            Some((0.0, 0.02))
        );
        // One shape: the time per thread.
        assert_eq!(
            launch_cost(&[(100.0, 2.0), (100.0, 4.0)]),
            Some((0.0, 0.03))
        );
        assert_eq!(launch_cost(&[(0.0, 2.0)]), None);
        assert_eq!(launch_cost(&[]), None);
    }

    #[test]
    fn shares_are_of_the_known_time() {
        let c = census(
            "/bin/app",
            vec![
                kernel(Some("aaaa"), "a", Some(75.0), 1),
                kernel(Some("bbbb"), "b", Some(25.0), 50),
                kernel(Some("cccc"), "c", None, 2),
                kernel(None, "d", None, 1),
            ],
        );
        assert_eq!(c.total_ms(), 100.0);
        assert_eq!(c.share_of(&KernelHash::from("aaaa")), Some(0.75));
        assert_eq!(c.share_of(&KernelHash::from("bbbb")), Some(0.25));
        assert_eq!(c.share_of(&KernelHash::from("cccc")), None, "no estimate");
        assert_eq!(
            c.share_of(&KernelHash::from("dddd")),
            None,
            "not in the census"
        );
        let empty = census("/bin/app", vec![kernel(Some("cccc"), "c", None, 2)]);
        assert_eq!(empty.share_of(&KernelHash::from("cccc")), None);
        assert_eq!(c.name(), "app");
    }

    #[test]
    fn census_and_timings_round_trip_and_shares_come_from_the_census() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        assert!(store.programs().unwrap().is_empty());
        let exe = dir.path().join("app");
        std::fs::write(&exe, b"\x7fELF...").unwrap();
        let path = exe.display().to_string();
        let c = census(
            &path,
            vec![
                kernel(Some("aaaa"), "a", Some(30.0), 1),
                kernel(Some("bbbb"), "b", Some(10.0), 5),
            ],
        );
        store.put_census(&c).unwrap();
        // Two binaries at one path, the second timed twice: the newer replaces the older.
        store.put_timing(&timing(&path, "1111", 20.0)).unwrap();
        store.put_timing(&timing(&path, "2222", 10.0)).unwrap();
        let mut again = timing(&path, "1111", 30.0);
        again.total_ms = 13.0;
        store.put_timing(&again).unwrap();
        let programs = store.programs().unwrap();
        assert_eq!(programs.len(), 1);
        let p = &programs[0];
        assert_eq!(p.key, program_key(&exe));
        assert_eq!(p.census.as_ref(), Some(&c));
        assert_eq!(p.timings, vec![timing(&path, "2222", 10.0), again]);
        // A newer census of the program replaces the older one.
        let mut newer = c.clone();
        newer.kernels[0].estimated_ms = Some(90.0);
        store.put_census(&newer).unwrap();
        let shares = store.kernel_shares().unwrap();
        let a = &shares["aaaa"];
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].share, a[0].estimated_ms, a[0].launches),
            (0.9, 90.0, 1)
        );
        assert_eq!(
            (a[0].program.as_str(), a[0].name.as_str()),
            (p.key.as_str(), "app")
        );
        assert_eq!(shares["bbbb"][0].share, 0.1);
        assert!(dir
            .path()
            .join("programs")
            .join(&p.key)
            .join("census.json")
            .is_file());
    }

    #[test]
    fn a_damaged_census_is_left_out_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let good = dir.path().join("good");
        let bad = dir.path().join("bad");
        for exe in [&good, &bad] {
            std::fs::write(exe, b"x").unwrap();
            let path = exe.display().to_string();
            store
                .put_census(&census(
                    &path,
                    vec![kernel(Some("aaaa"), "a", Some(1.0), 1)],
                ))
                .unwrap();
        }
        let bad_dir = dir.path().join("programs").join(program_key(&bad));
        std::fs::write(bad_dir.join("census.json"), b"{\"format\": 1, \"progr").unwrap();
        // A timing beside it still counts; a damaged timing is left out too.
        store
            .put_timing(&timing(&bad.display().to_string(), "1111", 1.0))
            .unwrap();
        std::fs::write(bad_dir.join("timings/2222.json"), b"[").unwrap();
        let programs = store.programs().unwrap();
        let listed = programs.len();
        let by_key: BTreeMap<&str, &Program> =
            programs.iter().map(|p| (p.key.as_str(), p)).collect();
        assert!(by_key[program_key(&good).as_str()].census.is_some());
        let b = by_key[program_key(&bad).as_str()];
        assert!(b.census.is_none());
        assert_eq!(b.timings.len(), 1);
        assert_eq!(store.kernel_shares().unwrap()["aaaa"].len(), 1);
        assert_eq!(listed, 2);
        // `programs` that is no directory: no program, and no error.
        std::fs::remove_dir_all(dir.path().join("programs")).unwrap();
        std::fs::write(dir.path().join("programs"), b"x").unwrap();
        assert!(store.programs().unwrap().is_empty());
        assert!(store.kernel_shares().unwrap().is_empty());
    }

    #[test]
    fn program_keys_are_stable_per_executable_and_safe_as_directory_names() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("build");
        std::fs::create_dir_all(&sub).unwrap();
        let exe = sub.join("My App (v2)");
        std::fs::write(&exe, b"x").unwrap();
        let key = program_key(&exe);
        assert_eq!(
            key,
            program_key(&dir.path().join("build/../build/My App (v2)"))
        );
        let (base, hash) = key.rsplit_once('-').unwrap();
        assert_eq!(base, "my-app-v2");
        assert_eq!(hash.len(), 16);
        assert!(key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        // Another executable of the same name elsewhere is another program.
        let other = dir.path().join("My App (v2)");
        std::fs::write(&other, b"x").unwrap();
        assert_ne!(program_key(&other), key);
        // Nothing makes a hidden name or a path: dots, slashes, nothing at all.
        for odd in ["/", "..", ".hidden", "a/../../b"] {
            let k = program_key(Path::new(odd));
            assert!(!k.starts_with('.') && !k.contains('/'), "{odd}: {k}");
        }
    }

    /// One recording's counts from two workloads' censuses are summed; a recording no census
    /// counted has none (every value is offered then).
    #[test]
    fn a_recordings_recurrence_is_summed_over_the_censuses_that_counted_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let counted = |args: &[&str], compared, same| Census {
            format: 1,
            program: "./steps".into(),
            path: "/build/steps".into(),
            binary: "b".into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            unix_s: 0.0,
            launches: compared,
            unknown_launches: 0,
            kernels: vec![KernelCensus {
                kernel: None,
                name: "decay".into(),
                launches: compared,
                estimated_ms: None,
                timed_launches: 0,
                scaled_launches: 0,
                recurrence: vec![(
                    "k/l".into(),
                    Recurrence {
                        compared,
                        dims_same: compared,
                        args_same: vec![compared, same],
                    },
                )],
                recorded: Vec::new(),
            }],
        };
        store.put_census(&counted(&[], 6, 1)).unwrap();
        store.put_census(&counted(&["-n", "2"], 4, 4)).unwrap();
        let r = store.recurrence_of("k/l").unwrap();
        assert_eq!((r.compared, r.args_same), (10, vec![10, 5]));
        assert!(store.recurrence_of("k/other").is_none());
    }

    /// bfs_step's shape: four recordings of its first levels, a few launches each, beside the
    /// level its program repeats; two programs run the kernel and each adds its own.
    #[test]
    fn a_recordings_time_is_its_identical_launches_summed_over_the_programs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let recorded = |id: &str, identical, ms| RecordedTime {
            id: id.into(),
            identical,
            ms,
        };
        let mut bfs = kernel(Some("h"), "bfs", Some(60.0), 40);
        bfs.recorded = vec![
            recorded("k/level0", 1, Some(0.03)),
            recorded("k/repeated", 20, Some(2.5)),
            recorded("k/untimed", 3, None),
        ];
        store
            .put_census(&census("/build/a", vec![bfs.clone()]))
            .unwrap();
        bfs.recorded = vec![recorded("k/level0", 4, Some(0.5))];
        store.put_census(&census("/build/b", vec![bfs])).unwrap();
        let time = store.recorded_time();
        assert_eq!(time.len(), 2, "{time:?}");
        assert_eq!(time["k/repeated"], 50.0);
        assert!((time["k/level0"] - 2.03).abs() < 1e-12, "{time:?}");
    }

    fn recording(id: &str, grid: u32, args_hex: &str) -> Recording {
        let launch = format!(
            r#"{{"format": 1, "kernel": "k", "arch": "sm_90", "grid": [{grid},1,1], "block": [256,1,1],
              "shared_bytes": 0, "params": [{{"offset": 0, "size": 4}}, {{"offset": 4, "size": 4}}],
              "args_hex": "{args_hex}", "va_base": 1, "va_size": 2, "in_app_ms": 1.0, "regions": 0,
              "bytes_in": 0, "bytes_changed": 0, "replayable": true, "not_replayable": null,
              "program": "/bin/x", "pid": 1, "unix_time": 0}}"#
        );
        Recording {
            dir: PathBuf::from("/nonexistent"),
            id: id.into(),
            launch: serde_json::from_str(&launch).unwrap(),
            verification: None,
            kernel: None,
        }
    }

    #[test]
    fn a_guard_on_one_recorded_launchs_values_is_credited_only_the_launches_that_pass_them() {
        // mlp_forward's dense layer, recorded once: its first layer (grid 1024, n = 1024), 392
        // identical launches of 1.25 ms, in a kernel of 768 ms over three layers.
        let mut k = kernel(Some("h"), "dense", Some(768.0), 1175);
        k.recorded = vec![RecordedTime {
            id: "k/first".into(),
            identical: 392,
            ms: Some(1.25),
        }];
        let c = census("/build/mlp", vec![k.clone()]);
        let recs = [recording("k/first", 1024, "0004000000040000")];
        let hash: KernelHash = "h".into();
        let grid = |g: u32| move |l: &crate::candidate::LaunchValues| l.grid[0] == g;
        let share = admitted_share(&[&c], &hash, &recs, &grid(1024), &[0]).unwrap();
        assert!((share - 392.0 * 1.25 / 768.0).abs() < 1e-12, "{share}");
        // A guard the recording does not pass is credited nothing.
        assert_eq!(
            admitted_share(&[&c], &hash, &recs, &grid(512), &[0]),
            Some(0.0)
        );
        // Launches that recur in the guarded values count where more than the identical ones:
        // 400 compared, all of its shape and first parameter, 300 of its second.
        k.recurrence = vec![(
            "k/first".into(),
            Recurrence {
                compared: 400,
                dims_same: 400,
                args_same: vec![400, 300],
            },
        )];
        k.recorded[0].identical = 100;
        let c = census("/build/mlp", vec![k.clone()]);
        let on = |folded: &[u32]| admitted_share(&[&c], &hash, &recs, &grid(1024), folded);
        assert!((on(&[0]).unwrap() - 400.0 * 1.25 / 768.0).abs() < 1e-12);
        assert!((on(&[1]).unwrap() - 300.0 * 1.25 / 768.0).abs() < 1e-12);
        assert!((on(&[0, 1]).unwrap() - 300.0 * 1.25 / 768.0).abs() < 1e-12);
        // Never more than all of it; nothing known where no census kept the counts.
        k.recorded[0].ms = Some(100.0);
        assert_eq!(
            admitted_share(
                &[&census("/b", vec![k.clone()])],
                &hash,
                &recs,
                &grid(1024),
                &[0]
            ),
            Some(1.0)
        );
        k.recorded.clear();
        assert_eq!(
            admitted_share(&[&census("/b", vec![k])], &hash, &recs, &grid(1024), &[0]),
            None
        );
    }
}
