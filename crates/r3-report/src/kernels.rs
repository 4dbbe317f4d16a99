//! `r3 kernels`: the recorded kernels grouped by source file.

use crate::store::identity::Launches;
use crate::store::programs::Share;
use crate::store::records::irreproducible_text;
use crate::store::KernelRecord;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct SourceGroup<'a> {
    pub source: String,
    pub kernels: Vec<&'a KernelRecord>,
    /// Each kernel's share of the GPU time of the programs that run it (their launch census),
    /// by hash; absent where no program has one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<String, Vec<Share>>,
}

const NO_SOURCE: &str = "(unknown source)";
/// The mark of a kernel compiled at -O0, and what to do about it.
pub const UNOPTIMIZED: &str = "compiled without optimization (-O0): not tuned; rebuild with -O3 (with CMake: -DCMAKE_BUILD_TYPE=Release)";

/// Kernels grouped by source file, in the store's order (file, line, name, arch), each with
/// its shares of programs' time (`shares`, by hash).
pub fn by_source<'a>(
    kernels: &'a [KernelRecord],
    shares: &BTreeMap<String, Vec<Share>>,
) -> Vec<SourceGroup<'a>> {
    let mut groups: Vec<SourceGroup> = Vec::new();
    for k in kernels {
        let source = k
            .signature
            .source
            .as_ref()
            .map(|s| s.file.clone())
            .unwrap_or_else(|| NO_SOURCE.into());
        let mine = shares.get(k.hash.as_str()).cloned();
        match groups.last_mut() {
            Some(g) if g.source == source => g.kernels.push(k),
            _ => groups.push(SourceGroup {
                source,
                kernels: vec![k],
                shares: BTreeMap::new(),
            }),
        }
        if let (Some(g), Some(m)) = (groups.last_mut(), mine) {
            g.shares.insert(k.hash.to_string(), m);
        }
    }
    groups
}

/// The kernels by source file; with each, its recorded launches (`launches`, by hash) and,
/// where none of them reproduces, why it cannot be searched.
pub fn render(
    kernels: &[KernelRecord],
    launches: &BTreeMap<crate::kernel::KernelHash, Launches>,
    shares: &BTreeMap<String, Vec<Share>>,
    store: &Path,
) -> String {
    let mut out = format!("{} kernels in {}\n", kernels.len(), store.display());
    for g in by_source(kernels, shares) {
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
            if k.signature.unoptimized {
                out += &format!("  {:16}  {UNOPTIMIZED}\n", "");
            }
            if let Some(text) = g.shares.get(k.hash.as_str()).and_then(|s| shares_text(s)) {
                out += &format!("  {:16}  {text}\n", "");
            }
        }
    }
    out
}

/// Where the kernel's share of programs' GPU time is, largest first (three at most).
fn shares_text(shares: &[Share]) -> Option<String> {
    let parts: Vec<String> = shares
        .iter()
        .take(3)
        .map(|s| {
            format!(
                "{:.1}% of {} ({} launch(es), {:.3} ms)",
                100.0 * s.share,
                s.name,
                s.launches,
                s.estimated_ms
            )
        })
        .collect();
    let more = shares.len().saturating_sub(3);
    (!parts.is_empty()).then(|| {
        let tail = if more > 0 {
            format!(" and {more} more program(s)")
        } else {
            String::new()
        };
        format!("program GPU time: {}{tail}", parts.join(", "))
    })
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
