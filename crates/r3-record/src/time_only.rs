//! `r3 record --time-only`: every launch timed, nothing recorded; the times kept with the
//! program, and what an applied build's run says of the tuned code it ships.

use crate::store::in_program::{Judged, Kept};
use crate::store::programs::{ShippedKernel, Timing, FORMAT as PROGRAMS_FORMAT};
use crate::store::Store;
use crate::{gpu_ready, run_program, unix_now, Ended, RecordError, RunStats};

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
    let dir = crate::stats_dir(&command[0])?;
    let stats_path = dir.path().join("stats.json");
    let status = run_program(command, |c| {
        c.env_remove("R3_RECORD")
            .env("R3_TIME_ONLY", "1")
            .env("R3_RECORD_STATS", &stats_path);
    })?;
    let Some(t) = RunStats::read(&stats_path).and_then(|s| s.timing) else {
        return Ok(TimedRun {
            status: Ended::of(status),
            timing: None,
            untimed: 0,
            judged: Vec::new(),
        });
    };
    let untimed = t.launches.saturating_sub(t.timed_launches);
    let (program, path, binary, args) = match crate::census::program_binary(command) {
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
