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
    // clang itself (clangd, clang-tidy) takes every command as written: r3's settings travel
    // in <build>/.r3/config, not as flags.
    let clang = r3::toolchain::find_clang(true).unwrap().path;
    for e in db.as_array().unwrap() {
        let command = e["command"].as_str().unwrap();
        assert!(!command.contains("--r3-"), "{command}");
        assert!(command.matches("--cuda-path").count() <= 1, "{command}");
        let mut words = command.split_whitespace().skip(1);
        let mut args: Vec<&str> = Vec::new();
        while let Some(w) = words.next() {
            if w == "-o" {
                words.next();
            } else {
                args.push(w);
            }
        }
        let check = Command::new(&clang)
            .args(&args)
            .arg("-fsyntax-only")
            .current_dir(e["directory"].as_str().unwrap())
            .output()
            .unwrap();
        assert!(check.status.success(), "{command}\n{}", stderr(&check));
    }
    let config = std::fs::read_to_string(build.join(".r3/config")).unwrap();
    assert!(
        config.contains(&format!("store = \"{}\"", store.display())),
        "{config}"
    );
    // r3 commands run in the build tree find the build's store.
    let here = Command::new(r3_bin())
        .arg("kernels")
        .current_dir(&build)
        .env_remove("R3_STORE")
        .output()
        .unwrap();
    assert!(
        stdout(&here).starts_with(&format!("4 kernels in {}", store.display())),
        "{}{}",
        stdout(&here),
        stderr(&here)
    );
    // Every CUDA object depends on the store's winners stamp and the build's settings, so
    // that a rebuild follows what apply ships.
    let ninja = |args: &[&str]| {
        let o = Command::new("ninja")
            .args(args)
            .current_dir(&build)
            .output()
            .unwrap();
        stdout(&o)
    };
    let deps = ninja(&["-t", "deps", "CMakeFiles/r3demo.dir/src/main.cu.o"]);
    let stamp = store.join("winners.stamp");
    assert!(
        deps.contains(stamp.to_str().unwrap()) && deps.contains(".r3/config"),
        "{deps}"
    );
    assert!(ninja(&["-n"]).contains("no work to do"));
    let s = r3::store::Store::open(&store).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert!(s.set_shipped_digest("0123abcd").unwrap());
    let planned = ninja(&["-n"]);
    assert_eq!(
        planned.matches("Building CUDA object").count(),
        4,
        "{planned}"
    );
    assert!(
        !s.set_shipped_digest("0123abcd").unwrap(),
        "unchanged: not rewritten"
    );

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

    // Rewrites ship by the build's settings too (and with them, apply).
    let rewrites = cmake(
        &["-DR3_APPLY_REWRITES=ON", build.to_str().unwrap()],
        tmp.path(),
    );
    assert!(rewrites.status.success(), "{}", stderr(&rewrites));
    let asked = std::fs::read_to_string(build.join(".r3/config")).unwrap();
    assert!(asked.contains("apply_rewrites = true"), "{asked}");
    let off = cmake(
        &["-DR3_APPLY_REWRITES=OFF", build.to_str().unwrap()],
        tmp.path(),
    );
    assert!(off.status.success(), "{}", stderr(&off));
    let config = std::fs::read_to_string(build.join(".r3/config")).unwrap();
    assert!(!config.contains("apply_rewrites"), "{config}");
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

fn cuda_root() -> std::path::PathBuf {
    r3::toolchain::find_cuda(None).unwrap().path
}

/// Configures and builds tests/cmake-project in `build` with `args`; returns both outputs.
fn configure_and_build(
    tmp: &Path,
    build: &Path,
    args: &[String],
    env: &[(&str, &Path)],
) -> (String, String) {
    let mut configure = Command::new("cmake");
    configure
        .args([
            "-S",
            repo().join("tests/cmake-project").to_str().unwrap(),
            "-B",
        ])
        .arg(build)
        .args(["-G", "Ninja"])
        .args(args)
        .current_dir(tmp)
        .env_remove("R3_STORE");
    for (k, v) in env {
        configure.env(k, v);
    }
    let c = configure.output().unwrap();
    assert!(c.status.success(), "{}\n{}", stdout(&c), stderr(&c));
    let mut b = Command::new("cmake");
    b.args(["--build"])
        .arg(build)
        .current_dir(tmp)
        .env_remove("R3_STORE");
    for (k, v) in env {
        b.env(k, v);
    }
    let b = b.output().unwrap();
    assert!(b.status.success(), "{}\n{}", stdout(&b), stderr(&b));
    (stdout(&c) + &stderr(&c), stdout(&b) + &stderr(&b))
}

#[test]
fn r3_clang_as_the_cuda_compiler_without_the_toolchain_file_and_a_debug_build_is_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = driver_links(tmp.path());
    let build = tmp.path().join("build");
    let store = tmp.path().join("store");
    let driver = bin.join("r3-clang++");
    let args = [
        format!("-DCMAKE_CUDA_COMPILER={}", driver.display()),
        format!("-DCMAKE_CXX_COMPILER={}", driver.display()),
        format!("-DCUDAToolkit_ROOT={}", cuda_root().display()),
        "-DCMAKE_BUILD_TYPE=Debug".into(),
    ];
    let (configured, built) =
        configure_and_build(tmp.path(), &build, &args, &[("R3_STORE", &store)]);
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).unwrap();
    assert!(
        cache.contains("CMAKE_CUDA_ARCHITECTURES:STRING="),
        "{configured}"
    );
    assert!(
        built.contains("was compiled without optimization (-O0), so r3 cannot tune it"),
        "{built}"
    );
    assert!(
        !built.contains("newer than the latest"),
        "r3's own SDK is not warned about: {built}"
    );
    let kernels = r3::store::Store::open(&store).unwrap().kernels().unwrap();
    assert_eq!(kernels.len(), 4);
    assert!(kernels.iter().all(|k| k.signature.unoptimized));
}

#[test]
fn a_compiler_cache_gets_r3_in_front_and_a_hit_still_stores_the_kernels() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = driver_links(tmp.path());
    let ccache_dir = tmp.path().join("ccache");
    let toolchain = repo().join("scripts/r3-toolchain.cmake");
    let mut stats = String::new();
    for round in ["first", "second"] {
        let build = tmp.path().join(format!("build-{round}"));
        let store = tmp.path().join(format!("store-{round}"));
        let args = [
            format!("-DCMAKE_TOOLCHAIN_FILE={}", toolchain.display()),
            format!("-DR3_BIN_DIR={}", bin.display()),
            format!("-DR3_STORE={}", store.display()),
            "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache".into(),
        ];
        let (configured, _) =
            configure_and_build(tmp.path(), &build, &args, &[("CCACHE_DIR", &ccache_dir)]);
        assert!(
            configured.contains("r3 goes in front of it"),
            "{configured}"
        );
        let kernels = r3::store::Store::open(&store).unwrap().kernels().unwrap();
        assert_eq!(kernels.len(), 4, "{round} build");
        let s = Command::new("ccache")
            .arg("--print-stats")
            .env("CCACHE_DIR", &ccache_dir)
            .output()
            .expect("ccache (scripts/setup installs it)");
        stats = stdout(&s);
    }
    let hits: u64 = stats
        .lines()
        .filter(|l| l.starts_with("direct_cache_hit") || l.starts_with("preprocessed_cache_hit"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    assert!(
        hits >= 4,
        "the second build's CUDA objects came from the cache: {stats}"
    );
}
