//! A translation unit as nvcc builds it, to PTX: the code users compare r3 against. The
//! recorded clang compile gives the source and what decides its meaning (macros, include
//! paths, the language standard, fast math); the architecture is the GPU's that measures it.
//! Everything else of the clang command (warnings, dependency files, host flags) is left out.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long nvcc may take on one unit.
pub const LIMIT: Duration = Duration::from_secs(180);

/// nvcc's PTX of one unit, and how it was made.
#[derive(Debug, Clone)]
pub struct Build {
    /// argv, nvcc first; the output file's name is a temporary one.
    pub command: Vec<String>,
    /// nvcc's release line (`Cuda compilation tools, release 13.0, V13.0.88`).
    pub version: String,
    /// The unit's PTX, or nvcc's reason for none (its error line, or its time limit).
    pub ptx: Result<String, String>,
}

/// clang options whose value is the next argument.
const VALUE_NEXT: &[&str] = &[
    "-o",
    "-MF",
    "-MT",
    "-MQ",
    "-x",
    "-I",
    "-D",
    "-U",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-include",
    "-imacros",
    "-include-pch",
    "-isysroot",
    "--sysroot",
    "-Xclang",
    "-Xarch_device",
    "-Xarch_host",
    "-Xcuda-ptxas",
    "-Xcuda-fatbinary",
    "-Xlinker",
    "-Xassembler",
    "-Xpreprocessor",
    "-mllvm",
    "-target",
    "-arch",
    "-resource-dir",
    "-L",
    "-l",
];

const SOURCE_EXTENSIONS: &[&str] = &["cu", "cpp", "cc", "cxx", "c++", "C", "c"];

/// The unit's source file (as `cwd` resolves it) and the flags nvcc gets from the clang
/// command `args` (argv, the compiler first). Err names what is missing.
pub fn translate(args: &[String], cwd: &Path) -> Result<(PathBuf, Vec<String>), String> {
    let mut flags = Vec::new();
    let mut source = None;
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        let next = args.get(i + 1).map(String::as_str);
        i += 1;
        if VALUE_NEXT.contains(&a) {
            if let (Some(v), true) = (
                next,
                matches!(a, "-D" | "-U" | "-I" | "-isystem" | "-include"),
            ) {
                flags.extend([a.to_owned(), v.to_owned()]);
            }
            i += 1;
            continue;
        }
        if let Some(flag) = nvcc_flag(a) {
            flags.push(flag);
        } else if !a.starts_with('-') && source.is_none() && is_source(a) {
            source = Some(cwd.join(a));
        }
    }
    let source = source.ok_or("its compile command names no source file")?;
    Ok((source, flags))
}

fn is_source(arg: &str) -> bool {
    Path::new(arg)
        .extension()
        .is_some_and(|e| SOURCE_EXTENSIONS.iter().any(|x| e == *x))
}

/// nvcc's spelling of a clang flag joined with its value, where it changes what the code
/// means; None for the rest.
fn nvcc_flag(a: &str) -> Option<String> {
    let joined = ["-D", "-U", "-I"];
    if joined.iter().any(|p| a.starts_with(p) && a.len() > p.len()) {
        return Some(a.to_owned());
    }
    if let Some(std) = a.strip_prefix("-std=") {
        // nvcc knows c++NN only; GNU extensions are the host compiler's default anyway.
        return Some(format!("-std={}", std.replace("gnu++", "c++")));
    }
    match a {
        "-ffast-math" => Some("-use_fast_math".into()),
        "-fcuda-flush-denormals-to-zero" | "-fgpu-flush-denormals-to-zero" => {
            Some("-ftz=true".into())
        }
        "-fgpu-rdc" | "-fcuda-rdc" => Some("-rdc=true".into()),
        _ => None,
    }
}

/// Compiles the unit of the clang command `args` (run in `cwd`) with `nvcc` to PTX for `sm`,
/// at -O3. Err: why nvcc could not be asked (no source, no nvcc), in a line.
pub fn compile(nvcc: &Path, args: &[String], cwd: &Path, sm: &str) -> Result<Build, String> {
    let (source, flags) = translate(args, cwd)?;
    if !source.is_file() {
        return Err(format!("its source {} is gone", source.display()));
    }
    let version = version(nvcc)?;
    let dir = tempfile::Builder::new()
        .prefix("r3-nvcc-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?;
    let out = dir.path().join("unit.ptx");
    let mut command: Vec<String> = vec![
        nvcc.display().to_string(),
        "-ptx".into(),
        "-O3".into(),
        format!("-arch={sm}"),
        // clang accepts constexpr host functions and lambdas in device code; nvcc asks first.
        "--expt-relaxed-constexpr".into(),
        "--extended-lambda".into(),
        "-w".into(),
    ];
    command.extend(flags);
    command.extend(["-x".into(), "cu".into(), source.display().to_string()]);
    command.extend(["-o".into(), out.display().to_string()]);
    let mut run = Command::new(&command[0]);
    run.args(&command[1..]).current_dir(cwd);
    let ptx = match r3_process::run_limited(run, LIMIT) {
        Err(e @ r3_process::RunError::Start { .. }) => return Err(e.to_string()),
        Err(e) => Err(e.to_string()),
        Ok(exit) if !exit.status.success() => Err(format!(
            "nvcc could not compile {}: {}",
            source.display(),
            first_error(&exit.stderr)
        )),
        Ok(_) => std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display())),
    };
    Ok(Build {
        command,
        version,
        ptx,
    })
}

/// The line of nvcc's messages that says what went wrong.
fn first_error(stderr: &str) -> String {
    let lines = stderr.lines().map(str::trim).filter(|l| !l.is_empty());
    let chosen = lines
        .clone()
        .find(|l| l.contains("error"))
        .or_else(|| lines.clone().next())
        .unwrap_or("no message");
    chosen.chars().take(300).collect()
}

/// nvcc's release line, which also shows it runs.
fn version(nvcc: &Path) -> Result<String, String> {
    let out = Command::new(nvcc)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", nvcc.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find(|l| l.contains("release"))
        .map(|l| l.trim().to_owned())
        .ok_or_else(|| format!("{} --version says no release", nvcc.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn what_decides_the_code_is_kept_and_the_rest_left_to_clang() {
        let (source, flags) = translate(
            &args(
                "r3-clang++ -O3 -x cuda --cuda-gpu-arch=sm_90 -DN=4 -D M=2 -I inc -Iinc2 \
                 -isystem /opt/x -std=gnu++17 -ffast-math -MD -MF dep.d -o k.o -c src/k.cu \
                 -Wall -Xclang -foo --r3-apply",
            ),
            Path::new("/b"),
        )
        .unwrap();
        assert_eq!(source, Path::new("/b/src/k.cu"));
        assert_eq!(
            flags,
            args("-DN=4 -D M=2 -I inc -Iinc2 -isystem /opt/x -std=c++17 -use_fast_math")
        );
    }

    #[test]
    fn a_command_without_a_source_says_so() {
        let e = translate(&args("clang++ -c -o x.o"), Path::new("/")).unwrap_err();
        assert!(e.contains("no source"), "{e}");
        // An option's value is never the source.
        let e = translate(&args("clang++ -include pre.cu -c"), Path::new("/")).unwrap_err();
        assert!(e.contains("no source"), "{e}");
    }

    #[test]
    fn a_failed_compile_is_said_by_its_error_line() {
        let msg =
            "\nkernel.cu(3): warning: x\nkernel.cu(4): error: identifier \"y\" is undefined\n";
        assert_eq!(
            first_error(msg),
            "kernel.cu(4): error: identifier \"y\" is undefined"
        );
        assert_eq!(first_error(""), "no message");
    }
}
