//! The never-break-a-build campaign: faults injected into r3's part of a compile (its store,
//! its capture child, its plugin, its choice of clang), and clang's own modes (-E, -M, -MD,
//! -S, -c, -###, --version, C and C++, @file). In every case the build is plain clang's: same
//! exit status, same files written byte for byte, same output, plus at most one
//! `r3: warning:` line.

use crate::support::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KERNEL: &str =
    "__global__ void twice(float *x, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= 2.0f;\n}\n";

fn cuda() -> Vec<String> {
    let root = r3::toolchain::find_cuda(None)
        .expect("CUDA SDK (run scripts/setup)")
        .path;
    [
        "-x",
        "cuda",
        &format!("--cuda-path={}", root.display()),
        "--cuda-gpu-arch=sm_90",
        "-Wno-unknown-cuda-version",
        "-O2",
    ]
    .map(String::from)
    .to_vec()
}

fn project(dir: &Path) {
    std::fs::write(dir.join("k.cu"), KERNEL).unwrap();
    std::fs::write(
        dir.join("plain.cpp"),
        "int add(int a, int b) { return a + b; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("plain.c"),
        "int sub(int a, int b) { return a - b; }\n",
    )
    .unwrap();
}

/// The files of `dir` (not directories, not the project's own), by name, with their bytes.
fn outputs(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !matches!(n.as_str(), "k.cu" | "plain.cpp" | "plain.c" | "args.rsp"))
        .map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap()))
        .collect()
}

fn clear_outputs(dir: &Path) {
    for name in outputs(dir).keys() {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
}

/// clang's temporary names (`/tmp/k-sm_90-1a2b3c.s`) differ from run to run.
fn masked(text: &str) -> String {
    regex::Regex::new(r"-[0-9a-f]{6}\.")
        .unwrap()
        .replace_all(text, "-XXXXXX.")
        .into_owned()
}

struct Run {
    out: Output,
    files: BTreeMap<String, Vec<u8>>,
}

fn run(dir: &Path, program: &Path, args: &[String], env: &[(&str, String)]) -> Run {
    clear_outputs(dir);
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_remove("R3_STORE")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("driver runs");
    Run {
        out,
        files: outputs(dir),
    }
}

/// Runs plain clang, then the r3 driver with `env`, on the same command in the same directory;
/// asserts that the build is clang's. Returns r3's warning line, if any.
fn same_as_clang(
    dir: &Path,
    what: &str,
    args: &[String],
    c: bool,
    env: &[(&str, String)],
) -> Option<String> {
    let clang = r3::toolchain::find_clang(!c).unwrap().path;
    let driver = driver_links(dir).join(if c { "r3-clang" } else { "r3-clang++" });
    let theirs = run(dir, &clang, args, &[]);
    let ours = run(dir, &driver, args, env);
    let (o, t) = (&ours.out, &theirs.out);
    assert_eq!(
        o.status.code(),
        t.status.code(),
        "{what}: exit status\n{}",
        stderr(o)
    );
    assert_eq!(
        masked(&stdout(o)),
        masked(&stdout(t)),
        "{what}: standard output"
    );
    assert_eq!(
        ours.files.keys().collect::<Vec<_>>(),
        theirs.files.keys().collect::<Vec<_>>(),
        "{what}: files written"
    );
    for (name, bytes) in &ours.files {
        // A dependency file differs by what r3 adds on purpose, and by nothing else.
        let ours = if name.ends_with(".d") {
            without_r3_deps(bytes)
        } else {
            bytes.clone()
        };
        assert!(
            ours == theirs.files[name],
            "{what}: {name} differs from clang's"
        );
    }
    let err = stderr(o);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("r3: warning:"))
        .collect();
    assert!(warnings.len() <= 1, "{what}: more than one warning:\n{err}");
    let rest: String = err
        .lines()
        .filter(|l| !l.starts_with("r3: warning:"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(masked(&rest), masked(&stderr(t)), "{what}: standard error");
    warnings.first().map(|w| w.to_string())
}

/// A dependency file without the files r3 names in it (the store's winners stamp and the
/// build's `.r3/config`, one continuation line each at the end of the first rule).
fn without_r3_deps(bytes: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = text.clone().into_owned();
    for line in text.lines() {
        let dep = line.trim();
        if dep.ends_with("/winners.stamp") || dep.ends_with("/.r3/config") {
            out = out.replacen(&format!(" \\\n{line}"), "", 1);
        }
    }
    out.into_bytes()
}

fn compile_k() -> Vec<String> {
    let mut a = cuda();
    a.extend(["-c", "k.cu", "-o", "k.o"].map(String::from));
    a
}

/// tmpfs mounted at `at` (root only: CI and these machines run tests as root); elsewhere,
/// why not, in mount's words.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, opts: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if out.status.success() {
            Ok(Tmpfs(at.to_owned()))
        } else {
            Err(format!("mount -t tmpfs: {}", stderr(&out).trim()))
        }
    }

    fn remount_read_only(&self) -> bool {
        Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.0)
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn faults_in_r3s_part_of_a_compile_leave_clangs_build() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    project(d);
    // Stores and fault files live in faults/, out of the way of the files a compile writes.
    let f = d.join("faults");
    std::fs::create_dir_all(&f).unwrap();
    let store = |name: &str| f.join(name).to_string_lossy().into_owned();
    let k = compile_k();
    let mut warned = Vec::new();
    let mut case = |what: &str, env: Vec<(&str, String)>| {
        warned.push((what.to_owned(), same_as_clang(d, what, &k, false, &env)));
    };

    std::fs::write(f.join("a-file"), "").unwrap();
    case("the store is a file", vec![("R3_STORE", store("a-file"))]);
    case(
        "the store is under a file",
        vec![("R3_STORE", store("a-file/store"))],
    );

    std::fs::create_dir_all(f.join("bad-format")).unwrap();
    std::fs::write(f.join("bad-format/format.json"), "{ not json").unwrap();
    case(
        "format.json is damaged",
        vec![("R3_STORE", store("bad-format"))],
    );

    // A stored kernel whose files are damaged, then the same kernel compiled again.
    case(
        "a healthy store, first",
        vec![("R3_STORE", store("damaged"))],
    );
    let kernels = f.join("damaged/kernels");
    let entries = || -> Vec<PathBuf> {
        std::fs::read_dir(&kernels)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    };
    let healthy: Vec<(PathBuf, Vec<u8>)> = entries()
        .into_iter()
        .map(|k| (k.clone(), std::fs::read(k.join("module.bc")).unwrap()))
        .collect();
    for (k, bc) in &healthy {
        std::fs::write(k.join("kernel.json"), "{\"hash\": 7").unwrap();
        std::fs::write(k.join("module.bc"), &bc[..bc.len() / 3]).unwrap();
    }
    case(
        "kernel.json and module.bc damaged",
        vec![("R3_STORE", store("damaged"))],
    );
    // ... and the compile repaired them, leaving nothing else behind.
    assert_eq!(entries().len(), healthy.len());
    for (k, bc) in &healthy {
        assert_eq!(&std::fs::read(k.join("module.bc")).unwrap(), bc);
    }
    let repaired = r3::store::Store::open(&f.join("damaged")).unwrap();
    assert_eq!(repaired.kernels().unwrap().len(), healthy.len());

    case(
        "the capture child crashes",
        vec![
            ("R3_STORE", store("s1")),
            ("R3_TEST_CRASH_CAPTURE", "1".into()),
        ],
    );
    case(
        "the plugin is missing",
        vec![
            ("R3_STORE", store("s2")),
            ("R3_CAPTURE_PLUGIN", store("no/such/r3capture.so")),
        ],
    );
    case(
        "R3_CLANG points nowhere",
        vec![
            ("R3_STORE", store("s3")),
            ("R3_CLANG", "/no/such/clang".into()),
        ],
    );

    let full = Tmpfs::mount(&f.join("full"), "size=64k");
    if let Ok(t) = &full {
        // A store, then a disk with no room left for a module.
        r3::store::Store::create(&t.0.join("store")).unwrap();
        let mut filler = std::fs::File::create(t.0.join("filler")).unwrap();
        while std::io::Write::write_all(&mut filler, &[0u8; 4096]).is_ok() {}
        drop(filler);
        case("a full disk", vec![("R3_STORE", store("full/store"))]);
        let s = r3::store::Store::open(&t.0.join("store")).unwrap();
        assert!(s.kernels().unwrap().is_empty(), "no half-written entry");
    }
    let ro = Tmpfs::mount(&f.join("ro"), "size=8m");
    if let Ok(t) = &ro {
        std::fs::create_dir_all(t.0.join("store")).unwrap();
        assert!(t.remount_read_only());
        case("a read-only store", vec![("R3_STORE", store("ro/store"))]);
    }
    // Not silently: where this machine cannot mount, the cases that need it say so.
    for (what, mounted) in [("a full disk", &full), ("a read-only store", &ro)] {
        if let Err(why) = mounted {
            skip("tmpfs-mount", &format!("{what} not tried: {why}"));
        }
    }
    drop((full, ro));

    for (what, w) in &warned {
        eprintln!("{what}: {}", w.as_deref().unwrap_or("(no warning)"));
    }
    let expect_warning = [
        "the store is a file",
        "the store is under a file",
        "format.json is damaged",
        "the capture child crashes",
        "R3_CLANG points nowhere",
        "a full disk",
        "a read-only store",
    ];
    for (what, w) in &warned {
        if expect_warning.contains(&what.as_str()) {
            assert!(w.is_some(), "{what}: r3 said nothing of what it skipped");
        }
    }
}

#[test]
fn clangs_own_modes_are_clangs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    project(d);
    let env = vec![("R3_STORE", d.join("store").to_string_lossy().into_owned())];
    let with = |extra: &[&str]| -> Vec<String> {
        cuda()
            .into_iter()
            .chain(extra.iter().map(|s| s.to_string()))
            .collect()
    };
    let plain = |extra: &[&str]| -> Vec<String> { extra.iter().map(|s| s.to_string()).collect() };
    std::fs::write(
        d.join("args.rsp"),
        with(&["-c", "k.cu", "-o", "rsp.o"]).join("\n"),
    )
    .unwrap();
    let cases: Vec<(&str, Vec<String>, bool)> = vec![
        ("-E", with(&["-E", "k.cu"]), false),
        ("-M", with(&["-M", "k.cu"]), false),
        (
            "-MD -c",
            with(&["-MD", "-MF", "k.d", "-c", "k.cu", "-o", "k.o"]),
            false,
        ),
        (
            "-S (host assembly)",
            with(&["-S", "k.cu", "-o", "k.s"]),
            false,
        ),
        (
            "-S --cuda-device-only",
            with(&["-S", "--cuda-device-only", "k.cu", "-o", "k.ptx"]),
            false,
        ),
        ("-c", with(&["-c", "k.cu", "-o", "k.o"]), false),
        ("-###", with(&["-###", "-c", "k.cu", "-o", "k.o"]), false),
        ("--version", plain(&["--version"]), false),
        (
            "C++ file",
            plain(&["-O2", "-c", "plain.cpp", "-o", "p.o"]),
            false,
        ),
        (
            "C file with r3-clang",
            plain(&["-O2", "-c", "plain.c", "-o", "c.o"]),
            true,
        ),
        ("@file", plain(&["@args.rsp"]), false),
        (
            "a compile error",
            with(&["-c", "missing.cu", "-o", "m.o"]),
            false,
        ),
    ];
    for (what, args, c) in &cases {
        let w = same_as_clang(d, what, args, *c, &env);
        assert!(w.is_none(), "{what}: {w:?}");
    }
    // The CUDA compiles were captured all the same (through the response file too).
    let kernels = r3::store::Store::open(&d.join("store"))
        .unwrap()
        .kernels()
        .unwrap();
    assert_eq!(kernels.len(), 1, "one kernel, stored once");
}
