//! Every rewrite rule, in one table: a name, a one-line reason why it is sound under LLVM's
//! semantics (poison and flags included), and the rewrite.
//!
//! Conventions that keep the table sound:
//! - A right-hand side copies the matched flags (`?f`) only where the result is poison in
//!   exactly the same cases; otherwise it writes `-` (no flags). Dropping a flag only makes a
//!   result less poisonous, which is always a refinement; adding one needs a proof (given in
//!   the reason).
//! - Computed constants are written as operations on constants (e.g. `(sub ?t - 0 ?c)`); the
//!   analysis folds them, and refuses to fold anything poison, so no rule can conjure a value
//!   out of a poison or UB computation.
//! - Rules point in the improving direction; the only commutations move a constant to the
//!   right so that one form of each rule suffices.
//! - Division by a constant becomes multiplication only for divisors that are not 0 (UB) and,
//!   for signed division, not -1 or INT_MIN; the magic numbers are the round-up method of
//!   Granlund & Montgomery (PLDI'94) / Hacker's Delight ch. 10, with their conditions checked
//!   here, for widths up to 32 bits (the product fits in a 2N-bit multiply).
//! - Floating point: no reassociation without `reassoc` on every operation involved; FMA only
//!   where `contract` is on both the multiply and the add; exact identities otherwise.

use super::lang::*;
use egg::{rewrite, Applier, Id, PatternAst, Rewrite, Subst, Symbol, Var};
use std::sync::OnceLock;

pub type Rw = Rewrite<Expr, Facts>;

/// One rule of the table.
pub struct Rule {
    pub name: &'static str,
    pub why: &'static str,
    pub rewrite: Rw,
}

fn v(name: &str) -> Var {
    name.parse().expect("pattern variable")
}

// ---- small builders --------------------------------------------------------------------

fn ty_node(eg: &mut EG, t: Ty) -> Id {
    eg.add(Expr::Type(t))
}
fn fl(eg: &mut EG, f: Flags) -> Id {
    eg.add(Expr::Fl(f))
}
fn iconst(eg: &mut EG, t: Ty, v: i128) -> Id {
    let bits = t.int_bits().unwrap_or(64);
    let ty = ty_node(eg, t);
    let n = eg.add(Expr::Num(canon(v, bits)));
    eg.add(Expr::IConst([ty, n]))
}
fn fconst(eg: &mut EG, t: Ty, bits: u64) -> Id {
    let ty = ty_node(eg, t);
    let n = eg.add(Expr::Num(bits as i128));
    eg.add(Expr::FConst([ty, n]))
}
type Ctor4 = fn([Id; 4]) -> Expr;
fn bin(eg: &mut EG, op: Ctor4, t: Ty, f: Flags, a: Id, b: Id) -> Id {
    let ty = ty_node(eg, t);
    let f = fl(eg, f);
    eg.add(op([ty, f, a, b]))
}
fn cast(eg: &mut EG, op: fn([Id; 3]) -> Expr, t: Ty, x: Id) -> Id {
    let ty = ty_node(eg, t);
    let f = fl(eg, Flags::NONE);
    eg.add(op([ty, f, x]))
}

/// A rule whose right-hand side is computed in Rust (magic numbers, flag intersections).
struct Build(fn(&mut EG, &Subst) -> Option<Id>);

impl Applier<Expr, Facts> for Build {
    fn apply_one(
        &self,
        eg: &mut EG,
        eclass: Id,
        subst: &Subst,
        _ast: Option<&PatternAst<Expr>>,
        _rule: Symbol,
    ) -> Vec<Id> {
        match (self.0)(eg, subst) {
            Some(id) if eg.union(eclass, id) => vec![eclass],
            _ => vec![],
        }
    }
}

// ---- conditions ------------------------------------------------------------------------

fn not_const(var: &'static str) -> impl Fn(&mut EG, Id, &Subst) -> bool {
    move |eg, _, s| const_of(eg, s[v(var)]).is_none()
}

/// The float constant in `var`, as f64, with its type.
fn fval(eg: &EG, id: Id) -> Option<(Ty, f64)> {
    let ty = ty_of(eg, id)?;
    match const_of(eg, id)? {
        Const::Float(b) => Some((ty, float_value(ty, b)?)),
        _ => None,
    }
}

fn fconst_is(var: &'static str, p: fn(f64) -> bool) -> impl Fn(&mut EG, Id, &Subst) -> bool {
    move |eg, _, s| fval(eg, s[v(var)]).is_some_and(|(_, x)| p(x))
}

fn int_bits_of(eg: &EG, id: Id) -> Option<u32> {
    ty_of(eg, id)?.int_bits()
}

// ---- computed right-hand sides ------------------------------------------------------------

/// x * 2^k → x << k, keeping nuw (same poison); nsw is dropped (shl nsw by width-1 is more
/// poisonous than mul nsw by INT_MIN).
fn mul_pow2(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let bits = t.int_bits()?;
    let c = unsigned(int_of(eg, s[v("?c")])?, bits);
    if !c.is_power_of_two() || c == 1 {
        return None;
    }
    let k = c.trailing_zeros() as i128;
    let f = flags_of(eg, s[v("?f")]).and(Flags::NUW);
    let kk = iconst(eg, t, k);
    Some(bin(eg, Expr::Shl, t, f, s[v("?x")], kk))
}

fn udiv_pow2(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let bits = t.int_bits()?;
    let c = unsigned(int_of(eg, s[v("?c")])?, bits);
    if !c.is_power_of_two() || c == 1 {
        return None;
    }
    let k = iconst(eg, t, c.trailing_zeros() as i128);
    let f = flags_of(eg, s[v("?f")]).and(Flags::EXACT);
    Some(bin(eg, Expr::LShr, t, f, s[v("?x")], k))
}

fn urem_pow2(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let bits = t.int_bits()?;
    let c = unsigned(int_of(eg, s[v("?c")])?, bits);
    if !c.is_power_of_two() || c == 1 {
        return None;
    }
    let m = iconst(eg, t, (c - 1) as i128);
    Some(bin(eg, Expr::And, t, Flags::NONE, s[v("?x")], m))
}

/// (x + ((x >>s (N-1)) >>u (N-k))): x rounded toward zero for an arithmetic shift by k.
fn sdiv_bias(eg: &mut EG, t: Ty, x: Id, k: u32) -> Id {
    let bits = t.int_bits().unwrap_or(32);
    let sh = iconst(eg, t, (bits - 1) as i128);
    let sign = bin(eg, Expr::AShr, t, Flags::NONE, x, sh);
    let sh2 = iconst(eg, t, (bits - k) as i128);
    let bias = bin(eg, Expr::LShr, t, Flags::NONE, sign, sh2);
    bin(eg, Expr::Add, t, Flags::NONE, x, bias)
}

/// Positive power-of-two divisor 2^k with 1 ≤ k ≤ N-2 (or its negation), as (k, negative).
fn signed_pow2(bits: u32, c: i128) -> Option<(u32, bool)> {
    let a = c.unsigned_abs();
    if c == 0 || !a.is_power_of_two() || a == 1 {
        return None;
    }
    let k = a.trailing_zeros();
    (k <= bits - 2).then_some((k, c < 0))
}

fn sdiv_pow2(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let bits = t.int_bits()?;
    let (k, neg) = signed_pow2(bits, int_of(eg, s[v("?c")])?)?;
    let x = s[v("?x")];
    let kk = iconst(eg, t, k as i128);
    let q = if flags_of(eg, s[v("?f")]).has(Flags::EXACT) {
        // sdiv exact by 2^k ≡ ashr exact by k (both poison iff the low k bits are not zero).
        bin(eg, Expr::AShr, t, Flags::EXACT, x, kk)
    } else {
        let biased = sdiv_bias(eg, t, x, k);
        bin(eg, Expr::AShr, t, Flags::NONE, biased, kk)
    };
    if neg {
        let zero = iconst(eg, t, 0);
        Some(bin(eg, Expr::Sub, t, Flags::NONE, zero, q))
    } else {
        Some(q)
    }
}

fn srem_pow2(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let bits = t.int_bits()?;
    // x srem -2^k == x srem 2^k.
    let (k, _) = signed_pow2(bits, int_of(eg, s[v("?c")])?)?;
    let x = s[v("?x")];
    let biased = sdiv_bias(eg, t, x, k);
    let m = iconst(eg, t, -(1i128 << k));
    let rounded = bin(eg, Expr::And, t, Flags::NONE, biased, m);
    Some(bin(eg, Expr::Sub, t, Flags::NONE, x, rounded))
}

/// Unsigned magic number for N-bit division by d (2 < d < 2^N, not a power of two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UMagic {
    /// q = (x * m) >> s in 2N bits (m < 2^N).
    Plain { m: u128, s: u32 },
    /// m = 2^N + m': t = (x * m') >> N; q = (t + ((x - t) >> 1)) >> (s - N - 1).
    Add { m: u128, s: u32 },
}

pub fn umagic(bits: u32, d: u128) -> Option<UMagic> {
    if !(2..=32).contains(&bits) || d < 3 || d > mask(bits) || d.is_power_of_two() {
        return None;
    }
    let n = bits;
    let l = 128 - (d - 1).leading_zeros(); // ceil(log2 d)
    for s in n..=n + l {
        let m = (1u128 << s).div_ceil(d);
        let e = m * d - (1u128 << s);
        // Exact for every x < 2^N when x * e < 2^s (see the module comment).
        if e * mask(n) < (1u128 << s) && m < (1u128 << n) {
            return Some(UMagic::Plain { m, s });
        }
    }
    let s = n + l;
    let m = (1u128 << s).div_ceil(d);
    let e = m * d - (1u128 << s);
    (e * mask(n) < (1u128 << s) && m < (1u128 << (n + 1)) && s > n).then_some(UMagic::Add {
        m: m - (1u128 << n),
        s,
    })
}

/// Signed magic number for N-bit division by |d| (3 ≤ |d| < 2^(N-1), not a power of two):
/// q = ((sext x * m) >>s s) - (x >>s (N-1)), negated for d < 0.
pub fn smagic(bits: u32, d: i128) -> Option<(u128, u32)> {
    let ad = d.unsigned_abs();
    if !(2..=32).contains(&bits) || ad < 3 || ad >= (1u128 << (bits - 1)) || ad.is_power_of_two() {
        return None;
    }
    let n = bits;
    let l = 128 - (ad - 1).leading_zeros();
    for s in (n - 1)..=(n - 1 + l) {
        let m = (1u128 << s).div_ceil(ad);
        let e = m * ad - (1u128 << s);
        if e > 0 && e << (n - 1) <= (1u128 << s) && m < (1u128 << n) {
            return Some((m, s));
        }
    }
    None
}

fn udiv_magic(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let n = t.int_bits()?;
    let d = unsigned(int_of(eg, s[v("?c")])?, n);
    let magic = umagic(n, d)?;
    let w = Ty::Int(2 * n);
    let x = s[v("?x")];
    let xw = cast(eg, Expr::ZExt, w, x);
    Some(match magic {
        UMagic::Plain { m, s: sh } => {
            let mm = iconst(eg, w, m as i128);
            let p = bin(eg, Expr::Mul, w, Flags::NONE, xw, mm);
            let ss = iconst(eg, w, sh as i128);
            let q = bin(eg, Expr::LShr, w, Flags::NONE, p, ss);
            cast(eg, Expr::Trunc, t, q)
        }
        UMagic::Add { m, s: sh } => {
            let mm = iconst(eg, w, m as i128);
            let p = bin(eg, Expr::Mul, w, Flags::NONE, xw, mm);
            let nn = iconst(eg, w, n as i128);
            let hi = bin(eg, Expr::LShr, w, Flags::NONE, p, nn);
            let tt = cast(eg, Expr::Trunc, t, hi);
            let diff = bin(eg, Expr::Sub, t, Flags::NONE, x, tt);
            let one = iconst(eg, t, 1);
            let half = bin(eg, Expr::LShr, t, Flags::NONE, diff, one);
            let sum = bin(eg, Expr::Add, t, Flags::NONE, half, tt);
            let rest = iconst(eg, t, (sh - n - 1) as i128);
            bin(eg, Expr::LShr, t, Flags::NONE, sum, rest)
        }
    })
}

fn sdiv_magic(eg: &mut EG, s: &Subst) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let n = t.int_bits()?;
    let d = int_of(eg, s[v("?c")])?;
    let (m, sh) = smagic(n, d)?;
    let w = Ty::Int(2 * n);
    let x = s[v("?x")];
    let xw = cast(eg, Expr::SExt, w, x);
    let mm = iconst(eg, w, m as i128);
    let p = bin(eg, Expr::Mul, w, Flags::NONE, xw, mm);
    let ss = iconst(eg, w, sh as i128);
    let hi = bin(eg, Expr::AShr, w, Flags::NONE, p, ss);
    let q0 = cast(eg, Expr::Trunc, t, hi);
    let top = iconst(eg, t, (n - 1) as i128);
    let sign = bin(eg, Expr::AShr, t, Flags::NONE, x, top);
    let q = bin(eg, Expr::Sub, t, Flags::NONE, q0, sign);
    if d < 0 {
        let zero = iconst(eg, t, 0);
        Some(bin(eg, Expr::Sub, t, Flags::NONE, zero, q))
    } else {
        Some(q)
    }
}

/// x rem c → x - (x / c) * c, for constants the division rules turn into multiplies.
fn rem_by_div(eg: &mut EG, s: &Subst, signed: bool) -> Option<Id> {
    let t = ty_of(eg, s[v("?t")])?;
    let n = t.int_bits()?;
    let c = int_of(eg, s[v("?c")])?;
    let ok = if signed {
        smagic(n, c).is_some()
    } else {
        umagic(n, unsigned(c, n)).is_some()
    };
    if !ok {
        return None;
    }
    let x = s[v("?x")];
    let cc = s[v("?c")];
    let op = if signed { Expr::SDiv } else { Expr::UDiv };
    let q = bin(eg, op, t, Flags::NONE, x, cc);
    let p = bin(eg, Expr::Mul, t, Flags::NONE, q, cc);
    Some(bin(eg, Expr::Sub, t, Flags::NONE, x, p))
}

fn urem_magic(eg: &mut EG, s: &Subst) -> Option<Id> {
    rem_by_div(eg, s, false)
}
fn srem_magic(eg: &mut EG, s: &Subst) -> Option<Id> {
    rem_by_div(eg, s, true)
}

/// (gep (gep p a) b) → (gep p (a + b)); inbounds kept only when both had it.
fn gep_gep(eg: &mut EG, s: &Subst) -> Option<Id> {
    let (a, b) = (s[v("?a")], s[v("?b")]);
    let it = ty_of(eg, a)?;
    if ty_of(eg, b)? != it {
        return None;
    }
    let t = ty_of(eg, s[v("?t")])?;
    let f = flags_of(eg, s[v("?f")])
        .and(flags_of(eg, s[v("?g")]))
        .and(Flags::INBOUNDS);
    let off = bin(eg, Expr::Add, it, Flags::NONE, a, b);
    Some(bin(eg, Expr::Gep, t, f, s[v("?p")], off))
}

fn contract_flags(eg: &EG, s: &Subst) -> Option<Flags> {
    let (f, g) = (flags_of(eg, s[v("?f")]), flags_of(eg, s[v("?g")]));
    (f.has(Flags::CONTRACT) && g.has(Flags::CONTRACT)).then(|| f.and(g).fmf())
}

fn fma_node(eg: &mut EG, t: Ty, f: Flags, a: Id, b: Id, c: Id) -> Id {
    let ty = ty_node(eg, t);
    let ff = fl(eg, f);
    eg.add(Expr::Fma([ty, ff, a, b, c]))
}

fn fneg(eg: &mut EG, t: Ty, f: Flags, x: Id) -> Id {
    let ty = ty_node(eg, t);
    let ff = fl(eg, f);
    eg.add(Expr::FNeg([ty, ff, x]))
}

/// a*b + c (contract on both) → fma(a, b, c).
fn fma_add(eg: &mut EG, s: &Subst) -> Option<Id> {
    let f = contract_flags(eg, s)?;
    let t = ty_of(eg, s[v("?t")])?;
    Some(fma_node(eg, t, f, s[v("?a")], s[v("?b")], s[v("?c")]))
}

/// a*b - c → fma(a, b, -c).
fn fma_sub(eg: &mut EG, s: &Subst) -> Option<Id> {
    let f = contract_flags(eg, s)?;
    let t = ty_of(eg, s[v("?t")])?;
    let nc = fneg(eg, t, f, s[v("?c")]);
    Some(fma_node(eg, t, f, s[v("?a")], s[v("?b")], nc))
}

/// c - a*b → fma(-a, b, c).
fn fma_rsub(eg: &mut EG, s: &Subst) -> Option<Id> {
    let f = contract_flags(eg, s)?;
    let t = ty_of(eg, s[v("?t")])?;
    let na = fneg(eg, t, f, s[v("?a")]);
    Some(fma_node(eg, t, f, na, s[v("?b")], s[v("?c")]))
}

/// x / c → x * (1/c): exact when c = ±2^k and 1/c is a normal number; any c under arcp.
fn fdiv_recip(eg: &mut EG, s: &Subst) -> Option<Id> {
    let (ty, c) = fval(eg, s[v("?c")])?;
    let f = flags_of(eg, s[v("?f")]);
    if c == 0.0 || !c.is_finite() {
        return None;
    }
    let r = 1.0 / c;
    let exact = c.is_normal() && c.abs().to_bits() & ((1u64 << 52) - 1) == 0;
    let rbits = match ty {
        Ty::F32 => {
            let r32 = r as f32;
            if !r32.is_normal() || (exact && r32 as f64 != r) {
                return None;
            }
            r32.to_bits() as u64
        }
        Ty::F64 => {
            if !r.is_normal() {
                return None;
            }
            r.to_bits()
        }
        _ => return None,
    };
    if !exact && !f.has(Flags::ARCP) {
        return None;
    }
    let rc = fconst(eg, ty, rbits);
    Some(bin(eg, Expr::FMul, ty, f, s[v("?x")], rc))
}

/// (fmul reassoc (fmul reassoc x c1) c2) → (fmul x (c1*c2)), flags intersected.
fn fmul_const_const(eg: &mut EG, s: &Subst) -> Option<Id> {
    let (f, g) = (flags_of(eg, s[v("?f")]), flags_of(eg, s[v("?g")]));
    if !(f.has(Flags::REASSOC) && g.has(Flags::REASSOC)) {
        return None;
    }
    let t = ty_of(eg, s[v("?t")])?;
    const_of(eg, s[v("?c1")])?;
    const_of(eg, s[v("?c2")])?;
    let k = bin(eg, Expr::FMul, t, Flags::NONE, s[v("?c1")], s[v("?c2")]);
    const_of(eg, k)?;
    Some(bin(eg, Expr::FMul, t, f.and(g).fmf(), s[v("?x")], k))
}

/// A narrower-to-wider cast of a cast collapses when the inner source type is the outer target.
fn same_type(a: &'static str, b: &'static str) -> impl Fn(&mut EG, Id, &Subst) -> bool {
    move |eg, _, s| {
        let (x, y) = (ty_of(eg, s[v(a)]), ty_of(eg, s[v(b)]));
        x.is_some() && x == y
    }
}

fn wider_than(a: &'static str, b: &'static str) -> impl Fn(&mut EG, Id, &Subst) -> bool {
    move |eg, _, s| match (int_bits_of(eg, s[v(a)]), int_bits_of(eg, s[v(b)])) {
        (Some(x), Some(y)) => x > y,
        _ => false,
    }
}

/// shift-of-shift by constants whose sum stays below the width.
fn shift_sum_ok(eg: &mut EG, _: Id, s: &Subst) -> bool {
    let Some(bits) = ty_of(eg, s[v("?t")]).and_then(Ty::int_bits) else {
        return false;
    };
    let k = |id: Id| int_of(eg, id).or_else(|| num_of(eg, id));
    match (k(s[v("?a")]), k(s[v("?b")])) {
        (Some(a), Some(b)) => {
            let (a, b) = (unsigned(a, bits), unsigned(b, bits));
            a < bits as u128 && b < bits as u128 && a + b < bits as u128
        }
        _ => false,
    }
}

macro_rules! rule {
    ($name:literal, $why:literal, $lhs:literal => $rhs:literal $(if $cond:expr)*) => {
        Rule { name: $name, why: $why, rewrite: rewrite!($name; $lhs => $rhs $(if $cond)*) }
    };
    ($name:literal, $why:literal, $lhs:literal => fn $f:expr) => {
        Rule { name: $name, why: $why, rewrite: rewrite!($name; $lhs => { Build($f) }) }
    };
}

/// The rule table.
pub fn table() -> &'static [Rule] {
    static TABLE: OnceLock<Vec<Rule>> = OnceLock::new();
    TABLE.get_or_init(build_table)
}

/// The rewrites of the table, for egg's runner.
pub fn rewrites() -> Vec<&'static Rw> {
    table().iter().map(|r| &r.rewrite).collect()
}

fn build_table() -> Vec<Rule> {
    let is_one = |x: f64| x == 1.0;
    vec![
        // --- canonical operand order --------------------------------------------------
        rule!("add-const-right", "x+y = y+x, and nsw/nuw are symmetric",
            "(add ?t ?f (iconst ?t ?c) ?x)" => "(add ?t ?f ?x (iconst ?t ?c))" if not_const("?x")),
        rule!("mul-const-right", "x*y = y*x, and nsw/nuw are symmetric",
            "(mul ?t ?f (iconst ?t ?c) ?x)" => "(mul ?t ?f ?x (iconst ?t ?c))" if not_const("?x")),
        rule!("and-const-right", "and is commutative and has no flags",
            "(and ?t ?f (iconst ?t ?c) ?x)" => "(and ?t ?f ?x (iconst ?t ?c))" if not_const("?x")),
        rule!("or-const-right", "or is commutative; disjoint is symmetric",
            "(or ?t ?f (iconst ?t ?c) ?x)" => "(or ?t ?f ?x (iconst ?t ?c))" if not_const("?x")),
        rule!("xor-const-right", "xor is commutative and has no flags",
            "(xor ?t ?f (iconst ?t ?c) ?x)" => "(xor ?t ?f ?x (iconst ?t ?c))" if not_const("?x")),
        // --- integer identities -------------------------------------------------------
        rule!("add-0", "x+0 = x and cannot overflow", "(add ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("sub-0", "x-0 = x and cannot overflow", "(sub ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("sub-self", "x-x = 0 for every non-poison x; poison may become anything",
            "(sub ?t ?f ?x ?x)" => "(iconst ?t 0)"),
        rule!("sub-const", "x-c = x+(-c) in wrapping arithmetic; flags dropped",
            "(sub ?t ?f ?x (iconst ?t ?c))" => "(add ?t - ?x (sub ?t - (iconst ?t 0) (iconst ?t ?c)))"),
        rule!("neg-neg", "0-(0-x) = x in wrapping arithmetic",
            "(sub ?t ?f (iconst ?t 0) (sub ?t ?g (iconst ?t 0) ?x))" => "?x"),
        rule!("mul-0", "x*0 = 0 (poison x may become 0)", "(mul ?t ?f ?x (iconst ?t 0))" => "(iconst ?t 0)"),
        rule!("mul-1", "x*1 = x and cannot overflow", "(mul ?t ?f ?x (iconst ?t 1))" => "?x"),
        rule!("mul-neg1", "x*-1 = 0-x in wrapping arithmetic; flags dropped",
            "(mul ?t ?f ?x (iconst ?t -1))" => "(sub ?t - (iconst ?t 0) ?x)"),
        rule!("mul-pow2", "x*2^k = x<<k; nuw means the same for both, nsw is dropped",
            "(mul ?t ?f ?x ?c)" => fn mul_pow2),
        rule!("and-0", "x&0 = 0", "(and ?t ?f ?x (iconst ?t 0))" => "(iconst ?t 0)"),
        rule!("and-ones", "x&-1 = x", "(and ?t ?f ?x (iconst ?t -1))" => "?x"),
        rule!("and-self", "x&x = x", "(and ?t ?f ?x ?x)" => "?x"),
        rule!("or-0", "x|0 = x (0 is disjoint from everything)", "(or ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("or-ones", "x|-1 = -1 (poison x may become -1)", "(or ?t ?f ?x (iconst ?t -1))" => "(iconst ?t -1)"),
        rule!("or-self", "x|x = x when not disjoint; a disjoint x|x is poison unless x=0, and then = x",
            "(or ?t ?f ?x ?x)" => "?x"),
        rule!("xor-0", "x^0 = x", "(xor ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("xor-self", "x^x = 0", "(xor ?t ?f ?x ?x)" => "(iconst ?t 0)"),
        rule!("shl-0", "x<<0 = x, no bit shifted out", "(shl ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("lshr-0", "x>>0 = x, exact holds trivially", "(lshr ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("ashr-0", "x>>0 = x, exact holds trivially", "(ashr ?t ?f ?x (iconst ?t 0))" => "?x"),
        rule!("shl-of-0", "0<<y = 0, or poison when y >= width", "(shl ?t ?f (iconst ?t 0) ?y)" => "(iconst ?t 0)"),
        rule!("lshr-of-0", "0>>y = 0, or poison when y >= width", "(lshr ?t ?f (iconst ?t 0) ?y)" => "(iconst ?t 0)"),
        rule!("shl-shl", "(x<<a)<<b = x<<(a+b) when a+b < width; flags dropped",
            "(shl ?t ?f (shl ?t ?g ?x (iconst ?t ?a)) (iconst ?t ?b))"
            => "(shl ?t - ?x (add ?t - (iconst ?t ?a) (iconst ?t ?b)))" if shift_sum_ok),
        rule!("lshr-lshr", "(x>>a)>>b = x>>(a+b) when a+b < width; flags dropped",
            "(lshr ?t ?f (lshr ?t ?g ?x (iconst ?t ?a)) (iconst ?t ?b))"
            => "(lshr ?t - ?x (add ?t - (iconst ?t ?a) (iconst ?t ?b)))" if shift_sum_ok),
        rule!("ashr-ashr", "(x>>a)>>b = x>>(a+b) (arithmetic) when a+b < width",
            "(ashr ?t ?f (ashr ?t ?g ?x (iconst ?t ?a)) (iconst ?t ?b))"
            => "(ashr ?t - ?x (add ?t - (iconst ?t ?a) (iconst ?t ?b)))" if shift_sum_ok),
        rule!("shl-lshr-mask", "(x<<c)>>c clears the top c bits: x & (-1>>c); c >= width was poison",
            "(lshr ?t ?f (shl ?t ?g ?x (iconst ?t ?c)) (iconst ?t ?c))"
            => "(and ?t - ?x (lshr ?t - (iconst ?t -1) (iconst ?t ?c)))"),
        // --- reassociation of integer (index) arithmetic ------------------------------
        rule!("add-add-const", "(x+a)+b = x+(a+b) in wrapping arithmetic; flags dropped",
            "(add ?t ?f (add ?t ?g ?x (iconst ?t ?a)) (iconst ?t ?b))"
            => "(add ?t - ?x (add ?t - (iconst ?t ?a) (iconst ?t ?b)))"),
        rule!("add-const-out-l", "(x+c)+y = (x+y)+c: constants move outward so x+y can be shared",
            "(add ?t ?f (add ?t ?g ?x (iconst ?t ?c)) ?y)"
            => "(add ?t - (add ?t - ?x ?y) (iconst ?t ?c))" if not_const("?y")),
        rule!("add-const-out-r", "y+(x+c) = (y+x)+c: constants move outward so y+x can be shared",
            "(add ?t ?f ?y (add ?t ?g ?x (iconst ?t ?c)))"
            => "(add ?t - (add ?t - ?y ?x) (iconst ?t ?c))" if not_const("?y")),
        rule!("mul-mul-const", "(x*a)*b = x*(a*b) in wrapping arithmetic; flags dropped",
            "(mul ?t ?f (mul ?t ?g ?x (iconst ?t ?a)) (iconst ?t ?b))"
            => "(mul ?t - ?x (mul ?t - (iconst ?t ?a) (iconst ?t ?b)))"),
        rule!("mul-add-const", "(x+c)*y = x*y + c*y (distributive, wrapping); shares x*y",
            "(mul ?t ?f (add ?t ?g ?x (iconst ?t ?c)) ?y)"
            => "(add ?t - (mul ?t - ?x ?y) (mul ?t - ?y (iconst ?t ?c)))"),
        rule!("shl-add-const", "(x+c)<<s = (x<<s) + (c<<s) in wrapping arithmetic",
            "(shl ?t ?f (add ?t ?g ?x (iconst ?t ?c)) (iconst ?t ?s))"
            => "(add ?t - (shl ?t - ?x (iconst ?t ?s)) (shl ?t - (iconst ?t ?c) (iconst ?t ?s)))"),
        rule!("sext-add-nsw", "sext(x+y) = sext x + sext y when x+y does not overflow (nsw), and \
               the wide sum of two sign-extended values cannot overflow, so nsw holds",
            "(sext ?t ?f (add ?u nsw ?x ?y))" => "(add ?t nsw (sext ?t - ?x) (sext ?t - ?y))"),
        rule!("sext-add-nsw-nuw", "as sext-add-nsw (nuw adds nothing to the argument)",
            "(sext ?t ?f (add ?u nsw.nuw ?x ?y))" => "(add ?t nsw (sext ?t - ?x) (sext ?t - ?y))"),
        rule!("zext-add-nuw", "zext(x+y) = zext x + zext y when x+y does not wrap (nuw); the \
               wide sum of two zero-extended values cannot wrap, so nuw holds",
            "(zext ?t ?f (add ?u nuw ?x ?y))" => "(add ?t nuw (zext ?t - ?x) (zext ?t - ?y))"),
        rule!("zext-add-nsw-nuw", "as zext-add-nuw",
            "(zext ?t ?f (add ?u nsw.nuw ?x ?y))" => "(add ?t nuw (zext ?t - ?x) (zext ?t - ?y))"),
        rule!("zext-nneg-sext", "zext nneg x is poison for negative x and equals sext x otherwise",
            "(zext ?t nneg ?x)" => "(sext ?t - ?x)"),
        rule!("gep-0", "p + 0 = p (inbounds on a zero offset only restates p)", "(gep ?t ?f ?p (iconst ?u 0))" => "?p"),
        rule!("gep-gep", "(p+a)+b = p+(a+b); inbounds kept when both steps were inbounds",
            "(gep ?t ?f (gep ?t ?g ?p ?a) ?b)" => fn gep_gep),
        rule!("gep-const-out", "p+(x+c) = (p+x)+c: the constant goes to the addressing mode and \
               p+x is shared; flags dropped",
            "(gep ?t ?f ?p (add ?u ?g ?x (iconst ?u ?c)))" => "(gep ?t - (gep ?t - ?p ?x) (iconst ?u ?c))"),
        // --- division and remainder by constants --------------------------------------
        rule!("udiv-1", "x/1 = x", "(udiv ?t ?f ?x (iconst ?t 1))" => "?x"),
        rule!("sdiv-1", "x/1 = x", "(sdiv ?t ?f ?x (iconst ?t 1))" => "?x"),
        rule!("urem-1", "x%1 = 0", "(urem ?t ?f ?x (iconst ?t 1))" => "(iconst ?t 0)"),
        rule!("srem-1", "x%1 = 0", "(srem ?t ?f ?x (iconst ?t 1))" => "(iconst ?t 0)"),
        rule!("udiv-pow2", "x/2^k = x>>k (unsigned); exact means the same for both",
            "(udiv ?t ?f ?x ?c)" => fn udiv_pow2),
        rule!("urem-pow2", "x%2^k = x & (2^k-1) (unsigned)", "(urem ?t ?f ?x ?c)" => fn urem_pow2),
        rule!("sdiv-pow2", "x/±2^k rounds toward zero: add 2^k-1 to negative x, shift arithmetically \
               (exact: a plain ashr exact); negate for a negative divisor",
            "(sdiv ?t ?f ?x ?c)" => fn sdiv_pow2),
        rule!("srem-pow2", "x%±2^k = x - (x rounded toward zero to a multiple of 2^k)",
            "(srem ?t ?f ?x ?c)" => fn srem_pow2),
        rule!("udiv-magic", "x/d = (x*m)>>s in 2N bits with m = ceil(2^s/d) and (2^N-1)*(m*d-2^s) < 2^s \
               (Granlund-Montgomery), or the 'add' form when m needs N+1 bits; N <= 32",
            "(udiv ?t ?f ?x ?c)" => fn udiv_magic),
        rule!("sdiv-magic", "x/d = floor(x*m/2^s) + [x<0] with m = ceil(2^s/|d|), 0 < m|d|-2^s and \
               2^(N-1)*(m|d|-2^s) <= 2^s; negated for d < 0; N <= 32",
            "(sdiv ?t ?f ?x ?c)" => fn sdiv_magic),
        rule!("urem-magic", "x%d = x - (x/d)*d (unsigned, d not 0), so that udiv-magic applies",
            "(urem ?t ?f ?x ?c)" => fn urem_magic),
        rule!("srem-magic", "x%d = x - (x/d)*d (signed, d not 0 or -1), so that sdiv-magic applies",
            "(srem ?t ?f ?x ?c)" => fn srem_magic),
        // --- comparisons and selects --------------------------------------------------
        rule!("icmp-eq-self", "x == x", "(icmp eq ?f ?x ?x)" => "(iconst i1 -1)"),
        rule!("icmp-ne-self", "x != x is false", "(icmp ne ?f ?x ?x)" => "(iconst i1 0)"),
        rule!("icmp-ult-self", "x < x is false", "(icmp ult ?f ?x ?x)" => "(iconst i1 0)"),
        rule!("icmp-slt-self", "x < x is false", "(icmp slt ?f ?x ?x)" => "(iconst i1 0)"),
        rule!("icmp-ugt-self", "x > x is false", "(icmp ugt ?f ?x ?x)" => "(iconst i1 0)"),
        rule!("icmp-sgt-self", "x > x is false", "(icmp sgt ?f ?x ?x)" => "(iconst i1 0)"),
        rule!("icmp-ule-self", "x <= x", "(icmp ule ?f ?x ?x)" => "(iconst i1 -1)"),
        rule!("icmp-sle-self", "x <= x", "(icmp sle ?f ?x ?x)" => "(iconst i1 -1)"),
        rule!("icmp-uge-self", "x >= x", "(icmp uge ?f ?x ?x)" => "(iconst i1 -1)"),
        rule!("icmp-sge-self", "x >= x", "(icmp sge ?f ?x ?x)" => "(iconst i1 -1)"),
        rule!("select-same", "c ? x : x = x (a poison c may become x)", "(select ?t ?f ?c ?x ?x)" => "?x"),
        rule!("select-true", "true ? a : b = a", "(select ?t ?f (iconst i1 -1) ?a ?b)" => "?a"),
        rule!("select-false", "false ? a : b = b", "(select ?t ?f (iconst i1 0) ?a ?b)" => "?b"),
        rule!("smin-self", "min(x,x) = x", "(smin ?t ?f ?x ?x)" => "?x"),
        rule!("smax-self", "max(x,x) = x", "(smax ?t ?f ?x ?x)" => "?x"),
        rule!("umin-self", "min(x,x) = x", "(umin ?t ?f ?x ?x)" => "?x"),
        rule!("umax-self", "max(x,x) = x", "(umax ?t ?f ?x ?x)" => "?x"),
        // --- casts --------------------------------------------------------------------
        rule!("trunc-zext", "trunc(zext x) back to x's type = x",
            "(trunc ?t ?f (zext ?u ?g ?x))" => "?x" if same_type("?t", "?x")),
        rule!("trunc-sext", "trunc(sext x) back to x's type = x",
            "(trunc ?t ?f (sext ?u ?g ?x))" => "?x" if same_type("?t", "?x")),
        rule!("zext-zext", "zext(zext x) = zext x; nneg dropped",
            "(zext ?t ?f (zext ?u ?g ?x))" => "(zext ?t - ?x)"),
        rule!("sext-sext", "sext(sext x) = sext x", "(sext ?t ?f (sext ?u ?g ?x))" => "(sext ?t - ?x)"),
        rule!("sext-zext", "sext(zext x) = zext x: the zext made the sign bit 0",
            "(sext ?t ?f (zext ?u ?g ?x))" => "(zext ?t - ?x)" if wider_than("?u", "?x")),
        rule!("trunc-trunc", "trunc(trunc x) = trunc x; flags dropped",
            "(trunc ?t ?f (trunc ?u ?g ?x))" => "(trunc ?t - ?x)"),
        // --- floating point (exact identities) ----------------------------------------
        rule!("fneg-fneg", "-(-x) = x bit for bit (fneg only flips the sign bit)",
            "(fneg ?t ?f (fneg ?t ?g ?x))" => "?x"),
        rule!("fadd-negzero", "x + -0.0 = x for every x, signed zeros included",
            "(fadd ?t ?f ?x ?c)" => "?x" if fconst_is("?c", |x| x == 0.0 && x.is_sign_negative())),
        rule!("fsub-poszero", "x - +0.0 = x for every x, signed zeros included",
            "(fsub ?t ?f ?x ?c)" => "?x" if fconst_is("?c", |x| x == 0.0 && x.is_sign_positive())),
        rule!("fsub-from-negzero", "-0.0 - x = fneg x (LLVM's own canonical identity; NaN sign aside)",
            "(fsub ?t ?f ?c ?x)" => "(fneg ?t ?f ?x)" if fconst_is("?c", |x| x == 0.0 && x.is_sign_negative())),
        rule!("fmul-1", "x * 1.0 = x", "(fmul ?t ?f ?x ?c)" => "?x" if fconst_is("?c", is_one)),
        rule!("fdiv-1", "x / 1.0 = x", "(fdiv ?t ?f ?x ?c)" => "?x" if fconst_is("?c", is_one)),
        rule!("fmul-neg1", "x * -1.0 = fneg x (exact; flags carry over)",
            "(fmul ?t ?f ?x ?c)" => "(fneg ?t ?f ?x)" if fconst_is("?c", |x| x == -1.0)),
        rule!("fdiv-recip", "x / c = x * (1/c) exactly when c = ±2^k with a normal 1/c; for any \
               finite c under arcp",
            "(fdiv ?t ?f ?x ?c)" => fn fdiv_recip),
        rule!("fmul-const-const", "(x*c1)*c2 = x*(c1*c2) only under reassoc on both",
            "(fmul ?t ?f (fmul ?t ?g ?x ?c1) ?c2)" => fn fmul_const_const),
        rule!("fmuladd-fma", "llvm.fmuladd may fuse: fma is one of its allowed results",
            "(fmuladd ?t ?f ?a ?b ?c)" => "(fma ?t ?f ?a ?b ?c)"),
        rule!("fma-add", "a*b+c → fma(a,b,c) where contract is on the fmul and the fadd",
            "(fadd ?t ?f (fmul ?t ?g ?a ?b) ?c)" => fn fma_add),
        rule!("fma-add-r", "c+a*b → fma(a,b,c) where contract is on both",
            "(fadd ?t ?f ?c (fmul ?t ?g ?a ?b))" => fn fma_add),
        rule!("fma-sub", "a*b-c → fma(a,b,-c) where contract is on both (fneg is exact)",
            "(fsub ?t ?f (fmul ?t ?g ?a ?b) ?c)" => fn fma_sub),
        rule!("fma-rsub", "c-a*b → fma(-a,b,c) where contract is on both (fneg is exact)",
            "(fsub ?t ?f ?c (fmul ?t ?g ?a ?b))" => fn fma_rsub),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_builds_and_names_are_unique() {
        let t = table();
        let mut names: Vec<_> = t.iter().map(|r| r.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), t.len());
        assert!(t.iter().all(|r| !r.why.is_empty()));
    }

    #[test]
    fn magic_numbers_are_exact_for_8_and_16_bits() {
        for bits in [8u32, 16] {
            let n = 1u128 << bits;
            for d in 3..n.min(1000) {
                let Some(m) = umagic(bits, d) else { continue };
                for x in 0..n {
                    let q = match m {
                        UMagic::Plain { m, s } => (x * m) >> s,
                        UMagic::Add { m, s } => {
                            let t = (x * m) >> bits;
                            (t + ((x - t) >> 1)) >> (s - bits - 1)
                        }
                    };
                    assert_eq!(q, x / d, "udiv i{bits} {x} / {d}");
                }
            }
            let half = 1i128 << (bits - 1);
            for d in (-(half - 1)..half).filter(|d| d.abs() < 300) {
                let Some((m, s)) = smagic(bits, d) else {
                    continue;
                };
                for x in -half..half {
                    let q0 = (x * m as i128) >> s;
                    let mut q = q0 - (x >> (bits - 1));
                    if d < 0 {
                        q = -q;
                    }
                    assert_eq!(q, x / d, "sdiv i{bits} {x} / {d}");
                }
            }
        }
    }

    #[test]
    fn magic_numbers_exist_for_common_32_bit_divisors() {
        for d in [3u128, 5, 7, 10, 12, 25, 100, 641, 1000, 0xffff_fffe] {
            assert!(umagic(32, d).is_some(), "udiv by {d}");
        }
        assert!(matches!(umagic(32, 7), Some(UMagic::Add { .. })));
        for d in [3i128, -3, 7, 10, -10, 1000, 0x3fff_ffff] {
            assert!(smagic(32, d).is_some(), "sdiv by {d}");
        }
    }
}
