//! `r3 export`: every kernel's winner that ships, and the best source rewrites, as one winners
//! file to commit (`docs/export-schema.md`), which `r3-clang++ --r3-apply=FILE` builds from
//! without a store. It sits with the reports because it reads what they read (the store's
//! winners through `store::winner`, and `r3 evolve`'s rewrites), above apply, which only reads
//! the file.

use crate::apply::plan::{PlanError, Rewrite, Source, WinnersFile, SCHEMA, SCHEMA_VERSION};
use crate::store::winner::Policy;
use crate::store::Store;

/// Every kernel in the store with a winner that ships: what `r3 export` writes.
pub fn winners(store: &Store, policy: &Policy) -> Result<WinnersFile, PlanError> {
    let source = Source::Store(store.clone());
    let (mut kernels, mut variants) = (Vec::new(), Vec::new());
    // A rewrite's kernel is matched like any other once the user has applied its diff.
    for k in store.kernels()?.into_iter().chain(store.variants()?) {
        // One kernel's damaged search files cost its own winner, not the export.
        match source.plan(&k, policy) {
            Ok(plan) => {
                kernels.extend(plan.generic);
                variants.extend(plan.variants);
            }
            Err(e) => {
                crate::store::warn_left_out(&e, &format!("{}'s winner", k.signature.demangled))
            }
        }
    }
    let rewrites = super::rewrites::build(store, &[])?
        .into_iter()
        .filter_map(|r| {
            let b = r
                .best
                .filter(|b| b.speedup > 1.0 && (policy.simulated || !b.simulated))?;
            let variant = crate::store::attempts::variant_of_attempt(
                store,
                &r.kernel,
                b.attempt,
                Some(&b.gpu),
            )?;
            Some(Rewrite {
                hash: r.kernel,
                variant,
                demangled: r.name,
                gpu: b.gpu,
                speedup: b.speedup,
                diff: b.diff,
            })
        })
        .collect();
    Ok(WinnersFile {
        schema: SCHEMA.into(),
        schema_version: SCHEMA_VERSION,
        created_by: format!("r3 {}", env!("CARGO_PKG_VERSION")),
        llvm_version: crate::toolchain::llvm_version(),
        kernels,
        variants,
        rewrites,
        unreadable: Vec::new(),
    })
}

/// Why searches in the store add nothing to `file` (written from it under `policy`): one line
/// each for the simulated ones left out, those of kernels the store holds no module of, and
/// the measured ones that ship clang's code; nothing where every search has a winner in it.
pub fn left_out(
    store: &Store,
    file: &WinnersFile,
    policy: &Policy,
) -> Result<Vec<String>, crate::store::StoreError> {
    let exported: std::collections::BTreeSet<&str> = file
        .kernels
        .iter()
        .chain(file.variants.iter().map(|v| &v.winner))
        .map(|w| w.hash.as_str())
        .collect();
    let stored: std::collections::BTreeSet<String> = store
        .kernels()?
        .into_iter()
        .chain(store.variants()?)
        .map(|k| k.hash.to_string())
        .collect();
    let (mut simulated, mut unknown, mut clangs) = (0, 0, 0);
    for (_, recs) in store.trial_sets()? {
        let Some(first) = recs.first() else {
            continue;
        };
        if exported.contains(first.kernel.as_str()) {
            continue;
        }
        if first.simulated() && !policy.simulated {
            simulated += 1;
        } else if !stored.contains(first.kernel.as_str()) {
            unknown += 1;
        } else {
            clangs += 1;
        }
    }
    let mut out = Vec::new();
    if simulated > 0 {
        out.push(format!(
            "{simulated} simulated search(es) left out: `r3 tune --simulate` measured nothing on a GPU (R3_APPLY_SIMULATED=1 exports them, for tests)"
        ));
    }
    if unknown > 0 {
        out.push(format!(
            "{unknown} search(es) of kernels the store holds no module of left out: nothing to build them from (`r3 kernels` lists what it holds)"
        ));
    }
    if clangs > 0 {
        out.push(format!(
            "{clangs} search(es) ship clang's code: no winner worth a change of code (`r3 status` says why, search by search)"
        ));
    }
    Ok(out)
}

/// A format `r3 export` writes (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The winners file `--r3-apply` reads (`r3`).
    Winners,
    /// One kernel's trials in the auto-tuning community's T4 results schema (`t4`).
    T4,
    /// The PROTEUS_TUNED_KERNELS JSON (`proteus`).
    Proteus,
}

impl Format {
    /// The format `--format` names; anything but `t4` and `proteus` is the winners file.
    pub fn named(word: &str) -> Format {
        match word {
            "t4" => Format::T4,
            "proteus" => Format::Proteus,
            _ => Format::Winners,
        }
    }
}

/// What `r3 export` writes, and what it says of it.
#[derive(Debug)]
pub struct Exported {
    pub value: serde_json::Value,
    /// The trials (T4) or kernels it holds.
    pub count: usize,
    /// Notes on what it holds, said before it: what a format has no field for, launch bounds.
    pub notes: Vec<String>,
    /// Why searches of the store are not in it ([`left_out`]), said after it.
    pub left_out: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("--format t4 writes one kernel's trials: name it with --kernel")]
    NoKernel,
    #[error("{0}: no trials in the store")]
    NoTrials(String),
}

/// `r3 export`: the store's winners in `format` under `policy`; `kernel` names the kernel
/// whose trials T4 writes.
pub fn export(
    store: &Store,
    policy: &Policy,
    format: Format,
    kernel: Option<&str>,
) -> Result<Exported, ExportError> {
    use crate::apply::formats;
    let mut out = Exported {
        value: serde_json::Value::Null,
        count: 0,
        notes: Vec::new(),
        left_out: Vec::new(),
    };
    match format {
        Format::T4 => {
            let word = kernel.ok_or(ExportError::NoKernel)?;
            let index = store.index()?;
            let k = index.select_one(word, None)?;
            let key = crate::kernel::TrialsKey::of_kernel(&k.hash);
            let (_, trials) = crate::store::winner::chosen_search(store, &key, policy)?
                .ok_or_else(|| ExportError::NoTrials(k.signature.demangled.clone()))?;
            (out.value, out.count) = (formats::t4(&trials), trials.len());
        }
        Format::Proteus => {
            let file = winners(store, policy)?;
            let (v, skipped) = formats::proteus(&file.kernels, &file.variants);
            out.notes = skipped
                .iter()
                .map(|s| format!("{s} left out: Proteus has no field for it"))
                .collect();
            out.count = v.as_object().map_or(0, |o| o.len());
            out.value = v;
        }
        Format::Winners => {
            let w = winners(store, policy)?;
            out.left_out = left_out(store, &w, policy)?;
            out.count = w.kernels.len();
            if w.kernels.iter().any(|k| k.candidate.max_threads.is_some()) {
                out.notes.push("note: generic code with launch bounds is built from this file only under R3_APPLY_LAUNCH_BOUNDS=1 (the build's promise that no launch has more threads)".into());
            }
            out.value = serde_json::to_value(&w)?;
        }
    }
    Ok(out)
}
