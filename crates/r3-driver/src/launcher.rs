//! `r3 <compiler> <args…>`: r3 as a compiler launcher, the way ccache and sccache are one
//! (`CMAKE_CUDA_COMPILER_LAUNCHER=r3`). In front of clang (or of an r3 driver link) it is the
//! driver; in front of a compiler cache in front of clang (`r3 ccache clang++ …`) it captures
//! beside the cached compile, so that a cache hit still stores the kernels; in front of any
//! other compiler (nvcc, gcc) it runs the command as given.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Compiler caches r3 can stand in front of: they take the compiler as their first argument.
const CACHES: &[&str] = &["ccache", "sccache", "buildcache"];

/// Whether `r3 ARG …` is a launch (ARG a compiler or a cache) rather than an r3 command: no r3
/// command has a `/` in its name or is named like a compiler.
pub fn is_launch(arg: &OsStr) -> bool {
    let Some(s) = arg.to_str() else {
        return false;
    };
    if s.starts_with('-') {
        return false;
    }
    s.contains('/') || is_cache(s) || is_clang(s) || is_other_compiler(base(s))
}

fn base(s: &str) -> &str {
    Path::new(s)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(s)
}

fn is_cache(s: &str) -> bool {
    CACHES.contains(&base(s))
}

/// clang, clang++, clang++-22, r3-clang++ …
fn is_clang(s: &str) -> bool {
    let b = base(s);
    b.starts_with("clang") || b.starts_with("r3-clang")
}

fn is_other_compiler(b: &str) -> bool {
    matches!(b, "nvcc" | "gcc" | "g++" | "cc" | "c++") || b.ends_with("-gcc") || b.ends_with("-g++")
}

/// Runs a launch: `args` is everything after `r3`.
pub fn main(args: Vec<OsString>) -> i32 {
    let split = args
        .iter()
        .position(|a| !a.to_str().is_some_and(is_cache))
        .unwrap_or(args.len());
    let (wrapper, rest) = args.split_at(split);
    let Some((compiler, compiler_args)) = rest.split_first() else {
        eprintln!(
            "r3: error: `r3 {}` names no compiler to launch; fix: r3 <compiler> <arguments> (e.g. r3 ccache clang++ -c k.cu)",
            wrapper.iter().map(|w| w.to_string_lossy()).collect::<Vec<_>>().join(" ")
        );
        return 1;
    };
    let name = compiler.to_string_lossy().into_owned();
    if !is_clang(&name) {
        // r3 captures only what clang compiles; anything else runs exactly as written.
        let err = Command::new(wrapper.first().unwrap_or(compiler))
            .args(wrapper.iter().skip(1))
            .args((!wrapper.is_empty()).then_some(compiler))
            .args(compiler_args)
            .exec();
        eprintln!("r3: error: cannot run {name}: {err}");
        return 1;
    }
    let cxx = base(&name).contains("++");
    let clang = if base(&name).starts_with("r3-clang") {
        match crate::toolchain::find_clang(cxx) {
            Ok(found) => found.path,
            Err(e) => {
                eprintln!("r3: error: {e}");
                return 1;
            }
        }
    } else {
        resolve(compiler)
    };
    let compiler = super::Compiler {
        clang,
        wrapper: wrapper.to_vec(),
        cxx,
    };
    super::run(&compiler, compiler_args.to_vec())
}

/// The compiler as a path: as given where it has a `/`, else found on PATH (else the name,
/// whose failure to run then says so).
fn resolve(compiler: &OsStr) -> PathBuf {
    let p = PathBuf::from(compiler);
    if p.components().count() > 1 {
        return p;
    }
    crate::toolchain::which(&compiler.to_string_lossy()).unwrap_or(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_are_told_from_r3_commands() {
        for launch in [
            "clang++",
            "clang++-22",
            "/usr/lib/llvm-22/bin/clang",
            "r3-clang++",
            "ccache",
            "/usr/bin/sccache",
            "nvcc",
            "g++",
            "x86_64-linux-gnu-g++",
            "./my-cc",
        ] {
            assert!(is_launch(OsStr::new(launch)), "{launch}");
        }
        for command in [
            "tune", "record", "report", "kernels", "--help", "-V", "doctor",
        ] {
            assert!(!is_launch(OsStr::new(command)), "{command}");
        }
    }
}
