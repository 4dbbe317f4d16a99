//! The evaluator the search uses on a GPU: candidates are lowered here (any thread), then
//! measured in a worker process against one recorded launch of the kernel.

use super::validate::Tolerance;
use super::worker::{learning_failed, Job, JobCandidate, Measured, Pool};
use super::Evaluator;
use crate::candidate::Candidate;
use crate::lower::isolated::{lower_in_process, lower_isolated, LowerJob};
use crate::lower::{Codegen, Lowered};
use crate::store::outcome::Outcome;
use crate::store::records::Recording;
use crate::store::{KernelRecord, Store, StoreError};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("kernel {0} has no device IR in the store; fix: build its program with r3-clang++")]
    NoIr(String),
    #[error("recording {id} cannot be replayed: {why}; fix: record the program again (`r3 record -- ./program`)")]
    NotReplayable { id: String, why: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the baseline of {kernel} does not lower: {msg}; fix: `r3 ptx` on the kernel's module.bc shows LLVM's own error (a bug to report with that file)")]
    Baseline { kernel: String, msg: String },
    #[error("{0}")]
    Worker(String),
}

/// How measurements are made.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    pub ordinal: i32,
    pub max_reps: u32,
    pub tolerance: Option<Tolerance>,
    /// The L2 state timed runs start from (`l2::choose` sets it under `--l2 auto`).
    pub l2: crate::store::l2::Regime,
    /// The GPU's multiprocessors, where a long kernel's candidates may be screened on a prefix
    /// of its launch (`screen`); None: every candidate is timed on the whole launch.
    pub screen: Option<u32>,
}

pub struct GpuEvaluator {
    kernel: KernelRecord,
    bitcode: Vec<u8>,
    bitcode_path: std::path::PathBuf,
    target: Codegen,
    recording: Recording,
    baseline: Lowered,
    opts: MeasureOptions,
    /// Behind a lock so that the evaluator can be shared by the threads that lower candidates.
    pool: std::sync::Mutex<Pool>,
    device: super::Device,
    /// The CUDA device name, as the recording runtime writes it into launch.json.
    gpu_name: Option<String>,
    /// Registers and local memory of the last batch, by position (the trait returns outcomes
    /// only); behind a lock since `measure` takes `&self`.
    last: std::sync::Mutex<Vec<Measured>>,
    /// The search's best ratio to the baseline: candidates clearly slower
    /// are raced out (`Evaluator::race_against`). A confirmation's evaluator starts with none.
    race: PositiveCell,
    /// The least speedup that could still ship (none: apply's own line), set by a
    /// deadline for its slices (`Evaluator::ships_from`).
    ships_from: PositiveCell,
    /// A confirmation's shipping line (`Evaluator::decide_at`); none in a search.
    decide_at: PositiveCell,
    /// The best time measured of the launch by other evaluators (`beat`); none by default.
    beat_us: PositiveCell,
    /// For a rewrite (a kernel stored as a variant of another): the original kernel's -O3 PTX,
    /// whose writes say which bytes are outputs (`outputs`); the rewrite's own code could
    /// leave them unwritten and be taken at its word.
    outputs_from: Option<String>,
    /// The output bytes poisoned before every check (`outputs`), once a worker learned them
    /// for this recording; sent with every later job, so that a new worker does not learn them
    /// again. Some(empty) where learning failed: nothing is poisoned.
    outputs: std::sync::Mutex<Option<super::outputs::Masks>>,
    /// The screen of this recording's launch, and how it has agreed with the whole launch.
    screen: std::sync::Mutex<Screening>,
    /// nvcc's code of the kernel, measured as one more candidate (`Candidate::nvcc`), or why
    /// there is none; None: not offered.
    nvcc: Option<Result<String, String>>,
}

/// A positive number or none, set and read by the threads that share an evaluator (the search's
/// race, a deadline's shipping line); none is kept as 0.
#[derive(Debug, Default)]
struct PositiveCell(std::sync::atomic::AtomicU64);

impl PositiveCell {
    fn set(&self, v: Option<f64>) {
        let bits = v.filter(|v| *v > 0.0).map_or(0, f64::to_bits);
        self.0.store(bits, std::sync::atomic::Ordering::Relaxed);
    }

    fn get(&self) -> Option<f64> {
        Some(f64::from_bits(
            self.0.load(std::sync::atomic::Ordering::Relaxed),
        ))
        .filter(|v| *v > 0.0)
    }
}

/// A long kernel's screen (`screen`): the prefix its candidates are timed on first (None: the
/// kernel is not screened) and the judge of its agreement with the whole launch.
#[derive(Debug, Default)]
struct Screening {
    cut: Option<super::screen::Cut>,
    judge: super::screen::Judge,
}

impl Screening {
    /// How the next candidate meets the screen, the search's best ratio being `best`.
    fn next(&mut self, best: Option<f64>) -> Option<super::screen::Use> {
        let best = best.filter(|b| *b < super::stopping::NO_BEST_YET);
        self.judge.next(self.cut?, best)
    }

    /// What a batch's results say of the screen: drops counted, and every candidate timed
    /// both ways held to the whole launch (a disagreement turns the screen off, said once).
    fn learn(&mut self, batch: &[Measured], label: &str) {
        let Some(cut) = self.cut else { return };
        for m in batch {
            if matches!(m.outcome, Outcome::Screened { .. }) {
                self.judge.dropped += 1;
            }
            if let (Some(sc), Some(whole)) = (&m.screen, m.outcome.ratio()) {
                if let Some(line) = self.judge.agreed(cut, sc.ratio(), whole) {
                    eprintln!("r3: note: {label}: {line}");
                }
            }
        }
    }

    fn of(recording: &Recording, opts: &MeasureOptions) -> std::sync::Mutex<Screening> {
        let l = &recording.launch;
        let cut = opts
            .screen
            .and_then(|sms| super::screen::plan(l.grid, l.block, l.in_app_ms * 1e3, sms));
        std::sync::Mutex::new(Screening {
            cut,
            judge: Default::default(),
        })
    }
}

/// The stored kernel a recording ran (`identity::Index::of_recording`).
/// Fresh workers a short kernel's confirmation may open at once ([`Evaluator::contexts_at_once`]).
const CONTEXTS_AT_ONCE: usize = 4;
/// The largest recording (its prologue's bytes) whose fresh workers open at once: a worker
/// holds about three copies of it (mapped, and the inputs and expected outputs kept on the
/// device), so four at once of 2 GiB beside the search's own leave most of a data-centre GPU's
/// memory free. (Not the recorded address range: the runtime reserves 512 GiB of it.)
const CONTEXTS_AT_ONCE_BYTES: u64 = 2 << 30;

pub fn kernel_for(store: &Store, rec: &Recording) -> Result<KernelRecord, EvalError> {
    use crate::store::identity::{self, Resolution};
    match store.index()?.of_recording(rec) {
        Resolution::Kernel(k) => Ok(*k),
        Resolution::Missing => Err(EvalError::NoIr(crate::kernel::demangle(&rec.launch.kernel))),
        Resolution::Ambiguous(ks) => {
            let refs: Vec<_> = ks.iter().collect();
            Err(identity::ambiguous(&rec.launch.kernel, &refs).into())
        }
    }
}

impl GpuEvaluator {
    pub fn new(
        store: &Store,
        recording: Recording,
        target: Codegen,
        opts: MeasureOptions,
    ) -> Result<Self, EvalError> {
        let kernel = kernel_for(store, &recording)?;
        Self::build(store, recording, kernel, target, opts, false)
    }

    /// An evaluator of another stored kernel of the same signature (a source rewrite that
    /// `r3 evolve` stored) against `recording`. Its -O3 baseline is lowered in a child
    /// process, like a candidate: the code is new to LLVM.
    pub fn of_kernel(
        store: &Store,
        recording: Recording,
        kernel: KernelRecord,
        target: Codegen,
        opts: MeasureOptions,
    ) -> Result<Self, EvalError> {
        Self::build(store, recording, kernel, target, opts, true)
    }

    fn build(
        store: &Store,
        recording: Recording,
        kernel: KernelRecord,
        target: Codegen,
        opts: MeasureOptions,
        isolated: bool,
    ) -> Result<Self, EvalError> {
        if let Some(why) = &recording.launch.not_replayable {
            return Err(EvalError::NotReplayable {
                id: recording.id.clone(),
                why: why.clone(),
            });
        }
        let bitcode = store.kernel_bitcode(&kernel.hash)?;
        let bitcode_path = store.kernel_dir(&kernel.hash).join("module.bc");
        let baseline = if isolated {
            lower_isolated(&LowerJob {
                bitcode: bitcode_path.clone(),
                kernel_hash: kernel.hash.clone(),
                candidate: Candidate::baseline(),
                target: target.clone(),
                mutation: None,
            })
        } else {
            lower_in_process(
                &bitcode,
                &kernel.hash,
                &Candidate::baseline(),
                &target,
                None,
            )
        }
        .map_err(|o| EvalError::Baseline {
            kernel: kernel.signature.demangled.clone(),
            msg: o.to_string(),
        })?;
        // A search's: it may take the worker another search's evaluator let go.
        let pool = pool_for(&recording, &opts, true);
        let (device, gpu_name) = device_name(&target, opts.ordinal);
        let outputs_from = original_ptx(store, &kernel, &target);
        let screen = Screening::of(&recording, &opts);
        Ok(GpuEvaluator {
            outputs_from,
            outputs: Default::default(),
            bitcode_path,
            kernel,
            bitcode,
            device,
            gpu_name,
            target,
            recording,
            baseline,
            opts,
            pool: std::sync::Mutex::new(pool),
            last: std::sync::Mutex::new(Vec::new()),
            race: Default::default(),
            ships_from: Default::default(),
            decide_at: Default::default(),
            beat_us: Default::default(),
            screen,
            nvcc: None,
        })
    }

    /// The best time (µs a run) other evaluators measured of the same launch, for the next
    /// `measure`s: this one's -O3, as its search's first trial, clearly slower than it is
    /// settled on its checked run (`stopping::beaten_elsewhere`). How a rewrite's judge races
    /// each build's session against the best build before it.
    pub fn beat(&self, us: Option<f64>) {
        self.beat_us.set(us);
    }

    /// Lets this evaluator's worker go (`Pool::let_go`): what it knows of its kernel stays,
    /// and a later `measure` takes a worker again.
    pub fn let_worker_go(&self) {
        self.pool.lock().unwrap_or_else(|p| p.into_inner()).let_go();
    }

    /// The same evaluator timing candidates against `baseline` instead of the kernel's -O3:
    /// how `r3 evolve` compares a rewrite with the original kernel's best configuration, both
    /// run interleaved on the same recorded launch.
    pub fn with_baseline(&self, baseline: Lowered) -> GpuEvaluator {
        GpuEvaluator {
            kernel: self.kernel.clone(),
            bitcode: self.bitcode.clone(),
            bitcode_path: self.bitcode_path.clone(),
            target: self.target.clone(),
            baseline,
            opts: self.opts.clone(),
            pool: std::sync::Mutex::new(pool_for(&self.recording, &self.opts, false)),
            device: self.device.clone(),
            gpu_name: self.gpu_name.clone(),
            last: std::sync::Mutex::new(Vec::new()),
            race: Default::default(),
            ships_from: Default::default(),
            decide_at: Default::default(),
            beat_us: Default::default(),
            recording: self.recording.clone(),
            outputs_from: self.outputs_from.clone(),
            outputs: std::sync::Mutex::new(self.known_outputs()),
            screen: Screening::of(&self.recording, &self.opts),
            // The other code's search: nvcc's build of this kernel is not its.
            nvcc: None,
        }
    }

    /// An evaluator of the same kernel, target and options against another of its recorded
    /// launches (`Store::launches_of`), with a worker of its own.
    pub fn for_recording(&self, recording: Recording) -> Result<GpuEvaluator, EvalError> {
        if let Some(why) = &recording.launch.not_replayable {
            return Err(EvalError::NotReplayable {
                id: recording.id.clone(),
                why: why.clone(),
            });
        }
        Ok(GpuEvaluator {
            kernel: self.kernel.clone(),
            bitcode: self.bitcode.clone(),
            bitcode_path: self.bitcode_path.clone(),
            target: self.target.clone(),
            baseline: self.baseline.clone(),
            opts: self.opts.clone(),
            pool: std::sync::Mutex::new(pool_for(&recording, &self.opts, false)),
            device: self.device.clone(),
            gpu_name: self.gpu_name.clone(),
            last: std::sync::Mutex::new(Vec::new()),
            race: Default::default(),
            ships_from: Default::default(),
            decide_at: Default::default(),
            beat_us: Default::default(),
            outputs: std::sync::Mutex::new(
                self.known_outputs()
                    .filter(|_| recording.id == self.recording.id),
            ),
            screen: Screening::of(&recording, &self.opts),
            recording,
            outputs_from: self.outputs_from.clone(),
            nvcc: self.nvcc.clone(),
        })
    }

    /// Offers nvcc's code of the kernel (`Candidate::nvcc`) to the search, or why there is none
    /// (the search's nvcc trial then fails to compile with that reason).
    pub fn offer_nvcc(&mut self, code: Result<String, String>) {
        self.nvcc = Some(code);
    }

    /// What it learned of its recording's outputs, and from which code: another evaluator of
    /// the same recording that learns them from the same code takes them ([`take_outputs`]).
    ///
    /// [`take_outputs`]: GpuEvaluator::take_outputs
    pub fn outputs_learned(&self) -> Option<LearnedOutputs> {
        Some(LearnedOutputs {
            recording: self.recording.id.clone(),
            from: self
                .outputs_from
                .clone()
                .unwrap_or_else(|| self.baseline.ptx.clone()),
            masks: self.known_outputs()?,
        })
    }

    /// Takes `learned` where it is of this evaluator's recording and learned from the code
    /// this one learns from (a rewrite's builds each learn from the original's -O3): its
    /// worker poisons them without learning them again, 2 runs of the kernel and one more
    /// for each region it writes, for each build. Whether it took them.
    pub fn take_outputs(&mut self, learned: &LearnedOutputs) -> bool {
        let same = learned.recording == self.recording.id
            && self.outputs_from.as_deref() == Some(learned.from.as_str());
        if same {
            *self.outputs.get_mut().unwrap_or_else(|p| p.into_inner()) =
                Some(learned.masks.clone());
        }
        same
    }

    /// The output masks learned for this recording so far.
    fn known_outputs(&self) -> Option<super::outputs::Masks> {
        self.outputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn kernel(&self) -> &KernelRecord {
        &self.kernel
    }

    pub fn target(&self) -> &Codegen {
        &self.target
    }

    pub fn measure_options(&self) -> &MeasureOptions {
        &self.opts
    }

    pub fn recording(&self) -> &Recording {
        &self.recording
    }

    pub fn baseline(&self) -> &Lowered {
        &self.baseline
    }

    /// What the last `measure` found, by position (outcomes with registers and local memory),
    /// taken: a second call returns nothing.
    /// Chooses the L2 state the search measures in (`l2::choose`), timing the baseline in both
    /// where the policy asks, and measures in it from now on.
    pub fn choose_l2(&mut self, policy: super::l2::Policy) -> crate::store::l2::Choice {
        use super::l2;
        use crate::store::l2::Regime;
        let launch_us = self.recording.launch.in_app_ms * 1e3;
        let both = l2::needs_both(policy, launch_us)
            .then(|| {
                let cold = self.time_baseline(Regime::Cold).ok()?;
                let warm = self.time_baseline(Regime::Warm).ok()?;
                Some((cold, warm))
            })
            .flatten();
        // A damaged natural.json costs the program's times, not the search.
        let natural = self.recording.natural_ms().unwrap_or_default();
        let program = l2::Program {
            natural_ms: &natural,
            gpu: self.recording.launch.gpu.as_deref(),
        };
        let replay_gpu = self.gpu_name.as_deref().unwrap_or("no GPU");
        let mut choice = l2::choose(policy, &program, replay_gpu, both);
        if policy == l2::Policy::Auto && !l2::needs_both(policy, launch_us) {
            choice.reason = l2::long_reason(launch_us);
        }
        self.opts.l2 = choice.regime;
        choice
    }

    /// The -O3 baseline's median replay time (µs) in `regime`, timed alone.
    fn time_baseline(&self, regime: crate::store::l2::Regime) -> Result<f64, String> {
        let job = baseline_job(
            &self.recording,
            &self.baseline.ptx,
            self.opts.ordinal,
            self.opts.max_reps,
            regime,
        );
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        match pool.run(&job)?.pop().map(|m| m.outcome) {
            Some(Outcome::Valid { baseline, .. }) => Ok(baseline.median_us),
            other => Err(format!(
                "timing the baseline {regime}: {}",
                other.map_or("no result".to_owned(), |o| o.to_string())
            )),
        }
    }

    /// Whether the -O3 baseline reproduces the recording: one checked run in this evaluator's
    /// worker, which keeps the checked baseline for the search that follows.
    pub fn check_baseline(&self) -> Verdict {
        let job = baseline_job(
            &self.recording,
            &self.baseline.ptx,
            self.opts.ordinal,
            1,
            self.opts.l2,
        );
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        pool.not_deterministic = None;
        let verdict = verdict_of(pool.run(&job));
        with_decision(verdict, pool.not_deterministic.take())
    }

    pub fn take_last(&self) -> Vec<Measured> {
        std::mem::take(&mut *self.last.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A candidate, broken on purpose where `m` says (see `mutate`: for testing replay itself),
    /// lowered in a child process: a pipeline or a fault that crashes LLVM must not take
    /// `r3 replay` with it.
    pub fn lower_mutated(
        &self,
        c: &Candidate,
        m: Option<crate::ir::mutate::Mutation>,
    ) -> Result<Lowered, Outcome> {
        lower_isolated(&LowerJob {
            bitcode: self.bitcode_path.clone(),
            kernel_hash: self.kernel.hash.clone(),
            candidate: c.clone(),
            target: self.target.clone(),
            mutation: m.map(|m| (m, self.mutation_facts())),
        })
        .map_err(crate::compile_error)
    }

    /// What mutations need to know of the recording: the end of the first allocation the
    /// launch writes.
    fn mutation_facts(&self) -> crate::ir::mutate::Facts {
        use crate::store::records::{RegionData, RegionKind};
        let past_end = self.recording.epilogue().ok().and_then(|e| {
            e.regions
                .iter()
                .find(|r| r.kind == RegionKind::Allocation && r.data != RegionData::Unchanged)
                .map(|r| r.addr + r.size)
        });
        crate::ir::mutate::Facts { past_end }
    }
}

/// What a batch that could not run at all gives each candidate: a crash, but wrong output where
/// the baseline is a rewrite's own code (`rewrite`) that does not reproduce the recording (it
/// is that rewrite's wrong output, not the recording's fault).
fn failed_batch(message: &str, rewrite: bool) -> Outcome {
    match super::worker::irreproducible(message) {
        Some(why) if rewrite => Outcome::WrongOutput {
            message: why.to_owned(),
        },
        _ => Outcome::Crashed {
            message: message.to_owned(),
        },
    }
}

/// The output masks an evaluator learned ([`GpuEvaluator::outputs_learned`]): of which
/// recording, from which code.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnedOutputs {
    recording: String,
    from: String,
    masks: super::outputs::Masks,
}

/// The -O3 PTX of the kernel a rewrite was stored as a variant of; None for a kernel of the
/// user's (its baseline is the original) or where the original does not lower (then the
/// outputs are learned from the rewrite's own code, as before).
fn original_ptx(store: &Store, kernel: &KernelRecord, target: &Codegen) -> Option<String> {
    let parent = kernel.variant_of.as_ref()?;
    lower_isolated(&LowerJob {
        bitcode: store.kernel_dir(parent).join("module.bc"),
        kernel_hash: parent.clone(),
        candidate: Candidate::baseline(),
        target: target.clone(),
        mutation: None,
    })
    .ok()
    .map(|l| l.ptx)
}

/// What the differential check on other inputs found (`GpuEvaluator::check_fresh`).
#[derive(Debug, Clone, PartialEq)]
pub enum Fresh {
    /// The candidate gives what the baseline gives on them (or they could not be made: a note
    /// on stderr says why).
    Same,
    /// It does not, or it crashes or hangs on them: the message says where.
    Differs(String),
    /// The check did not run (no worker, or the original failed on the perturbed inputs).
    NotChecked(String),
}

impl GpuEvaluator {
    /// Checks `candidate` against this evaluator's baseline (the original's code) on inputs
    /// other than the recorded ones (`fresh::perturb` with `seed`), with the evaluator's
    /// tolerance: what catches code that matches the recording only.
    pub fn check_fresh(&self, candidate: &Lowered, seed: u64) -> Fresh {
        let job = Job {
            recording_dir: self.recording.dir.clone(),
            recording_id: self.recording.id.clone(),
            ordinal: self.opts.ordinal,
            baseline_ptx: self.baseline.ptx.clone(),
            candidates: vec![JobCandidate {
                ptx: candidate.ptx.clone(),
                block_x: candidate.candidate.block_x,
                tolerance: self.opts.tolerance,
                screen: None,
            }],
            max_reps: 1,
            l2: self.opts.l2,
            baseline_alone: false,
            race: None,
            ships_from: None,
            decide_at: None,
            beat_us: None,
            outputs_from: None,
            outputs: Some(Vec::new()),
            fresh: Some(seed),
        };
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        fresh_of(pool.run(&job))
    }
}

fn fresh_of(result: Result<Vec<Measured>, String>) -> Fresh {
    match result.map(|mut m| m.pop().map(|m| m.outcome)) {
        Ok(Some(Outcome::Valid { .. })) => Fresh::Same,
        Ok(Some(Outcome::WrongOutput { message })) => Fresh::Differs(message),
        // The original ran on these inputs before the candidate started: a crash or a hang
        // from here on is the candidate's.
        Ok(Some(o @ (Outcome::Crashed { .. } | Outcome::TimedOut { .. }))) => Fresh::Differs(
            format!("on other inputs than the recorded ones it {o}").replace(
                "it crashed: on other inputs than the recorded ones: ",
                "it crashed: ",
            ),
        ),
        Ok(Some(o)) => Fresh::NotChecked(o.to_string()),
        Ok(None) => Fresh::NotChecked("the worker gave no result".into()),
        Err(e) => Fresh::NotChecked(e),
    }
}

/// A job that runs the baseline alone (checked, then timed `max_reps` times at most).
fn baseline_job(
    recording: &Recording,
    ptx: &str,
    ordinal: i32,
    max_reps: u32,
    l2: crate::store::l2::Regime,
) -> Job {
    Job {
        recording_dir: recording.dir.clone(),
        recording_id: recording.id.clone(),
        ordinal,
        baseline_ptx: ptx.to_owned(),
        candidates: vec![JobCandidate {
            ptx: ptx.to_owned(),
            block_x: None,
            tolerance: None,
            screen: None,
        }],
        max_reps,
        l2,
        baseline_alone: true,
        race: None,
        ships_from: None,
        decide_at: None,
        beat_us: None,
        outputs_from: None,
        outputs: None,
        fresh: None,
    }
}

/// What a replay of a recording's -O3 baseline showed.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// It left exactly what the recording says the launch left.
    Reproduces,
    /// It ran and left something else: the recording is at fault (the reason names the first
    /// region and byte that differ).
    Irreproducible(String),
    /// Its own runs differ (float atomics, a race): it reproduces the recording within the
    /// tolerance the decision names, learned from its runs or given, which every candidate is
    /// held to (`determinism`).
    NotDeterministic(super::determinism::Decision),
    /// It could not be checked (no device IR, a baseline that does not lower or crashes, a
    /// worker that failed): said, never held against the recording.
    NotChecked(String),
}

impl Verdict {
    /// What the store keeps of this verdict for a replay on `gpu` (its CUDA device name); none
    /// for a recording that could not be checked, which is never held against it.
    pub fn verification(&self, gpu: &str) -> Option<crate::store::records::Verification> {
        let (reproduces, reason) = match self {
            Verdict::Reproduces | Verdict::NotDeterministic(_) => (true, None),
            Verdict::Irreproducible(why) => (false, Some(why.clone())),
            Verdict::NotChecked(_) => return None,
        };
        Some(crate::store::records::Verification {
            format: 1,
            reproduces,
            reason,
            not_deterministic: match self {
                Verdict::NotDeterministic(d) => Some(d.text()),
                _ => None,
            },
            gpu: gpu.to_owned(),
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        })
    }
}

impl Verdict {
    /// Whether the baseline reproduces the recording, exactly or within its own spread: the
    /// recording can be searched.
    pub fn reproduces(&self) -> bool {
        matches!(self, Verdict::Reproduces | Verdict::NotDeterministic(_))
    }
}

/// A baseline that reproduced the recording only once validated within a tolerance (the
/// worker's `Msg::NotDeterministic`) is not deterministic: the verdict says how it is validated.
fn with_decision(v: Verdict, d: Option<super::determinism::Decision>) -> Verdict {
    match (v, d) {
        (Verdict::Reproduces, Some(d)) => Verdict::NotDeterministic(d),
        (v, _) => v,
    }
}

fn verdict_of(result: Result<Vec<Measured>, String>) -> Verdict {
    match result {
        Ok(mut measured) => match measured.pop().map(|m| m.outcome) {
            Some(Outcome::Valid { .. }) => Verdict::Reproduces,
            Some(other) => Verdict::NotChecked(format!(
                "the baseline {}: {}",
                other.in_words(),
                other.detail().unwrap_or_default()
            )),
            None => Verdict::NotChecked("the worker gave no result".into()),
        },
        Err(e) => match super::worker::irreproducible(&e) {
            Some(reason) => Verdict::Irreproducible(reason.to_owned()),
            None => Verdict::NotChecked(e),
        },
    }
}

/// Replays each recording's -O3 baseline once, checked against the recording, all in one
/// worker process (one CUDA context): how `r3 record` checks what it recorded. The baselines
/// are lowered here, once per kernel.
pub fn verify_recordings(
    store: &Store,
    recordings: &[Recording],
    target: &Codegen,
    ordinal: i32,
) -> Vec<Verdict> {
    let opts = MeasureOptions {
        ordinal,
        max_reps: 1,
        tolerance: None,
        l2: Default::default(),
        screen: None,
    };
    let limit = recordings
        .iter()
        .map(|r| watchdog(r, &opts))
        .max()
        .unwrap_or_default();
    let mut pool = Pool::new(limit);
    let mut lowered: std::collections::HashMap<crate::kernel::KernelHash, Result<String, String>> =
        Default::default();
    recordings
        .iter()
        .map(|rec| {
            let kernel = match kernel_for(store, rec) {
                Ok(k) => k,
                Err(e) => return Verdict::NotChecked(e.to_string()),
            };
            let ptx = lowered
                .entry(kernel.hash.clone())
                .or_insert_with(|| {
                    let bitcode = store
                        .kernel_bitcode(&kernel.hash)
                        .map_err(|e| e.to_string())?;
                    lower_in_process(&bitcode, &kernel.hash, &Candidate::baseline(), target, None)
                        .map(|l| l.ptx)
                        .map_err(|o| format!("the baseline does not lower: {o}"))
                })
                .clone();
            match ptx {
                Ok(ptx) => {
                    pool.not_deterministic = None;
                    let v = verdict_of(pool.run(&baseline_job(rec, &ptx, ordinal, 1, opts.l2)));
                    with_decision(v, pool.not_deterministic.take())
                }
                Err(e) => Verdict::NotChecked(e),
            }
        })
        .collect()
}

/// The watchdog of a worker: generous against the recorded time, so only real hangs hit it.
fn watchdog(recording: &Recording, opts: &MeasureOptions) -> Duration {
    let per_run = Duration::from_secs_f64(recording.launch.in_app_ms.max(0.01) / 1e3);
    Duration::from_secs(10) + per_run * 50 * (opts.max_reps + 10)
}

/// The time a worker may take to learn a recording's outputs (`Pool::learning_limit`): a
/// hundred of its runs, its memory moved at 100 MB/s, and 2 s. Its runs (two per output
/// allocation, and a check) each restore the inputs and read the outputs back.
fn learning_watchdog(recording: &Recording) -> Duration {
    let per_run = Duration::from_secs_f64(recording.launch.in_app_ms.max(0.01) / 1e3);
    let bytes = recording.launch.bytes_replayed() as f64;
    Duration::from_secs(2) + per_run * 100 + Duration::from_secs_f64(bytes / 100e6)
}

/// A worker pool for an evaluator of `recording` under `opts` (its watchdog, and its own limit
/// on learning the outputs); kept for the next search's where `reusing`.
fn pool_for(recording: &Recording, opts: &MeasureOptions, reusing: bool) -> Pool {
    let limit = watchdog(recording, opts);
    let mut pool = if reusing {
        Pool::reusing(limit)
    } else {
        Pool::new(limit)
    };
    pool.learning_limit = Some(learning_watchdog(recording));
    pool
}

/// The device as trials name it, and its CUDA name.
fn device_name(target: &Codegen, ordinal: i32) -> (super::Device, Option<String>) {
    match crate::device::probed() {
        crate::device::GpuStatus::Present { driver, gpus } => {
            let g = usize::try_from(ordinal)
                .ok()
                .and_then(|i| gpus.get(i))
                .unwrap_or(&gpus[0]);
            let device = super::Device {
                gpu: g.trials_name(),
                driver: format!("CUDA {}.{}", driver.0, driver.1),
                id: Some(g.uuid.clone()),
                target: Some(crate::store::trials::Target {
                    sm: target.sm.clone(),
                    ptx: target.ptx.clone(),
                }),
            };
            (device, Some(g.name.clone()))
        }
        _ => (
            super::Device {
                gpu: format!("no GPU ({})", target.sm),
                driver: "none".into(),
                id: None,
                target: None,
            },
            None,
        ),
    }
}

impl Evaluator for GpuEvaluator {
    fn device(&self) -> super::Device {
        self.device.clone()
    }

    fn race_against(&self, best_ratio: Option<f64>) {
        self.race.set(best_ratio);
    }

    fn ships_from(&self, speedup: Option<f64>) {
        self.ships_from.set(speedup);
    }

    fn decide_at(&self, speedup: Option<f64>) {
        self.decide_at.set(speedup);
    }

    fn renewed(&self) -> Option<Self> {
        self.for_recording(self.recording.clone()).ok()
    }

    /// Fresh workers of a short kernel open at once: opening one (a process, a CUDA context,
    /// the recording copied in) took 0.7–1.8 s on an H200, against tens of milliseconds for
    /// what it then measures. A long kernel's are opened one at a time, where the first may
    /// settle its confirmation alone, and so are those of a large recording, whose copies
    /// would crowd the GPU.
    fn contexts_at_once(&self) -> usize {
        let short = self.recording.launch.in_app_ms * 1e3 < super::stopping::ONE_RUN_US;
        if short && self.recording.launch.bytes_replayed() <= CONTEXTS_AT_ONCE_BYTES {
            CONTEXTS_AT_ONCE
        } else {
            1
        }
    }

    fn offers_nvcc(&self) -> bool {
        self.nvcc.is_some()
    }

    /// Lowers the candidate, then assembles its PTX for the worker (`assemble::assemble_ahead`)
    /// while still on the lowering thread, off the GPU's clock.
    fn lower(&self, candidate: &Candidate) -> Result<Lowered, Outcome> {
        let lowered = if candidate.is_nvcc() {
            crate::nvcc_lowered(candidate, self.nvcc.as_ref())
        } else {
            lower_isolated(&LowerJob {
                bitcode: self.bitcode_path.clone(),
                kernel_hash: self.kernel.hash.clone(),
                candidate: candidate.clone(),
                target: self.target.clone(),
                mutation: None,
            })
            .map_err(crate::compile_error)
        }?;
        crate::assemble::assemble_ahead(&lowered.ptx, &self.target.sm);
        Ok(lowered)
    }

    fn measure(&self, batch: &[Lowered]) -> Vec<Outcome> {
        let race = self.race.get();
        let mut screening = self.screen.lock().unwrap_or_else(|p| p.into_inner());
        let job = Job {
            recording_dir: self.recording.dir.clone(),
            recording_id: self.recording.id.clone(),
            ordinal: self.opts.ordinal,
            baseline_ptx: self.baseline.ptx.clone(),
            candidates: batch
                .iter()
                .map(|l| JobCandidate {
                    ptx: l.ptx.clone(),
                    block_x: l.candidate.block_x,
                    tolerance: self.opts.tolerance,
                    screen: screening.next(race),
                })
                .collect(),
            max_reps: self.opts.max_reps,
            l2: self.opts.l2,
            baseline_alone: false,
            race,
            ships_from: self.ships_from.get(),
            decide_at: self.decide_at.get(),
            beat_us: self.beat_us.get(),
            outputs_from: self.outputs_from.clone(),
            outputs: self.known_outputs(),
            fresh: None,
        };
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        let mut result = pool.run(&job);
        if let Some(why) = result.as_ref().err().and_then(|e| learning_failed(e)) {
            // The original's code crashed or hung with its outputs filled with patterns (they
            // are read after all, as indices): the batch goes again with nothing poisoned.
            eprintln!("r3: note: outputs are not poisoned before checks on recording {}: learning them failed ({why})", self.recording.id);
            let none = Some(Vec::new());
            *self.outputs.lock().unwrap_or_else(|p| p.into_inner()) = none.clone();
            result = pool.run(&Job {
                outputs: none,
                ..job
            });
        }
        if let Some(m) = pool.learned.take() {
            *self.outputs.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
        }
        let measured = match result {
            Ok(m) => m,
            Err(message) => batch
                .iter()
                .map(|_| Measured::only(failed_batch(&message, self.outputs_from.is_some())))
                .collect(),
        };
        screening.learn(&measured, &self.kernel.signature.demangled);
        let outcomes = measured.iter().map(|m| m.outcome.clone()).collect();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = measured;
        outcomes
    }

    fn screen_summary(&self) -> Option<String> {
        let s = self.screen.lock().unwrap_or_else(|p| p.into_inner());
        s.judge.summary(s.cut?)
    }
}

/// What `r3 replay` reports for one candidate on one recording.
#[derive(Debug, serde::Serialize)]
pub struct ReplayResult {
    pub recording: String,
    pub kernel: String,
    pub kernel_hash: crate::kernel::KernelHash,
    pub in_app_us: f64,
    pub candidate: Candidate,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mutation: Option<crate::ir::mutate::Mutation>,
    pub baseline_ptx: crate::ptx::stats::PtxStats,
    pub candidate_ptx: crate::ptx::stats::PtxStats,
    /// None in a dry run.
    pub measured: Option<Measured>,
    /// The L2 state it was measured in and why; None in a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub l2: Option<crate::store::l2::Choice>,
}

/// What `r3 replay` does with a selection of recordings: `replay` of each, for this machine's
/// GPU (`gpu`: its driver and the GPU) or, without one, for the architecture each recording
/// ran on and the PTX ISA of CUDA 13.0 drivers; a recording that fails is said (`failed`) and
/// left out.
#[allow(clippy::too_many_arguments)]
pub fn replay_each(
    store: &Store,
    recs: &[Recording],
    candidate: &Candidate,
    gpu: Option<&((i32, i32), crate::device::GpuInfo)>,
    opts: &MeasureOptions,
    measure: Option<super::l2::Policy>,
    mutations: &[Option<crate::ir::mutate::Mutation>],
    mut failed: impl FnMut(&Recording, EvalError),
) -> Vec<ReplayResult> {
    let mut rows = Vec::new();
    for rec in recs {
        let target = Codegen {
            sm: gpu.map_or_else(|| rec.launch.arch.clone(), |(_, g)| g.sm()),
            ptx: Some(crate::lower::ptx_for_driver(gpu.map_or((13, 0), |(d, _)| *d)).into()),
            opt_level: 3,
        };
        match replay(store, rec, candidate, &target, opts, measure, mutations) {
            Ok(r) => rows.extend(r),
            Err(e) => failed(rec, e),
        }
    }
    rows
}

/// Whether a replay came out as it should: a row for every recording and mutation, every
/// candidate as it is valid and every mutated one caught (in a dry run, nothing measured is
/// nothing wrong).
pub fn as_expected(
    rows: &[ReplayResult],
    recordings: usize,
    mutations: usize,
    dry_run: bool,
) -> bool {
    rows.len() == recordings * mutations
        && rows.iter().all(|r| {
            let valid = r
                .measured
                .as_ref()
                .is_none_or(|m| matches!(m.outcome, Outcome::Valid { .. }));
            valid == r.mutation.is_none() || (dry_run && r.measured.is_none())
        })
}

/// Lowers the baseline and `candidate` (once per entry of `mutations`, None meaning as is) for
/// a recording and, with `measure` (the `--l2` policy; None: a dry run), measures them as one
/// batch against the baseline.
pub fn replay(
    store: &Store,
    rec: &Recording,
    candidate: &Candidate,
    target: &Codegen,
    opts: &MeasureOptions,
    measure: Option<super::l2::Policy>,
    mutations: &[Option<crate::ir::mutate::Mutation>],
) -> Result<Vec<ReplayResult>, EvalError> {
    let mut ev = GpuEvaluator::new(store, rec.clone(), target.clone(), opts.clone())?;
    let dry_run = measure.is_none();
    let l2 = measure.map(|policy| ev.choose_l2(policy));
    let lowered: Vec<Result<Lowered, Outcome>> = mutations
        .iter()
        .map(|m| ev.lower_mutated(candidate, *m))
        .collect();
    let ok: Vec<Lowered> = lowered
        .iter()
        .filter_map(|l| l.as_ref().ok().cloned())
        .collect();
    let mut measured = if dry_run || ok.is_empty() {
        Vec::new()
    } else {
        ev.measure(&ok);
        ev.take_last()
    }
    .into_iter();
    let rows = lowered
        .into_iter()
        .zip(mutations)
        .map(|(l, m)| {
            let (stats, measured) = match l {
                Ok(l) => (l.stats, if dry_run { None } else { measured.next() }),
                Err(outcome) => (Default::default(), Some(Measured::only(outcome))),
            };
            ReplayResult {
                recording: ev.recording.id.clone(),
                kernel: ev.kernel.signature.demangled.clone(),
                kernel_hash: ev.kernel.hash.clone(),
                in_app_us: ev.recording.launch.in_app_ms * 1e3,
                candidate: candidate.clone(),
                mutation: *m,
                baseline_ptx: ev.baseline.stats.clone(),
                candidate_ptx: stats,
                measured,
                l2: l2.clone(),
            }
        })
        .collect();
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::Verdict;

    #[test]
    fn the_evaluator_screens_only_with_a_best_and_holds_the_screen_to_the_whole_launch() {
        use super::{Measured, Outcome, Screening};
        use crate::screen::{Cut, Screened, CALIBRATION};
        use crate::store::outcome::TimeStats;
        let cut = Cut {
            dim: 0,
            kept: 4224,
            extent: 65536,
        };
        let mut s = Screening {
            cut: Some(cut),
            judge: Default::default(),
        };
        assert_eq!(s.next(None), None, "nothing to drop against");
        let both = |screened: f64, whole: f64| Measured {
            screen: Some(Screened {
                baseline: TimeStats::exact(100.0),
                time: TimeStats::exact(100.0 * screened),
            }),
            ..Measured::only(Outcome::Valid {
                time: TimeStats::exact(1000.0 * whole),
                baseline: TimeStats::exact(1000.0),
            })
        };
        for _ in 0..CALIBRATION {
            assert_eq!(s.next(Some(0.8)).unwrap().drop_above, None);
        }
        s.learn(&[both(0.9, 0.88), both(1.2, 1.25), both(0.5, 0.5)], "k");
        assert!(s.judge.calibrated_at.is_some());
        let limit = s.next(Some(0.8)).unwrap().drop_above.unwrap();
        assert!(
            limit > 0.8 * 1.04 && limit < 0.8 * 1.05,
            "margin is the worst disagreement: {limit}"
        );
        let dropped = Measured::only(Outcome::Screened {
            time: TimeStats::exact(200.0),
            baseline: TimeStats::exact(100.0),
            fraction: cut.fraction(),
        });
        s.learn(&[dropped], "k");
        assert_eq!(s.judge.dropped, 1);
        // A survivor whose whole launch disagrees with its prefix turns the screen off.
        s.learn(&[both(0.7, 1.0)], "k");
        assert_eq!(s.next(Some(0.8)), None);
        let line = s.judge.summary(cut).unwrap();
        assert!(
            line.contains("4224 of 65536 blocks in x")
                && line.contains("1 dropped")
                && line.contains("off"),
            "{line}"
        );
        // A kernel without a cut is never screened.
        assert_eq!(Screening::default().next(Some(0.8)), None);
    }

    #[test]
    fn the_fresh_check_tells_a_difference_from_a_check_that_did_not_run() {
        use super::{fresh_of, Fresh, Measured, Outcome};
        let m = |outcome| Measured::only(outcome);
        let t = crate::store::outcome::TimeStats::of(&[0.0]);
        let same = Outcome::Valid {
            time: t.clone(),
            baseline: t,
        };
        assert_eq!(fresh_of(Ok(vec![m(same)])), Fresh::Same);
        let wrong = Outcome::WrongOutput {
            message: "on other inputs".into(),
        };
        assert_eq!(
            fresh_of(Ok(vec![m(wrong)])),
            Fresh::Differs("on other inputs".into())
        );
        let crashed = Outcome::Crashed {
            message: "illegal address".into(),
        };
        assert_eq!(
            fresh_of(Ok(vec![m(crashed)])),
            Fresh::Differs(
                "on other inputs than the recorded ones it crashed: illegal address".into()
            )
        );
        let compile = Outcome::CompileError {
            message: "no such function".into(),
        };
        assert!(matches!(
            fresh_of(Ok(vec![m(compile)])),
            Fresh::NotChecked(_)
        ));
        assert!(matches!(
            fresh_of(Err("no worker".into())),
            Fresh::NotChecked(_)
        ));
    }

    #[test]
    fn a_rewrite_whose_own_code_does_not_reproduce_the_recording_gives_wrong_output() {
        use super::{failed_batch, Outcome};
        let m = "the baseline does not reproduce the recording: allocation 0x1000: byte 4 outside tolerance";
        assert_eq!(
            failed_batch(m, true),
            Outcome::WrongOutput {
                message: "allocation 0x1000: byte 4 outside tolerance".into()
            }
        );
        assert!(matches!(failed_batch(m, false), Outcome::Crashed { .. }));
        assert!(matches!(
            failed_batch("the replay worker died", true),
            Outcome::Crashed { .. }
        ));
    }

    #[test]
    fn a_verdict_is_kept_only_where_the_recording_was_checked() {
        let yes = Verdict::Reproduces.verification("H100").unwrap();
        assert!(yes.reproduces && yes.reason.is_none() && yes.gpu == "H100");
        let no = Verdict::Irreproducible("differs at byte 6".into())
            .verification("H100")
            .unwrap();
        assert!(!no.reproduces && no.reason.as_deref() == Some("differs at byte 6"));
        assert!(Verdict::NotChecked("no IR".into())
            .verification("H100")
            .is_none());
        let d = crate::determinism::Decision {
            reason: crate::determinism::FLOAT_ATOMICS.into(),
            learned: Vec::new(),
            user: Some("f32:rel=1e-5".parse().unwrap()),
            runs: 2,
        };
        let v = Verdict::NotDeterministic(d.clone());
        assert!(v.reproduces() && !Verdict::Irreproducible(String::new()).reproduces());
        let kept = v.verification("H100").unwrap();
        assert!(kept.reproduces && kept.not_deterministic == Some(d.text()));
        assert_eq!(
            super::with_decision(Verdict::Reproduces, Some(d.clone())),
            Verdict::NotDeterministic(d.clone())
        );
        assert_eq!(
            super::with_decision(Verdict::Irreproducible("x".into()), Some(d)),
            Verdict::Irreproducible("x".into())
        );
    }
}
