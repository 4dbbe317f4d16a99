//! Recording support at link time: programs linked by r3's driver against cudart get r3's
//! recording runtime (crates/r3-driver/src/runtime/r3rt.c) and `--wrap` for the CUDA calls it intercepts.
//! `--wrap` rewrites the program's own references, so this works with the static cudart that
//! clang links by default, and needs no LD_PRELOAD at run time.

use crate::toolchain;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("runtime/r3rt.c");

/// The CUDA runtime and registration functions the runtime wraps.
pub const WRAPPED: &[&str] = &[
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaMalloc",
    "cudaMallocAsync",
    "cudaMallocPitch",
    "cudaMallocManaged",
    "cudaHostAlloc",
    "cudaMallocHost",
    "cudaHostRegister",
    "cudaFreeHost",
    "cudaHostUnregister",
    "cudaFree",
    "cudaFreeAsync",
    "cudaGraphLaunch",
    // A capture into a graph in progress: nothing is recorded meanwhile.
    "cudaStreamBeginCapture",
    "cudaStreamEndCapture",
    "cudaDeviceEnablePeerAccess",
    "cudaCreateTextureObject",
    "cudaCreateSurfaceObject",
    "__cudaRegisterFatBinary",
    "__cudaRegisterFunction",
    "__cudaRegisterVar",
    // Mirrored onto a kernel's variants, and a launch apply's dispatch chooses for.
    "cudaFuncSetAttribute",
    "cudaLaunchKernelExC",
    // Time-only runs fold the launches' events in flight before the context goes.
    "cudaDeviceReset",
    // What code compiled for the per-thread default stream calls instead.
    "cudaLaunchKernel_ptsz",
    "cudaLaunchCooperativeKernel_ptsz",
    "cudaMallocAsync_ptsz",
    "cudaFreeAsync_ptsz",
    "cudaGraphLaunch_ptsz",
    "cudaStreamBeginCapture_ptsz",
    "cudaStreamEndCapture_ptsz",
    "cudaLaunchKernelExC_ptsz",
];

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("building r3's recording runtime failed: {0}")]
    Build(String),
    #[error(transparent)]
    Toolchain(#[from] toolchain::ToolchainError),
}

/// The cudart argument of a link command (`-lcudart_static`, `-lcudart`, or a path to the
/// library), when the command links a CUDA program.
pub fn cudart_arg(args: &[OsString]) -> Option<String> {
    let is_link = !args.iter().any(|a| {
        matches!(
            a.to_str(),
            Some("-c" | "-S" | "-E" | "-M" | "-MM" | "-fsyntax-only" | "-###")
        )
    });
    if !is_link {
        return None;
    }
    args.iter().filter_map(|a| a.to_str()).find_map(|a| {
        let name = a.rsplit('/').next().unwrap_or(a);
        (a.starts_with("-lcudart") || name.starts_with("libcudart")).then(|| a.to_owned())
    })
}

/// Links the recording runtime stays out of: CMake's checks (`try_compile` names its programs
/// `cmTC_…`; CMake reads the libraries such a link passes as the compiler's own and adds them
/// to every link of the build, and the runtime is a file in r3's cache), and shared libraries
/// (the runtime needs libzstd, whose static archive is not position-independent; the program
/// that loads the library records).
pub fn stays_out(args: &[OsString]) -> bool {
    let cmake_check = crate::args::output_of(args)
        .and_then(|o| {
            o.file_name()
                .map(|n| n.to_string_lossy().starts_with("cmTC_"))
        })
        .unwrap_or(false);
    cmake_check || args.iter().any(|a| a == "-shared")
}

/// The symbol that tells the runtime the program calls CUDA IPC (defined by the link, read
/// weakly by r3rt.c): memory another process opens must be cudaMalloc's own, and a recording
/// maps the program's memory itself, so such a program is not recorded. cuda-samples'
/// simpleIPC exited 1 under `r3 record` (`cudaIpcGetMemHandle` refused r3's memory; H200,
/// 2026-11-29).
pub const IPC_SYMBOL: &str = "r3_program_uses_cuda_ipc";

/// The CUDA IPC calls that need cudaMalloc's memory.
const IPC_CALLS: [&str; 2] = ["cudaIpcGetMemHandle", "cudaIpcOpenMemHandle"];

/// Whether an object or archive the link names calls CUDA IPC: its bytes name one of the calls
/// (an undefined symbol's name is in its string table). CUDA's own runtime libraries name them
/// whether the program calls them or not, and are left out.
pub fn uses_cuda_ipc(clang_args: &[OsString]) -> bool {
    let finders: Vec<memchr::memmem::Finder> = IPC_CALLS
        .iter()
        .map(|c| memchr::memmem::Finder::new(c.as_bytes()))
        .collect();
    clang_args
        .iter()
        .map(Path::new)
        .filter(|p| is_linked_file(p))
        .any(|p| {
            std::fs::read(p).is_ok_and(|bytes| finders.iter().any(|f| f.find(&bytes).is_some()))
        })
}

/// An input file of a link that may hold the program's code: an object or a static archive,
/// not one of CUDA's runtime libraries.
fn is_linked_file(p: &Path) -> bool {
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let ours = [".o", ".obj", ".a", ".lo"]
        .iter()
        .any(|e| name.ends_with(e));
    ours && !name.starts_with("libcuda") && !name.starts_with('-') && p.is_file()
}

/// Extra link arguments for recording support, appended after the user's own; `ipc`: the
/// program calls CUDA IPC ([`IPC_SYMBOL`]).
pub fn link_args(archive: &Path, cudart: &str, ipc: bool) -> Vec<OsString> {
    let wraps: Vec<String> = WRAPPED.iter().map(|f| format!("--wrap={f}")).collect();
    let ipc = ipc.then(|| format!("-Wl,--defsym={IPC_SYMBOL}=1"));
    [
        // An earlier `-x cuda` would make clang read the archive as CUDA source.
        "-x".into(),
        "none".into(),
        format!("-Wl,{}", wraps.join(",")),
        archive.display().to_string(),
        // The wrappers' __real_ references are resolved after cudart was scanned once.
        cudart.to_owned(),
        "-l:libzstd.a".into(),
        "-ldl".into(),
        "-lpthread".into(),
    ]
    .into_iter()
    .chain(ipc)
    .map(OsString::from)
    .collect()
}

/// The runtime archive for this r3 and CUDA SDK, built once into r3's cache.
pub fn archive(cuda_flag: Option<&Path>) -> Result<PathBuf, RuntimeError> {
    let cuda = toolchain::find_cuda(cuda_flag)?.path;
    let clang = toolchain::find_clang(false)?.path;
    let key = blake3::hash(format!("{SOURCE}\0{}\0{}", cuda.display(), clang.display()).as_bytes());
    let dir = toolchain::cache_dir()
        .join("runtime")
        .join(&key.to_hex()[..16]);
    let lib = dir.join("libr3rt.a");
    if lib.exists() {
        return Ok(lib);
    }
    build(&clang, &cuda, &dir, &lib)?;
    Ok(lib)
}

fn build(clang: &Path, cuda: &Path, dir: &Path, lib: &Path) -> Result<(), RuntimeError> {
    let fail = |what: &str, e: &dyn std::fmt::Display| RuntimeError::Build(format!("{what}: {e}"));
    std::fs::create_dir_all(dir).map_err(|e| fail(&dir.display().to_string(), &e))?;
    let tmp = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(dir)
        .map_err(|e| fail("temp dir", &e))?;
    let src = tmp.path().join("r3rt.c");
    let obj = tmp.path().join("r3rt.o");
    let ar = tmp.path().join("libr3rt.a");
    std::fs::write(&src, SOURCE).map_err(|e| fail("writing r3rt.c", &e))?;
    let include = cuda.join("include");
    run(Command::new(clang)
        .args(["-std=c11", "-O2", "-fPIC", "-w", "-c"])
        .arg(&src)
        .arg("-I")
        .arg(&include)
        .arg("-o")
        .arg(&obj))?;
    run(Command::new("ar").arg("rcs").arg(&ar).arg(&obj))?;
    // Several compiles may build it at once; each renames a complete archive into place.
    std::fs::rename(&ar, lib).map_err(|e| fail(&lib.display().to_string(), &e))
}

fn run(cmd: &mut Command) -> Result<(), RuntimeError> {
    let out = cmd
        .output()
        .map_err(|e| RuntimeError::Build(format!("{cmd:?}: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    Err(RuntimeError::Build(format!(
        "{:?} failed: {msg}",
        cmd.get_program()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn only_links_against_cudart_get_the_runtime() {
        assert_eq!(
            cudart_arg(&os(&["a.o", "-o", "app", "-lcudart_static"])).as_deref(),
            Some("-lcudart_static")
        );
        assert_eq!(
            cudart_arg(&os(&["a.o", "/sdk/lib/libcudart.so.13"])).as_deref(),
            Some("/sdk/lib/libcudart.so.13")
        );
        assert_eq!(cudart_arg(&os(&["-c", "a.cu", "-lcudart_static"])), None);
        assert_eq!(cudart_arg(&os(&["a.o", "-o", "app"])), None);
    }

    #[test]
    fn cmake_checks_and_shared_libraries_link_without_the_runtime() {
        assert!(stays_out(&os(&[
            "a.o",
            "-o",
            "cmTC_1f2e3",
            "-lcudart_static"
        ])));
        assert!(stays_out(&os(&[
            "-shared",
            "a.o",
            "-o",
            "libk.so",
            "-lcudart_static"
        ])));
        assert!(!stays_out(&os(&["a.o", "-o", "app", "-lcudart_static"])));
    }

    #[test]
    fn a_link_whose_objects_call_cuda_ipc_defines_the_symbol_and_cudas_libraries_do_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            OsString::from(p)
        };
        let plain = file("main.o", b"\x7fELF...cudaMalloc\0cudaLaunchKernel\0");
        let ipc = file("ipc.o", b"\x7fELF...cudaIpcGetMemHandle\0");
        let cudart = file("libcudart_static.a", b"!<arch>...cudaIpcOpenMemHandle\0");
        let flag = |o: &OsString| OsString::from(format!("-L{}", o.to_string_lossy()));
        assert!(!uses_cuda_ipc(&[plain.clone(), cudart.clone(), flag(&ipc)]));
        assert!(uses_cuda_ipc(&[plain, ipc, cudart]));
        let defsym = format!("-Wl,--defsym={IPC_SYMBOL}=1");
        let with = link_args(Path::new("/c/libr3rt.a"), "-lcudart_static", true);
        assert!(with.iter().any(|a| *a == *defsym), "{with:?}");
        let without = link_args(Path::new("/c/libr3rt.a"), "-lcudart_static", false);
        assert!(!without.iter().any(|a| *a == *defsym));
    }

    #[test]
    fn link_args_wrap_every_function_then_repeat_cudart() {
        let args = link_args(Path::new("/c/libr3rt.a"), "-lcudart_static", false);
        let text: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(&text[..2], ["-x", "none"]);
        assert!(
            text[2].contains("--wrap=cudaLaunchKernel,")
                && text[2].contains("--wrap=__cudaRegisterVar")
        );
        assert_eq!(&text[3..5], ["/c/libr3rt.a", "-lcudart_static"]);
    }
}
