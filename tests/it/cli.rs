//! The command-line surface: help, report without trials, doctor, ptx, argv[0] dispatch.

use crate::support::*;

#[test]
fn help_lists_the_whole_command_tree() {
    let home = tempfile::tempdir().unwrap();
    let out = r3(&["--help"], home.path());
    assert!(out.status.success());
    insta::assert_snapshot!(stdout(&out));
}

#[test]
fn every_subcommand_has_help() {
    let home = tempfile::tempdir().unwrap();
    for cmd in [
        "doctor", "kernels", "record", "tune", "replay", "report", "passes", "ptx", "egraph",
        "selftest",
    ] {
        let out = r3(&[cmd, "--help"], home.path());
        assert!(
            out.status.success(),
            "{cmd} --help failed: {}",
            stderr(&out)
        );
        assert!(
            stdout(&out).contains("Usage: r3 "),
            "{cmd}: {}",
            stdout(&out)
        );
        // The store and the SDK are r3's options, listed once under their heading, not again
        // among each command's own (issue 36, item 9).
        let text = stdout(&out);
        let (own, global) = text.split_once("Global options:").expect(&text);
        for opt in ["--r3-store", "--cuda-path"] {
            assert!(!own.contains(opt), "{cmd}: {text}");
            assert_eq!(global.matches(opt).count(), 1, "{cmd}: {text}");
        }
    }
}

#[test]
fn doctor_json_reports_every_part_and_does_not_panic() {
    let home = tempfile::tempdir().unwrap();
    let out = r3(&["doctor", "--json"], home.path());
    let report: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("doctor --json is JSON");
    let parts: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["part"].as_str().unwrap())
        .collect();
    assert_eq!(
        parts,
        [
            "LLVM (linked)",
            "clang",
            "IR capture",
            "CUDA SDK",
            "GPU",
            "store"
        ]
    );
    // This machine has LLVM's headers (scripts/setup), so the plugin builds and captures.
    let capture = report["checks"][2]["detail"].as_str().unwrap();
    assert!(capture.starts_with("clang plugin "), "{capture}");
    let store = &report["checks"][5]["detail"];
    assert!(store.as_str().unwrap().contains("[R3_STORE]"), "{store}");
    assert!(report["checks"][0]["detail"]
        .as_str()
        .unwrap()
        .starts_with("22."));
}

#[test]
fn doctor_names_a_bad_cuda_path_and_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let out = r3(
        &["doctor", "--cuda-path", home.path().to_str().unwrap()],
        home.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("not a CUDA SDK root") && text.contains("--cuda-path"),
        "{text}"
    );
}

#[test]
fn ptx_lowers_the_selftest_kernel() {
    let home = tempfile::tempdir().unwrap();
    let ir = repo().join("llvm-ir-corpus/selftest/saxpy.ll");
    let out_file = home.path().join("saxpy.ptx");
    let out = r3(
        &[
            "ptx",
            ir.to_str().unwrap(),
            "--ptx",
            "ptx80",
            "-o",
            out_file.to_str().unwrap(),
            "--stats",
        ],
        home.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ptx = std::fs::read_to_string(&out_file).unwrap();
    assert!(
        ptx.contains(".version 8.0") && ptx.contains(".target sm_90"),
        "{ptx}"
    );
    assert!(ptx.contains(".visible .entry r3_saxpy("));
    // default<O3> promotes the frontend's allocas: no local memory in the result.
    assert!(!ptx.contains(".local"), "{ptx}");
    assert!(stderr(&out).contains("entries: r3_saxpy"));
}

#[test]
fn ptx_pipeline_changes_the_code() {
    let home = tempfile::tempdir().unwrap();
    let ir = repo().join("llvm-ir-corpus/selftest/saxpy.ll");
    let run = |pipeline: &str, level: &str| {
        let out = r3(
            &[
                "ptx",
                ir.to_str().unwrap(),
                "--pipeline",
                pipeline,
                "--opt-level",
                level,
            ],
            home.path(),
        );
        stdout(&out)
    };
    // With no IR passes and no backend optimization the frontend's allocas stay in local memory.
    assert!(run("", "0").contains(".local"));
    let count = |ptx: &str| r3::ptx::stats::stats(ptx).instructions;
    assert!(count(&run("default<O3>", "3")) < count(&run("", "3")));
}

#[test]
fn ptx_rejects_bad_input_naming_the_file() {
    let home = tempfile::tempdir().unwrap();
    let bad = home.path().join("bad.ll");
    std::fs::write(&bad, "this is not IR").unwrap();
    let out = r3(&["ptx", bad.to_str().unwrap()], home.path());
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad.ll") && err.contains("not valid LLVM IR"),
        "{err}"
    );
    let missing = r3(&["ptx", "/nonexistent/k.ll"], home.path());
    assert!(
        stderr(&missing).contains("/nonexistent/k.ll: cannot read"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn ptx_rejects_a_bad_pipeline_naming_it() {
    let home = tempfile::tempdir().unwrap();
    let ir = repo().join("llvm-ir-corpus/selftest/saxpy.ll");
    let out = r3(
        &["ptx", ir.to_str().unwrap(), "--pipeline", "no-such-pass"],
        home.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pipeline 'no-such-pass'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn report_without_trials_says_so_and_fails() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["report"][..], &["report", "--format", "md"]] {
        let out = r3(args, home.path());
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&out).contains("no store at") || stderr(&out).contains("no trials"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stdout(&out).is_empty(), "no fake output for {args:?}");
    }
    std::fs::create_dir_all(home.path().join("store")).unwrap();
    let store = r3::store::Store::create(&home.path().join("store")).unwrap();
    let out = r3(&["report"], home.path());
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no trials in store"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains(&store.root().display().to_string()));
}

#[test]
fn selftest_lowers_without_a_gpu() {
    let home = tempfile::tempdir().unwrap();
    let out = r3(&["selftest", "--json"], home.path());
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&out)).expect("selftest --json is JSON");
    assert!(v["ptx"]["entries"][0] == "r3_saxpy", "{v}");
    if v["run"].is_null() {
        assert!(out.status.success());
        let strict = r3(&["selftest", "--require-gpu"], home.path());
        assert_eq!(strict.status.code(), Some(1));
    } else {
        assert_eq!(v["run"]["mismatches"], 0);
    }
}

#[test]
fn argv0_dispatch_makes_r3_clang_a_clang() {
    let home = tempfile::tempdir().unwrap();
    let bin = driver_links(home.path());
    let out = std::process::Command::new(bin.join("r3-clang++"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        stdout(&out).contains("clang version 22"),
        "{}",
        stdout(&out)
    );
    // A clang error keeps clang's exit status and diagnostics.
    let bad = std::process::Command::new(bin.join("r3-clang"))
        .arg("/nonexistent.c")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("no such file"), "{}", stderr(&bad));
}

#[test]
fn record_runs_the_program_and_keeps_its_exit_status() {
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("store");
    let out = r3(
        &[
            "record",
            "--r3-store",
            store.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo hi; exit 3",
        ],
        home.path(),
    );
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(stdout(&out), "hi\n");
    assert!(
        stderr(&out).contains("no launch was recorded"),
        "{}",
        stderr(&out)
    );
    let missing = r3(
        &[
            "record",
            "--r3-store",
            store.to_str().unwrap(),
            "--",
            "/nonexistent/app",
        ],
        home.path(),
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("cannot run /nonexistent/app"),
        "{}",
        stderr(&missing)
    );
}

/// `r3 passes | head -1`, the reader gone before r3 writes: r3 ends quietly, with success.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let home = tempfile::tempdir().unwrap();
    for args in [&["passes"][..], &["passes", "--print", "O3"][..]] {
        let mut child = std::process::Command::new(r3_bin())
            .args(args)
            .env("R3_STORE", home.path().join("store"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader closes before r3 prints
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(out.status.success(), "{args:?}: {:?} {err}", out.status);
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{err}"
        );
    }
}

/// Issue 32: nonsense is refused with the reason and the fix, never accepted with exit 0, and
/// a binary file's bytes never reach the terminal.
#[test]
fn nonsense_input_is_refused_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let d = home.path();
    let saxpy = repo().join("llvm-ir-corpus/selftest/saxpy.ll");
    let saxpy = saxpy.to_str().unwrap();
    for sm in ["banana", "sm_1", ""] {
        let out_ptx = d.join("out.ptx");
        let out = r3(
            &["ptx", saxpy, "--sm", sm, "-o", out_ptx.to_str().unwrap()],
            d,
        );
        assert!(!out.status.success(), "--sm '{sm}' accepted");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("`{sm}`")) && err.contains("sm_90"),
            "{err}"
        );
        assert!(!out_ptx.exists(), "nothing written for --sm '{sm}'");
    }
    std::fs::write(d.join("empty.ll"), "").unwrap();
    std::fs::write(
        d.join("x86.ll"),
        "target triple = \"x86_64-pc-linux-gnu\"\ndefine void @f() {\n  ret void\n}\n",
    )
    .unwrap();
    for (file, why) in [
        ("empty.ll", "defines no function"),
        ("x86.ll", "is IR for x86_64"),
    ] {
        let file = d.join(file);
        let file = file.to_str().unwrap();
        for cmd in ["ptx", "egraph"] {
            let out = r3(&[cmd, file], d);
            let err = stderr(&out);
            assert!(
                !out.status.success() && err.contains(why) && err.contains("fix:"),
                "{cmd} {file}: {err}"
            );
        }
    }
    let mut junk = b"BC\xc0\xde".to_vec();
    junk.extend((0u8..=255).cycle().take(4000));
    std::fs::write(d.join("junk.bc"), &junk).unwrap();
    let out = r3(&["ptx", d.join("junk.bc").to_str().unwrap()], d);
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains("junk.bc"), "{err}");
    assert!(
        !err.chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t'),
        "raw bytes echoed: {err:?}"
    );
    for args in [
        &["tune", "--all", "--batch", "0"][..],
        &["tune", "--all", "--budget", "0"][..],
        &["replay", "--all", "--repeat", "0"][..],
        &["record", "--launches", "0", "--", "true"][..],
    ] {
        let out = r3(args, d);
        let err = stderr(&out);
        assert!(
            !out.status.success() && err.contains("0 is not in 1.."),
            "{args:?}: {err}"
        );
    }
}

/// The binary has no test target (`test = false` in Cargo.toml: one would link LLVM once
/// more), so a test in a module only `main.rs` reaches is never compiled, let alone run. Five
/// tests sat in src/cli.rs that way (issue 64, item 1).
#[test]
fn no_test_hides_in_a_module_only_the_binary_compiles() {
    let src = repo().join("src");
    let main = std::fs::read_to_string(src.join("main.rs")).unwrap();
    let mut files = vec![src.join("main.rs")];
    for m in bin_only_modules(&main) {
        let file = src.join(format!("{m}.rs"));
        files.push(if file.exists() {
            file
        } else {
            src.join(m).join("mod.rs")
        });
    }
    for file in files {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for mark in ["#[test]", "#[cfg(test)]"] {
            assert!(
                !text.contains(mark),
                "{} has {mark}, which cargo test never compiles (the binary has no test \
                 target); put the code under test and its tests in the library (src/lib.rs's \
                 modules or a crate in crates/), or test the CLI as a process in tests/it/",
                file.display()
            );
        }
    }
}

/// The modules `main.rs` declares (`mod NAME;`): compiled into the binary only.
fn bin_only_modules(main: &str) -> Vec<&str> {
    main.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub ")
                .unwrap_or(l)
                .strip_prefix("mod ")?
                .strip_suffix(';')
        })
        .collect()
}

/// `r3 __deadline-at FILE SECONDS` (for r3's developers): an allocation read back at a moment
/// says what it decides there; a file that is not one is refused, naming it and the fix.
#[test]
fn a_deadlines_allocation_is_explained_at_a_moment_and_a_bad_file_refused() {
    use r3::remix::deadline;
    let home = tempfile::tempdir().unwrap();
    let entrant = |name: &str| deadline::Entrant {
        label: format!("{name}_kernel"),
        ..deadline::Entrant::unpriced(name, 0.5, 0.1)
    };
    let a = deadline::start("p", "GPU", 60.0, vec![entrant("a"), entrant("b")]);
    let file = home.path().join("allocation.json");
    std::fs::write(&file, serde_json::to_vec(&a).unwrap()).unwrap();
    let out = r3(&["__deadline-at", file.to_str().unwrap(), "0"], home.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("at 0 of 60 s: 2 kernel(s) not reached"),
        "{text}"
    );
    assert!(
        text.contains("warm start a_kernel: least") && text.contains("next: Slice"),
        "{text}"
    );
    std::fs::write(&file, "{}").unwrap();
    let out = r3(&["__deadline-at", file.to_str().unwrap(), "0"], home.path());
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("is not a deadline's allocation") && err.contains("fix:"),
        "{err}"
    );
}
