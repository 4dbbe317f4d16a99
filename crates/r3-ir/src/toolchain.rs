//! Finding the external tools r3 works with: the CUDA SDK and clang.
//!
//! One search order, used by every command: an explicit flag, then r3's environment
//! variable, then what `scripts/setup` installed, then the conventional places.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The clang major version r3 is built against; its IR must match the LLVM linked in.
pub const CLANG_MAJOR: u32 = 22;

/// Where a tool was found and why that place was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    /// Which rule of the search order picked it, e.g. "R3_CUDA_PATH".
    pub source: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    #[error(
        "no CUDA SDK found (looked at --cuda-path, R3_CUDA_PATH, {setup}, CUDA_HOME, /usr/local/cuda); \
         fix: run scripts/setup, or set R3_CUDA_PATH to a CUDA root that has bin/ptxas and include/cuda.h"
    )]
    NoCuda { setup: String },
    #[error("{path}: not a CUDA SDK root (no include/cuda.h); fix: point {via} at the directory holding bin/, include/ and nvvm/")]
    BadCuda { path: PathBuf, via: &'static str },
    #[error("no clang {major} found (looked at R3_CLANG, clang++-{major} and clang-{major} on PATH); fix: run scripts/setup or set R3_CLANG")]
    NoClang { major: u32 },
}

/// The per-user cache that `scripts/setup` fills (CUDA SDK), same rule as the script.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("R3_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cache"));
    base.join("r3")
}

pub fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The CUDA SDK that `scripts/setup` assembles.
pub fn setup_cuda_dir() -> PathBuf {
    cache_dir().join("cuda-13.0")
}

fn looks_like_cuda(root: &Path) -> bool {
    root.join("include/cuda.h").is_file()
}

/// Finds the CUDA SDK root. `explicit` is the value of a `--cuda-path` flag.
pub fn find_cuda(explicit: Option<&Path>) -> Result<Found, ToolchainError> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    // Explicit choices must be right: a wrong one is an error, not a reason to look elsewhere.
    let chosen = [
        (explicit.map(Path::to_path_buf), "--cuda-path"),
        (env("R3_CUDA_PATH"), "R3_CUDA_PATH"),
    ];
    for (path, source) in chosen {
        if let Some(path) = path {
            return if looks_like_cuda(&path) {
                Ok(Found { path, source })
            } else {
                Err(ToolchainError::BadCuda { path, via: source })
            };
        }
    }
    let fallbacks = [
        (Some(setup_cuda_dir()), "scripts/setup cache"),
        (env("CUDA_HOME"), "CUDA_HOME"),
        (Some(PathBuf::from("/usr/local/cuda")), "/usr/local/cuda"),
    ];
    fallbacks
        .into_iter()
        .find_map(|(p, source)| {
            p.filter(|p| looks_like_cuda(p))
                .map(|path| Found { path, source })
        })
        .ok_or_else(|| ToolchainError::NoCuda {
            setup: setup_cuda_dir().display().to_string(),
        })
}

/// The CUDA version of an SDK root, from version.json (or the older version.txt).
pub fn cuda_version(root: &Path) -> Option<String> {
    if let Ok(text) = std::fs::read_to_string(root.join("version.json")) {
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        return v["cuda"]["version"].as_str().map(str::to_owned);
    }
    if let Ok(text) = std::fs::read_to_string(root.join("version.txt")) {
        return text.split_whitespace().last().map(str::to_owned);
    }
    // Installs without either file still define CUDA_VERSION (e.g. 13000) in cuda.h.
    let header = std::fs::read_to_string(root.join("include/cuda.h")).ok()?;
    let v: u32 = header
        .lines()
        .find_map(|l| l.trim().strip_prefix("#define CUDA_VERSION"))?
        .trim()
        .parse()
        .ok()?;
    Some(format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// Where the real nvcc is: `R3_NVCC` (used as given, or an error), else the SDK r3 knows, else
/// `nvcc` on PATH that is not r3 itself.
pub fn real_nvcc() -> Result<PathBuf, String> {
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| std::fs::canonicalize(p).ok());
    let is_me = |p: &Path| std::fs::canonicalize(p).ok().is_some_and(|c| Some(c) == me);
    if let Some(v) = std::env::var_os("R3_NVCC").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(&v);
        if is_me(&p) {
            return Err(format!(
                "R3_NVCC={} is r3 itself; fix: point R3_NVCC at the CUDA SDK's bin/nvcc",
                p.display()
            ));
        }
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!(
                "R3_NVCC={} is no executable; fix: point R3_NVCC at the CUDA SDK's bin/nvcc, or unset it",
                p.display()
            ))
        };
    }
    if let Ok(sdk) = find_cuda(None) {
        let p = sdk.path.join("bin/nvcc");
        if is_executable(&p) && !is_me(&p) {
            return Ok(p);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("nvcc"))
        .find(|p| is_executable(p) && !is_me(p))
        .ok_or_else(|| {
            "no nvcc found (looked at R3_NVCC, the CUDA SDK r3 knows, nvcc on PATH); fix: set R3_NVCC to the SDK's bin/nvcc".into()
        })
}

/// Searches PATH for an executable.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The variables that name a clang for `cxx`, in the order they are asked.
fn clang_overrides(cxx: bool) -> &'static [&'static str] {
    if cxx {
        &["R3_CLANGXX", "R3_CLANG"]
    } else {
        &["R3_CLANG"]
    }
}

/// A clang variable that names no executable (a typo, an uninstalled clang): `find_clang`
/// passes over it, and the driver says so once rather than fail the build.
pub fn clang_override_problem(cxx: bool) -> Option<String> {
    clang_overrides(cxx).iter().find_map(|var| {
        let v = std::env::var_os(var).filter(|v| !v.is_empty())?;
        (!is_executable(Path::new(&v))).then(|| {
            format!(
                "{var}={} is no executable, ignored; fix: point {var} at clang {CLANG_MAJOR}, or unset it",
                Path::new(&v).display()
            )
        })
    })
}

/// Which clang to run. `cxx` asks for the C++ driver (clang++), as `r3-clang++` does.
/// R3_CLANGXX (C++ only), then R3_CLANG, where they name an executable; else PATH.
pub fn find_clang(cxx: bool) -> Result<Found, ToolchainError> {
    for var in clang_overrides(cxx) {
        if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            if is_executable(Path::new(&p)) {
                return Ok(Found {
                    path: PathBuf::from(p),
                    source: var,
                });
            }
        }
    }
    let names = if cxx {
        [
            format!("clang++-{CLANG_MAJOR}"),
            format!("clang-{CLANG_MAJOR}"),
        ]
    } else {
        [
            format!("clang-{CLANG_MAJOR}"),
            format!("clang++-{CLANG_MAJOR}"),
        ]
    };
    names
        .iter()
        .find_map(|n| which(n))
        .map(|path| Found {
            path,
            source: "PATH",
        })
        .ok_or(ToolchainError::NoClang { major: CLANG_MAJOR })
}

/// First line of `clang --version`, e.g. "Debian clang version 22.1.8 (...)".
pub fn clang_version(clang: &Path) -> Option<String> {
    let out = Command::new(clang).arg("--version").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_owned)
}

/// The LLVM version r3 is linked with, as "major.minor.patch".
pub fn llvm_version() -> String {
    let (mut major, mut minor, mut patch) = (0u32, 0u32, 0u32);
    // SAFETY: LLVMGetVersion only writes the three integers.
    unsafe { llvm_sys::core::LLVMGetVersion(&mut major, &mut minor, &mut patch) };
    format!("{major}.{minor}.{patch}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_explicit_cuda_path_is_an_error_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let err = find_cuda(Some(dir.path())).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("--cuda-path") && msg.contains("include/cuda.h"),
            "{msg}"
        );
    }

    #[test]
    fn explicit_cuda_path_wins() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("include")).unwrap();
        std::fs::write(dir.path().join("include/cuda.h"), "").unwrap();
        std::fs::write(
            dir.path().join("version.json"),
            r#"{"cuda": {"name": "CUDA SDK", "version": "13.0.88"}}"#,
        )
        .unwrap();
        let found = find_cuda(Some(dir.path())).unwrap();
        assert_eq!(found.source, "--cuda-path");
        assert_eq!(cuda_version(&found.path).as_deref(), Some("13.0.88"));
    }

    #[test]
    fn cuda_version_falls_back_to_cuda_h() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("include")).unwrap();
        std::fs::write(
            dir.path().join("include/cuda.h"),
            "#pragma once\n#define CUDA_VERSION 12090\n",
        )
        .unwrap();
        assert_eq!(cuda_version(dir.path()).as_deref(), Some("12.9"));
    }

    #[test]
    fn linked_llvm_is_22() {
        assert!(llvm_version().starts_with("22."), "{}", llvm_version());
    }
}
