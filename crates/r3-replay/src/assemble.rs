//! Candidates' PTX assembled by the CUDA SDK's `ptxas` into the GPU's own code, then loaded.
//!
//! Two reasons. What ships is `ptxas`'s code: an applied build's kernels are assembled by the
//! SDK's `ptxas` that clang runs (`r3_apply::shim`), not compiled by the driver at load. And the
//! driver compiles one PTX module at a time per context: loading a short kernel's candidates
//! ahead on eight threads (`cuModuleLoadData`) took 31 ms a candidate against 18 ms loaded one
//! by one (H200, 2026-11-29, `R3_TIMELINE`), while `ptxas` processes run side by side. Loading
//! the resulting cubin is a copy.
//!
//! Every code of a session, the baseline's included, goes the same way, so that a candidate and
//! -O3 are compared as the same compiler made them. Where there is no `ptxas` (`R3_PTXAS=off`,
//! or none found) or it refuses a PTX, the driver compiles it, as before.
//!
//! Within one `r3 tune`, `ptxas`'s code is kept in the run's shared directory ([`kept_dir`])
//! by the hash of the `ptxas`, the architecture and the PTX, and the search assembles each
//! candidate there as it lowers it ([`assemble_ahead`]), on its lowering threads. A worker's load
//! then finds it: a short kernel's candidate arrives one at a time, and its `ptxas` (28 ms
//! median) had come after the lowering and before the measurement (10 ms), on the GPU's clock
//! (H200, run H, 2026-11-29). Every fresh context of a confirmation, and every worker opened
//! again on a kernel, finds the baseline's code there too.

use cudarc::driver::sys::{self, CUresult};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The `ptxas` candidates are assembled with: `R3_PTXAS` (a path, or `off`), else the SDK r3
/// builds with (`r3_ir::toolchain::find_cuda`), else the first on PATH.
pub fn ptxas() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            chosen(std::env::var_os("R3_PTXAS").as_deref().map(Path::new)).unwrap_or_else(|| {
                r3_ir::toolchain::find_cuda(None)
                    .ok()
                    .map(|sdk| sdk.path.join("bin/ptxas"))
                    .filter(|p| p.is_file())
                    .or_else(|| r3_ir::toolchain::which("ptxas"))
            })
        })
        .as_deref()
}

/// What `R3_PTXAS` says: Some(None) for `off` (the driver compiles), Some(path) for a path;
/// None where unset or empty (look for one).
fn chosen(var: Option<&Path>) -> Option<Option<PathBuf>> {
    let var = var.filter(|v| !v.as_os_str().is_empty())?;
    Some((var != Path::new("off")).then(|| var.to_path_buf()))
}

/// The GPU code `ptxas` makes of `ptx` for `arch` (`sm_90`), or why it made none.
pub fn cubin(ptxas: &Path, ptx: &str, arch: &str) -> Result<Vec<u8>, String> {
    let dir = tempfile::Builder::new()
        .prefix("r3-ptxas-")
        .tempdir()
        .map_err(|e| format!("a temporary directory: {e}"))?;
    let (input, output) = (dir.path().join("k.ptx"), dir.path().join("k.cubin"));
    std::fs::write(&input, ptx).map_err(|e| format!("{}: {e}", input.display()))?;
    let out = std::process::Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-O3")
        .arg("-o")
        .arg(&output)
        .arg(&input)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", ptxas.display()))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "{} exited with {}: {}",
            ptxas.display(),
            out.status,
            why.lines().next().unwrap_or("")
        ));
    }
    std::fs::read(&output).map_err(|e| format!("{}: {e}", output.display()))
}

/// The directory `ptxas`'s code is kept in for the other processes of this run: `cubins/` in the
/// run's shared directory (`shared`). None outside a run that shares one.
fn kept_dir() -> Option<PathBuf> {
    let dir = crate::shared::named()?.join("cubins");
    // Not create_dir_all: a run's directory that is gone is not made again.
    match std::fs::create_dir(&dir) {
        Ok(()) => Some(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Some(dir),
        Err(_) => None,
    }
}

/// The file `ptxas`'s code of `ptx` for `arch` is kept in, under `dir`.
fn kept_file(dir: &Path, ptxas: &Path, ptx: &str, arch: &str) -> PathBuf {
    let mut h = blake3::Hasher::new();
    for part in [
        ptxas.as_os_str().as_encoded_bytes(),
        arch.as_bytes(),
        ptx.as_bytes(),
    ] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    dir.join(format!("{}.cubin", h.finalize().to_hex()))
}

/// [`cubin`], kept in `dir` (where there is one) for the next process of the run that loads
/// the same PTX. A kept file is written whole under a temporary name, then renamed: a reader
/// finds all of it or none. A damaged one fails its load, and the driver compiles the PTX.
pub fn cubin_kept(
    dir: Option<&Path>,
    ptxas: &Path,
    ptx: &str,
    arch: &str,
) -> Result<Vec<u8>, String> {
    let file = dir.map(|d| kept_file(d, ptxas, ptx, arch));
    if let Some(code) = file.as_ref().and_then(|f| std::fs::read(f).ok()) {
        return Ok(code);
    }
    let code = cubin(ptxas, ptx, arch)?;
    if let Some(file) = file {
        keep(&file, &code);
    }
    Ok(code)
}

/// Writes `code` to `file` through a temporary file beside it; nothing where it cannot (the
/// next load assembles again). Not synced: the directory lasts one run.
fn keep(file: &Path, code: &[u8]) {
    use std::io::Write;
    let Some(dir) = file.parent() else { return };
    let Ok(mut tmp) = tempfile::NamedTempFile::new_in(dir) else {
        return;
    };
    if tmp.write_all(code).is_ok() {
        let _ = tmp.persist(file);
    }
}

/// Assembles `ptx` for `arch` into the run's kept code, on the calling thread, where the run
/// keeps code and a `ptxas` is found: the worker that loads it next finds it ready.
pub fn assemble_ahead(ptx: &str, arch: &str) {
    let (Some(ptxas), Some(dir)) = (ptxas(), kept_dir()) else {
        return;
    };
    let _span = crate::timeline::span("lower.ptxas", String::new);
    let _ = cubin_kept(Some(&dir), ptxas, ptx, arch);
}

/// The architecture of the current context's GPU, as `ptxas` names it (`sm_90`).
///
/// # Safety
/// A CUDA context must be current on the calling thread.
unsafe fn current_arch() -> Option<String> {
    static ARCH: OnceLock<Option<String>> = OnceLock::new();
    ARCH.get_or_init(|| {
        let mut dev = 0;
        if sys::cuCtxGetDevice(&mut dev) != CUresult::CUDA_SUCCESS {
            return None;
        }
        let attr = |a| {
            let mut v = 0;
            (sys::cuDeviceGetAttribute(&mut v, a, dev) == CUresult::CUDA_SUCCESS).then_some(v)
        };
        use sys::CUdevice_attribute::*;
        let major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        Some(format!("sm_{major}{minor}"))
    })
    .clone()
}

/// `ptx` loaded into the current context: assembled by [`ptxas`] where it can be, else compiled
/// by the driver; with the driver's error where neither loads.
///
/// # Safety
/// A CUDA context must be current on the calling thread.
pub unsafe fn load(ptx: &str) -> Result<sys::CUmodule, CUresult> {
    let assembled = match (ptxas(), current_arch()) {
        (Some(ptxas), Some(arch)) => {
            let _span = crate::timeline::span("load.ptxas", String::new);
            cubin_kept(kept_dir().as_deref(), ptxas, ptx, &arch).ok()
        }
        _ => None,
    };
    let mut module = std::ptr::null_mut();
    if let Some(code) = assembled {
        if sys::cuModuleLoadData(&mut module, code.as_ptr() as *const _) == CUresult::CUDA_SUCCESS {
            return Ok(module);
        }
    }
    let _span = crate::timeline::span("load.jit", String::new);
    let text = CString::new(ptx).map_err(|_| CUresult::CUDA_ERROR_INVALID_PTX)?;
    match sys::cuModuleLoadData(&mut module, text.as_ptr() as *const _) {
        CUresult::CUDA_SUCCESS => Ok(module),
        e => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r3_ptxas_off_leaves_compiling_to_the_driver_and_a_path_is_taken_as_given() {
        assert_eq!(chosen(Some(Path::new("off"))), Some(None));
        assert_eq!(
            chosen(Some(Path::new("/opt/cuda/bin/ptxas"))),
            Some(Some(PathBuf::from("/opt/cuda/bin/ptxas")))
        );
        assert_eq!(chosen(Some(Path::new(""))), None);
        assert_eq!(chosen(None), None);
    }

    /// A stand-in `ptxas` that counts its runs in `runs` and writes `code` as its output.
    fn counting_ptxas(dir: &Path, code: &str) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let (exe, runs) = (dir.join("ptxas"), dir.join("runs"));
        let script = format!(
            "#!/bin/sh\necho run >> {}\nwhile [ \"$1\" != -o ]; do shift; done\nprintf {code} > \"$2\"\n",
            runs.display()
        );
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        (exe, runs)
    }

    #[test]
    fn kept_code_is_assembled_once_per_ptxas_architecture_and_ptx() {
        let (tools, kept) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (ptxas, runs) = counting_ptxas(tools.path(), "CODE");
        let ran = || std::fs::read_to_string(&runs).map_or(0, |s| s.lines().count());
        let ptx = ".visible .entry k() { ret; }";
        for _ in 0..3 {
            assert_eq!(
                cubin_kept(Some(kept.path()), &ptxas, ptx, "sm_90").unwrap(),
                b"CODE"
            );
        }
        assert_eq!(ran(), 1, "the second and third loads read the kept code");
        cubin_kept(Some(kept.path()), &ptxas, ptx, "sm_80").unwrap();
        cubin_kept(Some(kept.path()), &ptxas, "// other\n", "sm_90").unwrap();
        assert_eq!(ran(), 3, "another architecture or PTX is assembled anew");
        // Without a directory nothing is kept.
        cubin_kept(None, &ptxas, ptx, "sm_90").unwrap();
        assert_eq!(ran(), 4);
        let files = std::fs::read_dir(kept.path()).unwrap().count();
        assert_eq!(files, 3, "one file per code, no temporary file left");
    }

    #[test]
    fn a_refused_ptx_is_not_kept() {
        let (tools, kept) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let exe = tools.path().join("ptxas");
        std::fs::write(&exe, "#!/bin/sh\necho 'ptxas fatal: bad' >&2\nexit 255\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let why = cubin_kept(Some(kept.path()), &exe, "x", "sm_90").unwrap_err();
        assert!(why.contains("ptxas fatal: bad"), "{why}");
        assert_eq!(std::fs::read_dir(kept.path()).unwrap().count(), 0);
    }

    /// The SDK's ptxas, where this machine has one (scripts/setup installs it; CI runs it).
    #[test]
    fn ptxas_assembles_a_kernel_and_says_why_it_refuses_one() {
        let Some(ptxas) = r3_ir::toolchain::find_cuda(None)
            .ok()
            .map(|s| s.path.join("bin/ptxas"))
            .filter(|p| p.is_file())
        else {
            panic!("no CUDA SDK with ptxas: run scripts/setup");
        };
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
        let code = cubin(&ptxas, ptx, "sm_90").unwrap();
        assert_eq!(&code[..4], b"\x7fELF", "a cubin is an ELF image");
        let why = cubin(&ptxas, ".version 8.0\n.target sm_90\nnonsense", "sm_90").unwrap_err();
        assert!(why.contains("exited with"), "{why}");
    }
}
