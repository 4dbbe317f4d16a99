//! The tools users build with (issue 36): r3 as a compiler launcher, in front of a compiler
//! cache and behind one, `--r3-apply` and `--r3-off` as a build sees them, unoptimized
//! kernels, and `r3 record` / `r3 status` where there is no GPU.

use crate::support::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KERNEL: &str = "__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n";

fn cuda_flags() -> Vec<String> {
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    vec![
        "-x".into(),
        "cuda".into(),
        format!("--cuda-path={}", cuda.display()),
        "--cuda-gpu-arch=sm_90".into(),
        "-Wno-unknown-cuda-version".into(),
    ]
}

fn kernels_in(store: &Path) -> Vec<r3::store::KernelRecord> {
    r3::store::Store::open(store)
        .map(|s| s.kernels().unwrap())
        .unwrap_or_default()
}

/// A stand-in for a compiler cache: a shell script of that name that logs its arguments and
/// runs them as a child (as ccache runs the compiler on a miss).
fn fake_cache(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let bin = dir.join("cachebin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join(format!("{name}.log"));
    let script = bin.join(name);
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\n\"$@\"\nexit $?\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, log)
}

fn run(program: &Path, args: &[String], dir: &Path, store: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("R3_STORE", store)
        .env("TMPDIR", dir)
        .output()
        .unwrap()
}

#[test]
fn r3_launches_clang_and_a_cache_in_front_of_clang_and_still_captures() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.cu"), KERNEL).unwrap();
    let clang = r3::toolchain::find_clang(true).unwrap().path;
    let mut args = vec![clang.display().to_string()];
    args.extend(cuda_flags());
    args.extend(["-O3", "-c", "k.cu", "-o", "k.o"].map(String::from));

    // `r3 clang++ …`: the driver, for the clang named.
    let store = dir.path().join("store");
    let out = run(&r3_bin(), &args, dir.path(), &store);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("k.o").exists());
    assert_eq!(kernels_in(&store).len(), 1);

    // `r3 ccache clang++ …`: the cache runs clang itself (never r3), and r3 captures beside it,
    // so a hit (which runs no compiler) would still store the kernel.
    let (cache, log) = fake_cache(dir.path(), "ccache");
    let store = dir.path().join("store2");
    std::fs::remove_file(dir.path().join("k.o")).unwrap();
    let mut cached = vec![cache.display().to_string()];
    cached.extend(args.iter().cloned());
    let out = run(&r3_bin(), &cached, dir.path(), &store);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("k.o").exists());
    assert_eq!(kernels_in(&store).len(), 1);
    let called = std::fs::read_to_string(&log).unwrap();
    assert!(
        called.starts_with(&clang.display().to_string()) && !called.contains("pass-plugin"),
        "the cache runs clang with the user's arguments only: {called}"
    );

    // Another compiler goes through untouched.
    let out = run(
        &r3_bin(),
        &["cc".into(), "--version".into()],
        dir.path(),
        &store,
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_cache_in_front_of_r3_clang_is_warned_about_once_per_build() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.cu"), KERNEL).unwrap();
    let links = driver_links(dir.path());
    let (cache, _) = fake_cache(dir.path(), "ccache");
    let store = dir.path().join("store");
    // One shell stands for the build tool: both compiles are of one build.
    let mut compile = vec![links.join("r3-clang++").display().to_string()];
    compile.extend(cuda_flags());
    compile.extend(["-O3", "-c", "k.cu"].map(String::from));
    let line = |o: &str| format!("'{}' {} -o {o}", cache.display(), compile.join(" "));
    let script = format!("{}\n{}\n", line("a.o"), line("b.o"));
    let out = run(
        Path::new("/bin/sh"),
        &["-c".into(), script],
        dir.path(),
        &store,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(
        err.matches("r3: warning: ccache runs r3-clang++").count(),
        1,
        "{err}"
    );
    assert!(err.contains("r3;ccache"), "{err}");
}

#[test]
fn a_winners_file_that_is_not_there_fails_the_compile_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.cu"), KERNEL).unwrap();
    let links = driver_links(dir.path());
    let mut args = cuda_flags();
    args.extend(["-O3", "-c", "k.cu", "-o", "k.o"].map(String::from));
    let store = dir.path().join("store");
    for (flag, what) in [
        ("--r3-apply=/nonexistent/winners.json", "No such file"),
        ("--r3-apply=k.cu", "k.cu"),
    ] {
        let mut with = args.clone();
        with.push(flag.into());
        let out = run(&links.join("r3-clang++"), &with, dir.path(), &store);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert!(
            err.contains("r3: error: tuned kernels cannot be applied") && err.contains(what),
            "{err}"
        );
        assert!(!dir.path().join("k.o").exists(), "{flag}");
    }
}

#[test]
fn r3_off_still_finds_the_cuda_sdk() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.cu"), KERNEL).unwrap();
    let links = driver_links(dir.path());
    // No --cuda-path: the plain command works through r3 because r3 knows the SDK.
    let args: Vec<String> = [
        "-x",
        "cuda",
        "--cuda-gpu-arch=sm_90",
        "-O3",
        "-c",
        "k.cu",
        "-o",
        "k.o",
        "--r3-off",
    ]
    .map(String::from)
    .to_vec();
    let store = dir.path().join("store");
    let out = run(&links.join("r3-clang++"), &args, dir.path(), &store);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("k.o").exists());
    assert!(kernels_in(&store).is_empty(), "--r3-off captures nothing");
}

#[test]
fn an_unoptimized_kernel_is_stored_marked_warned_about_and_not_tuned() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.cu"), KERNEL).unwrap();
    std::fs::write(
        dir.path().join("o3.cu"),
        KERNEL.replace("twice", "thrice").replace("2.0f", "3.0f"),
    )
    .unwrap();
    let links = driver_links(dir.path());
    let store = dir.path().join("store");
    let compile = |src: &str, opt: &str| {
        let mut args = cuda_flags();
        args.extend([opt, "-c", src, "-o", &format!("{src}.o")].map(String::from));
        run(&links.join("r3-clang++"), &args, dir.path(), &store)
    };
    let debug = compile("k.cu", "-O0");
    assert!(debug.status.success(), "{}", stderr(&debug));
    let err = stderr(&debug);
    assert!(
        err.contains("r3: warning: kernel twice(float*) was compiled without optimization (-O0)")
            && err.contains("-DCMAKE_BUILD_TYPE=Release"),
        "{err}"
    );
    // The same kernel again is not new: no second warning.
    let again = compile("k.cu", "-O0");
    assert!(!stderr(&again).contains("warning"), "{}", stderr(&again));
    let release = compile("o3.cu", "-O3");
    assert!(
        !stderr(&release).contains("warning"),
        "{}",
        stderr(&release)
    );

    let kernels = kernels_in(&store);
    let marked = |name: &str| {
        kernels
            .iter()
            .find(|k| k.signature.name.contains(name))
            .unwrap()
            .signature
            .unoptimized
    };
    assert!(marked("twice") && !marked("thrice"));

    let listing = r3(&["kernels"], dir.path());
    let text = stdout(&listing);
    assert_eq!(
        text.matches("compiled without optimization (-O0)").count(),
        1,
        "{text}"
    );
    let status = stdout(&r3(&["status"], dir.path()));
    assert!(
        status.contains(
            "not tunable: 1 kernel(s) compiled without optimization (-O0): twice(float*)"
        ) && status.contains("not recorded yet: 1 compiled kernel(s): thrice(float*)")
            && status.contains("r3 record --"),
        "{status}"
    );
    let dry = r3(&["tune", "--dry-run", "--all", "--budget", "3"], dir.path());
    assert!(
        stdout(&dry).contains("compiled without optimization (-O0): no pass changes it"),
        "{}",
        stdout(&dry)
    );
}

#[test]
fn record_without_a_gpu_stops_before_the_program_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let out = Command::new(r3_bin())
        .args(["record", "--", "sh", "-c"])
        .arg(format!("touch '{}'", ran.display()))
        .env("R3_STORE", dir.path().join("store"))
        .env("R3_TEST_NO_GPU", "1")
        .env_remove("R3_RECORD_WITHOUT_GPU")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!ran.exists(), "the program must not start");
    assert!(
        err.contains("sh not started: no NVIDIA driver")
            && err.contains("r3 doctor")
            && !err.contains("registration"),
        "{err}"
    );
    let timed = Command::new(r3_bin())
        .args(["record", "--time-only", "--", "true"])
        .env("R3_STORE", dir.path().join("store"))
        .env("R3_TEST_NO_GPU", "1")
        .env_remove("R3_RECORD_WITHOUT_GPU")
        .output()
        .unwrap();
    assert_eq!(timed.status.code(), Some(1), "{}", stderr(&timed));
}

#[test]
fn a_thrust_program_compiles_as_with_nvcc() {
    // CUDA 13 keeps thrust in include/cccl, which nvcc searches and clang 22 does not.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("th.cu"),
        "#include <thrust/device_vector.h>\n#include <thrust/reduce.h>\nint main() { thrust::device_vector<int> v(16, 1); return thrust::reduce(v.begin(), v.end()) == 16 ? 0 : 1; }\n",
    )
    .unwrap();
    let links = driver_links(dir.path());
    let args: Vec<String> = [
        "-x",
        "cuda",
        "--cuda-gpu-arch=sm_90",
        "-O3",
        "-c",
        "th.cu",
        "-o",
        "th.o",
    ]
    .map(String::from)
    .to_vec();
    let store = dir.path().join("store");
    let out = run(&links.join("r3-clang++"), &args, dir.path(), &store);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !kernels_in(&store).is_empty(),
        "thrust's kernels are captured"
    );
}
