//! Reading a clang command line the way clang does: r3's own `--r3-*` options are taken out,
//! and clang itself (`-###`) says which device compiles the command runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// r3's options on a driver command line. They are never passed to clang.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct R3Options {
    /// `--r3-store=DIR` or `--r3-store DIR`.
    pub store: Option<PathBuf>,
    /// `--r3-off`: behave exactly as clang.
    pub off: bool,
    /// `--r3-apply` (Some(None): winners from the store) or `--r3-apply=FILE` (an exported
    /// winners file).
    pub apply: Option<Option<PathBuf>>,
    /// `--r3-apply-rewrites`: apply ships validated source rewrites of `r3 evolve` too (as
    /// `R3_APPLY_REWRITES=1`), and applies the store's winners where no `--r3-apply=FILE` says
    /// otherwise.
    pub apply_rewrites: bool,
    /// `--r3-*` options this r3 does not know (warned about, then ignored).
    pub unknown: Vec<String>,
}

/// Response files nest at most this deep, as clang's own limit stops a file that names itself.
const MAX_RESPONSE_DEPTH: usize = 20;

/// The command line with each `@file` replaced by the arguments in it, as clang reads them
/// (GNU quoting; nested files too), so that r3 sees the flags a build keeps in response files
/// (`--cuda-path`, `-MF`, sources). An `@file` that cannot be read stays as written: clang says
/// why.
pub fn expand_response_files(args: Vec<OsString>, cwd: &Path) -> Vec<OsString> {
    let expanded = expand_at(args.clone(), cwd, 0);
    // A command this long is a link or an archive of many objects (build tools move object
    // lists into response files when the line grows): run as written, it cannot outgrow the
    // system's limit on a command line (ARG_MAX), and r3 has no device code to see in it.
    let bytes: usize = expanded.iter().map(|a| a.len() + 1).sum();
    if bytes > MAX_EXPANDED_BYTES {
        return args;
    }
    expanded
}

/// The longest command line r3 runs with its response files expanded, in bytes: far under
/// Linux's 2 MiB for arguments and environment together.
const MAX_EXPANDED_BYTES: usize = 256 * 1024;

fn expand_at(args: Vec<OsString>, base: &Path, depth: usize) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let file = a
            .to_str()
            .and_then(|s| s.strip_prefix('@'))
            .map(PathBuf::from);
        let text = file
            .as_ref()
            .filter(|_| depth < MAX_RESPONSE_DEPTH)
            .and_then(|f| std::fs::read(base.join(f)).ok());
        match (file, text) {
            (Some(f), Some(text)) => {
                let words = gnu_words(&String::from_utf8_lossy(&text));
                // A nested file is found beside the file that names it, as clang finds it.
                let dir = base
                    .join(&f)
                    .parent()
                    .map_or(base.to_owned(), Path::to_owned);
                out.extend(expand_at(words, &dir, depth + 1));
            }
            _ => out.push(a),
        }
    }
    out
}

/// Splits a response file's text as LLVM's GNU tokenizer does: whitespace separates words;
/// single and double quotes group and are removed; a backslash takes the next character as it
/// is, inside quotes too. (Shell-word crates follow POSIX, where a backslash is literal inside
/// single quotes, so they would split some files otherwise than clang.)
pub(crate) fn gnu_words(text: &str) -> Vec<OsString> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, quote) {
            ('\\', _) => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.next());
            }
            (q, Some(open)) if q == open => quote = None,
            (c, Some(_)) => word.get_or_insert_with(String::new).push(c),
            ('"' | '\'', None) => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (c, None) if c.is_whitespace() => words.extend(word.take().map(OsString::from)),
            (c, None) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word.map(OsString::from));
    words
}

/// Options whose value is the next argument, among those a CUDA compile line carries: that
/// argument is no source even when it names a file.
const VALUE_FLAGS: &[&str] = &[
    "-o",
    "-x",
    "-MF",
    "-MT",
    "-MQ",
    "-MJ",
    "-include",
    "-imacros",
    "-I",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-D",
    "-U",
    "-L",
    "-l",
    "-Xclang",
    "-Xlinker",
    "-Xarch_host",
    "-Xarch_device",
    "-Xcuda-ptxas",
    "-Xcuda-fatbinary",
    "-mllvm",
    "-target",
    "--language",
];

/// The CUDA sources a command compiles: `.cu` files, or any file under `-x cuda`, that exist
/// (the existence check keeps an option's value that r3 does not know from counting).
pub fn cuda_sources(args: &[OsString], cwd: &Path) -> Vec<usize> {
    let mut out = Vec::new();
    let mut cuda = false;
    let mut prev: Option<&str> = None;
    for (i, a) in args.iter().enumerate() {
        let s = a.to_string_lossy();
        let value = prev.is_some_and(|p| VALUE_FLAGS.contains(&p));
        if value && matches!(prev, Some("-x" | "--language")) {
            cuda = s == "cuda";
        } else if let Some(lang) = s.strip_prefix("-x").filter(|l| !l.is_empty()) {
            cuda = lang == "cuda";
        } else if !value && !s.starts_with('-') {
            let path = Path::new(a);
            let is_cuda = cuda || path.extension().is_some_and(|x| x == "cu");
            if is_cuda && cwd.join(path).is_file() {
                out.push(i);
            }
        }
        prev = a.to_str();
    }
    out
}

/// One command per CUDA source for a compile of several (`-c a.cu b.cu`), each with the
/// others left out: r3 captures and applies per compile, so each source needs its own. None
/// where the command names one output for all (`-o`) or links them.
pub fn one_compile_per_source(args: &[OsString], sources: &[usize]) -> Option<Vec<Vec<OsString>>> {
    let compiles_only = args.iter().any(|a| a == "-c" || a == "-S");
    if sources.len() < 2 || !compiles_only || output_of(args).is_some() {
        return None;
    }
    let each = sources
        .iter()
        .map(|keep| {
            args.iter()
                .enumerate()
                .filter(|(i, _)| i == keep || !sources.contains(i))
                .map(|(_, a)| a.clone())
                .collect()
        })
        .collect();
    Some(each)
}

/// Splits r3's options from clang's.
pub fn split_r3_options(args: Vec<OsString>) -> (R3Options, Vec<OsString>) {
    let mut opts = R3Options::default();
    let mut clang = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let Some(s) = a.to_str().filter(|s| s.starts_with("--r3-")) else {
            clang.push(a);
            continue;
        };
        match s.split_once('=') {
            Some(("--r3-store", dir)) => opts.store = Some(PathBuf::from(dir)),
            None if s == "--r3-store" => opts.store = it.next().map(PathBuf::from),
            None if s == "--r3-off" => opts.off = true,
            None if s == "--r3-apply" => opts.apply = Some(None),
            None if s == "--r3-apply-rewrites" => opts.apply_rewrites = true,
            Some(("--r3-apply", file)) => opts.apply = Some(Some(PathBuf::from(file))),
            _ => opts.unknown.push(s.to_owned()),
        }
    }
    (opts, clang)
}

/// A cheap first look: could this command compile CUDA at all? Most compiles of a CMake
/// project are plain C++; they go straight to clang without asking it anything.
pub fn may_compile_cuda(args: &[OsString]) -> bool {
    let mut prev_x = false;
    for a in args.iter().filter_map(|a| a.to_str()) {
        if a == "-###" {
            return false;
        }
        let cuda_lang = (prev_x && a == "cuda") || a == "-xcuda" || a == "--language=cuda";
        if cuda_lang
            || a.ends_with(".cu")
            || a.starts_with("--cuda-gpu-arch")
            || a.starts_with("--offload-arch")
        {
            return true;
        }
        prev_x = a == "-x" || a == "--language";
    }
    false
}

/// Whether the command stops before LLVM's passes (preprocessing, dependencies, syntax
/// checks) or compiles nothing at all (`-###` prints the jobs, `--version` and friends print
/// facts): it has no device IR to capture, and clang must see it as written.
pub fn stops_before_ir(args: &[OsString]) -> bool {
    args.iter().any(|a| {
        matches!(
            a.to_str(),
            Some(
                "-E" | "-M"
                    | "-MM"
                    | "-fsyntax-only"
                    | "--precompile"
                    | "-###"
                    | "--version"
                    | "-dumpversion"
                    | "-dumpmachine"
                    | "--help"
            )
        )
    })
}

/// Splits the job lines that `clang -###` prints into argument lists. Each job is one line of
/// double-quoted arguments, with `\"` and `\\` escaped.
pub fn parse_jobs(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| l.starts_with(" \""))
        .map(split_quoted)
        .collect()
}

fn split_quoted(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => arg.extend(chars.next()),
                '"' => break,
                c => arg.push(c),
            }
        }
        out.push(arg);
    }
    out
}

/// One device-side compile that r3 repeats to capture IR.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceJob {
    /// The source file, as clang names it.
    pub input: PathBuf,
    /// GPU architecture, e.g. "sm_90".
    pub arch: String,
    /// The cc1 command (clang binary first) that writes unoptimized bitcode to `output`.
    pub capture: Vec<String>,
}

const MODES: &[&str] = &[
    "-S",
    "-emit-obj",
    "-emit-llvm",
    "-emit-llvm-bc",
    "-emit-llvm-uselists",
];
/// cc1 options whose value is a file the real compile writes; the capture must not touch them.
const OUTPUT_OPTS: &[&str] = &[
    "-o",
    "-dependency-file",
    "-MT",
    "-MQ",
    "-header-include-file",
    "-stats-file",
];
const DROP_FLAGS: &[&str] = &["-sys-header-deps", "-module-file-deps", "-MP", "-MG"];

/// The capture command for a device cc1 job of `clang -###`, or None for any other job
/// (host compile, link, preprocessing only, ptxas, fatbinary).
pub fn device_job(job: &[String], output: &std::path::Path) -> Option<DeviceJob> {
    let is_device_compile = job.get(1).is_some_and(|a| a == "-cc1")
        && job.iter().any(|a| a == "-fcuda-is-device")
        && job.iter().any(|a| MODES.contains(&a.as_str()));
    if !is_device_compile {
        return None;
    }
    let arch = value_after(job, "-target-cpu")?.to_owned();
    let input = PathBuf::from(value_after(job, "cuda").filter(|_| job.iter().any(|a| a == "-x"))?);
    let mut capture = Vec::with_capacity(job.len() + 6);
    let mut it = job.iter();
    while let Some(a) = it.next() {
        let s = a.as_str();
        if OUTPUT_OPTS.contains(&s) {
            it.next();
        } else if MODES.contains(&s)
            || DROP_FLAGS.contains(&s)
            || s.starts_with("-debug-info-kind=")
        {
            // replaced below
        } else {
            capture.push(a.clone());
        }
    }
    // IR before LLVM's passes, at the user's -O level, with line tables for the source location.
    let extra = [
        "-emit-llvm-bc",
        "-disable-llvm-passes",
        "-debug-info-kind=line-tables-only",
        "-w",
        "-o",
    ];
    capture.splice(
        2..2,
        extra
            .iter()
            .map(|s| s.to_string())
            .chain([output.display().to_string()]),
    );
    Some(DeviceJob {
        input,
        arch,
        capture,
    })
}

fn value_after<'a>(job: &'a [String], flag: &str) -> Option<&'a str> {
    job.iter()
        .position(|a| a == flag)
        .and_then(|i| job.get(i + 1))
        .map(String::as_str)
}

/// The value of `--cuda-path=DIR` on a driver command line.
pub fn cuda_path_flag(args: &[OsString]) -> Option<PathBuf> {
    args.iter()
        .rev()
        .find_map(|a| a.to_str()?.strip_prefix("--cuda-path="))
        .map(PathBuf::from)
}

/// The `-o` output of a driver command line, when it names one.
pub fn output_of(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_str()?;
        if s == "-o" {
            return it.next().map(PathBuf::from);
        }
        if let Some(rest) = s.strip_prefix("-o").filter(|r| !r.is_empty()) {
            return Some(PathBuf::from(rest));
        }
    }
    None
}

/// What clang names the output of a command without `-o`: `<stem>.o` for `-c` of one source,
/// `a.out` for a link; None where it writes no object or executable.
pub fn default_output(args: &[OsString]) -> Option<PathBuf> {
    let flags: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    if flags
        .iter()
        .any(|f| matches!(*f, "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only" | "-###"))
    {
        return None;
    }
    if !flags.contains(&"-c") {
        return Some(PathBuf::from("a.out"));
    }
    let sources: Vec<&&str> = flags
        .iter()
        .filter(|f| {
            let ext = Path::new(f).extension().and_then(|e| e.to_str());
            !f.starts_with('-') && matches!(ext, Some("cu" | "cpp" | "cc" | "cxx" | "c"))
        })
        .collect();
    match sources.as_slice() {
        [one] => Some(Path::new(one).with_extension("o").file_name()?.into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn response_files_are_read_as_clang_reads_them() {
        let words = |t: &str| gnu_words(t);
        assert_eq!(
            words("-c  a.cu\n-o 'a b.o'"),
            os(&["-c", "a.cu", "-o", "a b.o"])
        );
        assert_eq!(
            words(r#"-DX="1 2" -DY=\" '' a\ b"#),
            os(&["-DX=1 2", "-DY=\"", "", "a b"])
        );
        assert_eq!(words(r#"'it\'s'"#), os(&["it's"]));
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/inner.rsp"), "--cuda-path=/sdk").unwrap();
        std::fs::write(d.join("sub/outer.rsp"), "-x cuda @inner.rsp k.cu").unwrap();
        std::fs::write(d.join("self.rsp"), "@self.rsp").unwrap();
        let args = os(&["-c", "@sub/outer.rsp", "@missing.rsp", "-o", "k.o"]);
        let expanded = expand_response_files(args, d);
        assert_eq!(
            expanded,
            os(&[
                "-c",
                "-x",
                "cuda",
                "--cuda-path=/sdk",
                "k.cu",
                "@missing.rsp",
                "-o",
                "k.o"
            ])
        );
        assert!(may_compile_cuda(&expanded));
        // A file that names itself stops at the depth limit instead of looping.
        assert_eq!(
            expand_response_files(os(&["@self.rsp"]), d),
            os(&["@self.rsp"])
        );
        // A link of many objects stays as written: expanded, it could outgrow ARG_MAX.
        let objects: String = (0..20_000).map(|i| format!("obj/{i:08}.o\n")).collect();
        std::fs::write(d.join("objects.rsp"), objects).unwrap();
        let link = os(&["-o", "app", "@objects.rsp"]);
        assert_eq!(expand_response_files(link.clone(), d), link);
    }

    #[test]
    fn a_compile_of_several_sources_becomes_one_per_source() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for f in ["a.cu", "b.cu", "c.cpp", "inc.cu"] {
            std::fs::write(d.join(f), "").unwrap();
        }
        let args = os(&[
            "-c", "-include", "inc.cu", "a.cu", "-I", "d", "b.cu", "gone.cu", "-O2",
        ]);
        let sources = cuda_sources(&args, d);
        assert_eq!(
            sources,
            [3, 6],
            "neither an option's value nor a missing file"
        );
        let each = one_compile_per_source(&args, &sources).unwrap();
        assert_eq!(
            each,
            [
                os(&["-c", "-include", "inc.cu", "a.cu", "-I", "d", "gone.cu", "-O2"]),
                os(&["-c", "-include", "inc.cu", "-I", "d", "b.cu", "gone.cu", "-O2"]),
            ]
        );
        // Under -x cuda every source is CUDA; -x none ends it.
        let args = os(&["-x", "cuda", "c.cpp", "-xnone", "a.cu", "-c"]);
        assert_eq!(cuda_sources(&args, d), [2, 4]);
        let args = os(&["-xcuda", "c.cpp", "-x", "c++", "c.cpp"]);
        assert_eq!(cuda_sources(&args, d), [1]);
        // One output for all, or a link: not split.
        let linked = os(&["a.cu", "b.cu", "-o", "app"]);
        assert_eq!(
            one_compile_per_source(&linked, &cuda_sources(&linked, d)),
            None
        );
        let named = os(&["-c", "a.cu", "b.cu", "-o", "x.o"]);
        assert_eq!(
            one_compile_per_source(&named, &cuda_sources(&named, d)),
            None
        );
    }

    #[test]
    fn r3_options_are_removed() {
        let (o, rest) = split_r3_options(os(&[
            "-c",
            "--r3-store=/s",
            "a.cu",
            "--r3-off",
            "--r3-bogus",
            "--r3-store",
            "/t",
            "--r3-apply",
        ]));
        assert_eq!(rest, os(&["-c", "a.cu"]));
        assert_eq!(o.store, Some(PathBuf::from("/t")));
        assert!(o.off);
        assert_eq!(o.apply, Some(None));
        assert_eq!(o.unknown, ["--r3-bogus"]);
        assert!(!o.apply_rewrites);
        let (o, _) = split_r3_options(os(&["--r3-apply=w.json", "--r3-apply-rewrites"]));
        assert_eq!(o.apply, Some(Some(PathBuf::from("w.json"))));
        assert!(o.apply_rewrites);
    }

    #[test]
    fn cuda_is_recognized_cheaply() {
        assert!(may_compile_cuda(&os(&["-c", "k.cu"])));
        assert!(may_compile_cuda(&os(&["-x", "cuda", "-c", "k.cpp"])));
        assert!(may_compile_cuda(&os(&["-xcuda", "k.cc"])));
        assert!(!may_compile_cuda(&os(&[
            "-c",
            "k.cpp",
            "-I/usr/include/cuda"
        ])));
        assert!(!may_compile_cuda(&os(&["-###", "k.cu"])));
        assert!(!may_compile_cuda(&os(&[
            "-x", "c++", "main.cpp", "-lcudart"
        ])));
    }

    #[test]
    fn quoted_job_lines_are_split() {
        let text =
            "clang version 22\n \"/usr/bin/clang\" \"-cc1\" \"-D\" \"X=\\\"a b\\\"\" \"C:\\\\x\"\n";
        assert_eq!(
            parse_jobs(text),
            vec![vec!["/usr/bin/clang", "-cc1", "-D", "X=\"a b\"", "C:\\x"]]
        );
    }

    #[test]
    fn device_job_is_rewritten_to_capture_ir() {
        let job: Vec<String> = [
            "/usr/bin/clang",
            "-cc1",
            "-triple",
            "nvptx64-nvidia-cuda",
            "-O2",
            "-S",
            "-fcuda-is-device",
            "-target-cpu",
            "sm_90",
            "-debug-info-kind=constructor",
            "-dependency-file",
            "k.d",
            "-MT",
            "k.o",
            "-sys-header-deps",
            "-o",
            "/tmp/k-sm_90.s",
            "-x",
            "cuda",
            "k.cu",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let d = device_job(&job, std::path::Path::new("/cap/k.bc")).unwrap();
        assert_eq!(d.arch, "sm_90");
        assert_eq!(d.input, PathBuf::from("k.cu"));
        let c = d.capture.join(" ");
        assert!(
            c.starts_with("/usr/bin/clang -cc1 -emit-llvm-bc -disable-llvm-passes"),
            "{c}"
        );
        assert!(c.contains("-o /cap/k.bc") && c.contains("-O2"), "{c}");
        for gone in [
            "-S ",
            "k.d",
            "-MT",
            "/tmp/k-sm_90.s",
            "-sys-header-deps",
            "constructor",
        ] {
            assert!(!c.contains(gone), "{gone} left in {c}");
        }
        let host: Vec<String> = job
            .iter()
            .filter(|a| *a != "-fcuda-is-device")
            .cloned()
            .collect();
        assert!(device_job(&host, std::path::Path::new("/x")).is_none());
    }

    #[test]
    fn output_is_found_in_both_spellings() {
        assert_eq!(
            output_of(&os(&["-c", "a.cu", "-o", "a.o"])),
            Some(PathBuf::from("a.o"))
        );
        assert_eq!(
            output_of(&os(&["-oa.o", "-c", "a.cu"])),
            Some(PathBuf::from("a.o"))
        );
        assert_eq!(output_of(&os(&["-c", "a.cu"])), None);
    }
}
