//! What the runtime writes at exit (`R3_RECORD_STATS`), and where a run's time went outside its
//! clock.

use crate::store::programs::{KernelTiming, LaunchCounts};
use serde::Deserialize;
use std::path::Path;

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

impl RunStats {
    /// The statistics the runtime wrote to `path`; None where it wrote none (not linked with
    /// recording support, or killed) or what it wrote does not read.
    pub fn read(path: &Path) -> Option<RunStats> {
        std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const STATS: &str = r#"{"format": 1, "wall_s": 12.5, "snapshot": "reachable", "kernels_seen": 7,
      "launches": 5120, "recorded": 21, "not_replayable": 1, "bytes_in": 1610612736,
      "bytes_written": 104857600, "regions": 60, "regions_skipped": 400, "record_s": 2.25,
      "copy_s": 0.75, "host_s": 0.375, "scan_s": 0.125, "write_s": 0.5, "wait_s": 0.25, "exit_wait_s": 0.125,
      "background_s": 1.5, "relaunch_s": 0.0625,
      "relaunched": 12, "natural_s": 0.03125, "alloc_s": 0.5, "context_s": 0.25, "allocs": 900,
      "allocs_reused": 880, "frees": 850, "kernels_capped": 2, "time_capped": true,
      "start_unix_s": 1000.125, "exit_unix_s": 1012.25,
      "handler_unix_s": 1012.5, "end_unix_s": 1012.625}"#;

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
}
