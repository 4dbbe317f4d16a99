//! Replay without a GPU: a recording set up by a test harness (the snapshot writer), a kernel
//! captured by the driver, PTX built for both the baseline and a candidate.

use crate::support::*;
use r3::store::records::{self, Region, RegionData, RegionKind, Snapshot};
use std::path::Path;

/// A store holding saxpy's IR and one recorded launch of it (n = 1024, a = 2).
fn harness(dir: &Path) -> std::path::PathBuf {
    let store = saxpy_store(dir);

    let n = 1024usize;
    let (xa, ya) = (0x6000_0000_0000u64, 0x6000_0020_0000u64);
    let x: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let y: Vec<u8> = (0..n)
        .flat_map(|i| ((i % 7) as f32).to_le_bytes())
        .collect();
    let y2: Vec<u8> = (0..n)
        .flat_map(|i| (2.0 * i as f32 + (i % 7) as f32).to_le_bytes())
        .collect();
    let alloc = |addr, data: Vec<u8>| Region {
        kind: RegionKind::Allocation,
        addr,
        size: data.len() as u64,
        name: String::new(),
        page_size: 4096,
        data: RegionData::Full(data),
    };
    let before = Snapshot {
        regions: vec![alloc(xa, x.clone()), alloc(ya, y)],
    };
    let after = Snapshot {
        regions: vec![alloc(xa, x), alloc(ya, y2)],
    };
    let key = records::kernel_key(None, "_Z5saxpyfPKfPfi");
    let rec = store.join("records").join(key).join("0000000000000001");
    std::fs::create_dir_all(&rec).unwrap();
    records::write_snapshot(&rec.join("prologue.r3snap"), &before).unwrap();
    records::write_snapshot(
        &rec.join("epilogue.r3snap"),
        &records::diff(&before, &after, 4096),
    )
    .unwrap();
    let mut args = 2.0f32.to_le_bytes().to_vec();
    args.extend([0; 4]);
    args.extend(xa.to_le_bytes());
    args.extend(ya.to_le_bytes());
    args.extend((n as i32).to_le_bytes());
    let hex: String = args.iter().map(|b| format!("{b:02x}")).collect();
    let launch = serde_json::json!({
        "format": 1, "kernel": "_Z5saxpyfPKfPfi", "arch": "sm_90", "grid": [4, 1, 1], "block": [256, 1, 1],
        "shared_bytes": 0, "params": [{"offset": 0, "size": 4}, {"offset": 8, "size": 8}, {"offset": 16, "size": 8}, {"offset": 24, "size": 4}],
        "args_hex": hex, "va_base": xa, "va_size": 1u64 << 30, "in_app_ms": 0.005, "regions": 2, "bytes_in": 8192,
        "bytes_changed": 4096, "replayable": true, "not_replayable": null, "program": "harness", "pid": 1, "unix_time": 0
    });
    std::fs::write(
        rec.join("launch.json"),
        serde_json::to_string_pretty(&launch).unwrap(),
    )
    .unwrap();
    store
}

#[test]
fn dry_run_builds_baseline_and_candidate_ptx() {
    let dir = tempfile::tempdir().unwrap();
    let store = harness(dir.path());
    let s = store.to_str().unwrap();
    let out = r3(
        &[
            "replay",
            "saxpy",
            "--dry-run",
            "--json",
            "--pipeline",
            "default<O1>",
            "--r3-store",
            s,
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let row = &v[0];
    assert_eq!(
        row["recording"],
        format!(
            "{}/0000000000000001",
            records::kernel_key(None, "_Z5saxpyfPKfPfi")
        )
    );
    assert!(row["measured"].is_null());
    assert_eq!(row["candidate"]["pipeline"], "default<O1>");
    assert!(row["baseline_ptx"]["instructions"].as_u64().unwrap() > 5);
    assert_eq!(row["baseline_ptx"]["entries"][0], "_Z5saxpyfPKfPfi");
    // The same selection by store hash and by --all.
    for sel in [
        &["--all"][..],
        &["--record", row["recording"].as_str().unwrap()],
    ] {
        let mut args = vec!["replay", "--dry-run", "--r3-store", s];
        args.extend(sel);
        assert!(r3(&args, dir.path()).status.success(), "{sel:?}");
    }
}

#[test]
fn replay_without_a_gpu_says_so() {
    if r3::device::driver_present() {
        return skip(
            "no-gpu",
            "this machine has a GPU: the GPU scripts cover replay",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let store = harness(dir.path());
    let out = r3(
        &["replay", "saxpy", "--r3-store", store.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no GPU") && stderr(&out).contains("--dry-run"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn unknown_kernels_and_bad_configs_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let store = harness(dir.path());
    let s = store.to_str().unwrap();
    let out = r3(
        &["replay", "nosuchkernel", "--dry-run", "--r3-store", s],
        dir.path(),
    );
    assert!(
        stderr(&out).contains("no replayable recording matches"),
        "{}",
        stderr(&out)
    );
    std::fs::write(
        dir.path().join("c.json"),
        r#"{"pipeline": "default<O3>", "unroll": 4}"#,
    )
    .unwrap();
    let cfg = dir.path().join("c.json");
    let out = r3(
        &[
            "replay",
            "saxpy",
            "--dry-run",
            "--config",
            cfg.to_str().unwrap(),
            "--r3-store",
            s,
        ],
        dir.path(),
    );
    assert!(
        stderr(&out).contains("not a candidate configuration"),
        "{}",
        stderr(&out)
    );
    let out = r3(
        &[
            "replay",
            "saxpy",
            "--dry-run",
            "--tolerance",
            "f16:rel=1",
            "--r3-store",
            s,
        ],
        dir.path(),
    );
    assert!(stderr(&out).contains("f32 or f64"), "{}", stderr(&out));
}

#[test]
fn a_damaged_recording_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = harness(dir.path());
    let rec = store
        .join("records")
        .join(records::kernel_key(None, "_Z5saxpyfPKfPfi"))
        .join("0000000000000001");
    let p = rec.join("prologue.r3snap");
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
    let s = r3::store::Store::open(&store).unwrap();
    let recs = s.recordings(Some("_Z5saxpyfPKfPfi")).unwrap();
    let err = recs[0].prologue().unwrap_err().to_string();
    assert!(
        err.contains("prologue.r3snap") && err.contains("damaged"),
        "{err}"
    );
}

#[test]
fn mutations_change_the_code_in_a_dry_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = harness(dir.path());
    let s = store.to_str().unwrap();
    let args = [
        "replay",
        "saxpy",
        "--dry-run",
        "--json",
        "--r3-store",
        s,
        "--mutate",
        "drop-store",
        "--mutate",
        "change-constant",
        "--mutate",
        "oob-write",
        "--mutate",
        "endless-loop",
        "--mutate",
        "off-by-one",
        "--mutate",
        "float-error",
        "--mutate",
        "past-end",
        "--mutate",
        "trap",
        "--mutate",
        "out-of-memory",
    ];
    let out = r3(&args, dir.path());
    assert!(
        out.status.success(),
        "{:?}\n{}\n{}",
        out.status,
        stderr(&out),
        stdout(&out)
    );
    let rows: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 10, "nine mutations, then the candidate itself");
    let count = |r: &serde_json::Value| r["candidate_ptx"]["instructions"].as_u64().unwrap();
    let plain = count(&rows[9]);
    assert!(rows[9]["mutation"].is_null());
    let shape = |r: &serde_json::Value| (count(r), r["candidate_ptx"]["bytes"].as_u64().unwrap());
    for r in &rows[4..9] {
        assert!(
            r["measured"].is_null() && shape(r) != shape(&rows[9]),
            "every mutation lowers (past-end with the recording's address) and changes the code: {r}"
        );
    }
    assert_eq!(
        plain,
        count(
            &rows[9]["baseline_ptx"]
                .clone()
                .as_object()
                .map(|_| rows[9].clone())
                .unwrap()
        )
    );
    assert!(count(&rows[0]) < plain, "drop-store removes the store");
    assert!(count(&rows[1]) > plain, "change-constant adds an add");
    for r in &rows[..9] {
        assert!(r["measured"].is_null(), "a dry run measures nothing: {r}");
    }
}

/// Every injected fault, on every corpus kernel, lowers (or says it found nothing to change):
/// never a crash of LLVM, which would end `r3 replay --mutate` (found on the GPU: an
/// out-of-bounds write through a struct passed by value crashed NVPTX's argument lowering).
/// Each kind applies to most kernels, so the safety campaign covers the corpus.
#[test]
fn every_fault_lowers_on_every_corpus_kernel() {
    use r3::ir::mutate::{Facts, Mutation};
    let store = r3::store::Store::open(&repo().join("llvm-ir-corpus/store")).unwrap();
    let kernels = store.kernels().unwrap();
    let facts = Facts {
        past_end: Some(0x6000_1020_0000),
    };
    let mut applies = std::collections::BTreeMap::new();
    for k in &kernels {
        for m in Mutation::ALL {
            let job = r3::lower::isolated::LowerJob {
                bitcode: store.kernel_dir(&k.hash).join("module.bc"),
                kernel_hash: k.hash.clone(),
                candidate: r3::candidate::Candidate::baseline(),
                target: r3::lower::Codegen::default(),
                mutation: Some((*m, facts)),
            };
            match r3::lower::isolated::lower_isolated_with(&r3_bin(), &job) {
                Ok(_) => *applies.entry(format!("{m:?}")).or_insert(0) += 1,
                Err(r3::lower::CompileFailure { message })
                    if message.contains("found nothing to change") => {}
                Err(o) => panic!("{m:?} on {}: {o:?}", k.signature.demangled),
            }
        }
    }
    for m in Mutation::ALL {
        let n = applies.get(&format!("{m:?}")).copied().unwrap_or(0);
        // Barriers and swappable operands are in fewer kernels (the naive ones have no
        // barrier): at least a fifth of the corpus; every other kind three quarters.
        let fewer = matches!(m, Mutation::DropBarrier | Mutation::SwapOperands);
        let (part, whole) = if fewer { (1, 5) } else { (3, 4) };
        assert!(
            n * whole >= kernels.len() * part,
            "{m:?} applies to {n} of {} kernels",
            kernels.len()
        );
    }
}

/// A worker kept for another evaluator is told to close its session: a line it answers with
/// nothing, whether or not the machine has a GPU, and after which it still takes jobs (here a
/// bad one, answered as ever).
#[test]
fn the_replay_worker_answers_a_close_with_nothing() {
    use std::io::Write;
    let mut child = std::process::Command::new(r3_bin())
        .arg("__replay-worker")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"close\":true}\n{\"not\":\"a job\"}\n")
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(lines[0].contains("bad job"), "{said}");
}
