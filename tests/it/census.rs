//! The launch census and time-only runs (issue 35) on the recording runtime's fake GPU
//! (fixtures/record_fake_gpu.c, scenario `census`): `r3 record` counts every launch and keeps
//! each kernel's estimated share of the program's GPU time with the program; `r3 record
//! --time-only` times every launch and keeps the measured times. The fake device's launches take
//! their threads at 1/1024 ms each, so every time below is exact:
//!   big:        1 launch of 1024 × 256 threads                      256 ms
//!   small:     50 alike of 4 × 64 (one recorded, its repeats timed)  50 × 0.25 ms
//!               3 of 8 × 64 (past --launches 1)                       3 × 0.5 ms
//!               1 through cudaLaunchKernelEx, 4 × 64 (never recorded)     0.25 ms
//!   unknown:    2 of 2 × 32, a stub with no registration              2 × 0.0625 ms
//! With FAKE_WORK_FROM_N, small's 3 launches of 8 × 64 do twice the work per thread: 3 × 1 ms.

use crate::support::{fake_gpu_program, r3_bin, stderr};
use r3::kernel::TrialsKey;
use r3::store::programs::{KernelTiming, Program};
use r3::store::Store;
use std::path::Path;
use std::process::{Command, Output};

const MS_PER_THREAD: &str = "0.0009765625";

fn r3_record(store: &Path, args: &[&str], exe: &Path, env: &[(&str, &str)]) -> Output {
    r3_record_scenario(store, args, exe, "census", env)
}

fn r3_record_scenario(
    store: &Path,
    args: &[&str],
    exe: &Path,
    scenario: &str,
    env: &[(&str, &str)],
) -> Output {
    let out = Command::new(r3_bin())
        .arg("--r3-store")
        .arg(store)
        .arg("record")
        .args(args)
        .arg("--")
        .arg(exe)
        .arg(scenario)
        .env("FAKE_MS_PER_THREAD", MS_PER_THREAD)
        // The fake-GPU program brings its own CUDA stand-in.
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

fn the_program(store: &Path) -> Program {
    let mut programs = Store::open(store).unwrap().programs().unwrap();
    assert_eq!(programs.len(), 1, "{programs:?}");
    programs.remove(0)
}

#[test]
fn r3_record_keeps_each_kernel_s_launches_and_estimated_time_with_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let store = dir.path().join("store");
    let out = r3_record(&store, &["--launches", "1", "--quiet"], &exe, &[]);
    let err = stderr(&out);
    assert!(
        err.contains(
            "r3: program time by kernel (timed while recording): 94.7% big \
             (1 launch, 256.0 ms) · 5.3% small (54 launches, 14.2 ms); 2 launches of kernels r3 \
             has no registration for"
        ),
        "{err}"
    );
    let p = the_program(&store);
    let c = p.census.expect("a census");
    assert!(p.timings.is_empty());
    assert_eq!((c.launches, c.unknown_launches), (57, 2));
    assert_eq!(c.program, exe.display().to_string());
    assert_eq!(
        Path::new(&c.path),
        std::fs::canonicalize(&exe).unwrap().as_path()
    );
    assert_eq!(
        c.binary,
        r3::kernel::short_hash(&std::fs::read(&exe).unwrap())
    );
    // The workload: the executable and its arguments.
    let args = ["census".to_string()];
    assert_eq!(p.key, r3::store::programs::workload_key(&exe, &args));
    assert_eq!(c.args, args);
    let rows: Vec<_> = c
        .kernels
        .iter()
        .map(|k| {
            (
                k.name.as_str(),
                k.launches,
                k.timed_launches,
                k.scaled_launches,
                k.estimated_ms,
            )
        })
        .collect();
    // big: its one launch recorded, 256 ms. small: 50 launches identical to its recording
    // (0.25 ms, the median of its timed repeats), and 4 others, each timed: 1.75 ms.
    assert_eq!(
        rows,
        [
            ("big", 1, 1, 0, Some(256.0)),
            ("small", 54, 54, 0, Some(14.25))
        ]
    );
    assert_eq!(c.total_ms(), 270.25);
    // How often small's recorded values recur: of its 53 launches through cudaLaunchKernel
    // (the Ex one is never compared), n = 7 and 4 × 64 in 50. Past --launches 1, the second of
    // the three launches of 8 × 64 is recorded too: it repeats the first and is larger than
    // small's recording; it recurs in itself and the one after it.
    let small = &c.kernels[1];
    let recurrence: Vec<_> = small
        .recurrence
        .iter()
        .map(|(_, r)| (r.compared, r.dims_same, r.args_same.clone()))
        .collect();
    assert_eq!(recurrence, [(53, 50, vec![50]), (2, 2, vec![2])]);
    let r = &small.recurrence[0].1;
    assert_eq!(r.share(&[0], true), Some(1.0 - 2.0 * 3.0 / 53.0));
    assert_eq!(r.share(&[1], false), None);
    // No stored kernels here: no kernel hash, so no share by hash.
    assert!(c.kernels.iter().all(|k| k.kernel.is_none()));
    assert!(Store::open(&store)
        .unwrap()
        .kernel_shares()
        .unwrap()
        .is_empty());

    // Without --launches 1 small's other grid is recorded too, and its own time counts.
    let again = r3_record(&store, &["--launches", "2", "--quiet"], &exe, &[]);
    assert!(again.status.success());
    let c = the_program(&store).census.unwrap();
    let small = c.kernels.iter().find(|k| k.name == "small").unwrap();
    // 50 × 0.25 + 3 × 0.5 (the second recording and its repeats), and the Ex launch timed.
    assert_eq!(
        (
            small.timed_launches,
            small.scaled_launches,
            small.estimated_ms
        ),
        (54, 0, Some(14.25))
    );
    // Each recording's own: the second (n = 14, 8 × 64) recurs in the two launches after it.
    let recurrence: Vec<_> = small
        .recurrence
        .iter()
        .map(|(_, r)| (r.compared, r.dims_same, r.args_same.clone()))
        .collect();
    assert_eq!(recurrence, [(53, 50, vec![50]), (3, 3, vec![3])]);
}

/// A kernel's first launches may be a frontier's first, smallest levels; the launch its program
/// repeats comes later. Past its recorded launches, the first launch that repeats an earlier
/// one and is larger than every recorded launch is recorded too, and only one such (fixture
/// scenario `growing`, with --launches 2).
#[test]
fn past_its_first_launches_a_kernel_records_the_larger_launch_its_program_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let store = dir.path().join("store");
    r3_record_scenario(
        &store,
        &["--launches", "2", "--quiet"],
        &exe,
        "growing",
        &[],
    );
    let c = the_program(&store).census.unwrap();
    let small = c.kernels.iter().find(|k| k.name == "small").unwrap();
    assert_eq!(small.launches, 10);
    let recordings = Store::open(&store)
        .unwrap()
        .select_recordings(&r3::store::identity::Selection {
            kernel: None,
            all: true,
            record: None,
        })
        .unwrap();
    let grid_of = |id: &str| {
        recordings
            .iter()
            .find(|r| r.id == id)
            .map(|r| r.launch.grid[0])
    };
    let recorded: Vec<_> = small
        .recorded
        .iter()
        .map(|r| (grid_of(&r.id), r.identical))
        .collect();
    // Grids 1 and 2 (its first two); not grid 1 again (no larger) nor grid 3 (no repeat); grid
    // 4 at its second launch, with the one after it; not grid 5 (one such recording at most).
    assert_eq!(recorded, [(Some(1), 1), (Some(2), 1), (Some(4), 2)]);
    assert_eq!(recordings.len(), 3);
}

/// Where the work per thread changes with the launch (a loop bound among the arguments), a
/// launch scaled from a recorded one by its threads is off; the census times the launches it
/// does not record, so its estimate is what a time-only run measures.
#[test]
fn the_census_times_the_launches_it_does_not_record() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let work = [("FAKE_WORK_FROM_N", "1")];
    let store = dir.path().join("recorded");
    r3_record(&store, &["--launches", "1", "--quiet"], &exe, &work);
    let census = the_program(&store).census.unwrap();
    let small = census.kernels.iter().find(|k| k.name == "small").unwrap();
    // 50 × 0.25 + 3 × 1 + 0.25; scaled by threads, the three had come to 1.5 ms.
    assert_eq!(
        (small.timed_launches, small.estimated_ms),
        (54, Some(15.75))
    );
    let timed = dir.path().join("timed");
    r3_record(&timed, &["--time-only"], &exe, &work);
    let t = the_program(&timed).timings.remove(0);
    for k in &census.kernels {
        let measured = t.kernels.iter().find(|m| m.name == k.name).unwrap();
        assert_eq!(k.estimated_ms, Some(measured.ms), "{}", k.name);
    }
}

#[test]
fn r3_record_time_only_times_every_launch_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let want = vec![
        KernelTiming {
            name: "big".into(),
            launches: 1,
            ms: 256.0,
        },
        KernelTiming {
            name: "small".into(),
            launches: 54,
            ms: 14.25,
        },
        KernelTiming {
            name: "(unknown)".into(),
            launches: 2,
            ms: 0.125,
        },
    ];
    // The pool of event pairs as it comes, and one of four pairs (folded as the program runs,
    // waited for when full); R3_RECORD in the environment does not make it record.
    for (pairs, stored) in [("1024", "default"), ("4", "small-pool")] {
        let store = dir.path().join(stored);
        let out = r3_record(
            &store,
            &["--time-only"],
            &exe,
            &[("R3_TIME_ONLY_EVENTS", pairs), ("R3_RECORD", "1")],
        );
        let err = stderr(&out);
        assert!(
            err.contains("r3: GPU time measured: 270.4 ms over 57 launches"),
            "{err}"
        );
        assert!(
            err.contains("r3: by kernel: 94.7% big (1 launch, 256.0 ms) · 5.3% small"),
            "{err}"
        );
        assert!(!err.contains("r3: recorded"), "no recording summary: {err}");
        assert!(!store.join("records").exists(), "nothing recorded");
        let p = the_program(&store);
        assert!(p.census.is_none());
        assert_eq!(p.timings.len(), 1);
        let t = &p.timings[0];
        assert_eq!((t.launches, t.total_ms), (57, 270.375), "{pairs} pairs");
        assert_eq!(t.kernels, want, "{pairs} pairs");
        assert_eq!(
            t.binary,
            r3::kernel::short_hash(&std::fs::read(&exe).unwrap())
        );
        // The same binary timed again replaces its times.
        r3_record(&store, &["--time-only"], &exe, &[]);
        assert_eq!(the_program(&store).timings.len(), 1);
    }
}

/// A time-only run loads each kernel before its first timed launch: CUDA loads a kernel lazily,
/// inside its first launch, and the events around it would time the load (the fake device
/// charges FAKE_LAZY_LOAD_MS to a first launch whose kernel nobody asked about). The stub with
/// no registration cannot be asked about, and pays.
#[test]
fn a_time_only_run_loads_each_kernel_before_its_first_launch_is_timed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let store = dir.path().join("store");
    let out = r3_record(
        &store,
        &["--time-only"],
        &exe,
        &[("FAKE_LAZY_LOAD_MS", "64")],
    );
    let err = stderr(&out);
    // 270.4 ms without loading; big and small are loaded before their first launch, the
    // unknown stub loads inside its own: 334.4 ms.
    assert!(
        err.contains("r3: GPU time measured: 334.4 ms over 57 launches"),
        "{err}"
    );
    assert!(
        err.contains("r3: by kernel: 76.6% big (1 launch, 256.0 ms)"),
        "{err}"
    );
    // Recording times each recorded launch the same way: the census is as without loading.
    let recorded = dir.path().join("recorded");
    let out = r3_record(
        &recorded,
        &["--launches", "1", "--quiet"],
        &exe,
        &[("FAKE_LAZY_LOAD_MS", "64")],
    );
    let err = stderr(&out);
    assert!(
        err.contains("94.7% big (1 launch, 256.0 ms) · 5.3% small (54 launches, 14.2 ms)"),
        "{err}"
    );
}

/// A trial of kernel `kh` whose code hashes to `ptx`, at `us` against -O3's 100.
fn trial_of(trial: u32, ptx: &str, us: f64) -> r3::store::trials::TrialRecord {
    use r3::store::fixtures::{trial as hand_built, valid};
    let candidate = serde_json::json!({"pipeline": "default<O2>"});
    let mut t = hand_built(
        "kh",
        "NVIDIA H100 (sm_90)",
        trial,
        candidate,
        valid(us, 100.0),
    );
    t.ptx_hash = Some(ptx.into());
    t
}

/// The oscillators case end to end on the fake GPU: replay found `big`'s tuned code twice as
/// fast, the applied build (its dispatch table naming that code) runs it slower in the program
/// than the recorded build did, and `r3 record --time-only` of the applied build withholds it:
/// the store's best is -O3 again and nothing is exported for it.
#[test]
fn a_tuned_kernel_an_applied_build_runs_slower_is_withheld_from_the_next_build() {
    use r3::apply::dispatch;
    use r3::store::programs::ShippedKernel;
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let recorded = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let shipped = ShippedKernel {
        name: "big".into(),
        arch: "sm_90".into(),
        kernel: "kh".into(),
        ptx: vec!["p1".into()],
    };
    let header = dir.path().join(dispatch::HEADER);
    std::fs::write(&header, dispatch::header(&[shipped.line()])).unwrap();
    let applied_dir = dir.path().join("applied");
    std::fs::create_dir_all(&applied_dir).unwrap();
    let applied = fake_gpu_program(
        &applied_dir,
        "record_fake_gpu",
        &[format!("-include{}", header.display())],
    );
    // Both builds run from one path, as a rebuild leaves them.
    let exe = dir.path().join("app");
    std::fs::copy(&recorded, &exe).unwrap();
    r3_record(&store_dir, &["--launches", "1", "--quiet"], &exe, &[]);
    let store = Store::open(&store_dir).unwrap();
    let gpu = "NVIDIA H100 (sm_90)";
    let mut log = store.open_trials(&TrialsKey::from("kh"), gpu).unwrap();
    for t in [trial_of(0, "p0", 100.0), trial_of(1, "p1", 50.0)] {
        log.append(&t).unwrap();
    }
    drop(log);
    let confirmed: r3::store::trials::Confirmation = serde_json::from_value(serde_json::json!({
        "format": 1, "trial": 1, "finished_unix_ms": 0,
        "outcome": trial_of(1, "p1", 52.0).outcome
    }))
    .unwrap();
    store
        .write_confirmation(&TrialsKey::from("kh"), gpu, &confirmed)
        .unwrap();
    let best = || {
        store
            .best_trial(&TrialsKey::from("kh"), gpu)
            .unwrap()
            .unwrap()
            .trial
    };
    assert_eq!(best(), 1);
    // The recorded build timed, then the applied one, whose launches take 1.5 times as long.
    r3_record(&store_dir, &["--time-only"], &exe, &[]);
    std::fs::copy(&applied, &exe).unwrap();
    let slower = (0.0009765625f64 * 1.5).to_string();
    let out = r3_record(
        &store_dir,
        &["--time-only"],
        &exe,
        &[("FAKE_MS_PER_THREAD", slower.as_str())],
    );
    let err = stderr(&out);
    assert!(
        err.contains("r3: tuned kernels in this program, against the recorded build's time-only run: 0 of 1 at least as fast")
            && err.contains("r3: big ran 0.667× here (384.0 ms against 256.0 ms per launch): withheld from the next build"),
        "{err}"
    );
    assert_eq!(best(), 0, "-O3 ships again");
    let c = store
        .confirmations(&store.trials_path(&TrialsKey::from("kh"), gpu))
        .unwrap()
        .remove(0);
    assert_eq!(c.in_program.len(), 1);
    assert_eq!(
        c.in_program[0].against,
        r3::store::trials::Against::TimeOnly
    );
    let winners =
        r3::report::export::winners(&store, &r3::store::winner::Policy::default()).unwrap();
    assert!(winners.kernels.is_empty(), "{:?}", winners.kernels);
    let says_withheld = || {
        let status = Command::new(r3_bin())
            .arg("--r3-store")
            .arg(&store_dir)
            .arg("status")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&status.stdout);
        let said =
            "withheld: kh [kh] on NVIDIA H100 (sm_90): its fastest code ran 0.667× in a program";
        assert!(text.contains(said), "{text}{}", stderr(&status));
    };
    says_withheld();
    // A faster trial that was never confirmed (so never shipped) does not hide what was
    // withheld (an H100 run, 2026-11-27: the withheld code was the second fastest).
    let mut log = store.open_trials(&TrialsKey::from("kh"), gpu).unwrap();
    log.append(&trial_of(2, "p2", 49.0)).unwrap();
    drop(log);
    says_withheld();
}

/// A workload is a program and its arguments (issue 55): a run with other arguments keeps a
/// census of its own instead of replacing the first one's, and `--program` names either the
/// executable (every workload of it) or one workload as shell words.
#[test]
fn a_run_with_other_arguments_is_another_workload_and_hides_no_earlier_one() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let store = dir.path().join("store");
    for extra in [&[][..], &["-k", "1"][..]] {
        let out = Command::new(r3_bin())
            .arg("--r3-store")
            .arg(&store)
            .args(["record", "--quiet", "--"])
            .arg(&exe)
            .arg("census")
            .args(extra)
            .env("FAKE_MS_PER_THREAD", MS_PER_THREAD)
            .env("R3_RECORD_WITHOUT_GPU", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let s = Store::open(&store).unwrap();
    let mut names: Vec<(String, Vec<String>)> = s
        .programs()
        .unwrap()
        .into_iter()
        .filter_map(|p| p.census)
        .map(|c| (c.name(), c.args))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            (
                "record_fake_gpu census".to_string(),
                vec!["census".to_string()]
            ),
            (
                "record_fake_gpu census -k 1".to_string(),
                ["census", "-k", "1"].map(String::from).to_vec()
            ),
        ]
    );
    use r3::remix::program::Scope;
    let exe_text = exe.display().to_string();
    let Scope::Program { workloads, .. } = Scope::program(&s, &exe_text).unwrap() else {
        panic!("a program's scope");
    };
    assert_eq!(workloads.len(), 2, "both workloads of the executable");
    let one = Scope::program(&s, &format!("'{exe_text}' census -k 1")).unwrap();
    let Scope::Program {
        workloads, name, ..
    } = one
    else {
        panic!("a program's scope");
    };
    assert_eq!(
        (workloads.len(), name.as_str()),
        (1, "record_fake_gpu census -k 1")
    );
    let missing = Scope::program(&s, &format!("{exe_text} census -k 2")).unwrap_err();
    assert!(
        missing.contains("no launch census of this workload"),
        "{missing}"
    );
}

/// A variant ships only where its program runs the kernel long enough for the variant's saving
/// to pay its first load (issue 57): `big` behind a launch-bounds guard at 50 against the
/// generic code's 80 saves 3/8 of its time, which its census says is 256 ms a run with the fake
/// GPU's default speed, and a few nanoseconds at a speed ten million times higher.
#[test]
fn a_variant_its_program_runs_too_briefly_to_pay_its_first_load_is_not_shipped() {
    use r3::store::fixtures::{trial as hand_built, valid};
    // A content hash, as the census ties a kernel by: the rule reads the kernel's time by it.
    const BIG: &str = "00000000000000bb";
    for (ms_per_thread, ships) in [("0.0009765625", true), ("0.0000000001", false)] {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
        r3_record(
            &store_dir,
            &["--launches", "1", "--quiet"],
            &exe,
            &[("FAKE_MS_PER_THREAD", ms_per_thread)],
        );
        tie_census_to(&store_dir, "big", BIG);
        let store = Store::open(&store_dir).unwrap();
        let gpu = "NVIDIA H100 (sm_90)";
        let plain = serde_json::json!({"pipeline": "default<O2>"});
        let bounds = serde_json::json!({"pipeline": "default<O2>", "max_threads": 256});
        let mut log = store.open_trials(&TrialsKey::from(BIG), gpu).unwrap();
        for (trial, candidate, us) in [
            (0, plain.clone(), 100.0),
            (1, plain, 80.0),
            (2, bounds, 50.0),
        ] {
            let mut t = hand_built(BIG, gpu, trial, candidate, valid(us, 100.0));
            t.ptx_hash = Some(format!("p{trial}").as_str().into());
            log.append(&t).unwrap();
        }
        drop(log);
        // What apply would ship, as the report sees it: the variant on the searched launch
        // (2×), or the generic code (1.25×); and what the programs' predictions count of it in
        // a run: the variant's 256 ms a run halved, and its first load of 0.061 ms paid once.
        let speedups = r3::report::programs::speedups(&store).unwrap();
        let s = &speedups[&(gpu.to_owned(), TrialsKey::from(BIG))];
        let want = if ships { 2.0 } else { 1.25 };
        assert!(
            (s.shipped - want).abs() < 1e-9,
            "{ms_per_thread}: {}",
            s.shipped
        );
        let in_run = if ships { 256.0 / (128.0 + 0.061) } else { 1.25 };
        assert!(
            (s.in_run - in_run).abs() < 1e-6,
            "{ms_per_thread}: {}",
            s.in_run
        );
    }
}

/// Ties the census' kernel `name` to the stored kernel `hash`, as a census resolves a kernel the
/// store compiled (the fake GPU's kernels were never compiled into the store).
fn tie_census_to(store: &Path, name: &str, hash: &str) {
    fn tie(v: &mut serde_json::Value, name: &str, hash: &str) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("name").and_then(|n| n.as_str()) == Some(name)
                    && m.contains_key("launches")
                {
                    m.insert("kernel".into(), hash.into());
                }
                m.values_mut().for_each(|x| tie(x, name, hash));
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| tie(x, name, hash)),
            _ => {}
        }
    }
    let mut tied = 0;
    for dir in std::fs::read_dir(store.join("programs")).unwrap().flatten() {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let Ok(mut v) =
                serde_json::from_slice::<serde_json::Value>(&std::fs::read(f.path()).unwrap())
            else {
                continue;
            };
            let before = v.clone();
            tie(&mut v, name, hash);
            if v != before {
                std::fs::write(f.path(), serde_json::to_vec(&v).unwrap()).unwrap();
                tied += 1;
            }
        }
    }
    assert!(tied > 0, "no census names {name}");
}

/// A time-step loop (the fake GPU's `steps`: decay(b, n, t) once a step, t the step, b one of
/// two buffers in turn): the census counts how often each recorded launch's values recur, and a
/// search of decay's first recording is offered n and the launch's dimensions, never the step.
#[test]
fn a_loops_step_argument_is_never_offered_to_a_search_to_fold() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(dir.path(), "record_fake_gpu", &[]);
    let store = dir.path().join("store");
    let out = Command::new(r3_bin())
        .arg("--r3-store")
        .arg(&store)
        .args(["record", "--quiet", "--no-verify", "--"])
        .arg(&exe)
        .args(["steps", "legacy"])
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let census = the_program(&store).census.unwrap();
    let decay = census.kernels.iter().find(|k| k.name == "decay").unwrap();
    let counts: Vec<_> = decay
        .recurrence
        .iter()
        .map(|(_, r)| (r.compared, r.dims_same, r.args_same.clone()))
        .collect();
    // Four launches recorded (t = 0 to 3), each compared with itself and those after it.
    assert_eq!(
        counts,
        [
            (6, 6, vec![3, 6, 1]),
            (5, 5, vec![3, 5, 1]),
            (4, 4, vec![2, 4, 1]),
            (3, 3, vec![2, 3, 1])
        ]
    );
    let s = Store::open(&store).unwrap();
    let (id, recurrence) = &decay.recurrence[0];
    let rec = s
        .recordings(None)
        .unwrap()
        .into_iter()
        .find(|r| r.id == *id)
        .unwrap();
    // decay(float* b, int n, int t): its scalars, as `lower::specialize::foldable` reads them.
    let foldable = [1, 2];
    let values = rec.launch.values().unwrap();
    let offered = r3::remix::space::specializations(&foldable, &values, Some(recurrence));
    let folded: Vec<Vec<u32>> = offered
        .iter()
        .map(|s| s.args.iter().map(|a| a.index).collect())
        .collect();
    assert_eq!(folded, [vec![1], vec![], vec![1]], "{offered:?}");
    assert!(offered[0].block.is_some() && offered[1].grid.is_some());

    // Each recording's identical launches and its time, for what a variant guarded on its
    // values is sure to run: n and the shape recur in all six launches from the first on, the
    // step in one.
    let identical: Vec<_> = decay
        .recorded
        .iter()
        .map(|r| (&r.id, r.identical))
        .collect();
    let ids: Vec<_> = decay.recurrence.iter().map(|(id, _)| id).collect();
    assert_eq!(identical, ids.iter().map(|id| (*id, 1)).collect::<Vec<_>>());
    // The fake GPU's kernels are in no store: named here as one would be.
    let hash = r3::kernel::KernelHash::from("feed");
    let mut named = census.clone();
    for k in named.kernels.iter_mut().filter(|k| k.name == "decay") {
        k.kernel = Some(hash.to_string());
    }
    let recs = s.recordings(None).unwrap();
    let ms = decay.recorded[0].ms.unwrap();
    let total = decay.estimated_ms.unwrap();
    let same = |l: &r3::candidate::LaunchValues| l.args[1] == values.args[1];
    let admitted = |admits: &dyn Fn(&r3::candidate::LaunchValues) -> bool, folded: &[u32]| {
        r3::store::programs::admitted_share(&[&named], &hash, &recs, admits, folded).unwrap()
    };
    let share = admitted(&same, &[1]);
    assert!(
        (share - (6.0 * ms / total).min(1.0)).abs() < 1e-9,
        "{share} {ms} {total}"
    );
    let step = |l: &r3::candidate::LaunchValues| l.args[2] == values.args[2];
    let share = admitted(&step, &[2]);
    assert!((share - ms / total).abs() < 1e-9, "{share} {ms} {total}");
}
