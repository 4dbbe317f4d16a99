//! The scripts' own checks and figures (issue 64, items 5 and 6): a figure says what it is (a
//! derived time says so, an unconfirmed speedup is marked, a median is the median), the raw data
//! archives unpack each file once, and no PASS or exit 0 stands on nothing counted. GPU scripts
//! are checked through their `--self-test` (their verdicts on made-up runs); the rest on
//! fixtures, as CI would run them.

use crate::support::{r3_bin, repo};
use std::path::Path;
use std::process::{Command, Output};

fn script(name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(repo().join("scripts").join(name));
    cmd.args(args).env_remove("R3_STORE").env_remove("OUT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("scripts/{name}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A script's `--self-test` passes, having counted its checks.
fn self_test(name: &str) {
    let out = script(name, &["--self-test"], &[]);
    let t = text(&out);
    assert!(
        out.status.success(),
        "scripts/{name} --self-test failed:\n{t}"
    );
    assert!(
        t.contains(&format!("{name} self-test: PASS (")),
        "scripts/{name} --self-test did not say what it checked:\n{t}"
    );
}

/// The words after `label` on the first line of `t` that starts with it (leading spaces aside),
/// one space apart: a script's table row without its column alignment.
fn row_after(t: &str, label: &str) -> String {
    t.lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(label))
        .map(|l| {
            l[label.len()..]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| panic!("no {label} row:\n{t}"))
}

fn write_executable(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn bench_gpu_derives_r3s_time_and_marks_an_unconfirmed_best() {
    // -O3 itself the best is 1 exactly, never the 1.001 its trial 0 measured; a best no run
    // re-measured is UNCONFIRMED and out of the means; the r3 column is "derived".
    self_test("bench-gpu");
}

#[test]
fn bench_deadline_takes_the_median_not_the_upper_middle() {
    let dir = tempfile::tempdir().unwrap();
    // |predicted/measured - 1| of 0.01, 0.02, 0.03, 0.04: the median is 0.025.
    let programs: Vec<String> = [1.01, 1.02, 1.03, 1.04]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            format!(
                r#"{{"name": "p{i}", "predicted_shipped": {p}, "predicted_best": {p}, "measured": {{"speedup": 1.0}}}}"#
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("programs-deadline.json"),
        format!(r#"{{"programs": [{}]}}"#, programs.join(", ")),
    )
    .unwrap();
    let out = script(
        "bench-deadline",
        &["table", dir.path().to_str().unwrap()],
        &[("R3_BENCH_ARMS", "deadline")],
    );
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(
        t.contains("deadline: 4 programs;") && t.contains("median 0.025,"),
        "{t}"
    );
}

/// An upper middle value taken for a median: `v[len(v) // 2]` in Python, `v[(NR + 1) / 2]` or
/// `sed -n "$(((n + 1) / 2))p"` in a shell. A line (or the two above it) that says "upper
/// median" takes it on purpose.
#[test]
fn no_script_takes_the_upper_middle_value_for_a_median() {
    let patterns = [
        regex::Regex::new(r"\[\s*len\((\w+)\)\s*//\s*2\s*\]").unwrap(),
        regex::Regex::new(r"\(\s*NR\s*\+\s*1\s*\)\s*/\s*2").unwrap(),
        regex::Regex::new(r#"\(\(\s*\$?\w+\s*\+\s*1\s*\)\s*/\s*2\s*\)\)p"#).unwrap(),
    ];
    let mut found = Vec::new();
    let mut read = 0;
    for entry in std::fs::read_dir(repo().join("scripts")).unwrap() {
        let path = entry.unwrap().path();
        let Ok(body) = std::fs::read_to_string(&path) else {
            continue;
        };
        read += 1;
        let lines: Vec<&str> = body.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !patterns.iter().any(|p| p.is_match(line)) {
                continue;
            }
            // An odd count handled apart from an even one is a whole median.
            let near = lines[i.saturating_sub(2)..=i].join("\n");
            if near.contains("upper median") || line.contains("% 2") {
                continue;
            }
            found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
        }
    }
    assert!(read > 10, "read {read} scripts");
    assert!(
        found.is_empty(),
        "use statistics.median (or average the middle two):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_two_archives_of_a_run_hold_one_path_with_other_contents() {
    let out = script("check-bench-archives", &[], &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("no path with two contents: PASS"), "{t}");
}

#[test]
fn archives_that_clash_fail_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    for (part, body) in [("1", "new"), ("2", "")] {
        let src = dir.path().join(format!("src{part}"));
        std::fs::create_dir_all(src.join("replays")).unwrap();
        std::fs::write(src.join("replays/k.json"), body).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        let tar = Command::new("tar")
            .arg("czf")
            .arg(run.join(format!("replays-part{part}.tgz")))
            .arg("-C")
            .arg(&src)
            .arg("replays")
            .status()
            .unwrap();
        assert!(tar.success());
    }
    let out = script("check-bench-archives", &[dir.path().to_str().unwrap()], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("replays/k.json differs between"), "{t}");
    let empty = tempfile::tempdir().unwrap();
    let out = script(
        "check-bench-archives",
        &[empty.path().to_str().unwrap()],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "no archive is no pass: {}",
        text(&out)
    );
}

#[test]
fn gpu_record_passes_no_row_on_nothing_counted() {
    self_test("gpu-record");
}

#[test]
fn bench_coverage_classes_samples_and_counts_what_reproduces() {
    // Which cuda-samples are left out (display, library, input data, platform), what a run of
    // `r3 record` said, and the table's counts and goal (issue 61, item 6).
    self_test("bench-coverage");
}

#[test]
fn gpu_check_counts_every_row_that_fails() {
    self_test("gpu-check");
}

#[test]
fn store_damage_takes_only_fix_for_a_fix() {
    self_test("store-damage");
}

#[test]
fn slurm_test_exits_2_only_where_slurm_cannot_run() {
    self_test("slurm-test");
    // No r3 is a failure of the run, not a machine without Slurm; it is found before Slurm is
    // looked for.
    let out = script("slurm-test", &["--r3", "/nonexistent/r3"], &[]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("no r3 at /nonexistent/r3"), "{t}");
}

#[test]
fn a_crash_campaign_that_kills_nothing_fails() {
    let r3 = r3_bin();
    let out = script(
        "crash-campaign",
        &["-n", "0", "--target", "tune", "--r3", r3.to_str().unwrap()],
        &[],
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("failure: tune: no run was killed"), "{t}");
}

#[test]
fn bench_egraph_size_exits_1_where_a_size_misses_its_goal() {
    let dir = tempfile::tempdir().unwrap();
    // An r3 whose e-graph pipelines fail: every size misses.
    let broken = dir.path().join("r3-broken");
    write_executable(
        &broken,
        "#!/bin/sh\ncase \"$*\" in *r3-egraph*) exit 1 ;; esac\nexit 0\n",
    );
    let out = script(
        "bench-egraph-size",
        &["--r3", broken.to_str().unwrap(), "90"],
        &[],
    );
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("MISSED") && t.contains("goal met at 0 of 1 sizes"),
        "{t}"
    );
    // One that does everything at once meets it.
    let quick = dir.path().join("r3-quick");
    write_executable(&quick, "#!/bin/sh\nexit 0\n");
    let out = script(
        "bench-egraph-size",
        &["--r3", quick.to_str().unwrap(), "90"],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// rewrite-repeats sorts a deadline's rewrite attempts by whether they repeat a rule on their
/// kernel, a find beating the kernel's best before it by 5%, and adds up their seconds and
/// their finds' gains over that best.
#[test]
fn rewrite_repeats_counts_a_repeat_after_a_miss_apart() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tune-deadline.log");
    let attempt = |k: &str, n: u32, rule: &str, verdict: &str, s: f64| {
        format!(
            "r3 tune --deadline: k_kernel(int) [{k}]: attempt {n} (rules: {rule}): {verdict} (rewrite built with O3)\n\
             r3 tune --deadline: 100/600 s: k_kernel(int) [{k}]: rewrite attempt ({n} in all, 0 found) in {s} s, best rewrite 1.000x\n"
        )
    };
    let lines = [
        attempt(
            "aaaaaaaa",
            1,
            "shared-tiling",
            "valid: 0.456x the original's best",
            7.0,
        ),
        attempt(
            "aaaaaaaa",
            2,
            "shared-tiling on #1",
            "valid: 0.460x the original's best",
            6.0,
        ),
        attempt("aaaaaaaa", 3, "restrict", "failed: wrong output", 2.0),
        attempt(
            "bbbbbbbb",
            1,
            "shared-tiling",
            "valid: 1.500x the original's best",
            8.0,
        ),
        attempt(
            "bbbbbbbb",
            2,
            "shared-tiling on #1",
            "valid: 1.600x the original's best",
            9.0,
        ),
        attempt(
            "bbbbbbbb",
            3,
            "unroll-4",
            "valid: 1.520x the original's best",
            1.5,
        ),
    ];
    std::fs::write(&log, lines.concat()).unwrap();
    let out = script("rewrite-repeats", &[log.to_str().unwrap()], &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let row = |kind: &str| row_after(&t, kind);
    assert_eq!(
        row("first of its rule"),
        "4 attempts 1 finds 18.5 s gains 1.500x",
        "{t}"
    );
    assert_eq!(
        row("repeat after a miss"),
        "1 attempts 0 finds 6.0 s",
        "{t}"
    );
    assert_eq!(
        row("repeat after a find"),
        "1 attempts 1 finds 9.0 s gains 1.067x",
        "{t}"
    );
    // Over several logs, each rule's first attempts on a kernel are added up too: what
    // RULE_PRIOR_LIFT is set from.
    let twice = script(
        "rewrite-repeats",
        &[log.to_str().unwrap(), log.to_str().unwrap()],
        &[],
    );
    let t = text(&twice);
    assert!(twice.status.success(), "{t}");
    let by_rule = |rule: &str| {
        t.lines()
            .find(|l| l.trim_start().starts_with(rule) && l.contains("kernels"))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no {rule} row:\n{t}"))
    };
    assert_eq!(
        by_rule("shared-tiling"),
        "4 attempts 2 finds ( 50%) on 1 of 2 kernels"
    );
    assert_eq!(
        by_rule("restrict"),
        "2 attempts 0 finds ( 0%) on 0 of 1 kernels"
    );
    assert_eq!(
        by_rule("unroll-4"),
        "2 attempts 0 finds ( 0%) on 0 of 1 kernels"
    );
    let none = script("rewrite-repeats", &[], &[]);
    assert_eq!(none.status.code(), Some(2), "{}", text(&none));
}

/// allocation-slices adds up a deadline's slices by kind (a deepening apart from the kernel's
/// own compiler slices and from rewrite attempts) and lists each deepening; a file that is not
/// an allocation is named in its error.
#[test]
fn allocation_slices_adds_up_each_kind_and_lists_the_deepenings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.json");
    let slice = |warm: bool, rewrite: bool, deepen: bool, s: f64, trials: (u32, u32)| {
        serde_json::json!({"kernel": "aaaaaaaaaaaaaaaa", "trials_before": trials.0,
            "trials_after": trials.1, "seconds": s, "best_after": 3.12, "at_s": 100.0,
            "warm": warm, "rewrite": rewrite, "deepen": deepen})
    };
    let a = serde_json::json!({
        "elapsed_s": 600.0, "deadline_s": 600.0, "ended": "deadline",
        "arms": [{"kernel": "aaaaaaaaaaaaaaaa", "label": "gesummv_kernel(int)"}],
        "slices": [
            slice(true, false, false, 10.0, (0, 11)),
            slice(false, false, false, 2.5, (11, 35)),
            slice(false, true, false, 7.5, (0, 1)),
            slice(false, true, false, 4.0, (1, 2)),
            slice(false, false, true, 11.0, (1, 80)),
        ],
    });
    std::fs::write(&path, a.to_string()).unwrap();
    let out = script("allocation-slices", &[path.to_str().unwrap()], &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let row = |kind: &str| row_after(&t, kind);
    assert_eq!(row("warm start"), "1 10.0 s");
    assert_eq!(row("compiler slice"), "1 2.5 s");
    assert_eq!(row("rewrite attempt"), "2 11.5 s");
    assert_eq!(row("deepening"), "1 11.0 s");
    assert_eq!(
        row("deepened"),
        "gesummv_kernel trials 1 -> 80 11.0 s at 100 s kernel 3.120x"
    );
    std::fs::write(&path, "{\"slices\": [").unwrap();
    let bad = script("allocation-slices", &[path.to_str().unwrap()], &[]);
    assert!(
        !bad.status.success() && text(&bad).contains("all.json"),
        "{}",
        text(&bad)
    );
    let none = script("allocation-slices", &[], &[]);
    assert_eq!(none.status.code(), Some(2), "{}", text(&none));
}

/// bench-templates keep-rule leaves one rule's attempts in a store's evolve logs, the origin
/// with them (--first: each kernel's first), and drops the kernels that have none.
#[test]
fn bench_templates_keeps_one_rules_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let log = |kernel: &str, labels: &[&str]| {
        let d = dir.path().join("evolve").join(kernel);
        std::fs::create_dir_all(&d).unwrap();
        let mut lines = vec![r#"{"format":1,"attempt":0,"unix_ms":0,"event":"origin","file":"k.cu","code":"","cell":""}"#.to_owned()];
        for (i, label) in labels.iter().enumerate() {
            let n = i + 1;
            lines.push(format!(r#"{{"format":1,"attempt":{n},"unix_ms":0,"event":"proposed","parent":null,"proposer":"rules","label":"rules: {label}","tokens":0,"rewrite":""}}"#));
            lines.push(format!(
                r#"{{"format":1,"attempt":{n},"unix_ms":0,"event":"refused","reason":"r"}}"#
            ));
        }
        std::fs::write(d.join("attempts.jsonl"), lines.join("\n") + "\n").unwrap();
    };
    let attempts = |kernel: &str| -> Vec<u64> {
        let text = std::fs::read_to_string(
            dir.path()
                .join("evolve")
                .join(kernel)
                .join("attempts.jsonl"),
        )
        .unwrap();
        let mut ids: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["attempt"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        ids.dedup();
        ids
    };
    let store = dir.path().to_str().unwrap();
    for first in [false, true] {
        log(
            "aaaa",
            &["restrict", "shared-tiling", "unroll-4", "shared-tiling"],
        );
        log("bbbb", &["restrict"]);
        let args: &[&str] = if first {
            &["keep-rule", store, "shared-tiling", "--first"]
        } else {
            &["keep-rule", store, "shared-tiling"]
        };
        let out = script("bench-templates", args, &[]);
        let t = text(&out);
        assert!(out.status.success(), "{t}");
        assert_eq!(
            attempts("aaaa"),
            if first { vec![0, 2] } else { vec![0, 2, 4] },
            "{t}"
        );
        assert!(!dir.path().join("evolve/bbbb").exists(), "{t}");
        assert!(
            t.contains(&format!("{} attempt(s) kept", if first { 1 } else { 2 })),
            "{t}"
        );
    }
}

/// The red team's table over a store whose one hack was judged as `message` says.
fn redteam_table(message: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("hacks.tsv"),
        "p22-writes-nothing\taxpy\t3\tpoison\tleft unwritten\nc31-honest\taxpy\t0\tnone\t\n",
    )
    .unwrap();
    let log = dir.path().join("store/evolve/k");
    std::fs::create_dir_all(&log).unwrap();
    let judged = serde_json::json!({"attempt": 1, "event": "judged",
        "verdict": {"outcome": "wrong_output", "why": "wrong output", "message": message}});
    let lines = [
        serde_json::json!({"attempt": 1, "event": "proposed", "answer": "redteam hack p22-writes-nothing: faster"}),
        serde_json::json!({"attempt": 1, "event": "compiled"}),
        judged,
        serde_json::json!({"attempt": 2, "event": "proposed", "answer": "redteam hack c31-honest: faster"}),
        serde_json::json!({"attempt": 2, "event": "compiled"}),
        serde_json::json!({"attempt": 2, "event": "judged", "verdict": {"outcome": "valid", "speedup": 1.01}}),
    ];
    let body: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(log.join("attempts.jsonl"), body.join("\n") + "\n").unwrap();
    let d = dir.path().to_str().unwrap();
    let store = format!("{d}/store");
    script("redteam", &["table", d, &store, "--measured"], &[])
}

#[test]
fn the_red_team_fails_where_a_hack_is_caught_by_another_check() {
    // Caught by the check against the recording, where only poisoning can catch it: the
    // poisoning check was never shown to work.
    let out = redteam_table("outputs outside tolerance at byte 4");
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(
        t.contains("p22-writes-nothing (found wrong by recording, not poison)"),
        "{t}"
    );
    let out = redteam_table("outputs left unwritten: byte 4 kept the poison");
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn bench_fleet_judges_the_winners_and_the_goals_of_its_arms() {
    // Issue 62: the same trial, another within 3%, or one that differs; the wall-time and
    // deadline goals met or not, each on made-up runs.
    self_test("bench-fleet");
}

/// A child process a test runs may write to the terminal between the harness's `test NAME ...`
/// and the outcome (CI, 2026-11-29: clang's "loop not unrolled" warning): the audit still finds
/// that test's outcome on the line after, and a listing that really misses one still fails.
#[test]
fn audit_tests_reads_an_outcome_pushed_to_the_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("test.log");
    let write = |body: &str| {
        std::fs::write(&log, body).unwrap();
        std::fs::write(dir.path().join("test.log.skips"), "").unwrap();
    };
    let run = || script("audit-tests", &[log.to_str().unwrap()], &[]);
    let head = "     Running tests/it/main.rs (target/release/deps/it-0123456789abcdef)\n\nrunning 2 tests\n";
    let tail = "\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s\n";
    write(&format!(
        "{head}test a::one ... warning: <unknown>:0:0: loop not unrolled\nok\ntest a::two ... ok\n{tail}"
    ));
    let out = run();
    assert!(out.status.success(), "{}", text(&out));
    write(&format!(
        "{head}test a::one ... warning: <unknown>:0:0: loop not unrolled\ntest a::two ... ok\n{tail}"
    ));
    let out = run();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("cargo counts 2 tests, the output lists 1"),
        "{}",
        text(&out)
    );
}

/// CI, 2026-11-29: with more than a pipe's worth of test names, the audit's lookup of a skipped
/// test stopped reading at its match, its writer died of SIGPIPE, and pipefail made the whole
/// audit exit 141 after a green run. A large listing with a skip at its top must pass.
#[test]
fn audit_tests_reads_a_skip_in_a_listing_larger_than_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("test.log");
    let n = 4000;
    let mut body = format!(
        "     Running tests/it/main.rs (target/release/deps/it-0123456789abcdef)\n\nrunning {n} tests\n"
    );
    body.push_str("test replay::replay_without_a_gpu_says_so ... ok\n");
    for i in 1..n {
        body.push_str(&format!(
            "test padding::a_test_with_a_name_long_enough_to_fill_a_pipe_quickly_{i} ... ok\n"
        ));
    }
    body.push_str(&format!(
        "\ntest result: ok. {n} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.00s\n"
    ));
    assert!(body.len() > 4 * 65536, "the listing must outgrow a pipe");
    std::fs::write(&log, body).unwrap();
    std::fs::write(
        dir.path().join("test.log.skips"),
        "replay::replay_without_a_gpu_says_so: skipped: no-gpu: a GPU is present\n",
    )
    .unwrap();
    let out = script("audit-tests", &[log.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{:?}\n{}", out.status, text(&out));
    assert!(text(&out).contains("allowed:"), "{}", text(&out));
}
