//! `r3 record`: runs a program built by r3-clang++ with its recording runtime on
//! (crates/r3-driver/src/runtime/r3rt.c), and says what the run recorded and what recording cost.
//!
//! The runtime does the recording inside the program; this crate only sets its options
//! (`R3_RECORD_*`), lets it print progress, and reads the statistics it writes at exit
//! ([`RunStats`], the file named by `R3_RECORD_STATS`) for the summary. The runtime also counts
//! every launch (the census), from which the program's time by kernel is estimated and kept
//! with the program (`store::programs`); `r3 record --time-only` ([`time_only`]) measures it
//! instead, every launch timed and nothing recorded. After the program, [`check`] replays each
//! new recording's -O3 baseline, so that one that does not reproduce is never searched.
//!
//! [`record`] is the whole command: it says what happened as text, which the CLI prints. `text`
//! holds every line r3 record says; `stats` the runtime's statistics; `ended` how the program
//! ended, as a shell says it.

use r3_apply as apply;
use r3_ir::lower;
use r3_kernel as kernel;
use r3_replay as replay;
use r3_replay::device;
use r3_store as store;

mod census;
mod check;
mod ended;
mod stats;
pub mod text;
mod time_only;

pub use census::executable;
pub use check::{check, Check};
pub use ended::{ended_text, signal_name, Ended};
pub use stats::{Outside, ProcessSpan, RunStats, TimingStats};
pub use time_only::{time_only, TimedRun};

use crate::store::programs::Census;
use crate::store::records::Recording;
use crate::store::Store;
use std::path::Path;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    match device::no_device_reason() {
        None => Ok(()),
        Some(reason) => Err(RecordError::NoGpu {
            program: program.to_owned(),
            reason,
        }),
    }
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

/// A private directory for the statistics the runtime writes at exit (`R3_RECORD_STATS`).
fn stats_dir(program: &str) -> Result<tempfile::TempDir, RecordError> {
    tempfile::tempdir().map_err(|e| RecordError::Spawn {
        program: program.to_owned(),
        msg: format!("a temp directory for its statistics: {e}"),
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
    let dir = stats_dir(&command[0])?;
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
    let stats = RunStats::read(&stats_path);
    let census = stats.as_ref().and_then(|s| {
        let counts = s.census.as_ref()?;
        census::keep_census(store, command, counts, s.unknown_launches)
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

/// `r3 record`: runs `command` with recording on, into `store`, says what the run recorded and
/// what recording cost, then (with `verify`) checks that each new recording reproduces. `say`
/// hears each part of what the command says as it comes (text for standard error, each part
/// whole lines). Returns how the program ended, which `r3 record` exits with.
pub fn record_session(
    store: &Store,
    command: &[String],
    opts: &RecordOptions,
    verify: bool,
    say: &mut dyn FnMut(&str),
) -> Result<Ended, RecordError> {
    let run = run(store, command, opts)?;
    if !run.stale_removed.is_empty() {
        say(&text::stale_removed(&run.stale_removed, store.root()));
    }
    if let Some(stats) = &run.stats {
        say(&text::summary(stats, &run.span));
    }
    say(&text::recordings(&run.recordings, store.root()));
    if let Some(census) = &run.census {
        say(&text::census_summary(census));
    }
    if run.recordings.is_empty() {
        let why = text::nothing_recorded(&command[0], run.stats.as_ref(), &run.status);
        say(&format!("{why}\n"));
    } else if verify {
        let checked = check(store, &run.recordings, say);
        say(&text::check_summary(&checked));
    }
    // Last, as a shell would say it after the program: a crash is not r3's exit status 1.
    say(&ended_text(&run.status).unwrap_or_default());
    Ok(run.status)
}

/// `r3 record --time-only`: runs `command` with every launch timed ([`time_only`]) and says what
/// it measured (through `say`, as [`record_session`] does). Returns how the program ended.
pub fn time_only_session(
    store: &Store,
    command: &[String],
    say: &mut dyn FnMut(&str),
) -> Result<Ended, RecordError> {
    let run = time_only(store, command)?;
    say(&text::time_only_summary(&run, &command[0]));
    say(&ended_text(&run.status).unwrap_or_default());
    Ok(run.status)
}

/// The variable that names a recording run to the runtime, which writes it into each
/// recording's launch.json (`run`).
const RUN_VAR: &str = "R3_RECORD_RUN";

/// A name for one `r3 record` run, unique among the runs that record into one store at once
/// (on any host that shares it): a hash of the host, the time and this run's private temporary
/// directory.
fn run_token(private: &Path) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
