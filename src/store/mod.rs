//! The store: where r3 keeps kernels, recordings and trials. This module is the only code
//! that knows the layout of a store directory (see ARCHITECTURE.md, "Store format").

pub mod identity;
mod migrate;
pub mod records;

use crate::ir::extract::{KernelModule, KernelSignature};

pub mod trials;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The store format this r3 writes; kept in `<store>/format.json`. Format 1 (trials under
/// kernel names) is read too: `Store::migrate` moves its trials under kernel hashes.
pub const FORMAT: u32 = 2;

/// Name of a project-local store directory, found by walking up from the working directory.
pub const LOCAL_DIR: &str = ".r3";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    /// Which rule chose it: "--r3-store", "R3_STORE", "project (.r3 above the working directory)" or "default".
    pub source: &'static str,
}

/// Resolves the store: `--r3-store`, then `R3_STORE`, then the nearest `.r3/` directory at or
/// above `cwd`, then the per-user default `$XDG_DATA_HOME/r3` (~/.local/share/r3). Every rule
/// gives one place for all compiles of a build, whatever directory each compile runs in.
pub fn locate(explicit: Option<&Path>, cwd: &Path) -> Location {
    if let Some(p) = explicit {
        return Location {
            path: absolute(p, cwd),
            source: "--r3-store",
        };
    }
    if let Some(p) = std::env::var_os("R3_STORE").filter(|v| !v.is_empty()) {
        return Location {
            path: absolute(Path::new(&p), cwd),
            source: "R3_STORE",
        };
    }
    if let Some(dir) = cwd
        .ancestors()
        .map(|d| d.join(LOCAL_DIR))
        .find(|d| d.is_dir())
    {
        return Location {
            path: dir,
            source: "project (.r3 above the working directory)",
        };
    }
    Location {
        path: default_dir(),
        source: "default",
    }
}

pub fn default_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::toolchain::home().join(".local/share"))
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
    #[error("store {path}: {msg}")]
    Io { path: PathBuf, msg: String },
    #[error("store {path} has format {found}, this r3 reads format {FORMAT}; fix: use a matching r3, or a new store (--r3-store / R3_STORE)")]
    Format { path: PathBuf, found: u32 },
    #[error("{path}: damaged store file: {msg}; fix: delete it (its kernel is recorded again at the next build)")]
    Corrupt { path: PathBuf, msg: String },
    #[error("no store at {path}; fix: build with r3-clang++ first, or point --r3-store / R3_STORE at the store")]
    Missing { path: PathBuf },
    #[error("{path} is being written by another r3 (a `tune` of the same kernel on the same GPU); fix: wait for it to finish, or tune another kernel")]
    Busy { path: PathBuf },
    #[error("no stored kernel is named `{word}`; fix: `r3 kernels` lists them (a hash, a prefix of one, or a name)")]
    NoKernel { word: String },
    #[error("`{word}` names {count} different kernels in the store:\n{candidates}\nfix: name one by its hash, or by a prefix of it")]
    Ambiguous {
        word: String,
        count: usize,
        candidates: String,
    },
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |e| StoreError::Io {
        path: path.to_owned(),
        msg: e.to_string(),
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
    pub hash: String,
    #[serde(flatten)]
    pub signature: KernelSignature,
    /// The first compile that produced this kernel.
    pub compile: CompileCommand,
    pub r3_version: String,
}

/// `units/<id>.json`: one source file compiled by one command, and the kernels it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    pub format: u32,
    pub id: String,
    pub source: PathBuf,
    pub output: Option<PathBuf>,
    /// Kernel hashes, per architecture.
    pub kernels: BTreeMap<String, Vec<String>>,
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
        blake3::hash(key.as_bytes()).to_hex()[..16].to_owned()
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
            std::fs::create_dir_all(root.join(sub)).map_err(io_err(root))?;
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

    pub fn kernel_dir(&self, hash: &str) -> PathBuf {
        self.root.join("kernels").join(hash)
    }

    /// Stores a kernel unless the same content is there already. Returns whether it was new.
    /// The kernel directory appears whole or not at all: it is filled under a temporary name
    /// and renamed into place; of two concurrent writers of one kernel, one rename wins.
    pub fn put_kernel(
        &self,
        km: &KernelModule,
        compile: &CompileCommand,
    ) -> Result<bool, StoreError> {
        let dest = self.kernel_dir(&km.hash);
        if dest.join("kernel.json").exists() {
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
        };
        write_synced(&tmp.path().join("module.bc"), &km.bitcode).map_err(io_err(&dest))?;
        write_synced(&tmp.path().join("kernel.json"), &to_json(&record)).map_err(io_err(&dest))?;
        let tmp_path = tmp.keep();
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

    pub fn put_unit(&self, unit: &Unit) -> Result<(), StoreError> {
        let path = self.root.join("units").join(format!("{}.json", unit.id));
        write_atomic(&path, &to_json(unit)).map_err(io_err(&path))
    }

    pub fn kernel(&self, hash: &str) -> Result<KernelRecord, StoreError> {
        // A hash is hex: anything else could lead out of the store.
        if hash.is_empty() || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::NoKernel { word: hash.into() });
        }
        read_json(&self.kernel_dir(hash).join("kernel.json"))
    }

    pub fn kernel_bitcode(&self, hash: &str) -> Result<Vec<u8>, StoreError> {
        let path = self.kernel_dir(hash).join("module.bc");
        std::fs::read(&path).map_err(io_err(&path))
    }

    /// Every stored kernel, sorted by source file, then line, then name.
    pub fn kernels(&self) -> Result<Vec<KernelRecord>, StoreError> {
        let dir = self.root.join("kernels");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue; // a write in progress
            }
            out.push(self.kernel(&name)?);
        }
        out.sort_by_key(sort_key);
        Ok(out)
    }

    pub fn units(&self) -> Result<Vec<Unit>, StoreError> {
        let dir = self.root.join("units");
        let mut out = Vec::new();
        if !dir.exists() {
            return Ok(out); // a store of kernels only, like llvm-ir-corpus/store
        }
        for entry in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let path = entry.map_err(io_err(&dir))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                out.push(read_json(&path)?);
            }
        }
        out.sort_by(|a: &Unit, b| a.source.cmp(&b.source));
        Ok(out)
    }
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
        msg: e.to_string(),
    })
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Writes a file through a temporary file in the same directory and a rename, so that a
/// reader never sees half a file and a crash leaves the old file or the new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".tmp-").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_store_is_made_absolute() {
        let loc = locate(Some(Path::new("st")), Path::new("/work/build"));
        assert_eq!(loc.path, PathBuf::from("/work/build/st"));
        assert_eq!(loc.source, "--r3-store");
    }

    #[test]
    fn project_store_is_found_from_a_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".r3")).unwrap();
        let sub = dir.path().join("build/src/cuda");
        std::fs::create_dir_all(&sub).unwrap();
        if std::env::var_os("R3_STORE").is_none() {
            let loc = locate(None, &sub);
            assert_eq!(loc.path, dir.path().join(".r3"));
        }
    }
}
