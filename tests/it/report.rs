//! `r3 report` from a fixed trials database: a real kernel compiled into a store by
//! r3-clang++, and hand-written trials with deterministic times.

use crate::support::*;
use r3::candidate::Candidate;
use r3::kernel::TrialsKey;
use r3::passes::catalog::Catalog;
use r3::passes::pipeline::Pipeline;
use r3::report::render::{render, Format};
use r3::report::tuning::{build, ReportOptions};
use r3::store::outcome::{Outcome, TimeStats};
use r3::store::trials::TrialRecord;
use r3::store::Store;
use std::path::{Path, PathBuf};

const KERNEL: &str = "_Z5saxpyfPKfPfi";

/// Trials are keyed by the kernel's content hash: saxpy's, in this store.
fn key(store: &Store) -> String {
    let kernels = store.kernels().unwrap();
    kernels
        .into_iter()
        .find(|k| k.signature.name == KERNEL)
        .unwrap()
        .hash
        .to_string()
}
const GPU: &str = "NVIDIA H200";

fn compile_into_store(dir: &Path) -> PathBuf {
    saxpy_store(dir)
}

fn ts(median_us: f64, spread: f64) -> TimeStats {
    TimeStats {
        median_us,
        min_us: median_us * 0.97,
        spread,
        samples: 50,
        raced: false,
    }
}

fn valid(us: f64) -> Outcome {
    Outcome::Valid {
        time: ts(us, 0.021),
        baseline: ts(10.0, 0.018),
    }
}

fn rec(kernel: &str, gpu: &str, trial: u32, c: &Candidate, o: Outcome) -> TrialRecord {
    TrialRecord {
        format: r3::store::trials::FORMAT,
        trial,
        kernel: kernel.into(),
        gpu: gpu.into(),
        driver: "580.65".into(),
        device: None,
        target: None,
        r3_version: "0.1.0".into(),
        strategy: "bo".into(),
        seed: 7,
        batch: 4,
        candidate: c.clone(),
        ptx_hash: (!matches!(o, Outcome::CompileError { .. }))
            .then(|| format!("{:016x}", 0xabc0 + trial as u64).into()),
        duplicate_of: None,
        outcome: o,
        passes_ms: 30.0,
        codegen_ms: 20.0,
        measure_ms: 150.0,
        finished_unix_ms: 1_760_000_000_000 + 1_500 * trial as u64,
    }
}

/// O3 edited: the first `licm` removed, `loop-unroll<O3>` made `<O2>`, `instcombine` added.
fn best_candidate() -> Candidate {
    let cat = Catalog::builtin().unwrap();
    let mut p = Pipeline::parse(&cat.preset("O3").unwrap().pipeline).unwrap();
    let licm = p.steps.iter().position(|s| s.name == "licm").unwrap();
    p.steps.remove(licm);
    let unroll = p
        .steps
        .iter_mut()
        .find(|s| s.name == "loop-unroll")
        .unwrap();
    unroll.params = vec!["O2".into()];
    let n = p.steps.len();
    p.insert(n, cat.pass("instcombine").unwrap(), vec![]);
    Candidate::with_pipeline(&p.render())
}

/// The fixture: saxpy on an H200 (11 trials: every outcome, a duplicate, three ablations),
/// and a kernel tuned in simulation that is not in the store.
fn fixture(dir: &Path) -> Store {
    let store = Store::open(&compile_into_store(dir)).unwrap();
    let key = key(&store);
    let best = best_candidate();
    let other = Candidate::with_pipeline("default<O2>");
    let abl = r3::passes::diff::ablations(&best).unwrap();
    let gvn = abl.iter().find(|a| a.pass.ends_with("/gvn<>")).unwrap();
    let sroa = abl.iter().find(|a| a.pass.contains("/sroa")).unwrap();
    let added = abl.last().unwrap();
    let mut dup = rec(&key, GPU, 7, &other, valid(9.5));
    dup.duplicate_of = Some(1);
    dup.ptx_hash = Some(format!("{:016x}", 0xabc0 + 1).into());
    let msg = |m: &str| m.to_string();
    let recs = vec![
        rec(&key, GPU, 0, &Candidate::baseline(), valid(10.0)),
        rec(&key, GPU, 1, &other, valid(9.5)),
        rec(
            &key,
            GPU,
            2,
            &Candidate::with_pipeline("function(nosuchpass)"),
            Outcome::CompileError {
                message: msg("unknown pass"),
            },
        ),
        rec(&key, GPU, 3, &best, valid(8.0)),
        rec(
            &key,
            GPU,
            4,
            &other,
            Outcome::WrongOutput {
                message: msg("y[3] differs"),
            },
        ),
        rec(
            &key,
            GPU,
            5,
            &other,
            Outcome::Crashed {
                message: msg("illegal address"),
            },
        ),
        rec(&key, GPU, 6, &other, Outcome::TimedOut { limit_ms: 500.0 }),
        dup,
        rec(&key, GPU, 8, &gvn.candidate, valid(9.0)),
        rec(
            &key,
            GPU,
            9,
            &sroa.candidate,
            Outcome::WrongOutput {
                message: msg("y[0] differs"),
            },
        ),
        rec(&key, GPU, 10, &added.candidate, valid(8.2)),
    ];
    let mut log = store
        .open_trials(&TrialsKey::from(key.as_str()), GPU)
        .unwrap();
    for r in &recs {
        log.append(r).unwrap();
    }
    let sim = "simulated: synthetic";
    let mut log = store
        .open_trials(&TrialsKey::from("landscape-k"), sim)
        .unwrap();
    for (i, us) in [10.0, 9.8, 9.1].into_iter().enumerate() {
        let c = if i == 0 {
            Candidate::baseline()
        } else {
            other.clone()
        };
        log.append(&rec("landscape-k", sim, i as u32, &c, valid(us)))
            .unwrap();
    }
    store
}

#[test]
fn ablation_trials_in_their_own_file_count_as_pass_importance() {
    let dir = tempfile::tempdir().unwrap();
    let store = fixture(dir.path());
    let abl = r3::passes::diff::ablations(&best_candidate()).unwrap();
    let first = &abl[0];
    let mut log = store
        .open_ablations(&TrialsKey::from(key(&store).as_str()), GPU)
        .unwrap();
    log.append(&rec(&key(&store), GPU, 11, &first.candidate, valid(8.8)))
        .unwrap();
    let opts = ReportOptions {
        kernels: Vec::new(),
        ptxas: None,
        code: false,
    };
    let rep = build(&store, &opts).unwrap();
    assert_eq!(rep.kernels.len(), 2, "the ablations file is no trials file");
    let k = rep
        .kernels
        .iter()
        .find(|k| k.kernel == key(&store))
        .unwrap();
    assert_eq!(k.importance.measured, 4);
    let p = k.importance.passes.iter().find(|p| p.trial == 11).unwrap();
    assert_eq!(
        (p.index, p.pass.as_str()),
        (first.index, first.pass.as_str())
    );
    assert!((p.slowdown.unwrap() - 1.1).abs() < 1e-9);
}

/// With R3_TEST_KEEP_REPORTS=DIR, a report's HTML is kept as DIR/NAME.html, to be looked at
/// in a browser (`scripts/report-screenshots`).
fn keep_html(name: &str, rep: &r3::report::tuning::Report) {
    if let Some(keep) = std::env::var_os("R3_TEST_KEEP_REPORTS") {
        std::fs::create_dir_all(&keep).unwrap();
        let file = Path::new(&keep).join(format!("{name}.html"));
        std::fs::write(file, render(rep, Format::Html)).unwrap();
    }
}

fn filtered(text: &str, store: &Store) -> String {
    let root = store.root().display().to_string();
    let text = mask_hashes(&text.replace(&root, "[STORE]"));
    let text = text.replace(&r3::toolchain::llvm_version(), "[LLVM]");
    text.replace(env!("CARGO_PKG_VERSION"), "[VERSION]")
}

/// Content hashes (they differ with the LLVM that compiled the store's kernel) where the
/// reports put them: quoted in JSON, in code spans, as a directory of a path. Not any run of
/// 16 hex digits, which is also the fraction of a float: `1.1180339887498949`.
fn mask_hashes(text: &str) -> String {
    regex::Regex::new(r#"(["`/])[0-9a-f]{16}(["`/])"#)
        .unwrap()
        .replace_all(text, "${1}[HASH]${2}")
        .into_owned()
}

#[test]
fn the_snapshot_filter_masks_hashes_and_leaves_numbers() {
    let hash = "0123456789abcdef";
    let text = format!(
        "\"kernel\": \"{hash}\", `{hash}`, trials/{hash}/gpu.jsonl, \"speedup\": 1.1180339887498949, 0.8000000000000000"
    );
    assert_eq!(
        mask_hashes(&text),
        "\"kernel\": \"[HASH]\", `[HASH]`, trials/[HASH]/gpu.jsonl, \"speedup\": 1.1180339887498949, 0.8000000000000000"
    );
}

#[test]
fn reports_from_a_fixed_trials_database() {
    let dir = tempfile::tempdir().unwrap();
    let store = fixture(dir.path());
    let opts = ReportOptions {
        kernels: Vec::new(),
        ptxas: None,
        code: true,
    };
    let rep = build(&store, &opts).unwrap();
    assert_eq!(rep.schema_version, 3);
    assert_eq!(rep.kernels.len(), 2);
    let k = rep
        .kernels
        .iter()
        .find(|k| k.kernel == key(&store))
        .unwrap();
    let best = k.best.as_ref().unwrap();
    assert_eq!(best.trial, 3);
    assert!((best.speedup - 1.25).abs() < 1e-9);
    assert_eq!(k.name, "saxpy(float, float const*, float*, int)");
    assert_eq!(k.importance.status, "partial");
    assert_eq!(k.importance.measured, 3);
    // Breaking the kernel ranks first, then the larger slowdown.
    let order: Vec<&str> = k
        .importance
        .passes
        .iter()
        .map(|p| p.outcome.as_str())
        .collect();
    assert_eq!(order, ["wrong_output", "valid", "valid"]);
    assert!(k.importance.passes[1].slowdown.unwrap() > k.importance.passes[2].slowdown.unwrap());
    let p = k.pipeline.as_ref().unwrap();
    assert_eq!((p.removed, p.added, p.changed), (1, 1, 1));
    let o = &k.outcomes;
    assert_eq!(
        (
            o.valid,
            o.wrong_output,
            o.crashed,
            o.timed_out,
            o.compile_error,
            o.duplicates
        ),
        (6, 2, 1, 1, 1, 1)
    );
    let code = &k.code;
    assert!(code.unavailable.is_none(), "{:?}", code.unavailable);
    assert!(code.errors.is_empty(), "{:?}", code.errors);
    let base = code.baseline.as_ref().unwrap();
    assert!(
        base.mix["ld.global"] >= 2 && base.mix["st.global"] >= 1,
        "{base:?}"
    );
    assert_eq!(base.mix.values().sum::<usize>(), base.ptx_instructions);
    assert!(code.ir_after_each_pass.len() > 50);
    assert!(code.ir_after_each_pass.iter().all(|s| s.error.is_none()));
    let sim = rep
        .kernels
        .iter()
        .find(|k| k.kernel == "landscape-k")
        .unwrap();
    assert_eq!(
        sim.code.unavailable.as_deref(),
        Some("the kernel is not in the store")
    );
    // The simulated search is reported apart: in its own summary, never in the measured one.
    assert!(!k.simulated && sim.simulated);
    let s = &rep.summary;
    let rows = |s: &r3::report::tuning::Summary| -> Vec<String> {
        s.rows.iter().map(|r| r.kernel.clone()).collect()
    };
    assert_eq!((s.kernels, s.tuned, rows(s)), (1, 1, vec![key(&store)]));
    assert!((s.geomean_speedup.unwrap() - 1.25).abs() < 1e-9);
    assert_eq!(s.total_trials, 11);
    let simulated = s.simulated.as_deref().unwrap();
    assert_eq!(
        (simulated.kernels, rows(simulated)),
        (1, vec!["landscape-k".to_string()])
    );
    assert!((simulated.geomean_speedup.unwrap() - 10.0 / 9.1).abs() < 1e-9);
    assert!(simulated.simulated.is_none());

    insta::assert_snapshot!(
        "report_md",
        filtered(&render(&rep, Format::Markdown), &store)
    );
    let json = filtered(&render(&rep, Format::Json), &store);
    let masked_number = regex::Regex::new(r"[0-9.]\[HASH\]").unwrap();
    assert!(!masked_number.is_match(&json), "a number masked as a hash");
    insta::assert_snapshot!("report_json", json);

    keep_html("fixture", &rep);
    let html = render(&rep, Format::Html);
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("</html>"));
    assert_eq!(html.matches("<svg").count(), 4);
    // Self-contained: no link to anything outside the file.
    for bad in ["src=\"http", "href=\"http", "@import", "url("] {
        assert!(!html.contains(bad), "{bad}");
    }
    let term = render(&rep, Format::Term);
    assert!(
        term.contains("Ships the best: 1.250× faster than -O3 (trial 3)."),
        "{term}"
    );
    // Nothing of r3's own code is shown to users: no Rust paths in any format.
    for f in [Format::Term, Format::Markdown, Format::Html, Format::Json] {
        let text = render(&rep, f);
        assert!(!text.contains("r3::"), "{f:?}: {text}");
    }
}

#[test]
fn registers_and_spills_come_from_ptxas_when_there_is_one() {
    // Every run of the tests has the SDK (scripts/test sets it up; `.ci/run` says why), so its
    // absence fails here rather than passing with nothing checked.
    let cuda = r3::toolchain::find_cuda(None)
        .unwrap_or_else(|e| panic!("the tests need the CUDA SDK: {e}"));
    let ptxas = cuda.path.join("bin/ptxas");
    assert!(ptxas.is_file(), "no ptxas at {}", ptxas.display());
    let dir = tempfile::tempdir().unwrap();
    let store = fixture(dir.path());
    let opts = ReportOptions {
        kernels: vec!["saxpy".into()],
        ptxas: Some(ptxas),
        code: true,
    };
    let rep = build(&store, &opts).unwrap();
    assert_eq!(rep.kernels.len(), 1);
    let code = &rep.kernels[0].code;
    assert!(
        code.ptxas_unavailable.is_none(),
        "{:?}",
        code.ptxas_unavailable
    );
    let base = code.baseline.as_ref().unwrap();
    assert!(base.registers.unwrap() > 0);
    assert_eq!(base.spill_store_bytes, Some(0));
}

#[test]
fn r3_report_writes_every_format_and_names_unknown_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let store = fixture(dir.path());
    let s = store.root().to_str().unwrap();
    for (fmt, needle) in [
        ("term", "Pass importance"),
        ("md", "## Summary"),
        ("json", "\"schema_version\": 3"),
        ("html", "<svg"),
    ] {
        let file = dir.path().join(format!("report.{fmt}"));
        let out = r3(
            &[
                "report",
                "--format",
                fmt,
                "-o",
                file.to_str().unwrap(),
                "--r3-store",
                s,
            ],
            dir.path(),
        );
        assert!(out.status.success(), "{fmt}: {}", stderr(&out));
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(needle), "{fmt}");
        // To look at them (e.g. the HTML in a browser): R3_TEST_KEEP_REPORTS=DIR.
        if let Some(keep) = std::env::var_os("R3_TEST_KEEP_REPORTS") {
            std::fs::create_dir_all(&keep).unwrap();
            std::fs::copy(&file, Path::new(&keep).join(format!("report.{fmt}"))).unwrap();
        }
        if fmt == "json" {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["kernels"].as_array().unwrap().len(), 2);
        }
    }
    let out = r3(&["report", "saxpy", "--r3-store", s], dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("landscape-k"));
    let out = r3(&["report", "nosuchkernel", "--r3-store", s], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("'nosuchkernel'") && err.contains("saxpy(float, float const*, float*, int) ["),
        "{err}"
    );
    let out = r3(&["report", "--format", "pdf", "--r3-store", s], dir.path());
    assert!(!out.status.success());
    assert!(stderr(&out).contains("term, md, html or json"));
}

#[test]
fn reports_on_a_simulated_tuning_run() {
    use r3::remix::sim::{synthetic, Family, Simulator};
    use r3::remix::space::Space;
    use r3::remix::tune::{tune, TuneOptions};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(&dir.path().join("store")).unwrap();
    for (kernel, family) in [("k1", Family::Sparse), ("k2", Family::Knobs)] {
        let l = synthetic(family, 3);
        let space = Space::builtin(l.space.clone()).unwrap();
        let mut sim = Simulator::new(l);
        let mut log = store
            .open_trials(&TrialsKey::from(kernel), "simulated: synthetic")
            .unwrap();
        let opts = TuneOptions {
            kernel: kernel.into(),
            strategy: "random".into(),
            seed: 1,
            budget: 40,
            time: None,
            limit: None,
            batch: 4,
            transfer: false,
            recipes: false,
            race: false,
        };
        let never = std::sync::atomic::AtomicBool::new(false);
        tune(
            &mut sim,
            &space,
            &opts,
            Vec::new(),
            Some(&mut log),
            &never,
            |_| {},
        )
        .unwrap();
    }
    let rep = build(&store, &ReportOptions::default()).unwrap();
    assert_eq!(rep.kernels.len(), 2);
    for k in &rep.kernels {
        assert_eq!(k.trials, 40);
        assert_eq!(k.convergence.len(), 40);
        let best = k.best.as_ref().unwrap();
        assert!(best.speedup >= 1.0, "the baseline is a valid trial");
        assert!(!k.top.is_empty() && k.top.len() <= 5);
        assert_eq!(
            k.code.unavailable.as_deref(),
            Some("the kernel is not in the store")
        );
    }
    for f in [Format::Term, Format::Markdown, Format::Html, Format::Json] {
        assert!(!render(&rep, f).is_empty());
    }
    // Nothing was measured: no measured figure, the simulated ones apart.
    let s = &rep.summary;
    assert_eq!((s.kernels, s.geomean_speedup, s.rows.len()), (0, None, 0));
    assert!(rep.kernels.iter().all(|k| k.simulated));
    assert_eq!(s.simulated.as_ref().unwrap().tuned, 2);
    let md = render(&rep, Format::Markdown);
    assert!(
        md.starts_with(
            "# r3 pass-order report\n\nNo measured search; 2 simulated search(es), reported apart"
        ) && !md.contains("## Summary")
            && md.contains("## Simulated searches"),
        "{md}"
    );
    // A damaged file beside one search's trials costs that search, not the report; with
    // nothing else left, it is the error, with its fix.
    let k1 = store.trials_path(&TrialsKey::from("k1"), "simulated: synthetic");
    std::fs::write(k1.with_extension("confirm.json"), "nope").unwrap();
    let rep = build(&store, &ReportOptions::default()).unwrap();
    let names: Vec<&str> = rep.kernels.iter().map(|k| k.kernel.as_str()).collect();
    assert_eq!(names, ["k2"]);
    let only = ReportOptions {
        kernels: vec!["k1".into()],
        ..Default::default()
    };
    let e = build(&store, &only).unwrap_err().to_string();
    assert!(e.contains("confirm.json") && e.contains("fix:"), "{e}");
}

#[test]
fn the_report_says_what_apply_ships_and_why_not_the_best() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&compile_into_store(dir.path())).unwrap();
    let key = key(&store);
    let bounded = Candidate {
        max_threads: Some(256),
        ..Candidate::with_pipeline("default<O2>")
    };
    let plain = Candidate::with_pipeline("default<O1>");
    let mut log = store
        .open_trials(&TrialsKey::from(key.as_str()), GPU)
        .unwrap();
    for r in [
        rec(&key, GPU, 0, &Candidate::baseline(), valid(10.0)),
        rec(&key, GPU, 1, &bounded, valid(7.0)),
        rec(&key, GPU, 2, &plain, valid(8.0)),
    ] {
        log.append(&r).unwrap();
    }
    let opts = ReportOptions {
        kernels: Vec::new(),
        ptxas: None,
        code: false,
    };
    let rep = build(&store, &opts).unwrap();
    let a = &rep.kernels[0].apply;
    assert_eq!(a.trial, Some(2));
    assert!((a.speedup.unwrap() - 1.25).abs() < 1e-9);
    // The best sets launch bounds: it ships beside trial 2, behind its guard.
    assert_eq!(
        a.note,
        "applies trial 2 where every launch may run it, and the best (trial 1) behind its guard"
    );
    assert_eq!(a.variants.len(), 1);
    let v = &a.variants[0];
    assert_eq!((v.trial, v.guard.as_str()), (1, "threads <= 256"));
    assert!((v.speedup.unwrap() - 10.0 / 7.0).abs() < 1e-9);

    // A best with a guard that is not 2% faster than the generic code is not worth a variant,
    // and the report says so.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&compile_into_store(dir.path())).unwrap();
    let k = self::key(&store);
    let mut log = store
        .open_trials(&TrialsKey::from(k.as_str()), GPU)
        .unwrap();
    for r in [
        rec(&k, GPU, 0, &Candidate::baseline(), valid(10.0)),
        rec(&k, GPU, 1, &bounded, valid(7.9)),
        rec(&k, GPU, 2, &plain, valid(8.0)),
    ] {
        log.append(&r).unwrap();
    }
    let a = &build(&store, &opts).unwrap().kernels[0].apply;
    assert_eq!(a.trial, Some(2));
    assert!(a.variants.is_empty());
    assert!(
        a.note
            .contains("the best (trial 1) needs a guard, and as a variant is not faster"),
        "{}",
        a.note
    );
}

#[test]
fn a_best_wrong_on_another_recorded_launch_is_not_applied_and_the_report_says_where() {
    use r3::store::trials::{Confirmation, LaunchCheck};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&compile_into_store(dir.path())).unwrap();
    let key = key(&store);
    let mut log = store
        .open_trials(&TrialsKey::from(key.as_str()), GPU)
        .unwrap();
    for r in [
        rec(&key, GPU, 0, &Candidate::baseline(), valid(10.0)),
        rec(
            &key,
            GPU,
            1,
            &Candidate::with_pipeline("default<O1>"),
            valid(6.0),
        ),
    ] {
        log.append(&r).unwrap();
    }
    drop(log);
    let confirm = |launches| Confirmation {
        format: 1,
        trial: 1,
        outcome: valid(6.5),
        finished_unix_ms: 0,
        launches,
        context_ratios: Vec::new(),
        in_program: Vec::new(),
        unconfirmed: None,
    };
    let check = |id: &str, outcome| LaunchCheck {
        recording: id.into(),
        outcome,
    };
    let opts = ReportOptions {
        kernels: Vec::new(),
        ptxas: None,
        code: false,
    };
    store
        .write_confirmation(
            &TrialsKey::from(key.as_str()),
            GPU,
            &confirm(vec![check("saxpy/2", valid(7.0))]),
        )
        .unwrap();
    let rep = build(&store, &opts).unwrap();
    let a = &rep.kernels[0].apply;
    assert_eq!(
        (a.trial, a.validated_on.as_slice()),
        (Some(1), &["saxpy/2".to_owned()][..])
    );
    let text = render(&rep, Format::Markdown);
    assert!(
        text.contains("outputs right on 2 recorded launches (saxpy/2 besides"),
        "{text}"
    );

    let wrong = Outcome::WrongOutput {
        message: "y differs".into(),
    };
    store
        .write_confirmation(
            &TrialsKey::from(key.as_str()),
            GPU,
            &confirm(vec![check("saxpy/2", valid(7.0)), check("saxpy/3", wrong)]),
        )
        .unwrap();
    let rep = build(&store, &opts).unwrap();
    let k = &rep.kernels[0];
    assert_eq!(k.apply.trial, None);
    assert_eq!(k.best.as_ref().unwrap().trial, 0);
    assert_eq!(
        k.apply.note,
        "keeps clang's code: the fastest trial (1) gives wrong output on recorded launch saxpy/3"
    );
    let winners =
        r3::report::export::winners(&store, &r3::store::winner::Policy::default()).unwrap();
    assert!(winners.kernels.is_empty(), "{:?}", winners.kernels);

    // Right on every launch, but a program that shipped it measured it slower than the
    // recorded build (`r3 record --time-only`): clang's code again, and the report says why.
    let mut slower = confirm(vec![check("saxpy/2", valid(7.0))]);
    slower.in_program = vec![r3::store::trials::InProgram {
        program: "app-0123".into(),
        binary: "abcd".into(),
        against: r3::store::trials::Against::TimeOnly,
        recorded_ms: 0.02,
        applied_ms: 0.025,
        launches: 4,
        unix_s: 0.0,
    }];
    store
        .write_confirmation(&TrialsKey::from(key.as_str()), GPU, &slower)
        .unwrap();
    let rep = build(&store, &opts).unwrap();
    let k = &rep.kernels[0];
    assert_eq!(k.apply.trial, None);
    assert_eq!(
        k.apply.note,
        "keeps clang's code: the fastest trial (1) ran 0.800× in program app-0123 (r3 record --time-only: 0.0250 ms per launch against the recorded build's 0.0200)"
    );
    let winners =
        r3::report::export::winners(&store, &r3::store::winner::Policy::default()).unwrap();
    assert!(winners.kernels.is_empty(), "{:?}", winners.kernels);
}

/// A program whose census puts saxpy at 90% of its GPU time: the report predicts its speedup
/// by Amdahl with saxpy at its best (10 µs → 8 µs, 1.25×), and measures it from two time-only
/// runs at the same path, the recorded build's and another's.
#[test]
fn the_report_predicts_and_measures_each_program() {
    use r3::store::programs::{Census, KernelCensus, KernelTiming, Timing};
    let dir = tempfile::tempdir().unwrap();
    let store = fixture(dir.path());
    let saxpy = key(&store);
    let kernel = |hash: &str, name: &str, ms: f64| KernelCensus {
        kernel: Some(hash.into()),
        name: name.into(),
        launches: 10,
        estimated_ms: Some(ms),
        timed_launches: 10,
        scaled_launches: 0,
        recurrence: Vec::new(),
        recorded: Vec::new(),
    };
    store
        .put_census(&Census {
            format: 1,
            program: "./app".into(),
            path: "/build/app".into(),
            binary: "recorded0000000".into(),
            args: Vec::new(),
            unix_s: 1.0,
            launches: 20,
            unknown_launches: 0,
            kernels: vec![
                kernel(&saxpy, KERNEL, 90.0),
                kernel("00000000deadbeef", "_Z5otherv", 10.0),
            ],
        })
        .unwrap();
    let timing = |binary: &str, unix_s: f64, total_ms: f64| Timing {
        format: 1,
        program: "./app".into(),
        path: "/build/app".into(),
        binary: binary.into(),
        args: Vec::new(),
        unix_s,
        total_ms,
        launches: 20,
        kernels: vec![KernelTiming {
            name: KERNEL.into(),
            launches: 10,
            ms: total_ms,
        }],
        shipped: Vec::new(),
    };
    store
        .put_timing(&timing("recorded0000000", 2.0, 100.0))
        .unwrap();
    store
        .put_timing(&timing("applied00000000", 3.0, 80.0))
        .unwrap();
    let rep = build(&store, &ReportOptions::default()).unwrap();
    let p = rep
        .programs
        .iter()
        .find(|p| p.gpu == GPU)
        .expect("a program report on the searched GPU");
    assert_eq!((p.name.as_str(), p.kernels, p.tuned), ("app", 2, 1));
    assert!((p.tuned_share - 0.9).abs() < 1e-12);
    let amdahl = 1.0 / (0.9 / 1.25 + 0.1);
    assert!(
        (p.predicted_best - amdahl).abs() < 1e-9,
        "{}",
        p.predicted_best
    );
    assert!(p.predicted_shipped >= 1.0 && p.predicted_shipped <= p.predicted_best);
    let m = p.measured.as_ref().unwrap();
    assert_eq!((m.recorded_ms, m.applied_ms), (100.0, 80.0));
    assert!((m.speedup - 1.25).abs() < 1e-12);
    assert_eq!(p.top[0].hash.as_deref(), Some(saxpy.as_str()));
    keep_html("programs", &rep);
    // Rendered: the Programs section, before the summary.
    let md = r3::report::render::render(&rep, r3::report::render::Format::Markdown);
    let programs = md.find("## Programs").expect("a Programs section");
    assert!(programs < md.find("## Summary").unwrap());
    assert!(md.contains(&format!("{:.3}×", amdahl)), "{md}");
}

/// The user trial's finding: a search's best ran 2× in the search, its confirmation in fresh
/// processes 1.25×, and apply builds with the confirmed one; on another GPU the best gains
/// less than is worth a change, so clang's code ships. The report leads with what ships, the
/// same numbers `r3 export` writes, and shows the best beside it.
#[test]
fn the_report_leads_with_what_ships_beside_the_best() {
    use r3::store::trials::Confirmation;
    use r3::store::winner::Policy;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&compile_into_store(dir.path())).unwrap();
    let key = key(&store);
    let o1 = Candidate::with_pipeline("default<O1>");
    let h100 = "NVIDIA H100";
    for (gpu, us) in [(GPU, 5.0), (h100, 9.9)] {
        let mut log = store
            .open_trials(&TrialsKey::from(key.as_str()), gpu)
            .unwrap();
        log.append(&rec(&key, gpu, 0, &Candidate::baseline(), valid(10.0)))
            .unwrap();
        log.append(&rec(&key, gpu, 1, &o1, valid(us))).unwrap();
    }
    let confirmed = Confirmation {
        format: 1,
        trial: 1,
        outcome: valid(8.0),
        finished_unix_ms: 0,
        launches: Vec::new(),
        context_ratios: Vec::new(),
        in_program: Vec::new(),
        unconfirmed: None,
    };
    store
        .write_confirmation(&TrialsKey::from(key.as_str()), GPU, &confirmed)
        .unwrap();
    let rep = build(&store, &ReportOptions::default()).unwrap();
    let on = |gpu: &str| rep.kernels.iter().find(|k| k.gpu == gpu).unwrap();
    let (h200, h100k) = (on(GPU), on(h100));
    assert_eq!(h200.best.as_ref().unwrap().speedup, 2.0);
    assert_eq!(
        (h200.apply.shipped_trial, h200.apply.shipped_speedup),
        (Some(1), 1.25)
    );
    assert_eq!(
        (h100k.apply.shipped_trial, h100k.apply.shipped_speedup),
        (None, 1.0)
    );
    let s = &rep.summary;
    assert_eq!((s.tuned, s.shipped), (2, 1));
    assert!((s.geomean_shipped.unwrap() - 1.25f64.sqrt()).abs() < 1e-12);
    assert!((s.geomean_speedup.unwrap() - (2.0f64 * 10.0 / 9.9).sqrt()).abs() < 1e-12);

    // The same numbers as the winners file apply builds from, under the same policy.
    let export = |gpu: &str| {
        let policy = Policy {
            gpu: Some(gpu.into()),
            ..Policy::default()
        };
        r3::report::export::winners(&store, &policy)
            .unwrap()
            .kernels
    };
    let shipped = export(GPU);
    assert_eq!(shipped.len(), 1);
    assert_eq!(shipped[0].confirmed_speedup, Some(1.25));
    assert!(export(h100).is_empty(), "under R3_APPLY_MIN_SPEEDUP");

    let term = render(&rep, Format::Term);
    assert!(
        term.contains("Ships: 1.118× faster than -O3 (geometric mean over 2 tuned kernel–GPU pair(s); a winner ships for 1 of them, the others keep clang's code). Best found: 1.421×"),
        "{term}"
    );
    assert!(
        term.contains("Ships: 1.250× faster than -O3 (trial 1, as re-measured after the search, which apply goes by). Best found: 2.000× (trial 1, as the search measured it)."),
        "{term}"
    );
    assert!(
        term.contains(
            "Ships: clang's code (-O3); the Apply line below says why. Best found: 1.010× (trial 1)."
        ),
        "{term}"
    );
    // The summary puts what ships first: -O3 where clang's code is kept.
    let summary = &term[term.find("Summary\n").unwrap()..];
    let lines: Vec<&str> = summary
        .lines()
        .filter(|l| l.starts_with("  saxpy"))
        .collect();
    assert!(
        lines[0].contains("NVIDIA H200") && lines[0].contains("1.250×  2.000×"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("NVIDIA H100") && lines[1].contains("-O3  1.010×"),
        "{lines:?}"
    );

    // HTML: each summary row links to its kernel's section and sorts by the values.
    keep_html("ships-and-best", &rep);
    let html = render(&rep, Format::Html);
    let table = &html[html.find("<table class=\"sortable\">").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    let rows: Vec<&str> = table.split("<tr>").skip(2).collect();
    assert_eq!(rows.len(), 2, "{table}");
    let cell = regex::Regex::new(r#"<td( class="r")?( data-v="([^"]*)")?>(.*?)</td>"#).unwrap();
    let href = regex::Regex::new(r##"href="#([^"]+)""##).unwrap();
    for (row, k) in rows.iter().zip([h200, h100k]) {
        let cells: Vec<_> = cell.captures_iter(row).collect();
        let id = &href.captures(&cells[0][4]).expect("a link")[1];
        assert!(html.contains(&format!("<h2 id=\"{id}\">")), "{id}");
        assert!(html[html.find(&format!("<h2 id=\"{id}\">")).unwrap()..].contains(&k.gpu));
        assert!(cells[0].get(2).is_none(), "a name sorts as text: {row}");
        let key = |i: usize| cells[i][3].parse::<f64>().unwrap();
        assert_eq!(key(2), k.apply.shipped_speedup, "{row}");
        assert_eq!(key(3), k.best.as_ref().unwrap().speedup, "{row}");
        assert_eq!(key(6), k.trials as f64, "{row}");
        assert_eq!(key(7), k.tuning_s, "{row}");
    }
    let json: serde_json::Value = serde_json::from_str(&render(&rep, Format::Json)).unwrap();
    assert_eq!(json["summary"]["shipped"], 1);
    assert_eq!(json["summary"]["rows"][0]["shipped_speedup"], 1.25);
    assert!(
        json["summary"]["geomean_speedup"].is_number(),
        "kept as it was"
    );
}

/// Most of an O3-sized pipeline's ablations leave the PTX unchanged (slowdown 1.000): they are
/// folded into one line, not listed one row each.
#[test]
fn passes_without_a_measurable_effect_are_folded() {
    let dir = tempfile::tempdir().unwrap();
    let store = fixture(dir.path());
    let k = key(&store);
    let abl = r3::passes::diff::ablations(&best_candidate()).unwrap();
    let mut log = store
        .open_ablations(&TrialsKey::from(k.as_str()), GPU)
        .unwrap();
    // Twenty ablations measured at the best's own time; the fixture's three stay as they are.
    let flat: Vec<_> = abl
        .iter()
        .filter(|a| !a.pass.ends_with("/gvn<>") && !a.pass.contains("/sroa"))
        .take(20)
        .collect();
    for (i, a) in flat.iter().enumerate() {
        log.append(&rec(&k, GPU, 100 + i as u32, &a.candidate, valid(8.0)))
            .unwrap();
    }
    let opts = ReportOptions {
        kernels: vec!["saxpy".into()],
        ..Default::default()
    };
    let rep = build(&store, &opts).unwrap();
    assert_eq!(
        rep.kernels[0].importance.passes.len(),
        23,
        "all in the JSON"
    );
    let term = render(&rep, Format::Term);
    let imp = &term[term.find("Pass importance").unwrap()..term.find("Convergence").unwrap()];
    assert!(
        imp.contains(&format!(
            "20 passes with no measurable effect (slowdown 1.000): {}, ",
            flat[0].pass
        )) && imp.contains(", and 15 more."),
        "{imp}"
    );
    assert_eq!(imp.matches(" 1.000 ").count(), 0, "no row at 1.000: {imp}");
    assert!(
        imp.contains("1.125"),
        "the passes that matter stay in the table: {imp}"
    );
    keep_html("folded-importance", &rep);
    let html = render(&rep, Format::Html);
    let details = html
        .find("<details><summary>20 passes with no measurable effect (slowdown 1.000)</summary><table>")
        .expect("folded in a <details>");
    assert_eq!(
        html[details..]
            .matches("<td class=\"r\">1.000</td>")
            .count(),
        20
    );
}
