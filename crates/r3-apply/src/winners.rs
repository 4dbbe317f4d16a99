//! The winners file (`r3 export`, schema in docs/export-schema.md) and what it holds: each
//! kernel's winner, the guarded variants beside it, the guard a variant runs behind, and the
//! source rewrites. The types only, and how a file's text is read: what apply builds of them
//! is `plan`'s, what it refuses `check`'s, both above this.

use crate::candidate::{Candidate, Specialize};
use crate::kernel::SourceLoc;
use serde::{Deserialize, Serialize};

/// The winners file's schema name and version (docs/export-schema.md).
pub const SCHEMA: &str = "r3-winners";
pub const SCHEMA_VERSION: u32 = 1;

/// One kernel's configuration to build with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Winner {
    /// Content hash of the kernel's module: the identity apply matches on.
    pub hash: crate::kernel::KernelHash,
    pub name: String,
    pub demangled: String,
    /// The architecture the kernel module was compiled for (part of its hash).
    pub arch: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// The GPU and driver that measured it.
    pub gpu: String,
    pub driver: String,
    pub candidate: Candidate,
    /// The PTX ISA it was lowered for (LLVM feature, e.g. "ptx90"); None keeps the module's.
    pub ptx_isa: Option<String>,
    /// Hash of the PTX that was measured: apply ships exactly that PTX or clang's code. None
    /// only for simulated trials.
    pub ptx_hash: Option<crate::kernel::PtxHash>,
    pub trial: u32,
    /// Baseline time over the winner's time, as the search measured it.
    pub speedup: f64,
    /// The same from the re-measurement after the search, where there was one of this trial.
    pub confirmed_speedup: Option<f64>,
    /// Trials from `r3 tune --simulate`: never applied unless R3_APPLY_SIMULATED=1 (tests).
    #[serde(default)]
    pub simulated: bool,
    pub r3_version: String,
    /// The code itself where it is not lowered from the kernel's module: nvcc's
    /// (`candidate.compiler` nvcc), as the search measured it; apply ships it only if its hash
    /// is `ptx_hash`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Where `code` is a source rewrite's (`r3 evolve`, shipped under `R3_APPLY_REWRITES=1`):
    /// the rewrite's kernel and attempt. The code that runs is then not the user's source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<RewriteOf>,
}

/// The source rewrite a winner's code was lowered from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewriteOf {
    /// The rewrite's kernel (stored as a variant of this one) and its evolve attempt.
    pub variant: crate::kernel::KernelHash,
    pub attempt: u32,
}

/// A winner shipped beside the generic code, taken only by launches its guard admits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Variant {
    #[serde(flatten)]
    pub winner: Winner,
    pub guard: Guard,
}

/// What a launch must satisfy to run a variant, and how it is launched; the candidate's launch
/// bounds, folded values and block size, stated apart for readers of the winners file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guard {
    /// The launch's block has at most this many threads (`.maxntid`; of the new block where
    /// `block_x` relaunches it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<u32>,
    /// A launch of one-dimensional blocks runs with blocks of this many threads and the grid
    /// that keeps its number of threads (x: ceil(grid.x * block.x / block_x)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_x: Option<u32>,
    /// The launch passes exactly these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Specialize>,
}

impl Guard {
    pub fn of(c: &Candidate) -> Guard {
        Guard {
            max_threads: c.max_threads,
            block_x: c.block_x,
            values: c.specialize.clone(),
        }
    }

    /// Whether a launch runs the variant: as a candidate with these launch bounds, block size
    /// and folded values admits it ([`Candidate::admits`], which the runtime's check mirrors).
    pub fn admits(&self, l: &crate::candidate::LaunchValues) -> bool {
        Candidate {
            max_threads: self.max_threads,
            block_x: self.block_x,
            specialize: self.values.clone(),
            ..Candidate::baseline()
        }
        .admits(l)
    }
}

/// The winners file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WinnersFile {
    pub schema: String,
    pub schema_version: u32,
    pub created_by: String,
    pub llvm_version: String,
    /// Each kernel's generic code: what every launch may run.
    pub kernels: Vec<Winner>,
    /// Guarded variants, in the order a launch tries them (an r3 older than variants reads the
    /// file without them and builds the generic code alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    /// The best source rewrite of each kernel `r3 evolve` found faster than its best
    /// compiler-only build: a diff for the user to apply. Once applied, the kernel compiles
    /// to the rewrite's hash, whose own winner is in `kernels`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rewrites: Vec<Rewrite>,
    /// Entries of `kernels` and `variants` this r3 cannot read: each costs only its kernel.
    #[serde(skip)]
    pub unreadable: Vec<Unreadable>,
}

/// An entry of a winners file that does not read as a winner: most often a field that a newer
/// r3 added to a candidate. Every field of a candidate says how the code is built, so such an
/// entry is refused rather than built without it.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// "kernels" or "variants", and the entry's place there (from 0).
    pub list: &'static str,
    pub index: usize,
    /// The kernel it is for, where the entry names one.
    pub hash: Option<String>,
    pub why: String,
}

impl WinnersFile {
    /// A winners file's text (a UTF-8 byte-order mark, as some editors write, is skipped). The
    /// file as a whole must read; an entry that does not is kept in `unreadable`.
    pub fn parse(bytes: &[u8]) -> Result<WinnersFile, String> {
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let mut v: serde_json::Value = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        let (kernels, variants) = (take_list(&mut v, "kernels"), take_list(&mut v, "variants"));
        let mut f: WinnersFile = serde_json::from_value(v).map_err(|e| e.to_string())?;
        f.kernels = entries(kernels, "kernels", &mut f.unreadable);
        f.variants = entries(variants, "variants", &mut f.unreadable);
        Ok(f)
    }
}

/// The entries of one list, taken out of the file's value (an empty list left in its place).
fn take_list(v: &mut serde_json::Value, list: &str) -> Vec<serde_json::Value> {
    match v.get_mut(list) {
        Some(serde_json::Value::Array(a)) => std::mem::take(a),
        _ => Vec::new(),
    }
}

fn entries<T: serde::de::DeserializeOwned>(
    values: Vec<serde_json::Value>,
    list: &'static str,
    unreadable: &mut Vec<Unreadable>,
) -> Vec<T> {
    let mut out = Vec::new();
    for (index, v) in values.into_iter().enumerate() {
        let hash = v.get("hash").and_then(|h| h.as_str()).map(str::to_owned);
        match serde_json::from_value(v) {
            Ok(t) => out.push(t),
            Err(e) => unreadable.push(Unreadable {
                list,
                index,
                hash,
                why: format!(
                    "{e}: this r3 ({}) cannot read it; fix: build with the r3 that exported it",
                    env!("CARGO_PKG_VERSION")
                ),
            }),
        }
    }
    out
}

/// A source rewrite in a winners file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rewrite {
    /// The kernel it rewrites, and the kernel it compiles to.
    pub hash: crate::kernel::KernelHash,
    pub variant: crate::kernel::KernelHash,
    pub demangled: String,
    pub gpu: String,
    /// Over the original's best compiler-only configuration.
    pub speedup: f64,
    pub diff: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_winners_file_reads_past_a_bom_and_an_entry_it_cannot_read_costs_only_that_entry() {
        let winner = |hash: &str, candidate: serde_json::Value| {
            serde_json::json!({
                "hash": hash, "name": "_Z1kv", "demangled": "k()", "arch": "sm_90",
                "gpu": "g", "driver": "d", "candidate": candidate, "ptx_isa": null,
                "ptx_hash": "p", "trial": 1, "speedup": 1.5, "confirmed_speedup": null,
                "r3_version": "0", "a_field_of_a_newer_r3": [1, 2]
            })
        };
        let file = serde_json::json!({
            "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "created_by": "r3",
            "llvm_version": "22", "a_top_level_field_of_a_newer_r3": true,
            "kernels": [
                winner("aaaa", serde_json::json!({"pipeline": "default<O2>"})),
                winner("bbbb", serde_json::json!({"pipeline": "default<O2>", "vectorize": 8})),
            ]
        });
        let mut bytes = b"\xEF\xBB\xBF".to_vec();
        bytes.extend(file.to_string().bytes());
        let f = WinnersFile::parse(&bytes).unwrap();
        // Fields outside a candidate are for people and later tools: ignored.
        assert_eq!(f.kernels.len(), 1);
        assert_eq!(f.kernels[0].hash.as_str(), "aaaa");
        // A candidate's field changes the code: its entry is refused, by name.
        assert_eq!(f.unreadable.len(), 1);
        let u = &f.unreadable[0];
        assert_eq!(
            (u.list, u.index, u.hash.as_deref()),
            ("kernels", 1, Some("bbbb"))
        );
        assert!(u.why.contains("unknown field `vectorize`"), "{}", u.why);
        assert!(WinnersFile::parse(b"\xEF\xBB\xBF{").is_err());
    }
}
