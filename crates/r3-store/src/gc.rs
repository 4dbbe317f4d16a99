//! `r3 gc`: what an edited kernel leaves behind. Each compile of a source replaces its unit,
//! and the kernels its earlier compiles stored stay (`identity::Index::is_old`: no current build
//! contains them); so do their recordings, which are the store's bulk, their searches, and the
//! dispatch headers of builds that shipped them. [`Store::gc_plan`] says what can go, with its
//! bytes; [`Store::gc`] removes it.
//!
//! What goes, for each old version:
//! - its recordings (a recording of code no build contains cannot be used for anything, and
//!   left without its kernel it would be taken by name for the current version's);
//! - the kernel itself (`kernels/<hash>/`) and the source rewrites `r3 evolve` stored of it,
//!   unless it has results: trials or evolve attempts are what GPU time bought, and reverting
//!   the edit brings the same hash (and so the same searches) back, so they stay, with the
//!   kernel that names them, unless `trials` is asked for;
//! - dispatch headers (`dispatch/<hash>.h`) whose every shipped kernel is old: no current
//!   build's compile includes them.
//!
//! Interrupting a removal leaves the store as if it had not started or had finished with that
//! item: each item is first renamed whole into `<store>/.gc/` (nothing reads there), then
//! deleted; the next `r3 gc` deletes what an interrupted one left there. Items go in an order
//! that never leaves a reference to something gone: recordings and searches first, then the
//! dispatch headers and rewrites that name a kernel, the kernel last.

use super::identity::{Index, Resolution};
use super::programs::ShippedKernel;
use super::{io_err, KernelRecord, Store, StoreError, DISPATCH_DIR};
use crate::kernel::KernelHash;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where removals are staged: renamed here whole, then deleted.
pub const STAGING: &str = ".gc";

/// What `r3 gc` is asked to remove.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcOptions {
    /// Old versions' trials and evolve attempts too (and so the kernels they name).
    pub trials: bool,
}

/// What a collection removes (in this order) and the old versions it keeps.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Plan {
    pub removals: Vec<Removal>,
    pub kept: Vec<Kept>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Removal {
    pub what: What,
    pub path: PathBuf,
    /// Bytes of the files under it.
    pub bytes: u64,
    /// The kernel it belongs to, where it belongs to one (`name [hash]`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kernel: String,
}

/// What a removal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum What {
    /// Left in `.gc/` by an interrupted collection.
    Leftover,
    Recording,
    Trials,
    Attempts,
    Dispatch,
    Rewrite,
    Kernel,
}

impl What {
    pub fn words(self) -> &'static str {
        match self {
            What::Leftover => "left by an interrupted r3 gc",
            What::Recording => "recording",
            What::Trials => "trials",
            What::Attempts => "evolve attempts",
            What::Dispatch => "dispatch header",
            What::Rewrite => "source rewrite",
            What::Kernel => "kernel",
        }
    }
}

/// An old version left in the store, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kept {
    pub hash: crate::kernel::KernelHash,
    pub name: String,
    pub why: String,
}

impl Plan {
    pub fn bytes(&self) -> u64 {
        self.removals.iter().map(|r| r.bytes).sum()
    }
}

impl Store {
    /// What `r3 gc` would remove now, and the old versions it would keep (see the module's
    /// documentation). Reads only. A store whose unit cannot be read is refused: which
    /// kernels are old cannot be told without it.
    pub fn gc_plan(&self, opts: GcOptions) -> Result<Plan, StoreError> {
        let (units, damaged) = self.units_and_damage()?;
        if let Some(e) = damaged.into_iter().next() {
            return Err(e);
        }
        let index = Index::new(self.kernels()?, units, true);
        let mut plan = Plan::default();
        let staged = self.root().join(STAGING);
        if let Some(entries) = super::read_dir_if_exists(&staged)? {
            for e in entries.flatten() {
                plan.removals
                    .push(removal(What::Leftover, e.path(), String::new()));
            }
        }
        let label = |k: &KernelRecord| {
            let name = super::identity::short_name(&k.signature.demangled);
            format!("{name} [{}]", k.hash.get(..8).unwrap_or(&k.hash))
        };
        let variants = self.variants()?;
        let mut later = Vec::new();
        // The units' kernels: a rewrite `r3 evolve` stored whose diff the user applied is one.
        let held: std::collections::BTreeSet<&str> = index
            .units()
            .iter()
            .flat_map(|u| u.kernels.values().flatten().map(|h| h.as_str()))
            .collect();
        let mut protected = Vec::new();
        for k in index.old() {
            let rewrite_built = variants
                .iter()
                .any(|v| v.variant_of.as_ref() == Some(&k.hash) && held.contains(v.hash.as_str()));
            if rewrite_built {
                plan.kept.push(Kept {
                    hash: k.hash.clone(),
                    name: k.signature.demangled.clone(),
                    why: "a rewrite of it (`r3 evolve`) is in the current build, which its recordings and searches serve".into(),
                });
                protected.push(k.hash.clone());
                continue;
            }
            let unit_newer = index
                .units()
                .iter()
                .filter(|u| super::identity::compiled_from(k, &u.source))
                .filter_map(|u| mtime(&self.root().join("units").join(format!("{}.json", u.id))))
                .max();
            let stored = mtime(&self.kernel_dir(&k.hash).join("kernel.json"));
            if unit_newer.zip(stored).is_none_or(|(u, s)| u <= s) {
                // Stored after the unit that leaves it out was written: a compile may be
                // storing it now, its unit still to come.
                plan.kept.push(Kept {
                    hash: k.hash.clone(),
                    name: k.signature.demangled.clone(),
                    why: "stored after its source's last unit: a compile may still be writing it"
                        .into(),
                });
                protected.push(k.hash.clone());
                continue;
            }
            let mine: Vec<&KernelRecord> = std::iter::once(k)
                .chain(
                    variants
                        .iter()
                        .filter(|v| v.variant_of.as_ref() == Some(&k.hash)),
                )
                .collect();
            let mut results = Vec::new();
            for m in &mine {
                let trials = self
                    .root()
                    .join("trials")
                    .join(super::trials::slug(&m.hash));
                if trials.is_dir() {
                    results.push((What::Trials, trials));
                }
                let attempts = self.attempts_path(&m.hash);
                if let Some(dir) = attempts.parent().filter(|d| d.is_dir()) {
                    results.push((What::Attempts, dir.to_owned()));
                }
            }
            if let Some((_, busy)) = results.iter().find(|(_, dir)| searched_now(dir)) {
                plan.kept.push(Kept {
                    hash: k.hash.clone(),
                    name: k.signature.demangled.clone(),
                    why: format!("a search writes {} now", busy.display()),
                });
                protected.push(k.hash.clone());
                continue;
            }
            if !results.is_empty() && !opts.trials {
                plan.kept.push(Kept {
                    hash: k.hash.clone(),
                    name: k.signature.demangled.clone(),
                    why: "it has trials or evolve attempts, kept with it (`r3 gc --trials` removes them; its recordings go)".into(),
                });
            } else {
                for (what, dir) in results {
                    later.push(removal(what, dir, label(k)));
                }
                for v in mine.iter().skip(1) {
                    later.push(removal(What::Rewrite, self.kernel_dir(&v.hash), label(k)));
                }
                later.push(removal(What::Kernel, self.kernel_dir(&k.hash), label(k)));
            }
        }
        // Recordings of every old version but those kept whole (one a compile or a search may
        // be using now, one whose rewrite is built); those kept for their trials lose theirs.
        for r in self.recordings(None)? {
            if let Resolution::Kernel(k) = index.of_recording(&r) {
                if index.is_old(&k) && !protected.contains(&k.hash) {
                    plan.removals
                        .push(removal(What::Recording, r.dir.clone(), label(&k)));
                }
            }
        }
        // Searches and rewrites, then the headers that name only old kernels, kernels last.
        let (kernels, results): (Vec<Removal>, Vec<Removal>) = later
            .into_iter()
            .partition(|r| matches!(r.what, What::Kernel | What::Rewrite));
        plan.removals.extend(results);
        plan.removals.extend(self.stale_headers(&index)?);
        plan.removals.extend(kernels);
        Ok(plan)
    }

    /// Dispatch headers whose every shipped kernel (the table's `s` lines) is old. A header
    /// that names none (the one of builds with nothing to ship) or cannot be read is kept.
    fn stale_headers(&self, index: &Index) -> Result<Vec<Removal>, StoreError> {
        let dir = self.root().join(DISPATCH_DIR);
        let Some(entries) = super::read_dir_if_exists(&dir)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "h"))
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        for p in paths {
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            let shipped = shipped_kernels(&text);
            if !shipped.is_empty() && shipped.iter().all(|h| index.is_old_hash(h)) {
                out.push(removal(What::Dispatch, p, String::new()));
            }
        }
        Ok(out)
    }

    /// Removes what `plan` lists, in its order; returns what was removed (each item renamed
    /// into `.gc/` whole, then deleted). An item already gone is skipped; the first one that
    /// cannot be moved stops the collection with its error (the store as consistent as before:
    /// nothing later in the order was touched).
    pub fn gc(&self, plan: &Plan) -> Result<Vec<Removal>, StoreError> {
        let staged = self.root().join(STAGING);
        let mut done = Vec::new();
        for (n, r) in plan.removals.iter().enumerate() {
            if r.what == What::Leftover {
                remove_all(&r.path).map_err(io_err(&r.path))?;
                done.push(r.clone());
                continue;
            }
            if std::fs::symlink_metadata(&r.path).is_err() {
                continue;
            }
            std::fs::create_dir_all(&staged).map_err(io_err(&staged))?;
            let name = r.path.file_name().map(|f| f.to_string_lossy().into_owned());
            let aside = staged.join(format!(
                "{}-{n}-{}",
                std::process::id(),
                name.unwrap_or_default()
            ));
            std::fs::rename(&r.path, &aside).map_err(io_err(&r.path))?;
            remove_all(&aside).map_err(io_err(&aside))?;
            if r.what == What::Recording {
                // The recordings of one kernel key share a directory: gone with the last.
                if let Some(parent) = r.path.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            }
            done.push(r.clone());
        }
        let _ = std::fs::remove_dir(&staged);
        Ok(done)
    }
}

fn removal(what: What, path: PathBuf, kernel: String) -> Removal {
    Removal {
        bytes: bytes_under(&path),
        what,
        path,
        kernel,
    }
}

fn mtime(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Bytes of the files at or under `path` (links not followed).
pub fn bytes_under(path: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| bytes_under(&e.path()))
        .sum()
}

fn remove_all(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether a search or an evolve run holds a log under `dir` now.
fn searched_now(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .any(|p| super::trials::held_by_another(&p))
}

/// The kernel hashes a dispatch header ships tuned code of: its table's `s` lines, read from
/// the C string the header hands to r3's runtime.
pub fn shipped_kernels(header: &str) -> Vec<KernelHash> {
    let Some(start) = header.find("r3_dispatch_add(\"") else {
        return Vec::new();
    };
    let literal = &header[start + "r3_dispatch_add(\"".len()..];
    let mut table = String::new();
    let mut chars = literal.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => break,
            '\\' => match chars.next() {
                Some('n') => table.push('\n'),
                Some(other) => table.push(other),
                None => break,
            },
            c => table.push(c),
        }
    }
    table
        .lines()
        .filter(|l| l.starts_with("s "))
        .filter_map(ShippedKernel::parse)
        .map(|s| s.kernel)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::TrialsKey;
    use crate::kernel::{KernelModule, KernelSignature, SourceLoc};
    use crate::{CompileCommand, Unit};
    use std::collections::BTreeMap;

    fn module(hash: &str, name: &str, bitcode: &[u8]) -> KernelModule {
        KernelModule {
            hash: hash.into(),
            bitcode: bitcode.to_vec(),
            signature: KernelSignature {
                name: name.into(),
                demangled: format!("{name}(float*)"),
                arch: "sm_90".into(),
                params: Vec::new(),
                source: Some(SourceLoc {
                    file: "/p/dot.cu".into(),
                    line: 3,
                }),
                unoptimized: false,
            },
        }
    }

    fn compile() -> CompileCommand {
        CompileCommand {
            cwd: "/p".into(),
            args: vec!["r3-clang++".into(), "dot.cu".into(), "-c".into()],
            env: BTreeMap::new(),
            clang: "clang".into(),
            clang_version: String::new(),
        }
    }

    fn unit(hashes: &[&str]) -> Unit {
        Unit {
            format: 2,
            id: Unit::id_for(Path::new("/p/dot.cu"), None),
            source: "/p/dot.cu".into(),
            output: None,
            kernels: BTreeMap::from([(
                "sm_90".to_owned(),
                hashes.iter().map(|&h| h.into()).collect(),
            )]),
            fatbins: Vec::new(),
            compile: compile(),
        }
    }

    fn recording(store: &Store, key: &str, kernel: &str) {
        let dir = store.root().join("records").join(key).join("1");
        std::fs::create_dir_all(&dir).unwrap();
        let launch = serde_json::json!({
            "format": 1, "kernel": "dot", "arch": "sm_90", "grid": [1,1,1], "block": [1,1,1],
            "shared_bytes": 0, "params": [], "args_hex": "", "va_base": 0, "va_size": 0,
            "in_app_ms": 0.0, "regions": 0, "bytes_in": 0, "bytes_changed": 0,
            "replayable": true, "not_replayable": null, "program": "p", "pid": 1, "unix_time": 0
        });
        std::fs::write(dir.join("launch.json"), launch.to_string()).unwrap();
        std::fs::write(dir.join("prologue.r3snap"), vec![0u8; 1000]).unwrap();
        let rec = store
            .recordings(None)
            .unwrap()
            .into_iter()
            .find(|r| r.dir == dir)
            .unwrap();
        store.set_kernel_ref(&rec, &kernel.into()).unwrap();
    }

    fn backdate(path: &Path, secs: u64) {
        let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    /// dot.cu compiled, edited and compiled, reverted and compiled: `aaaa…` is current,
    /// `bbbb…` old, each with a recording; the old one has trials when `searched`.
    fn edited_store(root: &Path, searched: bool) -> Store {
        let store = Store::create(root).unwrap();
        for (h, bc) in [("aaaa000000000001", b"one"), ("bbbb000000000002", b"two")] {
            store.put_kernel(&module(h, "dot", bc), &compile()).unwrap();
            backdate(
                &store.kernel_dir(&KernelHash::from(h)).join("kernel.json"),
                600,
            );
            recording(&store, &format!("k-{h}"), h);
        }
        store.put_unit(&unit(&["aaaa000000000001"])).unwrap();
        if searched {
            let t = store.trials_path(&TrialsKey::from("bbbb000000000002"), "NVIDIA H100");
            std::fs::create_dir_all(t.parent().unwrap()).unwrap();
            std::fs::write(&t, b"").unwrap();
        }
        store
    }

    #[test]
    fn an_old_version_goes_with_its_recordings_and_the_current_one_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store = edited_store(dir.path(), false);
        // A header that shipped the old version, one that ships the current one, an empty one.
        let ships = |h: &str| {
            format!("/* r3 */\n__attribute__((weak)) void r3_dispatch_add(const char *table);\n  if (r3_dispatch_add) r3_dispatch_add(\"r3-dispatch 1\\ns _Z3dotPf sm_90 {h} 00ff00ff00ff00ff\");\n")
        };
        let old_h = store.dispatch_header(&ships("bbbb000000000002")).unwrap();
        let new_h = store.dispatch_header(&ships("aaaa000000000001")).unwrap();
        let empty = store
            .dispatch_header("/* r3 */\n/* r3: no variants */\n")
            .unwrap();
        assert_eq!(
            shipped_kernels(&ships("bbbb000000000002")),
            ["bbbb000000000002"]
        );

        let plan = store.gc_plan(GcOptions::default()).unwrap();
        let what: Vec<(What, String)> = plan
            .removals
            .iter()
            .map(|r| {
                let rel = r.path.strip_prefix(store.root()).unwrap();
                (r.what, rel.display().to_string())
            })
            .collect();
        assert_eq!(
            what,
            [
                (What::Recording, "records/k-bbbb000000000002/1".to_owned()),
                (
                    What::Dispatch,
                    old_h
                        .strip_prefix(store.root())
                        .unwrap()
                        .display()
                        .to_string()
                ),
                (What::Kernel, "kernels/bbbb000000000002".to_owned()),
            ]
        );
        assert!(plan.removals[0].bytes >= 1000, "{:?}", plan.removals[0]);
        assert!(plan.kept.is_empty(), "{:?}", plan.kept);
        // A dry run changed nothing.
        assert!(store
            .kernel_dir(&KernelHash::from("bbbb000000000002"))
            .is_dir());

        let done = store.gc(&plan).unwrap();
        assert_eq!(done.len(), 3);
        let left: Vec<String> = store
            .kernels()
            .unwrap()
            .iter()
            .map(|k| k.hash.to_string())
            .collect();
        assert_eq!(left, ["aaaa000000000001"]);
        assert_eq!(store.recordings(None).unwrap().len(), 1);
        assert!(!store.root().join("records/k-bbbb000000000002").exists());
        assert!(!old_h.exists() && new_h.exists() && empty.exists());
        assert!(!store.root().join(STAGING).exists());
        // Nothing more to do.
        assert!(store
            .gc_plan(GcOptions::default())
            .unwrap()
            .removals
            .is_empty());
    }

    #[test]
    fn an_old_version_with_trials_keeps_them_unless_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = edited_store(dir.path(), true);
        let plan = store.gc_plan(GcOptions::default()).unwrap();
        let what: Vec<What> = plan.removals.iter().map(|r| r.what).collect();
        assert_eq!(what, [What::Recording]);
        assert_eq!(plan.kept.len(), 1);
        assert!(plan.kept[0].why.contains("--trials"), "{:?}", plan.kept);
        let plan = store.gc_plan(GcOptions { trials: true }).unwrap();
        let what: Vec<What> = plan.removals.iter().map(|r| r.what).collect();
        assert_eq!(what, [What::Recording, What::Trials, What::Kernel]);
        store.gc(&plan).unwrap();
        assert!(!store.root().join("trials/bbbb000000000002").exists());
        assert!(store.orphaned_trials().unwrap().is_empty());
    }

    #[test]
    fn an_interrupted_collection_leaves_a_consistent_store_and_is_finished_later() {
        let dir = tempfile::tempdir().unwrap();
        let store = edited_store(dir.path(), false);
        let plan = store.gc_plan(GcOptions::default()).unwrap();
        // Stopped after the recording was moved aside, before it was deleted.
        let staged = store.root().join(STAGING);
        std::fs::create_dir_all(&staged).unwrap();
        std::fs::rename(&plan.removals[0].path, staged.join("1-0-1")).unwrap();
        // Readers see the old kernel without its recording, nothing half there.
        assert_eq!(store.recordings(None).unwrap().len(), 1);
        assert_eq!(store.kernels().unwrap().len(), 2);
        let again = store.gc_plan(GcOptions::default()).unwrap();
        let what: Vec<What> = again.removals.iter().map(|r| r.what).collect();
        assert_eq!(what, [What::Leftover, What::Kernel]);
        store.gc(&again).unwrap();
        assert!(!staged.exists());
        assert_eq!(store.kernels().unwrap().len(), 1);
    }

    #[test]
    fn an_old_version_whose_rewrite_was_built_stays_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = edited_store(dir.path(), false);
        // `r3 evolve` rewrote the old version; the user applied the diff and rebuilt.
        let rewrite = module("eeee000000000005", "dot", b"rewritten");
        store
            .put_variant(&rewrite, &compile(), &"bbbb000000000002".into())
            .unwrap();
        store
            .put_unit(&unit(&["aaaa000000000001", "eeee000000000005"]))
            .unwrap();
        let plan = store.gc_plan(GcOptions { trials: true }).unwrap();
        assert!(plan.removals.is_empty(), "{:?}", plan.removals);
        assert!(plan.kept[0].why.contains("rewrite"), "{:?}", plan.kept);
    }

    #[test]
    fn a_kernel_newer_than_its_unit_and_a_store_without_units_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = edited_store(dir.path(), false);
        // A compile storing its kernels now: the unit still says the earlier build.
        let fresh = module("cccc000000000003", "dot", b"three");
        store.put_kernel(&fresh, &compile()).unwrap();
        backdate(
            &store
                .root()
                .join("units")
                .join(format!("{}.json", unit(&[]).id)),
            300,
        );
        let plan = store.gc_plan(GcOptions::default()).unwrap();
        assert!(plan
            .kept
            .iter()
            .any(|k| k.hash == "cccc000000000003" && k.why.contains("may still be writing")));
        assert!(!plan
            .removals
            .iter()
            .any(|r| r.path.ends_with("cccc000000000003")));
        // A store of kernels only says nothing is old.
        let bare = tempfile::tempdir().unwrap();
        let s = Store::create(bare.path()).unwrap();
        s.put_kernel(&module("dddd000000000004", "k", b"k"), &compile())
            .unwrap();
        assert!(s.gc_plan(GcOptions::default()).unwrap().removals.is_empty());
    }
}
