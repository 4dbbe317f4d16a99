//! The census: what a recording run launched, per kernel, kept with the program it ran.

use crate::store::programs::{Census, LaunchCounts, ProgramBinary};
use crate::store::Store;
use std::path::PathBuf;

/// The executable a command runs: its path as given where it has a `/`, else the first
/// executable file of that name on PATH (as `Command` finds it).
pub fn executable(program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The workload a command runs: its program's binary and the arguments after it.
pub(crate) fn program_binary(command: &[String]) -> Result<ProgramBinary, String> {
    let program = &command[0];
    let exe = executable(program).ok_or_else(|| format!("{program} is not on PATH"))?;
    ProgramBinary::of(program, &exe)
        .map(|b| b.with_args(&command[1..]))
        .map_err(|e| format!("reading {}: {e}", exe.display()))
}

/// The run's census, each kernel's time estimated from its recordings, kept with the program
/// (the newest run of a program replaces its census). Best effort: what fails is said, and the
/// recordings stand.
pub(crate) fn keep_census(
    store: &Store,
    command: &[String],
    counts: &[LaunchCounts],
    unknown_launches: u64,
) -> Option<Census> {
    let warn = |e: &dyn std::fmt::Display| {
        eprintln!("r3: warning: the program's time by kernel is not kept: {e}");
    };
    let binary = program_binary(command).map_err(|e| warn(&e)).ok()?;
    // The GPU the program ran on: launches under one wave of it cost about a wave each.
    let resident = crate::device::resident_threads(0);
    let census = store
        .census(&binary, counts, unknown_launches, resident)
        .map_err(|e| warn(&e))
        .ok()?;
    if let Err(e) = store.put_census(&census) {
        warn(&e);
    }
    Some(census)
}
