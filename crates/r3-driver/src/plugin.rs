//! r3's capture plugin for clang (src/driver/r3capture.cpp): built once per clang into r3's
//! cache, checked on a small CUDA file, then loaded into the user's own compile with
//! `-fpass-plugin`. It writes each device module as it is before LLVM's passes, so the
//! capture costs a bitcode write instead of a second device front end.
//!
//! When it cannot be had (a clang without plugin support, no LLVM headers), the driver falls
//! back to the separate capture compile (`capture::plan`), which needs neither. The reason is
//! kept in the cache, so a machine without it does not retry on every compile.

use crate::toolchain;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("r3capture.cpp");
/// The environment variable the plugin reads: where to write captured modules.
pub const DIR_ENV: &str = "R3_CAPTURE_DIR";

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("turned off by R3_CAPTURE_PLUGIN=0")]
    Off,
    #[error("{0}")]
    Unavailable(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
}

/// The plugin for `clang`, building and checking it on first use. `R3_CAPTURE_PLUGIN=0`
/// turns it off (the separate capture compile runs instead); `R3_CAPTURE_PLUGIN=FILE` uses
/// that file as it is (a custom build, or a broken one in the tests).
pub fn plugin(clang: &Path) -> Result<PathBuf, PluginError> {
    match std::env::var_os("R3_CAPTURE_PLUGIN") {
        Some(v) if v == "0" => return Err(PluginError::Off),
        Some(v) if !v.is_empty() => return Ok(PathBuf::from(v)),
        _ => {}
    }
    let clang = std::fs::canonicalize(clang).map_err(|err| PluginError::Io {
        what: clang.display().to_string(),
        err,
    })?;
    let dir = cache_dir(&clang)?;
    let so = dir.join("r3capture.so");
    if so.is_file() {
        return Ok(so);
    }
    if let Ok(why) = std::fs::read_to_string(dir.join("unavailable")) {
        return Err(PluginError::Unavailable(why));
    }
    build(&clang, &dir, &so)?;
    Ok(so)
}

/// One cache entry per plugin source and clang binary (path, size, time): an upgraded clang
/// gets a plugin built against its own LLVM.
fn cache_dir(clang: &Path) -> Result<PathBuf, PluginError> {
    let meta = clang.metadata().map_err(|err| PluginError::Io {
        what: clang.display().to_string(),
        err,
    })?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let key =
        blake3::hash(format!("{SOURCE}\0{}\0{}\0{mtime}", clang.display(), meta.len()).as_bytes());
    Ok(toolchain::cache_dir()
        .join("plugin")
        .join(&key.to_hex()[..16]))
}

fn build(clang: &Path, dir: &Path, so: &Path) -> Result<(), PluginError> {
    let io = |what: &str| {
        let what = what.to_owned();
        move |err| PluginError::Io { what, err }
    };
    std::fs::create_dir_all(dir).map_err(io(&dir.display().to_string()))?;
    let tmp = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(dir)
        .map_err(io("a temporary directory"))?;
    match compile_and_check(clang, tmp.path()) {
        // Several compiles may build it at once; each renames a complete, checked file.
        Ok(built) => std::fs::rename(built, so).map_err(io(&so.display().to_string())),
        Err(why) => {
            let marker = tmp.path().join("unavailable");
            std::fs::write(&marker, &why).map_err(io("the plugin's cache"))?;
            std::fs::rename(&marker, dir.join("unavailable")).map_err(io("the plugin's cache"))?;
            Err(PluginError::Unavailable(why))
        }
    }
}

/// Builds the plugin against clang's own LLVM and proves it captures a kernel. Err: why not.
fn compile_and_check(clang: &Path, tmp: &Path) -> Result<PathBuf, String> {
    let bin = clang.parent().ok_or("clang has no directory")?;
    let llvm_config = bin.join("llvm-config");
    let shared = output(Command::new(&llvm_config).arg("--shared-mode"))?;
    if shared.trim() != "shared" {
        return Err(format!(
            "{} links LLVM statically, so it cannot load plugins",
            clang.display()
        ));
    }
    let cxxflags = output(Command::new(&llvm_config).arg("--cxxflags"))?;
    let src = tmp.join("r3capture.cpp");
    let so = tmp.join("r3capture.so");
    std::fs::write(&src, SOURCE).map_err(|e| format!("writing {}: {e}", src.display()))?;
    output(
        Command::new(clang)
            .args(["--driver-mode=g++", "-shared", "-fPIC", "-O2", "-w"])
            .args(cxxflags.split_whitespace())
            .arg(&src)
            .arg("-o")
            .arg(&so),
    )?;
    check(clang, tmp, &so)?;
    Ok(so)
}

/// Compiles a one-kernel CUDA file for the device with the plugin and expects one module.
/// (sm_50: without a CUDA SDK clang assumes PTX 4.2, which newer targets reject.)
fn check(clang: &Path, tmp: &Path, so: &Path) -> Result<(), String> {
    let cu = tmp.join("check.cu");
    let out = tmp.join("check");
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    std::fs::write(
        &cu,
        "__attribute__((global)) void r3_check(float *x) { *x = 1.0f; }\n",
    )
    .map_err(|e| e.to_string())?;
    output(
        Command::new(clang)
            .args(["-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_50"])
            .args(["-nocudainc", "-nocudalib", "-S", "-O2", "-w"])
            .arg(format!("-fpass-plugin={}", so.display()))
            .arg(&cu)
            .arg("-o")
            .arg(tmp.join("check.s"))
            .env(DIR_ENV, &out),
    )?;
    let captured = std::fs::read_dir(&out)
        .map_err(|e| e.to_string())?
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "bc"))
        })
        .count();
    if captured == 1 {
        Ok(())
    } else {
        Err(format!(
            "the plugin loaded but captured {captured} modules of 1"
        ))
    }
}

/// Stdout of a command that must succeed; Err names the command and its first error line.
fn output(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("error"))
        .or_else(|| stderr.lines().next())
        .unwrap_or("no message");
    Err(format!("{:?} failed: {line}", cmd.get_program()))
}
