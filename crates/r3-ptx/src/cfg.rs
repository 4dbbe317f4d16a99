//! The control flow of a PTX text, enough for the traits recipes name: function bodies (as
//! `module` finds them) as instruction and label lines, basic blocks with their successors,
//! and the loops among them.

/// Shapes of the code a recipe's preconditions name (`passes/recipes.toml`, `when`), read off
/// the `-O3` PTX of a kernel: cheap, and what the backend really emitted.
pub const TRAITS: &[(&str, &str)] = &[
    (
        "loop",
        "a loop (a block on a cycle of the control-flow graph)",
    ),
    (
        "loop-invariant-store",
        "a loop that stores to global memory at an address it never changes: an accumulator \
         kept in memory because the pointers may alias",
    ),
];

/// The [`TRAITS`] a PTX text shows, in that order. Loops are found on the control-flow
/// graph (a block that can reach itself), not by branch direction: the backend often places a
/// loop's latch above its header.
pub fn traits(ptx: &str) -> Vec<&'static str> {
    let mut loop_seen = false;
    let mut invariant_store = false;
    for body in function_bodies(ptx) {
        let blocks = basic_blocks(&body);
        let reach: Vec<Vec<bool>> = (0..blocks.len()).map(|b| reachable(&blocks, b)).collect();
        for (b, block) in blocks.iter().enumerate().filter(|(b, _)| reach[*b][*b]) {
            loop_seen = true;
            // Invariant in some loop around `b`, the innermost included: a cycle through `b`
            // on which no block sets the address (in a loop nest, the outer loop moves the
            // inner loop's accumulator, and that one still stays in memory).
            let sets = |x: usize, base: &str| blocks[x].lines.iter().any(|l| defines(l, base));
            invariant_store |= block
                .lines
                .iter()
                .filter_map(|l| store_base(l))
                .any(|base| !sets(b, base) && on_cycle_avoiding(&blocks, b, |x| sets(x, base)));
        }
    }
    let mut out = Vec::new();
    if loop_seen {
        out.push(TRAITS[0].0);
    }
    if invariant_store {
        out.push(TRAITS[1].0);
    }
    out
}

/// The instruction and label lines of each function body, trimmed, without comments.
fn function_bodies(ptx: &str) -> Vec<Vec<&str>> {
    let code =
        |line: &str| !line.is_empty() && !line.starts_with('.') && line != "{" && line != "}";
    crate::module::bodies(ptx)
        .into_iter()
        .map(|lines| {
            lines
                .map(|line| line.split("//").next().unwrap_or("").trim())
                .filter(|&line| code(line))
                .collect::<Vec<_>>()
        })
        .filter(|body| !body.is_empty())
        .collect()
}

struct Block<'a> {
    lines: Vec<&'a str>,
    succ: Vec<usize>,
}

/// Splits a body at labels and after branches and returns, with each block's successors.
fn basic_blocks<'a>(body: &[&'a str]) -> Vec<Block<'a>> {
    let mut spans: Vec<(Option<&str>, Vec<&'a str>)> = vec![(None, Vec::new())];
    for &line in body {
        if let Some(label) = line.strip_suffix(':') {
            spans.push((Some(label), Vec::new()));
            continue;
        }
        spans.last_mut().unwrap().1.push(line);
        let op = unguarded(line).split_whitespace().next().unwrap_or("");
        if op.starts_with("bra") || op == "ret;" || op == "ret" || op.starts_with("exit") {
            spans.push((None, Vec::new()));
        }
    }
    let index: std::collections::HashMap<&str, usize> = spans
        .iter()
        .enumerate()
        .filter_map(|(i, (l, _))| l.map(|l| (l, i)))
        .collect();
    let n = spans.len();
    spans
        .into_iter()
        .enumerate()
        .map(|(i, (_, lines))| {
            let last = lines.last().copied().unwrap_or("");
            let guarded = last.starts_with('@');
            let op = unguarded(last).split_whitespace().next().unwrap_or("");
            let mut succ = Vec::new();
            if let Some(t) = branch_target(last).and_then(|t| index.get(t)) {
                succ.push(*t);
            }
            let ends = op.starts_with("bra") || op.starts_with("ret") || op.starts_with("exit");
            if (guarded || !ends) && i + 1 < n {
                succ.push(i + 1);
            }
            Block { lines, succ }
        })
        .collect()
}

/// Which blocks can be reached from `from` by one or more edges.
fn reachable(blocks: &[Block], from: usize) -> Vec<bool> {
    let mut seen = vec![false; blocks.len()];
    let mut stack = blocks[from].succ.clone();
    while let Some(b) = stack.pop() {
        if !std::mem::replace(&mut seen[b], true) {
            stack.extend(&blocks[b].succ);
        }
    }
    seen
}

/// Whether `b` lies on a cycle of blocks none of which is `avoid`ed (`b` itself aside).
fn on_cycle_avoiding(blocks: &[Block], b: usize, avoid: impl Fn(usize) -> bool) -> bool {
    let mut seen = vec![false; blocks.len()];
    let mut stack = blocks[b].succ.clone();
    while let Some(x) = stack.pop() {
        if x == b {
            return true;
        }
        if !avoid(x) && !std::mem::replace(&mut seen[x], true) {
            stack.extend(&blocks[x].succ);
        }
    }
    false
}

/// Drops a guard predicate (`@%p1 `, `@!%p1 `).
fn unguarded(line: &str) -> &str {
    match line.strip_prefix('@') {
        Some(rest) => rest
            .split_once(char::is_whitespace)
            .map_or("", |(_, i)| i.trim()),
        None => line,
    }
}

fn branch_target(line: &str) -> Option<&str> {
    let ins = unguarded(line);
    let (op, rest) = ins.split_once(char::is_whitespace)?;
    (op == "bra" || op.starts_with("bra.")).then(|| rest.trim().trim_end_matches(';').trim())
}

/// The base register of a store to global (or generic) memory: `st.global.f32 [%rd5+4], %f1;`
/// gives `%rd5`.
fn store_base(line: &str) -> Option<&str> {
    let ins = unguarded(line);
    let (op, rest) = ins.split_once(char::is_whitespace)?;
    let space = op.strip_prefix("st.")?.split('.').next()?;
    if matches!(space, "shared" | "local" | "param" | "const") {
        return None;
    }
    let addr = rest.trim().strip_prefix('[')?;
    let end = addr.find(['+', ']'])?;
    Some(addr[..end].trim()).filter(|r| r.starts_with('%'))
}

/// Whether an instruction writes `reg` (its first operand, for instructions that have a
/// destination).
fn defines(line: &str, reg: &str) -> bool {
    let ins = unguarded(line);
    let Some((op, rest)) = ins.split_once(char::is_whitespace) else {
        return false;
    };
    if op.starts_with("st.") || op.starts_with("bra") || op.starts_with("red.") {
        return false;
    }
    let rest = rest.trim();
    let dests = match rest.strip_prefix('{') {
        Some(v) => v.split('}').next().unwrap_or(""),
        None => rest.split(',').next().unwrap_or(""),
    };
    dests.split(',').any(|d| d.trim() == reg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traits_find_an_accumulator_kept_in_memory() {
        // y[i] += a[j] * x[j]: the store's address %rd5 is set before the loop.
        let acc = "
.visible .entry k(
\t.param .u64 k_param_0
)
{
\tcvta.to.global.u64 \t%rd5, %rd1;
$L__BB0_2:
\tld.global.f32 \t%f1, [%rd7];
\tfma.rn.f32 \t%f2, %f1, %f1, %f2;
\tst.global.f32 \t[%rd5+4], %f2;
\tadd.s64 \t%rd7, %rd7, 4;
\tsetp.ne.s32 \t%p1, %r3, 0;
\t@%p1 bra \t$L__BB0_2;
\tret;
}
";
        assert_eq!(traits(acc), vec!["loop", "loop-invariant-store"]);
        // A store through the moving pointer is no accumulator; shared memory does not count.
        let moving = acc.replace("[%rd5+4]", "[%rd7]");
        assert_eq!(traits(&moving), vec!["loop"]);
        let shared = acc.replace("st.global.f32", "st.shared.f32");
        assert_eq!(traits(&shared), vec!["loop"]);
        // Redefined in the loop (also as one of a vector load's destinations): not invariant.
        let redefined = acc.replace(
            "ld.global.f32 \t%f1, [%rd7];",
            "ld.global.v2.u64 \t{%rd4, %rd5}, [%rd7];",
        );
        assert_eq!(traits(&redefined), vec!["loop"]);
        // The backend may place the latch above the header: still a loop.
        let rotated = "
.visible .entry k()
{
\tcvta.to.global.u64 \t%rd5, %rd1;
\tbra.uni \t$L__BB0_2;
$L__BB0_1:
\tst.global.f32 \t[%rd5], %f2;
\tsetp.ne.s32 \t%p1, %r3, 0;
\t@%p1 bra \t$L__BB0_2;
\tret;
$L__BB0_2:
\tld.global.f32 \t%f1, [%rd7];
\tadd.s64 \t%rd7, %rd7, 4;
\tbra.uni \t$L__BB0_1;
}
";
        assert_eq!(traits(rotated), vec!["loop", "loop-invariant-store"]);
        // A loop nest (symmat[j1*m + j2] += ... over i, inside a loop over j2): the outer loop
        // moves the address, the inner one keeps it.
        let nest = "
.visible .entry k()
{
$L__BB0_1:
\tadd.s64 \t%rd5, %rd5, 4;
$L__BB0_2:
\tld.global.f32 \t%f1, [%rd7];
\tst.global.f32 \t[%rd5], %f1;
\tadd.s64 \t%rd7, %rd7, 4;
\t@%p1 bra \t$L__BB0_2;
\t@%p2 bra \t$L__BB0_1;
\tret;
}
";
        assert_eq!(traits(nest), vec!["loop", "loop-invariant-store"]);
        // Moved in the inner loop too: no accumulator.
        let moving_nest = nest.replace("[%rd7];\n", "[%rd7];\n\tadd.s64 \t%rd5, %rd5, 8;\n");
        assert_eq!(traits(&moving_nest), vec!["loop"]);
        // A forward branch is no loop.
        let straight = acc.replace(
            "@%p1 bra \t$L__BB0_2;",
            "@!%p1 bra \t$L__BB0_3;\n$L__BB0_3:",
        );
        assert!(traits(&straight).is_empty());
    }
}
