//! Isolation: every GPU evaluation runs in a worker process (`r3 __replay-worker`) that the
//! parent watches. An illegal address or a hung kernel costs one worker, never r3: the
//! parent records the candidate as crashed or timed out, starts a new worker, and goes on.
//!
//! Protocol: the parent writes one [`Job`] as a JSON line to the worker's stdin; the worker
//! answers with [`Msg`] lines on stdout: `Start` before each candidate, `Done` after it.

use super::determinism;
use super::fresh;
use super::session::{self, Session};
use super::stopping::Until;
use super::validate::{Tolerance, Unordered};
use crate::store::l2::Regime;
use crate::store::outcome::{Outcome, TimeStats};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub recording_dir: PathBuf,
    pub recording_id: String,
    pub ordinal: i32,
    /// The reference code, timed interleaved with every candidate.
    pub baseline_ptx: String,
    pub candidates: Vec<JobCandidate>,
    pub max_reps: u32,
    /// The L2 state every timed run starts from.
    #[serde(default)]
    pub l2: Regime,
    /// Time the baseline alone (no candidates): one `Done` whose baseline and time are both
    /// the baseline's, for choosing the L2 regime (`l2::choose`).
    #[serde(default)]
    pub baseline_alone: bool,
    /// The search's best ratio to the baseline so far: a candidate clearly slower than it is
    /// timed no further (`stopping::beaten`).
    #[serde(default)]
    pub race: Option<f64>,
    /// The least speedup over -O3 that could still ship (`Evaluator::ships_from`): a long
    /// kernel's new best under it keeps its own timing. None: apply's (`ships_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ships_from: Option<f64>,
    /// A confirmation's shipping line (a speedup over -O3): a long kernel's candidate is timed
    /// until its ratio is known to lie on one side of it (`stopping::sided`), not to 1%.
    /// None: to the precision `stopping::enough` asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide_at: Option<f64>,
    /// The best time (µs) measured of the same launch in other sessions (`Evaluator::beat`):
    /// the baseline's own code, a search's first trial, clearly slower than it is settled on
    /// its checked run (`stopping::beaten_elsewhere`). None: nothing to beat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beat_us: Option<f64>,
    /// The code whose writes say which bytes are outputs, poisoned before every checked run
    /// (`outputs`): the original kernel's where the candidates are a rewrite's, whose own -O3
    /// is the baseline; None: the baseline's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs_from: Option<String>,
    /// The output bytes to poison, as an earlier job of the same recording learned them (none:
    /// poison nothing); None: learn them first (`Msg::Learning`, then `Msg::Learned`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outputs: Option<super::outputs::Masks>,
    /// Instead of timing: check each candidate against the baseline on other inputs than the
    /// recorded ones, perturbed with this seed (`fresh`). A candidate that matches is `Valid`
    /// with no samples; one that does not, `WrongOutput`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fresh: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobCandidate {
    pub ptx: String,
    pub block_x: Option<u32>,
    pub tolerance: Option<Tolerance>,
    /// Timed first on a prefix of the launch (`screen`), and maybe dropped there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<super::screen::Use>,
}

/// One candidate's result, with what the driver reported about its code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub outcome: Outcome,
    pub registers: Option<i32>,
    pub local_bytes: Option<i32>,
    /// What the screen measured of it, where it was screened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<super::screen::Screened>,
}

impl Measured {
    /// An outcome with nothing else known.
    pub fn only(outcome: Outcome) -> Measured {
        Measured {
            outcome,
            registers: None,
            local_bytes: None,
            screen: None,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    Start {
        index: usize,
    },
    Done {
        index: usize,
        result: Measured,
    },
    /// The batch cannot run at all (e.g. the recording cannot be set up).
    Fatal {
        message: String,
    },
    /// Another process measures on this GPU: the job waits for its turn (`turn`), which no
    /// watchdog times, until `Turn`.
    Waiting,
    /// The job has the GPU after waiting; its setup is timed from here.
    Turn,
    /// Something the user should know about how the recording is checked; said once.
    Note {
        message: String,
    },
    /// The worker runs the original's code to learn which bytes are outputs (`outputs`): a
    /// crash or a hang from here to `Learned` is the learning's, not a candidate's.
    Learning,
    /// What it learned, for the parent to send with its later jobs of this recording.
    Learned {
        masks: super::outputs::Masks,
    },
    /// The baseline's own runs differ: how the job's checks validate instead (`determinism`).
    NotDeterministic {
        decision: determinism::Decision,
    },
}

/// The start of a `Fatal` message whose cause is the recording: the -O3 baseline ran and did
/// not leave what the recording says the launch left.
const IRREPRODUCIBLE: &str = "the baseline does not reproduce the recording: ";

/// The reason in a job's error, when the error is that the baseline does not reproduce the
/// recording (the recording's fault, not r3's).
pub fn irreproducible(error: &str) -> Option<&str> {
    error.strip_prefix(IRREPRODUCIBLE)
}

/// The start of a job's error whose cause is learning the outputs (the original's code run with
/// its outputs filled with patterns crashed or hung): the job goes again with nothing poisoned.
const LEARNING_FAILED: &str = "learning which bytes are outputs: ";

/// The reason in a job's error, when learning the outputs failed.
pub fn learning_failed(error: &str) -> Option<&str> {
    error.strip_prefix(LEARNING_FAILED)
}

/// How long a job waits for its turn on the GPU at most: another search's batch, however
/// long, ends well within it (its own candidates are each under the watchdog).
const TURN_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// Whether this process has said that it shares the GPU (once is enough).
static SAID_WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Workers of this process that take turns with each other on purpose (fresh contexts opened
/// at once): while any do, a wait for the GPU's turn is theirs, not another r3's, and is not
/// said.
static SIBLINGS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// While it lives, this process's workers waiting for the GPU's turn wait for each other.
pub struct Siblings(());

impl Siblings {
    pub fn start() -> Siblings {
        SIBLINGS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Siblings(())
    }
}

impl Drop for Siblings {
    fn drop(&mut self) {
        SIBLINGS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Prints a worker's note on stderr, once per process.
fn say_once(message: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.contains(&message) {
        eprintln!("r3: note: {message}");
        said.push(message);
    }
}

/// The worker's main loop. Exits after a sticky CUDA error, since its context is gone.
pub fn serve() -> i32 {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    let mut session: Option<(PathBuf, Session)> = None;
    let mut baseline: Baseline = None;
    let mut outputs: Outputs = None;
    let mut said_no_turn = false;
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return 0 };
        if serde_json::from_str::<Close>(&line).is_ok_and(|c| c.close) {
            // Kept for another evaluator of the parent's: the context stays, and the
            // recording's session too where the GPU has room for it (a template's builds each
            // make an evaluator of the same recording: opening it again was 1.5 s of each
            // build's 2.2 s before its trials on a 0.57 s kernel, H200, 2026-11-30).
            if let (Some(c), Some((_, s))) = (baseline.take(), &session) {
                s.unload(c.code);
            }
            outputs = None;
            if !session.as_ref().is_some_and(|(_, s)| s.set_aside()) {
                session = None;
            }
            continue;
        }
        let job: Job = match serde_json::from_str(&line) {
            Ok(j) => j,
            Err(e) => {
                return send(
                    &mut out,
                    &Msg::Fatal {
                        message: format!("bad job: {e}"),
                    },
                )
                .map_or(1, |_| 1)
            }
        };
        if session
            .as_ref()
            .map(|(d, _)| d != &job.recording_dir)
            .unwrap_or(true)
        {
            let _open = super::timeline::span("worker.open", || job.recording_id.clone());
            let rec = match load_recording(&job) {
                Ok(r) => r,
                Err(message) => {
                    let _ = send(&mut out, &Msg::Fatal { message });
                    continue;
                }
            };
            baseline = None; // it belonged to the other recording's modules
            outputs = None;
            // The other recording's session holds the fixed address range this one must
            // reserve: it goes first (one worker checks many recordings in `r3 record`).
            drop(session.take());
            match Session::open(&rec, job.ordinal) {
                Ok(s) => session = Some((job.recording_dir.clone(), s)),
                Err(e) => {
                    let _ = send(
                        &mut out,
                        &Msg::Fatal {
                            message: e.to_string(),
                        },
                    );
                    return 2;
                }
            }
        }
        let s = &session.as_ref().unwrap().1;
        // Held for the job: nothing else measures on this GPU meanwhile. Without a lock file
        // (an unwritable temporary directory) the job runs anyway, and the user is told once.
        let mut waited = false;
        let turn = super::turn::take(&s.uuid, || {
            waited = true;
            let _ = send(&mut out, &Msg::Waiting);
        });
        if waited {
            let _ = send(&mut out, &Msg::Turn);
        }
        if let Err(e) = &turn {
            if !said_no_turn {
                said_no_turn = true;
                eprintln!(
                    "r3: warning: measuring without the GPU's turn ({}: {e}); another r3 on this GPU could time its kernels beside these",
                    super::turn::lock_path(&s.uuid).display()
                );
            }
        }
        let _job = super::timeline::span("worker.job", || {
            format!("{} x{}", job.recording_id, job.candidates.len())
        });
        if let Err(code) = run_job(s, &job, &mut out, (&mut baseline, &mut outputs)) {
            return code;
        }
    }
    0
}

fn load_recording(job: &Job) -> Result<crate::store::records::Recording, String> {
    let path = job.recording_dir.join("launch.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let launch = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(crate::store::records::Recording {
        dir: job.recording_dir.clone(),
        id: job.recording_id.clone(),
        launch,
        verification: None,
        kernel: None,
    })
}

/// Whether PTX has an atomic or reduction instruction (`atom.*`, `red.*`), predicated or not.
fn uses_atomics(ptx: &str) -> bool {
    ptx.lines().any(|line| {
        let op = crate::ptx::stats::opcode(line);
        op.starts_with("atom.") || op.starts_with("red.")
    })
}

fn unordered_note(s: &Session, unordered: &[Unordered]) -> String {
    format!(
        "the baseline writes {} region(s) in another order than the recording (a list appended with atomics); each is compared as a multiset of its elements ({}), everything else exactly",
        unordered.len(),
        unordered
            .iter()
            .map(|u| format!("{}: {}-byte elements", s.region_name(u.region), u.width))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn appended_note(s: &Session, appended: &[Unordered]) -> String {
    format!(
        "the kernel appends to {} with atomics (it stores at an index an atomic add returned, so the order is the threads'): compared as a multiset of its elements in every check, everything else exactly",
        appended
            .iter()
            .map(|u| format!("{} ({}-byte elements)", s.region_name(u.region), u.width))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn send(out: &mut impl Write, msg: &Msg) -> std::io::Result<()> {
    r3_process::reply(out, msg)
}

/// The baseline of the session, loaded and checked once: (hash of its PTX, module).
/// The baseline's code, loaded once per worker, and what its checked run left.
type Baseline = Option<CachedBase>;

/// The baseline a worker keeps loaded between jobs of one recording.
struct CachedBase {
    hash: blake3::Hash,
    code: session::Loaded,
    checked: session::Output,
    /// Its time in this session, from the last full timing of a candidate beside it: what a
    /// long kernel's candidate is judged against on one run (`stopping::one_run_beaten`).
    timed: Option<TimeStats>,
}

/// The output masks the session poisons, once learned or given (None: not yet decided).
type Outputs = Option<super::outputs::Masks>;

fn run_job(
    s: &Session,
    job: &Job,
    out: &mut impl Write,
    (cached, learned): (&mut Baseline, &mut Outputs),
) -> Result<(), i32> {
    let hash = blake3::hash(job.baseline_ptx.as_bytes());
    if let Some(c) = cached.take() {
        if c.hash == hash {
            *cached = Some(c);
        } else {
            s.unload(c.code);
        }
    }
    if cached.is_none() {
        let _span = super::timeline::span("worker.baseline", || job.recording_id.clone());
        // A new baseline is checked as the recording is, unpoisoned; the outputs are learned
        // again after it.
        s.forget_outputs();
        *learned = None;
        match s
            .load(&job.baseline_ptx)
            .and_then(|l| check_base(s, job, &l, out).map(|r| (l, r)))
        {
            Ok((l, Ok((checked, unordered)))) => {
                if !unordered.is_empty() {
                    let message = unordered_note(s, &unordered);
                    let _ = send(out, &Msg::Note { message });
                }
                *cached = Some(CachedBase {
                    hash,
                    code: l,
                    checked,
                    timed: None,
                })
            }
            Ok((l, Err(diff))) => {
                s.unload(l);
                let message = format!("{IRREPRODUCIBLE}{diff}");
                let _ = send(out, &Msg::Fatal { message });
                return Ok(());
            }
            Err(e) => {
                let _ = send(
                    out,
                    &Msg::Fatal {
                        message: format!("the baseline fails: {e}"),
                    },
                );
                return Err(3);
            }
        }
    }
    let CachedBase {
        code: base,
        checked: base_out,
        timed: base_timed,
        ..
    } = cached.as_mut().expect("set above");
    let (base, base_out) = (&*base, &*base_out);
    if let Some(seed) = job.fresh {
        return fresh_job(s, job, base, out, seed);
    }
    if !job.baseline_alone {
        let _span = super::timeline::span("worker.outputs", || job.recording_id.clone());
        outputs_for(s, job, base, out, learned)?;
    }
    if job.baseline_alone {
        send(out, &Msg::Start { index: 0 }).map_err(|_| 1)?;
        let (outcome, sticky) =
            match s.time(&[(base, None)], &[], Until::reps(job.max_reps), job.l2) {
                Ok(t) => (
                    Outcome::Valid {
                        baseline: t[0].clone(),
                        time: t[0].clone(),
                    },
                    false,
                ),
                Err(e) => (
                    Outcome::Crashed {
                        message: e.to_string(),
                    },
                    session::is_sticky(&e),
                ),
            };
        let result = Measured::only(outcome);
        send(out, &Msg::Done { index: 0, result }).map_err(|_| 1)?;
        return if sticky { Err(3) } else { Ok(()) };
    }
    // Loaded while the ones before them are measured.
    s.load_ahead(
        job.candidates
            .iter()
            .filter(|c| c.ptx != job.baseline_ptx)
            .map(|c| c.ptx.clone())
            .collect(),
    );
    let mut base_screen: BaseScreen = None;
    let mut said = false;
    let mut race = job.race;
    for (index, c) in job.candidates.iter().enumerate() {
        send(out, &Msg::Start { index }).map_err(|_| 1)?;
        let screens = (job.baseline_ptx.as_str(), &mut base_screen);
        // The baseline as a search's first trial is timed at a search's precision (2% for a
        // kernel of 100 ms or more: three pairs, not ten), racing nothing.
        let own = (race.is_none() && c.ptx == job.baseline_ptx).then_some(f64::INFINITY);
        let (result, sticky) = evaluate(
            s,
            (base, base_out, base_timed),
            c,
            Until {
                max_reps: job.max_reps,
                race: race.or(own),
                line: job.decide_at.map(|speedup| 1.0 / speedup),
                beat_us: job.beat_us,
            },
            (job.l2, job.ships_from.unwrap_or_else(ships_from)),
            screens,
        );
        race = super::stopping::tightened(race, result.outcome.ratio());
        if let (Some(Err(why)), false) = (&base_screen, said) {
            said = true;
            let message = format!("not screened on a prefix of the launch: the -O3 code cannot run one faithfully ({why})");
            let _ = send(out, &Msg::Note { message });
        }
        send(out, &Msg::Done { index, result }).map_err(|_| 1)?;
        if sticky {
            return Err(3);
        }
    }
    if let Some(Ok(Some(m))) = base_screen {
        s.unload(m);
    }
    Ok(())
}

/// The baseline's check (`Session::check_baseline`). Where the baseline is a rewrite's own -O3
/// (the job names the original's code in `outputs_from`) and does not reproduce the recording
/// exactly, it is checked again within the candidates' tolerance: a rewrite is held to what
/// its candidates are held to (and to the precision its tolerance is for, `validate::narrowed`).
#[allow(clippy::type_complexity)]
fn check_base(
    s: &Session,
    job: &Job,
    l: &session::Loaded,
    out: &mut impl Write,
) -> Result<Result<(session::Output, Vec<Unordered>), String>, session::ReplayError> {
    let appended = s.appended(&crate::ptx::appends::appends(&job.baseline_ptx));
    if !appended.is_empty() {
        let message = appended_note(s, &appended);
        let _ = send(out, &Msg::Note { message });
    }
    let exact = s.check_baseline(l, uses_atomics(&job.baseline_ptx), &appended)?;
    let tol = job.candidates.first().and_then(|c| c.tolerance);
    match (exact, tol) {
        (Err(_), Some(t)) if job.outputs_from.is_some() => {
            Ok(s.check(l, None, Some(&t))?.map(|o| (o, s.unordered())))
        }
        (Err(diff), tol) => not_deterministic(s, job, l, diff, tol, out),
        (r, _) => Ok(r),
    }
}

/// A baseline that does not reproduce the recording (`diff`): where two runs of it differ
/// from each other, the kernel is not deterministic (`determinism`), and is validated within
/// the user's tolerance (`tol`) or else within the spread of the baseline's own runs, learned
/// here; the decision goes to the parent (`Msg::NotDeterministic`) and to the user (a note).
/// Where its runs agree, or no tolerance tells them apart, the recording is at fault: `diff`.
fn not_deterministic(
    s: &Session,
    job: &Job,
    l: &session::Loaded,
    diff: String,
    tol: Option<Tolerance>,
    out: &mut impl Write,
) -> Result<Result<(session::Output, Vec<Unordered>), String>, session::ReplayError> {
    let mut runs = vec![s.observe(l)?, s.observe(l)?];
    let clock = determinism::reads_clock(&job.baseline_ptx);
    // Two replays that agree say little of a kernel that stores what it timed: simpleHyperQ's
    // kernels spin for a number of cycles and store the cycles they counted, and one of nine
    // recordings differed from its replays in one such word (H200, 2026-11-29). Elsewhere the
    // recording is at fault.
    if runs[0] == runs[1] && !clock {
        return Ok(Err(diff));
    }
    let reason = determinism::reason(&job.baseline_ptx).to_owned();
    let learned = match tol {
        Some(_) => Vec::new(),
        None => {
            while runs.len() < determinism::RUNS {
                runs.push(s.observe(l)?);
            }
            match s.learn_tolerances(&runs, determinism::type_hint(&job.baseline_ptx), clock) {
                Ok(learned) => learned,
                Err(why) => {
                    return Ok(Err(format!(
                        "{diff}; the kernel is not deterministic ({reason}), and no tolerance is learned from its runs: {why}; give one (--tolerance)"
                    )))
                }
            }
        }
    };
    let checked = match s.check(l, None, tol.as_ref())? {
        Ok(o) => o,
        Err(why) => {
            return Ok(Err(format!(
                "the kernel is not deterministic ({reason}), and a run of its -O3 baseline is outside {}: {why}",
                if tol.is_some() { "the tolerance given" } else { "the spread of its other runs" }
            )))
        }
    };
    let decision = determinism::Decision {
        reason,
        learned,
        user: tol,
        runs: runs.len(),
    };
    let _ = send(
        out,
        &Msg::Note {
            message: format!("{}: {}", job.recording_id, decision.text()),
        },
    );
    let _ = send(out, &Msg::NotDeterministic { decision });
    Ok(Ok((checked, s.unordered())))
}

/// Poisons the outputs before every checked run of this session: those the job gives, or,
/// where it gives none, those learned from the code it names (`Job::outputs_from`, else the
/// baseline), once per session.
fn outputs_for(
    s: &Session,
    job: &Job,
    base: &session::Loaded,
    out: &mut impl Write,
    applied: &mut Outputs,
) -> Result<(), i32> {
    match &job.outputs {
        Some(m) if applied.as_ref() == Some(m) => return Ok(()),
        Some(m) => {
            *applied = Some(m.clone());
            return match s.set_outputs(m) {
                Ok(()) => Ok(()),
                Err(e) => learning_fatal(out, &e),
            };
        }
        None if applied.is_some() => return Ok(()),
        None => {}
    }
    send(out, &Msg::Learning).map_err(|_| 1)?;
    let code = job.outputs_from.as_deref().unwrap_or(&job.baseline_ptx);
    let result = if code == job.baseline_ptx {
        s.learn_outputs(base)
    } else {
        // The original's code, loaded for this alone; it must reproduce the recording.
        s.load(code).and_then(|l| {
            let r = match s.check(&l, None, None) {
                Ok(Ok(_)) => s.learn_outputs(&l),
                Ok(Err(why)) => Err(session::ReplayError::Other(format!(
                    "the original's code does not reproduce the recording: {why}"
                ))),
                Err(e) => Err(e),
            };
            s.unload(l);
            r
        })
    };
    let masks = match result {
        Ok(masks) => masks,
        Err(e) if session::is_sticky(&e) => return learning_fatal(out, &e),
        Err(e) => {
            s.forget_outputs();
            let message = format!("outputs are not poisoned before checks ({e})");
            let _ = send(out, &Msg::Note { message });
            Vec::new()
        }
    };
    *applied = Some(masks.clone());
    send(out, &Msg::Learned { masks }).map_err(|_| 1)?;
    let regions = s.describe_outputs();
    if !regions.is_empty() {
        let message = format!(
            "the output bytes the original launch writes whatever they hold are poisoned before every check, so that code which leaves part of its output unwritten fails: {}",
            regions.join(", ")
        );
        let _ = send(out, &Msg::Note { message });
    }
    Ok(())
}

/// The worker's end after a CUDA error while learning or setting the outputs.
fn learning_fatal(out: &mut impl Write, e: &session::ReplayError) -> Result<(), i32> {
    let message = format!("{LEARNING_FAILED}{e}");
    let _ = send(out, &Msg::Fatal { message });
    Err(3)
}

/// The differential check on perturbed inputs (`fresh`): the baseline (the original's code) is
/// run on them twice for the reference, then each candidate once. Where the check cannot be
/// made (no float input, an original whose results vary), each candidate is `Valid` and a note
/// says why.
fn fresh_job(
    s: &Session,
    job: &Job,
    base: &session::Loaded,
    out: &mut impl Write,
    seed: u64,
) -> Result<(), i32> {
    let reference = match fresh::perturb(s.launch(), s.prologue(), seed) {
        None => Err("the kernel reads no float buffer that could be changed safely".to_owned()),
        Some(p) => match (s.run_on(base, &p.inputs, None), s.run_on(base, &p.inputs, None)) {
            (Ok((a, Ok(()))), Ok((b, Ok(())))) if a == b => Ok((p, a)),
            (Ok(_), Ok(_)) => Err(
                "the original's results on them vary from run to run, or it writes past an allocation"
                    .to_owned(),
            ),
            (Err(e), _) | (_, Err(e)) if session::is_sticky(&e) => {
                let message = format!("the original crashed on other inputs than the recorded ones: {e}");
                let _ = send(out, &Msg::Fatal { message });
                return Err(3);
            }
            (Err(e), _) | (_, Err(e)) => Err(format!("the original fails on them: {e}")),
        },
    };
    if let Err(why) = &reference {
        let message = format!("not checked on other inputs than the recorded ones: {why}");
        let _ = send(out, &Msg::Note { message });
    }
    for (index, c) in job.candidates.iter().enumerate() {
        send(out, &Msg::Start { index }).map_err(|_| 1)?;
        let (outcome, sticky) = match &reference {
            Ok((p, want)) => fresh_one(s, c, p, want, seed),
            Err(_) => (valid_unmeasured(), false),
        };
        let result = Measured::only(outcome);
        send(out, &Msg::Done { index, result }).map_err(|_| 1)?;
        if sticky {
            return Err(3);
        }
    }
    Ok(())
}

/// One candidate on the perturbed inputs against the original's result there; whether the
/// context died.
fn fresh_one(
    s: &Session,
    c: &JobCandidate,
    p: &fresh::Perturbed,
    want: &crate::store::records::Snapshot,
    seed: u64,
) -> (Outcome, bool) {
    let l = match s.load(&c.ptx) {
        Ok(l) => l,
        Err(e) => {
            let sticky = session::is_sticky(&e);
            return (
                Outcome::CompileError {
                    message: e.to_string(),
                },
                sticky,
            );
        }
    };
    let outcome = match s.run_on(&l, &p.inputs, c.block_x) {
        Ok((_, Err(why))) => Outcome::WrongOutput {
            message: format!("on other inputs than the recorded ones: {why}"),
        },
        Ok((got, Ok(()))) => {
            match fresh::verdict(p, want, &got, &s.unordered(), c.tolerance.as_ref(), seed) {
                Ok(()) => valid_unmeasured(),
                Err(message) => Outcome::WrongOutput { message },
            }
        }
        Err(e) => {
            let sticky = session::is_sticky(&e);
            let message = format!("on other inputs than the recorded ones: {e}");
            return (Outcome::Crashed { message }, sticky);
        }
    };
    s.unload(l);
    (outcome, false)
}

/// What a check that timed nothing answers for code that passed it.
fn valid_unmeasured() -> Outcome {
    let none = crate::store::outcome::TimeStats::of(&[0.0]);
    Outcome::Valid {
        time: none.clone(),
        baseline: none,
    }
}

/// The baseline's code for the screen's prefix, made once a job when its first candidate is
/// screened: the module (None inside where the baseline's own serves: it reads no extent the
/// prefix changes), or why the baseline's code cannot run a prefix faithfully.
type BaseScreen = Option<Result<Option<session::Loaded>, String>>;

/// One candidate: load, (screen,) check, time against the baseline (every run held to its
/// code's checked run: `determinism`). Returns whether the context died.
fn evaluate(
    s: &Session,
    (base, base_out, base_timed): (&session::Loaded, &session::Output, &mut Option<TimeStats>),
    c: &JobCandidate,
    reps: Until,
    (l2, ships): (Regime, f64),
    screens: (&str, &mut BaseScreen),
) -> (Measured, bool) {
    let loading = super::timeline::span("worker.load", String::new);
    let l = match s.load(&c.ptx) {
        Ok(l) => l,
        Err(e) => {
            let outcome = Outcome::CompileError {
                message: e.to_string(),
            };
            return (Measured::only(outcome), session::is_sticky(&e));
        }
    };
    drop(loading);
    let _measuring = super::timeline::span("worker.measure", String::new);
    let own_baseline = c.ptx == screens.0;
    let (registers, local_bytes) = (Some(l.registers), Some(l.local_bytes));
    let measured = |outcome, screen| Measured {
        outcome,
        registers,
        local_bytes,
        screen,
    };
    let mut screened = None;
    if let Some(u) = c.screen {
        match screen_one(s, (base, screens), (&l, c), u, (reps.max_reps, l2)) {
            Err(e) => {
                if !session::is_sticky(&e) {
                    s.unload(l);
                }
                return crashed(&e, registers, local_bytes);
            }
            Ok(Some((sc, true))) => {
                s.unload(l);
                let outcome = Outcome::Screened {
                    time: sc.time.clone(),
                    baseline: sc.baseline.clone(),
                    fraction: u.cut.fraction(),
                };
                return (measured(outcome, Some(sc)), false);
            }
            Ok(Some((sc, false))) => screened = Some(sc),
            Ok(None) => {}
        }
    }
    // The check and the timing apart: which of them a short kernel's measure spends its
    // time in (issue 55's replay rate) is read off the timeline.
    let checked = {
        let _check = super::timeline::span("measure.check", String::new);
        s.check_timed(&l, c.block_x, c.tolerance.as_ref())
    };
    let _timing = super::timeline::span("measure.time", String::new);
    let outcome = match checked {
        Err(e) => return crashed(&e, registers, local_bytes),
        Ok((Err(diff), _)) => Outcome::WrongOutput { message: diff },
        Ok((Ok(_), us)) if own_baseline && super::stopping::beaten_elsewhere(us, reps.beat_us) => {
            // Its session's own -O3 has no baseline to be raced against: its one run is both.
            let t = TimeStats {
                raced: true,
                ..TimeStats::of(&[us])
            };
            Outcome::Valid {
                baseline: t.clone(),
                time: t,
            }
        }
        Ok((Ok(_), us)) if settled_by_one_run(base_timed.as_ref(), us, reps.race) => {
            Outcome::Valid {
                baseline: base_timed.clone().expect("checked by settled_by_one_run"),
                time: TimeStats {
                    raced: true,
                    ..TimeStats::of(&[us])
                },
            }
        }
        Ok((Ok(checked), us)) => {
            // A long kernel's candidate is timed alone where that settles it; every other
            // (`None`) is timed beside the baseline, whose time it renews.
            let alone = if first_trial_alone(own_baseline, us, reps.race) {
                baseline_alone(s, (&l, &checked), c, reps, l2).map(|t| {
                    t.map(|t| {
                        *base_timed = Some(t.clone());
                        Outcome::Valid {
                            baseline: t.clone(),
                            time: t,
                        }
                    })
                })
            } else if alone_in_session(base_timed.as_ref(), reps.race) {
                let base_t = base_timed.clone().expect("checked by alone_in_session");
                // A new best that could ship is timed again beside the baseline: the race and
                // what ships rest on interleaved measurements, and the baseline's time is
                // renewed. So is a candidate whose own runs disagreed: whether that is its
                // fault depends on whether the baseline's runs agree (`determinism::verdict`).
                timed_alone(s, (&l, &checked), c, reps, l2, base_t).map(|alone| {
                    if retimed_beside_baseline(alone.as_ref(), reps.race, ships) {
                        None
                    } else {
                        alone
                    }
                })
            } else {
                Ok(None)
            };
            let timed = alone.and_then(|alone| match alone {
                Some(outcome) => Ok(outcome),
                None => timed_renewing(
                    s,
                    (base, base_out),
                    (&l, &checked),
                    c,
                    (reps, l2),
                    base_timed,
                ),
            });
            match timed {
                Ok(outcome) => outcome,
                Err(e) => return crashed(&e, registers, local_bytes),
            }
        }
    };
    s.unload(l);
    (measured(outcome, screened), false)
}

/// Whether a checked candidate that one run did not settle is timed alone, against the
/// baseline's time in this session: a long kernel's (`stopping::ONE_RUN_US`) in a race. Timed
/// beside the baseline, a near-tie of a 6x best on a 1 s kernel cost a second of -O3 a pair,
/// four pairs: 7.2 s a candidate, where its own runs take 0.7 s (H200, 2026-11-29).
fn alone_in_session(base: Option<&TimeStats>, race: Option<f64>) -> bool {
    race.is_some() && base.is_some_and(|b| b.median_us >= super::stopping::ONE_RUN_US)
}

/// Whether a long kernel's candidate, timed alone (`alone`; None where its runs differed from
/// its checked run), is timed again beside the baseline: where its runs differed, or where it
/// is a new best (under `race`, the search's best ratio) fast enough to ship (`ships`, a
/// speedup over -O3). A new best under that line cannot change what ships: timing it beside
/// the baseline only told a 1.002× from a 0.998×, and took 6.5 s of a 0.29 s kernel's 15 s
/// warm start, whose candidates are mostly such near-ties (H200, 2026-11-29).
fn retimed_beside_baseline(alone: Option<&Outcome>, race: Option<f64>, ships: f64) -> bool {
    let Some(o) = alone else { return true };
    o.ratio().is_some_and(|r| {
        let new_best = race.is_some_and(|best| r < best);
        new_best && r * ships <= 1.0
    })
}

/// The least speedup over -O3 apply ships (`winner::Policy::min_speedup`), where the job
/// names none.
fn ships_from() -> f64 {
    crate::store::winner::min_speedup_from_env().max(1.0)
}

/// A checked candidate timed alone until its median is known (`stopping::enough` on its own
/// series, at a search's precision), against the baseline as timed in this session (`base`): a
/// search's measure, not what ships (a new best is timed again beside the baseline, and a
/// winner is confirmed in fresh contexts). None where its runs differ from its checked run: a
/// kernel whose baseline differs too (float atomics) is not at fault, so the caller times it
/// beside the baseline, whose runs decide (`determinism::verdict`).
fn timed_alone(
    s: &Session,
    (l, checked): (&session::Loaded, &session::Output),
    c: &JobCandidate,
    reps: Until,
    l2: Regime,
    base: TimeStats,
) -> Result<Option<Outcome>, session::ReplayError> {
    let reference = s.reference(checked)?;
    // With the race, its one series settles at a search's precision (2% for a long kernel).
    let timed = s.time(&[(l, c.block_x)], &[&reference], reps, l2);
    let diff = s.differences(reference);
    let t = timed?;
    Ok(diff?.is_none().then(|| Outcome::Valid {
        baseline: base,
        time: t[0].clone(),
    }))
}

/// Whether a checked candidate is the baseline's own code (`own_baseline`) in a search's race
/// on a long kernel (its checked run `us`): a search's first trial, timed alone
/// ([`baseline_alone`]).
fn first_trial_alone(own_baseline: bool, us: f64, race: Option<f64>) -> bool {
    own_baseline && alone_in_session(Some(&TimeStats::of(&[us])), race)
}

/// A search's first trial on a long kernel (`first_trial_alone`): the baseline's own code timed
/// alone, its one series both the baseline's and the trial's (its ratio 1). Timed beside itself,
/// a 1 s kernel's trial 0 took a warm-up and three pairs, 8.6 s where four runs say as much.
/// None where its runs differ from its checked run (the caller times it beside the baseline,
/// whose runs decide: `determinism::verdict`).
fn baseline_alone(
    s: &Session,
    (l, checked): (&session::Loaded, &session::Output),
    c: &JobCandidate,
    reps: Until,
    l2: Regime,
) -> Result<Option<TimeStats>, session::ReplayError> {
    let placeholder = TimeStats::of(&[1.0]);
    let alone = timed_alone(s, (l, checked), c, reps, l2, placeholder)?;
    Ok(match alone {
        Some(Outcome::Valid { time, .. }) => Some(time),
        _ => None,
    })
}

/// Whether a checked candidate's one run (`us`) settles it as slower than the race's best, the
/// baseline timed in this session (`stopping::one_run_beaten`). Without a race (a confirmation,
/// `--no-race`) or a baseline timed here, nothing is settled on one run.
fn settled_by_one_run(base: Option<&TimeStats>, us: f64, race: Option<f64>) -> bool {
    match (base, race) {
        (Some(b), Some(best)) => super::stopping::one_run_beaten(b, us, best),
        _ => false,
    }
}

/// The screen's measure of candidate `l` against the baseline on the prefix `u.cut`, and
/// whether it drops the candidate; None where either code cannot run the prefix faithfully
/// (`ptx::grid`: the candidate is then timed on the whole launch only).
fn screen_one(
    s: &Session,
    (base, base_screen): (&session::Loaded, (&str, &mut BaseScreen)),
    (l, c): (&session::Loaded, &JobCandidate),
    u: super::screen::Use,
    (max_reps, l2): (u32, Regime),
) -> Result<Option<(super::screen::Screened, bool)>, session::ReplayError> {
    let (base_ptx, slot) = base_screen;
    let cut = u.cut;
    if slot.is_none() {
        *slot = Some(prefix_code(s, base_ptx, cut.dim, cut.extent)?);
    }
    let base_code = match slot.as_ref().expect("set above") {
        Err(_) => return Ok(None),
        Ok(own) => own.as_ref().unwrap_or(base),
    };
    let rec = s.launch();
    let full = session::shape(rec.grid, rec.block, c.block_x).0[cut.dim];
    let Ok(own) = prefix_code(s, &c.ptx, cut.dim, full)? else {
        return Ok(None);
    };
    let code = own.as_ref().unwrap_or(l);
    let reps = max_reps.min(super::screen::MAX_PAIRS);
    let timed = s.time_screened(
        &[(base_code, None), (code, c.block_x)],
        cut,
        reps,
        l2,
        u.drop_above,
    );
    if let Some(m) = own {
        s.unload(m);
    }
    let t = timed?;
    let sc = super::screen::Screened {
        baseline: t[0].clone(),
        time: t[1].clone(),
    };
    let dropped = u.drop_above.is_some() && t[1].raced;
    Ok(Some((sc, dropped)))
}

/// `ptx` made to run a prefix of its grid (`ptx::grid::with_grid_extent`: `%nctaid.<dim>`
/// answers `extent`) and loaded: None where the text needed no change (its own module serves),
/// Err(why) where it cannot be (refused, or the driver did not load it); a CUDA error that
/// killed the context is the caller's.
#[allow(clippy::type_complexity)]
fn prefix_code(
    s: &Session,
    ptx: &str,
    dim: usize,
    extent: u32,
) -> Result<Result<Option<session::Loaded>, String>, session::ReplayError> {
    Ok(match crate::ptx::grid::with_grid_extent(ptx, dim, extent) {
        Err(why) => Err(why),
        Ok(std::borrow::Cow::Borrowed(_)) => Ok(None),
        Ok(std::borrow::Cow::Owned(text)) => match s.load(&text) {
            Ok(m) => Ok(Some(m)),
            Err(e) if session::is_sticky(&e) => return Err(e),
            Err(e) => Err(e.to_string()),
        },
    })
}

/// [`timed_and_stable`], the session's time of the baseline (`base_timed`) renewed by it
/// where valid: what later candidates timed alone are held against.
fn timed_renewing(
    s: &Session,
    base: (&session::Loaded, &session::Output),
    cand: (&session::Loaded, &session::Output),
    c: &JobCandidate,
    (reps, l2): (Until, Regime),
    base_timed: &mut Option<TimeStats>,
) -> Result<Outcome, session::ReplayError> {
    let outcome = timed_and_stable(s, base, cand, c, reps, l2)?;
    if let Outcome::Valid { baseline, .. } = &outcome {
        *base_timed = Some(baseline.clone());
    }
    Ok(outcome)
}

/// Times a checked candidate against the baseline; valid unless its runs disagree with its
/// checked run where the baseline's all agree with theirs.
fn timed_and_stable(
    s: &Session,
    (base, base_out): (&session::Loaded, &session::Output),
    (l, checked): (&session::Loaded, &session::Output),
    c: &JobCandidate,
    reps: Until,
    l2: Regime,
) -> Result<Outcome, session::ReplayError> {
    let refs = [s.reference(base_out)?, s.reference(checked)?];
    let timed = s.time(
        &[(base, None), (l, c.block_x)],
        &[&refs[0], &refs[1]],
        reps,
        l2,
    );
    let [base_ref, cand_ref] = refs;
    let (base_diff, cand_diff) = (s.differences(base_ref), s.differences(cand_ref));
    // A failed timing is the error to report (a dead context fails the comparisons too).
    let t = timed?;
    let (base_diff, cand_diff) = (base_diff?, cand_diff?);
    Ok(
        match determinism::verdict(base_diff.as_deref(), cand_diff.as_deref()) {
            Ok(()) => Outcome::Valid {
                baseline: t[0].clone(),
                time: t[1].clone(),
            },
            Err(message) => Outcome::WrongOutput { message },
        },
    )
}

/// A candidate that failed on the GPU, and whether its failure killed the context.
fn crashed(
    e: &session::ReplayError,
    registers: Option<i32>,
    local_bytes: Option<i32>,
) -> (Measured, bool) {
    let outcome = Outcome::Crashed {
        message: e.to_string(),
    };
    let m = Measured {
        outcome,
        registers,
        local_bytes,
        screen: None,
    };
    (m, session::is_sticky(e))
}

/// While it lives, the workers this process starts share decompressed recordings
/// (`store::snapcache`) in a temporary directory of its own, removed when it goes: a search
/// opens one recording in many workers (its own, its confirmation's fresh contexts, again when
/// it comes back to the kernel).
pub struct SharedSnapshots {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SharedSnapshots {
    /// Starts sharing; where no temporary directory can be made, each worker decompresses.
    pub fn start() -> SharedSnapshots {
        super::shared::make();
        SharedSnapshots {
            stop: Default::default(),
        }
    }

    /// Decompresses `recordings`' snapshots into the shared directory, in this order, on a
    /// thread of its own while the GPU works, so that a worker opening one of them later finds
    /// it ready: decompressing was most of opening a recording (0.9 s of 1.1 s, H200). It stops
    /// where the directory is full (it never pushes out what a worker kept), and when sharing
    /// ends.
    pub fn read_ahead(&self, recordings: Vec<crate::store::records::Recording>) {
        let Some(dir) = super::shared::made() else {
            return;
        };
        if !crate::store::snapcache::use_dir(&dir) {
            return;
        }
        let stop = self.stop.clone();
        std::thread::spawn(move || {
            for rec in recordings {
                for file in &rec.launch.files {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    // Decompressed, a prologue is about the bytes it holds, an epilogue the
                    // bytes the launch changed (never less than the file).
                    let bytes = match file.name.as_str() {
                        "prologue.r3snap" => rec.launch.bytes_in,
                        "epilogue.r3snap" => rec.launch.bytes_changed,
                        _ => 0,
                    }
                    .max(file.bytes);
                    let key = crate::store::snapcache::Sum {
                        sum: &file.sum,
                        bytes: file.bytes,
                    };
                    if !crate::store::snapcache::kept_or_room_for(key, bytes) {
                        return;
                    }
                    let _ = crate::store::records::read_snapshot_checked(
                        &rec.dir.join(&file.name),
                        Some(file),
                    );
                }
            }
        });
    }
}

impl Drop for SharedSnapshots {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        super::shared::remove();
    }
}

/// A reusing pool's worker, alive and answering, is kept for the next search's evaluator:
/// told to close its recording's session, then put with the others (while they are fewer than
/// [`SPARES`]; else it goes).
impl Drop for Pool {
    fn drop(&mut self) {
        self.let_go();
    }
}

impl Pool {
    /// Lets its worker go now (kept for another evaluator where the pool reuses workers,
    /// ended otherwise); a later job starts or takes one again. For an evaluator kept only
    /// for what it knows: a template's builds each had one alive through the knob search,
    /// and 36 builds opened 36 workers and contexts (H200, 2026-11-29).
    pub fn let_go(&mut self) {
        let Some(mut w) = self.worker.take().filter(|_| self.reuse) else {
            return;
        };
        if w.send(&Close { close: true }).is_err() {
            return;
        }
        let mut spare = SPARE.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARES {
            let kept = Kept {
                program: self.program.clone(),
                ordinal: self.ordinal,
                recording: self.recording.take(),
            };
            spare.push((kept, w));
        }
    }
}

/// What a parent sends a worker it keeps for later (`Pool::reusing`): close the recording's
/// session and wait for the next job. Answered with nothing.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Close {
    close: bool,
}

/// What an idle worker is: its command, the GPU its context is on, and the recording whose
/// session it may keep (`Session::set_aside`).
struct Kept {
    program: Vec<String>,
    ordinal: i32,
    recording: Option<PathBuf>,
}

/// Idle worker processes.
type Idle = std::sync::Mutex<Vec<(Kept, r3_process::Child)>>;

/// An idle worker of `program` on GPU `ordinal` taken from `idle`, if there is one: one that
/// last had `recording` first, as it may have kept its session.
fn take_idle(
    idle: &Idle,
    program: &[String],
    ordinal: i32,
    recording: &Path,
) -> Option<r3_process::Child> {
    let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
    let fits = |k: &Kept| k.program.as_slice() == program && k.ordinal == ordinal;
    let i = idle
        .iter()
        .position(|(k, _)| fits(k) && k.recording.as_deref() == Some(recording))
        .or_else(|| idle.iter().position(|(k, _)| fits(k)))?;
    Some(idle.remove(i).1)
}

/// A new worker process of `program`, sharing the run's decompressed recordings.
fn spawn_worker(program: &[String]) -> Result<r3_process::Child, String> {
    let args: Vec<&str> = program[1..].iter().map(String::as_str).collect();
    let exe = std::path::Path::new(&program[0]);
    let shared = super::shared::made();
    let env: Vec<(&str, &std::ffi::OsStr)> = shared
        .iter()
        .map(|d| (crate::store::snapcache::ENV, d.as_os_str()))
        .collect();
    r3_process::Child::spawn_with_env(exe, &args, r3_process::Stderr::Inherit, &env)
        .map_err(|e| format!("cannot start a replay worker: {e}"))
}

/// Workers that a search's evaluator let go, kept for the next search's evaluator of this
/// process (`Pool::reusing`): starting a worker (a process, its CUDA context) was about 0.4 s of
/// a short kernel's 1 s evaluator, 70 times in a 300 s deadline (H200, 2026-11-29,
/// `R3_TIMELINE`). A kept worker has closed its recording's session; it exits when this process
/// does (its stdin closes).
static SPARE: Idle = std::sync::Mutex::new(Vec::new());
/// Workers kept at most: each holds a CUDA context on its GPU.
const SPARES: usize = 2;

/// The parent's side: a worker process, restarted whenever one dies or hangs.
pub struct Pool {
    worker: Option<r3_process::Child>,
    /// Its worker is kept for another search's evaluator when it goes, and it starts from one
    /// so kept ([`Pool::reusing`]).
    reuse: bool,
    /// The GPU its last job ran on (a kept worker's context is there).
    ordinal: i32,
    /// The recording its last job ran on (a kept worker may keep its session).
    recording: Option<PathBuf>,
    /// The worker command: `r3 __replay-worker`, or a stand-in in tests.
    program: Vec<String>,
    /// Time allowed for one candidate (set from the baseline's time).
    pub limit: Duration,
    /// Time allowed for a worker to set up a recording (copying its memory in).
    pub setup_limit: Duration,
    /// Time allowed for learning the outputs (`Msg::Learning` to `Msg::Learned`), where it is
    /// shorter than `limit`: the -O3 code run with its outputs poisoned may not end (a hash
    /// table's probing finds no empty slot), and at `limit` a 0.6 ms kernel's learning had
    /// hung for 11.3 s before it failed (H200, 2026-11-29).
    pub learning_limit: Option<Duration>,
    /// The output masks a worker learned in the last job (`Msg::Learned`), taken by the
    /// evaluator.
    pub learned: Option<super::outputs::Masks>,
    /// How the last job validated a baseline whose own runs differ (`Msg::NotDeterministic`),
    /// taken by the caller.
    pub not_deterministic: Option<determinism::Decision>,
}

impl Pool {
    pub fn new(limit: Duration) -> Pool {
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "r3".into());
        Pool::with_program(vec![exe, "__replay-worker".into()], limit)
    }

    /// A pool for a search's evaluator: it takes a worker another search's evaluator let go,
    /// and leaves its own for the next. Not for a confirmation, whose fresh contexts must be
    /// new processes (a new placement of the recording in memory, `confirm`).
    pub fn reusing(limit: Duration) -> Pool {
        let mut pool = Pool::new(limit);
        pool.reuse = true;
        pool
    }

    pub fn with_program(program: Vec<String>, limit: Duration) -> Pool {
        Pool {
            worker: None,
            reuse: false,
            ordinal: 0,
            recording: None,
            program,
            limit,
            setup_limit: Duration::from_secs(120),
            learning_limit: None,
            learned: None,
            not_deterministic: None,
        }
    }

    /// Runs a job; every candidate gets a result, whatever happens to the workers.
    pub fn run(&mut self, job: &Job) -> Result<Vec<Measured>, String> {
        let mut results: Vec<Option<Measured>> = vec![None; job.candidates.len()];
        let mut todo: Vec<usize> = (0..job.candidates.len()).collect();
        while !todo.is_empty() {
            let sub = Job {
                candidates: todo.iter().map(|&i| job.candidates[i].clone()).collect(),
                ..job.clone()
            };
            let done = self.run_once(&sub)?;
            let mut next = Vec::new();
            for (k, r) in done.into_iter().enumerate() {
                match r {
                    Some(m) => results[todo[k]] = Some(m),
                    None => next.push(todo[k]),
                }
            }
            if next.len() == todo.len() {
                return Err("the replay worker made no progress".into());
            }
            todo = next;
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every candidate answered"))
            .collect())
    }

    /// One pass over a job with one worker. Candidates after a crash are left as None.
    fn run_once(&mut self, job: &Job) -> Result<Vec<Option<Measured>>, String> {
        let out = vec![None; job.candidates.len()];
        self.ordinal = job.ordinal;
        self.recording = Some(job.recording_dir.clone());
        if self.reuse && self.worker.is_none() {
            // One that has exited since it was kept fails to take the job: a new one does.
            self.worker = take_idle(&SPARE, &self.program, job.ordinal, &job.recording_dir)
                .and_then(|mut w| w.send(job).is_ok().then_some(w));
            if self.worker.is_some() {
                return self.answers(job, out);
            }
        }
        if self.worker.is_none() {
            self.worker = Some(spawn_worker(&self.program)?);
        }
        let w = self.worker.as_mut().unwrap();
        if w.send(job).is_err() {
            self.worker = None;
            return Err("the replay worker exited before taking the job".into());
        }
        self.answers(job, out)
    }

    /// The worker's answers to `job`, sent to it: a result per candidate until it crashes or
    /// hangs (those after are left as None).
    fn answers(
        &mut self,
        job: &Job,
        mut out: Vec<Option<Measured>>,
    ) -> Result<Vec<Option<Measured>>, String> {
        let mut current: Option<usize> = None;
        let mut first = true;
        let mut waiting = false;
        let mut learning = false;
        loop {
            let wait = if waiting {
                TURN_LIMIT
            } else if learning {
                self.learning_limit
                    .map_or(self.limit, |l| l.min(self.limit))
            } else if first {
                self.setup_limit + self.limit
            } else {
                self.limit
            };
            let w = self.worker.as_mut().unwrap();
            match w.recv::<Msg>(wait) {
                Ok(msg) => {
                    first = false;
                    match msg {
                        Msg::Waiting => {
                            waiting = true;
                            let ours = SIBLINGS.load(std::sync::atomic::Ordering::SeqCst) > 0;
                            if !ours
                                && !SAID_WAITING.swap(true, std::sync::atomic::Ordering::Relaxed)
                            {
                                eprintln!("r3: another r3 is measuring on this GPU; the two take turns, a batch at a time");
                            }
                        }
                        Msg::Turn => (waiting, first) = (false, true),
                        Msg::Note { message } => say_once(message),
                        Msg::Learning => learning = true,
                        Msg::NotDeterministic { decision } => {
                            self.not_deterministic = Some(decision)
                        }
                        Msg::Learned { masks } => {
                            self.learned = Some(masks);
                            learning = false;
                        }
                        Msg::Start { index } => current = Some(index),
                        Msg::Done { index, result } => {
                            out[index] = Some(result);
                            current = None;
                            if index + 1 == job.candidates.len() {
                                return Ok(out);
                            }
                        }
                        Msg::Fatal { message } => {
                            self.worker = None;
                            return Err(message);
                        }
                    }
                }
                Err(e) => {
                    let outcome = match e {
                        r3_process::NoAnswer::TimedOut(_) => Outcome::TimedOut {
                            limit_ms: wait.as_secs_f64() * 1e3,
                        },
                        r3_process::NoAnswer::Ended => Outcome::Crashed {
                            message: "the replay worker died".into(),
                        },
                    };
                    self.worker = None; // kills it
                    if learning {
                        return Err(format!("{LEARNING_FAILED}the replay worker {outcome}"));
                    }
                    let Some(i) = current else {
                        // Between candidates (e.g. it exited after reporting a crash): the
                        // rest go to a new worker.
                        if out.iter().any(Option::is_some) {
                            return Ok(out);
                        }
                        return Err(format!(
                            "the replay worker stopped before starting a candidate: it {outcome}"
                        ));
                    };
                    out[i] = Some(Measured::only(outcome));
                    return Ok(out);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What decides a long kernel's candidate without the baseline beside it: one run where it
    /// is clearly slower than the race's best, its own runs where it is not; never without a
    /// race (a confirmation, `--no-race`) or before the session has timed its baseline, and
    /// never for a short kernel.
    #[test]
    fn a_long_kernels_candidate_is_judged_without_the_baseline_only_in_a_race() {
        let base = |us| TimeStats {
            median_us: us,
            min_us: us,
            spread: 0.01,
            samples: 3,
            raced: false,
        };
        let long = base(1.0e6);
        assert!(settled_by_one_run(Some(&long), 1.0e6, Some(0.2)));
        assert!(!settled_by_one_run(Some(&long), 0.21e6, Some(0.2)));
        assert!(!settled_by_one_run(None, 1.0e6, Some(0.2)));
        assert!(!settled_by_one_run(Some(&long), 1.0e6, None));
        assert!(alone_in_session(Some(&long), Some(0.2)));
        assert!(!alone_in_session(Some(&long), None));
        assert!(!alone_in_session(None, Some(0.2)));
        assert!(!alone_in_session(Some(&base(2.0e3)), Some(0.2)));
    }

    /// A long kernel's candidate timed alone is timed again beside the baseline where its runs
    /// disagreed with its checked run, or where it is a new best that could ship; a new best
    /// under the shipping line (1.02×) keeps its own timing, and so does any candidate that is
    /// no new best.
    #[test]
    fn only_a_new_best_that_could_ship_is_timed_again_beside_the_baseline() {
        let valid = |ratio: f64| Outcome::Valid {
            baseline: TimeStats::of(&[100.0]),
            time: TimeStats::of(&[100.0 * ratio]),
        };
        let race = Some(1.0);
        assert!(
            retimed_beside_baseline(None, race, 1.02),
            "runs that disagreed"
        );
        assert!(
            retimed_beside_baseline(Some(&valid(0.9)), race, 1.02),
            "1.11x: new, ships"
        );
        assert!(
            !retimed_beside_baseline(Some(&valid(0.995)), race, 1.02),
            "1.005x: new, not"
        );
        assert!(
            !retimed_beside_baseline(Some(&valid(0.97)), race, 1.05),
            "1.03x under 1.05x"
        );
        assert!(
            !retimed_beside_baseline(Some(&valid(0.9)), Some(0.8), 1.02),
            "no new best"
        );
        assert!(
            !retimed_beside_baseline(Some(&valid(0.9)), None, 1.02),
            "no race: no best"
        );
    }

    #[test]
    fn atomics_are_found_in_ptx_whatever_their_predicate() {
        assert!(uses_atomics("  atom.global.add.u32 %r1, [%rd1], 1;"));
        assert!(uses_atomics("\t@%p1 red.global.add.f32 [%rd2], %f1;"));
        assert!(uses_atomics(
            "@!%p2 bra $L;\n  @!%p3 atom.shared.cas.b32 %r2, [%r3], 0, 1;"
        ));
        assert!(!uses_atomics(
            "  ld.shared.u32 %r1, [%r2];\n  st.global.f32 [%rd1], %f1;\n// atom. in a comment"
        ));
    }

    fn job(n: usize) -> Job {
        Job {
            recording_dir: PathBuf::from("/r"),
            recording_id: "k/l".into(),
            ordinal: 0,
            baseline_ptx: String::new(),
            candidates: (0..n)
                .map(|i| JobCandidate {
                    ptx: format!("c{i}"),
                    block_x: None,
                    tolerance: None,
                    screen: None,
                })
                .collect(),
            max_reps: 1,
            l2: Regime::Cold,
            baseline_alone: false,
            race: None,
            ships_from: None,
            decide_at: None,
            beat_us: None,
            outputs_from: None,
            outputs: None,
            fresh: None,
        }
    }

    #[test]
    fn the_l2_regime_travels_with_the_job_and_defaults_to_cold() {
        let warm = Job {
            l2: Regime::Warm,
            ..job(1)
        };
        let line = serde_json::to_string(&warm).unwrap();
        assert!(line.contains(r#""l2":"warm""#), "{line}");
        let back: Job = serde_json::from_str(&line).unwrap();
        assert_eq!(back.l2, Regime::Warm);
        // A job written without the field (an older r3) measures cold, as it always did.
        let mut v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v.as_object_mut().unwrap().remove("l2");
        v.as_object_mut().unwrap().remove("baseline_alone");
        let old: Job = serde_json::from_value(v).unwrap();
        assert_eq!((old.l2, old.baseline_alone), (Regime::Cold, false));
    }

    /// A stand-in worker: a shell script that answers per candidate as `script` says.
    /// Candidate i's PTX is "c<i>"; the script reads the job line and plays a scenario.
    fn pool(script: &str) -> Pool {
        let mut p = Pool::with_program(
            vec!["sh".into(), "-c".into(), script.into()],
            Duration::from_millis(800),
        );
        p.setup_limit = Duration::from_millis(200);
        p
    }

    const VALID: &str = r#"{"msg":"done","index":IDX,"result":{"outcome":{"status":"valid","time":{"median_us":1.0,"min_us":1.0,"spread":0.0,"samples":1},"baseline":{"median_us":2.0,"min_us":2.0,"spread":0.0,"samples":1}},"registers":8,"local_bytes":0}}"#;

    fn answer(i: usize) -> String {
        format!(
            "echo '{{\"msg\":\"start\",\"index\":{i}}}'; echo '{}';",
            VALID.replace("IDX", &i.to_string())
        )
    }

    /// A stand-in worker that answers every job, each candidate's registers its process id,
    /// and notes each close it is sent in `closes`.
    fn reusable_worker(closes: &std::path::Path) -> String {
        let valid = VALID
            .replace("IDX", "0")
            .replace("\"registers\":8", "\"registers\":$$");
        format!(
            "while read line; do case \"$line\" in *close*) echo closed >> {}; continue;; esac; echo '{{\"msg\":\"start\",\"index\":0}}'; echo \"{}\"; done",
            closes.display(),
            valid.replace('"', "\\\"")
        )
    }

    /// A search's evaluator leaves its worker, its session closed, to the next one's; a
    /// confirmation's pool (not reusing) starts its own process, and so does a search on
    /// another GPU.
    #[test]
    fn a_search_takes_the_worker_the_last_search_let_go_and_a_confirmation_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let closes = dir.path().join("closes");
        let script = reusable_worker(&closes);
        let reusing = || {
            let mut p = pool(&script);
            p.reuse = true;
            p
        };
        let pid = |p: &mut Pool, job: &Job| p.run(job).unwrap()[0].registers;
        let mut first = reusing();
        let one = pid(&mut first, &job(1));
        first.let_go();
        // The kept worker reads its close while this goes on.
        let closed = || std::fs::read_to_string(&closes).unwrap_or_default();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while closed().is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(closed(), "closed\n");
        let mut second = reusing();
        assert_eq!(pid(&mut second, &job(1)), one, "the same process");
        // The pool that let it go still runs jobs, on another worker.
        assert_ne!(pid(&mut first, &job(1)), one, "let go");
        drop(first);
        let mut fresh = pool(&script);
        assert_ne!(
            pid(&mut fresh, &job(1)),
            one,
            "a confirmation's own process"
        );
        drop(second);
        let elsewhere = Job {
            ordinal: 1,
            ..job(1)
        };
        let mut other = reusing();
        assert_ne!(pid(&mut other, &elsewhere), one, "another GPU's");
    }

    /// A spare worker that last had the job's recording is taken before another (it may have
    /// kept that recording's session); any other of the same command and GPU otherwise.
    #[test]
    fn a_spare_that_had_the_jobs_recording_is_taken_first() {
        let named = |name: &str| {
            let script = format!("echo '\"{name}\"'; cat > /dev/null");
            let sh = std::path::Path::new("sh");
            r3_process::Child::spawn(sh, &["-c", &script], r3_process::Stderr::Inherit).unwrap()
        };
        let program = vec!["r3".to_owned()];
        let kept = |recording: &str| Kept {
            program: program.clone(),
            ordinal: 0,
            recording: Some(PathBuf::from(recording)),
        };
        let idle: Idle =
            std::sync::Mutex::new(vec![(kept("/s/a"), named("a")), (kept("/s/b"), named("b"))]);
        let said = |mut w: r3_process::Child| w.recv::<String>(Duration::from_secs(5)).unwrap();
        let take = |recording: &str| take_idle(&idle, &program, 0, Path::new(recording));
        assert_eq!(said(take("/s/b").unwrap()), "b");
        assert!(
            take_idle(&idle, &program, 1, Path::new("/s/a")).is_none(),
            "another GPU"
        );
        assert_eq!(said(take("/s/c").unwrap()), "a", "any other");
        assert!(take("/s/a").is_none());
    }

    /// The worker tells a close from a job by its one field.
    #[test]
    fn a_close_is_no_job_and_a_job_is_no_close() {
        let close = serde_json::to_string(&Close { close: true }).unwrap();
        assert!(serde_json::from_str::<Close>(&close).is_ok_and(|c| c.close));
        assert!(serde_json::from_str::<Job>(&close).is_err());
        let job = serde_json::to_string(&job(1)).unwrap();
        assert!(serde_json::from_str::<Close>(&job).is_err());
    }

    /// The baseline's own code as a search's trial on a long kernel is timed alone; not on a
    /// short kernel, not another code, and not without a race (a confirmation, `--no-race`).
    #[test]
    fn a_long_kernels_first_trial_is_timed_alone_only_in_a_search() {
        let race = Some(crate::stopping::NO_BEST_YET);
        assert!(first_trial_alone(true, 1.07e6, race));
        assert!(!first_trial_alone(true, 500.0, race));
        assert!(!first_trial_alone(false, 1.07e6, race));
        assert!(!first_trial_alone(true, 1.07e6, None));
    }

    /// A worker that hangs while it learns the outputs is given up at the learning's limit,
    /// not a candidate's, and the job says the learning failed.
    #[test]
    fn a_hung_learning_is_given_up_at_its_own_limit() {
        let script = "read job; echo '{\"msg\":\"learning\"}'; sleep 30";
        let mut p = pool(script);
        p.limit = Duration::from_secs(20);
        p.learning_limit = Some(Duration::from_millis(300));
        let t0 = std::time::Instant::now();
        let err = p.run(&job(1)).unwrap_err();
        assert!(err.starts_with(LEARNING_FAILED), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    }

    #[test]
    fn every_candidate_is_answered() {
        let script = format!("read job; {} {} {}", answer(0), answer(1), answer(2));
        let out = pool(&script).run(&job(3)).unwrap();
        assert_eq!(out.len(), 3);
        assert!(out.iter().all(|m| m.outcome.ratio() == Some(0.5)));
    }

    #[test]
    fn a_hung_candidate_times_out_and_the_rest_go_to_a_new_worker() {
        // First worker: answers 0, starts 1 and hangs. Later workers: answer whatever they get.
        let marker = tempfile::tempdir().unwrap();
        let m = marker.path().join("first");
        let script = format!(
            "read job; if [ ! -e {m} ]; then touch {m}; {} echo '{{\"msg\":\"start\",\"index\":1}}'; sleep 30; fi; {} {}",
            answer(0),
            answer(0),
            answer(1),
            m = m.display()
        );
        let out = pool(&script).run(&job(3)).unwrap();
        assert_eq!(out[0].outcome.ratio(), Some(0.5));
        assert!(
            matches!(out[1].outcome, Outcome::TimedOut { .. }),
            "{:?}",
            out[1]
        );
        assert_eq!(
            out[2].outcome.ratio(),
            Some(0.5),
            "candidate 2 ran as the new worker's index 1"
        );
    }

    #[test]
    fn waiting_for_the_gpu_is_not_timed_but_the_job_after_it_is() {
        // Waits 1 s (the watchdog is 0.8 s, setup 0.2 s) for another process's turn, then answers.
        let wait = "echo '{\"msg\":\"waiting\"}'; sleep 1; echo '{\"msg\":\"turn\"}';";
        let script = format!("read job; {wait} {} {}", answer(0), answer(1));
        let out = pool(&script).run(&job(2)).unwrap();
        assert!(
            out.iter().all(|m| m.outcome.ratio() == Some(0.5)),
            "{out:?}"
        );
        // After the turn, a worker that then hangs before its first candidate is stopped.
        let script = format!("read job; {wait} sleep 30; {}", answer(0));
        let err = pool(&script).run(&job(1)).unwrap_err();
        assert!(err.contains("stopped before starting a candidate"), "{err}");
    }

    #[test]
    fn a_worker_that_dies_mid_candidate_marks_it_crashed() {
        let marker = tempfile::tempdir().unwrap();
        let m = marker.path().join("first");
        let script = format!(
            "read job; if [ ! -e {m} ]; then touch {m}; echo '{{\"msg\":\"start\",\"index\":0}}'; exit 9; fi; {}",
            answer(0),
            m = m.display()
        );
        let out = pool(&script).run(&job(2)).unwrap();
        assert!(
            matches!(&out[0].outcome, Outcome::Crashed { message } if message.contains("died")),
            "{:?}",
            out[0]
        );
        assert_eq!(out[1].outcome.ratio(), Some(0.5));
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a mask of one range
    fn a_worker_that_hangs_or_dies_while_learning_outputs_says_so() {
        // It learns and answers: the masks come back with the results.
        let learned = r#"echo '{"msg":"learning"}'; echo '{"msg":"learned","masks":[[2,[{"start":0,"end":16}]]]}';"#;
        let mut p = pool(&format!("read job; {learned} {}", answer(0)));
        assert!(p.run(&job(1)).is_ok());
        assert_eq!(p.learned, Some(vec![(2, vec![0..16])]));
        // It hangs while learning: an error the evaluator tells from a candidate's failure.
        let hang = r#"read job; echo '{"msg":"learning"}'; sleep 30"#;
        let err = pool(hang).run(&job(1)).unwrap_err();
        assert!(
            learning_failed(&err).is_some_and(|w| w.contains("timed out")),
            "{err}"
        );
        let died = r#"read job; echo '{"msg":"learning"}'; exit 9"#;
        let err = pool(died).run(&job(1)).unwrap_err();
        assert!(learning_failed(&err).is_some(), "{err}");
    }

    #[test]
    fn a_fatal_batch_is_an_error_not_a_result() {
        let err = pool(r#"read job; echo '{"msg":"fatal","message":"the baseline does not reproduce the recording"}'"#)
            .run(&job(1))
            .unwrap_err();
        assert!(err.contains("baseline"));
    }
}
