//! Kernel identity. A kernel is its content hash (`kernels/<hash>/`), never its name: names
//! collide across programs (`kernel1(int, float*, float*)` is everywhere) and across archs.
//! This module answers the two questions that need a name or a launch turned into a hash:
//! which stored kernel a recorded launch ran, and which stored kernels a user's word names.

use super::records::{LaunchRecord, Recording};
use super::{KernelRecord, Store, StoreError, Unit};
use crate::kernel::KernelHash;
use std::collections::BTreeSet;

/// Which recordings a command acts on: those of the kernel a word names, one recording by its
/// id, or every replayable one.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub kernel: Option<String>,
    pub record: Option<String>,
    pub all: bool,
}

impl Store {
    /// The recordings a selection names. Recordings found irreproducible stay in: replay and
    /// tune say why they cannot be used. None at all is an error that says how to get some (or
    /// names the orphaned trials of a kernel whose directory was deleted).
    pub fn select_recordings(&self, sel: &Selection) -> Result<Vec<Recording>, StoreError> {
        let all = self.recordings(None)?;
        let replayable = |r: &Recording| r.launch.not_replayable.is_none();
        let recs: Vec<_> = match (&sel.kernel, &sel.record, sel.all) {
            (_, Some(id), _) => all.into_iter().filter(|r| &r.id == id).collect(),
            (None, None, true) => all.into_iter().filter(replayable).collect(),
            (Some(word), None, _) => {
                self.recordings_of(word, all.into_iter().filter(replayable))?
            }
            (None, None, false) => return Err(StoreError::NothingSelected),
        };
        if !recs.is_empty() {
            return Ok(recs);
        }
        if let Some(word) = sel.kernel.as_deref() {
            if self.index()?.select(word).is_empty() {
                if let Some(e) = self.orphaned_error(word)? {
                    return Err(e);
                }
            }
        }
        Err(StoreError::NoRecording)
    }

    /// The recordings of the kernel a word names (hash, prefix, or name). A name that several
    /// recorded kernels share is an error listing them, never a mix of their recordings.
    fn recordings_of(
        &self,
        word: &str,
        recs: impl Iterator<Item = Recording>,
    ) -> Result<Vec<Recording>, StoreError> {
        let index = self.index()?;
        let mut out = Vec::new();
        let mut kernels = Vec::new();
        for rec in recs {
            match index.of_recording(&rec) {
                Resolution::Kernel(k) if names(word, &k) => {
                    kernels.push(*k);
                    out.push(rec);
                }
                Resolution::Ambiguous(ks) if ks.iter().any(|k| names(word, k)) => {
                    let refs: Vec<_> = ks.iter().collect();
                    return Err(StoreError::Untied {
                        id: rec.id,
                        kernels: Box::new(ambiguous(&rec.launch.kernel, &refs)),
                    });
                }
                _ => {}
            }
        }
        let refs: Vec<_> = kernels.iter().collect();
        if distinct(&refs) > 1 {
            return Err(ambiguous(word, &refs));
        }
        Ok(out)
    }
}

/// The stored kernels and units, read once: what resolution needs.
pub struct Index {
    kernels: Vec<KernelRecord>,
    units: Vec<Unit>,
}

/// Which stored kernel a recorded launch ran.
#[derive(Debug, Clone)]
pub enum Resolution {
    Kernel(Box<KernelRecord>),
    /// Several stored kernels could have run it: the recording names no fatbinary that a
    /// stored compile produced (an older recording, or a build whose output r3 did not see),
    /// and more than one stored kernel has its name.
    Ambiguous(Vec<KernelRecord>),
    /// No stored kernel has its name: the program was not built by r3-clang++ (or not into
    /// this store).
    Missing,
}

impl Store {
    pub fn index(&self) -> Result<Index, StoreError> {
        Ok(Index {
            kernels: self.kernels()?,
            units: self.units()?,
        })
    }

    /// The usable recordings of the kernel with this content hash (replayable, and not found
    /// to be irreproducible), oldest first: the distinct launches a winner must reproduce
    /// before it is confirmed.
    pub fn launches_of(&self, hash: &str) -> Result<Vec<super::records::Recording>, StoreError> {
        let index = self.index()?;
        Ok(self
            .recordings(None)?
            .into_iter()
            .filter(|r| r.usable())
            .filter(|r| matches!(index.of_recording(r), Resolution::Kernel(k) if k.hash == hash))
            .collect())
    }
}

/// What the store holds of one kernel's replayable recorded launches.
#[derive(Debug, Default, Clone, PartialEq, serde::Serialize)]
pub struct Launches {
    /// Usable: replayable, and not found irreproducible.
    pub usable: usize,
    /// Found by a replay of the -O3 baseline not to reproduce.
    pub irreproducible: usize,
    /// Why one of those does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Launches {
    /// Why the kernel cannot be searched: it has recordings, and none reproduces.
    pub fn blocked(&self) -> Option<&str> {
        self.reason.as_deref().filter(|_| self.usable == 0)
    }
}

impl super::Store {
    /// Each kernel's replayable recorded launches, by content hash.
    pub fn launches_by_kernel(
        &self,
    ) -> Result<std::collections::BTreeMap<KernelHash, Launches>, StoreError> {
        let index = self.index()?;
        let mut out: std::collections::BTreeMap<KernelHash, Launches> = Default::default();
        for r in self.recordings(None)? {
            if r.launch.not_replayable.is_some() {
                continue;
            }
            if let Resolution::Kernel(k) = index.of_recording(&r) {
                let e = out.entry(k.hash.clone()).or_default();
                match r.irreproducible() {
                    None => e.usable += 1,
                    Some(why) => {
                        e.irreproducible += 1;
                        e.reason.get_or_insert_with(|| why.to_owned());
                    }
                }
            }
        }
        Ok(out)
    }
}

impl Store {
    /// Resolves each new recording to the stored kernel it ran and keeps the answer beside it
    /// (`records::KernelRef`), so that no later rebuild can change it. Returns the recordings
    /// with `kernel` set where it was resolved. Best effort, since the recordings are already
    /// whole: a launch that resolves to no single kernel, a store whose index cannot be read and
    /// a reference that cannot be written (said once) leave the recording as older ones are,
    /// resolved again by each reader.
    pub fn resolve_recorded(&self, recs: Vec<Recording>) -> Vec<Recording> {
        let Ok(index) = self.index() else {
            return recs;
        };
        recs.into_iter()
            .map(|mut rec| {
                if rec.kernel.is_none() {
                    if let Resolution::Kernel(k) = index.of_launch(&rec.launch) {
                        match self.set_kernel_ref(&rec, &k.hash) {
                            Ok(()) => rec.kernel = Some(k.hash),
                            Err(e) => super::warn_left_out(&e, "the launch's kernel reference"),
                        }
                    }
                }
                rec
            })
            .collect()
    }
}

impl Index {
    pub fn kernels(&self) -> &[KernelRecord] {
        &self.kernels
    }

    pub fn kernel(&self, hash: &str) -> Option<&KernelRecord> {
        self.kernels.iter().find(|k| k.hash == hash)
    }

    /// The kernel a recording ran: the one `r3 record` resolved when it recorded it, while that
    /// kernel is still stored; else as `of_launch` finds it now (recordings made before r3
    /// kept the reference, or whose reference was damaged).
    pub fn of_recording(&self, rec: &Recording) -> Resolution {
        match rec.kernel.as_deref().and_then(|h| self.kernel(h)) {
            Some(k) => Resolution::Kernel(Box::new(k.clone())),
            None => self.of_launch(&rec.launch),
        }
    }

    /// The kernel a launch ran: through the fatbinary it was registered from (the compile that
    /// produced it, hence the exact module), else by its name where that is unique.
    pub fn of_launch(&self, launch: &LaunchRecord) -> Resolution {
        self.of_kernel(launch.fatbin.as_deref(), &launch.kernel, &launch.arch)
    }

    /// The kernel of this mangled name registered from this fatbinary (where known), as
    /// `of_launch` finds a launch's; `arch` picks among the builds of one source ("": any).
    pub fn of_kernel(&self, fatbin: Option<&str>, name: &str, arch: &str) -> Resolution {
        let named = |k: &&KernelRecord| k.signature.name == name;
        if let Some(fatbin) = fatbin {
            let from_compile: Vec<&KernelRecord> = self
                .units
                .iter()
                .filter(|u| u.fatbins.iter().any(|f| f == fatbin))
                .flat_map(|u| u.kernels.values().flatten())
                .filter_map(|h| self.kernel(h))
                .filter(named)
                .collect();
            if let Some(k) = pick_arch(&from_compile, arch) {
                return Resolution::Kernel(Box::new(k.clone()));
            }
        }
        let same_name: Vec<&KernelRecord> = self.kernels.iter().filter(named).collect();
        match pick_arch(&same_name, arch) {
            Some(k) if distinct(&same_name) == 1 => Resolution::Kernel(Box::new(k.clone())),
            _ if same_name.is_empty() => Resolution::Missing,
            _ => Resolution::Ambiguous(same_name.into_iter().cloned().collect()),
        }
    }

    /// The stored kernels a user's word names: a hash or a prefix of one (4 hex digits at
    /// least), a mangled name, a demangled name, or a demangled name without its parameters
    /// (`saxpy` or `saxpy(` for `saxpy(float, float const*, float*, int)`).
    pub fn select(&self, word: &str) -> Vec<&KernelRecord> {
        self.kernels.iter().filter(|k| names(word, k)).collect()
    }

    /// The one kernel a word names, or an error that lists the candidates. Builds of one
    /// source for several archs give one kernel per arch; `arch` picks among those.
    pub fn select_one(&self, word: &str, arch: Option<&str>) -> Result<&KernelRecord, StoreError> {
        let found = self.select(word);
        if found.is_empty() {
            return Err(StoreError::NoKernel { word: word.into() });
        }
        if distinct(&found) > 1 {
            return Err(ambiguous(word, &found));
        }
        let pick = arch.and_then(|a| found.iter().find(|k| k.signature.arch == a));
        Ok(pick.copied().unwrap_or(found[0]))
    }
}

/// Whether `word` names kernel `k` (see `Index::select`).
pub fn names(word: &str, k: &KernelRecord) -> bool {
    let hex = word.len() >= 4 && word.bytes().all(|b| b.is_ascii_hexdigit());
    let d = &k.signature.demangled;
    k.hash == word
        || (hex && k.hash.starts_with(word))
        || k.signature.name == word
        || d == word
        || d.strip_prefix(word)
            .is_some_and(|rest| rest.starts_with('(') || rest.starts_with('<'))
        // `saxpy(` or `smooth<float>(`: the name up to its parameters, as scripts write it
        // (a template's demangled name starts with its return type: `void smooth<float>(…)`).
        || (word.ends_with('(') && (d.starts_with(word) || d.contains(&format!(" {word}"))))
}

/// How many different kernels, counting one source kernel built for several archs once.
pub fn distinct(kernels: &[&KernelRecord]) -> usize {
    kernels
        .iter()
        .map(|k| {
            let at = k.signature.source.as_ref().map(|s| (&s.file, s.line));
            (&k.signature.name, at)
        })
        .collect::<BTreeSet<_>>()
        .len()
}

/// The error for a word that names several different kernels, listing each with its hash.
pub fn ambiguous(word: &str, found: &[&KernelRecord]) -> StoreError {
    let candidates = found
        .iter()
        .map(|k| format!("  {}  {}", k.hash, describe(k)))
        .collect::<Vec<_>>()
        .join("\n");
    StoreError::Ambiguous {
        word: word.into(),
        count: distinct(found),
        builds: found.len(),
        candidates,
    }
}

/// `name (arch) at file:line`, how a kernel is shown where its hash alone would not say much.
pub fn describe(k: &KernelRecord) -> String {
    let at = k
        .signature
        .source
        .as_ref()
        .map(|s| format!(" at {}:{}", s.file, s.line))
        .unwrap_or_default();
    format!("{} ({}){at}", k.signature.demangled, k.signature.arch)
}

/// The kernel built for `arch` if there is one, else the first.
fn pick_arch<'a>(kernels: &[&'a KernelRecord], arch: &str) -> Option<&'a KernelRecord> {
    kernels
        .iter()
        .find(|k| k.signature.arch == arch)
        .or(kernels.first())
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{KernelSignature, SourceLoc};
    use crate::CompileCommand;
    use std::collections::BTreeMap;

    fn kernel(hash: &str, name: &str, file: &str, arch: &str) -> KernelRecord {
        KernelRecord {
            format: 1,
            hash: hash.into(),
            signature: KernelSignature {
                name: name.into(),
                demangled: format!("{}(int, float*)", name.trim_start_matches("_Z7")),
                arch: arch.into(),
                params: Vec::new(),
                source: Some(SourceLoc {
                    file: file.into(),
                    line: 3,
                }),
                unoptimized: false,
            },
            compile: CompileCommand {
                cwd: "/".into(),
                args: Vec::new(),
                env: BTreeMap::new(),
                clang: "clang".into(),
                clang_version: String::new(),
            },
            r3_version: "0".into(),
            variant_of: None,
        }
    }

    fn unit(source: &str, hashes: &[&str], fatbin: &str) -> Unit {
        Unit {
            format: 1,
            id: source.into(),
            source: source.into(),
            output: None,
            kernels: BTreeMap::from([(
                "sm_90".to_owned(),
                hashes.iter().map(|&h| h.into()).collect(),
            )]),
            fatbins: vec![fatbin.into()],
            compile: kernel("x", "x", "x", "x").compile,
        }
    }

    fn launch(name: &str, fatbin: Option<&str>) -> LaunchRecord {
        let mut l: LaunchRecord = serde_json::from_value(serde_json::json!({
            "format": 1, "kernel": name, "arch": "sm_90", "grid": [1,1,1], "block": [1,1,1],
            "shared_bytes": 0, "params": [], "args_hex": "", "va_base": 0, "va_size": 0,
            "in_app_ms": 0.0, "regions": 0, "bytes_in": 0, "bytes_changed": 0,
            "replayable": true, "not_replayable": null, "program": "p", "pid": 1, "unix_time": 0
        }))
        .unwrap();
        l.fatbin = fatbin.map(Into::into);
        l
    }

    fn two_programs() -> Index {
        Index {
            kernels: vec![
                kernel("aaaa111122223333", "_Z7kernel1", "/a/prog.cu", "sm_90"),
                kernel("bbbb111122223333", "_Z7kernel1", "/b/prog.cu", "sm_90"),
            ],
            units: vec![
                unit("/a/prog.cu", &["aaaa111122223333"], "fa"),
                unit("/b/prog.cu", &["bbbb111122223333"], "fb"),
            ],
        }
    }

    fn hash(r: Resolution) -> String {
        match r {
            Resolution::Kernel(k) => k.hash.to_string(),
            other => panic!("not resolved: {other:?}"),
        }
    }

    #[test]
    fn a_launch_finds_its_kernel_through_the_fatbinary_it_ran() {
        let idx = two_programs();
        assert_eq!(
            hash(idx.of_launch(&launch("_Z7kernel1", Some("fa")))),
            "aaaa111122223333"
        );
        assert_eq!(
            hash(idx.of_launch(&launch("_Z7kernel1", Some("fb")))),
            "bbbb111122223333"
        );
        // Without a known fatbinary the name is not enough when two kernels share it.
        assert!(matches!(
            idx.of_launch(&launch("_Z7kernel1", None)),
            Resolution::Ambiguous(v) if v.len() == 2
        ));
        assert!(matches!(
            idx.of_launch(&launch("_Z7kernel1", Some("unknown"))),
            Resolution::Ambiguous(_)
        ));
        assert!(matches!(
            idx.of_launch(&launch("_Z5other", None)),
            Resolution::Missing
        ));
    }

    /// A unit as a compile stores it: named by its source (`unit` names it by the path itself).
    fn as_stored(mut u: Unit) -> Unit {
        u.id = Unit::id_for(&u.source, u.output.as_deref());
        u
    }

    /// A store on disk holding `two_programs`, and one recording of `_Z7kernel1` from program a.
    fn stored_two_programs(root: &std::path::Path) -> (Store, Recording) {
        let store = Store::create(root).unwrap();
        for k in two_programs().kernels {
            let dir = store.kernel_dir(&k.hash);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("kernel.json"), serde_json::to_vec(&k).unwrap()).unwrap();
        }
        for u in two_programs().units {
            store.put_unit(&as_stored(u)).unwrap();
        }
        let ldir = root.join("records/0123456789abcdef/1");
        std::fs::create_dir_all(&ldir).unwrap();
        let l = launch("_Z7kernel1", Some("fa"));
        std::fs::write(ldir.join("launch.json"), serde_json::to_vec(&l).unwrap()).unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        (store, rec)
    }

    #[test]
    fn a_recording_keeps_the_kernel_it_ran_through_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let (store, rec) = stored_two_programs(dir.path());
        assert_eq!(rec.kernel, None);
        let resolved = store.resolve_recorded(vec![rec]);
        assert_eq!(resolved[0].kernel.as_deref(), Some("aaaa111122223333"));
        // Program a is rebuilt: its unit now holds other fatbinaries, so the launch's leads
        // nowhere and its name fits two kernels.
        let mut rebuilt = as_stored(two_programs().units.remove(0));
        rebuilt.fatbins = vec!["fa2".into()];
        store.put_unit(&rebuilt).unwrap();
        let index = store.index().unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        assert!(matches!(
            index.of_launch(&rec.launch),
            Resolution::Ambiguous(_)
        ));
        assert_eq!(hash(index.of_recording(&rec)), "aaaa111122223333");
        assert_eq!(store.launches_of("aaaa111122223333").unwrap().len(), 1);
        // A reference to a kernel no longer stored, or a damaged one, is no reference.
        std::fs::write(rec.dir.join("kernel.ref.json"), b"{\"format\": 1, \"kern").unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        assert_eq!(rec.kernel, None);
        store
            .set_kernel_ref(&rec, &"cccc111122223333".into())
            .unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        assert!(matches!(index.of_recording(&rec), Resolution::Ambiguous(_)));
    }

    #[test]
    fn a_unique_name_resolves_without_a_fatbinary() {
        let mut idx = two_programs();
        idx.kernels.pop();
        assert_eq!(
            hash(idx.of_launch(&launch("_Z7kernel1", None))),
            "aaaa111122223333"
        );
    }

    #[test]
    fn a_name_shared_by_two_kernels_is_ambiguous_and_lists_both() {
        let idx = two_programs();
        let e = idx.select_one("kernel1", None).unwrap_err().to_string();
        assert!(
            e.contains("aaaa111122223333") && e.contains("/b/prog.cu:3"),
            "{e}"
        );
        assert_eq!(
            idx.select_one("bbbb", None).unwrap().hash,
            "bbbb111122223333"
        );
        assert!(matches!(
            idx.select_one("nothing", None),
            Err(StoreError::NoKernel { .. })
        ));
        // `kernel` is no kernel's name: a prefix of a name must end at its parameters.
        assert!(idx.select("kernel").is_empty());
        assert_eq!(idx.select("kernel1(").len(), 2);
        let mut t = kernel(
            "dddd111122223333",
            "_Z6smoothIfEviPKT_PS0_",
            "/t.cu",
            "sm_90",
        );
        t.signature.demangled = "void smooth<float>(int, float const*, float*)".into();
        let idx = Index {
            kernels: vec![t],
            units: Vec::new(),
        };
        assert_eq!(idx.select("smooth<float>(").len(), 1);
    }

    #[test]
    fn one_source_kernel_built_for_two_archs_is_one_kernel() {
        let mut idx = two_programs();
        idx.kernels[1] = kernel("cccc111122223333", "_Z7kernel1", "/a/prog.cu", "sm_80");
        let k = idx.select_one("kernel1", Some("sm_80")).unwrap();
        assert_eq!(k.hash, "cccc111122223333");
        assert_eq!(
            idx.select_one("kernel1", Some("sm_90")).unwrap().hash,
            "aaaa111122223333"
        );
    }
}
