//! Rewrites with knobs (issue 38) without a GPU: the rule proposer's shared-memory tiling
//! template on a matrix product compiled for real once per knob value, judged by a scripted
//! landscape over the values, and shipped as a diff whose `#define`s rebuild the measured
//! kernel.

use crate::support::*;
use r3::store::records::{self, Region, RegionData, RegionKind, Snapshot};
use std::path::{Path, PathBuf};
use std::process::Command;

const GEMM: &str = r#"#include <cstddef>

__global__ void gemm(int n, const float* __restrict__ A, const float* __restrict__ B,
                     float* __restrict__ C) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
  for (int k = 0; k < n; ++k) acc += A[static_cast<size_t>(row) * n + k] * B[static_cast<size_t>(k) * n + col];
  C[static_cast<size_t>(row) * n + col] = acc;
}

int main() { return 0; }
"#;

/// `dir/gemm.cu` compiled with r3-clang++ -O3 into `store`, and the kernels stored.
fn compiled_kernels(dir: &Path, store: &Path) -> Vec<r3::store::KernelRecord> {
    let out = cuda_driver(&driver_links(dir), store)
        .args(["-O3", "-c", "gemm.cu", "-o", "gemm.o"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    r3::store::Store::open(store).unwrap().kernels().unwrap()
}

/// Compiles GEMM with r3-clang++ in `dir` and records one synthetic launch of it (16x16
/// blocks, its three matrices in three allocations): what evolve's facts are read from.
fn gemm_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    std::fs::write(dir.join("gemm.cu"), GEMM).unwrap();
    let kernels = compiled_kernels(dir, &store);
    let name = kernels[0].signature.name.clone();
    let n = 32usize;
    let bytes = n * n * 4;
    let (a, b, c) = (
        0x6000_0000_0000u64,
        0x6000_0010_0000u64,
        0x6000_0020_0000u64,
    );
    let alloc = |addr, fill: u8| Region {
        kind: RegionKind::Allocation,
        addr,
        size: bytes as u64,
        name: String::new(),
        page_size: 4096,
        data: RegionData::Full(vec![fill; bytes]),
    };
    let before = Snapshot {
        regions: vec![alloc(a, 1), alloc(b, 2), alloc(c, 0)],
    };
    let rec = store
        .join("records")
        .join(records::kernel_key(None, &name))
        .join("0000000000000001");
    std::fs::create_dir_all(&rec).unwrap();
    records::write_snapshot(&rec.join("prologue.r3snap"), &before).unwrap();
    records::write_snapshot(
        &rec.join("epilogue.r3snap"),
        &records::diff(&before, &before, 4096),
    )
    .unwrap();
    let mut args = (n as i32).to_le_bytes().to_vec();
    args.extend([0; 4]);
    for p in [a, b, c] {
        args.extend(p.to_le_bytes());
    }
    let hex: String = args.iter().map(|b| format!("{b:02x}")).collect();
    let launch = serde_json::json!({
        "format": 1, "kernel": name, "arch": "sm_90", "grid": [2, 2, 1], "block": [16, 16, 1],
        "shared_bytes": 0, "params": [{"offset": 0, "size": 4}, {"offset": 8, "size": 8}, {"offset": 16, "size": 8}, {"offset": 24, "size": 8}],
        "args_hex": hex, "va_base": a, "va_size": 1u64 << 30, "in_app_ms": 0.005, "regions": 3, "bytes_in": 3 * bytes,
        "bytes_changed": 0, "replayable": true, "not_replayable": null, "program": "gemm", "pid": 1, "unix_time": 0
    });
    std::fs::write(
        rec.join("launch.json"),
        serde_json::to_string_pretty(&launch).unwrap(),
    )
    .unwrap();
    store
}

/// The scripted landscape over the tile depth and the grouping: 32 deep with groups of 4 x 2
/// blocks is fastest, 64 gives wrong output.
fn landscape(dir: &Path) -> PathBuf {
    let p = dir.join("judge.json");
    std::fs::write(
        &p,
        r##"{"default_speedup": 1.0, "rules": [
            {"contains": "#define R3_TK 64", "fails": "gives wrong output", "message": "C differs"},
            {"contains": "#define R3_RX 4\n#define R3_RY 2\n#define R3_TK 32\n", "speedup": 5.0},
            {"contains": "#define R3_TK 32", "speedup": 3.0},
            {"contains": "#define R3_TK 16", "speedup": 2.0},
            {"contains": "#define R3_TK 8", "speedup": 1.5}
        ]}"##,
    )
    .unwrap();
    p
}

#[test]
fn the_tiling_template_builds_each_tile_depth_ships_the_best_and_its_diff_rebuilds_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = gemm_store(d);
    let judge = landscape(d);
    let out = Command::new(r3_bin())
        .args(["evolve", "gemm", "--proposer", "rules", "--simulate"])
        .arg(&judge)
        .env("R3_STORE", &store)
        .current_dir(d)
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(
            "measuring its 36 builds (R3_RX in 1/2/4, R3_RY in 1/2/4, R3_TK in 8/16/32/64)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "valid: 5.000x the original's best compiler-only build (rewrite built with R3_RX=4 R3_RY=2 R3_TK=32"
        ),
        "{text}"
    );

    // One build per tile depth, each its own kernel; the verdict names the winning values.
    let events = events(&store);
    let proposed = events
        .iter()
        .find(|e| e["event"] == "proposed" && e["label"] == "rules: shared-tiling")
        .unwrap_or_else(|| panic!("no tiling attempt: {text}"));
    let id = &proposed["attempt"];
    let compiled = events
        .iter()
        .find(|e| e["event"] == "compiled" && e["attempt"] == *id)
        .unwrap();
    let builds = compiled["builds"].as_array().unwrap();
    let values: Vec<[i64; 3]> = builds
        .iter()
        .map(|b| ["R3_TK", "R3_RX", "R3_RY"].map(|k| b["values"][k].as_i64().unwrap()))
        .collect();
    assert_eq!(values.len(), 36, "{values:?}");
    assert!(
        values.contains(&[8, 1, 1]) && values.contains(&[64, 4, 4]),
        "{values:?}"
    );
    let mut hashes: Vec<&str> = builds
        .iter()
        .map(|b| b["variant"].as_str().unwrap())
        .collect();
    hashes.sort_unstable();
    hashes.dedup();
    assert_eq!(
        hashes.len(),
        36,
        "each tile depth and grouping compiles to its own kernel"
    );
    let judged = events
        .iter()
        .find(|e| e["event"] == "judged" && e["attempt"] == *id)
        .unwrap();
    let chosen = &judged["verdict"]["values"];
    assert_eq!(
        [&chosen["R3_TK"], &chosen["R3_RX"], &chosen["R3_RY"]],
        [32, 4, 2]
    );
    let won = builds.iter().find(|b| b["values"] == *chosen).unwrap();

    // The report shows the values; the exported diff is the template with them defined.
    let report = stdout(&r3(&["report", "gemm", "--format", "md"], d));
    assert!(report.contains("R3_RX=4 R3_RY=2 R3_TK=32"), "{report}");
    let winners = Command::new(r3_bin())
        .arg("export")
        .env("R3_STORE", &store)
        .env("R3_APPLY_SIMULATED", "1")
        .output()
        .unwrap();
    let winners: serde_json::Value = serde_json::from_slice(&winners.stdout).unwrap();
    let rewrite = &winners["rewrites"][0];
    assert_eq!(rewrite["variant"], won["variant"]);
    let diff = rewrite["diff"].as_str().unwrap();
    assert!(
        diff.contains("+#define R3_RX 4\n+#define R3_RY 2\n+#define R3_TK 32\n"),
        "{diff}"
    );
    assert!(diff.contains("+#undef R3_TK\n"), "{diff}");
    assert!(
        !diff.contains("R3_PARAM(") && !diff.contains("R3_REQUIRE("),
        "{diff}"
    );

    // Applied by the user, the diff builds to the measured kernel.
    std::fs::write(d.join("best.diff"), diff).unwrap();
    let patched = Command::new("git")
        .args(["apply", "-p1", "best.diff"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(patched.status.success(), "{}", stderr(&patched));
    let kernels = compiled_kernels(d, &d.join("rebuilt"));
    assert_eq!(kernels.len(), 1);
    assert_eq!(
        kernels[0].hash.to_string(),
        won["variant"].as_str().unwrap()
    );
}

#[test]
fn a_model_may_answer_with_knobs_and_anything_else_stays_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = gemm_store(d);
    let region = r#"R3_PARAM(R3_UNROLL, 1, 2, 4)
R3_REQUIRE(R3_UNROLL <= BLOCK_X)
__global__ void gemm(int n, const float* __restrict__ A, const float* __restrict__ B,
                     float* __restrict__ C) {
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= n || col >= n) return;
  float acc = 0.0f;
#pragma unroll R3_UNROLL
  for (int k = 0; k < n; ++k) acc += A[static_cast<size_t>(row) * n + k] * B[static_cast<size_t>(k) * n + col];
  C[static_cast<size_t>(row) * n + col] = acc;
}"#;
    let source = std::fs::read_to_string(d.join("gemm.cu")).unwrap();
    let original = r3::evolve::source::region(&source, "gemm.cu", "gemm", 3).unwrap();
    // The guard takes the declarations out and checks the rest as before; a knob may be an
    // unroll factor.
    let ok = r3::evolve::guard::check(&source, &original, region).unwrap();
    assert_eq!(ok.template.knobs[0].values, vec![1, 2, 4]);
    assert_eq!(ok.template.builds(&[[16, 16, 1]]).unwrap().len(), 3);
    assert_eq!(ok.template.builds(&[[2, 16, 1]]).unwrap().len(), 2);
    let refused = |rw: &str| r3::evolve::guard::check(&source, &original, rw).unwrap_err();
    assert!(refused(&format!("#define R3_UNROLL 4\n{region}")).contains("preprocessor directive"));
    assert!(
        refused(&region.replace("unroll R3_UNROLL", "unroll R3_OTHER"))
            .contains("preprocessor directive")
    );
    assert!(refused(&region.replace(
        "R3_PARAM(R3_UNROLL, 1, 2, 4)",
        "R3_PARAM(R3_UNROLL, 1, two)"
    ))
    .contains("not an integer literal"));
    drop(store);
}
