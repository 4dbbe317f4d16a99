//! What r3 knows of a kernel without LLVM: its signature (name, parameters, where it was
//! defined) and the module it was extracted into. The IR side (`r3_ir::extract`) fills these
//! in; the store keeps them; everything above reads them.

use serde::{Deserialize, Serialize};

/// How r3 names content: 16 hex digits of BLAKE3. A kernel is this of its normalized module
/// text (`KernelModule::hash`), a compiled candidate this of its PTX (`ptx_hash` in trials);
/// units, prompts and candidates are keyed the same way.
pub fn short_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex()[..16].to_owned()
}

/// A string-backed hash type: serialized as the bare string (formats unchanged), read as `str`,
/// compared with strings, and never mistaken for another hash type.
macro_rules! hash_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        /// From a file, a directory name or a user's word; the store checks that a hash is
        /// hex before it builds a path from it.
        impl From<String> for $name {
            fn from(s: String) -> $name {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> $name {
                $name(s.to_owned())
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, o: &str) -> bool {
                self.0 == o
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, o: &&str) -> bool {
                self.0 == *o
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, o: &String) -> bool {
                &self.0 == o
            }
        }
    };
}

hash_type!(
    /// A kernel's identity: the `short_hash` of its normalized module text, and the name of its
    /// directory (`kernels/<hash>/`). Names collide across programs and archs; this does not. A
    /// launch or a user's word becomes one through `store::identity`; a mangled name, a PTX
    /// hash or a trials key is not one, which the types keep apart.
    KernelHash
);

impl KernelHash {
    /// The hash of a normalized module's text.
    pub fn of_module_text(text: &str) -> KernelHash {
        KernelHash(short_hash(text.as_bytes()))
    }
}

hash_type!(
    /// What a candidate compiled to: the `short_hash` of its PTX. Two candidates with one PTX
    /// are one measurement; apply ships a winner only if its PTX hashes to the measured one.
    /// (The simulator's landscapes name their entries' code the same way.)
    PtxHash
);

impl PtxHash {
    pub fn of_ptx(ptx: &str) -> PtxHash {
        PtxHash(short_hash(ptx.as_bytes()))
    }
}

hash_type!(
    /// What a search's trials are kept under (`trials/<key>/`, `TrialRecord::kernel`): a
    /// kernel's hash, or, for a simulated search, its landscape's name, or, for a recording no
    /// stored kernel matches, that recording's id (whose search stops with an error). Written as
    /// the bare string, so stores of every r3 read the same; only `kernel_hash` turns one back
    /// into a kernel.
    TrialsKey
);

impl TrialsKey {
    /// The key of a kernel's own searches.
    pub fn of_kernel(hash: &KernelHash) -> TrialsKey {
        TrialsKey(hash.as_str().to_owned())
    }

    /// The kernel whose trials these are, where the key is hex, as a kernel's hash is (the
    /// store's own test before it builds a path), not a landscape's name or a recording's id.
    pub fn kernel_hash(&self) -> Option<KernelHash> {
        let hex = !self.0.is_empty() && self.0.bytes().all(|b| b.is_ascii_hexdigit());
        hex.then(|| KernelHash(self.0.clone()))
    }
}

/// A kernel's own searches are kept under its hash: the key and the hash are then equal.
impl PartialEq<KernelHash> for TrialsKey {
    fn eq(&self, o: &KernelHash) -> bool {
        self.0 == o.0
    }
}

impl PartialEq<TrialsKey> for KernelHash {
    fn eq(&self, o: &TrialsKey) -> bool {
        self.0 == o.0
    }
}

impl From<KernelHash> for TrialsKey {
    fn from(h: KernelHash) -> TrialsKey {
        TrialsKey(h.0)
    }
}

/// What a kernel takes and where it came from; stored as part of `kernel.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSignature {
    /// Mangled name, as in the IR and the PTX.
    pub name: String,
    pub demangled: String,
    /// The GPU architecture the module was compiled for, e.g. "sm_90".
    pub arch: String,
    pub params: Vec<Param>,
    /// Definition site, when the front end gave one.
    pub source: Option<SourceLoc>,
    /// Compiled without optimization (`optnone`, as clang marks every function at -O0): LLVM's
    /// passes skip such a function, so no pipeline can change its code and r3 does not tune it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unoptimized: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceLoc {
    pub file: String,
    pub line: u32,
}

/// One kernel parameter as the launch passes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub index: u32,
    /// LLVM type of the parameter (for a by-value struct, `ptr`; see `byval`).
    pub llvm_type: String,
    /// Bytes the launch passes for this parameter (the struct's size for by-value structs).
    pub size: u64,
    pub align: u64,
    pub pointer: bool,
    /// Address space of a pointer parameter (0 generic, 1 global, 3 shared, 4 constant).
    pub address_space: Option<u32>,
    /// Layout of a struct passed by value.
    pub byval: Option<StructLayout>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StructLayout {
    pub llvm_type: String,
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    pub offset: u64,
    pub size: u64,
    pub llvm_type: String,
}

/// A kernel's own module, ready to store.
pub struct KernelModule {
    /// Hex content hash of the module text (after normalization).
    pub hash: KernelHash,
    pub bitcode: Vec<u8>,
    pub signature: KernelSignature,
}

/// The C++ name of a mangled kernel name; the name itself where it does not demangle.
pub fn demangle(name: &str) -> String {
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle().ok())
        .unwrap_or_else(|| name.to_owned())
}

/// The unqualified name of a demangled function, as its definition in the source names it:
/// `void ns::axpy<float>(float)` → `axpy`, `(anonymous namespace)::k(int)` → `k`.
pub fn unqualified_name(demangled: &str) -> String {
    let s = demangled.replace("(anonymous namespace)", "anon");
    let mut depth = 0i32;
    let end = s
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            c == '(' && depth == 0
        })
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let mut head = s[..end].trim_end().to_owned();
    if head.ends_with('>') {
        let mut depth = 0;
        for (i, c) in head.char_indices().rev() {
            match c {
                '>' => depth += 1,
                '<' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                head.truncate(i);
                break;
            }
        }
    }
    let head = head.rsplit("::").next().unwrap_or(&head);
    head.rsplit(' ').next().unwrap_or(head).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stored_as_the_bare_strings_stores_already_hold() {
        let k = KernelHash::of_module_text("define void @k() { ret void }");
        assert_eq!(k.len(), 16);
        assert_eq!(k, short_hash(b"define void @k() { ret void }"));
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, format!("\"{k}\""));
        assert_eq!(serde_json::from_str::<KernelHash>(&json).unwrap(), k);
        let p: PtxHash = serde_json::from_str("\"00ff00ff00ff00ff\"").unwrap();
        assert_eq!(p, "00ff00ff00ff00ff");
        assert_eq!(PtxHash::of_ptx("x"), short_hash(b"x"));
        // A map keyed by a hash is looked up by a string.
        let m = std::collections::BTreeMap::from([(k.clone(), 1)]);
        assert_eq!(m.get(k.as_str()), Some(&1));
    }

    #[test]
    fn unqualified_names_of_demangled_kernels() {
        for (d, want) in [
            (
                "void r3demo::axpy<float>(float, float const*, float*, int)",
                "axpy",
            ),
            ("eval_poly(float const*, float*, int)", "eval_poly"),
            ("(anonymous namespace)::k(int)", "k"),
            ("void f<(lambda)>(int)", "f"),
            ("plain", "plain"),
            ("saxpy(int, float, float*)", "saxpy"),
            ("ns::k(int)", "k"),
            ("void ns::k<float>(float*)", "k"),
        ] {
            assert_eq!(unqualified_name(d), want, "{d}");
        }
    }
}
