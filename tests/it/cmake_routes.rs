//! README's CMake routes 2 (r3-clang++ as the CUDA compiler) and 3 (r3 as a launcher in front
//! of clang) on a project that calls `find_package(CUDAToolkit)` and links `CUDA::cudart`
//! (tests/cmake-toolkit-project), against the SDK as `scripts/setup` leaves it, in an
//! environment with nothing else in it (issue 59, item 2): FindCUDAToolkit needs the
//! unversioned `libcudart.so`, which setup links.

use crate::support::*;
use std::path::Path;
use std::process::{Command, Output};

/// `cmake args…` with PATH's system directories, HOME and the store alone in its environment.
fn cmake(args: &[String], store: &Path) -> Output {
    Command::new("cmake")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", std::env::var_os("HOME").unwrap_or_default())
        .env("R3_STORE", store)
        .output()
        .expect("cmake runs (scripts/setup installs it)")
}

fn ok(o: &Output, what: &str) {
    assert!(o.status.success(), "{what}:\n{}\n{}", stdout(o), stderr(o));
}

#[test]
fn find_package_cuda_toolkit_configures_and_builds_on_routes_2_and_3() {
    let sdk = r3::toolchain::find_cuda(None).unwrap().path;
    assert!(
        sdk.join("lib/libcudart.so").exists(),
        "{} has no libcudart.so, which FindCUDAToolkit needs: run scripts/setup (it links it)",
        sdk.join("lib").display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let links = driver_links(tmp.path());
    let project = repo().join("tests/cmake-toolkit-project");
    let sdk_s = sdk.display().to_string();
    let routes: [(&str, Vec<String>); 2] = [
        (
            "route 2",
            vec![format!(
                "-DCMAKE_CUDA_COMPILER={}",
                links.join("r3-clang++").display()
            )],
        ),
        (
            "route 3",
            vec![
                "-DCMAKE_CUDA_COMPILER=clang++-22".into(),
                "-DCMAKE_CXX_COMPILER=clang++-22".into(),
                format!("-DCMAKE_CUDA_COMPILER_LAUNCHER={}", r3_bin().display()),
                format!("-DCMAKE_CXX_LINKER_LAUNCHER={}", r3_bin().display()),
                format!("-DCMAKE_CUDA_FLAGS=--cuda-path={sdk_s} --cuda-gpu-arch=sm_90"),
            ],
        ),
    ];
    for (route, flags) in routes {
        let dir = tmp.path().join(route.replace(' ', "-"));
        let (build, store) = (dir.join("build"), dir.join("store"));
        let mut args = vec![
            "-S".to_string(),
            project.display().to_string(),
            "-B".into(),
            build.display().to_string(),
            "-G".into(),
            "Ninja".into(),
            format!("-DCUDAToolkit_ROOT={sdk_s}"),
            "-DCMAKE_CUDA_ARCHITECTURES=90".into(),
            "-DCMAKE_BUILD_TYPE=Release".into(),
        ];
        args.extend(flags);
        let configure = cmake(&args, &store);
        ok(&configure, route);
        let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).unwrap();
        let cudart = cache
            .lines()
            .find_map(|l| l.strip_prefix("CUDA_CUDART:FILEPATH="))
            .unwrap_or_else(|| panic!("{route}: no CUDA_CUDART in CMakeCache.txt"));
        assert!(
            Path::new(cudart).starts_with(&sdk) && cudart.ends_with("libcudart.so"),
            "{route}: FindCUDAToolkit found {cudart}"
        );
        let built = cmake(&["--build".into(), build.display().to_string()], &store);
        ok(&built, route);
        // The kernel was captured, whichever route compiled it.
        let kernels = r3::store::Store::open(&store).unwrap().kernels().unwrap();
        assert!(
            kernels
                .iter()
                .any(|k| k.signature.demangled.contains("scale")),
            "{route}: {kernels:?}"
        );
        // Linked against the shared cudart, found where the SDK keeps it.
        let run = Command::new(build.join("toolkit_demo"))
            .env("LD_LIBRARY_PATH", sdk.join("lib"))
            .output()
            .unwrap();
        ok(&run, route);
        assert!(
            stdout(&run).contains("no GPU") || stdout(&run).contains("PASS"),
            "{route}: {}",
            stdout(&run)
        );
    }
}
