//! A kernel's code made to run a prefix of its grid as if the whole grid ran: every read of
//! the grid's extent in one dimension (`%nctaid.x|y|z`, CUDA's `gridDim`) answers the full
//! extent, so the blocks that do run compute exactly what they compute in the full launch.
//! Replay's screen (`r3-replay`'s `screen`) times candidates on such a prefix.
//!
//! Refused, with the reason: code that reads the extent other than by a plain `mov` (LLVM's
//! NVPTX backend always moves a special register into a register first), and code that uses
//! thread-block clusters (a cluster's shape ties blocks to each other).

use crate::lex::{lex, TokKind, Token};

/// CUDA's letters for grid dimensions 0, 1 and 2.
pub const DIMS: [&str; 3] = ["x", "y", "z"];

/// `ptx` with every read of `%nctaid.<dim>` replaced by `extent`; the text unchanged (and not
/// copied) where it reads none. Err: why the code cannot run a prefix faithfully.
pub fn with_grid_extent(
    ptx: &str,
    dim: usize,
    extent: u32,
) -> Result<std::borrow::Cow<'_, str>, String> {
    let want = format!(".{}", DIMS.get(dim).ok_or("no such grid dimension")?);
    let toks = lex(ptx).map_err(|e| format!("line {}: {}", e.line, e.problem))?;
    let text = |t: &Token| &ptx[t.range()];
    let mut cuts = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        let s = text(t);
        match t.kind {
            TokKind::Ident if s.starts_with("%cluster") || s.starts_with("%ncluster") => {
                return Err(format!("it reads {s}: thread-block clusters"));
            }
            TokKind::Directive
                if matches!(
                    s,
                    ".reqnctapercluster" | ".explicitcluster" | ".maxclusterrank"
                ) =>
            {
                return Err(format!("it declares {s}: thread-block clusters"));
            }
            TokKind::Ident if s == "%nctaid" => {
                let Some(d) = toks.get(i + 1).filter(|d| d.kind == TokKind::Directive) else {
                    return Err(format!("line {}: %nctaid without a dimension", t.line));
                };
                if text(d) != want {
                    continue;
                }
                if !plain_move(ptx, &toks, i) {
                    return Err(format!(
                        "line {}: it reads %nctaid{want} other than by `mov.u32 %r, %nctaid{want};`",
                        t.line
                    ));
                }
                cuts.push(t.start..d.end);
            }
            _ => {}
        }
    }
    if cuts.is_empty() {
        return Ok(std::borrow::Cow::Borrowed(ptx));
    }
    let mut out = String::with_capacity(ptx.len());
    let mut at = 0;
    for c in cuts {
        out.push_str(&ptx[at..c.start]);
        out.push_str(&extent.to_string());
        at = c.end;
    }
    out.push_str(&ptx[at..]);
    Ok(std::borrow::Cow::Owned(out))
}

/// Whether the special register at token `i` is the source of `mov.u32|b32 %reg, %nctaid.d;`
/// with no predicate: tokens i-4..=i+2.
fn plain_move(ptx: &str, toks: &[Token], i: usize) -> bool {
    let Some(before) = i.checked_sub(4).map(|s| &toks[s..i]) else {
        return false;
    };
    let text = |t: &Token| &ptx[t.range()];
    let is = |t: &Token, k: TokKind, s: &str| t.kind == k && text(t) == s;
    // The statement starts at `mov`: no predicate (`@%p`, `@!%p`) before it.
    let starts = i == 4 || matches!(toks[i - 5].kind, TokKind::Punct(b';' | b'{' | b'}' | b':'));
    starts
        && is(&before[0], TokKind::Ident, "mov")
        && matches!(text(&before[1]), ".u32" | ".b32" | ".s32")
        && before[2].kind == TokKind::Ident
        && text(&before[2]).starts_with('%')
        && before[3].kind == TokKind::Punct(b',')
        && toks
            .get(i + 2)
            .is_some_and(|t| t.kind == TokKind::Punct(b';'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = "\
.visible .entry k(.param .u32 k_param_0)
{
\t.reg .b32 %r<9>;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, %ntid.x;
\tmov.u32 %r3, %nctaid.x;   // gridDim.x
\tmov.u32 %r4, %nctaid.y;
\tmul.lo.s32 %r5, %r3, %r2;
\tret;
}
";

    #[test]
    fn every_read_of_the_extent_in_that_dimension_answers_the_full_grid() {
        let x = with_grid_extent(KERNEL, 0, 4096).unwrap();
        assert!(x.contains("mov.u32 %r3, 4096;   // gridDim.x"), "{x}");
        assert!(x.contains("mov.u32 %r4, %nctaid.y;"), "y is not x: {x}");
        assert!(x.contains("%ctaid.x"), "the block's own index is untouched");
        let y = with_grid_extent(KERNEL, 1, 7).unwrap();
        assert!(
            y.contains("mov.u32 %r4, 7;") && y.contains("%nctaid.x"),
            "{y}"
        );
        // Nothing to change: the same text, not a copy.
        assert!(matches!(
            with_grid_extent(KERNEL, 2, 3).unwrap(),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn code_that_reads_the_extent_otherwise_or_uses_clusters_is_refused() {
        let predicated = KERNEL.replace(
            "\tmov.u32 %r3, %nctaid.x;",
            "\t@%p1 mov.u32 %r3, %nctaid.x;",
        );
        let e = with_grid_extent(&predicated, 0, 8).unwrap_err();
        assert!(e.contains("line 6") && e.contains("%nctaid.x"), "{e}");
        let negated = KERNEL.replace(
            "\tmov.u32 %r3, %nctaid.x;",
            "\t@!%p1 mov.u32 %r3, %nctaid.x;",
        );
        assert!(with_grid_extent(&negated, 0, 8).is_err());
        let labelled = KERNEL.replace(
            "\tmov.u32 %r3, %nctaid.x;",
            "$L1:\n\tmov.u32 %r3, %nctaid.x;",
        );
        assert!(with_grid_extent(&labelled, 0, 8)
            .unwrap()
            .contains("mov.u32 %r3, 8;"));
        let operand = KERNEL.replace("mul.lo.s32 %r5, %r3, %r2;", "add.s32 %r5, %nctaid.x, 1;");
        assert!(with_grid_extent(&operand, 0, 8).is_err());
        let cluster = KERNEL.replace("mov.u32 %r2, %ntid.x;", "mov.u32 %r2, %clusterid.x;");
        assert!(with_grid_extent(&cluster, 1, 8)
            .unwrap_err()
            .contains("clusters"));
        let declared = KERNEL.replace("{\n", ".reqnctapercluster 2, 1, 1\n{\n");
        assert!(with_grid_extent(&declared, 0, 8)
            .unwrap_err()
            .contains("clusters"));
        assert!(with_grid_extent(KERNEL, 3, 8).is_err());
    }
}
