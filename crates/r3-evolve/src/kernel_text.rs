//! A kernel's text as the rules read and edit it: its tokens and kernel (`Parsed`), edits by
//! byte range, and what the recordings say about its launches (`Facts`). Below the rules and
//! the templates that use it, so that the rule table can name them without a circle.

use super::source::{self, Kind, Token};

/// What the recordings say about the kernel's launches, for rules whose soundness rests on it;
/// None where there are no recordings to tell (rewrites proposed on a machine without them
/// are checked where they are measured, see `Rule::requires`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Facts {
    /// Every recorded launch passed pointer arguments into pairwise distinct allocations.
    pub pointers_disjoint: Option<bool>,
    /// The block every recorded launch used, when they agree: code specialized to a block
    /// shape (shared-memory tiles) checks it at run time and falls back otherwise.
    pub block: Option<[u32; 3]>,
}

/// Math calls that neither write memory nor depend on anything but their arguments.
pub const PURE_MATH: &[&str] = &[
    "min",
    "max",
    "fminf",
    "fmaxf",
    "fmin",
    "fmax",
    "fmaf",
    "fma",
    "sqrtf",
    "sqrt",
    "rsqrtf",
    "rsqrt",
    "expf",
    "exp",
    "exp2f",
    "logf",
    "log",
    "log2f",
    "fabsf",
    "fabs",
    "abs",
    "sinf",
    "cosf",
    "tanhf",
    "powf",
    "pow",
    "floorf",
    "ceilf",
    "__fdividef",
    "__expf",
    "__logf",
    "__sinf",
    "__cosf",
    "__saturatef",
    "__fmul_rn",
    "__fadd_rn",
    "__fmaf_rn",
];

/// A fact a rule's rewrite is sound under only.
pub const POINTERS_DISJOINT: &str = "pointers_disjoint";

/// Calls at which every thread of a block waits for the others: what block-grouping keeps in
/// place, and one of the words [`synchronizes`] names.
pub const BLOCK_BARRIERS: &[&str] = &[
    "__syncthreads",
    "__syncthreads_and",
    "__syncthreads_or",
    "__syncthreads_count",
    "__barrier_sync",
];

/// Whether `word` names a call at which threads wait for one another or order their writes for
/// one another: a block barrier, a warp barrier, a memory fence, or cooperative groups' `sync`
/// (`block.sync()`, `cg::sync(g)`). A rule that moves, copies or skips code leaves code with
/// any of these alone: threads may communicate through memory there. One list, so that a
/// barrier one rule knows is never one another misses (the tiling rule had not known
/// `__syncthreads_count`, the register accumulator `__syncthreads_and`).
pub fn synchronizes(word: &str) -> bool {
    BLOCK_BARRIERS.contains(&word)
        || matches!(
            word,
            "__syncwarp"
                | "sync"
                | "__threadfence"
                | "__threadfence_block"
                | "__threadfence_system"
        )
}

impl Facts {
    /// Whether `fact` holds: Some(false) when the recordings refute it, None when unknown.
    pub fn holds(&self, fact: &str) -> Option<bool> {
        match fact {
            POINTERS_DISJOINT => self.pointers_disjoint,
            _ => Some(false),
        }
    }
}

pub(crate) struct Parsed<'a> {
    pub(crate) src: &'a str,
    pub(crate) toks: Vec<Token>,
    pub(crate) kernel: source::Function,
}

pub(crate) fn parse(src: &str) -> Option<Parsed<'_>> {
    let toks = source::lex(src).ok()?;
    let kernel = source::outline(src, &toks)
        .functions
        .into_iter()
        .find(|f| f.global)?;
    Some(Parsed { src, toks, kernel })
}

impl Parsed<'_> {
    pub(crate) fn w(&self, i: usize) -> &str {
        self.toks.get(i).map_or("", |t| t.text(self.src))
    }

    /// Pointer parameters: (index of the name token, whether already restrict).
    pub(crate) fn pointer_params(&self) -> Vec<(usize, usize, bool)> {
        let mut out = Vec::new();
        let mut start = self.kernel.params.start;
        for i in self
            .kernel
            .params
            .clone()
            .chain(std::iter::once(self.kernel.params.end))
        {
            if i == self.kernel.params.end || self.w(i) == "," {
                let r = start..i;
                let last_star = r.clone().rev().find(|&j| self.w(j) == "*");
                let restrict = r.clone().any(|j| self.w(j).starts_with("__restrict"));
                if let Some(s) = last_star {
                    let name = r.clone().rev().find(|&j| self.toks[j].kind == Kind::Ident);
                    if let Some(n) = name.filter(|&n| n > s) {
                        out.push((s, n, restrict));
                    }
                }
                start = i + 1;
            }
        }
        out
    }

    /// `for` loops of the kernel's body: (index of `for`, body token range, braced).
    pub(crate) fn loops(&self) -> Vec<(usize, std::ops::Range<usize>, bool)> {
        let mut out = Vec::new();
        for i in self.kernel.body.clone() {
            if self.w(i) != "for" || self.w(i + 1) != "(" {
                continue;
            }
            let Some(close) = source::matching(self.src, &self.toks, i + 1) else {
                continue;
            };
            if self.w(close + 1) == "{" {
                if let Some(end) = source::matching(self.src, &self.toks, close + 1) {
                    out.push((i, close + 2..end, true));
                }
            } else if let Some(semi) = (close + 1..self.kernel.body.end).find(|&j| self.w(j) == ";")
            {
                // A single statement (a nested braceless `for` is left alone).
                if self.w(close + 1) != "for" && self.w(close + 1) != "if" {
                    out.push((i, close + 1..semi + 1, false));
                }
            }
        }
        out
    }
}

/// The leading whitespace of the line holding byte `at`, and whether only whitespace precedes
/// `at` on it.
pub(crate) fn indent_at(src: &str, at: usize) -> (&str, bool) {
    let start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &src[start..at];
    let ws = &line[..line.len() - line.trim_start().len()];
    (ws, line.trim().is_empty())
}

/// The source text of tokens `r`.
pub(crate) fn span_text(p: &Parsed, r: std::ops::Range<usize>) -> String {
    p.src[p.toks[r.start].span.0..p.toks[r.end - 1].span.1].to_owned()
}

pub(crate) fn edit(src: &str, mut edits: Vec<(usize, usize, String)>) -> String {
    edits.sort_by_key(|e| (e.0, e.1));
    let mut out = src.to_owned();
    for (a, b, text) in edits.into_iter().rev() {
        out.replace_range(a..b, &text);
    }
    out
}

pub(crate) const ASSIGN: &[&str] = &[
    "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=",
];

/// Identifiers a token range assigns, increments or declares.
pub(crate) fn modified_in(
    p: &Parsed,
    r: std::ops::Range<usize>,
) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for i in r {
        let w = p.w(i);
        if p.toks[i].kind != Kind::Ident {
            continue;
        }
        let next = p.w(i + 1);
        let prev = if i > 0 { p.w(i - 1) } else { "" };
        if ASSIGN.contains(&next) || matches!(next, "++" | "--") || matches!(prev, "++" | "--") {
            out.insert(w.to_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_block_barrier_synchronizes_and_so_do_warp_barriers_fences_and_group_syncs() {
        for w in BLOCK_BARRIERS {
            assert!(synchronizes(w), "{w}");
        }
        for w in ["__syncwarp", "sync", "__threadfence", "__threadfence_block"] {
            assert!(synchronizes(w) && !BLOCK_BARRIERS.contains(&w), "{w}");
        }
        assert!(!synchronizes("__shfl_sync") && !synchronizes("syncs"));
    }
}
