//! CUDA source as `evolve` sees it: tokens with their byte spans, the function definitions of
//! a file, the kernel and the device functions only it calls (the region a rewrite replaces),
//! and splicing a rewrite back into a private copy of the file.
//!
//! This is no C++ parser: it finds function definitions by their shape (`… name(…) … {…}` with
//! `__global__` or `__device__` among the leading words). Anything it cannot place is refused,
//! and the compile that follows is the real check.

use std::ops::Range;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ident,
    Number,
    Literal,
    Punct,
    /// A whole preprocessor line (continuations included).
    Directive,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub span: (usize, usize),
    /// 1-based line of the token's first byte.
    pub line: u32,
}

impl Token {
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.span.0..self.span.1]
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LexError {
    #[error("unterminated {what} starting on line {line}")]
    Unterminated { what: &'static str, line: u32 },
}

const PUNCT3: &[&str] = &["<<=", ">>=", "...", "->*"];
const PUNCT2: &[&str] = &[
    "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=", "^=", ".*", "##",
];

/// Splits C++ source into tokens; comments and whitespace are dropped.
pub fn lex(src: &str) -> Result<Vec<Token>, LexError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line, mut line_start) = (0usize, 1u32, true);
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let start_line = line;
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let end = src[i + 2..].find("*/").ok_or(LexError::Unterminated {
                what: "comment",
                line,
            })?;
            line += src[i..i + 2 + end].matches('\n').count() as u32;
            i += end + 4;
            continue;
        }
        let was_line_start = std::mem::replace(&mut line_start, false);
        let kind = if c == b'#' && was_line_start {
            while i < b.len() && b[i] != b'\n' {
                if b[i] == b'\\' && b.get(i + 1) == Some(&b'\n') {
                    line += 1;
                    i += 1;
                }
                i += 1;
            }
            Kind::Directive
        } else if c == b'"' || c == b'\'' {
            i = quoted(b, i, line)?;
            Kind::Literal
        } else if c == b'R' && b.get(i + 1) == Some(&b'"') {
            let open = src[i + 2..].find('(').ok_or(LexError::Unterminated {
                what: "raw string",
                line,
            })?;
            let close = format!("){}\"", &src[i + 2..i + 2 + open]);
            let end = src[i + 2 + open..]
                .find(&close)
                .ok_or(LexError::Unterminated {
                    what: "raw string",
                    line,
                })?;
            let stop = i + 2 + open + end + close.len();
            line += src[i..stop].matches('\n').count() as u32;
            i = stop;
            Kind::Literal
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            i += 1;
            while i < b.len() {
                let d = b[i];
                let exp_sign =
                    (d == b'+' || d == b'-') && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P');
                let separator = d == b'\'' && b.get(i + 1).is_some_and(u8::is_ascii_alphanumeric);
                if d.is_ascii_alphanumeric() || d == b'.' || d == b'_' || exp_sign || separator {
                    i += 1;
                } else {
                    break;
                }
            }
            Kind::Number
        } else {
            let rest = &src[i..];
            let n = PUNCT3
                .iter()
                .chain(PUNCT2)
                .find(|p| rest.starts_with(**p))
                .map_or(rest.chars().next().map_or(1, char::len_utf8), |p| p.len());
            i += n;
            Kind::Punct
        };
        out.push(Token {
            kind,
            span: (start, i),
            line: start_line,
        });
    }
    Ok(out)
}

fn quoted(b: &[u8], start: usize, line: u32) -> Result<usize, LexError> {
    let q = b[start];
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'\n' => break,
            c if c == q => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(LexError::Unterminated {
        what: if q == b'"' {
            "string"
        } else {
            "character literal"
        },
        line,
    })
}

/// One function definition: where it is and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    /// `__global__` (a kernel) rather than `__device__`.
    pub global: bool,
    /// Also `__host__`: compiled for the host too.
    pub host: bool,
    pub template: bool,
    /// Byte range of the whole definition, from its first word to its closing brace.
    pub span: Range<usize>,
    /// Token ranges: the parameter list (inside the parentheses) and the body (inside braces).
    pub params: Range<usize>,
    pub body: Range<usize>,
    pub line: u32,
}

/// What lies at the top level of a file besides function definitions (for rewrites, which
/// may hold nothing else): the first such token, if any.
#[derive(Debug, Clone, Default)]
pub struct Outline {
    pub functions: Vec<Function>,
    pub stray: Option<Token>,
}

/// The function definitions of `toks` (at any namespace or `extern "C"` depth; bodies of
/// functions and classes are not searched).
pub fn outline(src: &str, toks: &[Token]) -> Outline {
    let mut out = Outline::default();
    let mut stmt = 0usize;
    let mut i = 0usize;
    while i < toks.len() {
        let t = toks[i];
        let text = t.text(src);
        match (t.kind, text) {
            (Kind::Directive, _) => stmt = i + 1,
            (Kind::Punct, ";") => {
                note_stray(&mut out, toks, stmt..i);
                stmt = i + 1;
            }
            (Kind::Punct, "}") => stmt = i + 1,
            (Kind::Punct, "{") => {
                let close = matching(src, toks, i).unwrap_or(toks.len() - 1);
                match function_at(src, toks, stmt..i, close) {
                    Some(f) => {
                        out.functions.push(f);
                        i = close;
                    }
                    None if is_scope(src, &toks[stmt..i]) => {}
                    None => {
                        note_stray(&mut out, toks, stmt..i + 1);
                        i = close;
                    }
                }
                stmt = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    note_stray(&mut out, toks, stmt..toks.len());
    out
}

fn note_stray(out: &mut Outline, toks: &[Token], r: Range<usize>) {
    if out.stray.is_none() && r.start < r.end.min(toks.len()) {
        out.stray = Some(toks[r.start]);
    }
}

/// `namespace x {` or `extern "C" {`: a scope whose contents are at the top level.
fn is_scope(src: &str, head: &[Token]) -> bool {
    match head.first().map(|t| t.text(src)) {
        Some("namespace") => true,
        Some("extern") => head.len() == 2 && head[1].kind == Kind::Literal,
        _ => false,
    }
}

/// The index of the bracket closing the one at `open`.
pub fn matching(src: &str, toks: &[Token], open: usize) -> Option<usize> {
    let (o, c) = match toks[open].text(src) {
        "(" => ("(", ")"),
        "[" => ("[", "]"),
        "{" => ("{", "}"),
        _ => return None,
    };
    let mut depth = 0i32;
    for (j, t) in toks.iter().enumerate().skip(open) {
        if t.kind != Kind::Punct {
            continue;
        }
        match t.text(src) {
            x if x == o => depth += 1,
            x if x == c => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

const NOT_A_NAME: &[&str] = &[
    "__launch_bounds__",
    "__attribute__",
    "__declspec",
    "alignas",
    "decltype",
    "noexcept",
    "__align__",
];

fn function_at(src: &str, toks: &[Token], head: Range<usize>, close: usize) -> Option<Function> {
    let words: Vec<&str> = toks[head.clone()].iter().map(|t| t.text(src)).collect();
    let global = words.contains(&"__global__");
    // `=` outside parentheses: a variable with an initializer, not a function.
    let mut depth = 0i32;
    let initializer = words.iter().any(|w| {
        match *w {
            "(" => depth += 1,
            ")" => depth -= 1,
            _ => {}
        }
        *w == "=" && depth == 0
    });
    if !(global || words.contains(&"__device__")) || initializer {
        return None;
    }
    // The parameter list is the last parenthesized group that follows a name.
    let mut k = head.start;
    let mut found = None;
    while k < head.end {
        if toks[k].text(src) == "(" {
            let end = matching(src, toks, k).filter(|&e| e < head.end)?;
            let name = toks.get(k.wrapping_sub(1)).filter(|t| {
                k > head.start && t.kind == Kind::Ident && !NOT_A_NAME.contains(&t.text(src))
            });
            if let Some(n) = name {
                found = Some((n.text(src).to_owned(), k + 1..end));
            }
            k = end;
        }
        k += 1;
    }
    let (name, params) = found?;
    let first = toks[head.start];
    Some(Function {
        name,
        global,
        host: words.contains(&"__host__"),
        template: words.first() == Some(&"template"),
        span: first.span.0..toks[close].span.1,
        params,
        body: head.end + 1..close,
        line: first.line,
    })
}

/// A parameter list as types only, for comparing signatures: names, `__restrict__` and
/// top-level `const` (neither changes the kernel's mangled name or ABI) are left out.
pub fn param_types(src: &str, toks: &[Token], params: Range<usize>) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    let mut depth = 0i32;
    let flush = |cur: &mut Vec<&str>, out: &mut Vec<String>| {
        if let Some(eq) = cur.iter().position(|w| *w == "=") {
            cur.truncate(eq);
        }
        cur.retain(|w| !matches!(*w, "__restrict__" | "__restrict" | "restrict"));
        let last_ptr = cur.iter().rposition(|w| *w == "*" || *w == "&");
        if cur.len() > 1
            && cur
                .last()
                .is_some_and(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
            && !is_type_word(cur[cur.len() - 1])
        {
            cur.pop();
        }
        let mut kept = Vec::new();
        for (i, w) in cur.iter().enumerate() {
            let top_level = last_ptr.is_none_or(|p| i > p);
            if !(*w == "const" && top_level) {
                kept.push(*w);
            }
        }
        if !kept.is_empty() {
            out.push(kept.join(" "));
        }
        cur.clear();
    };
    for t in &toks[params] {
        let w = t.text(src);
        match w {
            "(" | "<" | "[" => depth += 1,
            ")" | ">" | "]" => depth -= 1,
            "," if depth == 0 => {
                flush(&mut cur, &mut out);
                continue;
            }
            _ => {}
        }
        cur.push(w);
    }
    flush(&mut cur, &mut out);
    if out == ["void"] {
        out.clear();
    }
    out
}

fn is_type_word(w: &str) -> bool {
    matches!(
        w,
        "int"
            | "char"
            | "short"
            | "long"
            | "float"
            | "double"
            | "unsigned"
            | "signed"
            | "bool"
            | "void"
            | "size_t"
            | "const"
            | "auto"
    )
}

/// The part of a file a rewrite replaces: the kernel and the device functions that only it
/// calls, in file order.
#[derive(Debug, Clone)]
pub struct Region {
    pub kernel: Function,
    pub callees: Vec<Function>,
    /// Names of every function defined in the file (a rewrite's new helpers must not clash).
    pub defined: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("{file}: {err}")]
    Lex { file: String, err: LexError },
    #[error("{file} defines no kernel `{name}` near line {line}; fix: rebuild with r3-clang++ so that the store's kernel matches the source")]
    NoKernel {
        file: String,
        name: String,
        line: u32,
    },
    #[error(
        "kernel `{name}` in {file} is a template; evolve rewrites only non-template kernels so far"
    )]
    Template { file: String, name: String },
}

/// Finds the kernel `name` defined at (or nearest to) `line` of `src`.
pub fn region(src: &str, file: &str, name: &str, line: u32) -> Result<Region, SourceError> {
    let toks = lex(src).map_err(|err| SourceError::Lex {
        file: file.into(),
        err,
    })?;
    let o = outline(src, &toks);
    let kernel = o
        .functions
        .iter()
        .filter(|f| f.global && f.name == name)
        .min_by_key(|f| {
            let last = toks[f.body.end].line;
            if (f.line..=last).contains(&line) {
                0
            } else {
                f.line.abs_diff(line)
            }
        })
        .cloned()
        .ok_or_else(|| SourceError::NoKernel {
            file: file.into(),
            name: name.into(),
            line,
        })?;
    if kernel.template {
        return Err(SourceError::Template {
            file: file.into(),
            name: name.into(),
        });
    }
    let called = called_names(src, &toks, kernel.body.clone());
    let callees = o
        .functions
        .iter()
        .filter(|f| !f.global && !f.template && called.contains(&f.name))
        .filter(|f| only_caller_is(src, &toks, &o, f, &kernel))
        .cloned()
        .collect();
    Ok(Region {
        kernel,
        callees,
        defined: o.functions.iter().map(|f| f.name.clone()).collect(),
    })
}

fn called_names(src: &str, toks: &[Token], body: Range<usize>) -> Vec<String> {
    body.clone()
        .filter(|&i| {
            toks[i].kind == Kind::Ident && toks.get(i + 1).is_some_and(|t| t.text(src) == "(")
        })
        .map(|i| toks[i].text(src).to_owned())
        .collect()
}

/// Whether `f` is named nowhere in the file but in its own definitions and `kernel`'s body:
/// only then may a rewrite of the kernel change it.
fn only_caller_is(src: &str, toks: &[Token], o: &Outline, f: &Function, kernel: &Function) -> bool {
    let inside = |i: usize, g: &Function| {
        let (a, b) = (toks[i].span.0, toks[i].span.1);
        g.span.start <= a && b <= g.span.end
    };
    toks.iter().enumerate().all(|(i, t)| {
        t.kind != Kind::Ident
            || t.text(src) != f.name
            || inside(i, kernel)
            || o.functions
                .iter()
                .any(|g| g.name == f.name && !g.global && inside(i, g))
    })
}

impl Region {
    /// The region's text as it stands in `src`: callees first, then the kernel.
    pub fn text(&self, src: &str) -> String {
        self.callees
            .iter()
            .chain(std::iter::once(&self.kernel))
            .map(|f| &src[f.span.clone()])
            .collect::<Vec<_>>()
            .join("\n\n")
    }

    /// `src` with the region replaced by `rewrite` (already checked by `guard`): each function
    /// of the rewrite replaces its namesake; new helpers go before the first replaced one.
    pub fn splice(&self, src: &str, rewrite: &str, functions: &[Function]) -> String {
        self.splice_between(src, rewrite, functions, "", "")
    }

    /// `splice`, with `before` in front of the first replaced function (and the new helpers)
    /// and `after` behind the last: a template's `#define`s and `#undef`s.
    pub fn splice_between(
        &self,
        src: &str,
        rewrite: &str,
        functions: &[Function],
        before: &str,
        after: &str,
    ) -> String {
        let mut edits: Vec<(Range<usize>, String)> = Vec::new();
        let mut helpers = before.to_owned();
        for f in functions {
            let text = rewrite[f.span.clone()].to_owned();
            let old = if f.global {
                Some(&self.kernel)
            } else {
                self.callees.iter().find(|c| c.name == f.name)
            };
            match old {
                Some(o) => edits.push((o.span.clone(), text)),
                None => {
                    helpers.push_str(&text);
                    helpers.push_str("\n\n");
                }
            }
        }
        edits.sort_by_key(|(r, _)| r.start);
        if let Some((first, _)) = edits.first_mut() {
            let at = first.start;
            edits.push((at..at, helpers));
            edits.sort_by_key(|(r, _)| (r.start, r.end));
        }
        if let Some(end) = edits.iter().map(|(r, _)| r.end).max() {
            if !after.is_empty() {
                edits.push((end..end, format!("\n{}", after.trim_end())));
            }
        }
        let mut out = src.to_owned();
        for (r, text) in edits.into_iter().rev() {
            out.replace_range(r, &text);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"#include <cstdio>
// a comment with __global__ void fake(
__device__ float sq(float x) { return x * x; }
__device__ float shared_helper(float x) { return x + 1; }
namespace ns {
__global__ void __launch_bounds__(256) k(int n, const float* __restrict__ x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = sq(x[i]) + shared_helper(1.0f); /* } */
  const char *s = "}";
}
}
__global__ void other(float *y) { y[0] = shared_helper(2.0f); }
int main() { return 0; }
"#;

    #[test]
    fn finds_the_kernel_and_the_device_functions_only_it_calls() {
        let r = region(FILE, "f.cu", "k", 6).unwrap();
        assert_eq!(r.kernel.name, "k");
        assert!(r.kernel.global);
        let names: Vec<_> = r.callees.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["sq"], "shared_helper is also called by `other`");
        let text = r.text(FILE);
        assert!(text.starts_with("__device__ float sq"));
        assert!(text.ends_with("const char *s = \"}\";\n}"), "{text}");
    }

    #[test]
    fn parameter_types_ignore_names_restrict_and_top_level_const() {
        let src =
            "__global__ void k(const int n, const float* __restrict__ x, float *y, float a = 1) {}";
        let toks = lex(src).unwrap();
        let f = &outline(src, &toks).functions[0];
        assert_eq!(
            param_types(src, &toks, f.params.clone()),
            ["int", "const float *", "float *", "float"]
        );
    }

    #[test]
    fn splicing_replaces_the_kernel_and_adds_helpers_before_it() {
        let r = region(FILE, "f.cu", "k", 6).unwrap();
        let rw = "__device__ float cube(float x) { return x * x * x; }\n__global__ void k(int n, const float* x, float *y) { y[0] = cube(x[0]); }";
        let toks = lex(rw).unwrap();
        let o = outline(rw, &toks);
        let out = r.splice(FILE, rw, &o.functions);
        assert!(out.contains("__device__ float cube(float x) { return x * x * x; }\n\n__global__ void k(int n, const float* x"), "{out}");
        assert!(out.contains("y[0] = cube(x[0]); }\n}\n__global__ void other"));
        assert!(!out.contains("threadIdx"));
    }

    #[test]
    fn stray_top_level_code_is_noticed() {
        let src = "int g = 3;\n__device__ void f() {}";
        let toks = lex(src).unwrap();
        let o = outline(src, &toks);
        assert_eq!(o.stray.map(|t| t.text(src)), Some("int"));
        assert_eq!(o.functions.len(), 1);
    }
}
