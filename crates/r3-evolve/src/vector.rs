//! The `vector-loads` rule: an innermost `for (T k = S; k < E; k++)` loop that reads a
//! read-only `float` or `int` pointer parameter at `BASE + k` reads it four elements at a time,
//! one 16-byte `float4`/`int4` load per four iterations, where the address allows it.
//!
//! ```text
//! {
//!   T r3_k = S;
//!   if (r3_k + 3 < E && (reinterpret_cast<unsigned long long>(&P[BASE + r3_k]) & 15) == 0) {
//!     for (; r3_k + 3 < E; r3_k += 4) {
//!       const float4 r3_v0 = *reinterpret_cast<const float4 *>(&P[BASE + r3_k]);
//!       { T k = r3_k;     body with P[BASE + k] as r3_v0.x }
//!       { T k = r3_k + 1; body with P[BASE + k] as r3_v0.y }   … .z, .w
//!     }
//!   }
//!   for (T k = r3_k; k < E; k++) body                           the rest, or all when misaligned
//! }
//! ```
//!
//! The body runs in its own order on the values it would have loaded, so the results are
//! bit-identical; only when the loads happen moves. That is sound when nothing the body does
//! can change what they read, so the rule holds back wherever that is in doubt: the pointer is
//! const-qualified or never written in the kernel, every vectorized access runs on every
//! iteration (no condition around it, no early exit from the body: a load the original would
//! not have made could fault), and a body that writes memory at all is vectorized only when
//! the recordings show the kernel's pointers disjoint (else a write through another pointer
//! could land where a hoisted load already read).

use super::kernel_text::{self as text, Facts};
use super::source::{self, Kind, Token};
use std::collections::HashSet;
use std::ops::Range;

/// The rule's entry in `rules::RULES`.
pub(crate) fn vector_loads(src: &str, facts: &Facts) -> Option<String> {
    let toks = source::lex(src).ok()?;
    let outline = source::outline(src, &toks);
    let kernel = outline.functions.iter().find(|f| f.global)?;
    let c = Code {
        src,
        toks: &toks,
        functions: &outline.functions,
    };
    let readable = c.read_only_params(kernel);
    if readable.is_empty() {
        return None;
    }
    let mut edits = Vec::new();
    for f in kernel.body.clone() {
        if c.w(f) != "for" || c.w(f + 1) != "(" {
            continue;
        }
        if let Some(l) = c.vector_loop(f, kernel.body.end, &readable, facts) {
            edits.push(c.rewrite(&l));
        }
    }
    (!edits.is_empty()).then(|| splice(src, edits))
}

/// What a vectorizable loop is made of: all token indices into the kernel's tokens.
struct Loop {
    /// The first token replaced: the `for`, or a `#pragma` right before it.
    first: usize,
    for_at: usize,
    /// `T`, the loop variable's type.
    ty: Range<usize>,
    var: usize,
    start: Range<usize>,
    /// `<` or `<=`.
    cmp: usize,
    end: Range<usize>,
    /// The body's statements (inside the braces, if any) and the last token of the loop.
    body: Range<usize>,
    last: usize,
    /// Distinct loads, in order of first use, and every access with the load it reads.
    loads: Vec<Load>,
    uses: Vec<(Range<usize>, usize)>,
}

struct Load {
    /// The pointer's name token, the index's tokens (inside the brackets) and where in them
    /// the loop variable is.
    ptr: usize,
    index: Range<usize>,
    var_at: usize,
    vector: &'static str,
}

struct Code<'a> {
    src: &'a str,
    toks: &'a [Token],
    functions: &'a [source::Function],
}

const ASSIGN: &[&str] = &[
    "=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>=",
];
const CASTS: &[&str] = &[
    "static_cast",
    "reinterpret_cast",
    "const_cast",
    "dynamic_cast",
];
/// Words followed by `(` that are no calls.
const NOT_CALLS: &[&str] = &[
    "if",
    "while",
    "for",
    "switch",
    "return",
    "sizeof",
    "alignof",
    "decltype",
    "float",
    "double",
    "__launch_bounds__",
];
const LOOP_TYPES: &[&str] = &[
    "int", "unsigned", "signed", "long", "short", "size_t", "auto",
];
/// Words after which the body is left alone: control leaving or repeating part of the body
/// (a copy of it would do so four times or skip the copies after it), and inline assembly;
/// barriers and fences too ([`text::synchronizes`]: four per vector step are legal, but a
/// rewrite of code that synchronizes is not this rule's business).
const STOPS: &[&str] = &[
    "for", "while", "do", "goto", "return", "break", "continue", "switch", "asm", "__asm__",
];

impl Code<'_> {
    fn w(&self, i: usize) -> &str {
        self.toks.get(i).map_or("", |t| t.text(self.src))
    }

    fn ident(&self, i: usize) -> bool {
        self.toks.get(i).is_some_and(|t| t.kind == Kind::Ident)
    }

    fn text(&self, r: Range<usize>) -> &str {
        if r.is_empty() {
            return "";
        }
        &self.src[self.toks[r.start].span.0..self.toks[r.end - 1].span.1]
    }

    fn close(&self, open: usize) -> Option<usize> {
        source::matching(self.src, self.toks, open)
    }

    /// Token indices of `r` outside any brackets, with the angle brackets of a C++ cast
    /// counted as brackets.
    fn top_level(&self, r: Range<usize>) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        let mut i = r.start;
        while i < r.end {
            let w = self.w(i);
            if CASTS.contains(&w) && self.w(i + 1) == "<" {
                out.push(i);
                i = (i + 2..r.end).find(|&j| self.w(j) == ">")? + 1;
                continue;
            }
            out.push(i);
            if matches!(w, "(" | "[" | "{") {
                i = self.close(i).filter(|&c| c < r.end)?;
            }
            i += 1;
        }
        Some(out)
    }

    /// The `float`/`int` pointer parameters that the kernel only reads (const-qualified, or
    /// named only in loads), by name, with their vector type.
    fn read_only_params(&self, k: &source::Function) -> Vec<(String, &'static str)> {
        let mut out = Vec::new();
        let Some(top) = self.top_level(k.params.clone()) else {
            return out;
        };
        let commas: Vec<usize> = top.into_iter().filter(|&i| self.w(i) == ",").collect();
        let mut start = k.params.start;
        for end in commas.into_iter().chain([k.params.end]) {
            let p: Vec<usize> = (start..end).collect();
            start = end + 1;
            let stars: Vec<usize> = p.iter().copied().filter(|&i| self.w(i) == "*").collect();
            let [star] = stars[..] else { continue };
            let before: Vec<&str> = p
                .iter()
                .filter(|&&i| i < star)
                .map(|&i| self.w(i))
                .collect();
            let after: Vec<usize> = p.iter().copied().filter(|&i| i > star).collect();
            let Some((&name, quals)) = after.split_last() else {
                continue;
            };
            let quals_ok = quals
                .iter()
                .all(|&i| matches!(self.w(i), "__restrict__" | "__restrict" | "const"));
            if !self.ident(name) || !quals_ok {
                continue;
            }
            let constant = before.contains(&"const");
            let elem: Vec<&str> = before.iter().copied().filter(|w| *w != "const").collect();
            let vector = match elem[..] {
                ["float"] => "float4",
                ["int"] => "int4",
                _ => continue,
            };
            let name = self.w(name);
            if constant || self.only_loaded(name, k.body.clone()) {
                out.push((name.to_owned(), vector));
            }
        }
        out
    }

    /// Whether every use of `name` in `body` is a load `name[…]`, not an address taken, a
    /// store or an increment.
    fn only_loaded(&self, name: &str, body: Range<usize>) -> bool {
        body.clone()
            .filter(|&i| self.w(i) == name && self.ident(i))
            .all(|i| {
                if matches!(self.w(i - 1), "." | "->" | "::") {
                    return true;
                }
                let Some(rb) = self.close(i + 1).filter(|_| self.w(i + 1) == "[") else {
                    return false;
                };
                let after = self.w(rb + 1);
                !matches!(self.w(i - 1), "&" | "++" | "--")
                    && !ASSIGN.contains(&after)
                    && !matches!(after, "++" | "--" | "[" | ".")
            })
    }

    /// Identifiers `r` assigns, increments or declares (with an initializer).
    fn modified(&self, r: Range<usize>) -> HashSet<&str> {
        r.filter(|&i| self.ident(i))
            .filter(|&i| {
                let (prev, next) = (self.w(i - 1), self.w(i + 1));
                ASSIGN.contains(&next)
                    || matches!(next, "++" | "--")
                    || matches!(prev, "++" | "--" | "&")
            })
            .map(|i| self.w(i))
            .collect()
    }

    /// Whether `r` has a call that may have effects or read what the loop changes.
    fn calls(&self, r: Range<usize>) -> bool {
        r.clone()
            .any(|i| self.is_call(i) && !text::PURE_MATH.contains(&self.w(i)))
    }

    /// Whether the token at `i` names a function it calls (rather than a keyword or a
    /// functional cast).
    fn is_call(&self, i: usize) -> bool {
        let w = self.w(i);
        self.ident(i)
            && self.w(i + 1) == "("
            && !NOT_CALLS.contains(&w)
            && !LOOP_TYPES.contains(&w)
            && !CASTS.contains(&w)
    }

    /// Whether `r` may write memory (rather than locals by name): a store through brackets,
    /// a dereference or `->`, an address taken or a reference bound, an atomic, or a call to
    /// anything but pure math and device functions without pointer or reference parameters
    /// that do not either.
    fn may_write_memory(&self, r: Range<usize>, depth: u32) -> bool {
        r.clone().any(|i| {
            let w = self.w(i);
            let prev = if i > r.start { self.w(i - 1) } else { ";" };
            let operand_before = i > r.start
                && (self.ident(i - 1)
                    || matches!(prev, ")" | "]")
                    || self.toks[i - 1].kind == Kind::Number);
            let step = matches!(w, "++" | "--");
            let store = (ASSIGN.contains(&w) || step) && matches!(prev, "]" | ")");
            let through = step && (matches!(self.w(i + 1), "*" | "(") || self.w(i + 2) == "[");
            // `__ldg(&p[i])` only reads.
            let ldg = prev == "(" && i > r.start + 1 && self.w(i - 2) == "__ldg";
            let deref = matches!(w, "*" | "&") && !operand_before && !ldg;
            let reference =
                w == "&" && self.ident(i + 1) && matches!(self.w(i + 2), "=" | "(" | "{");
            // `f<T>(…)`: a template's call.
            let template_call = w == ">"
                && self.w(i + 1) == "("
                && (r.start..i)
                    .rev()
                    .find(|&j| self.w(j) == "<")
                    .is_some_and(|j| self.ident(j - 1) && !CASTS.contains(&self.w(j - 1)));
            let call = self.is_call(i)
                && !text::PURE_MATH.contains(&w)
                && w != "__ldg"
                && !self.pure_callee(w, depth);
            store || through || deref || reference || w == "->" || call || template_call
        })
    }

    fn pure_callee(&self, name: &str, depth: u32) -> bool {
        if depth > 2 {
            return false;
        }
        let mut defs = self.functions.iter().filter(|f| f.name == name).peekable();
        defs.peek().is_some()
            && defs.all(|f| {
                !f.global
                    && !f
                        .params
                        .clone()
                        .any(|i| matches!(self.w(i), "*" | "&" | "["))
                    && !self.may_write_memory(f.body.clone(), depth + 1)
            })
    }

    /// The loop at `f` (the `for` token), if the rule applies to it.
    fn vector_loop(
        &self,
        f: usize,
        limit: usize,
        readable: &[(String, &'static str)],
        facts: &Facts,
    ) -> Option<Loop> {
        let close = self.close(f + 1)?;
        let top = self.top_level(f + 2..close)?;
        let semis: Vec<usize> = top.iter().copied().filter(|&i| self.w(i) == ";").collect();
        let [s1, s2] = semis[..] else { return None };
        // The header: `T k = S; k < E; k++`.
        let eq = (f + 2..s1).find(|&i| self.w(i) == "=")?;
        let var = eq - 1;
        let ty = f + 2..var;
        let k = self.w(var);
        let typed = !ty.is_empty() && ty.clone().all(|i| LOOP_TYPES.contains(&self.w(i)));
        if !typed || !self.ident(var) || k.starts_with("r3_") {
            return None;
        }
        let start = eq + 1..s1;
        let init_top = self.top_level(start.clone())?;
        if start.is_empty()
            || init_top.iter().any(|&i| self.w(i) == ",")
            || start.clone().any(|i| self.w(i).starts_with("r3_"))
        {
            return None;
        }
        let (cmp, end) = (s1 + 2, s1 + 3..s2);
        if self.w(s1 + 1) != k || !matches!(self.w(cmp), "<" | "<=") || end.is_empty() {
            return None;
        }
        let step: Vec<&str> = (s2 + 1..close).map(|i| self.w(i)).collect();
        if !(step == [k, "++"] || step == ["++", k] || step == [k, "+=", "1"]) {
            return None;
        }
        // The body: braced, or one expression statement.
        let (body, last) = if self.w(close + 1) == "{" {
            let rb = self.close(close + 1)?;
            (close + 2..rb, rb)
        } else {
            let semi = (close + 1..limit).find(|&i| self.w(i) == ";")?;
            if matches!(self.w(close + 1), "if" | "else" | "{" | "case" | "default") {
                return None;
            }
            (close + 1..semi + 1, semi)
        };
        if body
            .clone()
            .any(|i| STOPS.contains(&self.w(i)) || text::synchronizes(self.w(i)))
        {
            return None;
        }
        let whole = f..last + 1;
        let changed = self.modified(whole.clone());
        if self.modified(body.clone()).contains(k) {
            return None;
        }
        // E is evaluated once more per vector step than before and must say the same.
        let end_top = self.top_level(end.clone())?;
        let end_ok = end_top.iter().all(|&i| !lower_than_relational(self.w(i)))
            && !end.clone().any(|i| {
                matches!(self.w(i), "[" | "->") || (self.ident(i) && changed.contains(self.w(i)))
            })
            && !self.calls(end.clone());
        if !end_ok {
            return None;
        }
        if self.may_write_memory(body.clone(), 0) && facts.pointers_disjoint != Some(true) {
            return None;
        }
        let (loads, uses) = self.loads(&body, var, readable, &changed)?;
        let first = (0..f)
            .rev()
            .take_while(|&i| self.toks[i].kind == Kind::Directive && self.w(i).contains("pragma"))
            .last()
            .unwrap_or(f);
        Some(Loop {
            first,
            for_at: f,
            ty,
            var,
            start,
            cmp,
            end,
            body,
            last,
            loads,
            uses,
        })
    }

    /// The body's loads that the rule vectorizes; None when there are none.
    #[allow(clippy::type_complexity)]
    fn loads(
        &self,
        body: &Range<usize>,
        var: usize,
        readable: &[(String, &'static str)],
        changed: &HashSet<&str>,
    ) -> Option<(Vec<Load>, Vec<(Range<usize>, usize)>)> {
        let k = self.w(var);
        let mut loads: Vec<Load> = Vec::new();
        let mut uses = Vec::new();
        for p in body.clone() {
            let Some(&(_, vector)) = readable.iter().find(|(name, _)| self.w(p) == name) else {
                continue;
            };
            let member_or_address = matches!(self.w(p - 1), "." | "->" | "::" | "&");
            if !self.ident(p)
                || self.w(p + 1) != "["
                || member_or_address
                || changed.contains(self.w(p))
            {
                continue;
            }
            let rb = self.close(p + 1)?;
            let index = p + 2..rb;
            let Some(var_at) = self.affine_in(index.clone(), k, changed) else {
                continue;
            };
            if !self.runs_every_iteration(p, body) {
                continue;
            }
            let key = self.normalized(p..rb + 1);
            let load = match loads
                .iter()
                .position(|l| self.normalized(l.ptr..l.index.end + 1) == key)
            {
                Some(j) => j,
                None => {
                    loads.push(Load {
                        ptr: p,
                        index,
                        var_at,
                        vector,
                    });
                    loads.len() - 1
                }
            };
            uses.push((p..rb + 1, load));
        }
        (!loads.is_empty()).then_some((loads, uses))
    }

    /// Where `k` is in `index` if the index is `BASE + k` or `k + BASE` (a sum in which `k`
    /// is a term of its own, added) and nothing else in it changes in the loop or loads.
    fn affine_in(&self, index: Range<usize>, k: &str, changed: &HashSet<&str>) -> Option<usize> {
        let top = self.top_level(index.clone())?;
        let at: Vec<usize> = index.clone().filter(|&i| self.w(i) == k).collect();
        let [v] = at[..] else { return None };
        if !top.contains(&v) || top.iter().any(|&i| lower_than_additive(self.w(i))) {
            return None;
        }
        let operand_end = |i: usize| {
            self.ident(i) || matches!(self.w(i), ")" | "]") || self.toks[i].kind == Kind::Number
        };
        let added =
            v == index.start || (self.w(v - 1) == "+" && v - 1 > index.start && operand_end(v - 2));
        let alone = v + 1 == index.end || matches!(self.w(v + 1), "+" | "-");
        let still = index.clone().all(|i| {
            let w = self.w(i);
            !(matches!(w, "[" | "->" | "++" | "--")
                || self.ident(i) && i != v && changed.contains(w))
        });
        (added && alone && still && !self.calls(index)).then_some(v)
    }

    /// Whether the token at `p` is evaluated on every iteration of a loop with body `body`
    /// (which has no `break`, `continue`, `return` or `goto`): in a statement of the body
    /// itself, not of a block in it, that is not conditional and has no operator that may skip
    /// part of it.
    fn runs_every_iteration(&self, p: usize, body: &Range<usize>) -> bool {
        let mut depth = 0i32;
        let mut stmt_start = body.start;
        for i in body.start..p {
            match self.w(i) {
                "{" => depth += 1,
                "}" => depth -= 1,
                _ => {}
            }
            if matches!(self.w(i), ";" | "{" | "}") {
                stmt_start = i + 1;
            }
        }
        let stmt_end = (p..body.end)
            .find(|&i| self.w(i) == ";")
            .unwrap_or(body.end);
        let conditional = matches!(self.w(stmt_start), "if" | "else" | "case" | "default");
        let skips = (stmt_start..stmt_end).any(|i| matches!(self.w(i), "?" | "&&" | "||"));
        depth == 0 && !conditional && !skips
    }

    fn normalized(&self, r: Range<usize>) -> String {
        r.map(|i| self.w(i)).collect::<Vec<_>>().join(" ")
    }

    /// `r`'s text with the tokens at the given indices replaced.
    fn replaced(&self, r: Range<usize>, subs: &[(Range<usize>, String)]) -> String {
        if r.is_empty() {
            return String::new();
        }
        let base = self.toks[r.start].span.0;
        let edits = subs
            .iter()
            .map(|(t, s)| {
                let (a, b) = (self.toks[t.start].span.0, self.toks[t.end - 1].span.1);
                (a - base, b - base, s.clone())
            })
            .collect();
        splice(self.text(r), edits)
    }

    /// The replacement of the loop: (byte range, text).
    fn rewrite(&self, l: &Loop) -> (usize, usize, String) {
        let (a, b) = (self.toks[l.first].span.0, self.toks[l.last].span.1);
        let ind = indent_at(self.src, a);
        let (ty, k) = (self.text(l.ty.clone()), self.w(l.var));
        let cmp = self.w(l.cmp);
        let end = self.text(l.end.clone());
        let more = format!("r3_k + 3 {cmp} {end}");
        let address = |ld: &Load| {
            let index = self.replaced(
                ld.index.clone(),
                &[(ld.var_at..ld.var_at + 1, "r3_k".into())],
            );
            format!("&{}[{index}]", self.w(ld.ptr))
        };
        let mut out = format!("{{\n{ind}  {ty} r3_k = {};\n", self.text(l.start.clone()));
        let aligned: Vec<String> = l
            .loads
            .iter()
            .map(|ld| {
                format!(
                    "(reinterpret_cast<unsigned long long>({}) & 15) == 0",
                    address(ld)
                )
            })
            .collect();
        out += &format!("{ind}  if ({more} && {}) {{\n", aligned.join(" && "));
        out += &format!("{ind}    for (; {more}; r3_k += 4) {{\n");
        for (j, ld) in l.loads.iter().enumerate() {
            let v = ld.vector;
            out += &format!(
                "{ind}      const {v} r3_v{j} = *reinterpret_cast<const {v} *>({});\n",
                address(ld)
            );
        }
        for (c, lane) in ["x", "y", "z", "w"].iter().enumerate() {
            let subs: Vec<(Range<usize>, String)> = l
                .uses
                .iter()
                .map(|(r, j)| (r.clone(), format!("r3_v{j}.{lane}")))
                .collect();
            let copy = self.replaced(l.body.clone(), &subs);
            let inner = format!("{ind}        ");
            out += &format!("{ind}      {{\n");
            if mentions(&copy, k) {
                let value = if c == 0 {
                    "r3_k".to_owned()
                } else {
                    format!("r3_k + {c}")
                };
                out += &format!("{inner}{ty} {k} = {value};\n");
            }
            out += &reindent(&copy, &inner);
            out += &format!("{ind}      }}\n");
        }
        out += &format!("{ind}    }}\n{ind}  }}\n");
        // The original loop from where the vector steps stopped, its pragma with it.
        let pragma = self.text(l.first..l.for_at);
        if !pragma.is_empty() {
            out += &format!("{ind}  {}\n", pragma.trim());
        }
        let header_to_start =
            &self.src[self.toks[l.for_at].span.0..self.toks[l.start.start].span.0];
        let rest = &self.src[self.toks[l.start.end - 1].span.1..b];
        let scalar = format!("{header_to_start}r3_k{rest}");
        // One level deeper, in the new block (not inside a string literal that spans lines).
        let scalar = if scalar.contains('"') {
            scalar
        } else {
            let lines: Vec<String> = scalar
                .lines()
                .enumerate()
                .map(|(n, l)| {
                    if n == 0 || l.trim().is_empty() {
                        l.to_owned()
                    } else {
                        format!("  {l}")
                    }
                })
                .collect();
            lines.join("\n")
        };
        out += &format!("{ind}  {scalar}\n{ind}}}");
        (a, b, out)
    }
}

/// Operators that bind less tightly than `<`: in a loop bound, they would take the comparison
/// apart.
fn lower_than_relational(w: &str) -> bool {
    matches!(
        w,
        "<" | ">" | "<=" | ">=" | "==" | "!=" | "&" | "^" | "|" | "&&" | "||" | "?" | ":" | ","
    ) || ASSIGN.contains(&w)
}

/// Operators that bind less tightly than binary `+`: in an index, `k` would not be a term of
/// the sum.
fn lower_than_additive(w: &str) -> bool {
    lower_than_relational(w) || matches!(w, "<<" | ">>")
}

fn mentions(text: &str, name: &str) -> bool {
    source::lex(text).is_ok_and(|toks| {
        toks.iter()
            .any(|t| t.kind == Kind::Ident && t.text(text) == name)
    })
}

/// `text`'s lines at `ind`, their indentation relative to each other kept.
fn reindent(text: &str, ind: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    // The first line was trimmed; the others keep their indentation beyond the least of them.
    let least = lines[1..]
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for (n, l) in lines.iter().enumerate() {
        let l = if n == 0 {
            l
        } else {
            l.get(least..).unwrap_or(l.trim_start())
        };
        if l.trim().is_empty() {
            out.push('\n');
        } else {
            out += &format!("{ind}{}\n", l.trim_end());
        }
    }
    out
}

fn indent_at(src: &str, at: usize) -> &str {
    let start = src[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = &src[start..at];
    &line[..line.len() - line.trim_start().len()]
}

fn splice(src: &str, mut edits: Vec<(usize, usize, String)>) -> String {
    edits.sort_by_key(|e| (e.0, e.1));
    let mut out = src.to_owned();
    for (a, b, text) in edits.into_iter().rev() {
        out.replace_range(a..b, &text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{guard, source};

    fn apply(src: &str) -> Option<String> {
        vector_loads(src, &Facts::default())
    }

    /// The rewrite passes the guard as a replacement of the kernel in `src`.
    fn guarded(src: &str, out: &str) {
        let name = source::outline(src, &source::lex(src).unwrap())
            .functions
            .into_iter()
            .find(|f| f.global)
            .unwrap()
            .name;
        let region = source::region(src, "k.cu", &name, 1).unwrap();
        if let Err(e) = guard::check(src, &region, out) {
            panic!("guard refused: {e}\n{out}");
        }
    }

    const GEMM: &str = "__global__ void gemm(int n, const float *A, const float *B, float *C) {\n  int col = blockIdx.x * blockDim.x + threadIdx.x;\n  int row = blockIdx.y * blockDim.y + threadIdx.y;\n  if (row >= n || col >= n) return;\n  float acc = 0.0f;\n  for (int k = 0; k < n; ++k) acc += A[static_cast<size_t>(row) * n + k] * B[static_cast<size_t>(k) * n + col];\n  C[row * n + col] = acc;\n}";

    #[test]
    fn a_row_is_read_a_float4_at_a_time_behind_an_alignment_check() {
        let out = apply(GEMM).unwrap();
        guarded(GEMM, &out);
        let want = "  {
    int r3_k = 0;
    if (r3_k + 3 < n && (reinterpret_cast<unsigned long long>(&A[static_cast<size_t>(row) * n + r3_k]) & 15) == 0) {
      for (; r3_k + 3 < n; r3_k += 4) {
        const float4 r3_v0 = *reinterpret_cast<const float4 *>(&A[static_cast<size_t>(row) * n + r3_k]);
        {
          int k = r3_k;
          acc += r3_v0.x * B[static_cast<size_t>(k) * n + col];
        }
        {
          int k = r3_k + 1;
          acc += r3_v0.y * B[static_cast<size_t>(k) * n + col];
        }
        {
          int k = r3_k + 2;
          acc += r3_v0.z * B[static_cast<size_t>(k) * n + col];
        }
        {
          int k = r3_k + 3;
          acc += r3_v0.w * B[static_cast<size_t>(k) * n + col];
        }
      }
    }
    for (int k = r3_k; k < n; ++k) acc += A[static_cast<size_t>(row) * n + k] * B[static_cast<size_t>(k) * n + col];
  }
  C[row * n + col] = acc;";
        assert!(out.contains(want), "{out}");
        assert_eq!(apply(&out), None, "applies once");
    }

    #[test]
    fn both_orders_of_the_sum_and_several_loads_with_one_load_per_distinct_access() {
        let src = "__global__ void dot(int n, int m, const int *a, const int *b, int *out) {\n  int i = threadIdx.x;\n  int s = 0;\n  for (int j = 1; j <= m; j++) {\n    s += a[i * n + j] * b[j + i * n];\n    s += a[i * n + j];\n  }\n  out[i] = s;\n}";
        let out = apply(src).unwrap();
        guarded(src, &out);
        assert!(out.contains("if (r3_k + 3 <= m && (reinterpret_cast<unsigned long long>(&a[i * n + r3_k]) & 15) == 0 && (reinterpret_cast<unsigned long long>(&b[r3_k + i * n]) & 15) == 0) {"), "{out}");
        assert!(out.contains("const int4 r3_v0 = *reinterpret_cast<const int4 *>(&a[i * n + r3_k]);\n        const int4 r3_v1 = *reinterpret_cast<const int4 *>(&b[r3_k + i * n]);\n"), "{out}");
        assert!(out.contains("        {\n          s += r3_v0.z * r3_v1.z;\n          s += r3_v0.z;\n        }\n"), "{out}");
        assert!(
            !out.contains("int j = r3_k + ") && !out.contains("{\n          int j"),
            "j is unused in the copies: {out}"
        );
        assert!(
            out.contains("    for (int j = r3_k; j <= m; j++) {\n      s += a[i * n + j] * b[j + i * n];\n      s += a[i * n + j];\n    }\n  }\n  out[i] = s;"),
            "{out}"
        );
    }

    #[test]
    fn a_pragma_on_the_loop_stays_on_the_scalar_loop() {
        let src = "__global__ void k(int n, const float *x, float *y) {\n  float s = 0;\n  #pragma unroll 4\n  for (int j = 0; j < n; j++) s += x[j];\n  y[0] = s;\n}";
        let out = apply(src).unwrap();
        guarded(src, &out);
        assert!(out.contains("  {\n    int r3_k = 0;"), "{out}");
        assert!(out.contains("    #pragma unroll 4\n    for (int j = r3_k; j < n; j++) s += x[j];\n  }\n  y[0] = s;"), "{out}");
    }

    #[test]
    fn a_pointer_written_in_the_kernel_or_of_another_type_is_left_alone() {
        for src in [
            // Written, and not const.
            "__global__ void k(int n, float *x) { float s = 0; for (int j = 0; j < n; j++) s += x[j]; x[0] = s; }",
            "__global__ void k(int n, float *x) { float s = 0; for (int j = 0; j < n; j++) s += x[j]; x[1]++; }",
            "__global__ void k(int n, float *x) { float s = 0; for (int j = 0; j < n; j++) s += x[j]; float *q = &x[1]; *q = s; }",
            "__global__ void k(int n, float *x, float *y) { float s = 0; for (int j = 0; j < n; j++) s += x[j]; f(x); }",
            // Not float or int.
            "__global__ void k(int n, const double *x, double *y) { double s = 0; for (int j = 0; j < n; j++) s += x[j]; y[0] = s; }",
            "__global__ void k(int n, const unsigned *x, unsigned *y) { unsigned s = 0; for (int j = 0; j < n; j++) s += x[j]; y[0] = s; }",
            "__global__ void k(int n, const float **x, float *y) { float s = 0; for (int j = 0; j < n; j++) s += x[0][j]; y[0] = s; }",
        ] {
            assert_eq!(apply(src), None, "{src}");
        }
    }

    #[test]
    fn indices_that_are_not_base_plus_k_are_left_alone() {
        for index in [
            "j * n",
            "n - j",
            "2 * j",
            "j * 2 + 1",
            "b - j + 1",
            "(j + 1)",
            "j << 1",
            "c ? j : 0",
            "j + j",
            "idx[j]",
            "j + idx[0]",
            "f(j)",
            "j + f(0)",
            "+ j",
            "n * + j",
            "m++ + j",
        ] {
            let src = format!("__global__ void k(int n, int m, int b, int c, const long *idx, const float *x, float *y) {{ float s = 0; for (int j = 0; j < n; j++) s += x[{index}]; y[0] = s; }}");
            assert_eq!(apply(&src), None, "{index}");
        }
        let moving = "__global__ void k(int n, int b, const float *x, float *y) { float s = 0; for (int j = 0; j < n; j++) { s += x[b + j]; b++; } y[0] = s; }";
        assert_eq!(apply(moving), None, "b changes in the loop");
        for index in [
            "j",
            "b + j",
            "j + b",
            "b * n + j",
            "(b + 1) * n + j",
            "j + b * n - 3",
            "-b + j",
            "b - 1 + j",
        ] {
            let src = format!("__global__ void k(int n, int b, const float *x, float *y) {{ float s = 0; for (int j = 0; j < n; j++) s += x[{index}]; y[0] = s; }}");
            assert!(apply(&src).is_some(), "{index}");
        }
    }

    #[test]
    fn only_simple_counting_loops_with_a_steady_bound() {
        for (header, body) in [
            ("int j = 0; j < n; j += 2", "s += x[j];"),
            ("int j = 0; j < n; j--", "s += x[j];"),
            ("int j = n; j > 0; j--", "s += x[j];"),
            ("j = 0; j < n; j++", "s += x[j];"),
            ("int j = 0, q = 0; j < n; j++", "s += x[j];"),
            ("int j = 0; j < n && s < 4; j++", "s += x[j];"),
            ("int j = 0; j < n; j++", "{ s += x[j]; n--; }"),
            ("int j = 0; j < bound(n); j++", "s += x[j];"),
            ("int j = 0; j < x[0]; j++", "s += x[j];"),
            ("int j = 0; j < n; j++", "{ s += x[j]; j += 1; }"),
            ("float j = 0; j < n; j++", "s += x[j];"),
            (
                "int j = 0; j < n; j++",
                "for (int q = 0; q < 2; q++) s += x[j];",
            ),
            ("int j = 0; j < n; j++", "{ s += x[j]; __syncwarp(); }"),
            (
                "int j = 0; j < n; j++",
                "{ s += x[j]; __threadfence_block(); }",
            ),
            ("int j = 0; j < n; j++", "{ s += x[j]; __barrier_sync(0); }"),
        ] {
            let src = format!("__global__ void k(int n, const float *x, float *y) {{ float s = 0; for ({header}) {body} y[0] = s; }}");
            assert_eq!(apply(&src), None, "for ({header}) {body}");
        }
    }

    #[test]
    fn only_loads_made_on_every_iteration_move() {
        for body in [
            "if (j != 3) s += x[j];",
            "{ if (j != 3) s += x[j]; }",
            "{ if (j != 3) { s += x[j]; } }",
            "{ if (j == 3) s = 0; else s += x[j]; }",
            "{ s += j < 3 ? x[j] : 0; }",
            "{ s += (s > 0 && x[j] > 0); }",
            "{ if (s > 9) break; s += x[j]; }",
            "{ if (s > 9) continue; s += x[j]; }",
            "{ if (s > 9) return; s += x[j]; }",
            "{ s += x[j]; __syncthreads(); }",
        ] {
            let src = format!("__global__ void k(int n, const float *x, float *y) {{ float s = 0; for (int j = 0; j < n; j++) {body} y[0] = s; }}");
            assert_eq!(apply(&src), None, "{body}");
        }
        let src = "__global__ void k(int n, const float *x, float *y) { float s = 0; for (int j = 0; j < n; j++) { if (s > 1) { s *= 0.5f; } s += x[j]; } y[0] = s; }";
        assert!(
            apply(src).is_some(),
            "a load after a conditional block still runs every time"
        );
    }

    #[test]
    fn a_body_that_writes_memory_needs_disjoint_pointers() {
        let syrk = "__global__ void syrk(int n, int m, float alpha, float *A, float *C) {\n  int j = blockIdx.x * blockDim.x + threadIdx.x;\n  int i = blockIdx.y * blockDim.y + threadIdx.y;\n  if (i < n && j <= i) {\n    for (int k = 0; k < m; k++) C[i * n + j] += alpha * A[i * m + k] * A[j * m + k];\n  }\n}";
        assert_eq!(vector_loads(syrk, &Facts::default()), None);
        let refuted = Facts {
            pointers_disjoint: Some(false),
            ..Facts::default()
        };
        assert_eq!(vector_loads(syrk, &refuted), None);
        // Once the sum is in a register, the loop stores nothing and needs no fact.
        let acc = crate::rules::rule("register-accumulator")
            .unwrap()
            .apply(syrk, &Facts::default())
            .unwrap();
        let out = apply(&acc).unwrap();
        guarded(syrk, &out);
        assert!(
            out.contains("r3_acc += alpha * r3_v0.y * r3_v1.y;"),
            "{out}"
        );
        let disjoint = Facts {
            pointers_disjoint: Some(true),
            ..Facts::default()
        };
        let out = vector_loads(syrk, &disjoint).unwrap();
        guarded(syrk, &out);
        assert!(
            out.contains("C[i * n + j] += alpha * r3_v0.w * r3_v1.w;"),
            "{out}"
        );
        for body in [
            "{ float t[2]; t[0] = x[j]; s += t[0]; }",
            "{ float *q = y; *q = x[j]; }",
            "{ s += x[j]; atomicAdd(y, s); }",
            "{ s += x[j]; store(y, s); }",
            "{ s += x[j]; y[0]++; }",
            "{ s += x[j]; put<float>(y, s); }",
        ] {
            let src = format!("__device__ void store(float *p, float v) {{ *p = v; }}\n__global__ void k(int n, const float *x, float *y) {{ float s = 0; for (int j = 0; j < n; j++) {body} y[0] = s; }}");
            assert_eq!(apply(&src), None, "{body}");
            assert!(vector_loads(&src, &disjoint).is_some(), "{body}");
        }
        let pure = "__device__ float sq(float v) { float w = v; return w * w; }\n__global__ void k(int n, const float *x, float *y) { float s = 0; for (int j = 0; j < n; j++) s += sq(x[j]) + fmaxf(x[j], 0.0f); y[0] = s; }";
        let out = apply(pure).unwrap();
        guarded(pure, &out);
        assert!(
            out.contains("s += sq(r3_v0.y) + fmaxf(r3_v0.y, 0.0f);"),
            "{out}"
        );
    }

    #[test]
    fn a_never_written_pointer_need_not_be_const_and_restrict_is_kept() {
        let src = "__global__ void k(int n, float * __restrict__ x, float *y) {\n  float s = 0;\n  for (int j = 0; j < n; j++) s += x[j] * x[n + j];\n  y[0] = s;\n}";
        let out = apply(src).unwrap();
        guarded(src, &out);
        assert!(out.contains("__global__ void k(int n, float * __restrict__ x, float *y) {"));
        assert!(
            out.contains("const float4 r3_v1 = *reinterpret_cast<const float4 *>(&x[n + r3_k]);"),
            "{out}"
        );
        assert!(out.contains("s += r3_v0.x * r3_v1.x;"), "{out}");
    }

    #[test]
    fn every_innermost_loop_is_vectorized_and_the_variable_type_is_kept() {
        let src = "__global__ void k(int n, const float *x, float *y) {\n  float s = 0, t = 0;\n  for (size_t j = 0; j < n; j++) s += x[j];\n  for (unsigned j = 2; j < n; ++j) { t += x[j] * j; }\n  y[0] = s + t;\n}";
        let out = apply(src).unwrap();
        guarded(src, &out);
        assert_eq!(out.matches("r3_k += 4").count(), 2, "{out}");
        assert!(out.contains("size_t r3_k = 0;"), "{out}");
        assert!(out.contains("unsigned r3_k = 2;"), "{out}");
        assert!(
            out.contains("unsigned j = r3_k + 3;\n          t += r3_v0.w * j;"),
            "{out}"
        );
    }
}
