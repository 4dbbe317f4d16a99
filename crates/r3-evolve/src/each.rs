//! `r3 evolve` over several kernels: which kernels, how each one's variants are judged (not at
//! all, by a script, or on this GPU by an inner search), and what a run of each says. The CLI
//! chooses and prints; this module runs.

use crate::judge::Judge;
use crate::judge::{GpuJudge, SimJudge};
use crate::kernel::KernelHash;
use crate::propose::Proposer;
use crate::remix::session::{self, Line, Measure, Say};
use crate::replay::device::GpuInfo;
use crate::run::{evolve, Options, Summary};
use crate::store::attempts::Attempt;
use crate::store::{identity::Resolution, KernelRecord, Store, StoreError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Why `r3 evolve` has nothing to work on.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("name a kernel (a name or hash from `r3 kernels`), or --all")]
    NoneNamed,
    #[error("--all found no kernel to evolve in {store}: it takes kernels with a replayable recording{and_rewrites}; fix: `r3 record -- <program>`, or name kernels (`r3 kernels` lists them)")]
    NoneFound {
        store: String,
        and_rewrites: &'static str,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The kernels `r3 evolve` works on: those named, or every kernel with a replayable recording
/// (with `propose` off, only those that have stored rewrites to measure).
pub fn targets(
    store: &Store,
    kernels: &[String],
    all: bool,
    propose: bool,
) -> Result<Vec<KernelRecord>, TargetError> {
    let index = store.index()?;
    if !all {
        if kernels.is_empty() {
            return Err(TargetError::NoneNamed);
        }
        return Ok(kernels
            .iter()
            .map(|w| index.select_one(w, None).cloned())
            .collect::<Result<_, _>>()?);
    }
    let mut out: Vec<KernelRecord> = Vec::new();
    for rec in store.recordings(None)? {
        if !rec.usable() {
            continue;
        }
        if let Resolution::Kernel(k) = index.of_recording(&rec) {
            if !out.iter().any(|o| o.hash == k.hash) {
                out.push(*k);
            }
        }
    }
    if !propose {
        let evolved = store.evolved()?;
        out.retain(|k| evolved.contains(&k.hash));
    }
    if out.is_empty() {
        return Err(TargetError::NoneFound {
            store: store.root().display().to_string(),
            and_rewrites: if propose { "" } else { " and stored rewrites" },
        });
    }
    Ok(out)
}

/// How variants are judged.
pub enum Judging {
    /// Proposed, compiled and stored, not measured.
    Not,
    /// By a script (tests, demonstrations).
    Script(SimJudge),
    /// On this GPU: each variant's own inner search, against the parent's best.
    Gpu {
        driver: (i32, i32),
        gpu: GpuInfo,
        measure: Measure,
        inner_budget: u32,
        inner_time: Option<Duration>,
    },
}

/// Evolves each kernel in turn until `stop`; says each one's progress and outcome. Whether
/// every kernel's run went through (a failure is said and the next kernel goes on).
pub fn evolve_each(
    store: &Store,
    targets: &[KernelRecord],
    proposer: &mut dyn Proposer,
    judging: &mut Judging,
    opts: &Options,
    stop: &AtomicBool,
    say: Say,
) -> bool {
    let mut all_ok = true;
    for k in targets {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let label = k.label();
        let mut gpu_judge = match gpu_judge(store, k, judging, stop, say) {
            Ok(j) => j,
            Err(e) => {
                say(Line::Note(format!("r3 evolve: {label}: {e}")));
                all_ok = false;
                continue;
            }
        };
        let judge: Option<&mut dyn Judge> = match (&mut *judging, &mut gpu_judge) {
            (Judging::Script(s), _) => Some(s),
            (_, Some(j)) => Some(j),
            _ => None,
        };
        let progress = |line: &str| say(Line::Note(format!("{label}: {line}")));
        match evolve(store, k, proposer, judge, opts, stop, progress) {
            Ok(summary) => {
                for line in summary_lines(store, &label, &k.hash, &summary) {
                    say(Line::Out(line));
                }
            }
            Err(e) => {
                say(Line::Note(format!("r3 evolve: {e}")));
                all_ok = false;
            }
        }
    }
    all_ok
}

/// The judge of a kernel's variants on this GPU, where variants are judged there.
fn gpu_judge<'a>(
    store: &Store,
    k: &KernelRecord,
    judging: &Judging,
    stop: &'a AtomicBool,
    say: Say,
) -> Result<Option<GpuJudge<'a>>, String> {
    let Judging::Gpu {
        driver,
        gpu,
        measure,
        inner_budget,
        inner_time,
    } = judging
    else {
        return Ok(None);
    };
    let inner = (*inner_budget, *inner_time);
    let (ev, space, tune) = session::judge_parts(store, k, *driver, gpu, measure, inner, say)?;
    let judge = GpuJudge::new(store, ev, space, tune, stop)?;
    if let Some(why) = judge.fallback() {
        say(Line::Note(format!("r3 evolve: {}: {why}", k.label())));
    }
    Ok(Some(judge))
}

/// What one kernel's run came to: its attempts, and the best rewrite or why there is none.
pub fn summary_lines(store: &Store, label: &str, hash: &KernelHash, s: &Summary) -> Vec<String> {
    let mut lines = vec![format!(
        "{label}: {} attempts ({} new, {} measured in this run), {} archive cells; stopped: {}",
        s.attempts.len(),
        s.new_attempts,
        s.judged,
        s.cells,
        s.stop
    )];
    if let Some((used, budget)) = s.tokens {
        lines.push(format!("model tokens: {used} of the run's {budget}"));
    }
    for a in &s.attempts {
        lines.push(format!(
            "  #{:<3} {:<40} {}",
            a.id,
            a.title(),
            a.outcome(None)
        ));
    }
    let speedup = |a: &Attempt| a.verdict(None).and_then(|v| v.speedup());
    lines.push(match s.best(None) {
        Some(b) if speedup(b).is_some_and(|x| x <= 1.0) => format!(
            "no rewrite beats the original's best compiler-only build (the closest: attempt {}, {}): keep the source",
            b.id,
            b.outcome(None)
        ),
        Some(b) => format!(
            "best: attempt {} ({}): {}; its diff: `r3 report {}` (attempts in {})",
            b.id,
            b.title(),
            b.outcome(None),
            &hash[..8],
            store.attempts_path(hash).display()
        ),
        None => "no rewrite measured valid yet".into(),
    });
    lines
}
