//! Row pointers read through their base. Kernels often name a row before walking it:
//! `const float* a = A + r * cols; for (…) acc += a[k] * x[k];`. The rules that read a
//! kernel's accesses by its pointer parameters (`tiling`, `staging`) see only `a[k]`, a
//! pointer they know nothing of, and were not offered: gemv_n, a row walk like the ones the
//! tiling template runs 1.5–1.9× faster, stayed at 1.0× (H200, 2026-12-01). Here each such
//! pointer is replaced by its base, `A[(long long)(r * cols) + (k)]`, which addresses the same
//! element: the offset is computed in its own type as before and only then widened, so no sum
//! overflows that did not before.
//!
//! A pointer is replaced only where that cannot change what the kernel does: it is declared
//! alone, from a pointer parameter plus an offset (or `&P[offset]`); neither it nor the
//! parameter is ever assigned, stepped or has its address taken; every use of it is an index
//! `a[…]` whose index does not name it; and the offset is made of numbers, casts, operators and
//! names that are never assigned again (so it holds the same value wherever it is used), with
//! no call, load or choice in it.

use crate::kernel_text::{self as text, span_text, Parsed, ASSIGN};
use crate::source::{self, Kind};
use std::ops::Range;

/// Words a declaration's type may hold before its `*`.
const TYPE_WORDS: &[&str] = &[
    "const",
    "volatile",
    "unsigned",
    "signed",
    "long",
    "short",
    "struct",
    "__restrict__",
    "__restrict",
];

/// Words an offset may hold besides names, numbers and operators: casts.
const CAST_WORDS: &[&str] = &[
    "static_cast",
    "size_t",
    "ptrdiff_t",
    "int64_t",
    "uint64_t",
    "int32_t",
    "uint32_t",
    "long",
    "int",
    "unsigned",
    "signed",
    "short",
    "char",
    "const",
];

/// Tokens an offset must not hold: loads, choices, assignments, steps, blocks.
const NOT_IN_OFFSET: &[&str] = &["[", "?", "&&", "||", "{", "}", "++", "--", "->", ";"];

/// `src` with every row pointer of its kernel read through its base (see the module's
/// comment); None where there is none.
pub fn inline_row_pointers(src: &str) -> Option<String> {
    let mut out: Option<String> = None;
    // One at a time, parsed again after each: the edits of one never overlap another's.
    for _ in 0..16 {
        let now = out.as_deref().unwrap_or(src);
        let p = text::parse(now)?;
        let Some(next) = first_inlined(&p) else {
            break;
        };
        out = Some(next);
    }
    out
}

/// A row pointer's declaration: the statement, its name, its base and offset.
struct Alias {
    stmt: Range<usize>,
    name: usize,
    base: usize,
    offset: Range<usize>,
}

/// `p`'s source with its first row pointer that can be replaced, replaced.
fn first_inlined(p: &Parsed) -> Option<String> {
    let params: Vec<String> = p
        .pointer_params()
        .iter()
        .map(|&(_, n, _)| p.w(n).to_owned())
        .collect();
    p.kernel
        .body
        .clone()
        .filter(|&i| p.w(i) == "=")
        .filter_map(|i| declaration(p, i, &params))
        .find_map(|a| replaced(p, &a))
}

/// The row pointer declared by the `=` at token `eq`, where it is one.
fn declaration(p: &Parsed, eq: usize, params: &[String]) -> Option<Alias> {
    let name = eq.checked_sub(1)?;
    if p.toks[name].kind != Kind::Ident {
        return None;
    }
    let mut star = name.checked_sub(1)?;
    while TYPE_WORDS.contains(&p.w(star)) {
        star -= 1;
    }
    if p.w(star) != "*" {
        return None;
    }
    // The type before the `*`: words only, back to the statement's start.
    let mut start = star;
    while start > p.kernel.body.start && p.toks[start - 1].kind == Kind::Ident {
        start -= 1;
    }
    if start == star || !matches!(p.w(start - 1), ";" | "{" | "}") {
        return None;
    }
    let (base, offset, semi) = if p.w(eq + 1) == "&" {
        let open = eq + 3;
        if p.w(open) != "[" {
            return None;
        }
        let close = source::matching(p.src, &p.toks, open)?;
        (eq + 2, open + 1..close, close + 1)
    } else {
        if p.w(eq + 2) != "+" {
            return None;
        }
        let semi = (eq + 3..p.kernel.body.end).find(|&i| matches!(p.w(i), ";" | ","))?;
        (eq + 1, eq + 3..semi, semi)
    };
    if p.w(semi) != ";" || !params.iter().any(|n| n == p.w(base)) || offset.is_empty() {
        return None;
    }
    Some(Alias {
        stmt: start..semi + 1,
        name,
        base,
        offset,
    })
}

/// `p`'s source with `a` replaced, where nothing forbids it (the module's comment).
fn replaced(p: &Parsed, a: &Alias) -> Option<String> {
    let name = p.w(a.name);
    if !offset_is_fixed(p, a) || touched(p, p.w(a.base), a.base) {
        return None;
    }
    let mut edits = vec![removal(p, a.stmt.clone())];
    let offset = span_text(p, a.offset.clone());
    let base = p.w(a.base);
    for i in a.stmt.end..p.kernel.body.end {
        if p.w(i) != name {
            continue;
        }
        let prev = p.w(i - 1);
        if p.w(i + 1) != "[" || matches!(prev, "." | "->" | "&") || declares(p, i) {
            return None;
        }
        let close = source::matching(p.src, &p.toks, i + 1)?;
        if (i + 2..close).any(|j| p.w(j) == name) {
            return None;
        }
        let index = span_text(p, i + 2..close);
        edits.push((
            p.toks[i].span.0,
            p.toks[close].span.1,
            format!("{base}[(long long)({offset}) + ({index})]"),
        ));
    }
    // Used before its declaration (impossible) or never after it: nothing to gain.
    if edits.len() == 1 || (p.kernel.body.start..a.stmt.start).any(|i| p.w(i) == name) {
        return None;
    }
    Some(text::edit(p.src, edits))
}

/// Whether every name in `a`'s offset keeps one value for the whole kernel, and the offset
/// calls, loads and chooses nothing.
fn offset_is_fixed(p: &Parsed, a: &Alias) -> bool {
    a.offset.clone().all(|i| {
        let w = p.w(i);
        if NOT_IN_OFFSET.contains(&w) || ASSIGN.contains(&w) {
            return false;
        }
        if p.toks[i].kind != Kind::Ident || CAST_WORDS.contains(&w) || p.w(i - 1) == "." {
            return true;
        }
        // A name called is a function: its result may differ from call to call.
        p.w(i + 1) != "(" && !touched(p, w, first_in_body(p, w))
    })
}

/// The token where `name` is declared in the kernel's body (its first), or none (a parameter
/// or a built-in).
fn first_in_body(p: &Parsed, name: &str) -> usize {
    p.kernel
        .body
        .clone()
        .find(|&i| p.w(i) == name)
        .filter(|&i| p.w(i + 1) == "=" || p.toks[i - 1].kind == Kind::Ident)
        .unwrap_or(usize::MAX)
}

/// Whether `name` (declared at token `decl`, `usize::MAX` where not in the body) is assigned,
/// stepped, declared again or has its address taken anywhere in the kernel's body.
fn touched(p: &Parsed, name: &str, decl: usize) -> bool {
    p.kernel.body.clone().any(|i| {
        i != decl
            && p.w(i) == name
            && p.w(i - 1) != "."
            && (ASSIGN.contains(&p.w(i + 1))
                || matches!(p.w(i + 1), "++" | "--")
                || matches!(p.w(i - 1), "++" | "--" | "&")
                || declares(p, i))
    })
}

/// Whether the name at token `i` is being declared: a type word or a declaration's `*` before
/// it (`float a[4]`, `float* a`), not an operator.
fn declares(p: &Parsed, i: usize) -> bool {
    let prev = i.checked_sub(1).map_or("", |j| p.w(j));
    let ident_before = |j: usize| p.toks[j].kind == Kind::Ident && p.w(j) != "return";
    if i > 0 && ident_before(i - 1) {
        return true;
    }
    // `T* a` against `x * a`: the word before the `*` is a type only at a statement's start.
    prev == "*" && i >= 3 && ident_before(i - 2) && matches!(p.w(i - 3), ";" | "{" | "}" | "(")
}

/// The edit that takes out statement `r`, with its line where it is alone on it.
fn removal(p: &Parsed, r: Range<usize>) -> (usize, usize, String) {
    let (from, to) = (p.toks[r.start].span.0, p.toks[r.end - 1].span.1);
    let (_, alone) = text::indent_at(p.src, from);
    let line_start = p.src[..from].rfind('\n').map_or(0, |i| i + 1);
    let rest = &p.src[to..];
    let eol = rest.find('\n').map_or(rest.len(), |i| i + 1);
    if alone && rest[..eol].trim().is_empty() {
        (line_start, to + eol, String::new())
    } else {
        (from, to, String::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEMV: &str = "__global__ void gemv_n_kernel(int rows, int cols, const float* __restrict__ A,\n                              const float* __restrict__ x, float* __restrict__ y) {\n  int r = blockIdx.x * blockDim.x + threadIdx.x;\n  if (r >= rows) return;\n  const float* a = A + static_cast<size_t>(r) * cols;\n  float acc = 0.0f;\n  for (int k = 0; k < cols; ++k) acc += a[k] * x[k];\n  y[r] = acc;\n}";

    fn with(body: &str) -> String {
        format!("__global__ void k(int n, int m, float* A, const float* x, float* y) {{\n  int r = blockIdx.x * blockDim.x + threadIdx.x;\n{body}\n}}")
    }

    #[test]
    fn a_row_pointer_is_read_through_its_base() {
        let out = inline_row_pointers(GEMV).unwrap();
        assert!(!out.contains("const float* a ="), "{out}");
        assert!(
            out.contains("acc += A[(long long)(static_cast<size_t>(r) * cols) + (k)] * x[k];"),
            "{out}"
        );
        // Its line goes with it.
        assert!(out.contains("return;\n  float acc = 0.0f;\n"), "{out}");
    }

    #[test]
    fn an_address_of_an_element_and_writes_through_the_pointer_are_read_through_the_base() {
        let src = with("  float* row = &A[r * m];\n  for (int k = 0; k < m; ++k) row[k] = row[k] * 2.0f + x[k];");
        let out = inline_row_pointers(&src).unwrap();
        assert!(
            out.contains(
                "A[(long long)(r * m) + (k)] = A[(long long)(r * m) + (k)] * 2.0f + x[k];"
            ),
            "{out}"
        );
    }

    #[test]
    fn two_row_pointers_are_both_read_through_their_bases() {
        let src = with("  const float* a = A + r * m;\n  float* b = y + r;\n  b[0] = a[1];");
        let out = inline_row_pointers(&src).unwrap();
        assert!(
            out.contains("y[(long long)(r) + (0)] = A[(long long)(r * m) + (1)];"),
            "{out}"
        );
    }

    #[test]
    fn a_pointer_that_could_change_or_escape_is_left_alone() {
        for body in [
            // The pointer moves, is dereferenced, passed on or has its address taken.
            "  const float* a = A + r * m;\n  a += m;\n  y[r] = a[0];",
            "  const float* a = A + r * m;\n  a++;\n  y[r] = a[0];",
            "  const float* a = A + r * m;\n  y[r] = *a;",
            "  const float* a = A + r * m;\n  y[r] = f(a);",
            "  const float* a = A + r * m;\n  const float** q = &a;\n  y[r] = a[0];",
            // Its offset may not hold one value: a name assigned again, a load, a call.
            "  int o = r * m;\n  const float* a = A + o;\n  o += 1;\n  y[r] = a[0];",
            "  const float* a = A + (int)x[r];\n  y[r] = a[0];",
            "  const float* a = A + g(r);\n  y[r] = a[0];",
            // Its base is assigned; its index names it; it is declared again inside.
            "  const float* a = A + r;\n  A = A + 1;\n  y[r] = a[0];",
            "  const float* a = A + r;\n  y[r] = a[(int)a[0]];",
            "  const float* a = A + r;\n  { float a[2]; a[0] = 1.0f; y[r] = a[0]; }",
            // Not from a pointer parameter; more than one declarator.
            "  float t[4];\n  float* a = t + 1;\n  a[0] = 1.0f;\n  y[r] = t[1];",
            "  const float *a = A + r, *b = A + 2 * r;\n  y[r] = a[0] + b[0];",
        ] {
            let src = with(body);
            assert_eq!(inline_row_pointers(&src), None, "{src}");
        }
    }

    #[test]
    fn a_product_with_a_pointer_read_is_not_taken_for_a_declaration() {
        let src =
            with("  const float* a = A + r * m;\n  float s = 0.0f;\n  s = s * a[0];\n  y[r] = s;");
        let out = inline_row_pointers(&src).unwrap();
        assert!(
            out.contains("s = s * A[(long long)(r * m) + (0)];"),
            "{out}"
        );
    }
}
