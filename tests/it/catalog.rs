//! The pass catalog and presets against the LLVM 22 linked into r3: every entry, with every
//! parameter value, runs on a corpus kernel; the stored presets are what `default<On>` does.

use crate::support::repo;
use r3::lower::{to_ptx, Codegen};
use r3::remix::catalog::Catalog;

fn ptx(pipeline: &str) -> Result<String, String> {
    let ctx = inkwell::context::Context::create();
    let path = repo().join("tests/it/fixtures/gemm_tiled.ll");
    let m = r3::ir::load_file(&ctx, &path).unwrap();
    to_ptx(&m, pipeline, &Codegen::default()).map_err(|e| e.to_string())
}

#[test]
fn every_catalog_entry_runs_on_a_corpus_kernel() {
    let cat = Catalog::builtin().unwrap();
    let mut failures = Vec::new();
    for pass in cat.passes.iter().filter(|p| p.origin == "llvm") {
        let mut texts = vec![pass.standalone(&[])];
        for prm in &pass.params {
            for v in &prm.values {
                texts.push(pass.standalone(&[prm.token(v)]));
            }
        }
        for t in texts {
            // After a realistic prefix too, so loop passes see canonical loops.
            for pipeline in [t.clone(), format!("function(sroa,instcombine),{t}")] {
                if let Err(e) = ptx(&pipeline) {
                    failures.push(format!("{}: {pipeline}: {e}", pass.name));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "stale catalog entries:\n{}",
        failures.join("\n")
    );
}

#[test]
fn presets_are_what_llvm_default_pipelines_do() {
    let cat = Catalog::builtin().unwrap();
    for p in &cat.presets {
        let expanded = ptx(&p.pipeline).unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let short = ptx(&p.default_text).unwrap();
        assert_eq!(
            expanded, short,
            "preset {} differs from {}",
            p.name, p.default_text
        );
    }
}

#[test]
fn every_grid_variant_runs_and_changes_some_corpus_kernel() {
    let cat = Catalog::builtin().unwrap();
    let variants = r3::remix::grid::builtin(&cat).unwrap();
    let store = r3::store::Store::open(&repo().join("llvm-ir-corpus/store")).unwrap();
    let ctx = inkwell::context::Context::create();
    let modules: Vec<_> = store
        .kernels()
        .unwrap()
        .iter()
        .map(|k| {
            r3::ir::load_bytes(&ctx, &store.kernel_bitcode(&k.hash).unwrap(), &k.hash).unwrap()
        })
        .collect();
    let lower = |m: &inkwell::module::Module, p: &str| {
        to_ptx(&m.clone(), p, &Codegen::default()).map_err(|e| e.to_string())
    };
    let baselines: Vec<String> = modules
        .iter()
        .map(|m| lower(m, "default<O3>").unwrap())
        .collect();
    for v in &variants[1..] {
        // Runs on every kernel; a variant that changes no corpus kernel only costs search time.
        let mut changed = false;
        for (m, base) in modules.iter().zip(&baselines) {
            let ptx =
                lower(m, &v.pipeline).unwrap_or_else(|e| panic!("grid variant '{}': {e}", v.name));
            changed |= ptx != *base;
        }
        assert!(
            changed,
            "grid variant '{}' changes no corpus kernel",
            v.name
        );
    }
}
