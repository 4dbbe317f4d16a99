//! `r3-nvcc` (issue 60): nvcc's command line compiled by clang through r3-clang++. Each flag's
//! translation is checked against what clang makes of it (`clang -###`: the device and host
//! compiles, ptxas); an unknown flag runs the real nvcc with its exit status; nvcc command lines
//! from public projects (tests/it/fixtures/nvcc-lines.toml) end as they end with nvcc; and
//! llvm-ir-corpus/apps/nvcc_app, written for nvcc, builds by CMake (Ninja and Make) and by its
//! Makefile with r3-nvcc, its kernels stored at -O3.

use crate::support::*;
use r3::driver::nvcc::{self, Context, Fallback, Plan};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `r3-nvcc`, `r3-clang++` and `r3-clang` links in `dir/bin` to a private link of the r3 under
/// test (`dir/bin/r3`): a build of the shared target directory that replaces target/release/r3
/// while a test builds must not take the running r3's own executable away from it.
fn nvcc_links(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let r3 = bin.join("r3");
    if !r3.exists() && std::fs::hard_link(r3_bin(), &r3).is_err() {
        std::fs::copy(r3_bin(), &r3).unwrap();
    }
    for name in ["r3-nvcc", "r3-clang++", "r3-clang"] {
        let link = bin.join(name);
        if !link.exists() {
            std::os::unix::fs::symlink("r3", &link).unwrap();
        }
    }
    bin
}

/// The real nvcc (the SDK's, which scripts/setup installs and CI requires: `cuda-sdk`), or
/// None with the skip said.
fn real_nvcc(test: &str) -> Option<PathBuf> {
    match nvcc::real_nvcc() {
        Ok(n) => Some(n),
        Err(e) => {
            skip("cuda-sdk", &format!("{test}: the real nvcc: {e}"));
            None
        }
    }
}

fn sdk() -> PathBuf {
    r3::toolchain::find_cuda(None).unwrap().path
}

fn ctx() -> Context {
    Context {
        sdk: Some(sdk()),
        default_arch: "sm_75".into(),
        native: Vec::new(),
    }
}

fn words(s: &str) -> Vec<OsString> {
    s.split_whitespace().map(OsString::from).collect()
}

/// The jobs clang runs for a translated command, by kind.
#[derive(Debug, Default)]
struct Jobs {
    device: Vec<Vec<String>>,
    host: Vec<Vec<String>>,
    ptxas: Vec<Vec<String>>,
    link: Vec<Vec<String>>,
    /// clang's own messages (warnings about arguments it did not use, errors).
    diagnostics: String,
}

impl Jobs {
    fn device_has(&self, flag: &str) -> bool {
        !self.device.is_empty() && self.device.iter().all(|j| j.iter().any(|a| a == flag))
    }
    fn host_has(&self, flag: &str) -> bool {
        !self.host.is_empty() && self.host.iter().all(|j| j.iter().any(|a| a == flag))
    }
    fn ptxas_has(&self, flag: &str) -> bool {
        !self.ptxas.is_empty() && self.ptxas.iter().all(|j| j.iter().any(|a| a == flag))
    }
    fn nowhere(&self, flag: &str) -> bool {
        self.device
            .iter()
            .chain(&self.host)
            .chain(&self.ptxas)
            .all(|j| !j.iter().any(|a| a == flag))
    }
    fn archs(&self) -> Vec<String> {
        self.device
            .iter()
            .filter_map(|j| {
                let i = j.iter().position(|a| a == "-target-cpu")?;
                j.get(i + 1).cloned()
            })
            .collect()
    }
    fn opt(job: &[String]) -> String {
        job.iter()
            .find(|a| a.starts_with("-O") && a.len() == 3)
            .cloned()
            .unwrap_or_else(|| "-O0".into())
    }
}

/// A scratch directory with the inputs the table's commands name.
fn inputs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("k.cu"), SAXPY).unwrap();
    std::fs::write(d.join("h.cpp"), "int twice(int x) { return 2 * x; }\n").unwrap();
    std::fs::write(d.join("c.c"), "int thrice(int x) { return 3 * x; }\n").unwrap();
    std::fs::write(d.join("a.o"), "").unwrap();
    std::fs::write(d.join("b.o"), "").unwrap();
    dir
}

/// What clang does with r3-nvcc's translation of `nvcc` (the command, words split on spaces):
/// the translation, and the jobs of `clang -###`.
fn through_clang(nvcc_line: &[OsString], ctx: &Context, dir: &Path) -> (nvcc::Translation, Jobs) {
    let t = match nvcc::translate(nvcc_line, ctx) {
        Plan::Clang(t) => t,
        other => panic!("{nvcc_line:?} is not translated: {other:?}"),
    };
    let clang = r3::toolchain::find_clang(true).unwrap().path;
    let out = Command::new(clang)
        .arg("-###")
        .args(&t.clang_args)
        // What r3-clang++ adds for r3's own SDK, which clang 22 does not know by version.
        .arg("-Wno-unknown-cuda-version")
        .current_dir(dir)
        .output()
        .unwrap();
    let text = stderr(&out);
    assert!(
        out.status.success(),
        "{nvcc_line:?} -> {:?}\n{text}",
        t.clang_args
    );
    let mut jobs = Jobs::default();
    for job in r3::driver::args::parse_jobs(&text) {
        let tool = Path::new(&job[0])
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if job.get(1).is_some_and(|a| a == "-cc1") {
            if job.iter().any(|a| a == "-fcuda-is-device") {
                jobs.device.push(job);
            } else {
                jobs.host.push(job);
            }
        } else if tool == "ptxas" {
            jobs.ptxas.push(job);
        } else if tool == "ld" || tool.starts_with("clang-linker-wrapper") {
            jobs.link.push(job);
        }
    }
    jobs.diagnostics = text
        .lines()
        .filter(|l| l.contains("warning:") || l.contains("error:"))
        .collect::<Vec<_>>()
        .join("\n");
    (t, jobs)
}

/// Translates `line` and asks clang, which must take every argument without a word.
fn case(line: &str, dir: &Path) -> (nvcc::Translation, Jobs) {
    let (t, jobs) = through_clang(&words(line), &ctx(), dir);
    assert!(
        jobs.diagnostics.is_empty(),
        "{line} -> {:?}: clang said:\n{}",
        t.clang_args,
        jobs.diagnostics
    );
    (t, jobs)
}

fn dropped(t: &nvcc::Translation) -> Vec<String> {
    t.dropped.iter().map(|d| d.flag.clone()).collect()
}

#[test]
fn architectures_in_every_spelling_become_clangs_device_compiles() {
    let dir = inputs();
    let d = dir.path();
    for (line, want) in [
        ("-arch=sm_90 -c k.cu", vec!["sm_90"]),
        ("-arch sm_80 -c k.cu", vec!["sm_80"]),
        ("--gpu-architecture=sm_86 -c k.cu", vec!["sm_86"]),
        ("--gpu-architecture sm_89 -c k.cu", vec!["sm_89"]),
        ("-arch=compute_90 -c k.cu", vec!["sm_90"]),
        ("-arch=compute_80 -code=sm_80,sm_86 -c k.cu", vec!["sm_80", "sm_86"]),
        ("--gpu-architecture=compute_90 --gpu-code=sm_90,compute_90 -c k.cu", vec!["sm_90"]),
        (
            "-gencode arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=[compute_90,sm_90] -c k.cu",
            vec!["sm_80", "sm_90"],
        ),
        ("--generate-code=arch=compute_75,code=sm_75 -c k.cu", vec!["sm_75"]),
        ("--generate-code arch=compute_90,code=\"sm_90,compute_90\" -c k.cu", vec!["sm_90"]),
        ("-arch=sm_90a -c k.cu", vec!["sm_90a"]),
        // None named: nvcc's default (sm_75 from CUDA 13).
        ("-c k.cu", vec!["sm_75"]),
    ] {
        let (_, jobs) = case(line, d);
        assert_eq!(jobs.archs(), want, "{line}");
    }
    // -arch=native: this machine's GPUs; without one, nvcc's default, as nvcc does (it warns).
    let with_gpu = Context {
        native: vec!["sm_89".into()],
        ..ctx()
    };
    let (t, jobs) = through_clang(&words("-arch=native -c k.cu"), &with_gpu, d);
    assert_eq!(jobs.archs(), ["sm_89"]);
    assert!(t.notes.is_empty());
    let (t, jobs) = through_clang(&words("-arch=native -c k.cu"), &ctx(), d);
    assert_eq!(jobs.archs(), ["sm_75"]);
    assert!(t.notes[0].contains("no GPU"), "{:?}", t.notes);
    // -arch=all and all-major: the real nvcc (r3-nvcc would need the SDK's list).
    assert!(matches!(
        nvcc::translate(&words("-arch=all-major -c k.cu"), &ctx()),
        Plan::Nvcc(Fallback::Unsupported { .. })
    ));
}

#[test]
fn optimization_is_the_hosts_and_device_code_is_optimized_as_nvcc_does() {
    let dir = inputs();
    let d = dir.path();
    for (line, host, device) in [
        ("-arch=sm_90 -c k.cu", "-O0", "-O3"),
        ("-arch=sm_90 -O0 -c k.cu", "-O0", "-O3"),
        ("-arch=sm_90 -O2 -c k.cu", "-O2", "-O3"),
        ("-arch=sm_90 -O3 -c k.cu", "-O3", "-O3"),
        ("-arch=sm_90 --optimize=1 -c k.cu", "-O1", "-O3"),
        ("-arch=sm_90 --optimize 2 -c k.cu", "-O2", "-O3"),
        ("-arch=sm_90 -Xcompiler -O3 -c k.cu", "-O3", "-O3"),
        // -G: device code unoptimized, with full debug information.
        ("-arch=sm_90 -O3 -G -c k.cu", "-O3", "-O0"),
    ] {
        let (_, jobs) = case(line, d);
        assert_eq!(Jobs::opt(&jobs.host[0]), host, "host of {line}");
        assert_eq!(Jobs::opt(&jobs.device[0]), device, "device of {line}");
        let ptxas = &jobs.ptxas[0];
        if device == "-O3" {
            assert!(ptxas.iter().any(|a| a == "-O3"), "{line}: {ptxas:?}");
        } else {
            assert!(ptxas.iter().any(|a| a == "-g"), "{line}: {ptxas:?}");
        }
    }
    // A host C++ source: plain -O, no device flags.
    let (t, jobs) = case("-O2 -c h.cpp", d);
    assert_eq!(Jobs::opt(&jobs.host[0]), "-O2");
    assert!(jobs.device.is_empty() && jobs.ptxas.is_empty());
    assert!(!t.clang_args.iter().any(|a| a == "-Xarch_device"));
}

#[test]
fn debug_line_info_and_fast_math_go_where_nvcc_sends_them() {
    let dir = inputs();
    let d = dir.path();
    // -g: the host's debug information only.
    let (_, jobs) = case("-arch=sm_90 -g -c k.cu", d);
    assert!(jobs.host[0]
        .iter()
        .any(|a| a.starts_with("-debug-info-kind=")));
    assert!(!jobs.device[0]
        .iter()
        .any(|a| a.starts_with("-debug-info-kind=")));
    // -lineinfo: line tables in the device code, which stays optimized.
    let (_, jobs) = case("-arch=sm_90 -lineinfo -c k.cu", d);
    assert!(jobs.device_has("-debug-info-kind=line-directives-only"));
    assert!(jobs.ptxas_has("-lineinfo") && jobs.ptxas_has("-O3"));
    assert!(!jobs.host[0]
        .iter()
        .any(|a| a.starts_with("-debug-info-kind=")));
    let (_, jobs) = case("-arch=sm_90 --generate-line-info -c k.cu", d);
    assert!(jobs.ptxas_has("-lineinfo"));
    // -G: full device debug information.
    let (_, jobs) = case("-arch=sm_90 --device-debug -c k.cu", d);
    assert!(jobs.device_has("-debug-info-kind=constructor"));
    // -use_fast_math: approximate math and denormals flushed, on the device only.
    for spelling in ["-use_fast_math", "--use_fast_math"] {
        let (_, jobs) = case(&format!("-arch=sm_90 {spelling} -c k.cu"), d);
        assert!(jobs.device_has("-ffast-math"), "{spelling}");
        assert!(jobs.device_has("-fgpu-approx-transcendentals"));
        assert!(jobs.device_has("-fdenormal-fp-math-f32=preserve-sign,preserve-sign"));
        assert!(!jobs.host_has("-ffast-math"));
    }
    let (_, jobs) = case("-arch=sm_90 -ftz=true -c k.cu", d);
    assert!(jobs.device_has("-fdenormal-fp-math-f32=preserve-sign,preserve-sign"));
    assert!(!jobs.device_has("-ffast-math"));
    let (_, jobs) = case("-arch=sm_90 --fmad=false -c k.cu", d);
    assert!(jobs.device_has("-ffp-contract=off"));
    let (t, _) = case("-arch=sm_90 -prec-div=false -prec-sqrt=true -c k.cu", d);
    assert_eq!(dropped(&t), ["-prec-div=false"]);
}

#[test]
fn host_compiler_options_reach_the_host_compile_only() {
    let dir = inputs();
    let d = dir.path();
    for line in [
        "-arch=sm_90 -Xcompiler -Wall,-fno-strict-aliasing -c k.cu",
        "-arch=sm_90 -Xcompiler=-Wall -Xcompiler=-fno-strict-aliasing -c k.cu",
        "-arch=sm_90 --compiler-options -Wall --compiler-options=-fno-strict-aliasing -c k.cu",
        // With -forward-unknown-to-host-compiler, GCC-style options go to the host compiler.
        "-forward-unknown-to-host-compiler -arch=sm_90 -Wall -fno-strict-aliasing -c k.cu",
        "-arch=sm_90 -Wall --forward-unknown-to-host-compiler -fno-strict-aliasing -c k.cu",
    ] {
        let (_, jobs) = case(line, d);
        assert!(jobs.host_has("-Wall"), "{line}");
        assert!(jobs.host_has("-relaxed-aliasing"), "{line}");
        assert!(!jobs.device_has("-Wall"), "{line}");
    }
    // -Xcompiler -fPIC: a position-independent host object.
    let (_, jobs) = case("-arch=sm_90 -Xcompiler -fPIC -c k.cu", d);
    let pic = |j: &Vec<String>| j.windows(2).any(|w| w[0] == "-pic-level" && w[1] == "2");
    assert!(pic(&jobs.host[0]));
    // Without forwarding, an option nvcc does not know is nvcc's to refuse.
    assert_eq!(
        nvcc::translate(&words("-arch=sm_90 -Wall -c k.cu"), &ctx()),
        Plan::Nvcc(Fallback::UnknownFlag("-Wall".into()))
    );
    // Forwarding does not take what may be an nvcc option r3-nvcc does not know.
    assert_eq!(
        nvcc::translate(
            &words("-forward-unknown-to-host-compiler --frobnicate -c k.cu"),
            &ctx()
        ),
        Plan::Nvcc(Fallback::UnknownFlag("--frobnicate".into()))
    );
}

#[test]
fn ptxas_options_and_register_limits_reach_ptxas() {
    let dir = inputs();
    let d = dir.path();
    for (line, want) in [
        (
            "-arch=sm_90 -Xptxas -v,-dlcm=ca -c k.cu",
            vec!["-v", "-dlcm=ca"],
        ),
        ("-arch=sm_90 -Xptxas=-v -c k.cu", vec!["-v"]),
        ("-arch=sm_90 --ptxas-options=-v -c k.cu", vec!["-v"]),
        (
            "-arch=sm_90 -maxrregcount=32 -c k.cu",
            vec!["--maxrregcount=32"],
        ),
        (
            "-arch=sm_90 -maxrregcount 32 -c k.cu",
            vec!["--maxrregcount=32"],
        ),
        (
            "-arch=sm_90 --maxrregcount=64 -c k.cu",
            vec!["--maxrregcount=64"],
        ),
        ("-arch=sm_90 -res-usage -c k.cu", vec!["-v"]),
        ("-arch=sm_90 --resource-usage -c k.cu", vec!["-v"]),
    ] {
        let (_, jobs) = case(line, d);
        for w in want {
            assert!(jobs.ptxas_has(w), "{line}: {:?}", jobs.ptxas);
        }
    }
}

#[test]
fn language_standard_and_nvccs_language_switches() {
    let dir = inputs();
    let d = dir.path();
    for line in [
        "-arch=sm_90 -std=c++14 -c k.cu",
        "-arch=sm_90 --std c++14 -c k.cu",
    ] {
        let (_, jobs) = case(line, d);
        assert!(
            jobs.host_has("-std=c++14") && jobs.device_has("-std=c++14"),
            "{line}"
        );
    }
    // What clang does anyway: dropped without a note.
    let (t, _) = case(
        "-arch=sm_90 --expt-relaxed-constexpr --extended-lambda --expt-extended-lambda -expt-relaxed-constexpr -Wno-deprecated-gpu-targets -allow-unsupported-compiler -c k.cu",
        d,
    );
    assert!(t.dropped.is_empty(), "{:?}", t.dropped);
    let (_, jobs) = case("-arch=sm_90 -default-stream per-thread -c k.cu", d);
    assert!(
        jobs.host_has("-fgpu-default-stream=per-thread")
            && jobs.device_has("-fgpu-default-stream=per-thread")
    );
    let (_, jobs) = case("-arch=sm_90 -noeh -c k.cu", d);
    assert!(!jobs.host_has("-fcxx-exceptions"));
}

#[test]
fn flags_without_a_clang_equivalent_are_dropped_and_named() {
    let dir = inputs();
    let d = dir.path();
    let (t, jobs) = case(
        "-arch=sm_90 -restrict -keep -keep-dir tmp --threads 4 -t 2 -ccbin /usr/bin/g++ -Xcudafe --diag_suppress=177 -dopt=on -Werror all-warnings -c k.cu",
        d,
    );
    assert_eq!(
        dropped(&t),
        [
            "-restrict",
            "-keep",
            "-keep-dir tmp",
            "--threads 4",
            "-t 2",
            "-ccbin /usr/bin/g++",
            "-Xcudafe --diag_suppress=177",
            "-dopt=on",
            "-Werror all-warnings"
        ]
    );
    for gone in ["-restrict", "-keep", "tmp", "4", "/usr/bin/g++"] {
        assert!(jobs.nowhere(gone), "{gone}");
    }
    assert!(t.dropped.iter().all(|d| !d.reason.is_empty()));
}

#[test]
fn inputs_compile_in_the_language_nvcc_gives_them() {
    let dir = inputs();
    let d = dir.path();
    // .cpp: host C++, with the SDK's headers as nvcc gives them.
    let (t, jobs) = case("-O3 -c h.cpp", d);
    assert!(jobs.device.is_empty() && jobs.host_has("c++"));
    let sdk_include = format!("-idirafter{}", sdk().join("include").display());
    assert!(
        t.clang_args.iter().any(|a| *a == *sdk_include),
        "{:?}",
        t.clang_args
    );
    // -x cu: CUDA whatever the suffix, wherever -x stands.
    for line in [
        "-arch=sm_90 -x cu -c h.cpp",
        "-arch=sm_90 -c h.cpp -x cu",
        "-arch=sm_90 --x=cu -c h.cpp",
    ] {
        let (_, jobs) = case(line, d);
        assert_eq!(jobs.archs(), ["sm_90"], "{line}");
    }
    // .c: C.
    let (_, jobs) = case("-c c.c", d);
    assert!(jobs.host_has("c") && jobs.device.is_empty());
    // Includes, macros, the output, dependency files.
    let (t, jobs) = case(
        "-arch=sm_90 -Iinc -I inc2 --include-path=inc3 -isystem=sys -DA=1 -D B --define-macro=C -UD -MD -MF k.d -MT k.o -c k.cu -o k.o",
        d,
    );
    for f in ["-DA=1", "-DB", "-DC", "-UD"] {
        assert!(
            t.clang_args.iter().any(|a| a == f),
            "{f}: {:?}",
            t.clang_args
        );
    }
    assert!(
        jobs.host_has("inc")
            && jobs.host_has("inc2")
            && jobs.host_has("inc3")
            && jobs.host_has("sys")
    );
    assert!(jobs.host_has("-dependency-file") && jobs.host_has("k.d"));
    let (_, jobs) = case("-arch=sm_90 -M k.cu", d);
    assert!(jobs
        .host
        .iter()
        .any(|j| j.iter().any(|a| a == "-sys-header-deps")));
    // -E: the host side, as nvcc prints it.
    let (_, jobs) = case("-arch=sm_90 -E k.cu", d);
    assert!(jobs.device.is_empty() && jobs.host_has("-E"));
    // An input r3-nvcc cannot compile: the real nvcc.
    assert_eq!(
        nvcc::translate(&words("-arch=sm_90 -c k.ptx"), &ctx()),
        Plan::Nvcc(Fallback::UnknownInput("k.ptx".into()))
    );
}

#[test]
fn links_get_cudart_and_the_sdk_as_nvcc_links() {
    let dir = inputs();
    let d = dir.path();
    let (t, jobs) = case(
        "-arch=sm_90 a.o b.o -o app -L/opt/lib -lfoo -Xlinker -rpath,/opt/lib",
        d,
    );
    let args: Vec<String> = t
        .clang_args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let at = |f: &str| {
        args.iter()
            .position(|a| a == f)
            .unwrap_or_else(|| panic!("{f}: {args:?}"))
    };
    assert!(at("b.o") < at("-lfoo") && at("-lfoo") < at("-lcudart_static"));
    assert!(args.contains(&format!("-L{}", sdk().join("lib64").display())));
    assert!(args.contains(&"--offload-link".to_owned()));
    let ld = jobs.link.concat();
    for f in ["-rpath", "/opt/lib", "-lcudart_static", "-lfoo"] {
        assert!(ld.iter().any(|a| a == f), "{f}: {ld:?}");
    }
    let (t, _) = case("-cudart shared a.o -o app", d);
    assert!(t.clang_args.iter().any(|a| a == "-lcudart"));
    let (t, _) = case("--cudart=none a.o -o app", d);
    assert!(!t
        .clang_args
        .iter()
        .any(|a| a.to_string_lossy().starts_with("-lcudart")));
    // A compile with -c links nothing: libraries are left out, as nvcc ignores them.
    let (t, _) = case("-arch=sm_90 -c k.cu -lfoo -Xlinker -z", d);
    assert!(!t.clang_args.iter().any(|a| a == "-lfoo" || a == "-Xlinker"));
    // -shared with -Xcompiler -fPIC: a shared library of position-independent code.
    let (_, jobs) = case("-arch=sm_90 -shared -Xcompiler -fPIC k.cu -o libk.so", d);
    assert!(jobs.link.concat().iter().any(|a| a == "-shared"));
}

#[test]
fn relocatable_device_code_and_the_device_link() {
    let dir = inputs();
    let d = dir.path();
    for line in [
        "-arch=sm_90 -rdc=true -c k.cu",
        "-arch=sm_90 -dc k.cu",
        "-arch=sm_90 --relocatable-device-code true -c k.cu",
        "-arch=sm_90 --device-c k.cu",
    ] {
        let (_, jobs) = case(line, d);
        assert!(
            jobs.host_has("-fgpu-rdc") && jobs.device_has("-fgpu-rdc"),
            "{line}"
        );
        assert!(jobs.host_has("-emit-obj"), "{line}");
    }
    let (t, _) = case("-arch=sm_90 -rdc=true k.cu -o app", d);
    assert!(t.clang_args.iter().any(|a| a == "-Xoffload-linker"));
    match nvcc::translate(
        &words("-arch=sm_90 -Xcompiler -fPIC -dlink a.o b.o -o dl.o"),
        &ctx(),
    ) {
        Plan::DeviceLink(dl) => {
            assert_eq!(dl.inputs, words("a.o b.o"));
            assert_eq!(dl.output, PathBuf::from("dl.o"));
        }
        other => panic!("{other:?}"),
    }
    match nvcc::translate(&words("--device-link a.o"), &ctx()) {
        Plan::DeviceLink(dl) => assert_eq!(dl.output, PathBuf::from("a_dlink.o")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn questions_and_what_r3_nvcc_does_not_do_go_to_the_real_nvcc() {
    for line in [
        "--version",
        "-V",
        "--help",
        "--list-gpu-arch",
        "-v __cmake_determine_cuda",
        "-v --keep --keep-dir tmp CMakeCUDACompilerId.cu",
        "-v CMakeFiles/CMakeScratch/TryCompile-x/CMakeCUDACompilerABI.cu -c",
    ] {
        assert_eq!(
            nvcc::translate(&words(line), &ctx()),
            Plan::Nvcc(Fallback::Ask),
            "{line}"
        );
    }
    for line in [
        "-ptx k.cu",
        "-cubin k.cu",
        "--fatbin k.cu",
        "-lib k.cu",
        "-dryrun k.cu",
        "-odir x k.cu",
    ] {
        assert!(
            matches!(
                nvcc::translate(&words(line), &ctx()),
                Plan::Nvcc(Fallback::Unsupported { .. })
            ),
            "{line}"
        );
    }
    assert_eq!(
        nvcc::translate(&words("--frobnicate -c k.cu"), &ctx()),
        Plan::Nvcc(Fallback::UnknownFlag("--frobnicate".into()))
    );
}

#[test]
fn response_and_options_files_are_read_before_translating() {
    let Some(_) = real_nvcc("response_and_options_files_are_read_before_translating") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bin = nvcc_links(d);
    std::fs::write(d.join("k.cu"), SAXPY).unwrap();
    std::fs::create_dir(d.join("inc")).unwrap();
    std::fs::write(d.join("inc/answer.h"), "#define ANSWER 42\n").unwrap();
    std::fs::write(
        d.join("k2.cu"),
        format!("#include \"answer.h\"\nstatic_assert(ANSWER == 42, \"\");\n{SAXPY}"),
    )
    .unwrap();
    std::fs::write(d.join("flags.rsp"), "-arch=sm_90 -O3\n").unwrap();
    std::fs::write(d.join("includes.rsp"), "-Iinc\n").unwrap();
    let out = Command::new(bin.join("r3-nvcc"))
        .args([
            "@flags.rsp",
            "--options-file",
            "includes.rsp",
            "-c",
            "k2.cu",
            "-o",
            "k2.o",
        ])
        .current_dir(d)
        .env("R3_STORE", d.join("store"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("r3: note"), "{}", stderr(&out));
    let kernels = r3::store::Store::open(&d.join("store"))
        .unwrap()
        .kernels()
        .unwrap();
    assert_eq!(kernels.len(), 1);
}

#[test]
fn an_unknown_flag_runs_the_real_nvcc_and_keeps_its_exit_status() {
    let Some(nvcc_path) = real_nvcc("an_unknown_flag_runs_the_real_nvcc_and_keeps_its_exit_status")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bin = nvcc_links(d);
    std::fs::write(d.join("k.cu"), SAXPY).unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| -> Output {
        let mut c = Command::new(bin.join("r3-nvcc"));
        c.args(args).current_dir(d).env("R3_STORE", d.join("store"));
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let real = |args: &[&str]| {
        Command::new(&nvcc_path)
            .args(args)
            .current_dir(d)
            .output()
            .unwrap()
    };
    // nvcc refuses the flag: the same status, nvcc's message, one note of r3's.
    let ours = run(&["--frobnicate", "-arch=sm_90", "-c", "k.cu"], &[]);
    let theirs = real(&["--frobnicate", "-arch=sm_90", "-c", "k.cu"]);
    assert_eq!(ours.status.code(), theirs.status.code());
    assert!(!ours.status.success());
    let e = stderr(&ours);
    assert_eq!(e.matches("r3: note:").count(), 1, "{e}");
    assert!(
        e.contains("'--frobnicate' is unknown to r3-nvcc") && e.contains(&stderr(&theirs)),
        "{e}"
    );
    // What nvcc does and r3-nvcc does not: nvcc's output, nothing captured.
    let ours = run(&["-arch=sm_90", "-ptx", "k.cu", "-o", "k.ptx"], &[]);
    assert!(ours.status.success(), "{}", stderr(&ours));
    assert!(std::fs::read_to_string(d.join("k.ptx"))
        .unwrap()
        .contains(".entry"));
    assert!(!d.join("store").exists());
    // --version answers as nvcc (CMake reads it), without a note.
    let ours = run(&["--version"], &[]);
    assert_eq!(stdout(&ours), stdout(&real(&["--version"])));
    assert!(stderr(&ours).is_empty());
    // R3_NVCC names the nvcc; a wrong one is an error that says so, never a guess.
    let ours = run(
        &["--frobnicate", "-c", "k.cu"],
        &[("R3_NVCC", "/nonexistent/nvcc")],
    );
    assert_eq!(ours.status.code(), Some(1));
    assert!(
        stderr(&ours).contains("R3_NVCC=/nonexistent/nvcc"),
        "{}",
        stderr(&ours)
    );
}

#[test]
fn what_clang_cannot_compile_nvcc_compiles_and_a_real_error_is_nvccs() {
    let Some(nvcc_path) =
        real_nvcc("what_clang_cannot_compile_nvcc_compiles_and_a_real_error_is_nvccs")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bin = nvcc_links(d);
    // Code written for nvcc alone: clang fails where nvcc succeeds, and the build goes on.
    std::fs::write(
        d.join("only.cu"),
        format!("#ifndef __NVCC__\n#error this file is for nvcc\n#endif\n{SAXPY}"),
    )
    .unwrap();
    let out = Command::new(bin.join("r3-nvcc"))
        .args(["-arch=sm_90", "-c", "only.cu", "-o", "only.o"])
        .current_dir(d)
        .env("R3_STORE", d.join("store"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(d.join("only.o").is_file());
    let e = stderr(&out);
    assert!(
        e.contains("r3: warning: clang failed") && e.contains("this file is for nvcc"),
        "{e}"
    );
    // A real error fails with nvcc's status and nvcc's message.
    std::fs::write(d.join("bad.cu"), "__global__ void k() { undeclared(); }\n").unwrap();
    let ours = Command::new(bin.join("r3-nvcc"))
        .args(["-arch=sm_90", "-c", "bad.cu", "-o", "bad.o"])
        .current_dir(d)
        .env("R3_STORE", d.join("store"))
        .output()
        .unwrap();
    let theirs = Command::new(&nvcc_path)
        .args(["-arch=sm_90", "-c", "bad.cu", "-o", "bad.o"])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(ours.status.code(), theirs.status.code());
    assert!(!ours.status.success());
    assert_eq!(stderr(&ours), stderr(&theirs));
}

/// Writes the sources the nvcc lines compile.
fn line_sources(d: &Path) {
    std::fs::create_dir_all(d.join("out")).unwrap();
    std::fs::create_dir_all(d.join("include")).unwrap();
    std::fs::write(
        d.join("kern.cu"),
        "__global__ void scale(float *x, float a, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) x[i] *= a;\n}\nvoid launch_scale(float *x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("app.cu"),
        "#include <cstdio>\n__global__ void fill(int *x, int v) { x[threadIdx.x] = v; }\nint main() {\n  int *d = nullptr;\n  if (cudaMalloc(&d, 4 * sizeof(int)) != cudaSuccess) { std::printf(\"no GPU\\n\"); return 0; }\n  fill<<<1, 4>>>(d, 7);\n  int ok = cudaDeviceSynchronize() == cudaSuccess;\n  cudaFree(d);\n  std::printf(ok ? \"ran\\n\" : \"failed\\n\");\n  return ok ? 0 : 1;\n}\n",
    )
    .unwrap();
    std::fs::write(
        d.join("host.cpp"),
        "#include <cuda_runtime_api.h>\nint device_count() { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0; }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("rdc_a.cu"),
        "#include <cstdio>\n__device__ float twice(float x);\n__global__ void apply(float *x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\nint main() {\n  float *d = nullptr;\n  if (cudaMalloc(&d, 4 * sizeof(float)) != cudaSuccess) { std::printf(\"no GPU\\n\"); return 0; }\n  apply<<<1, 4>>>(d);\n  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;\n}\n",
    )
    .unwrap();
    std::fs::write(
        d.join("rdc_b.cu"),
        "__device__ float twice(float x) { return 2.0f * x; }\n",
    )
    .unwrap();
}

#[derive(Debug, serde::Deserialize)]
struct Lines {
    line: Vec<Line>,
}

#[derive(Debug, serde::Deserialize)]
struct Line {
    project: String,
    file: String,
    r3: String,
    captures: bool,
    status: String,
    steps: Vec<String>,
}

/// Runs a line's steps with `nvcc` in a fresh directory: each step's exit status and the
/// whole error output.
fn run_line(line: &Line, nvcc: &Path, dir: &Path) -> (Vec<i32>, String) {
    line_sources(dir);
    let mut codes = Vec::new();
    let mut text = String::new();
    for step in &line.steps {
        let cmd = step
            .replace("{nvcc}", &nvcc.display().to_string())
            .replace("{sdk}", &sdk().display().to_string());
        let out = Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .current_dir(dir)
            .env("R3_STORE", dir.join("store"))
            .output()
            .unwrap();
        codes.push(out.status.code().unwrap_or(-1));
        text.push_str(&format!("$ {cmd}\n{}{}", stdout(&out), stderr(&out)));
    }
    (codes, text)
}

#[test]
fn nvcc_lines_of_public_projects_end_as_they_end_with_nvcc() {
    let test = "nvcc_lines_of_public_projects_end_as_they_end_with_nvcc";
    let Some(nvcc_path) = real_nvcc(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = nvcc_links(tmp.path());
    let text = std::fs::read_to_string(repo().join("tests/it/fixtures/nvcc-lines.toml")).unwrap();
    let lines: Lines = toml::from_str(&text).unwrap();
    assert!(lines.line.len() >= 12);
    for (i, line) in lines.line.iter().enumerate() {
        let name = format!("{} ({})", line.project, line.file);
        assert!(matches!(line.r3.as_str(), "translated" | "nvcc"), "{name}");
        let theirs_dir = tmp.path().join(format!("{i}-nvcc"));
        let ours_dir = tmp.path().join(format!("{i}-r3"));
        let (theirs, ours) = std::thread::scope(|s| {
            let t = s.spawn(|| run_line(line, &nvcc_path, &theirs_dir));
            let o = run_line(line, &bin.join("r3-nvcc"), &ours_dir);
            (t.join().unwrap(), o)
        });
        assert_eq!(
            ours.0, theirs.0,
            "{name}: r3-nvcc\n{}\nnvcc\n{}",
            ours.1, theirs.1
        );
        let all_ok = theirs.0.iter().all(|c| *c == 0);
        assert_eq!(all_ok, line.status == "ok", "{name}: {}", theirs.1);
        let fell_back = ours.1.contains("the real nvcc");
        match line.r3.as_str() {
            "translated" => assert!(!fell_back, "{name}: {}", ours.1),
            _ => assert!(fell_back, "{name}: {}", ours.1),
        }
        let stored = r3::store::Store::open(&ours_dir.join("store"))
            .and_then(|s| s.kernels())
            .map_or(0, |k| k.len());
        assert_eq!(
            stored > 0,
            line.captures,
            "{name}: {stored} kernels stored\n{}",
            ours.1
        );
    }
}

/// The corpus application written for nvcc.
fn app_dir() -> PathBuf {
    repo().join("llvm-ir-corpus/apps/nvcc_app")
}

/// Checks a store the app's build filled: its three kernels, optimized (-O3 in the stored
/// compile, no optnone in the captured IR).
fn check_app_store(store: &Path, what: &str) {
    let kernels = r3::store::Store::open(store).unwrap().kernels().unwrap();
    let mut names: Vec<&str> = kernels
        .iter()
        .map(|k| k.signature.demangled.as_str())
        .collect();
    names.sort();
    assert_eq!(names.len(), 3, "{what}: {names:?}");
    for want in ["axpby<double>", "axpby<float>", "smooth"] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "{what}: {want} missing from {names:?}"
        );
    }
    for k in &kernels {
        assert!(
            !k.signature.unoptimized,
            "{what}: {} stored unoptimized",
            k.signature.demangled
        );
        let args = &k.compile.args;
        assert!(
            args.windows(2)
                .any(|w| w[0] == "-Xarch_device" && w[1] == "-O3"),
            "{what}: {args:?}"
        );
    }
}

/// The program's lines without their numbers: which kernels ran, and PASS or FAIL.
fn verdicts(out: &Output) -> Vec<String> {
    stdout(out)
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter(|w| !w.starts_with("checksum="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The app built by CMake with `compiler` as CMAKE_CUDA_COMPILER and `generator`.
fn cmake_app(tmp: &Path, compiler: &Path, generator: &str, store: &Path) -> (PathBuf, String) {
    let build = tmp.join(format!(
        "build-{}-{}",
        generator.replace(' ', "-"),
        compiler.file_name().unwrap().to_string_lossy()
    ));
    let configure = Command::new("cmake")
        .arg("-S")
        .arg(app_dir())
        .arg("-B")
        .arg(&build)
        .args(["-G", generator])
        .arg(format!("-DCMAKE_CUDA_COMPILER={}", compiler.display()))
        .env("R3_STORE", store)
        .output()
        .expect("cmake runs (scripts/setup installs it)");
    assert!(
        configure.status.success(),
        "{}\n{}",
        stdout(&configure),
        stderr(&configure)
    );
    let built = Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .env("R3_STORE", store)
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&built), stderr(&built));
    assert!(built.status.success(), "{text}");
    (build, text)
}

fn links_the_recording_runtime(exe: &Path) -> bool {
    let wrapper = b"__wrap_cudaLaunchKernel";
    let bytes = std::fs::read(exe).unwrap();
    bytes.windows(wrapper.len()).any(|w| w == wrapper)
}

#[test]
fn the_nvcc_app_builds_with_r3_nvcc_by_cmake_as_by_nvcc() {
    let test = "the_nvcc_app_builds_with_r3_nvcc_by_cmake_as_by_nvcc";
    let Some(nvcc_path) = real_nvcc(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = nvcc_links(tmp.path());
    let (reference, _) = cmake_app(tmp.path(), &nvcc_path, "Ninja", &tmp.path().join("unused"));
    let expected = verdicts(&Command::new(reference.join("nvcc_app")).output().unwrap());
    for generator in ["Ninja", "Unix Makefiles"] {
        let store = tmp.path().join(format!("store-{generator}"));
        let (build, text) = cmake_app(tmp.path(), &bin.join("r3-nvcc"), generator, &store);
        // CMake took r3-nvcc for nvcc, and links CUDA targets with r3-clang++.
        let compiler = std::fs::read_to_string(
            walk(&build.join("CMakeFiles"))
                .into_iter()
                .find(|p| p.ends_with("CMakeCUDACompiler.cmake"))
                .unwrap(),
        )
        .unwrap();
        assert!(
            compiler.contains("set(CMAKE_CUDA_COMPILER_ID \"NVIDIA\")"),
            "{compiler}"
        );
        assert!(
            compiler.contains(&format!(
                "set(CMAKE_CUDA_HOST_LINK_LAUNCHER \"{}\")",
                bin.join("r3-clang++").display()
            )),
            "{compiler}"
        );
        assert!(
            !compiler.contains("libr3rt"),
            "r3's runtime is no implicit library: {compiler}"
        );
        // The project's -restrict and -keep are named once for the whole build.
        assert_eq!(
            text.matches("r3: note: r3-nvcc compiles with clang")
                .count(),
            1,
            "{generator}: {text}"
        );
        assert!(
            text.contains("-restrict") && !text.contains("r3: warning"),
            "{generator}: {text}"
        );
        check_app_store(&store, generator);
        let exe = build.join("nvcc_app");
        assert!(links_the_recording_runtime(&exe), "{generator}");
        let run = Command::new(&exe).output().unwrap();
        assert!(run.status.success(), "{}", stdout(&run));
        assert_eq!(verdicts(&run), expected, "{generator}");
    }
}

#[test]
fn the_nvcc_app_builds_with_r3_nvcc_by_make_and_applies() {
    let test = "the_nvcc_app_builds_with_r3_nvcc_by_make_and_applies";
    let Some(nvcc_path) = real_nvcc(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let bin = nvcc_links(tmp.path());
    let make = |nvcc: &Path, build: &Path, env: &[(&str, &Path)]| -> String {
        let mut c = Command::new("make");
        c.arg("-C")
            .arg(app_dir())
            .arg(format!("NVCC={}", nvcc.display()))
            .arg(format!("BUILD={}", build.display()));
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().expect("make runs");
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(out.status.success(), "{text}");
        text
    };
    let reference = tmp.path().join("make-nvcc");
    make(&nvcc_path, &reference, &[]);
    let expected = verdicts(&Command::new(reference.join("nvcc_app")).output().unwrap());
    let store = tmp.path().join("store");
    let build = tmp.path().join("make-r3");
    let text = make(&bin.join("r3-nvcc"), &build, &[("R3_STORE", &store)]);
    assert!(
        !text.contains("r3: warning") && !text.contains("the real nvcc"),
        "{text}"
    );
    check_app_store(&store, "make NVCC=r3-nvcc");
    let exe = build.join("nvcc_app");
    assert!(links_the_recording_runtime(&exe));
    assert_eq!(verdicts(&Command::new(&exe).output().unwrap()), expected);
    // Apply: the same build with the store's winners (none yet: the generic code), as a rebuild
    // after tuning runs it.
    let applied = tmp.path().join("make-r3-apply");
    let text = make(
        &bin.join("r3-nvcc"),
        &applied,
        &[("R3_STORE", &store), ("R3_APPLY", Path::new("1"))],
    );
    assert!(!text.contains("r3: warning"), "{text}");
    assert_eq!(
        verdicts(&Command::new(applied.join("nvcc_app")).output().unwrap()),
        expected
    );

    // A Makefile that compiles and links with $(CC) and nvcc's flags in CFLAGS (issue 60's first
    // application): `make CC=r3-nvcc`.
    let proj = tmp.path().join("cc-project");
    std::fs::create_dir(&proj).unwrap();
    for f in ["kernels.cu", "kernels.cuh", "main.cu"] {
        std::fs::copy(app_dir().join(f), proj.join(f)).unwrap();
    }
    std::fs::copy(app_dir().join("reference.cpp"), proj.join("reference.cu")).unwrap();
    std::fs::write(
        proj.join("Makefile"),
        "CC = nvcc\nCFLAGS = -Xcompiler -Wall -Xcompiler -O3 -arch=sm_90 -std=c++14 -O3\nOBJ = main.o kernels.o reference.o\n\napp: $(OBJ)\n\t$(CC) $(CFLAGS) $(OBJ) -o $@\n\n%.o: %.cu kernels.cuh\n\t$(CC) $(CFLAGS) -c $< -o $@\n",
    )
    .unwrap();
    let cc_store = tmp.path().join("cc-store");
    let out = Command::new("make")
        .arg("-C")
        .arg(&proj)
        .arg(format!("CC={}", bin.join("r3-nvcc").display()))
        .env("R3_STORE", &cc_store)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    check_app_store(&cc_store, "make CC=r3-nvcc");
    assert!(links_the_recording_runtime(&proj.join("app")));
}

#[test]
fn a_device_link_on_its_own_registers_the_linked_device_code() {
    let test = "a_device_link_on_its_own_registers_the_linked_device_code";
    let Some(_) = real_nvcc(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bin = nvcc_links(d);
    line_sources(d);
    let r3_nvcc = |args: &[&str]| {
        let out = Command::new(bin.join("r3-nvcc"))
            .args(args)
            .current_dir(d)
            .env("R3_STORE", d.join("store"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    };
    r3_nvcc(&["-arch=sm_90", "-dc", "rdc_a.cu", "-o", "out/a.o"]);
    r3_nvcc(&["-arch=sm_90", "-dc", "rdc_b.cu", "-o", "out/b.o"]);
    r3_nvcc(&[
        "-arch=sm_90",
        "-dlink",
        "out/a.o",
        "out/b.o",
        "-o",
        "out/dlink.o",
    ]);
    let dlink = std::fs::read(d.join("out/dlink.o")).unwrap();
    let register = b"__cudaRegisterFatBinary";
    assert!(dlink.windows(register.len()).any(|w| w == register));
    // The host link takes the objects and the device link's object, as after nvcc -dlink.
    let link = Command::new("g++")
        .args(["out/a.o", "out/b.o", "out/dlink.o", "-o", "out/app"])
        .arg(format!("-L{}", sdk().join("lib64").display()))
        .args(["-lcudart_static", "-ldl", "-lrt", "-lpthread"])
        .current_dir(d)
        .output()
        .unwrap();
    assert!(link.status.success(), "{}", stderr(&link));
    // r3-nvcc links relocatable device code by itself too.
    r3_nvcc(&[
        "-arch=sm_90",
        "-rdc=true",
        "out/a.o",
        "out/b.o",
        "-o",
        "out/app2",
    ]);
    assert!(links_the_recording_runtime(&d.join("out/app2")));
    let run = Command::new(d.join("out/app2")).output().unwrap();
    assert!(run.status.success(), "{}", stdout(&run));
    // The kernel that calls across files was captured.
    let kernels = r3::store::Store::open(&d.join("store"))
        .unwrap()
        .kernels()
        .unwrap();
    assert!(kernels
        .iter()
        .any(|k| k.signature.demangled.contains("apply")));
}

#[test]
fn gpu_nvcc_route_passes_no_row_on_nothing_counted() {
    let out = Command::new(repo().join("scripts/gpu-nvcc-route"))
        .arg("--self-test")
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("gpu-nvcc-route self-test: PASS ("), "{text}");
}
