//! A GPU (sm_90) cost model for extraction.
//!
//! Unit: one issue slot of a 32-bit floating-point add/multiply/FMA, i.e. 128 results per clock
//! per SM on compute capability 9.0. Other costs are 128 / throughput from the "Arithmetic
//! Instructions" table of the CUDA C++ Programming Guide (CC 9.0 column), plus the instruction
//! count of the SASS sequences for operations without a hardware unit:
//!
//! | operation                                   | results/clk/SM | cost |
//! |---------------------------------------------|----------------|------|
//! | f32 add, mul, fma                           | 128            | 1    |
//! | f64 add, mul, fma                           | 64             | 2    |
//! | i32 add, sub, logic, shift, compare, select | 64             | 2    |
//! | i32 multiply (IMAD)                         | 64             | 2    |
//! | i64 add/sub/logic (two 32-bit ops)          |                | 4    |
//! | i64 multiply (3–4 IMADs)                    |                | 8    |
//! | conversions int↔float, f32↔f64              | 16             | 8    |
//! | sext/zext (a move or a shift of the high word) |             | 1    |
//! | trunc (a register half)                     |                | 0.5  |
//! | i32 udiv/sdiv/urem/srem (≈ 20 SASS ops)     |                | 40   |
//! | i64 division (subroutine, ≈ 70 ops)         |                | 140  |
//! | f32 fdiv IEEE (div.rn: MUFU.RCP + ≈ 8 ops)  |                | 20   |
//! | f64 fdiv                                    |                | 60   |
//! | fneg (an operand modifier)                  |                | 0.5  |
//!
//! A `gep` with a constant offset folds into the load/store addressing mode (cost 0.5); with a
//! variable offset it is a 64-bit add (cost 4; 2 in 32-bit address spaces).
//!
//! Not yet checked by measurement on the GPU (no GPU in the build environment); the relative
//! order (division ≫ 64-bit multiply > integer op > f32 op) is what extraction relies on.
//!
//! Nodes that carry poison-generating flags cost a tiny bit more so that, among equal-cost
//! members of a class, extraction prefers the flag-free (least poisonous) one.

use super::lang::{flags_of, ty_of, Expr, Flags, Ty, EG};
use egg::{CostFunction, Id, Language};
use std::collections::HashSet;

pub const INFINITE: f64 = f64::INFINITY;
const FLAG_EPSILON: f64 = 1e-3;
const NEW_NODE_EPSILON: f64 = 1e-2;

fn int_scale(ty: Option<Ty>) -> f64 {
    match ty {
        Some(Ty::Int(b)) if b > 32 => 2.0,
        Some(Ty::Ptr(_)) => 2.0,
        _ => 1.0,
    }
}

fn float_scale(ty: Option<Ty>) -> f64 {
    match ty {
        Some(Ty::F64) => 2.0,
        _ => 1.0,
    }
}

/// The cost of one operation node, not counting its operands.
pub fn node_cost(eg: &EG, node: &Expr) -> f64 {
    use Expr::*;
    let ch = node.children();
    let ty = ch.first().and_then(|t| ty_of(eg, *t));
    let base = match node {
        Type(_) | Fl(_) | Pr(_) | Num(_) | IConst(_) | FConst(_) | Leaf(_) => return 0.0,
        Add(_) | Sub(_) | And(_) | Or(_) | Xor(_) | Shl(_) | LShr(_) | AShr(_) | SMin(_)
        | SMax(_) | UMin(_) | UMax(_) => 2.0 * int_scale(ty),
        Mul(_) => match ty {
            Some(Ty::Int(b)) if b > 32 => 8.0,
            _ => 2.0,
        },
        UDiv(_) | SDiv(_) | URem(_) | SRem(_) => match ty {
            Some(Ty::Int(b)) if b > 32 => 140.0,
            _ => 40.0,
        },
        ICmp([_, _, a, _]) => 2.0 * int_scale(ty_of(eg, *a)),
        FCmp([_, _, a, _]) => 2.0 * float_scale(ty_of(eg, *a)),
        Select(_) => 2.0 * int_scale(ty).max(float_scale(ty)),
        FAdd(_) | FSub(_) | FMul(_) | Fma(_) | FMulAdd(_) => float_scale(ty),
        MinNum(_) | MaxNum(_) | Minimum(_) | Maximum(_) => 2.0 * float_scale(ty),
        FDiv(_) => 20.0 * float_scale(ty) + if ty == Some(Ty::F64) { 20.0 } else { 0.0 },
        FNeg(_) => 0.5,
        Trunc(_) => 0.5,
        ZExt(_) | SExt(_) => 1.0,
        FPTrunc(_) | FPExt(_) | FPToUI(_) | FPToSI(_) | UIToFP(_) | SIToFP(_) => 8.0,
        Gep([t, _, _, off]) => {
            if super::lang::const_of(eg, *off).is_some() {
                0.5
            } else if matches!(ty_of(eg, *t), Some(Ty::Ptr(a)) if a == 3 || a == 6) {
                2.0
            } else {
                4.0
            }
        }
    };
    let flagged = ch
        .get(1)
        .map(|f| flags_of(eg, *f).and(Flags::POISONING).0 != 0)
        .unwrap_or(false);
    base + if flagged { FLAG_EPSILON } else { 0.0 }
}

/// Tree cost for egg's extractor, restricted to what is available at one point of a block:
/// leaves defined after it cost infinity, and classes already emitted earlier cost nothing.
pub struct GpuCost<'a> {
    pub egraph: &'a EG,
    /// Leaf index → the segment of the block from which it is available.
    pub leaf_avail: &'a [usize],
    pub segment: usize,
    pub emitted: &'a HashSet<Id>,
    /// Nodes of the code as it was (children canonical): a node that is new costs a little
    /// more, so that ties keep the original code and the sharing it had.
    pub original: &'a HashSet<Expr>,
}

impl CostFunction<Expr> for GpuCost<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &Expr, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        if let Expr::Leaf([_, k]) = enode {
            let idx = super::lang::num_of(self.egraph, *k).unwrap_or(-1);
            let avail = usize::try_from(idx)
                .ok()
                .and_then(|i| self.leaf_avail.get(i).copied());
            return match avail {
                Some(a) if a <= self.segment => 0.0,
                _ => INFINITE,
            };
        }
        let mut total = node_cost(self.egraph, enode);
        if !self.original.contains(enode) {
            total += NEW_NODE_EPSILON;
        }
        for c in enode.children() {
            let c = self.egraph.find(*c);
            if !self.emitted.contains(&c) {
                total += costs(c);
            }
        }
        total
    }
}
