//! `r3 evolve`: source rewrites on top of the compiler search. An outer loop asks a proposer
//! (a model through an OpenAI-compatible endpoint, or r3's own rules) for rewrites of a
//! kernel's code (the `__global__` function and the device functions only it calls), checks
//! each (`guard`), splices it into a private copy of the translation unit (`source`),
//! compiles that with the kernel's recorded command (`compile`), stores the kernel as a
//! variant, and has a `Judge` tune and validate it against the parent's recorded launches.
//! Variants that pass enter a MAP-Elites `archive`, parents of the next attempts.
//!
//! r3 never edits the user's source: the result is a unified diff in the store and the report.
//! Every step of every attempt is an event in `evolve/<kernel>/attempts.jsonl`; a killed run
//! resumes from it (a proposal already answered is not asked for again).

use r3_driver as driver;
use r3_ir as ir;
use r3_ir::lower;
use r3_kernel as kernel;
use r3_passes as passes;
use r3_passes::candidate;
use r3_ptx as ptx;
use r3_remix as remix;
use r3_replay as replay;
use r3_store as store;

pub mod archive;
pub mod compile;
pub mod each;
pub mod guard;
pub mod judge;
pub mod kernel_text;
pub mod llm;
pub mod params;
pub mod rules;
pub mod source;
pub mod tiling;
pub mod vector;

use crate::kernel::KernelHash;
use crate::store::{KernelRecord, Store, StoreError};
use archive::{Archive, Elite};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

pub const FORMAT: u32 = 1;

/// One line of the attempts log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub format: u32,
    /// The attempt the event belongs to (0: the original code, in the `origin` event).
    pub attempt: u32,
    pub unix_ms: u64,
    #[serde(flatten)]
    pub what: What,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum What {
    /// The code being evolved, as it was when the first run started.
    Origin {
        file: PathBuf,
        code: String,
        cell: String,
    },
    /// A rewrite was proposed (`answer` is the model's whole text; `prompt_sha` the BLAKE3 of
    /// the prompt it was asked, which holds no key).
    Proposed {
        parent: Option<u32>,
        proposer: String,
        label: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repair_of: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_sha: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        tokens: u64,
        rewrite: String,
        /// Facts the rewrite is sound under only (`rules::Facts`), checked against the
        /// recordings before it is measured.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        requires: Vec<String>,
    },
    /// The proposer gave nothing usable (the model failed after its retries).
    ProposerFailed {
        proposer: String,
        message: String,
    },
    /// Refused before compiling.
    Refused {
        reason: String,
    },
    CompileFailed {
        diagnostics: String,
    },
    /// Compiled and stored as kernel `variant`; `diff` is against the user's file. A rewrite
    /// with knobs (`params`) compiles once per value combination: `builds`, whose first is
    /// `variant` and `diff`.
    Compiled {
        variant: String,
        diff: String,
        cell: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        builds: Vec<Build>,
    },
    Judged {
        gpu: String,
        verdict: Verdict,
    },
}

/// One build of a rewrite with knobs: the values it was compiled with, the variant kernel it
/// gave, and its diff against the user's file (the template with these values `#define`d).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Build {
    pub values: params::Values,
    pub variant: String,
    pub diff: String,
}

/// What measuring a variant gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Verdict {
    /// Valid on every recorded launch; its best configuration (`pipeline`) timed interleaved
    /// against the original kernel's best compiler-only configuration (`reference_us`).
    Valid {
        speedup: f64,
        time_us: f64,
        reference_us: f64,
        /// The rewrite's best configuration, in words (`judge::describe`), and in full.
        pipeline: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        candidate: Option<crate::candidate::Candidate>,
        trials: u32,
        #[serde(default)]
        simulated: bool,
        /// For a rewrite with knobs: the values of the build that won (its `Build`).
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        values: params::Values,
    },
    /// Wrong output, crash, timeout or no configuration that compiles.
    Failed { why: String, message: String },
}

impl Verdict {
    pub fn speedup(&self) -> Option<f64> {
        match self {
            Verdict::Valid { speedup, .. } => Some(*speedup),
            Verdict::Failed { .. } => None,
        }
    }
}

/// An attempt, folded from its events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attempt {
    pub id: u32,
    pub parent: Option<u32>,
    pub proposer: String,
    pub label: String,
    pub repair_of: Option<u32>,
    pub rewrite: String,
    pub tokens: u64,
    pub requires: Vec<String>,
    pub failed: Option<String>,
    pub refused: Option<String>,
    pub diagnostics: Option<String>,
    /// (variant hash, diff, cell)
    pub compiled: Option<(String, String, String)>,
    /// A rewrite with knobs: every build (the first is `compiled`'s).
    pub builds: Vec<Build>,
    pub judged: Vec<(String, Verdict)>,
}

impl Attempt {
    /// Its proposer and what it started from: "rules: unroll-4 on #1", "llm: m (repair of #5)".
    pub fn title(&self) -> String {
        match (self.repair_of, self.parent) {
            (Some(r), _) => format!("{} (repair of #{r})", self.label),
            (None, Some(p)) => format!("{} on #{p}", self.label),
            (None, None) if self.label.is_empty() => self.proposer.clone(),
            (None, None) => self.label.clone(),
        }
    }

    /// One line on what became of it.
    pub fn outcome(&self, gpu: Option<&str>) -> String {
        if let Some(m) = &self.failed {
            return format!("the proposer failed: {m}");
        }
        if let Some(r) = &self.refused {
            return format!("refused: {r}");
        }
        if let Some(d) = &self.diagnostics {
            return format!(
                "did not compile: {}",
                d.lines()
                    .find(|l| l.contains("error"))
                    .unwrap_or("see diagnostics")
            );
        }
        match self.verdict(gpu) {
            Some(Verdict::Valid {
                speedup, pipeline, values, ..
            }) if !values.is_empty() => format!("valid: {speedup:.3}x the original's best compiler-only build (rewrite built with {}, {pipeline})", params::words(values)),
            Some(Verdict::Valid {
                speedup, pipeline, ..
            }) => format!("valid: {speedup:.3}x the original's best compiler-only build (rewrite built with {pipeline})"),
            Some(Verdict::Failed { why, message }) => format!("{why}: {message}"),
            None if self.compiled.is_some() => "compiled, not measured yet".into(),
            None => "interrupted before it compiled".into(),
        }
    }

    /// The variant and diff that ship: for a rewrite with knobs, the build whose values won
    /// on `gpu` (the first build until one has).
    pub fn shipped_build(&self, gpu: Option<&str>) -> Option<(String, String)> {
        let (variant, diff, _) = self.compiled.as_ref()?;
        let won = match self.verdict(gpu) {
            Some(Verdict::Valid { values, .. }) if !values.is_empty() => {
                self.builds.iter().find(|b| b.values == *values)
            }
            _ => None,
        };
        Some(won.map_or_else(
            || (variant.clone(), diff.clone()),
            |b| (b.variant.clone(), b.diff.clone()),
        ))
    }

    pub fn verdict(&self, gpu: Option<&str>) -> Option<&Verdict> {
        self.judged
            .iter()
            .rev()
            .find(|(g, _)| gpu.is_none_or(|x| x == g))
            .map(|(_, v)| v)
    }
}

/// The attempts a log holds, and its origin event.
pub fn fold(events: &[Event]) -> (Option<(PathBuf, String, String)>, Vec<Attempt>) {
    let mut origin = None;
    let mut out: Vec<Attempt> = Vec::new();
    for e in events {
        if let What::Origin { file, code, cell } = &e.what {
            origin = Some((file.clone(), code.clone(), cell.clone()));
            continue;
        }
        if !out.iter().any(|a| a.id == e.attempt) {
            out.push(Attempt {
                id: e.attempt,
                ..Default::default()
            });
        }
        let a = out.iter_mut().find(|a| a.id == e.attempt).expect("pushed");
        match &e.what {
            What::Origin { .. } => {}
            What::Proposed {
                parent,
                proposer,
                label,
                repair_of,
                tokens,
                rewrite,
                requires,
                ..
            } => {
                a.requires = requires.clone();
                a.parent = *parent;
                a.proposer = proposer.clone();
                a.label = label.clone();
                a.repair_of = *repair_of;
                a.tokens = *tokens;
                a.rewrite = rewrite.clone();
            }
            What::ProposerFailed { proposer, message } => {
                a.proposer = proposer.clone();
                a.failed = Some(message.clone());
            }
            What::Refused { reason } => a.refused = Some(reason.clone()),
            What::CompileFailed { diagnostics } => a.diagnostics = Some(diagnostics.clone()),
            What::Compiled {
                variant,
                diff,
                cell,
                builds,
            } => {
                a.compiled = Some((variant.clone(), diff.clone(), cell.clone()));
                a.builds = builds.clone();
            }
            What::Judged { gpu, verdict } => a.judged.push((gpu.clone(), verdict.clone())),
        }
    }
    (origin, out)
}

/// What a proposer is told.
pub struct Request<'a> {
    pub kernel: &'a KernelRecord,
    pub file: &'a std::path::Path,
    /// The code to rewrite: the parent's region.
    pub code: &'a str,
    pub parent: Option<u32>,
    pub facts: &'a rules::Facts,
    pub launch: &'a LaunchInfo,
    /// Statistics of the parent's -O3 PTX, in words.
    pub ptx_stats: &'a str,
    /// The original kernel's best compiler-only configuration, in words.
    pub pipeline: &'a str,
    pub history: &'a [Attempt],
    pub examples: &'a [Example],
}

/// The recorded launch, for prompts.
#[derive(Debug, Clone, Default)]
pub struct LaunchInfo {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u64,
    pub gpu: String,
}

/// A winning rewrite of another kernel, offered to the model as an example.
#[derive(Debug, Clone)]
pub struct Example {
    pub kernel: String,
    pub before: String,
    pub after: String,
    pub speedup: f64,
}

pub struct Proposal {
    pub label: String,
    pub rewrite: String,
    /// Facts it is sound under only (`rules::Facts`).
    pub requires: Vec<String>,
    pub prompt_sha: Option<String>,
    pub answer: Option<String>,
    pub tokens: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// This proposal failed (recorded as a failed attempt; the loop goes on).
    #[error("{0}")]
    Failed(String),
    /// The run cannot ask for more (the token budget is spent).
    #[error("{0}")]
    Exhausted(String),
}

pub trait Proposer {
    /// `rules` or `llm:<model>`: what the attempts record as the proposer.
    fn name(&self) -> String;
    /// A rewrite of `req.code`, or None when this proposer has nothing (more) for this parent.
    fn propose(&mut self, req: &Request) -> Result<Option<Proposal>, ProposeError>;
    /// A corrected `failed` given the compiler's `diagnostics`; None where it cannot repair.
    fn repair(
        &mut self,
        _req: &Request,
        _failed: &str,
        _diagnostics: &str,
    ) -> Result<Option<Proposal>, ProposeError> {
        Ok(None)
    }
    /// Tokens used so far and the budget, for the summary (None for proposers without).
    fn tokens(&self) -> Option<(u64, u64)> {
        None
    }
    /// Whether it reads the request's context beyond the code (PTX statistics cost a
    /// lowering of the parent).
    fn reads_context(&self) -> bool {
        true
    }
}

/// Measures variants: tunes each against the parent kernel's recorded launch and compares it
/// with the original's best compiler-only configuration.
pub trait Judge {
    /// The GPU (or "simulated") verdicts are kept under.
    fn gpu(&self) -> String;
    /// The original kernel's best compiler-only configuration, in words.
    fn reference(&self) -> String;
    fn judge(&mut self, store: &Store, variant: &KernelRecord, code: &str) -> Verdict;
    /// The builds of a rewrite with knobs (each with its values, variant and code as
    /// compiled): the verdict of the best, with its values. By default each build is judged
    /// in full.
    fn judge_builds(&mut self, store: &Store, builds: &[judge::BuildToJudge]) -> Verdict {
        judge::each_in_full(self, store, builds)
    }
}

/// The rule-based proposer.
pub struct RuleProposer;

impl Proposer for RuleProposer {
    fn name(&self) -> String {
        "rules".into()
    }

    fn reads_context(&self) -> bool {
        false
    }

    fn propose(&mut self, req: &Request) -> Result<Option<Proposal>, ProposeError> {
        for r in rules::RULES {
            let label = format!("rules: {}", r.name);
            let tried = req
                .history
                .iter()
                .any(|a| a.parent == req.parent && a.label == label);
            if tried {
                continue;
            }
            if let Some(rewrite) = r.apply(req.code, req.facts) {
                return Ok(Some(Proposal {
                    label,
                    rewrite,
                    requires: r.requires.iter().map(|f| f.to_string()).collect(),
                    prompt_sha: None,
                    answer: None,
                    tokens: 0,
                }));
            }
        }
        Ok(None)
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Attempts in all (repairs included), over every run of this kernel.
    pub budget: u32,
    /// Repair rounds after a compile error.
    pub repairs: u32,
    pub seed: u64,
    pub resume: bool,
    pub compile_timeout: std::time::Duration,
    /// Propose new rewrites (off: only measure the compiled ones not measured yet).
    pub propose: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EvolveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Source(#[from] source::SourceError),
    #[error("kernel {kernel}: {msg}")]
    Compile { kernel: String, msg: String },
    #[error("kernel {kernel}: {path} has changed since the kernel was stored (its kernel now hashes to {now}, the store's is {was}); fix: rebuild with r3-clang++ and record again, so that the rewrite's diff applies to the code that was measured")]
    SourceChanged {
        kernel: String,
        path: String,
        was: String,
        now: String,
    },
    #[error("kernel {kernel}: {path} already holds {n} attempts; fix: --resume to continue them, or move the file away to start over")]
    Exists {
        kernel: String,
        path: String,
        n: usize,
    },
    #[error("kernel {kernel}: no rewrites are stored to measure; fix: run `r3 evolve` without --measure-only where its source and clang are")]
    NothingToMeasure { kernel: String },
    #[error("kernel {kernel}: {path}: cannot read the source ({msg}); fix: run r3 evolve where the program was built, with its sources in place")]
    Read {
        kernel: String,
        path: String,
        msg: String,
    },
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub attempts: Vec<Attempt>,
    pub new_attempts: u32,
    pub judged: u32,
    pub stop: String,
    pub tokens: Option<(u64, u64)>,
    pub cells: usize,
}

impl Summary {
    /// The fastest valid attempt on `gpu`.
    pub fn best(&self, gpu: Option<&str>) -> Option<&Attempt> {
        best_of(&self.attempts, gpu)
    }
}

pub fn best_of<'a>(attempts: &'a [Attempt], gpu: Option<&str>) -> Option<&'a Attempt> {
    attempts
        .iter()
        .filter(|a| a.verdict(gpu).and_then(Verdict::speedup).is_some())
        .max_by(|a, b| {
            let s = |x: &Attempt| x.verdict(gpu).and_then(Verdict::speedup).unwrap_or(0.0);
            // On a tie the earlier (fewer changes) wins.
            s(a).total_cmp(&s(b)).then(b.id.cmp(&a.id))
        })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The kernel's source file as the loop edits (copies of) it.
struct Source {
    original: String,
    region: source::Region,
    compiler: compile::Compiler,
}

impl Source {
    fn open(kernel: &KernelRecord, opts: &Options) -> Result<Source, EvolveError> {
        let name = kernel.signature.demangled.clone();
        let compiler =
            compile::Compiler::for_kernel(kernel, opts.compile_timeout).map_err(|e| {
                EvolveError::Compile {
                    kernel: name.clone(),
                    msg: e.to_string(),
                }
            })?;
        let path = compiler.source().to_owned();
        let original = std::fs::read_to_string(&path).map_err(|e| EvolveError::Read {
            kernel: name.clone(),
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        let line = kernel.signature.source.as_ref().map_or(0, |s| s.line);
        let region = source::region(
            &original,
            &path.display().to_string(),
            &crate::kernel::unqualified_name(&kernel.signature.demangled),
            line,
        )?;
        let src = Source {
            original,
            region,
            compiler,
        };
        src.check_unchanged(kernel)?;
        Ok(src)
    }

    /// The file must still compile to the stored kernel, or diffs would not apply to the code
    /// that was measured.
    fn check_unchanged(&self, kernel: &KernelRecord) -> Result<(), EvolveError> {
        let km = self
            .compiler
            .compile(&self.original, &kernel.signature.name)
            .map_err(|e| EvolveError::Compile {
                kernel: kernel.signature.demangled.clone(),
                msg: format!("compiling the unchanged source: {e}"),
            })?;
        if km.hash != kernel.hash {
            return Err(EvolveError::SourceChanged {
                kernel: kernel.signature.demangled.clone(),
                path: self.compiler.source().display().to_string(),
                was: kernel.hash.to_string(),
                now: km.hash.to_string(),
            });
        }
        Ok(())
    }

    /// What compiling `rewrite` gives: the variant's module and diff, or the event that says
    /// why there is none.
    /// A rewrite with knobs compiles once per value combination its constraints admit for
    /// the recorded blocks (`blocks`).
    fn compile(
        &self,
        kernel: &KernelRecord,
        rewrite: &str,
        blocks: &[[u32; 3]],
    ) -> Result<Compiled, EvolveError> {
        let checked = match guard::check(&self.original, &self.region, rewrite) {
            Ok(c) => c,
            Err(reason) => return Ok(Compiled::Not(What::Refused { reason })),
        };
        if !checked.template.has_knobs() {
            return self.compile_text(kernel, &checked, "", "");
        }
        let values = match checked.template.builds(blocks) {
            Ok(v) => v,
            Err(reason) => return Ok(Compiled::Not(What::Refused { reason })),
        };
        let mut builds: Vec<(params::Values, crate::kernel::KernelModule, String)> = Vec::new();
        let mut first_failure = None;
        let compiled = self.compile_each(kernel, &checked, &values);
        for (v, c) in values.into_iter().zip(compiled) {
            match c? {
                Compiled::Variant(km, diff) => {
                    // Values the code does not tell apart build once.
                    if !builds.iter().any(|(_, k, _)| k.hash == km.hash) {
                        builds.push((v, km, diff));
                    }
                }
                Compiled::Not(what) => {
                    first_failure.get_or_insert((v, what));
                }
                Compiled::Builds(_) => unreachable!("compile_text builds one variant"),
            }
        }
        if builds.is_empty() {
            let (v, what) = first_failure.expect("at least one combination");
            return Ok(Compiled::Not(match what {
                What::CompileFailed { diagnostics } => What::CompileFailed {
                    diagnostics: format!("with {}: {diagnostics}", params::words(&v)),
                },
                other => other,
            }));
        }
        Ok(Compiled::Builds(builds))
    }

    /// Each combination of `values` compiled, in their order; as many compiles at once as
    /// there are cores, since a template asks for up to 64 and each is a whole clang run.
    fn compile_each(
        &self,
        kernel: &KernelRecord,
        checked: &guard::Checked,
        values: &[params::Values],
    ) -> Vec<Result<Compiled, EvolveError>> {
        let undef = checked.template.undefines();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<std::sync::Mutex<Option<Result<Compiled, EvolveError>>>> =
            values.iter().map(|_| Default::default()).collect();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(values.len());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(v) = values.get(i) else { break };
                    let c = self.compile_text(kernel, checked, &params::defines(v), &undef);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
                });
            }
        });
        slots
            .into_iter()
            .map(|s| {
                s.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("every combination is compiled")
            })
            .collect()
    }

    /// Splices the checked code (between `before` and `after`) and compiles it.
    fn compile_text(
        &self,
        kernel: &KernelRecord,
        checked: &guard::Checked,
        before: &str,
        after: &str,
    ) -> Result<Compiled, EvolveError> {
        let text = self.region.splice_between(
            &self.original,
            &checked.text,
            &checked.functions,
            before,
            after,
        );
        let what = match self.compiler.compile(&text, &kernel.signature.name) {
            Err(compile::CompileError::Diagnostics(d)) => What::CompileFailed { diagnostics: d },
            Err(e @ compile::CompileError::TimedOut(_)) => What::CompileFailed {
                diagnostics: e.to_string(),
            },
            Err(e @ compile::CompileError::Signature(_)) => What::Refused {
                reason: e.to_string(),
            },
            Err(compile::CompileError::Setup(msg)) => {
                return Err(EvolveError::Compile {
                    kernel: kernel.signature.demangled.clone(),
                    msg,
                })
            }
            Ok(km) if km.signature.params != kernel.signature.params => What::Refused {
                reason: "the kernel's parameters changed in the compiled code".into(),
            },
            Ok(km) => {
                let diff = unified_diff(
                    &self.original,
                    &text,
                    &kernel.compile.cwd,
                    self.compiler.source(),
                );
                return Ok(Compiled::Variant(km, diff));
            }
        };
        Ok(Compiled::Not(what))
    }
}

enum Compiled {
    Variant(crate::kernel::KernelModule, String),
    /// A rewrite with knobs: each build that compiled, with its values and diff.
    Builds(Vec<(params::Values, crate::kernel::KernelModule, String)>),
    Not(What),
}

/// What asking for a rewrite of one parent came to.
enum Step {
    /// An attempt was made (and its repairs).
    Proposed,
    /// The proposer has nothing for this parent.
    Nothing,
    /// The proposer can give no more (its token budget is spent).
    Exhausted(String),
}

/// Everything one kernel's loop works with.
struct Run<'a> {
    store: &'a Store,
    kernel: &'a KernelRecord,
    /// The user's file, where rewrites are proposed (not needed to measure stored ones).
    src: Option<Source>,
    facts: rules::Facts,
    launch: LaunchInfo,
    /// The block of every recorded launch: a template's constraints must hold for each.
    blocks: Vec<[u32; 3]>,
    examples: Vec<Example>,
    log: crate::store::trials::JsonLog<Event>,
    events: Vec<Event>,
    archive: Archive,
    /// Ctrl-C: a verdict reached after it (an inner search cut short) is not recorded, so
    /// `--resume` measures that variant again.
    stop: &'a std::sync::atomic::AtomicBool,
}

/// Runs the loop on one kernel.
pub fn evolve<'j, 's>(
    store: &'s Store,
    kernel: &'s KernelRecord,
    proposer: &mut dyn Proposer,
    mut judge: Option<&mut (dyn Judge + 'j)>,
    opts: &Options,
    stop: &'s std::sync::atomic::AtomicBool,
    mut progress: impl FnMut(&str),
) -> Result<Summary, EvolveError> {
    let name = kernel.signature.demangled.clone();
    let events: Vec<Event> = store.attempts(&kernel.hash)?;
    if !events.is_empty() && !opts.resume {
        return Err(EvolveError::Exists {
            kernel: name,
            path: store.attempts_path(&kernel.hash).display().to_string(),
            n: fold(&events).1.len(),
        });
    }
    let mut run = Run::open(store, kernel, events, opts, stop)?;
    let mut summary = Summary::default();
    // Compiled, not yet measured here: first.
    if let Some(j) = judge.as_deref_mut() {
        let gpu = j.gpu();
        let pending: Vec<Attempt> = run
            .attempts()
            .into_iter()
            .filter(|a| a.compiled.is_some() && a.verdict(Some(&gpu)).is_none())
            .collect();
        for a in pending {
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                break;
            }
            run.judge_attempt(&a, j, &mut progress)?;
            summary.judged += 1;
        }
    }
    summary.stop = "budget".into();
    let mut rng_round = 0u64;
    while opts.propose && run.attempts().len() < opts.budget as usize {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            summary.stop = "interrupted".into();
            break;
        }
        rng_round += 1;
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            opts.seed ^ ((run.events.len() as u64) << 20) ^ rng_round,
        );
        let parents = run.archive.shuffled(&mut rng);
        let mut proposed = false;
        for parent in parents {
            match run.propose_from(&parent, proposer, judge.as_deref_mut(), opts, &mut progress)? {
                Step::Proposed => {
                    proposed = true;
                    summary.new_attempts += 1;
                    break;
                }
                Step::Nothing => continue,
                Step::Exhausted(why) => {
                    summary.stop = why;
                    break;
                }
            }
        }
        if summary.stop != "budget" {
            break;
        }
        if !proposed {
            summary.stop = format!("{} has nothing more to propose", proposer.name());
            break;
        }
    }
    summary.attempts = run.attempts();
    summary.tokens = proposer.tokens();
    summary.cells = run.archive.len();
    Ok(summary)
}

impl<'a> Run<'a> {
    fn open(
        store: &'a Store,
        kernel: &'a KernelRecord,
        events: Vec<Event>,
        opts: &Options,
        stop: &'a std::sync::atomic::AtomicBool,
    ) -> Result<Run<'a>, EvolveError> {
        let has_origin = fold(&events).0.is_some();
        if !opts.propose && !has_origin {
            return Err(EvolveError::NothingToMeasure {
                kernel: kernel.signature.demangled.clone(),
            });
        }
        let src = if opts.propose {
            Some(Source::open(kernel, opts)?)
        } else {
            None
        };
        let recordings = store.launches_of(&kernel.hash)?;
        let launch = recordings
            .first()
            .map(|r| LaunchInfo {
                grid: r.launch.grid,
                block: r.launch.block,
                shared_bytes: r.launch.shared_bytes,
                gpu: r
                    .launch
                    .gpu
                    .clone()
                    .unwrap_or_else(|| "an NVIDIA GPU".into()),
            })
            .unwrap_or_default();
        let mut blocks: Vec<[u32; 3]> = recordings.iter().map(|r| r.launch.block).collect();
        blocks.sort_unstable();
        blocks.dedup();
        let facts = rules::Facts {
            pointers_disjoint: pointers_disjoint(kernel, &recordings),
            block: match blocks.as_slice() {
                [one] => Some(*one),
                _ => None,
            },
        };
        let log = store.open_attempts(&kernel.hash)?;
        let mut run = Run {
            store,
            kernel,
            src,
            facts,
            launch,
            blocks,
            examples: examples(store, &kernel.hash)?,
            log,
            events,
            archive: Archive::default(),
            stop,
        };
        run.start()?;
        Ok(run)
    }

    /// Writes the origin event on a first run, and fills the archive from the log.
    fn start(&mut self) -> Result<(), EvolveError> {
        let (code, cell) = match (fold(&self.events).0, &self.src) {
            (Some((_, code, cell)), _) => (code, cell),
            (None, Some(src)) => {
                let code = src.region.text(&src.original);
                let file = src.compiler.source().to_owned();
                let cell = self.cell_of(&self.kernel.hash.clone());
                self.append(
                    0,
                    What::Origin {
                        file,
                        code: code.clone(),
                        cell: cell.clone(),
                    },
                )?;
                (code, cell)
            }
            (None, None) => unreachable!("Run::open refuses to measure a log without origin"),
        };
        self.archive.offer(
            &cell,
            Elite {
                attempt: None,
                code,
                speedup: Some(1.0),
            },
        );
        for a in self.attempts() {
            self.offer(&a, None);
        }
        Ok(())
    }

    fn attempts(&self) -> Vec<Attempt> {
        fold(&self.events).1
    }

    fn append(&mut self, attempt: u32, what: What) -> Result<(), EvolveError> {
        let e = Event {
            format: FORMAT,
            attempt,
            unix_ms: now_ms(),
            what,
        };
        self.log.append(&e)?;
        self.events.push(e);
        Ok(())
    }

    /// The -O3 PTX of a stored kernel (this kernel or a variant), lowered in a child process:
    /// a rewrite is code LLVM has not seen.
    fn o3_ptx(&self, hash: &KernelHash) -> Option<String> {
        let job = crate::lower::isolated::LowerJob {
            bitcode: self.store.kernel_dir(hash).join("module.bc"),
            kernel_hash: hash.clone(),
            candidate: crate::candidate::Candidate::baseline(),
            target: crate::lower::Codegen {
                sm: self.kernel.signature.arch.clone(),
                ptx: None,
                opt_level: 3,
            },
            mutation: None,
        };
        crate::lower::isolated::lower_isolated(&job)
            .ok()
            .map(|l| l.ptx)
    }

    /// The archive cell of a stored kernel's -O3 code.
    fn cell_of(&self, hash: &KernelHash) -> String {
        self.o3_ptx(hash)
            .map_or_else(|| "unknown".into(), |ptx| archive::cell(&ptx))
    }

    fn offer(&mut self, a: &Attempt, gpu: Option<&str>) {
        let Some((_, _, cell)) = &a.compiled else {
            return;
        };
        let speedup = a.verdict(gpu).map(Verdict::speedup);
        if speedup == Some(None) {
            return; // failed
        }
        self.archive.offer(
            cell,
            Elite {
                attempt: Some(a.id),
                code: a.rewrite.clone(),
                speedup: speedup.flatten(),
            },
        );
    }

    /// One proposal (and its repairs) from `parent`.
    fn propose_from<'j>(
        &mut self,
        parent: &Elite,
        proposer: &mut dyn Proposer,
        mut judge: Option<&mut (dyn Judge + 'j)>,
        opts: &Options,
        progress: &mut impl FnMut(&str),
    ) -> Result<Step, EvolveError> {
        let history = self.attempts();
        let stats = if proposer.reads_context() {
            self.stats_of(parent)
        } else {
            String::new()
        };
        let pipeline = judge
            .as_deref()
            .map_or_else(|| "not measured yet".to_owned(), |j| j.reference());
        let path = self
            .src
            .as_ref()
            .expect("proposing reads the source")
            .compiler
            .source()
            .to_owned();
        let (facts, launch, examples) = (self.facts, self.launch.clone(), self.examples.clone());
        let req = Request {
            kernel: self.kernel,
            file: &path,
            code: &parent.code,
            parent: parent.attempt,
            facts: &facts,
            launch: &launch,
            ptx_stats: &stats,
            pipeline: &pipeline,
            history: &history,
            examples: &examples,
        };
        let mut next = proposer.propose(&req);
        let mut repair_of = None;
        for round in 0..=opts.repairs {
            let id = self.attempts().len() as u32 + 1;
            let proposal = match next {
                Ok(Some(p)) => p,
                Ok(None) if round == 0 => return Ok(Step::Nothing),
                Ok(None) => return Ok(Step::Proposed),
                Err(ProposeError::Exhausted(why)) => return Ok(Step::Exhausted(why)),
                Err(ProposeError::Failed(message)) => {
                    progress(&format!(
                        "attempt {id}: {} failed: {message}",
                        proposer.name()
                    ));
                    self.append(
                        id,
                        What::ProposerFailed {
                            proposer: proposer.name(),
                            message,
                        },
                    )?;
                    return Ok(Step::Proposed);
                }
            };
            let a = self.try_proposal(
                id,
                parent.attempt,
                repair_of,
                proposer,
                proposal,
                judge.as_deref_mut(),
                progress,
            )?;
            let Some(diag) = a.diagnostics.clone() else {
                return Ok(Step::Proposed);
            };
            if round == opts.repairs || self.attempts().len() >= opts.budget as usize {
                return Ok(Step::Proposed);
            }
            repair_of = Some(id);
            next = proposer.repair(&req, &a.rewrite, &diag);
        }
        Ok(Step::Proposed)
    }

    #[allow(clippy::too_many_arguments)]
    fn try_proposal<'j>(
        &mut self,
        id: u32,
        parent: Option<u32>,
        repair_of: Option<u32>,
        proposer: &dyn Proposer,
        p: Proposal,
        judge: Option<&mut (dyn Judge + 'j)>,
        progress: &mut impl FnMut(&str),
    ) -> Result<Attempt, EvolveError> {
        self.append(
            id,
            What::Proposed {
                parent,
                proposer: proposer.name(),
                label: p.label.clone(),
                repair_of,
                prompt_sha: p.prompt_sha,
                answer: p.answer,
                tokens: p.tokens,
                rewrite: p.rewrite.clone(),
                requires: p.requires.clone(),
            },
        )?;
        self.compile_attempt(id, &p.rewrite)?;
        let a = self.attempt(id);
        progress(&format!(
            "attempt {id} ({}): {}",
            a.title(),
            a.outcome(None)
        ));
        if let (Some(j), Some(_)) = (judge, &a.compiled) {
            self.judge_attempt(&a, j, progress)?;
        } else {
            self.offer(&a, None);
        }
        Ok(self.attempt(id))
    }

    fn attempt(&self, id: u32) -> Attempt {
        self.attempts()
            .into_iter()
            .find(|a| a.id == id)
            .unwrap_or_default()
    }

    fn compile_attempt(&mut self, id: u32, rewrite: &str) -> Result<(), EvolveError> {
        let src = self
            .src
            .as_ref()
            .expect("proposals are compiled where the source is");
        let built = match src.compile(self.kernel, rewrite, &self.blocks)? {
            Compiled::Variant(km, diff) => vec![(params::Values::new(), km, diff)],
            Compiled::Builds(b) => b,
            Compiled::Not(what) => return self.append(id, what),
        };
        let mut builds = Vec::new();
        for (values, km, diff) in &built {
            self.store
                .put_variant(km, &self.kernel.compile, &self.kernel.hash)?;
            builds.push(Build {
                values: values.clone(),
                variant: km.hash.to_string(),
                diff: diff.clone(),
            });
        }
        let first = builds[0].clone();
        if first.values.is_empty() {
            builds.clear();
        }
        let cell = self.cell_of(&KernelHash::from(first.variant.as_str()));
        self.append(
            id,
            What::Compiled {
                variant: first.variant,
                diff: first.diff,
                cell,
                builds,
            },
        )
    }

    fn judge_attempt(
        &mut self,
        a: &Attempt,
        judge: &mut dyn Judge,
        progress: &mut impl FnMut(&str),
    ) -> Result<(), EvolveError> {
        let Some((variant, _, _)) = &a.compiled else {
            return Ok(());
        };
        let verdict = match self.unmet(&a.requires) {
            Some(message) => Verdict::Failed {
                why: "was not measured".into(),
                message,
            },
            None if a.builds.is_empty() => {
                let record = self.store.kernel(&KernelHash::from(variant.as_str()))?;
                judge.judge(self.store, &record, &a.rewrite)
            }
            None => {
                let mut builds = Vec::new();
                for b in &a.builds {
                    builds.push(judge::BuildToJudge {
                        values: b.values.clone(),
                        record: self.store.kernel(&KernelHash::from(b.variant.as_str()))?,
                        code: format!("{}{}", params::defines(&b.values), a.rewrite),
                    });
                }
                progress(&format!(
                    "attempt {}: measuring its {} builds ({})",
                    a.id,
                    builds.len(),
                    knob_ranges(&a.builds)
                ));
                judge.judge_builds(self.store, &builds)
            }
        };
        if self.stop.load(std::sync::atomic::Ordering::SeqCst) {
            progress(&format!(
                "attempt {}: interrupted while measuring; --resume measures it again",
                a.id
            ));
            return Ok(());
        }
        let gpu = judge.gpu();
        self.append(
            a.id,
            What::Judged {
                gpu: gpu.clone(),
                verdict,
            },
        )?;
        let a = self.attempt(a.id);
        progress(&format!(
            "attempt {} ({}): {}",
            a.id,
            a.title(),
            a.outcome(Some(&gpu))
        ));
        self.offer(&a, Some(&gpu));
        Ok(())
    }

    /// Why the recordings do not support a fact the rewrite needs, if they do not.
    fn unmet(&self, requires: &[String]) -> Option<String> {
        requires.iter().find_map(|f| match self.facts.holds(f) {
            Some(true) => None,
            Some(false) => Some(format!("it needs {f}, which the recordings refute")),
            None => Some(format!(
                "it needs {f}, and there are no recordings here to check it against"
            )),
        })
    }

    /// The parent's -O3 PTX statistics, in words, for the prompt.
    fn stats_of(&self, parent: &Elite) -> String {
        let hash = match parent.attempt {
            None => Some(self.kernel.hash.to_string()),
            Some(id) => self.attempt(id).compiled.map(|c| c.0),
        };
        match hash.and_then(|h| self.o3_ptx(&KernelHash::from(h.as_str()))) {
            Some(ptx) => ptx_words(&ptx),
            None => "not known".into(),
        }
    }
}

/// PTX statistics in words: instructions, global loads and stores, shared memory, loops.
pub fn ptx_words(ptx: &str) -> String {
    let count = |op: &str| {
        ptx.lines()
            .filter(|l| l.trim_start().starts_with(op))
            .count()
    };
    let stats = crate::ptx::stats::stats(ptx);
    let traits = crate::ptx::cfg::traits(ptx);
    format!(
        "{} instructions, {} global loads, {} global stores, {} shared-memory accesses, {} FMAs{}",
        stats.instructions,
        count("ld.global"),
        count("st.global"),
        count("ld.shared") + count("st.shared"),
        count("fma."),
        if traits.is_empty() {
            String::new()
        } else {
            format!("; traits: {}", traits.join(", "))
        }
    )
}

/// The diff from the user's file to the rewritten one, with the path as the compile names it.
pub fn unified_diff(old: &str, new: &str, cwd: &std::path::Path, file: &std::path::Path) -> String {
    let name = file.strip_prefix(cwd).unwrap_or(file).display().to_string();
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string()
}

/// Whether every recorded launch passed its pointer arguments into distinct allocations;
/// unknown without recordings, or where a recording's memory is not here (launches copied
/// without their snapshots: the fact is checked where the rewrite is measured).
fn pointers_disjoint(
    kernel: &KernelRecord,
    recs: &[crate::store::records::Recording],
) -> Option<bool> {
    if recs.is_empty() || recs.iter().any(|r| !r.has_memory()) {
        return None;
    }
    Some(recs.iter().all(|r| {
        let (Ok(args), Ok(pro)) = (r.launch.args(), r.prologue()) else {
            return false;
        };
        let mut seen = std::collections::HashSet::new();
        kernel
            .signature
            .params
            .iter()
            .filter(|p| p.pointer && p.byval.is_none())
            .all(|p| {
                let Some(slot) = r.launch.params.get(p.index as usize) else {
                    return false;
                };
                let Some(bytes) = args.get(slot.offset as usize..slot.offset as usize + 8) else {
                    return false;
                };
                let ptr = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
                if ptr == 0 {
                    return true;
                }
                pro.regions
                    .iter()
                    .position(|g| g.addr <= ptr && ptr < g.addr + g.size.max(1))
                    .is_some_and(|i| seen.insert(i))
            })
    }))
}

/// The values each knob took over a rewrite's builds: `TILE 8..32, VEC 1..4`.
fn knob_ranges(builds: &[Build]) -> String {
    let mut by: std::collections::BTreeMap<&str, Vec<i64>> = Default::default();
    for b in builds {
        for (k, v) in &b.values {
            by.entry(k).or_default().push(*v);
        }
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            v.dedup();
            format!(
                "{k} in {}",
                v.iter().map(i64::to_string).collect::<Vec<_>>().join("/")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The variant kernel attempt `id` on `kernel` compiled to, if it compiled (with knobs: the
/// build that won on `gpu`).
pub fn variant_of_attempt(
    store: &Store,
    kernel: &str,
    id: u32,
    gpu: Option<&str>,
) -> Option<String> {
    let events: Vec<Event> = store.attempts(kernel).ok()?;
    let (_, attempts) = fold(&events);
    attempts
        .into_iter()
        .find(|a| a.id == id)?
        .shipped_build(gpu)
        .map(|b| b.0)
}

/// The best valid rewrites of other kernels in the store, offered to the model.
fn examples(store: &Store, this: &str) -> Result<Vec<Example>, StoreError> {
    let mut out = Vec::new();
    for k in store.evolved()? {
        if k == this {
            continue;
        }
        let events: Vec<Event> = store.attempts(&k)?;
        let (origin, attempts) = fold(&events);
        let (Some((_, before, _)), Some(best)) = (origin, best_of(&attempts, None)) else {
            continue;
        };
        let speedup = best.verdict(None).and_then(Verdict::speedup).unwrap_or(0.0);
        if speedup >= 1.1 {
            let kernel = store
                .kernel(&KernelHash::from(k.as_str()))
                .map_or(k.clone(), |r| r.signature.demangled);
            out.push(Example {
                kernel,
                before,
                after: best.rewrite.clone(),
                speedup,
            });
        }
    }
    out.sort_by(|a, b| b.speedup.total_cmp(&a.speedup));
    out.truncate(2);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fold_into_attempts_and_round_trip_through_json() {
        let ev = |attempt, what| Event {
            format: FORMAT,
            attempt,
            unix_ms: 1,
            what,
        };
        let events = vec![
            ev(
                0,
                What::Origin {
                    file: "a.cu".into(),
                    code: "k".into(),
                    cell: "c".into(),
                },
            ),
            ev(
                1,
                What::Proposed {
                    parent: None,
                    proposer: "rules".into(),
                    label: "rules: restrict".into(),
                    repair_of: None,
                    prompt_sha: None,
                    answer: None,
                    tokens: 0,
                    rewrite: "k2".into(),
                    requires: vec!["pointers_disjoint".into()],
                },
            ),
            ev(
                1,
                What::Compiled {
                    variant: "ab".into(),
                    diff: "d".into(),
                    cell: "c".into(),
                    builds: vec![],
                },
            ),
            ev(
                1,
                What::Judged {
                    gpu: "g".into(),
                    verdict: Verdict::Valid {
                        speedup: 1.5,
                        time_us: 1.0,
                        reference_us: 1.5,
                        pipeline: "O3".into(),
                        candidate: None,
                        trials: 4,
                        simulated: false,
                        values: Default::default(),
                    },
                },
            ),
            ev(
                2,
                What::Proposed {
                    parent: Some(1),
                    proposer: "rules".into(),
                    label: "rules: unroll-4".into(),
                    repair_of: None,
                    prompt_sha: None,
                    answer: None,
                    tokens: 0,
                    rewrite: "k3".into(),
                    requires: vec![],
                },
            ),
            ev(
                2,
                What::Refused {
                    reason: "no".into(),
                },
            ),
        ];
        for e in &events {
            let back: Event = serde_json::from_str(&serde_json::to_string(e).unwrap()).unwrap();
            assert_eq!(&back, e);
        }
        let (origin, attempts) = fold(&events);
        assert_eq!(origin.unwrap().1, "k");
        assert_eq!(attempts.len(), 2);
        assert_eq!(best_of(&attempts, Some("g")).unwrap().id, 1);
        assert!(attempts[1].outcome(None).starts_with("refused: no"));
        assert!(attempts[0].outcome(Some("g")).contains("1.500x"));
        assert_eq!(attempts[1].title(), "rules: unroll-4 on #1");
    }
}
