//! LLVM IR ↔ e-graph, one basic block at a time.
//!
//! A block is split into its *skeleton* (every instruction the language does not model: loads,
//! stores, calls, barriers, atomics, phis, terminators, vector code, divisions by a variable…)
//! and its *pure* instructions. Skeleton instructions never move and are never removed; their
//! results, like arguments and values of other blocks, enter the e-graph as opaque leaves.
//!
//! The skeleton cuts the block into segments; a leaf defined by the k-th skeleton instruction is
//! available from segment k+1 on. Each pure instruction that is used outside the pure code of
//! its block (by the skeleton, a phi, another block) is a *root*. After saturation the roots of
//! each segment are extracted with leaves of later segments priced at infinity, so the chosen
//! code only uses values that exist there, and is emitted right before the skeleton instruction
//! that ends the segment. The rewrite is kept only if the cost model says the block got cheaper.

use super::cost::{node_cost, GpuCost};
use super::lang::*;
use super::rules;
use egg::{Extractor, Id, Language, Runner, StopReason};
use llvm_sys::core::*;
use llvm_sys::prelude::*;
use llvm_sys::target::*;
use llvm_sys::{LLVMIntPredicate, LLVMOpcode, LLVMRealPredicate, LLVMTypeKind};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::CStr;
use std::time::Duration;

/// Limits for one block's e-graph. `iters`, `nodes` and the extraction budget that follows
/// from `nodes` decide what is rewritten, the same on any machine and under any load; `time` is
/// a safety net for compile time: a block that reaches it is left as it is, never rewritten
/// from an e-graph cut short by the clock.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub iters: usize,
    pub nodes: usize,
    pub time: Duration,
}

/// Extraction runs once per segment of the block (the stretch between two memory operations or
/// calls), and each run sweeps the whole e-graph until no cost improves: up to one sweep per
/// level of the block's deepest chain of arithmetic. Its work is bounded by segments × nodes ×
/// depth node visits, and the budget is this many visits per allowed node. Measured on
/// straight-line blocks of 150 to 3000 instructions (build machine, one core), extraction
/// visits 25–31 M nodes a second, so the default 20 000 nodes allow 10.2 M visits, about 0.35 s.
/// A block over it is left as it is before extraction starts.
const EXTRACTION_VISITS_PER_NODE: usize = 512;

impl Limits {
    fn extraction_budget(&self) -> usize {
        self.nodes.saturating_mul(EXTRACTION_VISITS_PER_NODE)
    }
}

/// What happened to one block.
#[derive(Debug, Default)]
pub struct BlockOutcome {
    pub pure: usize,
    pub emitted: usize,
    pub rewritten: bool,
    pub cost_before: f64,
    pub cost_after: f64,
    pub nodes: usize,
    pub classes: usize,
    pub iterations: usize,
    pub stop: Option<String>,
    pub applied: BTreeMap<String, usize>,
}

// ---- types -------------------------------------------------------------------------------

/// The modelled scalar type of an LLVM type, if any.
pub(crate) unsafe fn ty_from_llvm(t: LLVMTypeRef) -> Option<Ty> {
    use LLVMTypeKind::*;
    match LLVMGetTypeKind(t) {
        LLVMIntegerTypeKind => {
            let w = LLVMGetIntTypeWidth(t);
            (1..=64).contains(&w).then_some(Ty::Int(w))
        }
        LLVMHalfTypeKind => Some(Ty::Half),
        LLVMBFloatTypeKind => Some(Ty::BFloat),
        LLVMFloatTypeKind => Some(Ty::F32),
        LLVMDoubleTypeKind => Some(Ty::F64),
        LLVMPointerTypeKind => Some(Ty::Ptr(LLVMGetPointerAddressSpace(t))),
        _ => None,
    }
}

pub(crate) unsafe fn ty_to_llvm(ctx: LLVMContextRef, t: Ty) -> LLVMTypeRef {
    match t {
        Ty::Int(w) => LLVMIntTypeInContext(ctx, w),
        Ty::Half => LLVMHalfTypeInContext(ctx),
        Ty::BFloat => LLVMBFloatTypeInContext(ctx),
        Ty::F32 => LLVMFloatTypeInContext(ctx),
        Ty::F64 => LLVMDoubleTypeInContext(ctx),
        Ty::Ptr(a) => LLVMPointerTypeInContext(ctx, a),
    }
}

const IPREDS: [LLVMIntPredicate; 10] = {
    use LLVMIntPredicate::*;
    [
        LLVMIntEQ, LLVMIntNE, LLVMIntUGT, LLVMIntUGE, LLVMIntULT, LLVMIntULE, LLVMIntSGT,
        LLVMIntSGE, LLVMIntSLT, LLVMIntSLE,
    ]
};
const FPREDS: [LLVMRealPredicate; 16] = {
    use LLVMRealPredicate::*;
    [
        LLVMRealPredicateFalse,
        LLVMRealOEQ,
        LLVMRealOGT,
        LLVMRealOGE,
        LLVMRealOLT,
        LLVMRealOLE,
        LLVMRealONE,
        LLVMRealORD,
        LLVMRealUNO,
        LLVMRealUEQ,
        LLVMRealUGT,
        LLVMRealUGE,
        LLVMRealULT,
        LLVMRealULE,
        LLVMRealUNE,
        LLVMRealPredicateTrue,
    ]
};

/// Intrinsics the language models, by name prefix.
const INTRINSICS: [(&str, &str); 10] = [
    ("llvm.fma.", "fma"),
    ("llvm.fmuladd.", "fmuladd"),
    ("llvm.smin.", "smin"),
    ("llvm.smax.", "smax"),
    ("llvm.umin.", "umin"),
    ("llvm.umax.", "umax"),
    ("llvm.minnum.", "minnum"),
    ("llvm.maxnum.", "maxnum"),
    ("llvm.minimum.", "minimum"),
    ("llvm.maximum.", "maximum"),
];

unsafe fn value_name(v: LLVMValueRef) -> String {
    let mut len = 0usize;
    let p = LLVMGetValueName2(v, &mut len);
    if p.is_null() {
        return String::new();
    }
    let bytes = std::slice::from_raw_parts(p as *const u8, len);
    String::from_utf8_lossy(bytes).into_owned()
}

/// The modelled intrinsic a call instruction calls, if any.
unsafe fn intrinsic_of(call: LLVMValueRef) -> Option<&'static str> {
    let callee = LLVMGetCalledValue(call);
    if callee.is_null() || LLVMIsAFunction(callee).is_null() {
        return None;
    }
    let name = value_name(callee);
    INTRINSICS
        .iter()
        .find(|(p, _)| name.starts_with(p))
        .map(|(_, op)| *op)
}

// ---- IR → e-graph --------------------------------------------------------------------------

struct Builder<'a> {
    eg: EG,
    td: LLVMTargetDataRef,
    /// Pure instructions of this block → their class.
    pure: &'a mut HashMap<LLVMValueRef, Id>,
    /// Leaf index → the segment from which the value is available (0: before the block).
    leaves: Vec<LLVMValueRef>,
    leaf_avail: Vec<usize>,
    leaf_index: HashMap<LLVMValueRef, usize>,
}

impl Builder<'_> {
    fn ty(&mut self, t: Ty) -> Id {
        self.eg.add(Expr::Type(t))
    }
    fn flags(&mut self, f: Flags) -> Id {
        self.eg.add(Expr::Fl(f))
    }
    fn iconst(&mut self, t: Ty, v: i128) -> Id {
        let bits = t.int_bits().unwrap_or(64);
        let ty = self.ty(t);
        let n = self.eg.add(Expr::Num(canon(v, bits)));
        self.eg.add(Expr::IConst([ty, n]))
    }

    /// The class of an operand, adding a constant or leaf for it as needed. None when the
    /// operand cannot be modelled (undef, an unsupported type).
    unsafe fn operand(&mut self, v: LLVMValueRef) -> Option<Id> {
        if let Some(id) = self.pure.get(&v) {
            return Some(*id);
        }
        let t = ty_from_llvm(LLVMTypeOf(v))?;
        if !LLVMIsAConstantInt(v).is_null() {
            let x = LLVMConstIntGetSExtValue(v) as i128;
            return Some(self.iconst(t, x));
        }
        if !LLVMIsAConstantFP(v).is_null() && matches!(t, Ty::F32 | Ty::F64) {
            let mut loses = 0;
            let d = LLVMConstRealGetDouble(v, &mut loses);
            if loses == 0 && !d.is_nan() {
                if let Some(bits) = float_bits_exact(t, d) {
                    let ty = self.ty(t);
                    let n = self.eg.add(Expr::Num(bits as i128));
                    return Some(self.eg.add(Expr::FConst([ty, n])));
                }
            }
        }
        if LLVMIsUndef(v) != 0 && LLVMIsPoison(v) == 0 {
            // undef may differ at each use; rules that duplicate a use would be unsound.
            return None;
        }
        let idx = match self.leaf_index.get(&v) {
            Some(i) => *i,
            None => {
                // Skeleton instructions of this block were entered when met; anything else is
                // defined before the block starts.
                self.leaves.push(v);
                self.leaf_avail.push(0);
                self.leaf_index.insert(v, self.leaves.len() - 1);
                self.leaves.len() - 1
            }
        };
        let ty = self.ty(t);
        let n = self.eg.add(Expr::Num(idx as i128));
        Some(self.eg.add(Expr::Leaf([ty, n])))
    }

    /// The node of a modelled instruction (added to the e-graph), or None for the skeleton.
    unsafe fn instruction(&mut self, inst: LLVMValueRef) -> Option<Id> {
        use LLVMOpcode::*;
        let op = LLVMGetInstructionOpcode(inst);
        let rty = ty_from_llvm(LLVMTypeOf(inst));
        let arg = |b: &mut Self, i: u32| b.operand(LLVMGetOperand(inst, i));
        let fmf = |i: LLVMValueRef| {
            if LLVMCanValueUseFastMathFlags(i) != 0 {
                Flags::from_llvm_fmf(LLVMGetFastMathFlags(i))
            } else {
                Flags::NONE
            }
        };
        match op {
            LLVMAdd | LLVMSub | LLVMMul | LLVMShl | LLVMLShr | LLVMAShr | LLVMAnd | LLVMOr
            | LLVMXor | LLVMUDiv | LLVMSDiv | LLVMURem | LLVMSRem => {
                let t = rty?;
                t.int_bits()?;
                let mut f = Flags::NONE;
                if matches!(op, LLVMAdd | LLVMSub | LLVMMul | LLVMShl) {
                    if LLVMGetNSW(inst) != 0 {
                        f = f.or(Flags::NSW);
                    }
                    if LLVMGetNUW(inst) != 0 {
                        f = f.or(Flags::NUW);
                    }
                }
                if matches!(op, LLVMLShr | LLVMAShr | LLVMUDiv | LLVMSDiv)
                    && LLVMGetExact(inst) != 0
                {
                    f = f.or(Flags::EXACT);
                }
                if op == LLVMOr && LLVMGetIsDisjoint(inst) != 0 {
                    f = f.or(Flags::DISJOINT);
                }
                if matches!(op, LLVMUDiv | LLVMSDiv | LLVMURem | LLVMSRem) {
                    // Only divisions by a constant that cannot trap are pure enough to move:
                    // never 0, and for signed division never -1.
                    let d = LLVMGetOperand(inst, 1);
                    if LLVMIsAConstantInt(d).is_null() {
                        return None;
                    }
                    let dv = LLVMConstIntGetSExtValue(d);
                    let signed = matches!(op, LLVMSDiv | LLVMSRem);
                    if dv == 0 || (signed && dv == -1) {
                        return None;
                    }
                }
                let a = arg(self, 0)?;
                let b = arg(self, 1)?;
                let ctor: fn([Id; 4]) -> Expr = match op {
                    LLVMAdd => Expr::Add,
                    LLVMSub => Expr::Sub,
                    LLVMMul => Expr::Mul,
                    LLVMShl => Expr::Shl,
                    LLVMLShr => Expr::LShr,
                    LLVMAShr => Expr::AShr,
                    LLVMAnd => Expr::And,
                    LLVMOr => Expr::Or,
                    LLVMXor => Expr::Xor,
                    LLVMUDiv => Expr::UDiv,
                    LLVMSDiv => Expr::SDiv,
                    LLVMURem => Expr::URem,
                    _ => Expr::SRem,
                };
                let (ty, fl) = (self.ty(t), self.flags(f));
                Some(self.eg.add(ctor([ty, fl, a, b])))
            }
            LLVMFAdd | LLVMFSub | LLVMFMul | LLVMFDiv => {
                let t = rty?;
                if !t.is_float() {
                    return None;
                }
                let a = arg(self, 0)?;
                let b = arg(self, 1)?;
                let ctor: fn([Id; 4]) -> Expr = match op {
                    LLVMFAdd => Expr::FAdd,
                    LLVMFSub => Expr::FSub,
                    LLVMFMul => Expr::FMul,
                    _ => Expr::FDiv,
                };
                let (ty, fl) = (self.ty(t), self.flags(fmf(inst)));
                Some(self.eg.add(ctor([ty, fl, a, b])))
            }
            LLVMFNeg => {
                let t = rty?;
                if !t.is_float() {
                    return None;
                }
                let a = arg(self, 0)?;
                let (ty, fl) = (self.ty(t), self.flags(fmf(inst)));
                Some(self.eg.add(Expr::FNeg([ty, fl, a])))
            }
            LLVMICmp => {
                rty?;
                let p = LLVMGetICmpPredicate(inst) as u8;
                let f = if LLVMGetICmpSameSign(inst) != 0 {
                    Flags::SAMESIGN
                } else {
                    Flags::NONE
                };
                let a = arg(self, 0)?;
                let b = arg(self, 1)?;
                let (pr, fl) = (self.eg.add(Expr::Pr(Pred::I(p))), self.flags(f));
                Some(self.eg.add(Expr::ICmp([pr, fl, a, b])))
            }
            LLVMFCmp => {
                rty?;
                let p = LLVMGetFCmpPredicate(inst) as u8;
                let a = arg(self, 0)?;
                let b = arg(self, 1)?;
                let (pr, fl) = (self.eg.add(Expr::Pr(Pred::F(p))), self.flags(fmf(inst)));
                Some(self.eg.add(Expr::FCmp([pr, fl, a, b])))
            }
            LLVMSelect => {
                let t = rty?;
                let c = arg(self, 0)?;
                if ty_of(&self.eg, c) != Some(Ty::Int(1)) {
                    return None;
                }
                let a = arg(self, 1)?;
                let b = arg(self, 2)?;
                let (ty, fl) = (self.ty(t), self.flags(fmf(inst)));
                Some(self.eg.add(Expr::Select([ty, fl, c, a, b])))
            }
            LLVMTrunc | LLVMZExt | LLVMSExt | LLVMFPTrunc | LLVMFPExt | LLVMFPToUI | LLVMFPToSI
            | LLVMUIToFP | LLVMSIToFP => {
                let t = rty?;
                let a = arg(self, 0)?;
                let f = if matches!(op, LLVMZExt | LLVMUIToFP) && LLVMGetNNeg(inst) != 0 {
                    Flags::NNEG
                } else {
                    Flags::NONE
                };
                let ctor: fn([Id; 3]) -> Expr = match op {
                    LLVMTrunc => Expr::Trunc,
                    LLVMZExt => Expr::ZExt,
                    LLVMSExt => Expr::SExt,
                    LLVMFPTrunc => Expr::FPTrunc,
                    LLVMFPExt => Expr::FPExt,
                    LLVMFPToUI => Expr::FPToUI,
                    LLVMFPToSI => Expr::FPToSI,
                    LLVMUIToFP => Expr::UIToFP,
                    _ => Expr::SIToFP,
                };
                let (ty, fl) = (self.ty(t), self.flags(f));
                Some(self.eg.add(ctor([ty, fl, a])))
            }
            LLVMGetElementPtr => self.gep(inst),
            LLVMCall => {
                let t = rty?;
                let name = intrinsic_of(inst)?;
                let n = LLVMGetNumArgOperands(inst);
                let want = if matches!(name, "fma" | "fmuladd") {
                    3
                } else {
                    2
                };
                if n != want {
                    return None;
                }
                let mut args = Vec::new();
                for i in 0..n {
                    args.push(arg(self, i)?);
                }
                let (ty, fl) = (self.ty(t), self.flags(fmf(inst)));
                let node = match (name, args.as_slice()) {
                    ("fma", [a, b, c]) => Expr::Fma([ty, fl, *a, *b, *c]),
                    ("fmuladd", [a, b, c]) => Expr::FMulAdd([ty, fl, *a, *b, *c]),
                    ("smin", [a, b]) => Expr::SMin([ty, fl, *a, *b]),
                    ("smax", [a, b]) => Expr::SMax([ty, fl, *a, *b]),
                    ("umin", [a, b]) => Expr::UMin([ty, fl, *a, *b]),
                    ("umax", [a, b]) => Expr::UMax([ty, fl, *a, *b]),
                    ("minnum", [a, b]) => Expr::MinNum([ty, fl, *a, *b]),
                    ("maxnum", [a, b]) => Expr::MaxNum([ty, fl, *a, *b]),
                    ("minimum", [a, b]) => Expr::Minimum([ty, fl, *a, *b]),
                    ("maximum", [a, b]) => Expr::Maximum([ty, fl, *a, *b]),
                    _ => return None,
                };
                Some(self.eg.add(node))
            }
            _ => None,
        }
    }

    /// A getelementptr as `(gep PTR FLAGS base byte-offset)`, the offset built from the
    /// indices with the data layout (struct fields are constant offsets).
    unsafe fn gep(&mut self, inst: LLVMValueRef) -> Option<Id> {
        let pty = ty_from_llvm(LLVMTypeOf(inst))?;
        let Ty::Ptr(addr_space) = pty else {
            return None;
        };
        let base_v = LLVMGetOperand(inst, 0);
        if ty_from_llvm(LLVMTypeOf(base_v)) != Some(pty) {
            return None;
        }
        let base = self.operand(base_v)?;
        let iw = LLVMPointerSizeForAS(self.td, addr_space) * 8;
        if !(1..=64).contains(&iw) {
            return None;
        }
        let it = Ty::Int(iw);
        let n = LLVMGetNumOperands(inst) as u32;
        let mut cur = LLVMGetGEPSourceElementType(inst);
        let mut konst: i128 = 0;
        let mut terms: Vec<Id> = Vec::new();
        for i in 1..n {
            let idx = LLVMGetOperand(inst, i);
            let ity = LLVMTypeOf(idx);
            if LLVMGetTypeKind(ity) != LLVMTypeKind::LLVMIntegerTypeKind {
                return None;
            }
            let (elem, size, field_offset) = if i == 1 {
                (cur, LLVMABISizeOfType(self.td, cur), None)
            } else {
                match LLVMGetTypeKind(cur) {
                    LLVMTypeKind::LLVMStructTypeKind => {
                        if LLVMIsAConstantInt(idx).is_null() {
                            return None;
                        }
                        let field = LLVMConstIntGetZExtValue(idx) as u32;
                        let off = LLVMOffsetOfElement(self.td, cur, field);
                        (LLVMStructGetTypeAtIndex(cur, field), 0, Some(off))
                    }
                    LLVMTypeKind::LLVMArrayTypeKind => {
                        let e = LLVMGetElementType(cur);
                        (e, LLVMABISizeOfType(self.td, e), None)
                    }
                    _ => return None,
                }
            };
            cur = elem;
            if let Some(off) = field_offset {
                konst += off as i128;
                continue;
            }
            if !LLVMIsAConstantInt(idx).is_null() {
                if LLVMGetIntTypeWidth(ity) > 64 {
                    return None;
                }
                konst += LLVMConstIntGetSExtValue(idx) as i128 * size as i128;
                konst = canon(konst, iw);
                continue;
            }
            if size == 0 {
                continue;
            }
            let mut x = self.operand(idx)?;
            let w = LLVMGetIntTypeWidth(ity);
            if w < iw {
                let (ty, fl) = (self.ty(it), self.flags(Flags::NONE));
                x = self.eg.add(Expr::SExt([ty, fl, x]));
            } else if w > iw {
                let (ty, fl) = (self.ty(it), self.flags(Flags::NONE));
                x = self.eg.add(Expr::Trunc([ty, fl, x]));
            }
            if size != 1 {
                let (ty, fl) = (self.ty(it), self.flags(Flags::NONE));
                let scaled = if size.is_power_of_two() {
                    let k = self.iconst(it, size.trailing_zeros() as i128);
                    Expr::Shl([ty, fl, x, k])
                } else {
                    let k = self.iconst(it, size as i128);
                    Expr::Mul([ty, fl, x, k])
                };
                x = self.eg.add(scaled);
            }
            terms.push(x);
        }
        let mut off: Option<Id> = None;
        for t in terms {
            off = Some(match off {
                None => t,
                Some(o) => {
                    let (ty, fl) = (self.ty(it), self.flags(Flags::NONE));
                    self.eg.add(Expr::Add([ty, fl, o, t]))
                }
            });
        }
        let konst = canon(konst, iw);
        let off = match (off, konst) {
            (Some(o), 0) => o,
            (Some(o), k) => {
                let kc = self.iconst(it, k);
                let (ty, fl) = (self.ty(it), self.flags(Flags::NONE));
                self.eg.add(Expr::Add([ty, fl, o, kc]))
            }
            (None, k) => self.iconst(it, k),
        };
        let f = if LLVMGEPGetNoWrapFlags(inst) & llvm_sys::LLVMGEPFlagInBounds != 0 {
            Flags::INBOUNDS
        } else {
            Flags::NONE
        };
        let (ty, fl) = (self.ty(pty), self.flags(f));
        Some(self.eg.add(Expr::Gep([ty, fl, base, off])))
    }
}

unsafe fn instructions(block: LLVMBasicBlockRef) -> Vec<LLVMValueRef> {
    let mut out = Vec::new();
    let mut i = LLVMGetFirstInstruction(block);
    while !i.is_null() {
        out.push(i);
        i = LLVMGetNextInstruction(i);
    }
    out
}

struct Pure {
    inst: LLVMValueRef,
    class: Id,
    segment: usize,
}

/// The longest chain of pure instructions in the block, each using the one before.
unsafe fn pure_depth(pure: &[Pure], pure_map: &HashMap<LLVMValueRef, Id>) -> usize {
    let mut depth: HashMap<LLVMValueRef, usize> = HashMap::with_capacity(pure.len());
    for p in pure {
        let n = u32::try_from(LLVMGetNumOperands(p.inst)).unwrap_or(0);
        let below = (0..n)
            .map(|i| LLVMGetOperand(p.inst, i))
            .filter(|v| pure_map.contains_key(v))
            .map(|v| depth.get(&v).copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        depth.insert(p.inst, below + 1);
    }
    depth.values().copied().max().unwrap_or(1)
}

/// Rewrites one block in place. Returns what happened; leaves the block untouched unless the
/// rewrite is cheaper under the cost model.
///
/// # Safety
/// `block` must belong to a function of a live module whose data layout is `td`.
pub unsafe fn rewrite_block(
    block: LLVMBasicBlockRef,
    td: LLVMTargetDataRef,
    limits: Limits,
) -> BlockOutcome {
    let start = std::time::Instant::now();
    let mut out = BlockOutcome::default();
    let insts = instructions(block);
    // The limits bound building and extraction too, not only saturation: a block with more
    // instructions than the node limit would start above it (saturation could add nothing)
    // and costs its building and one extraction per segment, so it passes through as it is.
    if insts.len() > limits.nodes {
        out.stop = Some(format!(
            "BlockTooLarge({} instructions over the node limit {}: left as it is)",
            insts.len(),
            limits.nodes
        ));
        return out;
    }
    let mut pure_map = HashMap::new();
    let mut pure: Vec<Pure> = Vec::new();
    let mut boundaries: Vec<LLVMValueRef> = Vec::new();
    let mut b = Builder {
        eg: EG::default(),
        td,
        pure: &mut pure_map,
        leaves: Vec::new(),
        leaf_avail: Vec::new(),
        leaf_index: HashMap::new(),
    };
    // Classification in order: a skeleton instruction is entered as a leaf when met, so that
    // later instructions using it see the segment from which it is available.
    for &inst in &insts {
        let seg = boundaries.len();
        match b.instruction(inst) {
            Some(class) => {
                b.pure.insert(inst, class);
                pure.push(Pure {
                    inst,
                    class,
                    segment: seg,
                });
            }
            None => {
                boundaries.push(inst);
                b.leaf_index.insert(inst, b.leaves.len());
                b.leaves.push(inst);
                b.leaf_avail.push(seg + 1);
            }
        }
    }
    out.pure = pure.len();
    if pure.is_empty() {
        return out;
    }
    let Builder {
        mut eg,
        leaves,
        leaf_avail,
        ..
    } = b;
    let depth = pure_depth(&pure, &pure_map);
    eg.rebuild();
    // Cost of the original code: every node of the e-graph before saturation is part of it
    // (hash-consing has already merged duplicates; leaves and constants cost nothing).
    out.cost_before = eg
        .classes()
        .flat_map(|c| c.nodes.iter())
        .map(|n| node_cost(&eg, n))
        .sum();

    let original: Vec<Expr> = eg.classes().flat_map(|c| c.nodes.iter().cloned()).collect();

    // Roots: pure instructions used outside this block's pure code.
    let pure_set: HashSet<LLVMValueRef> = pure.iter().map(|p| p.inst).collect();
    let mut roots: Vec<(usize, LLVMValueRef)> = Vec::new();
    for p in &pure {
        let mut u = LLVMGetFirstUse(p.inst);
        let mut is_root = false;
        while !u.is_null() {
            let user = LLVMGetUser(u);
            if !pure_set.contains(&user) {
                is_root = true;
                break;
            }
            u = LLVMGetNextUse(u);
        }
        if is_root {
            roots.push((p.segment, p.inst));
        }
    }

    let rewrites = rules::rewrites();
    let runner = Runner::default()
        .with_egraph(eg)
        .with_iter_limit(limits.iters)
        .with_node_limit(limits.nodes)
        .with_time_limit(limits.time)
        .run(rewrites);
    out.iterations = runner.iterations.len();
    out.stop = runner.stop_reason.as_ref().map(|r| format!("{r:?}"));
    for it in &runner.iterations {
        for (name, n) in &it.applied {
            *out.applied.entry(name.to_string()).or_default() += n;
        }
    }
    if matches!(runner.stop_reason, Some(StopReason::TimeLimit(_))) {
        // How far saturation got depends on the machine's load: the block stays as it is.
        out.stop = Some(format!(
            "TimeLimit({:.3} s in saturation: left as it is)",
            limits.time.as_secs_f64()
        ));
        return out;
    }
    let eg = runner.egraph;
    let original: HashSet<Expr> = original
        .into_iter()
        .map(|n| n.map_children(|c| eg.find(c)))
        .collect();
    out.nodes = eg.total_number_of_nodes();
    out.classes = eg.number_of_classes();

    // Plan: per segment, extract the roots' classes with later leaves unavailable and classes
    // planned in earlier segments free.
    let class_of: HashMap<LLVMValueRef, Id> =
        pure.iter().map(|p| (p.inst, eg.find(p.class))).collect();
    let mut planned: HashSet<Id> = HashSet::new();
    let mut plan: Vec<(usize, Id, Expr)> = Vec::new();
    let mut segs: Vec<usize> = roots.iter().map(|r| r.0).collect();
    segs.sort_unstable();
    segs.dedup();
    let work = segs
        .len()
        .saturating_mul(eg.total_number_of_nodes())
        .saturating_mul(depth);
    if work > limits.extraction_budget() {
        out.stop = Some(format!(
            "ExtractionWorkLimit({} segments × {} nodes × depth {depth} over {}: left as it is)",
            segs.len(),
            eg.total_number_of_nodes(),
            limits.extraction_budget()
        ));
        return out;
    }
    for &seg in &segs {
        // Each segment's extraction walks the whole e-graph: past the time limit the block is
        // left as it is (no partial plan is ever emitted).
        if start.elapsed() > limits.time {
            out.stop = Some(format!(
                "ExtractionTimeLimit({:.3} s, at segment {seg} of {}: left as it is)",
                limits.time.as_secs_f64(),
                segs.len()
            ));
            return out;
        }
        let cf = GpuCost {
            egraph: &eg,
            leaf_avail: &leaf_avail,
            segment: seg,
            emitted: &planned,
            original: &original,
        };
        let ex = Extractor::new(&eg, cf);
        let mut new_here: Vec<(Id, Expr)> = Vec::new();
        let mut seen_here: HashSet<Id> = HashSet::new();
        for &(_, inst) in roots.iter().filter(|r| r.0 == seg) {
            let root = class_of[&inst];
            if !ex.find_best_cost(root).is_finite() {
                if std::env::var_os("R3_EGRAPH_DEBUG").is_some() {
                    eprintln!("r3-egraph block: root not expressible in segment {seg}");
                }
                return out; // cannot express the root here: leave the block alone
            }
            // Iterative post-order over value classes.
            let mut stack: Vec<(Id, bool)> = vec![(root, false)];
            while let Some((c, expanded)) = stack.pop() {
                let c = eg.find(c);
                if planned.contains(&c) || seen_here.contains(&c) {
                    continue;
                }
                let node = ex.find_best_node(c).clone();
                if expanded {
                    seen_here.insert(c);
                    new_here.push((c, node));
                    continue;
                }
                stack.push((c, true));
                for &ch in node.children() {
                    let ch = eg.find(ch);
                    if matches!(eg[ch].data, Data::Value { .. })
                        && !planned.contains(&ch)
                        && !seen_here.contains(&ch)
                    {
                        if stack.len() > 1_000_000 {
                            return out;
                        }
                        stack.push((ch, false));
                    }
                }
            }
        }
        drop(ex);
        for (c, n) in new_here {
            planned.insert(c);
            plan.push((seg, c, n));
        }
    }
    out.cost_after = plan.iter().map(|(_, _, n)| node_cost(&eg, n)).sum();
    out.emitted = plan
        .iter()
        .filter(|(_, _, n)| !matches!(n, Expr::IConst(_) | Expr::FConst(_) | Expr::Leaf(_)))
        .count();
    if std::env::var_os("R3_EGRAPH_DEBUG").is_some() {
        eprintln!(
            "r3-egraph block: {} pure, {} roots, cost {:.3} -> {:.3}",
            out.pure,
            roots.len(),
            out.cost_before,
            out.cost_after
        );
    }
    if out.cost_after + 0.25 >= out.cost_before {
        return out;
    }

    // Emit, segment by segment, before the skeleton instruction that ends the segment.
    let ctx = LLVMGetTypeContext(LLVMTypeOf(insts[0]));
    let module = LLVMGetGlobalParent(LLVMGetBasicBlockParent(block));
    let builder = LLVMCreateBuilderInContext(ctx);
    let mut values: HashMap<Id, LLVMValueRef> = HashMap::new();
    let mut ok = true;
    for (seg, c, node) in &plan {
        LLVMPositionBuilderBefore(builder, boundaries[*seg]);
        match emit(builder, ctx, module, &eg, node, &values, &leaves) {
            Some(v) => {
                values.insert(*c, v);
            }
            None => {
                ok = false;
                break;
            }
        }
    }
    LLVMDisposeBuilder(builder);
    if !ok {
        // Unreachable for well-formed plans; remove what was emitted and keep the original.
        for v in values.values() {
            let v = *v;
            if !LLVMIsAInstruction(v).is_null() && LLVMGetFirstUse(v).is_null() {
                LLVMInstructionEraseFromParent(v);
            }
        }
        return out;
    }
    for (_, inst) in &roots {
        let v = values[&class_of[inst]];
        LLVMReplaceAllUsesWith(*inst, v);
    }
    for p in pure.iter().rev() {
        if LLVMGetFirstUse(p.inst).is_null() {
            LLVMInstructionEraseFromParent(p.inst);
        }
    }
    out.rewritten = true;
    out
}

/// Builds the LLVM value of one planned node; its value operands were emitted before it.
unsafe fn emit(
    b: LLVMBuilderRef,
    ctx: LLVMContextRef,
    module: LLVMModuleRef,
    eg: &EG,
    node: &Expr,
    values: &HashMap<Id, LLVMValueRef>,
    leaves: &[LLVMValueRef],
) -> Option<LLVMValueRef> {
    use Expr::*;
    use LLVMOpcode::*;
    let val = |id: &Id| values.get(&eg.find(*id)).copied();
    let ty = |id: &Id| match &eg[*id].data {
        Data::Meta(Meta::Ty(t)) => Some(*t),
        _ => None,
    };
    let name = c"".as_ptr();
    let set_int_flags = |v: LLVMValueRef, f: Flags| {
        if LLVMIsAInstruction(v).is_null() {
            return;
        }
        match LLVMGetInstructionOpcode(v) {
            LLVMAdd | LLVMSub | LLVMMul | LLVMShl => {
                LLVMSetNSW(v, f.has(Flags::NSW) as i32);
                LLVMSetNUW(v, f.has(Flags::NUW) as i32);
            }
            LLVMLShr | LLVMAShr | LLVMUDiv | LLVMSDiv => {
                LLVMSetExact(v, f.has(Flags::EXACT) as i32)
            }
            LLVMOr => LLVMSetIsDisjoint(v, f.has(Flags::DISJOINT) as i32),
            LLVMZExt | LLVMUIToFP => LLVMSetNNeg(v, f.has(Flags::NNEG) as i32),
            LLVMICmp => LLVMSetICmpSameSign(v, f.has(Flags::SAMESIGN) as i32),
            _ => {}
        }
    };
    let set_fmf = |v: LLVMValueRef, f: Flags| {
        if !LLVMIsAInstruction(v).is_null() && LLVMCanValueUseFastMathFlags(v) != 0 {
            LLVMSetFastMathFlags(v, f.to_llvm_fmf());
        }
    };
    let intrinsic = |iname: &str, t: Ty, args: &[LLVMValueRef], f: Flags| -> Option<LLVMValueRef> {
        let lt = ty_to_llvm(ctx, t);
        let id = LLVMLookupIntrinsicID(iname.as_ptr() as *const _, iname.len());
        if id == 0 {
            return None;
        }
        let mut tys = [lt];
        let decl = LLVMGetIntrinsicDeclaration(module, id, tys.as_mut_ptr(), 1);
        let fty = LLVMIntrinsicGetType(ctx, id, tys.as_mut_ptr(), 1);
        let mut args = args.to_vec();
        let v = LLVMBuildCall2(b, fty, decl, args.as_mut_ptr(), args.len() as u32, name);
        set_fmf(v, f);
        Some(v)
    };
    Some(match node {
        IConst([t, n]) => {
            let t = ty(t)?;
            let bits = t.int_bits()?;
            let x = num_of(eg, *n)?;
            LLVMConstInt(ty_to_llvm(ctx, t), unsigned(x, bits) as u64, 0)
        }
        FConst([t, n]) => {
            let t = ty(t)?;
            let bits = num_of(eg, *n)? as u64;
            LLVMConstReal(ty_to_llvm(ctx, t), float_value(t, bits)?)
        }
        Leaf([_, n]) => *leaves.get(usize::try_from(num_of(eg, *n)?).ok()?)?,
        Add([_, f, x, y]) | Sub([_, f, x, y]) | Mul([_, f, x, y]) | UDiv([_, f, x, y])
        | SDiv([_, f, x, y]) | URem([_, f, x, y]) | SRem([_, f, x, y]) | Shl([_, f, x, y])
        | LShr([_, f, x, y]) | AShr([_, f, x, y]) | And([_, f, x, y]) | Or([_, f, x, y])
        | Xor([_, f, x, y]) => {
            let op = match node {
                Add(_) => LLVMAdd,
                Sub(_) => LLVMSub,
                Mul(_) => LLVMMul,
                UDiv(_) => LLVMUDiv,
                SDiv(_) => LLVMSDiv,
                URem(_) => LLVMURem,
                SRem(_) => LLVMSRem,
                Shl(_) => LLVMShl,
                LShr(_) => LLVMLShr,
                AShr(_) => LLVMAShr,
                And(_) => LLVMAnd,
                Or(_) => LLVMOr,
                _ => LLVMXor,
            };
            let v = LLVMBuildBinOp(b, op, val(x)?, val(y)?, name);
            set_int_flags(v, flags_of(eg, *f));
            v
        }
        FAdd([_, f, x, y]) | FSub([_, f, x, y]) | FMul([_, f, x, y]) | FDiv([_, f, x, y]) => {
            let op = match node {
                FAdd(_) => LLVMFAdd,
                FSub(_) => LLVMFSub,
                FMul(_) => LLVMFMul,
                _ => LLVMFDiv,
            };
            let v = LLVMBuildBinOp(b, op, val(x)?, val(y)?, name);
            set_fmf(v, flags_of(eg, *f));
            v
        }
        FNeg([_, f, x]) => {
            let v = LLVMBuildFNeg(b, val(x)?, name);
            set_fmf(v, flags_of(eg, *f));
            v
        }
        SMin([t, f, x, y])
        | SMax([t, f, x, y])
        | UMin([t, f, x, y])
        | UMax([t, f, x, y])
        | MinNum([t, f, x, y])
        | MaxNum([t, f, x, y])
        | Minimum([t, f, x, y])
        | Maximum([t, f, x, y]) => {
            let iname = match node {
                SMin(_) => "llvm.smin",
                SMax(_) => "llvm.smax",
                UMin(_) => "llvm.umin",
                UMax(_) => "llvm.umax",
                MinNum(_) => "llvm.minnum",
                MaxNum(_) => "llvm.maxnum",
                Minimum(_) => "llvm.minimum",
                _ => "llvm.maximum",
            };
            intrinsic(iname, ty(t)?, &[val(x)?, val(y)?], flags_of(eg, *f))?
        }
        Fma([t, f, x, y, z]) | FMulAdd([t, f, x, y, z]) => {
            let iname = if matches!(node, Fma(_)) {
                "llvm.fma"
            } else {
                "llvm.fmuladd"
            };
            intrinsic(
                iname,
                ty(t)?,
                &[val(x)?, val(y)?, val(z)?],
                flags_of(eg, *f),
            )?
        }
        ICmp([p, f, x, y]) => {
            let Data::Meta(Meta::Pred(Pred::I(p))) = eg[*p].data else {
                return None;
            };
            let pred = *IPREDS.get(p.checked_sub(32)? as usize)?;
            let v = LLVMBuildICmp(b, pred, val(x)?, val(y)?, name);
            set_int_flags(v, flags_of(eg, *f));
            v
        }
        FCmp([p, f, x, y]) => {
            let Data::Meta(Meta::Pred(Pred::F(p))) = eg[*p].data else {
                return None;
            };
            let pred = *FPREDS.get(p as usize)?;
            let v = LLVMBuildFCmp(b, pred, val(x)?, val(y)?, name);
            set_fmf(v, flags_of(eg, *f));
            v
        }
        Select([_, f, c, x, y]) => {
            let v = LLVMBuildSelect(b, val(c)?, val(x)?, val(y)?, name);
            set_fmf(v, flags_of(eg, *f));
            v
        }
        Trunc([t, f, x]) | ZExt([t, f, x]) | SExt([t, f, x]) | FPTrunc([t, f, x])
        | FPExt([t, f, x]) | FPToUI([t, f, x]) | FPToSI([t, f, x]) | UIToFP([t, f, x])
        | SIToFP([t, f, x]) => {
            let op = match node {
                Trunc(_) => LLVMTrunc,
                ZExt(_) => LLVMZExt,
                SExt(_) => LLVMSExt,
                FPTrunc(_) => LLVMFPTrunc,
                FPExt(_) => LLVMFPExt,
                FPToUI(_) => LLVMFPToUI,
                FPToSI(_) => LLVMFPToSI,
                UIToFP(_) => LLVMUIToFP,
                _ => LLVMSIToFP,
            };
            let v = LLVMBuildCast(b, op, val(x)?, ty_to_llvm(ctx, ty(t)?), name);
            set_int_flags(v, flags_of(eg, *f));
            v
        }
        Gep([_, f, p, off]) => {
            let i8t = LLVMInt8TypeInContext(ctx);
            let mut idx = [val(off)?];
            let nw = if flags_of(eg, *f).has(Flags::INBOUNDS) {
                llvm_sys::LLVMGEPFlagInBounds
            } else {
                0
            };
            LLVMBuildGEPWithNoWrapFlags(b, i8t, val(p)?, idx.as_mut_ptr(), 1, name, nw)
        }
        Type(_) | Fl(_) | Pr(_) | Num(_) => return None,
    })
}

/// Text of a value (a function), for before/after reports.
pub(crate) unsafe fn print_value(v: LLVMValueRef) -> String {
    let p = LLVMPrintValueToString(v);
    let s = CStr::from_ptr(p).to_string_lossy().into_owned();
    LLVMDisposeMessage(p);
    s
}
