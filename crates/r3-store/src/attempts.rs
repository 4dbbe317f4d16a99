//! `evolve/<kernel>/attempts.jsonl`: every attempt of `r3 evolve` on a kernel, as events
//! (proposed, refused, compiled, judged), appended and fsynced one by one like trials, so a
//! killed run resumes from the last event and an audit sees every prompt's hash and answer.
//! The format is here, with how a log folds into attempts, so that what reads the log (the
//! report, export) does not need the loop that writes it (`r3-evolve`).

use super::trials::{self, JsonLog};
use super::{Store, StoreError};
use crate::candidate::Candidate;
use crate::kernel::KernelHash;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The attempt log's format, in each event.
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
        variant: KernelHash,
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

/// Knob values of one build of a rewrite with knobs (`R3_PARAM`), by knob name.
pub type Values = BTreeMap<String, i64>;

/// Values in words, for reports: `TILE=16 VEC=4`.
pub fn words(v: &Values) -> String {
    v.iter()
        .map(|(k, x)| format!("{k}={x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// One build of a rewrite with knobs: the values it was compiled with, the variant kernel it
/// gave, and its diff against the user's file (the template with these values `#define`d).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Build {
    pub values: Values,
    pub variant: KernelHash,
    pub diff: String,
}

/// What measuring a variant gave. One a rewrite attempt, read and written a few times an
/// attempt: its size does not matter, and a boxed `Valid` would be matched in a dozen places.
#[allow(clippy::large_enum_variant)]
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
        candidate: Option<Candidate>,
        trials: u32,
        #[serde(default)]
        simulated: bool,
        /// For a rewrite with knobs: the values of the build that won (its `Build`).
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        values: Values,
        /// The reference's own speedup over the original's -O3 when it was judged (None in
        /// logs of earlier r3s). A later compiler search may find a faster reference; the
        /// rewrite's gain over -O3 stays this times `speedup`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reference_speedup: Option<f64>,
        /// The recorded launches it was checked on (none in logs of earlier r3s): where it
        /// may run is decided from these, not from the recordings the store holds when it is
        /// applied, which may have been added since or removed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        checked: Vec<Checked>,
    },
    /// Wrong output, crash, timeout or no configuration that compiles.
    Failed { why: String, message: String },
}

/// A recorded launch a rewrite was checked on: its shape and each parameter's bytes, in hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checked {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<String>,
}

impl Checked {
    /// Each argument's bytes in hex as a folded value writes them (`FoldedArg`).
    pub fn of(v: &crate::candidate::LaunchValues) -> Checked {
        Checked {
            grid: v.grid,
            block: v.block,
            args: v
                .args
                .iter()
                .map(|b| crate::candidate::FoldedArg::of_bytes(0, b).hex)
                .collect(),
        }
    }

    /// The launch's values; None where an argument is not whole bytes of hex (a damaged log).
    pub fn values(&self) -> Option<crate::candidate::LaunchValues> {
        let bytes = |hex: &String| {
            crate::candidate::FoldedArg {
                index: 0,
                hex: hex.clone(),
            }
            .bytes()
        };
        Some(crate::candidate::LaunchValues {
            grid: self.grid,
            block: self.block,
            args: self.args.iter().map(bytes).collect::<Option<_>>()?,
        })
    }
}

/// A rewrite's speedup over the original's -O3: `speedup` over the reference it was judged
/// against, times that reference's own speedup (`reference`), or, in logs of earlier r3s that
/// did not keep it, the kernel's best compiler-only speedup (`own_best`).
fn over_o3(speedup: f64, reference: Option<f64>, own_best: f64) -> f64 {
    reference.unwrap_or(own_best) * speedup
}

impl Verdict {
    pub fn speedup(&self) -> Option<f64> {
        match self {
            Verdict::Valid { speedup, .. } => Some(*speedup),
            Verdict::Failed { .. } => None,
        }
    }

    /// Its speedup over the kernel's best compiler-only build now (`own_best` over -O3): as
    /// judged, times the reference it was judged against over that best (in logs of earlier
    /// r3s, which did not keep the reference, as judged).
    pub fn speedup_over(&self, own_best: f64) -> Option<f64> {
        match self {
            Verdict::Valid {
                speedup,
                reference_speedup,
                ..
            } => Some(over_o3(*speedup, *reference_speedup, own_best) / own_best.max(1e-9)),
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
    pub compiled: Option<(KernelHash, String, String)>,
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
                speedup,
                pipeline,
                values,
                reference_speedup,
                ..
            }) => {
                let built = if values.is_empty() {
                    pipeline.clone()
                } else {
                    format!("{}, {pipeline}", words(values))
                };
                format!(
                    "valid: {speedup:.3}x {} (rewrite built with {built})",
                    reference_words(*reference_speedup)
                )
            }
            Some(Verdict::Failed { why, message }) => format!("{why}: {message}"),
            None if self.compiled.is_some() => "compiled, not measured yet".into(),
            None => "interrupted before it compiled".into(),
        }
    }

    /// The variant and diff that ship: for a rewrite with knobs, the build whose values won
    /// on `gpu` (the first build until one has).
    pub fn shipped_build(&self, gpu: Option<&str>) -> Option<(KernelHash, String)> {
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

/// What a verdict's speedup is over, by the reference's own speedup over -O3 when it was
/// judged: the original at -O3 is named so, since a judge falls back to it where the kernel's
/// best build cannot be had on its machine (nvcc's code with no nvcc).
fn reference_words(reference_speedup: Option<f64>) -> String {
    match reference_speedup {
        Some(r) if (r - 1.0).abs() < 5e-4 => "the original at -O3".to_owned(),
        Some(r) => format!("the original's best compiler-only build ({r:.3}x over -O3)"),
        None => "the original's best compiler-only build".to_owned(),
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

/// The fastest valid attempt on `gpu` (on any GPU with None).
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

/// The variant kernel attempt `id` on `kernel` compiled to, if it compiled (with knobs: the
/// build that won on `gpu`).
pub fn variant_of_attempt(
    store: &Store,
    kernel: &KernelHash,
    id: u32,
    gpu: Option<&str>,
) -> Option<KernelHash> {
    let events = store.attempts(kernel).ok()?;
    let (_, attempts) = fold(&events);
    attempts
        .into_iter()
        .find(|a| a.id == id)?
        .shipped_build(gpu)
        .map(|b| b.0)
}

/// The builds of `attempt` that a judge on `gpu` measures: where its parent's judge there chose
/// knob values, the builds at those values, else every build. A child is its parent's code
/// with one more edit; judging its every knob combination again took a 36-build template's
/// children 25 s each of a deadline for 1% (H200, 2026-11-30).
pub fn builds_to_judge<'a>(
    attempt: &'a Attempt,
    attempts: &[Attempt],
    gpu: &str,
) -> Vec<&'a Build> {
    let chosen = attempt
        .parent
        .and_then(|p| attempts.iter().find(|a| a.id == p))
        .and_then(|p| match p.verdict(Some(gpu)) {
            Some(Verdict::Valid { values, .. }) if !values.is_empty() => Some(values),
            _ => None,
        });
    let at: Vec<&Build> = attempt
        .builds
        .iter()
        .filter(|b| chosen.is_some_and(|v| b.values == *v))
        .collect();
    if at.is_empty() {
        attempt.builds.iter().collect()
    } else {
        at
    }
}

/// Builds of one attempt from which the deadline's judge searches a template's knobs one at a
/// time (`coordinate_builds`) instead of judging every combination: two_mm_d's 36 builds took
/// 60 s of a 600 s deadline judged all (H200, 2026-11-30), and it was never offered among all
/// programs.
pub const COORDINATE_FROM: usize = 13;

/// The builds a search of one knob at a time judges, one pass from a start: the start, then for
/// each knob every other value it takes (the others held). What the deadline prices a
/// template's attempt of `values` at where it has [`COORDINATE_FROM`] builds or more; all of
/// them under that.
pub fn coordinate_builds(values: &[&Values]) -> usize {
    if values.len() < COORDINATE_FROM {
        return values.len();
    }
    let knobs: std::collections::BTreeSet<&String> = values.iter().flat_map(|v| v.keys()).collect();
    let others: usize = knobs
        .iter()
        .map(|k| {
            let taken: std::collections::BTreeSet<i64> =
                values.iter().filter_map(|v| v.get(*k).copied()).collect();
            taken.len().saturating_sub(1)
        })
        .sum();
    (1 + others).min(values.len())
}

/// The knob values that won a valid verdict on `gpu` for other kernels' attempts with the same
/// knobs as `knobs` (a template's), the most often first: where a knob search starts.
pub fn values_won_elsewhere(
    store: &Store,
    gpu: &str,
    knobs: &std::collections::BTreeSet<&str>,
) -> Vec<Values> {
    let mut seen: BTreeMap<Values, usize> = BTreeMap::new();
    for kernel in store.evolved().unwrap_or_default() {
        let Ok(events) = store.attempts(&kernel) else {
            continue;
        };
        for a in fold(&events).1 {
            if let Some(Verdict::Valid { values, .. }) = a.verdict(Some(gpu)) {
                let same = values.len() == knobs.len()
                    && values.keys().all(|k| knobs.contains(k.as_str()));
                if same {
                    *seen.entry(values.clone()).or_default() += 1;
                }
            }
        }
    }
    let mut out: Vec<(usize, Values)> = seen.into_iter().map(|(v, n)| (n, v)).collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    out.into_iter().map(|(_, v)| v).collect()
}

/// The best source rewrite of a kernel as apply may ship it without the user's edit
/// (`R3_APPLY_REWRITES=1`): its variant kernel, the configuration it was judged with and the
/// trial of the variant's own search that measured that configuration (its PTX hash and
/// target), valid on every recorded launch of the original.
#[derive(Debug, Clone, PartialEq)]
pub struct ShippableRewrite {
    pub attempt: u32,
    pub label: String,
    pub variant: KernelHash,
    pub gpu: String,
    /// Over the original kernel's best compiler-only configuration when it was judged.
    pub speedup: f64,
    /// That configuration's speedup over the original's -O3 then (`Verdict::Valid`).
    pub reference_speedup: Option<f64>,
    pub diff: String,
    pub trial: crate::trials::TrialRecord,
    /// The recorded launches its judge checked it on; empty where the verdict does not say
    /// (an earlier r3's), or one of them cannot be read.
    pub checked: Vec<crate::candidate::LaunchValues>,
}

/// The fastest valid rewrite of `kernel` that a GPU judged with a configuration its own search
/// measured; simulated verdicts only with `simulated`.
pub fn shippable_rewrite(
    store: &Store,
    kernel: &KernelHash,
    simulated: bool,
) -> Option<ShippableRewrite> {
    let (_, attempts) = fold(&store.attempts(kernel).ok()?);
    let a = best_of(&attempts, None)?;
    let (gpu, verdict) = a.judged.iter().rev().find(|(_, v)| v.speedup().is_some())?;
    let Verdict::Valid {
        speedup,
        candidate: Some(candidate),
        simulated: judged_in_simulation,
        reference_speedup,
        checked,
        ..
    } = verdict
    else {
        return None;
    };
    if *judged_in_simulation && !simulated {
        return None;
    }
    let (variant, diff) = a.shipped_build(Some(gpu))?;
    let key = crate::kernel::TrialsKey::of_kernel(&variant);
    let trial = store
        .trials(&key, gpu)
        .ok()?
        .into_iter()
        .find(|t| t.candidate == *candidate && t.ratio().is_some() && t.ptx_hash.is_some())?;
    Some(ShippableRewrite {
        attempt: a.id,
        label: a.title(),
        variant,
        gpu: gpu.clone(),
        speedup: *speedup,
        reference_speedup: *reference_speedup,
        diff,
        trial,
        checked: checked
            .iter()
            .map(Checked::values)
            .collect::<Option<_>>()
            .unwrap_or_default(),
    })
}

impl ShippableRewrite {
    /// Its speedup over the original's -O3: `speedup` times the reference it was judged
    /// against, or, in logs of earlier r3s that did not keep it, the kernel's best
    /// compiler-only speedup now (`own_best`).
    pub fn over_o3(&self, own_best: f64) -> f64 {
        over_o3(self.speedup, self.reference_speedup, own_best)
    }

    /// Whether it beats the kernel's best compiler-only build now (`own_best` over -O3) by
    /// `min_speedup`: a search after the judge may have found a build faster than the rewrite
    /// (trmm: a rewrite judged 1.36x over a 2.16x build, and a search reaching 3.31x, H200,
    /// 2026-11-30).
    pub fn beats(&self, own_best: f64, min_speedup: f64) -> bool {
        self.over_o3(own_best) >= own_best * min_speedup.max(1.0)
    }
}

impl Store {
    pub fn attempts_path(&self, kernel: &KernelHash) -> PathBuf {
        self.root()
            .join("evolve")
            .join(trials::slug(kernel))
            .join("attempts.jsonl")
    }

    /// The events of the attempts on `kernel`, in file order (none when it was never evolved).
    pub fn attempts(&self, kernel: &KernelHash) -> Result<Vec<Event>, StoreError> {
        Ok(trials::read_log(&self.attempts_path(kernel))?.0)
    }

    /// Opens the attempts log for appending: one writer at a time (`StoreError::Busy`).
    pub fn open_attempts(&self, kernel: &KernelHash) -> Result<JsonLog<Event>, StoreError> {
        trials::open_log(self.attempts_path(kernel))
    }

    /// The kernels with an attempts log.
    pub fn evolved(&self) -> Result<Vec<KernelHash>, StoreError> {
        let dir = self.root().join("evolve");
        let mut out: Vec<KernelHash> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .flatten()
                .filter(|e| e.path().join("attempts.jsonl").is_file())
                .map(|e| e.file_name().to_string_lossy().as_ref().into())
                .collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rewrite judged against -O3 (nvcc's code, the kernel's best, did not lower for the
    /// judge) is worth what it gains over the best, not over -O3: conv_once's unroll ran
    /// 1.08x of -O3 and 0.68x of nvcc's code, 1.59x of -O3 (H200, run Y6, 2026-11-30).
    #[test]
    fn a_rewrite_is_worth_its_gain_over_the_kernels_best_build_now() {
        let judged = |reference| {
            let mut v = crate::fixtures::valid_verdict(1.084);
            if let Verdict::Valid {
                reference_speedup, ..
            } = &mut v
            {
                *reference_speedup = reference;
            }
            v
        };
        let over = judged(Some(1.0)).speedup_over(1.593).unwrap();
        assert!((over - 1.084 / 1.593).abs() < 1e-12, "{over}");
        let at_best = judged(Some(1.593)).speedup_over(1.593).unwrap();
        assert!((at_best - 1.084).abs() < 1e-12, "{at_best}");
        assert_eq!(
            judged(None).speedup_over(1.593),
            Some(1.084),
            "earlier logs: as judged"
        );
        let failed = Verdict::Failed {
            why: "wrong".into(),
            message: String::new(),
        };
        assert_eq!(failed.speedup_over(1.0), None);
        // Its line names what it was judged against: -O3 is not called the best build.
        let line = |reference_speedup| {
            Attempt {
                judged: vec![("GPU".into(), judged(reference_speedup))],
                ..Attempt::default()
            }
            .outcome(None)
        };
        assert!(line(Some(1.0)).starts_with("valid: 1.084x the original at -O3 ("));
        assert!(line(Some(1.593))
            .contains("1.084x the original's best compiler-only build (1.593x over -O3)"));
        assert!(line(None).contains("1.084x the original's best compiler-only build (rewrite"));
    }

    fn tiling_grid() -> Vec<Values> {
        let mut grid = Vec::new();
        for tk in [8, 16, 32, 64] {
            for rx in [1, 2, 4] {
                for ry in [1, 2, 4] {
                    grid.push(Values::from([
                        ("R3_TK".to_owned(), tk),
                        ("R3_RX".to_owned(), rx),
                        ("R3_RY".to_owned(), ry),
                    ]));
                }
            }
        }
        grid
    }

    /// One pass of a knob-at-a-time search over the tiling template's 36 builds measures 8:
    /// the start, 3 other depths, 2 other groupings along x and 2 along y; a grid under
    /// `COORDINATE_FROM` builds is judged whole.
    #[test]
    fn a_template_of_many_builds_is_priced_at_one_knob_at_a_time() {
        let grid = tiling_grid();
        let all: Vec<&Values> = grid.iter().collect();
        assert_eq!(coordinate_builds(&all), 8);
        assert_eq!(coordinate_builds(&all[..12]), 12);
        assert_eq!(coordinate_builds(&all[..1]), 1);
        assert_eq!(coordinate_builds(&[]), 0);
    }

    /// Where a knob search starts: the values that won for the same knobs on other kernels, the
    /// most often first; a verdict with other knobs, another GPU's or a failure counts for
    /// nothing.
    #[test]
    fn the_knob_values_that_won_elsewhere_lead_the_most_often_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let grid = tiling_grid();
        let won = |values: &Values, gpu: &str| {
            let mut v = crate::fixtures::valid_verdict(2.0);
            if let Verdict::Valid { values: w, .. } = &mut v {
                w.clone_from(values);
            }
            (gpu.to_owned(), v)
        };
        let logs: [(&str, Vec<(String, Verdict)>); 4] = [
            ("00000000000000a1", vec![won(&grid[13], "H200")]),
            (
                "00000000000000a2",
                vec![won(&grid[13], "H200"), won(&grid[0], "H200")],
            ),
            (
                "00000000000000a3",
                vec![
                    won(&grid[5], "H100"),
                    (
                        "H200".to_owned(),
                        Verdict::Failed {
                            why: "gives wrong output".into(),
                            message: String::new(),
                        },
                    ),
                ],
            ),
            (
                "00000000000000a4",
                vec![won(&Values::from([("R3_TK".to_owned(), 16)]), "H200")],
            ),
        ];
        for (kernel, verdicts) in logs {
            for (n, (gpu, verdict)) in verdicts.into_iter().enumerate() {
                crate::fixtures::judged_attempt(&store, kernel, n as u32 + 1, &gpu, verdict);
            }
        }
        let knobs = ["R3_TK", "R3_RX", "R3_RY"].into_iter().collect();
        assert_eq!(
            values_won_elsewhere(&store, "H200", &knobs),
            vec![grid[13].clone(), grid[0].clone()]
        );
        assert!(values_won_elsewhere(&store, "A100", &knobs).is_empty());
    }

    #[test]
    fn a_templates_child_is_judged_at_the_knobs_its_parent_won_with() {
        let builds = |first: u8| -> Vec<Build> {
            (1..=3)
                .map(|k| Build {
                    values: Values::from([("R3_TK".to_owned(), k)]),
                    variant: format!("{first:x}00000000000000{k}").into(),
                    diff: String::new(),
                })
                .collect()
        };
        let won = Verdict::Valid {
            speedup: 2.0,
            time_us: 1.0,
            reference_us: 2.0,
            pipeline: "-O3".into(),
            candidate: None,
            trials: 3,
            simulated: false,
            values: Values::from([("R3_TK".to_owned(), 2)]),
            reference_speedup: None,
            checked: Vec::new(),
        };
        let parent = Attempt {
            id: 1,
            builds: builds(1),
            judged: vec![("H200".into(), won)],
            ..Attempt::default()
        };
        let child = Attempt {
            id: 2,
            parent: Some(1),
            builds: builds(2),
            ..Attempt::default()
        };
        let all = [parent.clone(), child.clone()];
        let at = builds_to_judge(&child, &all, "H200");
        assert_eq!(at.len(), 1);
        assert_eq!(at[0].values["R3_TK"], 2);
        // Its parent, and the child where the parent was judged on another GPU only: every one.
        assert_eq!(builds_to_judge(&parent, &all, "H200").len(), 3);
        assert_eq!(builds_to_judge(&child, &all, "H100").len(), 3);
    }

    /// Lines as r3 wrote them before the format moved here from `r3-evolve` (every event, a
    /// build with knobs, a verdict with and without its candidate and values).
    const LOG: &str = r#"{"format":1,"attempt":0,"unix_ms":1764000000123,"event":"origin","file":"src/axpy.cu","code":"__global__ void axpy(float *y) {\n  y[0] = 1.0f;\n}","cell":"mem:2/ctl:0"}
{"format":1,"attempt":1,"unix_ms":1764000000123,"event":"proposed","parent":null,"proposer":"llm:m","label":"llm: m","repair_of":3,"prompt_sha":"ab12","answer":"```cuda\nk\n```","tokens":812,"rewrite":"k \"quoted\" \\ tab\t","requires":["pointers_disjoint"]}
{"format":1,"attempt":2,"unix_ms":1764000000123,"event":"proposed","parent":1,"proposer":"rules","label":"rules: restrict","tokens":0,"rewrite":"k2"}
{"format":1,"attempt":3,"unix_ms":1764000000123,"event":"proposer_failed","proposer":"llm:m","message":"HTTP 500"}
{"format":1,"attempt":4,"unix_ms":1764000000123,"event":"refused","reason":"calls cudaMalloc"}
{"format":1,"attempt":5,"unix_ms":1764000000123,"event":"compile_failed","diagnostics":"a.cu:3:1: error: x"}
{"format":1,"attempt":6,"unix_ms":1764000000123,"event":"compiled","variant":"0123456789abcdef","diff":"--- a/a.cu\n+++ b/a.cu\n","cell":"c"}
{"format":1,"attempt":7,"unix_ms":1764000000123,"event":"compiled","variant":"0123456789abcdef","diff":"d","cell":"c","builds":[{"values":{"TILE":16,"VEC":4},"variant":"0123456789abcdef","diff":"d"}]}
{"format":1,"attempt":7,"unix_ms":1764000000123,"event":"judged","gpu":"NVIDIA H100 80GB HBM3","verdict":{"outcome":"valid","speedup":1.25,"time_us":8.0,"reference_us":10.0,"pipeline":"O3; maxntid 256","candidate":{"pipeline":"default<O3>","codegen_opt":3},"trials":40,"simulated":false,"values":{"TILE":16,"VEC":4}}}
{"format":1,"attempt":6,"unix_ms":1764000000123,"event":"judged","gpu":"simulated","verdict":{"outcome":"valid","speedup":1.5,"time_us":1.0,"reference_us":1.5,"pipeline":"O3","trials":4,"simulated":true}}
{"format":1,"attempt":6,"unix_ms":1764000000123,"event":"judged","gpu":"g","verdict":{"outcome":"failed","why":"wrong output","message":"outputs outside tolerance at byte 4"}}
"#;

    #[test]
    fn a_log_written_before_the_move_reads_and_writes_back_byte_for_byte() {
        for line in LOG.lines() {
            let e: Event = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&e).unwrap(), line);
        }
        let events: Vec<Event> = LOG
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let (origin, attempts) = fold(&events);
        assert_eq!(origin.unwrap().0, PathBuf::from("src/axpy.cu"));
        assert_eq!(attempts.len(), 7);
        assert_eq!(attempts[0].repair_of, Some(3));
        assert_eq!(best_of(&attempts, None).unwrap().id, 7);
        let knobs = attempts.iter().find(|a| a.id == 7).unwrap();
        assert!(
            knobs.outcome(None).contains("TILE=16 VEC=4"),
            "{}",
            knobs.outcome(None)
        );
        let six = attempts.iter().find(|a| a.id == 6).unwrap();
        assert!(six.outcome(Some("g")).starts_with("wrong output: "));
        assert!(six.outcome(Some("simulated")).contains("1.500x"));
    }

    #[test]
    fn a_store_reads_back_the_log_it_appended() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let events: Vec<Event> = LOG
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let mut log = store.open_attempts(&KernelHash::from("k")).unwrap();
        for e in &events {
            log.append(e).unwrap();
        }
        drop(log);
        assert_eq!(
            std::fs::read_to_string(store.attempts_path(&KernelHash::from("k"))).unwrap(),
            LOG
        );
        assert_eq!(store.attempts(&KernelHash::from("k")).unwrap(), events);
        assert_eq!(store.evolved().unwrap(), vec![trials::slug("k")]);
        assert_eq!(
            variant_of_attempt(
                &store,
                &KernelHash::from("k"),
                7,
                Some("NVIDIA H100 80GB HBM3")
            )
            .as_deref(),
            Some("0123456789abcdef")
        );
        assert_eq!(
            variant_of_attempt(&store, &KernelHash::from("k"), 5, None),
            None
        );
    }

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
                        reference_speedup: None,
                        checked: Vec::new(),
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
