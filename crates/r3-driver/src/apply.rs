//! The driver's half of apply (`--r3-apply`, `--r3-apply=FILE`, `R3_APPLY`): clang runs with
//! `--ptxas-path` pointing at r3 (`apply::shim`) and its host side including the dispatch
//! table (`apply::dispatch`), worked out before the compile and kept in the store under its
//! content's hash; afterwards one line says what was applied.

use r3_apply::dispatch;
use r3_apply::shim::{self, KernelOutcome, Status};
use std::collections::BTreeMap;
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

/// How a compile applies winners: clang's extra arguments and the environment of its ptxas
/// runs, and the dispatch table its host side includes.
pub struct Setup {
    pub args: Vec<OsString>,
    pub env: Env,
    /// The stable link to r3 that clang runs as ptxas.
    ptxas: PathBuf,
    /// The store that keeps the headers.
    store: PathBuf,
    /// The table the host side includes, by architecture; None where the command compiles no
    /// host side.
    included: Option<BTreeMap<String, Vec<String>>>,
}

/// Sets up a compile that applies winners; the captured IR is in `dir`, where the shim
/// reports too. The table the host side includes is worked out first (the shim's look ahead,
/// in a child process: it loads LLVM) and kept in `store` under its content's hash, so that
/// the compile's command and the files it reads are the same from one build to the next as
/// long as what ships is. None when the command runs no ptxas (nothing to apply); Err when r3
/// cannot set itself up. Either way the compile goes on without apply.
pub fn prepare(
    dir: &Path,
    from: &WinnersFrom,
    clang: &Path,
    clang_args: &[OsString],
    store: &Path,
    rewrites: bool,
) -> Result<Option<Setup>, String> {
    let Some(real) = real_ptxas(clang, clang_args)? else {
        return Ok(None);
    };
    let ptxas = ptxas_link()?;
    let from = match from {
        WinnersFrom::Store(s) => format!("store:{}", s.display()),
        WinnersFrom::File { text, .. } => {
            let copy = dir.join("winners.json");
            std::fs::write(&copy, text).map_err(|e| format!("{}: {e}", copy.display()))?;
            format!("file:{}", copy.display())
        }
    };
    let mut env = vec![
        (shim::DIR_ENV, dir.as_os_str().to_owned()),
        (shim::FROM_ENV, from.into()),
        (shim::PTXAS_ENV, real.into_os_string()),
    ];
    if rewrites {
        env.push(("R3_APPLY_REWRITES", "1".into()));
    }
    let mut setup = Setup {
        args: Vec::new(),
        env,
        ptxas,
        store: store.to_owned(),
        included: None,
    };
    if has_host_side(clang_args) {
        // Where the look ahead fails, the header holds no table, and the compile's own ptxas
        // runs say what they built: a table then means a second compile (`rebuild`).
        let _ = Command::new(&setup.ptxas)
            .envs(setup.env.iter().map(|(k, v)| (k, v)))
            .env(shim::PREDICT_ENV, "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        setup.included = Some(dispatch::parts(dir, shim::PREDICTED));
    }
    setup.args = setup.arguments()?;
    Ok(Some(setup))
}

impl Setup {
    /// clang's extra arguments: r3 as ptxas, and the host side including the table.
    fn arguments(&self) -> Result<Vec<OsString>, String> {
        let mut args = vec![OsString::from(format!(
            "--ptxas-path={}",
            self.ptxas.display()
        ))];
        if let Some(parts) = &self.included {
            let text = dispatch::header_text(&dispatch::table(parts));
            let header = crate::store::Store::create(&self.store)
                .and_then(|s| s.dispatch_header(&text))
                .map_err(|e| e.to_string())?;
            // Both sides include it (its table is for the host alone: `#ifndef __CUDA_ARCH__`),
            // as `-include FILE`, which a compiler cache knows takes a file (it takes
            // `-Xarch_host` for an option of its own and the command apart).
            args.push("-include".into());
            args.push(header.into_os_string());
        }
        Ok(args)
    }

    /// After the compile: where a ptxas run built another table than the one the host side
    /// included (its splice or the real ptxas failed, and it assembled clang's code), the
    /// arguments for compiling again with the table that was built; None where they agree, or
    /// where no ptxas run said (a compiler cache's hit runs none).
    pub fn rebuild(&mut self, dir: &Path) -> Result<Option<Vec<OsString>>, String> {
        let Some(included) = &self.included else {
            return Ok(None);
        };
        let built = dispatch::parts(dir, shim::BUILT);
        let differs = built
            .iter()
            .any(|(arch, lines)| included.get(arch).map_or(!lines.is_empty(), |i| i != lines));
        if !differs {
            return Ok(None);
        }
        let mut table = included.clone();
        table.extend(built);
        self.included = Some(table);
        // The second compile's ptxas runs say what they did, not the first's.
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("applied-") || name.starts_with(shim::BUILT) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        self.arguments().map(Some)
    }
}

/// The link to r3 that clang runs as ptxas: one path for this r3, in r3's cache, so that a
/// compile's command is the same from one build to the next (a compiler cache compares it).
fn ptxas_link() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding r3: {e}"))?;
    let dir = crate::toolchain::cache_dir()
        .join("apply")
        .join(crate::kernel::short_hash(
            exe.as_os_str().as_encoded_bytes(),
        ));
    let link = dir.join("ptxas");
    if std::fs::read_link(&link).is_ok_and(|t| t == exe) {
        return Ok(link);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Made beside it and renamed into place: compiles running at once each find a whole link.
    let tmp = dir.join(format!(".ptxas-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&exe, &tmp)
        .and_then(|()| std::fs::rename(&tmp, &link))
        .map_err(|e| format!("{}: {e}", link.display()))?;
    Ok(link)
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
        (Status::Withheld, "not built"),
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
    let rewrite = o
        .detail
        .as_deref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    format!("{}{}{speed}{gpu}{rewrite}", o.demangled, tag(&o.hash))
}

/// ` [<8 hex digits>]`, a kernel hash's short form (nothing where there is none).
fn tag(hash: &str) -> String {
    hash.get(..8).map(|h| format!(" [{h}]")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(store: &Path, included: &[(&str, &[&str])]) -> Setup {
        let parts = included
            .iter()
            .map(|(arch, lines)| {
                (
                    arch.to_string(),
                    lines.iter().map(|l| l.to_string()).collect(),
                )
            })
            .collect();
        let mut s = Setup {
            args: Vec::new(),
            env: Vec::new(),
            ptxas: PathBuf::from("/r3/ptxas"),
            store: store.to_owned(),
            included: Some(parts),
        };
        s.args = s.arguments().unwrap();
        s
    }

    /// The header an argument list includes.
    fn header_of(args: &[OsString]) -> PathBuf {
        let i = args.iter().position(|a| a == "-include").unwrap();
        PathBuf::from(&args[i + 1])
    }

    #[test]
    fn a_compile_whose_ptxas_built_another_table_is_compiled_again_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let (store, dir) = (tmp.path().join("store"), tmp.path().join("apply"));
        std::fs::create_dir_all(&dir).unwrap();
        let row = "v k sm_90 k__r3_x_v1 256 - - 0 0";
        let mut s = setup(&store, &[("sm_90", &[row])]);
        let first = header_of(&s.args);
        assert!(first.starts_with(store.join("dispatch")));
        assert!(std::fs::read_to_string(&first).unwrap().contains(row));
        // No ptxas run said anything (a compiler cache's hit): the compile stands.
        assert_eq!(s.rebuild(&dir).unwrap(), None);
        // Its ptxas run built the same table: the compile stands.
        dispatch::write_part(&dir, "sm_90", &[], &[]).unwrap();
        std::fs::write(dir.join("dispatch-sm_90.txt"), format!("{row}\n")).unwrap();
        assert_eq!(s.rebuild(&dir).unwrap(), None);
        // It assembled clang's code (no table): compiled again with the empty table, and the
        // first run's reports are gone.
        std::fs::write(dir.join("applied-sm_90-1.json"), "[]").unwrap();
        dispatch::write_part(&dir, "sm_90", &[], &[]).unwrap();
        let again = s
            .rebuild(&dir)
            .unwrap()
            .expect("another table: compile again");
        let second = header_of(&again);
        assert_ne!(first, second);
        assert_eq!(
            std::fs::read_to_string(&second).unwrap(),
            dispatch::header_text(&[])
        );
        assert!(!dir.join("applied-sm_90-1.json").exists());
        assert!(first.exists(), "a header a build may name is never removed");
        // The same included table always names the same header.
        assert_eq!(header_of(&setup(&store, &[("sm_90", &[row])]).args), first);
    }
}
