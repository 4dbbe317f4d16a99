//! The built-in proposer: source rewrites a performance engineer would try first, applied by
//! rule, with no model. Each rule edits the region's text (kernel and callees) by tokens; it
//! may be wrong for the kernel (the compile and the validation against the recording decide),
//! but it never writes anything but device code.

use super::kernel_text::{edit, indent_at, modified_in, parse, synchronizes, Parsed};
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
        why: "a loop that accumulates through a pointer at an index the loop never changes (every use of that pointer in the loop a compound assignment at that index, under branches or not) accumulates in a register instead, loaded before the loop and stored after it; not proposed where the recordings show pointers sharing an allocation, where another could reach that element",
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
        name: "staged-store",
        why: "a thread's one store, strided across the warp (a naive transpose's column write), goes through shared memory in blocks of the recorded shape: each thread computes its value and address as before, and after a barrier the block's threads write them in the order that puts consecutive threads on consecutive elements; where the store is contiguous and a load of its value is the column (a transpose written the other way), the threads compute the values in column order instead, each as the thread whose value it is, and store their own; other blocks run the original code. Where 32 / (block height) blocks can be grouped along y, a knob R3_SG (1 or that group) has the first block of each group run the body once for each of its blocks and write runs of 32 elements, the others returning",
        requires: &[],
        apply: super::staging::staged_store,
    },
    Rule {
        name: "block-grouping",
        why: "a kernel that stages data in shared memory between barriers has the first block of each group of R3_GX x R3_GY neighbouring blocks do the group's work, the others returning (the launch is unchanged): what the blocks would each load alike (a matrix product's A tile along x, its B tile along y) is loaded once, and each statement that depends on the block runs once per block of the group, unrolled, with the values it writes held one per block (registers, or shared arrays with a copy per block). Barriers and the loops around them stay in place, each output keeps its operations and their order, and blocks of an incomplete group run the original code. The group along each axis is a knob the search tunes",
        requires: &[],
        apply: super::grouping::block_grouping,
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

fn accumulator(src: &str, facts: &Facts) -> Option<String> {
    if facts.pointers_disjoint == Some(false) {
        return None;
    }
    let p = parse(src)?;
    let pointers: Vec<&str> = p.pointer_params().iter().map(|&(_, n, _)| p.w(n)).collect();
    for (f, body, braced) in p.loops() {
        let whole = f..if braced { body.end + 1 } else { body.end };
        let words: Vec<&str> = whole.clone().map(|i| p.w(i)).collect();
        if words
            .iter()
            .any(|w| matches!(*w, "return" | "goto") || synchronizes(w) || w.starts_with("atomic"))
        {
            continue;
        }
        let modified = modified_in(&p, whole.clone());
        let accumulators: Vec<_> = pointers
            .iter()
            .filter_map(|name| accumulated(&p, whole.clone(), name, &modified))
            .collect();
        if !accumulators.is_empty() {
            return Some(around_loop(&p, whole, &accumulators));
        }
    }
    None
}

/// Every place `name` appears in the loop, as `(name, closing bracket)` token pairs,
/// when each is the target of a compound assignment at one index the loop never changes (so a
/// register can stand for that element throughout the loop); None otherwise. The assignments
/// may sit under branches: `if (c) y[i] += 1; else y[i] -= 1;` accumulates as well.
fn accumulated(
    p: &Parsed,
    whole: std::ops::Range<usize>,
    name: &str,
    modified: &std::collections::HashSet<String>,
) -> Option<Vec<(usize, usize)>> {
    let mut targets = Vec::new();
    let mut index: Option<Vec<&str>> = None;
    for s in whole.filter(|&s| p.w(s) == name) {
        let at_stmt_start = matches!(p.w(s - 1), ";" | "{" | "}" | ")" | "else");
        if !at_stmt_start || p.w(s + 1) != "[" {
            return None;
        }
        let rb = source::matching(p.src, &p.toks, s + 1)?;
        if !matches!(p.w(rb + 1), "+=" | "-=" | "*=") {
            return None;
        }
        // The index may not load, call, or name anything the loop changes.
        let words: Vec<&str> = (s + 2..rb).map(|i| p.w(i)).collect();
        let index_ok = (s + 2..rb).all(|i| {
            let w = p.w(i);
            let changes = p.toks[i].kind == Kind::Ident && modified.contains(w);
            !(matches!(w, "[" | "(") || changes)
        });
        if !index_ok || index.as_ref().is_some_and(|first| *first != words) {
            return None;
        }
        index.get_or_insert(words);
        targets.push((s, rb));
    }
    (!targets.is_empty()).then_some(targets)
}

/// The loop `whole` with each accumulator's targets replaced by a register of its own, loaded
/// from the element before the loop and stored to it after.
fn around_loop(
    p: &Parsed,
    whole: std::ops::Range<usize>,
    accumulators: &[Vec<(usize, usize)>],
) -> String {
    // A pragma on the loop moves into the block with it.
    let first = (0..whole.start)
        .rev()
        .take_while(|&i| p.toks[i].kind == Kind::Directive)
        .last()
        .unwrap_or(whole.start);
    let (a, b) = (p.toks[first].span.0, p.toks[whole.end - 1].span.1);
    let (ind, _) = indent_at(p.src, a);
    let (mut edits, mut loads, mut stores) = (Vec::new(), String::new(), String::new());
    for (n, targets) in accumulators.iter().enumerate() {
        let acc = if n == 0 {
            "r3_acc".to_owned()
        } else {
            format!("r3_acc{n}")
        };
        let (s, rb) = targets[0];
        let lhs = &p.src[p.toks[s].span.0..p.toks[rb].span.1];
        loads.push_str(&format!("\n{ind}  auto {acc} = {lhs};"));
        stores.push_str(&format!("\n{ind}  {lhs} = {acc};"));
        edits.extend(
            targets
                .iter()
                .map(|&(s, rb)| (p.toks[s].span.0 - a, p.toks[rb].span.1 - a, acc.clone())),
        );
    }
    let loop_text = edit(&p.src[a..b], edits);
    let new = format!("{{{loads}\n{ind}  {loop_text}{stores}\n{ind}}}");
    edit(p.src, vec![(a, b, new)])
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

    /// The register accumulator's rewrite of `src`, where nothing is known of the recordings.
    fn accumulated_text(src: &str) -> String {
        rule("register-accumulator")
            .unwrap()
            .apply(src, &Facts::default())
            .unwrap()
    }

    #[test]
    fn the_accumulator_moves_to_a_register_around_the_loop() {
        let out = accumulated_text(MV);
        assert!(out.contains("  if (i < n) {\n    {\n      auto r3_acc = y[i];\n      for (int j = 0; j < n; j++) {\n      r3_acc += A[i * n + j] * x[j];\n    }\n      y[i] = r3_acc;\n    }\n  }"), "{out}");
    }

    #[test]
    fn branches_that_count_into_one_element_count_in_a_register() {
        let src = "__global__ void kt(int n, int m, float *y, float *tau) {\n  int j = threadIdx.x;\n  for (int i = 0; i < n; i++) {\n    for (int k = i + 1; k < n; k++) {\n      float d = y[i * m + j] - y[k * m + j];\n      if (d > 0.0f)\n        tau[j * m + j] += 1.0f;\n      else if (d < 0.0f)\n        tau[j * m + j] -= 1.0f;\n    }\n  }\n  tau[j * m + j] /= n;\n}";
        let out = accumulated_text(src);
        assert!(
            out.contains("  {\n    auto r3_acc = tau[j * m + j];\n    for (int i = 0;"),
            "{out}"
        );
        assert!(out.contains("if (d > 0.0f)\n        r3_acc += 1.0f;\n      else if (d < 0.0f)\n        r3_acc -= 1.0f;"), "{out}");
        assert!(
            out.contains("  }\n    tau[j * m + j] = r3_acc;\n  }\n  tau[j * m + j] /= n;"),
            "{out}"
        );
        let aliased = Facts {
            pointers_disjoint: Some(false),
            block: None,
        };
        assert_eq!(
            rule("register-accumulator").unwrap().apply(src, &aliased),
            None,
            "y may reach the counted element"
        );
    }

    #[test]
    fn each_accumulated_pointer_gets_its_own_register() {
        let src = "__global__ void k(int n, const float *v, float *total, unsigned *hits) {\n  int c = threadIdx.x;\n  for (int r = 0; r < n; r++) {\n    if (v[r] > 0.0f) {\n      total[c] += v[r];\n      hits[c] += 1;\n    }\n  }\n}";
        let out = accumulated_text(src);
        assert!(
            out.contains(
                "  {\n    auto r3_acc = total[c];\n    auto r3_acc1 = hits[c];\n    for (int r"
            ),
            "{out}"
        );
        assert!(
            out.contains("r3_acc += v[r];\n      r3_acc1 += 1;"),
            "{out}"
        );
        assert!(
            out.contains("  }\n    total[c] = r3_acc;\n    hits[c] = r3_acc1;\n  }\n}"),
            "{out}"
        );
    }

    #[test]
    fn a_pragma_on_the_loop_moves_with_it() {
        let unrolled = rule("unroll-4")
            .unwrap()
            .apply(MV, &Facts::default())
            .unwrap();
        let out = accumulated_text(&unrolled);
        assert!(
            out.contains("auto r3_acc = y[i];\n      #pragma unroll 4\n    for (int j"),
            "{out}"
        );
    }

    #[test]
    fn no_accumulator_where_the_index_moves_the_element_is_read_or_another_is_updated() {
        let r = rule("register-accumulator").unwrap();
        for src in [
            "__global__ void k(int n, float *y) { for (int j = 0; j < n; j++) { y[j] += 1.0f; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += y[j]; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { i++; y[i] += 1; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += 1; __syncthreads(); } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { if (j > 3) return; y[i] += 1; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { if (j & 1) y[i] += 1; else y[i + 1] -= 1; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += 1; y[i] = 0; } }",
            "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += 1; float t = y[i]; } }",
        ] {
            assert_eq!(r.apply(src, &Facts::default()), None, "{src}");
        }
    }

    /// Every word that synchronizes threads or orders their writes keeps the accumulator in
    /// memory: others may read it there (`__syncthreads_and` and fences had been missed).
    #[test]
    fn no_accumulator_in_a_loop_that_synchronizes() {
        let r = rule("register-accumulator").unwrap();
        let plain = "__global__ void k(int n, float *y, int i) { for (int j = 0; j < n; j++) { y[i] += 1; } }";
        assert!(r.apply(plain, &Facts::default()).is_some());
        for call in [
            "__syncthreads_and(j)",
            "__syncthreads_count(j)",
            "__threadfence()",
            "__syncwarp()",
            "g.sync()",
        ] {
            let src = plain.replace("y[i] += 1;", &format!("y[i] += 1; {call};"));
            assert_eq!(r.apply(&src, &Facts::default()), None, "{src}");
        }
    }

    #[test]
    fn the_deadlines_rule_priors_name_rules_there_are() {
        for (label, _) in crate::remix::rewrites::RULE_PRIOR_LIFT {
            let name = label.strip_prefix("rules: ").unwrap_or(label);
            assert!(rule(name).is_some(), "{label}: no such rule");
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
