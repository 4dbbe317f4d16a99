//! Lists a kernel appends to with atomics: `out[atomicAdd(&count, 1)] = v`. The order of such a
//! list is the order the threads reached the atomic, which the program does not define: one
//! compile of the kernel may fill it in the same order on every replay of a small launch and
//! another compile in another, both right. Found by data flow over the entry's instructions: a
//! store whose address derives both from a kernel parameter and from what an atomic add (or
//! increment) returned appends to the allocation that parameter points into.
//!
//! The flow is coarse where it must be safe the other way: a value loaded from memory carries
//! neither origin (a list found through a pointer in memory is not one), calls end it, and a
//! store whose address also holds a value loaded from memory is no append: a counting sort's
//! `out[start[b] + atomicAdd(&n[b], 1)]` orders its elements across buckets, which a multiset of
//! the whole allocation would not check.

use crate::module::Module;
use crate::stats::opcode;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A list the first entry of `ptx` appends to: its kernel parameter (index) and the bytes of the
/// narrowest store into it, the element width its order may be compared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Append {
    pub param: usize,
    pub width: usize,
}

/// The lists the first entry of `ptx` appends to, by parameter; none where the text does not
/// parse or has no entry.
pub fn appends(ptx: &str) -> Vec<Append> {
    let Ok(module) = Module::parse(ptx) else {
        return Vec::new();
    };
    let Some(entry) = module.entries().next() else {
        return Vec::new();
    };
    let Some(lines) = module.body_lines(entry) else {
        return Vec::new();
    };
    let insts: Vec<Inst> = lines.filter_map(Inst::parse).collect();
    let flow = Flow::of(&insts);
    let mut widths: BTreeMap<usize, usize> = BTreeMap::new();
    for inst in insts.iter().filter(|i| i.is_global_store()) {
        let Some(address) = inst.operands.first() else {
            continue;
        };
        let regs = registers(address);
        if !regs.iter().any(|r| flow.from_atomic.contains(*r))
            || regs.iter().any(|r| flow.from_memory.contains(*r))
        {
            continue;
        }
        let width = store_width(inst.op);
        for p in regs.iter().flat_map(|r| flow.params_of(r)) {
            let w = widths.entry(p).or_insert(width);
            *w = (*w).min(width);
        }
    }
    widths
        .into_iter()
        .map(|(param, width)| Append { param, width })
        .collect()
}

/// One instruction: its opcode and its operands as written.
struct Inst<'t> {
    op: &'t str,
    operands: Vec<&'t str>,
}

impl<'t> Inst<'t> {
    fn parse(line: &'t str) -> Option<Inst<'t>> {
        let line = line.split("//").next()?.trim();
        if line.is_empty() || line.ends_with(':') || line.starts_with('.') || !line.ends_with(';') {
            return None;
        }
        let op = opcode(line);
        let rest = line.trim_end_matches(';');
        let after = rest.find(op).map(|at| &rest[at + op.len()..])?;
        let operands = after
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .collect();
        Some(Inst { op, operands })
    }

    fn base(&self) -> &str {
        self.op.split('.').next().unwrap_or(self.op)
    }

    fn is_global_store(&self) -> bool {
        let spaces: Vec<&str> = self.op.split('.').collect();
        spaces[0] == "st"
            && !spaces
                .iter()
                .any(|s| matches!(*s, "shared" | "local" | "param" | "const"))
    }

    /// An atomic whose result is the value before an add: an index it hands out.
    fn hands_out_indices(&self) -> bool {
        let parts: Vec<&str> = self.op.split('.').collect();
        parts[0] == "atom" && parts.iter().any(|p| matches!(*p, "add" | "inc"))
    }

    /// The registers it defines; none for stores, branches and the like.
    fn defines(&self) -> Vec<&'t str> {
        match self.base() {
            "st" | "red" | "bra" | "ret" | "exit" | "bar" | "barrier" | "membar" | "fence"
            | "call" | "prefetch" | "trap" => Vec::new(),
            _ => self
                .operands
                .first()
                .map(|d| registers(d))
                .unwrap_or_default(),
        }
    }

    /// The parameter an `ld.param` reads (`[name_param_6]`, `[name_param_6+8]`).
    fn param_read(&self) -> Option<usize> {
        if !self.op.starts_with("ld.param") {
            return None;
        }
        let address = self.operands.get(1)?;
        let name = address.trim_matches(|c| c == '[' || c == ']');
        let name = name.split('+').next()?;
        name.rsplit_once("_param_")?.1.parse().ok()
    }
}

/// Which registers hold a value derived from an index an atomic handed out, from which
/// parameters, and from memory (a load, another atomic's result).
struct Flow<'t> {
    from_atomic: HashSet<&'t str>,
    from_params: HashMap<&'t str, BTreeSet<usize>>,
    from_memory: HashSet<&'t str>,
}

impl<'t> Flow<'t> {
    fn of(insts: &[Inst<'t>]) -> Flow<'t> {
        let mut flow = Flow {
            from_atomic: HashSet::new(),
            from_params: HashMap::new(),
            from_memory: HashSet::new(),
        };
        // Loops carry values around through registers defined again: to a fixed point.
        let mut changed = true;
        while changed {
            changed = false;
            for inst in insts {
                changed |= flow.step(inst);
            }
        }
        flow
    }

    fn step(&mut self, inst: &Inst<'t>) -> bool {
        let defs = inst.defines();
        if defs.is_empty() {
            return false;
        }
        let (atomic, params, memory): (bool, BTreeSet<usize>, bool) =
            if let Some(p) = inst.param_read() {
                (false, [p].into(), false)
            } else if inst.hands_out_indices() {
                (true, BTreeSet::new(), false)
            } else if matches!(inst.base(), "ld" | "ldu" | "atom" | "call" | "tex" | "suld") {
                (false, BTreeSet::new(), true)
            } else {
                let uses: Vec<&str> = inst.operands[1..]
                    .iter()
                    .flat_map(|o| registers(o))
                    .collect();
                (
                    uses.iter().any(|r| self.from_atomic.contains(r)),
                    uses.iter().flat_map(|r| self.params_of(r)).collect(),
                    uses.iter().any(|r| self.from_memory.contains(r)),
                )
            };
        let mut changed = false;
        for d in defs {
            if atomic {
                changed |= self.from_atomic.insert(d);
            }
            if memory {
                changed |= self.from_memory.insert(d);
            }
            let set = self.from_params.entry(d).or_default();
            let before = set.len();
            set.extend(params.iter().copied());
            changed |= set.len() != before;
        }
        changed
    }

    fn params_of(&self, reg: &str) -> Vec<usize> {
        self.from_params
            .get(reg)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// The virtual registers an operand names (`%rd26` in `[%rd26+4]`; not `%tid.x`).
fn registers(operand: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = operand.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        let name = &operand[start..i];
        let special = i < bytes.len() && bytes[i] == b'.';
        if name.len() > 1 && name.as_bytes()[name.len() - 1].is_ascii_digit() && !special {
            out.push(name);
        }
    }
    out
}

/// Bytes a store writes: its vector length times its type's (`st.global.v2.b32`: 8).
fn store_width(op: &str) -> usize {
    let parts: Vec<&str> = op.split('.').collect();
    let lanes = parts
        .iter()
        .find_map(|p| p.strip_prefix('v').and_then(|n| n.parse::<usize>().ok()))
        .unwrap_or(1);
    let bits = parts
        .last()
        .and_then(|t| t.get(1..))
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(32);
    lanes * (bits / 8).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &str) -> String {
        format!(
            ".version 8.0\n.target sm_90\n.address_size 64\n\n.visible .entry k(\n\t.param .u32 k_param_0,\n\t.param .u64 k_param_1,\n\t.param .u64 k_param_2,\n\t.param .u64 k_param_3\n)\n{{\n\t.reg .pred %p<4>;\n\t.reg .b32 %r<20>;\n\t.reg .b64 %rd<20>;\n{body}\n\tret;\n}}\n"
        )
    }

    /// bfs_step's append as clang writes it: the next frontier's length bumped by one, the
    /// vertex stored at the index it returned.
    #[test]
    fn a_store_at_an_index_an_atomic_add_returned_appends_to_its_parameter() {
        let ptx = entry(
            "\tld.param.b64 \t%rd1, [k_param_2];\n\tcvta.to.global.u64 \t%rd5, %rd1;\n\
             \tld.param.b64 \t%rd2, [k_param_3];\n\tcvta.to.global.u64 \t%rd6, %rd2;\n\
             \tatom.global.add.u32 \t%r19, [%rd6], 1;\n\tmul.wide.s32 \t%rd25, %r19, 4;\n\
             \tadd.s64 \t%rd26, %rd5, %rd25;\n\t@%p1 st.global.b32 \t[%rd26], %r5;",
        );
        assert_eq!(appends(&ptx), [Append { param: 2, width: 4 }]);
    }

    #[test]
    fn a_record_stored_in_pieces_is_compared_in_its_narrowest_piece() {
        let ptx = entry(
            "\tld.param.u64 \t%rd1, [k_param_1+0];\n\tld.param.u64 \t%rd2, [k_param_3];\n\
             \tatom.global.inc.u32 \t%r1, [%rd2], 1000;\n\tmul.wide.u32 \t%rd3, %r1, 8;\n\
             \tadd.s64 \t%rd4, %rd1, %rd3;\n\tst.global.v2.b32 \t[%rd4], {%r2, %r3};\n\
             \tst.global.b32 \t[%rd4+8], %r4;",
        );
        assert_eq!(appends(&ptx), [Append { param: 1, width: 4 }]);
    }

    /// Stores the order of threads does not decide: at the thread's own index, at an index a
    /// compare-and-swap or a load gave, into shared memory, or an atomic's result stored as a
    /// value.
    #[test]
    fn other_stores_append_to_nothing() {
        let ptx = entry(
            "\tld.param.b64 \t%rd1, [k_param_1];\n\tld.param.b64 \t%rd2, [k_param_2];\n\
             \tmov.u32 \t%r1, %tid.x;\n\tmul.wide.u32 \t%rd3, %r1, 4;\n\
             \tadd.s64 \t%rd4, %rd1, %rd3;\n\tst.global.b32 \t[%rd4], %r1;\n\
             \tatom.global.cas.b32 \t%r2, [%rd2], -1, 1;\n\tmul.wide.s32 \t%rd5, %r2, 4;\n\
             \tadd.s64 \t%rd6, %rd1, %rd5;\n\tst.global.b32 \t[%rd6], %r1;\n\
             \tatom.global.add.u32 \t%r3, [%rd2], 1;\n\tld.global.b32 \t%r4, [%rd4];\n\
             \tmul.wide.s32 \t%rd7, %r4, 4;\n\tadd.s64 \t%rd8, %rd1, %rd7;\n\
             \tst.global.b32 \t[%rd8], %r3;\n\tmul.wide.s32 \t%rd9, %r3, 4;\n\
             \tst.shared.b32 \t[%rd9], %r1;",
        );
        assert_eq!(appends(&ptx), []);
    }

    /// A counting sort's scatter: the bucket's start, loaded, plus the index an atomic add
    /// on the bucket's count returned. Its order across buckets is fixed; not an append.
    #[test]
    fn a_store_whose_address_also_holds_a_loaded_value_is_no_append() {
        let ptx = entry(
            "\tld.param.b64 \t%rd1, [k_param_1];\n\tld.param.b64 \t%rd2, [k_param_2];\n\
             \tld.param.b64 \t%rd3, [k_param_3];\n\tld.global.b32 \t%r1, [%rd2];\n\
             \tatom.global.add.u32 \t%r2, [%rd3], 1;\n\tadd.s32 \t%r3, %r1, %r2;\n\
             \tmul.wide.s32 \t%rd4, %r3, 4;\n\tadd.s64 \t%rd5, %rd1, %rd4;\n\
             \tst.global.b32 \t[%rd5], %r1;",
        );
        assert_eq!(appends(&ptx), []);
    }

    /// An index handed out in a loop, carried through a register defined again at its end.
    #[test]
    fn the_flow_follows_registers_around_a_loop() {
        let ptx = entry(
            "\tld.param.b64 \t%rd1, [k_param_3];\n\tld.param.b64 \t%rd2, [k_param_2];\n\
             \tmov.b64 \t%rd10, 0;\n$L__BB0_1:\n\tadd.s64 \t%rd11, %rd1, %rd10;\n\
             \tst.global.b64 \t[%rd11], %rd12;\n\tatom.global.add.u64 \t%rd13, [%rd2], 1;\n\
             \tshl.b64 \t%rd10, %rd13, 3;\n\t@%p1 bra \t$L__BB0_1;",
        );
        assert_eq!(appends(&ptx), [Append { param: 3, width: 8 }]);
    }

    #[test]
    fn registers_are_named_without_special_ones() {
        assert_eq!(registers("[%rd26+4]"), ["%rd26"]);
        assert_eq!(registers("%tid.x"), Vec::<&str>::new());
        assert_eq!(registers("{%r2, %r3}"), ["%r2", "%r3"]);
        assert_eq!(store_width("st.global.v4.f32"), 16);
        assert_eq!(store_width("st.global.u8"), 1);
    }
}
