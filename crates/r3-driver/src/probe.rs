//! CMake's compiler check with r3 as the CUDA compiler and no toolchain file
//! (`-DCMAKE_CUDA_COMPILER=r3-clang++`). CMake identifies a clang CUDA compiler by compiling
//! `CMakeCUDACompilerId.cu` for sm_52, then sm_30, then sm_20, and takes the default
//! architecture from the `-target-cpu` of the compile that worked. CUDA 12.9 and later
//! compile none of these, so configuring fails ("Failed to detect a default CUDA
//! architecture"). r3 runs the check as asked; only where it fails does r3 run it again for an
//! architecture the SDK has, and say so in CMake's log. Nothing of the build itself changes:
//! the check's object is thrown away, and CMAKE_CUDA_ARCHITECTURES (given, or detected from
//! this check) decides what the build compiles for.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

const CHECK_SOURCE: &str = "CMakeCUDACompilerId.cu";

/// Runs the command if it is CMake's compiler check; None for every other command.
pub fn cmake_compiler_check(compiler: &super::Compiler, args: &[OsString]) -> Option<i32> {
    let is_check = args
        .iter()
        .any(|a| Path::new(a).file_name().is_some_and(|n| n == CHECK_SOURCE));
    if !is_check || !args.iter().any(|a| arch_flag(a).is_some()) {
        return None;
    }
    let first = compiler.command().args(args).output().ok()?;
    if first.status.success() {
        return Some(pass_on(&first));
    }
    let arch = fallback_arch();
    let retried: Vec<OsString> = args
        .iter()
        .map(|a| match arch_flag(a) {
            Some(_) => OsString::from(format!("--cuda-gpu-arch=sm_{}", arch.0)),
            None => a.clone(),
        })
        .collect();
    match compiler.command().args(&retried).output() {
        Ok(second) if second.status.success() => {
            let asked: Vec<String> = args.iter().filter_map(arch_flag).collect();
            eprintln!(
                "r3: note: CMake's compiler check asked for {}, which this CUDA SDK cannot compile for; checked for sm_{} instead ({}). Set CMAKE_CUDA_ARCHITECTURES to choose what the build compiles for",
                asked.join(", "),
                arch.0,
                arch.1
            );
            Some(pass_on(&second))
        }
        _ => Some(pass_on(&first)),
    }
}

/// The architecture named by `--cuda-gpu-arch=` / `--offload-arch=`.
fn arch_flag(a: &OsString) -> Option<String> {
    let s = a.to_str()?;
    s.strip_prefix("--cuda-gpu-arch=")
        .or_else(|| s.strip_prefix("--offload-arch="))
        .map(str::to_owned)
}

/// The architecture to check for, and why: CMake's own CUDAARCHS, else this machine's GPU,
/// else sm_90 (what r3's toolchain file defaults to).
fn fallback_arch() -> (String, &'static str) {
    let digits = |s: &str| {
        let d: String = s.chars().filter(char::is_ascii_digit).collect();
        (!d.is_empty()).then_some(d)
    };
    if let Some(a) = std::env::var("CUDAARCHS")
        .ok()
        .and_then(|v| v.split(';').next().and_then(digits))
    {
        return (a, "the first of CUDAARCHS");
    }
    let gpu = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=compute_cap", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .and_then(digits)
        });
    match gpu {
        Some(a) => (a, "this machine's GPU"),
        None => ("90".into(), "r3's default; no GPU answered nvidia-smi"),
    }
}

fn pass_on(out: &std::process::Output) -> i32 {
    let _ = std::io::stdout().write_all(&out.stdout);
    let _ = std::io::stderr().write_all(&out.stderr);
    super::exit_code(out.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cmakes_check_with_an_architecture_is_taken() {
        let c = super::super::Compiler {
            clang: "/nonexistent/clang++".into(),
            wrapper: Vec::new(),
            cxx: true,
        };
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            cmake_compiler_check(&c, &os(&["-c", "k.cu", "--cuda-gpu-arch=sm_52"])),
            None
        );
        assert_eq!(
            cmake_compiler_check(&c, &os(&["CMakeCUDACompilerId.cu"])),
            None
        );
        assert_eq!(
            arch_flag(&OsString::from("--offload-arch=sm_30")),
            Some("sm_30".into())
        );
    }
}
