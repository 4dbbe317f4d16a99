//! Kernel identity. A kernel is its content hash (`kernels/<hash>/`), never its name: names
//! collide across programs (`kernel1(int, float*, float*)` is everywhere) and across archs.
//! This module answers the two questions that need a name or a launch turned into a hash:
//! which stored kernel a recorded launch ran, and which stored kernels a user's word names.
//!
//! A word names the kernels that the store's latest builds contain first: each compile's unit
//! (`units/<id>.json`, replaced when its source is compiled again) lists the kernels it holds,
//! and a kernel no unit lists is an *old version* (its source was edited and compiled again).
//! Old versions are listed apart and are chosen by their hash only, never by a name.

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
    /// tune say why they cannot be used. `all` leaves out the recordings of old versions (no
    /// current build contains them, so nothing would ship their winners). None at all is an
    /// error that says how to get some (or names the old versions, or the orphaned trials of a
    /// kernel whose directory was deleted).
    pub fn select_recordings(&self, sel: &Selection) -> Result<Vec<Recording>, StoreError> {
        let all = self.recordings(None)?;
        let replayable = |r: &Recording| r.launch.not_replayable.is_none();
        let recs: Vec<_> = match (&sel.kernel, &sel.record, sel.all) {
            (_, Some(id), _) => all.into_iter().filter(|r| &r.id == id).collect(),
            (None, None, true) => {
                let index = self.index()?;
                let current = |r: &Recording| match index.of_recording(r) {
                    Resolution::Kernel(k) => !index.is_old(&k),
                    _ => true,
                };
                all.into_iter().filter(replayable).filter(current).collect()
            }
            (Some(word), None, _) => {
                self.recordings_of(word, all.into_iter().filter(replayable))?
            }
            (None, None, false) => return Err(StoreError::NothingSelected),
        };
        if !recs.is_empty() {
            return Ok(recs);
        }
        if let Some(word) = sel.kernel.as_deref() {
            let index = self.index()?;
            if index.select(word).is_empty() {
                if let Some(e) = index.only_old(word) {
                    return Err(e);
                }
                if let Some(e) = self.orphaned_error(word)? {
                    return Err(e);
                }
            }
        }
        Err(StoreError::NoRecording)
    }

    /// The recordings of the kernel a word names (`Index::select`: hash, prefix, or name, the
    /// current builds' kernels first). A name that several recorded kernels share is an error
    /// listing them, never a mix of their recordings.
    fn recordings_of(
        &self,
        word: &str,
        recs: impl Iterator<Item = Recording>,
    ) -> Result<Vec<Recording>, StoreError> {
        let index = self.index()?;
        let chosen: BTreeSet<&str> = index.select(word).iter().map(|k| k.hash.as_str()).collect();
        let mut out = Vec::new();
        let mut kernels = Vec::new();
        for rec in recs {
            match index.of_recording(&rec) {
                Resolution::Kernel(k) if chosen.contains(k.hash.as_str()) => {
                    kernels.push(*k);
                    out.push(rec);
                }
                Resolution::Ambiguous(ks)
                    if ks.iter().any(|k| chosen.contains(k.hash.as_str())) =>
                {
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
            return Err(index.ambiguity(word, &refs));
        }
        Ok(out)
    }
}

/// The stored kernels and units, read once: what resolution needs.
pub struct Index {
    kernels: Vec<KernelRecord>,
    units: Vec<Unit>,
    /// The old versions (`Index::is_old`).
    old: BTreeSet<KernelHash>,
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
        let (units, damaged) = self.units_and_damage()?;
        for e in &damaged {
            super::warn_left_out(e, "that compile's unit");
        }
        Ok(Index::new(self.kernels()?, units, damaged.is_empty()))
    }

    /// The usable recordings of the kernel with this content hash (replayable, and not found
    /// to be irreproducible), in the store's order: the distinct launches a winner must
    /// reproduce before it is confirmed.
    pub fn launches_of(
        &self,
        hash: &KernelHash,
    ) -> Result<Vec<super::records::Recording>, StoreError> {
        let index = self.index()?;
        Ok(self
            .recordings(None)?
            .into_iter()
            .filter(|r| r.usable())
            .filter(|r| matches!(index.of_recording(r), Resolution::Kernel(k) if k.hash == *hash))
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

    /// Each kernel's recorded launches that cannot be replayed (texture objects, CUDA graphs,
    /// pinned host memory, ...), by content hash: how many, and why the first cannot.
    pub fn unreplayable_by_kernel(
        &self,
    ) -> Result<std::collections::BTreeMap<KernelHash, (usize, String)>, StoreError> {
        let index = self.index()?;
        let mut out: std::collections::BTreeMap<KernelHash, (usize, String)> = Default::default();
        for r in self.recordings(None)? {
            let Some(why) = r.launch.not_replayable.as_deref() else {
                continue;
            };
            if let Resolution::Kernel(k) = index.of_recording(&r) {
                let e = out
                    .entry(k.hash.clone())
                    .or_insert_with(|| (0, why.to_owned()));
                e.0 += 1;
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
    /// The index of these kernels and units; `complete`: every unit of the store is among
    /// them (none was left out as unreadable), without which no kernel is taken for old.
    pub fn new(kernels: Vec<KernelRecord>, units: Vec<Unit>, complete: bool) -> Index {
        let held: BTreeSet<&str> = units
            .iter()
            .flat_map(|u| u.kernels.values().flatten().map(|h| h.as_str()))
            .collect();
        let old = kernels
            .iter()
            .filter(|k| complete && !held.contains(k.hash.as_str()))
            .filter(|k| units.iter().any(|u| compiled_from(k, &u.source)))
            .map(|k| k.hash.clone())
            .collect();
        Index {
            kernels,
            units,
            old,
        }
    }

    pub fn kernels(&self) -> &[KernelRecord] {
        &self.kernels
    }

    pub fn kernel(&self, hash: &KernelHash) -> Option<&KernelRecord> {
        self.kernels.iter().find(|k| k.hash == *hash)
    }

    /// Whether no current build contains this kernel: the compile that stored it was run again
    /// since (the unit of one of its sources is there), and no unit, each a compile's latest,
    /// holds it now: its source was edited. A kernel whose compile left no unit (a store of
    /// kernels only, like the corpus's; a unit deleted or unreadable) is never old: nothing
    /// says that a build replaced it.
    pub fn is_old(&self, k: &KernelRecord) -> bool {
        self.is_old_hash(&k.hash)
    }

    /// [`Index::is_old`] by hash.
    pub fn is_old_hash(&self, hash: &KernelHash) -> bool {
        self.old.contains(hash)
    }

    /// Every compile's unit, by source file.
    pub fn units(&self) -> &[Unit] {
        &self.units
    }

    /// The kernels the current builds contain, in the store's order.
    pub fn current(&self) -> Vec<&KernelRecord> {
        self.kernels.iter().filter(|k| !self.is_old(k)).collect()
    }

    /// The old versions (`is_old`), in the store's order.
    pub fn old(&self) -> Vec<&KernelRecord> {
        self.kernels.iter().filter(|k| self.is_old(k)).collect()
    }

    /// The kernel a recording ran: the one `r3 record` resolved when it recorded it, while that
    /// kernel is still stored; else as `of_launch` finds it now (recordings made before r3
    /// kept the reference, or whose reference was damaged).
    pub fn of_recording(&self, rec: &Recording) -> Resolution {
        match rec.kernel.as_ref().and_then(|h| self.kernel(h)) {
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

    /// Every stored kernel a user's word names, current and old apart: exactly (see [`names`])
    /// where any kernel is named so, else by a prefix of its name ([`names_by_prefix`]).
    pub fn named(&self, word: &str) -> Named<'_> {
        let mut found: Vec<&KernelRecord> =
            self.kernels.iter().filter(|k| names(word, k)).collect();
        if found.is_empty() {
            found = self
                .kernels
                .iter()
                .filter(|k| names_by_prefix(word, k))
                .collect();
        }
        let (old, current) = found.into_iter().partition(|k| self.is_old(k));
        Named { current, old }
    }

    /// The stored kernels a user's word names, as commands take it: the kernels of the current
    /// builds that [`Index::named`] finds; an old version only where the word is its hash or a
    /// prefix of one, and no current kernel's (an old version is never chosen by a name).
    pub fn select(&self, word: &str) -> Vec<&KernelRecord> {
        if let Some(k) = self.kernels.iter().find(|k| k.hash == word) {
            return vec![k];
        }
        let n = self.named(word);
        if !n.current.is_empty() || !is_hash_word(word) {
            return n.current;
        }
        n.old
    }

    /// Every build of the one kernel a word names ([`Index::select`]: one per arch it was
    /// compiled for), for commands that act on them all: an error where the word names several
    /// kernels, or old versions only; empty where it names nothing.
    pub fn select_kernel(&self, word: &str) -> Result<Vec<&KernelRecord>, StoreError> {
        let found = self.select(word);
        if distinct(&found) > 1 {
            return Err(self.ambiguity(word, &found));
        }
        if let Some(e) = found.is_empty().then(|| self.only_old(word)).flatten() {
            return Err(e);
        }
        Ok(found)
    }

    /// The one kernel a word names, or an error that lists the candidates (the old versions
    /// apart). Builds of one source for several archs give one kernel per arch; `arch` picks
    /// among those.
    pub fn select_one(&self, word: &str, arch: Option<&str>) -> Result<&KernelRecord, StoreError> {
        let found = self.select(word);
        if found.is_empty() {
            return Err(self
                .only_old(word)
                .unwrap_or(StoreError::NoKernel { word: word.into() }));
        }
        if distinct(&found) > 1 {
            return Err(self.ambiguity(word, &found));
        }
        let pick = arch.and_then(|a| found.iter().find(|k| k.signature.arch == a));
        Ok(pick.copied().unwrap_or(found[0]))
    }

    /// [`ambiguous`], with the old versions the word also names listed apart.
    pub fn ambiguity(&self, word: &str, found: &[&KernelRecord]) -> StoreError {
        let mut e = ambiguous(word, found);
        let old: Vec<&KernelRecord> = self
            .named(word)
            .old
            .into_iter()
            .filter(|o| !found.iter().any(|f| f.hash == o.hash))
            .collect();
        if let StoreError::Ambiguous { old: text, .. } = &mut e {
            if !old.is_empty() {
                *text = format!(
                    "\nand old versions, which no current build contains (chosen only by their hash; `r3 gc` removes them):\n{}",
                    listing(&old)
                );
            }
        }
        e
    }

    /// The error for a word that names old versions only (`StoreError::OnlyOld`); None where
    /// it names none.
    pub fn only_old(&self, word: &str) -> Option<StoreError> {
        let old = self.named(word).old;
        (!old.is_empty()).then(|| StoreError::OnlyOld {
            word: word.into(),
            candidates: listing(&old),
        })
    }
}

/// A stored kernel's module, and its (mangled) name: what a command that takes a device IR file
/// or a kernel (`r3 egraph`) reads where its word is no file.
#[derive(Debug)]
pub struct NamedModule {
    pub bitcode: Vec<u8>,
    pub name: String,
}

/// Why a word that is no file gives no stored kernel's module.
#[derive(Debug, thiserror::Error)]
pub enum NamedModuleError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("'{word}' is no file, and the store cannot be opened")]
    Open {
        word: String,
        #[source]
        source: StoreError,
    },
    #[error("'{word}' is no file; as a kernel")]
    Select {
        word: String,
        #[source]
        source: StoreError,
    },
}

/// The module of the one kernel `word` names, in the store a command uses (`explicit`, else as
/// [`super::locate`] finds it from `cwd`).
pub fn module_named(
    explicit: Option<&std::path::Path>,
    cwd: &std::path::Path,
    word: &str,
) -> Result<NamedModule, NamedModuleError> {
    let loc = super::locate(explicit, cwd)?;
    let store = Store::open(&loc.path).map_err(|source| NamedModuleError::Open {
        word: word.to_owned(),
        source,
    })?;
    let index = store.index()?;
    let k = index
        .select_one(word, None)
        .map_err(|source| NamedModuleError::Select {
            word: word.to_owned(),
            source,
        })?;
    Ok(NamedModule {
        bitcode: store.kernel_bitcode(&k.hash)?,
        name: k.signature.name.clone(),
    })
}

/// The kernels a word names: those of the current builds, and old versions.
#[derive(Debug, Default)]
pub struct Named<'a> {
    pub current: Vec<&'a KernelRecord>,
    pub old: Vec<&'a KernelRecord>,
}

/// Whether a word has the form of a hash or a prefix of one (4 hex digits at least).
fn is_hash_word(word: &str) -> bool {
    word.len() >= 4 && word.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `word` names kernel `k` exactly: its hash or a prefix of one (4 hex digits at
/// least), its mangled name, or one of the forms of its demangled name ([`name_forms`]) whole,
/// up to its parameters, or up to its template arguments (`scale_kernel` names
/// `scale_kernel<float>(float*, int)` and `scale_kernel<double>(double*, int)` both). A word
/// that ends in `(` names the forms it starts (`saxpy(`, `smooth<float>(`, as scripts write it).
pub fn names(word: &str, k: &KernelRecord) -> bool {
    if k.hash == word
        || (is_hash_word(word) && k.hash.starts_with(word))
        || k.signature.name == word
    {
        return true;
    }
    name_forms(&k.signature.demangled).iter().any(|f| {
        f == word
            || f.strip_prefix(word)
                .is_some_and(|rest| rest.starts_with('(') || rest.starts_with('<'))
            || (word.ends_with('(') && f.starts_with(word))
    })
}

/// Whether `word` is a prefix (3 characters at least) of kernel `k`'s name, qualified or not,
/// without its return type: what a word names where it names no kernel exactly
/// (`DeviceRadixSortOnes` for `cub::…::DeviceRadixSortOnesweepKernel<…>(…)`).
pub fn names_by_prefix(word: &str, k: &KernelRecord) -> bool {
    let bare = without_return_type(&k.signature.demangled);
    word.chars().count() >= 3 && (bare.starts_with(word) || unqualified(bare).starts_with(word))
}

/// The forms of a demangled kernel name that a user may write, besides the mangled name: as
/// demangled (`void scale_kernel<float>(float*, int)`), without its return type
/// (`scale_kernel<float>(float*, int)`), without its namespaces too
/// (`DeviceRadixSortOnesweepKernel<…full arguments…>(…)`), and its [`short_name`], as tables
/// show it.
pub fn name_forms(demangled: &str) -> Vec<String> {
    let bare = without_return_type(demangled);
    let mut forms = vec![
        demangled.to_owned(),
        bare.to_owned(),
        unqualified(bare),
        short_name(demangled),
    ];
    forms.dedup();
    forms
}

/// A demangled kernel name without its return type: a function template's demangled name
/// starts with it (`void scale_kernel<float>(float*, int)`), and a kernel's is always `void`.
pub fn without_return_type(demangled: &str) -> &str {
    demangled.strip_prefix("void ").unwrap_or(demangled)
}

/// The name and the parameter list of a demangled function (`name<args>`, `params` without
/// their parentheses); no parameter list: the whole text and None.
fn split_params(s: &str) -> (&str, Option<&str>) {
    let b = s.as_bytes();
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' if depth == 0 && !s[i..].starts_with("(anonymous namespace)") => {
                let end = matching(b, i).unwrap_or(b.len() - 1);
                return (&s[..i], Some(&s[i + 1..end.max(i + 1)]));
            }
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
    }
    (s, None)
}

/// The index of the bracket that closes the one at `open` (any of `<([{`, nested in any
/// order, as a demangled name nests them).
fn matching(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// A function name without the namespaces and classes it is in, its template arguments and
/// parameters as they are: `cub::Foo<int>(int*)` → `Foo<int>(int*)`.
fn unqualified(bare: &str) -> String {
    let bare = bare.replace("(anonymous namespace)::", "");
    let (name, params) = split_params(&bare);
    let b = name.as_bytes();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' | b')' | b']' | b'}' => depth -= 1,
            b':' if depth == 0 && b.get(i + 1) == Some(&b':') => start = i + 2,
            _ => {}
        }
    }
    match params {
        Some(p) => format!("{}({p})", &name[start..]),
        None => name[start..].to_owned(),
    }
}

/// Template argument lists longer than this (once shortened themselves) show as `<…>`.
const LONG_ARGUMENTS: usize = 20;
/// A short name longer than this shows its parameters as `(…)`.
const SHORT_NAME: usize = 56;

/// A kernel's name as tables show it, short enough to fit beside its numbers: without its
/// return type and namespaces, long template argument lists collapsed
/// (`DeviceRadixSortOnesweepKernel<…>`), and its parameters, shortened alike, collapsed too
/// where the name would be longer than a column (`(…)`). Short names are for people: two
/// kernels may share one (`with_short_hashes` tells them apart), and JSON and `--full-names`
/// give the demangled name.
pub fn short_name(demangled: &str) -> String {
    let s = demangled.replace("(anonymous namespace)::", "");
    let (name, params) = split_params(without_return_type(&s));
    let name = shorten(name);
    let Some(params) = params else {
        return name;
    };
    let params: Vec<String> = split_top(params).into_iter().map(shorten).collect();
    let whole = format!("{name}({})", params.join(", "));
    if whole.chars().count() > SHORT_NAME {
        format!("{name}(…)")
    } else {
        whole
    }
}

/// The comma-separated parts of a list at its own level (`a<b, c>, d` → `a<b, c>`, `d`).
fn split_top(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = list[start..].trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last);
    }
    out
}

/// One type or name shortened: its qualifiers dropped (`cub::detail::Foo` → `Foo`), its
/// template argument list shortened alike, or `<…>` where that is still long; other brackets
/// (a function pointer's, a lambda's) kept as they are.
fn shorten(t: &str) -> String {
    let b = t.as_bytes();
    let mut out = String::new();
    // Where in `out` the current name began: a qualifier before `::` is cut back to it.
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b':' if b.get(i + 1) == Some(&b':') => {
                out.truncate(start);
                i += 2;
                continue;
            }
            b'<' | b'(' | b'[' | b'{' => {
                let end = matching(b, i).unwrap_or(b.len() - 1);
                let inner = &t[i + 1..end.max(i + 1)];
                if c == b'<' {
                    let args: Vec<String> = split_top(inner).into_iter().map(shorten).collect();
                    let args = args.join(", ");
                    if args.chars().count() > LONG_ARGUMENTS {
                        out.push_str("<…>");
                    } else {
                        out.push_str(&format!("<{args}>"));
                    }
                } else {
                    out.push_str(&t[i..=end.min(b.len() - 1)]);
                }
                i = end + 1;
                continue;
            }
            b' ' | b',' | b'*' | b'&' => {
                out.push(c as char);
                start = out.len();
            }
            _ => {
                // One whole UTF-8 character (names are ASCII; an odd byte stays whole).
                let ch = t[i..].chars().next().unwrap_or('?');
                out.push(ch);
                i += ch.len_utf8();
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Each row's name for a table, from (name, key) pairs: the name alone where no row of
/// another key has it, else with the key's first 8 characters beside it (`dot(float*) [3fa9c2d1]`),
/// so that two versions of one kernel, or two programs' `kernel1`, are told apart.
pub fn with_short_hashes(rows: &[(String, String)]) -> Vec<String> {
    rows.iter()
        .map(|(name, key)| {
            let repeated = rows.iter().any(|(n, k)| n == name && k != key);
            if repeated {
                format!("{name} [{}]", key.get(..8).unwrap_or(key))
            } else {
                name.clone()
            }
        })
        .collect()
}

/// How many different kernels, counting one source kernel built for several archs once: by
/// name and place in the source, and within those, by how many builds one arch has (two
/// versions of an edited kernel at the same line are two kernels).
pub fn distinct(kernels: &[&KernelRecord]) -> usize {
    let mut per_arch: std::collections::BTreeMap<
        _,
        std::collections::BTreeMap<&str, BTreeSet<&str>>,
    > = Default::default();
    for k in kernels {
        let at = k.signature.source.as_ref().map(|s| (&s.file, s.line));
        per_arch
            .entry((&k.signature.name, at))
            .or_default()
            .entry(k.signature.arch.as_str())
            .or_default()
            .insert(k.hash.as_str());
    }
    per_arch
        .values()
        .map(|archs| archs.values().map(BTreeSet::len).max().unwrap_or(1))
        .sum()
}

/// The error for a word that names several different kernels, listing each with its hash.
pub fn ambiguous(word: &str, found: &[&KernelRecord]) -> StoreError {
    StoreError::Ambiguous {
        word: word.into(),
        count: distinct(found),
        builds: found.len(),
        candidates: listing(found),
        old: String::new(),
    }
}

/// One line per kernel: its hash and [`describe`].
fn listing(found: &[&KernelRecord]) -> String {
    found
        .iter()
        .map(|k| format!("  {}  {}", k.hash, describe(k)))
        .collect::<Vec<_>>()
        .join("\n")
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

/// Whether the compile that first stored kernel `k` compiled `source` (one of its arguments
/// is that file, from its working directory, as the driver names a unit's source).
pub fn compiled_from(k: &KernelRecord, source: &std::path::Path) -> bool {
    k.compile
        .args
        .iter()
        .skip(1)
        .any(|a| k.compile.cwd.join(a) == source)
}

/// The kernel built for `arch` if there is one, else the first.
fn pick_arch<'a>(kernels: &[&'a KernelRecord], arch: &str) -> Option<&'a KernelRecord> {
    kernels
        .iter()
        .find(|k| k.signature.arch == arch)
        .or(kernels.first())
        .copied()
}

/// Every stored kernel's usable recordings (`Recording::usable`), in the store's order, each resolved to
/// the kernel it ran (`Index::of_recording`) in one pass over the store:
/// `Store::launches_of` of every kernel at once, for the readers that go over many searches
/// (`r3 status`, `r3 report`, tune's `ships:` lines), which would read every kernel and every
/// recording again for each search otherwise (issue 62: 38 s for `r3 status` at 963 searches).
#[derive(Debug, Clone, Default)]
pub struct UsableLaunches(std::collections::BTreeMap<KernelHash, Vec<Recording>>);

impl UsableLaunches {
    /// The usable recordings of the kernel with content hash `hash`, as `Store::launches_of`
    /// lists them; none for a kernel the store does not hold.
    pub fn of(&self, hash: &KernelHash) -> &[Recording] {
        self.0.get(hash).map_or(&[], Vec::as_slice)
    }

    /// Each kernel's recordings by the time they stand for (`time`, `Store::recorded_time`),
    /// the most first, as the search takes them ([`super::records::heaviest_first`]).
    pub fn heaviest_first(mut self, time: &std::collections::HashMap<String, f64>) -> Self {
        for recs in self.0.values_mut() {
            super::records::heaviest_first(recs, time);
        }
        self
    }
}

impl super::Store {
    /// [`UsableLaunches`]: the store's kernels and recordings, read once.
    pub fn usable_launches(&self) -> Result<UsableLaunches, StoreError> {
        let index = self.index()?;
        let mut by: std::collections::BTreeMap<KernelHash, Vec<Recording>> = Default::default();
        for r in self.recordings(None)?.into_iter().filter(Recording::usable) {
            if let Resolution::Kernel(k) = index.of_recording(&r) {
                by.entry(k.hash).or_default().push(r);
            }
        }
        Ok(UsableLaunches(by))
    }
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
                args: vec!["r3-clang++".into(), file.into()],
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
        Index::new(
            vec![
                kernel("aaaa111122223333", "_Z7kernel1", "/a/prog.cu", "sm_90"),
                kernel("bbbb111122223333", "_Z7kernel1", "/b/prog.cu", "sm_90"),
            ],
            vec![
                unit("/a/prog.cu", &["aaaa111122223333"], "fa"),
                unit("/b/prog.cu", &["bbbb111122223333"], "fb"),
            ],
            true,
        )
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
        assert_eq!(
            store
                .launches_of(&KernelHash::from("aaaa111122223333"))
                .unwrap()
                .len(),
            1
        );
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
        // `kernel` is no kernel's name, only a prefix of two: both, which one command refuses.
        assert_eq!(idx.select("kernel").len(), 2);
        assert!(matches!(
            idx.select_one("kernel", None),
            Err(StoreError::Ambiguous { .. })
        ));
        assert_eq!(idx.select("kernel1(").len(), 2);
        let mut t = kernel(
            "dddd111122223333",
            "_Z6smoothIfEviPKT_PS0_",
            "/t.cu",
            "sm_90",
        );
        t.signature.demangled = "void smooth<float>(int, float const*, float*)".into();
        let idx = Index::new(vec![t], Vec::new(), true);
        assert_eq!(idx.select("smooth<float>(").len(), 1);
    }

    #[test]
    fn one_source_kernel_built_for_two_archs_is_one_kernel() {
        let mut u = unit("/a/prog.cu", &["aaaa111122223333"], "fa");
        u.kernels
            .insert("sm_80".into(), vec!["cccc111122223333".into()]);
        let idx = Index::new(
            vec![
                kernel("aaaa111122223333", "_Z7kernel1", "/a/prog.cu", "sm_90"),
                kernel("cccc111122223333", "_Z7kernel1", "/a/prog.cu", "sm_80"),
            ],
            vec![u],
            true,
        );
        let k = idx.select_one("kernel1", Some("sm_80")).unwrap();
        assert_eq!(k.hash, "cccc111122223333");
        assert_eq!(
            idx.select_one("kernel1", Some("sm_90")).unwrap().hash,
            "aaaa111122223333"
        );
    }

    #[test]
    fn a_word_selects_every_build_of_one_kernel_and_refuses_several_or_old_ones() {
        let mut u = unit("/a/prog.cu", &["aaaa111122223333"], "fa");
        u.kernels
            .insert("sm_80".into(), vec!["cccc111122223333".into()]);
        let builds = Index::new(
            vec![
                kernel("aaaa111122223333", "_Z7kernel1", "/a/prog.cu", "sm_90"),
                kernel("cccc111122223333", "_Z7kernel1", "/a/prog.cu", "sm_80"),
            ],
            vec![u],
            true,
        );
        assert_eq!(builds.select_kernel("kernel1").unwrap().len(), 2);
        assert!(builds.select_kernel("nothing").unwrap().is_empty());
        assert!(matches!(
            two_programs().select_kernel("kernel1"),
            Err(StoreError::Ambiguous { .. })
        ));
        // Renamed away, the current kernel's old name names only its old version.
        let idx = edited_and_reverted();
        let mut u = idx.units[0].clone();
        u.kernels
            .insert("sm_90".into(), vec!["cccc000000000003".into()]);
        let gone = Index::new(idx.kernels().to_vec(), vec![u], true);
        assert!(matches!(
            gone.select_kernel("dot"),
            Err(StoreError::OnlyOld { .. })
        ));
    }

    /// A kernel edited, compiled, reverted and compiled again: two versions of one kernel at
    /// one line, the unit holding the reverted one (issue 59, item 3).
    fn edited_and_reverted() -> Index {
        Index::new(
            vec![
                kernel("aaaa000000000001", "_Z7dot", "/p/dot.cu", "sm_90"),
                kernel("bbbb000000000002", "_Z7dot", "/p/dot.cu", "sm_90"),
                kernel("cccc000000000003", "_Z7other", "/p/dot.cu", "sm_90"),
            ],
            vec![unit(
                "/p/dot.cu",
                &["aaaa000000000001", "cccc000000000003"],
                "f2",
            )],
            true,
        )
    }

    #[test]
    fn a_name_resolves_to_the_version_the_current_build_contains() {
        let idx = edited_and_reverted();
        let old: Vec<&str> = idx.old().iter().map(|k| k.hash.as_str()).collect();
        assert_eq!(old, ["bbbb000000000002"]);
        assert!(
            idx.is_old_hash(&KernelHash::from("bbbb000000000002"))
                && !idx.is_old_hash(&KernelHash::from("aaaa000000000001"))
        );
        for word in ["dot", "dot(int, float*)", "_Z7dot", "dot("] {
            assert_eq!(
                idx.select_one(word, None).unwrap().hash,
                "aaaa000000000001",
                "{word}"
            );
        }
        // The old one by its hash or a prefix of it: the word says which, nothing is guessed.
        assert_eq!(
            idx.select_one("bbbb0000", None).unwrap().hash,
            "bbbb000000000002"
        );
        // Two versions at one line for one arch are two kernels.
        let both: Vec<&KernelRecord> = idx.kernels().iter().take(2).collect();
        assert_eq!(distinct(&both), 2);
        // A word that names both current kernels lists them, and the old version apart.
        // One letter is no prefix.
        assert!(matches!(
            idx.select_one("d", None),
            Err(StoreError::NoKernel { .. })
        ));
        let e = idx.ambiguity("dot", &idx.current()).to_string();
        assert!(e.contains("aaaa000000000001"), "{e}");
        let (_, old_part) = e.split_once("and old versions").expect(&e);
        assert!(old_part.contains("bbbb000000000002"), "{e}");
        // The current kernel renamed away: its old name names only the old version, which no
        // name chooses.
        let mut u = idx.units[0].clone();
        u.kernels
            .insert("sm_90".into(), vec!["cccc000000000003".into()]);
        let gone = Index::new(idx.kernels().to_vec(), vec![u], true);
        let e = gone.select_one("dot", None).unwrap_err();
        assert!(matches!(e, StoreError::OnlyOld { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("aaaa000000000001") && e.contains("bbbb000000000002") && e.contains("r3 gc"),
            "{e}"
        );
        // A store without units (the corpus's) cannot say: nothing is old.
        let kernels_only = Index::new(idx.kernels().to_vec(), Vec::new(), true);
        assert!(kernels_only.old().is_empty());
        // Nor can one whose unit was unreadable, or a kernel whose compile left none.
        let damaged = Index::new(idx.kernels().to_vec(), idx.units.clone(), false);
        assert!(damaged.old().is_empty());
        let mut elsewhere = idx.kernels().to_vec();
        elsewhere[1].compile.args[1] = "/q/dot.cu".into();
        assert!(Index::new(elsewhere, idx.units.clone(), true)
            .old()
            .is_empty());
    }

    fn named(demangled: &str) -> KernelRecord {
        let mut k = kernel("dddd000000000004", "_Zmangled", "/t.cu", "sm_90");
        k.signature.demangled = demangled.into();
        k
    }

    #[test]
    fn names_as_people_write_them() {
        let k = named("void scale_kernel<float>(float*, int)");
        for word in [
            "scale_kernel<float>",
            "scale_kernel<float>(float*, int)",
            "void scale_kernel<float>(float*, int)",
            "scale_kernel",
            "scale_kernel<float>(",
            "dddd0000",
            "_Zmangled",
        ] {
            assert!(names(word, &k), "{word}");
        }
        for word in ["scale_kernel<double>", "scale", "kernel<float>", "void"] {
            assert!(!names(word, &k), "{word}");
        }
        assert!(names_by_prefix("scale", &k) && names_by_prefix("scale_kernel<fl", &k));
        assert!(!names_by_prefix("sc", &k) && !names_by_prefix("kernel", &k));
        let cub = named(CUB_ONESWEEP);
        for word in [
            "DeviceRadixSortOnesweepKernel",
            "DeviceRadixSortOnesweepKernel<…>",
            "DeviceRadixSortOnesweepKernel<…>(…)",
        ] {
            assert!(names(word, &cub), "{word}");
        }
        assert!(names_by_prefix("DeviceRadixSortOnes", &cub));
        assert!(names_by_prefix("cub::CUB_300001_SM_900::DeviceRadix", &cub));
        // Prefixes count only where nothing is named exactly.
        let idx = Index::new(
            vec![k, named("void scale_kernel_v2(float*)")],
            Vec::new(),
            true,
        );
        assert_eq!(idx.select("scale_kernel").len(), 1);
        assert_eq!(idx.select("scale_k").len(), 2);
    }

    const CUB_ONESWEEP: &str = "void cub::CUB_300001_SM_900::DeviceRadixSortOnesweepKernel<cub::CUB_300001_SM_900::detail::radix::policy_hub<unsigned int, cub::CUB_300001_SM_900::NullType, unsigned long>::Policy900, false, unsigned int, cub::CUB_300001_SM_900::NullType, unsigned long, int, int, cub::CUB_300001_SM_900::detail::identity_decomposer_t>(int*, int*, unsigned long*, unsigned long const*, unsigned int*, unsigned int const*, cub::CUB_300001_SM_900::NullType*, cub::CUB_300001_SM_900::NullType const*, unsigned long, int, int, cub::CUB_300001_SM_900::detail::identity_decomposer_t)";

    #[test]
    fn short_names_fit_a_column() {
        for (full, short) in [
            (
                "saxpy(float, float const*, float*, int)",
                "saxpy(float, float const*, float*, int)",
            ),
            ("void scale_kernel<float>(float*, int)", "scale_kernel<float>(float*, int)"),
            ("(anonymous namespace)::k(int)", "k(int)"),
            ("void ns::k<float>(float*)", "k<float>(float*)"),
            (CUB_ONESWEEP, "DeviceRadixSortOnesweepKernel<…>(…)"),
            (
                "void cub::CUB_300001_SM_900::detail::for_each::static_kernel<cub::CUB_300001_SM_900::detail::for_each::policy_hub_t::policy_500_t, unsigned long, thrust::THRUST_300001_SM_900_NS::cuda_cub::__uninitialized_fill::functor<thrust::THRUST_300001_SM_900_NS::device_ptr<double>, double> >(unsigned long, thrust::THRUST_300001_SM_900_NS::cuda_cub::__uninitialized_fill::functor<thrust::THRUST_300001_SM_900_NS::device_ptr<double>, double>)",
                "static_kernel<…>(unsigned long, functor<…>)",
            ),
            ("void f<(lambda)>(int)", "f<(lambda)>(int)"),
            ("plain", "plain"),
        ] {
            assert_eq!(short_name(full), short, "{full}");
            assert!(short.chars().count() <= SHORT_NAME, "{short}");
        }
    }

    #[test]
    fn repeated_names_get_their_short_hash() {
        let rows = [
            ("dot(float*)".to_owned(), "aaaa000000000001".to_owned()),
            ("dot(float*)".to_owned(), "bbbb000000000002".to_owned()),
            ("saxpy(float)".to_owned(), "cccc000000000003".to_owned()),
            ("saxpy(float)".to_owned(), "cccc000000000003".to_owned()),
        ];
        assert_eq!(
            with_short_hashes(&rows),
            [
                "dot(float*) [aaaa0000]",
                "dot(float*) [bbbb0000]",
                "saxpy(float)",
                "saxpy(float)"
            ]
        );
    }
}
