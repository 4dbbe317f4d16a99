//! The driver's half of apply (`--r3-apply`, `--r3-apply=FILE`, `R3_APPLY`): clang runs with
//! `--ptxas-path` pointing at r3 (`apply::shim`) and its host side including the dispatch
//! table the shim writes (`apply::dispatch`), and afterwards one line says what was applied.

use r3_apply::dispatch;
use r3_apply::shim::{self, KernelOutcome, Status};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Variables set for clang's child processes (the shim reads them).
pub type Env = Vec<(&'static str, OsString)>;

/// Where winners come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WinnersFrom {
    Store(PathBuf),
    /// A winners file, read once by the driver (a pipe or process substitution cannot be read
    /// twice): each compile's shim reads the copy in its own apply directory.
    File {
        path: PathBuf,
        text: Vec<u8>,
    },
}

/// Arguments and environment for a compile that applies winners; the shim's link to r3 and the
/// captured IR live in `dir`. None when the command runs no ptxas (nothing to apply); Err when
/// r3 cannot set itself up. Either way the compile goes on without apply.
pub fn prepare(
    dir: &Path,
    from: &WinnersFrom,
    clang: &Path,
    clang_args: &[OsString],
) -> Result<Option<(Vec<OsString>, Env)>, String> {
    let Some(real) = real_ptxas(clang, clang_args)? else {
        return Ok(None);
    };
    let exe = std::env::current_exe().map_err(|e| format!("finding r3: {e}"))?;
    let link = dir.join("ptxas");
    std::os::unix::fs::symlink(&exe, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    let from = match from {
        WinnersFrom::Store(s) => format!("store:{}", s.display()),
        WinnersFrom::File { text, .. } => {
            let copy = dir.join("winners.json");
            std::fs::write(&copy, text).map_err(|e| format!("{}: {e}", copy.display()))?;
            format!("file:{}", copy.display())
        }
    };
    let mut args = vec![OsString::from(format!("--ptxas-path={}", link.display()))];
    if has_host_side(clang_args) {
        // The host side compiles after ptxas ran: by then the header holds the unit's table
        // (variants, where the policy ships them, and the tuned code of each kernel).
        let header = dir.join(dispatch::HEADER);
        std::fs::write(&header, dispatch::empty_header())
            .map_err(|e| format!("{}: {e}", header.display()))?;
        args.push("-Xarch_host".into());
        args.push(format!("-include{}", header.display()).into());
    }
    let env = vec![
        (shim::DIR_ENV, dir.as_os_str().to_owned()),
        (shim::FROM_ENV, from.into()),
        (shim::PTXAS_ENV, real.into_os_string()),
    ];
    Ok(Some((args, env)))
}

/// Whether the command compiles a host side, where the dispatch table goes.
fn has_host_side(clang_args: &[OsString]) -> bool {
    !clang_args.iter().any(|a| {
        matches!(
            a.to_str(),
            Some("--cuda-device-only" | "--offload-device-only")
        )
    })
}

/// The ptxas clang would run for this command: the user's `--ptxas-path`, else the one in
/// clang's own plan (`-###`), so apply never changes which ptxas assembles the code; None
/// when the command assembles no PTX.
fn real_ptxas(clang: &Path, clang_args: &[OsString]) -> Result<Option<PathBuf>, String> {
    if let Some(p) = clang_args
        .iter()
        .rev()
        .find_map(|a| a.to_str()?.strip_prefix("--ptxas-path="))
    {
        return Ok(Some(PathBuf::from(p)));
    }
    let out = Command::new(clang)
        .arg("-###")
        .args(clang_args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", clang.display()))?;
    let jobs = super::args::parse_jobs(&String::from_utf8_lossy(&out.stderr));
    Ok(jobs
        .into_iter()
        .filter_map(|job| job.into_iter().next())
        .find(|tool| Path::new(tool).file_name().is_some_and(|n| n == "ptxas"))
        .map(PathBuf::from))
}

/// The one line about what apply did in this compile, or None when it had nothing to say
/// (no kernel of the compile was ever tuned).
pub fn summary(dir: &Path) -> Option<String> {
    let all = shim::outcomes_in(dir);
    let with = |s: Status| all.iter().filter(move |o| o.status == s);
    let applied: Vec<String> = with(Status::Applied).map(describe).collect();
    let mut kept: Vec<String> = Vec::new();
    for (status, why) in [
        (Status::Changed, "changed since it was tuned"),
        (
            Status::PtxDiffers,
            "its winner no longer gives the measured PTX",
        ),
        (
            Status::Unverified,
            "r3 cannot check that it ships what was measured; fix: `r3 export` the winners again",
        ),
        (Status::Failed, "apply failed"),
        (Status::Refused, "refused"),
    ] {
        kept.extend(with(status).map(|o| {
            let detail = o
                .detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            format!("{}{} ({why}{detail})", o.demangled, tag(&o.hash))
        }));
    }
    // Refusals beside code that did ship (a variant refused, the generic code applied).
    for o in all.iter().filter(|o| o.status != Status::Refused) {
        kept.extend(
            o.refused
                .iter()
                .map(|r| format!("{}{}'s {r}", o.demangled, tag(&o.hash))),
        );
    }
    if applied.is_empty() && kept.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !applied.is_empty() {
        parts.push(format!("applied tuned code to {}", applied.join(", ")));
    }
    if !kept.is_empty() {
        parts.push(format!("kept clang's code for {}", kept.join(", ")));
    }
    Some(format!("r3: note: {}", parts.join("; ")))
}

fn describe(o: &KernelOutcome) -> String {
    let mut speed = o
        .speedup
        .map(|s| format!(" {}", crate::store::speed::times(s)))
        .unwrap_or_default();
    if !o.variants.is_empty() {
        let each: Vec<String> = o
            .variants
            .iter()
            .map(|v| crate::store::speed::times(v.speedup))
            .collect();
        let n = o.variants.len();
        speed.push_str(&format!(
            " (+{n} guarded variant{} at launch: {})",
            if n == 1 { "" } else { "s" },
            each.join(", ")
        ));
    }
    let gpu = o
        .gpu
        .as_deref()
        .map(|g| format!(" on {g}"))
        .unwrap_or_default();
    format!("{}{}{speed}{gpu}", o.demangled, tag(&o.hash))
}

/// ` [<8 hex digits>]`, a kernel hash's short form (nothing where there is none).
fn tag(hash: &str) -> String {
    hash.get(..8).map(|h| format!(" [{h}]")).unwrap_or_default()
}
