//! Lowering a candidate as the search and the tools do it: in this process (`lower_in_process`,
//! for the baseline and for tools), or in a child process (`r3 __lower`, `lower_isolated`),
//! since some pass orders crash or hang LLVM: such a candidate costs its child, and comes back
//! as a compile failure naming what happened.

use super::{Codegen, CompileFailure, Lowered};
use crate::candidate::Candidate;
use std::time::Duration;

/// Lowers in this process: for the baseline and for tools; the search goes through
/// `lower_isolated`, since some pass orders crash LLVM.
pub fn lower_in_process(
    bitcode: &[u8],
    kernel_hash: &crate::kernel::KernelHash,
    c: &Candidate,
    target: &Codegen,
    mutation: Option<(crate::mutate::Mutation, crate::mutate::Facts)>,
) -> Result<Lowered, CompileFailure> {
    let err = |e: &dyn std::fmt::Display| CompileFailure {
        message: e.to_string(),
    };
    let ctx = inkwell::context::Context::create();
    let module = crate::load_bytes(&ctx, bitcode, kernel_hash).map_err(|e| err(&e))?;
    let mut mutated = true;
    let mut ir_instructions = 0;
    let t = super::lower_candidate(&module, c, target, |m| {
        if let Some((mu, facts)) = mutation {
            mutated = crate::mutate::apply(m, mu, facts);
        }
        ir_instructions = crate::instruction_count(m);
    })
    .map_err(|e| err(&e))?;
    if !mutated {
        return Err(CompileFailure {
            message: format!(
                "mutation {:?} found nothing to change",
                mutation.map(|(m, _)| m)
            ),
        });
    }
    Ok(Lowered {
        candidate: c.clone(),
        ptx_hash: crate::kernel::PtxHash::of_ptx(&t.ptx),
        stats: crate::ptx::stats::stats(&t.ptx),
        ptx: t.ptx,
        passes_ms: t.passes_ms,
        codegen_ms: t.codegen_ms,
        ir_instructions,
    })
}

/// What `r3 __lower` reads on stdin: one candidate to lower from a stored module.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct LowerJob {
    pub bitcode: std::path::PathBuf,
    pub kernel_hash: crate::kernel::KernelHash,
    pub candidate: Candidate,
    pub target: Codegen,
    pub mutation: Option<(crate::mutate::Mutation, crate::mutate::Facts)>,
}

/// The child side of isolated lowering: one job from stdin, the result (JSON) to stdout.
pub fn serve_lower() -> i32 {
    // A fail point for the tests of isolation: this child dies the way a crashing pass would.
    if std::env::var_os("R3_TEST_CRASH_LOWER").is_some() {
        std::process::abort();
    }
    let Some(job) = r3_process::read_request::<LowerJob>(&mut std::io::stdin().lock()) else {
        return 2;
    };
    let result: Result<Lowered, CompileFailure> = match job {
        Ok(job) => match std::fs::read(&job.bitcode) {
            Ok(bc) => lower_in_process(
                &bc,
                &job.kernel_hash,
                &job.candidate,
                &job.target,
                job.mutation,
            ),
            Err(e) => Err(CompileFailure {
                message: format!("{}: {e}", job.bitcode.display()),
            }),
        },
        Err(e) => Err(CompileFailure {
            message: format!("bad lowering job: {e}"),
        }),
    };
    match r3_process::reply(&mut std::io::stdout(), &result) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// How long LLVM may take on one candidate before it counts as hung.
const LOWER_LIMIT: Duration = Duration::from_secs(120);

/// Lowers a candidate in a child process (`r3 __lower`): a pipeline that crashes or hangs LLVM
/// costs that child, and comes back as a compile error naming what happened.
pub fn lower_isolated(job: &LowerJob) -> Result<Lowered, CompileFailure> {
    let exe = std::env::current_exe().map_err(|e| CompileFailure {
        message: format!("finding r3: {e}"),
    })?;
    lower_isolated_with(&exe, job)
}

/// [`lower_isolated`] with a given r3 executable (tests, whose own executable is not r3).
pub fn lower_isolated_with(
    exe: &std::path::Path,
    job: &LowerJob,
) -> Result<Lowered, CompileFailure> {
    use r3_process::{Child, NoAnswer, Stderr};
    let _span = r3_process::timeline::span("lower.isolated", || job.kernel_hash.to_string());
    let err = |m: String| CompileFailure { message: m };
    let mut child = Child::spawn(exe, &["__lower"], Stderr::Keep)
        .map_err(|e| err(format!("starting a compiler process: {e}")))?;
    let _ = child.send(job);
    child.close();
    match child.recv::<Result<Lowered, CompileFailure>>(LOWER_LIMIT) {
        Ok(answer) => answer,
        Err(NoAnswer::TimedOut(limit)) => Err(err(format!(
            "LLVM did not finish within {} s on this pipeline",
            limit.as_secs()
        ))),
        Err(NoAnswer::Ended) => match child
            .finish(Duration::from_secs(10))
            .and_then(|x| x.signal())
        {
            Some(sig) => Err(err(format!("LLVM crashed (signal {sig}) on this pipeline"))),
            None => Err(err(
                "the compiler process answered nothing usable (it ended without an answer)".into(),
            )),
        },
    }
}
