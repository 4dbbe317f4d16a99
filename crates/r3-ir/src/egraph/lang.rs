//! The e-graph language: LLVM's pure scalar SSA operations with their types and flags as
//! explicit leaf children, so that one pattern serves every width and a rule can see (and must
//! respect) nsw/nuw/exact/fast-math flags.
//!
//! Every operation node has the shape `(op TYPE FLAGS operands…)`, except comparisons, which
//! produce `i1` and have `(icmp PRED FLAGS a b)`. Constants are `(iconst TYPE N)` with `N` the
//! value sign-extended to i128 (so `(iconst ?t -1)` is all-ones at every width) and
//! `(fconst TYPE BITS)` with the raw IEEE bit pattern. `(leaf TYPE K)` is the K-th opaque value
//! of the region (argument, load, call, phi, value of another block…).
//!
//! The analysis gives every class its type and, when known, its constant value; constant
//! folding happens there, and refuses whenever LLVM would produce poison or UB (overflow under
//! nsw/nuw, inexact under exact, shift ≥ width, division by zero, NaN under nnan, …).

use egg::{define_language, Analysis, DidMerge, EGraph, Id, Language};
use std::fmt;
use std::str::FromStr;

/// A scalar LLVM type the e-graph models. Vectors and wider integers stay opaque.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ty {
    /// Integer of 1..=64 bits (i128 appears only as an internal intermediate: never).
    Int(u32),
    Half,
    BFloat,
    F32,
    F64,
    /// Pointer in an address space.
    Ptr(u32),
}

impl Ty {
    pub fn int_bits(self) -> Option<u32> {
        match self {
            Ty::Int(b) => Some(b),
            _ => None,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, Ty::Half | Ty::BFloat | Ty::F32 | Ty::F64)
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Ty::Int(b) => write!(f, "i{b}"),
            Ty::Half => f.write_str("half"),
            Ty::BFloat => f.write_str("bfloat"),
            Ty::F32 => f.write_str("float"),
            Ty::F64 => f.write_str("double"),
            Ty::Ptr(0) => f.write_str("ptr"),
            Ty::Ptr(a) => write!(f, "ptr{a}"),
        }
    }
}

impl FromStr for Ty {
    type Err = ();
    fn from_str(s: &str) -> Result<Ty, ()> {
        Ok(match s {
            "half" => Ty::Half,
            "bfloat" => Ty::BFloat,
            "float" => Ty::F32,
            "double" => Ty::F64,
            "ptr" => Ty::Ptr(0),
            _ => {
                if let Some(n) = s.strip_prefix("ptr") {
                    Ty::Ptr(n.parse().map_err(|_| ())?)
                } else if let Some(n) = s.strip_prefix('i') {
                    let b: u32 = n.parse().map_err(|_| ())?;
                    if !(1..=64).contains(&b) {
                        return Err(());
                    }
                    Ty::Int(b)
                } else {
                    return Err(());
                }
            }
        })
    }
}

/// Poison-generating and fast-math flags of one instruction, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    pub const NONE: Flags = Flags(0);
    pub const NSW: Flags = Flags(1);
    pub const NUW: Flags = Flags(1 << 1);
    pub const EXACT: Flags = Flags(1 << 2);
    pub const DISJOINT: Flags = Flags(1 << 3);
    pub const NNEG: Flags = Flags(1 << 4);
    pub const SAMESIGN: Flags = Flags(1 << 5);
    pub const INBOUNDS: Flags = Flags(1 << 6);
    // The fast-math flags, in the bit order of llvm-sys' LLVMFastMath* shifted by 7.
    pub const REASSOC: Flags = Flags(1 << 7);
    pub const NNAN: Flags = Flags(1 << 8);
    pub const NINF: Flags = Flags(1 << 9);
    pub const NSZ: Flags = Flags(1 << 10);
    pub const ARCP: Flags = Flags(1 << 11);
    pub const CONTRACT: Flags = Flags(1 << 12);
    pub const AFN: Flags = Flags(1 << 13);
    /// The fast-math flags (LLVM's FastMathFlags), in bit order of llvm-sys' LLVMFastMath*.
    pub const FMF: Flags = Flags(0x7f << 7);
    /// Flags under which an instruction may yield poison where the plain one would not.
    pub const POISONING: Flags = Flags(0x7f | (1 << 8) | (1 << 9));

    const NAMES: [(&'static str, Flags); 14] = [
        ("nsw", Flags::NSW),
        ("nuw", Flags::NUW),
        ("exact", Flags::EXACT),
        ("disjoint", Flags::DISJOINT),
        ("nneg", Flags::NNEG),
        ("samesign", Flags::SAMESIGN),
        ("inbounds", Flags::INBOUNDS),
        ("nnan", Flags::NNAN),
        ("ninf", Flags::NINF),
        ("nsz", Flags::NSZ),
        ("arcp", Flags::ARCP),
        ("contract", Flags::CONTRACT),
        ("afn", Flags::AFN),
        ("reassoc", Flags::REASSOC),
    ];

    pub fn has(self, f: Flags) -> bool {
        self.0 & f.0 == f.0
    }
    pub fn and(self, f: Flags) -> Flags {
        Flags(self.0 & f.0)
    }
    pub fn or(self, f: Flags) -> Flags {
        Flags(self.0 | f.0)
    }
    /// Only the fast-math part.
    pub fn fmf(self) -> Flags {
        self.and(Flags::FMF)
    }
    /// LLVM's LLVMFastMathFlags encoding of the fast-math part.
    pub fn to_llvm_fmf(self) -> u32 {
        (self.0 >> 7) as u32 & 0x7f
    }
    pub fn from_llvm_fmf(bits: u32) -> Flags {
        Flags(((bits & 0x7f) as u16) << 7)
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("-");
        }
        let names: Vec<&str> = Flags::NAMES
            .iter()
            .filter(|(_, b)| self.has(*b))
            .map(|(n, _)| *n)
            .collect();
        f.write_str(&names.join("."))
    }
}

impl FromStr for Flags {
    type Err = ();
    fn from_str(s: &str) -> Result<Flags, ()> {
        if s == "-" {
            return Ok(Flags::NONE);
        }
        let mut out = Flags::NONE;
        for part in s.split('.') {
            let (_, b) = Flags::NAMES.iter().find(|(n, _)| *n == part).ok_or(())?;
            out = out.or(*b);
        }
        Ok(out)
    }
}

/// icmp and fcmp predicates, with LLVM's numbering (LLVMIntPredicate / LLVMRealPredicate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pred {
    I(u8),
    F(u8),
}

const IPRED: [(&str, u8); 10] = [
    ("eq", 32),
    ("ne", 33),
    ("ugt", 34),
    ("uge", 35),
    ("ult", 36),
    ("ule", 37),
    ("sgt", 38),
    ("sge", 39),
    ("slt", 40),
    ("sle", 41),
];
const FPRED: [&str; 16] = [
    "ffalse", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "uno", "ueq", "ugt.f", "uge.f",
    "ult.f", "ule.f", "une", "ftrue",
];

impl fmt::Display for Pred {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Pred::I(p) => {
                let name = IPRED.iter().find(|(_, n)| n == p).map_or("?", |(s, _)| s);
                f.write_str(name)
            }
            Pred::F(p) => f.write_str(FPRED.get(*p as usize).copied().unwrap_or("?")),
        }
    }
}

impl FromStr for Pred {
    type Err = ();
    fn from_str(s: &str) -> Result<Pred, ()> {
        if let Some((_, n)) = IPRED.iter().find(|(n, _)| *n == s) {
            return Ok(Pred::I(*n));
        }
        FPRED
            .iter()
            .position(|n| *n == s)
            .map(|i| Pred::F(i as u8))
            .ok_or(())
    }
}

define_language! {
    pub enum Expr {
        // Integer arithmetic: (op TYPE FLAGS a b).
        "add" = Add([Id; 4]),
        "sub" = Sub([Id; 4]),
        "mul" = Mul([Id; 4]),
        "udiv" = UDiv([Id; 4]),
        "sdiv" = SDiv([Id; 4]),
        "urem" = URem([Id; 4]),
        "srem" = SRem([Id; 4]),
        "shl" = Shl([Id; 4]),
        "lshr" = LShr([Id; 4]),
        "ashr" = AShr([Id; 4]),
        "and" = And([Id; 4]),
        "or" = Or([Id; 4]),
        "xor" = Xor([Id; 4]),
        "smin" = SMin([Id; 4]),
        "smax" = SMax([Id; 4]),
        "umin" = UMin([Id; 4]),
        "umax" = UMax([Id; 4]),
        // Floating point: (op TYPE FLAGS a b).
        "fadd" = FAdd([Id; 4]),
        "fsub" = FSub([Id; 4]),
        "fmul" = FMul([Id; 4]),
        "fdiv" = FDiv([Id; 4]),
        "minnum" = MinNum([Id; 4]),
        "maxnum" = MaxNum([Id; 4]),
        "minimum" = Minimum([Id; 4]),
        "maximum" = Maximum([Id; 4]),
        "fneg" = FNeg([Id; 3]),
        // (fma TYPE FLAGS a b c) = a*b+c with one rounding; fmuladd may or may not fuse.
        "fma" = Fma([Id; 5]),
        "fmuladd" = FMulAdd([Id; 5]),
        // Comparisons: (icmp PRED FLAGS a b) : i1.
        "icmp" = ICmp([Id; 4]),
        "fcmp" = FCmp([Id; 4]),
        // (select TYPE FLAGS cond a b)
        "select" = Select([Id; 5]),
        // Casts: (op TO-TYPE FLAGS x).
        "trunc" = Trunc([Id; 3]),
        "zext" = ZExt([Id; 3]),
        "sext" = SExt([Id; 3]),
        "fptrunc" = FPTrunc([Id; 3]),
        "fpext" = FPExt([Id; 3]),
        "fptoui" = FPToUI([Id; 3]),
        "fptosi" = FPToSI([Id; 3]),
        "uitofp" = UIToFP([Id; 3]),
        "sitofp" = SIToFP([Id; 3]),
        // (gep PTR-TYPE FLAGS base byte-offset): getelementptr i8 (only `inbounds` is kept).
        "gep" = Gep([Id; 4]),
        "iconst" = IConst([Id; 2]),
        "fconst" = FConst([Id; 2]),
        "leaf" = Leaf([Id; 2]),
        Type(Ty),
        Fl(Flags),
        Pr(Pred),
        Num(i128),
    }
}

/// A known constant value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Const {
    /// Sign-extended from the type's width.
    Int(i128),
    /// IEEE bits (f32 in the low 32 bits).
    Float(u64),
}

/// What the analysis knows about an e-class.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// A type, flags, predicate or number leaf.
    Meta(Meta),
    Value {
        ty: Ty,
        k: Option<Const>,
    },
    /// Malformed (e.g. a node whose children have the wrong kinds); never extracted by rules.
    Bad,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Meta {
    Ty(Ty),
    Flags(Flags),
    Pred(Pred),
    Num(i128),
}

pub type EG = EGraph<Expr, Facts>;

/// The e-class analysis: types and constants (folding).
#[derive(Default, Clone)]
pub struct Facts;

pub fn ty_of(eg: &EG, id: Id) -> Option<Ty> {
    match &eg[id].data {
        Data::Value { ty, .. } => Some(*ty),
        Data::Meta(Meta::Ty(t)) => Some(*t),
        _ => None,
    }
}

pub fn const_of(eg: &EG, id: Id) -> Option<Const> {
    match &eg[id].data {
        Data::Value { k, .. } => *k,
        _ => None,
    }
}

pub fn int_of(eg: &EG, id: Id) -> Option<i128> {
    match const_of(eg, id) {
        Some(Const::Int(v)) => Some(v),
        _ => None,
    }
}

pub fn flags_of(eg: &EG, id: Id) -> Flags {
    match &eg[id].data {
        Data::Meta(Meta::Flags(f)) => *f,
        _ => Flags::NONE,
    }
}

pub fn num_of(eg: &EG, id: Id) -> Option<i128> {
    match &eg[id].data {
        Data::Meta(Meta::Num(n)) => Some(*n),
        _ => None,
    }
}

// ---- integer helpers -------------------------------------------------------------------

pub fn mask(bits: u32) -> u128 {
    if bits >= 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    }
}

/// The canonical (sign-extended) form of the low `bits` bits of `v`.
pub fn canon(v: i128, bits: u32) -> i128 {
    let sh = 128 - bits;
    (v << sh) >> sh
}

/// The unsigned value of a canonical constant.
pub fn unsigned(v: i128, bits: u32) -> u128 {
    (v as u128) & mask(bits)
}

fn smin_of(bits: u32) -> i128 {
    -(1i128 << (bits - 1))
}
fn smax_of(bits: u32) -> i128 {
    (1i128 << (bits - 1)) - 1
}

fn fits_signed(v: i128, bits: u32) -> bool {
    v >= smin_of(bits) && v <= smax_of(bits)
}

// ---- float helpers ---------------------------------------------------------------------

/// The value of a float constant as f64 (exact for f32 and f64).
pub fn float_value(ty: Ty, bits: u64) -> Option<f64> {
    match ty {
        Ty::F32 => Some(f32::from_bits(bits as u32) as f64),
        Ty::F64 => Some(f64::from_bits(bits)),
        _ => None,
    }
}

/// The bits of `v` in `ty`, when `v` is exactly representable there.
pub fn float_bits_exact(ty: Ty, v: f64) -> Option<u64> {
    match ty {
        Ty::F32 => {
            let f = v as f32;
            (f as f64 == v || v.is_nan()).then_some(f.to_bits() as u64)
        }
        Ty::F64 => Some(v.to_bits()),
        _ => None,
    }
}

fn fbin(
    ty: Ty,
    a: u64,
    b: u64,
    op32: fn(f32, f32) -> f32,
    op64: fn(f64, f64) -> f64,
) -> Option<u64> {
    match ty {
        Ty::F32 => Some(op32(f32::from_bits(a as u32), f32::from_bits(b as u32)).to_bits() as u64),
        Ty::F64 => Some(op64(f64::from_bits(a), f64::from_bits(b)).to_bits()),
        _ => None,
    }
}

fn is_nan(ty: Ty, bits: u64) -> bool {
    float_value(ty, bits).is_some_and(f64::is_nan)
}
fn is_inf(ty: Ty, bits: u64) -> bool {
    float_value(ty, bits).is_some_and(f64::is_infinite)
}

/// Folding a float operation is refused where the fast-math flags make the result poison.
fn fmf_ok(ty: Ty, f: Flags, inputs: &[u64], out: u64) -> bool {
    let all = inputs.iter().chain(std::iter::once(&out));
    let nan = all.clone().any(|b| is_nan(ty, *b));
    let inf = all.clone().any(|b| is_inf(ty, *b));
    !((f.has(Flags::NNAN) && nan) || (f.has(Flags::NINF) && inf))
}

impl Facts {
    fn fold(eg: &EG, node: &Expr) -> Option<Const> {
        let ki = |id: &Id| int_of(eg, *id);
        let kf = |id: &Id| match const_of(eg, *id) {
            Some(Const::Float(b)) => Some(b),
            _ => None,
        };
        let meta_ty = |id: &Id| match &eg[*id].data {
            Data::Meta(Meta::Ty(t)) => Some(*t),
            _ => None,
        };
        use Expr::*;
        match node {
            Add([t, f, a, b]) | Sub([t, f, a, b]) | Mul([t, f, a, b]) | UDiv([t, f, a, b])
            | SDiv([t, f, a, b]) | URem([t, f, a, b]) | SRem([t, f, a, b]) | Shl([t, f, a, b])
            | LShr([t, f, a, b]) | AShr([t, f, a, b]) | And([t, f, a, b]) | Or([t, f, a, b])
            | Xor([t, f, a, b]) | SMin([t, f, a, b]) | SMax([t, f, a, b]) | UMin([t, f, a, b])
            | UMax([t, f, a, b]) => {
                let bits = meta_ty(t)?.int_bits()?;
                let fl = flags_of(eg, *f);
                let (x, y) = (ki(a)?, ki(b)?);
                fold_int(node, bits, fl, x, y).map(Const::Int)
            }
            ICmp([p, f, a, b]) => {
                let ty = ty_of(eg, *a)?;
                let bits = ty.int_bits()?;
                let (x, y) = (ki(a)?, ki(b)?);
                let (ux, uy) = (unsigned(x, bits), unsigned(y, bits));
                if flags_of(eg, *f).has(Flags::SAMESIGN) && ((x < 0) != (y < 0)) {
                    return None;
                }
                let r = match &eg[*p].data {
                    Data::Meta(Meta::Pred(Pred::I(n))) => match n {
                        32 => x == y,
                        33 => x != y,
                        34 => ux > uy,
                        35 => ux >= uy,
                        36 => ux < uy,
                        37 => ux <= uy,
                        38 => x > y,
                        39 => x >= y,
                        40 => x < y,
                        41 => x <= y,
                        _ => return None,
                    },
                    _ => return None,
                };
                Some(Const::Int(if r { -1 } else { 0 }))
            }
            FCmp([p, f, a, b]) => {
                let ty = ty_of(eg, *a)?;
                let (x, y) = (float_value(ty, kf(a)?)?, float_value(ty, kf(b)?)?);
                let fl = flags_of(eg, *f);
                if (fl.has(Flags::NNAN) && (x.is_nan() || y.is_nan()))
                    || (fl.has(Flags::NINF) && (x.is_infinite() || y.is_infinite()))
                {
                    return None;
                }
                let uno = x.is_nan() || y.is_nan();
                let n = match &eg[*p].data {
                    Data::Meta(Meta::Pred(Pred::F(n))) => *n,
                    _ => return None,
                };
                let ord = |c: bool| !uno && c;
                let unord = |c: bool| uno || c;
                let r = match n {
                    0 => false,
                    1 => ord(x == y),
                    2 => ord(x > y),
                    3 => ord(x >= y),
                    4 => ord(x < y),
                    5 => ord(x <= y),
                    6 => ord(x != y),
                    7 => !uno,
                    8 => uno,
                    9 => unord(x == y),
                    10 => unord(x > y),
                    11 => unord(x >= y),
                    12 => unord(x < y),
                    13 => unord(x <= y),
                    14 => unord(x != y),
                    15 => true,
                    _ => return None,
                };
                Some(Const::Int(if r { -1 } else { 0 }))
            }
            FAdd([t, f, a, b]) | FSub([t, f, a, b]) | FMul([t, f, a, b]) | FDiv([t, f, a, b]) => {
                let ty = meta_ty(t)?;
                let (x, y) = (kf(a)?, kf(b)?);
                let r = match node {
                    FAdd(_) => fbin(ty, x, y, |p, q| p + q, |p, q| p + q),
                    FSub(_) => fbin(ty, x, y, |p, q| p - q, |p, q| p - q),
                    FMul(_) => fbin(ty, x, y, |p, q| p * q, |p, q| p * q),
                    _ => fbin(ty, x, y, |p, q| p / q, |p, q| p / q),
                }?;
                fmf_ok(ty, flags_of(eg, *f), &[x, y], r).then_some(Const::Float(r))
            }
            FNeg([t, f, a]) => {
                let ty = meta_ty(t)?;
                let x = kf(a)?;
                let r = match ty {
                    Ty::F32 => x ^ 0x8000_0000,
                    Ty::F64 => x ^ (1 << 63),
                    _ => return None,
                };
                fmf_ok(ty, flags_of(eg, *f), &[x], r).then_some(Const::Float(r))
            }
            Fma([t, f, a, b, c]) | FMulAdd([t, f, a, b, c]) => {
                let ty = meta_ty(t)?;
                let (x, y, z) = (kf(a)?, kf(b)?, kf(c)?);
                let r = match ty {
                    Ty::F32 => f32::from_bits(x as u32)
                        .mul_add(f32::from_bits(y as u32), f32::from_bits(z as u32))
                        .to_bits() as u64,
                    Ty::F64 => f64::from_bits(x)
                        .mul_add(f64::from_bits(y), f64::from_bits(z))
                        .to_bits(),
                    _ => return None,
                };
                fmf_ok(ty, flags_of(eg, *f), &[x, y, z], r).then_some(Const::Float(r))
            }
            Trunc([t, _, a]) => {
                let bits = meta_ty(t)?.int_bits()?;
                Some(Const::Int(canon(ki(a)?, bits)))
            }
            ZExt([t, f, a]) => {
                let from = ty_of(eg, *a)?.int_bits()?;
                let to = meta_ty(t)?.int_bits()?;
                let x = ki(a)?;
                if flags_of(eg, *f).has(Flags::NNEG) && x < 0 {
                    return None;
                }
                Some(Const::Int(canon(unsigned(x, from) as i128, to)))
            }
            SExt([_, _, a]) => Some(Const::Int(ki(a)?)),
            SIToFP([t, f, a]) | UIToFP([t, f, a]) => {
                let ty = meta_ty(t)?;
                let from = ty_of(eg, *a)?.int_bits()?;
                let x = ki(a)?;
                let v = if matches!(node, UIToFP(_)) {
                    if flags_of(eg, *f).has(Flags::NNEG) && x < 0 {
                        return None;
                    }
                    unsigned(x, from) as i128
                } else {
                    x
                };
                match ty {
                    Ty::F32 => Some(Const::Float((v as f32).to_bits() as u64)),
                    Ty::F64 => Some(Const::Float((v as f64).to_bits())),
                    _ => None,
                }
            }
            FPToSI([t, _, a]) | FPToUI([t, _, a]) => {
                let bits = meta_ty(t)?.int_bits()?;
                let from = ty_of(eg, *a)?;
                let v = float_value(from, kf(a)?)?.trunc();
                if !v.is_finite() {
                    return None;
                }
                if matches!(node, FPToSI(_)) {
                    let lim = 2f64.powi(bits as i32 - 1);
                    (v >= -lim && v < lim).then_some(Const::Int(v as i128))
                } else {
                    let lim = 2f64.powi(bits as i32);
                    (v >= 0.0 && v < lim).then(|| Const::Int(canon(v as i128, bits)))
                }
            }
            FPExt([t, _, a]) | FPTrunc([t, _, a]) => {
                let to = meta_ty(t)?;
                let from = ty_of(eg, *a)?;
                let v = float_value(from, kf(a)?)?;
                if v.is_nan() {
                    return None;
                }
                match to {
                    Ty::F32 => Some(Const::Float((v as f32).to_bits() as u64)),
                    Ty::F64 => Some(Const::Float(v.to_bits())),
                    _ => None,
                }
            }
            IConst([t, n]) => {
                let bits = meta_ty(t)?.int_bits()?;
                let n = num_of(eg, *n)?;
                Some(Const::Int(canon(n, bits)))
            }
            FConst([t, n]) => {
                let _ = meta_ty(t)?;
                Some(Const::Float(num_of(eg, *n)? as u64))
            }
            _ => None,
        }
    }
}

/// Folds an integer binary operation on canonical constants; None where LLVM gives poison or
/// UB (and where the result is not a plain value).
pub fn fold_int(node: &Expr, bits: u32, f: Flags, x: i128, y: i128) -> Option<i128> {
    use Expr::*;
    let (ux, uy) = (unsigned(x, bits), unsigned(y, bits));
    let m = mask(bits);
    let r: i128 = match node {
        Add(_) => {
            if f.has(Flags::NSW) && !fits_signed(x + y, bits) {
                return None;
            }
            if f.has(Flags::NUW) && ux + uy > m {
                return None;
            }
            x + y
        }
        Sub(_) => {
            if f.has(Flags::NSW) && !fits_signed(x - y, bits) {
                return None;
            }
            if f.has(Flags::NUW) && ux < uy {
                return None;
            }
            x - y
        }
        Mul(_) => {
            if f.has(Flags::NSW) && !fits_signed(x * y, bits) {
                return None;
            }
            if f.has(Flags::NUW) && ux.checked_mul(uy).is_none_or(|p| p > m) {
                return None;
            }
            x.wrapping_mul(y)
        }
        UDiv(_) | URem(_) => {
            if uy == 0 {
                return None;
            }
            if f.has(Flags::EXACT) && ux % uy != 0 {
                return None;
            }
            if matches!(node, UDiv(_)) {
                (ux / uy) as i128
            } else {
                (ux % uy) as i128
            }
        }
        SDiv(_) | SRem(_) => {
            if y == 0 || (x == smin_of(bits) && y == -1) {
                return None;
            }
            if f.has(Flags::EXACT) && x % y != 0 {
                return None;
            }
            if matches!(node, SDiv(_)) {
                x / y
            } else {
                x % y
            }
        }
        Shl(_) => {
            if uy >= bits as u128 {
                return None;
            }
            let r = ux << uy;
            if f.has(Flags::NUW) && r & !m != 0 {
                return None;
            }
            let c = canon(r as i128, bits);
            if f.has(Flags::NSW) && (c >> uy) != x {
                return None;
            }
            c
        }
        LShr(_) | AShr(_) => {
            if uy >= bits as u128 {
                return None;
            }
            if f.has(Flags::EXACT) && ux & mask(uy as u32) != 0 {
                return None;
            }
            if matches!(node, LShr(_)) {
                (ux >> uy) as i128
            } else {
                x >> uy
            }
        }
        And(_) => x & y,
        Or(_) => {
            if f.has(Flags::DISJOINT) && ux & uy != 0 {
                return None;
            }
            x | y
        }
        Xor(_) => x ^ y,
        SMin(_) => x.min(y),
        SMax(_) => x.max(y),
        UMin(_) => ux.min(uy) as i128,
        UMax(_) => ux.max(uy) as i128,
        _ => return None,
    };
    Some(canon(r, bits))
}

impl Analysis<Expr> for Facts {
    type Data = Data;

    fn make(eg: &mut EG, node: &Expr) -> Data {
        use Expr::*;
        let meta_ty = |id: &Id| match &eg[*id].data {
            Data::Meta(Meta::Ty(t)) => Some(*t),
            _ => None,
        };
        let ty = match node {
            Type(t) => return Data::Meta(Meta::Ty(*t)),
            Fl(f) => return Data::Meta(Meta::Flags(*f)),
            Pr(p) => return Data::Meta(Meta::Pred(*p)),
            Num(n) => return Data::Meta(Meta::Num(*n)),
            ICmp(_) | FCmp(_) => Some(Ty::Int(1)),
            other => meta_ty(&other.children()[0]),
        };
        match ty {
            Some(ty) => Data::Value {
                ty,
                k: Facts::fold(eg, node),
            },
            None => Data::Bad,
        }
    }

    fn merge(&mut self, to: &mut Data, from: Data) -> DidMerge {
        match (to, from) {
            (Data::Value { k: k1, .. }, Data::Value { k: Some(k2), .. }) if k1.is_none() => {
                *k1 = Some(k2);
                DidMerge(true, false)
            }
            (Data::Value { k: Some(_), .. }, Data::Value { k: None, .. }) => DidMerge(false, true),
            _ => DidMerge(false, false),
        }
    }

    fn modify(eg: &mut EG, id: Id) {
        let Data::Value { ty, k: Some(k) } = eg[id].data.clone() else {
            return;
        };
        let has_const = eg[id]
            .nodes
            .iter()
            .any(|n| matches!(n, Expr::IConst(_) | Expr::FConst(_)));
        if has_const {
            return;
        }
        let t = eg.add(Expr::Type(ty));
        let c = match k {
            Const::Int(v) => {
                let n = eg.add(Expr::Num(v));
                eg.add(Expr::IConst([t, n]))
            }
            Const::Float(b) => {
                let n = eg.add(Expr::Num(b as i128));
                eg.add(Expr::FConst([t, n]))
            }
        };
        eg.union(id, c);
    }
}

/// Renders a class's constant or `?` (for statistics and debugging).
pub fn describe(eg: &EG, id: Id) -> String {
    match &eg[id].data {
        Data::Value {
            ty,
            k: Some(Const::Int(v)),
        } => format!("{ty} {v}"),
        Data::Value {
            ty,
            k: Some(Const::Float(b)),
        } => format!("{ty} {:?}", float_value(*ty, *b)),
        Data::Value { ty, .. } => format!("{ty} ?"),
        _ => "meta".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_round_trip_through_text() {
        for s in ["i32", "i1", "float", "double", "half", "ptr", "ptr3"] {
            assert_eq!(s.parse::<Ty>().unwrap().to_string(), s);
        }
        for s in ["-", "nsw", "nsw.nuw", "contract", "nnan.ninf.reassoc"] {
            assert_eq!(s.parse::<Flags>().unwrap().to_string(), s);
        }
        assert!("i0".parse::<Ty>().is_err() && "i65".parse::<Ty>().is_err());
        assert_eq!("slt".parse::<Pred>().unwrap(), Pred::I(40));
    }

    #[test]
    fn folding_refuses_poison() {
        let add = Expr::Add([Id::from(0usize); 4]);
        assert_eq!(fold_int(&add, 8, Flags::NSW, 127, 1), None);
        assert_eq!(fold_int(&add, 8, Flags::NONE, 127, 1), Some(-128));
        assert_eq!(fold_int(&add, 8, Flags::NUW, -1, 1), None);
        let shl = Expr::Shl([Id::from(0usize); 4]);
        assert_eq!(fold_int(&shl, 8, Flags::NONE, 1, 8), None);
        assert_eq!(fold_int(&shl, 8, Flags::NSW, 1, 7), None);
        assert_eq!(fold_int(&shl, 8, Flags::NUW, 1, 7), Some(-128));
        let sdiv = Expr::SDiv([Id::from(0usize); 4]);
        assert_eq!(fold_int(&sdiv, 32, Flags::NONE, i32::MIN as i128, -1), None);
        assert_eq!(fold_int(&sdiv, 32, Flags::NONE, -7, 2), Some(-3));
        assert_eq!(fold_int(&sdiv, 32, Flags::EXACT, -7, 2), None);
    }
}
