//! nvcc's code of a kernel, the one candidate that is not LLVM's: its translation unit built by
//! nvcc at -O3 for the GPU at hand (`ir::nvcc`), cut down to the kernel and what it uses, and
//! kept in the store (`store::nvcc`), where apply finds it if it wins. Users compare against
//! nvcc, so the search measures it beside the -O3 baseline; what ships is then never slower
//! than the faster of the two compilers on the recorded launches.

use crate::store::nvcc::NvccCode;
use crate::store::{KernelRecord, Store};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// nvcc's code of `kernel` for `sm`: the store's, or made now and kept. Err: why there is none
/// (kept too where it is nvcc's answer, so that it is not asked again; not kept where the
/// machine lacks something another run may have: nvcc itself, the source).
pub fn code(store: &Store, kernel: &KernelRecord, sm: &str) -> Result<String, String> {
    if let Ok(Some(known)) = store.nvcc_code(&kernel.hash, sm) {
        return known.code().map(str::to_owned).map_err(str::to_owned);
    }
    let nvcc = r3_ir::toolchain::real_nvcc()?;
    let compile = &kernel.compile;
    let (source, _) = r3_ir::nvcc::translate(&compile.args, &compile.cwd)?;
    if changed_since_stored(store, kernel, &source) {
        return Err(format!(
            "{} changed after r3-clang++ stored the kernel; rebuild it to measure nvcc's code",
            source.display()
        ));
    }
    let build = unit_ptx(&nvcc, &compile.args, &compile.cwd, sm)?;
    let name = &kernel.signature.name;
    let (ptx, why_not) = match &build.ptx {
        Ok(unit) => match r3_ptx::module::Module::parse(unit) {
            Ok(m) => match m.extract(name) {
                Some(alone) => (Some(alone), None),
                None => (
                    None,
                    Some(format!(
                        "nvcc's PTX of {} has no kernel {name} that stands alone (nvcc names it \
                         otherwise, or its debug sections hold it)",
                        source.display()
                    )),
                ),
            },
            Err(e) => (
                None,
                Some(format!("nvcc's PTX of {}: {e}", source.display())),
            ),
        },
        Err(why) => (None, Some(why.clone())),
    };
    let kept = NvccCode {
        sm: sm.to_owned(),
        nvcc: build.version,
        command: build.command,
        ptx,
        why_not,
    };
    let _ = store.put_nvcc_code(&kernel.hash, &kept);
    kept.code().map(str::to_owned).map_err(str::to_owned)
}

/// Whether the unit's source was written after the kernel was stored: nvcc would compile other
/// code than the kernel's (headers are not looked at; the recordings check the code anyway).
fn changed_since_stored(store: &Store, kernel: &KernelRecord, source: &Path) -> bool {
    let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
    let stored = modified(&store.kernel_dir(&kernel.hash).join("kernel.json"));
    matches!((modified(source), stored), (Some(s), Some(k)) if s > k)
}

type Built = Result<r3_ir::nvcc::Build, String>;

/// A unit's compile (its directory, its argv) for one architecture.
type UnitKey = (PathBuf, Vec<String>, String);

/// A unit's build, once per process: its kernels share it.
fn unit_ptx(nvcc: &Path, args: &[String], cwd: &Path, sm: &str) -> Built {
    static BUILT: OnceLock<Mutex<HashMap<UnitKey, Built>>> = OnceLock::new();
    let key = (cwd.to_owned(), args.to_vec(), sm.to_owned());
    let built = BUILT.get_or_init(Default::default);
    if let Some(b) = built.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return b.clone();
    }
    let b = r3_ir::nvcc::compile(nvcc, args, cwd, sm);
    built
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, b.clone());
    b
}
