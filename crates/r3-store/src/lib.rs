//! The store: where r3 keeps kernels, recordings and trials. This module is the only code
//! that knows the layout of a store directory (see docs/formats.md, "Store format").

use r3_kernel as kernel;
use r3_passes::candidate;

pub mod attempts;
pub mod config;
pub mod deadline;
pub mod fixtures;
pub mod gc;
pub mod identity;
pub mod in_program;
pub mod l2;
mod migrate;
pub mod nvcc;
pub mod outcome;
pub mod programs;
pub mod records;
pub mod snapcache;
pub mod speed;

use crate::kernel::{KernelHash, KernelModule, KernelSignature};

pub mod status;
pub mod trials;
pub mod winner;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The store format this r3 writes; kept in `<store>/format.json`. Format 1 (trials under
/// kernel names) is read too: `Store::migrate` moves its trials under kernel hashes.
pub const FORMAT: u32 = 2;

/// Name of a project-local store directory, found by walking up from the working directory.
pub const LOCAL_DIR: &str = ".r3";
/// The store's file that changes when what apply ships changes ([`Store::set_shipped_digest`]).
pub const WINNERS_STAMP: &str = "winners.stamp";
/// The dispatch headers of applied builds, each named by its content (`Store::dispatch_header`).
pub const DISPATCH_DIR: &str = "dispatch";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    /// Which rule chose it: "--r3-store", "R3_STORE", "project (.r3 above the working directory)" or "default".
    pub source: &'static str,
}

/// Resolves the store: `--r3-store`, then `R3_STORE`, then the `store` of the nearest
/// `.r3/config` at or above `cwd` (a build tree's settings, see [`config`]), then the nearest
/// `.r3/` store directory at or above `cwd`, then the per-user default `$XDG_DATA_HOME/r3`
/// (~/.local/share/r3). Every rule gives one place for all compiles of a build, whatever
/// directory each compile runs in. Err only for a config file that cannot be read.
pub fn locate(explicit: Option<&Path>, cwd: &Path) -> Result<Location, StoreError> {
    locate_with(explicit, cwd, || config::find(cwd))
}

/// [`locate`], with the build config given by the caller that has already read it (the
/// driver reads it once per compile); `config` is asked only where the rules get to it.
pub fn locate_with(
    explicit: Option<&Path>,
    cwd: &Path,
    config: impl FnOnce() -> Result<Option<config::Found>, config::ConfigError>,
) -> Result<Location, StoreError> {
    resolve(explicit, std::env::var_os("R3_STORE"), cwd, config)
}

/// [`locate_with`], given `R3_STORE`'s value rather than reading it, so that the tests check
/// every rule whatever the environment they run in holds.
fn resolve(
    explicit: Option<&Path>,
    env: Option<std::ffi::OsString>,
    cwd: &Path,
    config: impl FnOnce() -> Result<Option<config::Found>, config::ConfigError>,
) -> Result<Location, StoreError> {
    if let Some(p) = explicit {
        return Ok(Location {
            path: absolute(p, cwd),
            source: "--r3-store",
        });
    }
    if let Some(p) = env.filter(|v| !v.is_empty()) {
        return Ok(Location {
            path: absolute(Path::new(&p), cwd),
            source: "R3_STORE",
        });
    }
    if let Some(store) = config()?.and_then(|f| f.config.store) {
        return Ok(Location {
            path: store,
            source: "build config (.r3/config above the working directory)",
        });
    }
    // A `.r3/` that holds a build config is that build's settings, not a store.
    if let Some(dir) = cwd
        .ancestors()
        .map(|d| d.join(LOCAL_DIR))
        .find(|d| d.is_dir() && !d.join(config::FILE).is_file())
    {
        return Ok(Location {
            path: dir,
            source: "project (.r3 above the working directory)",
        });
    }
    Ok(Location {
        path: default_dir(),
        source: "default",
    })
}

pub fn default_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
            home.join(".local/share")
        })
        .join("r3")
}

fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        cwd.join(p)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {msg}; fix: {}", io_fix(.path, .msg))]
    Io { path: PathBuf, msg: String },
    #[error("store {path} has format {found}, this r3 reads format {FORMAT}; fix: use a matching r3, or a new store (--r3-store / R3_STORE)")]
    Format { path: PathBuf, found: u32 },
    #[error("{path}: damaged store file: {msg}; fix: {}", corrupt_fix(.path))]
    Corrupt { path: PathBuf, msg: String },
    #[error("no store at {path}; fix: build with r3-clang++ first, or point --r3-store / R3_STORE at the store")]
    Missing { path: PathBuf },
    #[error("{path} cannot hold a store: {why}; fix: point --r3-store / R3_STORE at a directory you can write (with neither, r3 uses a project's .r3/ or {})", default_dir().display())]
    Unusable { path: PathBuf, why: String },
    #[error("{path} is being written by another r3 (a `tune` of the same kernel on the same GPU); fix: wait for it to finish, or tune another kernel")]
    Busy { path: PathBuf },
    #[error("no stored kernel is named `{word}`; fix: `r3 kernels` lists them (a hash, a prefix of one, or a name)")]
    NoKernel { word: String },
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("name a kernel, a --record, or --all")]
    NothingSelected,
    #[error("no replayable recording matches; fix: `r3 record -- ./your-program` first (see `r3 kernels` for names)")]
    NoRecording,
    #[error("recording {id} cannot be tied to one kernel (it names no fatbinary a stored compile produced): {kernels}")]
    Untied {
        id: String,
        kernels: Box<StoreError>,
    },
    #[error("no stored kernel is named `{word}`, and the store keeps trials of kernels whose kernels/<hash> directory is gone or damaged:\n{trials}\nfix: rebuild the program with r3-clang++ (the same code stores the same kernel, whose trials --resume then continues), or name one of these hashes")]
    Orphaned { word: String, trials: String },
    #[error("`{word}` names {count} different kernels in the store, stored as {builds} builds (one line each; a kernel compiled for two GPUs is two builds):\n{candidates}{old}\nfix: name one by its hash, or by a prefix of it")]
    Ambiguous {
        word: String,
        count: usize,
        builds: usize,
        candidates: String,
        /// The old versions the word names too, with their heading (`identity::Index::ambiguity`),
        /// or empty.
        old: String,
    },
    #[error("`{word}` names only old versions of kernels, which no current build contains (their source was edited and compiled again):\n{candidates}\nfix: name a kernel of the current build (`r3 kernels` lists them); to use an old version anyway, name it by its hash; `r3 gc` removes old versions")]
    OnlyOld { word: String, candidates: String },
}

/// What to do about a store file r3 cannot read or write, by what went wrong.
fn io_fix(path: &Path, msg: &str) -> String {
    let other = "or point --r3-store / R3_STORE at another store";
    if msg.contains("ermission denied") || msg.contains("Read-only file system") {
        format!(
            "give your user write access to {} (`chmod -R u+w`; a store a team shares: README, \
             \"Many GPUs, many nodes\"), {other}",
            path.display()
        )
    } else if msg.contains("No such file") {
        // Never "create it": the store is there (`open` and `create` see to that), so a file
        // that is not was lost from it, and making an empty one would only damage it.
        format!("{}, {other}", missing_fix(path))
    } else if msg.contains("No space left") || msg.contains("quota") {
        format!("free space on its filesystem, {other}")
    } else {
        format!("check that it is there and readable, {other}")
    }
}

/// What to do about a store file that is not there, by what the file is.
fn missing_fix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let whole_entry = ["kernel.json", "module.bc", "launch.json", "natural.json"];
    if whole_entry.contains(&name.as_ref()) || name.ends_with(".r3snap") {
        // A kernel or a recording appears whole (renamed into place): one file gone means the
        // entry is damaged, and storing it again is the repair.
        corrupt_fix(path)
    } else {
        "check that nothing moved or deleted the store's files while r3 ran, then run the \
         command again"
            .into()
    }
}

/// Why a directory cannot be made into a store, in words for [`StoreError::Unusable`]; None
/// where [`StoreError::Io`]'s fixes are the right ones (permissions, a full disk).
fn unusable_why(root: &Path, e: &std::io::Error) -> Option<String> {
    use std::io::ErrorKind as K;
    if matches!(
        e.kind(),
        K::PermissionDenied | K::ReadOnlyFilesystem | K::StorageFull | K::QuotaExceeded
    ) {
        return None;
    }
    if let Some(file) = root.ancestors().find(|a| a.is_file()) {
        return Some(format!("{} is a file, not a directory", file.display()));
    }
    Some(if root.is_dir() {
        // procfs and sysfs answer "No such file or directory" to a mkdir in a directory that
        // is there, which would otherwise read as a store to create.
        format!("r3 cannot make its directories in it ({e}), although it is there: its filesystem does not take new files (as /proc and /sys do not)")
    } else {
        format!("r3 cannot make it ({e})")
    })
}

/// What to do about a damaged store file, by what the file is.
fn corrupt_fix(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let dir = path.parent().unwrap_or(path).display();
    if name == "kernel.json" || name == "module.bc" {
        format!("delete {dir}; the next build with r3-clang++ stores the kernel again")
    } else if name == "launch.json" || name == "natural.json" || name.ends_with(".r3snap") {
        format!("delete the recording {dir}; `r3 record` records the launch again")
    } else if name.ends_with(".jsonl") {
        "delete the damaged line and those after it (or the file); `r3 tune --resume` measures \
         them again"
            .into()
    } else if name == "format.json" {
        format!("write {{\"format\": {FORMAT}, \"created_by\": \"r3\"}} into it")
    } else if path
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|d| d == "units")
    {
        format!(
            "delete {}; the next build of its source with r3-clang++ writes it again",
            path.display()
        )
    } else {
        "delete it; r3 writes it again when it needs it".into()
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::Io {
        path: path.to_owned(),
        msg: e.to_string(),
    }
}

/// The entries of a store directory; None when it does not exist (yet), which the store's
/// listings read as empty.
fn read_dir_if_exists(dir: &Path) -> Result<Option<std::fs::ReadDir>, StoreError> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(dir)(e)),
    }
}

/// How a translation unit was compiled: enough to compile it again (LLM rewrites, apply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompileCommand {
    pub cwd: PathBuf,
    /// The driver's whole argument list, argv[0] included.
    pub args: Vec<String>,
    /// Environment variables that change what clang does.
    pub env: BTreeMap<String, String>,
    /// The clang that compiled it, and its version line.
    pub clang: PathBuf,
    pub clang_version: String,
}

/// Variables recorded with a compile command.
pub const RELEVANT_ENV: &[&str] = &[
    "PATH",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "CUDA_PATH",
    "CUDA_HOME",
    "R3_CUDA_PATH",
    "R3_CLANG",
    "R3_CLANGXX",
    "SOURCE_DATE_EPOCH",
];

impl CompileCommand {
    pub fn capture_env() -> BTreeMap<String, String> {
        RELEVANT_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect()
    }
}

/// `kernels/<hash>/kernel.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelRecord {
    pub format: u32,
    pub hash: KernelHash,
    #[serde(flatten)]
    pub signature: KernelSignature,
    /// The first compile that produced this kernel.
    pub compile: CompileCommand,
    pub r3_version: String,
    /// For a source rewrite `r3 evolve` compiled: the kernel it rewrites. Variants are kept
    /// out of `kernels()` (and so out of name lookups, reports and exports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant_of: Option<KernelHash>,
}

impl KernelRecord {
    /// How r3's lines name a kernel: its demangled name and short hash.
    pub fn label(&self) -> String {
        format!("{} [{}]", self.signature.demangled, &self.hash[..8])
    }
}

/// `units/<id>.json`: one source file compiled by one command, and the kernels it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    pub format: u32,
    pub id: String,
    pub source: PathBuf,
    pub output: Option<PathBuf>,
    /// Kernel hashes, per architecture.
    pub kernels: BTreeMap<String, Vec<KernelHash>>,
    /// Content hashes of the fatbinaries the compile's output holds (`records::fatbin_hashes`):
    /// a recorded launch names the one it was registered from, which leads here.
    #[serde(default)]
    pub fatbins: Vec<String>,
    pub compile: CompileCommand,
}

impl Unit {
    /// A unit is named by where its source and output are, so recompiling it replaces it.
    pub fn id_for(source: &Path, output: Option<&Path>) -> String {
        let key = format!(
            "{}\0{}",
            source.display(),
            output.map(|o| o.display().to_string()).unwrap_or_default()
        );
        crate::kernel::short_hash(key.as_bytes())
    }
}

#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    format: u32,
}

#[derive(Serialize, Deserialize)]
struct FormatFile {
    format: u32,
    created_by: String,
}

impl Store {
    /// Opens the store for writing, creating it if needed.
    pub fn create(root: &Path) -> Result<Store, StoreError> {
        for sub in ["kernels", "units"] {
            std::fs::create_dir_all(root.join(sub)).map_err(|e| match unusable_why(root, &e) {
                Some(why) => StoreError::Unusable {
                    path: root.to_owned(),
                    why,
                },
                None => io_err(root)(e),
            })?;
        }
        let format = root.join("format.json");
        if !format.exists() {
            let f = FormatFile {
                format: FORMAT,
                created_by: format!("r3 {}", env!("CARGO_PKG_VERSION")),
            };
            // Two first compiles may race here; both write the same content.
            write_atomic(&format, &to_json(&f)).map_err(io_err(&format))?;
        }
        Store::open(root)
    }

    /// Opens an existing store for reading.
    pub fn open(root: &Path) -> Result<Store, StoreError> {
        let format = root.join("format.json");
        if !format.exists() {
            return Err(StoreError::Missing {
                path: root.to_owned(),
            });
        }
        let f: FormatFile = read_json(&format)?;
        if !(1..=FORMAT).contains(&f.format) {
            return Err(StoreError::Format {
                path: root.to_owned(),
                found: f.format,
            });
        }
        Ok(Store {
            root: root.to_owned(),
            format: f.format,
        })
    }

    /// The format the store's files are in (kernels, units and recordings read the same in
    /// formats 1 and 2; trials need `migrate` first).
    pub fn format(&self) -> u32 {
        self.format
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `winners.stamp`, made if missing: the file compiles depend on (their dependency files
    /// name it) so that a build recompiles when what apply ships changes.
    pub fn winners_stamp(&self) -> Result<PathBuf, StoreError> {
        let path = self.root.join(WINNERS_STAMP);
        if !path.exists() {
            // Made by the first compile that names it, while the build runs: dated long ago,
            // so that the build tool finds it no newer than that compile's object.
            write_settled(&path, b"").map_err(io_err(&path))?;
        }
        Ok(path)
    }

    /// `dispatch/<hash>.h`: the dispatch header apply includes into a host compile, named by
    /// its content (`short_hash`), written once (temp file, rename) and never changed or
    /// removed, so that every build that names it finds it as it was. Dated long ago: a file
    /// whose name is its content never makes an object out of date by its time.
    pub fn dispatch_header(&self, text: &str) -> Result<PathBuf, StoreError> {
        let dir = self.root.join(DISPATCH_DIR);
        let path = dir.join(format!("{}.h", kernel::short_hash(text.as_bytes())));
        if std::fs::read(&path).is_ok_and(|b| b == text.as_bytes()) {
            return Ok(path);
        }
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        write_settled(&path, text.as_bytes()).map_err(io_err(&path))?;
        Ok(path)
    }

    /// Records `digest` of what apply ships now (kernel hash and configuration of each
    /// winner). The stamp is rewritten, and so newer than every object, only when the digest
    /// differs: a search that ships nothing new rebuilds nothing. Returns whether it changed.
    pub fn set_shipped_digest(&self, digest: &str) -> Result<bool, StoreError> {
        let path = self.root.join(WINNERS_STAMP);
        let old = std::fs::read_to_string(&path).ok();
        // No stamp yet and nothing ships: the stamp a build makes (empty) would say the same.
        if old.as_deref().map(str::trim) == Some(digest) || (old.is_none() && digest.is_empty()) {
            return Ok(false);
        }
        write_atomic(&path, format!("{digest}\n").as_bytes()).map_err(io_err(&path))?;
        Ok(true)
    }

    /// `kernels/<hash>/`. A hash is hex; any other word (from a damaged file, say) is slugged,
    /// so that no string makes this a path out of `kernels/`.
    pub fn kernel_dir(&self, hash: &KernelHash) -> PathBuf {
        let kernels = self.root.join("kernels");
        if is_hash(hash) {
            kernels.join(hash.as_str())
        } else {
            kernels.join(trials::slug(hash))
        }
    }

    /// Stores a kernel unless the same content is there already. Returns whether it was new.
    /// The kernel directory appears whole or not at all: it is filled under a temporary name
    /// and renamed into place; of two concurrent writers of one kernel, one rename wins.
    pub fn put_kernel(
        &self,
        km: &KernelModule,
        compile: &CompileCommand,
    ) -> Result<bool, StoreError> {
        self.put_entry(km, compile, None)
    }

    /// Stores a source rewrite of kernel `parent` (`r3 evolve`), like `put_kernel`.
    pub fn put_variant(
        &self,
        km: &KernelModule,
        compile: &CompileCommand,
        parent: &KernelHash,
    ) -> Result<bool, StoreError> {
        self.put_entry(km, compile, Some(parent))
    }

    fn put_entry(
        &self,
        km: &KernelModule,
        compile: &CompileCommand,
        variant_of: Option<&KernelHash>,
    ) -> Result<bool, StoreError> {
        let dest = self.kernel_dir(&km.hash);
        let damaged = dest.join("kernel.json").exists() && !self.holds(&dest, km);
        if dest.join("kernel.json").exists() && !damaged {
            return Ok(false);
        }
        let kernels = self.root.join("kernels");
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempdir_in(&kernels)
            .map_err(io_err(&kernels))?;
        let record = KernelRecord {
            format: FORMAT,
            hash: km.hash.clone(),
            signature: km.signature.clone(),
            compile: compile.clone(),
            r3_version: env!("CARGO_PKG_VERSION").into(),
            variant_of: variant_of.cloned(),
        };
        write_synced(&tmp.path().join("module.bc"), &km.bitcode).map_err(io_err(&dest))?;
        write_synced(&tmp.path().join("kernel.json"), &to_json(&record)).map_err(io_err(&dest))?;
        let tmp_path = tmp.keep();
        if damaged {
            // The same kernel, compiled again, repairs its entry: the damaged one goes aside
            // first (a rename cannot replace a directory that has files).
            let aside = kernels.join(format!(".damaged-{}-{}", km.hash, std::process::id()));
            if std::fs::rename(&dest, &aside).is_ok() {
                let _ = std::fs::remove_dir_all(&aside);
            }
        }
        match std::fs::rename(&tmp_path, &dest) {
            Ok(()) => Ok(true),
            Err(_) if dest.join("kernel.json").exists() => {
                let _ = std::fs::remove_dir_all(&tmp_path);
                Ok(false)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&tmp_path);
                Err(io_err(&dest)(e))
            }
        }
    }

    /// Whether the entry at `dir` is whole and holds this very module.
    fn holds(&self, dir: &Path, km: &KernelModule) -> bool {
        let record_ok = std::fs::read(dir.join("kernel.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<KernelRecord>(&b).ok())
            .is_some_and(|r| r.hash == km.hash);
        record_ok && std::fs::read(dir.join("module.bc")).is_ok_and(|b| b == km.bitcode)
    }

    pub fn put_unit(&self, unit: &Unit) -> Result<(), StoreError> {
        let path = self.root.join("units").join(format!("{}.json", unit.id));
        write_atomic(&path, &to_json(unit)).map_err(io_err(&path))
    }

    pub fn kernel(&self, hash: &KernelHash) -> Result<KernelRecord, StoreError> {
        // A hash is hex: anything else could lead out of the store.
        if !is_hash(hash) {
            return Err(StoreError::NoKernel {
                word: hash.to_string(),
            });
        }
        let path = self.kernel_dir(hash).join("kernel.json");
        if !path.exists() && path.parent().is_some_and(Path::is_dir) {
            // Kernel directories appear whole (renamed into place): this one was damaged.
            return Err(StoreError::Corrupt {
                path,
                msg: "missing".into(),
            });
        }
        let rec: KernelRecord = read_json(&path)?;
        // The hash in the file is what later paths (module.bc, trials) are built from: it must
        // be the directory's own.
        if rec.hash != *hash {
            return Err(StoreError::Corrupt {
                path,
                msg: format!("it names kernel `{}`, its directory `{hash}`", rec.hash),
            });
        }
        Ok(rec)
    }

    pub fn kernel_bitcode(&self, hash: &KernelHash) -> Result<Vec<u8>, StoreError> {
        if !is_hash(hash) {
            return Err(StoreError::NoKernel {
                word: hash.to_string(),
            });
        }
        let path = self.kernel_dir(hash).join("module.bc");
        std::fs::read(&path).map_err(io_err(&path))
    }

    /// Every stored kernel the driver captured (source rewrites left out), sorted by source
    /// file, then line, then name.
    pub fn kernels(&self) -> Result<Vec<KernelRecord>, StoreError> {
        let mut all = self.all_kernels()?;
        all.retain(|k| k.variant_of.is_none());
        Ok(all)
    }

    /// The source rewrites `r3 evolve` stored, in the same order.
    pub fn variants(&self) -> Result<Vec<KernelRecord>, StoreError> {
        let mut all = self.all_kernels()?;
        all.retain(|k| k.variant_of.is_some());
        Ok(all)
    }

    fn all_kernels(&self) -> Result<Vec<KernelRecord>, StoreError> {
        let dir = self.root.join("kernels");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue; // a write in progress
            }
            match self.kernel(&name.as_str().into()) {
                Ok(k) => out.push(k),
                Err(e @ StoreError::Corrupt { .. }) => warn_left_out(&e, "that kernel"),
                Err(e) => return Err(e),
            }
        }
        out.sort_by_key(sort_key);
        Ok(out)
    }

    /// Every compile's unit, by source file. A unit that cannot be read costs only what it
    /// ties (its kernels' recordings are then resolved by name, as an older recording's are):
    /// it is left out, and said once on stderr with its fix.
    pub fn units(&self) -> Result<Vec<Unit>, StoreError> {
        let (units, damaged) = self.units_and_damage()?;
        for e in &damaged {
            warn_left_out(e, "that compile's unit");
        }
        Ok(units)
    }

    /// [`Store::units`], with the error of each unit left out. Err only when the `units`
    /// directory itself cannot be read.
    pub fn units_and_damage(&self) -> Result<(Vec<Unit>, Vec<StoreError>), StoreError> {
        let dir = self.root.join("units");
        let mut out = Vec::new();
        let mut damaged = Vec::new();
        // A store of kernels only (like llvm-ir-corpus/store) has none.
        let Some(entries) = read_dir_if_exists(&dir)? else {
            return Ok((out, damaged));
        };
        for entry in entries {
            let path = entry.map_err(io_err(&dir))?.path();
            let hidden = path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if hidden || path.extension().is_none_or(|e| e != "json") {
                continue; // a write in progress (`write_atomic`'s temporary file), or not a unit
            }
            match read_json(&path) {
                Ok(u) => out.push(u),
                Err(e) => damaged.push(e),
            }
        }
        out.sort_by(|a: &Unit, b| a.source.cmp(&b.source));
        Ok((out, damaged))
    }
}

/// Whether a word has the form of a kernel hash (hex digits, as `kernels/` names them).
fn is_hash(word: &str) -> bool {
    !word.is_empty() && word.bytes().all(|b| b.is_ascii_hexdigit())
}

fn sort_key(k: &KernelRecord) -> (String, u32, String, String) {
    let (file, line) = k
        .signature
        .source
        .as_ref()
        .map(|s| (s.file.clone(), s.line))
        .unwrap_or_default();
    (
        file,
        line,
        k.signature.name.clone(),
        k.signature.arch.clone(),
    )
}

fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    let mut s = serde_json::to_vec_pretty(v).expect("store types serialize");
    s.push(b'\n');
    s
}

pub(crate) fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, StoreError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path: path.to_owned(),
        // serde's words for no bytes at all ("EOF while parsing a value") read as a cut file.
        msg: if bytes.is_empty() {
            "empty (0 bytes)".into()
        } else {
            e.to_string()
        },
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes a file through a temporary file in the same directory and a rename, so that a
/// reader never sees half a file and a crash leaves the old file or the new one. The file's
/// mode follows the umask, as any tool's output does (0666 less the umask), so a store shared
/// by a group (a setgid directory, umask 002) is readable and writable by its members.
/// Says once per process (per message) that a damaged part of the store is left out, with
/// the error's own fix: one bad file costs its own kernel or search, not the command.
pub fn warn_left_out(e: &dyn std::fmt::Display, what: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let line = format!("r3: warning: {e} ({what} is left out)");
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.contains(&line) {
        eprintln!("{line}");
        said.push(line);
    }
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_through_temp(path, bytes, |_| Ok(()))
}

/// Writes `bytes` to a temporary file beside `path` (mode 0666 less the umask), lets `finish`
/// touch the file, syncs it and renames it over `path`.
fn write_through_temp(
    path: &Path,
    bytes: &[u8],
    finish: impl FnOnce(&std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    finish(tmp.as_file())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// [`write_atomic`], the file dated a day after the Unix epoch: for files whose content never
/// changes under their name (or that stand for "nothing yet"), which no build tool should
/// take for newer than what it built. (Not the epoch itself: Ninja reads a time of 0 as a
/// missing file.)
fn write_settled(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
    write_through_temp(path, bytes, |f| {
        f.set_times(std::fs::FileTimes::new().set_modified(long_ago))
    })
}

/// Writes a file the user named (`-o`). A new path or a regular file is replaced whole
/// ([`write_atomic`]); what else is there, a symbolic link, a device such as /dev/null or a
/// FIFO, is written through, as a shell's `>` would, and never replaced by a file of r3's.
pub fn write_output(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => std::fs::write(path, bytes),
        _ => write_atomic(path, bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_header_is_named_by_its_content_written_once_and_dated_long_ago() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let a = store.dispatch_header("/* table a */\n").unwrap();
        let b = store.dispatch_header("/* table b */\n").unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(dir.path().join(DISPATCH_DIR)));
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "/* table a */\n");
        let long_ago = std::time::UNIX_EPOCH + std::time::Duration::from_secs(86_400);
        assert_eq!(std::fs::metadata(&a).unwrap().modified().unwrap(), long_ago);
        // The same table again: the same file, left as it was.
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = inode(&a);
        assert_eq!(store.dispatch_header("/* table a */\n").unwrap(), a);
        assert_eq!(inode(&a), before);
        // A stamp the driver makes is as old; nothing shipping leaves a missing or empty one.
        let stamp = store.winners_stamp().unwrap();
        assert_eq!(
            std::fs::metadata(&stamp).unwrap().modified().unwrap(),
            long_ago
        );
        assert!(!store.set_shipped_digest("").unwrap());
        std::fs::remove_file(&stamp).unwrap();
        assert!(!store.set_shipped_digest("").unwrap());
        assert!(!stamp.exists());
        assert!(store.set_shipped_digest("0123abcd").unwrap());
        assert!(
            store.set_shipped_digest("").unwrap(),
            "nothing ships any more: a change"
        );
    }

    #[test]
    fn output_through_a_link_or_a_device_is_written_through_never_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target.txt");
        std::fs::write(&target, "old").unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_output(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        write_output(Path::new("/dev/null"), b"gone").unwrap();
        assert!(std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        let plain = dir.path().join("plain.txt");
        write_output(&plain, b"one").unwrap();
        write_output(&plain, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&plain).unwrap(), "two");
        assert!(
            write_output(dir.path(), b"x").is_err(),
            "a directory is an error"
        );
    }

    #[test]
    fn store_files_follow_the_umask_not_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("end.json");
        write_atomic(&path, b"{}").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .map(|v| u32::from_str_radix(v.trim(), 8).unwrap())
            .unwrap();
        // tempfile's own default was 0600, whatever the umask.
        assert_eq!(mode, 0o666 & !umask, "umask {umask:o}");
    }

    /// A garbage or empty `units/*.json` costs that unit alone (issue 56): the store's units,
    /// and so every listing that resolves recordings through them, still read.
    #[test]
    fn a_damaged_unit_costs_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let unit = Unit {
            format: FORMAT,
            id: "0011223344556677".into(),
            source: "/w/k.cu".into(),
            output: Some("/w/k.o".into()),
            kernels: BTreeMap::new(),
            fatbins: vec!["00aa".into()],
            compile: CompileCommand {
                cwd: "/w".into(),
                args: vec!["r3-clang++".into(), "-c".into(), "k.cu".into()],
                env: BTreeMap::new(),
                clang: "/usr/bin/clang++".into(),
                clang_version: "clang version 22".into(),
            },
        };
        store.put_unit(&unit).unwrap();
        let units = dir.path().join("units");
        std::fs::write(
            units.join("8899aabbccddeeff.json"),
            "{\"format\": 1, \"id\": ",
        )
        .unwrap();
        std::fs::write(units.join("ffeeddccbbaa9988.json"), "").unwrap();
        assert_eq!(store.units().unwrap(), vec![unit.clone()]);
        assert!(store.index().is_ok());
        let (read, damaged) = store.units_and_damage().unwrap();
        assert_eq!(read, vec![unit]);
        let said: Vec<String> = damaged.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), 2, "{said:#?}");
        for e in &said {
            assert!(
                e.contains("units/")
                    && e.contains(".json: damaged store file: ")
                    && e.contains("the next build of its source with r3-clang++ writes it again"),
                "{e}"
            );
        }
        assert!(
            said.iter().any(|e| e.contains("empty (0 bytes)")),
            "{said:#?}"
        );
    }

    /// `R3_STORE=/proc` (issue 56): as root, mkdir there answers "No such file or directory",
    /// which the fix must not read as a store to create (as another user, "Permission
    /// denied", whose fix names another store too).
    #[test]
    fn a_directory_that_cannot_hold_a_store_is_named_with_a_fix_that_works() {
        let e = Store::create(Path::new("/proc")).unwrap_err().to_string();
        assert!(
            e.contains("/proc")
                && e.contains("fix: ")
                && e.contains("point --r3-store / R3_STORE at a")
                && !e.contains("create it"),
            "{e}"
        );
        // What procfs answers root, whoever runs this.
        let dir = tempfile::tempdir().unwrap();
        let enoent = std::io::Error::from(std::io::ErrorKind::NotFound);
        let why = unusable_why(dir.path(), &enoent).unwrap();
        assert!(
            why.contains("although it is there") && why.contains("does not take new files"),
            "{why}"
        );
        let e = StoreError::Unusable {
            path: dir.path().to_owned(),
            why,
        }
        .to_string();
        assert!(
            e.starts_with(&format!("{} cannot hold a store: ", dir.path().display()))
                && e.contains("fix: point --r3-store / R3_STORE at a directory you can write")
                && !e.contains("create it"),
            "{e}"
        );
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(
            unusable_why(dir.path(), &denied),
            None,
            "the Io fixes say how"
        );
        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "x").unwrap();
        for root in [file.clone(), file.join("store")] {
            let e = Store::create(&root).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{} is a file, not a directory", file.display()))
                    && e.contains("fix: point --r3-store"),
                "{e}"
            );
        }
    }

    /// A file missing from a store is repaired by storing its entry again, never by making an
    /// empty one.
    #[test]
    fn a_missing_store_file_is_not_to_be_created() {
        let dir = tempfile::tempdir().unwrap();
        Store::create(dir.path()).unwrap();
        let module = dir.path().join("kernels/0011223344556677/module.bc");
        let e = StoreError::Io {
            path: module.clone(),
            msg: "No such file or directory (os error 2)".into(),
        }
        .to_string();
        assert!(
            e.contains(&format!(
                "fix: delete {}; the next build",
                module.parent().unwrap().display()
            )) && !e.contains("create it"),
            "{e}"
        );
        let e = StoreError::Io {
            path: dir.path().join("trials/x/y.end.json"),
            msg: "No such file or directory (os error 2)".into(),
        }
        .to_string();
        assert!(
            e.contains("fix: check that nothing moved or deleted the store's files")
                && !e.contains("create it"),
            "{e}"
        );
    }

    #[test]
    fn explicit_store_is_made_absolute() {
        let loc = locate(Some(Path::new("st")), Path::new("/work/build")).unwrap();
        assert_eq!(loc.path, PathBuf::from("/work/build/st"));
        assert_eq!(loc.source, "--r3-store");
    }

    /// `locate` without `R3_STORE`, whatever the environment the tests run in holds.
    fn locate_unset(cwd: &Path) -> Result<Location, StoreError> {
        resolve(None, None, cwd, || config::find(cwd))
    }

    #[test]
    fn project_store_is_found_from_a_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".r3")).unwrap();
        let sub = dir.path().join("build/src/cuda");
        std::fs::create_dir_all(&sub).unwrap();
        let loc = locate_unset(&sub).unwrap();
        assert_eq!(loc.path, dir.path().join(".r3"));
    }

    #[test]
    fn r3_store_comes_before_a_project_store_and_is_made_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join(".r3")).unwrap();
        let loc = resolve(None, Some("st".into()), d, || config::find(d)).unwrap();
        assert_eq!((loc.path, loc.source), (d.join("st"), "R3_STORE"));
        // Set but empty is not set.
        let loc = resolve(None, Some("".into()), d, || config::find(d)).unwrap();
        assert_eq!(loc.path, d.join(".r3"));
    }

    #[test]
    fn a_build_config_names_the_store_and_its_directory_is_no_store() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".r3")).unwrap(); // a project store above
        let build = dir.path().join("build");
        let sub = build.join("CMakeFiles/app.dir");
        std::fs::create_dir_all(&sub).unwrap();
        let config = config::BuildConfig {
            store: Some("../r3-store".into()),
            ..Default::default()
        };
        config::write(&build, &config).unwrap();
        let loc = locate_unset(&sub).unwrap();
        assert_eq!(loc.path, build.join("../r3-store"));
        assert!(loc.source.contains(".r3/config"));
        // Without a store in it, the config's `.r3/` is passed over for the project store.
        config::write(&build, &config::BuildConfig::default()).unwrap();
        assert_eq!(locate_unset(&sub).unwrap().path, dir.path().join(".r3"));
        std::fs::write(build.join(".r3/config"), "store = 3\n").unwrap();
        assert!(matches!(locate_unset(&sub), Err(StoreError::Config(_))));
    }

    mod props {
        use super::*;
        use crate::kernel::{KernelModule, KernelSignature, Param, SourceLoc};
        use crate::records::tests::props::{apply_damage, damage};
        use proptest::prelude::*;

        fn module(hash: String, name: String, file: String, line: u32) -> KernelModule {
            KernelModule {
                hash: hash.into(),
                bitcode: b"BC\xc0\xde".to_vec(),
                signature: KernelSignature {
                    demangled: format!("{name}(float*)"),
                    name,
                    arch: "sm_90".into(),
                    params: vec![Param {
                        index: 0,
                        llvm_type: "ptr".into(),
                        size: 8,
                        align: 8,
                        pointer: true,
                        address_space: Some(1),
                        byval: None,
                    }],
                    source: Some(SourceLoc { file, line }),
                    unoptimized: false,
                },
            }
        }

        fn compile() -> CompileCommand {
            CompileCommand {
                cwd: "/w".into(),
                args: vec!["r3-clang++".into(), "-c".into(), "k.cu".into()],
                env: BTreeMap::new(),
                clang: "/usr/bin/clang++".into(),
                clang_version: "clang version 22".into(),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn kernel_records_round_trip(
                hash in "[0-9a-f]{16}",
                name in "\\PC{0,24}",
                file in "\\PC{0,24}",
                line in any::<u32>(),
            ) {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::create(dir.path()).unwrap();
                let km = module(hash.clone(), name, file, line);
                prop_assert!(store.put_kernel(&km, &compile()).unwrap());
                prop_assert!(!store.put_kernel(&km, &compile()).unwrap(), "stored once");
                let rec = store.kernel(&KernelHash::from(hash.as_str())).unwrap();
                prop_assert_eq!(&rec.signature, &km.signature);
                prop_assert_eq!(store.kernel_bitcode(&KernelHash::from(hash.as_str())).unwrap(), km.bitcode);
                prop_assert_eq!(store.kernels().unwrap(), vec![rec]);
            }

            /// The kernel is an error naming its file and the fix; the store's list leaves it
            /// out and keeps the others.
            #[test]
            fn a_damaged_kernel_json_costs_only_its_own_kernel(d in damage(), d2 in damage()) {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::create(dir.path()).unwrap();
                let (hash, other) = ("00112233aabbccdd", "99112233aabbccdd");
                store.put_kernel(&module(hash.into(), "k".into(), "k.cu".into(), 3), &compile()).unwrap();
                store.put_kernel(&module(other.into(), "o".into(), "o.cu".into(), 1), &compile()).unwrap();
                let path = store.kernel_dir(&KernelHash::from(hash)).join("kernel.json");
                let good = std::fs::read(&path).unwrap();
                std::fs::write(&path, apply_damage(&apply_damage(&good, &d), &d2)).unwrap();
                let listed: Vec<String> = store.kernels().unwrap().into_iter().map(|k| k.hash.to_string()).collect();
                prop_assert!(listed.iter().any(|h| h == other), "{:?}", listed);
                match store.kernel(&KernelHash::from(hash)) {
                    Ok(k) => prop_assert_eq!(&k.hash, hash),
                    Err(e) => {
                        let e = e.to_string();
                        prop_assert!(e.contains("kernel.json") && e.contains("fix:"), "{}", e);
                        prop_assert!(!listed.iter().any(|h| h == hash), "{:?}", listed);
                    }
                }
            }

            /// Whatever word a user or a file gives, the store reads nothing outside itself:
            /// a sentinel kernel just outside the store is never found.
            #[test]
            fn no_word_reads_a_kernel_outside_the_store(word in "\\PC{0,12}|[./a-f0-9]{1,12}") {
                let dir = tempfile::tempdir().unwrap();
                let root = dir.path().join("store");
                let store = Store::create(&root).unwrap();
                let outside = Store::create(dir.path()).unwrap();
                outside.put_kernel(&module("ab".into(), "k".into(), "k.cu".into(), 1), &compile()).unwrap();
                for w in [word.clone(), format!("../../kernels/{word}"), "../../kernels/ab".to_string()] {
                    prop_assert!(store.kernel(&KernelHash::from(w.as_str())).is_err(), "{:?}", w);
                    prop_assert!(store.kernel_bitcode(&KernelHash::from(w.as_str())).is_err(), "{:?}", w);
                }
            }
        }

        #[test]
        fn a_kernel_json_naming_another_hash_is_refused() {
            // Its hash would lead module.bc reads and trials migration elsewhere, out of the
            // store with `../..`.
            let dir = tempfile::tempdir().unwrap();
            let store = Store::create(dir.path()).unwrap();
            store
                .put_kernel(
                    &module("abcd".into(), "k".into(), "k.cu".into(), 1),
                    &compile(),
                )
                .unwrap();
            let path = store
                .kernel_dir(&KernelHash::from("abcd"))
                .join("kernel.json");
            let text = std::fs::read_to_string(&path).unwrap();
            std::fs::write(&path, text.replace("\"abcd\"", "\"../../x\"")).unwrap();
            let e = store
                .kernel(&KernelHash::from("abcd"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("kernel.json") && e.contains("../../x"), "{e}");
            assert!(store.kernels().unwrap().is_empty(), "left out of the list");
            // A kernel directory without its kernel.json is damaged, and the error says so.
            std::fs::remove_file(&path).unwrap();
            let e = store
                .kernel(&KernelHash::from("abcd"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("kernel.json: damaged") && e.contains("fix: delete"),
                "{e}"
            );
        }
    }
}
