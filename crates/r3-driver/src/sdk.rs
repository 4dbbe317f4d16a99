//! The CUDA SDK for clang. clang looks for CUDA only in conventional places (`/usr/local/cuda`,
//! a `ptxas` on PATH, …); r3 also knows the SDK `scripts/setup` installs and `R3_CUDA_PATH`. When
//! a command names no `--cuda-path` and clang would find nothing, the driver passes the SDK r3
//! found, and its library directory to links against cudart, so README's plain command works.

use super::args;
use crate::toolchain;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Arguments that point clang at r3's SDK, where the command needs them; with `-v`, one line
/// says what was added and why.
pub fn additions(clang_args: &[OsString]) -> Vec<OsString> {
    let mut add = sdk_additions(clang_args);
    let all: Vec<OsString> = clang_args.iter().chain(&add).cloned().collect();
    add.extend(cccl(&all));
    add
}

/// CUDA 13 moved thrust, CUB and libcu++ to `include/cccl`, which nvcc searches by itself and
/// clang 22 does not: without it, every program that includes thrust fails to compile with
/// clang. Added after every other directory (`-idirafter`, a system directory as nvcc treats
/// it) where the command's SDK has that layout and the command does not name the directory
/// itself: the SDK keeps copies of some of these headers (`nv/target`) in `include/` too, and
/// those stay the ones found, so a command that compiled without it compiles exactly as before.
fn cccl(args: &[OsString]) -> Option<OsString> {
    // `-###` prints the jobs of the command as written.
    if !args::may_compile_cuda(args) || args.iter().any(|a| a == "-###") {
        return None;
    }
    let root = args::cuda_path_flag(args)?;
    let dir = root.join("include/cccl");
    let moved = dir.join("thrust").is_dir() && !root.join("include/thrust").exists();
    let named = args
        .iter()
        .any(|a| a.to_str().is_some_and(|a| a.contains("include/cccl")));
    (moved && !named).then(|| OsString::from(format!("-idirafter{}", dir.display())))
}

fn sdk_additions(clang_args: &[OsString]) -> Vec<OsString> {
    if let Some(quiet) = quiet_for_r3s_sdk(clang_args) {
        return vec![quiet];
    }
    let compiles = args::may_compile_cuda(clang_args) && args::cuda_path_flag(clang_args).is_none();
    let links = super::runtime::cudart_arg(clang_args).is_some();
    if !(compiles || links) || clang_finds_cuda() {
        return Vec::new();
    }
    let Ok(sdk) = toolchain::find_cuda(None) else {
        return Vec::new(); // clang's own error says what is missing
    };
    let mut add = Vec::new();
    if compiles {
        add.push(OsString::from(format!(
            "--cuda-path={}",
            sdk.path.display()
        )));
        // clang warns that an SDK newer than it knows is only partly supported; the user did
        // not choose this SDK, r3 did, so the warning is r3's to silence.
        add.push(OsString::from("-Wno-unknown-cuda-version"));
    }
    let lib = sdk.path.join("lib");
    if links && !cudart_reachable(clang_args) && lib.is_dir() {
        add.push(OsString::from(format!("-L{}", lib.display())));
    }
    if !add.is_empty() && clang_args.iter().any(|a| a == "-v") {
        let shown: Vec<_> = add.iter().map(|a| a.to_string_lossy()).collect();
        eprintln!(
            "r3: clang finds no CUDA installation here; added {} (the SDK r3 found: {})",
            shown.join(" "),
            sdk.source
        );
    }
    add
}

/// A command that names r3's own SDK by `--cuda-path` (CMake passes it for CUDAToolkit_ROOT)
/// gets clang's warning about an SDK newer than it knows silenced, as when r3 adds the path:
/// r3's setup installs that SDK for this clang, and the warning would come with every compile.
fn quiet_for_r3s_sdk(clang_args: &[OsString]) -> Option<OsString> {
    let named = args::cuda_path_flag(clang_args)?;
    let says = clang_args.iter().any(|a| {
        a.to_str()
            .is_some_and(|a| a.ends_with("unknown-cuda-version"))
    });
    if says || !args::may_compile_cuda(clang_args) {
        return None;
    }
    let ours = toolchain::find_cuda(None).ok()?.path;
    let same = std::fs::canonicalize(&named).ok()? == std::fs::canonicalize(ours).ok()?;
    same.then(|| OsString::from("-Wno-unknown-cuda-version"))
}

/// Whether clang would find a CUDA installation by itself: the places its detector tries.
fn clang_finds_cuda() -> bool {
    let mut roots = vec![
        PathBuf::from("/usr/local/cuda"),
        PathBuf::from("/usr/lib/cuda"),
    ];
    if let Ok(dir) = std::fs::read_dir("/usr/local") {
        roots.extend(
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().starts_with("/usr/local/cuda-")),
        );
    }
    if let Some(bin) = toolchain::which("ptxas").and_then(|p| std::fs::canonicalize(p).ok()) {
        roots.extend(bin.parent().and_then(Path::parent).map(Path::to_path_buf));
    }
    roots
        .iter()
        .any(|r| r.join("include/cuda.h").is_file() && r.join("bin").is_dir())
}

/// Whether a `-L` directory of the command (or LIBRARY_PATH) already holds cudart.
fn cudart_reachable(clang_args: &[OsString]) -> bool {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut it = clang_args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        match a.strip_prefix("-L") {
            Some("") => dirs.extend(it.next().map(PathBuf::from)),
            Some(d) => dirs.push(PathBuf::from(d)),
            None => {}
        }
    }
    if let Some(lp) = std::env::var_os("LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&lp));
    }
    dirs.iter().any(|d| {
        ["libcudart_static.a", "libcudart.so"]
            .iter()
            .any(|f| d.join(f).exists())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_directory_holding_cudart_is_seen_in_either_spelling() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("libcudart_static.a"), b"").unwrap();
        let d = dir.path().display().to_string();
        let joined: Vec<OsString> = vec![format!("-L{d}").into(), "-lcudart_static".into()];
        let split: Vec<OsString> = vec!["-L".into(), d.clone().into(), "-lcudart_static".into()];
        assert!(cudart_reachable(&joined));
        assert!(cudart_reachable(&split));
        assert!(!cudart_reachable(&["-L/nonexistent".into()]));
    }
}
