//! Bad input and crashes (issue 18): small runs of `scripts/fuzz-cli` and
//! `scripts/crash-campaign` against the r3 under test. The full runs (300 fuzz runs, 100 kill
//! rounds per target) are recorded in bench/RESULTS.md, "Reliability".

use crate::support::{r3_bin, repo};
use std::process::Command;

fn script(name: &str, args: &[&str]) {
    let out = Command::new(repo().join("scripts").join(name))
        .args(args)
        .arg("--r3")
        .arg(r3_bin())
        .env_remove("R3_STORE")
        .env_remove("R3_CUDA_PATH")
        .output()
        .expect("the script runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "scripts/{name} failed:\n{text}");
    assert!(text.contains("failures"), "{text}");
}

#[test]
fn the_cli_never_panics_on_fuzzed_arguments_and_stores() {
    script("fuzz-cli", &["-n", "60", "--seed", "11"]);
}

#[test]
fn kill_9_during_tune_and_builds_loses_nothing() {
    script("crash-campaign", &["-n", "10", "--seed", "11"]);
}
