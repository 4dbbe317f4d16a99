//! Compiles a private copy of a translation unit with the kernel's recorded compile command,
//! device side only, and returns the kernel's module as the driver would have stored it (the
//! same capture compile, the same split and hash). Runs in a temporary directory, under a time
//! limit; diagnostics come back with the copy's path replaced by the user's.

use crate::driver::args;
use crate::ir;
use crate::kernel::KernelModule;
use crate::store::{CompileCommand, KernelRecord};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// r3 could not run the compile at all (no clang, no source in the command): not the
    /// rewrite's fault.
    #[error("{0}")]
    Setup(String),
    /// The compiler rejected the code; the diagnostics are what a repair round is sent.
    #[error("the compile failed:\n{0}")]
    Diagnostics(String),
    #[error("the compile took longer than {0} s")]
    TimedOut(u64),
    /// It compiled, but the kernel is not the recorded one's shape.
    #[error("{0}")]
    Signature(String),
}

/// A kernel's compile, ready to be repeated on other text of its source file.
#[derive(Debug, Clone)]
pub struct Compiler {
    command: CompileCommand,
    /// The source file as the kernel's debug info names it (absolute).
    source: PathBuf,
    /// Index into `command.args` of the argument that names it.
    source_arg: usize,
    arch: String,
    pub timeout: Duration,
}

impl Compiler {
    pub fn for_kernel(k: &KernelRecord, timeout: Duration) -> Result<Compiler, CompileError> {
        let loc = k.signature.source.as_ref().ok_or_else(|| {
            CompileError::Setup(format!(
                "kernel {} has no source location in the store; fix: rebuild with r3-clang++ (it records one)",
                k.signature.demangled
            ))
        })?;
        let source = PathBuf::from(&loc.file);
        let source = if source.is_absolute() {
            source
        } else {
            k.compile.cwd.join(source)
        };
        let same = |a: &str| {
            let p = k.compile.cwd.join(a);
            p == source || p.canonicalize().ok() == source.canonicalize().ok()
        };
        let source_arg = (1..k.compile.args.len())
            .find(|&i| !k.compile.args[i].starts_with('-') && same(&k.compile.args[i]))
            .ok_or_else(|| {
                CompileError::Setup(format!(
                    "kernel {} is defined in {}, which its compile command does not compile (a header?); evolve rewrites kernels defined in the compiled file only",
                    k.signature.demangled,
                    source.display()
                ))
            })?;
        Ok(Compiler {
            command: k.compile.clone(),
            source,
            source_arg,
            arch: k.signature.arch.clone(),
            timeout,
        })
    }

    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Compiles `text` in place of the source file and returns the module of kernel `name`.
    pub fn compile(&self, text: &str, name: &str) -> Result<KernelModule, CompileError> {
        let dir = tempfile::Builder::new()
            .prefix("r3-evolve-")
            .tempdir()
            .map_err(|e| CompileError::Setup(format!("temporary directory: {e}")))?;
        let file_name = self.source.file_name().unwrap_or("variant.cu".as_ref());
        let copy = dir.path().join(file_name);
        std::fs::write(&copy, text)
            .map_err(|e| CompileError::Setup(format!("{}: {e}", copy.display())))?;
        let bc = dir.path().join("device.bc");
        let job = self.device_job(&copy, &bc)?;
        let out = self.run(&job, &copy)?;
        if !out.0 {
            return Err(CompileError::Diagnostics(out.1));
        }
        let ctx = inkwell::context::Context::create();
        let what = format!("{} (rewritten)", self.source.display());
        let module =
            ir::load_file(&ctx, &bc).map_err(|e| CompileError::Setup(format!("{what}: {e}")))?;
        let kernels = ir::extract::split(&module, &what)
            .map_err(|e| CompileError::Setup(format!("{what}: {e}")))?;
        kernels
            .into_iter()
            .find(|k| k.signature.name == name)
            .ok_or_else(|| {
                CompileError::Signature(format!(
                    "the compiled code has no kernel `{name}` (its mangled name changed, so the signature did)"
                ))
            })
    }

    /// The capture compile (`-emit-llvm-bc -disable-llvm-passes`) clang's own plan runs for
    /// the kernel's architecture, with the copy in place of the source.
    fn device_job(&self, copy: &Path, bc: &Path) -> Result<Vec<String>, CompileError> {
        let mut argv = self.command.args[1..].to_vec();
        argv[self.source_arg - 1] = copy.display().to_string();
        // Quoted includes are looked up beside the including file first: keep the user's.
        if let Some(dir) = self.source.parent() {
            argv.push("-iquote".into());
            argv.push(dir.display().to_string());
        }
        let out = self
            .command_for(&self.command.clang)
            .arg("-###")
            .args(&argv)
            .output()
            .map_err(|e| {
                CompileError::Setup(format!(
                    "cannot run {} (the clang that compiled the kernel; evolve needs it to compile rewrites): {e}",
                    self.command.clang.display()
                ))
            })?;
        if !out.status.success() {
            return Err(CompileError::Diagnostics(
                self.user_paths(&String::from_utf8_lossy(&out.stderr), copy),
            ));
        }
        args::parse_jobs(&String::from_utf8_lossy(&out.stderr))
            .iter()
            .filter_map(|j| args::device_job(j, bc))
            .find(|j| j.arch == self.arch)
            .map(|j| j.capture)
            .ok_or_else(|| {
                CompileError::Setup(format!(
                    "the recorded compile command has no device compile for {}",
                    self.arch
                ))
            })
    }

    fn command_for(&self, exe: &Path) -> Command {
        let mut c = Command::new(exe);
        c.current_dir(&self.command.cwd).envs(&self.command.env);
        c
    }

    /// Runs the compile under the time limit: (succeeded, diagnostics).
    fn run(&self, job: &[String], copy: &Path) -> Result<(bool, String), CompileError> {
        let mut child = self
            .command_for(Path::new(&job[0]))
            .args(&job[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| CompileError::Setup(format!("cannot run {}: {e}", job[0])))?;
        let mut err = child.stderr.take().expect("piped");
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if start.elapsed() > self.timeout => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CompileError::TimedOut(self.timeout.as_secs()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(CompileError::Setup(format!("waiting for clang: {e}"))),
            }
        };
        let diagnostics = reader.join().unwrap_or_default();
        Ok((status.success(), self.user_paths(&diagnostics, copy)))
    }

    /// Diagnostics name the user's file, not the private copy.
    fn user_paths(&self, text: &str, copy: &Path) -> String {
        let text = text.replace(
            &copy.display().to_string(),
            &self.source.display().to_string(),
        );
        const MAX: usize = 8 * 1024;
        if text.len() > MAX {
            let cut = (0..=MAX)
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            format!(
                "{}\n[… {} more bytes of diagnostics]",
                &text[..cut],
                text.len() - cut
            )
        } else {
            text
        }
    }
}
