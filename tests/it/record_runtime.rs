//! The recording runtime (crates/r3-driver/src/runtime/r3rt.c) on a fake GPU (fixtures/record_fake_gpu.c):
//! what a recording holds (only what the launch can reach, transitively through pointers in
//! device memory and variables), allocation reuse and the address range under churn, the
//! caps, the warm re-launch policy, and `r3 record`'s summary — without a GPU.

use crate::support::{fake_gpu_program, r3_bin, stderr};
use r3::store::records::{RegionData, RegionKind, Snapshot};
use r3::store::Store;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The harness, built once per test into `dir`.
fn harness(dir: &Path) -> PathBuf {
    // sqrtf as the instruction, without libm (the optimizer scenario's).
    fake_gpu_program(dir, "record_fake_gpu", &["-fno-math-errno".to_owned()])
}

/// Runs a scenario with recording on into a new store at `store`.
fn run(exe: &Path, scenario: &str, store: &Path, env: &[(&str, &str)]) -> Output {
    Store::create(store).unwrap();
    let out = Command::new(exe)
        .args(scenario.split(' '))
        .env("R3_RECORD", "1")
        .env("R3_STORE", store)
        .env("R3_RECORD_STATS", store.with_extension("stats.json"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success(), "{scenario}: {}", stderr(&out));
    out
}

fn stats(store: &Path) -> r3::record::RunStats {
    serde_json::from_slice(&std::fs::read(store.with_extension("stats.json")).unwrap()).unwrap()
}

/// No recording in progress (`records/.tmp-*`, or an old one being replaced) is left behind.
fn assert_no_temporaries(store: &Path) {
    let left: Vec<_> = std::fs::read_dir(store.join("records"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary directories left: {left:?}");
}

fn allocation_sizes(s: &Snapshot) -> Vec<u64> {
    let mut v: Vec<u64> = s
        .regions
        .iter()
        .filter(|r| r.kind == RegionKind::Allocation)
        .map(|r| r.size)
        .collect();
    v.sort();
    v
}

fn changed_sizes(s: &Snapshot) -> Vec<u64> {
    s.regions
        .iter()
        .filter(|r| matches!(r.data, RegionData::Pages(_)))
        .map(|r| r.size)
        .collect()
}

#[test]
fn a_recording_holds_what_the_launch_can_reach() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    run(&exe, "reach", &store_dir, &[]);
    let store = Store::open(&store_dir).unwrap();
    let one = |kernel: &str| {
        let recs = store.recordings(Some(kernel)).unwrap();
        assert_eq!(recs.len(), 1, "{kernel}: one distinct launch recorded");
        recs.into_iter().next().unwrap()
    };
    // x, y (1000 floats each) through scale's arguments; g (16 floats) through the variable.
    let scale = one("scale");
    let pro = scale.prologue().unwrap();
    assert_eq!(allocation_sizes(&pro), [64, 4000, 4000]);
    assert!(pro
        .regions
        .iter()
        .any(|r| r.kind == RegionKind::Variable && r.name == "table_ptr"));
    assert_eq!(
        scale.launch.regions_skipped, 3,
        "big, table and data are out of reach"
    );
    assert_eq!(scale.launch.snapshot.as_deref(), Some("reachable"));
    assert_eq!(
        changed_sizes(&scale.epilogue().unwrap()),
        [4000],
        "only y changed"
    );
    assert_eq!(scale.natural_ms().unwrap(), [1.0], "the repeat was timed");
    // table (8 bytes) holds an interior pointer into data (1001 floats).
    let bump = one("bump");
    assert_eq!(allocation_sizes(&bump.prologue().unwrap()), [8, 64, 4004]);
    assert_eq!(changed_sizes(&bump.epilogue().unwrap()), [4004]);
    let poke = one("poke");
    assert_eq!(allocation_sizes(&poke.prologue().unwrap()), [64]);
    assert_eq!(changed_sizes(&poke.epilogue().unwrap()), [64]);
    let s = stats(&store_dir);
    assert_eq!((s.kernels_seen, s.launches, s.recorded), (3, 4, 3));
    assert_eq!((s.regions, s.regions_skipped), (10, 11));
    assert_eq!(s.relaunched, 3, "1 ms launches are cheap to re-launch");

    // Full snapshots: all six allocations in every prologue.
    let full = dir.path().join("full");
    // (With big's 12 MiB the prologues span several frames, compressed on four threads.)
    run(
        &exe,
        "reach",
        &full,
        &[("R3_RECORD_SNAPSHOT", "full"), ("R3_RECORD_THREADS", "4")],
    );
    let store = Store::open(&full).unwrap();
    for rec in store.recordings(None).unwrap() {
        let pro = rec.prologue().unwrap();
        assert_eq!(pro.regions.len(), 7, "{}", rec.id);
        // Each region copied once: g is reached both through the variable and as a live
        // allocation, and counts once.
        let copied: u64 = pro.regions.iter().map(|r| r.size).sum();
        assert_eq!(rec.launch.bytes_in, copied, "{}", rec.id);
        let big = pro.regions.iter().find(|r| r.size == 12 << 20).unwrap();
        let RegionData::Full(bytes) = &big.data else {
            panic!("a prologue holds every region in full")
        };
        let at = |i: usize| f32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().unwrap());
        let last = (3 << 20) - 1;
        assert_eq!(
            (at(0), at(999), at(1000), at(last)),
            (5.0, 1004.0, 5.0, 5.0 + (last % 1000) as f32)
        );
        assert_eq!(rec.launch.snapshot.as_deref(), Some("full"));
    }
}

#[test]
fn allocations_reuse_freed_memory_and_never_run_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store = dir.path().join("store");
    // 1000 allocations of one size, then 3.4 GiB of growing ones through a 256 MiB range,
    // then 220 MiB live on a 256 MiB device that the cache must give back.
    let out = run(
        &exe,
        "churn",
        &store,
        &[("FAKE_VA_MB", "256"), ("FAKE_PHYSICAL_MB", "256")],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("churn: ok"));
    let s = stats(&store);
    assert!(s.allocs_reused >= 998, "{s:?}");
    // Without the cache every allocation maps new memory; the scenario still succeeds.
    let plain = dir.path().join("plain");
    run(
        &exe,
        "churn",
        &plain,
        &[
            ("FAKE_VA_MB", "256"),
            ("FAKE_PHYSICAL_MB", "256"),
            ("R3_RECORD_CACHE_MB", "0"),
        ],
    );
    assert_eq!(stats(&plain).allocs_reused, 0);
}

#[test]
fn caps_stop_recording_and_the_program_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let count = |store: &Path| Store::open(store).unwrap().recordings(None).unwrap().len();
    // Six distinct launches of one kernel, each recording over 1 MiB.
    let free = dir.path().join("free");
    run(&exe, "caps", &free, &[("R3_RECORD_LAUNCHES", "6")]);
    assert_eq!(count(&free), 6);
    let per_kernel = dir.path().join("kernel");
    run(
        &exe,
        "caps",
        &per_kernel,
        &[("R3_RECORD_LAUNCHES", "6"), ("R3_RECORD_KERNEL_MB", "1")],
    );
    assert_eq!(count(&per_kernel), 1);
    assert_eq!(stats(&per_kernel).kernels_capped, 1);
    let timed = dir.path().join("time");
    let out = run(
        &exe,
        "caps",
        &timed,
        &[("R3_RECORD_LAUNCHES", "6"), ("R3_RECORD_MAX_S", "0.000001")],
    );
    assert_eq!(count(&timed), 1);
    assert!(stats(&timed).time_capped);
    assert_eq!(stderr(&out).matches("recording stopped").count(), 1);
    // Over the per-launch limit: recorded, as not replayable, with the fix in the reason.
    let limited = dir.path().join("limit");
    run(&exe, "caps", &limited, &[("R3_RECORD_LIMIT_MB", "1")]);
    let recs = Store::open(&limited).unwrap().recordings(None).unwrap();
    let why = recs[0].launch.not_replayable.clone().unwrap();
    assert!(why.contains("R3_RECORD_LIMIT_MB"), "{why}");
}

/// The peak memory the pool scenario printed, in MiB.
fn pool_peak_mib(out: &Output) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    let peak = text.split("peak ").nth(1).and_then(|t| t.split(' ').next());
    peak.and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no peak in {text}"))
}

/// Issue 61, item 3: a pool allocator reserves more than the recording limit up front and uses
/// little of it. The launch is recorded, its pool by the pages that hold data (every page
/// read, the others zeros), and replays from the recording exactly: the prologue reads back in
/// full, the expected state is the program's. The recording never holds the pool in memory.
#[test]
fn a_pool_reserved_over_the_limit_and_little_used_is_recorded_by_its_pages_that_hold_data() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    // 5 GiB under the default limit of 4 GiB, as the B-tree program reserved it.
    let out = run(&exe, "pool 5120", &store_dir, &[("FAKE_VA_MB", "8192")]);
    assert!(pool_peak_mib(&out) < 1024, "{}", stderr(&out));
    let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
    assert_eq!(recs.len(), 1, "the second launch repeats the first");
    let rec = &recs[0];
    assert!(rec.launch.replayable, "{:?}", rec.launch.not_replayable);
    let pool_bytes = 5u64 << 30;
    assert_eq!(rec.launch.sparse_regions, 1);
    assert_eq!(rec.launch.bytes_reachable, Some(pool_bytes));
    // The header page and the 8 pages of the floats and their sums; the variable's 8 bytes.
    assert_eq!(rec.launch.bytes_in, 9 * 4096 + 8);
    let data_page = pool_bytes / 4 * 3 / 4096;
    let raw = r3::store::records::read_snapshot(&rec.dir.join("prologue.r3snap")).unwrap();
    let pool = raw.regions.iter().find(|r| r.size == pool_bytes).unwrap();
    let RegionData::Pages(pages) = &pool.data else {
        panic!("the pool is held by its pages")
    };
    let held: Vec<u64> = pages.iter().map(|(i, _)| *i).collect();
    let want: Vec<u64> = std::iter::once(0).chain(data_page..data_page + 8).collect();
    assert_eq!(held, want);
    // Read back in full, zeros where no page was held; the launch's sums in the expected state.
    let pro = rec.prologue().unwrap();
    let pool = pro.regions.iter().find(|r| r.size == pool_bytes).unwrap();
    let RegionData::Full(before) = &pool.data else {
        panic!("a prologue reads back in full")
    };
    let float = |b: &[u8], i: u64| {
        let at = (data_page * 4096 + 4 * i) as usize;
        f32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    };
    assert_eq!((float(before, 0), float(before, 4096)), (1.0, 0.5));
    assert!(before[4096..(data_page * 4096) as usize]
        .iter()
        .all(|&b| b == 0));
    let epi = rec.epilogue().unwrap();
    assert_eq!(changed_sizes(&epi), [pool_bytes]);
    let expected = r3::store::records::apply(&pro, &epi).unwrap();
    let pool = expected
        .regions
        .iter()
        .find(|r| r.size == pool_bytes)
        .unwrap();
    let RegionData::Full(after) = &pool.data else {
        unreachable!()
    };
    assert_eq!((float(after, 4096), float(after, 8191)), (1.5, 4096.5));
    assert_eq!(float(after, 0), 1.0);
}

/// The pool's pages that hold data are what counts against the limit; where they pass it the
/// launch is not replayable, and the reason says what was counted. Warm re-launches put a pool
/// recorded by its pages back as they found it (the scenario checks the program's sums).
#[test]
fn a_pool_whose_data_passes_the_limit_is_refused_and_one_under_it_relaunches_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let limit = [("R3_RECORD_LIMIT_MB", "8"), ("R3_RECORD_WARM", "1")];
    let small = dir.path().join("small");
    run(&exe, "pool 64", &small, &limit);
    let recs = Store::open(&small).unwrap().recordings(None).unwrap();
    assert!(
        recs[0].launch.replayable,
        "{:?}",
        recs[0].launch.not_replayable
    );
    assert_eq!(recs[0].launch.sparse_regions, 1);
    assert_eq!(
        stats(&small).relaunched,
        1,
        "the launch was re-launched in place"
    );
    // Without staging buffers the pool's pages cross in plain copies, piece by piece: the same
    // recording.
    let plain = dir.path().join("plain");
    let no_pinned = [limit[0], limit[1], ("FAKE_NO_PINNED", "1")];
    run(&exe, "pool 64", &plain, &no_pinned);
    let again = Store::open(&plain).unwrap().recordings(None).unwrap();
    let snapshots =
        |r: &r3::store::records::Recording| (r.prologue().unwrap(), r.epilogue().unwrap());
    assert_eq!(snapshots(&again[0]), snapshots(&recs[0]));
    let noisy = dir.path().join("noisy");
    run(&exe, "pool 64 noisy", &noisy, &limit);
    let recs = Store::open(&noisy).unwrap().recordings(None).unwrap();
    let why = recs[0].launch.not_replayable.clone().unwrap();
    assert!(
        why.starts_with(
            "reachable working set over the limit of 8 MiB, counting only the pages that hold data"
        ),
        "{why}"
    );
    assert!(why.contains("R3_RECORD_LIMIT_MB"), "{why}");
}

#[test]
fn a_launch_into_pinned_host_memory_is_recorded_as_not_replayable_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    run(&exe, "pinned", &store_dir, &[]);
    let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
    assert_eq!(recs.len(), 2, "both launches of scale are recorded");
    let (pinned, device): (Vec<_>, Vec<_>) = recs.iter().partition(|r| !r.launch.replayable);
    assert_eq!((pinned.len(), device.len()), (1, 1));
    let why = pinned[0].launch.not_replayable.clone().unwrap();
    assert!(why.contains("pinned host memory"), "{why}");
    assert!(device[0].launch.not_replayable.is_none());
}

#[test]
fn a_capture_into_a_graph_is_left_alone_and_only_the_launch_after_it_is_recorded() {
    // The fake GPU breaks a capture on any synchronizing call while it lasts, as CUDA's global
    // capture mode does: recording a launch inside it (or beside it, on another stream) made
    // the program's cudaStreamEndCapture fail, and `run` asserts the scenario's success.
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    let out = run(&exe, "capture", &store_dir, &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("capture: ok"));
    let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
    assert_eq!(recs.len(), 1, "only the launch after the capture");
    assert!(
        recs[0].launch.replayable,
        "{:?}",
        recs[0].launch.not_replayable
    );
    assert_no_temporaries(&store_dir);
}

#[test]
fn a_program_that_calls_cuda_ipc_is_not_recorded_and_runs_as_built() {
    // r3's link defines the symbol where the program's objects call CUDA IPC (runtime.rs:
    // IPC_SYMBOL): memory another process opens must be cudaMalloc's own, and cuda-samples'
    // simpleIPC exited 1 under `r3 record` when r3 mapped it.
    let dir = tempfile::tempdir().unwrap();
    let defsym = format!("-Wl,--defsym={}=1", r3::driver::runtime::IPC_SYMBOL);
    let exe = fake_gpu_program(
        dir.path(),
        "record_fake_gpu",
        &["-fno-math-errno".to_owned(), defsym],
    );
    let store_dir = dir.path().join("store");
    // The fake program insists on recording or timing: timed, it runs as built.
    let out = run(&exe, "pinned", &store_dir, &[("R3_TIME_ONLY", "1")]);
    assert!(
        stderr(&out).contains("calls CUDA IPC") && stderr(&out).contains("nothing is recorded"),
        "{}",
        stderr(&out)
    );
    let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
    assert!(recs.is_empty(), "{} recorded", recs.len());
}

#[test]
fn warm_relaunches_only_when_cheap() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    for (ms, policy, from, in_app) in [
        ("1", "auto", "warm re-launches", 1.0),
        ("100", "auto", "first launch", 100.0),
        ("100", "1", "warm re-launches", 100.0),
        ("1", "0", "first launch", 1.0),
    ] {
        let store = dir.path().join(format!("s{ms}-{policy}"));
        run(
            &exe,
            "caps",
            &store,
            &[
                ("FAKE_MS", ms),
                ("R3_RECORD_WARM", policy),
                ("R3_RECORD_LAUNCHES", "1"),
            ],
        );
        let rec = &Store::open(&store).unwrap().recordings(None).unwrap()[0];
        assert_eq!(
            rec.launch.in_app_from.as_deref(),
            Some(from),
            "{ms} ms, {policy}"
        );
        assert_eq!(rec.launch.in_app_ms, in_app);
        assert_eq!(rec.launch.first_launch_ms, in_app);
    }
}

/// The changed pages of a launch are found piece by piece as the region is copied out, and only
/// they are kept: the epilogue lists exactly them, and the warm re-launches' restores (a few
/// runs of pages, or many) leave the region as the launch left it (the harness checks that).
#[test]
fn an_epilogue_holds_exactly_the_pages_the_launch_changed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    // Device 1: the copy threads must make the program's device current (a new thread starts
    // on device 0, whose stream refuses the staging buffers' events).
    for (threads, warm, device) in [
        ("1", "1", "0"),
        ("8", "1", "0"),
        ("8", "0", "0"),
        ("8", "1", "1"),
    ] {
        let store = dir.path().join(format!("s{threads}-{warm}-{device}"));
        run(
            &exe,
            "sparse",
            &store,
            &[
                ("R3_RECORD_THREADS", threads),
                ("R3_RECORD_WARM", warm),
                ("FAKE_DEVICE", device),
            ],
        );
        let mut changed: Vec<Vec<u64>> = Store::open(&store)
            .unwrap()
            .recordings(None)
            .unwrap()
            .iter()
            .map(|rec| {
                let epi = rec.epilogue().unwrap();
                let pages = epi.regions.iter().find_map(|r| match &r.data {
                    RegionData::Pages(p) if r.size == 20 << 20 => Some(p.clone()),
                    _ => None,
                });
                let pages = pages.expect("the 20 MiB region changed");
                for (_, bytes) in &pages {
                    assert_eq!(bytes.len(), 4096);
                }
                pages.iter().map(|(p, _)| *p).collect()
            })
            .collect();
        changed.sort_by_key(|p| p.len());
        let every_other: Vec<u64> = (0..200).step_by(2).collect();
        assert_eq!(
            changed,
            [vec![0, 1000, 2000, 3000, 4000], every_other],
            "{threads} thread(s), warm {warm}, device {device}"
        );
        assert_eq!(stats(&store).relaunched, if warm == "1" { 2 } else { 0 });
    }
}

#[test]
fn r3_record_prints_progress_and_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store = dir.path().join("store");
    let out = Command::new(r3_bin())
        .args(["--r3-store"])
        .arg(&store)
        .args(["record", "--launches", "2", "--max-time", "10m", "--"])
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .arg(&exe)
        .arg("reach")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("r3: recording: "), "progress: {err}");
    assert!(
        err.contains("r3: recorded 3 launch(es) of the 3 kernel(s) that ran (4 launches in all)"),
        "{err}"
    );
    assert!(
        err.contains("10 region(s) recorded, 11 unreachable allocation(s) left out"),
        "{err}"
    );
    assert!(err.contains("r3: 3 launch(es) recorded in"), "{err}");
    // No GPU here: nothing replayed, and it says so (and leaves the recordings unjudged).
    assert!(
        err.contains("r3: recordings not replayed: no GPU on this machine"),
        "{err}"
    );
    let recs = Store::open(&store).unwrap().recordings(None).unwrap();
    assert!(recs.iter().all(|r| r.verification.is_none() && r.usable()));
    let quiet = Command::new(r3_bin())
        .args(["--r3-store"])
        .arg(dir.path().join("quiet"))
        .args(["record", "--quiet", "--no-verify", "--"])
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .arg(&exe)
        .arg("reach")
        .output()
        .unwrap();
    assert!(
        !stderr(&quiet).contains("r3: recording: ")
            && !stderr(&quiet).contains("recordings not replayed"),
        "{}",
        stderr(&quiet)
    );
    let bad = Command::new(r3_bin())
        .args(["record", "--max-time", "soon", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(stderr(&bad).contains("--max-time soon"), "{}", stderr(&bad));
}

#[test]
fn r3_record_removes_what_killed_recordings_left() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store = dir.path().join("store");
    // What a recorded program killed mid-write leaves (r3rt.c's name for a recording in
    // progress), two hours old, its process gone; and one of a process still running.
    let mut child = Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let records = store.join("records");
    let dead = records.join(format!(".tmp-{gone}-0000000000000007"));
    let live = records.join(format!(".tmp-{}-0000000000000008", std::process::id()));
    for d in [&dead, &live] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("prologue.r3snap"), b"half").unwrap();
        let ok = Command::new("touch")
            .args(["-d", "2 hours ago"])
            .arg(d)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let out = Command::new(r3_bin())
        .args(["--r3-store"])
        .arg(&store)
        .args(["record", "--quiet", "--"])
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .arg(&exe)
        .arg("reach")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("r3: removed 1 unfinished recording(s) that killed runs left in"),
        "{err}"
    );
    assert!(!dead.exists(), "{err}");
    assert!(live.exists(), "a running process's recording is its own");
    assert!(err.contains("launch(es) recorded in"), "{err}");
}

#[test]
fn recording_a_program_again_replaces_its_earlier_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    // First every live allocation, then what each launch reaches: the second run's recordings
    // (same kernels, shapes and argument bytes, so the same recording ids) must be what is left.
    run(&exe, "reach", &store_dir, &[("R3_RECORD_SNAPSHOT", "full")]);
    let err = stderr(&run(&exe, "reach", &store_dir, &[]));
    assert!(!err.contains("r3: warning"), "{err}");
    let store = Store::open(&store_dir).unwrap();
    let recs = store.recordings(None).unwrap();
    assert_eq!(recs.len(), 3, "one recording per distinct launch, not two");
    for rec in &recs {
        assert_eq!(
            rec.launch.snapshot.as_deref(),
            Some("reachable"),
            "{}",
            rec.id
        );
        assert!(rec.prologue().unwrap().regions.len() < 7, "{}", rec.id);
        rec.epilogue().unwrap();
    }
    assert_no_temporaries(&store_dir);
}

#[test]
fn a_recording_finished_in_the_background_is_complete_at_exit_with_its_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    run(&exe, "repeat", &store_dir, &[("R3_RECORD_THREADS", "2")]);
    let store = Store::open(&store_dir).unwrap();
    let recs = store.recordings(None).unwrap();
    assert_eq!(recs.len(), 1);
    let rec = &recs[0];
    assert!(rec.launch.replayable, "{:?}", rec.launch.not_replayable);
    let pro = rec.prologue().unwrap();
    assert_eq!(allocation_sizes(&pro), [32 << 20, 32 << 20]);
    let epi = rec.epilogue().unwrap();
    assert_eq!(changed_sizes(&epi), [32 << 20], "only y changed");
    // y = 2 x, page by page, for every page of y: the epilogue was written from the bytes
    // copied out after the launch, not from whatever the program did next.
    let y = epi
        .regions
        .iter()
        .find(|r| matches!(r.data, RegionData::Pages(_)))
        .unwrap();
    let x = pro
        .regions
        .iter()
        .find(|r| r.size == 32 << 20 && r.addr != y.addr)
        .unwrap();
    let (RegionData::Full(xb), RegionData::Pages(pages)) = (&x.data, &y.data) else {
        panic!("a prologue holds full regions, an epilogue changed pages")
    };
    assert_eq!(pages.len(), (32 << 20) / 4096);
    for (page, bytes) in pages {
        for (i, w) in bytes.chunks_exact(4).enumerate() {
            let at = *page as usize * 4096 + i * 4;
            let xv = f32::from_le_bytes(xb[at..at + 4].try_into().unwrap());
            assert_eq!(
                f32::from_le_bytes(w.try_into().unwrap()),
                2.0 * xv,
                "byte {at}"
            );
        }
    }
    assert_eq!(
        rec.natural_ms().unwrap(),
        [1.0, 1.0, 1.0],
        "the three repeats were timed"
    );
    let s = stats(&store_dir);
    assert_eq!(s.bytes_written, rec.launch.bytes_written);
    assert!(s.bytes_written > 32 << 20, "noise does not compress: {s:?}");
    assert!(s.background_s > 0.0, "{s:?}");
    assert!(s.exit_wait_s <= s.wait_s && s.wait_s <= s.record_s, "{s:?}");
    assert_no_temporaries(&store_dir);
}

#[test]
fn pointers_in_a_large_region_are_found_in_every_slice_of_its_scan() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    for threads in ["1", "3", "8"] {
        let store_dir = dir.path().join(format!("store-{threads}"));
        run(&exe, "wide", &store_dir, &[("R3_RECORD_THREADS", threads)]);
        let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
        let pro = recs[0].prologue().unwrap();
        assert_eq!(
            allocation_sizes(&pro),
            [12, 20, 28, 40 << 20],
            "{threads} thread(s)"
        );
        assert_eq!(recs[0].launch.regions_skipped, 1, "{threads} thread(s)");
    }
}

#[test]
fn recordings_in_flight_together_hold_what_one_at_a_time_would() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    // Six distinct launches in a row, each with 1 MiB of noise to write: one slot, four slots,
    // and four slots with no host memory to spare (drained before each recording).
    let mut stores = Vec::new();
    for (name, inflight, host_mb) in [
        ("one", "1", "4096"),
        ("four", "4", "4096"),
        ("tight", "4", "0"),
    ] {
        let store = dir.path().join(name);
        let env = [
            ("R3_RECORD_LAUNCHES", "6"),
            ("R3_RECORD_INFLIGHT", inflight),
            ("R3_RECORD_HOST_MB", host_mb),
        ];
        run(&exe, "caps", &store, &env);
        let recs = Store::open(&store).unwrap().recordings(None).unwrap();
        assert_eq!(recs.len(), 6, "{name}");
        let mut snaps: Vec<_> = recs
            .iter()
            .map(|r| (r.id.clone(), r.prologue().unwrap(), r.epilogue().unwrap()))
            .collect();
        snaps.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            stats(&store).bytes_written,
            recs.iter().map(|r| r.launch.bytes_written).sum::<u64>()
        );
        stores.push((name, snaps));
    }
    for (name, snaps) in &stores[1..] {
        assert!(snaps == &stores[0].1, "{name} differs from one slot");
    }
}

/// The fake GPU's time-step kernels on the host (fixtures/record_fake_gpu.c, `steps`), in the
/// same float operations: what a recorded launch must have done to its prologue.
fn run_step_kernel(kernel: &str, args: &[u8], mem: &mut [r3::store::records::Region]) {
    let word = |at: usize, n: usize| u64::from_le_bytes(args[at..at + n].try_into().unwrap());
    let ptr = |at| word(at, 8);
    let int = |at| i32::from_le_bytes(args[at..at + 4].try_into().unwrap());
    let float = |at| f32::from_le_bytes(args[at..at + 4].try_into().unwrap());
    let floats = |mem: &[r3::store::records::Region], addr: u64, n: usize| -> Vec<f32> {
        let r = mem
            .iter()
            .find(|r| r.addr <= addr && addr < r.addr + r.size)
            .unwrap();
        let RegionData::Full(b) = &r.data else {
            panic!("prologue regions are full")
        };
        let off = (addr - r.addr) as usize;
        b[off..off + 4 * n]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let store = |mem: &mut [r3::store::records::Region], addr: u64, v: &[f32]| {
        let r = mem
            .iter_mut()
            .find(|r| r.addr <= addr && addr < r.addr + r.size)
            .unwrap();
        let RegionData::Full(b) = &mut r.data else {
            unreachable!()
        };
        let off = (addr - r.addr) as usize;
        for (i, x) in v.iter().enumerate() {
            b[off + 4 * i..off + 4 * i + 4].copy_from_slice(&x.to_le_bytes());
        }
    };
    match kernel {
        "smooth" | "feedback" => {
            let (x, y, n, w) = (ptr(0), ptr(8), int(16) as usize, float(20));
            let input = floats(mem, x, n);
            let mut out = floats(mem, y, n);
            if kernel == "smooth" {
                out[0] = input[0];
                out[n - 1] = input[n - 1];
                for i in 1..n - 1 {
                    out[i] = (input[i - 1] + w * input[i] + input[i + 1]) / (w + 2.0);
                }
                store(mem, y, &out);
            } else {
                let fed: Vec<f32> = input.iter().zip(&out).map(|(a, b)| a + b / w).collect();
                store(mem, x, &fed);
            }
        }
        "decay" => {
            let (x, n, step) = (ptr(0), int(8) as usize, int(12));
            let v: Vec<f32> = floats(mem, x, n)
                .iter()
                .map(|a| a / 2.0 + step as f32)
                .collect();
            store(mem, x, &v);
        }
        "grad" => {
            let (p, g, n) = (ptr(0), ptr(8), int(16) as usize);
            let out: Vec<f32> = floats(mem, p, n)
                .iter()
                .enumerate()
                .map(|(i, x)| x - (i % 7) as f32 / 2.0)
                .collect();
            store(mem, g, &out);
        }
        "adam" => {
            let (p, m, v, g, n) = (ptr(0), ptr(8), ptr(16), ptr(24), int(32) as usize);
            let (lr, b1, b2, eps) = (float(36), float(40), float(44), float(48));
            let (mut pv, mut mv, mut vv) =
                (floats(mem, p, n), floats(mem, m, n), floats(mem, v, n));
            let gv = floats(mem, g, n);
            for i in 0..n {
                mv[i] = b1 * mv[i] + (1.0 - b1) * gv[i];
                vv[i] = b2 * vv[i] + (1.0 - b2) * (gv[i] * gv[i]);
                pv[i] -= lr * mv[i] / (vv[i].sqrt() + eps);
            }
            store(mem, p, &pv);
            store(mem, m, &mv);
            store(mem, v, &vv);
        }
        other => panic!("no host model of {other}"),
    }
}

/// A recording reproduces: its kernel, run on the prologue, leaves exactly the state the
/// prologue and epilogue say the launch left.
fn assert_reproduces(rec: &r3::store::records::Recording) {
    let pro = rec.prologue().unwrap_or_else(|e| panic!("{}: {e}", rec.id));
    let epi = rec.epilogue().unwrap_or_else(|e| panic!("{}: {e}", rec.id));
    let recorded = r3::store::records::apply(&pro, &epi).unwrap();
    let mut replayed = pro.regions.clone();
    run_step_kernel(
        &rec.launch.kernel,
        &rec.launch.args().unwrap(),
        &mut replayed,
    );
    for (got, want) in replayed.iter().zip(&recorded.regions) {
        assert!(
            got == want,
            "{} ({}): region {:#x} differs from the recording",
            rec.id,
            rec.launch.kernel,
            got.addr
        );
    }
    assert_eq!(
        rec.launch.files.len(),
        2,
        "{}: both files have sums",
        rec.id
    );
}

/// Issue 31: three kernels per time step over shared buffers, back to back, one scalar that
/// changes every step, two kernels with the same launch id, buffers swapped between steps, the
/// program ending right after the loop; on every kind of stream, on a device that runs work
/// only when something waits for it, with files slow to write (so that recordings are written
/// at the same time, and some still at exit). Every recording reproduces exactly. Before the fix
/// smooth's and feedback's recordings of a step shared a temporary directory: four were lost,
/// and the others held each other's files.
#[test]
fn back_to_back_launches_reproduce_on_a_device_that_runs_work_late() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    for stream in ["legacy", "blocking", "nonblocking", "perthread"] {
        let store_dir = dir.path().join(stream);
        let out = run(
            &exe,
            &format!("steps {stream}"),
            &store_dir,
            &[("FAKE_WRITE_DELAY_MS", "20")],
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ok"),
            "{stream}: the program's own check"
        );
        let store = Store::open(&store_dir).unwrap();
        let recs = store.recordings(None).unwrap();
        for kernel in ["smooth", "feedback", "decay"] {
            let n = recs.iter().filter(|r| r.launch.kernel == kernel).count();
            assert_eq!(
                n, 4,
                "{stream}: {kernel}'s first four distinct launches are recorded"
            );
        }
        recs.iter().for_each(assert_reproduces);
        assert_no_temporaries(&store_dir);
    }
}

/// A program killed while its recordings are being written leaves each recording whole or
/// absent: nothing but temporary directories (which `r3 record` removes later) is half there.
#[test]
fn a_recording_is_whole_or_absent_when_the_program_dies_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store_dir = dir.path().join("store");
    Store::create(&store_dir).unwrap();
    // 3 files of 12 recordings at 150 ms each, four at a time: about 1.4 s of writing.
    let mut child = Command::new(&exe)
        .args(["steps", "legacy"])
        .env("R3_RECORD", "1")
        .env("R3_STORE", &store_dir)
        .env("FAKE_WRITE_DELAY_MS", "150")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    child.kill().unwrap();
    child.wait().unwrap();
    let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
    assert!(
        recs.len() < 12,
        "killed before it finished writing: {} recordings",
        recs.len()
    );
    recs.iter().for_each(assert_reproduces);
}

/// Issue 61: an optimizer's steps, each kernel launched 100 times with the same arguments, every
/// buffer read and written in place, nothing synchronized between launches, on every kind of
/// stream. With `R3_RECORD_LAUNCHES=1` each kernel has one recording (its first launch), and it
/// reproduces exactly: its prologue is the state before that launch, its epilogue the state
/// after it, whatever the later launches (which read what it wrote) do meanwhile. (So does
/// llvm-ir-corpus/programs/adam_step.cu on an H200, 2026-11-29. A kernel with the same arguments
/// every launch is recorded once per process: a second recording in a program's list was
/// another program's, counted before `r3 record` counted only its own run's.)
#[test]
fn an_in_place_kernel_launched_back_to_back_reproduces() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    // (stream, warm re-launches, copy threads, floats a buffer: 12 MiB ones copied in pieces
    // on several threads, with changed pages in runs enough to be restored whole)
    let mut cases: Vec<(&str, &str, &str, u32)> = Vec::new();
    for stream in ["legacy", "blocking", "nonblocking", "perthread"] {
        for warm in ["0", "1"] {
            cases.push((stream, warm, "1", 1 << 19));
        }
    }
    cases.push(("nonblocking", "1", "8", 3 << 20));
    for (stream, warm, threads, n) in cases {
        let store_dir = dir.path().join(format!("{stream}-{warm}-{threads}-{n}"));
        let out = run(
            &exe,
            &format!("optimizer {stream} {n}"),
            &store_dir,
            &[
                ("R3_RECORD_LAUNCHES", "1"),
                ("R3_RECORD_WARM", warm),
                ("R3_RECORD_THREADS", threads),
                ("FAKE_WRITE_DELAY_MS", "20"),
            ],
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ok"),
            "{stream}: the program's own check"
        );
        let recs = Store::open(&store_dir).unwrap().recordings(None).unwrap();
        let mut kernels: Vec<&str> = recs.iter().map(|r| r.launch.kernel.as_str()).collect();
        kernels.sort();
        assert_eq!(
            kernels,
            ["adam", "grad"],
            "{stream}, warm {warm}: one recording each"
        );
        recs.iter().for_each(assert_reproduces);
        let s = stats(&store_dir);
        assert_eq!((s.launches, s.recorded), (200, 2), "{stream}, warm {warm}");
        assert_no_temporaries(&store_dir);
    }
}

/// Issue 61: `r3 record` exits as a shell reports the program's end: its exit code, or 128 + the
/// signal that killed it, and says which signal it was (before, a crash was exit status 1).
#[test]
fn r3_record_exits_with_the_program_s_status_signals_included() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    for (how, code, says) in [
        (
            "segv",
            139,
            Some("the program was killed by SIGSEGV (signal 11)"),
        ),
        (
            "abort",
            134,
            Some("the program was killed by SIGABRT (signal 6)"),
        ),
        ("exit", 3, None),
    ] {
        // No core files from the crashes (the shell's limit, which the program inherits).
        let out = Command::new("sh")
            .arg("-c")
            .arg("ulimit -c 0; exec \"$@\"")
            .arg("sh")
            .arg(r3_bin())
            .arg("--r3-store")
            .arg(dir.path().join(format!("store-{how}")))
            .args(["record", "--no-verify", "--"])
            .arg(&exe)
            .args(["crash", how])
            .env("R3_RECORD_WITHOUT_GPU", "1")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{how}: {err}");
        match says {
            Some(line) => {
                assert!(err.contains(line), "{how}: {err}");
                assert!(
                    err.contains(&format!("exit status {code}, as a shell gives it")),
                    "{how}: {err}"
                );
            }
            None => assert!(!err.contains("was killed"), "{how}: {err}"),
        }
    }
}

/// The kernels of the recordings `r3 record` says a run made (`r3: N launch(es) recorded in …`
/// and one line each), sorted.
fn listed_kernels(err: &str) -> (usize, Vec<String>) {
    let mut lines = err
        .lines()
        .skip_while(|l| !l.contains(" launch(es) recorded in "));
    let head = lines.next().unwrap_or_else(|| panic!("no list: {err}"));
    let n: usize = head
        .trim_start_matches("r3: ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut kernels: Vec<String> = lines
        .take(n)
        .map(|l| l.split_whitespace().nth(1).unwrap().to_owned())
        .collect();
    kernels.sort();
    (n, kernels)
}

/// Issue 61: four programs recorded at once into one store, as a build farm or a test suite
/// runs them: each `r3 record` lists (and would check) exactly the recordings its own program
/// made, not the others' that appeared in the store meanwhile; and a program recorded again
/// counts the recordings that replaced its earlier ones.
#[test]
fn concurrent_recorders_count_only_their_own_recordings() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path());
    let store = dir.path().join("store");
    let record = |scenario: &str| {
        Command::new(r3_bin())
            .arg("--r3-store")
            .arg(&store)
            .args(["record", "--no-verify", "--"])
            .arg(&exe)
            .args(scenario.split(' '))
            .env("R3_RECORD_WITHOUT_GPU", "1")
            // Slow files: each run's recordings appear while the others run.
            .env("FAKE_WRITE_DELAY_MS", "40")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let runs: [(&str, &[&str]); 4] = [
        ("reach", &["bump", "poke", "scale"]),
        (
            "steps legacy",
            &[
                "decay", "decay", "decay", "decay", "feedback", "feedback", "feedback", "feedback",
                "smooth", "smooth", "smooth", "smooth",
            ],
        ),
        ("optimizer legacy", &["adam", "grad"]),
        ("sparse", &["stripe", "stripe"]),
    ];
    for round in ["first", "again"] {
        let children: Vec<_> = runs.iter().map(|(s, _)| record(s)).collect();
        for (child, (scenario, want)) in children.into_iter().zip(&runs) {
            let out = child.wait_with_output().unwrap();
            let err = stderr(&out);
            assert!(out.status.success(), "{scenario}: {err}");
            let (n, kernels) = listed_kernels(&err);
            assert_eq!(
                (n, kernels),
                (want.len(), want.iter().map(|k| k.to_string()).collect()),
                "{round}: {scenario}: {err}"
            );
        }
    }
    let all = Store::open(&store).unwrap().recordings(None).unwrap();
    assert_eq!(all.len(), runs.iter().map(|(_, k)| k.len()).sum::<usize>());
    assert_no_temporaries(&store);
}
