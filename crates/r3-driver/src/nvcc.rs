//! `r3-nvcc`: nvcc's command line, compiled by clang through `r3-clang++`, so that builds
//! written for nvcc (Makefiles with `NVCC=nvcc`, CMake with nvcc as the CUDA compiler) record
//! and apply without edits.
//!
//! Every command is one of three things:
//! - **translated**: each nvcc flag becomes its clang spelling (the table [`FLAGS`]), and
//!   `r3-clang++` runs the clang command, capture and apply included. A flag with no clang
//!   equivalent is dropped and named in one `r3: note:` per build (per run of the outermost
//!   build tool among r3-nvcc's parents: `cmake --build`, make, ninja, …, else per parent
//!   process; a marker file in the temporary directory says it was said), since a line per
//!   compile would bury the build's own output.
//! - **the real nvcc**: a flag or an input r3-nvcc does not know, or a mode it does not
//!   implement (`-ptx`, `-lib`, …), runs the real nvcc as written, without capture, with one
//!   `r3: note:` line; its exit status is the command's. So are the questions CMake asks
//!   nvcc (`--version`, `-v` without a source, the compiler-identification compile), which get
//!   nvcc's exact answers.
//! - **`-dlink`** (a device link on its own, as CMake's separable compilation runs it): clang
//!   links device code inside the final link, so r3-nvcc writes the object that registers the
//!   linked device code (clang's linker wrapper makes it), for the host link to take.
//!
//! r3 never breaks the build: when clang fails on a translated command and the real nvcc
//! compiles it, nvcc's result stands (with one warning); when both fail, nvcc's diagnostics
//! are shown, as the build was written for it.

use crate::toolchain;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How an nvcc option is written after its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    Nothing,
    /// `-o f`, `-o=f`, `--output-file f`, `--output-file=f` (and `-Idir` for one-letter names).
    Value,
}

/// How a clang flag takes the nvcc option's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    /// No value: the flag alone.
    Alone,
    /// `-Ivalue`.
    Glued,
    /// `-MF value`.
    Separate,
    /// `-ftemplate-depth=value`.
    Equals,
}

/// What r3-nvcc does with an nvcc option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Does {
    /// The same clang flag for host and device code.
    Clang(&'static str, Join),
    /// clang does this anyway: dropped without a note.
    Same,
    /// No clang equivalent: dropped, and named in the build's note with this reason.
    NoEquivalent(&'static str),
    /// r3-nvcc does not implement it: the real nvcc compiles the command (the reason).
    Nvcc(&'static str),
    /// A question about nvcc itself (`--version`, `--help`): the real nvcc answers.
    Ask,
    /// r3-nvcc's own handling (architectures, optimization, host flags, …).
    Own(Own),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Own {
    Arch,
    Code,
    Gencode,
    Optimize,
    Compile,
    DeviceC,
    DeviceLink,
    Rdc,
    Output,
    Lang,
    Std,
    Host,
    Ptxas,
    Linker,
    Forward,
    FastMath,
    Ftz,
    Fmad,
    PrecDivSqrt,
    LineInfo,
    DeviceDebug,
    HostDebug,
    MaxRegs,
    ResourceUsage,
    DefaultStream,
    Cudart,
    Machine,
    Werror,
    Preprocess,
    Deps,
    DepsOnly,
    OptionsFile,
}

/// One nvcc option: its long and short names (without dashes; nvcc takes either with one or
/// two dashes), whether it takes a value, and what r3-nvcc makes of it.
#[derive(Debug, Clone, Copy)]
struct Flag {
    long: &'static str,
    short: &'static str,
    takes: Takes,
    does: Does,
}

const fn flag(long: &'static str, short: &'static str, takes: Takes, does: Does) -> Flag {
    Flag {
        long,
        short,
        takes,
        does,
    }
}

use Does::{Ask, Clang, NoEquivalent as NoEq, Nvcc, Own as O, Same};
use Join::{Alone, Equals, Glued, Separate};
use Takes::{Nothing as N, Value as V};

/// nvcc's options, as nvcc 12/13 spell them (`nvcc --help`), and their clang translation.
#[rustfmt::skip]
const FLAGS: &[Flag] = &[
    // What to do with the inputs.
    flag("compile", "c", N, O(Own::Compile)),
    flag("device-c", "dc", N, O(Own::DeviceC)),
    flag("device-link", "dlink", N, O(Own::DeviceLink)),
    flag("link", "link", N, Same),
    flag("relocatable-device-code", "rdc", V, O(Own::Rdc)),
    flag("preprocess", "E", N, O(Own::Preprocess)),
    flag("generate-dependencies", "M", N, O(Own::DepsOnly)),
    flag("generate-nonsystem-dependencies", "MM", N, O(Own::DepsOnly)),
    flag("generate-dependencies-with-compile", "MD", N, O(Own::Deps)),
    flag("generate-nonsystem-dependencies-with-compile", "MMD", N, O(Own::Deps)),
    flag("dependency-output", "MF", V, Clang("-MF", Separate)),
    flag("dependency-target-name", "MT", V, Clang("-MT", Separate)),
    flag("generate-dependency-targets", "MP", N, Clang("-MP", Alone)),
    flag("output-file", "o", V, O(Own::Output)),
    flag("x", "x", V, O(Own::Lang)),
    flag("options-file", "optf", V, O(Own::OptionsFile)),
    flag("device-w", "dw", N, Nvcc("device-only objects")),
    flag("lib", "lib", N, Nvcc("archives")),
    flag("run", "run", N, Nvcc("running the program")),
    flag("ptx", "ptx", N, Nvcc("PTX output")),
    flag("cubin", "cubin", N, Nvcc("cubin output")),
    flag("fatbin", "fatbin", N, Nvcc("fatbinary output")),
    flag("cuda", "cuda", N, Nvcc("host code output")),
    flag("optix-ir", "optix-ir", N, Nvcc("OptiX IR output")),
    flag("lto-ir", "ltoir", N, Nvcc("LTO IR output")),
    flag("output-directory", "odir", V, Nvcc("an output directory")),
    flag("dryrun", "dryrun", N, Nvcc("printing nvcc's own commands")),
    // Architectures.
    flag("gpu-architecture", "arch", V, O(Own::Arch)),
    flag("gpu-code", "code", V, O(Own::Code)),
    flag("generate-code", "gencode", V, O(Own::Gencode)),
    // Preprocessor, includes, libraries.
    flag("define-macro", "D", V, Clang("-D", Glued)),
    flag("undefine-macro", "U", V, Clang("-U", Glued)),
    flag("include-path", "I", V, Clang("-I", Glued)),
    flag("system-include", "isystem", V, Clang("-isystem", Separate)),
    flag("pre-include", "include", V, Clang("-include", Separate)),
    flag("library-path", "L", V, Clang("-L", Glued)),
    flag("library", "l", V, Clang("-l", Glued)),
    flag("cudart", "cudart", V, O(Own::Cudart)),
    flag("cudadevrt", "cudadevrt", V, NoEq("clang links the device runtime as the link needs it")),
    flag("shared", "shared", N, Clang("-shared", Alone)),
    flag("machine", "m", V, O(Own::Machine)),
    flag("m64", "m64", N, Clang("-m64", Alone)),
    // Language.
    flag("std", "std", V, O(Own::Std)),
    flag("expt-relaxed-constexpr", "expt-relaxed-constexpr", N, Same),
    flag("extended-lambda", "extended-lambda", N, Same),
    flag("expt-extended-lambda", "expt-extended-lambda", N, Same),
    flag("no-exceptions", "noeh", N, Clang("-fno-exceptions", Alone)),
    flag("ftemplate-depth", "ftemplate-depth", V, Clang("-ftemplate-depth", Equals)),
    flag("ftemplate-backtrace-limit", "ftemplate-backtrace-limit", V, Clang("-ftemplate-backtrace-limit", Equals)),
    flag("no-host-device-initializer-list", "nohdinitlist", N, NoEq("clang has no switch for host-device std::initializer_list")),
    flag("no-host-device-move-forward", "nohdmoveforward", N, NoEq("clang has no switch for host-device std::move/forward")),
    flag("default-stream", "default-stream", V, O(Own::DefaultStream)),
    // Optimization and code generation.
    flag("optimize", "O", V, O(Own::Optimize)),
    flag("dopt", "dopt", V, NoEq("clang optimizes device code unless -G")),
    flag("use_fast_math", "use_fast_math", N, O(Own::FastMath)),
    flag("ftz", "ftz", V, O(Own::Ftz)),
    flag("prec-div", "prec-div", V, O(Own::PrecDivSqrt)),
    flag("prec-sqrt", "prec-sqrt", V, O(Own::PrecDivSqrt)),
    flag("fmad", "fmad", V, O(Own::Fmad)),
    flag("restrict", "restrict", N, NoEq("clang does not take kernel pointer parameters as __restrict__")),
    flag("extra-device-vectorization", "extra-device-vectorization", N, NoEq("an nvcc optimizer switch")),
    flag("maxrregcount", "maxrregcount", V, O(Own::MaxRegs)),
    flag("resource-usage", "res-usage", N, O(Own::ResourceUsage)),
    flag("dlink-time-opt", "dlto", N, NoEq("clang's device link does not optimize across files")),
    flag("gen-opt-lto", "gen-opt-lto", N, NoEq("clang's device link does not optimize across files")),
    flag("lto", "lto", N, NoEq("clang's device link does not optimize across files")),
    flag("split-compile", "split-compile", V, NoEq("clang compiles each file in one piece")),
    flag("split-compile-extended", "split-compile-extended", V, NoEq("clang compiles each file in one piece")),
    flag("threads", "t", V, NoEq("clang compiles the architectures one after another")),
    flag("static-global-template-stub", "static-global-template-stub", V, NoEq("an nvcc host-stub switch")),
    flag("device-entity-has-hidden-visibility", "device-entity-has-hidden-visibility", V, NoEq("an nvcc host-stub switch")),
    // Debugging.
    flag("debug", "g", N, O(Own::HostDebug)),
    flag("device-debug", "G", N, O(Own::DeviceDebug)),
    flag("generate-line-info", "lineinfo", N, O(Own::LineInfo)),
    flag("source-in-ptx", "src-in-ptx", N, NoEq("no PTX file is kept")),
    flag("profile", "pg", N, Clang("-pg", Alone)),
    // Passing options on.
    flag("compiler-options", "Xcompiler", V, O(Own::Host)),
    flag("linker-options", "Xlinker", V, O(Own::Linker)),
    flag("ptxas-options", "Xptxas", V, O(Own::Ptxas)),
    flag("forward-unknown-to-host-compiler", "forward-unknown-to-host-compiler", N, O(Own::Forward)),
    flag("forward-unknown-to-host-linker", "forward-unknown-to-host-linker", N, O(Own::Forward)),
    flag("forward-unknown-opts", "forward-unknown-opts", N, O(Own::Forward)),
    flag("nvlink-options", "Xnvlink", V, NoEq("clang's device link runs nvlink with its own options")),
    flag("fatbin-options", "Xfatbin", V, NoEq("clang runs fatbinary with its own options")),
    flag("archive-options", "Xarchive", V, NoEq("no archive is made")),
    flag("cudafe-options", "Xcudafe", V, NoEq("clang has no cudafe front end")),
    flag("Xcicc", "Xcicc", V, NoEq("clang has no cicc")),
    // The host compiler and nvcc's own files.
    flag("compiler-bindir", "ccbin", V, NoEq("clang 22 compiles the host code; -ccbin's compiler is not run")),
    flag("allow-unsupported-compiler", "allow-unsupported-compiler", N, Same),
    flag("archiver-binary", "arbin", V, NoEq("no archive is made")),
    flag("keep", "keep", N, NoEq("clang keeps no nvcc intermediate files")),
    flag("keep-dir", "keep-dir", V, NoEq("clang keeps no nvcc intermediate files")),
    flag("save-temps", "save-temps", N, NoEq("clang keeps no nvcc intermediate files")),
    flag("clean-targets", "clean", N, Nvcc("cleaning nvcc's outputs")),
    flag("libdevice-directory", "ldir", V, NoEq("clang takes libdevice from the SDK")),
    flag("target-directory", "target-dir", V, NoEq("clang takes the SDK's host files")),
    flag("time", "time", V, NoEq("no nvcc phase times")),
    flag("optimization-info", "opt-info", V, NoEq("no nvcc optimizer remarks")),
    flag("fdevice-time-trace", "fdevice-time-trace", V, NoEq("no nvcc time trace")),
    // Diagnostics.
    flag("verbose", "v", N, Clang("-v", Alone)),
    flag("disable-warnings", "w", N, Clang("-w", Alone)),
    flag("Werror", "Werror", V, O(Own::Werror)),
    flag("Wreorder", "Wreorder", N, Clang("-Wreorder", Alone)),
    flag("Wno-deprecated-declarations", "Wno-deprecated-declarations", N, Clang("-Wno-deprecated-declarations", Alone)),
    flag("Wno-deprecated-gpu-targets", "Wno-deprecated-gpu-targets", N, Same),
    flag("Wdefault-stream-launch", "Wdefault-stream-launch", N, NoEq("an nvcc warning clang does not have")),
    flag("Wmissing-launch-bounds", "Wmissing-launch-bounds", N, NoEq("an nvcc warning clang does not have")),
    flag("Wext-lambda-captures-this", "Wext-lambda-captures-this", N, NoEq("an nvcc warning clang does not have")),
    flag("diag-suppress", "diag-suppress", V, NoEq("nvcc's diagnostic numbers")),
    flag("diag-error", "diag-error", V, NoEq("nvcc's diagnostic numbers")),
    flag("diag-warn", "diag-warn", V, NoEq("nvcc's diagnostic numbers")),
    flag("display-error-number", "err-no", N, Same),
    flag("no-display-error-number", "no-err-no", N, Same),
    // Questions about nvcc.
    flag("version", "V", N, Ask),
    flag("help", "h", N, Ask),
    flag("list-gpu-arch", "arch-ls", N, Ask),
    flag("list-gpu-code", "code-ls", N, Ask),
];

/// One-letter options whose value may follow without a space (`-Idir`, `-O3`, `-lm`).
const GLUED: &[&str] = &["I", "D", "U", "L", "l", "O"];

/// nvcc's `-Werror` kinds (its own warnings); any other `-Werror` is the host compiler's.
const WERROR_KINDS: &[&str] = &[
    "all-warnings",
    "cross-execution-space-call",
    "reorder",
    "default-stream-launch",
    "missing-launch-bounds",
    "ext-lambda-captures-this",
    "deprecated-declarations",
];

/// A flag dropped from a translated command, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// As the command wrote it (with its value).
    pub flag: String,
    pub reason: &'static str,
}

/// Why the real nvcc runs a command instead of clang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fallback {
    /// An option r3-nvcc does not know.
    UnknownFlag(String),
    /// An input r3-nvcc cannot compile (by its suffix).
    UnknownInput(String),
    /// An option r3-nvcc knows and does not implement.
    Unsupported { flag: String, what: &'static str },
    /// A question about nvcc, or CMake's compiler identification: nvcc's own answer.
    Ask,
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fallback::UnknownFlag(a) => write!(f, "nvcc flag '{a}' is unknown to r3-nvcc"),
            Fallback::UnknownInput(a) => write!(f, "r3-nvcc cannot compile the input '{a}'"),
            Fallback::Unsupported { flag, what } => {
                write!(f, "r3-nvcc does not implement {what} ('{flag}')")
            }
            Fallback::Ask => write!(f, "a question for nvcc itself"),
        }
    }
}

/// What r3-nvcc runs for a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// r3-clang++ with these arguments.
    Clang(Translation),
    /// A device link on its own (`-dlink`): the registration object of the objects' device code.
    DeviceLink(DeviceLink),
    /// The real nvcc, with the command as written.
    Nvcc(Fallback),
}

/// A command translated for r3-clang++.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Translation {
    pub clang_args: Vec<OsString>,
    pub dropped: Vec<Dropped>,
    /// Lines worth saying about this command (`-arch=native` on a machine without a GPU).
    pub notes: Vec<String>,
}

/// `-dlink`: the objects and archives whose device code is linked, and the object written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLink {
    pub inputs: Vec<OsString>,
    pub output: PathBuf,
    pub dropped: Vec<Dropped>,
}

/// What the translation depends on besides the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The CUDA SDK clang compiles and links against (the SDK r3 knows).
    pub sdk: Option<PathBuf>,
    /// nvcc's architecture when a command names none (sm_75 from CUDA 13, sm_52 before).
    pub default_arch: String,
    /// This machine's GPUs, for `-arch=native` (empty without one).
    pub native: Vec<String>,
}

impl Context {
    /// The SDK r3 finds, its nvcc's default architecture, and (only where the command asks for
    /// `-arch=native`) this machine's GPUs.
    pub fn detect(args: &[OsString]) -> Context {
        let sdk = toolchain::find_cuda(None).ok().map(|f| f.path);
        let major = sdk
            .as_deref()
            .and_then(toolchain::cuda_version)
            .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
        let default_arch = if major.is_some_and(|m| m >= 13) {
            "sm_75"
        } else {
            "sm_52"
        };
        // `-arch=native`, `--gpu-architecture native`, … (not the host's `-march=native`).
        let wants_native = args.iter().any(|a| {
            a.to_str().is_some_and(|a| {
                let a = a.trim_start_matches('-');
                a == "native" || a == "arch=native" || a == "gpu-architecture=native"
            })
        });
        Context {
            sdk,
            default_arch: default_arch.into(),
            native: if wants_native {
                gpu_archs()
            } else {
                Vec::new()
            },
        }
    }
}

/// The compute capabilities of this machine's GPUs, as `sm_XY`, from nvidia-smi.
fn gpu_archs() -> Vec<String> {
    let out = Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        return Vec::new();
    };
    let mut archs: Vec<String> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let digits: String = line.chars().filter(char::is_ascii_digit).collect();
        let arch = format!("sm_{digits}");
        if !digits.is_empty() && !archs.contains(&arch) {
            archs.push(arch);
        }
    }
    archs
}

/// The language an input is compiled as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Cuda,
    Cxx,
    C,
    /// Objects and libraries: link inputs.
    Object,
}

impl Lang {
    fn clang(self) -> &'static str {
        match self {
            Lang::Cuda => "cuda",
            Lang::Cxx => "c++",
            Lang::C => "c",
            Lang::Object => "none",
        }
    }
}

/// An input's language by its suffix, as nvcc decides it; None for a suffix r3-nvcc cannot
/// compile (nvcc's intermediate files, or none nvcc knows).
fn lang_of(path: &str) -> Option<Lang> {
    let name = Path::new(path).file_name()?.to_str()?;
    // Shared libraries with a version: libfoo.so.1.2
    if name.contains(".so.") {
        return Some(Lang::Object);
    }
    let ext = Path::new(name).extension()?.to_str()?;
    Some(match ext {
        "cu" => Lang::Cuda,
        "c" => Lang::C,
        "cc" | "cpp" | "cxx" | "c++" | "cp" | "C" | "CPP" => Lang::Cxx,
        "o" | "obj" | "a" | "so" | "lib" | "res" => Lang::Object,
        _ => return None,
    })
}

/// What the command does with its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Link,
    Compile,
    DeviceLink,
    Preprocess,
    /// -M / -MM: dependencies only.
    Deps(&'static str),
}

/// The translation in progress.
struct State<'a> {
    ctx: &'a Context,
    phase: Phase,
    rdc: bool,
    forward: bool,
    lang: Option<Lang>,
    std: Option<String>,
    arch: Vec<String>,
    code: Vec<String>,
    gencode: Vec<String>,
    host_opt: Option<String>,
    host_debug: bool,
    device_debug: bool,
    line_info: bool,
    fast_math: bool,
    ftz: Option<bool>,
    fmad: Option<bool>,
    cudart: &'static str,
    /// Flags for the compile, in order (-D, -I, -MF, -std, …).
    flags: Vec<OsString>,
    /// Device-only flags.
    device: Vec<OsString>,
    /// Flags for the host compiler (-Xcompiler, forwarded), placed by [`State::host_flags`].
    host: Vec<String>,
    /// -L, -l and -Xlinker, in order: after the inputs, for links only.
    link: Vec<OsString>,
    /// The inputs as written, and (once all options are read) with their languages.
    raw_inputs: Vec<String>,
    inputs: Vec<(String, Lang)>,
    output: Option<String>,
    dropped: Vec<Dropped>,
    notes: Vec<String>,
}

/// Translates an nvcc command line (response files and options files already read) into
/// what r3-nvcc runs for it.
pub fn translate(args: &[OsString], ctx: &Context) -> Plan {
    match translate_inner(args, ctx) {
        Ok(plan) => plan,
        Err(fallback) => Plan::Nvcc(fallback),
    }
}

fn translate_inner(args: &[OsString], ctx: &Context) -> Result<Plan, Fallback> {
    let mut words = Vec::with_capacity(args.len());
    for a in args {
        match a.to_str() {
            Some(s) => words.push(s),
            None => return Err(Fallback::UnknownInput(a.to_string_lossy().into_owned())),
        }
    }
    if is_cmake_question(&words) {
        return Err(Fallback::Ask);
    }
    let mut st = State {
        ctx,
        phase: Phase::Link,
        rdc: false,
        // nvcc takes it anywhere on the line, also after the flags it applies to.
        forward: words.iter().any(|w| {
            let w = w.trim_start_matches('-');
            w.starts_with("forward-unknown-to-host") || w == "forward-unknown-opts"
        }),
        lang: None,
        std: None,
        arch: Vec::new(),
        code: Vec::new(),
        gencode: Vec::new(),
        host_opt: None,
        host_debug: false,
        device_debug: false,
        line_info: false,
        fast_math: false,
        ftz: None,
        fmad: None,
        cudart: "static",
        flags: Vec::new(),
        device: Vec::new(),
        host: Vec::new(),
        link: Vec::new(),
        raw_inputs: Vec::new(),
        inputs: Vec::new(),
        output: None,
        dropped: Vec::new(),
        notes: Vec::new(),
    };
    let mut it = words.iter().copied().peekable();
    while let Some(w) = it.next() {
        if !w.starts_with('-') || w == "-" {
            st.raw_inputs.push(w.to_owned());
            continue;
        }
        let Some((spec, value)) = lookup(w, &mut it)? else {
            if st.forward && looks_like_host_flag(w) {
                st.host.push(w.to_owned());
                continue;
            }
            return Err(Fallback::UnknownFlag(w.to_owned()));
        };
        st.apply(spec, w, value)?;
    }
    st.finish()
}

/// CMake's questions to nvcc while it identifies the compiler: `-v` with no source
/// (`nvcc -v __cmake_determine_cuda`, which prints nvcc's paths), and the compiles of CMake's
/// identification and ABI sources, whose output CMake parses as nvcc's.
fn is_cmake_question(words: &[&str]) -> bool {
    let probe_source = words.iter().any(|w| {
        matches!(
            Path::new(w).file_name().and_then(|n| n.to_str()),
            Some("CMakeCUDACompilerId.cu" | "CMakeCUDACompilerABI.cu")
        )
    });
    let verbose_without_source = words.iter().any(|w| *w == "-v" || *w == "--verbose")
        && !words
            .iter()
            .any(|w| !w.starts_with('-') && lang_of(w).is_some());
    probe_source || verbose_without_source
}

/// The table entry for an option, and its value (read from the next argument where it is
/// written apart). None for an option not in the table.
fn lookup<'w>(
    w: &'w str,
    rest: &mut std::iter::Peekable<impl Iterator<Item = &'w str>>,
) -> Result<Option<(&'static Flag, Option<String>)>, Fallback> {
    let body = w.strip_prefix("--").unwrap_or_else(|| &w[1..]);
    let (name, eq_value) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v.to_owned())),
        None => (body, None),
    };
    let by_name = FLAGS.iter().find(|f| f.long == name || f.short == name);
    if let Some(spec) = by_name {
        let value = match (spec.takes, eq_value) {
            (Takes::Nothing, Some(_)) => return Ok(None),
            (Takes::Nothing, None) => None,
            (Takes::Value, Some(v)) => Some(v),
            // A bare -Werror is the host compiler's; nvcc's takes a list of its own kinds.
            (Takes::Value, None)
                if spec.does == Does::Own(Own::Werror)
                    && !rest.peek().is_some_and(|n| {
                        split_list(n)
                            .iter()
                            .all(|k| WERROR_KINDS.contains(&k.as_str()))
                    }) =>
            {
                return Ok(None)
            }
            (Takes::Value, None) => Some(
                rest.next()
                    .ok_or_else(|| Fallback::UnknownFlag(format!("{w} (no value)")))?
                    .to_owned(),
            ),
        };
        return Ok(Some((spec, value)));
    }
    // -Idir, -DX=1, -O3, -lm: a one-letter option with its value glued on (not for `--`).
    if w.starts_with("--") {
        return Ok(None);
    }
    let glued = GLUED
        .iter()
        .find(|g| body.starts_with(**g) && body.len() > g.len());
    Ok(glued.and_then(|g| {
        let spec = FLAGS.iter().find(|f| f.short == *g)?;
        Some((spec, Some(body[g.len()..].to_owned())))
    }))
}

/// With `-forward-unknown-to-host-compiler`, an option nvcc does not know goes to the host
/// compiler. r3-nvcc takes that only for what is plainly a GCC-style option (warnings, -f, -m,
/// threads, sanitizers, …); anything else unknown may be an nvcc option r3-nvcc does not know,
/// and the real nvcc compiles the command.
fn looks_like_host_flag(w: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "-W",
        "-f",
        "-m",
        "-pthread",
        "-pedantic",
        "-ansi",
        "-rdynamic",
        "-static",
        "-pie",
        "-no-pie",
        "-pipe",
        "-nostdlib",
        "-nodefaultlibs",
        "-ggdb",
        "-gdwarf",
        "-march",
    ];
    !w.starts_with("--") && PREFIXES.iter().any(|p| w.starts_with(p))
}

/// Host-compiler flags that also matter to a link (so are passed to a command that links as
/// they are, not only to the host compile).
fn matters_to_link(f: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "-Wl,",
        "-fopenmp",
        "-pthread",
        "-fsanitize",
        "-static",
        "-shared",
        "-rdynamic",
        "-fuse-ld",
        "-pie",
        "-no-pie",
        "-nostdlib",
        "-nodefaultlibs",
        "-fprofile",
        "--coverage",
        "-L",
        "-l",
    ];
    PREFIXES.iter().any(|p| f.starts_with(p))
}

/// clang flags that take the next argument as their value: passed as a pair, never through
/// `-Xarch_host` (which takes one argument).
const CLANG_PAIRS: &[&str] = &[
    "-isystem",
    "-include",
    "-idirafter",
    "-iquote",
    "-imacros",
    "-Xlinker",
    "-MF",
    "-MT",
    "-x",
    "-I",
    "-D",
    "-U",
    "-L",
    "-l",
    "-o",
];

impl State<'_> {
    fn drop_flag(&mut self, w: &str, value: &Option<String>, reason: &'static str) {
        let flag = match value {
            Some(v) if !w.contains('=') && !w.ends_with(v.as_str()) => format!("{w} {v}"),
            _ => w.to_owned(),
        };
        self.dropped.push(Dropped { flag, reason });
    }

    fn apply(&mut self, spec: &Flag, w: &str, value: Option<String>) -> Result<(), Fallback> {
        let v = value.clone().unwrap_or_default();
        let unsupported = |what: &'static str| Fallback::Unsupported {
            flag: w.to_owned(),
            what,
        };
        match spec.does {
            Does::Clang(f, join) => match join {
                Join::Alone => self.flags.push(f.into()),
                Join::Glued => {
                    let arg = OsString::from(format!("{f}{v}"));
                    if matches!(f, "-L" | "-l") {
                        self.link.push(arg);
                    } else {
                        self.flags.push(arg);
                    }
                }
                Join::Separate => self.flags.extend([f.into(), v.into()]),
                Join::Equals => self.flags.push(format!("{f}={v}").into()),
            },
            Does::Same => {}
            Does::NoEquivalent(reason) => self.drop_flag(w, &value, reason),
            Does::Nvcc(what) => return Err(unsupported(what)),
            Does::Ask => return Err(Fallback::Ask),
            Does::Own(own) => self.own(own, w, v, &value)?,
        }
        Ok(())
    }

    fn own(
        &mut self,
        own: Own,
        w: &str,
        v: String,
        value: &Option<String>,
    ) -> Result<(), Fallback> {
        let unsupported = |what: &'static str| Fallback::Unsupported {
            flag: w.to_owned(),
            what,
        };
        match own {
            Own::Compile => self.set_phase(Phase::Compile),
            Own::DeviceC => {
                self.rdc = true;
                self.set_phase(Phase::Compile);
            }
            Own::DeviceLink => self.set_phase(Phase::DeviceLink),
            Own::Preprocess => self.set_phase(Phase::Preprocess),
            Own::DepsOnly => self.set_phase(Phase::Deps(
                if w.ends_with("MM") || w.contains("nonsystem") {
                    "-MM"
                } else {
                    "-M"
                },
            )),
            Own::Deps => self.flags.push(
                if w.ends_with("MMD") || w.contains("nonsystem") {
                    "-MMD"
                } else {
                    "-MD"
                }
                .into(),
            ),
            Own::Rdc => self.rdc = parse_bool(&v).ok_or_else(|| unsupported("this -rdc value"))?,
            Own::Output => self.output = Some(v),
            Own::Lang => {
                self.lang = Some(match v.as_str() {
                    "cu" => Lang::Cuda,
                    "c++" => Lang::Cxx,
                    "c" => Lang::C,
                    _ => return Err(unsupported("this -x language")),
                })
            }
            Own::Std => self.std = Some(v),
            Own::OptionsFile => {
                return Err(unsupported("an options file that cannot be read"));
            }
            Own::Arch => {
                for a in split_list(&v) {
                    if matches!(a.as_str(), "all" | "all-major" | "all-real") {
                        return Err(unsupported("-arch=all and -arch=all-major"));
                    }
                    self.arch.push(a);
                }
            }
            Own::Code => self.code.extend(split_list(&v)),
            Own::Gencode => {
                let codes = gencode_codes(&v).ok_or_else(|| unsupported("this -gencode form"))?;
                self.gencode.extend(codes);
            }
            Own::Optimize => {
                if !matches!(v.as_str(), "0" | "1" | "2" | "3" | "s" | "z" | "fast") {
                    return Err(unsupported("this -O level"));
                }
                self.host_opt = Some(format!("-O{v}"));
            }
            Own::Host => self.host.extend(split_list(&v)),
            Own::Linker => {
                for item in split_list(&v) {
                    self.link.extend(["-Xlinker".into(), item.into()]);
                }
            }
            Own::Ptxas => {
                for item in split_list(&v) {
                    self.device.extend(["-Xcuda-ptxas".into(), item.into()]);
                }
            }
            Own::Forward => {}
            Own::FastMath => self.fast_math = true,
            Own::Ftz => {
                self.ftz = Some(parse_bool(&v).ok_or_else(|| unsupported("this -ftz value"))?)
            }
            Own::Fmad => {
                self.fmad = Some(parse_bool(&v).ok_or_else(|| unsupported("this -fmad value"))?)
            }
            Own::PrecDivSqrt => match parse_bool(&v) {
                Some(true) => {}
                Some(false) => self.drop_flag(
                    w,
                    value,
                    "clang keeps IEEE division and square root unless -use_fast_math",
                ),
                None => return Err(unsupported("this value")),
            },
            Own::LineInfo => self.line_info = true,
            Own::DeviceDebug => self.device_debug = true,
            Own::HostDebug => self.host_debug = true,
            Own::MaxRegs => self
                .device
                .extend(["-Xcuda-ptxas".into(), format!("--maxrregcount={v}").into()]),
            Own::ResourceUsage => self.device.extend(["-Xcuda-ptxas".into(), "-v".into()]),
            // clang 22's driver takes -fgpu-default-stream for HIP only; its front end for
            // CUDA too (host and device).
            Own::DefaultStream => match v.as_str() {
                "per-thread" => self
                    .flags
                    .extend(["-Xclang".into(), "-fgpu-default-stream=per-thread".into()]),
                "legacy" | "null" => {}
                _ => return Err(unsupported("this -default-stream")),
            },
            Own::Cudart => {
                self.cudart = match v.as_str() {
                    "static" => "static",
                    "shared" => "shared",
                    "none" => "none",
                    _ => return Err(unsupported("this -cudart")),
                }
            }
            Own::Machine => match v.as_str() {
                "64" => self.flags.push("-m64".into()),
                _ => return Err(unsupported("32-bit code")),
            },
            Own::Werror => {
                if split_list(&v)
                    .iter()
                    .all(|k| WERROR_KINDS.contains(&k.as_str()))
                {
                    self.drop_flag(
                        w,
                        value,
                        "nvcc's own warnings as errors (clang's warnings differ)",
                    );
                } else {
                    return Err(Fallback::UnknownFlag(format!("{w} {v}")));
                }
            }
        }
        Ok(())
    }

    fn set_phase(&mut self, phase: Phase) {
        // -c with -dlink is a device link (nvcc: "-dlink -c"); -M beats a compile.
        self.phase = match (self.phase, phase) {
            (Phase::DeviceLink, Phase::Compile) => Phase::DeviceLink,
            (Phase::Deps(d), _) => Phase::Deps(d),
            (Phase::Preprocess, Phase::Compile) => Phase::Preprocess,
            (_, p) => p,
        };
    }

    /// The architectures clang compiles for, as nvcc chose them: -gencode's codes, else
    /// -code's, else -arch's, else nvcc's default; a virtual architecture (compute_XY) is
    /// compiled for its real one, and `native` is this machine's GPUs.
    fn archs(&mut self) -> Vec<String> {
        let chosen: Vec<String> = if !self.gencode.is_empty() {
            self.gencode.clone()
        } else if !self.code.is_empty() {
            self.code.clone()
        } else {
            self.arch.clone()
        };
        let mut out: Vec<String> = Vec::new();
        for a in chosen {
            let real = if a == "native" {
                if self.ctx.native.is_empty() {
                    self.notes.push(format!(
                        "-arch=native: no GPU answered nvidia-smi; compiled for {}, nvcc's default",
                        self.ctx.default_arch
                    ));
                    vec![self.ctx.default_arch.clone()]
                } else {
                    self.ctx.native.clone()
                }
            } else {
                vec![real_arch(&a)]
            };
            for r in real {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
        if out.is_empty() {
            out.push(self.ctx.default_arch.clone());
        }
        out
    }

    /// Host-compiler flags: in a command that compiles CUDA, for the host side only
    /// (`-Xarch_host`), as nvcc gives them to the host compiler and not to device code,
    /// except those a link needs; elsewhere as they are.
    fn host_flags(&self, cuda: bool, links: bool) -> Vec<OsString> {
        let mut out = Vec::new();
        let mut items = self.host.iter().peekable();
        while let Some(f) = items.next() {
            if CLANG_PAIRS.contains(&f.as_str()) {
                out.push(f.into());
                out.extend(items.next().map(OsString::from));
            } else if !cuda || (links && matters_to_link(f)) {
                out.push(f.into());
            } else {
                out.extend(["-Xarch_host".into(), f.into()]);
            }
        }
        out
    }

    fn finish(mut self) -> Result<Plan, Fallback> {
        // nvcc's -x applies to every source input wherever it stands, never to objects.
        for w in std::mem::take(&mut self.raw_inputs) {
            let lang = match (self.lang, lang_of(&w)) {
                (_, Some(Lang::Object)) => Lang::Object,
                (Some(l), _) => l,
                (None, Some(l)) => l,
                (None, None) => return Err(Fallback::UnknownInput(w)),
            };
            self.inputs.push((w, lang));
        }
        if self.phase == Phase::DeviceLink {
            let inputs: Vec<OsString> = self
                .inputs
                .iter()
                .filter(|(_, l)| *l == Lang::Object)
                .map(|(p, _)| p.into())
                .collect();
            if inputs.len() != self.inputs.len() {
                return Err(Fallback::Unsupported {
                    flag: "-dlink".into(),
                    what: "a device link that also compiles sources",
                });
            }
            return Ok(Plan::DeviceLink(DeviceLink {
                inputs,
                output: PathBuf::from(self.output.as_deref().unwrap_or("a_dlink.o")),
                dropped: self.dropped,
            }));
        }
        let cuda = self.inputs.iter().any(|(_, l)| *l == Lang::Cuda);
        let host_sources = self
            .inputs
            .iter()
            .any(|(_, l)| matches!(l, Lang::Cxx | Lang::C));
        let sources = cuda || host_sources;
        let links = self.phase == Phase::Link;
        let mut out: Vec<OsString> = Vec::new();
        match self.phase {
            Phase::Compile => out.push("-c".into()),
            Phase::Preprocess => {
                out.push("-E".into());
                if cuda {
                    // nvcc's -E prints the host side.
                    out.push("--cuda-host-only".into());
                }
            }
            Phase::Deps(d) => out.push(d.into()),
            Phase::Link | Phase::DeviceLink => {}
        }
        let sdk = self.ctx.sdk.clone();
        if cuda {
            if let Some(sdk) = &sdk {
                out.push(format!("--cuda-path={}", sdk.display()).into());
            }
            for a in self.archs() {
                out.push(format!("--cuda-gpu-arch={a}").into());
            }
            if self.rdc {
                out.push("-fgpu-rdc".into());
            }
        }
        if let Some(o) = &self.output {
            out.extend(["-o".into(), o.into()]);
        }
        // -std=c++NN is C++'s: a command of C sources alone compiles them as C.
        if let Some(std) = &self.std {
            if cuda || self.inputs.iter().any(|(_, l)| *l == Lang::Cxx) || !sources {
                out.push(format!("-std={std}").into());
            }
        }
        out.append(&mut self.flags);
        if sources {
            out.extend(self.host_flags(cuda, links));
            let side = |f: &str| -> Vec<OsString> {
                if cuda {
                    vec!["-Xarch_host".into(), f.into()]
                } else {
                    vec![f.into()]
                }
            };
            // nvcc's -O and -g are the host code's.
            if let Some(o) = &self.host_opt {
                out.extend(side(o));
            }
            if self.host_debug {
                out.extend(side("-g"));
            }
        } else {
            out.extend(self.host.iter().map(OsString::from));
        }
        // Device options in a command without device code do nothing, in nvcc too.
        if cuda {
            out.append(&mut self.device_flags());
        }
        // nvcc puts the SDK's headers on every host compile's path; clang only on CUDA's.
        if host_sources {
            if let Some(sdk) = &sdk {
                for dir in [sdk.join("include"), sdk.join("include/cccl")] {
                    if dir.is_dir() {
                        out.push(format!("-idirafter{}", dir.display()).into());
                    }
                }
            }
        }
        let mut current = None;
        for (path, lang) in &self.inputs {
            if current != Some(*lang) {
                out.extend(["-x".into(), lang.clang().into()]);
                current = Some(*lang);
            }
            out.push(path.into());
        }
        if links {
            out.append(&mut self.link);
            out.extend(self.link_additions(cuda, &sdk));
        }
        Ok(Plan::Clang(Translation {
            clang_args: out,
            dropped: self.dropped,
            notes: self.notes,
        }))
    }

    /// Device-code flags, the device's optimization level last: nvcc optimizes device code at
    /// its highest level whatever -O says (its -O is the host code's), unless -G. clang takes
    /// the last -O it sees for the device compile, `-Xarch_device -O3` included (and passes the
    /// same level to ptxas), so it comes after every other flag (`clang -###`: device cc1 and
    /// ptxas -O3, host cc1 at the command's -O, -O0 without one).
    fn device_flags(&mut self) -> Vec<OsString> {
        let mut out = Vec::new();
        let dev = |f: &str| -> [OsString; 2] { ["-Xarch_device".into(), f.into()] };
        if self.fast_math {
            // nvcc's -use_fast_math: approximate division, square root and transcendentals,
            // and denormals flushed to zero, on the device only.
            out.extend(dev("-ffast-math"));
            out.push("-fgpu-flush-denormals-to-zero".into());
        }
        match self.ftz {
            Some(true) if !self.fast_math => out.push("-fgpu-flush-denormals-to-zero".into()),
            Some(false) => out.push("-fno-gpu-flush-denormals-to-zero".into()),
            _ => {}
        }
        if self.fmad == Some(false) {
            out.extend(dev("-ffp-contract=off"));
        }
        if self.device_debug {
            out.extend(dev("-g"));
        } else if self.line_info {
            out.extend(dev("-gline-tables-only"));
        }
        out.append(&mut self.device);
        out.extend(dev(if self.device_debug { "-O0" } else { "-O3" }));
        out
    }

    /// What nvcc adds to a link: the SDK's library directories, the CUDA runtime (static by
    /// default) and its system libraries, and the device link of relocatable device code
    /// (which clang's linker wrapper does, finding nvlink and fatbinary in the SDK).
    fn link_additions(&self, cuda: bool, sdk: &Option<PathBuf>) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        let objects_only = !cuda
            && !self
                .inputs
                .iter()
                .any(|(_, l)| matches!(l, Lang::Cxx | Lang::C));
        if let Some(sdk) = sdk {
            if objects_only || self.rdc {
                if objects_only {
                    out.push("--offload-link".into());
                    out.push(format!("--cuda-path={}", sdk.display()).into());
                }
                out.push("-Xoffload-linker".into());
                out.push(format!("--cuda-path={}", sdk.display()).into());
            }
            let lib = ["lib64", "lib"]
                .iter()
                .map(|d| sdk.join(d))
                .find(|d| d.is_dir());
            if let Some(lib) = lib {
                if lib.join("stubs").is_dir() {
                    out.push(format!("-L{}", lib.join("stubs").display()).into());
                }
                out.push(format!("-L{}", lib.display()).into());
            }
        }
        match self.cudart {
            "static" => out.extend(
                [
                    "-lcudadevrt",
                    "-lcudart_static",
                    "-lrt",
                    "-lpthread",
                    "-ldl",
                ]
                .map(OsString::from),
            ),
            "shared" => out.extend(["-lcudadevrt", "-lcudart"].map(OsString::from)),
            _ => {}
        }
        out
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// The real architecture clang compiles for an nvcc architecture or code name: `sm_90`,
/// `compute_90` and `lto_90` are all sm_90 (with its PTX, which clang embeds by default).
fn real_arch(a: &str) -> String {
    let digits = a
        .strip_prefix("sm_")
        .or_else(|| a.strip_prefix("compute_"))
        .or_else(|| a.strip_prefix("lto_"))
        .unwrap_or(a);
    format!("sm_{digits}")
}

/// nvcc's list values: split on commas (and spaces, which nvcc's host-compiler command line
/// splits on too), double quotes grouping and removed.
fn split_list(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in v.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' | ' ' | '\t' if !quoted => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The code names of one -gencode value: `arch=compute_90,code=sm_90`,
/// `arch=compute_90,code=[compute_90,sm_90]` (CMake), `arch=compute_90,code="sm_90,compute_90"`;
/// None for a value without `code=` or `arch=`.
fn gencode_codes(v: &str) -> Option<Vec<String>> {
    let v = v.trim_matches('"');
    let (arch, code) = if let Some(i) = v.find("code=") {
        let before = v[..i].trim_end_matches(',');
        let code = &v[i + "code=".len()..];
        // `code=...,arch=...` written the other way round.
        match code.find(",arch=") {
            Some(j) => (Some(&code[j + 1..]), &code[..j]),
            None => (Some(before), code),
        }
    } else {
        return None;
    };
    arch.and_then(|a| a.strip_prefix("arch="))?;
    let inner = code.trim_matches(|c| matches!(c, '[' | ']' | '"' | '\''));
    let codes = split_list(inner);
    (!codes.is_empty()).then_some(codes)
}

/// The command line with nvcc's options files (`--options-file F`, `-optf F`, `=F`) replaced
/// by the arguments in them. An options file that cannot be read stays as written, and the
/// real nvcc says why.
pub fn expand_options_files(args: Vec<OsString>, cwd: &Path) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let s = a.to_str().unwrap_or("");
        let body = s.trim_start_matches('-');
        let dashes = s.len() - body.len();
        let is = |name: &str| (1..=2).contains(&dashes) && (body == name);
        let file = if is("options-file") || is("optf") {
            let next = it.next();
            match &next {
                Some(f) => Some((f.clone(), vec![a.clone(), f.clone()])),
                None => {
                    out.push(a);
                    continue;
                }
            }
        } else {
            body.split_once('=')
                .filter(|(n, _)| (1..=2).contains(&dashes) && matches!(*n, "options-file" | "optf"))
                .map(|(_, f)| (OsString::from(f), vec![a.clone()]))
        };
        match file {
            Some((f, written)) => match std::fs::read(cwd.join(&f)) {
                Ok(text) => out.extend(crate::args::gnu_words(&String::from_utf8_lossy(&text))),
                Err(_) => out.extend(written),
            },
            None => out.push(a),
        }
    }
    out
}

/// Where the real nvcc is (`toolchain::real_nvcc`).
pub fn real_nvcc() -> Result<PathBuf, String> {
    toolchain::real_nvcc()
}

/// Runs `r3-nvcc` for `args` (without argv[0]); returns the exit status.
pub fn main(args: Vec<OsString>) -> i32 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    // The real nvcc gets the command as written; the translation reads its files' flags.
    let (r3_opts, nvcc_args) = split_r3_args(args);
    let expanded = crate::args::expand_response_files(nvcc_args.clone(), &cwd);
    let expanded = expand_options_files(expanded, &cwd);
    let ctx = Context::detect(&expanded);
    match translate(&expanded, &ctx) {
        Plan::Nvcc(Fallback::Ask) => ask_nvcc(&nvcc_args),
        Plan::Nvcc(why) => {
            let nvcc = match real_nvcc() {
                Ok(n) => n,
                Err(e) => {
                    eprintln!("r3: error: {why}, and it cannot run the real nvcc: {e}");
                    return 1;
                }
            };
            eprintln!(
                "r3: note: {why}; the real nvcc ({}) compiles this command as written, without kernel capture",
                nvcc.display()
            );
            exec_nvcc(&nvcc, &nvcc_args)
        }
        Plan::DeviceLink(dl) => {
            note_dropped(&dl.dropped);
            device_link(&dl, &ctx, &nvcc_args)
        }
        Plan::Clang(t) => {
            note_dropped(&t.dropped);
            for n in &t.notes {
                eprintln!("r3: note: {n}");
            }
            run_translated(&t, &r3_opts, &nvcc_args)
        }
    }
}

/// Takes r3's own `--r3-*` options out (for r3-clang++): nvcc would refuse them.
fn split_r3_args(args: Vec<OsString>) -> (Vec<OsString>, Vec<OsString>) {
    let mut r3 = Vec::new();
    let mut rest = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--r3-store") => {
                r3.push(a);
                r3.extend(it.next());
            }
            Some(s) if s.starts_with("--r3-") => r3.push(a),
            _ => rest.push(a),
        }
    }
    (r3, rest)
}

/// The translated command through r3-clang++ (this binary under that name), its diagnostics
/// held back: if clang fails and the real nvcc compiles the command, nvcc's result stands.
fn run_translated(t: &Translation, r3_opts: &[OsString], nvcc_args: &[OsString]) -> i32 {
    use std::io::IsTerminal;
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => {
            eprintln!("r3: error: cannot find r3's own executable: {e}");
            return 1;
        }
    };
    let colour = std::io::stderr().is_terminal()
        && !t
            .clang_args
            .iter()
            .any(|a| a.to_str().is_some_and(|a| a.contains("color-diagnostics")));
    let out = Command::new(&me)
        .arg0("r3-clang++")
        .args(r3_opts)
        .args(&t.clang_args)
        .args(colour.then_some("-fcolor-diagnostics"))
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output();
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            eprintln!("r3: error: cannot run {}: {e}", me.display());
            return 1;
        }
    };
    if out.status.success() {
        let _ = std::io::stderr().write_all(&out.stderr);
        return 0;
    }
    let clang_code = super::exit_code(out.status);
    let Ok(nvcc) = real_nvcc() else {
        // No nvcc to fall back to: clang's diagnostics are the build's.
        let _ = std::io::stderr().write_all(&out.stderr);
        return clang_code;
    };
    let again = Command::new(&nvcc)
        .args(nvcc_args)
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output();
    match again {
        Ok(n) if n.status.success() => {
            let text = String::from_utf8_lossy(&out.stderr);
            let first = text
                .lines()
                .find(|l| l.contains("error"))
                .unwrap_or("")
                .trim();
            let _ = std::io::stderr().write_all(&n.stderr);
            eprintln!(
                "r3: warning: clang failed on r3-nvcc's translation of this command ({first}), and the real nvcc compiled it: built by nvcc, without kernel capture"
            );
            0
        }
        Ok(n) => {
            // Both failed: the build's own error, as nvcc reports it.
            let _ = std::io::stderr().write_all(&n.stderr);
            super::exit_code(n.status)
        }
        Err(e) => {
            let _ = std::io::stderr().write_all(&out.stderr);
            eprintln!("r3: warning: cannot run {}: {e}", nvcc.display());
            clang_code
        }
    }
}

/// Replaces this process with the real nvcc.
fn exec_nvcc(nvcc: &Path, args: &[OsString]) -> i32 {
    let err = Command::new(nvcc).args(args).exec();
    eprintln!("r3: error: cannot run {}: {err}", nvcc.display());
    1
}

/// A question for nvcc itself (`--version`, CMake's identification): the real nvcc answers.
/// In the answer to CMake's identification compile, the host compiler of nvcc's link line (the
/// one CMake links CUDA targets with) becomes r3-clang++, so that those links get r3's
/// recording support as r3-clang++'s links do.
fn ask_nvcc(args: &[OsString]) -> i32 {
    let nvcc = match real_nvcc() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("r3: error: r3-nvcc answers this as nvcc, and {e}");
            return 1;
        }
    };
    let identification = args.iter().any(|a| {
        Path::new(a)
            .file_name()
            .is_some_and(|n| n == "CMakeCUDACompilerId.cu")
    });
    let driver = identification.then(sibling_driver).flatten();
    let Some(driver) = driver else {
        return exec_nvcc(&nvcc, args);
    };
    let out = match Command::new(&nvcc).args(args).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("r3: error: cannot run {}: {e}", nvcc.display());
            return 1;
        }
    };
    let _ = std::io::stdout().write_all(&link_with(&out.stdout, &driver));
    let _ = std::io::stderr().write_all(&link_with(&out.stderr, &driver));
    super::exit_code(out.status)
}

/// nvcc's `-v` output with the host link line's compiler replaced by `driver`: the line (after
/// `#$ `) that holds the `LIBRARIES=` value and an output, not nvlink's.
pub fn link_with(text: &[u8], driver: &Path) -> Vec<u8> {
    let text = String::from_utf8_lossy(text);
    let libraries = text
        .lines()
        .find_map(|l| l.strip_prefix("#$ LIBRARIES="))
        .map(str::trim)
        .filter(|l| !l.is_empty());
    let Some(libraries) = libraries else {
        return text.into_owned().into_bytes();
    };
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        let link = line.strip_prefix("#$ ").filter(|l| {
            l.contains(libraries) && l.contains(" -o ") && !l.trim_start().starts_with("nvlink")
        });
        match link.and_then(|l| l.split_once(' ')) {
            Some((_, rest)) => {
                out.push_str("#$ ");
                out.push_str(&driver.display().to_string());
                out.push(' ');
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
    }
    out.into_bytes()
}

/// `r3-clang++` beside this `r3-nvcc` (the links setup makes), or on PATH, where it is this
/// same r3: the absolute path CMake is told to link with.
fn sibling_driver() -> Option<PathBuf> {
    let me = std::fs::canonicalize(std::env::current_exe().ok()?).ok()?;
    let ours = |p: &Path| std::fs::canonicalize(p).ok().is_some_and(|c| c == me);
    let argv0 = std::env::args_os().next().map(PathBuf::from)?;
    let cwd = std::env::current_dir().ok()?;
    let beside = argv0
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| cwd.join(d).join("r3-clang++"));
    let on_path = toolchain::which("r3-clang++");
    beside.into_iter().chain(on_path).find(|p| ours(p))
}

/// `-dlink`: clang links device code at the final link (its linker wrapper runs nvlink and
/// makes the object that registers the linked code). For a build that links device code on
/// its own first (CMake's separable compilation), r3-nvcc runs that device link and keeps the
/// registration object as the -dlink output; the final link takes it beside the objects. Where
/// the objects hold no relocatable device code, the output is an empty object, as there is
/// nothing to register.
fn device_link(dl: &DeviceLink, ctx: &Context, nvcc_args: &[OsString]) -> i32 {
    match write_device_link(dl, ctx) {
        Ok(()) => 0,
        Err(e) => match real_nvcc() {
            Ok(nvcc) => {
                eprintln!(
                    "r3: warning: r3-nvcc's device link failed ({e}); the real nvcc runs it as written"
                );
                exec_nvcc(&nvcc, nvcc_args)
            }
            Err(_) => {
                eprintln!("r3: error: device link: {e}");
                1
            }
        },
    }
}

fn write_device_link(dl: &DeviceLink, ctx: &Context) -> Result<(), String> {
    let clang = toolchain::find_clang(true).map_err(|e| e.to_string())?.path;
    let sdk = ctx
        .sdk
        .as_ref()
        .ok_or("no CUDA SDK found (nvlink and fatbinary are the SDK's)")?;
    let output_dir = dl
        .output
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".r3-dlink-")
        .tempdir_in(output_dir)
        .map_err(|e| format!("a temporary directory in {}: {e}", output_dir.display()))?;
    // The linker wrapper keeps its temporary files (-save-temps) in the working directory,
    // named after the output: run there, the inputs named from where the command runs.
    let cwd = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    let cuda_path = format!("--cuda-path={}", sdk.display());
    let out = Command::new(&clang)
        .args(["--offload-link", "-save-temps", "--ld-path=/bin/true"])
        .arg(&cuda_path)
        .arg("-Xoffload-linker")
        .arg(&cuda_path)
        .args(dl.inputs.iter().map(|i| cwd.join(i)))
        .args(["-o", "dlink"])
        .current_dir(tmp.path())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", clang.display()))?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        return Err(text
            .lines()
            .find(|l| l.contains("error"))
            .unwrap_or("clang's linker wrapper failed")
            .to_owned());
    }
    let wrapper = tmp.path().join("dlink.cuda.image.wrapper.o");
    let staged = tmp.path().join("out.o");
    if wrapper.is_file() {
        std::fs::copy(&wrapper, &staged).map_err(|e| e.to_string())?;
    } else {
        let empty = Command::new(&clang)
            .args(["-x", "c", "-c", "/dev/null", "-o"])
            .arg(&staged)
            .output()
            .map_err(|e| e.to_string())?;
        if !empty.status.success() {
            return Err("cannot write an empty object".into());
        }
    }
    std::fs::rename(&staged, cwd.join(&dl.output))
        .map_err(|e| format!("{}: {e}", dl.output.display()))
}

/// Names the dropped flags once per build (see the module's doc): per set of dropped flags and
/// build process.
fn note_dropped(dropped: &[Dropped]) {
    if dropped.is_empty() {
        return;
    }
    let mut said: Vec<String> = Vec::new();
    for d in dropped {
        let line = format!("{} ({})", d.flag, d.reason);
        if !said.contains(&line) {
            said.push(line);
        }
    }
    let key = said.join("\n");
    if !first_in_build(&key) {
        return;
    }
    eprintln!(
        "r3: note: r3-nvcc compiles with clang, which has no equivalent of these nvcc flags, so they are dropped: {}; said once per build",
        said.join("; ")
    );
}

/// Build tools whose one run is "a build" for r3-nvcc's notes.
const BUILD_TOOLS: &[&str] = &[
    "make", "gmake", "ninja", "samu", "cmake", "ctest", "scons", "bazel", "meson", "msbuild",
];

/// Whether `key` is said for the first time in this build: a marker file named after the
/// build process (see [`build_process`]) and the key is made exactly once.
fn first_in_build(key: &str) -> bool {
    let (pid, start) = build_process();
    let uid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    let hash = blake3::hash(key.as_bytes()).to_hex();
    let marker =
        std::env::temp_dir().join(format!("r3-nvcc-note-{uid}-{pid}-{start}-{}", &hash[..16]));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_ok()
}

/// The build's process id and start time (which tells a reused pid apart): the outermost build
/// tool among this process's parents (`cmake --build` over the make it runs, a top make over
/// its recursive makes), else the parent.
fn build_process() -> (u32, u64) {
    let stat = |pid: u32| -> Option<(String, u32, u64)> {
        let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let open = s.find('(')?;
        let close = s.rfind(')')?;
        let comm = s[open + 1..close].to_owned();
        let fields: Vec<&str> = s[close + 1..].split_whitespace().collect();
        // After the name: state, ppid, …; starttime is field 22 of the whole line.
        let ppid = fields.get(1)?.parse().ok()?;
        let start = fields.get(19)?.parse().ok()?;
        Some((comm, ppid, start))
    };
    let parent = std::os::unix::process::parent_id();
    let mut build = None;
    let mut pid = parent;
    for _ in 0..16 {
        let Some((comm, ppid, start)) = stat(pid) else {
            break;
        };
        if BUILD_TOOLS.contains(&comm.as_str()) {
            build = Some((pid, start));
        }
        if ppid <= 1 {
            break;
        }
        pid = ppid;
    }
    build.unwrap_or_else(|| (parent, stat(parent).map_or(0, |s| s.2)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn ctx() -> Context {
        Context {
            sdk: Some(PathBuf::from("/sdk")),
            default_arch: "sm_75".into(),
            native: Vec::new(),
        }
    }

    fn clang(args: &[&str]) -> Vec<String> {
        match translate(&os(args), &ctx()) {
            Plan::Clang(t) => t
                .clang_args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn every_table_name_is_unique() {
        let mut names: Vec<&str> = FLAGS.iter().flat_map(|f| [f.long, f.short]).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        // A flag whose long and short names are the same counts once.
        let same = FLAGS.iter().filter(|f| f.long == f.short).count();
        assert_eq!(names.len() + same, before);
    }

    #[test]
    fn gencode_forms() {
        assert_eq!(
            gencode_codes("arch=compute_90,code=sm_90"),
            Some(vec!["sm_90".into()])
        );
        assert_eq!(
            gencode_codes("arch=compute_90,code=[compute_90,sm_90]"),
            Some(vec!["compute_90".into(), "sm_90".into()])
        );
        assert_eq!(
            gencode_codes("arch=compute_80,code=\"sm_80,compute_80\""),
            Some(vec!["sm_80".into(), "compute_80".into()])
        );
        assert_eq!(
            gencode_codes("code=sm_86,arch=compute_86"),
            Some(vec!["sm_86".into()])
        );
        assert_eq!(gencode_codes("sm_90"), None);
    }

    #[test]
    fn a_plain_compile() {
        let c = clang(&["-arch=sm_90", "-O3", "-c", "k.cu", "-o", "k.o"]);
        assert_eq!(
            c,
            [
                "-c",
                "--cuda-path=/sdk",
                "--cuda-gpu-arch=sm_90",
                "-o",
                "k.o",
                "-Xarch_host",
                "-O3",
                "-Xarch_device",
                "-O3",
                "-x",
                "cuda",
                "k.cu"
            ]
        );
    }

    #[test]
    fn options_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("inc.rsp"), "-I/a \"-I/b c\"\n").unwrap();
        let args = os(&[
            "--options-file",
            "inc.rsp",
            "-optf=inc.rsp",
            "-c",
            "--options-file",
            "gone",
        ]);
        assert_eq!(
            expand_options_files(args, dir.path()),
            os(&[
                "-I/a",
                "-I/b c",
                "-I/a",
                "-I/b c",
                "-c",
                "--options-file",
                "gone"
            ])
        );
    }

    #[test]
    fn the_link_line_names_the_driver() {
        let text = b"#$ LIBRARIES=  \"-L/s/lib64\"\n#$ nvlink -m64 \"-L/s/lib64\" -o x\n#$ g++ -m64 a.o \"-L/s/lib64\" -lcudart_static -o \"a.out\"\n";
        let out = String::from_utf8(link_with(text, Path::new("/bin/r3-clang++"))).unwrap();
        assert!(out.contains("#$ nvlink -m64"), "{out}");
        assert!(out.contains("#$ /bin/r3-clang++ -m64 a.o"), "{out}");
    }
}
