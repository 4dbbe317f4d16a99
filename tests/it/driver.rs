//! `r3-clang++` as a drop-in clang: pass-through, capture, fallback, concurrency.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cuda_root() -> PathBuf {
    r3::toolchain::find_cuda(None)
        .expect("CUDA SDK (run scripts/setup)")
        .path
}

fn cuda_args(root: &Path) -> Vec<String> {
    vec![
        "-x".into(),
        "cuda".into(),
        format!("--cuda-path={}", root.display()),
        "--cuda-gpu-arch=sm_90".into(),
        "-Wno-unknown-cuda-version".into(),
        "-O2".into(),
    ]
}

/// Runs a driver (`r3-clang++` link, or a plain clang) in `dir` with the given store.
fn run_in(dir: &Path, program: &Path, args: &[String], store: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("R3_STORE", store)
        .output()
        .expect("driver runs")
}

fn clangxx() -> PathBuf {
    r3::toolchain::find_clang(true).unwrap().path
}

const KERNELS: &str = r#"
#include "helper.cuh"
struct Pair { float *a; const float *b; int n; };
__constant__ float scale[2];
__device__ unsigned long long launches;
__device__ __noinline__ float twice(float x) { return 2.0f * x * scale[0]; }
__global__ void pair_kernel(Pair p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) p.a[i] = twice(p.b[i]) + bump(p.b[i]);
  if (i == 0) atomicAdd(&launches, 1ull);
}
template <typename T> __global__ void fill(T *x, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}
template __global__ void fill<float>(float *, float, int);
template __global__ void fill<int>(int *, int, int);
"#;

fn project(dir: &Path) {
    std::fs::write(
        dir.join("helper.cuh"),
        "__device__ inline float bump(float x) { return x + 1.0f; }\n",
    )
    .unwrap();
    std::fs::write(dir.join("k.cu"), KERNELS).unwrap();
    std::fs::write(dir.join("other.cu"), "#include \"helper.cuh\"\n__global__ void inc(float *x) { x[threadIdx.x] = bump(x[threadIdx.x]); }\n").unwrap();
    std::fs::write(
        dir.join("plain.cpp"),
        "int add(int a, int b) { return a + b; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.cpp"),
        "int add(int, int);\nint main() { return add(2, 3) == 5 ? 0 : 1; }\n",
    )
    .unwrap();
}

fn compile_cu(dir: &Path, src: &str, obj: &str, store: &Path) -> Output {
    let bin = driver_links(dir);
    let mut args = cuda_args(&cuda_root());
    args.extend(["-c".into(), src.into(), "-o".into(), obj.into()]);
    run_in(dir, &bin.join("r3-clang++"), &args, store)
}

fn store_kernels(store: &Path) -> Vec<r3::store::KernelRecord> {
    r3::store::Store::open(store).unwrap().kernels().unwrap()
}

#[test]
fn capture_stores_every_kernel_with_its_signature() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let store = dir.path().join("store");
    let out = compile_cu(dir.path(), "k.cu", "k.o", &store);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "no r3 noise: {}", stderr(&out));
    assert!(dir.path().join("k.o").exists());

    let kernels = store_kernels(&store);
    let names: Vec<&str> = kernels
        .iter()
        .map(|k| k.signature.demangled.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "pair_kernel(Pair)",
            "void fill<float>(float*, float, int)",
            "void fill<int>(int*, int, int)"
        ]
    );
    let pair = &kernels[0];
    assert_eq!(pair.signature.arch, "sm_90");
    assert_eq!(pair.signature.source.as_ref().unwrap().line, 7);
    assert!(pair
        .signature
        .source
        .as_ref()
        .unwrap()
        .file
        .ends_with("/k.cu"));
    let byval = pair.signature.params[0]
        .byval
        .as_ref()
        .expect("Pair is passed by value");
    let offsets: Vec<u64> = byval.fields.iter().map(|f| f.offset).collect();
    assert_eq!(
        (pair.signature.params[0].size, offsets),
        (24, vec![0, 8, 16])
    );
    assert!(pair.compile.args.iter().any(|a| a == "k.cu") && pair.compile.cwd == dir.path());

    // Each module verifies and holds what its kernel reaches, and nothing else.
    let s = r3::store::Store::open(&store).unwrap();
    let ctx = inkwell::context::Context::create();
    for k in &kernels {
        let m = r3::ir::load_bytes(&ctx, &s.kernel_bitcode(&k.hash).unwrap(), &k.hash)
            .expect("verifies");
        let has = |n: &str| m.get_global(n).is_some() || m.get_function(n).is_some();
        let is_pair = k.signature.name == pair.signature.name;
        assert_eq!(
            has("scale") && has("launches") && has("_Z5twicef"),
            is_pair,
            "{}",
            k.signature.name
        );
        assert!(!has("_Z4fillIiEvPT_S0_i") || k.signature.name == "_Z4fillIiEvPT_S0_i");
    }
}

#[test]
fn the_same_kernel_compiled_twice_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let store = dir.path().join("store");
    assert!(compile_cu(dir.path(), "k.cu", "k.o", &store)
        .status
        .success());
    let first = store_kernels(&store);
    // Another build directory, another output name: same kernels, same hashes.
    std::fs::create_dir_all(dir.path().join("b2")).unwrap();
    std::fs::copy(dir.path().join("k.cu"), dir.path().join("b2/k.cu")).unwrap();
    std::fs::copy(
        dir.path().join("helper.cuh"),
        dir.path().join("b2/helper.cuh"),
    )
    .unwrap();
    assert!(
        compile_cu(&dir.path().join("b2"), "k.cu", "again.o", &store)
            .status
            .success()
    );
    assert_eq!(store_kernels(&store).len(), first.len());
    let units = r3::store::Store::open(&store).unwrap().units().unwrap();
    assert_eq!(units.len(), 2, "one unit per source and output");
    assert_eq!(units[0].kernels["sm_90"], units[1].kernels["sm_90"]);
}

#[test]
fn outputs_match_plain_clang() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let store = dir.path().join("store");
    let bin = driver_links(dir.path());
    let r3x = bin.join("r3-clang++");
    let cuda = cuda_args(&cuda_root());
    let with = |extra: &[&str]| -> Vec<String> {
        cuda.iter()
            .cloned()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    // -E and -M on CUDA, and a plain C++ compile: byte-identical to clang's output.
    for args in [
        with(&["-E", "k.cu"]),
        with(&["-M", "k.cu"]),
        vec!["-O2".into(), "-E".into(), "plain.cpp".into()],
    ] {
        let ours = run_in(dir.path(), &r3x, &args, &store);
        let theirs = run_in(dir.path(), &clangxx(), &args, &store);
        assert_eq!(ours.status.code(), theirs.status.code(), "{args:?}");
        assert_eq!(stdout(&ours), stdout(&theirs), "{args:?}");
    }
    for (prog, obj) in [(&r3x, "r3.o"), (&clangxx(), "clang.o")] {
        let args: Vec<String> = ["-O2", "-c", "plain.cpp", "-o", obj]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(run_in(dir.path(), prog, &args, &store).status.success());
    }
    assert_eq!(
        std::fs::read(dir.path().join("r3.o")).unwrap(),
        std::fs::read(dir.path().join("clang.o")).unwrap()
    );
    // A CUDA compile with the capture plugin loaded: the very object clang writes.
    for (prog, obj) in [(&r3x, "k-r3.o"), (&clangxx(), "k-clang.o")] {
        let args = with(&["-c", "k.cu", "-o", obj]);
        assert!(run_in(dir.path(), prog, &args, &store).status.success());
    }
    assert_eq!(
        std::fs::read(dir.path().join("k-r3.o")).unwrap(),
        std::fs::read(dir.path().join("k-clang.o")).unwrap(),
        "the capture must not change the object"
    );
    // -MD with a CUDA compile: the dependency file is clang's, untouched by the capture.
    let md = with(&["-MD", "-MF", "k.d", "-c", "k.cu", "-o", "k.o"]);
    assert!(run_in(dir.path(), &r3x, &md, &store).status.success());
    let deps = std::fs::read_to_string(dir.path().join("k.d")).unwrap();
    assert!(
        deps.starts_with("k.o:") && deps.contains("helper.cuh"),
        "{deps}"
    );
    // Link: objects from r3-clang++ link into a program that runs.
    let link: Vec<String> = ["main.cpp", "r3.o", "-o", "prog"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(run_in(dir.path(), &r3x, &link, &store).status.success());
    assert!(Command::new(dir.path().join("prog"))
        .status()
        .unwrap()
        .success());
    // Nothing of that was CUDA device code except k.cu.
    assert_eq!(store_kernels(&store).len(), 3);
}

#[test]
fn clang_errors_are_clangs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.cu"),
        "__global__ void k() { undeclared(); }\n",
    )
    .unwrap();
    let store = dir.path().join("store");
    let ours = compile_cu(dir.path(), "bad.cu", "bad.o", &store);
    let mut args = cuda_args(&cuda_root());
    args.extend(["-c".into(), "bad.cu".into(), "-o".into(), "bad.o".into()]);
    let theirs = run_in(dir.path(), &clangxx(), &args, &store);
    assert_eq!(ours.status.code(), theirs.status.code());
    assert_ne!(ours.status.code(), Some(0));
    assert_eq!(stderr(&ours), stderr(&theirs));
    assert!(!store.join("kernels").exists() || store_kernels(&store).is_empty());
}

#[test]
fn an_unwritable_store_warns_once_and_the_build_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    // A store path under a regular file cannot be created, even by root.
    std::fs::write(dir.path().join("file"), "").unwrap();
    let out = compile_cu(dir.path(), "k.cu", "k.o", &dir.path().join("file/store"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("k.o").exists());
    let err = stderr(&out);
    assert_eq!(err.matches("r3: warning:").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("file/store"), "{err}");
}

#[test]
fn r3_options_never_reach_clang() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let bin = driver_links(dir.path());
    let store = dir.path().join("flag-store");
    let mut args = cuda_args(&cuda_root());
    args.extend([
        format!("--r3-store={}", store.display()),
        "-c".into(),
        "other.cu".into(),
        "-o".into(),
        "o.o".into(),
    ]);
    let out = run_in(
        dir.path(),
        &bin.join("r3-clang++"),
        &args,
        &dir.path().join("env-store"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        store_kernels(&store).len(),
        1,
        "--r3-store wins over R3_STORE"
    );
    assert!(!dir.path().join("env-store").exists());
}

#[test]
fn twenty_concurrent_compiles_share_one_store() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let store = dir.path().join("store");
    // Twenty units: ten copies of each source, so that writers of one kernel race too.
    for i in 0..10 {
        std::fs::copy(dir.path().join("k.cu"), dir.path().join(format!("k{i}.cu"))).unwrap();
        std::fs::copy(
            dir.path().join("other.cu"),
            dir.path().join(format!("o{i}.cu")),
        )
        .unwrap();
    }
    let sources: Vec<String> = (0..10)
        .flat_map(|i| [format!("k{i}.cu"), format!("o{i}.cu")])
        .collect();
    let handles: Vec<_> = sources
        .iter()
        .map(|src| {
            let (d, s, src) = (dir.path().to_owned(), store.clone(), src.clone());
            std::thread::spawn(move || compile_cu(&d, &src, &format!("{src}.o"), &s))
        })
        .collect();
    for h in handles {
        let out = h.join().unwrap();
        assert!(
            out.status.success() && stderr(&out).is_empty(),
            "{}",
            stderr(&out)
        );
    }
    let kernels = store_kernels(&store);
    assert_eq!(
        kernels.len(),
        4,
        "3 kernels of k*.cu and 1 of o*.cu, each once"
    );
    assert_eq!(
        r3::store::Store::open(&store)
            .unwrap()
            .units()
            .unwrap()
            .len(),
        20
    );
    let leftovers: Vec<_> = std::fs::read_dir(store.join("kernels"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporary directories left: {leftovers:?}"
    );
}

#[test]
fn kernels_lists_by_source() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let store = dir.path().join("store");
    assert!(compile_cu(dir.path(), "k.cu", "k.o", &store)
        .status
        .success());
    assert!(compile_cu(dir.path(), "other.cu", "other.o", &store)
        .status
        .success());
    let out = r3(
        &["kernels", "--r3-store", store.to_str().unwrap()],
        dir.path(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let dir_re = regex::escape(dir.path().to_str().unwrap());
    insta::with_settings!({filters => vec![(dir_re.as_str(), "[DIR]"), (r"\b[0-9a-f]{16}\b", "[HASH]")]}, {
        insta::assert_snapshot!(stdout(&out));
    });
    let json = r3(
        &["kernels", "--json", "--r3-store", store.to_str().unwrap()],
        dir.path(),
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(v[0]["kernels"].as_array().unwrap().len(), 3);
}

#[test]
fn a_missing_store_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let out = r3(
        &[
            "kernels",
            "--r3-store",
            dir.path().join("none").to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no store at") && stderr(&out).contains("fix:"),
        "{}",
        stderr(&out)
    );
}

/// The interposition on real clang output: a CUDA program linked by r3-clang++ against static
/// cudart has r3's wrappers, its own calls go to them, and the real functions stay reachable.
#[test]
fn links_against_cudart_get_the_recording_wrappers() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let bin = driver_links(dir.path());
    let cuda = cuda_root();
    // k.cu has no main: link it with one.
    std::fs::write(dir.path().join("main.cu"), "int main() { return 0; }\n").unwrap();
    let mut args = cuda_args(&cuda);
    args.extend(["k.cu", "main.cu", "-o", "app"].map(String::from));
    args.push(format!("-L{}/lib", cuda.display()));
    args.extend(["-lcudart_static", "-ldl", "-lrt", "-pthread"].map(String::from));
    let out = run_in(
        dir.path(),
        &bin.join("r3-clang++"),
        &args,
        &dir.path().join("store"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let nm = std::process::Command::new("nm")
        .arg(dir.path().join("app"))
        .output()
        .unwrap();
    let syms = stdout(&nm);
    let defined = |name: &str| {
        syms.lines()
            .any(|l| l.ends_with(&format!(" T {name}")) || l.ends_with(&format!(" t {name}")))
    };
    let mut wrapped: Vec<&str> = syms
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|s| s.starts_with("__wrap_"))
        .collect();
    wrapped.sort();
    wrapped.dedup();
    insta::assert_snapshot!(wrapped.join("\n"));
    for f in r3::driver::runtime::WRAPPED {
        assert!(defined(&format!("__wrap_{f}")), "__wrap_{f} missing");
    }
    assert!(
        defined("cudaLaunchKernel"),
        "the real cudaLaunchKernel is linked too"
    );
    assert!(
        !syms
            .lines()
            .any(|l| l.trim_start().starts_with("U __real_")),
        "unresolved __real_ symbols"
    );
    // With recording off the program runs as before.
    let run = std::process::Command::new(dir.path().join("app"))
        .output()
        .unwrap();
    assert!(run.status.success());
    // Without cudart on the link line nothing is added.
    let plain: Vec<String> = ["-O2", "plain.cpp", "main.cpp", "-o", "plainapp"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(run_in(
        dir.path(),
        &bin.join("r3-clang++"),
        &plain,
        &dir.path().join("store")
    )
    .status
    .success());
    let nm = std::process::Command::new("nm")
        .arg(dir.path().join("plainapp"))
        .output()
        .unwrap();
    assert!(!stdout(&nm).contains("__wrap_"));
}

/// Inside the runtime, a call of a function it wraps reaches the wrapper (the link wraps
/// every reference), which takes the runtime's lock: its own pinned staging buffer, allocated
/// with the lock held, deadlocked every recording on a GPU. The fake GPU links without the
/// wrapping and could not see it; the runtime's object can: it may name what it wraps only
/// as `__real_`.
#[test]
fn the_runtime_calls_what_it_wraps_only_through_the_real_functions() {
    let lib = r3::driver::runtime::archive(None).unwrap();
    let nm = std::process::Command::new("nm")
        .arg("-u")
        .arg(&lib)
        .output()
        .unwrap();
    assert!(nm.status.success(), "{}", stderr(&nm));
    let undefined: Vec<String> = stdout(&nm)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(str::to_owned)
        .collect();
    assert!(
        undefined.iter().any(|s| s == "__real_cudaHostAlloc"),
        "{undefined:?}"
    );
    let direct: Vec<&&str> = r3::driver::runtime::WRAPPED
        .iter()
        .filter(|f| undefined.iter().any(|u| u == **f))
        .collect();
    assert!(
        direct.is_empty(),
        "the runtime calls wrapped functions directly: {direct:?}"
    );
}

#[test]
fn a_crash_in_r3s_ir_processing_does_not_break_the_build() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let bin = driver_links(dir.path());
    let mut args = cuda_args(&cuda_root());
    args.extend(["-c", "k.cu", "-o", "k.o"].map(String::from));
    let out = Command::new(bin.join("r3-clang++"))
        .args(&args)
        .current_dir(dir.path())
        .env("R3_STORE", dir.path().join("store"))
        .env("R3_TEST_CRASH_CAPTURE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("k.o").exists());
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("r3: warning:") && err.contains("crashed (signal 6)"),
        "{err}"
    );
}

/// Compiles k.cu with extra environment; returns the output and the store's kernels.
fn compile_k_with(
    dir: &Path,
    store: &str,
    env: &[(&str, &str)],
) -> (Output, Vec<r3::store::KernelRecord>) {
    let bin = driver_links(dir);
    let mut args = cuda_args(&cuda_root());
    args.extend(["-c", "k.cu", "-o", "k.o"].map(String::from));
    let out = Command::new(bin.join("r3-clang++"))
        .args(&args)
        .current_dir(dir)
        .env("R3_STORE", dir.join(store))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let kernels = if dir.join(store).join("kernels").exists() {
        store_kernels(&dir.join(store))
    } else {
        Vec::new()
    };
    (out, kernels)
}

#[test]
fn the_plugin_and_the_capture_compile_store_the_same_kernels() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let (a, by_plugin) = compile_k_with(dir.path(), "plugin", &[]);
    let (b, by_compile) = compile_k_with(dir.path(), "compile", &[("R3_CAPTURE_PLUGIN", "0")]);
    assert!(a.status.success() && b.status.success());
    assert_eq!(by_plugin.len(), 3);
    // Same hashes, signatures and source lines (the plugin's from the text, the capture
    // compile's from line tables).
    let sig = |ks: &[r3::store::KernelRecord]| -> Vec<_> {
        ks.iter()
            .map(|k| (k.hash.clone(), k.signature.clone()))
            .collect()
    };
    assert_eq!(sig(&by_plugin), sig(&by_compile));
}

#[test]
fn a_plugin_clang_cannot_load_falls_back_to_plain_clang() {
    let dir = tempfile::tempdir().unwrap();
    project(dir.path());
    let broken = dir.path().join("broken.so");
    std::fs::write(&broken, "not a shared object").unwrap();
    let (out, kernels) = compile_k_with(
        dir.path(),
        "store",
        &[("R3_CAPTURE_PLUGIN", broken.to_str().unwrap())],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("k.o").exists());
    assert!(
        kernels.is_empty(),
        "nothing captured from a run that failed"
    );
    let err = stderr(&out);
    assert!(
        err.contains("r3: warning: clang failed with r3's additions"),
        "{err}"
    );
    assert_eq!(err.matches("r3: warning").count(), 1, "{err}");
}

/// README's usage line, word for word, after `scripts/setup`: no --cuda-path and no -L, so the
/// driver must pass the SDK r3 found where clang would find none (and clang's own install where
/// it would).
#[test]
fn readmes_usage_line_builds_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let line = readme
        .lines()
        .find(|l| l.starts_with("r3-clang++ -x cuda") && l.contains(" app.cu "))
        .expect("README has a usage line building app.cu");
    let words: Vec<&str> = line.split_whitespace().collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("llvm-ir-corpus/selftest/app.cu"),
        dir.path().join("app.cu"),
    )
    .unwrap();
    let bin = driver_links(dir.path());
    let out = Command::new(bin.join(words[0]))
        .args(&words[1..])
        .arg("-v")
        .current_dir(dir.path())
        .env("R3_STORE", dir.path().join("store"))
        .env_remove("R3_CUDA_PATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{line}\n{}", stderr(&out));
    assert!(dir.path().join("app").is_file());
    let clang_finds_its_own = ["/usr/local/cuda", "/usr/lib/cuda"]
        .iter()
        .any(|d| Path::new(d).join("include/cuda.h").is_file());
    if !clang_finds_its_own {
        assert!(
            stderr(&out).contains("clang finds no CUDA installation here; added --cuda-path="),
            "{}",
            stderr(&out)
        );
    }
}
