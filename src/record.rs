//! `r3 record`: runs a program built by r3-clang++ with its recording runtime on
//! (crates/r3-driver/src/runtime/r3rt.c), and says what the run recorded and what recording cost.
//!
//! The runtime does the recording inside the program; this module only sets its options
//! (`R3_RECORD_*`), lets it print progress, and reads the statistics it writes at exit
//! ([`RunStats`], the file named by `R3_RECORD_STATS`) for the summary. The runtime also counts
//! every launch (the census), from which the program's time by kernel is estimated and kept
//! with the program (`store::programs`); `r3 record --time-only` ([`time_only`]) measures it
//! instead, every launch timed and nothing recorded.

use crate::replay::gpu::{verify_recordings, Verdict};
use crate::store::in_program::{Judged, Kept};
use crate::store::programs::{
    Census, KernelTiming, LaunchCounts, ProgramBinary, ShippedKernel, Timing,
    FORMAT as PROGRAMS_FORMAT,
};
use crate::store::records::{irreproducible_text, Recording};
use crate::store::trials::Against;
use crate::store::Store;
use serde::Deserialize;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// How to record (every field maps to one `R3_RECORD_*` variable of the runtime).
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Distinct launches recorded per kernel.
    pub launches: u32,
    /// Recording time for the whole run; later launches run unrecorded.
    pub max_time: Option<Duration>,
    /// Bytes written per kernel before its later launches run unrecorded (MiB).
    pub kernel_limit_mb: Option<u64>,
    /// A launch whose reachable working set is larger is recorded as not replayable (MiB).
    pub launch_limit_mb: Option<u64>,
    /// Every live allocation in each prologue, not only what the launch can reach.
    pub full_snapshot: bool,
    pub warm: WarmRelaunch,
    /// Progress lines on stderr while the program runs.
    pub progress: bool,
    /// Files synced to the disk before a recording is renamed into place (the program's exit
    /// waits for the recordings in flight to reach the disk).
    pub sync: bool,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            launches: 4,
            max_time: None,
            kernel_limit_mb: None,
            launch_limit_mb: None,
            full_snapshot: false,
            warm: WarmRelaunch::Auto,
            progress: true,
            sync: true,
        }
    }
}

/// Whether a recorded launch is re-run three times, warm, for the in-app time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WarmRelaunch {
    /// When they cost under 50 ms (estimated from the first launch and the bytes it changed).
    Auto,
    Always,
    Never,
}

impl RecordOptions {
    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("R3_RECORD", "1".to_owned()),
            ("R3_RECORD_LAUNCHES", self.launches.to_string()),
            ("R3_RECORD_PROGRESS", u8::from(self.progress).to_string()),
            (
                "R3_RECORD_WARM",
                match self.warm {
                    WarmRelaunch::Auto => "auto",
                    WarmRelaunch::Always => "1",
                    WarmRelaunch::Never => "0",
                }
                .to_owned(),
            ),
        ];
        if let Some(t) = self.max_time {
            env.push(("R3_RECORD_MAX_S", format!("{}", t.as_secs_f64())));
        }
        if let Some(mb) = self.kernel_limit_mb {
            env.push(("R3_RECORD_KERNEL_MB", mb.to_string()));
        }
        if let Some(mb) = self.launch_limit_mb {
            env.push(("R3_RECORD_LIMIT_MB", mb.to_string()));
        }
        if self.full_snapshot {
            env.push(("R3_RECORD_SNAPSHOT", "full".to_owned()));
        }
        if !self.sync {
            env.push(("R3_RECORD_SYNC", "0".to_owned()));
        }
        env
    }
}

/// What the runtime measured over one run (written at exit to `R3_RECORD_STATS`). Times are
/// seconds of the program's wall time spent on recording, the recorded launches' own run
/// time excluded.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RunStats {
    pub format: u32,
    pub wall_s: f64,
    /// `reachable` or `full`.
    pub snapshot: String,
    pub kernels_seen: u32,
    pub launches: u64,
    pub recorded: u64,
    pub not_replayable: u64,
    /// Bytes copied out for prologues, and bytes of snapshot files written.
    pub bytes_in: u64,
    pub bytes_written: u64,
    /// Regions recorded, and live allocations left out as unreachable, over all recordings.
    pub regions: u64,
    pub regions_skipped: u64,
    pub record_s: f64,
    /// Device-to-host copies of the prologue and the epilogue (with the first touch of fresh
    /// host memory).
    pub copy_s: f64,
    /// Allocating the host buffers snapshots are copied into (kept for the run).
    #[serde(default)]
    pub host_s: f64,
    /// Scanning arguments and copied regions for pointers.
    pub scan_s: f64,
    /// Compression and writing on the launching thread (only where no thread could be started).
    pub write_s: f64,
    /// Waiting for the recording in flight before the next one, and at exit (`exit_wait_s`).
    pub wait_s: f64,
    #[serde(default)]
    pub exit_wait_s: f64,
    /// Compressing and writing the snapshots on the finisher thread, while the program ran on.
    #[serde(default)]
    pub background_s: f64,
    pub relaunch_s: f64,
    pub relaunched: u64,
    /// The timed (synchronous) launches that repeat a recorded one.
    pub natural_s: f64,
    /// Mapping and unmapping device memory in the fixed range.
    pub alloc_s: f64,
    /// Creating the CUDA context at the first allocation (the program pays it without r3 too).
    #[serde(default)]
    pub context_s: f64,
    pub allocs: u64,
    pub allocs_reused: u64,
    pub frees: u64,
    pub kernels_capped: u32,
    pub time_capped: bool,
    /// When the runtime started (with the program), the program called `exit()`, the
    /// runtime's exit handler began, and this summary was written: seconds since the Unix
    /// epoch, 0 where unknown (an older runtime, or a program that never reached `exit()`).
    #[serde(default)]
    pub start_unix_s: f64,
    #[serde(default)]
    pub exit_unix_s: f64,
    #[serde(default)]
    pub handler_unix_s: f64,
    #[serde(default)]
    pub end_unix_s: f64,
    /// What the run launched, per kernel that ran (recording runs; None from a runtime that
    /// kept no census), and the launches of kernels it had no registration for.
    #[serde(default)]
    pub census: Option<Vec<LaunchCounts>>,
    #[serde(default)]
    pub unknown_launches: u64,
    /// What a time-only run measured (`R3_TIME_ONLY=1`).
    #[serde(default)]
    pub timing: Option<TimingStats>,
}

/// A time-only run's times (`timing` in R3_RECORD_STATS): in all, and per kernel.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TimingStats {
    /// Every timed launch's GPU time, summed (ms).
    pub total_ms: f64,
    pub launches: u64,
    /// Launches between events that gave a time (a launch into a graph capture gives none).
    #[serde(default)]
    pub timed_launches: u64,
    pub kernels: Vec<KernelTiming>,
    /// The dispatch tables' `s` lines without their `s ` (`store::programs::ShippedKernel`):
    /// the tuned code an applied build ships.
    #[serde(default)]
    pub shipped: Vec<String>,
}

/// When `r3 record` started the program and saw it end (seconds since the Unix epoch): with
/// the runtime's own times, where the run's time went outside the runtime's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessSpan {
    pub spawned_unix_s: f64,
    pub ended_unix_s: f64,
}

/// The parts of a recorded run the runtime's clock does not see.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outside {
    /// From the spawn to the runtime's first call: loading the program, its first constructors.
    pub before_s: f64,
    /// From `exit()` to the runtime's exit handler, which runs last: the program's own exit
    /// handlers (None when the program did not reach `exit()` after a launch).
    pub teardown_s: Option<f64>,
    /// From the summary's writing to the process's end: CUDA's teardown (measured on an H100
    /// host, 2026-11-25: nothing ran between `exit()` and the runtime's handler).
    pub after_s: f64,
}

impl ProcessSpan {
    pub fn outside(&self, s: &RunStats) -> Option<Outside> {
        if s.start_unix_s <= 0.0 || s.end_unix_s <= 0.0 {
            return None;
        }
        let teardown = (s.exit_unix_s > 0.0 && s.handler_unix_s >= s.exit_unix_s)
            .then_some(s.handler_unix_s - s.exit_unix_s);
        Some(Outside {
            before_s: (s.start_unix_s - self.spawned_unix_s).max(0.0),
            teardown_s: teardown,
            after_s: (self.ended_unix_s - s.end_unix_s).max(0.0),
        })
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot run {program}: {msg}; fix: give the path of a program built with r3-clang++ (and its arguments after --)")]
    Spawn { program: String, msg: String },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("{program} not started: {reason}, and r3 record keeps what a program's kernels do on the GPU; fix: run it on a machine with an NVIDIA GPU and driver (`r3 doctor` says what this one has). For a program that brings its own CUDA stand-in, R3_RECORD_WITHOUT_GPU=1 runs it anyway")]
    NoGpu { program: String, reason: String },
}

/// Stops a recording before the program starts where there is no GPU to record on: without
/// one, the program's own CUDA calls fail, and what r3 would say afterwards (nothing recorded)
/// would hide why.
pub fn gpu_ready(program: &str) -> Result<(), RecordError> {
    if std::env::var_os("R3_RECORD_WITHOUT_GPU").is_some_and(|v| v == "1") {
        return Ok(());
    }
    match crate::replay::device::no_device_reason() {
        None => Ok(()),
        Some(reason) => Err(RecordError::NoGpu {
            program: program.to_owned(),
            reason,
        }),
    }
}

/// How a program ended, as a shell says it: its exit code, or 128 + the number of the signal
/// that killed it (139 for a SIGSEGV), with that signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// What `r3 record` exits with: what `$?` would be after the program run from a shell.
    pub code: i32,
    pub signal: Option<i32>,
    pub core_dumped: bool,
}

impl Ended {
    /// A program that exited with `code`.
    pub fn exited(code: i32) -> Ended {
        Ended {
            code,
            signal: None,
            core_dumped: false,
        }
    }

    pub fn of(status: std::process::ExitStatus) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Ended::exited(code),
            (None, Some(n)) => Ended {
                code: 128 + n,
                signal: Some(n),
                core_dumped: status.core_dumped(),
            },
            // Neither an exit nor a signal (a stopped child, which `wait` does not report).
            (None, None) => Ended::exited(1),
        }
    }

    /// `the program was killed by SIGSEGV (signal 11)`, where a signal ended it.
    pub fn killed(&self) -> Option<String> {
        let n = self.signal?;
        let name = signal_name(n).map_or(format!("signal {n}"), |s| format!("{s} (signal {n})"));
        Some(format!(
            "the program was killed by {name}{}",
            if self.core_dumped {
                ", core dumped"
            } else {
                ""
            }
        ))
    }
}

/// The name of Linux signal `n` (the numbers of x86-64 and arm64 alike).
pub fn signal_name(n: i32) -> Option<String> {
    const NAMES: &str = "HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM \
         STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS";
    match n {
        1..=31 => NAMES
            .split_whitespace()
            .nth(n as usize - 1)
            .map(|s| format!("SIG{s}")),
        34..=64 => Some(format!("SIGRTMIN+{}", n - 34)),
        _ => None,
    }
}

/// The line `r3 record` ends with when a signal ended the program, as a shell would report it.
pub fn ended_text(e: &Ended) -> Option<String> {
    e.killed()
        .map(|why| format!("r3: {why}; exit status {}, as a shell gives it\n", e.code))
}

/// What a run gave: the program's exit status, its new recordings, the runtime's statistics
/// (None when it wrote none: not linked with recording support, or killed).
pub struct RecordRun {
    pub status: Ended,
    pub recordings: Vec<Recording>,
    pub stats: Option<RunStats>,
    pub span: ProcessSpan,
    /// Unfinished recordings of earlier, killed runs, removed before this one.
    pub stale_removed: Vec<std::path::PathBuf>,
    /// The run's census, kept with the program (None where the runtime kept none, or the
    /// program's executable could not be read).
    pub census: Option<Census>,
}

/// Runs the program of `command` with its arguments, its environment set by `env`, and waits.
fn run_program(
    command: &[String],
    env: impl FnOnce(&mut Command),
) -> Result<std::process::ExitStatus, RecordError> {
    let mut c = Command::new(&command[0]);
    c.args(&command[1..]);
    env(&mut c);
    c.status().map_err(|e| RecordError::Spawn {
        program: command[0].clone(),
        msg: e.to_string(),
    })
}

/// Runs `command` with recording on, into `store`.
pub fn run(
    store: &Store,
    command: &[String],
    opts: &RecordOptions,
) -> Result<RecordRun, RecordError> {
    gpu_ready(&command[0])?;
    let stale_removed = store.remove_stale_recordings(crate::store::records::STALE_AFTER)?;
    let dir = tempfile::tempdir().map_err(|e| RecordError::Spawn {
        program: command[0].clone(),
        msg: format!("a temp directory for its statistics: {e}"),
    })?;
    let stats_path = dir.path().join("stats.json");
    let token = run_token(dir.path());
    let spawned_unix_s = unix_now();
    let status = run_program(command, |c| {
        c.envs(opts.env())
            .env("R3_STORE", store.root())
            .env("R3_RECORD_STATS", &stats_path)
            .env(RUN_VAR, &token);
    })?;
    let span = ProcessSpan {
        spawned_unix_s,
        ended_unix_s: unix_now(),
    };
    // This run's recordings, by the token the runtime wrote into each (its child processes'
    // too): not whatever appeared in the store meanwhile, which other programs recording into
    // it at the same time add to, and with the recordings this run made again in place of
    // earlier ones.
    let new = store
        .recordings(None)?
        .into_iter()
        .filter(|r| r.launch.run.as_deref() == Some(token.as_str()))
        .collect();
    // Now, while the store holds the compile that ran: a later rebuild cannot change it.
    let recordings = store.resolve_recorded(new);
    let stats: Option<RunStats> = std::fs::read(&stats_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let census = stats.as_ref().and_then(|s| {
        let counts = s.census.as_ref()?;
        keep_census(store, command, counts, s.unknown_launches)
    });
    Ok(RecordRun {
        status: Ended::of(status),
        recordings,
        stats,
        span,
        stale_removed,
        census,
    })
}

/// The variable that names a recording run to the runtime, which writes it into each
/// recording's launch.json (`run`).
const RUN_VAR: &str = "R3_RECORD_RUN";

/// A name for one `r3 record` run, unique among the runs that record into one store at once
/// (on any host that shares it): a hash of the host, the time and this run's private temporary
/// directory.
fn run_token(private: &std::path::Path) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{host}\n{}\n{nanos}\n{}",
        std::process::id(),
        private.display()
    );
    crate::kernel::short_hash(seed.as_bytes())
}

/// The executable a command runs: its path as given where it has a `/`, else the first
/// executable file of that name on PATH (as `Command` finds it).
pub fn executable(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The workload a command runs: its program's binary and the arguments after it.
fn program_binary(command: &[String]) -> Result<ProgramBinary, String> {
    let program = &command[0];
    let exe = executable(program).ok_or_else(|| format!("{program} is not on PATH"))?;
    ProgramBinary::of(program, &exe)
        .map(|b| b.with_args(&command[1..]))
        .map_err(|e| format!("reading {}: {e}", exe.display()))
}

/// The run's census, each kernel's time estimated from its recordings, kept with the program
/// (the newest run of a program replaces its census). Best effort: what fails is said, and the
/// recordings stand.
fn keep_census(
    store: &Store,
    command: &[String],
    counts: &[LaunchCounts],
    unknown_launches: u64,
) -> Option<Census> {
    let warn = |e: &dyn std::fmt::Display| {
        eprintln!("r3: warning: the program's time by kernel is not kept: {e}");
    };
    let binary = program_binary(command).map_err(|e| warn(&e)).ok()?;
    // The GPU the program ran on: launches under one wave of it cost about a wave each.
    let resident = crate::device::resident_threads(0);
    let census = store
        .census(&binary, counts, unknown_launches, resident)
        .map_err(|e| warn(&e))
        .ok()?;
    if let Err(e) = store.put_census(&census) {
        warn(&e);
    }
    Some(census)
}

/// A kernel's name in a line: its unqualified demangled name.
fn short_name(mangled: &str) -> String {
    let name = crate::kernel::unqualified_name(&crate::kernel::demangle(mangled));
    if name.is_empty() {
        mangled.to_owned()
    } else {
        name
    }
}

fn ms_text(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

fn launches_text(n: u64) -> String {
    format!("{n} launch{}", if n == 1 { "" } else { "es" })
}

/// Kernels shown by name in a time-by-kernel line; the rest are counted.
const TOP: usize = 5;

/// `share% name (N launches, time)` for each of the first kernels, ` · ` between, then how
/// many more.
fn by_kernel(rows: &[(String, u64, f64)], total_ms: f64) -> String {
    let mut parts: Vec<String> = rows
        .iter()
        .take(TOP)
        .map(|(name, launches, ms)| {
            format!(
                "{:.1}% {} ({}, {})",
                100.0 * ms / total_ms,
                short_name(name),
                launches_text(*launches),
                ms_text(*ms)
            )
        })
        .collect();
    if rows.len() > TOP {
        parts.push(format!("{} more", rows.len() - TOP));
    }
    parts.join(" · ")
}

/// The census's line for `r3 record`: each kernel's share of the program's estimated time.
pub fn census_summary(c: &Census) -> String {
    let total = c.total_ms();
    let timed: Vec<(String, u64, f64)> = c
        .kernels
        .iter()
        .filter_map(|k| Some((k.name.clone(), k.launches, k.estimated_ms?)))
        .collect();
    let untimed: Vec<_> = c
        .kernels
        .iter()
        .filter(|k| k.estimated_ms.is_none())
        .collect();
    let mut out = if timed.is_empty() || total <= 0.0 {
        "r3: program time by kernel: unknown (no recorded launch has a time)".to_owned()
    } else {
        format!(
            "r3: program time by kernel (timed while recording): {}",
            by_kernel(&timed, total)
        )
    };
    if !untimed.is_empty() && !timed.is_empty() {
        let n: u64 = untimed.iter().map(|k| k.launches).sum();
        out += &format!(
            "; {} kernel(s) without a timed launch ({})",
            untimed.len(),
            launches_text(n)
        );
    }
    if c.unknown_launches > 0 {
        out += &format!(
            "; {} of kernels r3 has no registration for",
            launches_text(c.unknown_launches)
        );
    }
    out + "\n"
}

/// What `r3 record --time-only` measured.
pub struct TimedRun {
    pub status: Ended,
    /// None where the program wrote no times (not linked with r3's runtime, or killed).
    pub timing: Option<Timing>,
    /// Launches that gave no time (into a graph capture).
    pub untimed: u64,
    /// What the store made of each shipped kernel's time (an applied build's run).
    pub judged: Vec<Judged>,
}

/// Runs `command` with every launch timed and nothing recorded (`R3_TIME_ONLY=1`): the build
/// as it is, variants included. Keeps the times with the program, one per binary.
pub fn time_only(store: &Store, command: &[String]) -> Result<TimedRun, RecordError> {
    gpu_ready(&command[0])?;
    let dir = tempfile::tempdir().map_err(|e| RecordError::Spawn {
        program: command[0].clone(),
        msg: format!("a temp directory for its statistics: {e}"),
    })?;
    let stats_path = dir.path().join("stats.json");
    let status = run_program(command, |c| {
        c.env_remove("R3_RECORD")
            .env("R3_TIME_ONLY", "1")
            .env("R3_RECORD_STATS", &stats_path);
    })?;
    let stats: Option<RunStats> = std::fs::read(&stats_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(t) = stats.and_then(|s| s.timing) else {
        return Ok(TimedRun {
            status: Ended::of(status),
            timing: None,
            untimed: 0,
            judged: Vec::new(),
        });
    };
    let untimed = t.launches.saturating_sub(t.timed_launches);
    let (program, path, binary, args) = match program_binary(command) {
        Ok(b) => (b.program, b.path, b.binary, b.args),
        Err(e) => {
            eprintln!("r3: warning: the measured times are not kept: {e}");
            (command[0].clone(), String::new(), String::new(), Vec::new())
        }
    };
    let mut kernels = t.kernels;
    kernels.sort_by(|a, b| b.ms.total_cmp(&a.ms).then_with(|| a.name.cmp(&b.name)));
    let timing = Timing {
        format: PROGRAMS_FORMAT,
        program,
        path,
        binary,
        args,
        unix_s: unix_now(),
        total_ms: t.total_ms,
        launches: t.launches,
        kernels,
        shipped: t
            .shipped
            .iter()
            .filter_map(|l| ShippedKernel::parse(l))
            .collect(),
    };
    let mut judged = Vec::new();
    if !timing.binary.is_empty() {
        match store.put_timing(&timing) {
            Ok(()) => judged = judge(store, &timing),
            Err(e) => eprintln!("r3: warning: the measured times are not kept: {e}"),
        }
    }
    Ok(TimedRun {
        status: Ended::of(status),
        timing: Some(timing),
        untimed,
        judged,
    })
}

/// Keeps what the run measured of each shipped kernel's tuned code (`store::in_program`), and
/// where that changes what ships, the winners stamp, so that the next build recompiles.
fn judge(store: &Store, timing: &Timing) -> Vec<Judged> {
    let judged = match store.judge_in_program(timing) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("r3: warning: the tuned kernels' times in this program are not kept: {e}");
            return Vec::new();
        }
    };
    if judged.iter().any(|j| matches!(j.kept, Kept::Trials(_))) {
        if let Err(e) = crate::apply::plan::refresh_winners_stamp(store) {
            eprintln!("r3: warning: the winners stamp is not brought up to date, so a build may not recompile what now ships: {e}");
        }
    }
    judged
}

/// What `r3 record --time-only` prints: the program's measured GPU time and its top kernels.
pub fn time_only_summary(run: &TimedRun, program: &str) -> String {
    let Some(t) = &run.timing else {
        return format!(
            "r3: no time was measured: was {program} linked by r3-clang++ against cudart (recording support)?\n"
        );
    };
    let mut out = format!(
        "r3: GPU time measured: {} over {} (each launch between CUDA events; nothing recorded)\n",
        ms_text(t.total_ms),
        launches_text(t.launches)
    );
    if t.total_ms > 0.0 {
        let rows: Vec<(String, u64, f64)> = t
            .kernels
            .iter()
            .map(|k| (k.name.clone(), k.launches, k.ms))
            .collect();
        out += &format!("r3: by kernel: {}\n", by_kernel(&rows, t.total_ms));
    }
    if run.untimed > 0 {
        out += &format!(
            "r3: note: {} gave no time (launched into a CUDA graph being captured); the total leaves them out\n",
            launches_text(run.untimed)
        );
    }
    out + &in_program_summary(&run.judged)
}

/// What an applied build's run says of its tuned kernels: how many held up in the program
/// against the recorded build, each one that did not (withheld from the next build), and the
/// measures the store could not keep.
fn in_program_summary(judged: &[Judged]) -> String {
    if judged.is_empty() {
        return String::new();
    }
    let speed = |j: &Judged| j.measure.in_program.speedup();
    let per_launch = |j: &Judged| {
        let p = &j.measure.in_program;
        format!(
            "{} against {} per launch",
            ms_text(p.applied_ms),
            ms_text(p.recorded_ms)
        )
    };
    let against = match judged[0].measure.in_program.against {
        Against::Census => "the recorded run's census",
        Against::TimeOnly => "the recorded build's time-only run",
    };
    let held = judged
        .iter()
        .filter(|j| !j.measure.in_program.slower())
        .count();
    let mut out = format!(
        "r3: tuned kernels in this program, against {against}: {held} of {} at least as fast\n",
        judged.len()
    );
    for j in judged.iter().filter(|j| j.withheld()) {
        out += &format!(
            "r3: {} ran {:.3}× here ({}): withheld from the next build (replay measured it faster; the program decides)\n",
            short_name(&j.measure.shipped.name),
            speed(j),
            per_launch(j)
        );
    }
    let unkept: Vec<String> = judged
        .iter()
        .filter(|j| !matches!(j.kept, Kept::Trials(_)))
        .map(|j| format!("{} ({:.3}×)", short_name(&j.measure.shipped.name), speed(j)))
        .collect();
    if !unkept.is_empty() {
        out += &format!(
            "r3: note: not kept, the store has no confirmed trial of the code this build ships (tuned again since the build, or a search without confirmation): {}\n",
            unkept.join(", ")
        );
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// The summary `r3 record` prints after the run, for a person.
pub fn summary(s: &RunStats, span: &ProcessSpan) -> String {
    let mut out = format!(
        "r3: recorded {} launch(es) of the {} kernel(s) that ran ({} launches in all), in {:.2} s of the program's {:.2} s\n",
        s.recorded, s.kernels_seen, s.launches, s.record_s, s.wall_s
    );
    out += &format!(
        "r3:   snapshots ({}): {} read, {} written; {} region(s) recorded, {} unreachable allocation(s) left out\n",
        s.snapshot,
        mib(s.bytes_in),
        mib(s.bytes_written),
        s.regions,
        s.regions_skipped
    );
    out += &format!(
        "r3:   time: host buffers {:.2} s, device copies {:.2} s, pointer scan {:.2} s, warm re-launches {:.2} s ({} launch(es)), timed repeats {:.2} s\n",
        s.host_s, s.copy_s, s.scan_s, s.relaunch_s, s.relaunched, s.natural_s
    );
    out += &format!(
        "r3:   files: compressed and written in the background in {:.2} s; the program waited {:.2} s for them ({:.2} s at exit){}\n",
        s.background_s,
        s.wait_s,
        s.exit_wait_s,
        if s.write_s > 0.0 {
            format!(", {:.2} s written on the launching thread", s.write_s)
        } else {
            String::new()
        }
    );
    out += &format!(
        "r3:   allocations: {} ({} reused freed memory), {} freed, {:.2} s (and {:.2} s creating the CUDA context, which the program pays without r3 too)\n",
        s.allocs, s.allocs_reused, s.frees, s.alloc_s, s.context_s
    );
    if let Some(o) = span.outside(s) {
        out += &format!(
            "r3:   outside the runtime's clock: {:.2} s before it started (loading the program), {}, {:.2} s after its summary (CUDA's teardown, the process's end)\n",
            o.before_s,
            o.teardown_s.map_or("exit() not seen".to_owned(), |t| format!(
                "{t:.2} s from exit() to its exit handler (the program's exit handlers)"
            )),
            o.after_s
        );
    }
    if s.not_replayable > 0 {
        out += &format!(
            "r3:   {} recording(s) cannot be replayed (the list below says why)\n",
            s.not_replayable
        );
    }
    if s.time_capped {
        out += "r3: note: recording stopped at --max-time; later launches ran unrecorded\n";
    }
    if s.kernels_capped > 0 {
        out += &format!(
            "r3: note: {} kernel(s) reached --kernel-limit; their later launches ran unrecorded\n",
            s.kernels_capped
        );
    }
    out
}

/// What replaying the new recordings' -O3 baselines found (`r3 record`, unless `--no-verify`).
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Each replayable new recording: its id, kernel (demangled) and verdict.
    pub verdicts: Vec<(String, String, Verdict)>,
    /// Wall time of the check, after the program ended.
    pub seconds: f64,
    /// Why nothing was replayed (no GPU here), where nothing was.
    pub skipped: Option<String>,
}

/// Replays each new replayable recording's -O3 baseline on this machine's GPU (several times
/// where its runs differ: `replay::determinism`) and keeps each verdict with the recording
/// (`Store::set_verification`): a recording that does not
/// reproduce is then shown with its reason, and never searched. Runs after the program, so it
/// costs the program nothing; a verdict that could not be had is said, never stored.
pub fn check(store: &Store, recordings: &[Recording]) -> Check {
    let start = std::time::Instant::now();
    let recs: Vec<Recording> = recordings.iter().filter(|r| r.usable()).cloned().collect();
    let Some((driver, gpu)) = crate::device::probe().first() else {
        return Check {
            verdicts: Vec::new(),
            seconds: 0.0,
            skipped: Some(
                "no GPU on this machine; `r3 tune` checks each recording before it searches it"
                    .into(),
            ),
        };
    };
    let target = crate::lower::Codegen {
        sm: gpu.sm(),
        ptx: Some(crate::lower::ptx_for_driver(driver).into()),
        opt_level: 3,
    };
    let verdicts = verify_recordings(store, &recs, &target, gpu.ordinal as i32);
    let mut out = Vec::new();
    for (rec, verdict) in recs.iter().zip(verdicts) {
        if let Some(v) = verdict.verification(&gpu.name) {
            if let Err(e) = store.set_verification(rec, &v) {
                eprintln!("r3: warning: {e}");
            }
        }
        let name = crate::kernel::demangle(&rec.launch.kernel);
        out.push((rec.id.clone(), name, verdict));
    }
    Check {
        verdicts: out,
        seconds: start.elapsed().as_secs_f64(),
        skipped: None,
    }
}

/// The check's lines for `r3 record`'s summary: `N of M recordings reproduce`, then each that
/// does not, or could not be checked, with why.
pub fn check_summary(c: &Check) -> String {
    if let Some(why) = &c.skipped {
        return format!("r3: recordings not replayed: {why}\n");
    }
    let ok = c.verdicts.iter().filter(|(_, _, v)| v.reproduces()).count();
    let mut out = format!(
        "r3: {ok} of {} recordings reproduce (each -O3 baseline replayed and checked, in {:.2} s after the program)\n",
        c.verdicts.len(),
        c.seconds
    );
    for (id, kernel, v) in &c.verdicts {
        match v {
            Verdict::Reproduces => {}
            Verdict::NotDeterministic(d) => out += &format!("r3:   {id}  {kernel}: {}\n", d.text()),
            Verdict::Irreproducible(why) => {
                out += &format!("r3:   {id}  {kernel}: {}\n", irreproducible_text(why))
            }
            Verdict::NotChecked(why) => {
                out += &format!("r3:   {id}  {kernel}: not checked: {why}\n")
            }
        }
    }
    out
}

/// Why a run recorded nothing, when it did not.
pub fn nothing_recorded(program: &str, stats: Option<&RunStats>, ended: &Ended) -> String {
    match stats {
        None if ended.signal.is_some() => format!(
            "r3: no launch was recorded: {program} was killed before a recording was complete"
        ),
        None => format!(
            "r3: no launch was recorded: was {program} linked by r3-clang++ against cudart (recording support)?"
        ),
        Some(s) if s.launches == 0 => {
            format!("r3: no launch was recorded: {program} launched no kernel")
        }
        Some(_) => "r3: no launch was recorded: every launch was of a kernel r3 had no registration for, or the caps stopped recording first".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = r#"{"format": 1, "wall_s": 12.5, "snapshot": "reachable", "kernels_seen": 7,
      "launches": 5120, "recorded": 21, "not_replayable": 1, "bytes_in": 1610612736,
      "bytes_written": 104857600, "regions": 60, "regions_skipped": 400, "record_s": 2.25,
      "copy_s": 0.75, "host_s": 0.375, "scan_s": 0.125, "write_s": 0.5, "wait_s": 0.25, "exit_wait_s": 0.125,
      "background_s": 1.5, "relaunch_s": 0.0625,
      "relaunched": 12, "natural_s": 0.03125, "alloc_s": 0.5, "context_s": 0.25, "allocs": 900,
      "allocs_reused": 880, "frees": 850, "kernels_capped": 2, "time_capped": true,
      "start_unix_s": 1000.125, "exit_unix_s": 1012.25,
      "handler_unix_s": 1012.5, "end_unix_s": 1012.625}"#;

    const SPAN: ProcessSpan = ProcessSpan {
        spawned_unix_s: 999.9375,
        ended_unix_s: 1013.0,
    };

    #[test]
    fn the_check_says_how_many_recordings_reproduce_and_why_others_do_not() {
        let c = Check {
            verdicts: vec![
                (
                    "0c2b6e8d9a256942/8c1badc7d54988de".into(),
                    "smooth".into(),
                    Verdict::Reproduces,
                ),
                (
                    "6f3396e03f7b650f/8c1badc7d54988de".into(),
                    "feedback".into(),
                    Verdict::Irreproducible(
                        "allocation 0x600000400000: differs at byte 6 (exact check)".into(),
                    ),
                ),
                (
                    "e1fe4175acc7cc5d/656ce7e945202e1e".into(),
                    "decay".into(),
                    Verdict::NotChecked("kernel decay has no device IR in the store".into()),
                ),
                (
                    "3a6e0b5c1d2f4e87/0c6f1e2d3b4a5968".into(),
                    "smooth_norm".into(),
                    Verdict::NotDeterministic(crate::replay::determinism::Decision {
                        reason: crate::replay::determinism::FLOAT_ATOMICS.into(),
                        learned: vec![(
                            "allocation 0x600000400000".into(),
                            crate::replay::determinism::Learned {
                                region: 1,
                                tolerance: "f32:rel=3.2e-6,abs=1.5e-6".parse().unwrap(),
                                spread: 8e-7,
                            },
                        )],
                        user: None,
                        runs: 8,
                    }),
                ),
            ],
            seconds: 0.5,
            skipped: None,
        };
        insta::assert_snapshot!(check_summary(&c));
        let none = Check {
            verdicts: Vec::new(),
            seconds: 0.0,
            skipped: Some("no GPU on this machine".into()),
        };
        assert_eq!(
            check_summary(&none),
            "r3: recordings not replayed: no GPU on this machine\n"
        );
    }

    #[test]
    fn the_summary_says_what_was_recorded_and_where_the_time_went() {
        let s: RunStats = serde_json::from_str(STATS).unwrap();
        insta::assert_snapshot!(summary(&s, &SPAN));
    }

    #[test]
    fn the_time_outside_the_runtime_s_clock_is_placed_by_its_times() {
        let mut s: RunStats = serde_json::from_str(STATS).unwrap();
        let o = SPAN.outside(&s).unwrap();
        assert_eq!(
            (o.before_s, o.teardown_s, o.after_s),
            (0.1875, Some(0.25), 0.375)
        );
        s.exit_unix_s = 0.0; // killed, or _exit(): no exit() seen
        assert_eq!(SPAN.outside(&s).unwrap().teardown_s, None);
        assert!(summary(&s, &SPAN).contains("exit() not seen"));
        s.start_unix_s = 0.0; // a runtime that wrote no times
        assert_eq!(SPAN.outside(&s), None);
        assert!(!summary(&s, &SPAN).contains("outside"));
    }

    #[test]
    fn options_become_the_runtime_s_variables() {
        let opts = RecordOptions {
            launches: 2,
            max_time: Some(Duration::from_millis(1500)),
            kernel_limit_mb: Some(64),
            launch_limit_mb: Some(512),
            full_snapshot: true,
            warm: WarmRelaunch::Never,
            progress: false,
            sync: false,
        };
        let env: Vec<String> = opts.env().iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            env,
            [
                "R3_RECORD=1",
                "R3_RECORD_LAUNCHES=2",
                "R3_RECORD_PROGRESS=0",
                "R3_RECORD_WARM=0",
                "R3_RECORD_MAX_S=1.5",
                "R3_RECORD_KERNEL_MB=64",
                "R3_RECORD_LIMIT_MB=512",
                "R3_RECORD_SNAPSHOT=full",
                "R3_RECORD_SYNC=0"
            ]
        );
        let defaults: Vec<_> = RecordOptions::default()
            .env()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert!(
            !defaults.contains(&"R3_RECORD_SNAPSHOT")
                && !defaults.contains(&"R3_RECORD_MAX_S")
                && !defaults.contains(&"R3_RECORD_SYNC")
        );
    }

    #[test]
    fn the_census_and_the_timing_are_read_from_the_stats_where_the_runtime_wrote_them() {
        let old: RunStats = serde_json::from_str(STATS).unwrap();
        assert_eq!(
            (old.census, old.timing, old.unknown_launches),
            (None, None, 0)
        );
        let with = STATS.trim_end().trim_end_matches('}').to_owned()
            + r#", "unknown_launches": 2, "census": [
              {"name": "small", "fatbin": "", "key": "7d6ce172e098998c", "launches": 54,
               "recorded": [{"launch": "6bf23f6cb4b5aca6", "count": 50}], "other_launches": 4,
               "other_threads": 1792}],
              "timing": {"total_ms": 270.375, "launches": 57, "timed_launches": 56, "kernels": [
               {"name": "big", "launches": 1, "timed_launches": 1, "ms": 256}]}}"#;
        let s: RunStats = serde_json::from_str(&with).unwrap();
        let c = &s.census.unwrap()[0];
        assert_eq!(
            (c.launches, c.recorded[0].count, c.other_threads),
            (54, 50, 1792.0)
        );
        let t = s.timing.unwrap();
        assert_eq!((t.total_ms, t.launches - t.timed_launches), (270.375, 1));
        assert_eq!(t.kernels[0].name, "big");
    }

    #[test]
    fn the_time_by_kernel_lines_show_the_top_kernels_by_share() {
        use crate::store::programs::KernelCensus;
        let k = |name: &str, launches: u64, ms: Option<f64>| KernelCensus {
            kernel: None,
            name: name.into(),
            launches,
            estimated_ms: ms,
            timed_launches: launches,
            scaled_launches: 0,
        };
        let mut kernels = vec![
            k("_Z11corr_kernelPfS_", 1, Some(1900.0)),
            k("_Z5smallv", 50, Some(80.0)),
        ];
        kernels.extend((0..5).map(|i| k(&format!("k{i}"), 1, Some(4.0))));
        kernels.push(k("_Z7untimedv", 3, None));
        let c = Census {
            format: 1,
            program: "./app".into(),
            path: "/w/app".into(),
            binary: "0123".into(),
            args: Vec::new(),
            unix_s: 0.0,
            launches: 58,
            unknown_launches: 2,
            kernels,
        };
        assert_eq!(
            census_summary(&c),
            "r3: program time by kernel (timed while recording): 95.0% corr_kernel \
             (1 launch, 1.90 s) · 4.0% small (50 launches, 80.0 ms) · 0.2% k0 (1 launch, 4.0 ms) · \
             0.2% k1 (1 launch, 4.0 ms) · 0.2% k2 (1 launch, 4.0 ms) · 2 more; 1 kernel(s) without \
             a timed launch (3 launches); 2 launches of kernels r3 has no registration for\n"
        );
        let mut none = c.clone();
        none.kernels.retain(|k| k.estimated_ms.is_none());
        none.unknown_launches = 0;
        assert_eq!(
            census_summary(&none),
            "r3: program time by kernel: unknown (no recorded launch has a time)\n"
        );
        let run = TimedRun {
            status: Ended::exited(0),
            timing: Some(Timing {
                format: 1,
                program: "./app".into(),
                path: "/w/app".into(),
                binary: "0123".into(),
                args: Vec::new(),
                unix_s: 0.0,
                total_ms: 0.5,
                launches: 3,
                kernels: vec![
                    KernelTiming {
                        name: "_Z5smallv".into(),
                        launches: 2,
                        ms: 0.375,
                    },
                    KernelTiming {
                        name: "(unknown)".into(),
                        launches: 1,
                        ms: 0.125,
                    },
                ],
                shipped: Vec::new(),
            }),
            untimed: 1,
            judged: Vec::new(),
        };
        let text = time_only_summary(&run, "./app");
        assert_eq!(
            text,
            "r3: GPU time measured: 0.500 ms over 3 launches (each launch between CUDA events; nothing recorded)\n\
             r3: by kernel: 75.0% small (2 launches, 0.375 ms) · 25.0% (unknown) (1 launch, 0.125 ms)\n\
             r3: note: 1 launch gave no time (launched into a CUDA graph being captured); the total leaves them out\n"
        );
        let nothing = TimedRun {
            status: Ended::exited(0),
            timing: None,
            untimed: 0,
            judged: Vec::new(),
        };
        assert!(time_only_summary(&nothing, "./app").contains("linked by r3-clang++"));
    }

    #[test]
    fn a_time_only_run_of_an_applied_build_says_which_tuned_kernels_held_up_in_the_program() {
        use crate::store::in_program::Measure;
        use crate::store::trials::InProgram;
        let judged = |name: &str, recorded_ms: f64, applied_ms: f64, kept: Kept| Judged {
            measure: Measure {
                shipped: ShippedKernel::parse(&format!("{name} sm_90 kh p1")).unwrap(),
                in_program: InProgram {
                    program: "app-0123".into(),
                    binary: "b".into(),
                    against: Against::Census,
                    recorded_ms,
                    applied_ms,
                    launches: 10,
                    unix_s: 0.0,
                },
            },
            kept,
        };
        let text = in_program_summary(&[
            judged("_Z4fastv", 2.0, 1.0, Kept::Trials(vec![3])),
            judged("_Z4slowv", 25.8, 44.9, Kept::Trials(vec![7])),
            judged("_Z5stalev", 1.0, 1.0, Kept::NoConfirmedTrial),
        ]);
        assert_eq!(
            text,
            "r3: tuned kernels in this program, against the recorded run's census: 2 of 3 at least as fast\n\
             r3: slow ran 0.575× here (44.9 ms against 25.8 ms per launch): withheld from the next build (replay measured it faster; the program decides)\n\
             r3: note: not kept, the store has no confirmed trial of the code this build ships (tuned again since the build, or a search without confirmation): stale (1.000×)\n"
        );
        assert_eq!(in_program_summary(&[]), "");
    }

    #[test]
    fn a_program_s_end_is_the_status_a_shell_gives() {
        use std::os::unix::process::ExitStatusExt;
        // Raw wait statuses: exit code 3; killed by SIGSEGV with a core; by SIGABRT; by SIGKILL.
        let of = |raw| Ended::of(std::process::ExitStatus::from_raw(raw));
        assert_eq!(of(3 << 8), Ended::exited(3));
        assert_eq!(ended_text(&of(3 << 8)), None);
        let segv = of(11 | 0x80);
        assert_eq!(
            (segv.code, segv.signal, segv.core_dumped),
            (139, Some(11), true)
        );
        assert_eq!(
            ended_text(&segv).unwrap(),
            "r3: the program was killed by SIGSEGV (signal 11), core dumped; exit status 139, as a shell gives it\n"
        );
        assert_eq!(of(6).code, 134);
        assert_eq!(
            of(6).killed().unwrap(),
            "the program was killed by SIGABRT (signal 6)"
        );
        assert_eq!(of(9).code, 137);
        assert_eq!(signal_name(35).as_deref(), Some("SIGRTMIN+1"));
        assert_eq!(signal_name(99), None);
    }

    #[test]
    fn nothing_recorded_names_the_likely_cause() {
        let ok = Ended::exited(0);
        assert!(nothing_recorded("./app", None, &ok).contains("linked by r3-clang++"));
        let killed = Ended {
            code: 139,
            signal: Some(11),
            core_dumped: false,
        };
        assert!(nothing_recorded("./app", None, &killed).contains("was killed"));
        let mut s: RunStats = serde_json::from_str(STATS).unwrap();
        s.launches = 0;
        assert!(nothing_recorded("./app", Some(&s), &ok).contains("launched no kernel"));
    }
}
