//! Kernel identity by content hash: two programs that each have a `kernel1(int, float*, float*)`
//! share one store, and nothing mixes them up (records, trials, commands, migration).

use crate::support::*;
use r3::store::identity::Resolution;
use r3::store::records::{self, LaunchRecord};
use r3::store::Store;
use std::path::{Path, PathBuf};
use std::process::Command;

const PROG_A: &str = "#include <cstdio>\n__global__ void kernel1(int n, float *x, float *y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] += 2.0f * x[i];\n}\nint main() { kernel1<<<1, 32>>>(0, nullptr, nullptr); std::printf(\"a\\n\"); return 0; }\n";
const PROG_B: &str = "#include <cstdio>\n__global__ void kernel1(int n, float *x, float *y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] * x[i] - y[i];\n}\nint main() { kernel1<<<1, 32>>>(0, nullptr, nullptr); std::printf(\"b\\n\"); return 0; }\n";

/// Builds one program (compile and link in one command) into the store; returns the binary.
fn build(dir: &Path, name: &str, src: &str, store: &Path) -> PathBuf {
    let sub = dir.join(name);
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join("prog.cu"), src).unwrap();
    let out = cuda_driver(&driver_links(dir), store)
        .args(["prog.cu", "-o", "prog"])
        .args(cudart_link())
        .current_dir(&sub)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    sub.join("prog")
}

fn two_programs(dir: &Path) -> (Store, [PathBuf; 2]) {
    let store = dir.join("store");
    let a = build(dir, "a", PROG_A, &store);
    let b = build(dir, "b", PROG_B, &store);
    (Store::open(&store).unwrap(), [a, b])
}

fn launch(name: &str, fatbin: Option<String>) -> LaunchRecord {
    let mut l: LaunchRecord = serde_json::from_value(serde_json::json!({
        "format": 1, "kernel": name, "arch": "sm_90", "grid": [1,1,1], "block": [32,1,1],
        "shared_bytes": 0, "params": [], "args_hex": "", "va_base": 0, "va_size": 0,
        "in_app_ms": 0.0, "regions": 0, "bytes_in": 0, "bytes_changed": 0,
        "replayable": true, "not_replayable": null, "program": "p", "pid": 1, "unix_time": 0
    }))
    .unwrap();
    l.fatbin = fatbin;
    l
}

#[test]
fn same_named_kernels_of_two_programs_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (store, bins) = two_programs(dir.path());
    let kernels = store.kernels().unwrap();
    assert_eq!(kernels.len(), 2);
    assert_eq!(kernels[0].signature.name, kernels[1].signature.name);
    assert_ne!(kernels[0].hash, kernels[1].hash);

    // Each program's compile knows the fatbinary it produced, which is what its binary holds.
    let units = store.units().unwrap();
    assert_eq!(units.len(), 2);
    let index = store.index().unwrap();
    for (unit, bin) in units.iter().zip(&bins) {
        assert_eq!(unit.fatbins.len(), 1, "{unit:?}");
        assert_eq!(records::fatbin_hashes(bin), unit.fatbins);
        let hash = &unit.kernels["sm_90"][0];
        let resolved = index.of_launch(&launch("_Z7kernel1iPfS_", Some(unit.fatbins[0].clone())));
        assert!(matches!(resolved, Resolution::Kernel(k) if &k.hash == hash));
    }
    // A launch that names no fatbinary (recorded before r3 recorded them) is ambiguous here.
    assert!(matches!(
        index.of_launch(&launch("_Z7kernel1iPfS_", None)),
        Resolution::Ambiguous(k) if k.len() == 2
    ));
}

#[test]
fn the_recording_runtime_hashes_the_fatbinary_as_the_driver_does() {
    // Registration runs before main and needs no GPU; the runtime prints what it hashed.
    let dir = tempfile::tempdir().unwrap();
    let (store, bins) = two_programs(dir.path());
    for (unit, bin) in store.units().unwrap().iter().zip(&bins) {
        let out = Command::new(bin)
            .env("R3_PRINT_FATBINS", "1")
            .output()
            .unwrap();
        let printed = format!("r3: fatbin {}", unit.fatbins[0]);
        assert!(stderr(&out).contains(&printed), "{}", stderr(&out));
    }
}

#[test]
fn commands_take_a_name_only_where_it_is_unambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = two_programs(dir.path());
    let s = store.root().to_str().unwrap();
    let out = r3(
        &[
            "tune",
            "--dry-run",
            "kernel1",
            "--budget",
            "2",
            "--r3-store",
            s,
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = stderr(&out);
    let kernels = store.kernels().unwrap();
    for k in &kernels {
        assert!(err.contains(k.hash.as_str()), "{err}");
    }
    assert!(
        err.contains("a/prog.cu") && err.contains("b/prog.cu"),
        "{err}"
    );
    let prefix = &kernels[1].hash[..6];
    let out = r3(
        &[
            "tune",
            "--dry-run",
            prefix,
            "--budget",
            "2",
            "--r3-store",
            s,
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("kernel1(int, float*, float*)").count(),
        1
    );
}

#[test]
fn format_1_trials_move_under_the_hash_where_the_name_is_unique() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = two_programs(dir.path());
    let root = store.root().to_owned();
    let kernels = store.kernels().unwrap();
    // A third program with a kernel of another name, then trials as format 1 laid them out.
    let solo =
        "__global__ void solo(float *y) { y[threadIdx.x] = 1.0f; }\nint main() { return 0; }\n";
    build(dir.path(), "c", solo, &root);
    let line = |kernel: &str, trial: u32| {
        format!("{{\"format\":1,\"trial\":{trial},\"kernel\":\"{kernel}\",\"gpu\":\"NVIDIA H100\",\"driver\":\"CUDA 13.0\",\"r3_version\":\"0.1.0\",\"strategy\":\"bo\",\"seed\":0,\"batch\":1,\"candidate\":{{\"pipeline\":\"default<O3>\"}},\"ptx_hash\":\"h\",\"outcome\":{{\"status\":\"compile_error\",\"message\":\"x\"}},\"passes_ms\":0.0,\"codegen_ms\":0.0,\"measure_ms\":0.0,\"finished_unix_ms\":0}}\n")
    };
    for name in ["_Z4soloPf", "_Z7kernel1iPfS_"] {
        let d = root.join("trials").join(name.to_lowercase());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("nvidia-h100.jsonl"), line(name, 0) + &line(name, 1)).unwrap();
    }
    std::fs::write(
        root.join("format.json"),
        "{\"format\": 1, \"created_by\": \"r3 0.1.0\"}\n",
    )
    .unwrap();

    let out = r3(
        &["report", "--r3-store", root.to_str().unwrap()],
        dir.path(),
    );
    let err = stderr(&out);
    assert!(
        err.contains("migrated to format 2: trials of 1 kernels"),
        "{err}"
    );
    assert!(
        err.contains("_z7kernel1ipfs_ left as it was: 2 different stored kernels"),
        "{err}"
    );

    let mut store = Store::open(&root).unwrap();
    assert_eq!(store.format(), 2);
    assert_eq!(
        store.migrate().unwrap(),
        None,
        "a second migration has nothing to do"
    );
    let solo_hash = store
        .kernels()
        .unwrap()
        .into_iter()
        .find(|k| !kernels.iter().any(|o| o.hash == k.hash))
        .unwrap()
        .hash;
    let moved = store
        .trials(&r3::kernel::TrialsKey::of_kernel(&solo_hash), "NVIDIA H100")
        .unwrap();
    assert_eq!(moved.len(), 2);
    assert!(moved.iter().all(|t| solo_hash == t.kernel));
    assert!(!root.join("trials/_z4solopf").exists());
    assert!(
        root.join("trials/_z7kernel1ipfs_").is_dir(),
        "the ambiguous one stays"
    );
}
