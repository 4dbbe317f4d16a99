//! corpus.toml's `workloads` (issue 55): each is an argument list its program takes, so that
//! `r3 record -- ./program ARGS` (scripts/bench-deadline records each) runs what it names. On a
//! GPU, each workload's checks pass and together they print the program's `timed` kernels.

use crate::support::*;
use std::collections::BTreeSet;
use std::process::Command;

#[test]
fn every_corpus_workload_is_an_argument_list_its_program_takes() {
    let manifest: toml::Value = toml::from_str(
        &std::fs::read_to_string(repo().join("llvm-ir-corpus/corpus.toml")).unwrap(),
    )
    .unwrap();
    let with_workloads: Vec<&toml::Value> = manifest["program"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p.get("workloads").is_some())
        .collect();
    assert!(
        with_workloads
            .iter()
            .any(|p| p["name"].as_str() == Some("table_lookup")),
        "table_lookup declares its workloads"
    );
    let tmp = tempfile::tempdir().unwrap();
    let clang = r3::toolchain::find_clang(true).unwrap().path;
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    let mut no_gpu = false;
    for p in with_workloads {
        let name = p["name"].as_str().unwrap();
        let workloads: Vec<Vec<String>> = p["workloads"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: workloads is a list of argument lists"))
            .iter()
            .map(|w| {
                w.as_array()
                    .unwrap_or_else(|| panic!("{name}: workload {w} is not a list"))
                    .iter()
                    .map(|a| a.as_str().unwrap().to_owned())
                    .collect()
            })
            .collect();
        assert!(workloads.len() >= 2, "{name}: one workload needs no list");
        assert_eq!(
            workloads.iter().collect::<BTreeSet<_>>().len(),
            workloads.len(),
            "{name}: two workloads with the same arguments"
        );
        let exe = tmp.path().join(name);
        let built = Command::new("make")
            .args(["-s", "-C"])
            .arg(repo().join("llvm-ir-corpus"))
            .arg(format!("CXX={}", clang.display()))
            .arg(format!("CUDA_PATH={}", cuda.display()))
            .arg(format!("BUILD={}", tmp.path().display()))
            .arg(&exe)
            .output()
            .unwrap();
        assert!(built.status.success(), "{name}: {}", stderr(&built));
        let unknown = Command::new(&exe).arg("--no-such-option").output().unwrap();
        assert_eq!(
            unknown.status.code(),
            Some(2),
            "{name} refuses an unknown argument: {}",
            stderr(&unknown)
        );
        let mut printed = BTreeSet::new();
        for w in &workloads {
            let out = Command::new(&exe).args(w).output().unwrap();
            let text = stdout(&out);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{name} {w:?}: {text}{}",
                stderr(&out)
            );
            if text.contains("skipped=no-gpu") {
                no_gpu = true;
                continue;
            }
            assert!(
                !text.contains("check=FAIL") && text.contains("check=PASS"),
                "{name} {w:?}: {text}"
            );
            printed.extend(
                text.split_whitespace()
                    .filter_map(|f| f.strip_prefix("kernel="))
                    .map(str::to_owned),
            );
        }
        if !no_gpu {
            let timed: BTreeSet<String> = p["timed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_owned())
                .collect();
            assert_eq!(
                printed, timed,
                "{name}: its workloads print its timed kernels"
            );
        }
    }
    if no_gpu {
        skip(
            "gpu",
            "the workloads' arguments are accepted, but their checks and kernel lines need a GPU",
        );
    }
}
