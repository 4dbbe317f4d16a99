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

/// A kernel's identity: the `short_hash` of its normalized module text, and the name of its
/// directory (`kernels/<hash>/`). Names collide across programs and archs; this does not. A
/// launch or a user's word becomes one through `store::identity`; a mangled name, a PTX hash
/// or a trials key is not one, which the type keeps apart.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct KernelHash(String);

impl KernelHash {
    /// The hash of a normalized module's text.
    pub fn of_module_text(text: &str) -> KernelHash {
        KernelHash(short_hash(text.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// From a file, a directory name or a user's word that names a kernel by its hash; the store
/// checks that it is hex before it builds a path from it.
impl From<String> for KernelHash {
    fn from(s: String) -> KernelHash {
        KernelHash(s)
    }
}

impl From<&str> for KernelHash {
    fn from(s: &str) -> KernelHash {
        KernelHash(s.to_owned())
    }
}

impl std::ops::Deref for KernelHash {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for KernelHash {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KernelHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for KernelHash {
    fn eq(&self, o: &str) -> bool {
        self.0 == o
    }
}

impl PartialEq<&str> for KernelHash {
    fn eq(&self, o: &&str) -> bool {
        self.0 == *o
    }
}

impl PartialEq<String> for KernelHash {
    fn eq(&self, o: &String) -> bool {
        &self.0 == o
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
