//! A proposed rewrite made into variant kernels: checked by the guard, spliced into a private
//! copy of the user's file and compiled with the kernel's recorded command, once per build
//! where it has knobs (`params`); or the event that says why it gave none.

use crate::compile;
use crate::error::EvolveError;
use crate::guard;
use crate::params;
use crate::source;
use crate::store::attempts::What;
use crate::store::KernelRecord;
use std::time::Duration;

/// The kernel's source file as the loop edits (copies of) it.
pub struct Source {
    pub original: String,
    pub region: source::Region,
    pub compiler: compile::Compiler,
}

impl Source {
    /// The kernel's file and its region, with the recorded compile; Err where the file no
    /// longer compiles to the stored kernel.
    pub fn open(kernel: &KernelRecord, compile_timeout: Duration) -> Result<Source, EvolveError> {
        let name = kernel.signature.demangled.clone();
        let compiler = compile::Compiler::for_kernel(kernel, compile_timeout).map_err(|e| {
            EvolveError::Compile {
                kernel: name.clone(),
                msg: e.to_string(),
            }
        })?;
        let path = compiler.source().to_owned();
        let original = std::fs::read_to_string(&path).map_err(|e| EvolveError::Read {
            kernel: name.clone(),
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
        let line = kernel.signature.source.as_ref().map_or(0, |s| s.line);
        let region = source::region(
            &original,
            &path.display().to_string(),
            &crate::kernel::unqualified_name(&kernel.signature.demangled),
            line,
        )?;
        let src = Source {
            original,
            region,
            compiler,
        };
        src.check_unchanged(kernel)?;
        Ok(src)
    }

    /// The file must still compile to the stored kernel, or diffs would not apply to the code
    /// that was measured.
    fn check_unchanged(&self, kernel: &KernelRecord) -> Result<(), EvolveError> {
        let km = self
            .compiler
            .compile(&self.original, &kernel.signature.name)
            .map_err(|e| EvolveError::Compile {
                kernel: kernel.signature.demangled.clone(),
                msg: format!("compiling the unchanged source: {e}"),
            })?;
        if km.hash != kernel.hash {
            return Err(EvolveError::SourceChanged {
                kernel: kernel.signature.demangled.clone(),
                path: self.compiler.source().display().to_string(),
                was: kernel.hash.to_string(),
                now: km.hash.to_string(),
            });
        }
        Ok(())
    }

    /// What compiling `rewrite` gives: the variant's module and diff, or the event that says
    /// why there is none.
    /// A rewrite with knobs compiles once per value combination its constraints admit for
    /// the recorded blocks (`blocks`).
    pub fn compile(
        &self,
        kernel: &KernelRecord,
        rewrite: &str,
        blocks: &[[u32; 3]],
    ) -> Result<Compiled, EvolveError> {
        let checked = match guard::check(&self.original, &self.region, rewrite) {
            Ok(c) => c,
            Err(reason) => return Ok(Compiled::Not(What::Refused { reason })),
        };
        if !checked.template.has_knobs() {
            return self.compile_text(kernel, &checked, "", "");
        }
        let values = match checked.template.builds(blocks) {
            Ok(v) => v,
            Err(reason) => return Ok(Compiled::Not(What::Refused { reason })),
        };
        let mut builds: Vec<(params::Values, crate::kernel::KernelModule, String)> = Vec::new();
        let mut first_failure = None;
        let compiled = self.compile_each(kernel, &checked, &values);
        for (v, c) in values.into_iter().zip(compiled) {
            match c? {
                Compiled::Variant(km, diff) => {
                    // Values the code does not tell apart build once.
                    if !builds.iter().any(|(_, k, _)| k.hash == km.hash) {
                        builds.push((v, km, diff));
                    }
                }
                Compiled::Not(what) => {
                    first_failure.get_or_insert((v, what));
                }
                Compiled::Builds(_) => unreachable!("compile_text builds one variant"),
            }
        }
        if builds.is_empty() {
            let (v, what) = first_failure.expect("at least one combination");
            return Ok(Compiled::Not(match what {
                What::CompileFailed { diagnostics } => What::CompileFailed {
                    diagnostics: format!("with {}: {diagnostics}", params::words(&v)),
                },
                other => other,
            }));
        }
        Ok(Compiled::Builds(builds))
    }

    /// Each combination of `values` compiled, in their order; as many compiles at once as
    /// there are cores, since a template asks for up to 64 and each is a whole clang run.
    fn compile_each(
        &self,
        kernel: &KernelRecord,
        checked: &guard::Checked,
        values: &[params::Values],
    ) -> Vec<Result<Compiled, EvolveError>> {
        let undef = checked.template.undefines();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let slots: Vec<std::sync::Mutex<Option<Result<Compiled, EvolveError>>>> =
            values.iter().map(|_| Default::default()).collect();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(values.len());
        std::thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(v) = values.get(i) else { break };
                    let c = self.compile_text(kernel, checked, &params::defines(v), &undef);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
                });
            }
        });
        slots
            .into_iter()
            .map(|s| {
                s.into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .expect("every combination is compiled")
            })
            .collect()
    }

    /// Splices the checked code (between `before` and `after`) and compiles it.
    fn compile_text(
        &self,
        kernel: &KernelRecord,
        checked: &guard::Checked,
        before: &str,
        after: &str,
    ) -> Result<Compiled, EvolveError> {
        let text = self.region.splice_between(
            &self.original,
            &checked.text,
            &checked.functions,
            before,
            after,
        );
        let what = match self.compiler.compile(&text, &kernel.signature.name) {
            Err(compile::CompileError::Diagnostics(d)) => What::CompileFailed { diagnostics: d },
            Err(e @ compile::CompileError::TimedOut(_)) => What::CompileFailed {
                diagnostics: e.to_string(),
            },
            Err(e @ compile::CompileError::Signature(_)) => What::Refused {
                reason: e.to_string(),
            },
            Err(compile::CompileError::Setup(msg)) => {
                return Err(EvolveError::Compile {
                    kernel: kernel.signature.demangled.clone(),
                    msg,
                })
            }
            Ok(km) if km.signature.params != kernel.signature.params => What::Refused {
                reason: "the kernel's parameters changed in the compiled code".into(),
            },
            Ok(km) => {
                let diff = unified_diff(
                    &self.original,
                    &text,
                    &kernel.compile.cwd,
                    self.compiler.source(),
                );
                return Ok(Compiled::Variant(km, diff));
            }
        };
        Ok(Compiled::Not(what))
    }
}

pub enum Compiled {
    Variant(crate::kernel::KernelModule, String),
    /// A rewrite with knobs: each build that compiled, with its values and diff.
    Builds(Vec<(params::Values, crate::kernel::KernelModule, String)>),
    Not(What),
}

/// The diff from the user's file to the rewritten one, with the path as the compile names it.
pub fn unified_diff(old: &str, new: &str, cwd: &std::path::Path, file: &std::path::Path) -> String {
    let name = file.strip_prefix(cwd).unwrap_or(file).display().to_string();
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string()
}
