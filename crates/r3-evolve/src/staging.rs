//! The staged-store rule: a kernel whose one store is strided across a warp (a naive
//! transpose: `out[c * rows + r]` with `c` the x coordinate) keeps everything it computes and
//! where, and only changes which thread of the block writes it. Written the other way round
//! (`out[r * cols + c] = in[c * rows + r]`: the store contiguous, a load strided), it changes
//! which thread computes each value instead (`Side::Load`).
//!
//! In blocks of the recorded shape, each thread runs the original body up to its store, which
//! instead puts the value and the element's address in shared memory; after a barrier, thread
//! `e` of the block writes slot `(e / BY, e % BY)`, so that `BY` consecutive threads write `BY`
//! consecutive rows of one column: where the original's warp touched 32 sectors for 32 values,
//! it touches 32 / BY. Other blocks (other shapes) run the original code.
//!
//! On the load side each thread runs the body as the thread of the slot it fills, under a
//! local `threadIdx` that shadows the built-in one (so the strided loads go in column order),
//! and after the barrier each thread stores its own slot; not offered where a callee reads
//! `threadIdx`.
//!
//! Where `32 / BY` blocks fit along y, the knob `R3_SG` (1 or that many) groups them: the first
//! block of each group runs the body once for each block of the group, under a local
//! `blockIdx` that shadows the built-in one, and writes the group's columns in runs of 32, as a
//! hand-tiled transpose does; the group's other blocks return. The knob is left out where a
//! callee reads `blockIdx` (it would see the real one).
//!
//! Sound without facts about the pointers: the store is the thread's last action and its only
//! write to memory, and the kernel has no barrier of its own, so no other thread may read the
//! element without a race in the original. The value and the address are computed by the
//! thread that computed them before, in its own context: nothing is substituted or re-derived,
//! whatever the index expression holds.

use super::kernel_text::{self as text, Facts, Parsed};
use super::source::{self, Kind};
use super::tiling::{self, Axis};
use std::ops::Range;

/// What the value slots may hold: types without constructors (a `__shared__` variable takes
/// no initializer).
const ELEMENT_TYPES: &[&str] = &[
    "float",
    "double",
    "int",
    "unsigned",
    "unsigned int",
    "long",
    "unsigned long",
    "long long",
    "unsigned long long",
    "short",
    "unsigned short",
    "char",
    "signed char",
    "unsigned char",
    "int8_t",
    "uint8_t",
    "int16_t",
    "uint16_t",
    "int32_t",
    "uint32_t",
    "int64_t",
    "uint64_t",
    "size_t",
    "float2",
    "float4",
    "double2",
    "int2",
    "int4",
    "uint2",
    "uint4",
];

/// Words that make a body unfit besides barriers and fences ([`text::synchronizes`]: every
/// thread of the block must reach the staged path's one barrier): jumps the staged copy cannot
/// keep, and writes it cannot see.
const BARRED: &[&str] = &["goto", "switch", "__shared__", "asm", "memcpy", "memset"];

/// The store the rule moves: `P[I] = E;` with `P` a pointer parameter.
struct Store {
    pointer: String,
    /// Tokens: the pointer's name, the index's closing bracket, the statement's semicolon.
    at: usize,
    rb: usize,
    semi: usize,
}

pub fn staged_store(src: &str, facts: &Facts) -> Option<String> {
    let [bx, by, bz] = facts.block?;
    if bz != 1 || bx < 2 || by < 2 || bx * by > 1024 || src.contains("r3_st") {
        return None;
    }
    let inlined = crate::alias::inline_row_pointers(src);
    let src = inlined.as_deref().unwrap_or(src);
    let p = text::parse(src)?;
    let body = p.kernel.body.clone();
    if body.clone().any(|i| {
        p.toks[i].kind == Kind::Ident && (BARRED.contains(&p.w(i)) || text::synchronizes(p.w(i)))
    }) {
        return None;
    }
    let store = the_store(&p)?;
    if !last_action(&p, &store) || !returns_leave_the_body(&p) {
        return None;
    }
    let elem = element_type(&p, &store.pointer)?;
    let side = strided_side(&p, &store)?;
    // The load side runs the body under a local `threadIdx`, which a callee would not see.
    if side == Side::Load && read_outside_the_body(&p, "threadIdx") {
        return None;
    }
    Some(staged(&p, &store, &elem, side, [bx, by]))
}

/// Which side of the copy is strided across the warp, and so where the threads are reordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The store (`out[c * rows + r] = in[r * cols + c]`): each thread computes its own value,
    /// and the block's threads write them in column order.
    Store,
    /// A load (`out[r * cols + c] = in[c * rows + r]`): the block's threads compute the values
    /// in column order (each running the body as the thread whose value it computes, under a
    /// local `threadIdx`), and each thread writes its own.
    Load,
}

/// The body's one write to memory, where it is a plain `P[I] = E;` on a pointer parameter;
/// None where there is another (an element or a dereference assigned, stepped, an atomic).
fn the_store(p: &Parsed) -> Option<Store> {
    let body = p.kernel.body.clone();
    let pointers: Vec<String> = p
        .pointer_params()
        .iter()
        .map(|&(_, n, _)| p.w(n).to_owned())
        .collect();
    let mut found: Option<Store> = None;
    for i in body.clone() {
        let w = p.w(i);
        let ident = p.toks[i].kind == Kind::Ident;
        if (ident && w.starts_with("atomic")) || w == "->" {
            return None;
        }
        // `*q = …` and `*q++ = …` at a statement's start.
        if w == "*" && matches!(p.w(i - 1), ";" | "{" | "}") {
            return None;
        }
        if !ident || p.w(i + 1) != "[" {
            continue;
        }
        let first_rb = source::matching(p.src, &p.toks, i + 1)?;
        let mut rb = first_rb;
        while p.w(rb + 1) == "[" {
            rb = source::matching(p.src, &p.toks, rb + 1)?;
        }
        let next = p.w(rb + 1);
        let writes = text::ASSIGN.contains(&next)
            || matches!(next, "++" | "--")
            || matches!(p.w(i - 1), "++" | "--" | "&");
        if !writes {
            continue;
        }
        let plain = next == "="
            && pointers.iter().any(|n| n == w)
            && first_rb == rb
            && matches!(p.w(i - 1), ";" | "{" | "}" | ")" | "else");
        if !plain || found.is_some() {
            return None;
        }
        let semi = tiling::statement_end(p, i, body.end) - 1;
        if p.w(semi) != ";" {
            return None;
        }
        found = Some(Store {
            pointer: w.to_owned(),
            at: i,
            rb,
            semi,
        });
    }
    found
}

/// Whether nothing follows the store but the ends of the blocks around it, and no loop holds
/// it: it is the thread's last action, taken at most once.
fn last_action(p: &Parsed, s: &Store) -> bool {
    let body = p.kernel.body.clone();
    (s.semi + 1..body.end).all(|i| p.w(i) == "}") && !in_a_loop(p, s.at)
}

/// Whether token `at` lies inside a `for`, `while` or `do` statement of the body.
fn in_a_loop(p: &Parsed, at: usize) -> bool {
    let body = p.kernel.body.clone();
    body.clone()
        .filter(|&j| j < at && matches!(p.w(j), "for" | "while" | "do"))
        .any(|j| at < tiling::statement_end(p, j, body.end))
}

/// Whether every `return` is a plain `return;` outside loops: one the staged copy can make a
/// `break` out of the `do { } while (0)` around it.
fn returns_leave_the_body(p: &Parsed) -> bool {
    let body = p.kernel.body.clone();
    let lambda = body
        .clone()
        .any(|i| p.w(i) == "[" && matches!(p.w(i + 1), "&" | "=" | "]"));
    !lambda
        && body
            .clone()
            .filter(|&i| p.w(i) == "return")
            .all(|i| p.w(i + 1) == ";" && !in_a_loop(p, i))
}

/// The element type of pointer parameter `name`, where a shared-memory slot may hold it.
fn element_type(p: &Parsed, name: &str) -> Option<String> {
    let params = p.kernel.params.clone();
    let (star, _, _) = p
        .pointer_params()
        .into_iter()
        .find(|&(_, n, _)| p.w(n) == name)?;
    let start = (params.start..star)
        .rev()
        .find(|&j| p.w(j) == ",")
        .map_or(params.start, |c| c + 1);
    let words: Vec<&str> = (start..star).map(|j| p.w(j)).collect();
    if words.iter().any(|w| matches!(*w, "volatile" | "*" | "&")) {
        return None;
    }
    let ty = words
        .into_iter()
        .filter(|w| !matches!(*w, "const" | "__restrict__" | "__restrict" | "restrict"))
        .collect::<Vec<_>>()
        .join(" ");
    ELEMENT_TYPES.contains(&ty.as_str()).then_some(ty)
}

/// Where the body's accesses are strided across the warp: the store where its index moves by
/// one element with the y coordinate and by more with the x one (locals in it read through
/// their initializers), else a load of the store's value that does so while the store is
/// contiguous along x. None where neither: a copy already coalesced gains nothing but a
/// barrier.
fn strided_side(p: &Parsed, s: &Store) -> Option<Side> {
    let stmts = tiling::statements(p, p.kernel.body.clone());
    let (_, coords) = tiling::prefix_and_coords(p, &stmts);
    let coord = |axis: Axis| coords.iter().find(|c| c.axis == axis).map(|c| &c.name);
    let (x, y) = (coord(Axis::X)?, coord(Axis::Y)?);
    let index = |r: Range<usize>| through_locals(p, r, s.at, &[x, y]);
    let column = |index: &str| {
        let names_x = source::lex(index)
            .unwrap_or_default()
            .iter()
            .any(|t| t.text(index) == x.as_str());
        names_x && tiling::unit_stride(index, y, Some(x)) && !tiling::unit_stride(index, x, Some(y))
    };
    let stored = index(s.at + 2..s.rb);
    if column(&stored) {
        return Some(Side::Store);
    }
    if !tiling::unit_stride(&stored, x, Some(y)) {
        return None;
    }
    let loads = (s.rb + 2..s.semi).filter(|&i| p.toks[i].kind == Kind::Ident && p.w(i + 1) == "[");
    loads
        .filter_map(|i| Some(i + 2..source::matching(p.src, &p.toks, i + 1)?))
        .any(|r| column(&index(r)))
        .then_some(Side::Load)
}

/// The text of tokens `r` with each local declared (once, never assigned again) before token
/// `until` replaced by its parenthesized initializer, a few levels deep; `keep` (the
/// coordinates) stay names.
fn through_locals(p: &Parsed, r: Range<usize>, until: usize, keep: &[&String]) -> String {
    let locals = locals_before(p, until);
    let mut out = tiling::span_text(p, r);
    for _ in 0..4 {
        let Ok(toks) = source::lex(&out) else { break };
        let mut next = String::new();
        let mut changed = false;
        for t in &toks {
            let w = t.text(&out);
            let local = locals
                .iter()
                .find(|(n, _)| n == w && t.kind == Kind::Ident && !keep.contains(&n));
            match local {
                Some((_, init)) => {
                    next.push_str(&format!("({init})"));
                    changed = true;
                }
                None => next.push_str(w),
            }
            next.push(' ');
        }
        out = next;
        if !changed {
            break;
        }
    }
    out
}

/// Locals declared with one declarator and an initializer before token `until`, never
/// assigned again: (name, initializer text).
fn locals_before(p: &Parsed, until: usize) -> Vec<(String, String)> {
    let body = p.kernel.body.clone();
    let mut out = Vec::new();
    for i in body.start..until {
        let starts = i == body.start || matches!(p.w(i - 1), ";" | "{" | "}");
        if !starts || !tiling::TYPE_WORDS.contains(&p.w(i)) {
            continue;
        }
        let end = tiling::statement_end(p, i, body.end);
        let Some(eq) = (i..end).find(|&j| p.w(j) == "=") else {
            continue;
        };
        let name_at = eq - 1;
        let init = eq + 1..end - 1;
        let one = !init.clone().any(|j| p.w(j) == ",") && init.start < init.end;
        if p.toks[name_at].kind != Kind::Ident
            || !one
            || tiling::assigned_again(p, p.w(name_at), name_at)
        {
            continue;
        }
        out.push((p.w(name_at).to_owned(), tiling::span_text(p, init)));
    }
    out
}

/// The knob that groups blocks along y, and the longest run of a column it aims at (32
/// elements: a 128-byte line of floats).
const GROUP_KNOB: &str = "R3_SG";
const RUN: u32 = 32;

/// How many blocks along y one block may stage for: `RUN / by` where that is a whole number
/// above 1 and nothing outside the kernel's body reads `blockIdx` (the grouped path runs the
/// body under a local `blockIdx` of each block of the group, which a callee would not see).
fn group_of(p: &Parsed, by: u32) -> Option<u32> {
    (by < RUN && RUN.is_multiple_of(by) && !read_outside_the_body(p, "blockIdx"))
        .then_some(RUN / by)
}

/// Whether a token `name` lies outside the kernel's body (in a callee of the region).
fn read_outside_the_body(p: &Parsed, name: &str) -> bool {
    p.toks
        .iter()
        .enumerate()
        .any(|(i, t)| t.text(p.src) == name && !p.kernel.body.contains(&i))
}

/// The slot (column, row) of round `r3_i` of a thread: its own, or the one that puts
/// consecutive threads on consecutive rows of a column.
fn slot(remapped: bool, [bx, by]: [u32; 2], rows: &str) -> String {
    if remapped {
        let e = format!("((r3_i * {by} + r3_ty) * {bx} + r3_tx)");
        format!("r3_col = {e} / ({rows}), r3_row = {e} % ({rows})")
    } else {
        format!("r3_col = r3_tx, r3_row = r3_i * {by} + r3_ty")
    }
}

/// The kernel with the staged path in front of its body (see the module's comment): where
/// blocks can be grouped, `R3_SG` is a knob (1 or the group) and the judge decides.
fn staged(p: &Parsed, s: &Store, elem: &str, side: Side, [bx, by]: [u32; 2]) -> String {
    let body = p.kernel.body.clone();
    let (open_end, close) = (p.toks[body.start - 1].span.1, p.toks[body.end].span.0);
    let piece = |r: Range<usize>| tiling::span_text(p, r);
    let value = piece(s.rb + 2..s.semi);
    let target = piece(s.at..s.rb + 1);
    let mut edits = vec![(
        p.toks[s.at].span.0 - open_end,
        p.toks[s.semi].span.1 - open_end,
        format!("{{ r3_value = {value}; r3_at = &{target}; }}"),
    )];
    edits.extend(body.clone().filter(|&i| p.w(i) == "return").map(|i| {
        (
            p.toks[i].span.0 - open_end,
            p.toks[i].span.1 - open_end,
            "break".into(),
        )
    }));
    let inner = text::edit(&p.src[open_end..close], edits);
    let first = p.toks[body.start].span.0;
    let (ind, _) = text::indent_at(p.src, first);
    let inner = inner.trim_end().replace('\n', &format!("\n      {ind}"));
    let group = group_of(p, by);
    let sg = if group.is_some() { GROUP_KNOB } else { "1" };
    let rows = format!("{by} * {sg}");
    // An odd row length: a warp's slot accesses a row apart fall in distinct banks.
    let len = format!("{rows} + 1 - ({rows}) % 2");
    let load = side == Side::Load;
    let (compute, write) = (slot(load, [bx, by], &rows), slot(!load, [bx, by], &rows));
    let thread = if load {
        format!("\n{ind}      const uint3 threadIdx = {{r3_col, r3_row % {by}, 0}};")
    } else {
        String::new()
    };
    let what = if load {
        format!("compute each value in column order ({rows} consecutive elements of the strided load, consecutive threads on consecutive elements, each thread running the body as the thread whose value it computes) into shared memory, then each thread stores its own")
    } else {
        format!("stage each thread's store in shared memory and write the stores a column at a time ({rows} elements), consecutive threads on consecutive elements")
    };
    let grouped = if group.is_some() {
        "; the first block of each R3_SG along y does so for its group, which runs the body under each block's index, and the others return"
    } else {
        ""
    };
    let path = format!(
        "// r3: blocks of the recorded shape ({bx}x{by}) {what}{grouped}. Other blocks run the code below.\n\
{ind}if (blockDim.x == {bx} && blockDim.y == {by} && blockDim.z == 1) {{\n\
{ind}  __shared__ {elem} r3_st_value[{bx}][{len}];\n\
{ind}  __shared__ {elem} *r3_st_at[{bx}][{len}];\n\
{ind}  const unsigned r3_first = blockIdx.y - blockIdx.y % {sg};\n\
{ind}  if (blockIdx.y != r3_first) return;\n\
{ind}  const unsigned r3_bx = blockIdx.x, r3_bz = blockIdx.z, r3_tx = threadIdx.x, r3_ty = threadIdx.y;\n\
{ind}  #pragma unroll\n\
{ind}  for (unsigned r3_i = 0; r3_i < {sg}; ++r3_i) {{\n\
{ind}    const unsigned {compute};\n\
{ind}    {elem} r3_value{{}};\n\
{ind}    {elem} *r3_at = nullptr;\n\
{ind}    if (r3_first + r3_row / {by} < gridDim.y) {{\n\
{ind}      const uint3 blockIdx = {{r3_bx, r3_first + r3_row / {by}, r3_bz}};{thread}\n\
{ind}      do {{{inner}\n\
{ind}      }} while (0);\n\
{ind}    }}\n\
{ind}    r3_st_value[r3_col][r3_row] = r3_value;\n\
{ind}    r3_st_at[r3_col][r3_row] = r3_at;\n\
{ind}  }}\n\
{ind}  __syncthreads();\n\
{ind}  #pragma unroll\n\
{ind}  for (unsigned r3_i = 0; r3_i < {sg}; ++r3_i) {{\n\
{ind}    const unsigned {write};\n\
{ind}    {elem} *const r3_to = r3_st_at[r3_col][r3_row];\n\
{ind}    if (r3_to) *r3_to = r3_st_value[r3_col][r3_row];\n\
{ind}  }}\n\
{ind}  return;\n\
{ind}}}\n{ind}"
    );
    let out = text::edit(p.src, vec![(first, first, path)]);
    match group {
        Some(g) => {
            let at = p.kernel.span.start;
            format!(
                "{}R3_PARAM({GROUP_KNOB}, 1, {g})\n{}",
                &out[..at],
                &out[at..]
            )
        }
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAIVE: &str = "__global__ void transpose_naive_kernel(int rows, int cols, const float* __restrict__ in,\n                                       float* __restrict__ out) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  if (r < rows && c < cols) out[static_cast<size_t>(c) * rows + r] = in[static_cast<size_t>(r) * cols + c];\n}";

    fn shaped(block: [u32; 3]) -> Facts {
        Facts {
            pointers_disjoint: None,
            block: Some(block),
        }
    }

    #[test]
    fn a_naive_transpose_stages_its_store() {
        let out = staged_store(NAIVE, &shaped([32, 8, 1])).unwrap();
        insta::assert_snapshot!(out);
        assert_eq!(
            staged_store(&out, &shaped([32, 8, 1])),
            None,
            "applies once"
        );
    }

    #[test]
    fn a_guard_return_becomes_a_break_and_locals_are_read_through() {
        let src = "__global__ void t(int n, int m, const double *a, double *b) {\n  const int j = blockIdx.x * blockDim.x + threadIdx.x;\n  const int i = blockIdx.y * blockDim.y + threadIdx.y;\n  if (i >= n || j >= m) return;\n  size_t o = (size_t)j * n + i;\n  b[o] = 2.0 * a[(size_t)i * m + j];\n}";
        let out = staged_store(src, &shaped([16, 16, 1])).unwrap();
        assert!(out.contains("if (i >= n || j >= m) break;"), "{out}");
        assert!(
            out.contains("{ r3_value = 2.0 * a[(size_t)i * m + j]; r3_at = &b[o]; }"),
            "{out}"
        );
        assert!(
            out.starts_with("R3_PARAM(R3_SG, 1, 2)\n__global__"),
            "{out}"
        );
        assert!(
            out.contains("__shared__ double r3_st_value[16][16 * R3_SG + 1 - (16 * R3_SG) % 2];"),
            "{out}"
        );
        assert!(
            out.contains("if (i >= n || j >= m) return;\n  size_t o"),
            "{out}"
        );
    }

    #[test]
    fn blocks_are_not_grouped_where_a_callee_reads_the_block_index_or_a_column_is_full() {
        let callee = format!(
            "__device__ float one() {{ return blockIdx.z + 1.0f; }}\n{}",
            NAIVE.replace(" * cols + c];", " * cols + c] * one();")
        );
        let out = staged_store(&callee, &shaped([32, 8, 1])).unwrap();
        assert!(!out.contains("R3_PARAM"), "{out}");
        assert!(out.contains("r3_i < 1;"), "{out}");
        let full = staged_store(NAIVE, &shaped([8, 32, 1])).unwrap();
        assert!(!full.contains("R3_PARAM"), "{full}");
        let odd = staged_store(NAIVE, &shaped([32, 6, 1])).unwrap();
        assert!(!odd.contains("R3_PARAM"), "6 rows do not divide 32: {odd}");
    }

    #[test]
    fn a_gathering_transpose_computes_in_column_order_and_stores_its_own() {
        let src = "__global__ void g(int h, int w, const float *a, float *b) {\n  int x = blockIdx.x * blockDim.x + threadIdx.x;\n  int y = blockIdx.y * blockDim.y + threadIdx.y;\n  if (x < w && y < h) b[y * w + x] = a[x * h + y];\n}";
        let out = staged_store(src, &shaped([32, 8, 1])).unwrap();
        insta::assert_snapshot!(out);
        assert!(
            out.contains("const uint3 threadIdx = {r3_col, r3_row % 8, 0};"),
            "{out}"
        );
        let (compute, write) = out.split_once("__syncthreads();").unwrap();
        assert!(
            compute.contains("r3_col = ((r3_i * 8 + r3_ty) * 32 + r3_tx) / (8 * R3_SG)"),
            "{out}"
        );
        assert!(
            write.contains("r3_col = r3_tx, r3_row = r3_i * 8 + r3_ty;"),
            "{out}"
        );
    }

    #[test]
    fn not_offered_where_the_store_is_contiguous_moves_or_is_not_the_last_action() {
        let shape = shaped([32, 8, 1]);
        for src in [
            // Already contiguous along x, both sides.
            "__global__ void k(int n, const float *a, float *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  if (r < n && c < n) b[r * n + c] = 2.0f * a[r * n + c];\n}",
            // A strided load whose thread index a callee reads.
            "__device__ float twice(float v) { return v * (threadIdx.x + 1); }\n__global__ void k(int n, const float *a, float *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  if (r < n && c < n) b[r * n + c] = twice(a[c * n + r]);\n}",
            // In a loop.
            "__global__ void k(int n, const float *a, float *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  for (int q = 0; q < 2; q++) b[c * n + r + q] = a[r * n + c];\n}",
            // Not the last action.
            "__global__ void k(int n, const float *a, float *b, float *s) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  b[c * n + r] = a[r * n + c];\n  s[0] = 1.0f;\n}",
            // Another write.
            "__global__ void k(int n, const float *a, float *b, float *s) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  s[r] += 1.0f;\n  b[c * n + r] = a[r * n + c];\n}",
            // A barrier of its own, or a fence.
            "__global__ void k(int n, const float *a, float *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  __syncthreads();\n  b[c * n + r] = a[r * n + c];\n}",
            "__global__ void k(int n, const float *a, float *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  __threadfence();\n  b[c * n + r] = a[r * n + c];\n}",
            // A return inside a loop.
            "__global__ void k(int n, const float *a, float *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  for (int q = 0; q < n; q++) if (a[q] < 0) return;\n  b[c * n + r] = a[r * n + c];\n}",
            // A type with constructors.
            "__global__ void k(int n, const Foo *a, Foo *b) {\n  int c = blockIdx.x * blockDim.x + threadIdx.x;\n  int r = blockIdx.y * blockDim.y + threadIdx.y;\n  b[c * n + r] = a[r * n + c];\n}",
        ] {
            assert_eq!(staged_store(src, &shape), None, "{src}");
        }
        assert!(
            staged_store(NAIVE, &shaped([256, 1, 1])).is_none(),
            "one row"
        );
        assert!(
            staged_store(NAIVE, &shaped([8, 8, 2])).is_none(),
            "3D blocks"
        );
        assert!(staged_store(NAIVE, &Facts::default()).is_none(), "no shape");
    }
}
