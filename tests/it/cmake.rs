//! A real CMake CUDA project built with scripts/r3-toolchain.cmake: CMake sees clang, the
//! build works, the store holds every kernel, compile_commands.json reruns.

use crate::support::*;
use std::path::Path;
use std::process::Command;

fn cmake(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new("cmake")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("cmake runs (scripts/setup installs it)")
}

#[test]
fn cmake_project_builds_with_r3_and_records_every_kernel() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = driver_links(tmp.path());
    let build = tmp.path().join("build");
    let store = tmp.path().join("store");
    let toolchain = repo().join("scripts/r3-toolchain.cmake");
    let configure = cmake(
        &[
            "-S",
            repo().join("tests/cmake-project").to_str().unwrap(),
            "-B",
            build.to_str().unwrap(),
            "-G",
            "Ninja",
            &format!("-DCMAKE_TOOLCHAIN_FILE={}", toolchain.display()),
            &format!("-DR3_BIN_DIR={}", bin.display()),
            &format!("-DR3_STORE={}", store.display()),
        ],
        tmp.path(),
    );
    assert!(
        configure.status.success(),
        "{}\n{}",
        stdout(&configure),
        stderr(&configure)
    );
    let compiler = std::fs::read_dir(build.join("CMakeFiles"))
        .unwrap()
        .filter_map(|e| {
            std::fs::read_to_string(e.ok()?.path().join("CMakeCUDACompiler.cmake")).ok()
        })
        .next()
        .expect("CMake wrote CMakeCUDACompiler.cmake");
    assert!(
        compiler.contains("set(CMAKE_CUDA_COMPILER_ID \"Clang\")"),
        "{compiler}"
    );
    assert!(compiler.contains("r3-clang++"), "{compiler}");

    let built = cmake(&["--build", build.to_str().unwrap()], tmp.path());
    assert!(
        built.status.success(),
        "{}\n{}",
        stdout(&built),
        stderr(&built)
    );
    assert!(
        !stdout(&built).contains("r3: warning"),
        "{}",
        stdout(&built)
    );
    let run = Command::new(build.join("r3demo")).output().unwrap();
    assert!(run.status.success());
    assert!(
        stdout(&run).contains("no GPU") || stdout(&run).contains("PASS"),
        "{}",
        stdout(&run)
    );

    // Every kernel is in the store, once, and each module passes the verifier.
    let s = r3::store::Store::open(&store).unwrap();
    let kernels = s.kernels().unwrap();
    let mut names: Vec<String> = kernels
        .iter()
        .map(|k| k.signature.demangled.clone())
        .collect();
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    for want in ["axpy<float>", "axpy<int>", "eval_poly", "reverse"] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "{want} missing from {names:?}"
        );
    }
    let ctx = inkwell::context::Context::create();
    for k in &kernels {
        r3::ir::load_bytes(&ctx, &s.kernel_bitcode(&k.hash).unwrap(), &k.hash)
            .expect("module verifies");
    }
    let poly = kernels
        .iter()
        .find(|k| k.signature.demangled.contains("eval_poly"))
        .unwrap();
    let m = r3::ir::load_bytes(&ctx, &s.kernel_bitcode(&poly.hash).unwrap(), "poly").unwrap();
    let space = |n: u16| inkwell::AddressSpace::from(n);
    let spaces: Vec<_> = m
        .get_globals()
        .map(|g| g.as_pointer_value().get_type().get_address_space())
        .collect();
    assert!(
        spaces.contains(&space(4)) && spaces.contains(&space(1)),
        "__constant__ and __device__ globals: {spaces:?}"
    );

    let listing = r3(
        &["kernels", "--r3-store", store.to_str().unwrap()],
        tmp.path(),
    );
    let repo_re = regex::escape(repo().to_str().unwrap());
    insta::with_settings!({filters => vec![(repo_re.as_str(), "[REPO]"), (r"\b[0-9a-f]{16}\b", "[HASH]"), (r"kernels in .*", "kernels in [STORE]")]}, {
        insta::assert_snapshot!(stdout(&listing));
    });

    // compile_commands.json names r3's driver, and its commands rerun.
    let db: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(build.join("compile_commands.json")).unwrap(),
    )
    .unwrap();
    let cu: Vec<&serde_json::Value> = db
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["file"].as_str().unwrap().ends_with(".cu"))
        .collect();
    assert_eq!(cu.len(), 4);
    for e in &cu {
        assert!(e["command"].as_str().unwrap().contains("r3-clang++"), "{e}");
    }
    let entry = cu[0];
    let command = entry["command"].as_str().unwrap();
    let words: Vec<&str> = command.split_whitespace().collect();
    let output = words[words.iter().position(|w| *w == "-o").unwrap() + 1];
    let dir = Path::new(entry["directory"].as_str().unwrap());
    std::fs::remove_file(dir.join(output)).unwrap();
    let rerun = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(rerun.status.success(), "{}", stderr(&rerun));
    assert!(dir.join(output).exists());
}

#[test]
fn cmake_toolchain_command_prints_a_usable_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = r3(&["cmake-toolchain"], tmp.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let path = stdout(&out).trim().to_owned();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("set(R3_BIN_DIR") && text.contains("CMAKE_CUDA_COMPILER"),
        "{path}"
    );
}
