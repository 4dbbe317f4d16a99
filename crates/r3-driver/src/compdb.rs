//! Compilation database fragments (`-MJ FILE`, as CMake and Bear have clang write them): each
//! entry is the user's command as clang ran it, so r3's temporary additions (the capture
//! plugin, the ptxas shim, the dispatch header, all in directories that are gone after the
//! compile) are taken out again. A tool that replays an entry (clangd, clang-tidy) then runs
//! what the build wrote, with the SDK flags that make it work.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The fragment a command writes (`-MJ FILE` or `-MJFILE`), if any.
pub fn of(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().filter_map(|a| a.to_str());
    let mut named = None;
    while let Some(a) = it.next() {
        match a.strip_prefix("-MJ") {
            Some("") => named = it.next().map(PathBuf::from),
            Some(f) => named = Some(PathBuf::from(f)),
            None => {}
        }
    }
    named
}

/// Takes r3's `extra` arguments out of every entry of the fragment at `path`; the file is
/// replaced whole or left as it was.
pub fn strip(path: &Path, extra: &[OsString]) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let Some(stripped) = without(&text, extra) else {
        return Ok(());
    };
    crate::store::write_atomic(path, stripped.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The fragment's text without r3's arguments, or None when it holds none (or does not read as
/// entries, which r3 then leaves alone).
fn without(text: &str, extra: &[OsString]) -> Option<String> {
    let body = text.trim_end().strip_suffix(',')?;
    let mut entries: Vec<serde_json::Value> = serde_json::from_str(&format!("[{body}]")).ok()?;
    let ours = ours(extra);
    let mut changed = false;
    for e in &mut entries {
        let Some(args) = e.get_mut("arguments").and_then(|a| a.as_array_mut()) else {
            continue;
        };
        let kept = keep(args, &ours);
        changed |= kept.len() != args.len();
        *args = kept;
    }
    changed.then(|| {
        entries
            .iter()
            .map(|e| format!("{e},\n"))
            .collect::<String>()
    })
}

/// The arguments r3 added, as clang writes them into an entry: `-Xarch_host -include<h>`
/// becomes `-include`, `<h>` in the host's entry. A bare `-include` (r3's `-include <h>`) is
/// not r3's by itself: a user's goes before their own header, and r3's is taken out with `<h>`.
fn ours(extra: &[OsString]) -> Vec<String> {
    extra
        .iter()
        .filter_map(|a| a.to_str())
        .filter(|a| !matches!(*a, "-Xarch_host" | "-include"))
        .flat_map(|a| match a.strip_prefix("-include") {
            Some(h) if !h.is_empty() => vec![a.to_owned(), h.to_owned()],
            _ => vec![a.to_owned()],
        })
        .collect()
}

fn keep(args: &[serde_json::Value], ours: &[String]) -> Vec<serde_json::Value> {
    let is_ours = |v: &serde_json::Value| v.as_str().is_some_and(|s| ours.iter().any(|o| o == s));
    let mut out: Vec<serde_json::Value> = Vec::with_capacity(args.len());
    for a in args {
        if is_ours(a) {
            // `-include` before r3's header is r3's too.
            if out.last().and_then(|l| l.as_str()) == Some("-include") {
                out.pop();
            }
            continue;
        }
        out.push(a.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_lose_r3s_additions_and_keep_the_users_command() {
        let text = r#"{ "directory": "/b", "file": "k.cu", "output": "k.o", "arguments": ["clang", "-xcuda", "k.cu", "-include", "user.h", "-fpass-plugin=/c/r3capture.so", "--ptxas-path=/t/r3-capture-X/ptxas", "-include", "/t/r3-capture-X/r3-dispatch.h", "--target=x86_64-pc-linux-gnu"]},
{ "directory": "/b", "file": "k.cu", "output": "/t/k.s", "arguments": ["clang", "-xcuda", "k.cu", "-fpass-plugin=/c/r3capture.so", "--ptxas-path=/t/r3-capture-X/ptxas", "-include", "/s/dispatch/0123.h", "--offload-arch=sm_90"]},
"#;
        let extra: Vec<OsString> = [
            "-fpass-plugin=/c/r3capture.so",
            "--ptxas-path=/t/r3-capture-X/ptxas",
            "-Xarch_host",
            "-include/t/r3-capture-X/r3-dispatch.h",
            "-include",
            "/s/dispatch/0123.h",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let out = without(text, &extra).unwrap();
        assert!(
            !out.contains("r3-capture") && !out.contains("r3capture"),
            "{out}"
        );
        let entries: Vec<serde_json::Value> =
            serde_json::from_str(&format!("[{}]", out.trim_end().trim_end_matches(','))).unwrap();
        assert_eq!(
            entries[0]["arguments"],
            serde_json::json!([
                "clang",
                "-xcuda",
                "k.cu",
                "-include",
                "user.h",
                "--target=x86_64-pc-linux-gnu"
            ])
        );
        assert_eq!(
            entries[1]["arguments"],
            serde_json::json!(["clang", "-xcuda", "k.cu", "--offload-arch=sm_90"])
        );
        assert_eq!(entries[1]["output"], "/t/k.s");
        assert_eq!(without(&out, &extra), None, "nothing left to take out");
        assert_eq!(without("not json", &extra), None);
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            of(&args(&["-c", "-MJ", "x.json"])),
            Some(PathBuf::from("x.json"))
        );
        assert_eq!(of(&args(&["-MJy.json"])), Some(PathBuf::from("y.json")));
        assert_eq!(of(&args(&["-c"])), None);
    }
}
