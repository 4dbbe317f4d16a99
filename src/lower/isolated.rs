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
    kernel_hash: &str,
    c: &Candidate,
    target: &Codegen,
    mutation: Option<(crate::ir::mutate::Mutation, crate::ir::mutate::Facts)>,
) -> Result<Lowered, CompileFailure> {
    let err = |e: &dyn std::fmt::Display| CompileFailure {
        message: e.to_string(),
    };
    let ctx = inkwell::context::Context::create();
    let module = crate::ir::load_bytes(&ctx, bitcode, kernel_hash).map_err(|e| err(&e))?;
    let mut mutated = true;
    let mut ir_instructions = 0;
    let t = super::lower_candidate(&module, c, target, |m| {
        if let Some((mu, facts)) = mutation {
            mutated = crate::ir::mutate::apply(m, mu, facts);
        }
        ir_instructions = crate::ir::instruction_count(m);
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
        ptx_hash: blake3::hash(t.ptx.as_bytes()).to_hex()[..16].to_owned(),
        stats: super::ptx_stats(&t.ptx),
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
    pub kernel_hash: String,
    pub candidate: Candidate,
    pub target: Codegen,
    pub mutation: Option<(crate::ir::mutate::Mutation, crate::ir::mutate::Facts)>,
}

/// The child side of isolated lowering: one job from stdin, the result (JSON) to stdout.
pub fn serve_lower() -> i32 {
    // A fail point for the tests of isolation: this child dies the way a crashing pass would.
    if std::env::var_os("R3_TEST_CRASH_LOWER").is_some() {
        std::process::abort();
    }
    let mut input = String::new();
    if std::io::Read::read_to_string(&mut std::io::stdin(), &mut input).is_err() {
        return 2;
    }
    let result: Result<Lowered, CompileFailure> = match serde_json::from_str::<LowerJob>(&input) {
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
    match serde_json::to_writer(std::io::stdout(), &result) {
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
    use std::io::Write;
    use std::process::{Command, Stdio};
    let err = |m: String| CompileFailure { message: m };
    let mut child = Command::new(exe)
        .arg("__lower")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("starting a compiler process: {e}")))?;
    let text = serde_json::to_vec(job).expect("jobs serialize");
    let _ = child.stdin.take().expect("piped").write_all(&text);
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let deadline = std::time::Instant::now() + LOWER_LIMIT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err(format!(
                    "LLVM did not finish within {} s on this pipeline",
                    LOWER_LIMIT.as_secs()
                )));
            }
        }
    };
    let out = reader.join().unwrap_or_default();
    if let Some(sig) = std::os::unix::process::ExitStatusExt::signal(&status) {
        return Err(err(format!("LLVM crashed (signal {sig}) on this pipeline")));
    }
    serde_json::from_str(&out).unwrap_or_else(|e| {
        Err(err(format!(
            "the compiler process answered nothing usable ({e})"
        )))
    })
}
