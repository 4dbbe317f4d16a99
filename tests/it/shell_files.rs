//! What `scripts/setup` installs beside r3 (issue 59, item 9): bash completion that completes
//! r3's commands and options, a man page man can show, and `r3 --version` with the commit that
//! `r3 doctor` names.

use crate::support::*;
use std::process::Command;

#[test]
fn version_names_the_commit_doctor_names() {
    let home = tempfile::tempdir().unwrap();
    let version = stdout(&r3(&["--version"], home.path()));
    let doctor = r3(&["doctor", "--json"], home.path());
    let d: serde_json::Value = serde_json::from_slice(&doctor.stdout).unwrap();
    let commit = d["r3_commit"].as_str().unwrap();
    assert!(!commit.is_empty());
    assert_eq!(
        version.trim(),
        format!("r3 {} (commit {commit})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn bash_completes_commands_options_and_their_values() {
    let home = tempfile::tempdir().unwrap();
    let script = home.path().join("r3.bash");
    let out = r3(&["completions", "bash"], home.path());
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&script, &out.stdout).unwrap();
    // What bash offers after each line, the cursor at its end.
    let offered = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let cmd = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _r3; echo \"${{COMPREPLY[*]}}\"",
            script.display(),
            words
                .iter()
                .map(|w| format!("'{w}'"))
                .collect::<Vec<_>>()
                .join(" "),
            words.len() - 1
        );
        let o = Command::new("bash").args(["-c", &cmd]).output().unwrap();
        assert!(o.status.success(), "{line}: {}", stderr(&o));
        stdout(&o).trim().to_owned()
    };
    assert_eq!(offered("r3 tu"), "tune");
    assert_eq!(offered("r3 tune --sp"), "--space");
    assert_eq!(offered("r3 tune --space "), "free grid");
    assert_eq!(
        offered("r3 completions "),
        "--cuda-path --r3-store bash fish zsh"
    );
    assert!(offered("r3 export --").contains("--launch-bounds"));
}

#[test]
fn man_shows_the_page() {
    let home = tempfile::tempdir().unwrap();
    let page = home.path().join("r3.1");
    let out = r3(&["man"], home.path());
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&page, &out.stdout).unwrap();
    if r3::toolchain::which("man").is_none() {
        skip(
            "man",
            "man is not installed: the page is written, not shown",
        );
        return;
    }
    let shown = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    // Bold and underline as the terminal's overstrikes (a character, a backspace) left out.
    let text = regex::Regex::new(".\x08")
        .unwrap()
        .replace_all(&stdout(&shown), "")
        .into_owned();
    assert!(
        stderr(&shown).trim().is_empty(),
        "man warns: {}",
        stderr(&shown)
    );
    for want in ["R3(1)", "SYNOPSIS", "r3 tune", "--budget", "EXIT STATUS"] {
        assert!(text.contains(want), "{want}: {text}");
    }
}
