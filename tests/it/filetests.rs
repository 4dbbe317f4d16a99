//! Filetests: device IR in, r3's output out, kept beside it for review.
//!
//! Each `tests/filetests/**/NAME.ll` starts with one or more lines `; RUN: r3 <args>`. The test
//! runs `r3 <args> NAME.ll` for each and compares what it printed with `NAME.out`, so a change
//! to a rewrite rule, the pass catalog or the lowering shows up as a diff of PTX or rewritten IR
//! in review. `R3_BLESS=1 cargo test --release filetests` writes the `.out` files anew.

use crate::support::{r3, repo, stderr, stdout};
use std::path::{Path, PathBuf};

const RUN: &str = "; RUN: r3 ";

/// The `r3` arguments of each RUN line (split at spaces; an argument `''` is the empty string).
fn runs(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .take_while(|l| l.starts_with(';'))
        .filter_map(|l| l.strip_prefix(RUN))
        .map(|args| {
            args.split_whitespace()
                .map(|a| {
                    if a == "''" {
                        String::new()
                    } else {
                        a.to_owned()
                    }
                })
                .collect()
        })
        .collect()
}

/// What the runs of one file print, each after a line naming it. The file's own path reads as
/// its name and a time in milliseconds as `_ ms`, so that the output depends on neither where
/// the repository is nor how fast the machine is.
fn output(file: &Path, home: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let runs = runs(&text);
    if runs.is_empty() {
        return Err(format!("{}: no `{RUN}…` line", file.display()));
    }
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let millis = regex::Regex::new(r"\b\d+(\.\d+)? ms\b").unwrap();
    let mut out = String::new();
    for args in runs {
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let path = file.to_string_lossy();
        argv.push(&path);
        let o = r3(&argv, home);
        if !o.status.success() {
            return Err(format!(
                "{}: r3 {args:?} failed:\n{}",
                file.display(),
                stderr(&o)
            ));
        }
        out.push_str(&format!("== r3 {} {name}\n", args.join(" ")));
        let text = stdout(&o).replace(&*path, &name);
        out.push_str(&millis.replace_all(&text, "_ ms"));
    }
    Ok(out)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = crate::support::walk(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ll"))
        .collect();
    v.sort();
    v
}

#[test]
fn each_filetest_prints_what_its_out_file_holds() {
    let home = tempfile::tempdir().unwrap();
    let bless = std::env::var_os("R3_BLESS").is_some_and(|v| v == "1");
    let all = files(&repo().join("tests/filetests"));
    assert!(all.len() >= 3, "filetests found: {all:?}");
    let mut failures = Vec::new();
    for file in &all {
        let got = match output(file, home.path()) {
            Ok(got) => got,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        let expected_path = file.with_extension("out");
        if bless {
            std::fs::write(&expected_path, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if got != want {
            let diff = similar::TextDiff::from_lines(&want, &got)
                .unified_diff()
                .header(&expected_path.display().to_string(), "now")
                .to_string();
            failures.push(diff);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} filetests differ from their .out files (if the change is meant, bless them: \
         R3_BLESS=1 cargo test --release filetests):\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn run_lines_are_read_from_the_header_only() {
    let text = "; RUN: r3 ptx --pipeline ''\n; a comment\n; RUN: r3 egraph --options iters=2\n\
                define void @f() {\n; RUN: r3 not-a-header\n  ret void\n}\n";
    assert_eq!(
        runs(text),
        vec![
            vec!["ptx".to_owned(), "--pipeline".into(), String::new()],
            vec!["egraph".into(), "--options".into(), "iters=2".into()],
        ]
    );
}
