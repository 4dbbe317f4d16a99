//! The loop on one kernel: resume from the attempt log, judge the variants not yet measured
//! here, then ask the proposer for rewrites of the archive's elites until the budget, the
//! proposer or Ctrl-C stops it. Each step is an event appended to the log before it counts.

use crate::archive::{self, Archive, Elite};
use crate::error::EvolveError;
use crate::judge::{self, Judge};
use crate::kernel::KernelHash;
use crate::params;
use crate::propose::{Example, LaunchInfo, Proposal, ProposeError, Proposer, Request};
use crate::rewrite::{Compiled, Source};
use crate::rules;
use crate::store::attempts::{
    best_of, builds_to_judge, fold, Attempt, Build, Event, Verdict, What, FORMAT,
};
use crate::store::{KernelRecord, Store, StoreError};
use rand::SeedableRng;

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
    /// Of the compiled ones not measured yet, measure only this one (its index among them, in
    /// their order), and propose nothing: the deadline's rewrite arm judges the one worth most
    /// a second (`remix::rewrites::choose_next`). None: all, in order.
    pub only: Option<usize>,
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

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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
        let mut pending: Vec<Attempt> = run
            .attempts()
            .into_iter()
            .filter(|a| a.compiled.is_some() && a.verdict(Some(&gpu)).is_none())
            .collect();
        if let Some(i) = opts.only {
            pending = pending.into_iter().nth(i).into_iter().collect();
        }
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
    while opts.propose && opts.only.is_none() && run.attempts().len() < opts.budget as usize {
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
            Some(Source::open(kernel, opts.compile_timeout)?)
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
                variant: km.hash.clone(),
                diff: diff.clone(),
            });
        }
        let first = builds[0].clone();
        if first.values.is_empty() {
            builds.clear();
        }
        let cell = self.cell_of(&first.variant);
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
                let record = self.store.kernel(variant)?;
                judge.judge(self.store, &record, &a.rewrite)
            }
            None => {
                let attempts = self.attempts();
                let chosen = builds_to_judge(a, &attempts, &judge.gpu());
                let mut builds = Vec::new();
                for b in chosen {
                    builds.push(judge::BuildToJudge {
                        values: b.values.clone(),
                        record: self.store.kernel(&b.variant)?,
                        code: format!("{}{}", params::defines(&b.values), a.rewrite),
                    });
                }
                progress(&match builds.len() {
                    n if n < a.builds.len() => format!(
                        "attempt {}: measuring {n} of its {} builds: those at the knobs its parent won with ({})",
                        a.id,
                        a.builds.len(),
                        crate::store::attempts::words(&builds[0].values)
                    ),
                    n if judge.one_knob_at_a_time(n) => format!(
                        "attempt {}: searching its {n} builds one knob at a time, about {} measured ({})",
                        a.id,
                        crate::store::attempts::coordinate_builds(
                            &builds.iter().map(|b| &b.values).collect::<Vec<_>>()
                        ),
                        knob_ranges(&a.builds)
                    ),
                    n => format!(
                        "attempt {}: measuring its {n} builds ({})",
                        a.id,
                        knob_ranges(&a.builds)
                    ),
                });
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
            None => Some(self.kernel.hash.clone()),
            Some(id) => self.attempt(id).compiled.map(|c| c.0),
        };
        match hash.and_then(|h| self.o3_ptx(&h)) {
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
                .kernel(&k)
                .map_or(k.to_string(), |r| r.signature.demangled);
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
