//! The built-in proposer: source rewrites a performance engineer would try first, applied by
//! rule, with no model. Each rule edits the region's text (kernel and callees) by tokens; it
//! may be wrong for the kernel (the compile and the validation against the recording decide),
//! but it never writes anything but device code.

use super::kernel_text::{edit, indent_at, modified_in, parse};
pub use super::kernel_text::{Facts, POINTERS_DISJOINT};
use super::source::{self, Kind};

pub struct Rule {
    pub name: &'static str,
    pub why: &'static str,
    /// Facts the rewrite needs; checked against the recordings before it is measured.
    pub requires: &'static [&'static str],
    apply: fn(&str, &Facts) -> Option<String>,
}

/// The rules, in the order they are offered.
pub const RULES: &[Rule] = &[
    Rule {
        name: "restrict",
        why: "`__restrict__` on the kernel's pointer parameters: the recordings show they never point into the same allocation, so loads may be reordered, kept in registers and sent through the read-only cache",
        requires: &[POINTERS_DISJOINT],
        apply: restrict,
    },
    Rule {
        name: "register-accumulator",
        why: "a loop that accumulates through a pointer at an index the loop never changes accumulates in a register instead, loaded before the loop and stored after it",
        requires: &[],
        apply: accumulator,
    },
    Rule {
        name: "shared-tiling",
        why: "a reduction loop that reads operands one thread per output element reads them through shared-memory tiles of R3_TK steps, loaded cooperatively by the block (coalesced along the contiguous dimension), in blocks of the recorded shape whose threads are all active; other blocks run the original loop. The tile depth is a knob the search tunes, and so is register blocking where a thread's work follows from its coordinates: R3_RX x R3_RY blocks computed by the first of them, one sum per block in each thread's registers, the others returning (the launch is unchanged)",
        requires: &[POINTERS_DISJOINT],
        apply: super::tiling::shared_tiling,
    },
    Rule {
        name: "unroll-constant",
        why: "`#pragma unroll` on innermost loops whose bound is a literal",
        requires: &[],
        apply: unroll_constant,
    },
    Rule {
        name: "unroll-4",
        why: "`#pragma unroll 4` on innermost loops with a run-time bound",
        requires: &[],
        apply: unroll_4,
    },
    Rule {
        name: "vector-loads",
        why: "an innermost loop reading a read-only float or int pointer at base + k reads it four elements at a time (one 16-byte float4/int4 load) where the address is 16-byte aligned, running the body four times on the loaded values in the original order, and the original loop for the rest",
        requires: &[],
        apply: super::vector::vector_loads,
    },
];

pub fn rule(name: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.name == name)
}

impl Rule {
    /// The region's text with the rule applied, or None when it does not apply (or changes
    /// nothing).
    pub fn apply(&self, region: &str, facts: &Facts) -> Option<String> {
        (self.apply)(region, facts).filter(|t| t != region)
    }
}

fn restrict(src: &str, facts: &Facts) -> Option<String> {
    if facts.pointers_disjoint == Some(false) {
        return None;
    }
    let p = parse(src)?;
    let edits: Vec<_> = p
        .pointer_params()
        .into_iter()
        .filter(|(_, _, already)| !already)
        .map(|(star, _, _)| {
            let at = p.toks[star].span.1;
            (at, at, " __restrict__ ".to_owned())
        })
        .collect();
    (!edits.is_empty()).then(|| edit(src, edits))
}

fn accumulator(src: &str, _: &Facts) -> Option<String> {
    let p = parse(src)?;
    let pointers: Vec<&str> = p.pointer_params().iter().map(|&(_, n, _)| p.w(n)).collect();
    for (f, body, braced) in p.loops() {
        let whole = f..if braced { body.end + 1 } else { body.end };
        let words: Vec<&str> = whole.clone().map(|i| p.w(i)).collect();
        if words.iter().any(|w| {
            matches!(*w, "return" | "goto" | "__syncthreads" | "__syncwarp")
                || w.starts_with("atomic")
        }) {
            continue;
        }
        let modified = modified_in(&p, whole.clone());
        for s in body.clone() {
            let at_stmt_start = s == body.start || matches!(p.w(s - 1), ";" | "{" | "}");
            if !at_stmt_start || !pointers.contains(&p.w(s)) || p.w(s + 1) != "[" {
                continue;
            }
            let Some(rb) = source::matching(p.src, &p.toks, s + 1) else {
                continue;
            };
            if !matches!(p.w(rb + 1), "+=" | "-=" | "*=") {
                continue;
            }
            // The index may not load, call, or name anything the loop changes.
            let index_ok = (s + 2..rb).all(|i| {
                let w = p.w(i);
                let changes = p.toks[i].kind == Kind::Ident && modified.contains(w);
                !(matches!(w, "[" | "(") || changes)
            });
            let named_once = whole.clone().filter(|&i| p.w(i) == p.w(s)).count() == 1;
            if !index_ok || !named_once {
                continue;
            }
            let lhs = &p.src[p.toks[s].span.0..p.toks[rb].span.1];
            let acc = "r3_acc";
            // A pragma on the loop moves into the block with it.
            let first = (0..whole.start)
                .rev()
                .take_while(|&i| p.toks[i].kind == Kind::Directive)
                .last()
                .unwrap_or(whole.start);
            let (a, b) = (p.toks[first].span.0, p.toks[whole.end - 1].span.1);
            let loop_text = edit(
                &p.src[a..b],
                vec![(p.toks[s].span.0 - a, p.toks[rb].span.1 - a, acc.to_owned())],
            );
            let (ind, _) = indent_at(p.src, a);
            let new = format!("{{\n{ind}  auto {acc} = {lhs};\n{ind}  {loop_text}\n{ind}  {lhs} = {acc};\n{ind}}}");
            return Some(edit(src, vec![(a, b, new)]));
        }
    }
    None
}

fn unroll(src: &str, constant: bool) -> Option<String> {
    let p = parse(src)?;
    let mut edits = Vec::new();
    for (f, body, _) in p.loops() {
        let innermost = !body
            .clone()
            .any(|i| matches!(p.w(i), "for" | "while" | "do"));
        let pragma_before = f > 0 && p.toks[f - 1].kind == Kind::Directive;
        if !innermost || pragma_before {
            continue;
        }
        let Some(close) = source::matching(p.src, &p.toks, f + 1) else {
            continue;
        };
        let cond: Vec<usize> = (f + 2..close)
            .skip_while(|&i| p.w(i) != ";")
            .skip(1)
            .take_while(|&i| p.w(i) != ";")
            .collect();
        let literal_bound = cond.iter().any(|&i| {
            matches!(p.w(i), "<" | "<=" | ">" | ">=")
                && p.toks.get(i + 1).is_some_and(|t| t.kind == Kind::Number)
        }) && cond.len() == 3;
        if literal_bound == constant {
            let at = p.toks[f].span.0;
            let pragma = if constant {
                "#pragma unroll"
            } else {
                "#pragma unroll 4"
            };
            let (ind, first) = indent_at(p.src, at);
            let lead = if first {
                String::new()
            } else {
                format!("\n{ind}")
            };
            edits.push((at, at, format!("{lead}{pragma}\n{ind}")));
        }
    }
    (!edits.is_empty()).then(|| edit(src, edits))
}

fn unroll_constant(src: &str, _: &Facts) -> Option<String> {
    unroll(src, true)
}

fn unroll_4(src: &str, _: &Facts) -> Option<String> {
    unroll(src, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MV: &str = "__global__ void mv(int n, const float *A, const float *x, float *y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) {\n    for (int j = 0; j < n; j++) {\n      y[i] += A[i * n + j] * x[j];\n    }\n  }\n}";

    #[test]
    fn restrict_needs_disjoint_pointers_and_marks_each_pointer() {
        let r = rule("restrict").unwrap();
        let refuted = Facts {
            pointers_disjoint: Some(false),
            block: None,
        };
        assert_eq!(r.apply(MV, &refuted), None);
        assert!(
            r.apply(MV, &Facts::default()).is_some(),
            "unknown here: checked where measured"
        );
        let out = r
            .apply(
                MV,
                &Facts {
                    pointers_disjoint: Some(true),
                    block: None,
                },
            )
            .unwrap();
        assert!(out.contains("const float * __restrict__ A, const float * __restrict__ x, float * __restrict__ y"), "{out}");
        assert_eq!(
            r.apply(
                &out,
                &Facts {
                    pointers_disjoint: Some(true),
                    block: None,
                }
            ),
            None,
            "applies once"
        );
    }

    #[test]
    fn the_accumulator_moves_to_a_register_around_the_loop() {
        let out = rule("register-accumulator")
            .unwrap()
            .apply(MV, &Facts::default())
            .unwrap();
        assert!(out.contains("  if (i < n) {\n    {\n      auto r3_acc = y[i];\n      for (int j = 0; j < n; j++) {\n      r3_acc += A[i * n + j] * x[j];\n    }\n      y[i] = r3_acc;\n    }\n  }"), "{out}");
    }

    #[test]
    fn a_pragma_on_the_loop_moves_with_it() {
        let unrolled = rule("unroll-4")
            .unwrap()
            .apply(MV, &Facts::default())
            .unwrap();
        let out = rule("register-accumulator")
            .unwrap()
            .apply(&unrolled, &Facts::default())
            .unwrap();
        assert!(
            out.contains("auto r3_acc = y[i];\n      #pragma unroll 4\n    for (int j"),
            "{out}"
        );
    }

    #[test]
    fn no_accumulator_where_the_index_moves_or_the_target_is_read_elsewhere() {
        let r = rule("register-accumulator").unwrap();
        for src in [
            "__global__ void k(int n, float *y) { for (int j = 0; j < n; j++) { y[j] += 1.0f; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += y[j]; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { i++; y[i] += 1; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += 1; __syncthreads(); } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { if (j > 3) return; y[i] += 1; } }",
        ] {
            assert_eq!(r.apply(src, &Facts::default()), None, "{src}");
        }
    }

    #[test]
    fn unroll_pragmas_go_on_innermost_loops_only() {
        let src = "__global__ void k(int n, float *y) { for (int i = 0; i < n; i++) { for (int j = 0; j < 8; j++) y[j] += 1; } for (int q = 0; q < n; q++) y[q] = 0; }";
        let c = rule("unroll-constant")
            .unwrap()
            .apply(src, &Facts::default())
            .unwrap();
        assert_eq!(c.matches("#pragma unroll\n").count(), 1, "{c}");
        assert!(
            c.contains("{ \n#pragma unroll\nfor (int j = 0; j < 8; j++)"),
            "{c}"
        );
        let lines =
            "__global__ void k(int n, float *y) {\n  for (int q = 0; q < n; q++) y[q] = 0;\n}";
        let v = rule("unroll-4")
            .unwrap()
            .apply(lines, &Facts::default())
            .unwrap();
        assert!(v.contains("{\n  #pragma unroll 4\n  for (int q"), "{v}");
        let v = rule("unroll-4")
            .unwrap()
            .apply(src, &Facts::default())
            .unwrap();
        assert!(v.contains("\n#pragma unroll 4\nfor (int q"), "{v}");
        assert!(!v.contains("unroll 4\nfor (int i"), "{v}");
    }
}
