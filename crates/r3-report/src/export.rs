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
                variant: variant.into(),
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
