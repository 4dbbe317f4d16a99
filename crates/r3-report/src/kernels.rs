//! `r3 kernels`: the recorded kernels grouped by source file, the old versions (no current
//! build contains them) apart.

use crate::store::identity::{Index, Launches};
use crate::store::programs::Share;
use crate::store::records::irreproducible_text;
use crate::store::KernelRecord;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Serialize)]
pub struct SourceGroup<'a> {
    pub source: String,
    pub kernels: Vec<Listed<'a>>,
    /// Each kernel's share of the GPU time of the programs that run it (their launch census),
    /// by hash; absent where no program has one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<crate::kernel::KernelHash, Vec<Share>>,
}

/// A kernel as `r3 kernels --json` lists it: its `kernel.json`, and whether it is old.
#[derive(Debug, Serialize)]
pub struct Listed<'a> {
    #[serde(flatten)]
    pub kernel: &'a KernelRecord,
    /// No current build contains it (`identity::Index::is_old`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub old: bool,
}

const NO_SOURCE: &str = "(unknown source)";
/// The mark of a kernel compiled at -O0, and what to do about it.
pub const UNOPTIMIZED: &str = "compiled without optimization (-O0): not tuned; rebuild with -O3 (with CMake: -DCMAKE_BUILD_TYPE=Release)";

/// Kernels grouped by source file, in the store's order (file, line, name, arch), each with
/// its shares of programs' time (`shares`, by hash) and whether it is old.
pub fn by_source<'a>(
    index: &'a Index,
    shares: &BTreeMap<crate::kernel::KernelHash, Vec<Share>>,
) -> Vec<SourceGroup<'a>> {
    group(index.kernels().iter().collect(), index, shares)
}

fn group<'a>(
    kernels: Vec<&'a KernelRecord>,
    index: &Index,
    shares: &BTreeMap<crate::kernel::KernelHash, Vec<Share>>,
) -> Vec<SourceGroup<'a>> {
    let mut groups: Vec<SourceGroup> = Vec::new();
    for k in kernels {
        let k = Listed {
            kernel: k,
            old: index.is_old(k),
        };
        let source = k
            .kernel
            .signature
            .source
            .as_ref()
            .map(|s| s.file.clone())
            .unwrap_or_else(|| NO_SOURCE.into());
        let hash = k.kernel.hash.clone();
        let mine = shares.get(&hash).cloned();
        match groups.last_mut() {
            Some(g) if g.source == source => g.kernels.push(k),
            _ => groups.push(SourceGroup {
                source,
                kernels: vec![k],
                shares: BTreeMap::new(),
            }),
        }
        if let (Some(g), Some(m)) = (groups.last_mut(), mine) {
            g.shares.insert(hash, m);
        }
    }
    groups
}

/// The kernels by source file, those of the current builds first, then the old versions; with
/// each, its recorded launches (`launches`, by hash) and, where none of them reproduces, why
/// it cannot be searched. Names are short (`identity::short_name`) unless `full_names`.
pub fn render(
    index: &Index,
    launches: &BTreeMap<crate::kernel::KernelHash, Launches>,
    shares: &BTreeMap<crate::kernel::KernelHash, Vec<Share>>,
    store: &Path,
    full_names: bool,
) -> String {
    let mut out = format!("{} kernels in {}\n", index.kernels().len(), store.display());
    let current = group(index.current(), index, shares);
    let old = group(index.old(), index, shares);
    if !old.is_empty() {
        out += &format!(
            "({} of them old versions, listed last: no current build contains them)\n",
            index.old().len()
        );
    }
    for (n, groups) in [current, old].into_iter().enumerate() {
        if n == 1 && !groups.is_empty() {
            out += "\nold versions (their source was edited and compiled again; chosen by hash only; `r3 gc` removes them):\n";
        }
        out += &render_groups(groups, launches, full_names);
    }
    out
}

fn render_groups(
    groups: Vec<SourceGroup>,
    launches: &BTreeMap<crate::kernel::KernelHash, Launches>,
    full_names: bool,
) -> String {
    let mut out = String::new();
    for g in groups {
        out += &format!("\n{}\n", g.source);
        for k in g.kernels.iter().map(|l| l.kernel) {
            let line = k
                .signature
                .source
                .as_ref()
                .map(|s| format!(":{}", s.line))
                .unwrap_or_default();
            let name = if full_names {
                k.signature.demangled.clone()
            } else {
                crate::store::identity::short_name(&k.signature.demangled)
            };
            out += &format!("  {}  {:<6} {:<5} {name}\n", k.hash, k.signature.arch, line);
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
