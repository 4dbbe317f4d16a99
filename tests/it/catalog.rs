//! The pass catalog and presets against the LLVM 22 linked into r3: every entry, with every
//! parameter value, runs on a corpus kernel; the stored presets are what `default<On>` does.

use crate::support::repo;
use r3::lower::{to_ptx, Codegen};
use r3::passes::catalog::Catalog;

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

/// A candidate lowered by `r3 __lower`, the way the search and apply lower one: LLVM options
/// are process-wide, so each needs a process of its own.
fn lower_in_child(
    bitcode: &std::path::Path,
    c: &r3::candidate::Candidate,
) -> Result<String, String> {
    let job = r3::lower::isolated::LowerJob {
        bitcode: bitcode.to_owned(),
        kernel_hash: "k".into(),
        candidate: c.clone(),
        target: Codegen::default(),
        mutation: None,
    };
    r3::lower::isolated::lower_isolated_with(&crate::support::r3_bin(), &job)
        .map(|l| l.ptx)
        .map_err(|o| format!("{o:?}"))
}

/// Every LLVM option of the catalog, with every value, is one LLVM 22 knows and lowers with,
/// and each option changes the PTX of some corpus kernel in a pipeline that runs its pass
/// (an option that changes nothing only costs search time). Options LLVM does not know are
/// refused before LLVM sees them (LLVM would end the process).
#[test]
fn every_llvm_option_runs_and_changes_some_corpus_kernel() {
    let cat = Catalog::builtin().unwrap();
    let variants = r3::remix::grid::builtin(&cat).unwrap();
    // O3 where it runs the pass, else the first grid variant that does.
    let o3 = cat.preset("O3").unwrap().pipeline.clone();
    let context = |pass: &str| {
        std::iter::once(&o3)
            .chain(variants.iter().map(|v| &v.pipeline))
            .find(|text| {
                r3::passes::pipeline::Pipeline::parse(text)
                    .is_ok_and(|p| p.steps.iter().any(|s| s.name == pass))
            })
            .unwrap_or_else(|| panic!("no grid variant runs {pass}"))
            .clone()
    };
    let store = r3::store::Store::open(&repo().join("llvm-ir-corpus/store")).unwrap();
    let kernels = store.kernels().unwrap();
    let mut changes = Vec::new();
    for (pass, o) in cat.options() {
        let base = r3::candidate::Candidate::with_pipeline(&context(&pass.name));
        let mut changed = None;
        for k in &kernels {
            let bc = store.kernel_dir(&k.hash).join("module.bc");
            let plain = lower_in_child(&bc, &base).unwrap();
            for v in &o.values {
                let mut c = base.clone();
                let text = r3::passes::catalog::LlvmOption::value_text(v);
                c.llvm_options.insert(o.name.clone(), text.clone());
                let ptx = lower_in_child(&bc, &c)
                    .unwrap_or_else(|e| panic!("-{}={text} on {}: {e}", o.name, k.signature.name));
                if ptx != plain && changed.is_none() {
                    changed = Some(format!("-{}={text} changes {}", o.name, k.signature.name));
                }
            }
            if changed.is_some() {
                break;
            }
        }
        changes.push(changed.unwrap_or_else(|| panic!("-{} changes no corpus kernel", o.name)));
    }
    assert!(changes.len() >= 4, "{changes:?}");
    let mut bad = r3::candidate::Candidate::baseline();
    bad.llvm_options
        .insert("print-after-all".into(), "true".into());
    let e = lower_in_child(&repo().join("tests/it/fixtures/gemm_tiled.ll"), &bad).unwrap_err();
    assert!(
        e.contains("print-after-all") && e.contains("catalog"),
        "{e}"
    );
}
