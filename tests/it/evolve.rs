//! `r3 evolve` without a GPU or a network: a scripted OpenAI-compatible server on loopback,
//! real compiles with the recorded command, and a scripted judge (`--simulate`).

use crate::support::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const MV: &str = r#"#include <cstdio>
__device__ float mul(float a, float b) { return a * b; }

__global__ void mv(int n, const float *A, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (int j = 0; j < n; j++) y[i] += mul(A[i * n + j], x[j]);
  }
}

int main() { printf("host code stays as it is\n"); return 0; }
"#;

/// Compiles MV with r3-clang++ in `dir` into `dir/store`.
fn mv_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    std::fs::write(dir.join("mv.cu"), MV).unwrap();
    let out = cuda_driver(&driver_links(dir), &store)
        .args(["-c", "mv.cu", "-o", "mv.o"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        store.join("kernels").is_dir(),
        "r3-clang++ stored no kernel: {}",
        stderr(&out)
    );
    store
}

fn evolve(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(r3_bin());
    c.arg("evolve")
        .arg("mv")
        .args(args)
        .current_dir(dir)
        .env("R3_STORE", dir.join("store"))
        .env_remove("R3_LLM_URL")
        .env_remove("R3_LLM_API_KEY");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The scripted judge: `__restrict__` code is twice as fast, a register accumulator 1.5×,
/// `* 3.0f` gives wrong output.
fn script(dir: &Path) -> PathBuf {
    let p = dir.join("judge.json");
    std::fs::write(
        &p,
        r#"{"default_speedup": 1.0, "rules": [
            {"contains": "* 3.0f", "fails": "gives wrong output", "message": "y[0] differs"},
            {"contains": "__restrict__", "speedup": 2.0},
            {"contains": "r3_acc", "speedup": 1.5}
        ]}"#,
    )
    .unwrap();
    p
}

#[test]
fn rules_propose_compile_and_keep_a_diff_against_the_users_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = mv_store(dir.path());
    let judge = script(dir.path());
    let out = evolve(
        dir.path(),
        &["--proposer", "rules", "--simulate", judge.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("rules: register-accumulator"), "{text}");
    // `__restrict__` is proposed, but measured only where recordings show the pointers apart.
    assert!(
        text.contains("rules: restrict")
            && text.contains(
                "was not measured: it needs pointers_disjoint, and there are no recordings here"
            ),
        "{text}"
    );
    assert!(text.contains("rules: unroll-4"), "{text}");
    assert!(text.contains("rules has nothing more to propose"), "{text}");
    let ev = events(&store);
    let acc = ev
        .iter()
        .find(|e| e["label"] == "rules: register-accumulator" && e["parent"].is_null())
        .unwrap()["attempt"]
        .clone();
    let diff = ev
        .iter()
        .find(|e| e["event"] == "compiled" && e["attempt"] == acc)
        .and_then(|e| e["diff"].as_str())
        .unwrap()
        .to_owned();
    assert!(diff.starts_with("--- a/mv.cu\n+++ b/mv.cu\n"), "{diff}");
    assert!(diff.contains("+      auto r3_acc = y[i];\n+      for (int j = 0; j < n; j++) r3_acc += mul(A[i * n + j], x[j]);\n+      y[i] = r3_acc;"), "{diff}");
    assert!(!diff.contains("int main"), "host code untouched: {diff}");
    // The user's file is never edited.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("mv.cu")).unwrap(),
        MV
    );
    // Each variant is a stored kernel of its own, kept out of `r3 kernels`.
    let kernels = stdout(&r3(&["kernels"], dir.path()));
    assert_eq!(kernels.matches("mv(int").count(), 1, "{kernels}");
    // The report shows the best rewrite's diff, marked simulated; JSON has it too.
    let report = r3(&["report", "--format", "md"], dir.path());
    let md = stdout(&report);
    assert!(report.status.success(), "{}", stderr(&report));
    assert!(md.contains("## Source rewrites"), "{md}");
    assert!(
        md.contains("SIMULATED") && md.contains("```diff\n--- a/mv.cu"),
        "{md}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&r3(&["report", "--format", "json"], dir.path()).stdout).unwrap();
    assert_eq!(
        json["rewrites"][0]["name"],
        "mv(int, float const*, float const*, float*)"
    );
    assert!(json["rewrites"][0]["best"]["diff"]
        .as_str()
        .unwrap()
        .contains("r3_acc"));
}

#[test]
fn measuring_only_needs_no_source_and_nothing_to_measure_is_said() {
    let dir = tempfile::tempdir().unwrap();
    mv_store(dir.path());
    let judge = script(dir.path());
    let sim = judge.to_str().unwrap();
    let all = Command::new(r3_bin())
        .args(["evolve", "--all"])
        .env("R3_STORE", dir.path().join("store"))
        .output()
        .unwrap();
    assert_eq!(all.status.code(), Some(1));
    assert!(
        stderr(&all).contains("--all found no kernel to evolve")
            && stderr(&all).contains("fix: `r3 record"),
        "{}",
        stderr(&all)
    );
    let none = evolve(dir.path(), &["--measure-only", "--simulate", sim], &[]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        stderr(&none).contains(
            "no rewrites are stored to measure; fix: run `r3 evolve` without --measure-only"
        ),
        "{}",
        stderr(&none)
    );
    let out = evolve(dir.path(), &["--proposer", "rules", "--no-measure"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("compiled, not measured yet"),
        "{}",
        stdout(&out)
    );
    // Where the GPU is there may be no source (or clang): measuring needs neither.
    std::fs::remove_file(dir.path().join("mv.cu")).unwrap();
    let out = evolve(dir.path(), &["--measure-only", "--simulate", sim], &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(!text.contains("not measured yet"), "{text}");
    assert!(text.contains("measured in this run"), "{text}");
}

#[test]
fn a_changed_source_is_refused_before_anything_is_proposed() {
    let dir = tempfile::tempdir().unwrap();
    mv_store(dir.path());
    std::fs::write(dir.path().join("mv.cu"), MV.replace("y[i] +=", "y[i] -=")).unwrap();
    let out = evolve(dir.path(), &["--proposer", "rules", "--no-measure"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("mv.cu has changed since the kernel was stored"),
        "{err}"
    );
    assert!(err.contains("fix: rebuild with r3-clang++"), "{err}");
}

const KEY: &str = "sk-test-NEVER-STORED-4242";

/// The same rewrite with its accumulator renamed: another text, another variant.
fn renamed(code: &str) -> String {
    code.replace("float s", "float t")
        .replace("s +=", "t +=")
        .replace("= s;", "= t;")
}

fn fenced(code: &str) -> String {
    format!("Here is a faster version.\n```cuda\n{code}\n```\nIt keeps the sum in a register.")
}

#[test]
fn the_model_loop_validates_repairs_refuses_retries_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let store = mv_store(dir.path());
    let judge = script(dir.path());
    let kernel = |body: &str| {
        format!("__device__ float mul(float a, float b) {{ return a * b; }}\n__global__ void mv(int n, const float *__restrict__ A, const float *__restrict__ x, float *__restrict__ y) {{\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {{ {body} }}\n}}")
    };
    let good = kernel(
        "float s = y[i]; for (int j = 0; j < n; j++) s += mul(A[i * n + j], x[j]); y[i] = s;",
    );
    let wrong = kernel("float s = y[i]; for (int j = 0; j < n; j++) s += mul(A[i * n + j], x[j]) * 3.0f; y[i] = s;");
    let broken = kernel(
        "float s = y[i]; for (int j = 0; j < n; j++) s += mul(A[i * n + j], x[j]); y[i] = s_total;",
    );
    let slow = |ms| Answer(200, "{}".into(), Duration::from_millis(ms));
    let (url, seen) = mock_server(vec![
        // attempt 1: a server error, retried once, then recorded as failed
        Answer(500, "{\"error\": \"overloaded\"}".into(), Duration::ZERO),
        Answer(503, "{\"error\": \"overloaded\"}".into(), Duration::ZERO),
        // attempt 2: no answer within the timeout, twice
        slow(2500),
        slow(2500),
        // attempt 3: faster and correct
        chat(&fenced(&good)),
        // attempt 4: compiles, wrong results
        chat(&fenced(&wrong)),
        // attempt 5: a compile error, repaired in attempt 6 from the diagnostics
        chat(&fenced(&broken)),
        chat(&fenced(&renamed(&good))),
        // attempts 7-9: refused before compiling
        chat(&fenced(&good.replace("int n,", "long n,"))),
        chat(&fenced(&format!("#include <cstdlib>\n{good}"))),
        chat(&fenced(&good.replace(
            "float s = y[i];",
            "float s = y[i]; asm(\"trap;\");",
        ))),
    ]);
    let env = [
        ("R3_LLM_URL", url.as_str()),
        ("R3_LLM_MODEL", "mock-coder"),
        ("R3_LLM_API_KEY", KEY),
        ("R3_LLM_TIMEOUT_S", "1"),
        ("R3_LLM_RETRIES", "1"),
        ("R3_LLM_BACKOFF_MS", "10"),
    ];
    let sim = judge.to_str().unwrap();
    // A first run stops after 4 attempts (as if killed there) ...
    let first = evolve(dir.path(), &["--simulate", sim, "--budget", "4"], &env);
    assert!(
        first.status.success(),
        "{}{}",
        stdout(&first),
        stderr(&first)
    );
    // ... a second one without --resume refuses to start over ...
    let again = evolve(dir.path(), &["--simulate", sim, "--budget", "9"], &env);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("already holds 4 attempts; fix: --resume"),
        "{}",
        stderr(&again)
    );
    // ... and --resume goes on from attempt 5, past a torn last line.
    let file = attempts_path(&store);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap()
        .write_all(b"{\"format\":1,\"att")
        .unwrap();
    let out = evolve(
        dir.path(),
        &["--simulate", sim, "--budget", "9", "--resume"],
        &env,
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");

    let ev = events(&store);
    let state = |id: u64, event: &str| {
        ev.iter()
            .find(|e| e["attempt"] == id && e["event"] == event)
            .cloned()
    };
    assert!(state(1, "proposer_failed").unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("HTTP 503"));
    assert!(
        state(2, "proposer_failed").is_some(),
        "timeout recorded: {text}"
    );
    assert_eq!(state(3, "judged").unwrap()["verdict"]["speedup"], 2.0);
    assert_eq!(
        state(4, "judged").unwrap()["verdict"]["why"],
        "gives wrong output"
    );
    assert!(state(5, "compile_failed").unwrap()["diagnostics"]
        .as_str()
        .unwrap()
        .contains("s_total"));
    assert_eq!(state(6, "proposed").unwrap()["repair_of"], 5);
    assert_eq!(state(6, "judged").unwrap()["verdict"]["outcome"], "valid");
    assert!(state(7, "refused").unwrap()["reason"]
        .as_str()
        .unwrap()
        .contains("signature changed"));
    assert!(state(8, "refused").unwrap()["reason"]
        .as_str()
        .unwrap()
        .contains("#include <cstdlib>"));
    assert!(state(9, "refused").unwrap()["reason"]
        .as_str()
        .unwrap()
        .contains("inline assembly"));
    assert!(state(10, "proposed").is_none(), "the budget is 9 attempts");
    let answer = state(3, "proposed").unwrap();
    assert!(answer["answer"]
        .as_str()
        .unwrap()
        .starts_with("Here is a faster version."));
    assert_eq!(answer["prompt_sha"].as_str().unwrap().len(), 16);

    let requests = seen.lock().unwrap().clone();
    assert_eq!(
        requests.len(),
        11,
        "each scripted answer asked for once, none again after the resume"
    );
    assert!(
        requests[0].contains(&format!("authorization: Bearer {KEY}"))
            || requests[0].contains(&format!("Authorization: Bearer {KEY}"))
    );
    assert!(
        requests[4].contains("__global__ void mv"),
        "the prompt holds the code"
    );
    assert!(
        requests[7].contains("s_total") && requests[7].contains("did not compile"),
        "the repair round is sent the diagnostics"
    );
    assert!(
        requests.iter().all(|r| r.matches(KEY).count() <= 1),
        "the key is only in the header"
    );
    assert!(text.contains("model tokens: "), "{text}");

    // The key is in no file the runs wrote, nor in their output.
    assert!(!text.contains(KEY) && !stdout(&first).contains(KEY) && !stderr(&first).contains(KEY));
    for entry in walk(&store) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "{}",
            entry.display()
        );
    }
}

#[test]
fn a_run_killed_while_the_model_thinks_resumes_without_losing_or_repeating_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let store = mv_store(dir.path());
    let judge = script(dir.path());
    let good = "__device__ float mul(float a, float b) { return a * b; }\n__global__ void mv(int n, const float *A, const float *x, float *y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) { float s = y[i]; for (int j = 0; j < n; j++) s += mul(A[i * n + j], x[j]); y[i] = s; }\n}";
    let (url, seen) = mock_server(vec![
        chat(&fenced(good)),
        // the run is killed while this one is outstanding
        Answer(200, "{}".into(), Duration::from_secs(30)),
        chat(&fenced(&renamed(good))),
        chat(&fenced(&good.replace("j++", "++j"))),
    ]);
    let sim = judge.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut c = Command::new(r3_bin());
        c.args(["evolve", "mv", "--simulate", sim, "--budget", "3"])
            .args(extra)
            .current_dir(dir.path())
            .env("R3_STORE", &store)
            .env("R3_LLM_URL", &url)
            .env("R3_LLM_MODEL", "mock")
            .env("R3_LLM_TIMEOUT_S", "60")
            .env("R3_LLM_RETRIES", "0");
        c
    };
    let mut child = run(&[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the second request is outstanding, then kill -9.
    let t0 = std::time::Instant::now();
    while seen.lock().unwrap().len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the second request never came"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    let before: Vec<serde_json::Value> = events(&store);
    assert!(
        before
            .iter()
            .any(|e| e["attempt"] == 1 && e["event"] == "judged"),
        "attempt 1 was complete"
    );
    assert!(
        !before.iter().any(|e| e["attempt"] == 2),
        "nothing of the outstanding one was written"
    );
    let out = run(&["--resume"]).output().unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let ev = events(&store);
    for id in 1..=3u64 {
        let proposed = ev
            .iter()
            .filter(|e| e["attempt"] == id && e["event"] == "proposed")
            .count();
        let judged = ev
            .iter()
            .filter(|e| e["attempt"] == id && e["event"] == "judged")
            .count();
        assert_eq!((proposed, judged), (1, 1), "attempt {id}: {ev:?}");
    }
    assert_eq!(
        seen.lock().unwrap().len(),
        4,
        "attempt 1's answer was not asked for again"
    );
}

#[test]
fn once_its_diff_is_applied_the_rewrite_builds_with_its_own_tuned_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = mv_store(d);
    let judge = script(d);
    let out = evolve(
        d,
        &["--proposer", "rules", "--simulate", judge.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let winners = Command::new(r3_bin())
        .args(["export"])
        .env("R3_STORE", &store)
        .env("R3_APPLY_SIMULATED", "1")
        .output()
        .unwrap();
    let winners: serde_json::Value = serde_json::from_slice(&winners.stdout).unwrap();
    let variant = winners["rewrites"][0]["variant"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(
        d.join("best.diff"),
        winners["rewrites"][0]["diff"].as_str().unwrap(),
    )
    .unwrap();
    // The rewrite's own compiler search (simulated here), under its hash.
    let table = landscape(d);
    let tune = r3(
        &[
            "tune",
            &variant,
            "--simulate",
            table.to_str().unwrap(),
            "--strategy",
            "exhaustive",
            "--budget",
            "600",
        ],
        d,
    );
    assert!(tune.status.success(), "{}", stderr(&tune));
    // The user applies the diff and rebuilds with --r3-apply: the kernel now hashes to the
    // variant, whose winner is built.
    let patched = Command::new("git")
        .args(["apply", "-p1", "best.diff"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(patched.status.success(), "{}", stderr(&patched));
    assert!(std::fs::read_to_string(d.join("mv.cu"))
        .unwrap()
        .contains("r3_acc"));
    let out = cuda_driver(&driver_links(d), &store)
        .args(["--r3-apply", "-c", "mv.cu", "-o", "mv2.o"])
        .env("R3_APPLY_SIMULATED", "1")
        .current_dir(d)
        .output()
        .unwrap();
    let note = stderr(&out);
    assert!(out.status.success(), "{note}");
    assert!(
        note.contains("r3: note: applied tuned code to mv"),
        "{note}"
    );
}

#[test]
fn when_no_rewrite_wins_the_answer_is_to_keep_the_source() {
    let dir = tempfile::tempdir().unwrap();
    mv_store(dir.path());
    let slow = dir.path().join("slow.json");
    std::fs::write(&slow, r#"{"default_speedup": 0.9}"#).unwrap();
    let out = evolve(
        dir.path(),
        &["--proposer", "rules", "--simulate", slow.to_str().unwrap()],
        &[],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(
        text.contains("no rewrite beats the original's best compiler-only build"),
        "{text}"
    );
    let md = stdout(&r3(&["report", "--format", "md"], dir.path()));
    assert!(
        md.contains("keep the source") && !md.contains("```diff"),
        "{md}"
    );
}

/// A model told the knob form answers with a template: each value compiles with the recorded
/// command to a kernel of its own, the scripted judge's landscape over the values picks one,
/// and the verdict and the report name it. No recordings here: the constraint over the launch
/// is left to where the rewrite is measured.
#[test]
fn a_model_answers_with_knobs_and_each_value_is_built_and_judged() {
    let dir = tempfile::tempdir().unwrap();
    let store = mv_store(dir.path());
    let template = "R3_PARAM(R3_UNROLL, 1, 2, 4)\nR3_REQUIRE(R3_UNROLL <= BLOCK_X)\n__device__ float mul(float a, float b) { return a * b; }\n__global__ void mv(int n, const float *__restrict__ A, const float *__restrict__ x, float *__restrict__ y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {\n    float s = y[i];\n#pragma unroll R3_UNROLL\n    for (int j = 0; j < n; j++) s += mul(A[i * n + j], x[j]);\n    y[i] = s;\n  }\n}";
    let (url, seen) = mock_server(vec![chat(&fenced(template))]);
    let judge = dir.path().join("knobs.json");
    std::fs::write(
        &judge,
        r##"{"default_speedup": 1.0, "rules": [
            {"contains": "#define R3_UNROLL 4", "speedup": 1.25},
            {"contains": "#define R3_UNROLL 2", "speedup": 1.4}
        ]}"##,
    )
    .unwrap();
    let env = [
        ("R3_LLM_URL", url.as_str()),
        ("R3_LLM_MODEL", "mock-coder"),
        ("R3_LLM_API_KEY", KEY),
    ];
    let out = evolve(
        dir.path(),
        &["--simulate", judge.to_str().unwrap(), "--budget", "1"],
        &env,
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    let prompt = seen.lock().unwrap().join("\n");
    assert!(
        prompt.contains("R3_PARAM(TILE, 8, 16, 32)") && prompt.contains("R3_REQUIRE"),
        "the model is told the knob form: {prompt}"
    );
    let ev = events(&store);
    let compiled = ev.iter().find(|e| e["event"] == "compiled").unwrap();
    let builds = compiled["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 3, "{compiled}");
    for b in builds {
        let v = b["values"]["R3_UNROLL"].as_i64().unwrap();
        assert!(
            b["diff"]
                .as_str()
                .unwrap()
                .contains(&format!("+#define R3_UNROLL {v}\n")),
            "{b}"
        );
    }
    let judged = ev.iter().find(|e| e["event"] == "judged").unwrap();
    assert_eq!(judged["verdict"]["values"]["R3_UNROLL"], 2, "{judged}");
    assert!(text.contains("rewrite built with R3_UNROLL=2"), "{text}");
}
