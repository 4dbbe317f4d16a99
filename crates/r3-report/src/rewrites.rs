//! The source-rewrite part of `r3 report`: for each kernel `r3 evolve` worked on, what its
//! attempts gave and the best rewrite as a unified diff against the user's file.

use crate::store::attempts::{best_of, fold, Attempt, Values, Verdict};
use crate::store::{identity, Store, StoreError};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct RewriteReport {
    /// The original kernel's content hash.
    pub kernel: crate::kernel::KernelHash,
    pub name: String,
    pub attempts: usize,
    /// Attempts measured valid, refused before compiling, failed to compile, failed when run.
    pub valid: usize,
    pub refused: usize,
    pub compile_failed: usize,
    pub run_failed: usize,
    /// Compiled, waiting for a GPU.
    pub pending: usize,
    pub best: Option<BestRewrite>,
    pub rows: Vec<AttemptRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BestRewrite {
    pub attempt: u32,
    pub label: String,
    pub gpu: String,
    /// Over the original kernel's best compiler-only configuration, timed interleaved.
    pub speedup: f64,
    pub time_us: f64,
    pub reference_us: f64,
    /// The inner search's best configuration of the rewrite, in words and in full.
    pub pipeline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<crate::candidate::Candidate>,
    pub simulated: bool,
    /// For a rewrite with knobs (`R3_PARAM`): the values of the build that won, which the
    /// diff `#define`s.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub values: Values,
    /// Against the user's source file; r3 never applies it.
    pub diff: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttemptRow {
    pub attempt: u32,
    pub label: String,
    pub outcome: String,
}

/// The rewrites of the kernels `selected` names (all when empty).
pub fn build(store: &Store, selected: &[String]) -> Result<Vec<RewriteReport>, StoreError> {
    let kernels = store.kernels()?;
    let mut out = Vec::new();
    for key in store.evolved()? {
        let k = kernels.iter().find(|k| k.hash == key);
        let chosen = selected.is_empty()
            || selected
                .iter()
                .any(|s| key == *s || k.is_some_and(|k| identity::names(s, k)));
        if !chosen {
            continue;
        }
        let (_, attempts) = fold(&store.attempts(&key)?);
        let count = |f: &dyn Fn(&Attempt) -> bool| attempts.iter().filter(|a| f(a)).count();
        let best = best_of(&attempts, None).and_then(|a| {
            let (gpu, v) = a.judged.iter().rev().find(|(_, v)| v.speedup().is_some())?;
            let Verdict::Valid {
                speedup,
                time_us,
                reference_us,
                pipeline,
                candidate,
                simulated,
                values,
                ..
            } = v.clone()
            else {
                return None;
            };
            let diff = a.shipped_build(Some(gpu)).map(|b| b.1).unwrap_or_default();
            Some(BestRewrite {
                attempt: a.id,
                label: a.title(),
                gpu: gpu.clone(),
                speedup,
                time_us,
                reference_us,
                pipeline,
                candidate,
                simulated,
                values,
                diff,
            })
        });
        out.push(RewriteReport {
            name: k.map_or_else(|| key.to_string(), |k| k.signature.demangled.clone()),
            kernel: key.clone(),
            attempts: attempts.len(),
            valid: count(&|a| a.verdict(None).and_then(Verdict::speedup).is_some()),
            refused: count(&|a| a.refused.is_some()),
            compile_failed: count(&|a| a.diagnostics.is_some()),
            run_failed: count(&|a| matches!(a.verdict(None), Some(Verdict::Failed { .. }))),
            pending: count(&|a| a.compiled.is_some() && a.judged.is_empty()),
            best,
            rows: attempts
                .iter()
                .map(|a| AttemptRow {
                    attempt: a.id,
                    label: a.title(),
                    outcome: a.outcome(None),
                })
                .collect(),
        });
    }
    Ok(out)
}
