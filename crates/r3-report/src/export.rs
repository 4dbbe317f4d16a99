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
            let variant =
                crate::evolve::variant_of_attempt(store, &r.kernel, b.attempt, Some(&b.gpu))?;
            Some(Rewrite {
                hash: r.kernel.into(),
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
