//! The check after a recording run: each new recording's -O3 baseline replayed on this
//! machine's GPU, its verdict kept with the recording.

use crate::replay::gpu::{verify_recordings, Verdict};
use crate::store::records::Recording;
use crate::store::Store;

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
/// costs the program nothing; a verdict that could not be had is said, never stored. Where it
/// replays, it first says so through `say` ([`checking_line`]): a check of a large recording
/// takes a while, which the user should not take for a hang.
pub fn check(store: &Store, recordings: &[Recording], say: &mut dyn FnMut(&str)) -> Check {
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
    if !recs.is_empty() {
        say(&checking_line(&recs, &gpu.name));
    }
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

/// What the check is about to do: how many recordings, how many bytes they bring to `gpu`.
pub fn checking_line(recs: &[Recording], gpu: &str) -> String {
    let bytes: u64 = recs.iter().map(|r| r.launch.bytes_replayed()).sum();
    format!(
        "r3: checking {} recording(s) ({:.1} MiB) on {gpu}: each -O3 baseline replayed and compared with what the program's launch left (`r3 record --no-verify` skips this)\n",
        recs.len(),
        bytes as f64 / 1048576.0
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::LaunchRecord;

    #[test]
    fn the_check_says_what_it_replays_before_it_starts() {
        let dir = tempfile::tempdir().unwrap();
        let rec = |bytes_in, reachable| {
            let mut l = LaunchRecord::by_hand("k", vec![], &[]);
            l.bytes_in = bytes_in;
            l.bytes_reachable = reachable;
            Recording {
                dir: dir.path().to_owned(),
                id: "k/1".into(),
                launch: l,
                verification: None,
                kernel: None,
            }
        };
        let recs = [rec(3 << 20, None), rec(1 << 20, Some(6 << 30))];
        assert_eq!(
            checking_line(&recs, "NVIDIA H200"),
            "r3: checking 2 recording(s) (6147.0 MiB) on NVIDIA H200: each -O3 baseline replayed and compared with what the program's launch left (`r3 record --no-verify` skips this)\n"
        );
    }
}
