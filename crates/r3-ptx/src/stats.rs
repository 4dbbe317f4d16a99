//! How big a PTX text is and what its instructions are: one rule for what counts as an
//! instruction (a line ending in `;` inside a function body that is not a declaration),
//! shared by the statistics and the instruction mix.

use crate::module::{self, Module};
use std::collections::BTreeMap;

/// Counts of what matters in a PTX text, for reports and quick checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PtxStats {
    pub bytes: usize,
    /// Instructions (lines ending in ';' inside function bodies, not declarations).
    pub instructions: usize,
    pub entries: Vec<String>,
}

/// The instruction lines of a PTX text, trimmed: the lines of its function bodies
/// ([`Module::body_lines`]) that end in `;` and are not declarations (`.reg`, `.param`,
/// `.shared`, …) or comments. A text that is not a PTX module has none.
pub fn instructions(ptx: &str) -> impl Iterator<Item = &str> {
    module::bodies(ptx)
        .into_iter()
        .flatten()
        .map(str::trim)
        .filter(|line| is_instruction(line))
}

/// Whether a trimmed line of a function body is an instruction.
fn is_instruction(line: &str) -> bool {
    let is_decl = line.starts_with('.') || line.starts_with("//") || line.is_empty();
    line.ends_with(';') && !is_decl
}

/// The names of the PTX's entries (kernels: `.entry` definitions), in order.
pub fn entries(ptx: &str) -> Vec<String> {
    Module::parse(ptx).map_or_else(|_| Vec::new(), |m| entries_of(&m))
}

fn entries_of(m: &Module) -> Vec<String> {
    m.entries()
        .filter_map(|k| m.name(k))
        .map(str::to_owned)
        .collect()
}

/// The size, instruction count and entries of a PTX text.
pub fn stats(ptx: &str) -> PtxStats {
    let (instructions, entries) = match Module::parse(ptx) {
        Ok(m) => {
            let lines = m.functions().filter_map(|k| m.body_lines(k)).flatten();
            let n = lines.map(str::trim).filter(|l| is_instruction(l)).count();
            (n, entries_of(&m))
        }
        Err(_) => (0, Vec::new()),
    };
    PtxStats {
        bytes: ptx.len(),
        instructions,
        entries,
    }
}

/// The group a PTX opcode (`ld.global.nc.f32`, `fma.rn.f32`, …) is counted in.
pub fn opcode_group(op: &str) -> &'static str {
    let base = op.split('.').next().unwrap_or(op);
    let space = |s: &str| op.split('.').any(|p| p == s);
    match base {
        "ld" | "ldu" if space("global") => "ld.global",
        "st" if space("global") => "st.global",
        "ld" if space("shared") => "ld.shared",
        "st" if space("shared") => "st.shared",
        "ld" | "st" if space("local") => "ld/st.local",
        "ld" if space("param") => "ld.param",
        "ld" | "ldu" | "st" | "cp" | "prefetch" => "ld/st.other",
        "atom" | "red" => "atomic",
        "fma" | "mad" => "fma/mad",
        "add" | "sub" | "mul" | "div" | "rem" | "neg" | "abs" | "min" | "max" | "copysign" => {
            "arith"
        }
        "and" | "or" | "xor" | "not" | "shl" | "shr" | "bfe" | "bfi" | "popc" | "clz" | "brev"
        | "prmt" | "shf" | "lop3" | "cnot" => "logic",
        "setp" | "selp" | "set" | "slct" => "compare/select",
        "cvt" | "cvta" => "convert",
        "mov" => "move",
        "bra" | "ret" | "exit" | "call" | "brx" => "control",
        "bar" | "barrier" | "membar" | "fence" => "sync",
        "sqrt" | "rsqrt" | "rcp" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => "special",
        _ => "other",
    }
}

/// PTX instructions by group (the instructions of [`stats`]).
pub fn mix(ptx: &str) -> BTreeMap<String, usize> {
    let mut mix = BTreeMap::new();
    for line in instructions(ptx) {
        *mix.entry(opcode_group(opcode(line)).to_owned())
            .or_insert(0) += 1;
    }
    mix
}

/// The opcode of an instruction line, its guard (`@%p1`, `@!%p1`) passed over:
/// `@%p1 ld.global.f32 %f1, [%rd1];` gives `ld.global.f32`.
pub fn opcode(line: &str) -> &str {
    let mut words = line.split_whitespace();
    let mut op = words.next().unwrap_or("");
    if op.starts_with('@') {
        op = words.next().unwrap_or("");
    }
    op.trim_end_matches(';')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_group() {
        assert_eq!(opcode_group("ld.global.nc.f32"), "ld.global");
        assert_eq!(opcode_group("st.shared.v4.f32"), "st.shared");
        assert_eq!(opcode_group("ld.param.u64"), "ld.param");
        assert_eq!(opcode_group("st.local.u32"), "ld/st.local");
        assert_eq!(opcode_group("fma.rn.f32"), "fma/mad");
        assert_eq!(opcode_group("setp.ge.s32"), "compare/select");
        assert_eq!(opcode_group("bra.uni"), "control");
        let ptx = ".visible .entry k(\n.param .u64 k_p0\n)\n{\n.reg .b32 %r<4>;\nld.param.u64 %rd1, [k_p0];\n@%p1 bra $L__BB0_2;\nfma.rn.f32 %f3, %f1, %f2, %f3;\n$L__BB0_2:\nret;\n}\n";
        let mix = mix(ptx);
        assert_eq!(mix["ld.param"], 1);
        assert_eq!(mix["control"], 2);
        assert_eq!(mix["fma/mad"], 1);
        assert_eq!(mix.values().sum::<usize>(), stats(ptx).instructions);
    }
}
