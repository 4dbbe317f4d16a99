//! A `static __device__` variable is one object for every kernel of its unit and outlives a
//! launch: the module r3 stores for one kernel must not let the optimizer take it for that
//! kernel's own (deleting stores nobody in the module reads, folding loads nobody in it writes).

use crate::support::*;
use std::path::Path;
use std::process::Command;

const UNIT: &str = "static __device__ int state;\n__device__ int shared_state;\n__global__ void setstate(int v) { state = v; shared_state = v; }\n__global__ void parity(int *out) { out[0] = state & 1; out[1] = shared_state; }\n__global__ void bump() { static __device__ int calls; calls = 1; }\n";

/// Captures UNIT with r3-clang++; returns the store's kernels by name.
fn capture(dir: &Path) -> Vec<r3::store::KernelRecord> {
    std::fs::write(dir.join("unit.cu"), UNIT).unwrap();
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    let store = dir.join("store");
    let out = Command::new(driver_links(dir).join("r3-clang++"))
        .args([
            "-x",
            "cuda",
            "--cuda-gpu-arch=sm_90",
            "-Wno-unknown-cuda-version",
        ])
        .arg(format!("--cuda-path={}", cuda.display()))
        .args(["-O3", "-c", "unit.cu", "-o", "unit.o"])
        .current_dir(dir)
        .env("R3_STORE", &store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    r3::store::Store::open(&store).unwrap().kernels().unwrap()
}

/// `r3 ptx` of the stored module of kernel `name` under `pipeline`.
fn ptx(dir: &Path, kernels: &[r3::store::KernelRecord], name: &str, pipeline: &str) -> String {
    let k = kernels
        .iter()
        .find(|k| k.signature.name == name)
        .unwrap_or_else(|| panic!("{name} not captured"));
    let module = dir
        .join("store/kernels")
        .join(k.hash.as_str())
        .join("module.bc");
    let out_file = dir.join(format!("{name}.ptx"));
    let out = r3(
        &[
            "ptx",
            module.to_str().unwrap(),
            "--pipeline",
            pipeline,
            "--sm",
            "sm_90",
            "-o",
            out_file.to_str().unwrap(),
        ],
        dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::read_to_string(out_file).unwrap()
}

/// Instructions `op…` whose memory operand is exactly the variable `var`.
fn accesses(ptx: &str, op: &str, var: &str) -> usize {
    let operand = format!("[{var}]");
    ptx.lines()
        .filter(|l| l.trim_start().starts_with(op) && l.contains(&operand))
        .count()
}

#[test]
fn unit_statics_keep_their_stores_and_loads_in_one_kernels_module() {
    let dir = tempfile::tempdir().unwrap();
    let kernels = capture(dir.path());
    for pipeline in ["default<O2>", "default<O3>"] {
        let set = ptx(dir.path(), &kernels, "_Z8setstatei", pipeline);
        assert_eq!(accesses(&set, "st.", "_ZL5state"), 1, "{pipeline}:\n{set}");
        assert_eq!(
            accesses(&set, "st.", "shared_state"),
            1,
            "{pipeline}:\n{set}"
        );
        let parity = ptx(dir.path(), &kernels, "_Z6parityPi", pipeline);
        assert_eq!(
            accesses(&parity, "ld.", "_ZL5state"),
            1,
            "{pipeline}:\n{parity}"
        );
        assert_eq!(
            accesses(&parity, "ld.", "shared_state"),
            1,
            "{pipeline}:\n{parity}"
        );
        // A function's static lives as long as the program too.
        let bump = ptx(dir.path(), &kernels, "_Z4bumpv", pipeline);
        assert_eq!(
            accesses(&bump, "st.", "_ZZ4bumpvE5calls"),
            1,
            "{pipeline}:\n{bump}"
        );
    }
}
