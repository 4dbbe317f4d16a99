//! Format 1 → 2: trials move from `trials/<kernel name>/` to `trials/<kernel hash>/`, and the
//! `kernel` field of every trial (and of the transfer sources) becomes the hash. Kernels, units
//! and recordings are laid out the same in both formats.
//!
//! Safe to interrupt and to run twice at once: each kernel's trials are copied, rewritten, into
//! a temporary directory that is renamed into place whole, and the old directory is removed
//! after; `format.json` says 2 only once every directory that could move has moved.

use super::identity::distinct;
use super::{io_err, write_atomic, KernelRecord, Store, StoreError, FORMAT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a migration did, for the one message the CLI prints.
#[derive(Debug, Default, PartialEq)]
pub struct Migration {
    /// (old directory name, kernel hash) of each moved trials directory.
    pub moved: Vec<(String, String)>,
    /// Trials directories left where they were, each with the reason.
    pub kept: Vec<(String, String)>,
}

impl Store {
    /// Brings a format-1 store to format 2 (nothing to do for format 2). Trials whose kernel
    /// name is not unique in the store stay under the name, reported in `kept`: they are no
    /// longer read for any kernel, and re-tuning writes trials under the hash.
    pub fn migrate(&mut self) -> Result<Option<Migration>, StoreError> {
        if self.format == FORMAT {
            return Ok(None);
        }
        let dir = self.root().join("trials");
        if trial_dirs(&dir)?.is_empty() {
            // Nothing is laid out differently: read as format 2, write nothing (the store may
            // be read-only, like a checked-in corpus store).
            self.format = FORMAT;
            return Ok(None);
        }
        let kernels = self.kernels()?;
        let mut m = Migration::default();
        let mut names = Vec::new();
        for old in trial_dirs(&dir)? {
            let name = old.file_name().unwrap().to_string_lossy().into_owned();
            if kernels.iter().any(|k| k.hash == name) {
                continue; // moved by an earlier, interrupted migration
            }
            match key_of(&old)? {
                Some(key) => names.push((old, name, key)),
                None => m.kept.push((name, "no trials in it".into())),
            }
        }
        let map: BTreeMap<String, Result<String, String>> = names
            .iter()
            .map(|(_, _, key)| (key.clone(), hash_for(key, &kernels)))
            .collect();
        for (old, name, key) in names {
            match &map[&key] {
                Ok(hash) => {
                    move_trials(&old, &dir.join(hash), &map)?;
                    m.moved.push((name, hash.clone()));
                }
                Err(why) => m.kept.push((name, why.clone())),
            }
        }
        let format = self.root().join("format.json");
        let text = serde_json::json!({ "format": FORMAT, "created_by": format!("r3 {} (migrated from format 1)", env!("CARGO_PKG_VERSION")) });
        write_atomic(&format, &super::to_json(&text)).map_err(io_err(&format))?;
        self.format = FORMAT;
        Ok(Some(m))
    }
}

fn trial_dirs(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let Some(entries) = super::read_dir_if_exists(dir)? else {
        return Ok(Vec::new());
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    Ok(out)
}

/// The kernel name the trials in a directory were keyed by (their `kernel` field).
fn key_of(dir: &Path) -> Result<Option<String>, StoreError> {
    for f in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let f = f.map_err(io_err(dir))?.path();
        if f.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&f).map_err(io_err(&f))?;
        if let Some(line) = text.lines().find(|l| !l.trim().is_empty()) {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| StoreError::Corrupt {
                    path: f.clone(),
                    msg: e.to_string(),
                })?;
            return Ok(v["kernel"].as_str().map(str::to_owned));
        }
    }
    Ok(None)
}

/// The hash of the one stored kernel with this mangled name; an error saying why not.
/// One source kernel built for several archs is one kernel: the newest arch is taken, as
/// format 1's tune did when the recording's arch was the newest.
fn hash_for(name: &str, kernels: &[KernelRecord]) -> Result<String, String> {
    let found: Vec<&KernelRecord> = kernels
        .iter()
        .filter(|k| k.signature.name == name)
        .collect();
    match distinct(&found) {
        0 => Err(format!(
            "no stored kernel is named {name} (simulated, or its store was emptied)"
        )),
        1 => Ok(found
            .iter()
            .max_by_key(|k| arch_number(&k.signature.arch))
            .unwrap()
            .hash
            .to_string()),
        n => Err(format!(
            "{n} different stored kernels are named {name}; which one was tuned is not recorded in format 1: re-tune it"
        )),
    }
}

fn arch_number(arch: &str) -> u32 {
    arch.trim_start_matches("sm_")
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .unwrap_or(0)
}

/// Copies a trials directory to `dest` with every kernel name the map knows replaced by its
/// hash, through a temporary directory renamed into place; then removes the old one.
fn move_trials(
    old: &Path,
    dest: &Path,
    map: &BTreeMap<String, Result<String, String>>,
) -> Result<(), StoreError> {
    let parent = dest.parent().unwrap();
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempdir_in(parent)
        .map_err(io_err(parent))?;
    for f in std::fs::read_dir(old).map_err(io_err(old))? {
        let f = f.map_err(io_err(old))?.path();
        let Some(file) = f.file_name() else { continue };
        let text = std::fs::read_to_string(&f).map_err(io_err(&f))?;
        let name = file.to_string_lossy();
        let rewritten = if name.ends_with(".jsonl") {
            rewrite_lines(&text, map, &f)?
        } else if name.ends_with(".transfer.json") {
            rewrite_transfer(&text, map, &f)?
        } else {
            text
        };
        std::fs::write(tmp.path().join(file), rewritten).map_err(io_err(dest))?;
    }
    let tmp = tmp.keep();
    match std::fs::rename(&tmp, dest) {
        Ok(()) => {}
        // A concurrent migration got there first; its copy is the same.
        Err(_) if dest.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(io_err(dest)(e));
        }
    }
    match std::fs::remove_dir_all(old) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(old)(e)),
        _ => Ok(()),
    }
}

fn renamed(name: &str, map: &BTreeMap<String, Result<String, String>>) -> Option<String> {
    map.get(name).and_then(|r| r.as_ref().ok()).cloned()
}

fn rewrite_lines(
    text: &str,
    map: &BTreeMap<String, Result<String, String>>,
    path: &Path,
) -> Result<String, StoreError> {
    let mut out = String::new();
    // A torn last line (no newline) is dropped, as the trials reader would.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        if line.trim().is_empty() {
            continue;
        }
        let mut v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| StoreError::Corrupt {
                path: path.to_owned(),
                msg: e.to_string(),
            })?;
        if let Some(h) = v["kernel"].as_str().and_then(|k| renamed(k, map)) {
            v["kernel"] = h.into();
        }
        out.push_str(&serde_json::to_string(&v).expect("JSON values serialize"));
        out.push('\n');
    }
    Ok(out)
}

fn rewrite_transfer(
    text: &str,
    map: &BTreeMap<String, Result<String, String>>,
    path: &Path,
) -> Result<String, StoreError> {
    let mut v: serde_json::Value = serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        msg: e.to_string(),
    })?;
    if let Some(sources) = v["sources"].as_array_mut() {
        for s in sources {
            if let Some(h) = s["kernel"].as_str().and_then(|k| renamed(k, map)) {
                s["kernel"] = h.into();
            }
        }
    }
    Ok(serde_json::to_string_pretty(&v).expect("JSON values serialize") + "\n")
}
