//! `r3 kernels`: the recorded kernels grouped by source file.

use crate::store::identity::Launches;
use crate::store::records::irreproducible_text;
use crate::store::KernelRecord;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct SourceGroup<'a> {
    pub source: String,
    pub kernels: Vec<&'a KernelRecord>,
}

const NO_SOURCE: &str = "(unknown source)";

/// Kernels grouped by source file, in the store's order (file, line, name, arch).
pub fn by_source(kernels: &[KernelRecord]) -> Vec<SourceGroup<'_>> {
    let mut groups: Vec<SourceGroup> = Vec::new();
    for k in kernels {
        let source = k
            .signature
            .source
            .as_ref()
            .map(|s| s.file.clone())
            .unwrap_or_else(|| NO_SOURCE.into());
        match groups.last_mut() {
            Some(g) if g.source == source => g.kernels.push(k),
            _ => groups.push(SourceGroup {
                source,
                kernels: vec![k],
            }),
        }
    }
    groups
}

/// The kernels by source file; with each, its recorded launches (`launches`, by hash) and,
/// where none of them reproduces, why it cannot be searched.
pub fn render(
    kernels: &[KernelRecord],
    launches: &BTreeMap<crate::kernel::KernelHash, Launches>,
    store: &Path,
) -> String {
    let mut out = format!("{} kernels in {}\n", kernels.len(), store.display());
    for g in by_source(kernels) {
        out += &format!("\n{}\n", g.source);
        for k in g.kernels {
            let line = k
                .signature
                .source
                .as_ref()
                .map(|s| format!(":{}", s.line))
                .unwrap_or_default();
            out += &format!(
                "  {}  {:<6} {:<5} {}\n",
                k.hash, k.signature.arch, line, k.signature.demangled
            );
            let params: Vec<String> = k.signature.params.iter().map(param_text).collect();
            out += &format!(
                "  {:16}  params: {}\n",
                "",
                if params.is_empty() {
                    "none".into()
                } else {
                    params.join(", ")
                }
            );
            out += &format!("  {:16}  {}\n", "", launches_text(launches.get(&k.hash)));
        }
    }
    out
}

fn launches_text(l: Option<&Launches>) -> String {
    let Some(l) = l else {
        return "recorded launches: none yet (`r3 record -- ./your-program`)".into();
    };
    let mut text = format!("recorded launches: {}", l.usable + l.irreproducible);
    match (l.irreproducible, l.blocked(), &l.reason) {
        (0, _, _) => {}
        (_, Some(why), _) => text += &format!("; not searched: {}", irreproducible_text(why)),
        (n, None, Some(why)) => text += &format!("; {n} not used: {}", irreproducible_text(why)),
        (_, None, None) => {}
    }
    text
}

fn param_text(p: &crate::kernel::Param) -> String {
    match (&p.byval, p.address_space) {
        (Some(s), _) => format!(
            "byval {} ({} bytes)",
            s.llvm_type.split(" = ").next().unwrap_or(&s.llvm_type),
            p.size
        ),
        (None, Some(0)) | (None, None) => p.llvm_type.clone(),
        (None, Some(a)) => format!("{} addrspace({a})", p.llvm_type),
    }
}
