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
            cubin(ptxas, ptx, &arch).ok()
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
