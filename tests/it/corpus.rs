//! The corpus builds with r3-clang++ (no GPU), every kernel it names reaches the store, each
//! module verifies and lowers to PTX, and the hashes equal the checked-in llvm-ir-corpus/store.

use crate::support::*;
use std::collections::BTreeSet;

#[test]
fn corpus_builds_with_r3_and_matches_the_checked_in_store() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = driver_links(tmp.path());
    let store = tmp.path().join("store");
    let out = std::process::Command::new("make")
        .args([
            "-s",
            "-C",
            repo().join("llvm-ir-corpus").to_str().unwrap(),
            "-j2",
        ])
        .arg(format!("CXX={}", bin.join("r3-clang++").display()))
        .arg(format!("BUILD={}", tmp.path().join("build").display()))
        .env("R3_STORE", &store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(!stderr(&out).contains("r3: warning"), "{}", stderr(&out));

    let manifest: toml::Value = toml::from_str(
        &std::fs::read_to_string(repo().join("llvm-ir-corpus/corpus.toml")).unwrap(),
    )
    .unwrap();
    let programs = manifest["program"].as_array().unwrap();
    assert!(
        programs.len() >= 24,
        "the corpus has {} programs",
        programs.len()
    );
    let s = r3::store::Store::open(&store).unwrap();
    let kernels = s.kernels().unwrap();
    let base = |demangled: &str| {
        demangled
            .split('(')
            .next()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .split('<')
            .next()
            .unwrap()
            .to_owned()
    };
    let stored: BTreeSet<String> = kernels
        .iter()
        .map(|k| base(&k.signature.demangled))
        .collect();
    for p in programs {
        assert!(
            tmp.path()
                .join("build")
                .join(p["name"].as_str().unwrap())
                .exists(),
            "{p}"
        );
        for k in p["kernels"].as_array().unwrap() {
            assert!(
                stored.contains(k.as_str().unwrap()),
                "{} of {} not in the store",
                k,
                p["name"]
            );
        }
    }
    let ctx = inkwell::context::Context::create();
    for k in &kernels {
        let m = r3::ir::load_bytes(&ctx, &s.kernel_bitcode(&k.hash).unwrap(), &k.hash)
            .expect("verifies");
        let ptx = r3::lower::to_ptx(&m, "default<O3>", &r3::lower::Codegen::default()).unwrap();
        assert_eq!(
            r3::ptx::stats::stats(&ptx).entries,
            std::slice::from_ref(&k.signature.name)
        );
    }
    let fresh: BTreeSet<String> = kernels.iter().map(|k| k.hash.to_string()).collect();
    let checked_in: BTreeSet<String> =
        std::fs::read_dir(repo().join("llvm-ir-corpus/store/kernels"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    assert_eq!(
        fresh, checked_in,
        "the corpus IR changed: run scripts/record-corpus and commit llvm-ir-corpus/store"
    );
}
