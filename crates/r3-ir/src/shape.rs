//! A kernel's loop shape: what "a kernel like this one" means when the deadline prices a
//! kernel by what the search of a similar kernel found (issue 55).
//!
//! The shape is the kernel's loop nest, after SROA and CFG simplification (the captured IR
//! comes before any pass, its values still in allocas): each loop's depth, how many memory
//! accesses its own blocks hold (on a log scale), and whether they do floating-point work. The
//! number of float operations is left out: a running average and a running average of squares
//! (two multiplies against three) are one shape. Two kernels
//! that walk the columns of a matrix with the same loop and the same kind of body share a
//! shape even where their names, constants and element counts differ; a grid-stride `saxpy`
//! and a reduction do not. It is deliberately coarse: it decides which earlier searches a new
//! search tries first and how its trials are priced, never what ships.

use crate::lower::{target_machine, Codegen};
use inkwell::basic_block::BasicBlock;
use inkwell::context::Context;
use inkwell::values::{FunctionValue, InstructionOpcode};
use std::collections::HashMap;

/// The loop shape of the first kernel in `bitcode` (a stored kernel's module.bc), as a short
/// text (`"1:m2f1 2:m3f0"`: a loop at depth 1 whose own blocks hold 4–15 memory
/// accesses and some float work, holding one at depth 2 with 16–63 and none, …); `"flat"` for a kernel
/// without loops. None where the module does not load or holds no kernel.
pub fn of_bitcode(bitcode: &[u8]) -> Option<String> {
    let ctx = Context::create();
    let module = crate::extract::load_kernel(&ctx, bitcode, "kernel shape").ok()?;
    // A canonical form, so that the shape is the code's and not clang's -O0 spelling of it.
    if let Ok(tm) = target_machine(&Codegen::default()) {
        let _ = crate::run_pipeline(&module, "function(sroa,early-cse,simplifycfg)", &tm);
    }
    let kernel = crate::extract::kernels(&module).into_iter().next()?;
    Some(of_function(kernel))
}

/// The loop shape of one function (see [`of_bitcode`]).
pub fn of_function(f: FunctionValue) -> String {
    let blocks = f.get_basic_blocks();
    let index: HashMap<BasicBlock, usize> =
        blocks.iter().enumerate().map(|(i, b)| (*b, i)).collect();
    let succ: Vec<Vec<usize>> = blocks
        .iter()
        .map(|b| {
            successors(*b)
                .iter()
                .filter_map(|s| index.get(s).copied())
                .collect()
        })
        .collect();
    let mut loops = Vec::new();
    nest(&succ, &(0..blocks.len()).collect::<Vec<_>>(), 1, &mut loops);
    if loops.is_empty() {
        return "flat".into();
    }
    loops
        .iter()
        .map(|l| {
            let own = |b: &usize| {
                !loops
                    .iter()
                    .any(|m| m.depth > l.depth && m.blocks.contains(b) && l.blocks.contains(b))
            };
            let (mut mem, mut fp) = (0u32, 0u32);
            for &b in l.blocks.iter().filter(|b| own(b)) {
                let (m, f) = work(blocks[b]);
                mem += m;
                fp += f;
            }
            format!("{}:m{}f{}", l.depth, log4_bucket(mem), u32::from(fp > 0))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One loop: its depth (1: outermost) and every block in it, inner loops' included.
struct Loop {
    depth: u32,
    blocks: Vec<usize>,
}

/// The loops among `nodes` at `depth`: each strongly connected component with a cycle is one;
/// its headers (entered from outside it, or the entry) removed, what cycles remain inside are
/// its inner loops. In component order, outer before inner.
fn nest(succ: &[Vec<usize>], nodes: &[usize], depth: u32, out: &mut Vec<Loop>) {
    if depth > 16 {
        return; // deeper than any kernel nests loops: irreducible flow, not a loop nest
    }
    for scc in components(succ, nodes) {
        let cyclic = scc.len() > 1 || succ[scc[0]].contains(&scc[0]);
        if !cyclic {
            continue;
        }
        let headers: Vec<usize> = scc
            .iter()
            .copied()
            .filter(|&b| {
                b == 0 || (0..succ.len()).any(|p| !scc.contains(&p) && succ[p].contains(&b))
            })
            .collect();
        let headers = if headers.is_empty() {
            vec![scc[0]]
        } else {
            headers
        };
        out.push(Loop {
            depth,
            blocks: scc.clone(),
        });
        let inner: Vec<usize> = scc.into_iter().filter(|b| !headers.contains(b)).collect();
        nest(succ, &inner, depth + 1, out);
    }
}

/// Tarjan's strongly connected components of the subgraph on `nodes`, in a stable order.
fn components(succ: &[Vec<usize>], nodes: &[usize]) -> Vec<Vec<usize>> {
    struct T<'a> {
        succ: &'a [Vec<usize>],
        inside: Vec<bool>,
        index: Vec<Option<u32>>,
        low: Vec<u32>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: u32,
        out: Vec<Vec<usize>>,
    }
    fn visit(t: &mut T, v: usize) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &t.succ[v] {
            if !t.inside[w] {
                continue;
            }
            match t.index[w] {
                None => {
                    visit(t, w);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(i) if t.on[w] => t.low[v] = t.low[v].min(i),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                scc.push(w);
                if w == v {
                    break;
                }
            }
            scc.sort_unstable();
            t.out.push(scc);
        }
    }
    let n = succ.len();
    let mut t = T {
        succ,
        inside: vec![false; n],
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for &v in nodes {
        t.inside[v] = true;
    }
    for &v in nodes {
        if t.index[v].is_none() {
            visit(&mut t, v);
        }
    }
    t.out.sort_by_key(|c| c[0]);
    t.out
}

fn successors(b: BasicBlock) -> Vec<BasicBlock> {
    let Some(term) = b.get_terminator() else {
        return Vec::new();
    };
    (0..term.get_num_operands())
        .filter_map(|i| term.get_operand(i)?.block())
        .collect()
}

/// Memory accesses and floating-point operations in a block.
fn work(b: BasicBlock) -> (u32, u32) {
    use InstructionOpcode::*;
    let (mut mem, mut fp) = (0, 0);
    for i in b.get_instructions() {
        match i.get_opcode() {
            Load | Store | AtomicRMW | AtomicCmpXchg => mem += 1,
            FAdd | FSub | FMul | FDiv | FRem | FNeg => fp += 1,
            Call if i.get_type().is_float_type() => fp += 1,
            _ => {}
        }
    }
    (mem, fp)
}

/// 0 for none, else 1 + ⌊log4 n⌋: a body four times as large is another bucket.
fn log4_bucket(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        1 + (31 - n.leading_zeros()) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(ir: &str) -> String {
        let ctx = Context::create();
        let m = crate::load_bytes(&ctx, ir.as_bytes(), "test").unwrap();
        let bc = m.write_bitcode_to_memory();
        of_bitcode(bc.as_slice()).unwrap()
    }

    /// Two column walks (sum and sum of squares of a column, as clang emits them before any
    /// pass: locals in allocas) share a shape; a flat kernel and a doubly nested one do not.
    #[test]
    fn column_walks_share_a_shape_that_flat_and_nested_kernels_do_not() {
        let walk = |body: &str| {
            format!(
                r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr %a, ptr %out, i32 %rows, i32 %cols) {{
entry:
  %c = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %acc = alloca float
  %i = alloca i32
  store float 0.0, ptr %acc
  store i32 0, ptr %i
  br label %head
head:
  %iv = load i32, ptr %i
  %more = icmp slt i32 %iv, %rows
  br i1 %more, label %body, label %done
body:
  %row = mul i32 %iv, %cols
  %at = add i32 %row, %c
  %p = getelementptr float, ptr %a, i32 %at
  %x = load float, ptr %p
  %s = load float, ptr %acc
  {body}
  store float %n, ptr %acc
  %iv2 = add i32 %iv, 1
  store i32 %iv2, ptr %i
  br label %head
done:
  %r = load float, ptr %acc
  %q = getelementptr float, ptr %out, i32 %c
  store float %r, ptr %q
  ret void
}}
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
"#
            )
        };
        let sum = shape(&walk("%n = fadd float %s, %x"));
        let squares = shape(&walk(
            "%x2 = fmul float %x, %x\n  %x3 = fmul float %x2, 0.5\n  %x4 = fmul float %s, 0.75\n  %n = fadd float %x4, %x3",
        ));
        assert_eq!(sum, squares, "the same loop, the same kind of body");
        assert!(sum.starts_with("1:"), "{sum}");
        let flat = shape(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr %a) {
  store float 1.0, ptr %a
  ret void
}
"#,
        );
        assert_eq!(flat, "flat");
        let nested = shape(
            r#"
target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @k(ptr %a, i32 %n) {
entry:
  br label %outer
outer:
  %i = phi i32 [ 0, %entry ], [ %i2, %latch ]
  br label %inner
inner:
  %j = phi i32 [ 0, %outer ], [ %j2, %inner ]
  %p = getelementptr float, ptr %a, i32 %j
  %x = load float, ptr %p
  %y = fmul float %x, 2.0
  store float %y, ptr %p
  %j2 = add i32 %j, 1
  %jm = icmp slt i32 %j2, %n
  br i1 %jm, label %inner, label %latch
latch:
  %i2 = add i32 %i, 1
  %im = icmp slt i32 %i2, %n
  br i1 %im, label %outer, label %done
done:
  ret void
}
"#,
        );
        assert!(nested.contains("1:") && nested.contains("2:"), "{nested}");
        assert_ne!(nested, sum);
    }
}
