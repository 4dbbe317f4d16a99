//! The shared-memory tiling rule: a template whose tile depth `R3_TK` is a knob, with register
//! blocking (`R3_RX`, `R3_RY`) where the kernel allows it.
//!
//! It applies to kernels with one thread per output element that reduce over a loop
//! `for (int k = S; k < E; ++k)`, reading operands `P[index]` whose index depends on `k`, on
//! at most one of the thread's coordinates (`blockIdx.x * blockDim.x + threadIdx.x` or the
//! `.y` form) and on uniform values (scalar parameters) only: `A[row * n + k]`,
//! `B[k * n + col]`, `A[j * m + k]`, `x[k]`. The rewrite adds a path in front of the original
//! code, taken by blocks of the recorded shape whose threads are all active
//! (`__syncthreads_and`): the block loads each operand's values for `R3_TK` steps of `k`
//! into shared memory, cooperatively and in the order that makes the loads contiguous, and
//! each thread reduces over the tile. Every value a tile holds is one the original code reads
//! from a thread of that block, so no new address is read; other blocks (edges, triangles,
//! other shapes) run the original code unchanged. The reduction keeps its order, so results
//! are those of the original loop.
//!
//! Register blocking comes with it where everything a thread computes follows from its
//! coordinates (see `Blocking`): knobs `R3_RX` and `R3_RY` group blocks, the group's first
//! block computes every output of the group, each thread one per block of the group with its
//! sums held in registers, and the others return. Each output is still the one the same
//! thread of its own block computes in the original, with its sum in the same order.
//!
//! A tile index is produced by text substitution, not algebra: a tile element is loaded with
//! the operand's own index expression, evaluated with `k` and the coordinate set to the
//! element's (shadowing declarations), so whatever arithmetic the index holds is kept as is.

use super::kernel_text::{self as text, Facts, Parsed};
use super::source::{self, Kind};
use std::collections::HashSet;
use std::ops::Range;

/// The knob's name and the tile depths offered.
const KNOB: &str = "R3_TK";
const DEPTHS: &[u32] = &[8, 16, 32, 64];
/// The register-blocking knobs (outputs per thread along x and y) and their factors.
const BLOCK_X_KNOB: &str = "R3_RX";
const BLOCK_Y_KNOB: &str = "R3_RY";
const BLOCKING: &[u32] = &[1, 2, 4];
/// The knob for how many of a thread's tile loads go out before the first of their stores
/// waits (the load loop's unroll), and its values.
const LOADS_KNOB: &str = "R3_LU";
const LOADS: &[u32] = &[4, 32];
/// Static shared memory a block may use without opting in.
const SHARED_LIMIT: u32 = 48 * 1024;

/// Words an index may hold besides the loop variable, coordinates and scalar parameters.
const CAST_WORDS: &[&str] = &[
    "static_cast",
    "size_t",
    "int",
    "long",
    "unsigned",
    "ptrdiff_t",
    "int64_t",
    "uint64_t",
];

pub(crate) const TYPE_WORDS: &[&str] = &[
    "int",
    "unsigned",
    "long",
    "size_t",
    "const",
    "float",
    "double",
    "auto",
    "bool",
    "char",
    "short",
    "int64_t",
    "uint64_t",
    "ptrdiff_t",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Axis {
    X,
    Y,
    None,
}

/// A thread coordinate variable: its name, axis and declared type.
#[derive(Debug, Clone)]
pub(crate) struct Coord {
    pub(crate) name: String,
    pub(crate) axis: Axis,
    ty: String,
    /// The block extent it is computed with where that is not `blockDim` (`blockIdx.x *
    /// TILE + threadIdx.x`): the tiled path is taken only where it equals the recorded one.
    stride: Option<String>,
}

/// One operand read through a tile.
#[derive(Debug, Clone)]
struct Operand {
    /// `P[index]` as written (token range and text).
    text: String,
    pointer: String,
    index: String,
    axis: Axis,
    coord: Option<Coord>,
    /// The locals derived from `coord` that `index` uses (directly or through each other), in
    /// the order they are declared: a tile element's load declares each again.
    derived: Vec<Derived>,
    elem: String,
    /// Consecutive `k` are consecutive addresses.
    k_contiguous: bool,
}

/// A local computed from one thread coordinate and uniform values only, never assigned again:
/// `int b = t / out, o = t % out;` of a kernel with one flat thread index. Per thread it is
/// what the coordinate makes it, so a tile element's load computes it again from the element's.
#[derive(Debug, Clone)]
struct Derived {
    ty: String,
    name: String,
    init: String,
    /// The coordinate it follows from.
    coord: String,
}

/// The loop being tiled.
struct Loop {
    stmt: Range<usize>,
    var: String,
    var_ty: String,
    start: String,
    end: String,
    body: Range<usize>,
}

pub fn shared_tiling(src: &str, facts: &Facts) -> Option<String> {
    if facts.pointers_disjoint == Some(false) || src.contains(KNOB) {
        return None;
    }
    // Row pointers read through their bases, so that their loads are seen as the parameters'.
    let inlined = crate::alias::inline_row_pointers(src);
    let src = inlined.as_deref().unwrap_or(src);
    let block = facts.block?;
    if block[2] != 1 || block[0] * block[1] > 1024 || block[0] * block[1] < 2 {
        return None;
    }
    let p = text::parse(src)?;
    if (p.kernel.body.clone()).any(|i| text::synchronizes(p.w(i)) || p.w(i) == "goto") {
        return None;
    }
    let stmts = statements(&p, p.kernel.body.clone());
    let (prefix, coords) = prefix_and_coords(&p, &stmts);
    let (guard, active, rest) = guard_of(&p, &stmts[prefix..])?;
    let scalars = scalar_params(&p);
    let lp = rest
        .iter()
        .find_map(|r| reduction_loop(&p, r.clone(), &scalars))?;
    if rest.iter().any(|r| {
        r.clone()
            .any(|i| matches!(p.w(i), "return" | "break" | "continue"))
    }) {
        return None;
    }
    let before: Vec<Range<usize>> = rest
        .iter()
        .take_while(|r| r.start < lp.stmt.start)
        .cloned()
        .collect();
    let declared: Vec<Range<usize>> = stmts[..prefix].iter().chain(&before).cloned().collect();
    let derived = derived_locals(&p, &declared, &coords, &scalars);
    let operands = operands(&p, &lp, &coords, &derived, &scalars);
    if operands.is_empty() {
        return None;
    }
    let after: Vec<Range<usize>> = rest
        .iter()
        .filter(|r| r.start >= lp.stmt.end)
        .cloned()
        .collect();
    // A derived local is one more per-thread value that grouped outputs would each need
    // declared anew: not offered with them.
    let blocking = derived
        .is_empty()
        .then(|| {
            blocking(
                &p,
                &stmts[..prefix],
                &coords,
                guard.start..p.kernel.body.end,
                &before,
            )
        })
        .flatten();
    let strides = coords
        .iter()
        .filter_map(|c| {
            let e = c.stride.as_ref()?;
            Some(format!("({e}) == {}", width(block, c.axis)))
        })
        .collect();
    let shape = Shape {
        bx: block[0],
        by: block[1],
        blocking,
        strides,
    };
    let at = p.toks[guard.start].span.0;
    let (ind, _) = text::indent_at(p.src, at);
    let parts = Parts {
        p: &p,
        lp: &lp,
        ops: &operands,
        shape: &shape,
    };
    let branch = parts.branch(&active, &before, &after, ind);
    let kernel_start = p.kernel.span.start;
    let body = text::edit(src, vec![(at, at, branch)]);
    let decls = declarations(&shape, &operands);
    Some(format!(
        "{}{}{}",
        &body[..kernel_start],
        decls,
        &body[kernel_start..]
    ))
}

/// The knobs and their constraint: the tiles must fit the static shared memory.
fn declarations(shape: &Shape, ops: &[Operand]) -> String {
    let depths: Vec<String> = DEPTHS.iter().map(u32::to_string).collect();
    let mut out = format!("R3_PARAM({KNOB}, {})\n", depths.join(", "));
    let blocked: Vec<&str> = [Axis::X, Axis::Y]
        .into_iter()
        .filter_map(|a| shape.knob(a))
        .collect();
    for k in &blocked {
        let factors: Vec<String> = BLOCKING.iter().map(u32::to_string).collect();
        out.push_str(&format!("R3_PARAM({k}, {})\n", factors.join(", ")));
    }
    if shape.loads_knob() {
        let unrolls: Vec<String> = LOADS.iter().map(u32::to_string).collect();
        out.push_str(&format!("R3_PARAM({LOADS_KNOB}, {})\n", unrolls.join(", ")));
    }
    let per_step = if blocked.is_empty() {
        ops.iter()
            .map(|o| (width(shape.block(), o.axis) + 1) * elem_bytes(&o.elem))
            .sum::<u32>()
            .to_string()
    } else {
        let terms: Vec<String> = ops
            .iter()
            .map(|o| format!("{} * ({} + 1)", elem_bytes(&o.elem), shape.width(o.axis)))
            .collect();
        format!("({})", terms.join(" + "))
    };
    out.push_str(&format!(
        "R3_REQUIRE({KNOB} * {per_step} <= {SHARED_LIMIT})\n"
    ));
    out
}

fn width(block: [u32; 3], axis: Axis) -> u32 {
    match axis {
        Axis::X => block[0],
        Axis::Y => block[1],
        Axis::None => 1,
    }
}

fn elem_bytes(elem: &str) -> u32 {
    match elem {
        "float" | "int" | "unsigned" | "unsigned int" => 4,
        "short" | "unsigned short" | "__half" => 2,
        "char" | "unsigned char" | "signed char" => 1,
        _ => 8,
    }
}

pub(crate) use text::span_text;

/// Top-level statements of a token range: (token range of each, ending at its last token).
pub(crate) fn statements(p: &Parsed, r: Range<usize>) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = r.start;
    while i < r.end {
        if p.toks[i].kind == Kind::Directive {
            i += 1;
            continue;
        }
        let end = statement_end(p, i, r.end);
        out.push(i..end);
        i = end;
    }
    out
}

/// The token after the statement that starts at `i`.
pub(crate) fn statement_end(p: &Parsed, i: usize, limit: usize) -> usize {
    let m = |j: usize| source::matching(p.src, &p.toks, j).map_or(limit, |c| c + 1);
    match p.w(i) {
        "{" => m(i),
        "if" | "for" | "while" if p.w(i + 1) == "(" => {
            let mut j = m(i + 1);
            while j < limit && p.toks[j].kind == Kind::Directive {
                j += 1;
            }
            let mut end = if j < limit {
                statement_end(p, j, limit)
            } else {
                limit
            };
            if p.w(i) == "if" && p.w(end) == "else" && end < limit {
                end = statement_end(p, end + 1, limit);
            }
            end
        }
        _ => {
            let mut j = i;
            while j < limit && p.w(j) != ";" {
                if matches!(p.w(j), "(" | "[" | "{") {
                    j = m(j);
                    continue;
                }
                j += 1;
            }
            (j + 1).min(limit)
        }
    }
}

/// How many leading statements are declarations, and the thread coordinates among them.
pub(crate) fn prefix_and_coords(p: &Parsed, stmts: &[Range<usize>]) -> (usize, Vec<Coord>) {
    let mut coords = Vec::new();
    let mut n = 0;
    for s in stmts {
        if !TYPE_WORDS.contains(&p.w(s.start)) {
            break;
        }
        n += 1;
        let Some(eq) = s.clone().find(|&i| p.w(i) == "=") else {
            continue;
        };
        let name_at = eq - 1;
        if p.toks[name_at].kind != Kind::Ident {
            continue;
        }
        let init = without_casts(p, eq + 1..s.end - 1);
        let Some((axis, stride)) = coordinate_form(&init) else {
            continue;
        };
        let name = p.w(name_at).to_owned();
        if assigned_again(p, &name, name_at) {
            continue;
        }
        let ty = type_text(p, s.start..name_at);
        coords.push(Coord {
            name,
            axis,
            ty,
            stride,
        });
    }
    (n, coords)
}

/// The axis of a coordinate's initializer (as `without_casts` writes it): the block's index
/// times its extent plus the thread's, in either order, and the extent where it is a constant or
/// a parameter (a single name or number) instead of `blockDim`.
fn coordinate_form(init: &str) -> Option<(Axis, Option<String>)> {
    let name = |e: &str| {
        e.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let number = |e: &str| {
        let digits = e.trim_end_matches(['u', 'U']);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    };
    let single = |e: &str| name(e) || number(e);
    for (axis, a) in [(Axis::X, "x"), (Axis::Y, "y")] {
        let (b, t, d) = (
            format!("blockIdx.{a}"),
            format!("threadIdx.{a}"),
            format!("blockDim.{a}"),
        );
        let product = init
            .strip_suffix(&format!("+{t}"))
            .or_else(|| init.strip_prefix(&format!("{t}+")));
        let Some(product) = product else { continue };
        let extent = product
            .strip_prefix(&format!("{b}*"))
            .or_else(|| product.strip_suffix(&format!("*{b}")));
        match extent {
            Some(e) if e == d => return Some((axis, None)),
            Some(e) if single(e) => return Some((axis, Some(e.to_owned()))),
            _ => {}
        }
    }
    None
}

/// The text of tokens `r` without spaces, a cast of `blockIdx`, `blockDim` or `threadIdx` taken
/// off (`static_cast<size_t>(blockIdx.x)`, `(size_t)blockIdx.x`): a coordinate computed in 64
/// bits is still one. Parentheses around anything else stay, so `blockIdx.x * (blockDim.x +
/// threadIdx.x)` is not read as a coordinate.
fn without_casts(p: &Parsed, r: Range<usize>) -> String {
    let builtin = |i: usize| {
        matches!(p.w(i), "blockIdx" | "blockDim" | "threadIdx")
            && p.w(i + 1) == "."
            && matches!(p.w(i + 2), "x" | "y" | "z")
    };
    let types_to = |from: usize, close: &str| {
        (from..r.end)
            .take_while(|&j| TYPE_WORDS.contains(&p.w(j)))
            .last()
            .map(|j| j + 1)
            .filter(|&j| j < r.end && p.w(j) == close)
    };
    let mut out = String::new();
    let mut i = r.start;
    while i < r.end {
        // static_cast<T>(B.x) -> B.x
        if p.w(i) == "static_cast" && p.w(i + 1) == "<" {
            if let Some(gt) = types_to(i + 2, ">") {
                if p.w(gt + 1) == "(" && builtin(gt + 2) && p.w(gt + 5) == ")" && gt + 5 < r.end {
                    out.extend((gt + 2..gt + 5).map(|j| p.w(j)));
                    i = gt + 6;
                    continue;
                }
            }
        }
        // (T)B.x -> B.x
        if p.w(i) == "(" {
            if let Some(close) = types_to(i + 1, ")") {
                if builtin(close + 1) && close + 3 < r.end {
                    i = close + 1;
                    continue;
                }
            }
        }
        out.push_str(p.w(i));
        i += 1;
    }
    out
}

/// `expr` (a block's index or extent, unsigned 32-bit) as a coordinate of type `ty` computes
/// it: widened first where `ty` is wider than 32 bits, as a coordinate declared `size_t` is.
fn widened(ty: &str, expr: &str) -> String {
    let wide = ["size_t", "long", "int64_t", "uint64_t", "ptrdiff_t"]
        .iter()
        .any(|w| ty.split(' ').any(|t| t == *w));
    if wide {
        format!("static_cast<{ty}>({expr})")
    } else {
        expr.to_owned()
    }
}

/// The declared type of tokens `r` (a declaration's leading words), without `const`.
fn type_text(p: &Parsed, r: Range<usize>) -> String {
    r.map(|i| p.w(i))
        .filter(|w| *w != "const")
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `name`, declared at token `decl`, is assigned, stepped or has its address taken
/// anywhere in the kernel's body.
pub(crate) fn assigned_again(p: &Parsed, name: &str, decl: usize) -> bool {
    p.kernel.body.clone().any(|i| {
        i != decl
            && p.w(i) == name
            && (text::ASSIGN.contains(&p.w(i + 1))
                || matches!(p.w(i + 1), "++" | "--")
                || matches!(p.w(i - 1), "++" | "--" | "&"))
    })
}

/// The locals of `stmts` (declarations) derived from one thread coordinate (see `Derived`),
/// each declarator of a statement on its own: `int b = t / out, o = t % out;`. An initializer
/// may use the coordinate, locals derived from it before, scalar parameters, casts, numbers
/// and operators; nothing that reads memory, calls or chooses.
fn derived_locals(
    p: &Parsed,
    stmts: &[Range<usize>],
    coords: &[Coord],
    scalars: &HashSet<String>,
) -> Vec<Derived> {
    let mut out: Vec<Derived> = Vec::new();
    for s in stmts {
        let first_name = (s.start..s.end).find(|&i| !TYPE_WORDS.contains(&p.w(i)));
        let Some(first_name) = first_name.filter(|&i| i > s.start) else {
            continue;
        };
        let ty = type_text(p, s.start..first_name);
        let mut at = first_name;
        while at < s.end {
            let end = (at..s.end)
                .find(|&i| matches!(p.w(i), "," | ";"))
                .unwrap_or(s.end);
            if let Some(d) = derived_one(p, at..end, &ty, coords, &out, scalars) {
                out.push(d);
            }
            at = end + 1;
        }
    }
    out
}

/// One declarator `name = init` (tokens `r`) as a `Derived`, where it is one.
fn derived_one(
    p: &Parsed,
    r: Range<usize>,
    ty: &str,
    coords: &[Coord],
    earlier: &[Derived],
    scalars: &HashSet<String>,
) -> Option<Derived> {
    if r.len() < 3 || p.toks[r.start].kind != Kind::Ident || p.w(r.start + 1) != "=" {
        return None;
    }
    let name = p.w(r.start);
    let init = r.start + 2..r.end;
    let mut base: Option<&str> = None;
    for i in init.clone() {
        let w = p.w(i);
        if matches!(w, "[" | "?" | "=" | "&&" | "||" | "{") {
            return None;
        }
        if p.toks[i].kind != Kind::Ident {
            continue;
        }
        let follows = coords
            .iter()
            .find(|c| c.name == w)
            .map(|c| c.name.as_str())
            .or_else(|| {
                earlier
                    .iter()
                    .find(|d| d.name == w)
                    .map(|d| d.coord.as_str())
            });
        match follows {
            Some(c) if base.is_none_or(|b| b == c) => base = Some(c),
            Some(_) => return None,
            None if CAST_WORDS.contains(&w) => {}
            None if scalars.contains(w) && p.w(i + 1) != "(" => {}
            None => return None,
        }
    }
    let coord = base?.to_owned();
    if assigned_again(p, name, r.start) || coords.iter().any(|c| c.name == name) {
        return None;
    }
    Some(Derived {
        ty: ty.to_owned(),
        name: name.to_owned(),
        init: span_text(p, init),
        coord,
    })
}

/// The statement that keeps inactive threads out, the condition under which a thread is
/// active, and the statements that active threads run: `if (c) return; rest…`, `if (c) {
/// rest }` as the last statement, or no guard at all.
fn guard_of(
    p: &Parsed,
    stmts: &[Range<usize>],
) -> Option<(Range<usize>, String, Vec<Range<usize>>)> {
    let first = stmts.first()?.clone();
    if p.w(first.start) != "if" {
        return Some((first, "true".into(), stmts.to_vec()));
    }
    let close = source::matching(p.src, &p.toks, first.start + 1)?;
    let cond = span_text(p, first.start + 2..close);
    let then = close + 1;
    if p.w(then) == "return" && p.w(then + 1) == ";" && first.end == then + 2 {
        return Some((first, format!("!({cond})"), stmts[1..].to_vec()));
    }
    if p.w(then) == "{" && stmts.len() == 1 {
        let end = source::matching(p.src, &p.toks, then)?;
        if end + 1 != first.end {
            return None; // an else branch
        }
        return Some((first, format!("({cond})"), statements(p, then + 1..end)));
    }
    None
}

fn scalar_params(p: &Parsed) -> HashSet<String> {
    let pointers: HashSet<usize> = p.pointer_params().iter().map(|&(_, n, _)| n).collect();
    let mut out = HashSet::new();
    let mut last_ident = None;
    for i in p
        .kernel
        .params
        .clone()
        .chain(std::iter::once(p.kernel.params.end))
    {
        if i == p.kernel.params.end || p.w(i) == "," {
            if let Some(n) = last_ident.filter(|n| !pointers.contains(n)) {
                out.insert(p.w(n).to_owned());
            }
            last_ident = None;
        } else if p.toks[i].kind == Kind::Ident {
            last_ident = Some(i);
        }
    }
    out
}

/// `for (TYPE k = S; k < E; ++k | k++ | k += 1) BODY`, innermost, with uniform bounds and a
/// loop variable the body leaves alone.
fn reduction_loop(p: &Parsed, stmt: Range<usize>, scalars: &HashSet<String>) -> Option<Loop> {
    if p.w(stmt.start) != "for" {
        return None;
    }
    let open = stmt.start + 1;
    let close = source::matching(p.src, &p.toks, open)?;
    let semis: Vec<usize> = (open + 1..close).filter(|&i| p.w(i) == ";").collect();
    let [s1, s2] = semis[..] else {
        return None;
    };
    let eq = (open + 1..s1).find(|&i| p.w(i) == "=")?;
    let var = p.w(eq - 1).to_owned();
    let var_ty: String = (open + 1..eq - 1)
        .map(|i| p.w(i))
        .collect::<Vec<_>>()
        .join(" ");
    if var_ty.is_empty() || !TYPE_WORDS.contains(&p.w(open + 1)) {
        return None;
    }
    let uniform = |r: Range<usize>| {
        !r.is_empty()
            && r.clone().all(|i| {
                let t = p.toks[i];
                t.kind != Kind::Ident || scalars.contains(p.w(i)) || CAST_WORDS.contains(&p.w(i))
            })
            && r.clone().all(|i| !matches!(p.w(i), "[" | "?"))
    };
    if !uniform(eq + 1..s1) || p.w(s1 + 1) != var || p.w(s1 + 2) != "<" || !uniform(s1 + 3..s2) {
        return None;
    }
    let step: String = (s2 + 1..close).map(|i| p.w(i)).collect();
    if ![format!("++{var}"), format!("{var}++"), format!("{var}+=1")].contains(&step) {
        return None;
    }
    let mut b = close + 1;
    while p.toks.get(b).is_some_and(|t| t.kind == Kind::Directive) {
        b += 1;
    }
    let body = if p.w(b) == "{" {
        b + 1..source::matching(p.src, &p.toks, b)?
    } else {
        b..stmt.end
    };
    let nested = body
        .clone()
        .any(|i| matches!(p.w(i), "for" | "while" | "do" | "return"));
    if nested || text::modified_in(p, body.clone()).contains(&var) {
        return None;
    }
    Some(Loop {
        stmt,
        var,
        var_ty,
        start: span_text(p, eq + 1..s1),
        end: span_text(p, s1 + 3..s2),
        body,
    })
}

/// The pointer parameters the kernel never writes through (nor takes an address in).
fn read_only_pointers(p: &Parsed) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (star, name_at, _) in p.pointer_params() {
        let name = p.w(name_at);
        let written = p.kernel.body.clone().any(|i| {
            if p.w(i) != name {
                return false;
            }
            if i > 0 && matches!(p.w(i - 1), "&" | "++" | "--") {
                return true;
            }
            if p.w(i + 1) != "[" {
                return true; // passed on or offset: where it goes is not followed
            }
            let Some(rb) = source::matching(p.src, &p.toks, i + 1) else {
                return true;
            };
            text::ASSIGN.contains(&p.w(rb + 1)) || matches!(p.w(rb + 1), "++" | "--")
        });
        if written {
            continue;
        }
        // The element type: the parameter's words before its last `*`, less qualifiers.
        let mut start = star;
        while start > p.kernel.params.start && p.w(start - 1) != "," {
            start -= 1;
        }
        let elem = (start..star)
            .map(|i| p.w(i))
            .filter(|w| !matches!(*w, "const" | "volatile") && !w.starts_with("__restrict"))
            .collect::<Vec<_>>()
            .join(" ");
        if !elem.is_empty() && !elem.contains('*') {
            out.push((name.to_owned(), elem));
        }
    }
    out
}

/// The loop body's reads that a tile can serve.
fn operands(
    p: &Parsed,
    lp: &Loop,
    coords: &[Coord],
    derived: &[Derived],
    scalars: &HashSet<String>,
) -> Vec<Operand> {
    let readable = read_only_pointers(p);
    let mut out: Vec<Operand> = Vec::new();
    for i in lp.body.clone() {
        let Some((pointer, elem)) = readable.iter().find(|(n, _)| n == p.w(i)) else {
            continue;
        };
        if p.w(i + 1) != "[" || (i > 0 && matches!(p.w(i - 1), "." | "->" | "::")) {
            continue;
        }
        let Some(rb) = source::matching(p.src, &p.toks, i + 1) else {
            continue;
        };
        let idx = i + 2..rb;
        let mut uses_var = false;
        let mut axes: Vec<&Coord> = Vec::new();
        let mut uses: Vec<&str> = Vec::new();
        let ok = idx.clone().all(|j| {
            let w = p.w(j);
            if matches!(w, "[" | "?" | "=" | "," | "&&" | "||") {
                return false;
            }
            if p.toks[j].kind != Kind::Ident {
                return true;
            }
            if w == lp.var {
                uses_var = true;
                return true;
            }
            let d = derived.iter().find(|d| d.name == w);
            if let Some(d) = d {
                uses.push(&d.name);
            }
            let c = d.map_or(w, |d| d.coord.as_str());
            if let Some(c) = coords.iter().find(|x| x.name == c) {
                if !axes.iter().any(|a| a.name == c.name) {
                    axes.push(c);
                }
                return true;
            }
            scalars.contains(w) || CAST_WORDS.contains(&w)
        });
        if !ok || !uses_var || axes.len() > 1 {
            continue;
        }
        let text = span_text(p, i..rb + 1);
        if out.iter().any(|o| o.text == text) {
            continue;
        }
        let coord = axes.first().map(|c| (*c).clone());
        let index = span_text(p, idx.clone());
        let k_contiguous = unit_stride(&index, &lp.var, coord.as_ref().map(|c| c.name.as_str()));
        out.push(Operand {
            text,
            pointer: pointer.clone(),
            index,
            axis: coord.as_ref().map_or(Axis::None, |c| c.axis),
            coord,
            derived: needed(derived, &uses),
            elem: elem.clone(),
            k_contiguous,
        });
    }
    out
}

/// The derived locals `used` names, with those their initializers use, in declaration order.
fn needed(derived: &[Derived], used: &[&str]) -> Vec<Derived> {
    let mut want: HashSet<&str> = used.iter().copied().collect();
    for d in derived.iter().rev() {
        if want.contains(d.name.as_str()) {
            let inner = derived.iter().filter(|e| {
                source::lex(&d.init).is_ok_and(|t| t.iter().any(|t| t.text(&d.init) == e.name))
            });
            want.extend(inner.map(|e| e.name.as_str()));
        }
    }
    derived
        .iter()
        .filter(|d| want.contains(d.name.as_str()))
        .cloned()
        .collect()
}

/// Whether the index moves by one element when `var` does (the coordinate fixed): then a
/// tile is loaded along `k`, else along the coordinate. Evaluated on sample values, with the
/// casts taken out; an index it cannot evaluate counts as not contiguous in `k`.
pub(crate) fn unit_stride(index: &str, var: &str, coord: Option<&str>) -> bool {
    use evalexpr::{ContextWithMutableVariables, DefaultNumericTypes, HashMapContext, Value};
    let Ok(toks) = source::lex(index) else {
        return false;
    };
    let mut expr = String::new();
    let mut i = 0;
    while i < toks.len() {
        let w = toks[i].text(index);
        if w == "static_cast" && toks.get(i + 1).map(|t| t.text(index)) == Some("<") {
            // Skip `static_cast<…>`: the parenthesized operand stays.
            while i < toks.len() && toks[i].text(index) != ">" {
                i += 1;
            }
            i += 1;
            continue;
        }
        if CAST_WORDS.contains(&w) {
            // `(size_t)`: drop the type words and leave an empty `()`, removed below.
            i += 1;
            continue;
        }
        expr.push_str(w);
        expr.push(' ');
        i += 1;
    }
    let expr = expr.replace("( )", "");
    let at = |k: i64| {
        let mut ctx: HashMapContext<DefaultNumericTypes> = HashMapContext::new();
        for t in source::lex(&expr).unwrap_or_default() {
            let w = t.text(&expr);
            if t.kind == Kind::Ident {
                let v = if w == var {
                    k
                } else if Some(w) == coord {
                    3
                } else {
                    1009
                };
                let _ = ctx.set_value(w.into(), Value::Int(v));
            }
        }
        evalexpr::eval_int_with_context(&expr, &ctx).ok()
    };
    matches!((at(5), at(6)), (Some(a), Some(b)) if b - a == 1)
}

/// Register blocking: the first block of each group of `R3_RX` × `R3_RY` blocks computes, in
/// each of its threads, that thread's outputs in every block of the group, and the group's
/// other blocks return. Each thread holds `R3_RX × R3_RY` sums and uses every tile value it
/// reads that many times; the launch is unchanged, so nothing on the host side needs to know.
/// Offered where everything a thread computes follows from its coordinates (declared from
/// `blockIdx`, `blockDim` and `threadIdx`), which each output then declares anew.
struct Blocking {
    x: bool,
    y: bool,
    coords: Vec<Coord>,
    /// The declarations in front of the loop (the sums), held per output.
    locals: Vec<Local>,
}

struct Local {
    ty: String,
    name: String,
    /// The statement declaring it, and the token of its name where it has an initializer.
    stmt: usize,
    init_at: Option<usize>,
}

/// Whether the kernel can be register-blocked (see `Blocking`): `prefix` are the declarations
/// in front of the guard, `rest` the guard and everything after it, `before` the statements
/// between the guard and the loop.
fn blocking(
    p: &Parsed,
    prefix: &[Range<usize>],
    coords: &[Coord],
    rest: Range<usize>,
    before: &[Range<usize>],
) -> Option<Blocking> {
    let x = coords.iter().any(|c| c.axis == Axis::X);
    let y = coords.iter().any(|c| c.axis == Axis::Y);
    if !x && !y {
        return None;
    }
    let is_coord = |w: &str| coords.iter().any(|c| c.name == w);
    for s in prefix {
        let declares_coord = s
            .clone()
            .find(|&i| p.w(i) == "=")
            .is_some_and(|eq| is_coord(p.w(eq - 1)));
        if declares_coord {
            continue;
        }
        // Another per-thread value would have to be declared anew for each output; so would
        // one a call returns (an atomic's result differs between threads).
        let per_thread = |i: usize| {
            matches!(p.w(i), "threadIdx" | "blockIdx" | "[")
                || is_coord(p.w(i))
                || (p.toks[i].kind == Kind::Ident
                    && p.w(i + 1) == "("
                    && !CAST_WORDS.contains(&p.w(i)))
        };
        if s.clone().any(per_thread) {
            return None;
        }
    }
    if rest
        .clone()
        .any(|i| matches!(p.w(i), "threadIdx" | "blockIdx"))
    {
        return None;
    }
    let mut locals = Vec::new();
    for s in before {
        if !TYPE_WORDS.contains(&p.w(s.start)) {
            continue;
        }
        let eq = s.clone().find(|&i| p.w(i) == "=");
        let name_at = eq.unwrap_or(s.end - 1) - 1;
        let simple = p.toks[name_at].kind == Kind::Ident
            && p.w(s.end - 1) == ";"
            && !s.clone().any(|i| matches!(p.w(i), "," | "[" | "&"));
        let ty = type_text(p, s.start..name_at);
        if !simple || ty.is_empty() || ty == "auto" || ty.contains('(') {
            return None;
        }
        locals.push(Local {
            ty,
            name: p.w(name_at).to_owned(),
            stmt: s.start,
            init_at: eq.map(|_| name_at),
        });
    }
    // A name declared again further on would be renamed where it is not the sum.
    let declared_again = locals.iter().any(|l| {
        rest.clone().any(|i| {
            p.w(i) == l.name && i > 0 && Some(i) != l.init_at && TYPE_WORDS.contains(&p.w(i - 1))
        })
    });
    if declared_again {
        return None;
    }
    Some(Blocking {
        x,
        y,
        coords: coords.to_vec(),
        locals,
    })
}

/// The names the grouped code uses along one axis.
struct Names {
    knob: &'static str,
    /// The output a thread is at within its group, in the per-output loops.
    at: &'static str,
    /// The group's first block index.
    group: &'static str,
    index: &'static str,
    grid: &'static str,
    thread: &'static str,
}

fn names(axis: Axis) -> Names {
    match axis {
        Axis::X => Names {
            knob: BLOCK_X_KNOB,
            at: "r3_rx",
            group: "r3_gx",
            index: "blockIdx.x",
            grid: "gridDim.x",
            thread: "threadIdx.x",
        },
        _ => Names {
            knob: BLOCK_Y_KNOB,
            at: "r3_ry",
            group: "r3_gy",
            index: "blockIdx.y",
            grid: "gridDim.y",
            thread: "threadIdx.y",
        },
    }
}

/// The block shape the template is specialized to, and its register blocking if any.
struct Shape {
    bx: u32,
    by: u32,
    blocking: Option<Blocking>,
    /// Conditions the tiled path also needs: each coordinate's own extent is the recorded one.
    strides: Vec<String>,
}

impl Shape {
    fn block(&self) -> [u32; 3] {
        [self.bx, self.by, 1]
    }

    /// Whether the load loops' unroll is a knob: where it keeps the builds within what r3
    /// compiles and searches (`params::MAX_BUILDS`), so not beside blocking along both axes.
    /// A block that holds few rows, as a row walk's 16 blocks of 256 threads on a GPU of 132
    /// SMs do, has few loads in flight at four a thread; a block among many has its
    /// neighbours' to wait beside.
    fn loads_knob(&self) -> bool {
        let blocked = [Axis::X, Axis::Y]
            .into_iter()
            .filter(|a| self.knob(*a).is_some())
            .count();
        let builds = DEPTHS.len() * BLOCKING.len().pow(blocked as u32) * LOADS.len();
        builds <= super::params::MAX_BUILDS
    }

    /// The blocking knob along `axis`.
    fn knob(&self, axis: Axis) -> Option<&'static str> {
        let b = self.blocking.as_ref()?;
        match axis {
            Axis::X if b.x => Some(BLOCK_X_KNOB),
            Axis::Y if b.y => Some(BLOCK_Y_KNOB),
            _ => None,
        }
    }

    fn extent(&self, axis: Axis) -> u32 {
        width(self.block(), axis)
    }

    /// A tile's width along `axis`: the block's extent, times the blocking factor.
    fn width(&self, axis: Axis) -> String {
        let w = self.extent(axis);
        match self.knob(axis) {
            Some(k) => format!("{w} * {k}"),
            None => w.to_string(),
        }
    }

    /// A tile's row length: its width plus one, so that threads reading a column of it hit
    /// distinct banks.
    fn padded(&self, axis: Axis) -> String {
        match self.knob(axis) {
            Some(_) => format!("{} + 1", self.width(axis)),
            None => (self.extent(axis) + 1).to_string(),
        }
    }

    /// The first coordinate a tile along `axis` covers.
    /// Where the block's (or the group's) threads start along `axis`, for a coordinate of type
    /// `ty`.
    fn base(&self, axis: Axis, ty: &str) -> String {
        let n = names(axis);
        let first = if self.knob(axis).is_some() {
            n.group
        } else {
            n.index
        };
        format!("{} * {}", widened(ty, first), self.extent(axis))
    }

    /// The tile lane of the output a thread is at (its `r3_rx`, `r3_ry` under blocking).
    fn lane(&self, axis: Axis) -> String {
        if axis == Axis::None {
            return "0".into();
        }
        let n = names(axis);
        match self.knob(axis) {
            Some(_) => format!("{} + {} * {}", n.thread, n.at, self.extent(axis)),
            None => n.thread.into(),
        }
    }

    /// The blocked axes, y first (the order of the per-output loops and arrays).
    fn blocked(&self) -> Vec<Names> {
        [Axis::Y, Axis::X]
            .into_iter()
            .filter(|&a| self.knob(a).is_some())
            .map(names)
            .collect()
    }

    /// `[r3_ry][r3_rx]` (or `[R3_RY][R3_RX]` with `dims`) over the blocked axes.
    fn held(&self, dims: bool) -> String {
        self.blocked()
            .iter()
            .map(|n| format!("[{}]", if dims { n.knob } else { n.at }))
            .collect()
    }

    /// `code` once for each output of a thread, with its coordinates declared anew as that
    /// output's; as it is where nothing is blocked.
    fn each(&self, ind: &str, code: &str) -> String {
        let Some(b) = &self.blocking else {
            return format!("{ind}{code}\n");
        };
        let (mut open, mut close, mut i) = (String::new(), String::new(), ind.to_owned());
        for Names { knob, at, .. } in self.blocked() {
            open.push_str(&format!(
                "{i}#pragma unroll\n{i}for (int {at} = 0; {at} < {knob}; ++{at}) {{\n"
            ));
            close = format!("{i}}}\n{close}");
            i.push_str("  ");
        }
        for c in &b.coords {
            if self.knob(c.axis).is_none() || !uses(code, &c.name) {
                continue;
            }
            let n = names(c.axis);
            open.push_str(&format!(
                "{i}const {} {} = {} * {} + {};\n",
                c.ty,
                c.name,
                widened(&c.ty, &format!("({} + {})", n.group, n.at)),
                self.extent(c.axis),
                n.thread
            ));
        }
        format!("{open}{i}{code}\n{close}")
    }
}

/// Whether `code` names `name` (declarations it does not use would warn under `-Wall`).
fn uses(code: &str, name: &str) -> bool {
    source::lex(code).map_or(true, |toks| {
        toks.iter()
            .any(|t| t.kind == Kind::Ident && t.text(code) == name)
    })
}

/// What the tiled path is made of.
struct Parts<'a> {
    p: &'a Parsed<'a>,
    lp: &'a Loop,
    ops: &'a [Operand],
    shape: &'a Shape,
}

impl Parts<'_> {
    /// The tiled path, put in front of the kernel's guard; it returns, so the original code
    /// after it runs only in the blocks that do not take it.
    fn branch(
        &self,
        active: &str,
        before: &[Range<usize>],
        after: &[Range<usize>],
        ind: &str,
    ) -> String {
        let i1 = format!("{ind}  ");
        let mut s = self.entry(active, ind);
        s.push_str(&self.before(before, &i1));
        s.push_str(&self.tiles(&i1));
        if !after.is_empty() {
            let code: Vec<String> = after
                .iter()
                .map(|r| self.rewritten(r.clone(), false))
                .collect();
            s.push_str(&self.shape.each(&i1, &code.join("\n")));
        }
        s.push_str(&format!("{i1}return;\n{ind}}}\n{ind}"));
        s
    }

    /// The test that opens the path: the recorded block shape, every thread active (of every
    /// block of the group, under blocking), and under blocking the group's first block only.
    fn entry(&self, active: &str, ind: &str) -> String {
        let Shape { bx, by, .. } = *self.shape;
        let mut shape = format!("blockDim.x == {bx} && blockDim.y == {by} && blockDim.z == 1");
        for s in &self.shape.strides {
            shape.push_str(&format!(" && {s}"));
        }
        if self.shape.blocking.is_none() {
            return format!(
                "// r3: blocks of the recorded shape ({bx}x{by}) whose threads are all active reduce through shared-memory tiles of {KNOB} steps; others run the code below.\n{ind}if ({shape} && __syncthreads_and({active})) {{\n"
            );
        }
        let blocked = self.shape.blocked();
        let knobs: Vec<&str> = blocked.iter().map(|n| n.knob).collect();
        let mut s = format!(
            "// r3: blocks of the recorded shape ({bx}x{by}) go in groups of {}; where every thread of a group is active, the group's first block computes all of its outputs (each thread one per block of the group, their sums in registers) through shared-memory tiles of {KNOB} steps, and the others return. Other blocks run the code below.\n",
            knobs.join(" x ")
        );
        let mut exists = Vec::new();
        let mut other = Vec::new();
        for Names {
            knob,
            group,
            index,
            grid,
            ..
        } in &blocked
        {
            s.push_str(&format!(
                "{ind}const unsigned {group} = {index} - {index} % {knob};\n"
            ));
            exists.push(format!("{group} + {knob} <= {grid}"));
            other.push(format!("{index} != {group}"));
        }
        let vote = self.shape.each(
            &format!("{ind}  "),
            &format!("r3_all = r3_all && {active};"),
        );
        s.push_str(&format!(
            "{ind}int r3_all = {shape} && {};\n{ind}if (r3_all) {{\n{vote}{ind}}}\n{ind}if (__syncthreads_and(r3_all)) {{\n{ind}  if ({}) return;\n",
            exists.join(" && "),
            other.join(" || ")
        ));
        s
    }

    /// The statements between the guard and the loop; under blocking the declared sums are
    /// held per output, in arrays the unrolled loops keep in registers.
    fn before(&self, before: &[Range<usize>], i1: &str) -> String {
        if before.is_empty() {
            return String::new();
        }
        let Some(b) = &self.shape.blocking else {
            let code: Vec<String> = before
                .iter()
                .map(|r| self.rewritten(r.clone(), false))
                .collect();
            return format!("{i1}{}\n", code.join("\n"));
        };
        let mut s = String::new();
        for l in &b.locals {
            s.push_str(&format!(
                "{i1}{} {}{};\n",
                l.ty,
                l.name,
                self.shape.held(true)
            ));
        }
        let code: Vec<String> = before
            .iter()
            .filter_map(|r| match b.locals.iter().find(|l| l.stmt == r.start) {
                Some(l) => l.init_at.map(|at| self.rewritten(at..r.end, false)),
                None => Some(self.rewritten(r.clone(), false)),
            })
            .collect();
        if !code.is_empty() {
            s.push_str(&self.shape.each(i1, &code.join("\n")));
        }
        s
    }

    /// The loop over tiles: each operand's tile loaded by the block, then the loop body over it.
    fn tiles(&self, i1: &str) -> String {
        let (lp, shape) = (self.lp, self.shape);
        let threads = shape.bx * shape.by;
        let i2 = format!("{i1}  ");
        let i3 = format!("{i1}    ");
        let mut s = format!("{i1}{{\n");
        for (n, o) in self.ops.iter().enumerate() {
            s.push_str(&format!(
                "{i2}__shared__ {} r3_tile{n}[{KNOB}][{}];\n",
                o.elem,
                shape.padded(o.axis)
            ));
        }
        s.push_str(&format!(
            "{i2}const int r3_tid = threadIdx.y * {} + threadIdx.x;\n{i2}for ({} r3_k0 = {}; r3_k0 < {}; r3_k0 += {KNOB}) {{\n",
            shape.bx, lp.var_ty, lp.start, lp.end
        ));
        for (n, o) in self.ops.iter().enumerate() {
            s.push_str(&self.load(n, o, &i3, threads));
        }
        let body = self.rewritten(lp.body.clone(), true);
        let inner = format!("{i3}    ");
        let step = |bound: &str| {
            format!(
                "{i3}  for (int r3_d = 0; {bound}; ++r3_d) {{\n{k}{each}{i3}  }}\n",
                k = if uses(&body, &lp.var) {
                    format!("{i3}    const {} {} = r3_k0 + r3_d;\n", lp.var_ty, lp.var)
                } else {
                    String::new()
                },
                each = shape.each(&inner, &body)
            )
        };
        s.push_str(&format!(
            "{i3}__syncthreads();\n{i3}if (r3_k0 + {KNOB} <= {end}) {{\n{i3}  #pragma unroll\n{full}{i3}}} else {{\n{tail}{i3}}}\n{i3}__syncthreads();\n{i2}}}\n{i1}}}\n",
            end = lp.end,
            full = step(&format!("r3_d < {KNOB}")),
            tail = step(&format!("r3_k0 + r3_d < {}", lp.end)),
        ));
        s
    }

    /// The block's cooperative load of one operand's tile, contiguous in memory: along `k`
    /// where consecutive `k` are consecutive addresses, else along the coordinate.
    fn load(&self, n: usize, o: &Operand, i3: &str, threads: u32) -> String {
        let (lp, shape) = (self.lp, self.shape);
        let w = shape.width(o.axis);
        let wp = if w.contains(' ') {
            format!("({w})")
        } else {
            w.clone()
        };
        let (d, t) = if o.k_contiguous || w == "1" {
            (format!("r3_e % {KNOB}"), format!("r3_e / {KNOB}"))
        } else {
            (format!("r3_e / {wp}"), format!("r3_e % {wp}"))
        };
        let mut coord = o.coord.as_ref().map_or(String::new(), |c| {
            format!(
                " const {} {} = {} + r3_t;",
                c.ty,
                c.name,
                shape.base(c.axis, &c.ty)
            )
        });
        for d in &o.derived {
            coord.push_str(&format!(" const {} {} = {};", d.ty, d.name, d.init));
        }
        // Unrolled, a thread's loads of the tile go out together before their stores wait for
        // them, but only where no branch stands between them. With the test of `k` in the
        // loop, each load sat behind its own (bicg_q's PTX, clang 22), so a whole tile loads
        // without it and only the last, partial one with it; and the trip count is a constant,
        // so no exit test stands between them either (the test of a thread's last element
        // folds away where the tile divides evenly among the block's threads). Before, on an
        // H100, unrolled by 4 took gemm_naive's template from 2.08x to 2.64x over its tuned
        // build, unrolled fully 2.30x (bench/RESULTS.md, register blocking).
        let unroll = if shape.loads_knob() { LOADS_KNOB } else { "4" };
        let size = format!("{KNOB} * {wp}");
        let each = |value: &str| {
            format!(
                "{i3}  #pragma unroll {unroll}\n{i3}  for (int r3_n = 0; r3_n < ({size} + {threads} - 1) / {threads}; ++r3_n) {{\n{i3}    const int r3_e = r3_tid + r3_n * {threads};\n{i3}    if ({size} % {threads} != 0 && r3_e >= {size}) break;\n{i3}    const int r3_d = {d}, r3_t = {t};\n{i3}    const {} {} = r3_k0 + r3_d;{coord}\n{i3}    r3_tile{n}[r3_d][r3_t] = {value};\n{i3}  }}\n",
                lp.var_ty, lp.var,
            )
        };
        let read = format!("{}[{}]", o.pointer, o.index);
        format!(
            "{i3}if (r3_k0 + {KNOB} <= {end}) {{\n{whole}{i3}}} else {{\n{part}{i3}}}\n",
            end = lp.end,
            whole = each(&read),
            part = each(&format!("{} < {} ? {read} : ({})0", lp.var, lp.end, o.elem)),
        )
    }

    /// The text of token range `r` with, where `tiled`, each tiled read replaced by its tile
    /// element, and under blocking each held sum by the output's own.
    fn rewritten(&self, r: Range<usize>, tiled: bool) -> String {
        let p = self.p;
        let locals: Vec<&str> = self.shape.blocking.as_ref().map_or(Vec::new(), |b| {
            b.locals.iter().map(|l| l.name.as_str()).collect()
        });
        let held = self.shape.held(false);
        let mut edits = Vec::new();
        let mut i = r.start;
        while i < r.end {
            let read = (tiled && p.w(i + 1) == "[")
                .then(|| source::matching(p.src, &p.toks, i + 1))
                .flatten()
                .and_then(|rb| {
                    let text = span_text(p, i..rb + 1);
                    self.ops
                        .iter()
                        .position(|o| o.text == text)
                        .map(|n| (n, rb))
                });
            if let Some((n, rb)) = read {
                let lane = self.shape.lane(self.ops[n].axis);
                edits.push((
                    p.toks[i].span.0,
                    p.toks[rb].span.1,
                    format!("r3_tile{n}[r3_d][{lane}]"),
                ));
                i = rb + 1;
                continue;
            }
            let member = i > 0 && matches!(p.w(i - 1), "." | "->" | "::");
            if p.toks[i].kind == Kind::Ident && !member && locals.contains(&p.w(i)) {
                let (a, b) = p.toks[i].span;
                edits.push((a, b, format!("{}{held}", p.w(i))));
            }
            i += 1;
        }
        let (a, b) = (p.toks[r.start].span.0, p.toks[r.end - 1].span.1);
        let shifted = edits
            .into_iter()
            .map(|(x, y, t)| (x - a, y - a, t))
            .collect();
        text::edit(&p.src[a..b], shifted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEMM: &str = "__global__ void gemm(int n, const float* __restrict__ A, const float* __restrict__ B,\n                     float* __restrict__ C) {\n  int col = blockIdx.x * blockDim.x + threadIdx.x;\n  int row = blockIdx.y * blockDim.y + threadIdx.y;\n  if (row >= n || col >= n) return;\n  float acc = 0.0f;\n  for (int k = 0; k < n; ++k) acc += A[static_cast<size_t>(row) * n + k] * B[static_cast<size_t>(k) * n + col];\n  C[static_cast<size_t>(row) * n + col] = acc;\n}";

    const SYRK: &str = "__global__ void syrk(int n, int m, float alpha, float beta, float* A, float* C) {\n  int j = blockIdx.x * blockDim.x + threadIdx.x;\n  int i = blockIdx.y * blockDim.y + threadIdx.y;\n  if (i < n && j <= i) {\n    C[i * n + j] *= beta;\n    for (int k = 0; k < m; k++) C[i * n + j] += alpha * A[i * m + k] * A[j * m + k];\n  }\n}";

    fn has(out: &str, part: &str) {
        assert!(out.contains(part), "no {part:?} in:\n{out}");
    }

    fn facts(block: [u32; 3]) -> Facts {
        Facts {
            pointers_disjoint: Some(true),
            block: Some(block),
        }
    }

    #[test]
    fn a_matrix_product_reads_both_operands_through_tiles_with_blocks_grouped() {
        let out = shared_tiling(GEMM, &facts([16, 16, 1])).unwrap();
        assert!(
            out.starts_with(
                "R3_PARAM(R3_TK, 8, 16, 32, 64)\nR3_PARAM(R3_RX, 1, 2, 4)\nR3_PARAM(R3_RY, 1, 2, 4)\nR3_REQUIRE(R3_TK * (4 * (16 * R3_RY + 1) + 4 * (16 * R3_RX + 1)) <= 49152)\n__global__"
            ),
            "{out}"
        );
        // Every output of the group is voted on, each with its own coordinates.
        has(
            &out,
            "const unsigned r3_gy = blockIdx.y - blockIdx.y % R3_RY;\n",
        );
        has(
            &out,
            "r3_gy + R3_RY <= gridDim.y && r3_gx + R3_RX <= gridDim.x;\n",
        );
        has(&out, "const int row = (r3_gy + r3_ry) * 16 + threadIdx.y;\n        r3_all = r3_all && !(row >= n || col >= n);\n");
        has(&out, "if (__syncthreads_and(r3_all)) {\n    if (blockIdx.y != r3_gy || blockIdx.x != r3_gx) return;\n    float acc[R3_RY][R3_RX];\n");
        // A is contiguous along k: loaded k-fastest; B along the group's columns.
        has(
            &out,
            "const int r3_d = r3_e % R3_TK, r3_t = r3_e / R3_TK;\n",
        );
        has(
            &out,
            "const int r3_d = r3_e / (16 * R3_RX), r3_t = r3_e % (16 * R3_RX);\n",
        );
        has(&out, "const int row = r3_gy * 16 + r3_t;");
        has(&out, "__shared__ float r3_tile1[R3_TK][16 * R3_RX + 1];");
        has(&out, "acc[r3_ry][r3_rx] += r3_tile0[r3_d][threadIdx.y + r3_ry * 16] * r3_tile1[r3_d][threadIdx.x + r3_rx * 16];");
        has(
            &out,
            "C[static_cast<size_t>(row) * n + col] = acc[r3_ry][r3_rx];\n",
        );
        // Only what a statement uses is declared for it (no warnings under -Wall).
        assert!(!out.contains("const int k = r3_k0 + r3_d;\n"), "{out}");
        // Grouped along both axes, the load unroll stays 4 (as a knob it would make 72 builds).
        has(&out, "#pragma unroll 4\n");
        assert!(!out.contains("R3_LU"), "{out}");
        // The original code follows, unchanged, for the other blocks.
        has(&out, "  if (row >= n || col >= n) return;\n  float acc = 0.0f;\n  for (int k = 0; k < n; ++k) acc += A[");
        assert_eq!(
            shared_tiling(&out, &facts([16, 16, 1])),
            None,
            "applies once"
        );
    }

    #[test]
    fn a_per_thread_value_besides_the_coordinates_leaves_blocks_ungrouped() {
        let at = GEMM
            .replace(
                "  if (row >= n",
                "  size_t at = static_cast<size_t>(row) * n + col;\n  if (row >= n",
            )
            .replace(
                "C[static_cast<size_t>(row) * n + col] = acc;",
                "C[at] = acc;",
            );
        let out = shared_tiling(&at, &facts([16, 16, 1])).unwrap();
        assert!(
            out.starts_with(
                "R3_PARAM(R3_TK, 8, 16, 32, 64)\nR3_PARAM(R3_LU, 4, 32)\nR3_REQUIRE(R3_TK * 136 <= 49152)\n__global__"
            ),
            "{out}"
        );
        has(&out, "__syncthreads_and(!(row >= n || col >= n))");
        has(&out, "const int r3_d = r3_e / 16, r3_t = r3_e % 16;\n");
        has(&out, "const int row = blockIdx.y * 16 + r3_t;");
        has(&out, "__shared__ float r3_tile1[R3_TK][17];");
        has(
            &out,
            "acc += r3_tile0[r3_d][threadIdx.y] * r3_tile1[r3_d][threadIdx.x];",
        );
        has(&out, "C[at] = acc;\n    return;");
        // So does a thread index read past the declarations, or a sum declared twice.
        let direct = GEMM.replace("acc += A[", "acc += threadIdx.x * A[");
        assert!(!shared_tiling(&direct, &facts([16, 16, 1]))
            .unwrap()
            .contains("R3_RX"));
        let twice = GEMM.replace(
            "C[static_cast<size_t>(row) * n + col] = acc;",
            "{ float acc = 1; C[static_cast<size_t>(row) * n + col] = acc; }",
        );
        assert!(!shared_tiling(&twice, &facts([16, 16, 1]))
            .unwrap()
            .contains("R3_RX"));
        // A value a call returns is the thread's own (an atomic's ticket); a cast is not a call.
        let called = GEMM
            .replace(
                "  if (row >= n",
                "  int ticket = atomicAdd(C, 0.0f);\n  if (row >= n",
            )
            .replace("acc += A[", "acc += ticket * A[");
        let out = shared_tiling(&called, &facts([16, 16, 1]));
        assert!(
            !out.is_some_and(|o| o.contains("R3_RX")),
            "a call's result is per thread"
        );
        let cast = GEMM.replace(
            "  if (row >= n",
            "  size_t nn = static_cast<size_t>(n) * n;\n  if (row >= n",
        );
        has(
            &shared_tiling(&cast, &facts([16, 16, 1])).unwrap(),
            "R3_PARAM(R3_RX",
        );
    }

    #[test]
    fn a_one_dimensional_kernel_groups_blocks_along_x_only() {
        let mv = "__global__ void mv(int m, int n, const float *A, const float *x, float *y) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < m) {\n    for (int j = 0; j < n; j++) y[i] += A[i * n + j] * x[j];\n  }\n}";
        let out = shared_tiling(mv, &facts([128, 1, 1])).unwrap();
        // A row walk's blocks hold few rows: how many of a thread's loads go out together is
        // a knob, and its builds stay within what r3 compiles.
        has(
            &out,
            "R3_PARAM(R3_RX, 1, 2, 4)\nR3_PARAM(R3_LU, 4, 32)\nR3_REQUIRE",
        );
        has(&out, "#pragma unroll R3_LU\n");
        let builds = crate::params::parse(&out, mv)
            .unwrap()
            .builds(&[[128, 1, 1]])
            .unwrap();
        // The 9 pairs of depth and group whose tiles fit in shared memory, each unrolled both ways.
        assert_eq!(builds.len(), 9 * 2);
        assert!(!out.contains("R3_RY"), "{out}");
        has(
            &out,
            "y[i] += r3_tile0[r3_d][threadIdx.x + r3_rx * 128] * x[j];",
        );
    }

    /// The commonest naive matrix product: one flat thread index, the output's row and column
    /// derived from it by division and remainder.
    const FLAT: &str = "__global__ void dense(int rows, int in, int out, const float* X, const float* W, float* Y) {\n  int t = blockIdx.x * blockDim.x + threadIdx.x;\n  if (t >= rows * out) return;\n  int b = t / out, o = t % out;\n  Y[t] = 0.0f;\n  for (int k = 0; k < in; ++k) Y[t] += X[static_cast<size_t>(b) * in + k] * W[static_cast<size_t>(o) * in + k];\n}";

    /// Each tile element's load computes the derived row or column again from the element's
    /// own coordinate, and no grouping is offered.
    #[test]
    fn a_flat_thread_index_with_derived_row_and_column_is_tiled_without_grouping() {
        let out = shared_tiling(FLAT, &facts([256, 1, 1])).unwrap();
        has(
            &out,
            "const int t = blockIdx.x * 256 + r3_t; const int b = t / out;\n            r3_tile0[r3_d][r3_t] = k < in ? X[static_cast<size_t>(b) * in + k]",
        );
        has(
            &out,
            "const int t = blockIdx.x * 256 + r3_t; const int o = t % out;\n            r3_tile1[r3_d][r3_t] = k < in ? W[static_cast<size_t>(o) * in + k]",
        );
        // A whole tile loads without the test of k.
        has(
            &out,
            "const int t = blockIdx.x * 256 + r3_t; const int b = t / out;\n            r3_tile0[r3_d][r3_t] = X[static_cast<size_t>(b) * in + k];",
        );
        // Both rows are contiguous in k: loaded along it.
        has(&out, "const int r3_d = r3_e % R3_TK, r3_t = r3_e / R3_TK;");
        has(
            &out,
            "Y[t] += r3_tile0[r3_d][threadIdx.x] * r3_tile1[r3_d][threadIdx.x];",
        );
        assert!(!out.contains("R3_RX"), "{out}");
        // A local chained on a derived one is declared with it, in order.
        let chained = FLAT.replace(
            "int b = t / out, o = t % out;",
            "int b = t / out; int o = t - b * out;",
        );
        let out = shared_tiling(&chained, &facts([256, 1, 1])).unwrap();
        has(&out, "const int b = t / out; const int o = t - b * out;\n");
    }

    /// A coordinate computed in 64 bits is one: its block index is widened in every place
    /// the template computes it again. One whose parentheses change its sum is not.
    #[test]
    fn a_coordinate_cast_to_64_bits_is_read_and_computed_again_in_64_bits() {
        let wide = GEMM
            .replace(
                "int col = blockIdx.x * blockDim.x + threadIdx.x;",
                "size_t col = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;",
            )
            .replace(
                "int row = blockIdx.y * blockDim.y + threadIdx.y;",
                "const size_t row = (size_t)blockIdx.y * blockDim.y + threadIdx.y;",
            );
        let out = shared_tiling(&wide, &facts([16, 16, 1])).unwrap();
        has(
            &out,
            "const size_t row = static_cast<size_t>(r3_gy) * 16 + r3_t;",
        );
        has(
            &out,
            "const size_t col = static_cast<size_t>((r3_gx + r3_rx)) * 16 + threadIdx.x;",
        );
        let not_a_sum = GEMM.replace(
            "int col = blockIdx.x * blockDim.x + threadIdx.x;",
            "int col = blockIdx.x * (blockDim.x + threadIdx.x);",
        );
        let out = shared_tiling(&not_a_sum, &facts([16, 16, 1])).unwrap_or_default();
        assert!(!out.contains("r3_tile1"), "{out}");
    }

    /// A coordinate computed with a constant for the block's extent (`blockIdx.y * TILE +
    /// threadIdx.y`, the textbook form) is one; the tiled path also requires the constant to be
    /// the recorded extent. A constant that is no single name or number is not read as one.
    #[test]
    fn a_coordinate_with_a_constant_block_extent_is_tiled_where_it_is_the_recorded_one() {
        let textbook = GEMM
            .replace(
                "int col = blockIdx.x * blockDim.x + threadIdx.x;",
                "int col = TILE * blockIdx.x + threadIdx.x;",
            )
            .replace(
                "int row = blockIdx.y * blockDim.y + threadIdx.y;",
                "int row = threadIdx.y + blockIdx.y * 16u;",
            );
        let out = shared_tiling(&textbook, &facts([16, 16, 1])).unwrap();
        has(&out, "blockDim.z == 1 && (TILE) == 16 && (16u) == 16");
        has(&out, "r3_tile1");
        let sum = GEMM.replace(
            "int col = blockIdx.x * blockDim.x + threadIdx.x;",
            "int col = blockIdx.x * TILE + 1 + threadIdx.x;",
        );
        let out = shared_tiling(&sum, &facts([16, 16, 1])).unwrap_or_default();
        assert!(!out.contains("r3_tile1"), "{out}");
    }

    /// A local that reads memory, calls, chooses, mixes two coordinates or is assigned again
    /// is not derived: the read through it is not tiled.
    #[test]
    fn a_local_that_is_not_a_function_of_one_coordinate_is_not_derived() {
        for decl in [
            "int b = t / out, o = perm[t] % out;",
            "int b = t / out, o = hash(t) % out;",
            "int b = t / out, o = t < out ? t : t % out;",
            "int b = t / out, o = (t + threadIdx.y) % out;",
            "int b = t / out, o = t % out; o += 1;",
        ] {
            let src = FLAT
                .replace("const float* W,", "const float* W, const int* perm,")
                .replace("int b = t / out, o = t % out;", decl);
            let out = shared_tiling(&src, &facts([256, 1, 1]));
            assert!(
                out.as_deref().is_none_or(|o| !o.contains("r3_tile1")),
                "{decl}: {out:?}"
            );
        }
    }

    #[test]
    fn a_triangular_update_tiles_the_rows_both_operands_read() {
        let out = shared_tiling(SYRK, &facts([32, 8, 1])).unwrap();
        has(&out, "r3_all = r3_all && (i < n && j <= i);");
        assert!(
            out.contains(
                "const int i = (r3_gy + r3_ry) * 8 + threadIdx.y;\n        C[i * n + j] *= beta;\n"
            ),
            "{out}"
        );
        // Both reads of A are contiguous along k, one per coordinate, each in a whole tile's
        // load and a partial one's.
        assert_eq!(
            out.matches("r3_e % R3_TK, r3_t = r3_e / R3_TK").count(),
            4,
            "{out}"
        );
        has(&out, "__shared__ float r3_tile0[R3_TK][8 * R3_RY + 1];");
        has(&out, "__shared__ float r3_tile1[R3_TK][32 * R3_RX + 1];");
        has(&out, "C[i * n + j] += alpha * r3_tile0[r3_d][threadIdx.y + r3_ry * 8] * r3_tile1[r3_d][threadIdx.x + r3_rx * 32];");
    }

    #[test]
    fn no_tiling_without_the_facts_or_where_a_read_is_not_per_coordinate() {
        assert_eq!(
            shared_tiling(
                GEMM,
                &Facts {
                    pointers_disjoint: Some(false),
                    block: Some([16, 16, 1])
                }
            ),
            None
        );
        assert_eq!(
            shared_tiling(
                GEMM,
                &Facts {
                    pointers_disjoint: Some(true),
                    block: None
                }
            ),
            None
        );
        let both = GEMM.replace(
            "B[static_cast<size_t>(k) * n + col]",
            "B[row * n + col + k]",
        );
        let out = shared_tiling(&both, &facts([16, 16, 1])).unwrap();
        assert!(
            out.contains("B[row * n + col + k]"),
            "that read stays global: {out}"
        );
        let thread_bound = GEMM.replace("k < n", "k < row");
        assert_eq!(shared_tiling(&thread_bound, &facts([16, 16, 1])), None);
        let written = SYRK.replace("C[i * n + j] *= beta;", "A[i] = 0;");
        assert_eq!(
            shared_tiling(&written, &facts([32, 8, 1])),
            None,
            "A is written"
        );
        for call in [
            "__syncthreads()",
            "__syncthreads_count(1)",
            "__threadfence()",
        ] {
            let synced = GEMM.replace("float acc = 0.0f;", &format!("float acc = 0.0f; {call};"));
            assert_eq!(shared_tiling(&synced, &facts([16, 16, 1])), None, "{call}");
        }
    }

    #[test]
    fn strides_are_read_off_the_index() {
        assert!(unit_stride(
            "static_cast<size_t>(row) * n + k",
            "k",
            Some("row")
        ));
        assert!(!unit_stride(
            "static_cast<size_t>(k) * n + col",
            "k",
            Some("col")
        ));
        assert!(unit_stride("(size_t)row * n + k", "k", Some("row")));
        assert!(unit_stride("k", "k", None));
        assert!(!unit_stride("k * 2", "k", None));
    }
}
